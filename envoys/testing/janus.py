"""A tiny Janus checkpoint: Janus's SigLIP-like tower, its two-layer aligner, a Llama text model, and a tiny VQ-VAE.

The builder returns an unsaved (`JanusForConditionalGeneration`,
`JanusProcessor`) pair with random float32 weights (seed the torch generator
first; :func:`envoys.testing.build` does): a `JanusVisionModel` of 2 blocks,
width 32, 2 heads, an MLP 64 wide (``mlp_ratio`` 2), 8 px patches on 32x32
images; the aligner (``depth`` 2) maps each patch to the text width 32; a
Llama text model of `sizes.text_sizes`; and the image-generation side
(`JanusVQVAE`, its generation embeddings, aligner and head) as small as its
GroupNorms (32 groups) allow, built only because the model holds it. The stock
processor with its stock image processor (`JanusImageProcessor`) resizes an
image so its longer side is 32 and pads it to 32x32 with its mean colour:
16 patches and 16 image tokens an image, whatever its size, each image's
tokens between ``<begin_of_image>`` and ``<end_of_image>``.
"""

from __future__ import annotations

from transformers import (
    JanusConfig,
    JanusForConditionalGeneration,
    JanusImageProcessor,
    JanusProcessor,
    JanusVisionConfig,
    JanusVQVAEConfig,
    LlamaConfig,
)

from .contract import ENCODER_BLOCK, LLAMA_ATTENTION, SIGLIP, Loads, Reads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .norms import randomise_norms
from .sizes import text_sizes
from .tokenizer import WORDS, TokenizersBackend, as_the_processor_takes, word_level_tokenizer

IMAGE_SIZE = 32
PATCH_SIZE = 8
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE) ** 2  # 16

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<|User|>"
ASSISTANT = "<|Assistant|>"

#: Janus-Pro's chat format, reduced: ``<|User|>: <image_placeholder>\n...\n\n<|Assistant|>:``, each image one
#: placeholder where the message puts it, an assistant turn closed by the end-of-sentence token.
JANUS_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['role'] == 'user' %}{{ '" + USER + ": ' }}"
    "{% elif message['role'] == 'assistant' %}{{ '" + ASSISTANT + ": ' }}{% endif %}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '<image_placeholder>\n' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if message['role'] == 'assistant' %}{{ '" + EOS + "' }}{% else %}{{ '\n\n' }}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '" + ASSISTANT + ":' }}{% endif %}"
)


def janus_tokenizer() -> TokenizersBackend:
    """Janus's tokenizer: its begin- and end-of-sentence tokens (BOS prepended, as its Llama tokenizer does; the end
    token pads), the role tokens, ``<image_placeholder>`` and the ``<begin_of_image>`` / ``<end_of_image>`` tokens the
    processor puts around each image's tokens (``boi_token``, ``eoi_token``), and the chat format `JANUS_TEMPLATE`."""
    return as_the_processor_takes(word_level_tokenizer(
        special_tokens=[BOS, EOS, USER, ASSISTANT],
        named_tokens={
            "image_token": "<image_placeholder>",
            "boi_token": "<begin_of_image>",
            "eoi_token": "<end_of_image>",
        },
        chat_template=JANUS_TEMPLATE,
        bos_token=BOS,
        add_bos_token=True,
        eos_token=EOS,
        pad_token=EOS,
        words=WORDS,
    ), JanusProcessor)


def janus_tower() -> JanusVisionConfig:
    """Janus's tower: 2 blocks, width 32, 2 heads, an MLP 64 wide (``mlp_ratio`` 2), 8 px patches on 32x32 images
    (16 patches, no CLS); the aligner (``depth`` 2: ``fc1``, GELU, one hidden linear) to ``projection_dim`` 32, the
    text width; ``num_image_tokens`` 16."""
    return JanusVisionConfig(
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        mlp_ratio=2.0,
        image_size=IMAGE_SIZE,
        patch_size=PATCH_SIZE,
        projection_dim=32,
        depth=2,
        num_image_tokens=IMAGE_TOKENS,
    )


def janus_vq() -> JanusVQVAEConfig:
    """The image-generation side, as small as it builds: 32 base channels (its GroupNorms take 32 groups), two
    resolutions of one residual block, a codebook of 64 entries of 8, heads of width 32 (the text width)."""
    return JanusVQVAEConfig(
        embed_dim=8,
        num_embeddings=64,
        latent_channels=32,
        base_channels=32,
        channel_multiplier=[1, 1],
        num_res_blocks=1,
        projection_dim=32,
        image_token_embed_dim=32,
    )


def build_janus() -> tuple[JanusForConditionalGeneration, JanusProcessor]:
    """Imitates deepseek-community/Janus-Pro-1B.

    Janus's tower (`janus_tower`: 2 blocks, width 32, 2 heads, 8 px patches on
    32x32 images, no CLS, ``post_layernorm`` over the patches); the aligner
    maps each of the 16 patches of ``last_hidden_state`` to the text width 32;
    a Llama text model (2 blocks, width 32) with tied embeddings, as the
    config's default; the VQ-VAE and generation heads of `janus_vq`. The
    processor writes ``num_image_tokens`` = 16 image tokens an image, between
    ``<begin_of_image>`` and ``<end_of_image>``. Norm weights and biases are
    drawn at random (`norms.randomise_norms`), so the tower's final norm is not
    a plain standardisation.
    """
    tokenizer = janus_tokenizer()
    config = JanusConfig(
        vision_config=janus_tower().to_dict(),
        text_config=LlamaConfig(**text_sizes(tokenizer)).to_dict(),
        vq_config=janus_vq().to_dict(),
        image_token_id=tokenizer.image_token_id,
    )
    model = JanusForConditionalGeneration(config)
    randomise_norms(model)
    processor = JanusProcessor(
        image_processor=JanusImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}),
        tokenizer=tokenizer,
        chat_template=JANUS_TEMPLATE,
        num_image_tokens=IMAGE_TOKENS,
    )
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"janus": build_janus}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/janus.py: Janus's tower, SigLIP's shape (32x32 images of 8 px patches, 16 patches, no CLS, 2 blocks,
    # width 32, 2 heads, MLP 64 wide from mlp_ratio 2, post_layernorm); every image resized and padded to 32x32; the
    # aligner reads tower_output (after the norm), patch by patch: 16 image tokens an image.
    "janus": Row(
        loads=Loads(("JanusForConditionalGeneration", "JanusProcessor", "TokenizersBackend")),
        image_tokens=(16, 16),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 16), (1, 16)),
        projected=batched((1, 16), (1, 16)),
        projector_reads=Reads("tower_output"),
        final_norm=True,
        rules=(scatter("janus"), *attention("janus", "JanusVisionAttention"), *LLAMA_ATTENTION),
        native={
            "vision": "model.vision_model", "projector": "model.aligner",
            "vision.norm": "model.vision_model.post_layernorm",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.encoder.layers", {**ENCODER_BLOCK,
                "self_attn.o_proj": "self_attn.projection_layer"}),
            **text_model("model.language_model"), "model.vqmodel": "model.vqmodel",
            "model.generation_embeddings": "model.generation_embeddings",
            "model.generation_aligner": "model.generation_aligner", "model.generation_head": "model.generation_head",
        },
    ),
}
