"""The GPU check's report: the rates the cost model reads from a check's result, and the result as Markdown and as
a short console summary. Everything here is read from the result dict (``gpu-check.json``), never from memory."""

from __future__ import annotations

from typing import Any

from .gpu_cost import LOOPS, Rates, hours, rows_per_sample

ASSUMPTIONS = [
    "Models are randomly initialised with the papers' architectures (GPT2-XL generator, roberta-base encoder) and "
    "tokenizers built here (byte-level BPE trained on the STS sentences, sized so that a sentence is as many tokens "
    "as under a general 50 k BPE): tokenisation differs from GPT-2's and RoBERTa's, and token counts, not the "
    "vocabulary, drive the cost.",
    "A random generator never closes its quotation mark: every sample runs max_new_tokens, so the decoder's time per "
    "output is an upper bound (a trained GPT2-XL stops at the quote); the reference loop always decodes "
    "max_new_tokens (DINO's code), so its figure is exact.",
    "transformers' generate samples without self-debiasing (no counter rows): a bound on what a library loop gives, "
    "not a way to make DINO's data.",
    "Generation time is scaled from the task timed to another by rows per sample (1 + counter labels) and "
    "max_new_tokens; prompt lengths and the sampler's cost without top-k are not scaled.",
    "Training examples are upper bounds: every sample accepted and every cap of DINO's postprocessing filled.",
    "T5-base (GenSE) and bert-base-uncased (MultiCSR) are timed as roberta-base (12 layers of 768 each); a trainer's "
    "time per example is taken to be the same at other batch sizes (the GradCache chunk bounds the work per pass).",
    "Stages named under 'not timed' (API generation, other generator models, labellers, reweighters, a trained guide)"
    " are left out of a row's total, which is then a lower bound (marked >=).",
]


def rates(result: dict[str, Any], plan: dict[str, Any]) -> Rates:
    """The cost model's rates from a check's result; a section that did not run leaves its rates out."""
    from dsgen.taskspec import load_task_spec

    gen_cfg = plan["generation"].generation
    batch = str(gen_cfg.batch_size)
    per_output: dict[str, float] = {}
    gen = result.get("generation")
    if gen:
        per_output = {"core": gen["core"][batch]["seconds_per_output"],
                      "reference": gen["reference"]["seconds_per_output"],
                      "hf_generate": gen["hf_generate"][batch]["seconds_per_output"]}
    per_example = {t: s["seconds_per_example"] for t, s in (result.get("training") or {}).items()
                   if isinstance(s, dict) and "seconds_per_example" in s}
    ev = result.get("evaluation") or {}
    test = 1.0 / ev["later_run"]["sentences_per_s"] if ev.get("later_run") else None
    select = 1.0 / ev["selection"]["sentences_per_s"] if ev.get("selection") else None
    return Rates(generator=gen_cfg.generator, generator_dtype=gen_cfg.dtype, task=gen_cfg.task,
                 rows_per_sample=rows_per_sample(load_task_spec(gen_cfg.task), gen_cfg.counter_labels),
                 max_new_tokens=gen_cfg.sampling.max_new_tokens, seconds_per_output=per_output,
                 encoder=plan["regression"].encoder, seconds_per_example=per_example, seconds_per_test_sentence=test,
                 seconds_per_selection_sentence=select)


