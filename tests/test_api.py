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


@pytest.fixture
def checkout(monkeypatch):
    """Set the git state dsgen reads of its checkout (commit, dirty) for this test, as a clean or an edited tree
    would give it; the runs made record it."""
    import dsgen.artifacts

    def at(commit, dirty=False):
        monkeypatch.setattr(dsgen.artifacts, "_GIT", {"commit": commit, "dirty": dirty})
    at("a" * 40)
    return at


def test_judge_claims_returns_verdict_records_and_writes_them(preset, tmp_path, sts_data_dir, monkeypatch, checkout):
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
    md = report.paths["markdown"].read_text()
    assert "my notebook" in md and "(preset `mock`, exploratory)" in md and "--confirm <claim id" in md
    assert [p.name for p in report.published] == ["claims-control.md", "claims-control.png", "claims-control.json"]
    # one clean commit: said in the report, each run's commit in the JSON
    assert f"Made at one clean commit: 4 method runs at {'a' * 7} (clean)" in md
    assert saved["provenance"]["clean"] and {r["commit"] for r in saved["provenance"]["runs"]} == {"a" * 40}
    # per test set, descriptive, beside the tested average
    assert "## Per test set (descriptive)" in md
    assert set(saved["per_task"]["human-beats-untrained"]["reference"]) == {"sts16"}


def test_publishing_claims_needs_one_clean_commit(preset, tmp_path, sts_data_dir, monkeypatch, checkout):
    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    common = dict(preset=str(preset), out=tmp_path / "runs", progress=False, publish=tmp_path / "published")
    checkout("a" * 40, dirty=True)
    with pytest.raises(DsgenError, match="uncommitted changes: commit them .* or pass --allow-mixed"):
        dsgen.judge_claims("control", **common)
    assert not (tmp_path / "runs").exists()  # refused before any run
    dsgen.judge_claims("control", allow_mixed=True, **common)  # made from the edited tree
    published = (tmp_path / "published" / "mock" / "claims-control.md").read_bytes()
    checkout("b" * 40)
    with pytest.raises(DsgenError, match="made at this clean commit \\(bbbbbbb\\), but: 4 method runs at aaaaaaa \\(dirty tree\\)"):
        dsgen.judge_claims("control", **common)
    assert (tmp_path / "published" / "mock" / "claims-control.md").read_bytes() == published  # nothing published
    assert "Runs: 4 method runs at aaaaaaa (dirty tree)" in (tmp_path / "runs" / "tables" / "mock" / "claims-control.md"
                                                             ).read_text()  # the report itself is written under out
    mixed = dsgen.judge_claims("control", allow_mixed=True, **common)
    md = mixed.published[0].read_text()
    assert "**Mixed commits** (published with `--allow-mixed`): 4 method runs at aaaaaaa (dirty tree)" in md
    assert json.loads(mixed.paths["json"].read_text())["provenance"]["clean"] is False


def test_a_confirmation_runs_fresh_data_seeds_and_tests_the_claims_alone(preset, tmp_path, sts_data_dir, monkeypatch):
    from dsgen.claims.confirm import CONFIRM_FIRST

    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    common = dict(preset=str(preset), out=tmp_path / "runs", progress=False)
    with pytest.raises(DsgenError, match="unknown claim 'human-beats-untrainde' \\(did you mean 'human-beats-untrained'"):
        dsgen.judge_claims("control", confirm="human-beats-untrainde", **common)
    with pytest.raises(DsgenError, match="cannot plan the confirmation of 'human-beats-untrained': one dataset"):
        dsgen.judge_claims("control", confirm="human-beats-untrained", **common)  # the preset has one data seed
    report = dsgen.judge_claims("control", confirm="human-beats-untrained", confirm_data_seeds=2, **common)
    confirmed = report.confirmation
    assert report.stage == "exploratory" and confirmed.stage == "confirmatory"
    assert report.runs == [(42, 1), (42, 2)]
    assert confirmed.runs == [(CONFIRM_FIRST, 1), (CONFIRM_FIRST, 2), (CONFIRM_FIRST + 1, 1), (CONFIRM_FIRST + 1, 2)]
    assert [v.claim.id for v in confirmed.verdicts] == ["human-beats-untrained"]
    assert confirmed.paths["markdown"].name == "claims-control-confirm-human-beats-untrained.md"
    md = confirmed.paths["markdown"].read_text()
    assert "(preset `mock`, confirmatory)" in md and "2 fresh data seeds (1001-1002) that it never used, a number given with `--confirm-data-seeds 2`" in md
    saved = json.loads(confirmed.paths["json"].read_text())
    assert saved["stage"] == "confirmatory" and saved["plans"][0]["why"].startswith("one dataset")
    assert {r["data_seed"] for r in saved["provenance"]["runs"]} == {CONFIRM_FIRST, CONFIRM_FIRST + 1}


