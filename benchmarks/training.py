"""Training speed: a training batch computed without most of its padding (:mod:`dsgen.training.padding`: packed where
the encoder takes packed sequences, else in groups of similar length) against the same batch padded whole, in one run.

The regression trainer (DINO's: cosine regression, batch 32, the presets' ``adamw-torch`` at lr 1e-3) trains the same
encoder on the same STS benchmark train pairs (a seeded sample: the split is ordered by genre; gold / 5) with the same
seed, once with ``trim_padding = false`` (each drawn batch in one call, padded to its longest row, as
sentence-transformers computes it), once with the default trimming and, where that packs, once in groups (what the
packing replaced), their order rotating from round to round of ``rounds`` so that none always runs on a warmer
machine. Nothing is selected or evaluated during training: the time is the optimizer steps'.

Printed: the padded and the real token positions of the run's batches (what trimming can save at most), seconds per
step of each and the speed-up with its spread over the rounds, the relative difference of the runs' trained
weights (equal up to float rounding), the CPU and the load average before and after. ``--overhead N`` (repeatable)
also times the cut into groups at other per-group costs, each beside a run at the default
(:data:`dsgen.training.padding.GROUP_OVERHEAD_TOKENS`), as a time ratio to it.

``--trainer sdi`` times RISE's SDI classifier instead (all-MiniLM-L6-v2 by default, as the presets' backbone; a
classifier is cut into groups): one epoch on both sentences of the pairs, labelled alternately, a tenth held out for
its evaluation; the whole ``fit`` is timed (loading, the epoch's evaluation and the final accuracy included), and
dropout draws other masks in the two runs.

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
    the same draw), each column tokenised by ``tokenize``: real ones, padded whole, padded per group of the cut, and
    packed (:func:`~dsgen.training.padding.pack_rows`'s rows, each as long as the longest)."""
    import random

    from dsgen.training.padding import length_groups, pack_rows

    order = list(range(len(texts[0])))
    random.Random(seed).shuffle(order)
    counts = {"real": 0, "padded": 0, "grouped": 0, "packed": 0}
    for column in texts:
        lengths = [int(n) for n in tokenize(column)["attention_mask"].sum(1).tolist()]
        for start in range(0, len(order), batch_size):
            rows = [lengths[i] for i in order[start:start + batch_size]]
            counts["real"] += sum(rows)
            counts["padded"] += len(rows) * max(rows)
            counts["grouped"] += sum(len(g) * max(rows[i] for i in g) for g in length_groups(rows))
            runs = pack_rows(rows)
            counts["packed"] += len(runs) * max(sum(rows[i] for i in run) for run in runs)
    return counts


TRIMMED = {"packed": "packed", "groups": "in groups"}


def relative_difference(a: list[Any], b: list[Any]) -> float:
    """The relative L2 difference of two trainings' weights (``b`` against ``a``)."""
    import torch

    return float(torch.sqrt(sum((x - y).double().pow(2).sum() for x, y in zip(a, b, strict=True)))
                 / torch.sqrt(sum(x.double().pow(2).sum() for x in a)))


def describe_tokens(tokens: dict[str, int]) -> str:
    real = tokens["real"]
    return (f"{real} real, {tokens['padded']} padded whole ({tokens['padded'] / real:.2f}x), {tokens['grouped']} in "
            f"groups ({tokens['grouped'] / real:.2f}x), {tokens['packed']} packed ({tokens['packed'] / real:.2f}x)")


