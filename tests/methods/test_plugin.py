"""The worked plug-in example: installed from its own folder, listed by `dsgen methods`, run."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "plugin"


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    import shutil

    target = tmp_path_factory.mktemp("site")
    source = tmp_path_factory.mktemp("src") / "plugin"
    shutil.copytree(EXAMPLE, source, ignore=shutil.ignore_patterns("build", "*.egg-info"))  # keep the checkout clean
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--target", str(target), str(source)], check=True, capture_output=True, timeout=300)
    return {**os.environ, "PYTHONPATH": str(target), "COLUMNS": "250"}


def test_plugin_shows_up_in_dsgen_methods(installed):
    out = subprocess.run([sys.executable, "-m", "dsgen.cli", "methods"], capture_output=True, text=True, env=installed)
    assert out.returncode == 0 and "dino-top-k10" in out.stdout and "example plug-in" in out.stdout


@pytest.mark.slow
def test_plugin_method_runs_end_to_end(installed, tmp_path, tiny_encoder_dir, sts_data_dir):
    preset = tmp_path / "tiny.toml"
    preset.write_text('seeds = [1]\nmax_inputs = 4\ntasks = ["sts16"]\n'
                      f'[training]\nencoder = "{tiny_encoder_dir}"\ndevice = "cpu"\n')
    out = subprocess.run([sys.executable, "-m", "dsgen.cli", "run", "dino-top-k10", "--preset", str(preset),
                          "--out", str(tmp_path / "runs"), "--quiet"], capture_output=True, text=True,
                         env={**installed, "DSGEN_DATA_DIR": str(sts_data_dir)}, timeout=600)
    assert out.returncode == 0, out.stderr
    (path,) = (tmp_path / "runs" / "results" / "tiny" / "dino-top-k10").glob("*/data-1-seed-1.json")  # <variant>/data-D-seed-N
    result = json.loads(path.read_text())
    assert result["method"] == "dino-top-k10" and result["extra"]["plan"]["generation"]["sampling"]["top_k"] == 10
    assert result["extra"]["generated_pairs"] > 0 and result["tasks"]["sts16"]["n_pairs"] == 1186
