"""The ``dsgen`` command line. Heavy libraries are imported inside the commands so that
``dsgen --help`` answers at once.

Every command checks what it was given before any long work and before writing anything: bad
input is one line on stderr and exit code 2. Everything a command writes goes under its
``--out`` (or the file it was given); ``--publish DIR`` additionally copies tables into a
folder such as the committed ``results/``.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer

from dsgen.errors import DsgenError

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_enable=False,
                  help="Generate labelled sentence-pair datasets with language models and measure what they are worth.")
bench_app = typer.Typer(no_args_is_help=True, help="Speed benchmarks (printed as ratios against a baseline measured in the same run).")
app.add_typer(bench_app, name="bench")
export_app = typer.Typer(no_args_is_help=True, help="Exports other tools read: dataset folders, MTEB results.")
app.add_typer(export_app, name="export")

PRESET_HELP = "smoke (CI, minutes), quick (MiniLM, CPU), cpu (raw encoder, the papers' claims on CPU), paper (GPU) or a .toml file."
# Options shared by the commands that run methods.
PresetOpt = Annotated[str, typer.Option(help=PRESET_HELP)]
SeedsOpt = Annotated[Optional[str], typer.Option(help="Comma-separated training seeds, e.g. 1,2,3 (default: the preset's).")]
SaveModelOpt = Annotated[bool, typer.Option(
    "--save-model", help="Keep each trained encoder under --out as a sentence-transformers folder with its model card.")]
DataSeedsOpt = Annotated[Optional[str], typer.Option(
    help="Comma-separated data (generation) seeds; each runs with every training seed (default: the preset's).")]
GeneratorOpt = Annotated[Optional[str], typer.Option(
    help="Generator LM instead of the preset's, or openai:<model> for an OpenAI-compatible endpoint (no self-debiasing).")]
BaseUrlOpt = Annotated[Optional[str], typer.Option(
    help="Base URL of the OpenAI-compatible endpoint of --generator openai:<model> (default: $OPENAI_BASE_URL; the key "
         "comes from $OPENAI_API_KEY).")]
EncoderOpt = Annotated[Optional[str], typer.Option(help="Encoder instead of the preset's (alias, HF or sentence-transformers id).")]
DeviceOpt = Annotated[Optional[str], typer.Option(help="cpu, cuda or auto (default: the preset's).")]
PreprocessOpt = Annotated[Optional[str], typer.Option(help="Evaluation text: raw (MTEB) or senteval (GenSE's convention).")]
OutOpt = Annotated[Path, typer.Option(help="Folder for cached datasets, result files and tables.")]
PublishOpt = Annotated[Optional[Path], typer.Option(help="Also write the tables under DIR/<preset>/ (e.g. the committed results/).")]
DataDirOpt = Annotated[Optional[str], typer.Option(help="STS data folder (default: $DSGEN_DATA_DIR).")]
QuietOpt = Annotated[bool, typer.Option("--quiet", help="No progress bars.")]
BackendOpt = Annotated[str, typer.Option(help="Generation backend: local (this process) or ray (pip install 'dsgen\\[ray]').")]
AddressOpt = Annotated[Optional[str], typer.Option(help="Ray cluster: auto or HOST:PORT (default: a local Ray for the run).")]
WorkersOpt = Annotated[Optional[int], typer.Option(help="Ray actors (default: 1 per GPU with --device cuda, else 2).")]
CpusPerWorkerOpt = Annotated[Optional[int], typer.Option(
    help="CPUs (threads) per Ray actor (default: as many as the nodes can give every actor).")]
# the same options of the commands that run methods, where --backend ray fans the comparison's tasks out
SchedulerOpt = Annotated[str, typer.Option(help="Where the comparison's tasks run: local (in order, in this process) or "
                                                "ray (Ray tasks on a cluster's nodes; pip install 'dsgen\\[ray]').")]
TaskWorkersOpt = Annotated[Optional[int], typer.Option(help="Ray: most tasks at once (default: as many as the live "
                                                            "nodes hold).")]
TaskCpusOpt = Annotated[Optional[int], typer.Option(help="Threads each task computes with (training's results depend on "
                                                         "it), and on Ray the CPUs it reserves (default 2).")]


@dataclass
class RunOptions:
    """The options of every command that runs methods (``run``, ``compare``, ``curve``, ``claims``), declared
    once (:func:`run_options`): an option added here reaches all four commands."""

    preset: str = "quick"
    seeds: Optional[str] = None
    data_seeds: Optional[str] = None
    generator: Optional[str] = None
    base_url: Optional[str] = None
    encoder: Optional[str] = None
    device: Optional[str] = None
    preprocess: Optional[str] = None
    save_model: bool = False
    backend: str = "local"
    address: Optional[str] = None
    workers: Optional[int] = None
    cpus_per_worker: Optional[int] = None
    out: Path = Path("runs")
    publish: Optional[Path] = None
    data_dir: Optional[str] = None
    quiet: bool = False

    def overrides(self) -> Any:
        return _overrides(self.generator, self.encoder, self.device, self.preprocess, self.base_url)

    def prepare(self, methods: list[str], overrides: Any) -> tuple[Any, list[tuple[int, int]], Any]:
        """:func:`_prepare` with these options: (preset, runs, runner); the scheduler is checked first."""
        from dsgen.scheduling.base import DEFAULT_THREADS

        self.scheduler()
        return _prepare(methods, self.preset, self.seeds, self.out, self.data_dir, self.quiet, overrides,
                        data_seeds=self.data_seeds, save_models=self.save_model,
                        threads=self.cpus_per_worker or DEFAULT_THREADS)

    def scheduler(self) -> Any:
        """The scheduler ``--backend`` names (:mod:`dsgen.scheduling`; None: local); a one-line error for a bad choice."""
        from dsgen.scheduling import SCHEDULERS

        if self.backend not in SCHEDULERS:
            raise DsgenError(SCHEDULERS.unknown_message(self.backend))
        for name, value in (("--workers", self.workers), ("--cpus-per-worker", self.cpus_per_worker)):
            if value is not None and value < 1:
                raise DsgenError(f"{name} must be at least 1 (got {value})")
        if self.backend == "local":
            if self.address is not None or self.workers is not None:
                raise DsgenError("--address and --workers need --backend ray")
            return None
        from dsgen.scheduling.ray_scheduler import RayScheduler

        return RayScheduler(address=self.address, workers=self.workers, device=self.device,
                            cpus_per_worker=self.cpus_per_worker)

    def execute(self, groups: list[tuple[list[str], Any]], runs: list[tuple[int, int]], runner: Any, overrides: Any,
                console: Any, failures: list[list] | None = None) -> list[dict[str, list[Any]]]:
        """Run every (methods, preset) group as one graph on the scheduler ``--backend`` names (the failed runs of group
        g go to ``failures[g]``); on Ray, one progress bar over the runs (done / running / failed, ETA) above the
        per-run lines."""
        from dsgen.orchestration import run_groups
        from dsgen.scheduling.view import RunsView

        scheduler = self.scheduler()
        total = sum(len(methods) for methods, _ in groups) * len(runs)
        with RunsView(console, total, enabled=scheduler is not None and not self.quiet) as view:
            return run_groups(groups, runs, runner, overrides, on_result=_report(console), failures=failures,
                              scheduler=scheduler, view=view)


# each shared option's command-line declaration (its default is RunOptions')
RUN_OPTIONS: dict[str, Any] = {
    "preset": PresetOpt, "seeds": SeedsOpt, "data_seeds": DataSeedsOpt, "generator": GeneratorOpt, "base_url": BaseUrlOpt,
    "encoder": EncoderOpt, "device": DeviceOpt, "preprocess": PreprocessOpt, "save_model": SaveModelOpt,
    "backend": SchedulerOpt, "address": AddressOpt, "workers": TaskWorkersOpt, "cpus_per_worker": TaskCpusOpt,
    "out": OutOpt, "publish": PublishOpt, "data_dir": DataDirOpt, "quiet": QuietOpt}


def run_options(preset: str = "quick", tables: bool = True) -> Any:
    """Give a command every option of :class:`RunOptions` (after its own parameters) and hand them over as one
    ``opts: RunOptions`` argument. ``preset`` is the command's default preset; ``tables=False`` leaves out
    ``--publish`` (a command that writes no table)."""
    import dataclasses
    import functools
    import inspect

    assert set(RUN_OPTIONS) == {f.name for f in dataclasses.fields(RunOptions)}, "declare every RunOptions field once"
    defaults = {**{f.name: f.default for f in dataclasses.fields(RunOptions)}, "preset": preset}
    names = [n for n in RUN_OPTIONS if tables or n != "publish"]

    def decorate(command: Any) -> Any:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "opts"]
        shared = [inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=defaults[n], annotation=RUN_OPTIONS[n])
                  for n in names]

        @functools.wraps(command)
        def with_options(*args: Any, **kwargs: Any) -> Any:
            opts = RunOptions(**{n: kwargs.pop(n, defaults[n]) for n in RUN_OPTIONS})
            return command(*args, opts=opts, **kwargs)

        with_options.__signature__ = signature.replace(parameters=own + shared)  # type: ignore[attr-defined]
        return with_options
    return decorate


def _console():
    from dsgen.console import console

    return console()


def _command() -> str:
    return " ".join(["dsgen", *sys.argv[1:]])


def _backend(backend: str, address: Optional[str], workers: Optional[int], device: Optional[str],
             cpus_per_worker: Optional[int] = None) -> Any:
    """The generation backend object (``None`` = local); a one-line error for a bad choice."""
    from dsgen.generation.backends import BACKENDS

    if backend not in BACKENDS:
        raise DsgenError(BACKENDS.unknown_message(backend))
    if backend == "local":
        if address is not None or workers is not None or cpus_per_worker is not None:
            raise DsgenError("--address, --workers and --cpus-per-worker need --backend ray")
        return None
    for name, value in (("--workers", workers), ("--cpus-per-worker", cpus_per_worker)):
        if value is not None and value < 1:
            raise DsgenError(f"{name} must be at least 1 (got {value})")
    from dsgen.generation.ray_backend import RayBackend

    return RayBackend(address=address, workers=workers, device=device or "auto", cpus_per_worker=cpus_per_worker)


# -- generation and evaluation --------------------------------------------------------------------


def _config_default(cls: type, name: str) -> Any:
    """The default of a config field (nested ``sampling.top_k``), for help texts: defaults live in the config."""
    import dataclasses

    head, _, rest = name.partition(".")
    f = {f.name: f for f in dataclasses.fields(cls)}[head]
    if rest:
        return _config_default(f.default_factory().__class__, rest)  # type: ignore[misc]
    return f.default if f.default is not dataclasses.MISSING else f.default_factory()  # type: ignore[misc]


def _generation_help(text: str, name: str) -> str:
    from dsgen.generation.debiased import GenerationConfig

    return f"{text} (default: {_config_default(GenerationConfig, name)})"


@app.command()
def generate(
    task: Optional[str] = typer.Option(None, help=_generation_help("Task spec: sts-x2, sts-x1, gense, or a DINO-format JSON file.", "task")),
    inputs: Optional[str] = typer.Option(None, help="x1 source: stsb-train, a text file (one per line) or an sts-x1 JSONL."),
    max_inputs: Optional[int] = typer.Option(None, help="Use only the first N inputs."),
    per_label: Optional[int] = typer.Option(None, help=_generation_help("Continuations drawn per (x1, label) (postprocessing keeps 2).", "per_label")),
    max_attempts: Optional[int] = typer.Option(None, help=_generation_help("Tries per (x1, label); >1 re-samples rejected outputs (not DINO's).", "max_attempts")),
    entries_per_label: Optional[int] = typer.Option(None, help=_generation_help("Sentences per label for tasks without inputs (sts-x1).", "entries_per_label")),
    generator: Optional[str] = typer.Option(None, help=_generation_help(
        "smollm2-135m, gemma3-270m, an HF id, a directory or a .gguf file; openai:<model> for an OpenAI-compatible "
        "endpoint (--base-url; no self-debiasing, so --decay 0).", "generator")),
    base_url: BaseUrlOpt = None,
    decay: Optional[float] = typer.Option(None, help=_generation_help("Self-debiasing decay constant lambda (0: off).", "sampling.decay_constant")),
    top_k: Optional[int] = typer.Option(None, help=_generation_help("Top-k for tasks with inputs (0: off).", "sampling.top_k")),
    top_p: Optional[float] = typer.Option(None, help=_generation_help("Top-p.", "sampling.top_p")),
    max_new_tokens: Optional[int] = typer.Option(None, help=_generation_help("Most tokens per output.", "sampling.max_new_tokens")),
    no_counter_labels: bool = typer.Option(False, "--no-counter-labels", help="Ignore the spec's counter labels."),
    batch_size: Optional[int] = typer.Option(None, help=_generation_help("Most sequences (main + counter rows) decoded together.", "batch_size")),
    chunk_inputs: Optional[int] = typer.Option(None, help=_generation_help("Inputs per resumable chunk.", "chunk_inputs")),
    device: Optional[str] = typer.Option(None, help=_generation_help("cpu, cuda or auto.", "device")),
    dtype: Optional[str] = typer.Option(None, help=_generation_help("float32 (DINO), bfloat16 or float16.", "dtype")),
    backend: BackendOpt = "local",
    address: AddressOpt = None,
    workers: WorkersOpt = None,
    cpus_per_worker: CpusPerWorkerOpt = None,
    data_dir: DataDirOpt = None,
    seed: Optional[int] = typer.Option(None, help=_generation_help("Random seed.", "seed")),
    fresh: bool = typer.Option(False, "--fresh", help="Start over instead of resuming finished chunks."),
    out: Path = typer.Option(Path("pairs.jsonl"), help="Output JSONL (a .meta.json sidecar is written beside it)."),
    quiet: QuietOpt = False,
) -> None:
    """Generate a labelled pair dataset with self-debiased decoding (DINO)."""
    from dsgen.artifacts import check_writable_target
    from dsgen.data.inputs import load_inputs
    from dsgen.generation import GENERATORS, GenerationContext
    from dsgen.taskspec import load_task_spec

    # only what the user set: every other value is the config class's default
    ov = _overrides(generator, base_url=base_url)
    sampling = {k: v for k, v in dict(decay_constant=decay, top_k=top_k, top_p=top_p,
                                      max_new_tokens=max_new_tokens).items() if v is not None}
    given = {k: v for k, v in dict(task=task, generator=None if ov.api_model is not None else generator,
                                   per_label=per_label, max_attempts=max_attempts, entries_per_label=entries_per_label,
                                   batch_size=batch_size, chunk_inputs=chunk_inputs, device=device, dtype=dtype,
                                   seed=seed).items() if v is not None}
    if no_counter_labels:
        given["counter_labels"] = False
    cls = GENERATORS.get("debiased")
    cfg = cls.config_class.from_dict({**given, **({"sampling": sampling} if sampling else {})}).check()
    load_task_spec(cfg.task, with_inputs=inputs is not None)  # validate before loading anything heavy
    if ov.api_model is not None:  # the same settings, through an OpenAI-compatible endpoint
        cls = GENERATORS.get("openai")
        settings, _ = cls.adapt(cfg, "these settings")
        cfg = cls.config_class.from_dict({**settings, "model": ov.api_model, "base_url": base_url or ""}).check()
    check_writable_target(out)
    texts = load_inputs(inputs, max_inputs, data_dir) if inputs is not None else None
    context = GenerationContext(data_dir=data_dir, backend=_backend(backend, address, workers, device, cpus_per_worker),
                                progress=not quiet)
    gen = cls.build(cfg, context)
    if ov.api_model is not None:
        pairs = gen.generate(texts, out, progress=not quiet, resume=not fresh)
        _console().print(f"wrote {len(pairs)} pairs to {out} (openai generator, model {ov.api_model} at {gen.base_url})")
        return
    if gen.backend is None:
        gen.lm  # load (and fail on a bad model or device) before anything is written
    pairs = gen.generate(texts, out, progress=not quiet, resume=not fresh)
    lm = gen.lm.describe() if gen.backend is None else {"name": cfg.generator, "load_seconds": "-",
                                                         "dequantised_cache_hit": True}
    _console().print(f"wrote {len(pairs)} pairs to {out} (generator {lm['name']}, loaded in {lm['load_seconds']} s, "
                     f"dequantised cache {'hit' if lm['dequantised_cache_hit'] else 'built'})")


@app.command("eval")
def eval_cmd(
    model: str = typer.Argument(..., help="Encoder: minilm-l6, a causal-LM encoder alias (see README), or an id or path."),
    tasks: Optional[str] = typer.Option(None, help="Comma-separated tasks (default: DINO's Table 1 columns; 'mteb': MTEB's seven)."),
    data_dir: DataDirOpt = None,
    preprocess: str = typer.Option("raw", help="Evaluation text: raw (MTEB) or senteval (GenSE's convention)."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Result file (default: runs/eval/<model>.json)."),
    batch_size: int = typer.Option(64, help="Encoding batch size."),
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
) -> None:
    """Evaluate a sentence encoder on STS12-16, STSb and SICK-R (Spearman x100, as MTEB)."""
    from dsgen.artifacts import check_writable_target
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.evaluation.tables import comparison_frame, to_rich
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.encoders import load_encoder
    from dsgen.models import check_device

    names = parse_tasks(tasks)
    if batch_size < 1:
        raise DsgenError(f"--batch-size must be at least 1 (got {batch_size})")
    check_device(device)
    slug = model.strip("/").replace("/", "__").replace(":", "_")
    path = json_out or Path("runs") / "eval" / f"{slug}.json"
    check_writable_target(path)
    from dsgen.data.sts import using_data_dir

    evaluator = StsEvaluator(names, data_dir, batch_size, preprocess=preprocess)
    evaluator.pairs  # fail on bad data before loading the model
    with using_data_dir(data_dir):
        from dsgen.training.model_folder import folder_template

        # a kept model folder carries the text template it was trained and scored with (GenSE's prompt)
        template = folder_template(Path(model)) if Path(model).is_dir() else None
        result = evaluator.evaluate(load_encoder(model, device), name=model, template=template)
    result.extra["evaluation_data"] = {"fingerprint": evaluator.fingerprint(), "preprocess": preprocess}
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
    from dsgen.artifacts import atomic_open, check_writable_target
    from dsgen.evaluation.tables import comparison_frame, failed_results, load_results, to_csv, to_markdown, to_rich

    for target in (markdown, csv):
        if target is not None:
            check_writable_target(target)
    loaded = load_results(results)
    frame = comparison_frame(loaded)
    _console().print(to_rich(frame, title="Spearman x 100 (cosine)"))
    for line in failed_results(loaded):  # a run that did not train: a row marked failed, never a score
        _console().print(f"failed: {line}", markup=False)
    if markdown:
        with atomic_open(markdown) as fh:
            fh.write(to_markdown(frame) + "\n")
    if csv:
        to_csv(frame, csv)


@bench_app.command("generation")
def bench_generation(
    generator: str = typer.Option("smollm2-135m", help="Generator LM."),
    n_inputs: int = typer.Option(24, help="STS benchmark train sentences to use."),
    batch_size: Optional[list[int]] = typer.Option(
        None, help="Rows of the fast core; repeat to time several (default: the generation default 128, 256, 512)."),
    greedy_items: int = typer.Option(12, help="(x1, label) items for the greedy equivalence check (0: skip)."),
    data_dir: DataDirOpt = None,
    device: str = typer.Option("auto", help="cpu, cuda or auto."),
    seed: int = typer.Option(42),
    precision: Optional[str] = typer.Option(None, help="Also time an opt-in lower-precision copy: int8 or bfloat16."),
    json_out: Optional[Path] = typer.Option(None, "--json", help="Also write the numbers to this JSON file."),
) -> None:
    """Core vs DINO-style reference loop: outputs/s, ratio, tokens/s, share of the machine's peak, greedy agreement."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.generation import run
    from dsgen.models import check_device

    if n_inputs < 1 or any(b < 1 for b in batch_size or []) or greedy_items < 0:
        raise DsgenError("--n-inputs and --batch-size must be at least 1 and --greedy-items non-negative")
    if precision not in (None, "int8", "bfloat16"):
        raise DsgenError(f"--precision must be int8 or bfloat16 (got '{precision}')")
    check_device(device)
    if json_out:
        check_writable_target(json_out)
    run(generator=generator, n_inputs=n_inputs, batch_sizes=batch_size, greedy_items=greedy_items,
        data_dir=data_dir, device=device, seed=seed, json_out=json_out, precision=precision)


