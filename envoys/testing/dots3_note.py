"""A tiny Dots 3 Note checkpoint (model_type dots3_note): a packed ViT with mixture-of-experts blocks, an audio tower,
on a mixture-of-experts DeepSeek-V3.2-shaped text model.

The builder returns an unsaved (`Dots3NoteForConditionalGeneration`,
`Dots3NoteProcessor`) pair with random float32 weights.

Tower (``model.vision_tower``): 2 blocks of width 32, 2 heads of 16, patch 8
(one frame deep: ``temporal_patch_size`` 1), the patch convolution RMS-normed,
a 2D rotary embedding, q/k RMSNorms; block 0's MLP dense (a gated MLP 64
wide), block 1's a mixture of 4 routed experts 32 wide, 2 a patch, no shared
expert (``pyramid_num_routed`` [-1, 4]); a final RMSNorm (``norm``), then the
merger (``merger``: a LayerNorm and two linears over each 2x2 merge block,
to the text width). The image processor is the stock `Qwen2VLImageProcessor`
(patch 8, merge 2, 4 to 64 image tokens), each image's patches in merge-block
order: a 32x32 image is 16 patches and 4 image tokens, a 48 (high) x 64 (wide)
one 48 patches and 12 tokens.

Text model: 2 blocks of width 32, multi-head latent attention (2 heads;
queries and keys of 8 + 8 dims without and with interleaved rotary
positions, queries through a 16-wide low-rank ``q_a_proj`` / ``q_b_proj``,
keys and values from a 16-wide latent, values 12 wide, a sigmoid gate per
head), both blocks ``indexed_attention`` (as the real model's first two: a
sparse-attention indexer of 2 heads of 16 choosing each query's top 8 keys);
block 0's MLP dense, 64 wide (``first_k_dense_replace`` 1), block 1's a
mixture of 4 routed experts 32 wide, 2 a token, one expert group, plus one
shared expert 32 wide. Audio tower (``model.audio_tower``): 1 block of width
32, kept under its native names. The routers' weights are drawn from N(0, 1)
(their init's 0.02 leaves every token's scores nearly equal) and every norm's
weight at random (`randomise_norms`). The tokenizer is word-level
(`envoys.testing.tokenizer`) with Dots' media markers and a ChatML template.
"""

from __future__ import annotations

import torch
from transformers import (
    Dots3NoteConfig,
    Dots3NoteFeatureExtractor,
    Dots3NoteForConditionalGeneration,
    Dots3NoteProcessor,
    Qwen2VLImageProcessor,
    Qwen3VLVideoProcessor,
)

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    Loads,
    MoeRow,
    Reads,
    Row,
    Sizes,
    attention,
    blocks,
    flat,
    packed,
    router,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .qwen import OPENAI_CLIP_MEAN, OPENAI_CLIP_STD, _pixels, _video_size
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 8
MERGE = 2
EXPERTS = 4
TOP_K = 2
#: The text blocks whose MLP is dense (``first_k_dense_replace`` 1): block 0; block 1 is a mixture of experts.
DENSE = 1
#: The tower's routed experts per block (``pyramid_num_routed``: -1 dense): block 0 dense, block 1 a mixture of 4.
VISION_EXPERTS = [-1, EXPERTS]

#: ChatML with Dots' vision markers; no default system prompt.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|img|><|imgpad|><|endofimg|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|img|><|video_pad|><|endofimg|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|img|>", "<|endofimg|>"]
_NAMED = {"image_token": "<|imgpad|>", "video_token": "<|video_pad|>", "audio_token": "<|audio_comp_pad|>"}


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(special_tokens=_SPECIAL, named_tokens=_NAMED, chat_template=CHAT_TEMPLATE,
                                eos_token="<|im_end|>", pad_token="<|endoftext|>")


def _text(tokenizer: TokenizersBackend) -> dict[str, object]:
    return text_sizes(
        tokenizer,
        num_key_value_heads=2,
        head_dim=16,
        q_lora_rank=16,
        kv_lora_rank=16,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=12,
        index_n_heads=2,
        index_head_dim=16,
        index_topk=8,
        layer_types=["indexed_attention", "indexed_attention"],
        first_k_dense_replace=DENSE,
        n_routed_experts=EXPERTS,
        num_experts_per_tok=TOP_K,
        n_group=1,
        topk_group=1,
        n_shared_experts=1,
        moe_intermediate_size=32,
        shared_experts_intermediate_size=32,
        bos_token_id=tokenizer.convert_tokens_to_ids("<|endoftext|>"),
        tie_word_embeddings=False,
    )


