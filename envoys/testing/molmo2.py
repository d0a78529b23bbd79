"""A tiny Molmo 2 checkpoint: a SigLIP-like tower over overlapping crops, a pooling adapter, a Qwen3-like text model.

The builder returns an unsaved (`Molmo2ForConditionalGeneration`,
`Molmo2Processor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does), the stock image and video
processors and a word-level tokenizer with Molmo 2's image tokens.

Sizes: patches of ``PATCH`` = 4 pixels on square crops of ``CROP`` = 20
pixels (5 x 5 = 25 patches a crop, the tower's 25 position embeddings),
``MARGINS`` = 1 patch of overlap on each side (a crop's 3 x 3 inner window,
12 px, tiles the image), at most ``MAX_CROPS`` = 6 crops, pooled ``POOL`` = 2 x 2.
Each image is its low-resolution view (the whole image resized to one crop:
5 x 5 patches, pooled to 3 x 3 = 9 tokens, the last row and column of windows
half padding) then its high-resolution crops:

- a 32x32 image is tiled 2 x 2 (a 32 px canvas: 8 x 8 patches, pooled to
  4 x 4 = 16 tokens): 5 crops, 9 + 16 = 25 image tokens;
- a 64 wide x 48 high image is tiled 2 high x 3 wide (a 32 x 44 px canvas:
  8 x 11 patches, pooled to 4 x 6 = 24 tokens, the last column of windows half
  padding): 7 crops, 9 + 24 = 33 image tokens.
"""

from __future__ import annotations

import torch
from transformers import Molmo2Config, Molmo2ForConditionalGeneration, Molmo2Processor
from transformers.models.molmo2.configuration_molmo2 import Molmo2AdapterConfig, Molmo2TextConfig, Molmo2VisionConfig
from transformers.models.molmo2.image_processing_molmo2 import Molmo2ImageProcessor
from transformers.models.molmo2.video_processing_molmo2 import Molmo2VideoProcessor

from .contract import ENCODER_BLOCK, SIGLIP, Loads, Row, Sizes, attention, batched, blocks, flat, scatter, text_model
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 4
CROP = 20
MARGINS = [1, 1]
MAX_CROPS = 6
POOL = [2, 2]
#: The tower blocks whose outputs the adapter concatenates, in its order: the last block's, then the first's.
FEATURE_LAYERS = [-1, 0]

#: allenai/Molmo2-8B's turns (Qwen's ChatML), each image entry the processor's ``<|image|>`` placeholder.
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<|image|>' }}"
    "{% elif item['type'] == 'video' %}{{ '<|video|>' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '<|im_end|>\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)

#: The tokens Molmo 2's processor writes around and for an image's and a video frame's patches.
IMAGE_TOKENS = ["<im_patch>", "<im_col>", "<im_start>", "<low_res_im_start>", "<frame_start>", "<im_end>",
                "<frame_end>", "<im_low>"]


def molmo2_tokenizer() -> TokenizersBackend:
    """A word-level tokenizer with Qwen's ChatML tokens, Molmo 2's image tokens and its two placeholders."""
    return word_level_tokenizer(
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", *IMAGE_TOKENS],
        named_tokens={"image_token": "<|image|>", "video_token": "<|video|>"},
        chat_template=CHAT_TEMPLATE,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        bos_token="<|endoftext|>",
    )


