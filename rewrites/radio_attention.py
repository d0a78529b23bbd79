"""RADIO's attention: one kernel call for a single image, one per image when several are packed.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): an
attention forward with three projections' transposes and three kernel calls,
one of them per image over ``torch.split`` of the packed queries, keys and
values.

``RadioAttention.forward`` projects the packed stream ``[1, tokens, width]``
(every image's cls and register tokens, then its patches, image after image)
to queries, keys and values, each ``self.x_proj(hidden_states).view(...).transpose(1, 2)``
(``transpose_0`` queries, ``transpose_1`` keys, ``transpose_2`` values,
``[1, heads, tokens, head_dim]``, no rotary embedding), then takes one of three
branches by what the encoder passed as ``cu_seqlens``:

- ``attention_interface_1``: one image (``cu_seqlens`` None), one dense call;
- ``attention_interface_2``: several images under flash attention, one varlen call;
- ``attention_interface_3``: several images otherwise, one call per image, inside
  a list comprehension over ``torch.split`` of the queries, keys and values
  (``torch_split_0``, fired three times: queries, keys, values; argument 1 the
  images' lengths).

The dense call and the per-image call drill into the eager kernel the forward
binds by default, whose softmax is each call's pattern.

The projections run on every branch, so the whole queries, keys and values
are served there, whatever the image count or attention implementation.

Before transformers 5.18 RADIO's attention had another form, which does not
have this shape and gets no rule; no family used it (Nemotron-H Omni, which
holds RADIO's tower, came in 5.18).
"""

from .found import Template

#: Queries, keys and values, each whole, as the projections' transposes return them.
PROJECTION_SITES = ("transpose_0", "transpose_1", "transpose_2")
#: One image: one dense kernel call.
ONE_IMAGE_SITE = "attention_interface_1"
#: Several images, not flash: one kernel call per image.
PER_IMAGE_SITE = "attention_interface_3"
#: Splits queries, keys and values per image (occurrence 0, 1, 2); argument 1 is the images' lengths.
SPLIT_SITE = "torch_split_0"

SITES = {
    "transpose": PROJECTION_SITES,
    "attention_interface": (ONE_IMAGE_SITE, "attention_interface_2", PER_IMAGE_SITE),
    "torch.split": (SPLIT_SITE,),
}

TEMPLATES = (
    Template(
        "vision-attention",
        SITES,
        "the whole queries, keys and values (transpose_0..2), the per-image split (torch_split_0) and the kernel "
        "calls: dense (_1), flash (_2), per image (_3)",
        drill_kernel=(ONE_IMAGE_SITE, PER_IMAGE_SITE),
    ),
)
