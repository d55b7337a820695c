"""Training speed: a training batch computed in groups of similar length (:mod:`dsgen.training.padding`) against the
same batch padded whole, in one run.

The regression trainer (DINO's: cosine regression, batch 32, the presets' ``adamw-torch`` at lr 1e-3) trains the same
encoder on the same STS benchmark train pairs (a seeded sample: the split is ordered by genre; gold / 5) with the same
seed, once with ``trim_padding = false`` (each drawn batch in one call, padded to its longest row, as
sentence-transformers computes it) and once with the default cut, the two alternating in each of ``rounds`` rounds
(the first of a round is padded in odd rounds, trimmed in even ones, so that neither always runs on a warmer
machine). Nothing is selected or evaluated during training: the time is the optimizer steps'.

Printed: the padded and the real token positions of the run's batches (what trimming can save at most), seconds per
step of each and the speed-up with its spread over the rounds, the relative difference of the two runs' trained
weights (equal up to float rounding), the CPU and the load average before and after. ``--overhead N`` (repeatable)
also times the cut at other per-group costs, each beside a run at the default
(:data:`dsgen.training.padding.GROUP_OVERHEAD_TOKENS`), as a time ratio to it.

``--trainer sdi`` times RISE's SDI classifier instead (all-MiniLM-L6-v2 by default, as the presets' backbone): one
epoch on both sentences of the pairs, labelled alternately, a tenth held out for its evaluation; the whole ``fit`` is
timed (loading, the epoch's evaluation and the final accuracy included), and dropout draws other masks in the two runs.

Run: ``dsgen bench training [--trainer regression|sdi] [--model smollm2-l4] [--pairs 320] [--rounds 2]
[--overhead N ...]``.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any


def batch_tokens(tokenize: Any, texts: tuple[list[str], ...], batch_size: int, seed: int) -> dict[str, int]:
    """Token positions of random batches of ``texts``' rows (a draw with ``seed``, as training draws them, though not
    the same draw), each column tokenised by ``tokenize``: real ones, padded whole, and padded per group of the cut."""
    import random

    from dsgen.training.padding import length_groups

    order = list(range(len(texts[0])))
    random.Random(seed).shuffle(order)
    counts = {"real": 0, "padded": 0, "grouped": 0}
    for column in texts:
        lengths = [int(n) for n in tokenize(column)["attention_mask"].sum(1).tolist()]
        for start in range(0, len(order), batch_size):
            rows = [lengths[i] for i in order[start:start + batch_size]]
            counts["real"] += sum(rows)
            counts["padded"] += len(rows) * max(rows)
            counts["grouped"] += sum(len(g) * max(rows[i] for i in g) for g in length_groups(rows))
    return counts


def describe_tokens(tokens: dict[str, int]) -> str:
    real = tokens["real"]
    return (f"{real} real, {tokens['padded']} padded whole ({tokens['padded'] / real:.2f}x), {tokens['grouped']} in "
            f"groups ({tokens['grouped'] / real:.2f}x)")


def run(encoder: str | None = None, pairs: int = 320, rounds: int = 2, batch_size: int = 32,
        overheads: tuple[int, ...] = (), data_dir: str | None = None, json_out: Path | None = None,
        seed: int = 1, trainer: str = "regression") -> dict[str, Any]:
    """``trainer``: ``regression`` (an encoder, default ``smollm2-l4``) or ``sdi`` (RISE's classifier on both
    sentences of the pairs, labelled alternately, 10% held out for its per-epoch evaluation; default ``minilm-l6``)."""
    import random

    import torch
    from datasets import Dataset

    from dsgen.artifacts import write_json
    from dsgen.benchmarks.evaluation import cpu_description, spread
    from dsgen.console import console as make_console
    from dsgen.data.sts import data_dir as resolve_data_dir
    from dsgen.data.sts import read_stsb, using_data_dir
    from dsgen.reweighting.sdi import SdiClassifier, SdiConfig, SdiData
    from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder
    from dsgen.training.losses import WeightedCosineSimilarityLoss
    from dsgen.training.padding import GROUP_OVERHEAD_TOKENS, trimmed_padding

    console = make_console()
    root = resolve_data_dir(data_dir)
    gold = read_stsb(root, "train")
    n = min(pairs, len(gold))
    # a seeded sample: the split is ordered by genre (short image captions first, then news and forum posts)
    picked = sorted(random.Random(seed).sample(range(len(gold)), n))
    texts = ([gold.sentences1[i] for i in picked], [gold.sentences2[i] for i in picked])
    cpu, load_before = cpu_description(), os.getloadavg()

    if trainer == "sdi":
        encoder = encoder or "minilm-l6"
        sentences = [x for pair in zip(*texts) for x in pair]
        examples = [(x, i % 2) for i, x in enumerate(sentences)]
        held = max(2, len(examples) // 10)
        data = SdiData(examples[held:], examples[:held])
        steps = -(-len(data.train) // batch_size)
        sdi = SdiConfig(encoder=encoder, epochs=1.0, batch_size=batch_size, device="cpu")

        def train(overhead: int | None) -> tuple[float, list[Any]]:
            classifier = SdiClassifier(sdi.replace(trim_padding=overhead is not None))
            start = time.perf_counter()
            classifier.fit(data, seed, progress=False)
            return (time.perf_counter() - start) / steps, [p.detach() for p in classifier.model.parameters()]

        from transformers import AutoTokenizer

        from dsgen.models import encoder_path

        probe = SdiClassifier(sdi)  # its inputs as the classifier makes them, padded as its collator pads a batch
        probe.tokenizer = AutoTokenizer.from_pretrained(encoder_path(encoder))
        tokens = batch_tokens(lambda column: probe.tokenizer.pad(probe._encode(column), return_tensors="pt"),
                              (sentences[held:],), batch_size, seed)
        console.print(f"SDI classifier on {len(data.train)} STSb train sentences ({held} held out), batch {batch_size} "
                      f"({steps} steps, one epoch), encoder {encoder}; token positions of random batches: "
                      f"{describe_tokens(tokens)}")
    else:
        encoder = encoder or "smollm2-l4"
        dataset = Dataset.from_dict({"sentence1": texts[0], "sentence2": texts[1],
                                     "label": [[gold.scores[i] / 5.0, 1.0] for i in picked]})
        cfg = TrainingConfig(encoder=encoder, batch_size=batch_size, learning_rate=1e-3, optimizer="adamw-torch",
                             model_selection=False, min_trained_steps=1, device="cpu", trim_padding=False)
        steps = -(-n // batch_size)

        def train(overhead: int | None) -> tuple[float, list[Any]]:
            """Seconds per step of one training (``overhead`` None: batches padded whole), and its trained weights."""
            with using_data_dir(root):
                model = load_trainable_encoder(cfg, seed)
            start = time.perf_counter()
            with trimmed_padding(model, overhead is not None, overhead or 0):
                fit(model, dataset, WeightedCosineSimilarityLoss(model), cfg, seed, progress=False)
            seconds = (time.perf_counter() - start) / steps
            return seconds, [p.detach() for p in model.parameters() if p.requires_grad]

        with using_data_dir(root):
            probe = load_trainable_encoder(cfg, seed)
        tokens = batch_tokens(probe.preprocess, texts, batch_size, seed)
        del probe
        console.print(f"{n} STSb train pairs, batch {batch_size} ({steps} steps), encoder {encoder}; token positions of "
                      f"random batches (both sides): {describe_tokens(tokens)}")

    measured, weights = [], {}
    for r in range(rounds):
        order_of_round = (None, GROUP_OVERHEAD_TOKENS) if r % 2 == 0 else (GROUP_OVERHEAD_TOKENS, None)
        got = {}
        for overhead in order_of_round:
            got[overhead], weights[overhead] = train(overhead)
        ratio = got[None] / got[GROUP_OVERHEAD_TOKENS]
        measured.append({"padded_seconds_per_step": round(got[None], 3),
                         "trimmed_seconds_per_step": round(got[GROUP_OVERHEAD_TOKENS], 3), "speedup": round(ratio, 2)})
        console.print(f"round {r + 1}: padded whole {got[None]:.3f} s/step, in groups {got[GROUP_OVERHEAD_TOKENS]:.3f} "
                      f"s/step ({ratio:.2f}x)")
    a, b = weights[None], weights[GROUP_OVERHEAD_TOKENS]
    difference = float(torch.sqrt(sum((x - y).double().pow(2).sum() for x, y in zip(a, b, strict=True)))
                       / torch.sqrt(sum(x.double().pow(2).sum() for x in a)))
    why = "dropout draws differ" if trainer == "sdi" else "float rounding"
    console.print(f"trained weights, padded whole vs in groups: relative difference {difference:.2e} ({why})")
    others = {}
    for overhead in dict.fromkeys(overheads):
        if overhead != GROUP_OVERHEAD_TOKENS:  # each beside a run at the default, so that the machine's drift cancels
            beside, _ = train(GROUP_OVERHEAD_TOKENS)
            seconds, _ = train(overhead)
            others[str(overhead)] = {"seconds_per_step": round(seconds, 3), "default_seconds_per_step": round(beside, 3),
                                     "time_vs_default": round(seconds / beside, 2)}
            console.print(f"group overhead {overhead} tokens: {seconds:.3f} s/step, {seconds / beside:.2f}x the time of "
                          f"the default {GROUP_OVERHEAD_TOKENS} beside it ({beside:.3f} s/step)")
    speedups = [m["speedup"] for m in measured]
    result = {"trainer": trainer, "encoder": encoder, "pairs": n, "batch_size": batch_size, "steps": steps, "seed": seed,
              "group_overhead_tokens": GROUP_OVERHEAD_TOKENS, "token_positions": tokens, "rounds": measured,
              "speedup": spread(speedups), "weights_relative_difference": float(f"{difference:.3g}"),
              "other_overheads": others, "cpu": cpu, "load_average": {"before": load_before, "after": os.getloadavg()}}
    console.print(f"speed-up of the cut: median {result['speedup']['median']:.2f}x (min {result['speedup']['min']:.2f}, "
                  f"max {result['speedup']['max']:.2f}) on {cpu['model_name']} ({cpu['capability']}, {cpu['threads']} "
                  f"threads); load average {load_before[0]:.2f} -> {result['load_average']['after'][0]:.2f}")
    if json_out:
        write_json(json_out, result)
        console.print(f"wrote {json_out}")
    return result
