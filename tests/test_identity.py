"""Identity of what a run consumes and of the code that ran it: local models keyed by their content (custom
code included), each file hashed once per process without ever serving a stale key; a dirty checkout
recorded as dirty wherever its commit is."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsgen import identity
from dsgen.models import model_fingerprint

CUSTOM_CODE = '"""A custom architecture, run by trust_remote_code."""\nSCALE = 1.0\n'


@pytest.fixture
def settled(monkeypatch):
    """Files count as settled (their hashes remembered) 0.1 s after their last change instead of 2 s, and the
    memo starts empty; ``settled()`` waits until the files written so far are settled."""
    monkeypatch.setattr(identity, "SETTLED_SECONDS", 0.1, raising=False)
    monkeypatch.setattr(identity, "_FILE_KEYS", {}, raising=False)
    return lambda: time.sleep(0.25)


@pytest.fixture
def hashed(monkeypatch):
    """The paths :func:`dsgen.identity.file_key` reads, in order (a call served by the memo reads nothing)."""
    calls: list[Path] = []
    original = identity.file_hash

    def counting(path, length=16):
        calls.append(Path(path))
        return original(path, length)

    monkeypatch.setattr(identity, "file_hash", counting)
    return calls


def edit_in_place(path: Path, offset: int, data: bytes) -> None:
    """Overwrite bytes of ``path`` and put its mtime back: same size, same mtime, other content."""
    before = path.stat()
    with path.open("r+b") as fh:
        fh.seek(offset)
        fh.write(data)
    os.utime(path, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = path.stat()
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)


@pytest.fixture
def model_dir(tmp_path, tiny_lm_dir):
    """A copy of the tiny Llama folder with custom modelling code, as a model shipped for trust_remote_code."""
    folder = tmp_path / "tiny-custom"
    shutil.copytree(tiny_lm_dir, folder)
    (folder / "modeling_tiny.py").write_text(CUSTOM_CODE)
    return folder


def test_an_edit_keeping_size_and_mtime_is_a_new_model_and_the_memo_never_serves_the_old_key(
        model_dir, settled, hashed):
    settled()
    before = model_fingerprint(str(model_dir))
    weights = model_dir / "model.safetensors"
    edit_in_place(weights, weights.stat().st_size - 4, b"\x7f\x7f\x7f\x7f")  # the last weights' bytes
    edited = model_fingerprint(str(model_dir))
    assert edited != before
    assert {k for k in before["content"] if before["content"][k] != edited["content"][k]} == {"model.safetensors"}
    settled()
    edit_in_place(model_dir / "modeling_tiny.py", CUSTOM_CODE.index("1.0"), b"2.0")
    code_edited = model_fingerprint(str(model_dir))
    assert code_edited["content"]["modeling_tiny.py"] != edited["content"]["modeling_tiny.py"]  # custom code is keyed
    assert code_edited["content"]["model.safetensors"] == edited["content"]["model.safetensors"]


def test_each_file_is_hashed_once_while_it_is_unchanged(model_dir, settled, hashed):
    settled()
    before = model_fingerprint(str(model_dir))
    files = sorted(p.relative_to(model_dir).as_posix() for p in model_dir.iterdir())
    assert sorted(before["content"]) == files and sorted(p.name for p in hashed) == files
    hashed.clear()
    assert model_fingerprint(str(model_dir)) == before and hashed == []  # unchanged: nothing read again
    weights = model_dir / "model.safetensors"
    edit_in_place(weights, 0, weights.read_bytes()[:1])  # rewritten with the same bytes: read again, same key
    assert model_fingerprint(str(model_dir)) == before and hashed == [weights.resolve()]


def test_a_fresh_process_gives_the_key_this_process_remembers(model_dir, settled):
    """What the memo serves is what hashing the bytes gives: a new process, with no memo, agrees."""
    settled()
    model_fingerprint(str(model_dir))
    edit_in_place(model_dir / "modeling_tiny.py", CUSTOM_CODE.index("1.0"), b"3.0")
    here = model_fingerprint(str(model_dir))
    code = "import json, sys; from dsgen.models import model_fingerprint; print(json.dumps(model_fingerprint(sys.argv[1])))"
    out = subprocess.run([sys.executable, "-c", code, str(model_dir)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == here


def test_a_just_written_file_is_not_remembered_until_it_settles(tmp_path, monkeypatch, hashed):
    """Two edits within one timestamp tick can leave size, mtime and ctime alike: a file changed in the last
    SETTLED_SECONDS is hashed at every call rather than remembered."""
    monkeypatch.setattr(identity, "_FILE_KEYS", {}, raising=False)
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 4)
    assert identity.SETTLED_SECONDS >= 1.0
    first = model_fingerprint(str(path))
    assert model_fingerprint(str(path)) == first and len(hashed) == 2 and identity._FILE_KEYS == {}


def test_a_model_file_is_keyed_by_its_bytes_not_its_name_or_times(tmp_path, settled):
    path = tmp_path / "a" / "model.gguf"
    path.parent.mkdir()
    path.write_bytes(b"GGUF" + bytes(range(256)) * 64)
    settled()
    key = model_fingerprint(str(path))
    copy = tmp_path / "b" / "renamed.gguf"
    copy.parent.mkdir()
    shutil.copyfile(path, copy)
    assert model_fingerprint(str(copy)) == key  # the same bytes elsewhere, newer mtime: the same model
    edit_in_place(path, 100, b"\x00\x01")
    assert model_fingerprint(str(path)) != key
    assert identity.checkpoint_key(path) != identity.checkpoint_key(copy)  # its dequantised copy follows


def test_a_folder_key_leaves_out_what_is_no_part_of_the_model(model_dir, settled):
    settled()
    key = model_fingerprint(str(model_dir))
    (model_dir / "README.md").write_text("# a card\n")
    (model_dir / ".cache" / "huggingface").mkdir(parents=True)
    (model_dir / ".cache" / "huggingface" / "download.metadata").write_text("etag 1\n")
    (model_dir / "__pycache__").mkdir()
    (model_dir / "__pycache__" / "modeling_tiny.cpython-311.pyc").write_bytes(b"\x00")
    assert model_fingerprint(str(model_dir)) == key
    (model_dir / "chat_template.jinja").write_text("{{ messages }}")
    assert "chat_template.jinja" in model_fingerprint(str(model_dir))["content"]


# -- the git commit, and whether the tree is the commit ---------------------------------------------


def git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True,
                   env={**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t"})


@pytest.fixture
def checkout(tmp_path):
    root = tmp_path / "checkout"
    (root / "dsgen").mkdir(parents=True)
    (root / "dsgen" / "core.py").write_text("X = 1\n")
    (root / ".gitignore").write_text("/runs/\n")
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    return root


def test_results_made_from_an_edited_checkout_say_it(tmp_path):
    """dsgen run from a checkout whose code differs from its commit: the versions a result records say
    dirty beside the commit (before, the commit alone, as if the code were the commit's)."""
    import dsgen

    root = tmp_path / "checkout"
    shutil.copytree(Path(dsgen.__file__).parent, root / "dsgen", ignore=shutil.ignore_patterns("__pycache__"))
    git(root, "init", "-q")
    git(root, "add", ".")
    git(root, "commit", "-q", "-m", "one")
    code = "import json; from dsgen.artifacts import package_versions; print(json.dumps(package_versions()))"

    def versions():
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(root)})
        return json.loads(out.stdout)

    clean = versions()
    assert len(clean["dsgen_git_commit"]) == 40 and clean["dsgen_git_dirty"] is False
    with (root / "dsgen" / "errors.py").open("a") as fh:
        fh.write("# edited\n")
    assert versions() == {**clean, "dsgen_git_dirty": True}


