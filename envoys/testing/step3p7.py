"""A tiny Step-3.7 checkpoint: a layer-scaled ViT with two downsampling convolutions, run twice in one forward (each
image's global view, then the local crops of the images the processor crops), on a mixture-of-experts text model.

The builder returns an unsaved (`Step3p7ForConditionalGeneration`,
`Step3p7Processor`) pair with random float32 weights. The tower
(``model.vision_model``) has 2 blocks of width 32, 2 heads of 16, an MLP 64
wide (``mlp_ratio`` 2), patch 4, an axial 2D rotary embedding, learned
positions on a 12x12 grid (``image_size`` 48) resampled to each input's
grid, and two stride-2 convolutions after the blocks (32 -> 64 -> 128
channels), so a 48x48 view is 12x12 = 144 patches and 3x3 = 9 image tokens,
a 32x32 crop 8x8 = 64 patches and 2x2 = 4 tokens. The layer scales
``lambda_1`` and ``lambda_2`` (0.1 at init) are drawn from U(0.5, 1.5).

The image processor (``Step3p7ImageProcessor``: global view 48x48, crops of
`CROP` = 32 px, vision patch 4, downsampler stride 4) resizes every image to a
48x48 global view; an image whose longer side is over 48 px is also cut into
32 px crops on a grid snapped to the crop side: the 32x32 test image makes
none, the 64 (wide) x 48 (high) one 2 x 2 = 4 (48 snaps up to 64). Its tokens
are each crop's 4 (between ``<patch_start>`` and ``<patch_end>``, a
``<patch_newline>`` after each row of crops but the last), then the global
view's 9 (between ``<im_start>`` and ``<im_end>``): 9 and 4 * 4 + 9 = 25.

The text model is Step-3.7's: 2 blocks of width 32, 2 query heads and 1
key-value head of 16, q/k RMSNorms and a per-head sigmoid gate on the
attention's output; block 0 attends over a sliding window of
`SLIDING_WINDOW` = 16 keys and has a dense gated MLP 64 wide, block 1 attends
fully and has a mixture of 4 experts (``n_routed_experts``, the config's
``num_local_experts``), 2 a token (sigmoid router), 32 wide, plus a shared
expert 32 wide. Its RMSNorms scale by ``1 + weight`` (zeros at init): drawn from
N(0, 0.5); the tower's LayerNorms from U(0.5, 1.5) (`randomise_norms`).

The tokenizer is word-level (`envoys.testing.tokenizer`), with Step's image
markers and a shortened chat template.
"""

from __future__ import annotations

import torch
from transformers import (
    Step3p7Config,
    Step3p7ForConditionalGeneration,
    Step3p7ImageProcessor,
    Step3p7Processor,
)
from transformers.models.step3p7.modeling_step3p7 import Step3p7RMSNorm, Step3p7VisionEncoderLayer

from .contract import (
    SIGLIP,
    Loads,
    MoeRow,
    Row,
    Sizes,
    attention,
    batched,
    blocks,
    router,
    scatter,
    text_model,
)
from .norms import randomise_norms
from .sizes import text_sizes
from .tokenizer import TokenizersBackend, word_level_tokenizer

PATCH = 4
#: The global view's side and a local crop's, in pixels.
GLOBAL, CROP = 48, 32
EXPERTS, TOP_K = 4, 2
#: Keys block 0 (a sliding-window block) attends back over.
SLIDING_WINDOW = 16

IMAGE_TOKEN = "<im_patch>"
#: The markers ``Step3p7Processor`` writes around each view's tokens.
MARKERS = ("<im_start>", "<im_end>", "<patch_start>", "<patch_end>", "<patch_newline>")
BOS, TURN, END, PAD = "<|begin|>", "<|turn|>", "<|end|>", "<|pad|>"

#: Step's chat template, shortened: each image written as the processor's placeholder, which it expands per view.
CHAT_TEMPLATE = (
    BOS
    + "{% for message in messages %}"
    "{{ '" + TURN + "' + message['role'] + '\n' }}"
    "{% if message['content'] is string %}{{ message['content'] }}"
    "{% else %}{% for item in message['content'] %}"
    "{% if item['type'] == 'image' %}{{ '" + IMAGE_TOKEN + "' }}"
    "{% elif item['type'] == 'text' %}{{ item['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{{ '" + END + "\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '" + TURN + "assistant\n' }}{% endif %}"
)


def _tokenizer() -> TokenizersBackend:
    return word_level_tokenizer(special_tokens=[BOS, TURN, END, PAD, *MARKERS], named_tokens={"image_token": IMAGE_TOKEN},
                                chat_template=CHAT_TEMPLATE, eos_token=END, pad_token=PAD, bos_token=BOS)


