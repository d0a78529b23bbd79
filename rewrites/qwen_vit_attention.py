"""The per-image attention of a packed tower: one attention-kernel call over every image, or one per image.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): an
attention forward that calls the shared kernel twice (``attention_interface``:
a flash-attention call over the whole packed stream, at ``cu_seqlens``, and,
on every other implementation, a call per image inside a loop or a
comprehension), ``torch.split`` once (queries, keys and values cut at
``cu_seqlens``) and ``torch.cat`` once (the per-image outputs joined back).
The Qwen ViTs' attention reads so, and that of the towers built on its forward
(the packed SigLIP-shaped towers among them), with a rotary embedding or
without, its per-image calls in a list comprehension or passed straight to the
join; the shared attention rule (`rewrites.attention`) would not find their
kernel called once.

Sites, as nnsight names them (the kernel's annotated assignment is
``attention_interface_0``):

- ``attention_interface_1``: the flash-attention call, once, over every image;
- ``torch_split_0``: splits queries, keys and values at ``cu_seqlens``, fired
  three times (occurrence 0 queries, 1 keys, 2 values); its argument 0 is the
  whole tensor, ``[1, heads, patches, head_dim]``, queries and keys after the
  2D rotary embedding where there is one;
- ``attention_interface_2``: the kernel call per image (or window), once each,
  drilled into the eager kernel the forward binds by default: inside it,
  ``nn_functional_softmax_0`` takes that call's scores and returns its
  probabilities, ``[1, heads, patches of the call, patches of the call]``;
- ``torch_cat_0``: joins the per-image outputs back, ``[1, patches, heads, head_dim]``.

An audio tower's attention over the packed chunks of its clips has the same
shape (one kernel call per chunk, at ``cu_seqlens``, no rotary embedding): a
class whose name says it is one (``Audio``: the Qwen omni thinkers'
Whisper-like encoders) gets ``audio-attention`` (`AUDIO`, tried first), any
other ``vision-attention`` (`VISION`).

Before transformers 5.1 the kernel is assigned twice, so nnsight numbers the
two calls ``attention_interface_2`` and ``_3``; they are served as ``_1`` and
``_2`` (`BEFORE_5_1`: the calls are the same, so the shape does not tell the
releases apart and the variant does).
"""

from instrument import Variant

from .found import Template

FLASH_SITE = "attention_interface_1"  #: flash attention: one call over every image
PER_IMAGE_SITE = "attention_interface_2"  #: the kernel call per image (or window)
SPLIT_SITE = "torch_split_0"  #: queries (occurrence 0), keys (1), values (2), split at cu_seqlens
JOIN_SITE = "torch_cat_0"  #: the per-image outputs joined back

SITES = {
    "attention_interface": (FLASH_SITE, PER_IMAGE_SITE),
    "torch.split": (SPLIT_SITE,),
    "torch.cat": (JOIN_SITE,),
}


BEFORE_5_1 = Variant(
    "<5.1",
    sites={**SITES, "attention_interface": ("attention_interface_2", "attention_interface_3")},
    serve_as={"attention_interface_2": FLASH_SITE, "attention_interface_3": PER_IMAGE_SITE},
    note="the kernel is assigned twice before the calls, which nnsight numbers attention_interface_2 and _3",
)


#: An audio tower's attention: the same forward over the packed chunks of its clips, told apart by the class's name
#: (tried first, as its shape is the vision attention's).
AUDIO = Template(
    "audio-attention", SITES, "the per-chunk attention kernel calls of the audio tower and what surrounds them",
    variants=(BEFORE_5_1,), named="Audio",
)

#: A packed vision tower's attention: any other class whose forward has the shape.
VISION = Template(
    "vision-attention", SITES, "the per-image attention kernel calls and what surrounds them", variants=(BEFORE_5_1,),
    drill_kernel=(PER_IMAGE_SITE,),
)

TEMPLATES = (AUDIO, VISION)
