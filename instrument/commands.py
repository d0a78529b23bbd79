"""How the library's commands end: with their own status, and quietly when their reader stops early."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import NoReturn


def run(main: Callable[[], int]) -> NoReturn:
    """Exit with ``main()``'s status; exit 1 without a traceback when stdout's reader closed the pipe (``| head``)."""
    try:
        status = main()
        sys.stdout.flush()  # the last of the output, inside the try
    except BrokenPipeError:  # as the shell's own tools do
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # so the exit's flush finds no pipe
        sys.exit(1)
    sys.exit(status)
