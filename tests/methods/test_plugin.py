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
    assert "dino-copy-penalty" in out.stdout and "copy-penalty" in out.stdout


PROBE = """
import json
from dsgen.data.pairs import Pair
from dsgen.reweighting.base import REWEIGHTERS, ReweightContext, Reweighter
cls = REWEIGHTERS.get("copy-penalty")
pairs = [Pair("A man plays a guitar.", "A man plays a guitar.", 0.9), Pair("A man plays a guitar.", "Someone sings.", 0.1)]
out, summary = cls(cls.config_class()).apply(pairs, ReweightContext())
print(json.dumps({"subclass": issubclass(cls, Reweighter), "name": cls.name, "version": cls.version,
                  "citation": "@" in cls.citation, "names": REWEIGHTERS.names(),
                  "weights": [p.weight for p in out], "summary": summary["penalised"]}))
"""


def test_a_plugin_adds_a_stage_through_its_entry_point_group(installed):
    """Not only a recipe: a reweighter written outside dsgen, found through `dsgen.reweighters`, named by
    its entry point, checked against the stage's base class, planned and applied like a built-in one."""
    out = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, env=installed)
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["subclass"] and got["name"] == "copy-penalty" and got["version"] == 1 and got["citation"]
    assert "copy-penalty" in got["names"] and "sdi" in got["names"]
    assert got["weights"][0] == pytest.approx(0.1) and got["weights"][1] == 1.0 and got["summary"] == 1
    plan = subprocess.run([sys.executable, "-m", "dsgen.cli", "plan", "dino-copy-penalty", "--preset", "smoke", "--json"],
                          capture_output=True, text=True, env=installed)
    assert plan.returncode == 0, plan.stderr
    reweighter = json.loads(plan.stdout)["plan"]["reweighter"]
    assert reweighter == {"reweighter": "copy-penalty", "threshold": 0.6, "floor": 0.1}


@pytest.mark.slow
def test_plugin_method_runs_end_to_end(installed, tmp_path, tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
    """The plug-in's recipe generates (tiny models: the real LM adds minutes, not coverage), trains and scores."""
    preset = tmp_path / "tiny.toml"
    preset.write_text('seeds = [1]\nmax_inputs = 4\ntasks = ["sts16"]\n'
                      f'[generation]\ngenerator = "{tiny_lm_dir}"\ndevice = "cpu"\n'
                      '[generation.sampling]\nmax_new_tokens = 8\n'
                      f'[training]\nencoder = "{tiny_encoder_dir}"\ndevice = "cpu"\n'
                      'warmup_ratio = 0.0\nmin_trained_steps = 1\n')  # a few pairs make one step: let it count
    out = subprocess.run([sys.executable, "-m", "dsgen.cli", "run", "dino-top-k10", "--preset", str(preset),
                          "--out", str(tmp_path / "runs"), "--quiet"], capture_output=True, text=True,
                         env={**installed, "DSGEN_DATA_DIR": str(sts_data_dir)}, timeout=600)
    assert out.returncode == 0, out.stderr
    (path,) = (tmp_path / "runs" / "results" / "tiny" / "dino-top-k10").glob("*/data-1-seed-1.json")  # <variant>/data-D-seed-N
    result = json.loads(path.read_text())
    assert result["method"] == "dino-top-k10" and result["extra"]["plan"]["generation"]["sampling"]["top_k"] == 10
    assert result["extra"]["generated_pairs"] > 0 and result["tasks"]["sts16"]["n_pairs"] == 1186
