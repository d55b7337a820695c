"""The command line from the outside: bad input of every command gets one line, exit code 2 and
nothing on disk; the commands work end to end on tiny models; ``regress`` exits 1 on a regression."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from dsgen.errors import DsgenError
from tests.cli_process import run_dsgen
from tests.conftest import require
from dsgen.reports.baseline import check, read_baseline
from dsgen.evaluation.results import Result, TaskScore


def dsgen(*args, env=None, cwd=None, timeout=900):
    """``dsgen ARGS`` in a process of its own (a fork of a process that imported the libraries: tests/cli_process.py)."""
    return run_dsgen(args, env=env, cwd=cwd, timeout=timeout)


def test_the_installed_module_is_the_command_forks_run():
    """The command as a user starts it, a new interpreter: what the forks of the tests run is its main()."""
    out = subprocess.run([sys.executable, "-m", "dsgen.cli", "plan", "dnio"], capture_output=True, text=True)
    forked = dsgen("plan", "dnio")
    assert out.returncode == forked.returncode == 2 and out.stderr == forked.stderr and "did you mean 'dino'" in out.stderr


def test_methods_lists_every_method_with_its_paper():
    out = dsgen("methods", env={"COLUMNS": "250"})
    assert out.returncode == 0
    for name in ("dino-x1x2", "rise-filter", "dino-gense-filter", "base", "human", "gense-paper-sampling"):
        assert name in out.stdout
    assert "COLING 2022" in out.stdout and "EMNLP 2021" in out.stdout


def test_claims_confirm_and_recipes_are_checked_before_any_run(tmp_path):
    out = dsgen("claims", "--papers", "dino,control", "--preset", "smoke", "--confirm", "dino-decay0-belwo",
                "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and "Traceback" not in out.stderr, out.stderr
    assert "unknown claim 'dino-decay0-belwo' (did you mean 'dino-decay0-below'" in out.stderr
    assert not (tmp_path / "runs").exists()
    twice = dsgen("claims", "--papers", "control", "--preset", "smoke", "--recipes", "quick,smoke",
                  "--out", str(tmp_path / "runs"), cwd=tmp_path)
    assert twice.returncode == 2 and "recipes must differ in training only" in twice.stderr, twice.stderr
    assert not (tmp_path / "runs").exists()


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*")}


BAD_INPUTS = [
    (["plan", "dino", "--preset", "smoke", "--generator", "openai:some-model"], "method 'dino' needs self-debiasing"),
    (["generate", "--inputs", "in.txt", "--generator", "openai:m", "--out", "o/o.jsonl"], "settings need self-debiasing"),
    (["plan", "dino-decay0", "--preset", "smoke", "--base-url", "http://127.0.0.1:1/v1"], "--base-url goes with"),
    (["plan", "dino-decay0", "--preset", "smoke", "--generator", "openai:"], "needs the model the endpoint serves"),
    (["generate", "--inputs", "in.txt", "--out", "/proc/nope/o.jsonl"], "cannot write /proc/nope/o.jsonl"),
    (["generate", "--inputs", "in.txt", "--generator", "no/such-model", "--out", "o/o.jsonl"], "generator 'no/such-model'"),
    (["generate", "--inputs", "in.txt", "--device", "tpu", "--out", "o/o.jsonl"], "unknown device 'tpu'"),
    (["generate", "--inputs", "in.txt", "--dtype", "float8", "--out", "o/o.jsonl"], "unknown dtype 'float8'"),
    (["generate", "--inputs", "in.txt", "--per-label", "0", "--out", "o/o.jsonl"], "per_label must be at least 1"),
    (["generate", "--inputs", "in.txt", "--top-p", "1.5", "--out", "o/o.jsonl"], "top_p must be in (0, 1]"),
    (["generate", "--inputs", "in.txt", "--task", "bad.json", "--out", "o/o.jsonl"], "opening quotation mark"),
    (["generate", "--inputs", "missing.txt", "--out", "o/o.jsonl"], "is neither stsb-train, stsb-train-distinct, stsb-validation nor an existing file"),
    (["generate", "--inputs", "in.txt", "--backend", "spark", "--out", "o/o.jsonl"], "unknown generation backend 'spark'"),
    (["generate", "--inputs", "in.txt", "--workers", "2", "--out", "o/o.jsonl"], "need --backend ray"),
    (["eval", "nosuchmodel", "--tasks", "stsb", "--json", "o/e.json"], "encoder 'nosuchmodel'"),
    (["eval", "minilm-l6", "--tasks", "stbs"], "did you mean 'stsb'"),
    (["eval", "minilm-l6", "--device", "tpu"], "unknown device 'tpu'"),
    (["eval", "minilm-l6", "--preprocess", "moses"], "unknown preprocessing 'moses'"),
    (["eval", "minilm-l6", "--batch-size", "0"], "--batch-size must be at least 1"),
    (["eval", "lm:smollm2-135m?layerz=3", "--tasks", "stsb", "--json", "o/e.json"], "unknown option 'layerz'"),
    (["table", "missing.json"], "file not found: missing.json"),
    (["table", "in.txt", "--markdown", "/proc/nope/t.md"], "cannot write /proc/nope/t.md"),
    (["bench", "generation", "--device", "tpu"], "unknown device 'tpu'"),
    (["bench", "generation", "--n-inputs", "0"], "--n-inputs and --batch-size must be at least 1"),
    (["bench", "generation", "--row-counts", "16-x"], "--row-counts must be row counts and ranges from 1 to 4096"),
    (["bench", "generation", "--row-counts", "56-16"], "--row-counts must be row counts and ranges from 1 to 4096"),
    (["bench", "generation", "--row-counts", "16-"], "--row-counts must be row counts and ranges from 1 to 4096"),
    (["bench", "eval", "--tasks", "stbs"], "did you mean 'stsb'"),
    (["bench", "table", "--n-boot", "0"], "--n-methods, --n-seeds and --n-boot must be at least 1"),
    (["bench", "training", "--rounds", "0"], "--rounds at least 1"),
    (["bench", "training", "--trainer", "sdi", "--overhead", "8"], "drop it for --trainer sdi"),
    (["plan", "dnio"], "unknown method 'dnio' (did you mean 'dino'"),
    (["plan", "dino", "--preset", "quik"], "unknown preset 'quik' (did you mean 'quick'"),
    (["run", "dnio", "--out", "o"], "unknown method 'dnio' (did you mean 'dino'"),
    (["run", "dino", "--preset", "quik", "--out", "o"], "unknown preset 'quik' (did you mean 'quick'"),
    (["run", "dino", "--seeds", "", "--out", "o"], "--seeds is empty"),
    (["run", "dino", "--device", "tpu", "--out", "o"], "unknown device 'tpu'"),
    (["run", "base", "--out", "in.txt/runs"], "is a file, not a folder"),
    (["compare", "dino", "rise", "--seeds", "1,two", "--out", "o"], "--seeds must be comma-separated integers"),
    (["compare", "dino", "rsie", "--out", "o"], "unknown method 'rsie'"),
    (["compare", "dino", "--preprocess", "moses", "--out", "o"], "unknown preprocessing 'moses'"),
    (["regress", "--tolerance", "-1"], "--tolerance must be non-negative"),
    (["regress", "--baseline", "missing.json", "--out", "o"], "baseline missing.json not found"),
    (["regress", "--baseline", "malformed.json", "--out", "o"], "'scores' is missing"),
    (["analyze", "dino", "--out", "o"], "records no SDI importance"),
    (["analyze", "rise", "--preset", "quik", "--out", "o"], "unknown preset 'quik'"),
    (["generate", "--inputs", "binary.bin", "--out", "o/o.jsonl"], "inputs 'binary.bin' are not UTF-8 text"),
    (["compare", "dino", "--preset", "zero.toml", "--out", "o"], "max_inputs must be at least 1"),
    (["compare", "dino", "dino", "--preset", "smoke", "--out", "o"], "method 'dino' is given twice"),
    (["compare", "dino", "--data-seeds", "1,1", "--out", "o"], "--data-seeds must be distinct"),
    (["generate", "--inputs", "in.txt", "--cpus-per-worker", "0", "--out", "o/o.jsonl"], "--cpus-per-worker must be at least 1"),
    (["generate", "--inputs", "in.txt", "--data-seed", "1", "--seed", "2", "--out", "o/o.jsonl"], "--seed is the old name"),
    (["compare", "dino", "--workers", "2", "--out", "o"], "--address and --workers need --backend ray"),
    (["run", "dino", "--cpus-per-worker", "0", "--out", "o"], "--cpus-per-worker must be at least 1"),
    (["regress", "base"], "methods go with --update"),
    (["regress", "base", "--methods", "dino", "--update"], "not both"),
    (["bench", "scheduling", "dnio"], "unknown method 'dnio'"),
    (["export", "dataset", "dino", "--preset", "smoke", "--runs", "in.txt", "--out", "ds"], "no run of dino"),
    (["export", "dataset", "dino", "--preset", "smoke", "--runs", ".", "--out", "ds"], "no run of dino"),
    (["export", "pairs", "in.txt", "--out", "ds"], "is not a generated dataset"),
    (["export", "mteb", "schema9.json", "--out", "mt"], "not a dsgen result file of schema version 1"),
    (["export", "mteb", "missing.json", "--out", "mt"], "no result file or folder at missing.json"),
    (["export", "mteb", "result.json", "--out", "/proc/nope/mt"], "cannot"),
]


@pytest.mark.parametrize("args,message", BAD_INPUTS, ids=[" ".join(a[:3]) for a, _ in BAD_INPUTS])
def test_bad_input_gets_one_line_exit_2_and_nothing_on_disk(args, message, tmp_path, sts_data_dir):
    if args[:2] == ["export", "mteb"]:
        require("mteb", "mteb")  # without MTEB the command stops at that, before reading its input
    (tmp_path / "in.txt").write_text("A sentence.\n")
    (tmp_path / "bad.json").write_text('{"labels": {"a": {"instruction": "\\"<X1>\\""}}}')
    (tmp_path / "malformed.json").write_text('{"schema_version": 1, "preset": "smoke", "seeds": [1]}')
    (tmp_path / "binary.bin").write_bytes(bytes(range(256)) * 4)
    (tmp_path / "zero.toml").write_text("max_inputs = 0\n")
    Result("m", {"stsb": TaskScore(80.0, 80.0, 10, 79.0, 79.0, 78.0, 78.0)}).save(tmp_path / "result.json")
    (tmp_path / "schema9.json").write_text(json.dumps({**json.loads((tmp_path / "result.json").read_text()),
                                                        "schema_version": 9}))
    before = tree(tmp_path)
    out = dsgen(*args, cwd=tmp_path, env={"DSGEN_DATA_DIR": str(sts_data_dir), "DSGEN_CACHE_DIR": str(tmp_path / ".c")})
    assert out.returncode == 2, out.stdout + out.stderr
    assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, out.stderr
    assert message in out.stderr and "Traceback" not in out.stderr
    assert tree(tmp_path) - {".c", *[p for p in tree(tmp_path) if p.startswith(".c/")]} == before


def test_an_export_replaces_only_its_own_kind_and_never_a_folder_holding_runs(tmp_path):
    """Issue 30: ``dsgen export mteb runs/results/... --out runs`` deleted the run results. An export
    replaces an existing folder only when dsgen wrote it as that kind of export (its marker file), any
    other non-empty folder only with --overwrite, and a folder holding runs (or the dataset cache) or
    the current folder never: one line, exit 2, nothing touched."""
    require("mteb", "mteb")
    runs = tmp_path / "runs"
    result = runs / "results" / "smoke" / "dino" / "v" / "data-1-seed-1.json"
    result.parent.mkdir(parents=True)
    Result("m", {"stsb": TaskScore(80.0, 80.0, 10, 79.0, 79.0, 78.0, 78.0)}, method="dino", preset="smoke", seed=1,
           data_seed=1, extra={"run_key": "k1", "variant": "v"}).save(result)
    (runs / "cache" / "datasets").mkdir(parents=True)
    (runs / "cache" / "datasets" / "stsb-k2.jsonl").write_text('{"text_a": "a", "text_b": "b", "label": 1.0}\n')
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text('{"text_a": "a", "text_b": "b", "label": 1.0}\n')
    (tmp_path / "pairs.jsonl.meta.json").write_text("{}")
    mine = tmp_path / "mine"
    mine.mkdir()
    (mine / "notes.txt").write_text("my own notes\n")

    def refused(*args, message, cwd=tmp_path):
        before = {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()}
        out = dsgen(*args, cwd=cwd)
        assert out.returncode == 2, (args, out.stdout + out.stderr)
        assert out.stderr.startswith("error: ") and out.stderr.count("\n") == 1, (args, out.stderr)
        assert message in out.stderr and "Traceback" not in out.stderr, (args, out.stderr)
        assert {p: p.read_bytes() for p in tmp_path.rglob("*") if p.is_file()} == before, args

    holds_runs = "it holds dsgen's runs"
    refused("export", "mteb", str(result), "--out", str(runs), message=holds_runs)  # the command of the issue
    refused("export", "mteb", str(result), "--out", str(runs), "--overwrite", message=holds_runs)
    refused("export", "mteb", str(runs), "--out", str(runs / "results"), "--overwrite", message=holds_runs)
    refused("export", "pairs", str(pairs), "--out", str(runs / "cache"), "--overwrite", message=holds_runs)
    refused("export", "mteb", str(result), "--out", str(mine),
            message="it is not empty and not an MTEB results folder dsgen wrote; choose another folder or give --overwrite")
    ok = dsgen("export", "mteb", str(result), "--out", str(mine), "--overwrite")  # named on purpose
    assert ok.returncode == 0, ok.stderr
    assert not (mine / "notes.txt").exists() and json.loads((mine / "dsgen_export.json").read_text())["kind"] == "mteb-results"
    again = dsgen("export", "mteb", str(result), "--out", str(mine))  # its own export: replaced without asking
    assert again.returncode == 0, again.stderr
    refused("export", "pairs", str(pairs), "--out", str(mine), message="not a dataset folder dsgen wrote (it is an MTEB results folder)")
    refused("export", "mteb", str(result), "--out", ".", "--overwrite", message="the current folder", cwd=mine)
    (tmp_path / "empty").mkdir()
    assert dsgen("export", "mteb", str(result), "--out", str(tmp_path / "empty")).returncode == 0


def test_regress_check_fails_on_nan_and_reads_baselines_strictly(tmp_path):
    base = {"schema_version": 1, "preset": "p", "seeds": [1], "scores": {"dino": {"stsb": 80.0}}}
    path = tmp_path / "b.json"
    path.write_text(json.dumps(base))
    nan = {"dino": [Result("m", {"stsb": TaskScore(float("nan"), 0.0, 1)})]}
    (c,) = check(read_baseline(path)["baselines"][0], nan, 1.0)  # a schema-1 file is read as one entry
    assert c.failed and c.status == "NOT A NUMBER"
    two = {"schema_version": 2, "preset": "p", "seeds": [1], "baselines": [{"made_with": {}, "scores": {"dino": {"stsb": 1.0}}}]}
    for broken in ({**base, "scores": {"dino": {"stsb": "80"}}}, {**base, "seeds": []}, {**base, "tolerance": -1},
                   {k: v for k, v in base.items() if k != "preset"}, {**two, "baselines": []},
                   {**two, "baselines": [{"scores": {"dino": {}}}]}, {**two, "schema_version": 3}):
        path.write_text(json.dumps(broken))
        with pytest.raises(DsgenError):
            read_baseline(path)


def test_a_rerun_is_checked_against_the_baseline_made_the_same_way(tmp_path):
    """Scores are kept per kind of machine (evaluation dtype, CPU capability): a float32 rerun on AVX2
    is checked against the AVX2 entry, not the bfloat16 AVX-512 one; with no entry made its way it is
    checked against the first and told so; --update replaces only its own kind's entry."""
    from dsgen.reports.baseline import made_with, select, write_baseline

    here = {"dino": [Result("dino", {"stsb": TaskScore(50.0, 0.0, 1)}, extra={"evaluation_data": {"dtype": "float32"}})]}
    how = made_with(here)
    other = {"eval_dtype": "bfloat16", "cpu": "AVX512_SOMEWHERE"}
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"schema_version": 2, "preset": "p", "seeds": [1], "tolerance": 1.7, "baselines": [
        {"made_with": other, "scores": {"dino": {"stsb": 60.0}}}, {"made_with": how, "scores": {"dino": {"stsb": 50.5}}}]}))
    entry, message = select(read_baseline(path), here)
    assert entry["made_with"] == how and message == "" and not check(entry, here, 1.7)[0].failed
    only_other = read_baseline(path)
    only_other["baselines"] = only_other["baselines"][:1]
    entry, message = select(only_other, here)
    assert entry["made_with"] == other and "no baseline was made like this rerun" in message
    assert check(entry, here, 1.7)[0].failed  # 10 points below the other machine's: still a failure, with the reason
    kept = write_baseline(path, "p", [1], {"dino": [Result("dino", {"stsb": TaskScore(51.0, 0.0, 1)},
                                                           extra={"evaluation_data": {"dtype": "float32"}})]},
                          tolerance=1.7, previous=read_baseline(path))
    data = read_baseline(path)
    assert [b["made_with"] for b in kept] == [other] and len(data["baselines"]) == 2
    assert {b["made_with"]["cpu"]: b["scores"]["dino"]["stsb"] for b in data["baselines"]} == {how["cpu"]: 51.0,
                                                                                               other["cpu"]: 60.0}


