"""A tiny PP-Chart2Table checkpoint: GOT-OCR 2.0's classes (`envoys.testing.got_ocr2`) under PP-Chart2Table's configs,
its own processor and image processor.

transformers has no modeling file for PP-Chart2Table: its config maps to
`GotOcr2ForConditionalGeneration`. Its processor is a plain `ProcessorMixin`
that expands no placeholder (it has no ``image_token``): the prompt holds every
image token itself, so the chat template writes ``<img>``, one ``<imgpad>``
per image token and ``</img>``. That lets the tiny grid be smaller than
GOT-OCR 2.0's: 64x64 images of 2 pixel patches, a 32x32 grid of 1024 patches,
8x8 = 64 image tokens, and block 1 global (over the 1024 patches), block 0
windowed (14x14 windows, the grid padded to 42x42, 9 windows an image).
"""

from __future__ import annotations

from transformers import GotOcr2ForConditionalGeneration, PPChart2TableConfig, PPChart2TableProcessor
from transformers.models.pp_chart2table.configuration_pp_chart2table import PPChart2TableVisionConfig
from transformers.models.pp_chart2table.image_processing_pp_chart2table import PPChart2TableImageProcessor

from .contract import SIGLIP, Loads, PatternRow, Row, Sizes, attention, batched, blocks, scatter, text_model
from .got_ocr2 import PATCH_SIZE, ocr_template, ocr_tokenizer, randomise_positions, sam_tower
from .llava import qwen2_text

IMAGE_SIZE = 64
#: The image tokens of one image: the 32x32 patch grid after two stride-2 convolutions, 8x8.
IMAGE_TOKENS = (IMAGE_SIZE // PATCH_SIZE // 4) ** 2  # 64


def build_pp_chart2table() -> tuple[GotOcr2ForConditionalGeneration, PPChart2TableProcessor]:
    """Imitates PaddlePaddle/PP-Chart2Table_safetensors (GOT-OCR 2.0's sizes: 1024x1024 images of 16 pixel patches).

    `envoys.testing.got_ocr2.sam_tower` on 64x64 images, block 1 global; the
    projector and the Qwen2 text model as on the ``got_ocr2`` checkpoint. The
    stock processor with the stock image processor at 64x64; the chat template
    writes ``<img>`` + 64 ``<imgpad>`` + ``</img>`` per image.
    """
    tokenizer = ocr_tokenizer(ocr_template("<img>" + "<imgpad>" * IMAGE_TOKENS + "</img>"))
    config = PPChart2TableConfig(
        vision_config=sam_tower(PPChart2TableVisionConfig, image_size=IMAGE_SIZE, global_blocks=(1,)),
        text_config=qwen2_text(tokenizer), image_token_index=tokenizer.image_token_id, image_seq_length=IMAGE_TOKENS,
    )
    model = GotOcr2ForConditionalGeneration(config)
    randomise_positions(model)
    image_processor = PPChart2TableImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE})
    return model, PPChart2TableProcessor(image_processor=image_processor, tokenizer=tokenizer,
                                         chat_template=tokenizer.chat_template)


#: The checkpoints this module builds, by name.
BUILDERS = {"pp_chart2table": build_pp_chart2table}


#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builders' documented
#: configurations above, never off the code under test.
CONTRACTS = {
    # envoys/testing/pp_chart2table.py: GOT-OCR 2.0's classes on 64x64 images of 2 px patches, a 32x32 grid (1024
    # patches); block 0 in 14x14 windows (the grid padded to 42x42: 9 windows of 196 an image), block 1 global; 8x8 = 64
    # image tokens, written whole by the chat template.
    "pp_chart2table": Row(
        loads=Loads(("GotOcr2ForConditionalGeneration", "PPChart2TableProcessor", "TokenizersBackend"), placeholder_token="<img>"),
        image_tokens=(64, 64),
        sizes=Sizes(num_layers=2, patch_size=2, image_size=64, **SIGLIP),
        stream=batched((1, 1024), (1, 1024)),
        projected=batched((1, 64), (1, 64)),
        projector_reads=None,
        pattern=PatternRow(rows={0: (18, 196)}),
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
