"""dsgen: generate labelled sentence-pair datasets with language models and measure their worth.

The package imports nothing heavy at the top level so that ``dsgen --help`` answers at once;
torch, transformers and sentence-transformers are imported by the modules that need them. The library API
(:mod:`dsgen.api`: ``dsgen.compare(...)``, ``dsgen.judge_claims(...)``...) is imported on first use.
"""

__version__ = "0.1.0"

_API = ("analyze", "compare", "curve", "evaluate", "generate", "judge_claims", "plan", "regress", "run")  # dsgen.api.FUNCTIONS


def __getattr__(name: str) -> object:
    """``dsgen.compare`` and the other functions of :mod:`dsgen.api`, imported on first use (PEP 562)."""
    if name in _API:
        import importlib

        return getattr(importlib.import_module("dsgen.api"), name)
    raise AttributeError(f"module 'dsgen' has no attribute '{name}'")


def __dir__() -> list[str]:
    return sorted([*globals(), *_API])