def test_regress_passes_within_tolerance_and_fails_below_it(tmp_path, tiny_encoder_dir, sts_data_dir):
    preset = tmp_path / "tiny.toml"
    preset.write_text(f'seeds = [1]\ntasks = ["sts16"]\n[training]\nencoder = "{tiny_encoder_dir}"\ndevice = "cpu"\n')
    baseline = tmp_path / "baseline.json"
    common = ["--preset", str(preset), "--baseline", str(baseline), "--out", str(tmp_path / "runs"), "--quiet"]
    env = {"DSGEN_DATA_DIR": str(sts_data_dir)}
    made = dsgen("regress", "base", *common, "--update", env=env)
    assert made.returncode == 0, made.stderr
    data = json.loads(baseline.read_text())
    (entry,) = data["baselines"]
    assert data["preset"] == "tiny" and set(entry["scores"]) == {"base"} and data["tolerance"] == 1.0
    ok = dsgen("regress", *common, env=env)
    assert ok.returncode == 0 and "within 1.0" in ok.stdout and "made the same way (float32 evaluation" in ok.stdout
    entry["scores"]["base"]["sts16"] += 2.5
    baseline.write_text(json.dumps(data))
    bad = dsgen("regress", *common, "--tolerance", "1.0", env=env)
    assert bad.returncode == 1 and "REGRESSED" in bad.stdout and "-2.50" in bad.stdout
    assert dsgen("regress", *common, "--tolerance", "3", env=env).returncode == 0
    entry["scores"]["base"]["sts16"] -= 5.0  # now 2.5 above the baseline: passes, and says it is not "within"
    baseline.write_text(json.dumps(data))
    risen = dsgen("regress", *common, "--tolerance", "1.0", env=env)
    assert risen.returncode == 0 and "scores within" not in risen.stdout and "1 rose more than 1.0 above" in risen.stdout
    assert "base sts16 +2.50" in risen.stdout
    entry["scores"]["base"]["sts16"] += 2.5
    # how it was made is recorded; with no entry made like the rerun (here: one said to be from another CPU) it says so
    assert entry["made_with"]["eval_dtype"] == "float32" and entry["made_with"]["cpu"]
    entry["made_with"] = {"eval_dtype": "bfloat16", "cpu": "AVX512_OTHER"}
    data["tolerance"], data["note"] = 1.7, "tolerance 1.7 from the seed spread"
    baseline.write_text(json.dumps(data))
    other = dsgen("regress", *common, env=env)
    assert other.returncode == 0 and "checked against the one made with bfloat16 evaluation on AVX512_OTHER" in other.stdout
    # --update without --tolerance keeps the baseline's chosen tolerance and its note (it wrote 1.0 over 1.7), and
    # adds this machine's entry beside the other machine's
    updated = dsgen("regress", *common, "--methods", "base", "--update", env=env)  # the old form, still read
    assert updated.returncode == 0 and "kept the one made with bfloat16 evaluation on AVX512_OTHER" in updated.stdout
    kept = json.loads(baseline.read_text())
    assert kept["tolerance"] == 1.7 and kept["note"] == "tolerance 1.7 from the seed spread"
    assert [b["made_with"]["cpu"] for b in kept["baselines"]][1:] == ["AVX512_OTHER"]
    assert dsgen("regress", "base", *common, "--update", "--tolerance", "2", env=env).returncode == 0
    remade = json.loads(baseline.read_text())  # a new tolerance: a new note, the command that made it (methods too)
    assert remade["tolerance"] == 2.0 and remade["note"] == f"dsgen regress base --preset {preset} --update --tolerance 2"
    # --update without methods (what a check whose scores rose tells the user to run) reruns the baseline's own
    # methods: none dropped, none added
    assert dsgen("regress", *common, "--update", env=env).returncode == 0
    assert [set(b["scores"]) for b in json.loads(baseline.read_text())["baselines"]] == [{"base"}, {"base"}]


