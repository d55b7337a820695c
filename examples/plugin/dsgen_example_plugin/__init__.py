"""An example dsgen plug-in: DINO with a wider top-k (10 instead of 5).

A method is a recipe over the engine's registered stages; this one changes one sampling
setting of DINO's generation and keeps the rest (postprocessing, regression trainer).
Installed, it shows up in ``dsgen methods`` and runs with ``dsgen run dino-top-k10``.
"""

from dsgen.method import Method
from dsgen.methods.dino import dino_recipe


def dino_top_k10() -> Method:
    return dino_recipe(description="example plug-in: DINO STS-x2 sampled with top-k 10",
                       paper="example (dsgen docs)",
                       generation={"task": "sts-x2", "sampling": {"top_k": 10}})