def build_molmo2() -> tuple[Molmo2ForConditionalGeneration, Molmo2Processor]:
    """Imitates allenai/Molmo2-8B.

    Tower (``Molmo2VisionModel``): 2 blocks, width 32, 2 heads of 16, MLP 64
    wide, a linear patch embedding of 4 px patches, 25 learned position
    embeddings (one 20 px crop), no CLS and no final norm. Adapter
    (``Molmo2Adapter``): concatenates the outputs of blocks -1 and 0
    (``vision_feature_layer``, 64 wide), pools each image token's patches with
    a cross-attention (``image_pooling_2d``: 2 query heads and 1 key-value head
    of 16, queries the mean of the token's valid patches), then a gated MLP 64
    wide to the text width 32. Text model (``Molmo2TextModel``): 2 layers,
    width 32, 2 query heads / 1 key-value head of 16 with per-head q/k norms
    (``qk_norm_type`` "qwen3"), pre-norm. The position embeddings (zeros at
    init) and every norm's weight and bias are drawn at random.
    """
    tokenizer = molmo2_tokenizer()
    processor = Molmo2Processor(
        image_processor=Molmo2ImageProcessor(size={"height": CROP, "width": CROP}, patch_size=PATCH,
                                             max_crops=MAX_CROPS, overlap_margins=MARGINS, pooling_size=POOL),
        video_processor=Molmo2VideoProcessor(size={"height": CROP, "width": CROP}, patch_size=PATCH,
                                             pooling_size=POOL, num_frames=4),
        tokenizer=tokenizer,
        chat_template=CHAT_TEMPLATE,
    )
    ids = {token: tokenizer.convert_tokens_to_ids(token) for token in IMAGE_TOKENS}
    sizes = text_sizes(tokenizer, head_dim=16, max_position_embeddings=1024)
    config = Molmo2Config(
        vision_config=Molmo2VisionConfig(**vision_sizes(num_key_value_heads=2, head_dim=16, image_size=[CROP, CROP],
                                                        patch_size=PATCH)),
        adapter_config=Molmo2AdapterConfig(vision_feature_layer=FEATURE_LAYERS, hidden_size=32, num_attention_heads=2,
                                           num_key_value_heads=1, head_dim=16, intermediate_size=64,
                                           text_hidden_size=sizes["hidden_size"]),
        text_config=Molmo2TextConfig(**sizes, additional_vocab_size=0,
                                     rope_parameters={"rope_type": "default", "rope_theta": 10000.0}),
        image_patch_id=ids["<im_patch>"],
        image_start_token_id=ids["<im_start>"],
        low_res_image_start_token_id=ids["<low_res_im_start>"],
        image_end_token_id=ids["<im_end>"],
        frame_start_token_id=ids["<frame_start>"],
        frame_end_token_id=ids["<frame_end>"],
    )
    model = Molmo2ForConditionalGeneration(config)
    randomise_norms(model)
    with torch.no_grad():
        model.model.vision_tower.positional_embedding.normal_()
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"molmo2": build_molmo2}

#: A Molmo 2 tower block: SigLIP's norms and MLP names, the attention's output projection ``o_proj``.
MOLMO2_BLOCK = {**ENCODER_BLOCK, "self_attn.o_proj": "self_attn.o_proj"}

#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builder's documented
#: configuration above, never off the code under test.
CONTRACTS = {
    # envoys/testing/molmo2.py: 4 px patches on 20 px crops (25 patches a crop, no CLS, no final norm); 32x32 is 1 + 4
    # crops and 9 + 16 image tokens, 64 wide x 48 high 1 + 6 crops and 9 + 24; the adapter reads blocks -1 and 0
    # concatenated (no one tower value: tests/test_molmo2.py says how) and returns a model output whose
    # last_hidden_state is one row per image token; the host adds it to the image tokens' embeddings, so
    # image_features is not projector.output.
    "molmo2": Row(
        loads=Loads(("Molmo2ForConditionalGeneration", "Molmo2Processor", "TokenizersBackend"),
                    feature_token="<im_patch>"),
        image_tokens=(25, 33),
        sizes=Sizes(num_layers=2, patch_size=PATCH, image_size=CROP, **SIGLIP),
        stream=batched((5, 25), (7, 25)),
        projected=flat((1, 25), (1, 33)),
        projector_reads=None,
        projector_item=0,
        features_are_projected=False,
        adds_to_embeddings=True,
        # one eager kernel, drilled into from both attention classes
        rules=(scatter("molmo2"), *attention("molmo2", "Molmo2VisionAttention"), "molmo2.Molmo2Attention"),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.patch_embedding",
            **blocks("vision.layers", "model.vision_tower.layers", MOLMO2_BLOCK),
            **text_model("model.language_model"),
        },
    ),
}