@bench_app.command("eval")
def bench_eval(
    model: str = typer.Option("minilm-l6", help="Encoder (the cpu preset's: smollm2-l4)."),
    tasks: Optional[str] = typer.Option(
        "mteb", help="Tasks (default: MTEB's seven; the cpu preset's: sts12,sts13,sts14,sts15,sts16,stsb,sickr-test)."),
    data_dir: DataDirOpt = None,
    batch_size: int = typer.Option(64, help="Batch size of the naive baseline."),
    dtype: str = typer.Option("float32", help="Weights both encode with: float32 or bfloat16 (the cpu preset's, "
                                              "where the CPU has native bfloat16)."),
    rounds: int = typer.Option(1, help="Rounds of naive, first run and later runs, for the ratios' spread."),
    later_runs: int = typer.Option(2, help="Later runs of a comparison per round (token cache warm, other weights)."),
    threads: Optional[int] = typer.Option(None, help="torch's intra-op threads for the whole benchmark (default: torch's)."),
    token_budget: Optional[list[int]] = typer.Option(
        None, help="Further evaluator batch shapes to time, in padded tokens per batch; repeatable (default: 8192)."),
    json_out: Optional[Path] = typer.Option(None, "--json"),
) -> None:
    """The evaluator (distinct sentences tokenised once, length-bucketed batches) vs naive per-task encoding: first and later runs of a comparison, ratios and their spread, score agreement."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.evaluation import run
    from dsgen.evaluation.tasks import parse_tasks
    from dsgen.models import check_dtype

    parse_tasks(tasks)
    check_dtype(dtype)
    if batch_size < 1 or rounds < 1 or later_runs < 0 or (threads is not None and threads < 1):
        raise DsgenError("--batch-size, --rounds and --threads must be at least 1 and --later-runs non-negative")
    if token_budget and min(token_budget) < 1:
        raise DsgenError(f"--token-budget must be at least 1 (got {min(token_budget)})")
    if json_out:
        check_writable_target(json_out)
    run(model=model, tasks=tasks, data_dir=data_dir, batch_size=batch_size, json_out=json_out,
        token_budgets=tuple(token_budget) if token_budget else None, dtype=dtype, rounds=rounds,
        later_runs=later_runs, threads=threads)


@bench_app.command("scheduling")
def bench_scheduling(
    preset: PresetOpt = "smoke",
    methods: str = typer.Option("dino,dino-decay0,human,base", help="Comma-separated methods of the comparison."),
    seeds: SeedsOpt = "1,2",
    data_seeds: DataSeedsOpt = None,
    nodes: int = typer.Option(2, help="Nodes of the local Ray cluster (a head without CPUs besides)."),
    cpus: int = typer.Option(1, help="CPUs of each node, and of each task."),
    out: Path = typer.Option(Path("runs/bench/scheduling"), help="Scratch folder (emptied first)."),
    data_dir: DataDirOpt = None,
    json_out: Optional[Path] = typer.Option(None, "--json"),
) -> None:
    """A comparison on the local scheduler vs a local Ray cluster of --nodes x --cpus: wall time, what scheduling adds per task, the cost model."""
    from dsgen.artifacts import check_writable_target
    from dsgen.benchmarks.scheduling import run
    from dsgen.method import get_method
    from dsgen.presets import load_preset, parse_seeds

    names = [m.strip() for m in methods.split(",") if m.strip()]
    for m in names:
        get_method(m)
    load_preset(preset)
    parse_seeds(seeds, None)
    parse_seeds(data_seeds, None, "--data-seeds")
    if nodes < 1 or cpus < 1:
        raise DsgenError("--nodes and --cpus must be at least 1")
    from dsgen.generation.ray_backend import import_ray

    import_ray()
    check_writable_target(out)
    if json_out:
        check_writable_target(json_out)
    run(preset=preset, methods=tuple(names), seeds=seeds, data_seeds=data_seeds, nodes=nodes, cpus=cpus, out=out,
        data_dir=data_dir, json_out=json_out)


# -- methods: plan, run, compare, regress, analyze, claims -------------------------------------


def _overrides(generator: Optional[str] = None, encoder: Optional[str] = None, device: Optional[str] = None,
               preprocess: Optional[str] = None, base_url: Optional[str] = None) -> Any:
    from dsgen.evaluation.preprocess import check_preprocess
    from dsgen.models import check_device
    from dsgen.planning import Overrides

    if device is not None:
        check_device(device)
    if preprocess is not None:
        check_preprocess(preprocess)
    ov = Overrides(generator, encoder, device, preprocess, base_url)
    if base_url is not None and ov.api_model is None:
        raise DsgenError("--base-url goes with --generator openai:<model>")
    if ov.api_model == "":
        raise DsgenError("--generator openai: needs the model the endpoint serves, e.g. openai:gpt-4o-mini")
    return ov


def _prepare(methods: list[str], preset: str, seeds: Optional[str], out: Path, data_dir: Optional[str],
             quiet: bool, overrides: Any, fresh: bool = False, backend: Any = None,
             data_seeds: Optional[str] = None, save_models: bool = False,
             threads: Optional[int] = None) -> tuple[Any, list[tuple[int, int]], Any]:
    """Validate everything cheap before any long work (methods, preset, seeds, every plan, output
    folder), then make the runner (which creates ``out``). Returns (preset, runs, runner); a run is
    a (data seed, training seed) pair."""
    from dsgen.artifacts import check_writable_target
    from dsgen.method import get_method
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset, parse_seeds
    from dsgen.runs.pipeline import Runner

    for m in methods:
        get_method(m)
    repeated = sorted({m for m in methods if methods.count(m) > 1})
    if repeated:
        raise DsgenError(f"method '{repeated[0]}' is given twice; name each method once")
    p = load_preset(preset)
    runs = p.runs(parse_seeds(seeds, None), parse_seeds(data_seeds, None, "--data-seeds"))
    for m in methods:
        for d, s in runs:
            plan_run(m, p, s, overrides, d)  # a bad setting fails here, before anything runs
    check_writable_target(out)
    return p, runs, Runner(out, data_dir, progress=not quiet, fresh=fresh, backend=backend, save_models=save_models,
                           threads=threads)


def _report(console: Any) -> Any:
    """The per-run line: ``method (data seed d, training seed t): avg ...``, worded as a failed run's line."""
    from dsgen.evaluation.tables import run_text

    def on_result(method: str, plan: Any, result: Any) -> None:
        console.print(f"[bold]{method}[/bold] ({run_text(plan.run)}): avg {result.average:.2f} "
                      f"({', '.join(f'{t} {s.spearman:.2f}' for t, s in result.tasks.items())})")
    return on_result


