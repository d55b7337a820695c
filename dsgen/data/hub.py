"""Fallback when no local STS data is given: MTEB's copies from the Hugging Face Hub.

Each dataset's test split is downloaded once, at a pinned revision, and stored as
``<cache>/sts-hub/mteb/<task>.jsonl`` (sentence1, sentence2, score), written and read back with
pandas so that quotes, tabs and backslashes in sentences survive. Offline with nothing local,
this fails with a one-line error naming ``DSGEN_DATA_DIR``.
"""

from __future__ import annotations

from pathlib import Path

from dsgen.data.scored_pairs import PairSet
from dsgen.errors import DsgenError

# (repository, revision): the revisions MTEB's own task metadata pins, so that a cached copy
# always means the pairs MTEB's published scores were computed on.
MTEB_DATASETS = {
    "sts12": ("mteb/sts12-sts", "a0d554a64d88156834ff5ae9920b964011b16384"),
    "sts13": ("mteb/sts13-sts", "7e90230a92c190f1bf69ae9002b8cea547a64cca"),
    "sts14": ("mteb/sts14-sts", "6031580fec1f6af667f0bd2da0a551cf4f0b2375"),
    "sts15": ("mteb/sts15-sts", "ae752c7c21bf194d8b67fd573edf7ae58183cbe3"),
    "sts16": ("mteb/sts16-sts", "4d8694f8f0e0100860b497b999b3dbed754a0513"),
    "stsb": ("mteb/stsbenchmark-sts", "b0fddb56ed78048fa8b90373c8a3cfc37b684831"),
    "sickr": ("mteb/sickr-sts", "20a6d6f312dd54037fe07a32d58e5e168867909d"),
}


def hub_root() -> Path:
    from dsgen.artifacts import cache_dir

    return cache_dir() / "sts-hub"


def download_sts() -> Path:
    """Download every MTEB STS test split not yet cached; return the cache root."""
    import pandas as pd

    root = hub_root()
    missing = {k: v for k, v in MTEB_DATASETS.items() if not hub_file(root, k).exists()}
    if not missing:
        return root
    try:
        from huggingface_hub import snapshot_download

        for task, (repo, revision) in missing.items():
            local = Path(snapshot_download(repo_id=repo, repo_type="dataset", revision=revision,
                                           allow_patterns=["*test*"]))
            files = sorted(p for p in local.rglob("*") if p.is_file() and "test" in p.name)
            if not files:
                raise OSError(f"no test split in {repo}")
            f = files[0]
            if f.suffix == ".parquet":
                frame = pd.read_parquet(f)
            else:
                frame = pd.read_json(f, lines=True, compression="infer")
            write_hub_frame(hub_file(root, task), frame)
    except Exception as exc:  # offline, hub error, unexpected layout: all mean "no data here"
        raise DsgenError(f"no local STS data and the Hub copy could not be fetched ({type(exc).__name__}); "
                         f"set DSGEN_DATA_DIR or --data-dir to a folder with sts12 ... sick") from None
    return root


def hub_file(root: Path, task: str) -> Path:
    return root / "mteb" / f"{task}.jsonl"


def write_hub_frame(path: Path, frame) -> None:  # noqa: ANN001 - a pandas DataFrame
    """Store sentence1, sentence2, score as JSON lines, atomically."""
    from dsgen.artifacts import atomic_open

    with atomic_open(path) as fh:
        frame[["sentence1", "sentence2", "score"]].to_json(fh, orient="records", lines=True, force_ascii=False)


def read_hub_task(root: Path, task: str) -> PairSet:
    """Pairs of one task from the Hub cache (see :func:`download_sts`)."""
    import pandas as pd

    path = hub_file(root, task)
    try:
        frame = pd.read_json(path, orient="records", lines=True, dtype={"sentence1": str, "sentence2": str})
    except (ValueError, FileNotFoundError) as exc:
        raise DsgenError(f"{path}: cannot read the cached Hub copy ({exc}); delete it to download it again") from None
    if list(frame.columns) != ["sentence1", "sentence2", "score"]:
        raise DsgenError(f"{path}: expected sentence1, sentence2, score; delete it to download it again")
    return PairSet(frame["sentence1"].tolist(), frame["sentence2"].tolist(), [float(x) for x in frame["score"]])
