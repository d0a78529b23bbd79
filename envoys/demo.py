"""``python -m envoys.demo``: the vision-language walkthrough on a tiny random LLaVA, built here.

Builds a llava-interleave-like checkpoint (SigLIP tower, Qwen2 text model)
with random weights and its processor in a temporary directory, loads it the
way a user loads a hub id, and walks through the values: the image-token
mask, shapes, the scatter equality, an ablation, image rows against text
rows, what the projector receives, two images in one invoke, generation.
The weights are random, so the tokens it predicts mean nothing; the shapes
and equalities are what it shows.
"""

from __future__ import annotations

import tempfile
from typing import Any, Callable

import nnsight
import torch

from .model import StandardizedTransformer
from .tiny import build_checkpoint, chat_prompt, noise_image


def walkthrough(model: StandardizedTransformer, say: Callable[..., None] = print) -> dict[str, Any]:
    """Run the walkthrough on ``model``, saying what it shows; returns the facts it checked."""
    facts: dict[str, Any] = {}
    image, other = noise_image(32, 32, seed=0), noise_image(48, 64, seed=1)
    prompt = chat_prompt(model.processor, 1, "Answer in one word: what color is this?")

    say(f"{model!r}\n")
    with model.trace(prompt, images=[image]):
        mask = model.vision.image_token_mask.save()  # first: it comes off the inputs
        pattern = model.vision.layers[0].self_attn.attention_probabilities.save()
        patches = model.vision.layers[0].layer_output.save()
        projected = model.projector.output.save()
        features = model.vision.image_features.save()
        first = model.layers[0].input.save()
        logits = model.logits.save()
    facts["scatter equality"] = torch.equal(first[mask], features)
    say("mask", tuple(mask.shape), "image tokens", int(mask.sum()))
    say("pattern", tuple(pattern.shape), "patches", tuple(patches.shape),
        "projected", tuple(projected.shape), "features", tuple(features.shape))
    say("layers[0].input[image_token_mask] == image_features:", facts["scatter equality"])
    say(f"tower: {model.vision.num_layers} blocks of width {model.vision.vision_hidden_size}; "
        f"text: {model.num_layers} blocks of width {model.hidden_size}\n")

    with model.trace(prompt, images=[image]):
        model.vision.image_features[:] = 0
        ablated = model.logits.save()
    facts["ablation changes the logits"] = not torch.equal(ablated, logits)
    say("before ablation:", model.probs_to_dict(logits[0, -1].softmax(-1), k=2))
    say("image features zeroed:", model.probs_to_dict(ablated[0, -1].softmax(-1), k=2), "\n")

    with model.trace(prompt, images=[image]):
        mask = model.vision.image_token_mask.save()
        out = model.layers[0].layer_output.clone().save()
        model.layers[0].layer_output[mask] = 0  # the image positions only
        after = model.layers[1].input.save()
    facts["one-sided edit keeps the text rows"] = torch.equal(after[~mask], out[~mask])
    say("image rows", tuple(out[mask].shape), "text rows", tuple(out[~mask].shape))
    say("after zeroing the image rows of block 0, the text rows are untouched:",
        facts["one-sided edit keeps the text rows"], "\n")

    with model.trace(prompt, images=[image]):
        last_block = model.vision.layers[-1].layer_output.save()
        tower = model.vision.tower_output.save()
        received = model.projector.input.save()
    facts["projector reads the last block"] = torch.equal(received, last_block)
    facts["projector reads tower_output"] = torch.equal(received, tower)
    say("projector.input == layers[-1].layer_output:", facts["projector reads the last block"],
        "  projector.input == tower_output:", facts["projector reads tower_output"], "\n")

    two = chat_prompt(model.processor, 2, "Compare them.")
    with model.trace(two, images=[image, other]):
        mask = model.vision.image_token_mask.save()
        patches = model.vision.layers[0].layer_output.save()
        features = model.vision.image_features.save()
    facts["two images, rows"] = patches.shape[0]
    say("two images:", int(mask.sum()), "image tokens, patches", tuple(patches.shape),
        "features", tuple(features.shape), "\n")

    steps = 3
    with model.generate(prompt, images=[image], max_new_tokens=steps, min_new_tokens=steps, do_sample=False) as tracer:
        masks = nnsight.save([])
        for step in tracer.iter[:steps]:
            masks.append(model.vision.image_token_mask.save())
            if step == 0:
                step0 = model.vision.image_features.save()
    facts["generation masks"] = [tuple(m.shape) for m in masks]
    say("generate: image_token_mask per step", facts["generation masks"],
        "; image_features at step 0", tuple(step0.shape))
    unavailable = {name: reason for name, reason in model.support().items() if reason is not None}
    say("support(): every value available" if not unavailable else f"support(): unavailable {unavailable}")
    return facts


def main() -> None:
    with tempfile.TemporaryDirectory() as folder:
        path = build_checkpoint("llava-siglip", folder)
        model = StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")
        walkthrough(model)


if __name__ == "__main__":
    main()
