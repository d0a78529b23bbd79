"""What the family tests give a tiny checkpoint and compute beside it: the prompt, the processor's grid, and one
image's eager attention."""

from __future__ import annotations

import nnsight
import torch

from envoys.families import Family, family_for
from envoys.testing import chat_prompt


def prompt(model, images) -> str:
    """One user turn holding one image placeholder per image, then a question, in the model's chat template."""
    return chat_prompt(model.processor, len(images), "What is in the picture?")


def grid(model, images) -> torch.Tensor:
    """The stock processor's ``image_grid_thw``: ``[t, h, w]`` patches per image."""
    return model.processor(text=[prompt(model, images)], images=images, return_tensors="pt")["image_grid_thw"]


def eager_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, scaling: float) -> torch.Tensor:
    """One image's attention as transformers' eager kernel computes it: [1, heads, n, d] in, [1, n, heads, d] out."""
    weights = torch.softmax(torch.matmul(q, k.transpose(2, 3)) * scaling, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(weights, v).transpose(1, 2).contiguous()


def attends_per_image(model, images, block: int = -1) -> list[int]:
    """Each image's patch count, after checking a packed tower block's per-image attention against its values.

    The attention's ``cu_seqlens`` are the bounds of the processor's ``image_grid_thw``; the whole queries, keys
    and values are ``[1, heads, patches, head_dim]``; the kernel's outputs, one call per image, joined are
    ``attention_head_outputs``, which is what ``o_proj`` receives; and each call's output is eager attention over
    its image's slice of the whole queries, keys and values.
    """
    attention = model.vision.layers[block].self_attn
    with model.trace(prompt(model, images), images=images) as tracer:
        cu_seqlens = attention.inputs[1]["cu_seqlens"].save()
        queries = attention.attention_queries.save()
        keys = attention.attention_keys.save()
        values = attention.attention_values.save()
        per_image = nnsight.save([])
        for _ in tracer.iter[0:len(images)]:
            per_image.append(attention.source.attention_interface_2.output[0].save())
        heads = attention.attention_head_outputs.save()
        projected_in = attention.o_proj.input.save()
    sizes = [int(t * h * w) for t, h, w in grid(model, images)]
    bounds = [0, *torch.tensor(sizes).cumsum(0).tolist()]
    assert cu_seqlens.tolist() == bounds
    native = attention._module
    assert queries.shape == keys.shape == values.shape == (1, native.num_heads, bounds[-1], native.head_dim)
    assert not torch.equal(queries, keys)
    assert [output.shape[1] for output in per_image] == sizes
    assert torch.equal(torch.cat(list(per_image), dim=1), heads)
    assert torch.equal(heads.reshape(projected_in.shape), projected_in)
    for (a, b), output in zip(zip(bounds, bounds[1:]), per_image):
        q, k, v = (t[:, :, a:b] for t in (queries, keys, values))
        assert torch.equal(eager_attention(q, k, v, native.scaling), output)
    return sizes


def merge_block_reaches_its_token_alone(model, images, merged: tuple[int, int]) -> None:
    """Zeroing one 2x2 block of image 1's patch grid in tower_output (patch rows 2-3, columns 4-5) changes the image
    token at that block's cell (1, 2) of image 1's merged grid, ``merged`` = (rows, columns), and no other image token."""
    vision = model.vision
    text = prompt(model, images)
    with model.trace(text, images=images):
        clean = vision.image_features.save()
    with model.trace(text, images=images):
        tower = vision.tower_output
        cells = vision.patch_grid(tower, image=1)
        cells[2:4, 4:6] = 0  # the merge block at merged cell (1, 2)
        vision.place_patch_grid(cells, tower, image=1)
        edited = vision.image_features.save()
    before, after = vision.token_grid(clean, image=1), vision.token_grid(edited, image=1)
    assert before.shape[:2] == merged
    assert (before != after).any(-1).nonzero().tolist() == [[1, 2]]
    assert torch.equal(vision.token_grid(clean, image=0), vision.token_grid(edited, image=0))


def family_of(name: str) -> Family:
    """The family of the tiny checkpoint ``name`` (``llava-siglip``'s is llava's; a model_type with a dash is its own)."""
    for model_type in dict.fromkeys((name, name.rpartition("-")[0], name.partition("-")[0])):
        try:
            return family_for(model_type)
        except ValueError:
            continue
    raise ValueError(f"no family for the tiny checkpoint {name!r}")
