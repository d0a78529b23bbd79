"""What the library costs on a GPU, on random-weight models of real architectures in bf16: one command, one table.

``python benchmarks/gpu.py [--rounds N] [--out FILE]`` builds, on the GPU, two
random-weight checkpoints at the sizes of real ones (their ``config.json``
facts, written here; the tokenizer is the tiny checkpoint's, the image
processor the family's stock one at the real image size), saves each in bf16,
loads it as the plain transformers model, as nnsight's ``TransformersModel``
and as `StandardizedTransformer` (eager attention, which the attention
patterns need), and times round-robin, each run ending in
``torch.cuda.synchronize()``, under ``torch.no_grad()``:

- the plain forward, an empty trace (nnsight's, then `StandardizedTransformer`'s),
  a trace reading the vision values by standard name, and the same reads
  through nnsight's ``.source`` (`overhead.reads`);
- the paired ratios of benchmarks/overhead.py: each variant over the plain
  forward, the standard names over ``.source`` and over the empty trace.

The checkpoints:

- ``llava-interleave-qwen-0.5b``: llava-hf/llava-interleave-qwen-0.5b-hf's
  layout, a SigLIP so400m tower (27 blocks, width 1152, 16 heads, patch 14 on
  384-pixel images: 729 image tokens) on Qwen2-0.5B (24 blocks, width 896,
  14 query heads, 2 key-value heads), 0.91B parameters;
- ``qwen2.5-vl-7b``: Qwen/Qwen2.5-VL-7B-Instruct's layout, a 32-block windowed
  ViT (width 1280, 16 heads, full attention at blocks 7, 15, 23 and 31) on a
  28-block text model (width 3584, 28 query heads, 4 key-value heads); a
  448-pixel image is 1024 patches, 256 tokens; 8.29B parameters, its own
  language-model head.

About 6 minutes on one H100 (the 7B is built, saved and loaded four times).
``--tiny`` runs the same on the tiny checkpoints on CPU in float32 (what the
test suite runs, tests/test_benchmarks.py). A benchmark, not a test: the
ratios are what to compare, and the card is named in the table.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE.parent), str(HERE)]

import torch  # noqa: E402
from nnsight import TransformersModel  # noqa: E402
from overhead import ms, paired, reads, round_robin  # noqa: E402
from transformers import (  # noqa: E402
    AutoModelForImageTextToText,
    AutoProcessor,
    LlavaForConditionalGeneration,
    LlavaProcessor,
    Qwen2_5_VLForConditionalGeneration,
    Qwen2_5_VLProcessor,
    Qwen2VLImageProcessor,
    SiglipImageProcessor,
)

from envoys import StandardizedTransformer  # noqa: E402
from envoys.testing import build, chat_prompt, noise_image, tiny_checkpoint  # noqa: E402

#: The image side on the tiny checkpoints (their processors' sizes).
TINY_IMAGE = 32
#: The GPU table's section in RESULTS.md.
BEGIN, END = "<!-- gpu: benchmarks/gpu.py -->", "<!-- /gpu -->"


@dataclass(frozen=True)
class Checkpoint:
    """One benchmarked architecture: its name, how `overhead.reads` reads it, the image size, and its builder (the
    model and processor at the real sizes, in memory) or, with ``--tiny``, the tiny checkpoint's name."""

    name: str
    reads_as: str  #: "llava" or a Qwen ViT family (`overhead.reads`)
    image: int
    build: Callable[[], tuple[torch.nn.Module, object]]
    tiny: str


