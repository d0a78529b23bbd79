"""What the rewritten sites cost: ratios against the plain model and against nnsight's ``.source``.

``python benchmarks/overhead.py [--repeats N]`` builds the tiny LLaVA (SigLIP
tower) locally and times, in one run, the median of N calls of:

- the plain transformers forward (no nnsight);
- the rewritten model's forward outside a trace (the sites call straight through);
- a trace through StandardizedTransformer reading the vision values (the
  mask, every tower block's attention probabilities and output,
  ``image_features``) and the logits;
- the same reads in a plain nnsight trace, through nnsight's ``.source`` on the
  scatter host and on every tower attention (which instruments every call and
  assignment of those forwards).

It prints each time and the ratios. A benchmark, not a test: numbers vary
with the machine; the ratios are what to compare.
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from typing import Callable

import torch
from nnsight import TransformersModel
from transformers import AutoModelForImageTextToText, AutoProcessor

from envoys import StandardizedTransformer
from envoys.tiny import build_checkpoint, chat_prompt, noise_image


def median_seconds(runs: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """The median time of each run, taken round-robin so that drift in the machine's load hits all alike."""
    for run in runs.values():
        run()  # warm up
    times: dict[str, list[float]] = {name: [] for name in runs}
    for _ in range(repeats):
        for name, run in runs.items():
            start = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as folder:
        path = build_checkpoint("llava-siglip", folder)
        processor = AutoProcessor.from_pretrained(path)
        image = [noise_image(32, 32, seed=0)]
        prompt = chat_prompt(processor, 1, "What is this?")
        inputs = processor(text=[prompt], images=image, return_tensors="pt")

        plain = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
        model = StandardizedTransformer(path, task="image-text-to-text", attn_implementation="eager")
        native = TransformersModel(path, task="image-text-to-text", processor=processor, dispatch=True,
                                   attn_implementation="eager")
        blocks = range(model.vision.num_layers)
        # nnsight instruments a forward when its .source is first opened; opened inside the
        # first trace, the host's forward is already running without it, so open them here.
        native.model.source
        for i in blocks:
            native.model.vision_tower.encoder.layers[i].self_attn.source

        def plain_forward() -> None:
            with torch.no_grad():
                plain(**inputs)

        def rewritten_forward() -> None:
            with torch.no_grad():
                model._module(**inputs)

        def standard_trace() -> None:
            with model.trace(prompt, images=image):
                model.vision.image_token_mask.save()
                for i in blocks:
                    model.vision.layers[i].self_attn.attention_probabilities.save()
                    model.vision.layers[i].layer_output.save()
                model.vision.image_features.save()
                model.logits.save()

        def source_trace() -> None:
            tower = native.model.vision_tower.encoder.layers
            with native.trace(prompt, images=image):
                native.input.save()
                for i in blocks:
                    kernel = tower[i].self_attn.source.attention_interface_1
                    kernel.source.nn_functional_softmax_0.output.save()
                    tower[i].output.save()
                native.model.source.inputs_embeds_masked_scatter_0.inputs.save()
                native.output.logits.save()

        results = median_seconds(
            {
                "plain forward": plain_forward,
                "rewritten forward, no trace": rewritten_forward,
                "trace, standard names": standard_trace,
                "trace, nnsight .source": source_trace,
            },
            args.repeats,
        )
    base = results["plain forward"]
    for name, seconds in results.items():
        print(f"{name:<30} {seconds * 1e3:8.2f} ms   x{seconds / base:5.2f} the plain forward")
    ratio = results["trace, standard names"] / results["trace, nnsight .source"]
    print(f"standard names / nnsight .source: {ratio:.2f}")


if __name__ == "__main__":
    main()
