"""Generation inputs x1: a text file (one sentence per line), a JSONL from an ``sts-x1`` run (its
``text_a`` values), or a named source:

| name | sentences | whose |
| --- | --- | --- |
| ``stsb-train`` | both sentences of every STS benchmark train pair, in file order, duplicates included (11,498) | DINO's STS-x2 inputs (its ``utils.py``, ``read_sts_inputs``): a sentence in several pairs gets more draws |
| ``stsb-train-distinct`` | the distinct ones, in file order (10,536) | earlier dsgen releases; the raw encoders' standardisation |
| ``stsb-validation`` | the distinct sentences of the STS benchmark dev split | RISE's separately generated dev set |

Files are read distinct, in order. ``sample`` draws that many distinct inputs in a seeded random
order, as RISE's ``preprocess_data.py`` does (a shuffled set of the sentences, at most 10,000).

**What a data seed draws** (one meaning for every method, :func:`load_inputs` with a ``seed``): the
inputs of a run are the first ``max_inputs`` of the method's population of inputs (DINO's: the source's
sentences with their duplicates; RISE's: its shuffled set) in an order drawn with the run's data seed
(:func:`seeded_order`), so that a data seed is a new sample of inputs *and* a new generation, as a new
dataset made by the method's recipe at this scale would be. Without ``max_inputs`` (the papers' scale),
every input is read as the paper reads it: DINO all 11,498 sentences in file order (the data seed
changes only the generation), RISE its seeded shuffled set of at most 10,000. The order is one
Fisher-Yates shuffle, so a larger ``max_inputs`` holds a smaller one's inputs (the points of a learning
curve are nested). The ``human`` method draws its pairs the same way (:mod:`dsgen.generation.human`).
"""

from __future__ import annotations

from pathlib import Path
from typing import TypeVar

from dsgen.errors import DsgenError

T = TypeVar("T")

NAMED_INPUTS = ("stsb-train", "stsb-train-distinct", "stsb-validation")
WITH_DUPLICATES = ("stsb-train",)


def seeded_order(items: list[T], seed: int) -> list[T]:
    """``items`` in an order drawn with ``seed`` (one Fisher-Yates shuffle of a copy, Python's ``random``): the
    draw of a data seed. Its first n are a uniform sample of n items (positions, so an item listed twice is
    twice as likely), and a larger n holds a smaller one's sample."""
    import random

    out = list(items)
    random.Random(seed).shuffle(out)
    return out


def draw(items: list[T], n: int | None, seed: int | None) -> list[T]:
    """What a data seed reads of ``items``: the first ``n`` in the order :func:`seeded_order` draws with ``seed``;
    all of them in their own order when ``n`` is None or not smaller than the population (the papers' scale,
    nothing to draw), or when no seed is given (the first ``n``: ``dsgen generate --max-inputs``)."""
    if n is None or n >= len(items):
        return list(items)
    return seeded_order(items, seed)[:n] if seed is not None else list(items[:n])


def load_inputs(source: str, max_inputs: int | None = None, data_dir: str | None = None, distinct: bool = False,
                sample: int | None = None, seed: int | None = None) -> list[str]:
    """Read the non-empty input sentences of ``source`` (distinct, but for a source that keeps its duplicates,
    unless ``distinct``), then keep ``max_inputs`` of them.

    Args:
        max_inputs: how many (None: all).
        sample: RISE's population: that many distinct sentences in an order drawn with ``seed`` (a shuffled set).
        seed: the run's data seed: the inputs are drawn with it (:func:`draw`, the module docstring); None: the
            first ``max_inputs`` in source order.
    """
    if source in NAMED_INPUTS:
        from dsgen.data.sts import data_dir as resolve, stsb_sentences

        texts = stsb_sentences(resolve(data_dir), "dev" if source == "stsb-validation" else "train")
    else:
        path = Path(source)
        if not path.is_file():
            raise DsgenError(f"inputs '{source}' is neither {', '.join(NAMED_INPUTS)} nor an existing file")
        if path.suffix == ".jsonl":
            from dsgen.data.pairs import read_pairs

            texts = [p.text_a for p in read_pairs(path)]
        else:
            try:
                texts = path.read_text(encoding="utf-8").splitlines()
            except UnicodeDecodeError as exc:
                raise DsgenError(f"inputs '{source}' are not UTF-8 text (byte {exc.start}); give a text file "
                                 "with one sentence per line") from None
    if max_inputs is not None and max_inputs < 1:
        raise DsgenError(f"--max-inputs must be at least 1 (got {max_inputs})")
    out = [t.strip() for t in texts if t.strip()]
    if distinct or sample is not None or source not in WITH_DUPLICATES:
        out = list(dict.fromkeys(out))
    if not out:
        raise DsgenError(f"inputs '{source}' hold no sentence")
    if sample is not None:  # RISE's shuffled set, whatever the scale; then its first max_inputs
        return seeded_order(out, 0 if seed is None else seed)[:sample][:max_inputs]
    return draw(out, max_inputs, seed)
