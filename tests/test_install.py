"""dsgen as a user installs it: built into a wheel and installed non-editable, not from the checkout.

The editable install that ``make`` uses reads the source tree, so it hid a wheel without ``dsgen/scheduling/`` (the
hand-kept package list had missed it; every ``dsgen compare`` failed with ModuleNotFoundError). Here the wheel is
built from a copy of the checkout, must build without a warning from setuptools, must hold every file of the package
folders (``dsgen/``, ``methods/`` -> ``dsgen/methods/``, ``benchmarks/`` -> ``dsgen/benchmarks/``: task specs, presets,
claims) and nothing else, and ``dsgen`` runs from it alone: a scratch virtual environment that reuses the dependencies
of the one running the tests (a ``.pth`` naming their site-packages, whose own ``.pth`` files, the editable
install's finder among them, are not run), with its working directory outside the checkout.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from dsgen.artifacts import tomllib

from tests.conftest import missing

ROOT = Path(__file__).resolve().parents[1]
# the package folders and where their files land in the wheel (setup.py's PACKAGE_DIR, and dsgen/ itself)
FOLDERS = {"dsgen": "dsgen", "methods": "dsgen/methods", "benchmarks": "dsgen/benchmarks"}
NOT_SHIPPED = re.compile(r"(^|/)__pycache__/|\.py[co]$")


def _source_copy(dest: Path) -> Path:
    """The checkout's files as ``pip install .`` sees them, without what earlier builds left in it (a stale
    ``build/lib`` or ``*.egg-info/SOURCES.txt`` puts files in a wheel that the source no longer has): the files git
    tracks or would track, or without git, the tree less the usual build and run outputs."""
    listed = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                            capture_output=True) if shutil.which("git") else None
    if listed is not None and listed.returncode == 0 and listed.stdout:
        for rel in sorted({p for p in listed.stdout.decode().split("\0") if p}):
            if (ROOT / rel).is_file():  # a tracked file deleted in the working tree is not there to build
                (dest / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / rel, dest / rel)
    else:
        shutil.copytree(ROOT, dest, ignore=_not_source, dirs_exist_ok=True)
    return dest


def _not_source(folder: str, names: list[str]) -> set[str]:
    """Without git: build and run outputs at the top of the checkout (only there: ``dsgen/runs/`` is source),
    bytecode anywhere."""
    top = Path(folder).resolve() == ROOT
    return {n for n in names if n == "__pycache__" or n.endswith((".pyc", ".pyo")) or n.endswith(".egg-info")
            or (top and (n in (".git", "build", "dist", "runs", "out", "results", ".pytest_cache")
                         or n.startswith(".venv")))}


def _check_build_requirements() -> None:
    """``--no-build-isolation`` builds with this interpreter's setuptools: it must be one pyproject.toml accepts
    (an older one rejects the project table, e.g. the SPDX license string needs 77.0.3)."""
    from importlib.metadata import PackageNotFoundError, version

    from packaging.requirements import Requirement

    for text in tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]:
        req = Requirement(text)
        try:
            have = version(req.name)
        except PackageNotFoundError:
            have = None
        if have is None or not req.specifier.contains(have, prereleases=True):
            missing(f"building the wheel needs {text} (here: {req.name} {have or 'not installed'}); "
                    f"{sys.executable} -m pip install '{text}'", "CI's environment must be able to build dsgen")


@pytest.fixture(scope="module")
def wheel_build(tmp_path_factory):
    """The wheel built from a copy of the checkout, with pip's verbose log (setuptools' own output in it)."""
    _check_build_requirements()
    tmp = tmp_path_factory.mktemp("wheel")
    src = _source_copy(tmp / "src")
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "--no-index",
                          "--wheel-dir", str(tmp / "dist"), str(src)], capture_output=True, text=True, timeout=600,
                         env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
    log = out.stdout + out.stderr
    assert out.returncode == 0, log
    (wheel,) = (tmp / "dist").glob("dsgen-*.whl")
    return wheel, src, log


@pytest.fixture(scope="module")
def installed(wheel_build, tmp_path_factory):
    """A scratch virtual environment holding dsgen from the wheel alone, its dependencies those of the environment
    running the tests (their site-packages named in a ``.pth``; the editable install's finder there never runs)."""
    wheel, _, _ = wheel_build
    env_dir = tmp_path_factory.mktemp("scratch") / "venv"
    venv.EnvBuilder(with_pip=False, symlinks=os.name != "nt").create(env_dir)
    python = env_dir / ("Scripts/python.exe" if os.name == "nt" else "bin/python")
    site = Path(subprocess.run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    deps = [p for p in sys.path if Path(p).name in ("site-packages", "dist-packages") and Path(p).is_dir()]
    (site / "dev-dependencies.pth").write_text("".join(f"{p}\n" for p in deps), encoding="utf-8")
    env = scratch_env()
    out = subprocess.run([str(python), "-m", "pip", "install", "--no-deps", "--no-index", str(wheel)],
                         capture_output=True, text=True, timeout=600, env=env, cwd=env_dir)
    assert out.returncode == 0, out.stdout + out.stderr
    return env_dir, python


def scratch_env(**extra: str) -> dict[str, str]:
    """The environment of a process that must see the installed dsgen alone: nothing on PYTHONPATH."""
    return {**{k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME")}, **extra}


def test_the_wheel_builds_without_a_setuptools_warning(wheel_build):
    """Setuptools' warnings (``BuildBackendWarning: Package 'dsgen.claims.papers' is absent from the packages
    configuration`` and the like) are what a user sees on every install; the build's output has none. Only
    setuptools' own lines count (pip indents them), not pip's about its configuration."""
    _, _, log = wheel_build
    warned = [line for line in log.splitlines() if line[:1].isspace() and re.search(r"warn|deprecat|^\s*!!", line, re.I)
              # PYTHONDONTWRITEBYTECODE=1 in the environment: distutils says it will not byte-compile; not ours
              and "byte-compiling is disabled" not in line]
    assert not warned, "\n".join(warned) + "\n\n--- the build's output ---\n" + log


def test_the_wheel_holds_every_file_of_the_package_folders_and_nothing_else(wheel_build):
    """Every module and every data file the code reads from inside the package (importlib.resources: task specs,
    presets, the papers' claims) is in the wheel, at its installed name; nothing else is (no tests, no stale build
    output). A new ``dsgen/<name>/`` ships without an edit; a data file of a new kind fails here until its kind is
    declared in pyproject.toml's ``[tool.setuptools.package-data]``."""
    wheel, src, _ = wheel_build
    expected = {f"{target}/{p.relative_to(src / folder).as_posix()}"
                for folder, target in FOLDERS.items() for p in (src / folder).rglob("*")
                if p.is_file() and not NOT_SHIPPED.search(p.relative_to(src).as_posix())}
    with zipfile.ZipFile(wheel) as zf:
        names = {n for n in zf.namelist() if not n.endswith("/")}
    shipped = {n for n in names if not n.split("/", 1)[0].endswith(".dist-info")}
    assert expected - shipped == set(), ("files of the package folders missing from the wheel (a data file: declare "
                                         "its kind in [tool.setuptools.package-data]; a folder: setup.py's discovery)")
    assert shipped - expected == set(), "files in the wheel that the package folders do not hold"
    # the files read at run time through importlib.resources, by name: present, so a glob can never silently miss them
    for needed in ("dsgen/scheduling/__init__.py", "dsgen/task_specs/sts-x2.json", "dsgen/claims/papers/dino.toml",
                   "dsgen/benchmarks/presets/smoke.toml", "dsgen/methods/dino.py"):
        assert needed in shipped
    entry_points = next(n for n in names if n.endswith(".dist-info/entry_points.txt"))
    with zipfile.ZipFile(wheel) as zf:
        assert "dsgen = dsgen.cli:main" in zf.read(entry_points).decode()


PROBE = """
import json, sys
import dsgen, dsgen.scheduling, dsgen.methods, dsgen.benchmarks.presets
from dsgen.claims import load_claims, paper_files
from dsgen.presets import builtin_presets, load_preset
from dsgen.taskspec import BUILTIN_SPECS, load_task_spec

for name in builtin_presets():
    load_preset(name)
for name in BUILTIN_SPECS:
    load_task_spec(name)
where = lambda m: getattr(m, "__file__", None) or next(iter(getattr(m, "__path__", [])), None)  # a namespace: its folder
print(json.dumps({"modules": {m: where(v) for m, v in sys.modules.items() if m.split(".")[0] == "dsgen"},
                  "presets": builtin_presets(), "papers": paper_files(), "claims": len(load_claims(paper_files())),
                  "editable_finders": [repr(f) for f in sys.meta_path if "editable" in repr(f).lower()]}))
"""


def test_dsgen_and_its_data_files_load_from_the_installed_wheel(installed, tmp_path):
    """Imported in a folder outside the checkout, from the scratch install alone: dsgen, the packages a hand-kept
    list missed or that map a folder (``dsgen.scheduling``, ``dsgen.methods``, ``dsgen.benchmarks``), every built-in
    preset, task spec and paper's claims (read through importlib.resources); no editable finder is there that could
    fall back on the checkout. (The slow test below runs the commands themselves.)"""
    env_dir, python = installed
    out = subprocess.run([str(python), "-c", PROBE], capture_output=True, text=True, cwd=tmp_path, env=scratch_env(),
                         timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    root = env_dir.resolve()
    assert {"dsgen", "dsgen.scheduling", "dsgen.methods", "dsgen.benchmarks.presets", "dsgen.claims"} <= set(got["modules"])
    outside = {m: f for m, f in got["modules"].items() if f is None or not Path(f).resolve().is_relative_to(root)}
    assert outside == {}, f"imported from elsewhere than the scratch install {root}"
    assert got["editable_finders"] == []
    assert set(got["presets"]) == {p.stem for p in (ROOT / "benchmarks" / "presets").glob("*.toml")}
    assert set(got["papers"]) == {p.stem for p in (ROOT / "dsgen" / "claims" / "papers").glob("*.toml")}
    assert got["claims"] > 0


@pytest.mark.slow
def test_dsgen_methods_and_a_smoke_comparison_run_from_the_installed_wheel(installed, tmp_path, sts_data_dir):
    """The commands a user runs first, from the install's own ``dsgen`` script, in a folder outside the checkout:
    ``dsgen methods`` and ``dsgen compare base --preset smoke`` (the untrained encoder on the shared data)."""
    env_dir, _ = installed
    dsgen = env_dir / ("Scripts/dsgen.exe" if os.name == "nt" else "bin/dsgen")
    env = scratch_env(DSGEN_DATA_DIR=str(sts_data_dir), COLUMNS="250")
    out = subprocess.run([str(dsgen), "methods"], capture_output=True, text=True, cwd=tmp_path, env=env, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "dino" in out.stdout and "COLING 2022" in out.stdout
    runs = tmp_path / "runs"
    out = subprocess.run([str(dsgen), "compare", "base", "--preset", "smoke", "--out", str(runs)], capture_output=True,
                         text=True, cwd=tmp_path, env=env, timeout=1800)
    assert out.returncode == 0, out.stdout + out.stderr
    (result,) = (runs / "results" / "smoke" / "base").glob("*/data-*-seed-1.json")
    scores = json.loads(result.read_text(encoding="utf-8"))
    assert scores["method"] == "base" and set(scores["tasks"]) == {"stsb", "sickr-test"}, scores
    assert (runs / "tables" / "smoke" / "compare-base.md").is_file()
