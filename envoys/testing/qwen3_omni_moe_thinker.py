"""A tiny Qwen3-Omni-MoE thinker: Qwen3-VL's ViT with DeepStack and a Whisper-like audio tower on a Qwen3
mixture-of-experts text model with interleaved M-RoPE.

The processor is the stock ``Qwen3OmniMoeProcessor`` of the real checkpoint,
with its stock parts (``Qwen2VLImageProcessor``, ``Qwen2VLVideoProcessor``, a
128-bin ``WhisperFeatureExtractor``) and a word-level tokenizer holding the
thinker's named tokens (``<|image_pad|>``, ``<|video_pad|>``,
``<|audio_pad|>`` between ``<|vision_start|>`` / ``<|vision_end|>`` and
``<|audio_start|>`` / ``<|audio_end|>``); the chat template renders image,
video and audio entries as the real one does (`omni_template`).

Images, as on the tiny Qwen3-VL-MoE: patch 8, merged 2x2, so a 32x32 image
is 16 patches and 4 image tokens, 48 high x 64 wide 48 patches and 12
tokens. Videos: the tokenizer's ``size`` default (`pixel_bounds`) outranks
the processor class's huge video default, as on the tiny Qwen2.5-Omni
thinker, so 4 frames of 32x32 are 2 temporal patches of 4x4 patches, 8 video
tokens. Audio: the processor pads a batch of clips to the longest, and gives
each clip's length in ``feature_attention_mask``: a clip of 1 s is
``input_features [1, 128, 100]`` and 13 audio tokens.
"""

from __future__ import annotations

import torch
from transformers import Qwen3OmniMoeProcessor, Qwen3OmniMoeThinkerConfig, Qwen3OmniMoeThinkerForConditionalGeneration