@pytest.fixture(scope="module")
def tiny_preset(tmp_path_factory, tiny_lm_dir, tiny_encoder_dir):
    path = tmp_path_factory.mktemp("preset") / "tiny.toml"
    path.write_text(f"""seeds = [1, 2]
max_inputs = 12
dev_max_inputs = 12
tasks = ["sts16"]
[generation]
generator = "{tiny_lm_dir}"
device = "cpu"
per_label = 2
[generation.sampling]
max_new_tokens = 8
[training]
encoder = "{tiny_encoder_dir}"
device = "cpu"
batch_size = 16
# a dozen inputs make one or two steps: no warm-up (it would take the only step at rate 0), every step counts
warmup_ratio = 0.0
min_trained_steps = 1
[reweighting.sdi]
encoder = "{tiny_encoder_dir}"
epochs = 1.0
""")
    return path


def test_compare_analyze_plan_and_table_end_to_end(tiny_preset, tmp_path, sts_data_dir):
    env = {"DSGEN_DATA_DIR": str(sts_data_dir), "COLUMNS": "80"}  # a narrow log: tables must still read in full
    out = tmp_path / "runs"
    cmp = dsgen("compare", "dino", "rise", "--preset", str(tiny_preset), "--out", str(out), "--quiet",
                "--publish", str(tmp_path / "published"), env=env, cwd=tmp_path)
    assert cmp.returncode == 0, cmp.stderr
    assert "…" not in cmp.stdout  # nothing cut in a non-terminal log
    md = out / "tables" / "tiny" / "compare-dino-rise-base.md"
    assert md.exists() and (md.with_suffix(".csv")).exists() and (md.with_suffix(".png")).exists()
    assert (tmp_path / "published" / "tiny" / md.name).read_text() == md.read_text()
    assert not (tmp_path / "results").exists()  # nothing outside --out unless published
    text = md.read_text()
    assert "95% CI over runs" in text and "1,000 resamples" in text and "Time per stage" in text
    import pandas as pd

    tidy = pd.read_csv(md.with_suffix("").with_suffix(".long.csv"))  # one row per (method, variant, run, task, metric)
    assert set(tidy["method"]) == {"dino", "rise", "base"} and set(tidy["seed"]) == {1, 2}
    assert {"variant", "data_seed", "task", "metric", "value", "learning_rate", "encoder", "run_key", "dsgen_version",
            "git_commit"} <= set(tidy.columns) and tidy["git_commit"].notna().all()  # where each row came from
    one = tidy[(tidy["method"] == "dino") & (tidy["seed"] == 1) & (tidy["task"] == "sts16")]
    assert set(one["metric"]) == {"spearman", "pearson", "euclidean_spearman", "euclidean_pearson",
                                  "manhattan_spearman", "manhattan_pearson"} and one["variant"].notna().all()
    ana = dsgen("analyze", "rise", "--preset", str(tiny_preset), "--seed", "1", "--out", str(out), "--quiet", env=env)
    assert ana.returncode == 0, ana.stderr
    assert (out / "tables" / "tiny" / "analysis-rise-seed1.md").exists()
    plan = dsgen("plan", "rise", "--preset", str(tiny_preset), "--json", env=env)
    assert plan.returncode == 0, plan.stderr
    data = json.loads(plan.stdout)
    assert data["plan"]["trainer"]["epochs"] == 3.0 and data["origins"]["trainer"]["epochs"] == "method"
    results = sorted((out / "results" / "tiny" / "dino").rglob("data-*-seed-*.json"))
    table = dsgen("table", *map(str, results), "--markdown", str(tmp_path / "t.md"), env=env)
    assert table.returncode == 0 and "dino (data seed 1, training seed 1)" in (tmp_path / "t.md").read_text()


