"""The set-up's byte-compilation (.ci/compile.py): `make install` compiles the package folders `make run` imports
(.ci/run-imports.txt), `make install-dev` all but the test suites and transformers' per-architecture code.

Run on a scratch site-packages (``site_packages`` replaced), so nothing here writes into the test environment.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture()
def compile_module(monkeypatch, tmp_path):
    spec = importlib.util.spec_from_file_location("ci_compile", ROOT / ".ci" / "compile.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    site = tmp_path / "site"
    for rel in ("fake_top.py", "fake_pkg/__init__.py", "fake_pkg/a.py", "fake_pkg/sub/__init__.py",
                "fake_pkg/sub/b.py", "other/__init__.py", "fake_pkg/tests/test_x.py",
                "transformers/models/llama/modeling_llama.py", "transformers/models/llama/configuration_llama.py",
                "transformers/models/auto/modeling_auto.py"):
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        (site / rel).write_text(f"NAME = {rel!r}\n")
    monkeypatch.setattr(module, "site_packages", lambda: [site])
    return module, site


def compiled(site: Path) -> set[str]:
    return {p.parent.parent.relative_to(site).joinpath(p.name.split(".")[0] + ".py").as_posix()
            for p in site.rglob("__pycache__/*.pyc")}


def test_only_compiles_the_files_directly_in_the_listed_folders(compile_module, tmp_path):
    module, site = compile_module
    listing = tmp_path / "imports.txt"
    listing.write_text("# a comment\n.\nfake_pkg   # trailing comment\n\nmissing/folder\n")
    assert module.main(["--only", str(listing)]) == 0
    # not fake_pkg/sub/, other/, a missing folder
    assert compiled(site) == {"fake_top.py", "fake_pkg/__init__.py", "fake_pkg/a.py"}


FULL = {"fake_top.py", "fake_pkg/__init__.py", "fake_pkg/a.py", "fake_pkg/sub/__init__.py", "fake_pkg/sub/b.py",
        "other/__init__.py", "transformers/models/llama/configuration_llama.py",
        "transformers/models/auto/modeling_auto.py"}


def test_the_full_compile_skips_test_suites_and_transformers_architectures(compile_module):
    module, site = compile_module
    assert module.main([]) == 0
    assert compiled(site) == FULL


def test_a_missing_list_compiles_the_whole_environment(compile_module, tmp_path, capsys):
    module, site = compile_module
    assert module.main(["--only", str(tmp_path / "gone.txt")]) == 0
    assert compiled(site) == FULL
    assert "make run-imports" in capsys.readouterr().err


def test_record_lists_the_site_packages_folders_a_command_imported(compile_module, tmp_path, monkeypatch):
    module, site = compile_module
    monkeypatch.syspath_prepend(str(site))
    for name in ("fake_top", "fake_pkg", "fake_pkg.a", "fake_pkg.sub", "fake_pkg.sub.b"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    import fake_pkg.sub.b  # noqa: F401  (imported "by the command": already in sys.modules when it ends)
    import fake_top  # noqa: F401

    listing = tmp_path / "imports.txt"
    assert module.main(["--record", str(listing), "--", "methods"]) == 0
    lines = listing.read_text().splitlines()
    assert lines[0].startswith("# site-packages folders `dsgen methods` imports from")
    # not other/: nothing of it was imported
    assert [line for line in lines if not line.startswith("#")] == [".", "fake_pkg", "fake_pkg/sub"]
    for name in ("fake_top", "fake_pkg", "fake_pkg.a", "fake_pkg.sub", "fake_pkg.sub.b"):
        sys.modules.pop(name, None)


def test_a_failed_command_leaves_the_list_as_it_was(compile_module, tmp_path, capsys):
    module, _ = compile_module
    listing = tmp_path / "imports.txt"
    listing.write_text("kept\n")
    assert module.main(["--record", str(listing), "--", "compare", "no-such-method"]) == 2
    assert listing.read_text() == "kept\n"
    assert "left as it was" in capsys.readouterr().err
    assert not list(tmp_path.glob("*.tmp"))


def test_bad_arguments_are_refused(compile_module, capsys):
    module, _ = compile_module
    assert module.main(["--only"]) == 2
    assert module.main(["--record", "x.txt", "methods"]) == 2
    assert "usage" in capsys.readouterr().err


def test_the_committed_list_names_folders_of_this_environment():
    """.ci/run-imports.txt was recorded in a `make install` environment; another Python's newest packages may move a
    folder or two, but a list most of whose folders are gone no longer speeds anything up: rewrite it (`make
    run-imports`)."""
    import sysconfig

    listing = ROOT / ".ci" / "run-imports.txt"
    folders = [line for line in listing.read_text().splitlines() if line and not line.startswith("#")]
    site = Path(sysconfig.get_paths()["purelib"])
    present = [f for f in folders if (site / f).is_dir()]
    assert len(folders) > 100 and {"torch", "transformers", "sentence_transformers", "."} <= set(folders)
    assert len(present) >= 0.9 * len(folders), sorted(set(folders) - set(present))[:20]
