"""The GPU check: one command that runs dsgen's CUDA path and predicts what the `paper` preset costs on that GPU.

In one run, on one device (default ``cuda``), each section timed and guarded by a time budget:

1. **tests**: ``pytest -m gpu`` on every test file that marks tests ``gpu`` (``tests/test_gpu.py`` and any other),
   pass / fail / skip per test;
2. **generation**: dsgen's decoder, DINO's reference loop and ``transformers``' ``generate`` on a randomly
   initialised GPT2-XL architecture at the preset's sampling settings (:func:`dsgen.benchmarks.gpu_measure.generation`);
3. **training**: the ``regression`` and ``contrastive`` trainers on a randomly initialised roberta-base architecture at
   the preset's batch sizes and sequence lengths (pairs / triplets per second);
4. **evaluation**: the STS evaluator on the preset's tasks and the trainers' model-selection evaluator (sentences/s);
5. **cost model**: the preset's wall time per method on this device, from 2-4 and the preset's sizes
   (:mod:`dsgen.benchmarks.gpu_cost`).

It writes ``gpu-check.json`` (every figure with its settings, the device, torch / CUDA versions) and
``gpu-check.md`` under ``--out`` (default ``runs/gpu-check/``). A failing section is recorded with its traceback and
the others run; the exit code is 1 when a section failed or a ``gpu`` test did not pass, 2 on a set-up error. ``--scale tiny`` (or ``--tiny``) shrinks every model
and size so that ``--device cpu --tiny`` runs in well under a minute on 2 CPU cores (the CI test runs it).

Time budget (``--budget-s``, default 450 s: the whole command, wheels' install included, within 8 minutes on one
H100). Estimated from FLOPs at an effective 20 TFLOP/s in float32 (an H100 SXM peaks at 67 without TF32): the
decoder's two runs forward about 2 x 60 k row-tokens of GPT2-XL (3.1 GFLOP each; 720 samples of 40 tokens, 2 rows a
sample on average, plus prefill): about 20 s; ``generate`` 2 x 29 k: 9 s; the reference loop is capped at 30 s;
regression training 105 steps of 32 pairs (6 x 125 M x about 1.6 k tokens a step): 6 s; contrastive 5 steps of 1,024
triplets (8 x 125 M x about 60 k tokens a step with GradCache's extra forward): 15 s; evaluation 26 k sentences four
times and 3 k once (2 x 125 M x about 15 tokens each): 20 s; about 1.7 min of GPU work. Set-up (imports, tokenizers,
building GPT2-XL on the GPU, writing and loading roberta-base's 0.5 GB), the tests and the loops' Python overhead bring
it to an estimated 3-4 min. Each section is skipped (and says so) when less time is left than it needs, a larger
batch and the contrastive trainer likewise, and the reference loop and the tests are cut to the time left.

Run: ``make gpu-check`` or ``python -m dsgen.benchmarks.gpu_check [--device cuda] [--out runs/gpu-check]
[--scale full|tiny] [--skip-tests] [--carry runs/gpu-carry]`` (from a checkout that was never installed, as on a lent
GPU machine: ``python -m benchmarks.gpu_check``, which installs the wheels ``make gpu-carry`` fetched beforehand into
a temporary folder and reads the STS data carried with them).
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
import traceback
import xml.etree.ElementTree as ElementTree
from pathlib import Path
from typing import Any

from . import checkout

SCHEMA = "dsgen-gpu-check/1"
SCALES: dict[str, dict[str, Any]] = {
    "full": dict(gen_inputs=48, larger_batch=512, reference_cap_s=30.0, greedy_items=6, regression_steps=100,
                 regression_warmup=5, contrastive_steps=4, contrastive_warmup=1, train_batch_cap=None,
                 token_budgets=(2048, 16384), selection_pairs=None, smallest_task=False, gemm_n=8192,
                 tests_timeout_s=180.0),
    "tiny": dict(gen_inputs=2, larger_batch=None, reference_cap_s=1.0, greedy_items=2, regression_steps=4,
                 regression_warmup=1, contrastive_steps=2, contrastive_warmup=1, train_batch_cap=(16, 8),
                 token_budgets=(2048,), selection_pairs=100, smallest_task=True, gemm_n=256, tests_timeout_s=120.0),
}
# Seconds a section needs at the least (full scale): below that it is skipped rather than cut off mid-way.
NEEDS_S = {"tests": 30.0, "generation": 60.0, "training": 40.0, "evaluation": 20.0, "cost_model": 5.0}
TINY_NEEDS_S = {k: 1.0 for k in NEEDS_S}


class Budget:
    """The wall-clock budget of the whole check: what is left, and what the sections still to come need."""

    def __init__(self, limit_s: float, needs: dict[str, float]) -> None:
        self.limit_s, self.needs, self.start = limit_s, needs, time.perf_counter()

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def left(self) -> float:
        return self.limit_s - self.elapsed()

    def spare(self, section: str) -> float:
        """Seconds ``section`` may take and still leave the later sections what they need."""
        names = list(self.needs)
        later = sum(self.needs[n] for n in names[names.index(section) + 1:])
        return self.left() - later


def environment(device: str) -> dict[str, Any]:
    """The device and the software that ran: what a committed result must name."""
    import torch

    from dsgen.artifacts import package_versions

    from .evaluation import cpu_description

    cpu = cpu_description()
    info: dict[str, Any] = {"type": device.split(":")[0], "packages": package_versions(),
                            "torch": torch.__version__, "cuda": torch.version.cuda, "python": platform.python_version(),
                            "float32_matmul_precision": torch.get_float32_matmul_precision(),
                            "cpu": cpu}
    if info["type"] == "cuda":
        props = torch.cuda.get_device_properties(device)
        info.update(name=torch.cuda.get_device_name(device), capability=list(torch.cuda.get_device_capability(device)),
                    memory_gib=round(props.total_memory / 2**30, 1), multiprocessors=props.multi_processor_count,
                    cudnn=torch.backends.cudnn.version(), tf32_matmul=torch.backends.cuda.matmul.allow_tf32,
                    bf16_supported=torch.cuda.is_bf16_supported())
    else:
        info["name"] = f"cpu: {cpu.get('model_name') or platform.processor() or 'unknown'}"
    return info


def gpu_test_files(root: Path) -> list[str]:
    """Test files that mark tests ``gpu`` (``pytest.mark.gpu``, or ``pytestmark = pytest.mark.gpu``)."""
    tests = root / "tests"
    return sorted(str(p.relative_to(root)) for p in tests.rglob("test_*.py") if "mark.gpu" in p.read_text(encoding="utf-8"))


def run_tests(root: Path, timeout_s: float) -> dict[str, Any]:
    """``pytest -m gpu`` on :func:`gpu_test_files`, in a process of its own; outcomes read from its JUnit XML."""
    files = gpu_test_files(root)
    with tempfile.TemporaryDirectory(prefix="dsgen-gpu-tests-") as tmp:
        xml = Path(tmp) / "junit.xml"
        cmd = [sys.executable, "-m", "pytest", "-m", "gpu", "-q", "-p", "no:cacheprovider", "-p", "benchmarks.checkout",
               f"--junitxml={xml}", *files]
        start = time.perf_counter()
        try:
            proc = subprocess.run(cmd, cwd=root, capture_output=True, text=True, timeout=max(timeout_s, 1.0))
            code, output = proc.returncode, proc.stdout + proc.stderr
        except subprocess.TimeoutExpired as exc:
            code = None
            output = f"timed out after {timeout_s:.0f} s\n" + (exc.stdout or b"").decode(errors="replace")[-4000:]
        seconds = time.perf_counter() - start
        cases = []
        if xml.is_file():
            for case in ElementTree.parse(xml).getroot().iter("testcase"):
                outcome, message = "passed", None
                for tag in ("failure", "error", "skipped"):
                    found = case.find(tag)
                    if found is not None:
                        outcome, message = {"failure": "failed"}.get(tag, tag), (found.get("message") or "")[:300]
                        break
                cases.append({"test": f"{case.get('classname')}::{case.get('name')}", "outcome": outcome,
                              "message": message})
    counts = {k: sum(c["outcome"] == k for c in cases) for k in ("passed", "failed", "error", "skipped")}
    return {"command": " ".join(cmd[2:]), "files": files, "returncode": code, "seconds": round(seconds, 1),
            **counts, "ok": code in (0, 5) and not counts["failed"] and not counts["error"], "cases": cases,
            "output_tail": output[-3000:]}


def plans(preset: Any) -> dict[str, Any]:
    """The plans the check reads its settings from: ``dino`` (generation, regression training) and ``gense``
    (contrastive training), under ``preset`` with its first training seed."""
    from dsgen.planning import plan_run

    return {"generation": plan_run("dino", preset, preset.seeds[0]), "regression": plan_run("dino", preset, preset.seeds[0]),
            "contrastive": plan_run("gense", preset, preset.seeds[0])}


def _capped(plan: Any, cap: tuple[int, int] | None) -> Any:
    """At the tiny scale, the trainer's batch (and GradCache chunk) cut to ``cap``."""
    if cap is None:
        return plan
    import copy

    cfg = plan.trainer.config
    over = {"batch_size": min(cfg.batch_size, cap[0])}
    if hasattr(cfg, "mini_batch_size"):
        over["mini_batch_size"] = min(cfg.mini_batch_size, cap[1])
    out = copy.copy(plan)
    out.trainer = type(plan.trainer)(cfg.replace(**over))
    return out


