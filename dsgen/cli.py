"""The ``dsgen`` command line. Heavy libraries are imported inside the commands so that
``dsgen --help`` answers at once."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated, Optional

import typer

from dsgen.errors import DsgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Generate labelled sentence-pair datasets with language models and measure what they are worth.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed benchmarks (printed as ratios against a baseline measured in the same run).")
app.add_typer(bench_app, name="bench")

PRESET_HELP = "smoke (CI, minutes), quick (CPU comparison), paper (GPU, the paper's scale) or a .toml file."
# Options shared by run, compare, regress and analyze.
PresetOpt = Annotated[str, typer.Option(help=PRESET_HELP)]
SeedsOpt = Annotated[Optional[str], typer.Option(help="Comma-separated seeds, e.g. 1,2,3 (default: the preset's).")]
GeneratorOpt = Annotated[Optional[str], typer.Option(help="Generator LM instead of the preset's.")]
EncoderOpt = Annotated[Optional[str], typer.Option(help="Encoder instead of the preset's (HF or sentence-transformers id).")]
DeviceOpt = Annotated[Optional[str], typer.Option(help="cpu, cuda or auto (default: the preset's).")]
OutOpt = Annotated[Path, typer.Option(help="Folder for cached datasets and result files.")]
DataDirOpt = Annotated[Optional[str], typer.Option(help="STS data folder (default: $DSGEN_DATA_DIR).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]


def _console():
    from rich.console import Console

    return Console()


@app.command()
def generate(
    task: str = typer.Option("sts-x2", help="Task spec: sts-x2, sts-x1, gense, or a DINO-format JSON file."),
    inputs: Optional[str] = typer.Option(None, help="x1 source: stsb-train, a text file (one per line) or an sts-x1 JSONL."),
    max_inputs: Optional[int] = typer.Option(None, help="Use only the first N inputs."),
    per_label: int = typer.Option(2, help="Continuations per (x1, label)."),
    entries_per_label: int = typer.Option(100, help="Sentences per label for tasks without inputs (sts-x1)."),
    generator: str = typer.Option("smollm2-135m", help="smollm2-135m, gemma3-270m, an HF id, a directory or a .gguf file."),
    decay: float = typer.Option(100.0, help="Self-debiasing decay constant lambda (0: off)."),
    top_k: int = typer.Option(5, help="Top-k for tasks with inputs (0: off)."),
    top_p: float = typer.Option(0.9, help="Top-p."),
    max_new_tokens: int = typer.Option(40, help="Most tokens per output."),
    no_counter_labels: bool = typer.Option(False, "--no-counter-labels", help="Ignore the spec's counter labels."),
    batch_size: int = typer.Option(128, help="Most sequences (main + counter rows) decoded together."),
    chunk_inputs: int = typer.Option(32, help="Inputs per resumable chunk."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
    dtype: str = typer.Option("auto", help="auto (float32 on CPU, bfloat16 on CUDA), float32, bfloat16, float16."),
    data_dir: DataDirOpt = None,
    seed: int = typer.Option(42, help="Random seed."),
    out: Path = typer.Option(Path("pairs.jsonl"), help="Output JSONL (a .meta.json sidecar is written beside it)."),
    quiet: bool = typer.Option(False, "--quiet", help="No progress bar."),
) -> None:
    """Generate a labelled pair dataset with self-debiased decoding (DINO)."""
    from dsgen.data.inputs import load_inputs
    from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
    from dsgen.generation.decoding import SamplingConfig
    from dsgen.taskspec import load_task_spec

    for name, value in (("--per-label", per_label), ("--batch-size", batch_size), ("--chunk-inputs", chunk_inputs),
                        ("--max-new-tokens", max_new_tokens), ("--entries-per-label", entries_per_label)):
        if value < 1:
            raise DsgenError(f"{name} must be at least 1 (got {value})")
    if not 0 < top_p <= 1:
        raise DsgenError(f"--top-p must be in (0, 1] (got {top_p})")
    load_task_spec(task, with_inputs=inputs is not None)  # validate before loading anything heavy
    texts = load_inputs(inputs, max_inputs, data_dir) if inputs is not None else None
    cfg = GenerationConfig(task=task, generator=generator, per_label=per_label, entries_per_label=entries_per_label,
                           counter_labels=not no_counter_labels,
                           sampling=SamplingConfig(decay_constant=decay, top_k=top_k, top_p=top_p,
                                                   max_new_tokens=max_new_tokens),
                           batch_size=batch_size, chunk_inputs=chunk_inputs, device=device, dtype=dtype, seed=seed)
    gen = DebiasedGenerator(cfg)
    pairs = gen.generate(texts, out, progress=not quiet)
    lm = gen.lm.describe()
    _console().print(f"wrote {len(pairs)} pairs to {out} (generator {lm['name']}, loaded in {lm['load_seconds']} s, "
                     f"dequantised cache {'hit' if lm['dequantised_cache_hit'] else 'built'})")


@bench_app.command("generation")
def bench_generation(
    generator: str = typer.Option("smollm2-135m", help="Generator LM."),
    n_inputs: int = typer.Option(24, help="STS benchmark train sentences to use."),
    batch_size: int = typer.Option(128, help="Rows of the fast core."),
    greedy_items: int = typer.Option(12, help="(x1, label) items for the greedy equivalence check (0: skip)."),
    data_dir: Optional[str] = typer.Option(None),
    device: str = typer.Option("auto"),
    seed: int = typer.Option(42),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the numbers to this JSON file."),
) -> None:
    """Core vs DINO-style reference loop: outputs/s, ratio, tokens/s, roofline share, greedy agreement."""
    from dsgen.benchmarks.generation import run

    run(generator=generator, n_inputs=n_inputs, batch_size=batch_size, greedy_items=greedy_items,
        data_dir=data_dir, device=device, seed=seed, json_out=json_out)


@app.command("eval")
def eval_cmd(
    model: str = typer.Argument(..., help="Sentence-transformers id or path, or minilm-l6 (embedded all-MiniLM-L6-v2)."),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated tasks (default: DINO's Table 1 columns; 'mteb': MTEB's seven)."),
    data_dir: Optional[str] = typer.Option(None, help="STS data folder (default: $DSGEN_DATA_DIR, else MTEB's Hub copies)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Result file (default: runs/eval/<model>.json)."),
    batch_size: int = typer.Option(64, help="Encoding batch size."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
) -> None:
    """Evaluate a sentence encoder on STS12-16, STSb and SICK-R (Spearman x100, as MTEB)."""
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.evaluation.tables import comparison_frame, to_rich
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import load_encoder

    names = parse_tasks(tasks)
    if batch_size < 1:
        raise DsgenError(f"--batch-size must be at least 1 (got {batch_size})")
    evaluator = StsEvaluator(names, data_dir, batch_size)
    evaluator.pairs  # fail on bad data before loading the model
    result = evaluator.evaluate(load_encoder(model, device), name=model)
    slug = model.strip("/").replace("/", "__")
    path = json_out or Path("runs") / "eval" / f"{slug}.json"
    result.save(path)
    console = _console()
    console.print(to_rich(comparison_frame([result], names), title="Spearman x 100 (cosine)"))
    console.print(f"wrote {path} ({result.timings['sentences_encoded']} sentences encoded in "
                  f"{result.timings['encode_and_score_seconds']} s)")


@app.command("table")
def table_cmd(
    results: list[Path] = typer.Argument(..., help="Result JSON files."),
    markdown: Optional[Path] = typer.Option(None, help="Also write the table as Markdown."),
    csv: Optional[Path] = typer.Option(None, help="Also write the table as CSV."),
) -> None:
    """Build one comparison table from result files (best per column marked)."""
    from dsgen.artifacts import atomic_open
    from dsgen.evaluation.tables import comparison_frame, load_results, to_csv, to_markdown, to_rich

    frame = comparison_frame(load_results(results))
    _console().print(to_rich(frame, title="Spearman x 100 (cosine)"))
    if markdown:
        with atomic_open(markdown) as fh:
            fh.write(to_markdown(frame) + "\n")
    if csv:
        to_csv(frame, csv)


@bench_app.command("eval")
def bench_eval(
    model: str = typer.Option("minilm-l6", help="Encoder."),
    tasks: Optional[str] = typer.Option("mteb", help="Tasks (default: MTEB's seven)."),
    data_dir: Optional[str] = typer.Option(None),
    batch_size: int = typer.Option(64),
    json_out: Optional[Path] = typer.Option(None, "--json"),
) -> None:
    """Distinct-sentence encoding vs naive per-task encoding: sentences/s, ratio, score agreement."""
    from dsgen.benchmarks.evaluation import run

    run(model=model, tasks=tasks, data_dir=data_dir, batch_size=batch_size, json_out=json_out)


# -- methods: run, compare, regress -----------------------------------------------------------


def _prepare(methods: list[str], preset: str, seeds: Optional[str], out: Path, data_dir: Optional[str],
             quiet: bool, fresh: bool = False):
    """Validate everything cheap before any long work: methods, preset, seeds, output folder."""
    from dsgen.method import get_method
    from dsgen.presets import load_preset, parse_seeds
    from dsgen.runner import Runner

    for m in methods:
        get_method(m)
    p = load_preset(preset)
    seed_list = parse_seeds(seeds, p.seeds)
    return p, seed_list, Runner(out, data_dir, progress=not quiet, fresh=fresh)


def _report(console):
    def on_result(method, plan, result):
        console.print(f"[bold]{method}[/bold] seed {plan.seed}: avg {result.average:.2f} "
                      f"({', '.join(f'{t} {s.spearman:.2f}' for t, s in result.tasks.items())})")
    return on_result


@app.command("methods")
def methods_cmd() -> None:
    """List every method (built-in and plug-in) with its stages and paper."""
    from rich.markup import escape
    from rich.table import Table

    from dsgen.method import METHODS, get_method

    table = Table(title="dsgen methods")
    for col in ("method", "description", "stages", "paper"):
        table.add_column(col, overflow="fold")
    for name in METHODS.names():
        m = get_method(name)
        table.add_row(name, escape(m.description), escape(m.stages()), escape(m.paper))
    _console().print(table)


@app.command("run")
def run_cmd(
    method: str = typer.Argument(..., help="Method name (see `dsgen methods`)."),
    preset: PresetOpt = "quick",
    seeds: SeedsOpt = None,
    generator: GeneratorOpt = None,
    encoder: EncoderOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = Path("runs"),
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Generate (cached), train and evaluate one method; one result file per seed, then the table."""
    from dsgen.evaluation.tables import comparison_frame, to_rich
    from dsgen.runner import run_many

    p, seed_list, runner = _prepare([method], preset, seeds, out, data_dir, quiet)
    console = _console()
    results = run_many([method], p, seed_list, runner, generator, encoder, device, on_result=_report(console))
    console.print(to_rich(comparison_frame(results[method], p.tasks), title=f"{method}, preset {p.name}"))
    console.print(f"results under {runner.out / 'results' / p.name / method}")


