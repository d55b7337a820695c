"""Folders dsgen writes whole: exports and kept model folders, each marked with its kind, staged beside its target
and renamed into place, and never replacing a folder that holds dsgen's runs.

Every such folder says where it came from (:func:`provenance`): the run key when there is one, the dsgen version,
and the git commit when dsgen runs from a checkout. Each is written into a temporary folder beside the target and
renamed into place (:func:`staged_folder`), so a failure leaves nothing half-written.

A folder is replaced only when dsgen wrote it as the same kind: every one holds a marker file
(``dsgen_export.json``, naming its kind), and any other existing, non-empty folder is refused with one line, unless
the user names it on purpose (``--overwrite``). A folder that holds dsgen's runs (run results, ``dsgen eval``
results, the dataset or label cache) is never replaced, with ``--overwrite`` neither (:func:`check_target_folder`).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
from collections.abc import Iterator
from fnmatch import fnmatch
from pathlib import Path
from typing import Any

from dsgen.errors import DsgenError

MARKER = "dsgen_export.json"  # in every export folder: which kind of export dsgen wrote there
PROVENANCE = "dsgen_provenance.json"  # where an export came from
RESULT = "dsgen_result.json"  # a model folder's run result
KINDS = {"dataset-folder": "a dataset folder", "model-folder": "a model folder", "mteb-results": "an MTEB results folder"}
RUN_RESULT = "data-*-seed-*.json"  # a run's result file (runner.result_path), its sidecar and its failure record
RUN_CACHES = ("datasets", "labels")  # <runs>/cache/<name>: generated datasets, judges' labels
_PLAIN_NAME = re.compile(r"\w[\w .+=@-]{0,119}")  # a name that stays one folder under its parent


def check_path_name(what: str, name: Any, fix: str) -> str:
    """``name`` when it can name one folder under its parent (a preset, method or other registered name, which
    become ``results/<preset>/<method>/``): letters, digits, spaces and ``. _ - + = @``, not starting with a dot
    or a space, at most 120 characters; else a one-line error ending with ``fix`` (``../x`` or an absolute path
    would write outside ``--out``)."""
    if not isinstance(name, str) or not _PLAIN_NAME.fullmatch(name) or name != name.strip():
        raise DsgenError(f"{what} {name!r} cannot name a folder (it would be written outside --out or nowhere): use "
                         f"letters, digits and . _ - + = @, starting with a letter or digit; {fix}")
    return name


def provenance(**extra: Any) -> dict[str, Any]:
    """Where an export came from: dsgen's version, the git commit when run from a checkout, and ``extra``
    (a run key, a dataset key, the command)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        dsgen_version = version("dsgen")
    except PackageNotFoundError:
        dsgen_version = "unknown"
    from dsgen.artifacts import git_commit, git_state

    from dsgen.redaction import redact_command

    extra = {k: redact_command(v) if k == "command" else v for k, v in extra.items() if v is not None}
    return {"dsgen_version": dsgen_version, "git_commit": git_commit(), "git_dirty": git_state()["dirty"], **extra}


def _run_files(folder: Path, caches: bool = False) -> Iterator[Path]:
    """What dsgen's runs left under ``folder``, in a stable order: run result files (with their sidecars and
    failure records), ``dsgen eval`` results (``eval/*.json``) and, with ``caches``, the dataset and label
    caches (``cache/datasets``, ``cache/labels``, ``folder`` itself included)."""
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames.sort()
        here = Path(dirpath)
        if caches and here.parent.name == "cache" and here.name in RUN_CACHES:
            yield here
        for name in sorted(filenames):
            if fnmatch(name, RUN_RESULT) or (here.name == "eval" and name.endswith(".json")):
                yield here / name


def result_files(folder: Path) -> list[Path]:
    """The result files of the runs and ``dsgen eval`` calls under ``folder`` (a run's ``--out``), without
    sidecars, failure records and the copies inside kept model folders."""
    folder = Path(folder)
    return sorted(p for p in _run_files(folder) if not p.name.endswith((".meta.json", ".failed.json"))
                  and not any(part.endswith(".model") for part in p.relative_to(folder).parts))


def runs_inside(folder: Path) -> Path | None:
    """The first thing under ``folder`` that shows it holds dsgen's runs, which no export may delete: a run
    or ``dsgen eval`` result file, a dataset or label cache (``folder`` being ``runs/cache`` or one of its
    caches included); None when there is none."""
    return next(_run_files(Path(folder).absolute(), caches=True), None)