def _report_failures(console: Any, failures: list[Any]) -> None:
    """One line per failed run (``method (run): reason``): it has a row marked failed in the tables."""
    from rich.markup import escape

    for f in failures:
        console.print(f"[red]no model[/red] {escape(str(f))}")


def _exit_if_crashed(failures: list[Any]) -> None:
    """Exit 1, naming them, when runs crashed on an unexpected exception (the other runs went on and the tables
    were written); their tracebacks are under ``--out``'s ``logs/``."""
    from dsgen.evaluation.tables import run_text
    from dsgen.runs.records import RunCrashed

    crashed = [f for f in failures if isinstance(f, RunCrashed)]
    if crashed:
        print(f"error: {len(crashed)} run{'s' if len(crashed) > 1 else ''} crashed: "
              + "; ".join(f"{f.method} ({run_text(f.run)}), traceback in {f.log}" for f in crashed), file=sys.stderr)
        raise typer.Exit(1)


def _publish(paths: dict[str, Path], publish: Optional[Path], preset: str) -> list[Path]:
    """Copy written tables into ``publish/<preset>/`` (an explicit choice, e.g. the committed results/)."""
    if publish is None:
        return []
    from dsgen.artifacts import atomic_open, ensure_writable_dir

    folder = ensure_writable_dir(publish / preset)
    copied = []
    for path in paths.values():
        target = folder / path.name
        with atomic_open(target, "wb") as fh:
            fh.write(path.read_bytes())
        copied.append(target)
    return copied


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