@app.command("compare")
def compare_cmd(
    methods: list[str] = typer.Argument(..., help="Methods; differences are taken to the first. `base` is added if absent."),
    preset: PresetOpt = "quick",
    seeds: SeedsOpt = None,
    generator: GeneratorOpt = None,
    encoder: EncoderOpt = None,
    device: DeviceOpt = None,
    out: OutOpt = Path("runs"),
    results_dir: Path = typer.Option(Path("results"), help="Where the Markdown, CSV and PNG comparison go."),
    name: Optional[str] = typer.Option(None, help="File stem of the comparison (default: compare-<methods>)."),
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Run what is missing, reuse what is cached, and emit one comparison table (+ Markdown, CSV, PNG)."""
    from dsgen.artifacts import ensure_writable_dir
    from dsgen.evaluation.comparison import Comparison
    from dsgen.runner import run_many

    names = list(dict.fromkeys(methods + ([] if "base" in methods else ["base"])))
    p, seed_list, runner = _prepare(names, preset, seeds, out, data_dir, quiet)
    folder = ensure_writable_dir(results_dir / p.name)
    console = _console()
    failures: list = []
    results = run_many(names, p, seed_list, runner, generator, encoder, device, on_result=_report(console),
                       failures=failures)
    for f in failures:
        console.print(f"[red]no model[/red] {f}")
    done = [m for m in names if m in results and len(results[m]) == len(seed_list)]
    if len(done) < 1 or names[0] not in done:
        raise DsgenError(f"the reference method '{names[0]}' produced no result; nothing to compare against")
    comparison = Comparison(done, p.tasks, {m: results[m] for m in done}, preset=p.name, failures=failures)
    stem = name or "compare-" + "-".join(names)
    paths = comparison.write(folder, stem, command=" ".join(["dsgen", *sys.argv[1:]]))
    console.print(comparison.to_rich())
    console.print(f"wrote {paths['markdown']}, {paths['csv']}, {paths['png']}")


@app.command("regress")
def regress_cmd(
    preset: PresetOpt = "smoke",
    baseline: Optional[Path] = typer.Option(None, help="Baseline file (default: results/baseline/<preset>.json)."),
    tolerance: float = typer.Option(1.0, help="Points of Spearman x100 a task may fall below the baseline."),
    methods: Optional[str] = typer.Option(None, help="Methods for --update (default: base,dino)."),
    update: bool = typer.Option(False, "--update", help="Write the baseline from this run instead of checking."),
    out: Path = typer.Option(Path("runs/regress"), help="Scratch folder (recomputed from scratch every time)."),
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Rerun a preset from scratch and exit 1 when a task falls more than --tolerance below the baseline."""
    from rich.table import Table

    from dsgen.evaluation.baseline import check, read_baseline, write_baseline
    from dsgen.runner import run_many

    if tolerance < 0:
        raise DsgenError(f"--tolerance must be non-negative (got {tolerance})")
    path = baseline or Path("results") / "baseline" / f"{Path(preset).stem}.json"
    ref = None if update else read_baseline(path)
    names = [m.strip() for m in (methods or "base,dino").split(",") if m.strip()] if update else list(ref["scores"])
    p, seed_list, runner = _prepare(names, preset, None if update else ",".join(map(str, ref["seeds"])), out,
                                    data_dir, quiet, fresh=True)
    if not update and ref.get("preset") != p.name:
        raise DsgenError(f"{path} is a baseline of preset '{ref.get('preset')}', not '{p.name}'")
    console = _console()
    results = run_many(names, p, seed_list, runner, on_result=_report(console))
    if update:
        write_baseline(path, p.name, seed_list, results, note=f"dsgen regress --preset {preset} --update")
        console.print(f"wrote baseline {path}")
        return
    checks = check(ref, results, tolerance)
    table = Table(title=f"regression check, preset {p.name}, tolerance {tolerance}")
    for col in ("method", "task", "baseline", "now", "Δ", "status"):
        table.add_column(col, justify="right" if col not in ("method", "task") else "left")
    for c in checks:
        table.add_row(c.method, c.task, f"{c.baseline:.2f}", f"{c.current:.2f}", f"{c.delta:+.2f}",
                      "[red]REGRESSED[/red]" if c.failed else "ok")
    console.print(table)
    failed = [c for c in checks if c.failed]
    if failed:
        console.print(f"[red]{len(failed)} of {len(checks)} scores fell more than {tolerance} below {path}[/red]")
        raise typer.Exit(1)
    console.print(f"all {len(checks)} scores within {tolerance} of {path}")


@app.command("analyze")
def analyze_cmd(
    method: str = typer.Argument("rise", help="A method whose reweighter records p_D (rise, rise-filter)."),
    preset: PresetOpt = "quick",
    seed: int = typer.Option(1, help="Which seed's run to analyse (run first if missing)."),
    out: OutOpt = Path("runs"),
    results_dir: Path = typer.Option(Path("results"), help="Where the Markdown table and PNG histogram go."),
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """RISE's Table 1 for a run: top / bottom 10% of machine sentences by p_D against the human ones."""
    from dsgen.artifacts import atomic_open, ensure_writable_dir
    from dsgen.data.analysis import rise_table, weight_histogram
    from dsgen.data.inputs import load_inputs
    from dsgen.data.pairs import read_pairs
    from dsgen.runner import plan_run, run_many

    p, _, runner = _prepare([method], preset, str(seed), out, data_dir, quiet)
    result = run_many([method], p, [seed], runner)[method][0]
    train = read_pairs(runner.result_path(plan_run(method, p, seed)).with_suffix(".train.jsonl"))
    scored = [x for x in train if "p_d" in x.extra]
    if not scored:
        raise DsgenError(f"method '{method}' records no SDI importance p_D; analyse rise or rise-filter")
    machine = list({x.text_b: (x.text_b, x.text_a, x.extra["p_d"]) for x in scored
                    if x.extra.get("source") == "generated"}.values())
    partner: dict[str, str] = {}
    if p.inputs == "stsb-train":
        from dsgen.data.sts import data_dir as resolve, read_stsb

        pairs = read_stsb(resolve(data_dir), "train")
        for a, b in zip(pairs.sentences1, pairs.sentences2):
            partner.setdefault(a.strip(), b.strip())
            partner.setdefault(b.strip(), a.strip())
    human = [(h, partner.get(h)) for h in load_inputs(p.inputs, p.max_inputs, data_dir)]
    table = rise_table(machine, human)
    folder = ensure_writable_dir(results_dir / p.name)
    stem = f"analysis-{method}-seed{seed}"
    weight_histogram([x.extra["p_d"] for x in scored], folder / f"{stem}.png", title=f"{method}, preset {p.name}, seed {seed}")
    info = result.extra.get("reweighting", {})
    text = "\n".join([
        f"# RISE Table 1 analysis: `{method}`, preset `{p.name}`, seed {seed}", "", "Command:", "", "```bash",
        " ".join(["dsgen", *sys.argv[1:]]), "```", "",
        f"SDI classifier: validation accuracy {info.get('sdi_validation_accuracy', 'n/a')}% on "
        f"{info.get('sdi_validation_examples', '?')} held-out sentences (balanced; RISE reports 77.87% on STSb with BERT). "
        f"{len(machine)} distinct machine sentences, {len(human)} human sentences; p_D quantiles "
        f"{info.get('weight_quantiles', {})}.", "",
        "BLEU and Jaccard: each sentence against its paired sentence (machine: its x1; human: its STS benchmark "
        "partner). Distinct-N and Zipf over the group.", "", table.to_markdown(), "",
        f"![p_D histogram]({stem}.png)", ""])
    with atomic_open(folder / f"{stem}.md") as fh:
        fh.write(text)
    console = _console()
    console.print(table.to_string())
    console.print(f"wrote {folder / (stem + '.md')} and {folder / (stem + '.png')}")


def main() -> None:
    import os

    # dsgen draws its own rich progress bars; silence the libraries' tqdm bars and info logs.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TQDM_DISABLE", "1")
    try:
        app()
    except DsgenError as exc:
        msg = str(exc).replace("\n", " ")
        print(f"error: {msg}", file=sys.stderr)
        sys.exit(2)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
