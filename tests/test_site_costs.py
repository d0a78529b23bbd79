"""What an installed site costs in a trace: nothing while no worker can ask for it, nnsight's visit while any can.

A site whose trace has no worker waiting anywhere and no cache runs its call as
it is (`instrument.runtime`): an empty trace visits nnsight's interleaver where
plain nnsight's does, no more. While a worker waits on any location, every
fire is counted, so that a read pinned to an occurrence (``tracer.iter``)
after a wait elsewhere still gets the occurrence it names.
"""

from __future__ import annotations

import pytest
import torch
from nnsight import TransformersModel

from envoys import StandardizedTransformer
from envoys.testing import chat_prompt, noise_image

IMAGES = [noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)]


def counts_of(model) -> dict[str, int]:
    """The model's interleaver's count of visits per location (nnsight keeps it for the life of the tree)."""
    interleaver = model._interleaver if hasattr(model, "_interleaver") else model.interleaver
    return interleaver.counts


def visits(model, run) -> dict[str, int]:
    """The interleaver visits ``run`` makes, per location."""
    before = dict(counts_of(model))
    run()
    return {location: count - before.get(location, 0) for location, count in counts_of(model).items()
            if count != before.get(location, 0)}


@pytest.fixture(params=["llava-siglip", "qwen3_vl"])
def pair(request, tiny_checkpoint):
    """One checkpoint as a `StandardizedTransformer` (sites installed) and as nnsight's stock `TransformersModel`,
    with a prompt of two noise images."""
    path = tiny_checkpoint(request.param)
    ours = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager", dispatch=True)
    stock = TransformersModel(str(path), task="image-text-to-text", attn_implementation="eager", dispatch=True)
    return ours, stock, chat_prompt(ours.processor, len(IMAGES), "What is in the picture?")


def test_an_empty_trace_visits_the_interleaver_where_plain_nnsight_does(pair):
    ours, stock, prompt = pair

    def empty(model):
        def run():
            with torch.no_grad(), model.trace(prompt, images=IMAGES):
                pass
        return run

    standard, plain = visits(ours, empty(ours)), visits(stock, empty(stock))
    assert sum(standard.values()) > 0
    assert standard == plain
    assert not [location for location in standard if ".source." in location]


def test_sites_after_the_last_read_are_not_visited_and_those_before_it_are(pair):
    ours, _, prompt = pair

    def run():
        with torch.no_grad(), ours.trace(prompt, images=IMAGES):
            ours.vision.image_features.save()

    fired = [location for location in visits(ours, run) if ".source." in location]
    assert fired  # the scatter site, served; and the tower's sites before it, counted while the read waited
    first_text_layer = ours.layers[0].path
    assert not [location for location in fired if location.startswith(first_text_layer)]


def test_a_site_first_read_at_a_later_step_gets_that_steps_call(pair):
    """A worker waits on layer 1's output through steps 0 and 1 while layer 1's attention site fires; those fires are
    counted, so its first read of that site, at step 2, is step 2's call: one query row over the prompt and the two
    tokens generated before it, as a worker that asks for nothing else reads it."""
    ours, _, prompt = pair
    options = {"max_new_tokens": 3, "min_new_tokens": 3, "do_sample": False}
    with torch.no_grad(), ours.generate(prompt, images=IMAGES, **options) as tracer:
        for step in tracer.iter[0:3]:
            if step == 2:
                after_a_wait = ours.layers[1].self_attn.attention_probabilities.save()
            ours.layers[1].output.save()
    with torch.no_grad(), ours.generate(prompt, images=IMAGES, **options) as tracer:
        with tracer.iter[2]:
            alone = ours.layers[1].self_attn.attention_probabilities.save()
    prompt_length = ours.processor(text=[prompt], images=IMAGES, return_tensors="pt")["input_ids"].shape[1]
    assert after_a_wait.shape[-2:] == (1, prompt_length + 2)
    assert torch.equal(after_a_wait, alone)


def test_a_cache_keeps_what_plain_nnsights_cache_keeps(pair):
    """A cache observes locations, so with one in the trace every site is handed to nnsight; the values it keeps are
    the stock model's."""
    ours, stock, prompt = pair
    path = ours.layers[0].path
    kept = {}

    def cached(model):
        def run():
            with torch.no_grad(), model.trace(prompt, images=IMAGES) as tracer:
                kept[model] = tracer.cache()
        return run

    fired = [location for location in visits(ours, cached(ours)) if ".source." in location]
    assert [location for location in fired if location.startswith(path)]  # sites after every worker finished
    cached(stock)()

    def output(model):
        value = kept[model][path].output
        return value[0] if isinstance(value, tuple) else value

    assert torch.equal(output(ours), output(stock))