@app.command("plan")
def plan_cmd(
    method: str = typer.Argument(..., help="Method name (see `dsgen methods`)."),
    preset: PresetOpt = "quick",
    seed: Optional[int] = typer.Option(None, help="Training seed (default: the preset's first run's)."),
    data_seed: Optional[int] = typer.Option(None, help="Data (generation) seed (default: the preset's first run's)."),
    generator: GeneratorOpt = None,
    base_url: BaseUrlOpt = None,
    encoder: EncoderOpt = None,
    device: DeviceOpt = None,
    preprocess: PreprocessOpt = None,
    as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON (settings and their origins)."),
) -> None:
    """Print every resolved setting a run would use, and where each value came from."""
    import json

    from rich.markup import escape
    from rich.table import Table

    from dsgen.planning import plan_run
    from dsgen.presets import load_preset

    p = load_preset(preset)
    plan = plan_run(method, p, p.runs()[0][1] if seed is None else seed, _overrides(generator, encoder, device, preprocess, base_url),
                    p.data_seed_for(data_seed))
    if as_json:
        print(json.dumps({"plan": plan.to_dict(), "origins": plan.origins}, indent=2, default=str))
        return
    table = Table(title=f"plan: {method}, preset {p.name}")
    for col in ("section", "setting", "value", "from"):
        table.add_column(col, overflow="fold")
    for section, key, value, origin in plan.rows():
        table.add_row(section, key, escape(repr(value) if isinstance(value, str) else str(value)), origin)
    _console().print(table)


