"""Did-you-mean hints: the one place that turns an unknown name into a suggestion."""

from __future__ import annotations

import difflib
from collections.abc import Iterable


def close_matches(name: str, choices: Iterable[str], n: int = 3) -> list[str]:
    """The known names closest to ``name`` (best first)."""
    return difflib.get_close_matches(name, sorted(set(choices)), n=n)


def did_you_mean(name: str, choices: Iterable[str], n: int = 1) -> str:
    """``" (did you mean 'x'?)"`` or ``" (did you mean 'x' or 'y'?)"``; empty when nothing is close."""
    close = close_matches(name, choices, n)
    return f" (did you mean {' or '.join(repr(c) for c in close)}?)" if close else ""


def unknown(kind: str, name: str, choices: Iterable[str], n: int = 1) -> str:
    """One line for an unknown name: ``unknown method 'dnio' (did you mean 'dino'?); known: a, b``."""
    choices = sorted(set(choices))
    return f"unknown {kind} '{name}'{did_you_mean(name, choices, n)}; known: {', '.join(choices)}"
