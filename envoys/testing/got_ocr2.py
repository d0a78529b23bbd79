"""A tiny GOT-OCR 2.0 checkpoint: a SAM-style encoder (windowed attention blocks, a convolutional neck), a
convolutional projector, a Qwen2 text model.

The builder returns an unsaved (`GotOcr2ForConditionalGeneration`,
`GotOcr2Processor`) pair with random float32 weights (seed the torch
generator first; :func:`envoys.testing.build` does). Every image is resized to
128x128 and cut into 2 pixel patches: a 64x64 grid of 4096 patches, which the
projector's two stride-2 convolutions fold to 16x16 = 256 image tokens, the
count the stock processor writes for an image (its ``num_image_tokens``, 256,
is a class attribute that a saved processor does not keep, so the tower's grid
is sized to it). Both blocks attend in 14x14 windows (the grid padded to
70x70, 25 windows an image): a global block over the 4096 patches would cost
seconds a forward on CPU, so the global block is PP-Chart2Table's (its
builder's processor lets the grid be smaller).
"""

from __future__ import annotations

import torch
from transformers import GotOcr2Config, GotOcr2ForConditionalGeneration, GotOcr2Processor, GotOcr2VisionConfig
from transformers.models.got_ocr2.image_processing_got_ocr2 import GotOcr2ImageProcessor

from .contract import SIGLIP, Loads, PatternRow, Row, Sizes, attention, batched, blocks, scatter, text_model
from .llava import qwen2_text
from .norms import randomise_norms
from .tokenizer import TokenizersBackend, word_level_tokenizer

IMAGE_SIZE = 128
PATCH_SIZE = 2
WINDOW = 14
#: The image tokens of one image: the 64x64 patch grid after two stride-2 convolutions, 16x16.
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE // 4) ** 2  # 256

#: The system turn the stock processor writes when it builds its own prompt (GOT-OCR 2.0 ships no chat template).
SYSTEM = "You should follow the instructions carefully and explain your answers in detail."


def ocr_template(image: str) -> str:
    """ChatML as GOT-OCR 2.0's processor writes its own prompt (the system turn, no newline between turns), each
    image entry written as ``image`` on its own line before the text."""
    return (
        "{{ '<|im_start|>system\n" + SYSTEM + "<|im_end|>' }}"
        "{% for message in messages %}"
        "{{ '<|im_start|>' + message['role'] + '\n' }}"
        "{% if message['content'] is string %}{{ message['content'] }}"
        "{% else %}{% for item in message['content'] %}"
        "{% if item['type'] == 'image' %}{{ '" + image + "\n' }}"
        "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
        "{% endfor %}{% endif %}"
        "{{ '<|im_end|>' }}"
        "{% endfor %}"
        "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
    )


def ocr_tokenizer(template: str) -> TokenizersBackend:
    """GOT-OCR 2.0's tokenizer (Qwen's): ChatML turns, ``<img>`` and ``</img>`` around an image's ``<imgpad>`` tokens."""
    return word_level_tokenizer(
        special_tokens=["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<img>", "</img>"],
        named_tokens={"image_token": "<imgpad>"},
        chat_template=template,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )


def sam_tower(config_class: type = GotOcr2VisionConfig, image_size: int = IMAGE_SIZE,
              global_blocks: tuple[int, ...] = ()) -> GotOcr2VisionConfig:
    """The SAM-style encoder: 2 blocks of width 32, 2 heads, MLP 64 wide, 2 pixel patches on ``image_size``
    images; 14x14 windows but on ``global_blocks``; absolute and relative position embeddings; a neck to 16
    channels (``output_channels``, apart from both widths). ``initializer_range`` 0.02, not the config's 1e-10,
    which leaves every weight of the tower near zero."""
    return config_class(
        hidden_size=32, num_hidden_layers=2, num_attention_heads=2, mlp_dim=64, output_channels=16,
        image_size=image_size, patch_size=PATCH_SIZE, window_size=WINDOW, global_attn_indexes=list(global_blocks),
        initializer_range=0.02,
    )


def randomise_positions(model: torch.nn.Module) -> None:
    """Draw the tower's position embeddings, absolute and relative, which start at zero (an ablation of them would
    change nothing), and every norm's weight and bias."""
    tower = model.model.vision_tower
    with torch.no_grad():
        tower.pos_embed.normal_(0.0, 0.5)
        for layer in tower.layers:
            layer.attn.rel_pos_h.normal_(0.0, 0.5)
            layer.attn.rel_pos_w.normal_(0.0, 0.5)
    randomise_norms(model)


def build_got_ocr2() -> tuple[GotOcr2ForConditionalGeneration, GotOcr2Processor]:
    """Imitates stepfun-ai/GOT-OCR-2.0-hf (1024x1024 images of 16 pixel patches, 256 image tokens).

    `sam_tower`; the projector folds the neck's 16 channels through two 3x3
    stride-2 convolutions (to 32, then to the text width 32) and a linear
    layer: 256 image tokens an image. Qwen2 text model (`envoys.testing.llava.qwen2_text`).
    The stock processor, with the stock image processor at 128x128 (no
    cropping to patches); the chat template writes ``<img><imgpad></img>`` per
    image, which the processor expands to 256 ``<imgpad>``.
    """
    tokenizer = ocr_tokenizer(ocr_template("<img><imgpad></img>"))
    config = GotOcr2Config(vision_config=sam_tower(), text_config=qwen2_text(tokenizer),
                           image_token_index=tokenizer.image_token_id, image_seq_length=IMAGE_TOKENS)
    model = GotOcr2ForConditionalGeneration(config)
    randomise_positions(model)
    image_processor = GotOcr2ImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return model, GotOcr2Processor(image_processor=image_processor, tokenizer=tokenizer,
                                   chat_template=tokenizer.chat_template)


#: The checkpoints this module builds, by name.
BUILDERS = {"got_ocr2": build_got_ocr2}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/got_ocr2.py: a SAM-style encoder on 128x128 images (any input resized) of 2 px patches, a 64x64 grid
    # (4096 patches); both blocks in 14x14 windows, the grid padded to 70x70: 25 windows of 196 an image; no final
    # norm; the neck then the projector's two stride-2 convolutions fold the grid to 16x16 = 256 image tokens (the
    # projector reads the neck's output: tests/test_got_ocr2.py).
    "got_ocr2": Row(
        loads=Loads(("GotOcr2ForConditionalGeneration", "GotOcr2Processor", "TokenizersBackend")),
        image_tokens=(256, 256),
        sizes=Sizes(num_layers=2, patch_size=2, image_size=128, **SIGLIP),
        stream=batched((1, 4096), (1, 4096)),
        projected=batched((1, 256), (1, 256)),
        projector_reads=None,
        pattern=PatternRow(rows={0: (50, 196), 1: (50, 196)}),
        rules=(scatter("got_ocr2"), "got_ocr2.vision-attention", "got_ocr2.vision-windows",
               *attention("qwen2", "Qwen2Attention")),
        native={
            "vision": "model.vision_tower", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_tower.patch_embed",
            **blocks("vision.layers", "model.vision_tower.layers", {"self_attn": "attn",
                "self_attn.o_proj": "attn.proj", "input_layernorm": "layer_norm1",
                "post_attention_layernorm": "layer_norm2", "mlp": "mlp", "mlp.up_proj": "mlp.lin1",
                "mlp.down_proj": "mlp.lin2"}),
            **text_model("model.language_model"),
        },
    ),
}