@app.command("run")
@run_options(tables=False)
def run_cmd(
    method: str = typer.Argument(..., help="Method name (see `dsgen methods`)."),
    *,
    opts: RunOptions,
) -> None:
    """Generate (cached), train and evaluate one method; one result file per seed, then the table."""
    from dsgen.evaluation.tables import comparison_frame, to_rich

    ov = opts.overrides()
    p, runs, runner = opts.prepare([method], ov)
    console = _console()
    results = opts.execute([([method], p)], runs, runner, ov, console)[0]
    console.print(to_rich(comparison_frame(results[method], p.tasks), title=f"{method}, preset {p.name}"))
    console.print(f"results under {runner.out / 'results' / p.name / method}")


@app.command("compare")
@run_options()
def compare_cmd(
    methods: list[str] = typer.Argument(..., help="Methods; differences are taken to the first. `base` is added if absent."),
    name: Optional[str] = typer.Option(None, help="File stem of the comparison (default: compare-<methods>)."),
    *,
    opts: RunOptions,
) -> None:
    """Run what is missing, reuse what is cached, and write one comparison table (Markdown, CSV, PNG) under --out."""
    from dsgen.evaluation.comparison import Comparison
    from dsgen.evaluation.tables import comparison_rich, write_comparison

    names = methods + ([] if "base" in methods else ["base"])  # a repeated method is refused by _prepare
    ov = opts.overrides()
    p, runs, runner = opts.prepare(names, ov)
    console = _console()
    failures: list = []
    results = opts.execute([(names, p)], runs, runner, ov, console, [failures])[0]
    _report_failures(console, failures)
    failed = {f.method for f in failures}
    done = [m for m in names if m in results and m not in failed and len(results[m]) == len(runs)]
    if names[0] not in done:
        _exit_if_crashed(failures)
        raise DsgenError(f"the reference method '{names[0]}' produced no result; nothing to compare against")
    comparison = Comparison(done, p.tasks, {m: results[m] for m in done}, preset=p.name, failures=failures)
    stem = name or "compare-" + "-".join(names)
    paths = write_comparison(comparison, runner.out / "tables" / p.name, stem, command=_command())
    console.print(comparison_rich(comparison))
    console.print("wrote " + ", ".join(str(x) for x in [*paths.values(), *_publish(paths, opts.publish, p.name)]))
    _exit_if_crashed(failures)


