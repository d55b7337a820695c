"""Generation inputs x1: a text file (one sentence per line), a JSONL from an ``sts-x1`` run (its
``text_a`` values), or a named source:

| name | sentences | whose |
| --- | --- | --- |
| ``stsb-train`` | both sentences of every STS benchmark train pair, in file order, duplicates included (11,498) | DINO's STS-x2 inputs (its ``utils.py``, ``read_sts_inputs``): a sentence in several pairs gets more draws |
| ``stsb-train-distinct`` | the distinct ones, in file order (10,536) | earlier dsgen releases; the raw encoders' standardisation |
| ``stsb-validation`` | the distinct sentences of the STS benchmark dev split | RISE's separately generated dev set |

Files are read distinct, in order. ``sample`` draws that many distinct inputs in a seeded random
order, as RISE's ``preprocess_data.py`` does (a shuffled set of the sentences, at most 10,000).
"""

from __future__ import annotations

from pathlib import Path

from dsgen.errors import DsgenError

NAMED_INPUTS = ("stsb-train", "stsb-train-distinct", "stsb-validation")
WITH_DUPLICATES = ("stsb-train",)


def load_inputs(source: str, max_inputs: int | None = None, data_dir: str | None = None, distinct: bool = False,
                sample: int | None = None, seed: int = 0) -> list[str]:
    """Read the non-empty input sentences of ``source`` in order (distinct, but for a source that keeps
    its duplicates, unless ``distinct``); with ``sample``, that many distinct ones in an order drawn with
    ``seed``; then keep the first ``max_inputs``."""
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
    if sample is not None:
        import random

        random.Random(seed).shuffle(out)
        out = out[:sample]
    if not out:
        raise DsgenError(f"inputs '{source}' hold no sentence")
    return out[:max_inputs] if max_inputs else out
