"""Resident memory over many traces: does reading every vision value leak?

``python benchmarks/memory.py [--name llava-siglip] [--traces 100]`` builds the
tiny checkpoint locally and runs that many traces in a row, each reading every
vision value the checkpoint has (the mask, ``patch_embeddings``, every tower
block's stream and attention interior, ``tower_output``, ``image_features``) and
the logits, saving them and dropping them. It prints the resident set size
(``ru_maxrss`` is a high-water mark, so the current RSS from /proc) every 10
traces, and the growth after the first 10 (the warm-up). A benchmark, not a
test: numbers vary with the machine; a flat curve after warm-up is what to see.
"""

from __future__ import annotations

import argparse
import gc
import os
import tempfile

import nnsight

from envoys import StandardizedTransformer
from envoys.core.values import standard_values
from envoys.testing import build_checkpoint, chat_prompt, noise_image


def resident_mib() -> float:
    """This process's current resident set size in MiB (Linux /proc; 0 elsewhere)."""
    try:
        with open(f"/proc/{os.getpid()}/statm") as statm:
            return int(statm.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except OSError:
        return 0.0


def vision_reads(model) -> list[tuple[object, str]]:
    """(envoy, name) of every available vision value, in the forward's order."""
    vision = model.vision
    reads = [(vision, "image_token_mask"), (vision, "patch_embeddings")]
    for block in vision.layers:
        interior = ["attention_queries", "attention_keys", "attention_values", "attention_scores",
                    "attention_probabilities", "attention_head_outputs"]
        reads += [(block, "layer_input")]
        reads += [(block.self_attn, name) for name in interior]
        reads += [(block, name) for name in ("attention_output", "mlp_output", "layer_output")]
    reads += [(vision, "tower_output"), (vision, "image_features")]
    return [(envoy, name) for envoy, name in reads
            if name in standard_values(type(envoy)) and standard_values(type(envoy))[name].reason(envoy) is None]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="llava-siglip")
    parser.add_argument("--traces", type=int, default=100)
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as directory:
        path = build_checkpoint(options.name, directory)
        model = StandardizedTransformer(path, task="image-text-to-text", device="cpu", attn_implementation="eager")
        prompt, images = chat_prompt(model.processor, 1, "What is in the picture?"), [noise_image(32, 32)]
        reads = vision_reads(model)
        print(f"{options.name}: {len(reads)} vision values and the logits per trace")
        curve = []
        for trace in range(1, options.traces + 1):
            with model.trace(prompt, images=images):
                values = nnsight.save([getattr(envoy, name) for envoy, name in reads] + [model.logits])
            del values
            if trace % 10 == 0:
                gc.collect()
                curve.append(resident_mib())
                print(f"trace {trace:4d}: {curve[-1]:8.1f} MiB resident")
        print(f"growth after warm-up (trace 10 -> {options.traces}): {curve[-1] - curve[0]:+.1f} MiB")


if __name__ == "__main__":
    main()