def test_benchmarks_run_on_tiny_models(tmp_path, tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
    env = {"DSGEN_DATA_DIR": str(sts_data_dir)}
    gen = dsgen("bench", "generation", "--generator", str(tiny_lm_dir), "--n-inputs", "3", "--batch-size", "16", "--batch-size", "8",
                "--greedy-items", "3", "--device", "cpu", "--row-counts", "16",
                "--plain-weights", "--json", str(tmp_path / "g.json"), env=env)
    assert gen.returncode == 0, gen.stderr
    g = json.loads((tmp_path / "g.json").read_text())
    assert g["speedup"] > 0 and g["greedy_agreement"] == 1  # the core's greedy outputs are the reference's
    assert g["batch_sizes"] == [8, 16] and set(g["speedup_by_batch_size"]) == {"8", "16"}
    assert max(g["speedup_by_batch_size"].values()) == g["speedup_by_batch_size"][str(g["batch_size"])]
    after = g["core_after_reference"]  # the fastest batch again after the reference: the same outputs
    assert after["outputs_hash"] == g["core"]["outputs_hash"] and after["batch_size"] == g["batch_size"]
    runs = (g["speedup_by_batch_size"][str(g["batch_size"])], g["speedup_after_reference"])  # the headline: between
    assert min(runs) - 0.01 <= g["speedup"] <= max(runs) + 0.01  # (each rounded to 0.01)
    # sharing never forwards more decode rows than the unshared schedule, but for each step's padding to the
    # batch-invariant row counts this machine's probe found (at most 3 rows with MKL on an AMD EPYC: 4, 8, 12+;
    # 15 on an Intel Xeon with AVX-512, whose smallest count is 16)
    from transformers import AutoModelForCausalLM

    from dsgen.generation.invariance import numerics

    found = numerics(AutoModelForCausalLM.from_pretrained(tiny_lm_dir).eval())
    padding = max(found.rows(n) - n for n in range(1, found.rows(16 + 3) + 1))
    assert g["core"]["decode_rows_forwarded"] <= g["core"]["decode_rows_unshared"] + g["core"]["steps"] * padding
    # the core timed as on a CPU whose only batch-invariant row count is 16: every step forwards whole blocks of 16
    other = g["core_row_counts"]
    assert other["row_counts"] == [16] and other["ratio_to_core"] > 0
    assert other["decode_rows_forwarded"] > 0 and other["decode_rows_forwarded"] % 16 == 0
    # and with oneDNN's weights plain where the probe packs them: the same outputs (packing changes speed only)
    plain = g["core_plain_weights"]
    assert plain["packed_in_core"] == found.kernels.packs and plain["same_outputs_as_core"]
    assert plain["ratio_to_core"] > 0
    ev = dsgen("bench", "eval", "--model", str(tiny_encoder_dir), "--tasks", "sts16", "--token-budget", "64",
               "--json", str(tmp_path / "e.json"), env=env)
    assert ev.returncode == 0, ev.stderr
    e = json.loads((tmp_path / "e.json").read_text())
    assert e["max_spearman_difference"] < 1e-3 and e["speedup"] > 0  # every batch shape scores as naive does
    assert set(e["evaluator_by_token_budget"]) == {str(e["token_budget"]), "64"}
    assert e["evaluator_by_token_budget"][str(e["token_budget"])]["speedup"] == e["speedup"]
    tb = dsgen("bench", "table", "--n-methods", "3", "--n-seeds", "2", "--tasks", "sts16", "--n-boot", "150",
               "--json", str(tmp_path / "t.json"), env=env)
    assert tb.returncode == 0, tb.stderr
    t = json.loads((tmp_path / "t.json").read_text())
    assert t["bit_for_bit"] is True and t["speedup"] > 0 and list(t["tasks"]) == ["sts16"]  # the previous path's values
    tr = dsgen("bench", "training", "--model", f"lm:{tiny_lm_dir}?layers=2&pooling=mean", "--pairs", "24", "--batch-size", "8",
               "--rounds", "1", "--overhead", "0", "--json", str(tmp_path / "tr.json"), env=env)
    assert tr.returncode == 0, tr.stderr
    r = json.loads((tmp_path / "tr.json").read_text())
    positions = r["token_positions"]
    assert r["steps"] == 3 and r["speedup"]["median"] > 0 and set(r["other_overheads"]) == {"0"}
    assert positions["real"] <= positions["grouped"] < positions["padded"]  # STSb pairs of 24 rows leave padding to cut
    assert positions["real"] == positions["packed"]  # a side of 8 pairs packs into one row
    assert r["trimming"] == "packed" and r["packed_vs_groups"]["median"] > 0
    assert "grouped_seconds_per_step" in r["rounds"][0]
    assert r["weights_relative_difference"] < 1e-5  # the same training up to float rounding (a Llama has no dropout)
    sdi = dsgen("bench", "training", "--trainer", "sdi", "--model", str(tiny_encoder_dir), "--pairs", "20",
                "--batch-size", "8", "--rounds", "1", "--json", str(tmp_path / "sdi.json"), env=env)
    assert sdi.returncode == 0, sdi.stderr
    s = json.loads((tmp_path / "sdi.json").read_text())
    assert s["trainer"] == "sdi" and s["steps"] == 5 and s["speedup"]["median"] > 0  # 36 of the 40 sentences train
    assert s["trimming"] == "groups" and "packed_vs_groups" not in s  # a classifier is cut into groups
    assert s["token_positions"]["real"] <= s["token_positions"]["grouped"] < s["token_positions"]["padded"]


def test_learning_curve_runs_every_size_and_draws_it(tiny_preset, tmp_path, sts_data_dir):
    env = {"DSGEN_DATA_DIR": str(sts_data_dir)}
    out = tmp_path / "runs"
    res = dsgen("curve", "dino", "base", "--preset", str(tiny_preset), "--sizes", "8,12", "--seeds", "1,2",
                "--out", str(out), "--quiet", env=env)
    assert res.returncode == 0, res.stderr
    folder = out / "tables" / "tiny"
    md = (folder / "curve-dino-base.md").read_text()
    assert (folder / "curve-dino-base.png").exists() and "avg. [95% CI]" in md and "base" in md
    import pandas as pd

    frame = pd.read_csv(folder / "curve-dino-base.csv")
    assert sorted(set(frame["inputs"])) == [8, 12] and set(frame["method"]) == {"dino", "base"}
    dino = frame[frame["method"] == "dino"].set_index("inputs")
    assert dino.loc[12, "train_pairs"] > dino.loc[8, "train_pairs"] and (dino["runs"] == 2).all()
    assert (out / "results" / "tiny-8").is_dir() and (out / "results" / "tiny-12").is_dir()
    bad = dsgen("curve", "dino", "--preset", str(tiny_preset), "--sizes", "0", "--out", str(tmp_path / "x"), env=env)
    assert bad.returncode == 2 and "--sizes" in bad.stderr and not (tmp_path / "x").exists()


@pytest.fixture
def mock_preset(tmp_path, tiny_lm_dir, tiny_encoder_dir):
    """A preset for the test plug-ins (mock generator, in this process): 3 inputs make a one-step run."""
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
""")
    return path


def test_compare_and_curve_go_on_past_a_crashed_run_and_exit_1_naming_it(mock_preset, tmp_path, sts_data_dir,
                                                                         monkeypatch):
    """One run crashes on an unexpected exception (training seed 2), the other trains nothing (one step, all
    warm-up): the table is written with the method as a failed row, the crash's traceback is under --out's logs/,
    and the command exits 1 naming the crashed run. `curve` does the same."""
    from typer.testing import CliRunner

    from dsgen.cli import app
    from tests.test_runner import crash_on_training_seed_2

    monkeypatch.setenv("DSGEN_DATA_DIR", str(sts_data_dir))
    crash_on_training_seed_2(monkeypatch, "an unexpected bug")
    out = tmp_path / "runs"
    res = CliRunner().invoke(app, ["compare", "base", "mock-dino", "--preset", str(mock_preset), "--out", str(out),
                                   "--quiet"])
    assert res.exit_code == 1, res.output + res.stderr
    (log,) = (out / "logs").rglob("data-42-seed-2.log")
    assert "TypeError: an unexpected bug" in log.read_text()
    last = res.stderr.strip().splitlines()[-1]  # (in this process the libraries' loading bars print above it)
    assert last == f"error: 1 run crashed: mock-dino (data seed 42, training seed 2), traceback in {log}"
    assert "base (data seed 42, training seed 1): avg" in res.stdout  # the per-run line, worded as a failure's
    assert "no model mock-dino (data seed 42, training seed 1): trained nothing: " in res.stdout
    md = (out / "tables" / "mock" / "compare-base-mock-dino.md").read_text()
    row = next(line for line in md.splitlines() if line.startswith("| mock-dino"))
    assert "no score: 2 of 2 runs failed" in row
    assert "- `mock-dino` (data seed 42, training seed 1): trained nothing: " in md
    assert f"- `mock-dino` (data seed 42, training seed 2): crashed: TypeError: an unexpected bug (traceback in {log})" in md
    curve = CliRunner().invoke(app, ["curve", "mock-dino", "base", "--preset", str(mock_preset), "--sizes", "3",
                                     "--out", str(tmp_path / "curve"), "--quiet"])
    assert curve.exit_code == 1 and "1 run crashed: mock-dino (data seed 42, training seed 2)" in curve.stderr
    text = (tmp_path / "curve" / "tables" / "mock" / "curve-mock-dino-base.md").read_text()
    row = next(line for line in text.splitlines() if line.startswith("|") and "mock-dino" in line)
    assert "failed: no score (2 runs failed)" in row
    assert "- `mock-dino` at 3 inputs (data seed 42, training seed 1): trained nothing: " in text


def test_every_command_that_runs_methods_takes_every_shared_option():
    """run, compare, curve and claims take every setting of the API's functions that run methods
    (dsgen.api.RunSettings; run all but --publish, as it writes no table), with one default, each declared once
    (dsgen.cli.options), and so do the API functions."""
    import dataclasses
    import inspect

    import typer.main

    import dsgen
    from dsgen.api import RunSettings
    from dsgen.cli import app

    fields = {f.name for f in dataclasses.fields(RunSettings)} - {"progress"} | {"quiet"}
    commands = {c.name: typer.main.get_command_from_info(c, pretty_exceptions_short=True, rich_markup_mode=None)
                for c in app.registered_commands if c.name in ("run", "compare", "curve", "claims")}
    assert set(commands) == {"run", "compare", "curve", "claims"}
    for name, command in commands.items():
        params = {p.name: p for p in command.params}
        assert fields - {"publish"} <= set(params), (name, fields - set(params))
        assert ("publish" in params) == (name != "run"), name
        assert params["out"].default == Path("runs") and params["backend"].default == "local", name
        assert params["preset"].default == ("cpu" if name in ("curve", "claims") else "quick"), name
    for function in (dsgen.run, dsgen.compare, dsgen.curve, dsgen.judge_claims):
        params = inspect.signature(function).parameters
        settings = {f.name for f in dataclasses.fields(RunSettings)} - ({"publish"} if function is dsgen.run else set())
        assert settings <= set(params), (function.__name__, settings - set(params))
        assert all(params[f].default == RunSettings.__dataclass_fields__[f].default for f in settings - {"preset"})


SHARED = ("--preset", "--seeds", "--data-seeds", "--seed", "--data-seed", "--device", "--data-dir", "--quiet",
          "--publish", "--backend", "--address", "--workers", "--cpus-per-worker", "--generator", "--base-url",
          "--encoder", "--preprocess", "--overwrite", "--tasks", "--name", "--save-model")
KINDS = {"--out": 3, "--json": 2}  # --out: a runs folder, an export's target, generate's pairs file; --json: file, print


def test_each_shared_option_has_one_meaning_and_one_help_text():
    """An option that several commands take is declared once (dsgen.cli.options): every command shows the same help
    text for it (--out and --json: one per kind); methods are arguments everywhere."""
    import typer.main

    from dsgen.cli import app
    from tests.test_cli_help import commands

    helps: dict[str, dict[str, str]] = {}
    arguments = {}
    for path, command in commands(typer.main.get_command(app)):
        for p in getattr(command, "params", []):
            if getattr(p, "hidden", False):
                continue
            if p.param_type_name == "argument":
                arguments[(" ".join(path), p.name)] = p
            for opt in p.opts:
                helps.setdefault(opt, {})[" ".join(path)] = p.help
    for name in SHARED:
        assert len(helps[name]) >= 2 and len(set(helps[name].values())) == 1, (name, helps[name])
    for name, kinds in KINDS.items():
        assert len(set(helps[name].values())) == kinds, (name, helps[name])
    assert "--methods" not in helps  # only the hidden old form of regress and bench scheduling
    assert {cmd for cmd, arg in arguments if arg == "methods"} == {"compare", "curve", "regress", "bench scheduling"}
    assert all(arguments[(cmd, "methods")].nargs == -1 for cmd in ("compare", "curve", "regress", "bench scheduling"))
