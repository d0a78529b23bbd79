"""Tiny Idefics 3 and SmolVLM checkpoints: a SigLIP-like tower on tiles, a pixel-shuffle connector, a Llama text model.

Both builders return an unsaved (model, processor) pair with random float32
weights (seed the torch generator first; :func:`envoys.testing.build` does) and
the family's stock processor: `Idefics3Processor` with `Idefics3ImageProcessor`,
or `SmolVLMProcessor` with `SmolVLMImageProcessor` and `SmolVLMVideoProcessor`
(the SmolVLM processor needs the ``num2words`` package).

Sizes: tiles of ``TILE`` = 32 pixels (the vision config's ``image_size``),
patches of 8, so 16 patches a tile; the connector's pixel shuffle
(``scale_factor`` 2) folds each 2x2 block of patches into one image token,
so a tile gives ``IMAGE_SEQ_LEN`` = 4 image tokens. The image processor
resizes every image so that its longest edge is ``LONGEST_EDGE`` = 64 pixels,
rounds both sides up to multiples of 32, cuts that into rows x cols tiles of
32x32 and appends the whole image resized to 32x32 (the global image): a
32x32 or 48x64 image becomes 2 x 2 tiles + 1 (20 image tokens), a 64 wide x
32 high one 1 x 2 tiles + 1 (12 image tokens).
"""

from __future__ import annotations

import torch
from transformers import (
    Idefics3Config,
    Idefics3ForConditionalGeneration,
    Idefics3ImageProcessor,
    Idefics3Processor,
    LlamaConfig,
    SmolVLMConfig,
    SmolVLMForConditionalGeneration,
    SmolVLMImageProcessor,
    SmolVLMProcessor,
    SmolVLMVideoProcessor,
)
from transformers.models.idefics3.configuration_idefics3 import Idefics3VisionConfig
from transformers.models.smolvlm.configuration_smolvlm import SmolVLMVisionConfig

from .contract import ENCODER_BLOCK, LLAMA_ATTENTION, SIGLIP, Loads, Reads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .sizes import text_sizes
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