def _vision() -> dict[str, object]:
    return {
        "hidden_size": 32, "intermediate_size": 64, "moe_intermediate_size": 32, "num_hidden_layers": 2,
        "num_attention_heads": 2, "patch_size": PATCH, "spatial_merge_size": MERGE, "adapter_merge_size": MERGE,
        "adapter_in_dim": 32, "adapter_out_dim": 32, "pyramid_num_routed": VISION_EXPERTS,
        "num_experts_per_tok": TOP_K,
    }


def _audio() -> dict[str, object]:
    return {
        "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2,
        "downsample_hidden_size": 8, "adapter_input_size": 32, "adapter_out_dim": 32,
    }


def build_dots3_note() -> tuple[Dots3NoteForConditionalGeneration, Dots3NoteProcessor]:
    """Imitates dots-studio/dots3-note-prev: the module docstring's tower, text model and audio tower,
    ``Dots3NoteProcessor`` with its stock image, video and audio processors."""
    tokenizer = _tokenizer()
    config = Dots3NoteConfig(
        text_config=_text(tokenizer),
        vision_config=_vision(),
        audio_config=_audio(),
        image_token_id=tokenizer.convert_tokens_to_ids(_NAMED["image_token"]),
        video_token_id=tokenizer.convert_tokens_to_ids(_NAMED["video_token"]),
        audio_token_id=tokenizer.convert_tokens_to_ids(_NAMED["audio_token"]),
    )
    model = Dots3NoteForConditionalGeneration(config)
    with torch.no_grad():
        for block in (*model.model.language_model.layers, *model.model.vision_tower.blocks):
            gate = getattr(block.mlp, "gate", None)
            if gate is not None:  # the router of a sparse block; a dense block's MLP has none
                gate.weight.normal_(0.0, 1.0)
    randomise_norms(model)
    common = {"patch_size": PATCH, "merge_size": MERGE, "temporal_patch_size": 1, "image_mean": OPENAI_CLIP_MEAN,
              "image_std": OPENAI_CLIP_STD}
    processor = Dots3NoteProcessor(
        image_processor=Qwen2VLImageProcessor(**common, **_pixels(PATCH)),
        tokenizer=tokenizer,
        video_processor=Qwen3VLVideoProcessor(**common, size=_video_size(PATCH)),
        feature_extractor=Dots3NoteFeatureExtractor(),
        chat_template=CHAT_TEMPLATE,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"dots3_note": build_dots3_note}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/dots3_note.py: packed, 8 px patches (one frame deep) in merge-block order, merged 2x2: 32x32 is 16
    # patches and 4 tokens, 48x64 is 48 and 12; 2 blocks, width 32, 2 heads of 16, the dense MLP 64 wide (block 1 a
    # mixture of experts); a final norm (norm) that the merger (the projector, inside the tower) reads. Text: block 0
    # dense (no router), block 1 a mixture of experts.
    "dots3_note": Row(
        loads=Loads(("Dots3NoteForConditionalGeneration", "Dots3NoteProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("tower_output", unbatched=True),
        final_norm=True,
        pattern=PER_IMAGE_PATTERN,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"mlp.router_logits": (0,)},
        rules=(scatter("dots3_note"), "dots3_note.vision-attention", *attention("dots3_note", "Dots3NoteTextAttention"),
               router("dots3_note", "Dots3NoteTextTopkRouter"), router("dots3_note", "Dots3NoteVisionTopKRouter"),
               "dots3_note.Dots3NoteAudioAttention"),
        native={
            "vision": "model.vision_tower", "projector": "model.vision_tower.merger",
            "vision.norm": "model.vision_tower.norm", "vision.patch_embed": "model.vision_tower.patch_embed",
            **blocks("vision.layers", "model.vision_tower.blocks", QWEN_VIT_BLOCK),
            **text_model("model.language_model"),
            "vision.layers.0.mlp.up_proj": "model.vision_tower.blocks.0.mlp.up_proj",
            "vision.layers.0.mlp.down_proj": "model.vision_tower.blocks.0.mlp.down_proj",
            "model.audio_tower.layers.0": "model.audio_tower.layers.0",
        },
        # the text model's routers: block 1 a mixture of 4 experts, 2 a token; one group, no score bias
        moe=MoeRow(sparse=(1,), experts=4, top_k=2),
    ),
}
