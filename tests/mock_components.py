"""Test plug-ins of the runner's tests: a deterministic mock generator, a renamed debiased generator and
the methods built on them, registered once by ``register_mock_components`` (one module, whichever test
module imports it first, so that every test sees the same classes and call counts)."""

import random
from dataclasses import replace
from pathlib import Path

from dsgen.artifacts import write_sidecar
from dsgen.data.pairs import Pair, write_pairs
from dsgen.generation import GENERATORS
from dsgen.generation.base import Generator
from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
from dsgen.method import METHODS, get_method
from dsgen.methods.dino import dino_recipe


class MockGenerator(Generator):
    """Deterministic pairs: x2 = x1's words shuffled (label 1), cut (0.5) or another input (0). A plug-in
    generator: registered under its name, which the registry gives it, with the debiased one's settings."""

    config_class = GenerationConfig
    calls = 0

    def generate(self, inputs, out, progress=True, resume=True):
        MockGenerator.calls += 1
        rng = random.Random(self.config.seed)
        if inputs is None:  # x1 from scratch
            words = "a man woman dog cat plays runs guitar piano".split()
            pairs = [Pair(" ".join(rng.choice(words) for _ in range(6)) + ".", None, 1.0) for _ in range(12)]
            write_pairs(out, pairs)
            write_sidecar(out, dataset_key=self.dataset_key(inputs))
            return pairs
        pairs = []
        gense = self.config.task == "gense"
        for i, x in enumerate(inputs):
            words = x.split()
            for _ in range(self.config.per_label):
                if gense:
                    pairs.append(Pair(x, " ".join(rng.sample(words, len(words))), "entailment"))
                    pairs.append(Pair(x, inputs[(i + 1) % len(inputs)], "contradiction"))
                    continue
                pairs.append(Pair(x, " ".join(rng.sample(words, len(words))), 1.0))
                pairs.append(Pair(x, " ".join(words[: max(1, len(words) // 2)]) + f" {rng.randint(0, 9)}", 0.5))
                pairs.append(Pair(x, inputs[(i + 1 + rng.randrange(len(inputs) - 1)) % len(inputs)], 0.0))
        write_pairs(out, pairs)
        write_sidecar(out, dataset_key=self.dataset_key(inputs))
        return pairs


class RenamedDebiased(DebiasedGenerator):
    """A plug-in generator that happens to subclass the debiased one: its data is its own."""


NO_RULES = {"alpha": 0.0, "min_x1_words": 0, "min_x2_words": 0, "drop_containment": False}


def register_mock_components() -> None:
    """The test generators and methods, each registered once whatever test module ran first."""
    for name, cls in (("mock-test", MockGenerator), ("renamed-debiased", RenamedDebiased)):
        if name not in GENERATORS:
            GENERATORS.add(name, cls)
    gense = get_method("gense")
    methods = {
        "mock-dino": lambda: dino_recipe(description="DINO recipe on the mock generator", generator="mock-test"),
        "mock-random": lambda: dino_recipe(description="mock + random weights", generator="mock-test",
                                           reweighter="random"),
        "mock-gense": lambda: replace(gense, name="", generator="mock-test", reweighter_config=NO_RULES),
        "mock-gense-strict": lambda: replace(gense, name="", generator="mock-test",
                                             reweighter_config={**NO_RULES, "alpha": 1.0}),
        "tiny-dino-nocl": lambda: dino_recipe(description="real core, no counter labels",
                                              generation={"task": "sts-x2", "counter_labels": False}),
        "tiny-renamed": lambda: dino_recipe(description="plug-in generator", generator="renamed-debiased"),
        "mock-human": lambda: replace(get_method("human"), name="", size_of="mock-dino"),
        "x1-sdi": lambda: dino_recipe(description="SDI on generated x1 (no human inputs): must fail",
                                      generator="mock-test", x1_generation={"task": "sts-x1"}, reweighter="sdi"),
    }
    for name, make in methods.items():
        if name not in METHODS:
            METHODS.add(name, make())


def word_sentences_file(folder: Path) -> Path:
    """``folder/x1.txt``: 40 seeded sentences of 7 words from a small vocabulary, the mock methods' inputs."""
    rng = random.Random(0)
    words = "a man woman dog cat plays runs guitar piano eats food street car red blue sits".split()
    path = folder / "x1.txt"
    path.write_text("\n".join(" ".join(rng.choice(words) for _ in range(7)) + "." for _ in range(40)))
    return path
