"""What a pipeline stage is: the one contract every generator, labeller, reweighter and trainer keeps.

A stage class (a *component*) is registered by name in its kind's :class:`~dsgen.registry.Registry`
(``GENERATORS``, ``LABELLERS``, ``REWEIGHTERS``, ``TRAINERS``), which checks that it derives from
its kind's base class and sets its ``name``, so a name is written once: in the decorator.

| attribute | what it is |
| --- | --- |
| ``name`` | the registry name (set on registration) |
| ``config_class`` | the typed :class:`~dsgen.config.Config` of its settings (:class:`NoConfig` when it has none) |
| ``version`` | bumped when the algorithm changes what it produces; enters every key of what it made |
| ``citation`` | BibTeX of the paper it reproduces (model and dataset cards carry it) |
| ``get_config_dict()`` | its settings as plain JSON values (run cards, keys, ``dsgen plan``) |

A labeller and a reweighter (:class:`PairStage`) also say which models they load besides the run's
generator (``models(plan)``: their fingerprints enter the run key) and whether they judge with the
generator LM itself (``needs_generator_lm()``: the planner refuses that when the generator is an API).

Third-party packages add components through their kind's entry-point group (``dsgen.generators``,
``dsgen.labellers``, ``dsgen.reweighters``, ``dsgen.trainers``), as methods do through
``dsgen.methods`` (see ``examples/plugin/``).

Example:
    >>> from dsgen.reweighting.base import REWEIGHTERS, Reweighter
    >>> @REWEIGHTERS.register("uniform-half")            # doctest: +SKIP
    ... class Half(Reweighter):
    ...     def score(self, pairs, context):
    ...         return ReweightReport([0.5] * len(pairs))
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from dsgen.config import Config


@dataclass
class NoConfig(Config):
    """The config of a component without settings."""


class Component:
    """Base class of every pipeline stage (see the module docstring)."""

    kind: ClassVar[str] = "component"
    name: ClassVar[str] = ""
    config_class: ClassVar[type[Config]] = NoConfig
    version: ClassVar[int] = 1
    citation: ClassVar[str] = ""

    def __init__(self, config: Any = None) -> None:
        self.config = config if config is not None else self.config_class()

    def get_config_dict(self) -> dict[str, Any]:
        """The component's settings as plain JSON values, named by its kind (``{"trainer": "regression", ...}``)."""
        return {self.kind: self.name, **self.config.to_dict()}


class PairStage(Component):
    """A stage that reads the postprocessed pairs before training (a labeller, a reweighter): the component
    contract and what the planner asks of such a stage (see the module docstring)."""

    def models(self, plan: Any) -> list[str]:
        """Names of the models it loads besides the run's generator (their fingerprints enter the run key)."""
        return []

    def needs_generator_lm(self) -> bool:
        """Whether it judges or scores with the run's generator LM (impossible when that is an API)."""
        return False
