"""``python -m envoys.demo``: the vision-language walkthrough on a tiny random LLaVA, built here.

Builds a llava-interleave-like checkpoint (SigLIP tower, Qwen2 text model)
with random weights and its processor in a temporary directory, loads it the
way a user loads a hub id, and walks through the values: the image-token
mask, shapes, the scatter equality, an ablation, image rows against text
rows, what the projector receives, two images in one invoke, generation.
The weights are random, so the tokens it predicts mean nothing; the shapes
and equalities are what it shows.

``python -m envoys.demo --plot out.png`` also runs the recipes
(`envoys.image.recipes`) on a drawn scene and writes their pictures: ``out.png``, the
last token's attention to the image at every text block, side by side over the
image; ``out-lens.png``, the logit lens at the image tokens; ``out-patching.png``,
the image rows patched from the scene into the same scene with the ball
recoloured, block by block; ``out-knockout.png``, the next-token probabilities
with the text's attention to the image knocked out at every block; and, on a
tiny random Qwen2.5-VL (a packed tower that calls its attention kernel once
per window on its windowed blocks and once per image on the others),
``out-tower.png``, the tower's attention from a patch on the ball at each tower
block, and ``out-qwen.png``, the last token's attention to the image tokens
at each text block (needs the ``plot`` extra, matplotlib).
"""

from __future__ import annotations

import argparse
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nnsight
import torch
from PIL import Image, ImageDraw

from .image import plots, recipes
from .model import StandardizedTransformer
from .testing import build_checkpoint, chat_prompt, noise_image


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
    support = model.support()
    takes_no = [medium for medium in ("video", "audio") if support.pop(medium, None) is not None]
    unavailable = {name: reason for name, reason in support.items() if reason is not None}
    say("support(): every value available" if not unavailable else f"support(): unavailable {unavailable}",
        f"(this model takes no {' or '.join(takes_no)})" if takes_no else "")
    return facts


def scene(ball: str = "red", width: int = 96, height: int = 64) -> Image.Image:
    """A drawn scene, ``width`` x ``height``: a sky fading to grass, and a ball of colour ``ball`` on the left."""
    image = Image.new("RGB", (width, height))
    draw = ImageDraw.Draw(image)
    for y in range(height):
        shade = y / (height - 1)
        draw.line([(0, y), (width, y)], fill=(int(90 + 60 * shade), int(160 + 40 * shade), int(230 * (1 - shade))))
    draw.ellipse([width // 8, height // 3, width // 8 + height // 2, height // 3 + height // 2], fill=ball)
    return image


def pictures(model: StandardizedTransformer, path: str | Path, say: Callable[..., None] = print) -> list[Path]:
    """Run the recipes on the scene and write their pictures beside ``path`` (see the module docstring); their paths."""
    path = Path(path)
    image, recoloured = scene("red"), scene("blue")
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    every = list(range(model.num_layers))
    attention = [recipes.attention_to_image(model, prompt, [image], layer=layer) for layer in every]
    written = [plots.side_by_side([a.grid for a in attention], image, path,
                                  titles=[f"last token -> image, layers[{a.layer}]" for a in attention],
                                  scale="attention, summed over heads")]
    written.append(recipes.logit_lens(model, prompt, [image]).draw(sibling(path, "lens")))
    knockout = recipes.knock_out_image_attention(model, prompt, [image], layers=every)
    good, bad = (int(i) for i in knockout.clean.topk(2).indices)
    patching = recipes.patch_image_rows(model, prompt, [image], [recoloured], target=(good, bad))
    written.append(patching.draw(sibling(path, "patching")))
    written.append(knockout.draw(sibling(path, "knockout")))
    say("the last token's attention to the image, summed over heads, per block:",
        [round(float(a.grid.sum()), 4) for a in attention])
    say("patching the red ball's image rows into the blue ball's run, logit difference per site:",
        dict(zip(patching.sites, [round(float(v), 4) for v in patching.patched])))
    say("wrote", ", ".join(str(p) for p in written))
    return written


def qwen_pictures(model: StandardizedTransformer, path: str | Path, say: Callable[..., None] = print) -> list[Path]:
    """On a Qwen ViT model: the tower's attention from a patch on the scene's ball at each tower block, and the last
    token's attention to the image tokens at each text block, beside ``path`` (``-tower``, ``-qwen``); their paths."""
    path, image = Path(path), scene("red")
    prompt = chat_prompt(model.processor, 1, "What is in the picture?")
    ball = (image.height * 7 // 12 // model.vision.patch_size, image.width // 4 // model.vision.patch_size)
    tower = [recipes.tower_attention(model, prompt, [image], layer=layer, patch=ball)
             for layer in range(model.vision.num_layers)]
    written = [plots.side_by_side([a.grid for a in tower], image, sibling(path, "tower"),
                                  titles=[f"patch {ball} -> image, vision.layers[{a.layer}]" for a in tower],
                                  scale="attention, summed over heads")]
    text = [recipes.attention_to_image(model, prompt, [image], layer=layer) for layer in range(model.num_layers)]
    written.append(plots.side_by_side([a.grid for a in text], image, sibling(path, "qwen"),
                                      titles=[f"last token -> image, layers[{a.layer}]" for a in text],
                                      scale="attention, summed over heads"))
    say("wrote", ", ".join(str(p) for p in written))
    return written


def sibling(path: Path, name: str) -> Path:
    """``out.png`` -> ``out-{name}.png``, in the same folder."""
    return path.with_name(f"{path.stem}-{name}{path.suffix or '.png'}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m envoys.demo", description=__doc__.split("\n\n")[0])
    parser.add_argument("--plot", metavar="OUT.png", type=Path,
                        help="also run the recipes and write their pictures: OUT.png (attention), OUT-lens.png, "
                             "OUT-patching.png, OUT-knockout.png, and on a tiny Qwen2.5-VL OUT-tower.png and "
                             "OUT-qwen.png (needs matplotlib: the 'plot' extra)")
    arguments = parser.parse_args(argv)
    if arguments.plot is not None:
        plots.matplotlib_figure()  # the missing extra is said before anything is built
    with tempfile.TemporaryDirectory() as folder:
        path = build_checkpoint("llava-siglip", folder)
        model = StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")
        walkthrough(model)
        if arguments.plot is not None:
            pictures(model, arguments.plot)
            qwen = StandardizedTransformer(build_checkpoint("qwen2_5_vl", f"{folder}/qwen"), task="image-text-to-text",
                                           device="cpu", attn_implementation="eager")
            qwen_pictures(qwen, arguments.plot)


if __name__ == "__main__":
    main()