def test_a_dirty_tree_is_recorded_as_dirty(checkout):
    from dsgen.artifacts import read_git_state

    clean = read_git_state(checkout)
    assert len(clean["commit"]) == 40 and clean["dirty"] is False
    (checkout / "notes.txt").write_text("a user's notes\n")  # untracked outside the code: still clean
    (checkout / "runs").mkdir()
    (checkout / "runs" / "r.json").write_text("{}")  # ignored
    assert read_git_state(checkout) == clean
    (checkout / "dsgen" / "core.py").write_text("X = 2\n")  # a tracked file edited
    assert read_git_state(checkout) == {**clean, "dirty": True}
    git(checkout, "add", ".")
    assert read_git_state(checkout)["dirty"] is True  # staged, not committed
    git(checkout, "commit", "-q", "-m", "two")
    assert read_git_state(checkout)["dirty"] is False
    (checkout / "dsgen" / "new_method.py").write_text("Y = 1\n")  # untracked code a run may import
    assert read_git_state(checkout)["dirty"] is True
    assert read_git_state(checkout.parent) == {"commit": None, "dirty": None}  # not a checkout


def test_the_dirty_flag_is_written_wherever_the_commit_is(monkeypatch, tmp_path):
    """Results' versions, sidecars, export provenance and the tidy CSV's columns say dirty beside the commit."""
    from dsgen import artifacts
    from dsgen.reports.comparison import Comparison
    from dsgen.evaluation.results import Result, TaskScore
    from dsgen.folders import provenance

    monkeypatch.setattr(artifacts, "_GIT", {"commit": "a" * 40, "dirty": True}, raising=False)
    result = Result("m", {"stsb": TaskScore(50.0, 50.0, 10)}, method="base", seed=1)
    assert result.versions["dsgen_git_commit"] == "a" * 40 and result.versions["dsgen_git_dirty"] is True
    sidecar = artifacts.write_sidecar(tmp_path / "pairs.jsonl")
    assert artifacts.read_json(sidecar)["versions"]["dsgen_git_dirty"] is True
    assert provenance()["git_commit"] == "a" * 40 and provenance()["git_dirty"] is True
    tidy = Comparison(["base"], ["stsb"], {"base": [result]}).long_frame()
    assert tidy["git_commit"].eq("a" * 40).all() and tidy["git_dirty"].eq(True).all()
    monkeypatch.setattr(artifacts, "_GIT", {"commit": "a" * 40, "dirty": False}, raising=False)
    assert Result("m", {}).versions["dsgen_git_dirty"] is False
