"""Generation: the self-debiasing decode loop and the generators built on it."""

from dsgen.registry import Registry


def _builtins() -> None:
    import dsgen.generation.debiased  # noqa: F401
    import dsgen.generation.human  # noqa: F401


GENERATORS: Registry = Registry("generator", builtins=_builtins)
