"""Tiny PaliGemma checkpoints: a SigLIP tower, a linear projector, a Gemma text model (PaliGemma) or a Gemma 2 one
(PaliGemma 2).

Each builder returns an unsaved (`PaliGemmaForConditionalGeneration`,
`PaliGemmaProcessor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Images are resized to 32x32
with 8x8 patches (`llava.siglip_tower`): 16 patches an image whatever its
input size, and one image token per patch, 16 an image.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import (
    Gemma2Config,
    GemmaConfig,
    PaliGemmaConfig,
    PaliGemmaForConditionalGeneration,
    PaliGemmaProcessor,
    PretrainedConfig,
    SiglipImageProcessor,
)
from transformers.models.gemma.modeling_gemma import GemmaRMSNorm
from transformers.models.gemma2.modeling_gemma2 import Gemma2RMSNorm

from .contract import SIGLIP, SIGLIP_ATTENTION, Loads, Reads, Row, Sizes, attention, batched, encoder_tower, scatter, text_model
from .llava import IMAGE_SIZE, IMAGE_TOKENS, siglip_tower
from .norms import randomise_norms
from .sizes import text_sizes
from .tokenizer import WORDS, TokenizersBackend, as_the_processor_takes, word_level_tokenizer

#: PaliGemma's checkpoints ship no chat template (a prompt is ``<image>`` per image, then the prefix text); this one
#: renders a user turn that way, so a chat prompt works too. The processor puts ``<bos>`` after the last
#: ``<image>`` and ``\n`` after the prefix, and expands each ``<image>`` to 16.
PALIGEMMA_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endfor %}"
)

#: Words of PaliGemma's task prefixes (``caption en``, ``answer en ...``, ``detect cat``).
TASK_WORDS = ("caption", "answer", "detect", "segment", "en")


def _paligemma_tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=["<pad>", "<eos>", "<bos>"],
        named_tokens={"image_token": "<image>"},
        chat_template=PALIGEMMA_TEMPLATE,
        bos_token="<bos>",
        eos_token="<eos>",
        pad_token="<pad>",
        words=(*WORDS, *TASK_WORDS),
    )


def _randomise_zero_initialised(model: PaliGemmaForConditionalGeneration) -> None:
    """Every Gemma (2) RMSNorm's weight starts at zero (it scales by ``1 + weight``: a plain RMS normalisation) and
    the tower's LayerNorms at ones and zeros; draw them all."""
    randomise_norms(model.model.vision_tower)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, (GemmaRMSNorm, Gemma2RMSNorm)):
                module.weight.normal_(std=0.1)


def _paligemma(text: Callable[[TokenizersBackend], PretrainedConfig]) -> tuple[
    PaliGemmaForConditionalGeneration, PaliGemmaProcessor
]:
    """The checkpoint on `llava.siglip_tower` with the text model ``text(tokenizer)`` configures.

    The projector is one linear layer from 32 to ``projection_dim`` 32 on the
    normed tower output: 16 image tokens an image. The processor
    (``image_seq_length`` 16) adds PaliGemma's 1024 ``<locNNNN>`` and 128
    ``<segNNN>`` tokens to the tokenizer, writes ``<image>`` x 16 per image,
    ``<bos>``, the prefix and ``\\n``; with ``suffix=`` it appends the suffix
    and ``<eos>``. ``token_type_ids`` are 0 on the prefix (image tokens
    included), which attends both ways, and 1 on the suffix, which is causal;
    ``labels`` are the suffix's ids, -100 on the prefix.
    """
    tokenizer = as_the_processor_takes(_paligemma_tokenizer(), PaliGemmaProcessor)
    image_processor = SiglipImageProcessor(
        size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5]
    )
    image_processor.image_seq_length = IMAGE_TOKENS  # PaliGemma's preprocessor_config.json carries it
    processor = PaliGemmaProcessor(image_processor=image_processor, tokenizer=tokenizer, chat_template=PALIGEMMA_TEMPLATE)
    config = PaliGemmaConfig(
        vision_config=siglip_tower(),
        text_config=text(tokenizer),  # after the processor added its tokens
        image_token_index=tokenizer.image_token_id,
        projection_dim=32,
        hidden_size=32,
        vocab_size=len(tokenizer),
    )
    model = PaliGemmaForConditionalGeneration(config)
    _randomise_zero_initialised(model)
    return model, processor


def build_paligemma() -> tuple[PaliGemmaForConditionalGeneration, PaliGemmaProcessor]:
    """Imitates google/paligemma-3b-mix-224.

    SigLIP tower (`llava.siglip_tower`: no CLS, no pooling head,
    ``post_layernorm`` over the patches): 2 blocks, width 32, 2 heads, patch 8
    on 32x32 images, 16 patches. Gemma text model: 2 pre-norm layers, width
    32, 2 query heads / 1 key-value head of 16, embeddings scaled by
    sqrt(32), tied head. Projector and processor: `_paligemma`.
    """
    return _paligemma(lambda tokenizer: GemmaConfig(**text_sizes(tokenizer, head_dim=16)))


#: Gemma 2's sliding window, as on paligemma2 checkpoints: longer than any prompt here, so the sliding layer sees
#: what the global one sees.
SLIDING_WINDOW = 4096


def build_paligemma2() -> tuple[PaliGemmaForConditionalGeneration, PaliGemmaProcessor]:
    """Imitates google/paligemma2-3b-pt-224.

    The tower, projector and processor of `build_paligemma`; a Gemma 2 text
    model: 2 sandwich-norm layers (layer 0 sliding, window 4096; layer 1
    global), width 32, 2 query heads / 1 key-value head of 16, attention
    logits soft-capped at 50, embeddings scaled by sqrt(32), tied head; the
    final logits soft-capped at 30, as on the checkpoints (PaliGemma's
    forward computes ``tanh(logits / 30) * 30`` after the head).
    """
    return _paligemma(lambda tokenizer: Gemma2Config(**text_sizes(
        tokenizer,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=SLIDING_WINDOW,
        layer_types=["sliding_attention", "full_attention"],
        attn_logit_softcapping=50.0,
        final_logit_softcapping=30.0,
    )))


#: The checkpoints this module builds, by name.
BUILDERS = {"paligemma": build_paligemma, "paligemma-2": build_paligemma2}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/paligemma.py: llava-siglip's SigLIP tower (32x32, any input resized, 8 px patches: 16 patches,
    # post_layernorm); the projector, one Linear, reads tower_output: one image token a patch, 16 an image.
    "paligemma": Row(
        loads=Loads(("PaliGemmaForConditionalGeneration", "PaliGemmaProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("paligemma"), *SIGLIP_ATTENTION, *attention("gemma", "GemmaAttention")),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
    # envoys/testing/paligemma.py, build_paligemma2: build_paligemma's tower, projector and processor; Gemma 2 text.
    "paligemma-2": Row(
        loads=Loads(("PaliGemmaForConditionalGeneration", "PaliGemmaProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("paligemma"), *SIGLIP_ATTENTION, *attention("gemma2", "Gemma2Attention")),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
}
