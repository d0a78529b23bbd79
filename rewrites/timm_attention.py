"""timm's rotary attention (``timm.layers.attention.AttentionRope``): its eager branch's scores and probabilities, and
the queries and keys after the rotary embedding.

Found from the forward's shape (`TEMPLATES`, through `rewrites.found`): an
attention forward that projects with ``self.qkv``, rotates the queries and
keys with ``torch.cat`` (the prefix tokens kept, the rest rotated by
``apply_rot_embed_cat``), then takes one of two branches by the instance's
``fused_attn``: torch's fused kernel (``F.scaled_dot_product_attention``), or
the eager one inline, ``softmax(maybe_add_mask(q * scale @ k^T, bias))``. The
timm Perception Encoder that PerceptionLM's ``TimmWrapper`` holds
(``vit_pe_*``, timm's ``Eva`` with ``attn_type='rope'``) attends so. It is not
transformers' shared attention interface: the kernel is chosen by timm, per
instance, not by ``attn_implementation`` (`envoys.towers.timm_vit` says how a
model loaded eager runs the eager branch).

Sites, as nnsight's ``.source`` labels them:

- ``torch_cat_0``, ``torch_cat_1``: the queries and the keys after the rotary
  embedding, ``[images, heads, tokens, head_dim]`` (what both branches use; the
  rotation runs only where the tower passes ``rope``);
- ``maybe_add_mask_0`` (eager only): its output is the scores entering the
  softmax, ``[images, heads, tokens, tokens]`` (the scaled products, plus the
  mask where one is given);
- ``attn_softmax_0`` (eager only): its output is the probabilities, before
  dropout and before they weight the values.

timm is another package than transformers, released on its own, so the
snapshots per transformers release do not pin this forward. Its drift is caught
where the rule is built: a timm forward whose calls differ in number from these
sites (a third ``torch.cat``, the softmax moved into a helper) does not fit the
template and gets no rule, so the values are `Unavailable` naming the missing
site; a forward that still fits but names a site otherwise fails to build with
the compiler's `DriftError`, naming the rule, the class, the file and what was
found. The template's shape (one ``self.qkv``, one fused kernel call) keeps it
to this forward.
"""

from .found import Template

#: The queries after the rotary embedding (output): the first ``torch.cat``.
QUERIES_SITE = "torch_cat_0"
#: The keys after the rotary embedding (output): the second ``torch.cat``.
KEYS_SITE = "torch_cat_1"
#: On the eager branch, the scores entering the softmax (output), the mask added where there is one.
SCORES_SITE = "maybe_add_mask_0"
#: On the eager branch, the probabilities (output).
SOFTMAX_SITE = "attn_softmax_0"

SITES = {
    "torch.cat": (QUERIES_SITE, KEYS_SITE),
    "maybe_add_mask": (SCORES_SITE,),
    "attn.softmax": (SOFTMAX_SITE,),
}

TEMPLATES = (
    Template(
        "rope-attention",
        SITES,
        "the queries and keys after the rotary embedding (torch_cat_0, _1) and, on the eager branch, the scores "
        "(maybe_add_mask_0) and the probabilities (attn_softmax_0)",
        shape={"self.qkv": 1, "F.scaled_dot_product_attention": 1, "apply_rot_embed_cat": 2},
    ),
)
