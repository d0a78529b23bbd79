"""A tiny Gemma 3 checkpoint: a SigLIP tower, an average-pooling projector, a Gemma 3 text model.

The builder returns an unsaved (`Gemma3ForConditionalGeneration`,
`Gemma3Processor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does). Images are resized to 32x32 with 4x4
patches, so the tower sees an 8x8 grid (64 patches) per image whatever its
input size, and the projector pools it 2x2 to ``mm_tokens_per_image`` = 16
tokens (a 4x4 grid): 16 image tokens per image.
"""

from __future__ import annotations

import torch
from transformers import (
    Gemma3Config,
    Gemma3ForConditionalGeneration,
    Gemma3ImageProcessor,
    Gemma3Processor,
    Gemma3TextConfig,
    SiglipVisionConfig,
)
from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

from .contract import SIGLIP, SIGLIP_ATTENTION, TEXT_BLOCK, Loads, Reads, Row, Sizes, attention, batched, encoder_tower, scatter, text_model
from .sizes import text_sizes
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

IMAGE_SIZE = 32
PATCH_SIZE = 4
TOKENS_PER_SIDE = 4  # the 8x8 patch grid pooled 2x2
IMAGE_TOKENS = TOKENS_PER_SIDE**2  # 16

#: Gemma 3's chat template, reduced: BOS, turns ``<start_of_turn>{user|model}``, each image as the
#: begin-of-image token (the processor expands it to ``\n\n<start_of_image>`` + 16 soft tokens +
#: ``<end_of_image>\n\n``).
GEMMA3_TEMPLATE = (
    "{{ bos_token }}"
    "{% for message in messages %}"
    "{% set role = 'model' if message['role'] == 'assistant' else message['role'] %}"
    "{{ '<start_of_turn>' + role + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<start_of_image>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<end_of_turn>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}{% endif %}"
)


def _gemma3_tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(
        special_tokens=["<pad>", "<eos>", "<bos>", "<start_of_turn>", "<end_of_turn>"],
        named_tokens={
            "boi_token": "<start_of_image>",
            "eoi_token": "<end_of_image>",
            "image_token": "<image_soft_token>",
        },
        chat_template=GEMMA3_TEMPLATE,
        bos_token="<bos>",
        eos_token="<end_of_turn>",
        pad_token="<pad>",
        words=(*WORDS, "model", *PAN_AND_SCAN_WORDS),
    )


#: The words Gemma 3's processor writes around an image's pan-and-scan crops, which a real Gemma tokenizer knows.
PAN_AND_SCAN_WORDS = ("Here", "original", "here", "some", "crops", "help", "better")


def _randomise_zero_initialised(model: Gemma3ForConditionalGeneration) -> None:
    """Give random values to the weights Gemma's init leaves at zero.

    ``mm_input_projection_weight`` is zeros (every image feature would be 0,
    so an ablation would change nothing), and every Gemma3RMSNorm's weight is
    zeros (it scales by ``1 + weight``, so each would be the same plain RMS
    normalisation): the soft-embedding norm, the text blocks' four norms, the
    final norm, and the attention's q/k norms.
    """
    with torch.no_grad():
        projector = model.model.multi_modal_projector
        projector.mm_input_projection_weight.normal_(std=0.1)
        for module in model.modules():
            if isinstance(module, Gemma3RMSNorm):
                module.weight.normal_(std=0.1)


def build_gemma3() -> tuple[Gemma3ForConditionalGeneration, Gemma3Processor]:
    """Imitates google/gemma-3-4b-it (pan-and-scan off, the processor's default).

    SigLIP tower (no CLS, no pooling head, ``post_layernorm`` over the
    patches): 2 blocks, width 32, 2 heads, patch 4 on 32x32 images, 64
    patches. The projector pools the 8x8 grid 2x2 to 16 tokens, RMS-norms
    them (``mm_soft_emb_norm``) and multiplies by ``mm_input_projection_weight``.
    Gemma 3 text model: 2 layers, width 32, 2 query heads / 1 key-value
    head of 16, layer 0 sliding (window 16), layer 1 global; embeddings
    scaled by sqrt(32); tied head. The prompt's placeholder is
    ``<start_of_image>``, which the processor expands to 16
    ``<image_soft_token>`` between ``<start_of_image>`` and ``<end_of_image>``;
    ``token_type_ids`` mark the soft tokens, which attend to each other
    bidirectionally within an image.
    """
    tokenizer = _gemma3_tokenizer()
    vision = SiglipVisionConfig(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        vision_use_head=False,
    )
    text = Gemma3TextConfig(**text_sizes(
        tokenizer,
        head_dim=16,
        query_pre_attn_scalar=16,
        sliding_window=16,
        layer_types=["sliding_attention", "full_attention"],
    ))
    config = Gemma3Config(
        vision_config=vision,
        text_config=text,
        mm_tokens_per_image=IMAGE_TOKENS,
        boi_token_index=tokenizer.boi_token_id,
        eoi_token_index=tokenizer.eoi_token_id,
        image_token_index=tokenizer.image_token_id,
    )
    processor = Gemma3Processor(
        image_processor=Gemma3ImageProcessor(
            size={"height": IMAGE_SIZE, "width": IMAGE_SIZE},
            image_mean=[0.5, 0.5, 0.5],
            image_std=[0.5, 0.5, 0.5],
            do_pan_and_scan=False,
        ),
        tokenizer=tokenizer,
        image_seq_length=IMAGE_TOKENS,
        chat_template=GEMMA3_TEMPLATE,
    )
    model = Gemma3ForConditionalGeneration(config)
    _randomise_zero_initialised(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"gemma3": build_gemma3}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/gemma3.py: SigLIP on 32x32 (any input resized), 4 px patches, 64 patches, post_layernorm; the
    # projector pools tower_output 2x2 to 16 tokens an image.
    "gemma3": Row(
        loads=Loads(("Gemma3ForConditionalGeneration", "Gemma3Processor", "TokenizersBackend"), placeholder="boi_token"),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=4, image_size=32, **SIGLIP),
        stream=batched((1, 64), (1, 64)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("gemma3"), *SIGLIP_ATTENTION, *attention("gemma3", "Gemma3Attention")),
        native={
            **encoder_tower("model.vision_tower"), "projector": "model.multi_modal_projector",
            **text_model("model.language_model", {**TEXT_BLOCK,
                "pre_feedforward_layernorm": "pre_feedforward_layernorm",
                "attention_output_norm": "post_attention_layernorm", "mlp_output_norm": "post_feedforward_layernorm"}),
        },
    ),
}