def llava_interleave() -> tuple[torch.nn.Module, object]:
    """llava-interleave-qwen-0.5b's layout at its real sizes."""
    tiny, processor = build("llava-siglip")
    config = tiny.config
    vision = config.vision_config
    vision.hidden_size, vision.intermediate_size = 1152, 4304
    vision.num_hidden_layers, vision.num_attention_heads = 27, 16
    vision.image_size, vision.patch_size = 384, 14
    text = config.text_config
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = 896, 4864, 24
    text.num_attention_heads, text.num_key_value_heads, text.vocab_size = 14, 2, 151646
    text.layer_types = [text.layer_types[0]] * 24 if getattr(text, "layer_types", None) else None
    config.image_seq_length = (384 // 14) ** 2
    medium = LlavaProcessor(
        image_processor=SiglipImageProcessor(size={"height": 384, "width": 384}, image_mean=[0.5] * 3,
                                             image_std=[0.5] * 3),
        tokenizer=processor.tokenizer, patch_size=14, vision_feature_select_strategy="full",
        num_additional_image_tokens=0, chat_template=processor.chat_template,
    )
    return LlavaForConditionalGeneration(config), medium


def qwen2_5_vl_7b() -> tuple[torch.nn.Module, object]:
    """Qwen2.5-VL-7B-Instruct's layout at its real sizes."""
    tiny, processor = build("qwen2_5_vl")
    config = tiny.config
    vision = config.vision_config
    vision.depth, vision.hidden_size, vision.num_heads, vision.intermediate_size = 32, 1280, 16, 3420
    vision.patch_size, vision.spatial_merge_size, vision.temporal_patch_size = 14, 2, 2
    vision.window_size, vision.fullatt_block_indexes, vision.out_hidden_size = 112, [7, 15, 23, 31], 3584
    text = config.text_config
    text.hidden_size, text.intermediate_size, text.num_hidden_layers = 3584, 18944, 28
    text.num_attention_heads, text.num_key_value_heads, text.vocab_size = 28, 4, 152064
    text.layer_types = [text.layer_types[0]] * 28 if getattr(text, "layer_types", None) else None
    text.rope_parameters = {**text.rope_parameters, "mrope_section": [16, 24, 24], "rope_theta": 1000000.0}
    config.tie_word_embeddings = text.tie_word_embeddings = False  # its own head: 8.29B parameters in all
    factor = 28
    medium = Qwen2_5_VLProcessor(
        image_processor=Qwen2VLImageProcessor(patch_size=14, merge_size=2, temporal_patch_size=2,
                                              min_pixels=4 * factor**2, max_pixels=16384 * factor**2),
        tokenizer=processor.tokenizer, video_processor=processor.video_processor,
        chat_template=processor.chat_template,
    )
    return Qwen2_5_VLForConditionalGeneration(config), medium


CHECKPOINTS = (
    Checkpoint("llava-interleave-qwen-0.5b", "llava", 384, llava_interleave, "llava-siglip"),
    Checkpoint("qwen2.5-vl-7b", "qwen2_5_vl", 448, qwen2_5_vl_7b, "qwen2_5_vl"),
)


def saved(checkpoint: Checkpoint, folder: Path, device: str, dtype: torch.dtype) -> Path:
    """The checkpoint's random weights, drawn on ``device`` in ``dtype`` and saved with its processor."""
    previous = torch.get_default_dtype()
    torch.manual_seed(0)
    try:
        torch.set_default_dtype(dtype)
        with torch.device(device):
            model, processor = checkpoint.build()
    finally:
        torch.set_default_dtype(previous)
    path = folder / checkpoint.name
    model.eval().save_pretrained(path)
    processor.save_pretrained(path)
    config_file = path / "config.json"
    config = json.loads(config_file.read_text())
    config["attn_implementation"] = "eager"
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    del model
    return path


def synchronised(run: Callable[[], None], device: str) -> Callable[[], None]:
    """``run``, ending when the device has finished its work (a GPU's kernels run asynchronously)."""
    if not device.startswith("cuda"):
        return run

    def timed() -> None:
        run()
        torch.cuda.synchronize()

    return timed


def measure(checkpoint: Checkpoint, path: Path, rounds: int, device: str, dtype: torch.dtype,
            side: int) -> dict[str, list[float]]:
    """Each variant's times over ``rounds`` paired rounds on the checkpoint at ``path``, on a ``side``-pixel image."""
    processor = AutoProcessor.from_pretrained(path)
    images = [noise_image(side, side, seed=0)]
    prompt = chat_prompt(processor, 1, "What is in this picture?")
    inputs = processor(text=[prompt], images=images, return_tensors="pt").to(device)
    inputs = {key: value.to(dtype) if value.is_floating_point() else value for key, value in inputs.items()}
    loading = {"attn_implementation": "eager", "dtype": dtype, "device_map": device}
    plain = AutoModelForImageTextToText.from_pretrained(path, **loading).eval()
    model = StandardizedTransformer(path, task="image-text-to-text", processor=processor, dispatch=True, **loading)
    native = TransformersModel(str(path), task="image-text-to-text", processor=processor, dispatch=True, **loading)
    bare = TransformersModel(str(path), task="image-text-to-text", processor=processor, dispatch=True, **loading)
    standard_body, source_body, opened, _ = reads(checkpoint.reads_as, model, native)
    for envoy in opened:  # instrument before the first trace, as nnsight needs
        _ = envoy.source

    def traced(which, body: Callable[[], None] | None = None) -> Callable[[], None]:
        def run() -> None:
            with torch.no_grad(), which.trace(prompt, images=images):
                if body is not None:
                    body()
        return run

    def plain_forward() -> None:
        with torch.no_grad():
            plain(**inputs)

    variants = {
        "plain forward": plain_forward,
        "empty trace": traced(bare),
        "empty trace, StandardizedTransformer": traced(model),
        "trace, standard names": traced(model, standard_body),
        "trace, nnsight .source": traced(native, source_body),
    }
    return round_robin({name: synchronised(run, device) for name, run in variants.items()}, rounds)


def table(results: dict[str, dict[str, list[float]]], card: str, dtype: torch.dtype, rounds: int, tiny: bool) -> str:
    weights = "The tiny checkpoints of the two architectures' families" if tiny else "Random weights at real sizes"
    out = [
        BEGIN,
        f"{weights}, {card}, {str(dtype).removeprefix('torch.')}, eager attention, "
        f"{rounds} rounds round-robin after warm-up, each run synchronised, `torch.no_grad()`; times in ms.\n",
        "| checkpoint | variant | median | min | × plain forward (paired) |",
        "|---|---|---:|---:|---:|",
    ]
    for name, times in results.items():
        for variant, values in times.items():
            out.append(f"| {name} | {variant} | {ms(statistics.median(values))} | {ms(min(values))} "
                       f"| {paired(times, variant, 'plain forward'):.3f} |")
        for over in ("trace, nnsight .source", "empty trace"):
            out.append(f"| {name} | standard names / {over} (paired) | | "
                       f"| {paired(times, 'trace, standard names', over):.3f} |")
    return "\n".join([*out, END]) + "\n"


def main(argv: list[str] | None = None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=20, help="timed rounds per variant, after 2 warm-up rounds")
    parser.add_argument("--tiny", action="store_true", help="the tiny checkpoints on CPU in float32 (the suite's run)")
    parser.add_argument("--out", type=Path, default=None, help="write the table into this file's GPU section")
    args = parser.parse_args(argv)
    device = "cpu" if args.tiny or not torch.cuda.is_available() else "cuda"
    dtype = torch.float32 if args.tiny else torch.bfloat16
    card = torch.cuda.get_device_name() if device == "cuda" else f"CPU ({torch.get_num_threads()} threads)"
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        for checkpoint in CHECKPOINTS:
            path = tiny_checkpoint(checkpoint.tiny) if args.tiny else saved(checkpoint, Path(folder), device, dtype)
            side = TINY_IMAGE if args.tiny else checkpoint.image
            results[checkpoint.name] = measure(checkpoint, path, args.rounds, device, dtype, side)
            if device == "cuda":
                torch.cuda.empty_cache()
    text = table(results, card, dtype, args.rounds, args.tiny)
    if args.out is not None:
        from overhead import write_section

        write_section(args.out, BEGIN, END, text.rstrip("\n"))
    sys.stdout.write(text)
    return text


if __name__ == "__main__":
    main()