def release(device: str) -> None:
    import gc

    gc.collect()
    if device.startswith("cuda"):
        import torch

        torch.cuda.empty_cache()


def peak_memory(device: str, reset: bool = False) -> float | None:
    if not device.startswith("cuda"):
        return None
    import torch

    if reset:
        torch.cuda.reset_peak_memory_stats(device)
        return None
    return round(torch.cuda.max_memory_allocated(device) / 2**30, 2)


def run_check(device: str = "cuda", scale: str = "full", out: Path = Path("runs/gpu-check"), preset_name: str = "paper",
              data_dir: str | None = None, budget_s: float = 450.0, skip_tests: bool = False, seed: int = 42,
              carried: dict[str, Any] | None = None) -> dict:
    import torch

    from dsgen.artifacts import write_json
    from dsgen.console import console as make_console
    from dsgen.data.inputs import load_inputs
    from dsgen.evaluation.evaluator import StsEvaluator
    from dsgen.models import resolve_device
    from dsgen.presets import load_preset

    from . import gpu_cost, gpu_measure, gpu_models, gpu_report

    from dsgen.data.sts import data_dir as resolve_data_dir

    console = make_console()
    device = resolve_device(device)
    data_dir = str(resolve_data_dir(data_dir))  # no data pack: one line now, not an error in every section
    sizes = SCALES[scale]
    if scale == "tiny":
        # tiny models gain nothing from threads, and on a shared CPU a second thread's spin-waits cost 100-1000x
        torch.set_num_threads(1)
    budget = Budget(budget_s, NEEDS_S if scale == "full" else TINY_NEEDS_S)
    preset = load_preset(preset_name)
    plan = plans(preset)
    gen_cfg = plan["generation"].generation
    result: dict[str, Any] = {"schema": SCHEMA, "scale": scale, "preset": preset.name, "device": environment(device),
                              "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "budget_s": budget_s, "sections": {},
                              "errors": {}, "skipped": {},
                              "checkout_mapped": any(isinstance(f, checkout._CheckoutFinder) for f in sys.meta_path),
                              "carried": carried or {}, "data_dir": data_dir}
    console.print(f"GPU check on {result['device']['name']} ({device}), scale {scale}, preset {preset.name}")

    def section(name: str, fn: Any) -> Any:
        if budget.spare(name) < budget.needs[name] and name != "cost_model":
            result["skipped"][name] = (f"{budget.left():.0f} s left of the {budget_s:.0f} s budget, the section needs "
                                       f"{budget.needs[name]:.0f} s and the later ones theirs")
            console.print(f"[yellow]{name}: skipped[/yellow] ({result['skipped'][name]})")
            return None
        console.print(f"[bold]{name}[/bold] ({budget.left():.0f} s of the budget left)")
        peak_memory(device, reset=True)
        start = time.perf_counter()
        try:
            out = fn()
        except Exception as exc:  # one section's failure is a finding; the others still run
            hint = (" (carry it as a wheel: README, GPU check)" if isinstance(exc, ModuleNotFoundError) else "")
            result["errors"][name] = {"error": f"{type(exc).__name__}: {exc}{hint}"[:2000],
                                      "traceback": traceback.format_exc()[-6000:]}
            console.print(f"[red]{name} failed:[/red] {type(exc).__name__}: {str(exc)[:300]}")
            out = None
        result["sections"][name] = {"seconds": round(time.perf_counter() - start, 1),
                                    "peak_gpu_memory_gib": peak_memory(device)}
        release(device)
        return out

    if skip_tests:
        result["skipped"]["tests"] = "--skip-tests"
    elif not (checkout.ROOT / "tests").is_dir():
        result["skipped"]["tests"] = f"no tests/ folder beside the package ({checkout.ROOT}): run from a checkout"
    else:
        result["tests"] = section("tests", lambda: run_tests(checkout.ROOT, min(sizes["tests_timeout_s"],
                                                                             max(budget.spare("tests"), 1.0))))

    def generation() -> dict[str, Any]:
        sentences = gpu_models.tokenizer_sentences(data_dir, scale)
        start = time.perf_counter()
        built = gpu_models.build_generator(sentences, scale, device, gen_cfg.dtype, seed=0)
        built.info["build_seconds"] = round(time.perf_counter() - start, 1)
        peak = gpu_measure.gemm_peak(device, gen_cfg.dtype, sizes["gemm_n"])
        inputs = load_inputs(preset.inputs, sizes["gen_inputs"], data_dir)
        batches = [gen_cfg.batch_size] + ([sizes["larger_batch"]] if sizes["larger_batch"] else [])
        cap = max(1.0, min(sizes["reference_cap_s"], budget.spare("generation") / 4))
        out = gpu_measure.generation(built, plan["generation"], inputs, batches, seed, cap, sizes["greedy_items"],
                                     device, peak, time_left=lambda: budget.spare("generation"))
        out.update(model=built.info, gemm_peak_tflops={gen_cfg.dtype: round(peak, 2)},
                   generator_in_preset=gen_cfg.generator)
        del built
        return out

    result["generation"] = section("generation", generation)

    encoder: dict[str, Any] = {}

    def training() -> dict[str, Any]:
        sentences = gpu_models.tokenizer_sentences(data_dir, scale)
        folder, info = gpu_models.build_encoder_folder(sentences, scale)
        encoder.update(folder=str(folder), info=info)
        pairs = gpu_measure.sts_pairs(data_dir)
        out: dict[str, Any] = {"model": info, "encoder_in_preset": plan["regression"].encoder}
        for trainer in ("regression", "contrastive"):
            if trainer == "contrastive" and budget.spare("training") < budget.needs["training"] / 2:
                result["skipped"]["training.contrastive"] = f"{budget.left():.0f} s left of the {budget_s:.0f} s budget"
                continue
            tplan = _capped(plan[trainer], sizes["train_batch_cap"])
            try:
                out[trainer] = gpu_measure.training(str(folder), tplan, sizes[f"{trainer}_steps"],
                                                    sizes[f"{trainer}_warmup"], pairs, sentences, seed, device)
            except Exception as exc:
                result["errors"][f"training.{trainer}"] = {"error": f"{type(exc).__name__}: {exc}"[:2000],
                                                           "traceback": traceback.format_exc()[-6000:]}
                console.print(f"[red]training {trainer} failed:[/red] {type(exc).__name__}: {str(exc)[:300]}")
            release(device)
        return out

    result["training"] = section("training", training)

    def evaluation() -> dict[str, Any]:
        if not encoder:
            folder, info = gpu_models.build_encoder_folder(gpu_models.tokenizer_sentences(data_dir, scale), scale)
            encoder.update(folder=str(folder), info=info)
        tasks = list(preset.tasks)
        if sizes["smallest_task"]:
            counts = {t: len(p) for t, p in StsEvaluator(tasks, data_dir).pairs.items()}
            tasks = [min(counts, key=counts.get)]
        dtype = plan["regression"].evaluation["dtype"]
        out = gpu_measure.evaluation(encoder["folder"], tasks, data_dir, dtype, sizes["token_budgets"], device,
                                     sizes["selection_pairs"])
        out["model"] = encoder["info"]
        return out

    result["evaluation"] = section("evaluation", evaluation)
    if encoder:
        import shutil

        shutil.rmtree(encoder["folder"], ignore_errors=True)

    def cost_model() -> dict[str, Any]:
        rates = gpu_report.rates(result, plan)
        test_sentences = len(StsEvaluator(list(preset.tasks), data_dir).distinct_sentences())
        rows = gpu_cost.cost_model(preset, rates, data_dir, test_sentences)
        return {"rates": vars(rates), "test_sentences_per_run": test_sentences, "rows": rows,
                "runs_and_datasets": list(gpu_cost.runs_and_datasets(preset)),
                "assumptions": gpu_report.ASSUMPTIONS}

    result["cost_model"] = section("cost_model", cost_model)
    result["elapsed_s"] = round(budget.elapsed(), 1)
    result["within_budget"] = budget.elapsed() <= budget_s
    result["torch_threads"] = torch.get_num_threads()
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "gpu-check.json", result)
    (out / "gpu-check.md").write_text(gpu_report.markdown(result), encoding="utf-8")
    gpu_report.print_summary(console, result)
    console.print(f"wrote {out / 'gpu-check.json'} and {out / 'gpu-check.md'} ({result['elapsed_s']} s)")
    return result


