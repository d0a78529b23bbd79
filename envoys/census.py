"""The census: every image-text-to-text model_type of the installed transformers, served or not, and why.

For each model_type transformers maps to an image-text-to-text class, the
census looks where `envoys.rules` would look for its scatter (the forward of
the wrapper's inner model, then the root's own, and the helpers either calls
on ``self``) and says one of:

- ``supported``: a family module serves it;
- ``scatters``: a host scatters the features into the text stream (``*.masked_scatter``),
  so it is a family module and a builder away; the tower its default config
  names, and whether a supported family already serves that tower; where it
  was looked at and left out, what serving it needs (`LEFT_OUT`);
- ``elsewhere``: neither the inner model nor the root scatters, but another
  class of its modeling module does (a family would name it as its host);
- ``not a scatter VLM``: an encoder-decoder (its config says so), a model of a
  kind listed in `KINDS` (cross-attention, VQ image tokens, patches embedded
  linearly), or one whose modeling module has no scatter at all.

Read from the classes and their source (`instrument.calls`), and from each
model_type's default config; nothing is loaded or downloaded. Importing every
modeling module takes seconds.
"""

from __future__ import annotations

import importlib
import inspect
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from types import ModuleType

from tqdm.auto import tqdm

from instrument.calls import callees, calls, defining_class, innermost
from rewrites.attention import model_type_of

from . import testing
from .families import families

SUPPORTED = "supported"
SCATTERS = "scatters"
ELSEWHERE = "elsewhere"
NOT_SCATTER = "not a scatter VLM"

#: Models whose image enters the text model in another way than a scatter, as their forwards show.
KINDS = {
    "idefics": "cross-attention: gated cross-attention layers between the text blocks read the image",
    "chameleon": "VQ image tokens: a VQ-VAE turns the image into ids of the text vocabulary, no tower of blocks",
    "emu3": "VQ image tokens: a VQ-VAE turns the image into ids of the text vocabulary, no tower of blocks",
    "fuyu": "no tower: the image's patches are embedded linearly straight into the text stream",
    "pi05": "a vision-language-action policy: PaliGemma's model inside merges the image at its tokens with "
            "`torch.where`, and an action expert denoises a chunk of actions beside it (flow matching); its forward "
            "returns action velocities, not text logits, so the text model's names (logits, the logit lens) have "
            "nothing to read",
}

