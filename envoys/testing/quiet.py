"""What transformers says while the library builds models for itself, held back from the user.

The library builds tiny random models for its own ends: to find the rules
(`envoys.catalog`), for the census (`envoys.census`), for the tiny checkpoints
of the tests and the docs (`envoys.testing.build`). transformers remarks on
their tiny configs as it builds them: an attention implementation set on a
sub-config it cannot check, ``rope_parameters`` keys it does not read, a tower
that cannot switch its attention implementation. Those remarks are about the
library's own builds, not the user's model, so `quietly` keeps them from the
user (transformers' warnings and info, and Python warnings raised inside the
block) and keeps them in `HELD_BACK` for a maintainer to read. An error still
reaches the user as transformers raises or logs it, and transformers' remarks
on the user's own model are left as they are.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager

from transformers.utils import logging as transformers_logging

#: What transformers said inside `quietly`, most recent last: (its logger's level or the warning's category, the text).
HELD_BACK: list[tuple[str, str]] = []


@contextmanager
def quietly() -> Iterator[None]:
    """Inside the block, transformers' warnings and info and Python's warnings are kept from the user (in
    `HELD_BACK`); transformers' errors still show. Its verbosity and the warning filters are restored after."""
    verbosity = transformers_logging.get_verbosity()
    transformers_logging.set_verbosity_error()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield
    finally:
        transformers_logging.set_verbosity(verbosity)
        HELD_BACK.extend((warning.category.__name__, str(warning.message)) for warning in caught)
