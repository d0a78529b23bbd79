"""Tiny BLIP-2 and InstructBLIP checkpoints: a BLIP ViT, a Q-Former, a language projection, a decoder-only text model.

Both builders return an unsaved (model, stock processor) pair with random
float32 weights (seed the torch generator first; :func:`envoys.testing.build`
does). What they share (`blip_vision`, `QUERY_TOKENS`, `randomise_zeros`):

- the BLIP ViT: 2 pre-norm blocks of width 32, 2 heads, an MLP 64 wide, 8 px
  patches on 32x32 images (16 patches), the CLS token first (1 + 16 rows an
  image), ``post_layernorm`` over every row, ``qkv_bias`` on;
- a Q-Former of 2 blocks, width 32, 2 heads, an intermediate 64 wide,
  cross-attending the tower's output in every block (``cross_attention_frequency``
  1), with ``QUERY_TOKENS`` = 4 learned queries, so an image is 4 image tokens;
- the stock image processor (`BlipImageProcessor`), resizing every image to
  32x32; the tokenizers carry the prompt format (`QUESTION_TEMPLATE`), the
  stock processors keeping no chat template of their own; the stock processor writes ``num_query_tokens`` image tokens at the
  start of each prompt (before its BOS), once per prompt whatever the number of
  images: one image a prompt, several images go in several prompts.

The zero-initialised parameters (the learned queries, the ViT's query and value
biases) and the norms are drawn at random (`randomise_zeros`,
`norms.randomise_norms`), so the queries differ from one another and an
ablation of any of them changes something.
"""

from __future__ import annotations

import torch
from transformers import (
    Blip2Config,
    Blip2ForConditionalGeneration,
    Blip2Processor,
    Blip2QFormerConfig,
    Blip2VisionConfig,
    BlipImageProcessor,
    InstructBlipConfig,
    InstructBlipForConditionalGeneration,
    InstructBlipProcessor,
    InstructBlipQFormerConfig,
    InstructBlipVisionConfig,
    LlamaConfig,
    OPTConfig,
)

from .contract import ENCODER_BLOCK, LLAMA_ATTENTION, SIGLIP, Loads, Row, Sizes, attention, batched, blocks, scatter, text_model
from .norms import randomise_norms
from .sizes import text_sizes, vision_sizes
from .tokenizer import WORDS, TokenizersBackend, word_level_tokenizer

IMAGE_SIZE = 32
PATCH_SIZE = 8
#: The Q-Former's learned queries: image tokens an image.
QUERY_TOKENS = 4

BOS = "</s>"
EOS = "</s>"
LLAMA_BOS = "<s>"
PAD = "<pad>"
#: The image token: a plain added token, as on the hub's tokenizers, which name no ``image_token`` (the stock
#: processor then adds ``<image>`` itself and reads it as its image token).
IMAGE = "<image>"

#: BLIP-2's prompt format, reduced: ``Question: ... Answer:``; the processor writes the image tokens, so an image
#: entry of a message writes nothing.
QUESTION_TEMPLATE = (
    "{% for message in messages %}"
    "{% if message['content'] is string %}{{ 'Question: ' + message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'text' %}{{ 'Question: ' + item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ ' Answer:' }}{% endif %}"
)

#: The words of the prompts plus BLIP-2's.
BLIP_WORDS = (*WORDS, "Question", "Answer")


def blip_vision(config_class: type) -> Blip2VisionConfig | InstructBlipVisionConfig:
    """The BLIP ViT: 2 blocks of width 32, 2 heads, MLP 64, 8 px patches on 32x32 images, CLS first, qkv bias."""
    return config_class(**vision_sizes(image_size=IMAGE_SIZE, patch_size=PATCH_SIZE), qkv_bias=True)


def qformer_sizes(vocab_size: int) -> dict:
    """The Q-Former: 2 blocks of width 32, 2 heads, intermediate 64, cross-attention in every block over width 32."""
    return {
        "vocab_size": vocab_size, "hidden_size": 32, "num_hidden_layers": 2, "num_attention_heads": 2,
        "intermediate_size": 64, "cross_attention_frequency": 1, "encoder_hidden_size": 32,
    }


