"""Gradients through every standard value of every family (in the first and the last block of each stack).

``.grad`` inside ``with logits.sum().backward():``
equals the gradient of the same tensor read at its native location in plain nnsight, in the value's layout;
a value the model computes nothing from says so (`Unavailable`) where plain nnsight would wait in vain.

The native read walks the value's own location (``model.model.visual.blocks.0.output``) through nnsight's
envoys (``.output``, ``.inputs``, ``.source``), takes the selected part, and maps its gradient to the
standard layout with the value's view (a reshape, a transpose or a leading 1: the layout, not the number).
A value served at one occurrence of a site that fires several times is read at that occurrence
(`envoys.core.pinning.pinned`, what ``tracer.iter[k]`` does); a pattern assembled from a packed tower's kernel calls
is each call's read at its own, its gradients on the diagonal. Every trace ends with ``tracer.stop()`` after the
backward, as Llama 4's must.
"""

from __future__ import annotations

import nnsight
import pytest
import torch
from nnsight import Envoy
from nnsight.intervention.interleaver import OutOfOrderError
from standard_reads import every_value

from envoys import StandardizedTransformer
from envoys.blocks.tanh_gated import ProductTerm
from envoys.core.passes import pinned
from envoys.core.pinning import PinnedEProperty
from envoys.core.values import Unavailable
from envoys.testing import NAMES, chat_prompt, noise_image
from envoys.towers.per_image import BlockDiagonal, block_diagonal
from instrument import installed

IMAGES = [noise_image(32, 32, seed=0)]


@pytest.fixture(scope="module", params=NAMES)
def model(request, tiny_checkpoint):
    return StandardizedTransformer(
        tiny_checkpoint(request.param), task="image-text-to-text", device="cpu", attn_implementation="eager"
    )


def native(model, location: str):
    """The value nnsight serves at ``location``, through plain nnsight envoys (``.inputs`` for an ``input``)."""
    *path, key = location.split(".")
    envoy, owner = model, None
    for segment in path[1:]:
        if owner is not None:  # the site's label on the module whose .source this is, as nnsight numbers it
            segment, owner = nnsight_label(owner, segment), None
        elif segment == "source" and isinstance(envoy, Envoy):  # a module's, not a call's
            owner = envoy
        envoy = envoy[int(segment)] if segment.isdigit() else getattr(envoy, segment)
    return envoy.inputs if key == "input" else getattr(envoy, key)


def nnsight_label(envoy, label: str) -> str:
    """nnsight's own label for the call the module's rewrite serves as ``label``: the same, but where a rule's
    release variant serves a call under another label (the kernel call before transformers 5.1)."""
    for instrumented in installed(envoy._module).values():
        for site in instrumented.rewritten.sites:
            if site.served_as == label:
                return site.label
    return label


def native_gradient(model, prompt, envoy, prop):
    """The gradient of the value's tensor read natively, or "none" where it has no gradient to have."""
    if isinstance(prop, BlockDiagonal):
        return native_block_gradient(model, prompt, envoy, prop)
    location, select = prop._location(envoy), prop.selector(envoy)
    with model.trace(prompt, images=IMAGES) as tracer:
        if isinstance(prop, PinnedEProperty):
            with prop._pinned(envoy, location):
                raw = native(model, location)
        else:
            raw = native(model, location)
        part = select.get(raw) if select is not None else raw
        if not (isinstance(part, torch.Tensor) and part.requires_grad):
            gradient = nnsight.save("none")
            tracer.stop()
        logits = model.logits
        with logits.sum().backward():
            gradient = part.grad.save()
        tracer.stop()
    return gradient


def native_block_gradient(model, prompt, envoy, prop):
    """A pattern assembled from an attention's kernel calls: each call's tensor read natively at its own occurrence
    (as many calls as the attention's cu_seqlens bound, one without them), its gradient on the diagonal."""
    location, select = prop._location(envoy), prop.selector(envoy)
    with model.trace(prompt, images=IMAGES) as tracer:
        bounds = envoy.inputs[1].get("cu_seqlens")
        calls = 1 if bounds is None else len(bounds) - 1
        parts = []
        for call in range(calls):
            with pinned(location, call, calls):
                raw = native(model, location)
            parts.append(select.get(raw) if select is not None else raw)
        with model.logits.sum().backward():
            gradients = nnsight.save([part.grad for part in reversed(parts)][::-1])  # the last call's first
        tracer.stop()
    return block_diagonal(gradients, 0.0)


