"""The library API (dsgen.compare, dsgen.judge_claims, dsgen.regress...) called directly: it returns what the
command line prints, as DataFrames and records, writes the same files, and refuses bad input with one line
before writing anything."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

import dsgen
from dsgen.errors import DsgenError


@pytest.fixture
def preset(tmp_path, tiny_lm_dir, tiny_encoder_dir):
    """The test plug-ins' preset (mock generator, in this process), where a one-step run trains."""
    from tests.mock_components import register_mock_components

    register_mock_components()
    inputs = tmp_path / "x1.txt"
    inputs.write_text("\n".join(f"A man plays the guitar number {i} on a red street." for i in range(3)))
    path = tmp_path / "mock.toml"
    path.write_text(f"""seeds = [1, 2]
data_seed = 42
inputs = "{inputs}"
max_inputs = 3
tasks = ["sts16"]
[generation]
generator = "{tiny_lm_dir}"
device = "cpu"
per_label = 2
[training]
encoder = "{tiny_encoder_dir}"
device = "cpu"
batch_size = 64
warmup_ratio = 0.0
min_trained_steps = 1
""")
    return path


def test_compare_returns_the_table_the_command_line_writes(preset, tmp_path, sts_data_dir, monkeypatch):
    import pandas as pd
    from typer.testing import CliRunner

    from dsgen.cli import app

    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    out = tmp_path / "runs"
    seen = []
    cmp = dsgen.compare(["mock-dino"], preset=str(preset), out=out, progress=False, cpus_per_worker=1,
                        on_result=lambda method, plan, result: seen.append((method, plan.run)))
    assert cmp.methods == ["mock-dino", "base"] and cmp.failures == [] and cmp.crashed == []
    assert sorted(seen) == [("base", (42, 1)), ("base", (42, 2)), ("mock-dino", (42, 1)), ("mock-dino", (42, 2))]
    assert {r.extra["threads"] for r in cmp.results["mock-dino"]} == {1}  # --cpus-per-worker with --backend local
    csv = out / "tables" / "mock" / "compare-mock-dino-base.csv"
    assert cmp.paths["csv"] == csv and all(p.exists() for p in cmp.written)
    written = {k: p.read_bytes() for k, p in cmp.paths.items()}
    md = written["markdown"].decode()
    assert f"dsgen.compare(['mock-dino'], preset='{preset}', cpus_per_worker=1, out='{out}')" in md  # the call
    pd.testing.assert_frame_equal(cmp.table, pd.read_csv(csv, index_col="method"), check_dtype=False)
    assert set(cmp.long_table["method"]) == {"mock-dino", "base"}
    # the command line over the same runs (all cached) writes the same bytes, its own command line aside
    res = CliRunner().invoke(app, ["compare", "mock-dino", "--preset", str(preset), "--out", str(out), "--quiet",
                                   "--cpus-per-worker", "1"])
    assert res.exit_code == 0, res.output
    assert {k: p.read_bytes() for k, p in cmp.paths.items() if k != "markdown"} == {
        k: v for k, v in written.items() if k != "markdown"}
    cli_md = cmp.paths["markdown"].read_text().splitlines()
    assert [x for x in cli_md if not x.startswith("dsgen")] == [x for x in md.splitlines() if not x.startswith("dsgen")]


def test_judge_claims_returns_verdict_records_and_writes_them(preset, tmp_path, sts_data_dir, monkeypatch):
    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    report = dsgen.judge_claims("control", preset=str(preset), out=tmp_path / "runs", progress=False,
                                publish=tmp_path / "published", command="my notebook")
    (record,) = report.records
    assert record["claim"] == "human-beats-untrained" and record["verdict"] in ("reproduced", "contradicted",
                                                                               "no effect", "inconclusive")
    assert report.papers == ["control"] and set(report.scores) == {"human", "base"} and report.failures == []
    assert list(report.table.index) == ["human-beats-untrained"]
    assert report.table.loc["human-beats-untrained", "verdict"] == record["verdict"]
    saved = json.loads(report.paths["json"].read_text())
    assert saved["verdicts"] == json.loads(json.dumps(report.records))
    assert "my notebook" in report.paths["markdown"].read_text()
    assert [p.name for p in report.published] == ["claims-control.md", "claims-control.png", "claims-control.json"]


