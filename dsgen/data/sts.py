"""Reading the STS test sets (STS12-16, STS benchmark, SICK) in the layout of their releases.

The data directory is ``--data-dir``, else ``$DSGEN_DATA_DIR``; with neither, MTEB's copies
of the same sets are downloaded from the Hugging Face Hub once (when online) and cached.
Loaders check pair counts and stop with the file and line of anything malformed.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from dsgen.data.hub import download_sts
from dsgen.data.scored_pairs import PairSet
from dsgen.errors import DsgenError

ENV_VAR = "DSGEN_DATA_DIR"

# SemEval sets per year; STS13's licensed SMT set is absent in every public copy.
STS_YEARS: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "sts12": ("STS.input.{}.txt", "STS.gs.{}.txt",
              ("MSRpar", "MSRvid", "SMTeuroparl", "surprise.OnWN", "surprise.SMTnews")),
    "sts13": ("STS.input.{}.txt", "STS.gs.{}.txt", ("FNWN", "OnWN", "headlines")),
    "sts14": ("STS.input.{}.txt", "STS.gs.{}.txt",
              ("OnWN", "deft-forum", "deft-news", "headlines", "images", "tweet-news")),
    "sts15": ("STS.input.{}.txt", "STS.gs.{}.txt",
              ("answers-forums", "answers-students", "belief", "headlines", "images")),
    "sts16": ("STS2016.input.{}.txt", "STS2016.gs.{}.txt",
              ("answer-answer", "headlines", "plagiarism", "postediting", "question-question")),
}
SICK_FILES = {"train": "SICK_train.txt", "trial": "SICK_trial.txt", "test": "SICK_test_annotated.txt"}


_DEFAULT: list[str | Path | None] = [None]


@contextmanager
def using_data_dir(path: str | Path | None) -> Iterator[None]:
    """Within the block, :func:`data_dir` without an explicit folder means ``path`` (when given): a
    run's ``--data-dir`` then also reaches what reads data on its own (an encoder's statistics)."""
    _DEFAULT.append(path or _DEFAULT[-1])
    try:
        yield
    finally:
        _DEFAULT.pop()


def data_dir(explicit: str | Path | None = None) -> Path:
    """The local data directory (``explicit``, else the run's, else ``$DSGEN_DATA_DIR``), or the Hub
    cache when none is given and the Hub is reachable."""
    chosen = explicit or _DEFAULT[-1] or os.environ.get(ENV_VAR)
    if chosen:
        path = Path(chosen)
        if not path.is_dir():
            raise DsgenError(f"STS data directory {path} does not exist; point --data-dir or {ENV_VAR} at the folder holding sts12 ... sick")
        return path
    return download_sts()


def _read_lines(path: Path) -> list[str]:
    """Lines without their ending; the last line counts whether or not a newline ends it."""
    try:
        with path.open(encoding="utf-8", newline="") as fh:
            lines = fh.read().split("\n")
        return lines[:-1] if lines[-1] == "" else lines
    except FileNotFoundError:
        raise DsgenError(f"missing data file {path}; check --data-dir / {ENV_VAR}") from None


def _score(text: str, path: Path, lineno: int) -> float:
    try:
        return float(text)
    except ValueError:
        raise DsgenError(f"{path}:{lineno}: gold score {text!r} is not a number") from None


def read_semeval_year(root: Path, year: str) -> PairSet:
    """All sets of one SemEval year pooled; pairs with a blank gold line are skipped."""
    input_pat, gold_pat, sets = STS_YEARS[year]
    pooled = PairSet([], [], [])
    for name in sets:
        ipath, gpath = root / year / input_pat.format(name), root / year / gold_pat.format(name)
        inputs, golds = _read_lines(ipath), _read_lines(gpath)
        if len(inputs) != len(golds):
            raise DsgenError(f"{ipath} has {len(inputs)} lines but {gpath} has {len(golds)}; they must be line-aligned")
        for lineno, (line, gold) in enumerate(zip(inputs, golds), 1):
            if not gold.strip():
                continue
            cols = line.rstrip("\r").split("\t")
            if len(cols) < 2:
                raise DsgenError(f"{ipath}:{lineno}: expected sentence1<TAB>sentence2")
            pooled.extend(PairSet([cols[0]], [cols[1]], [_score(gold.strip(), gpath, lineno)]))
    return pooled


def read_stsb(root: Path, split: str) -> PairSet:
    """STS benchmark split (train, dev, test): tab-separated, no header, no quote character."""
    path = root / "stsbenchmark" / f"sts-{split}.csv"
    out = PairSet([], [], [])
    for lineno, line in enumerate(_read_lines(path), 1):
        cols = line.rstrip("\r").split("\t")
        if len(cols) < 7:
            raise DsgenError(f"{path}:{lineno}: expected at least 7 tab-separated columns, found {len(cols)}")
        out.extend(PairSet([cols[5]], [cols[6]], [_score(cols[4], path, lineno)]))
    return out


def read_sick(root: Path, parts: tuple[str, ...]) -> PairSet:
    """SICK relatedness pairs of the given parts (train, trial, test)."""
    out = PairSet([], [], [])
    for part in parts:
        path = root / "sick" / SICK_FILES[part]
        lines = _read_lines(path)
        for lineno, line in enumerate(lines[1:], 2):
            cols = line.rstrip("\r").split("\t")
            if len(cols) < 4:
                raise DsgenError(f"{path}:{lineno}: expected pair_ID, sentence_A, sentence_B, relatedness_score")
            out.extend(PairSet([cols[1]], [cols[2]], [_score(cols[3], path, lineno)]))
    return out


def stsb_sentences(root: Path | None = None, split: str = "train") -> list[str]:
    """Both sentences of every pair of an STS benchmark split, pair by pair, in file order, duplicates
    included: DINO's STS-x2 inputs (its ``utils.py``, ``read_sts_inputs``: 11,498 for train)."""
    pairs = read_stsb(root or data_dir(), split)
    return [s for a, b in zip(pairs.sentences1, pairs.sentences2) for s in (a.strip(), b.strip()) if s]


def stsb_train_sentences(root: Path | None = None) -> list[str]:
    """Distinct sentences of the STS benchmark train split in file order (10,536)."""
    return list(dict.fromkeys(stsb_sentences(root, "train")))
