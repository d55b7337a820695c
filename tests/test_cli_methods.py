"""`dsgen methods / run / compare / regress` from the outside: bad input gets one line and exit 2;
regress exits 1 on a regression."""

import json
import os
import subprocess
import sys

import pytest


def dsgen(*args, env=None, cwd=None):
    return subprocess.run([sys.executable, "-m", "dsgen.cli", *args], capture_output=True, text=True,
                          env={**os.environ, "COLUMNS": "250", **(env or {})}, cwd=cwd, timeout=600)


def test_methods_lists_every_method_with_its_paper():
    out = dsgen("methods")
    assert out.returncode == 0
    for name in ("dino-x1x2", "rise-filter", "dino-gense-filter", "base"):
        assert name in out.stdout
    assert "COLING 2022" in out.stdout and "EMNLP 2021" in out.stdout


@pytest.mark.parametrize("args,message", [
    (["run", "dnio"], "unknown method 'dnio'; did you mean 'dino'"),
    (["run", "dino", "--preset", "quik"], "unknown preset 'quik'; did you mean 'quick'"),
    (["compare", "dino", "rise", "--seeds", "1,two"], "--seeds must be comma-separated integers"),
    (["regress", "--tolerance", "-1"], "--tolerance must be non-negative"),
])
def test_bad_input_gets_one_line_and_exit_2(args, message):
    out = dsgen(*args)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and message in out.stderr and "Traceback" not in out.stderr


def test_unwritable_output_dir_is_refused_before_any_work(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    out = dsgen("run", "base", "--out", str(blocker / "runs"))
    assert out.returncode == 2 and "cannot create output directory" in out.stderr
    assert out.stderr.strip().count("\n") == 0


def test_regress_passes_within_tolerance_and_fails_below_it(tmp_path, tiny_encoder_dir, sts_data_dir):
    preset = tmp_path / "tiny.toml"
    preset.write_text(f'seeds = [1]\ntasks = ["sts16"]\n[training]\nencoder = "{tiny_encoder_dir}"\ndevice = "cpu"\n')
    baseline = tmp_path / "baseline.json"
    common = ["--preset", str(preset), "--baseline", str(baseline), "--out", str(tmp_path / "runs"), "--quiet"]
    env = {"DSGEN_DATA_DIR": str(sts_data_dir)}
    made = dsgen("regress", *common, "--methods", "base", "--update", env=env)
    assert made.returncode == 0, made.stderr
    data = json.loads(baseline.read_text())
    assert data["preset"] == "tiny" and set(data["scores"]) == {"base"}
    ok = dsgen("regress", *common, env=env)
    assert ok.returncode == 0 and "within 1.0" in ok.stdout
    data["scores"]["base"]["sts16"] += 2.5
    baseline.write_text(json.dumps(data))
    bad = dsgen("regress", *common, "--tolerance", "1.0", env=env)
    assert bad.returncode == 1 and "REGRESSED" in bad.stdout and "-2.50" in bad.stdout
    assert dsgen("regress", *common, "--tolerance", "3", env=env).returncode == 0
