"""A ``Method``: a recipe that composes a generator, postprocessing, a labeller, a reweighter and a
trainer by name and configuration. It holds no algorithm of its own.

Built-in methods live in ``methods/`` (installed as ``dsgen.methods``), one file per paper,
registered with ``@METHODS.register(name)`` on a function that returns the :class:`Method`.
Third-party packages expose theirs in the ``dsgen.methods`` entry-point group, pointing at a
:class:`Method` or at such a function::

    [project.entry-points."dsgen.methods"]
    my-method = "my_package.methods:my_method"
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from dsgen.errors import DsgenError
from dsgen.registry import Registry


@dataclass(frozen=True)
class Method:
    """One method's recipe.

    Args:
        name: registry name (set by the registry when left empty).
        description: one line for ``dsgen methods``.
        paper: the paper the recipe reproduces.
        generator: name in ``GENERATORS`` (``debiased``: the self-debiasing core); None: the
            method generates nothing (``base``).
        generation: ``GenerationConfig`` fields the method fixes (task spec, sampling...).
            Presets choose scale (model, number of inputs); the method's fields win over them.
        x1_generation: when set, x1 is generated from scratch first with these
            ``GenerationConfig`` fields (DINO's STS-x1x2), instead of read from the inputs.
        postprocess: ``PostprocessConfig`` fields; None: no postprocessing, no validation split.
        labeller / labeller_config: name in ``LABELLERS`` and its config fields (a judge's label or
            rating for every pair, after postprocessing and before reweighting).
        reweighter / reweighter_config: name in ``REWEIGHTERS`` and its config fields.
        trainer / trainer_config: name in ``TRAINERS`` and its config fields; None: evaluate
            the preset's encoder as is.
        size_of: another method's name; the generator is then asked for as many pairs as that
            method's postprocessed dataset holds under the same preset and seed (the ``human``
            reference row trains on as many human pairs as DINO generated).
        input_sample: draw this many distinct inputs in a random order (seeded by the data seed)
            before the preset's ``max_inputs`` applies (RISE: a shuffled set of at most 10,000).
        dev_inputs: generate the validation set separately, with the same generator, from these
            inputs (RISE: ``stsb-validation``), postprocessed like the training set; the training
            set is then the whole postprocessed file (``validation_fraction`` 0).
    """

    name: str = ""
    description: str = ""
    paper: str = ""
    generator: str | None = "debiased"
    generation: dict[str, Any] = field(default_factory=dict)
    x1_generation: dict[str, Any] | None = None
    postprocess: dict[str, Any] | None = field(default_factory=dict)
    labeller: str | None = None
    labeller_config: dict[str, Any] = field(default_factory=dict)
    reweighter: str | None = None
    reweighter_config: dict[str, Any] = field(default_factory=dict)
    trainer: str | None = "regression"
    trainer_config: dict[str, Any] = field(default_factory=dict)
    size_of: str | None = None
    input_sample: int | None = None
    dev_inputs: str | None = None

    @property
    def uses_seed(self) -> bool:
        """False when every seed gives the same result (nothing generated, reweighted or trained)."""
        return bool(self.generator or self.labeller or self.reweighter or self.trainer)

    def stages(self) -> str:
        parts = []
        if self.x1_generation is not None:
            parts.append(f"{self.generator}[{self.x1_generation.get('task', '?')}]")
        if self.generator:
            parts.append(f"{self.generator}[{self.generation.get('task', 'sts-x2')}]")
        if self.postprocess is not None and self.generator:
            parts.append("postprocess")
        if self.labeller:
            parts.append(self.labeller)
        if self.reweighter:
            parts.append(self.reweighter)
        parts.append(self.trainer or "no training")
        return " -> ".join(parts)

    def to_dict(self) -> dict[str, Any]:
        from dataclasses import asdict

        return asdict(self)


def _builtins() -> None:
    import importlib
    import pkgutil

    import dsgen.methods as pkg

    for info in pkgutil.iter_modules(pkg.__path__):
        importlib.import_module(f"{pkg.__name__}.{info.name}")


METHODS: Registry[Any] = Registry("method", entry_point_group="dsgen.methods", builtins=_builtins)


def get_method(name: str) -> Method:
    """Look a method up by name (built-in or plug-in) and return its :class:`Method`."""
    obj = METHODS.get(name)
    method = obj() if callable(obj) and not isinstance(obj, Method) else obj
    if not isinstance(method, Method):
        raise DsgenError(f"method '{name}' does not resolve to a dsgen Method (got {type(method).__name__})")
    if method.name != name:
        from dataclasses import replace

        method = replace(method, name=name)
    return method


def register_method(name: str) -> Callable[[Callable[[], Method]], Callable[[], Method]]:
    """Decorator for a function returning a :class:`Method` (``@register_method("dino")``)."""
    return METHODS.register(name)
