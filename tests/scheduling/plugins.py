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


FAKE_VERSIONS = "DSGEN_TEST_FAKE_VERSIONS"
"""A node started with this variable (a JSON object) reports those package versions (:func:`code_versions`): a node
whose installation differs from the driver's, simulated."""


def fake_versions() -> None:
    import json

    import dsgen.artifacts

    fake = os.environ.get(FAKE_VERSIONS)
    real = getattr(dsgen.artifacts, "code_versions", None)  # None: a dsgen that reports no versions
    if fake and real is not None and not getattr(real, "faked", False):

        def faked() -> dict:
            return {**real(), **json.loads(fake)}

        faked.faked = True
        dsgen.artifacts.code_versions = faked


def register() -> None:
    fake_versions()
    register_mock_components()
    if "crash-on-seed-2" not in TRAINERS:
        TRAINERS.add("crash-on-seed-2", CrashOnSeed2)
    methods = {"mock-sdi": dict(reweighter="sdi"), "mock-sdi-filter": dict(reweighter="sdi", reweighter_config={"filter_fraction": 0.1}),
               "mock-crash": dict(trainer="crash-on-seed-2")}
    for name, changes in methods.items():
        if name not in METHODS:
            METHODS.add(name, dino_recipe(description=f"mock + {name}", generator="mock-test", **changes))