def run(encoder: str | None = None, pairs: int = 320, rounds: int = 2, batch_size: int = 32,
        overheads: tuple[int, ...] = (), data_dir: str | None = None, json_out: Path | None = None,
        seed: int = 1, trainer: str = "regression") -> dict[str, Any]:
    """``trainer``: ``regression`` (an encoder, default ``smollm2-l4``) or ``sdi`` (RISE's classifier on both
    sentences of the pairs, labelled alternately, 10% held out for its per-epoch evaluation; default ``minilm-l6``)."""
    import random

    from datasets import Dataset

    from dsgen.artifacts import write_json
    from dsgen.benchmarks.evaluation import cpu_description, spread
    from dsgen.console import console as make_console
    from dsgen.data.sts import data_dir as resolve_data_dir
    from dsgen.data.sts import read_stsb, using_data_dir
    from dsgen.reweighting.sdi import SdiClassifier, SdiConfig, SdiData
    from dsgen.training.fit import TrainingConfig, fit, load_trainable_encoder
    from dsgen.training.losses import WeightedCosineSimilarityLoss
    from dsgen.training.padding import GROUP_OVERHEAD_TOKENS, packable_transformer, trimmed_padding

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

        packs = False  # a Hugging Face classifier is cut into groups

        def train(overhead: int | None, pack: bool = True) -> tuple[float, list[Any]]:
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

        def train(overhead: int | None, pack: bool = True) -> tuple[float, list[Any]]:
            """Seconds per step of one training (``overhead`` None: batches padded whole; ``pack`` False: in groups
            where the encoder would be packed), and its trained weights."""
            with using_data_dir(root):
                model = load_trainable_encoder(cfg, seed)
            start = time.perf_counter()
            with trimmed_padding(model, overhead is not None, overhead or 0, pack=pack):
                fit(model, dataset, WeightedCosineSimilarityLoss(model), cfg, seed, progress=False)
            seconds = (time.perf_counter() - start) / steps
            return seconds, [p.detach() for p in model.parameters() if p.requires_grad]

        with using_data_dir(root):
            probe = load_trainable_encoder(cfg, seed)
        tokens = batch_tokens(probe.preprocess, texts, batch_size, seed)
        packs = packable_transformer(probe) is not None
        del probe
        console.print(f"{n} STSb train pairs, batch {batch_size} ({steps} steps), encoder {encoder}; token positions of "
                      f"random batches (both sides): {describe_tokens(tokens)}")

    # what is timed: padded whole, the default trimming (packed where the encoder takes packed sequences, else in
    # groups) and, beside a packed default, the groups it replaced; each round rotates their order
    default = "packed" if packs else "groups"
    kinds = ["padded", default] + (["groups"] if packs else [])
    runs = {"padded": (None, True), "packed": (GROUP_OVERHEAD_TOKENS, True), "groups": (GROUP_OVERHEAD_TOKENS, False)}
    measured, weights = [], {}
    for r in range(rounds):
        got = {}
        for kind in kinds[r % len(kinds):] + kinds[:r % len(kinds)]:
            got[kind], weights[kind] = train(*runs[kind])
        ratio = got["padded"] / got[default]
        row = {"padded_seconds_per_step": round(got["padded"], 3), "trimmed_seconds_per_step": round(got[default], 3),
               "speedup": round(ratio, 2)}
        text = (f"round {r + 1}: padded whole {got['padded']:.3f} s/step, {TRIMMED[default]} {got[default]:.3f} s/step "
                f"({ratio:.2f}x)")
        if packs:
            row.update(grouped_seconds_per_step=round(got["groups"], 3),
                       packed_vs_groups=round(got["groups"] / got["packed"], 2))
            text += f", in groups {got['groups']:.3f} s/step (packed {row['packed_vs_groups']:.2f}x the groups' speed)"
        measured.append(row)
        console.print(text)
    why = "dropout draws differ" if trainer == "sdi" else "float rounding"
    difference = relative_difference(weights["padded"], weights[default])
    console.print(f"trained weights, padded whole vs {TRIMMED[default]}: relative difference {difference:.2e} ({why})")
    if packs:
        console.print(f"trained weights, packed vs in groups: relative difference "
                      f"{relative_difference(weights['groups'], weights['packed']):.2e} ({why})")
    others = {}
    for overhead in dict.fromkeys(overheads):
        if overhead != GROUP_OVERHEAD_TOKENS:  # each beside a run at the default, so that the machine's drift cancels
            beside, _ = train(GROUP_OVERHEAD_TOKENS, pack=False)
            seconds, _ = train(overhead, pack=False)
            others[str(overhead)] = {"seconds_per_step": round(seconds, 3), "default_seconds_per_step": round(beside, 3),
                                     "time_vs_default": round(seconds / beside, 2)}
            console.print(f"group overhead {overhead} tokens: {seconds:.3f} s/step, {seconds / beside:.2f}x the time of "
                          f"the default {GROUP_OVERHEAD_TOKENS} beside it ({beside:.3f} s/step)")
    speedups = [m["speedup"] for m in measured]
    result = {"trainer": trainer, "encoder": encoder, "pairs": n, "batch_size": batch_size, "steps": steps, "seed": seed,
              "trimming": default, "group_overhead_tokens": GROUP_OVERHEAD_TOKENS, "token_positions": tokens,
              "rounds": measured, "speedup": spread(speedups),
              **({"packed_vs_groups": spread([m["packed_vs_groups"] for m in measured])} if packs else {}),
              "weights_relative_difference": float(f"{difference:.3g}"),
              "other_overheads": others, "cpu": cpu, "load_average": {"before": load_before, "after": os.getloadavg()}}
    console.print(f"speed-up of the trimming ({default}): median {result['speedup']['median']:.2f}x "
                  f"(min {result['speedup']['min']:.2f}, max {result['speedup']['max']:.2f}) on {cpu['model_name']} "
                  f"({cpu['capability']}, {cpu['threads']} threads); load average {load_before[0]:.2f} -> "
                  f"{result['load_average']['after'][0]:.2f}")
    if json_out:
        write_json(json_out, result)
        console.print(f"wrote {json_out}")
    return result