TILE = 32
PATCH = 8
SCALE_FACTOR = 2
IMAGE_SEQ_LEN = (TILE // PATCH) ** 2 // SCALE_FACTOR**2  # 4
LONGEST_EDGE = 64

#: The tokens the processors put around and between tiles: ``<row_r_col_c>`` for the (up to 6 x 6) tiles,
#: ``<global-img>`` before the global image, ``<fake_token_around_image>`` around each tile.
TILE_TOKENS = tuple(f"<row_{row}_col_{col}>" for row in range(1, 7) for col in range(1, 7))
NAMED = {
    "image_token": "<image>",
    "fake_image_token": "<fake_token_around_image>",
    "global_image_token": "<global-img>",
    "end_of_utterance_token": "<end_of_utterance>",
}

#: HuggingFaceM4/Idefics3-8B-Llama3's template: ``User:<image>text<end_of_utterance>\nAssistant:``.
IDEFICS3_TEMPLATE = (
    "<|begin_of_text|>{% for message in messages %}{{message['role'] | capitalize}}"
    "{% if message['content'][0]['type'] == 'image' %}{{':'}}{% else %}{{': '}}{% endif %}"
    "{% for line in message['content'] %}{% if line['type'] == 'text' %}{{line['text']}}"
    "{% elif line['type'] == 'image' %}{{ '<image>' }}{% endif %}{% endfor %}<end_of_utterance>\n{% endfor %}"
    "{% if add_generation_prompt %}{{ 'Assistant:' }}{% endif %}"
)

#: HuggingFaceTB/SmolVLM-Instruct's template: the same turns after ``<|im_start|>``.
SMOLVLM_TEMPLATE = IDEFICS3_TEMPLATE.replace("<|begin_of_text|>", "<|im_start|>")


def _tokenizer(start: str, template: str, video: bool) -> TokenizersBackend:
    named = {**NAMED, "video_token": "<video>"} if video else dict(NAMED)
    return word_level_tokenizer(
        special_tokens=[start, "<|end_of_text|>", *TILE_TOKENS],
        named_tokens=named,
        chat_template=template,
        eos_token="<end_of_utterance>",
        pad_token="<|end_of_text|>",
        words=(*WORDS, "User", "Assistant"),
    )


def _configs(tokenizer: TokenizersBackend, start: str, vision_config: type) -> dict:
    vision = vision_config(
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        image_size=TILE,
        patch_size=PATCH,
    )
    text = LlamaConfig(**text_sizes(
        tokenizer,
        max_position_embeddings=1024,
        bos_token_id=tokenizer.convert_tokens_to_ids(start),
    ))
    return {
        "vision_config": vision,
        "text_config": text,
        "image_token_id": tokenizer.convert_tokens_to_ids("<image>"),
        "scale_factor": SCALE_FACTOR,
        "pad_token_id": tokenizer.pad_token_id,
    }


def _randomise_tower_norm(model: torch.nn.Module) -> None:
    """Draw the tower's ``post_layernorm`` weight and bias (initialised to ones and zeros), so that what the
    connector receives differs from the last block's output by more than a standardisation."""
    norm = model.model.vision_model.post_layernorm
    with torch.no_grad():
        norm.weight.normal_(1.0, 0.5)
        norm.bias.normal_(0.0, 0.5)


def _image_processor_kwargs() -> dict:
    return {"size": {"longest_edge": LONGEST_EDGE}, "max_image_size": {"longest_edge": TILE}}


def build_idefics3() -> tuple[Idefics3ForConditionalGeneration, Idefics3Processor]:
    """Imitates HuggingFaceM4/Idefics3-8B-Llama3.

    Tower (``Idefics3VisionTransformer``): 2 blocks, width 32, 2 heads, 32x32
    tiles of 8x8 patches, ``post_layernorm``. Connector: pixel shuffle by 2,
    then a linear map 128 -> 32; ``post_layernorm``'s weight and bias are drawn at
    random rather than left at ones and zeros. Llama text model: 2 layers, width 32, 2 query
    heads / 1 key-value head. The vocabulary holds ``<image>``,
    ``<fake_token_around_image>``, ``<global-img>`` and the 36
    ``<row_r_col_c>`` tile tokens as single tokens.
    """
    tokenizer = _tokenizer("<|begin_of_text|>", IDEFICS3_TEMPLATE, video=False)
    processor = Idefics3Processor(
        image_processor=Idefics3ImageProcessor(**_image_processor_kwargs()),
        tokenizer=tokenizer,
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=IDEFICS3_TEMPLATE,
    )
    config = Idefics3Config(**_configs(processor.tokenizer, "<|begin_of_text|>", Idefics3VisionConfig))
    model = Idefics3ForConditionalGeneration(config)
    _randomise_tower_norm(model)
    return model, processor


def build_smolvlm() -> tuple[SmolVLMForConditionalGeneration, SmolVLMProcessor]:
    """Imitates HuggingFaceTB/SmolVLM-Instruct.

    The same tower, connector and text model sizes as :func:`build_idefics3`,
    as SmolVLM's classes; the processor also carries a `SmolVLMVideoProcessor`
    (same tile sizes) and the vocabulary ``<video>``.
    """
    tokenizer = _tokenizer("<|im_start|>", SMOLVLM_TEMPLATE, video=True)
    processor = SmolVLMProcessor(
        image_processor=SmolVLMImageProcessor(**_image_processor_kwargs()),
        tokenizer=tokenizer,
        video_processor=SmolVLMVideoProcessor(**_image_processor_kwargs()),
        image_seq_len=IMAGE_SEQ_LEN,
        chat_template=SMOLVLM_TEMPLATE,
    )
    config = SmolVLMConfig(**_configs(processor.tokenizer, "<|im_start|>", SmolVLMVisionConfig))
    model = SmolVLMForConditionalGeneration(config)
    _randomise_tower_norm(model)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"idefics3": build_idefics3, "smolvlm": build_smolvlm}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/idefics3.py: 32 px tiles of 8 px patches (16 a tile), 4 tokens a tile; 32x32 is 2x2 tiles + the
    # global one (20 tokens), 64 wide x 32 high 1x2 + 1 (12); post_layernorm; the connector reads tower_output.
    "idefics3": Row(
        loads=Loads(("Idefics3ForConditionalGeneration", "Idefics3Processor", "TokenizersBackend")),
        image_tokens=(20, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((5, 16), (3, 16)),
        projected=batched((5, 4), (3, 4)),
        projector_reads=Reads("tower_output"),
        second_image=(64, 32),
        final_norm=True,
        rules=(scatter("idefics3"), *attention("idefics3", "Idefics3VisionAttention"), *LLAMA_ATTENTION),
        native={
            "vision": "model.vision_model", "projector": "model.connector",
            "vision.norm": "model.vision_model.post_layernorm",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.encoder.layers", ENCODER_BLOCK),
            **text_model("model.text_model"),
        },
    ),
    # envoys/testing/idefics3.py: SmolVLM has Idefics 3's sizes.
    "smolvlm": Row(
        loads=Loads(("SmolVLMForConditionalGeneration", "SmolVLMProcessor", "TokenizersBackend")),
        image_tokens=(20, 12),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((5, 16), (3, 16)),
        projected=batched((5, 4), (3, 4)),
        projector_reads=Reads("tower_output"),
        second_image=(64, 32),
        final_norm=True,
        rules=(scatter("smolvlm"), *attention("smolvlm", "SmolVLMVisionAttention"), *LLAMA_ATTENTION),
        native={
            "vision": "model.vision_model", "projector": "model.connector",
            "vision.norm": "model.vision_model.post_layernorm",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.encoder.layers", ENCODER_BLOCK),
            **text_model("model.text_model"),
        },
    ),
}
