"""An optional extra the tests need is skipped on a developer machine and fails in CI (``CI=true``), as the
shared data does: every such import goes through ``tests.conftest.require``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parent


def test_a_missing_extra_skips_here_and_fails_in_ci(monkeypatch):
    from tests.conftest import require

    monkeypatch.delenv("CI", raising=False)
    with pytest.raises(pytest.skip.Exception, match=r"pip install 'dsgen\[mteb\]'"):
        require("dsgen_no_such_module", "mteb")
    monkeypatch.setenv("CI", "true")
    with pytest.raises(pytest.fail.Exception, match="CI installs every extra"):
        require("dsgen_no_such_module", "mteb")
    assert require("json") is __import__("json")


@pytest.mark.parametrize("ci, outcome, code", [("", "SKIPPED [1]", 5), ("true", "1 error", 2)])
def test_a_test_module_needing_a_missing_extra_fails_to_collect_in_ci(tmp_path, ci, outcome, code):
    """The Ray tests without Ray (hidden by a package that fails to import): skipped on a developer machine,
    an error in CI (before, skipped in CI too, so a CI without the extra passed without testing it)."""
    hidden = tmp_path / "hide" / "ray"
    hidden.mkdir(parents=True)
    (hidden / "__init__.py").write_text("raise ModuleNotFoundError('ray hidden by the test', name='ray')\n")
    env = {**os.environ, "CI": ci, "PYTHONPATH": os.pathsep.join([str(tmp_path / "hide"), str(TESTS.parent)])}
    out = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          str(TESTS / "generation" / "test_ray_backend.py")], capture_output=True, text=True,
                         cwd=TESTS.parent, env=env, timeout=300)
    assert outcome in out.stdout and out.returncode == code, out.stdout + out.stderr  # 5: nothing collected
    assert "ray hidden by the test" in out.stdout + out.stderr


def test_no_test_imports_an_extra_with_importorskip():
    """``pytest.importorskip`` skips in CI too: every optional import uses ``require``."""
    offenders = [f"{path.relative_to(TESTS)}:{n}" for path in sorted(TESTS.rglob("*.py")) if path.name != Path(__file__).name
                 for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if "importorskip(" in line]
    assert offenders == []
