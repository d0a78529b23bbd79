"""A tiny Idefics 2 checkpoint: a SigLIP-like tower at any resolution, a perceiver connector, a Mistral text model.

The builder returns an unsaved (model, processor) pair with random float32
weights (seed the torch generator first; :func:`envoys.testing.build` does) and
the family's stock processor, `Idefics2Processor` with `Idefics2ImageProcessor`
(no image splitting, its default).

Sizes: patches of ``PATCH`` = 8 pixels. The image processor keeps an image's
aspect ratio, shrinking it so that its longer side is at most
``LONGEST_EDGE`` = 32 pixels and no side below ``SHORTEST_EDGE`` = 16, and
pads every image of a batch with zeros to the batch's largest height and
width (``pixel_attention_mask`` marks the real pixels): a 32x32 image stays
32x32 (4 x 4 = 16 patches), a 64 wide x 48 high one becomes 32 wide x 24
high (4 x 3 = 12 patches), padded to 32x32 beside the first. The perceiver
resamples each image to ``LATENTS`` = 4 latents, so an image is 4 image
tokens whatever its size.
"""

from __future__ import annotations

import torch
from transformers import (
    Idefics2Config,
    Idefics2ForConditionalGeneration,
    Idefics2ImageProcessor,
    Idefics2Processor,
    MistralConfig,
)
from transformers.models.idefics2.configuration_idefics2 import Idefics2PerceiverConfig, Idefics2VisionConfig

from .contract import ENCODER_BLOCK, MISTRAL_ATTENTION, SIGLIP, Loads, PatternRow, Reads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .idefics3 import IDEFICS3_TEMPLATE
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import WORDS, word_level_tokenizer

PATCH = 8
LONGEST_EDGE = 32
SHORTEST_EDGE = 16
LATENTS = 4

#: HuggingFaceM4/idefics2-8b's template: Idefics 3's turns, the begin-of-text token left to the tokenizer.
IDEFICS2_TEMPLATE = IDEFICS3_TEMPLATE.replace("<|begin_of_text|>", "")


def build_idefics2() -> tuple[Idefics2ForConditionalGeneration, Idefics2Processor]:
    """Imitates HuggingFaceM4/idefics2-8b.

    Tower (``Idefics2VisionTransformer``): 2 blocks, width 32, 2 heads, MLP 64
    wide, 8 px patches, position embeddings for a 32x32 image (``image_size``
    32: 4 x 4 buckets that smaller grids are spread over), ``post_layernorm``.
    Connector: an MLP from 32 to the text width 32, then a perceiver
    resampler of 2 blocks (2 heads of 16, 1 key-value head) over 4 latents.
    Mistral text model: 2 layers, width 32, 2 query heads / 1 key-value head.
    The latents (initialised to ones, so every latent would read the same)
    and every norm's weight and bias are drawn at random. The vocabulary holds
    ``<image>``, ``<fake_token_around_image>`` and ``<end_of_utterance>`` as
    single tokens; the tokenizer prepends ``<s>``.
    """
    tokenizer = word_level_tokenizer(
        special_tokens=["<s>", "</s>", "<end_of_utterance>"],
        named_tokens={"image_token": "<image>", "image_boundary_token": "<fake_token_around_image>"},
        chat_template=IDEFICS2_TEMPLATE,
        eos_token="<end_of_utterance>",
        pad_token="</s>",
        bos_token="<s>",
        add_bos_token=True,
        words=(*WORDS, "User", "Assistant"),
    )
    image_processor = Idefics2ImageProcessor(size={"shortest_edge": SHORTEST_EDGE, "longest_edge": LONGEST_EDGE})
    processor = Idefics2Processor(image_processor=image_processor, tokenizer=tokenizer, image_seq_len=LATENTS,
                                  chat_template=IDEFICS2_TEMPLATE)
    text = MistralConfig(**text_sizes(processor.tokenizer, max_position_embeddings=1024))
    config = Idefics2Config(
        vision_config=Idefics2VisionConfig(**vision_sizes(image_size=LONGEST_EDGE, patch_size=PATCH)),
        perceiver_config=Idefics2PerceiverConfig(
            hidden_size=text.hidden_size, resampler_n_latents=LATENTS, resampler_depth=2, resampler_n_heads=2,
            resampler_head_dim=16, num_key_value_heads=1,
        ),
        text_config=text,
        image_token_id=processor.tokenizer.convert_tokens_to_ids("<image>"),
    )
    model = Idefics2ForConditionalGeneration(config)
    randomise_norms(model)
    with torch.no_grad():
        model.model.connector.perceiver_resampler.latents.normal_()
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"idefics2": build_idefics2}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/idefics2.py: 8 px patches, no tiles; 32x32 stays 32x32 (4x4 patches), 64 wide x 48 high becomes 32 x 24
    # (4x3), padded to 4x4 beside the first (its padded keys masked); post_layernorm; the connector reads tower_output
    # and its perceiver resamples each image to 4 latents, 4 image tokens an image.
    "idefics2": Row(
        loads=Loads(("Idefics2ForConditionalGeneration", "Idefics2Processor", "TokenizersBackend")),
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=8, image_size="pixel_attention_mask", **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        pattern=PatternRow(padded=True),
        rules=(scatter("idefics2"), *attention("idefics2", "Idefics2VisionAttention"),
               "idefics2.Idefics2PerceiverAttention", *MISTRAL_ATTENTION),
        native={
            "vision": "model.vision_model", "projector": "model.connector",
            "vision.norm": "model.vision_model.post_layernorm",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.encoder.layers", ENCODER_BLOCK),
            **text_model("model.text_model"),
        },
    ),
}