#: Scatter VLMs looked at and left out for now: model_type -> what in its forward serving it needs that no
#: family has yet. Facts read off transformers 5.24's modeling source (5.25's for the model_types it added); the
#: census line shows it after what it finds.
LEFT_OUT = {
    "shieldgemma2": "transformers loads a shieldgemma2 checkpoint for image-text-to-text as Gemma 3's wrapper, but the "
                    "key renaming it applies to the model_type (a `model.` prefix meant for "
                    "`ShieldGemma2ForImageClassification`) leaves the tower and projector randomly initialised; its own "
                    "class returns only the last token's yes/no logits and cannot generate, and its processor builds "
                    "one prompt per image and policy, discarding `text=`: serving it needs a loader of its own",
    "fast_vlm": "its tower is timm's FastViT-HD (TimmWrapper, `fastvit_mci3`): convolutional RepMixer stages before "
                "attention stages, not a stack of pre-norm attention + MLP blocks; it needs a layout for timm's "
                "hierarchical stages (timm's attention rule serves PerceptionLM's plain ViT, not these)",
    "granite4_vision": "no one scatter of the image features: a window Q-Former downsamples the tower's layers and "
                       "`Granite4VisionTextModel` adds them at several text layers inside its layer loop "
                       "(`hidden_states.masked_scatter` per tap, a DeepStack of its own), which the DeepStack envoy "
                       "does not read yet",
    "glm5_next": "its text blocks use manifold-constrained hyper-connections: the stream is `hc_mult` copies "
                 "(`[batch, seq, hc_mult, hidden]`), each sublayer reads a learned collapse of them and its output is "
                 "expanded by `post` and added to `comb @ residual`, so layer_input + attention_output + mlp_output == "
                 "layer_output has no standard form; it needs a hyper-connection layout (the stream axis, the collapsed "
                 "input, `post`/`comb`, the head's mean over streams); its tower is GLM-OCR's layout, served",
    "instructblipvideo": "video only: its processor takes clips (`pixel_values` `[batch, frames, 3, H, W]`), and "
                         "`InstructBlipVideoForConditionalGeneration` runs the BLIP ViT and the Q-Former on every "
                         "frame and scatters every frame's queries at the video token (`video_token_id`); "
                         "`envoys.towers.qformer` names its modules as InstructBLIP's, but its values are a video's: serving it "
                         "needs the video side (frames as rows, the video token's mask)",
    "hy_v4_vl": "its text blocks use hyper-connections (`HYV4VLHyperConnection`, as DeepSeek-V4's): the stream is "
                "`hc_mult` copies of the embeddings (`[batch, seq, hc_mult, hidden]`), each sublayer reads a learned, "
                "input-dependent sum of them and its output is spread back onto them, and the head collapses the "
                "copies before the final norm, so neither layers[0].input[mask] == image_features nor the block "
                "identity has a standard form; it needs the hyper-connection layout glm5_next needs; its tower and "
                "per-image merger are HunYuanVL's layout, served",
    "apertus1p5": "VQ image tokens with no tower of blocks: a convolutional VQ tokenizer (ResNet stages, "
                  "`Apertus1p5VisionTokenizerModel`) turns each image into codes of the text vocabulary, which the "
                  "text model's own embedding table embeds before the scatter; there are no tower blocks, attention "
                  "or projector to name, only `image_token_mask` and `image_features`",
    "gemma3n": "its tower is timm's MobileNetV5 (TimmWrapper, `mobilenetv5_300m_enc`): convolutional stages with "
               "attention inside timm, not a stack of pre-norm blocks; and its text blocks carry AltUp's parallel "
               "copies of the stream (`altup.predict`/`correct`) plus per-layer inputs, so no single stream satisfies "
               "layer_input + attention_output + mlp_output == layer_output: it needs a layout for timm's stages "
               "(timm in the test extra) and a text surface for AltUp",
    "diffusion_gemma": "a block-diffusion model: the image is scattered into an autoregressive encoder "
                       "(`DiffusionGemmaEncoderModel`, Gemma 4's tower and scatter) whose key-value cache a "
                       "bidirectional diffusion decoder reads; the logits come from the decoder over canvas tokens, "
                       "not from the stream the image enters, so `layers` and `logits` need a definition across the "
                       "two text stacks first",
    "inkling_mm_model": "its tower is a hierarchical MLP patch encoder (`InklingVisionModel.encoder_layers`: linear "
                        "projections over space-and-time folds, its last stage projecting to the text width): no "
                        "attention, no residual blocks and no projector, so the tower's standard block values do "
                        "not exist; it needs a layout for folded MLP stages",
    "cosmos3_edge": "on transformers 5.24 its stock processor (`Cosmos3EdgeProcessor`) never returns "
                    "`mm_token_type_ids` (the class drops the `return_mm_token_type_ids = True` it would inherit from "
                    "Qwen3-VL's processor, and no init argument or saved key restores it), and "
                    "`Cosmos3EdgeModel.forward` raises right after the image scatter without them, so no image prompt "
                    "reaches the text model through the stock processor; serving it needs a transformers fix or a "
                    "documented workaround passing `return_mm_token_type_ids=True`; the rest is reuse (a packed "
                    "SigLIP2 tower attending per image, a projector after it, a Llama-shaped text model)",
    "qwen4_exp": "its text blocks use gated hyper-connections (`Qwen4ExpTextGatedResidual`): the embeddings are "
                 "repeated into `hc_count` streams (`[batch, seq, hc_count * hidden]`), each sublayer reads a learned, "
                 "input-dependent mix of them and its output is injected back with per-stream weights, and a mixer "
                 "collapses the streams before the head, so the block identity has no standard form; it needs the "
                 "hyper-connection layout glm5_next needs; its tower is a Qwen-style packed ViT",
    "inkling2": "its text blocks use block attention residuals (`Inkling2BlockAttentionResidual`): every sublayer's "
                "input is a learned attention over the outputs of earlier block groups (`block_states`), not the "
                "stream, and at each group boundary the stream restarts from the sublayer's output, so neither "
                "layer_input + attention_output + mlp_output == layer_output nor the logit lens over layer outputs "
                "holds; it needs a block-states layout (the states as values, each sublayer's attended input); its "
                "tower is a packed ViT attending per image at `cu_seqlens`",
    "inkling2_loop": "Inkling 2's block attention residuals (see inkling2), and its loop layers run "
                     "`loop_num_passes` times per forward, each pass restarting from the pre-loop states and reading "
                     "messages from the last, so `layers[i]` has several outputs per token; it needs the block-states "
                     "layout and a value per pass (as `tracer.iter` gives per step)",
}


