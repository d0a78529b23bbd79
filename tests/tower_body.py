"""Where a SigLIP / CLIP tower keeps its embeddings, encoder and norms, for tests that reach the native modules.

``SiglipVisionModel`` and ``CLIPVisionModel`` hold them themselves on recent
transformers, and one level down, in the vision transformer they wrap
(``vision_model``), on older releases; the test asks the loaded tower which.
"""

from __future__ import annotations

from typing import Any


def tower_body(tower: Any) -> Any:
    """The module (or, given an envoy, the envoy) that holds ``tower``'s ``embeddings``, ``encoder`` and norms:
    ``tower`` itself, or its ``vision_model`` where the installed transformers nests one."""
    module = getattr(tower, "_module", tower)
    return tower.vision_model if hasattr(module, "vision_model") else tower


def assert_siglip_wrapper_names(model: Any) -> None:
    """The standard names of a wrapper whose inner model holds a SigLIP ``vision_tower``, a
    ``multi_modal_projector`` and a ``language_model`` reach those native modules (the tower's blocks, norm and
    patch embedding, the text model's blocks, embedding and norm)."""
    host = model._module.model
    body = tower_body(host.vision_tower)
    assert model.vision._module is host.vision_tower and model.projector._module is host.multi_modal_projector
    assert [layer._module for layer in model.vision.layers] == list(body.encoder.layers)
    assert model.vision.norm._module is body.post_layernorm
    assert model.vision.patch_embed._module is body.embeddings.patch_embedding
    text = host.language_model
    assert [layer._module for layer in model.layers] == list(text.layers)
    assert model.embed_tokens._module is text.embed_tokens and model.norm._module is text.norm
