"""Generation: the self-debiasing decode loop and the generators built on it."""

from dsgen.generation.base import GenerationContext, Generator
from dsgen.registry import Registry


def _builtins() -> None:
    import dsgen.generation.debiased  # noqa: F401
    import dsgen.generation.human  # noqa: F401
    import dsgen.generation.openai_api  # noqa: F401  (the openai client is imported when a request is made)


GENERATORS: Registry[type[Generator]] = Registry("generator", base_cls=Generator, entry_point_group="dsgen.generators",
                                                 builtins=_builtins)

__all__ = ["GENERATORS", "Generator", "GenerationContext"]