def randomise_zeros(model: torch.nn.Module) -> None:
    """Draw the learned queries (``query_tokens``, zeros at init) and the ViT's query and value biases from N(0, 0.5)."""
    with torch.no_grad():
        model.query_tokens.normal_(0.0, 0.5)
        for layer in model.vision_model.encoder.layers:
            layer.self_attn.qkv.bias.normal_(0.0, 0.5)


def image_processor() -> BlipImageProcessor:
    return BlipImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})


def opt_tokenizer() -> TokenizersBackend:
    """OPT's tokenizer, reduced: ``</s>`` begins every prompt (and ends it), ``<pad>`` pads, ``<image>`` is added."""
    return word_level_tokenizer(
        special_tokens=[BOS, PAD, IMAGE],
        named_tokens={},
        chat_template=QUESTION_TEMPLATE,
        bos_token=BOS,
        add_bos_token=True,
        eos_token=EOS,
        pad_token=PAD,
        words=BLIP_WORDS,
    )


def build_blip_2() -> tuple[Blip2ForConditionalGeneration, Blip2Processor]:
    """Imitates Salesforce/blip2-opt-2.7b.

    The BLIP ViT (`blip_vision`), the Q-Former (4 queries), the language
    projection to the text width 32 and an OPT text model: 2 pre-norm blocks
    (``do_layer_norm_before``) of width 32, 2 heads, ``ffn_dim`` 64, learned
    positions, tied embeddings. The processor writes 4 image tokens at the start
    of each prompt, before its ``</s>``.
    """
    tokenizer = opt_tokenizer()
    text = OPTConfig(
        vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, ffn_dim=64, num_attention_heads=2,
        max_position_embeddings=512, word_embed_proj_dim=32, do_layer_norm_before=True,
        bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    config = Blip2Config(
        vision_config=blip_vision(Blip2VisionConfig).to_dict(),
        qformer_config=Blip2QFormerConfig(**qformer_sizes(64)).to_dict(),
        text_config=text.to_dict(),
        num_query_tokens=QUERY_TOKENS,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
    )
    model = Blip2ForConditionalGeneration(config)
    randomise_zeros(model)
    randomise_norms(model)
    processor = Blip2Processor(image_processor=image_processor(), tokenizer=tokenizer, num_query_tokens=QUERY_TOKENS)
    return model, processor


def vicuna_tokenizer() -> TokenizersBackend:
    """Vicuna's (Llama's) tokenizer, reduced: ``<s>`` begins every prompt, ``</s>`` ends it, ``<image>`` is added."""
    return word_level_tokenizer(
        special_tokens=[LLAMA_BOS, EOS, PAD, IMAGE],
        named_tokens={},
        chat_template=QUESTION_TEMPLATE,
        bos_token=LLAMA_BOS,
        add_bos_token=True,
        eos_token=EOS,
        pad_token=PAD,
        words=BLIP_WORDS,
    )


def qformer_tokenizer() -> TokenizersBackend:
    """The Q-Former's own tokenizer (BERT's, reduced): the prompt's words, ``[CLS]`` first, ``[PAD]`` pads."""
    return word_level_tokenizer(
        special_tokens=["[PAD]", "[CLS]", "[SEP]"],
        named_tokens={},
        chat_template=QUESTION_TEMPLATE,
        bos_token="[CLS]",
        add_bos_token=True,
        eos_token="[SEP]",
        pad_token="[PAD]",
        words=BLIP_WORDS,
    )


def build_instructblip() -> tuple[InstructBlipForConditionalGeneration, InstructBlipProcessor]:
    """Imitates Salesforce/instructblip-vicuna-7b.

    The BLIP ViT (`blip_vision`), the Q-Former (4 queries, reading the prompt's
    ``qformer_input_ids`` beside them, from its own tokenizer), the language
    projection to the text width 32 and a Llama text model of
    `sizes.text_sizes`. The processor writes 4 image tokens at the start of each
    prompt, before its ``<s>``.
    """
    tokenizer, qformer_tokens = vicuna_tokenizer(), qformer_tokenizer()
    config = InstructBlipConfig(
        vision_config=blip_vision(InstructBlipVisionConfig).to_dict(),
        qformer_config=InstructBlipQFormerConfig(
            **qformer_sizes(len(qformer_tokens)), pad_token_id=qformer_tokens.pad_token_id).to_dict(),
        text_config=LlamaConfig(**text_sizes(tokenizer)).to_dict(),
        num_query_tokens=QUERY_TOKENS,
        image_token_id=tokenizer.convert_tokens_to_ids(IMAGE),
    )
    model = InstructBlipForConditionalGeneration(config)
    randomise_zeros(model)
    randomise_norms(model)
    processor = InstructBlipProcessor(image_processor=image_processor(), tokenizer=tokenizer,
                                      qformer_tokenizer=qformer_tokens, num_query_tokens=QUERY_TOKENS)
    return model, processor


#: The checkpoints this module builds, by name.
BUILDERS = {"blip-2": build_blip_2, "instructblip": build_instructblip}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/blip_2.py: the BLIP ViT on 32x32 images (any input resized) of 8 px patches, CLS first (1 + 16 rows),
    # 2 blocks, post_layernorm over every row; 4 Q-Former queries, 4 image tokens an image, one image a prompt (two
    # images are two prompts); the projector (the language projection) reads the Q-Former's output
    # (tests/test_blip_2_instructblip.py). OPT text: learned positions added before block 0, the MLP inline (no mlp_output).
    "blip-2": Row(
        loads=Loads(("Blip2ForConditionalGeneration", "Blip2Processor", "TokenizersBackend"), feature_token="<image>"),
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=None,
        prefix=1,
        final_norm=True,
        text_gaps={"mlp_output": (0, 1)},
        positions="language_model.model.decoder.embed_positions",
        text_alone=False,
        rules=(scatter("blip_2"), *attention("blip_2", "Blip2Attention"), "blip_2.Blip2QFormerMultiHeadAttention",
               *attention("opt", "OPTAttention")),
        native={
            "vision": "vision_model", "projector": "language_projection", "vision.norm": "vision_model.post_layernorm",
            "vision.patch_embed": "vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "vision_model.encoder.layers", {**ENCODER_BLOCK,
                "self_attn.o_proj": "self_attn.projection"}),
            **text_model("language_model.model.decoder", {"self_attn": "self_attn",
                "input_layernorm": "self_attn_layer_norm"}, norm="final_layer_norm"),
            "lm_head": "language_model.lm_head",
        },
    ),
    # envoys/testing/blip_2.py, build_instructblip: blip-2's tower, Q-Former sizes and processor (4 image tokens an image,
    # one image a prompt); the Q-Former also reads the prompt; a Llama text model.
    "instructblip": Row(
        loads=Loads(("InstructBlipForConditionalGeneration", "InstructBlipProcessor", "TokenizersBackend"), feature_token="<image>"),
        image_tokens=(4, 4),
        sizes=Sizes(num_layers=2, patch_size=8, image_size=32, **SIGLIP),
        stream=batched((1, 17), (1, 17)),
        projected=batched((1, 4), (1, 4)),
        projector_reads=None,
        prefix=1,
        final_norm=True,
        text_alone=False,
        rules=(scatter("instructblip"), *attention("instructblip", "InstructBlipAttention"),
               "instructblip.InstructBlipQFormerMultiHeadAttention", *LLAMA_ATTENTION),
        native={
            "vision": "vision_model", "projector": "language_projection", "vision.norm": "vision_model.post_layernorm",
            "vision.patch_embed": "vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "vision_model.encoder.layers", {**ENCODER_BLOCK,
                "self_attn.o_proj": "self_attn.projection"}),
            **text_model("language_model.model"), "lm_head": "language_model.lm_head",
        },
    ),
}