def test_regress_returns_its_checks_and_whether_they_passed(tmp_path, tiny_encoder_dir, sts_data_dir):
    preset = tmp_path / "tiny.toml"
    preset.write_text(f'seeds = [1]\ntasks = ["sts16"]\n[training]\nencoder = "{tiny_encoder_dir}"\ndevice = "cpu"\n')
    common = dict(preset=str(preset), baseline=tmp_path / "baseline.json", out=tmp_path / "runs",
                  data_dir=str(sts_data_dir), progress=False)
    made = dsgen.regress(methods=["base"], update=True, **common)
    assert made.updated and made.checks == [] and "wrote baseline" in made.summary()
    ok = dsgen.regress(**common)
    assert ok.passed and len(ok.checks) == 1 and ok.summary() == f"all 1 scores within 1.0 of {tmp_path / 'baseline.json'}"
    assert list(ok.table.columns) == ["method", "task", "baseline", "now", "Δ", "status"]
    assert ok.table.loc[0, "status"] == "ok" and "made the same way" in ok.against
    data = json.loads((tmp_path / "baseline.json").read_text())
    data["baselines"][0]["scores"]["base"]["sts16"] += 2.5
    (tmp_path / "baseline.json").write_text(json.dumps(data))
    bad = dsgen.regress(**common)
    assert not bad.passed and [c.status for c in bad.failed] == ["REGRESSED"] and bad.table.loc[0, "Δ"] == pytest.approx(-2.5, abs=0.01)


BAD = [
    (lambda o: dsgen.compare(["dnio"], out=o), "unknown method 'dnio' (did you mean 'dino'"),
    (lambda o: dsgen.compare("dino", preset="quik", out=o), "unknown preset 'quik'"),
    (lambda o: dsgen.compare(["dino", "dino"], preset="smoke", out=o), "method 'dino' is given twice"),
    (lambda o: dsgen.compare(["dino"], preset="smoke", seeds=[], out=o), "--seeds is empty"),
    (lambda o: dsgen.compare(["dino"], preset="smoke", seeds=[1, 1], out=o), "--seeds must be distinct"),
    (lambda o: dsgen.compare(["dino"], preset="smoke", data_seeds="1,x", out=o), "--data-seeds must be comma-separated"),
    (lambda o: dsgen.run("base", preset="smoke", workers=2, out=o), "--address and --workers need --backend ray"),
    (lambda o: dsgen.run("base", preset="smoke", backend="spark", out=o), "unknown scheduler 'spark'"),
    (lambda o: dsgen.run("base", preset="smoke", cpus_per_worker=0, out=o), "--cpus-per-worker must be at least 1"),
    (lambda o: dsgen.run("base", preset="smoke", device="tpu", out=o), "unknown device 'tpu'"),
    (lambda o: dsgen.curve(["base"], preset="smoke", sizes=[0], out=o), "--sizes must be positive"),
    (lambda o: dsgen.judge_claims(["nope"], preset="smoke", out=o), "unknown paper 'nope'"),
    (lambda o: dsgen.regress(tolerance=-1, out=o), "--tolerance must be non-negative"),
    (lambda o: dsgen.regress(methods=["base"], out=o), "methods go with --update"),
    (lambda o: dsgen.analyze("dino", out=o), "records no SDI importance"),
    (lambda o: dsgen.evaluate("minilm-l6", tasks=["stbs"], json_out=o / "e.json"), "did you mean 'stsb'"),
    (lambda o: dsgen.generate(inputs="missing.txt", out=o / "p.jsonl"), "is neither stsb-train"),
    (lambda o: dsgen.generate(inputs="in.txt", address="auto", out=o / "p.jsonl"), "need --backend ray"),
    (lambda o: dsgen.generate(inputs="in.txt", backend="spark", out=o / "p.jsonl"), "unknown generation backend"),
    (lambda o: dsgen.plan("dino", preset="smoke", generator="openai:"), "needs the model the endpoint serves"),
]


@pytest.mark.parametrize("call,message", BAD, ids=[m for _, m in BAD])
def test_bad_input_raises_one_line_before_anything_is_written(call, message, tmp_path, sts_data_dir, monkeypatch):
    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("A sentence.\n")
    with pytest.raises(DsgenError) as raised:
        call(tmp_path / "out")
    assert message in str(raised.value) and "\n" not in str(raised.value)
    assert not (tmp_path / "out").exists()


def test_import_dsgen_stays_light_and_exposes_the_api_on_first_use():
    code = ("import sys, dsgen; heavy = [m for m in ('torch', 'pandas', 'typer', 'dsgen.api') if m in sys.modules]; "
            "assert not heavy, heavy; f = dsgen.compare; assert 'dsgen.api' in sys.modules and callable(f); "
            "assert 'judge_claims' in dir(dsgen); print(f.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0 and out.stdout.strip() == "dsgen.api.comparison", out.stderr
    with pytest.raises(AttributeError):
        dsgen.no_such_function  # noqa: B018


def test_a_table_records_the_python_call_as_written():
    from dsgen.api.common import call_text

    text = call_text("compare", {"methods": ["dino", "rise"], "preset": "smoke", "out": Path("runs"),
                                 "progress": False, "command": None}, ("methods",))
    assert text == "dsgen.compare(['dino', 'rise'], preset='smoke', out='runs')"