@app.command("curve")
@run_options(preset="cpu")
def curve_cmd(
    methods: list[str] = typer.Argument(..., help="Methods, e.g. dino dino-decay0 human base."),
    sizes: str = typer.Option("100,300,1000", help="Comma-separated numbers of generation inputs."),
    name: Optional[str] = typer.Option(None, help="File stem (default: curve-<methods>)."),
    *,
    opts: RunOptions,
) -> None:
    """Each method's score as the generation inputs grow (one preset copy per size); Markdown, CSV, PNG."""
    from dataclasses import replace

    from dsgen.models import describe_encoder
    from dsgen.evaluation.curve import curve_points
    from dsgen.evaluation.tables import curve_frame, tasks_text, to_rich, write_curve
    from dsgen.planning import plan_run
    from dsgen.presets import parse_seeds

    counts = parse_seeds(sizes, None, "--sizes")
    if not counts or min(counts) < 1:
        raise DsgenError(f"--sizes must be positive integers such as 100,300,1000 (got '{sizes}')")
    ov = opts.overrides()
    p, runs, runner = opts.prepare(methods, ov)
    at = {n: replace(p, max_inputs=n, name=f"{p.name}-{n}") for n in sorted(counts)}
    for sized in at.values():  # every plan of every size is checked before any long work
        for m in methods:
            for d, s in runs:
                plan_run(m, sized, s, ov, d)
    console = _console()
    failures: dict[int, list] = {n: [] for n in at}  # every size's runs as one graph, fanned out together
    results = dict(zip(at, opts.execute([(methods, sized) for sized in at.values()], runs, runner, ov, console,
                                        [failures[n] for n in at])))
    every_failure = [f for n in at for f in failures[n]]
    _report_failures(console, every_failure)
    points = curve_points(results, failures)
    header = {"preset": p.name, "runs": runs, "tasks_text": tasks_text(p.tasks),
              "encoders": sorted({describe_encoder(r.model) for by in results.values() for rs in by.values() for r in rs})}
    paths = write_curve(points, runner.out / "tables" / p.name, name or "curve-" + "-".join(methods), header, _command())
    means = curve_frame(points)["mean"].unstack("inputs")
    means.index.name = "method"
    console.print(to_rich(means, title=f"learning curve, preset {p.name}: mean avg. by inputs"))
    console.print("wrote " + ", ".join(str(x) for x in [*paths.values(), *_publish(paths, opts.publish, p.name)]))
    _exit_if_crashed(every_failure)


