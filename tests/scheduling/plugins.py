"""The test plug-ins a Ray worker registers too (``worker_process_setup_hook``): the runner tests' mock generator and
methods, RISE's reweighter on the mock data, and a trainer that crashes on training seed 2, counting its calls in
the file ``$DSGEN_TEST_CALLS`` (every node of a test cluster runs on this machine)."""

import os

from dsgen.method import METHODS
from dsgen.methods.dino import dino_recipe
from dsgen.training.base import TRAINERS
from dsgen.training.regression import RegressionTrainer
from tests.mock_components import register_mock_components


class CrashOnSeed2(RegressionTrainer):
    """The regression trainer, which raises TypeError on training seed 2 (a bug inside one run)."""

    def train(self, train, validation, seed, progress=True):
        calls = os.environ.get("DSGEN_TEST_CALLS")
        if calls:
            with open(calls, "a") as fh:
                fh.write(f"{seed}\n")
        if seed == 2:
            raise TypeError("'<' not supported between instances of 'NoneType' and 'float'")
        return super().train(train, validation, seed, progress)


def register() -> None:
    register_mock_components()
    if "crash-on-seed-2" not in TRAINERS:
        TRAINERS.add("crash-on-seed-2", CrashOnSeed2)
    methods = {"mock-sdi": dict(reweighter="sdi"), "mock-sdi-filter": dict(reweighter="sdi", reweighter_config={"filter_fraction": 0.1}),
               "mock-crash": dict(trainer="crash-on-seed-2")}
    for name, changes in methods.items():
        if name not in METHODS:
            METHODS.add(name, dino_recipe(description=f"mock + {name}", generator="mock-test", **changes))