def test_claims_under_several_recipes_are_marked_robust_or_recipe_dependent(preset, tmp_path, sts_data_dir,
                                                                          monkeypatch):
    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    slow = tmp_path / "slow.toml"
    slow.write_text(f'extends = "{preset}"\n[training]\nlearning_rate = 1e-6\n')
    report = dsgen.judge_claims("control", preset=str(preset), recipes=str(slow), out=tmp_path / "runs",
                                progress=False)
    (other,) = report.recipes
    assert other.preset.name == "slow" and other.paths["markdown"].parent.name == "slow"
    assert "Recipe: preset `slow`: training " in other.paths["markdown"].read_text()
    assert "learning_rate = 1e-06" in other.paths["markdown"].read_text()
    (row,) = report.robustness
    mine, theirs = report.verdicts[0].verdict, other.verdicts[0].verdict
    assert row["claim"] == "human-beats-untrained" and set(row["recipes"]) == {"mock", "slow"}
    assert row["across"] == ("robust" if mine == theirs != "inconclusive" else "inconclusive under every recipe"
                             if mine == theirs else "recipe-dependent")
    md = report.paths["robustness_markdown"].read_text()
    assert report.paths["robustness_markdown"].name == "claims-control-recipes-slow.md"
    assert "- `slow`: preset `slow`: training " in md and f"**{row['across']}**" in md
    saved = json.loads(report.paths["robustness_json"].read_text())
    assert saved["claims"] == json.loads(json.dumps(report.robustness))
    # the command line over the same runs: each report's verdicts, the confirmation's, and the claims across recipes
    from typer.testing import CliRunner

    from dsgen.cli import app

    res = CliRunner().invoke(app, ["claims", "--papers", "control", "--preset", str(preset), "--recipes", str(slow),
                                   "--confirm", "human-beats-untrained", "--confirm-data-seeds", "2",
                                   "--out", str(tmp_path / "runs"), "--quiet"])
    assert res.exit_code == 0, res.output
    assert "exploratory, preset mock, 2 runs:" in res.output and "exploratory, preset slow, 2 runs:" in res.output
    assert "confirmatory, preset mock, 4 runs:" in res.output
    assert f"{row['across']:>13}  human-beats-untrained" in res.output
    assert "claims-control-confirm-human-beats-untrained.md" in res.output.replace("\n", "")
    with pytest.raises(DsgenError, match="names preset 'mock' twice"):
        dsgen.judge_claims("control", preset=str(preset), recipes=[str(preset)], out=tmp_path / "runs")
    other_tasks = tmp_path / "other.toml"
    other_tasks.write_text(f'extends = "{preset}"\ntasks = ["stsb"]\n')
    with pytest.raises(DsgenError, match="recipes must differ in training only"):
        dsgen.judge_claims("control", preset=str(preset), recipes=[str(other_tasks)], out=tmp_path / "runs")


def test_a_confirmation_keeps_the_exploratory_training_seeds_per_data_seed():
    from dsgen.api.verdicts import training_seeds_per_data_seed

    assert training_seeds_per_data_seed([(1, 1), (1, 2), (2, 1), (2, 2)]) == [1, 2]
    assert training_seeds_per_data_seed([(1, 1), (2, 2), (3, 3)]) == [1]  # each training seed its own data: one each
    assert training_seeds_per_data_seed([(42, 1), (42, 2)]) == [1, 2]


def test_robustness_across_recipes_is_decided_claim_by_claim():
    from dsgen.claims import judge_all, load_claims
    from dsgen.claims.recipes import robustness

    claims = load_claims(["control"])
    up = {"human": {(d, 1): 60.0 + d % 3 for d in range(1, 6)}, "base": {(d, 1): 50.0 for d in range(1, 6)}}
    flat = {"human": {(d, 1): 50.0 + (d % 3 - 1) * 3 for d in range(1, 6)}, "base": up["base"]}
    mark = lambda *sets: robustness({f"r{i}": judge_all(claims, s) for i, s in enumerate(sets)})[0]["across"]  # noqa: E731
    assert mark(up, up) == "robust"
    assert mark(up, flat) == "recipe-dependent"
    assert mark(flat, flat) == "inconclusive under every recipe"


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
    (lambda o: dsgen.judge_claims(["dino"], preset="smoke", confirm="dino-beats-base", out=o),
     "unknown claim 'dino-beats-base' (did you mean 'dino-x2-beats-untrained'"),
    (lambda o: dsgen.judge_claims(["control"], preset="smoke", confirm_data_seeds=3, out=o), "give the claims with --confirm"),
    (lambda o: dsgen.judge_claims(["control"], preset="smoke", confirm="human-beats-untrained", confirm_data_seeds=1,
                                  out=o), "--confirm-data-seeds must be at least 2"),
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