def in_the_value_s_layout(envoy, prop, native):
    """The native tensor's gradient in the value's layout. Where a gated DeltaNet's block repeats each query and key
    head to its value heads before the kernel (transformers before 5.23), the value is one copy per key head and the
    model goes on with it repeated, so its gradient is the sum over the copies of the native one."""
    heads = getattr(envoy._module, "num_k_heads", None)
    if prop.name in ("linear_attention_queries", "linear_attention_keys") and native.shape[2] != heads:
        return native.unflatten(2, (heads, native.shape[2] // heads)).sum(3)
    return prop._preprocess(envoy, native) if prop._preprocess is not None else native


def standard_gradient(model, prompt, envoy, name):
    with model.trace(prompt, images=IMAGES) as tracer:
        value = getattr(envoy, name)
        logits = model.logits
        with logits.sum().backward():
            gradient = value.grad.save()
        tracer.stop()
    return gradient


def test_every_value_has_the_gradient_of_its_native_tensor(model):
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    compared, failures = 0, []
    for envoy, name, prop in every_value(model, prompt, IMAGES):
        label = f"{envoy.path}.{name}"
        reason = getattr(envoy, "gradient_reason", lambda _: None)(name)
        if isinstance(prop, ProductTerm):  # a product the forward never binds: its own reason
            with pytest.raises(Unavailable, match="has no gradient: it is computed for you"):
                standard_gradient(model, prompt, envoy, name)
            continue
        if reason is not None:
            # The model computes nothing from it: plain nnsight waits for a gradient that never comes...
            with pytest.raises(OutOfOrderError):
                native_gradient(model, prompt, envoy, prop)
            # ...and the standard value says why.
            with pytest.raises(Unavailable, match="has no gradient"):
                standard_gradient(model, prompt, envoy, name)
            continue
        expected = native_gradient(model, prompt, envoy, prop)
        if isinstance(expected, str):  # token ids, masks: nothing to differentiate
            continue
        expected = in_the_value_s_layout(envoy, prop, expected)
        got = standard_gradient(model, prompt, envoy, name)
        compared += 1
        if not torch.equal(got, expected):
            failures.append(label)
    assert compared > 20 and not failures, failures


def test_a_value_the_model_does_not_use_says_why(tiny_checkpoint):
    """llava-siglip is llava-interleave's layout: the projector reads the last block's output before the final
    norm, so tower_output (after it) feeds nothing."""
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", device="cpu",
                                    attn_implementation="eager")
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    with pytest.raises(Unavailable) as raised:
        standard_gradient(model, prompt, model.vision, "tower_output")
    message = str(raised.value)
    assert "vision.tower_output has no gradient" in message and "hidden_states[2]" in message
    assert "read vision.layers[1].layer_output" in message


def test_a_view_is_a_plain_tensor_outside_the_backward(tiny_checkpoint):
    """The served view behaves as a tensor: arithmetic gives plain tensors, its edits reach the model."""
    model = StandardizedTransformer(tiny_checkpoint("qwen3_vl"), task="image-text-to-text", device="cpu",
                                    attn_implementation="eager")
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    with model.trace(prompt, images=IMAGES) as tracer:
        stream = model.vision.layers[0].layer_output.save()
        doubled = nnsight.save(stream * 2)
        tracer.stop()
    assert type(doubled) is torch.Tensor and torch.equal(doubled, stream * 2)
    with model.trace(prompt, images=IMAGES) as tracer:
        clean = model.logits.save()
        tracer.stop()
    with model.trace(prompt, images=IMAGES) as tracer:
        model.vision.layers[0].layer_output[:] = 0
        edited = model.logits.save()
        tracer.stop()
    with model.trace(prompt, images=IMAGES) as tracer:
        model.model.visual.blocks[0].output[:] = 0
        native_edit = model.logits.save()
        tracer.stop()
    assert not torch.equal(edited, clean) and torch.equal(edited, native_edit)


def test_writing_a_views_gradient_is_what_flows_on(tiny_checkpoint):
    """On LLaVA every gradient reaching the tower flows through image_features: zero its gradient (a view,
    written in its own layout) and the patch embedding's (another view) is zero; untouched, it is not."""
    model = StandardizedTransformer(tiny_checkpoint("llava-siglip"), task="image-text-to-text", device="cpu",
                                    attn_implementation="eager")
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    gradients = []
    for zero in (False, True):
        with model.trace(prompt, images=IMAGES):
            patches = model.vision.patch_embeddings
            features = model.vision.image_features
            logits = model.logits
            with logits.sum().backward():
                if zero:
                    features.grad = torch.zeros_like(features.grad)
                gradients.append(patches.grad.save())
    untouched, cut = gradients
    assert untouched.abs().sum() > 0 and torch.equal(cut, torch.zeros_like(untouched))