from .contract import (
    NO_WINDOWS,
    PER_IMAGE_PATTERN,
    QWEN_VIT_BLOCK,
    SIGLIP,
    AudioRow,
    Loads,
    MoeRow,
    Reads,
    Row,
    Sizes,
    VideoRow,
    attention,
    blocks,
    flat,
    packed,
    router,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .qwen import HALF, _qwen3_vision, _text
from .qwen2_5_omni_thinker import audio_config, omni_processor, omni_template, omni_tokenizer
from .rope import rope

PATCH = 8
EXPERTS = 4
TOP_K = 2
#: The text blocks whose MLP is dense (``mlp_only_layers``): block 1; block 0 is a mixture of experts.
DENSE = [1]

#: The thinker's named tokens, as the processor reads them off its tokenizer.
NAMED = {
    "image_token": "<|image_pad|>",
    "video_token": "<|video_pad|>",
    "audio_token": "<|audio_pad|>",
    "vision_bos_token": "<|vision_start|>",
    "vision_eos_token": "<|vision_end|>",
    "audio_bos_token": "<|audio_start|>",
    "audio_eos_token": "<|audio_end|>",
}

CHAT_TEMPLATE = omni_template(NAMED)


def build_qwen3_omni_moe_thinker() -> tuple[Qwen3OmniMoeThinkerForConditionalGeneration, Qwen3OmniMoeProcessor]:
    """Imitates the thinker of Qwen/Qwen3-Omni-30B-A3B-Instruct.

    Tower: Qwen3-VL's, 2 blocks, width 32, 2 heads, patch 8, 16 learned
    position embeddings (4x4), DeepStack tapping block 0
    (``deepstack_visual_indexes`` [0]: its merged feature is added after text
    block 0). Audio tower: 2 blocks, ``d_model`` 32, 2 heads, MLP 64 wide, 128
    mel bins, three stride-2 convolutions 16 channels wide
    (``downsample_hidden_size``), output 32 wide. Text: 2 layers, width 32, 2
    query heads / 1 key-value head, head_dim 16, interleaved M-RoPE sections
    [4, 2, 2], untied embeddings (as the real thinker's); block 0's MLP a
    mixture of 4 experts (``moe_intermediate_size`` 32), 2 a token, no shared
    expert; block 1's a dense MLP 64 wide (``mlp_only_layers`` [1]: the real
    checkpoint has none dense, the config allows it). ``vision_start_token_id``
    (not a declared field of the thinker config, but its rope index reads it)
    and ``vision_end_token_id`` are set. The routers' weights are drawn from
    N(0, 1) (they start at zero) and every norm's weight at random.
    """
    tokenizer = omni_tokenizer(NAMED, CHAT_TEMPLATE, Qwen3OmniMoeProcessor, PATCH)
    ids = {name: tokenizer.convert_tokens_to_ids(token) for name, token in NAMED.items()}
    config = Qwen3OmniMoeThinkerConfig(
        audio_config=audio_config(downsample_hidden_size=16),
        vision_config=_qwen3_vision(PATCH, depth=2, deepstack_visual_indexes=[0]),
        text_config=_text(
            tokenizer,
            head_dim=16,
            **rope(1_000_000.0, mrope_section=[4, 2, 2], mrope_interleaved=True),
            num_experts=EXPERTS,
            num_experts_per_tok=TOP_K,
            moe_intermediate_size=32,
            decoder_sparse_step=1,
            mlp_only_layers=DENSE,
        ),
        audio_token_id=ids["audio_token"],
        image_token_id=ids["image_token"],
        video_token_id=ids["video_token"],
        audio_start_token_id=ids["audio_bos_token"],
        vision_start_token_id=ids["vision_bos_token"],
        vision_end_token_id=ids["vision_eos_token"],
    )
    model = Qwen3OmniMoeThinkerForConditionalGeneration(config)
    with torch.no_grad():
        for layer in model.model.language_model.layers:
            gate = getattr(layer.mlp, "gate", None)
            if gate is not None:
                gate.weight.normal_(0.0, 1.0)
    randomise_norms(model)
    return model, omni_processor(Qwen3OmniMoeProcessor, PATCH, HALF, HALF, tokenizer, CHAT_TEMPLATE)


#: The checkpoints this module builds, by name.
BUILDERS = {"qwen3_omni_moe_thinker": build_qwen3_omni_moe_thinker}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/qwen3_omni_moe_thinker.py: qwen3_vl's tower with 2 blocks, patch 8; DeepStack taps block 0, added
    # after text block 0 of 2; text block 0 a mixture of 4 experts, block 1 dense (mlp_only_layers [1]); audio
    # scattered before images, a Whisper-like audio tower beside the ViT.
    "qwen3_omni_moe_thinker": Row(
        loads=Loads(("Qwen3OmniMoeThinkerForConditionalGeneration", "Qwen3OmniMoeProcessor", "TokenizersBackend")),
        image_tokens=(4, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="image_grid_thw", **SIGLIP),
        stream=packed(16, 48),
        projected=flat((1, 4), (1, 12)),
        projector_reads=Reads("layer_output", block=-1, unbatched=True),
        pattern=PER_IMAGE_PATTERN,
        deepstack_taps=1,
        vision_unavailable=NO_WINDOWS,
        text_gaps={"deepstack_output": (1,), "mlp.router_logits": (1,)},
        rules=(scatter("qwen3_omni_moe"), "qwen3_omni_moe.vision-attention", "qwen3_omni_moe.audio-attention",
               "qwen3_omni_moe.deepstack", *attention("qwen3_omni_moe", "Qwen3OmniMoeThinkerTextAttention"),
               router("qwen3_omni_moe", "Qwen3OmniMoeThinkerTextTopKRouter")),
        # envoys/testing/qwen3_omni_moe_thinker.py: Qwen3-VL's tower (patch 8): 2 units of 4x4 patches (32) and 2x2 tokens (8).
        video=VideoRow(tokens=8, stream=(1, 32, 32), grid=(2, 2, 2)),
        # envoys/testing/qwen3_omni_moe_thinker.py: three stride-2 convolutions before the blocks: 13 rows and tokens.
        audio=AudioRow(tokens=13, stream=(1, 13, 32), output=(1, 13, 32)),
        native={
            "vision": "model.visual", "projector": "model.visual.merger",
            "vision.patch_embed": "model.visual.patch_embed",
            **blocks("vision.layers", "model.visual.blocks", {**QWEN_VIT_BLOCK, "mlp.down_proj": "mlp.linear_fc2"}),
            **text_model("model.language_model"),
        },
        # the text model's routers: block 0 a mixture of 4 experts, 2 a token
        moe=MoeRow(sparse=(0,), experts=4, top_k=2),
    ),
}
