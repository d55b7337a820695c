"""An example dsgen plug-in package: a new stage (a reweighter) and two recipes.

- ``dino-top-k10``: a method only: DINO with a wider top-k (10 instead of 5).
- ``copy-penalty``: a new *stage*, a :class:`~dsgen.reweighting.base.Reweighter` registered through
  the ``dsgen.reweighters`` entry-point group, and ``dino-copy-penalty``, DINO's recipe with it.

Installed (``pip install ./examples/plugin``), both methods show up in ``dsgen methods`` and the
reweighter in ``dsgen plan``; ``dsgen run dino-copy-penalty --preset smoke`` runs it.
"""

from dsgen.method import Method
from dsgen.methods.dino import dino_recipe

from dsgen_example_plugin.copy_penalty import CopyPenalty, CopyPenaltyConfig  # noqa: F401 (the entry point's target)


def dino_top_k10() -> Method:
    return dino_recipe(description="example plug-in: DINO STS-x2 sampled with top-k 10",
                       paper="example (dsgen docs)",
                       generation={"task": "sts-x2", "sampling": {"top_k": 10}})


def dino_copy_penalty() -> Method:
    return dino_recipe(description="example plug-in: DINO STS-x2, near-copies of x1 down-weighted (copy-penalty)",
                       paper="example (dsgen docs)", reweighter="copy-penalty")