@app.command("regress")
def regress_cmd(
    preset: PresetOpt = "smoke",
    baseline: Optional[Path] = typer.Option(None, help="Baseline file (default: results/baseline/<preset>.json)."),
    tolerance: Optional[float] = typer.Option(None, help="Points of Spearman x100 a task may fall below the baseline "
                                                         "(default: the baseline file's, chosen from measured seed spread)."),
    methods: Optional[str] = typer.Option(None, help="Methods for --update (default: base,dino)."),
    update: bool = typer.Option(False, "--update", help="Write the baseline from this run instead of checking."),
    out: Path = typer.Option(Path("runs/regress"), help="Scratch folder (recomputed from scratch every time)."),
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """Rerun a preset from scratch; exit 1 when a task falls more than the tolerance below the baseline (or is NaN)."""
    from rich.table import Table

    from dsgen.evaluation.baseline import (DEFAULT_TOLERANCE, check, describe, made_with, read_baseline, select,
                                           write_baseline)
    from dsgen.orchestration import run_many

    if tolerance is not None and tolerance < 0:
        raise DsgenError(f"--tolerance must be non-negative (got {tolerance})")
    path = baseline or Path("results") / "baseline" / f"{Path(preset).stem}.json"
    ref = None if update else read_baseline(path)
    previous = read_baseline(path) if update and path.exists() else None  # --update keeps its tolerance and note
    names = ([m.strip() for m in (methods or "base,dino").split(",") if m.strip()] if update
             else list(dict.fromkeys(m for entry in ref["baselines"] for m in entry["scores"])))
    ov = _overrides()
    p, runs, runner = _prepare(names, preset, None if update else ",".join(map(str, ref["seeds"])), out,
                                    data_dir, quiet, ov, fresh=True)
    if not update and ref.get("preset") != p.name:
        raise DsgenError(f"{path} is a baseline of preset '{ref.get('preset')}', not '{p.name}'")
    tol = tolerance if tolerance is not None else (ref or previous or {}).get("tolerance", DEFAULT_TOLERANCE)
    console = _console()
    results = run_many(names, p, runs, runner, ov, on_result=_report(console))
    if update:
        note = (previous or {}).get("note") if tolerance is None and previous else None
        kept = write_baseline(path, p.name, sorted({s for _, s in runs}), results, tolerance=tol,
                              note=note or f"dsgen regress --preset {preset} --update --tolerance {tol:g}",
                              previous=previous)
        console.print(f"wrote baseline {path} for {describe(made_with(results))} (tolerance {tol:g})"
                      + "".join(f"; kept the one made with {describe(b.get('made_with'))}" for b in kept))
        return
    entry, differently = select(ref, results)
    console.print(differently or f"checked against the baseline made the same way ({describe(entry.get('made_with'))})")
    checks = check(entry, results, tol)
    table = Table(title=f"regression check, preset {p.name}, tolerance {tol}")
    for col in ("method", "task", "baseline", "now", "Δ", "status"):
        table.add_column(col, justify="right" if col not in ("method", "task") else "left")
    for c in checks:
        table.add_row(c.method, c.task, f"{c.baseline:.2f}", f"{c.current:.2f}", f"{c.delta:+.2f}",
                      f"[red]{c.status}[/red]" if c.failed else c.status)
    console.print(table)
    failed = [c for c in checks if c.failed]
    if failed:
        console.print(f"[red]{len(failed)} of {len(checks)} scores fell more than {tol} below {path} or are not numbers[/red]")
        raise typer.Exit(1)
    risen = [c for c in checks if c.delta > tol]  # the gate is one-sided: a rise passes, but is not "within"
    if not risen:
        console.print(f"all {len(checks)} scores within {tol} of {path}")
        return
    console.print(f"no score of {len(checks)} fell more than {tol} below {path}; {len(risen)} rose more than {tol} above "
                  f"it ({', '.join(f'{c.method} {c.task} {c.delta:+.2f}' for c in risen)}): the baseline predates what "
                  f"moved them, and a fall back would pass unseen (`dsgen regress --preset {preset} --update` remakes it)")


@app.command("analyze")
def analyze_cmd(
    method: str = typer.Argument("rise", help="A method whose reweighter records p_D (rise, rise-filter)."),
    preset: PresetOpt = "quick",
    seed: int = typer.Option(1, help="Which training seed's run to analyse (run first if missing)."),
    data_seed: Optional[int] = typer.Option(None, help="Its data seed (default: the preset's first)."),
    out: OutOpt = Path("runs"),
    publish: PublishOpt = None,
    data_dir: DataDirOpt = None,
    quiet: QuietOpt = False,
) -> None:
    """RISE's Table 1 for a run: top / bottom 10% of machine sentences by p_D against the human ones."""
    from dsgen.data.analysis import write_rise_analysis
    from dsgen.method import get_method
    from dsgen.planning import plan_run
    from dsgen.orchestration import run_many

    if get_method(method).reweighter != "sdi":
        raise DsgenError(f"method '{method}' records no SDI importance p_D; analyse rise or rise-filter")
    ov = _overrides()
    p, _, runner = _prepare([method], preset, str(seed), out, data_dir, quiet, ov,
                            data_seeds=None if data_seed is None else str(data_seed))
    run = (p.data_seed_for(data_seed), seed)
    result = run_many([method], p, [run], runner, ov)[method][0]
    train_file = runner.result_path(plan_run(method, p, seed, ov, run[0])).with_suffix(".train.jsonl")
    paths, table = write_rise_analysis(result, train_file, p, seed, runner.out / "tables" / p.name, data_dir, _command())
    console = _console()
    console.print(table.to_string())
    console.print("wrote " + ", ".join(str(x) for x in [*paths.values(), *_publish(paths, publish, p.name)]))


@app.command("claims")
@run_options(preset="cpu")
def claims_cmd(
    papers: Optional[str] = typer.Option(None, help="Comma-separated papers (default: the preset's claims_papers, else "
                                                    "the founding ones, dino, rise, gense, control; also syncse, claif, "
                                                    "sim-gpt, e5, multicsr; all)."),
    *,
    opts: RunOptions,
) -> None:
    """Test the papers' claims: run (or reuse) every method they involve; one verdict per claim (Markdown + PNG)."""
    from dsgen.artifacts import atomic_open, write_json
    from dsgen.claims import FOUNDING, claim_methods, judge_all, load_claims, load_figures, paper_files
    from dsgen.claims.report import claims_chart, claims_markdown, verdict_record
    from dsgen.models import describe_encoder
    from dsgen.presets import load_preset

    known = paper_files()
    chosen = ([x.strip() for x in papers.split(",") if x.strip()] if papers else
              list(load_preset(opts.preset).claims_papers or FOUNDING))
    chosen = known if chosen == ["all"] else chosen
    for name in chosen:
        if name not in known:
            from dsgen.suggest import unknown

            raise DsgenError(unknown("paper", name, [*known, "all"]))
    claims, figures = load_claims(chosen), load_figures(chosen)
    if not claims:
        raise DsgenError(f"the papers {', '.join(chosen)} make no claim a comparison here can test (only figures)")
    names = claim_methods(claims)
    ov = opts.overrides()
    p, runs, runner = opts.prepare(names, ov)
    console = _console()
    failures: list = []
    results = opts.execute([(names, p)], runs, runner, ov, console, [failures])[0]
    _report_failures(console, failures)
    failed = {f.method for f in failures}
    scores = {m: {r.run: r.average for r in rs} for m, rs in results.items() if len(rs) == len(runs) and m not in failed}
    means = {m: sum(v.values()) / len(v) for m, v in scores.items()}
    seed_list = sorted({s for _, s in runs})
    verdicts = judge_all(claims, scores, missing={f.method: f.reason for f in failures})
    folder = runner.out / "tables" / p.name
    stem = "claims" if sorted(chosen) == sorted(FOUNDING) else "claims-" + "-".join(chosen)
    paths = {"markdown": folder / f"{stem}.md", "png": folder / f"{stem}.png", "json": folder / f"{stem}.json"}
    header = {"preset": p.name, "seeds": seed_list, "runs": runs, "tasks": list(p.tasks), "png": paths["png"].name,
              "encoders": sorted({describe_encoder(r.model) for rs in results.values() for r in rs})}
    claims_chart(verdicts, paths["png"], f"claims, preset {p.name}, {len(runs)} runs")
    with atomic_open(paths["markdown"]) as fh:
        fh.write(claims_markdown(verdicts, means, header, _command(), figures, failures))
    write_json(paths["json"], {"preset": p.name, "seeds": seed_list, "runs": [list(r) for r in runs],
                               "scores": {m: [[d, t, v] for (d, t), v in sorted(sc.items())] for m, sc in scores.items()},
                               "failures": [{"method": f.method, "data_seed": f.data_seed, "seed": f.seed,
                                             "reason": f.reason} for f in failures],
                               "verdicts": [verdict_record(v) for v in verdicts]})
    for v in verdicts:
        console.print(f"{v.verdict:>13}  {v.claim.paper}: {v.claim.statement}")
    console.print("wrote " + ", ".join(str(x) for x in [*paths.values(), *_publish(paths, opts.publish, p.name)]))
    _exit_if_crashed(failures)


# -- exports -----------------------------------------------------------------------------------------

OverwriteOpt = Annotated[bool, typer.Option(
    "--overwrite", help="Replace --out even when dsgen did not write it as this export (never a folder holding runs).")]


@export_app.command("dataset")
def export_dataset_cmd(
    method: str = typer.Argument(..., help="The method whose run's dataset to export."),
    preset: PresetOpt = "quick",
    seed: Optional[int] = typer.Option(None, help="The run's training seed (default: the preset's first run's)."),
    data_seed: Optional[int] = typer.Option(None, help="The run's data seed (default: the preset's first run's)."),
    runs: Path = typer.Option(Path("runs"), "--runs", help="Where the run lives (its --out)."),
    out: Path = typer.Option(..., help="The dataset folder to write."),
    overwrite: OverwriteOpt = False,
) -> None:
    """A run's training data (after postprocessing and reweighting, with the weights) as a Hugging Face dataset folder."""
    from dsgen.export.dataset_folder import from_run, write_dataset_folder
    from dsgen.method import get_method
    from dsgen.planning import plan_run
    from dsgen.presets import load_preset
    from dsgen.runs.records import result_path

    get_method(method)
    p = load_preset(preset)
    plan = plan_run(method, p, p.runs()[0][1] if seed is None else seed, _overrides(), p.data_seed_for(data_seed))
    path = result_path(runs, plan)  # the run's result file: its folder names every setting but the seeds
    if not path.exists():
        raise DsgenError(f"no run of {method} (preset {p.name}, data seed {plan.run[0]}, seed {plan.run[1]}) under "
                         f"{runs}; run it first (dsgen run {method} --preset {preset} --out {runs}) or give --runs")
    folder = write_dataset_folder(from_run(path, runs / "cache" / "datasets", _command()), out, overwrite)
    _console().print(f"wrote {folder} (datasets.load_dataset('{folder}') reads it)")


@export_app.command("pairs")
def export_pairs_cmd(
    pairs: Path = typer.Argument(..., help="A generated pairs file with its sidecar (dsgen generate --out, or a cache entry)."),
    out: Path = typer.Option(..., help="The dataset folder to write."),
    overwrite: OverwriteOpt = False,
) -> None:
    """A generated pairs file as it left the generator, as a Hugging Face dataset folder (one train split)."""
    from dsgen.export.dataset_folder import from_pairs_file, write_dataset_folder

    folder = write_dataset_folder(from_pairs_file(pairs, _command()), out, overwrite)
    _console().print(f"wrote {folder}")


@export_app.command("mteb")
def export_mteb_cmd(
    results: list[Path] = typer.Argument(..., help="Result files, or folders searched for them (a run's --out)."),
    out: Path = typer.Option(..., help="The MTEB results folder to write (read by mteb.ResultCache(out))."),
    overwrite: OverwriteOpt = False,
) -> None:
    """Results in MTEB's layout: <out>/results/<model>/<revision>/<Task>.json and model_meta.json."""
    from dsgen.evaluation.results import Result
    from dsgen.folders import check_target_folder, result_files
    from dsgen.export.mteb_results import KIND, export_mteb, import_mteb

    import_mteb()
    check_target_folder(out, KIND, overwrite)  # before reading anything: a folder it may not replace fails at once
    files: list[Path] = []
    for path in results:
        if path.is_dir():  # a run folder: its run results and its `dsgen eval` results
            files += result_files(path)
        elif path.is_file():
            files.append(path)
        else:
            raise DsgenError(f"no result file or folder at {path}")
    loaded = [Result.load(f) for f in files]
    if not loaded:
        raise DsgenError(f"no dsgen result files in {', '.join(map(str, results))}")
    written, notes = export_mteb(loaded, out, _command(), overwrite)
    console = _console()
    for note in sorted(set(notes)):
        console.print(note)
    console.print(f"wrote {len(written)} task results under {out} (mteb.ResultCache('{out}').load_results() reads them)")


def main() -> None:
    import os

    # dsgen draws its own rich progress bars and errors; silence the libraries' tqdm bars, info
    # logs and the Hub client's retry warnings.
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_VERBOSITY", "error")
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