def use_carried(carry: Path, data_dir: str | None) -> tuple[dict[str, Any], str | None]:
    """What ``make gpu-carry`` fetched for a bare GPU machine, put to use: the wheels in ``carry/wheels`` installed
    (``pip install --no-index --no-deps --target``) into a temporary folder put first on this process's path and on
    ``PYTHONPATH`` (for the tests' process), and ``carry/sts`` as the STS data when none is named. Returns what was
    used and the data folder."""
    from importlib.metadata import PackageNotFoundError, version

    from dsgen.errors import DsgenError

    def missing(wheel: Path) -> bool:
        try:
            version(wheel.name.split("-")[0])
            return False
        except PackageNotFoundError:
            return True

    used: dict[str, Any] = {"folder": str(carry)}
    wheels = [w for w in sorted((carry / "wheels").glob("*.whl")) if missing(w)] if carry.is_dir() else []
    if wheels:  # only what this environment lacks
        site = Path(tempfile.mkdtemp(prefix="dsgen-gpu-site-"))
        proc = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile",
                               "--no-cache-dir", "--target", str(site), *map(str, wheels)], capture_output=True, text=True)
        if proc.returncode:
            raise DsgenError(f"installing the wheels carried in {carry / 'wheels'} failed: "
                             f"{(proc.stderr.strip().splitlines() or ['?'])[-1]}")
        sys.path.insert(0, str(site))
        os.environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(site), os.environ.get("PYTHONPATH")) if p)
        used.update(wheels=[w.name for w in wheels], site=str(site))
    if not data_dir and not os.environ.get("DSGEN_DATA_DIR") and (carry / "sts").is_dir():
        data_dir = str((carry / "sts").resolve())
        used["data"] = data_dir
    return used, data_dir


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m dsgen.benchmarks.gpu_check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--device", default="cuda", help="cuda (default), cuda:N or cpu")
    parser.add_argument("--scale", choices=sorted(SCALES), default="full", help="full (the papers' architectures) or tiny")
    parser.add_argument("--tiny", action="store_true", help="the same as --scale tiny")
    parser.add_argument("--out", type=Path, default=Path("runs/gpu-check"), help="folder for gpu-check.json and .md")
    parser.add_argument("--preset", default="paper", help="the preset whose settings and sizes are read (default paper)")
    parser.add_argument("--data-dir", default=None, help="STS data folder (default: $DSGEN_DATA_DIR)")
    parser.add_argument("--budget-s", type=float, default=450.0, help="wall-clock budget of the whole check (seconds)")
    parser.add_argument("--skip-tests", action="store_true", help="do not run pytest -m gpu")
    parser.add_argument("--commit", default=None,
                        help="the checkout's commit, recorded when the copy that runs has no .git (a lent machine)")
    parser.add_argument("--carry", type=Path, default=checkout.ROOT / "runs" / "gpu-carry",
                        help="what `make gpu-carry` fetched: wheels/ to install, sts/ (default runs/gpu-carry)")
    parser.add_argument("--seed", type=int, default=42)
    args = parser.parse_args(argv)
    for var in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "HF_DATASETS_OFFLINE"):
        os.environ.setdefault(var, "1")  # nothing is downloaded; a lent GPU machine reaches nothing
    for var in ("HF_HUB_DISABLE_PROGRESS_BARS", "TQDM_DISABLE"):
        os.environ.setdefault(var, "1")  # the libraries' per-load progress bars; the sections say what runs
    from dsgen.errors import DsgenError

    carried: dict[str, Any] = {}
    try:
        carried, data_dir = use_carried(args.carry, args.data_dir)
        result = run_check(args.device, "tiny" if args.tiny else args.scale, args.out, args.preset, data_dir,
                           args.budget_s, args.skip_tests, args.seed, {**carried, "commit_given": args.commit})
    except DsgenError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    finally:
        if carried.get("site"):
            import shutil

            shutil.rmtree(carried["site"], ignore_errors=True)  # the wheels installed for this run only
    tests = result.get("tests") or {}
    return 1 if result["errors"] or (tests and not tests.get("ok")) else 0


if __name__ == "__main__":
    sys.exit(main())
