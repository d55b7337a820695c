"""Folders and files dsgen writes whole (issue 39): staging never deletes what another process or the user made
beside a target, and every file and folder respects the umask like ``open()`` and ``mkdir()``."""

import os
import stat
from pathlib import Path

import pytest

from dsgen.folders import staged_folder


def theirs(parent: Path) -> dict[Path, str]:
    """Folders beside ``parent/ds`` named as the staging used to name its own, each holding someone's file."""
    made = {}
    for name in (".ds.partial", ".ds.old", "ds.partial", "ds.old"):
        (parent / name).mkdir()
        (parent / name / "theirs.txt").write_text(name)
        made[parent / name / "theirs.txt"] = name
    return made


def test_staging_an_export_never_deletes_a_folder_beside_it(tmp_path):
    others = theirs(tmp_path)
    target = tmp_path / "ds"
    for content in ("first", "second"):  # made, then replaced
        with staged_folder(target, "dataset-folder") as stage:
            (stage / "data.txt").write_text(content)
    with pytest.raises(RuntimeError):
        with staged_folder(target, "dataset-folder") as stage:
            (stage / "data.txt").write_text("third")
            raise RuntimeError("the export failed half-way")
    assert (target / "data.txt").read_text() == "second"
    for path, name in others.items():
        assert path.read_text() == name
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["ds", *others.values()])  # no stage left


@pytest.fixture
def umask():
    def set_to(mask):
        os.umask(mask)

    before = os.umask(0o022)
    yield set_to
    os.umask(before)


def mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


@pytest.mark.parametrize("mask", [0o022, 0o002, 0o077])
def test_files_and_folders_dsgen_writes_respect_the_umask(tmp_path, umask, mask):
    """Every atomic write was 0600 (``mkstemp``) and every staged folder 0700, whatever the umask: results,
    datasets, tables and ``--publish`` copies could not be read by a group sharing them."""
    from dsgen.artifacts import atomic_open, write_json, write_jsonl

    umask(mask)
    write_json(tmp_path / "a.json", {"x": 1})
    write_jsonl(tmp_path / "b.jsonl", [{"x": 1}])
    with atomic_open(tmp_path / "c.bin", "wb") as fh:
        fh.write(b"x")
    with open(tmp_path / "reference", "w") as fh:
        fh.write("x")
    for name in ("a.json", "b.jsonl", "c.bin"):
        assert mode(tmp_path / name) == mode(tmp_path / "reference") == 0o666 & ~mask, name
    with staged_folder(tmp_path / "ds", "dataset-folder") as stage:
        (stage / "f").write_text("x")
    (tmp_path / "reference-dir").mkdir()
    assert mode(tmp_path / "ds") == mode(tmp_path / "reference-dir") == 0o777 & ~mask
    from types import SimpleNamespace

    from dsgen.data.fits import FitStore

    fit = SimpleNamespace(kind="unit", compute=lambda data, folder: (folder / "w").write_text("x") and {})
    FitStore(tmp_path / "fits").make(fit, "k", None, {})
    assert mode(tmp_path / "fits" / "unit-k") == 0o777 & ~mask
    assert mode(tmp_path / "fits" / "unit-k" / "fit.json") == 0o666 & ~mask
