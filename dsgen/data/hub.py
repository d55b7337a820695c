"""Fallback when no local STS data is given: MTEB's copies from the Hugging Face Hub.

Each dataset's test split is downloaded once and stored as ``<cache>/sts-hub/mteb/<task>.tsv``
(sentence1, sentence2, score). Offline with nothing local, this fails with a one-line error
naming ``DSGEN_DATA_DIR``.
"""

from __future__ import annotations

from pathlib import Path

from dsgen.errors import DsgenError

MTEB_DATASETS = {
    "sts12": "mteb/sts12-sts", "sts13": "mteb/sts13-sts", "sts14": "mteb/sts14-sts",
    "sts15": "mteb/sts15-sts", "sts16": "mteb/sts16-sts", "stsb": "mteb/stsbenchmark-sts",
    "sickr": "mteb/sickr-sts",
}


def hub_root() -> Path:
    from dsgen.models import cache_dir

    return cache_dir() / "sts-hub"


def download_sts() -> Path:
    """Download every MTEB STS test split not yet cached; return the cache root."""
    import pandas as pd

    root = hub_root()
    target = root / "mteb"
    missing = {k: v for k, v in MTEB_DATASETS.items() if not (target / f"{k}.tsv").exists()}
    if not missing:
        return root
    try:
        from huggingface_hub import snapshot_download

        for task, repo in missing.items():
            local = Path(snapshot_download(repo_id=repo, repo_type="dataset", allow_patterns=["*test*"]))
            files = sorted(p for p in local.rglob("*") if p.is_file() and "test" in p.name)
            if not files:
                raise OSError(f"no test split in {repo}")
            f = files[0]
            if f.suffix == ".parquet":
                frame = pd.read_parquet(f)
            else:
                frame = pd.read_json(f, lines=True, compression="infer")
            target.mkdir(parents=True, exist_ok=True)
            frame[["sentence1", "sentence2", "score"]].to_csv(target / f"{task}.tsv", sep="\t", index=False,
                                                              header=False, quoting=3, escapechar="\\")
    except Exception as exc:  # offline, hub error, unexpected layout: all mean "no data here"
        raise DsgenError(f"no local STS data and the Hub copy could not be fetched ({type(exc).__name__}); "
                         f"set DSGEN_DATA_DIR or --data-dir to a folder with sts12 ... sick") from None
    return root


def read_hub_task(root: Path, task: str):
    """Pairs of one task from the Hub cache (see :func:`download_sts`)."""
    from dsgen.data.sts import PairSet

    path = root / "mteb" / f"{task}.tsv"
    out = PairSet([], [], [])
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        cols = line.split("\t")
        if len(cols) != 3:
            raise DsgenError(f"{path}:{lineno}: expected sentence1, sentence2, score")
        out.extend(PairSet([cols[0]], [cols[1]], [float(cols[2])]))
    return out
