"""A tiny VipLlava checkpoint: LLaVA 1.5's CLIP tower and Llama text model, its projector over two tower layers.

The builder returns an unsaved (`VipLlavaForConditionalGeneration`,
`LlavaProcessor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does): `llava.clip_tower` (3 blocks, CLS
first, 32x32 images of 8x8 patches), `llava.clip_processor` (16 image tokens
an image) and a Llama text model as on the ``llava-clip`` checkpoint.
"""

from __future__ import annotations

from transformers import LlamaConfig, LlavaProcessor, VipLlavaConfig, VipLlavaForConditionalGeneration

from .contract import CLIP_ATTENTION, LLAMA_ATTENTION, SIGLIP, Loads, Row, Sizes, batched, encoder_tower, scatter, text_model
from .llava import IMAGE_TOKENS, clip_processor, clip_tower, vicuna_tokenizer
from .sizes import text_sizes

#: The tower states the projector reads, as ``hidden_states`` indexes them: the last block's output and block 1's
#: input; block 2's input (hidden_states[2]) is read by neither, and the CLS is dropped from both.
FEATURE_LAYERS = [-1, 1]


def build_vipllava() -> tuple[VipLlavaForConditionalGeneration, LlavaProcessor]:
    """Imitates llava-hf/vip-llava-7b-hf.

    The projector reads ``hidden_states[-1]`` and ``hidden_states[1]`` of the
    3-block CLIP tower, each without its CLS (16 patches), joined to width 64,
    layer-normed (its weight and bias randomised, so an edit of one layer's
    half reaches the output unevenly), then projected to the text width 32:
    16 image tokens an image.
    """
    tokenizer = vicuna_tokenizer()
    config = VipLlavaConfig(
        vision_config=clip_tower(),
        text_config=LlamaConfig(**text_sizes(tokenizer, num_key_value_heads=2)),
        image_token_index=tokenizer.image_token_id,
        image_seq_length=IMAGE_TOKENS,
        projector_hidden_act="gelu",
    )
    # the plural is the field's name before 5.24 and an alias of vision_feature_layer since
    config.vision_feature_layers = FEATURE_LAYERS
    model = VipLlavaForConditionalGeneration(config)
    norm = model.model.multi_modal_projector.projector_layernorm
    norm.weight.data.uniform_(0.5, 1.5)  # ones and zeros at init: a norm that hides which half a value came from
    norm.bias.data.normal_(0.0, 0.1)
    return model, clip_processor(tokenizer)


#: The checkpoints this module builds, by name.
BUILDERS = {"vipllava": build_vipllava}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/vipllava.py: llava-clip's CLIP tower (1 + 16 positions, 3 blocks) and processor (16 image tokens);
    # the projector reads two tower states joined on the feature axis (tests/test_vipllava.py says how).
    "vipllava": Row(
        loads=Loads(("VipLlavaForConditionalGeneration", "LlavaProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=3, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=None,
        prefix=1,
        rules=(scatter("vipllava"), *CLIP_ATTENTION, *LLAMA_ATTENTION),
        native={
            **encoder_tower("model.vision_tower", norm=False), "projector": "model.multi_modal_projector",
            **text_model("model.language_model"),
        },
    ),
}
