"""Terminal output: one rich console for every command, readable in a terminal and in a CI log.

On a terminal rich fits tables to the window. When stdout is not a terminal (a CI log, a pipe)
rich would assume 80 columns and cut every cell of a wide table to "78.…"; there the console
is wide enough for any table dsgen prints (or ``$COLUMNS`` when set), so logs read in full.
"""

from __future__ import annotations

import os
import sys
from typing import Any

LOG_WIDTH = 240


def console(stderr: bool = False) -> Any:
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    if stream.isatty():
        return Console(file=stream)
    width = int(os.environ.get("COLUMNS", "0") or 0) or LOG_WIDTH
    return Console(file=stream, width=width, soft_wrap=False)