def _table(header: list[str], rows: list[list[Any]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "|".join("---" for _ in header) + "|"]
    out += ["| " + " | ".join("" if v is None else str(v) for v in row) + " |" for row in rows]
    return out + [""]


def _num(x: Any, digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _header(result: dict[str, Any]) -> list[str]:
    dev = result["device"]
    pk = dev.get("packages", {})
    commit = pk.get("dsgen_git_commit") or result.get("carried", {}).get("commit_given") or "unknown"
    lines = [f"# GPU check: {dev['name']}", ""]
    if result["scale"] == "tiny":
        lines += ["**Tiny scale**: every model and size shrunk so that the check runs in seconds; the figures "
                  "describe tiny random models, not the papers' architectures, and predict nothing.", ""]
    lines += [f"- device: {dev['name']}"
              + (f" (compute capability {'.'.join(map(str, dev['capability']))}, {dev['memory_gib']} GiB, "
                 f"{dev['multiprocessors']} SMs)" if dev["type"] == "cuda" else f", {dev['cpu']['threads']} threads"),
              f"- torch {dev['torch']}, CUDA {dev.get('cuda')}, cuDNN {dev.get('cudnn', '-')}, transformers "
              f"{pk.get('transformers', '?')}, sentence-transformers {pk.get('sentence-transformers', '?')}, Python "
              f"{dev['python']}; float32 matmul precision `{dev['float32_matmul_precision']}`"
              + (f", TF32 {'on' if dev.get('tf32_matmul') else 'off'}" if dev["type"] == "cuda" else ""),
              f"- dsgen {pk.get('dsgen', '?')}, commit {commit}"
              + (" (with uncommitted changes)" if pk.get("dsgen_git_dirty") else ""),
              f"- preset `{result['preset']}`, scale `{result['scale']}`, started {result['started']}; the whole check "
              f"took {result['elapsed_s']} s of a {result['budget_s']:.0f} s budget", ""]
    return lines


def _tests(result: dict[str, Any]) -> list[str]:
    lines = ["## Tests (`pytest -m gpu`)", ""]
    t = result.get("tests")
    if not t:
        return lines + [f"Not run: {result['skipped'].get('tests') or result['errors'].get('tests', {}).get('error')}", ""]
    lines += [f"`{t['command']}`: {t['passed']} passed, {t['failed']} failed, {t['error']} errors, {t['skipped']} "
              f"skipped (exit code {t['returncode']}, {t['seconds']} s).", ""]
    return lines + _table(["test", "outcome", "message"], [[c["test"], c["outcome"], c["message"]] for c in t["cases"]])


def _generation(result: dict[str, Any]) -> list[str]:
    g = result.get("generation")
    lines = ["## Generation", ""]
    if not g:
        return lines + ["Not measured (see *Errors and skipped sections*).", ""]
    m, s = g["model"], g["sampling"]
    lines += [f"{m['architecture']} architecture, random weights, {m['parameters']:,} parameters, {m['dtype']}, built "
              f"in {m['build_seconds']} s ({m['tokenizer']}); the preset's generator is `{g['generator_in_preset']}`. "
              f"Task `{g['task']}`: {g['inputs']} inputs x labels = {g['items']} items x {g['samples_per_item']} "
              f"samples = {g['decoded_outputs']} outputs; sampling from the preset: top-k {s['top_k']}, top-p "
              f"{s['top_p']}, max_new_tokens {s['max_new_tokens']}, lambda {s['decay_constant']}, epsilon "
              f"{s['epsilon']}, temperature {s['temperature']}; the preset's batch {g['preset_batch_size']} rows.", ""]
    rows = []
    ref = g["reference"]
    rate = max(ref["decoded_outputs_per_s"], 1e-9)
    for b, c in g["core"].items():
        rows.append([f"dsgen decoder, batch {b}", c["decoded_outputs"], c["seconds"], c["decoded_outputs_per_s"],
                     _num(c["seconds_per_output"] * 1000, 2), f"{c['decoded_outputs_per_s'] / rate:.1f}x"])
    rows.append([f"DINO reference loop ({ref['items']} items)", ref["decoded_outputs"], ref["seconds"],
                 ref["decoded_outputs_per_s"], _num(ref["seconds_per_output"] * 1000, 2), "1x"])
    for b, h in g["hf_generate"].items():
        rows.append([f"transformers generate, {h['rows_per_call']} rows (no debiasing)", h["decoded_outputs"],
                     h["seconds"], h["decoded_outputs_per_s"], _num(h["seconds_per_output"] * 1000, 2),
                     f"{h['decoded_outputs_per_s'] / rate:.1f}x"])
    lines += _table(["loop", "outputs", "seconds", "outputs/s", "ms/output", "x reference"], rows)
    notes = []
    for b, c in g["core"].items():
        share = g.get("core_share_of_gemm_peak", {}).get(b)
        notes.append(f"decoder at batch {b}: {c['row_tokens_per_s']:,} row-tokens/s = {c['row_tflops']} TFLOP/s"
                     + (f" ({share:.0%} of this device's {list(g['gemm_peak_tflops'].values())[0]} TFLOP/s "
                        f"{m['dtype']} GEMM peak, measured now)" if share is not None else "")
                     + f", {c['row_tokens_per_kept_output'] if c.get('outputs') else c['row_tokens']:,} row-tokens "
                     + ("per kept output" if c.get("outputs") else "in all") + f", {c['steps']} steps")
    if "bare_forward_row_tokens_per_s" in g:
        notes.append(f"bare one-token forward of the model at the fastest batch: {g['bare_forward_row_tokens_per_s']:,} "
                     f"row-tokens/s; the decoder runs at {g['core_share_of_bare_forward']:.0%} of it")
    if "greedy_agreement_with_reference" in g:
        notes.append("greedy (top-k 1) outputs identical to the reference loop's, by batch: "
                     + ", ".join(f"{b}: {a:.0%}" for b, a in g["greedy_agreement_with_reference"].items())
                     + " (CPU kernels make this 100%; on a GPU a batch may round differently, so a lower figure is a "
                       "finding about the device, not an error)")
    return lines + [f"- {n}" for n in notes] + [""]


def _training_evaluation(result: dict[str, Any]) -> list[str]:
    lines = ["## Training", ""]
    t = result.get("training")
    if not t:
        lines += ["Not measured (see *Errors and skipped sections*).", ""]
    else:
        m = t["model"]
        lines += [f"{m['architecture']} architecture, random weights, {m['parameters']:,} parameters, "
                  f"{m['pooling']}; {m['tokenizer']}; the preset's encoder is `{t['encoder_in_preset']}`. Each trainer "
                  "through its own `train` (sentence-transformers' trainer underneath), model selection off (its "
                  "evaluations are costed from the evaluation figures), after an untimed warm-up.", ""]
        rows = [[f"{k} (`{s['method']}`'s settings)", ", ".join(f"{a} {b}" for a, b in s["settings"].items()),
                 f"{s['examples']} {s['unit']}", s["optimizer_steps"], s["seconds"], f"{s['examples_per_s']:,}",
                 s["seconds_per_step"], s["tokens_per_sentence"]]
                for k, s in t.items() if isinstance(s, dict) and "examples_per_s" in s]
        lines += _table(["trainer", "settings", "examples", "steps", "seconds", "examples/s", "s/step",
                         "tokens/sentence"], rows)
    lines += ["## Evaluation", ""]
    e = result.get("evaluation")
    if not e:
        return lines + ["Not measured (see *Errors and skipped sections*).", ""]
    lines += [f"Tasks {', '.join(e['tasks'])}: {e['pairs']:,} pairs, {e['distinct_sentences']:,} distinct sentences "
              f"({e['tokens_per_sentence']} tokens each on average), {e['dtype']}.", ""]
    rows = [["STS evaluator, a comparison's first run (tokenising)", e["distinct_sentences"], e["first_run"]["seconds"],
             f"{e['first_run']['sentences_per_s']:,}"],
            [f"STS evaluator, later runs (token cache warm), {e['token_budget']} tokens a batch", e["distinct_sentences"],
             e["later_run"]["seconds"], f"{e['later_run']['sentences_per_s']:,}"]]
    rows += [[f"STS evaluator, later run, {b} tokens a batch", e["distinct_sentences"], "", f"{r:,}"]
             for b, r in e["by_token_budget"].items() if b != str(e["token_budget"])]
    sel = e["selection"]
    rows.append([f"model selection ({sel['evaluator']}), STSb dev", sel["sentences"], sel["seconds"],
                 f"{sel['sentences_per_s']:,}"])
    return lines + _table(["evaluator", "sentences", "seconds", "sentences/s"], rows)


def _cost(result: dict[str, Any]) -> list[str]:
    c = result.get("cost_model")
    lines = [f"## Cost model: preset `{result['preset']}` on this device", ""]
    if not c:
        return lines + ["Not computed (see *Errors and skipped sections*).", ""]
    runs, datasets = c["runs_and_datasets"]
    lines += [f"Predicted wall time per method: {datasets} dataset(s) generated, {runs} training run(s) each trained, "
              f"selected and evaluated on {c['test_sentences_per_run']:,} test sentences. Generation with dsgen's "
              "decoder (the `total` column), DINO's reference loop and `transformers`' `generate` side by side. "
              "Assumptions:", ""]
    lines += [f"- {a}" for a in c["assumptions"]] + [""]
    rows = []
    for r in c["rows"]:
        s, ge = r["seconds"], r["seconds"]["generation"]
        mark = "" if r["complete"] else ">= "
        rows.append([f"`{r['method']}`", r["generator_model"] or "-", f"{r['decoded_outputs_per_dataset']:,}",
                     hours(ge["core"]), hours(ge["reference"]), hours(ge["hf_generate"]),
                     f"{r['train_examples_per_run_at_most']:,}", f"{r['steps_per_run']:,}", hours(s["training_per_run"]),
                     f"{r['selection_evaluations_per_run']} x {r['selection_sentences_per_evaluation']:,}",
                     hours(s["selection_per_run"]), hours(s["evaluation_per_run"]),
                     mark + hours(s["total"]["core"]), mark + hours(s["total"]["reference"]),
                     "; ".join(r["not_modelled"] + r["notes"])])
    lines += _table(["method", "generator", "outputs", "generation (decoder)", "(reference)", "(generate)",
                     "train examples/run (at most)", "steps/run", "training/run", "selection evals x sentences",
                     "selection/run", "evaluation/run", "total (decoder)", "total (reference)", "not timed; notes"], rows)
    return lines


def markdown(result: dict[str, Any]) -> str:
    lines = _header(result) + _tests(result) + _generation(result) + _training_evaluation(result) + _cost(result)
    lines += ["## Errors and skipped sections", ""]
    if not result["errors"] and not result["skipped"]:
        lines.append("None: every section ran.")
    for name, why in result["skipped"].items():
        lines.append(f"- `{name}` skipped: {why}")
    for name, err in result["errors"].items():
        lines += [f"- `{name}` failed: {err['error']}", "", "```", err["traceback"].rstrip(), "```"]
    lines.append("")
    lines += ["Section times (s): " + ", ".join(f"{k} {v['seconds']}" + (f" (peak {v['peak_gpu_memory_gib']} GiB)"
                                                                         if v.get("peak_gpu_memory_gib") else "")
                                                for k, v in result["sections"].items()), ""]
    return "\n".join(lines)


def print_summary(console: Any, result: dict[str, Any]) -> None:
    """The cost table and the section outcomes, on the console."""
    from rich.table import Table

    c = result.get("cost_model")
    if c:
        table = Table(title=f"preset {result['preset']} on {result['device']['name']} (predicted; {result['scale']} scale)")
        for col in ("method", "generation", "training/run", "selection/run", "evaluation/run", "total", "not timed"):
            table.add_column(col, justify="left" if col in ("method", "not timed") else "right")
        for r in c["rows"]:
            s = r["seconds"]
            table.add_row(r["method"], hours(s["generation"]["core"]), hours(s["training_per_run"]),
                          hours(s["selection_per_run"]), hours(s["evaluation_per_run"]),
                          ("" if r["complete"] else ">= ") + hours(s["total"]["core"]), "; ".join(r["not_modelled"]))
        console.print(table)
    t = result.get("tests")
    if t:
        console.print(f"pytest -m gpu: {t['passed']} passed, {t['failed']} failed, {t['error']} errors, "
                      f"{t['skipped']} skipped")
    for name, err in result["errors"].items():
        console.print(f"[red]{name} failed:[/red] {err['error'][:200]}")
    for name, why in result["skipped"].items():
        console.print(f"[yellow]{name} skipped:[/yellow] {why}")


__all__ = ["ASSUMPTIONS", "LOOPS", "markdown", "print_summary", "rates"]
