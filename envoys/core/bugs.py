"""Known transformers bugs that break a family's forward: detected by their condition, explained when they bite.

A family whose root forward fails on every call in some transformers release
(Llama 4's in 5.24.0) names the bug in its `Family` as a `KnownBug`: what
transformers does wrong, the workaround, a check of the *condition* on the
installed transformers (the forward reads a field its output lacks), never of
its version, and a test of whether an error is this bug's. While the condition
holds, `StandardizedTransformer.support` lists the root's ``output`` and
``generate`` as unavailable with the explanation, and the error a forward
raises is re-raised as a `TransformersBug` carrying it (the original chained
as its cause). A release that fixes the bug makes the condition false, and
both disappear by themselves.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


class TransformersBug(RuntimeError):
    """A forward failed on a known transformers bug; the message names the bug and the workaround."""


class BrokenLoad(TransformersBug):
    """transformers loaded the checkpoint in a state its own forward cannot run (a known bug of that release);
    raised by `StandardizedTransformer(...)` before anything is instrumented, naming the bug and the workaround."""


@dataclass(frozen=True)
class KnownBug:
    """A transformers bug that breaks a family's forward on every call.

    ``what`` says what transformers does wrong, ``workaround`` what to do
    instead; ``present()`` checks the condition on the installed transformers,
    ``raised(error)`` whether an error is this bug's.
    """

    what: str
    workaround: str
    present: Callable[[], bool]
    raised: Callable[[BaseException], bool]

    def reason(self) -> str | None:
        """The explanation while the condition holds, else None."""
        return f"{self.what}; {self.workaround}" if self.present() else None

    def translate(self, error: BaseException) -> TransformersBug | None:
        """The explained error for ``error`` when it is this bug's (and the bug is present), else None."""
        if not self.raised(error):
            return None
        reason = self.reason()
        return TransformersBug(f"{type(error).__name__}: {error}. This is a known transformers bug: {reason}") if reason else None
