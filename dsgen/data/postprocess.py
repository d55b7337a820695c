"""DINO's postprocessing of a generated STS dataset (Schick & Schütze, 2021, Sec. 4), each step
a named option of :class:`PostprocessConfig`:

1. remove pairs with x1 == x2 (no training signal for a bi-encoder), and pairs whose x2 still holds
   ``drop_containing`` (CLAIF's ``postprocess_dataset.py``: a rewrite that kept a ``<mask>``; off by default);
2. remove duplicate (x1, x2, y);
3. keep at most ``max_per_x1_label`` x2 per (x1, y);
4. label smoothing: y -> y * (1 - eps) + eps / 2 (eps 0.2: 0 -> 0.1, 0.5 -> 0.5, 1 -> 0.9);
5. augmentation: for each x1 add ``random_pairs_per_x1`` pairs (x1, x2 of another entry, 0),
   marked ``source: random``;
6. a train / validation split stratified by label (90 / 10), as DINO's training script does
   (``stratify=False``: one random split, for continuous labels such as human gold scores).
7. ``shuffle_labels`` (a control, off in every method): permute the labels among all pairs
   before the split, which keeps the sentences and the label mix but removes what the labels
   say; a trained encoder should then gain nothing (``dsgen regress`` must notice it).

The order is DINO's (``scripts/sts/postprocess_dataset.py``), except that DINO's script drops
duplicates through a Python ``set`` (so which two x2 survive the cap depends on the hash seed);
here the first two in generation order are kept, which is reproducible and, since the samples
of one (x1, y) are drawn independently, the same in distribution.
"""

from __future__ import annotations

import random
from collections import defaultdict
from dataclasses import dataclass

from dsgen.config import Config
from dsgen.data.pairs import Pair


@dataclass
class PostprocessConfig(Config):
    remove_identical: bool = True
    drop_containing: str = ""
    remove_duplicates: bool = True
    max_per_x1_label: int = 2
    label_smoothing: float = 0.2
    random_pairs_per_x1: int = 2
    validation_fraction: float = 0.1
    stratify: bool = True
    shuffle_labels: bool = False
    seed: int = 42


def smooth_label(label: float, eps: float) -> float:
    return round(label * (1 - eps) + eps / 2, 6)


def postprocess(pairs: list[Pair], cfg: PostprocessConfig | None = None,
                counts: dict[str, int] | None = None) -> tuple[list[Pair], list[Pair]]:
    """Return (train, validation) built from generated ``pairs`` as the steps above say; ``counts``
    (if given) receives how many pairs each step removed or added, and the sizes before and after."""
    cfg = cfg or PostprocessConfig()
    rng = random.Random(cfg.seed)
    kept: list[Pair] = []
    seen: set[tuple] = set()
    per_x1_label: dict[tuple, int] = defaultdict(int)
    tally = {"generated": len(pairs), "removed_identical": 0, "removed_duplicates": 0, "removed_beyond_max_per_x1_label": 0}
    if cfg.drop_containing:
        tally["removed_containing"] = 0
    for p in pairs:
        if cfg.remove_identical and p.text_a == p.text_b:
            tally["removed_identical"] += 1
            continue
        if cfg.drop_containing and cfg.drop_containing in (p.text_b or ""):
            tally["removed_containing"] += 1
            continue
        if cfg.remove_duplicates:
            if p.key() in seen:
                tally["removed_duplicates"] += 1
                continue
            seen.add(p.key())
        if cfg.max_per_x1_label and per_x1_label[(p.text_a, p.label)] >= cfg.max_per_x1_label:
            tally["removed_beyond_max_per_x1_label"] += 1
            continue
        per_x1_label[(p.text_a, p.label)] += 1
        numeric = isinstance(p.label, (int, float))
        label = smooth_label(float(p.label), cfg.label_smoothing) if (cfg.label_smoothing and numeric) else p.label
        kept.append(Pair(p.text_a, p.text_b, label, p.weight, {"source": "generated", **p.extra}))

    if cfg.random_pairs_per_x1 and kept:
        x1s = list(dict.fromkeys(p.text_a for p in kept))
        augmented = []
        for x1 in x1s:
            others = [p for p in kept if p.text_a != x1] or kept
            for _ in range(cfg.random_pairs_per_x1):
                augmented.append(Pair(x1, rng.choice(others).text_b, 0.0, None, {"source": "random"}))
        kept += augmented
        tally["added_random_pairs"] = len(augmented)
    if cfg.shuffle_labels:
        labels = [p.label for p in kept]
        rng.shuffle(labels)
        kept = [Pair(p.text_a, p.text_b, y, p.weight, {**p.extra, "shuffled": True}) for p, y in zip(kept, labels)]

    by_label: dict[object, list[Pair]] = defaultdict(list)
    for p in kept:
        by_label[p.label if cfg.stratify else None].append(p)
    train: list[Pair] = []
    validation: list[Pair] = []
    for label in sorted(by_label, key=str):
        group = by_label[label][:]
        rng.shuffle(group)
        n_val = round(len(group) * cfg.validation_fraction)
        validation += group[:n_val]
        train += group[n_val:]
    rng.shuffle(train)
    if counts is not None:
        counts.update(tally, train=len(train), validation=len(validation))
    return train, validation
