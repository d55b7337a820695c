"""Exports the ecosystem reads, each built from result files and the dataset cache, never from memory:

| export | module | written by |
| --- | --- | --- |
| a generated dataset as a Hugging Face dataset folder (Parquet splits + dataset card) | :mod:`dsgen.export.dataset_folder` | ``datasets``, ``huggingface_hub.DatasetCard`` |
| a trained encoder as a sentence-transformers folder with its model card | :mod:`dsgen.export.model_folder` | ``sentence-transformers`` |
| scores in MTEB's result layout | :mod:`dsgen.export.mteb_results` | ``mteb`` (an extra: ``pip install 'dsgen[mteb]'``) |

Every export says where it came from (:func:`provenance`): the run key when there is one, the
dsgen version, and the git commit when dsgen runs from a checkout. Each is written into a temporary
folder beside the target and renamed into place, so a failure leaves nothing half-written.
"""

from __future__ import annotations

import contextlib
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError


def provenance(**extra: Any) -> dict[str, Any]:
    """Where an export came from: dsgen's version, the git commit when run from a checkout, and ``extra``
    (a run key, a dataset key, the command)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        dsgen_version = version("dsgen")
    except PackageNotFoundError:
        dsgen_version = "unknown"
    from dsgen.artifacts import git_commit, git_state

    return {"dsgen_version": dsgen_version, "git_commit": git_commit(), "git_dirty": git_state()["dirty"],
            **{k: v for k, v in extra.items() if v is not None}}


def check_target_folder(target: Path) -> Path:
    """Fail at once, creating nothing, when the folder ``target`` could not be written (made, or replaced
    from a folder staged beside it): a one-line :class:`DsgenError`. A probe, not ``os.access``, which
    says yes to root everywhere (``/proc`` included)."""
    from dsgen.artifacts import check_writable_target

    target = Path(target)
    if target.exists() and not target.is_dir():
        raise DsgenError(f"cannot write {target}: it is a file, not a folder; choose another path")
    check_writable_target(target.parent if target.is_dir() else target)
    return target


@contextlib.contextmanager
def staged_folder(target: Path) -> Iterator[Path]:
    """A temporary folder beside ``target`` that becomes ``target`` when the block succeeds (an existing
    ``target`` is replaced then); on failure it is removed and ``target`` is left as it was."""
    from dsgen.artifacts import ensure_writable_dir

    target = check_target_folder(target)
    parent = ensure_writable_dir(target.parent)
    stage = parent / f".{target.name}.partial"
    shutil.rmtree(stage, ignore_errors=True)
    try:
        stage.mkdir()
    except OSError as exc:
        raise DsgenError(f"cannot write {target}: {exc.strerror or exc}; choose another path") from None
    try:
        yield stage
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if target.exists():
        old = parent / f".{target.name}.old"
        shutil.rmtree(old, ignore_errors=True)
        target.rename(old)
        stage.rename(target)
        shutil.rmtree(old, ignore_errors=True)
    else:
        stage.rename(target)


__all__ = ["check_target_folder", "provenance", "staged_folder"]