@dataclass(frozen=True)
class Entry:
    """One model_type's line of the census."""

    model_type: str
    status: str  #: `SUPPORTED`, `SCATTERS`, `ELSEWHERE` or `NOT_SCATTER`
    reason: str  #: what was found, and for a model not served, why


def image_text_to_text_classes() -> dict[str, str]:
    """model_type -> the name of its image-text-to-text class, as the installed transformers maps them."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES

    return dict(sorted(MODEL_FOR_IMAGE_TEXT_TO_TEXT_MAPPING_NAMES.items()))


def _class(name: str | None) -> type | None:
    import transformers

    try:
        return getattr(transformers, name) if isinstance(name, str) else None
    except (AttributeError, ImportError, RuntimeError):
        return None


def inner_model_class_of(model_type: str, root: type) -> type | None:
    """The class of the wrapper's inner model: transformers' base model for the model_type, or for the model_type
    of the root's modeling module (a model_type served by another's classes, ShieldGemma 2 by Gemma 3's)."""
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    return _class(MODEL_MAPPING_NAMES.get(model_type)) or _class(MODEL_MAPPING_NAMES.get(model_type_of(root.__module__)))


def _scatters(function: object) -> Counter[str]:
    """The scatter calls (``x.masked_scatter``) a function's source makes, by callee."""
    function = innermost(function)
    found = callees(function) if function is not None else Counter()
    return Counter({name: count for name, count in found.items() if name.rpartition(".")[2] == "masked_scatter"})


def scatter_in(host: type) -> str | None:
    """Where ``host``'s forward scatters: its own calls, or a helper it calls on ``self`` that does; None if neither."""
    owner = defining_class(host)
    forward = owner.__dict__["forward"] if owner is not None else None
    own = _scatters(forward)
    if own:
        return f"{owner.__qualname__}.forward calls " + ", ".join(f"{name} ({count})" for name, count in own.items())
    body = innermost(forward)
    for name, helper in inspect.getmembers(host, inspect.isfunction):
        if name != "forward" and body is not None and calls(body, f"self.{name}") and _scatters(helper):
            return f"{owner.__qualname__}.forward scatters through its helper self.{name}"
    return None


def _module_scatterers(module: ModuleType) -> list[str]:
    """The classes of a modeling module whose own forward scatters."""
    return [
        name for name, cls in vars(module).items()
        if isinstance(cls, type) and cls.__module__ == module.__name__ and _scatters(cls.__dict__.get("forward"))
    ]


def _default_config(model_type: str):
    from transformers.models.auto.configuration_auto import CONFIG_MAPPING

    try:
        return CONFIG_MAPPING[model_type]()
    except Exception:  # a config that cannot be built without arguments tells us nothing: it is no failure here
        return None


def served_towers() -> dict[str, tuple[str, ...]]:
    """The tower model_types the tiny checkpoints hold -> the supported families holding them."""
    towers: dict[str, dict[str, None]] = {}
    for name in tqdm(testing.NAMES, desc="the census: building each tiny checkpoint", unit="checkpoint", disable=None,
                     leave=False):
        model, _ = testing.build(name)
        vision = getattr(model.config, "vision_config", None)
        if vision is not None:
            towers.setdefault(vision.model_type, {})[model.config.model_type] = None
    return {tower: tuple(families) for tower, families in towers.items()}