def export_kind(folder: Path) -> str | None:
    """The kind of export (a key of :data:`KINDS`) dsgen wrote at ``folder``, read from its marker; None for
    a folder dsgen did not write as an export. A model folder kept by ``--save-model`` before dsgen
    wrote markers is recognised by the two files only dsgen puts there (its provenance and run result)."""
    folder = Path(folder)
    try:
        kind = json.loads((folder / MARKER).read_text(encoding="utf-8")).get("kind")
    except (OSError, ValueError, AttributeError):
        kind = None
    if kind is None and (folder / PROVENANCE).is_file() and (folder / RESULT).is_file():
        kind = "model-folder"
    return kind if kind in KINDS else None


def check_target_folder(target: Path, kind: str, overwrite: bool | None = False) -> Path:
    """Fail at once, creating nothing, when the export ``kind`` may not or cannot write the folder
    ``target``: a one-line :class:`DsgenError`. An existing folder is replaced only when it is empty, or
    an export of the same kind dsgen wrote (its marker), or ``overwrite`` is set (the user named it on
    purpose); one that holds dsgen's runs (:func:`runs_inside`) or the current folder never. Writability
    is probed, not read from ``os.access``, which says yes to root everywhere (``/proc`` included).

    Args:
        kind: the export about to be written (a key of :data:`KINDS`).
        overwrite: replace a non-empty folder dsgen did not write as this kind; None when the caller has
            no such option to offer (the runner's model folders), which only changes the message.
    """
    from dsgen.artifacts import check_writable_target

    target = Path(target)
    if target.exists() and not target.is_dir():
        raise DsgenError(f"cannot write {target}: it is a file, not a folder; choose another path")
    if target.is_dir():
        runs = runs_inside(target)
        if runs is not None:
            raise DsgenError(f"will not replace {target}: it holds dsgen's runs ({runs}), which no export may delete "
                             f"(--overwrite neither); choose another folder")
        here = Path.cwd().resolve()
        if target.resolve() == here or target.resolve() in here.parents:
            raise DsgenError(f"will not replace {target}: it is or holds the current folder; choose another folder")
        found = export_kind(target)
        try:
            empty = not any(target.iterdir())
        except OSError as exc:
            raise DsgenError(f"cannot write {target}: {exc.strerror or exc}; choose another path") from None
        if not overwrite and found != kind and not empty:
            raise DsgenError(f"will not replace {target}: it is not empty and not {KINDS[kind]} dsgen wrote"
                             f"{f' (it is {KINDS[found]})' if found else ''}; choose another folder"
                             f"{'' if overwrite is None else ' or give --overwrite to replace it'}")
    check_writable_target(target.parent if target.is_dir() else target)
    return target


@contextlib.contextmanager
def staged_folder(target: Path, kind: str, overwrite: bool | None = False) -> Iterator[Path]:
    """A temporary folder beside ``target`` that becomes ``target``, marked as the export ``kind``, when the
    block succeeds (an existing ``target`` is replaced then, when :func:`check_target_folder` allows it,
    which is checked before the block runs); on failure it is removed and ``target`` is left as it was.

    The stage and the place the replaced folder moves to have names no one else has
    (``.<name>.partial-XXXX``, ``.<name>.old-XXXX``, :func:`dsgen.artifacts.staging_dir`): only what this call made
    is ever deleted, never a folder of those names someone else (another export, the user) keeps beside the target."""
    from dsgen.artifacts import ensure_writable_dir, staging_dir

    target = check_target_folder(target, kind, overwrite)
    parent = ensure_writable_dir(target.parent)
    try:
        stage = staging_dir(parent, f".{target.name}.partial-")
    except OSError as exc:
        raise DsgenError(f"cannot write {target}: {exc.strerror or exc}; choose another path") from None
    try:
        yield stage
        (stage / MARKER).write_text(json.dumps({"kind": kind, "note": f"{KINDS[kind]} written by dsgen, which "
                                                "replaces it only with another of its kind"}, indent=2) + "\n",
                                    encoding="utf-8")
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    if target.exists():
        import tempfile

        old = Path(tempfile.mkdtemp(prefix=f".{target.name}.old-", dir=parent))  # a name of its own, then moved into
        moved = old / target.name
        target.rename(moved)
        try:
            stage.rename(target)
        except BaseException:
            moved.rename(target)  # put it back: the target is left as it was
            shutil.rmtree(stage, ignore_errors=True)
            old.rmdir()
            raise
        shutil.rmtree(old, ignore_errors=True)
    else:
        stage.rename(target)


__all__ = ["KINDS", "MARKER", "check_target_folder", "export_kind", "provenance", "result_files", "runs_inside",
           "staged_folder"]