def randomise_weights(model: torch.nn.Module) -> None:
    """Draw the LayerNorms' weights from U(0.5, 1.5) (`randomise_norms`), the RMSNorms' (``1 + weight``, zeros at init)
    from N(0, 0.5), and the tower's layer scales from U(0.5, 1.5)."""
    randomise_norms(model)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, Step3p7RMSNorm):
                module.weight.normal_(0.0, 0.5)
            if isinstance(module, Step3p7VisionEncoderLayer):
                module.lambda_1.uniform_(0.5, 1.5)
                module.lambda_2.uniform_(0.5, 1.5)


def build_step3p7() -> tuple[Step3p7ForConditionalGeneration, Step3p7Processor]:
    """Imitates stepfun-ai/Step-3.7-Flash: the module docstring's tower, projector and text model, ``Step3p7Processor``."""
    tokenizer = _tokenizer()
    text = text_sizes(
        tokenizer,
        head_dim=16,
        layer_types=["sliding_attention", "full_attention"],
        sliding_window=SLIDING_WINDOW,
        mlp_layer_types=["dense", "sparse"],
        moe_intermediate_size=32,
        share_expert_dim=32,
        n_routed_experts=EXPERTS,  # its num_local_experts
        num_experts_per_tok=TOP_K,
        tie_word_embeddings=False,
    )
    vision = {
        "hidden_size": 32, "mlp_ratio": 2.0, "num_hidden_layers": 2, "num_attention_heads": 2, "patch_size": PATCH,
        "image_size": GLOBAL, "rope_parameters": {"rope_type": "axial", "rope_theta": 10000.0},
    }
    config = Step3p7Config(text_config=text, vision_config=vision,
                           image_token_id=tokenizer.convert_tokens_to_ids(IMAGE_TOKEN))
    model = Step3p7ForConditionalGeneration(config)
    randomise_weights(model)
    image_processor = Step3p7ImageProcessor(size={"height": GLOBAL, "width": GLOBAL}, patch_size=CROP,
                                            vision_patch_size=PATCH)
    return model, Step3p7Processor(image_processor=image_processor, tokenizer=tokenizer, chat_template=CHAT_TEMPLATE)


#: The checkpoints this module builds, by name.
BUILDERS = {"step3p7": build_step3p7}


#: A Step-3.7 ViT block's native names under the standard ones (the family module's RENAME).
STEP3P7_VIT_BLOCK = {
    "self_attn": "self_attn", "self_attn.o_proj": "self_attn.out_proj", "input_layernorm": "layernorm_before",
    "post_attention_layernorm": "layernorm_after", "mlp": "mlp", "mlp.up_proj": "mlp.fc1", "mlp.down_proj": "mlp.fc2",
}

#: What the contract suite expects of these checkpoints (`envoys.testing.contract`), read off the builder's documented
#: configuration above, never off the code under test.
CONTRACTS = {
    # envoys/testing/step3p7.py: model.vision is the tower's first run, on the 48x48 global views: 12x12 = 144 patches
    # of 4 px a row, no CLS, one row per image; the two stride-2 convolutions fold them to 3x3 = 9 rows of 128
    # channels (projector.input, no tower value), the projector maps each to width 32. Tokens: the 32x32 image is not
    # cropped (9), the 64x48 one is cut into 2 x 2 crops of 32 px, 4 tokens each, before its view's 9 (25), so
    # image_features is not projector.output alone. 2 blocks, width 32, 2 heads of 16, MLP 64 (mlp_ratio 2). Text:
    # block 0 a dense MLP (no router), block 1 a mixture of 4 experts, 2 a token.
    "step3p7": Row(
        loads=Loads(("Step3p7ForConditionalGeneration", "Step3p7Processor", "TokenizersBackend")),
        image_tokens=(9, 25),
        sizes=Sizes(num_layers=2, patch_size=PATCH, image_size=GLOBAL, **SIGLIP),
        stream=batched((1, 144), (1, 144)),
        projected=batched((1, 9), (1, 9)),
        projector_reads=None,
        features_are_projected=False,
        text_gaps={"mlp.router_logits": (0,)},
        # both attention classes call the module's one eager kernel
        rules=(scatter("step3p7"), *attention("step3p7", "Step3p7VisionAttention"), "step3p7.Step3p7Attention",
               router("step3p7", "Step3p7TopKRouter")),
        native={
            "vision": "model.vision_model", "projector": "model.multi_modal_projector",
            "vision.patch_embed": "model.vision_model.embeddings.patch_embedding",
            **blocks("vision.layers", "model.vision_model.layers", STEP3P7_VIT_BLOCK),
            **text_model("model.language_model"),
        },
        moe=MoeRow(sparse=(1,), experts=EXPERTS, top_k=TOP_K),
    ),
}
