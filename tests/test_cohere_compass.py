"""StandardizedTransformer on a tiny Cohere Compass checkpoint: Qwen3-VL's tower and DeepStack on parallel Cohere 2-style
text blocks.

What is particular to it (the spec's contracts run on it in
test_vision_contracts.py): the names land on Cohere Compass's modules; the
tower's attention runs once per image, at ``cu_seqlens``; DeepStack adds the
tapped tower block 0, merged by its own merger, after text block 0; the text
blocks are parallel (the attention and the MLP both read the one
``input_layernorm``'s output, and the block adds both to its input); block 1
(``full_attention``, ``rope_parameters`` None) gets no position embedding;
the logits are the head's output times ``logit_scale``. Expected numbers come
from the builder's documented config, the processor and the modules
themselves, never from the code under test.
"""

from __future__ import annotations

import nnsight
import torch
from family_inputs import eager_attention

from envoys.testing import chat_prompt, noise_image

#: 32x32 noise (16 patches, 4 tokens) and 48 high x 64 wide (48 patches, 12 tokens).
IMAGES = [noise_image(32, 32, seed=0), noise_image(64, 48, seed=1)]


CHECKPOINT = "cohere_compass"


def prompt(model) -> str:
    return chat_prompt(model.processor, len(IMAGES), "What is in the picture?")


def test_the_modules_are_cohere_compass_classes(model):
    assert type(model.vision._module).__name__ == "CohereCompassVisionModel"
    assert [type(block._module).__name__ for block in model.layers] == ["CohereCompassDecoderLayer"] * 2


def test_the_tower_attends_per_image_at_cu_seqlens(model):
    """The per-image kernel outputs, joined, are attention_head_outputs, and each is eager attention over its image's
    slice of the whole queries, keys and values; the slices are the processor's patches per image."""
    attention = model.vision.layers[-1].self_attn
    grid = model.processor(text=[prompt(model)], images=IMAGES, return_tensors="pt")["image_grid_thw"]
    with model.trace(prompt(model), images=IMAGES) as tracer:
        cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
        queries, keys, values = (attention.attention_queries.save(), attention.attention_keys.save(),
                                 attention.attention_values.save())
        per_image = nnsight.save([])
        for _ in tracer.iter[0:len(IMAGES)]:
            per_image.append(attention.source.attention_interface_2.output[0].save())
        heads = attention.attention_head_outputs.save()
    bounds = [0, *grid.prod(dim=1).cumsum(0).tolist()]
    assert bounds == [0, 16, 64] and cu_seqlens.tolist() == bounds
    assert queries.shape == (1, 2, 64, 16)
    assert torch.equal(torch.cat(list(per_image), dim=1), heads)
    for (a, b), output in zip(zip(bounds, bounds[1:]), per_image):
        q, k, v = (t[:, :, a:b] for t in (queries, keys, values))
        assert torch.equal(eager_attention(q, k, v, attention._module.scaling), output)


def test_deepstack_adds_the_tapped_block_merged_after_text_block_0(model):
    with model.trace(prompt(model), images=IMAGES) as tracer:
        mask = model.vision.image_token_mask.save()
        tapped = model.vision.layers[0].layer_output.save()
        merged = model.vision.deepstack_merger_list[0].output.save()
        out = model.layers[0].layer_output.save()
        added = model.layers[0].deepstack_output.save()
        entering = model.layers[1].input.save()
        tracer.stop()
    merger = model._module.model.visual.deepstack_merger_list[0]
    with torch.no_grad():
        assert torch.equal(merged, merger(tapped[0]))
    assert torch.equal(added, merged) and added.shape == (4 + 12, model.hidden_size)
    assert torch.equal(entering[mask], out[mask] + added) and torch.equal(entering[~mask], out[~mask])


def test_the_text_blocks_are_parallel(model):
    """The attention and the MLP both receive input_layernorm's output; the block adds both to its input."""
    with model.trace(prompt(model), images=IMAGES) as tracer:
        reads = nnsight.save([])
        for block in model.layers:
            layer_input = block.layer_input
            normed = block.input_layernorm.output
            attention_in = block.self_attn.inputs[1]["hidden_states"]
            attention, mlp_in = block.attention_output, block.mlp.input
            reads.append(nnsight.save([layer_input, normed, attention_in, attention, mlp_in, block.mlp_output,
                                       block.layer_output]))
        tracer.stop()
    for layer_input, normed, attention_in, attention, mlp_in, mlp, output in reads:
        assert torch.equal(attention_in, normed) and torch.equal(mlp_in, normed)
        assert torch.equal(layer_input + attention + mlp, output)


def test_the_global_block_has_no_position_embedding(model):
    """Block 0 (sliding_attention) gets M-RoPE's cos and sin; block 1 (full_attention, rope_parameters None) none."""
    text = model.config.get_text_config()
    assert text.layer_types == ["sliding_attention", "full_attention"] and text.rope_parameters["full_attention"] is None
    with model.trace(prompt(model), images=IMAGES) as tracer:
        sliding = model.layers[0].self_attn.inputs.save()
        full = model.layers[1].self_attn.inputs.save()
        tracer.stop()
    cos, sin = sliding[1]["position_embeddings"]
    assert cos.shape[-1] == 16 and not torch.equal(cos, torch.ones_like(cos))
    assert full[1]["position_embeddings"] is None


def test_the_logits_are_the_head_times_logit_scale(model):
    with model.trace(prompt(model), images=IMAGES):
        head = model.lm_head.output.save()
        logits = model.logits.save()
    assert model._module.logit_scale == 0.25
    assert torch.equal(logits, head * 0.25)