def left_out(model_type: str, found: str) -> str:
    """What the census found for a scatter VLM not served, and why it is left out where it was looked at."""
    return f"{found}; left out: {LEFT_OUT[model_type]}" if model_type in LEFT_OUT else found


def entry(model_type: str, class_name: str, supported: Iterable[str], towers: dict[str, tuple[str, ...]]) -> Entry:
    """The census line of one model_type."""
    if model_type in set(supported):
        return Entry(model_type, SUPPORTED, "a family module serves it (envoys/families)")
    if model_type in KINDS:
        return Entry(model_type, NOT_SCATTER, KINDS[model_type])
    config = _default_config(model_type)
    if getattr(config, "is_encoder_decoder", False):
        return Entry(model_type, NOT_SCATTER, "an encoder-decoder: the image reaches a decoder through its encoder")
    root = _class(class_name)
    if root is None:
        return Entry(model_type, NOT_SCATTER, f"transformers has no class {class_name} here")
    hosts = [host for host in (inner_model_class_of(model_type, root), root) if host is not None]
    found = next((where for where in map(scatter_in, hosts) if where is not None), None)
    if found is not None:
        vision = getattr(getattr(config, "vision_config", None), "model_type", None)
        if vision is None:
            tower = "its default config names no vision tower"
        elif vision in towers:
            tower = f"its tower, {vision}, is served ({', '.join(towers[vision])}): a family module and a builder away"
        else:
            tower = f"its tower, {vision}, is not served yet"
        return Entry(model_type, SCATTERS, left_out(model_type, f"{found}; {tower}"))
    elsewhere = _module_scatterers(importlib.import_module(root.__module__))
    names = ", ".join(host.__qualname__ for host in hosts)
    if elsewhere:
        which = f"{elsewhere[0]} scatters in its own forward" if len(elsewhere) == 1 else (
            f"{', '.join(elsewhere)} scatter in their own forwards")
        return Entry(model_type, ELSEWHERE,
                     left_out(model_type, f"no scatter host found ({names}: no scatter in their forwards); {which}"))
    return Entry(model_type, NOT_SCATTER, f"no scatter host found: no forward of {root.__module__} calls masked_scatter")


def census() -> list[Entry]:
    """Every image-text-to-text model_type of the installed transformers, in name order."""
    with testing.quietly():  # the library's own builds: transformers' remarks on their configs are held back
        supported = [family.model_type for family in families()]
        towers = served_towers()
        return [entry(model_type, name, supported, towers) for model_type, name in image_text_to_text_classes().items()]


def report(entries: list[Entry]) -> str:
    """The census as text: a line per model_type, then the counts."""
    width = max(len(e.model_type) for e in entries)
    status_width = max(len(e.status) for e in entries)
    lines = [f"{e.model_type:<{width}}  {e.status:<{status_width}}  {e.reason}" for e in entries]
    return "\n".join(lines) + "\n\n" + counts_line(entries) + "\n"


def counts_line(entries: list[Entry]) -> str:
    """The census's counts in one sentence, naming the installed transformers release."""
    import transformers

    counts = Counter(e.status for e in entries)
    scatter_vlms = counts[SUPPORTED] + counts[SCATTERS] + counts[ELSEWHERE]
    looked_at = sum(e.status in (SCATTERS, ELSEWHERE) and e.model_type in LEFT_OUT for e in entries)
    return (
        f"transformers {transformers.__version__}: {len(entries)} image-text-to-text model_types; "
        f"{counts[SUPPORTED]} supported, {counts[SCATTERS]} more scatter at the host we look in, "
        f"{counts[ELSEWHERE]} scatter elsewhere, {counts[NOT_SCATTER]} are not scatter VLMs "
        f"({counts[SUPPORTED]} of {scatter_vlms} scatter VLMs served; {looked_at} of the others left out, saying why)"
    )
