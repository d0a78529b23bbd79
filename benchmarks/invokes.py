"""Two image-carrying invokes in one trace against two traces, on the medium checkpoints: time per prompt.

``python benchmarks/invokes.py [--rounds N]`` builds the medium LLaVA and
Qwen3-VL checkpoints (`medium`), then times, round-robin over ``--rounds``
rounds after warm-up and under ``torch.no_grad()``, two prompts (each with its
own image, of two sizes) read by standard name (``image_features`` and the
logits):

- as two invokes of one trace (`envoys.invokes`: one batch, each invoke its own part);
- as two traces, one after the other;
- as two plain transformers forwards, for scale.

It prints a Markdown table (time per prompt, and each variant's ratio to two
traces, paired per round) and writes it into ``benchmarks/RESULTS.md`` between
its markers. A benchmark, not a test: times vary with the machine and its load.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import torch  # noqa: E402
from medium import build_medium  # noqa: E402
from overhead import ms, paired, round_robin, write_section  # noqa: E402
from transformers import AutoModelForImageTextToText, AutoProcessor  # noqa: E402

from envoys import StandardizedTransformer  # noqa: E402
from envoys.testing import chat_prompt, noise_image  # noqa: E402

RESULTS = HERE / "RESULTS.md"
BEGIN, END = "<!-- invokes: benchmarks/invokes.py -->", "<!-- /invokes -->"


def measure(family: str, folder: Path, rounds: int) -> dict[str, list[float]]:
    path = build_medium(family, folder / family)
    processor = AutoProcessor.from_pretrained(path)
    model = StandardizedTransformer(path, task="image-text-to-text", processor=processor, attn_implementation="eager")
    plain = AutoModelForImageTextToText.from_pretrained(path, attn_implementation="eager").eval()
    prompts = [(chat_prompt(processor, 1, question), [noise_image(*size, seed=seed)])
               for seed, (question, size) in enumerate([("What is in this picture?", (224, 224)),
                                                         ("Describe the image.", (336, 224))])]
    inputs = [processor(text=[text], images=images, return_tensors="pt") for text, images in prompts]

    def one_trace() -> None:
        with torch.no_grad(), model.trace() as tracer:
            for text, images in prompts:
                with tracer.invoke(text, images=images):
                    model.vision.image_features.save()
                    model.logits.save()

    def two_traces() -> None:
        for text, images in prompts:
            with torch.no_grad(), model.trace(text, images=images):
                model.vision.image_features.save()
                model.logits.save()

    def plain_forwards() -> None:
        with torch.no_grad():
            for each in inputs:
                plain(**each)

    return round_robin({"two invokes, one trace": one_trace, "two traces": two_traces,
                        "two plain forwards": plain_forwards}, rounds)


def table(results: dict[str, dict[str, list[float]]], rounds: int) -> str:
    lines = [
        BEGIN,
        f"Two prompts, each with its own image (224x224 and 336x224), `image_features` and the logits read by standard "
        f"name; {rounds} rounds round-robin after warm-up, `torch.no_grad()`, CPU (`torch.get_num_threads()` = "
        f"{torch.get_num_threads()}); time per prompt in ms.\n",
        "| checkpoint | variant | per prompt, median | per prompt, min | × two traces (paired) |",
        "|---|---|---:|---:|---:|",
    ]
    for family, times in results.items():
        for name, values in times.items():
            lines.append(f"| {family} | {name} | {ms(statistics.median(values) / 2)} | {ms(min(values) / 2)} "
                         f"| {paired(times, name, 'two traces'):.3f} |")
    lines.append(END)
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per variant, after 2 warm-up rounds")
    parser.add_argument("--threads", type=int, default=1, help="torch threads (1: least disturbed by other load)")
    arguments = parser.parse_args()
    torch.set_num_threads(arguments.threads)
    with tempfile.TemporaryDirectory() as folder:
        results = {family: measure(family, Path(folder), arguments.rounds) for family in ("llava", "qwen3_vl")}
    text = table(results, arguments.rounds)
    print(text)
    write_section(RESULTS, BEGIN, END, text)


if __name__ == "__main__":
    main()
