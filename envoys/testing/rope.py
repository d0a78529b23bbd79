"""The rotary-embedding fields of a tiny config, as the installed transformers spells them.

transformers 5 takes one ``rope_parameters`` dict (``rope_type``, ``rope_theta``
and the family's fields such as ``mrope_section``); 4.x takes ``rope_theta``
beside a ``rope_scaling`` dict of the other fields (None when there are none,
which 4.x's Llama 4 reads as plain RoPE).
"""

from __future__ import annotations

from typing import Any

import transformers
from packaging.version import Version

#: Whether the installed release's configs take ``rope_parameters`` (transformers 5) rather than ``rope_scaling``.
TAKES_ROPE_PARAMETERS = Version(transformers.__version__).major >= 5


def rope(theta: float, **fields: Any) -> dict[str, Any]:
    """Config fields for default RoPE with base ``theta`` and ``fields`` (``mrope_section``, ...)."""
    if TAKES_ROPE_PARAMETERS:
        return {"rope_parameters": {"rope_type": "default", "rope_theta": theta, **fields}}
    return {"rope_theta": theta, "rope_scaling": {"rope_type": "default", **fields} if fields else None}
