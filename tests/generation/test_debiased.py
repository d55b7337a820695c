"""DINO's generator on the core: determinism across processes, resume after a kill from outside,
the dataset key, and sidecars."""

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
from dsgen.generation.sampling import SamplingConfig

INPUTS = [f"Sentence number {i} is short." for i in range(7)]


def cfg(**kw):
    base = dict(generator="tiny", sampling=SamplingConfig(max_new_tokens=10), chunk_inputs=2, batch_size=24, seed=5,
                per_label=2)
    base.update(kw)
    return GenerationConfig(**base)


def test_generate_writes_pairs_and_sidecar_deterministically(tiny_lm, tmp_path):
    a = DebiasedGenerator(cfg(), lm=tiny_lm).generate(INPUTS, tmp_path / "a.jsonl", progress=False)
    b = DebiasedGenerator(cfg(), lm=tiny_lm).generate(INPUTS, tmp_path / "b.jsonl", progress=False)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    meta = json.loads((tmp_path / "a.jsonl.meta.json").read_text())
    assert meta["config"]["seed"] == 5 and meta["n_pairs"] == len(a) == len(b) and meta["generator_name"] == "debiased"
    assert {"torch", "transformers"} <= set(meta["versions"])
    assert meta["stats"]["sampled"] == len(INPUTS) * 3 * 2  # one draw of per_label outputs, no retry
    assert [c["chunk"] for c in meta["backend"]["chunks"]] == list(range(4)) and meta["backend"]["backend"] == "local"
    assert not (tmp_path / "a.jsonl.partial").exists()
    for p in a:
        assert p.text_a in INPUTS and p.label in (1.0, 0.5, 0.0)
    assert len({p.key() for p in a}) == len(a)  # duplicates removed


def test_x1_from_scratch_uses_top_p_only(tiny_lm, tmp_path):
    gen = DebiasedGenerator(cfg(task="sts-x1", entries_per_label=3), lm=tiny_lm)
    spec = gen.spec(with_inputs=False)
    assert gen.sampling(spec).top_k == 0 and gen.sampling(spec).top_p == 0.9
    pairs = gen.generate(None, tmp_path / "x1.jsonl", progress=False)
    assert all(p.text_b is None and p.label in (1.0, 0.5, 0.0) for p in pairs)


def test_decay_0_decodes_no_counter_rows(tiny_lm, tmp_path):
    """At a decay constant of 0 nothing is debiased, so the run decodes no counter prompts: the spec it uses (and
    its dataset's key) has no counter labels, it forwards fewer rows, and it writes what --no-counter-labels writes."""
    zero = SamplingConfig(max_new_tokens=10, decay_constant=0.0)
    gen = DebiasedGenerator(cfg(sampling=zero), lm=tiny_lm)
    assert not any(gen.spec(with_inputs=True).counter_labels.values())
    assert any(DebiasedGenerator(cfg(), lm=tiny_lm).spec(with_inputs=True).counter_labels.values())
    gen.generate(INPUTS, tmp_path / "zero.jsonl", progress=False)
    DebiasedGenerator(cfg(sampling=zero, counter_labels=False), lm=tiny_lm).generate(INPUTS, tmp_path / "none.jsonl",
                                                                                      progress=False)
    DebiasedGenerator(cfg(), lm=tiny_lm).generate(INPUTS, tmp_path / "debiased.jsonl", progress=False)
    assert (tmp_path / "zero.jsonl").read_text() == (tmp_path / "none.jsonl").read_text()
    rows = {name: sum(c["forward_rows"] for c in json.loads((tmp_path / f"{name}.jsonl.meta.json").read_text())
                      ["backend"]["chunks"]) for name in ("zero", "debiased")}
    assert rows["zero"] < rows["debiased"]


def test_fresh_discards_finished_chunks_of_an_earlier_run(tiny_lm, tmp_path):
    out = tmp_path / "p.jsonl"
    gen = DebiasedGenerator(cfg(), lm=tiny_lm)
    gen.generate(INPUTS, tmp_path / "ref.jsonl", progress=False)
    partial = tmp_path / "p.jsonl.partial"
    partial.mkdir()
    (partial / "state.json").write_text(json.dumps({"key": gen.dataset_key(INPUTS), "chunks": 4}))
    (partial / "chunk-00000.jsonl").write_text(json.dumps({"x1": INPUTS[0], "label": "1", "text": "planted", "accepted": True,
                                                            "attempt": 1, "n_tokens": 1}) + "\n")
    gen.generate(INPUTS, out, progress=False, resume=False)
    assert out.read_text() == (tmp_path / "ref.jsonl").read_text() and "planted" not in out.read_text()
    assert json.loads((tmp_path / "p.jsonl.meta.json").read_text())["stats"]["resumed_chunks"] == 0


def cli(model_dir, inputs, out, *extra, env_extra=None, popen=False):
    env = {**os.environ, **(env_extra or {})}
    cmd = [sys.executable, "-m", "dsgen.cli", "generate", "--task", "sts-x2", "--inputs", str(inputs),
           "--generator", str(model_dir), "--seed", "3", "--out", str(out), "--quiet", "--device", "cpu", *extra]
    if popen:  # output to a file: a pipe nobody reads until the end blocks a chatty process (a full buffer)
        log = open(Path(str(out) + ".log"), "w+")
        return subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True, env=env)
    from tests.cli_process import run_dsgen  # a new interpreter where env_extra asks for one (PYTHONHASHSEED)

    return run_dsgen(cmd[3:], env=env_extra, timeout=600)


def test_same_file_in_processes_with_different_hash_seeds(tiny_lm_dir, tmp_path):
    """Default chunk size (32 inputs), so a chunk has 96 distinct prompts: three prefill batches."""
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(f"Input number {i} {'is ' * (i % 5)}here." for i in range(33)) + "\n")
    outs = []
    for hash_seed in ("1", "2"):
        out = tmp_path / f"h{hash_seed}.jsonl"
        proc = cli(tiny_lm_dir, inputs, out, "--max-new-tokens", "8", "--per-label", "2",
                   env_extra={"PYTHONHASHSEED": hash_seed})
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] and len(outs[0]) > 0
    chunks = json.loads((tmp_path / "h1.jsonl.meta.json").read_text())["backend"]["chunks"]
    assert chunks[0]["prefill_suffix_batches"] == 3  # 96 prompts in batches of 32 after their shared heads
    assert chunks[0]["prefill_batches"] > 3  # and the heads themselves


def _meta(out):
    return json.loads(out.with_name(out.name + ".meta.json").read_text())


def _chunk_work(meta):
    """Per chunk: what the decoder did (rows forwarded, steps, forks...), without times and workers."""
    return {c["chunk"]: {k: v for k, v in c.items() if k not in ("seconds", "worker")} for c in meta["backend"]["chunks"]}


def test_resume_after_a_kill_at_a_random_moment_gives_the_same_file(tiny_lm_dir, tmp_path):
    """8 chunks of 12 inputs; the test kills the process from outside at a random moment after chunk k
    has landed, within half a chunk's measured duration, so that chunk k+1 is unfinished and at least
    3 chunks remain on any machine (slow chunks by their size, no sleep in the code under test). Every
    moment a kill can land is judged: no output and a resumable partial folder, or an output equal
    to the uninterrupted run's. The resumed run must give the same file, the same statistics
    (rejected outputs by reason included) and the same work per chunk."""
    seed = int(os.environ.get("DSGEN_TEST_SEED", random.randrange(2**32)))
    print(f"random seed of this test: {seed} (DSGEN_TEST_SEED={seed} repeats it)")
    rng = random.Random(seed)
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(f"Sentence {i} says {'more ' * (i % 3)}things." for i in range(96)) + "\n")
    common = ("--chunk-inputs", "12", "--batch-size", "16", "--max-new-tokens", "20", "--per-label", "2")
    full = tmp_path / "full.jsonl"
    assert cli(tiny_lm_dir, inputs, full, *common).returncode == 0
    n_chunks = 8
    for attempt in range(3):
        out = tmp_path / f"resumed{attempt}.jsonl"
        partial = tmp_path / f"resumed{attempt}.jsonl.partial"
        k = rng.randint(1, n_chunks - 4)
        proc = cli(tiny_lm_dir, inputs, out, *common, popen=True)
        landed: dict[int, float] = {}
        deadline = time.time() + 300
        while proc.poll() is None and k not in landed and time.time() < deadline:
            n = len(list(partial.glob("chunk-*.jsonl")))
            for i in range(1, n + 1):
                landed.setdefault(i, time.perf_counter())
            time.sleep(0.002)
        if k in landed and proc.poll() is None:
            duration = landed[k] - landed.get(k - 1, landed[k]) if k > 1 else 0.05
            time.sleep(rng.uniform(0.0, 0.5) * duration)
            proc.send_signal(signal.SIGKILL)
        proc.wait()
        if out.exists():  # the kill came after the final rename: a complete, correct file
            assert out.read_bytes() == full.read_bytes()
            continue
        assert proc.returncode == -signal.SIGKILL, Path(str(out) + ".log").read_text()
        done = len(list(partial.glob("chunk-*.jsonl")))
        assert k <= done <= n_chunks  # all chunks landed, killed before the final file: resumes to it
        break
    else:
        pytest.fail(f"the run always finished before the kill (seed {seed}); make the chunks larger")
    resumed = cli(tiny_lm_dir, inputs, out, *common)
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_bytes() == full.read_bytes()
    before, after = _meta(full), _meta(out)
    assert after["stats"]["resumed_chunks"] == done and before["stats"]["resumed_chunks"] == 0
    same = lambda stats: {k: v for k, v in stats.items() if k != "resumed_chunks"}  # noqa: E731
    assert same(after["stats"]) == same(before["stats"])
    assert sum(v for k, v in after["stats"].items() if k.startswith("rejected_")) == (
        after["stats"]["sampled"] - after["stats"]["accepted"])
    work = _chunk_work(after)
    assert sorted(work) == list(range(done, n_chunks))
    assert work == {c: w for c, w in _chunk_work(before).items() if c >= done}


@pytest.mark.slow
def test_real_smollm2_two_inputs(tmp_path):
    """Integration: the embedded SmolLM2-135M-Instruct generates sensible STS pairs."""
    inputs = ["A man is playing a guitar.", "A woman is slicing an onion."]
    gen = DebiasedGenerator(GenerationConfig(generator="smollm2-135m", device="cpu", seed=1))
    pairs = gen.generate(inputs, tmp_path / "real.jsonl", progress=False)
    assert gen.lm.describe()["architecture"] == "llama"
    assert len(pairs) >= 6
    assert {p.label for p in pairs} <= {1.0, 0.5, 0.0}
    assert all(p.text_b and '"' not in p.text_b and "\n" not in p.text_b for p in pairs)


@pytest.mark.slow
def test_real_smollm2_chat_prompted(tmp_path):
    """Integration: the instruction-tuned SmolLM2 through its own chat template (sts-x2-chat): DINO's
    instructions as user turns, the assistant's answer opened with `Sentence 2: "`, self-debiased."""
    inputs = ["A man is playing a guitar.", "A woman is slicing an onion."]
    gen = DebiasedGenerator(GenerationConfig(task="sts-x2-chat", generator="smollm2-135m", device="cpu", seed=1,
                                             per_label=2))
    spec = gen.spec(with_inputs=True)
    (chunk,) = gen.chunks(spec, inputs)
    prompt = chunk.items[0].request.prompt
    assert "<|im_start|>user\nTask: Write two sentences" in prompt and prompt.endswith('<|im_start|>assistant\nSentence 2: "')
    pairs = gen.generate(inputs, tmp_path / "chat.jsonl", progress=False)
    assert pairs and all(p.text_b and '"' not in p.text_b and "\n" not in p.text_b for p in pairs)
    assert {p.label for p in pairs} <= {0.0, 0.5, 1.0}
    meta = json.loads((tmp_path / "chat.jsonl.meta.json").read_text())
    assert meta["task_spec"]["chat"] is True and meta["config"]["sampling"]["decay_constant"] == 100.0


def test_a_structured_spec_gives_one_pair_per_field_from_one_output(tiny_lm, tmp_path):
    """Sim-GPT's numbered answer through the debiased core: one call, a line per field, ended by a blank
    line; the generator makes (x1, similar, entailment) and (x1, dissimilar, contradiction)."""
    from tests.generation.test_decoding import Script, ids

    spec = {"task_name": "numbered", "output": {"format": "numbered", "fields": ["similar", "dissimilar"],
                                                "pairs": {"similar": "entailment", "dissimilar": "contradiction"}},
            "labels": {"pair": {"instruction": "Input: <X1>\nOutput:\n1. ", "counter_labels": []}}}
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(spec))
    tok = tiny_lm.tokenizer
    script = [ids(tok, c) for c in "ab\n2. cd\n\n"]
    gen = DebiasedGenerator(GenerationConfig.from_dict({"task": str(path), "generator": "tiny", "device": "cpu",
                                                        "per_label": 1, "sampling": {"max_new_tokens": 20}}),
                            lm=tiny_lm)
    with Script(tiny_lm, lambda call: script[min(call, len(script) - 1)]):
        pairs = gen.generate(["A dog runs."], tmp_path / "out.jsonl", progress=False)
    assert [(p.text_a, p.text_b, p.label) for p in pairs] == [("A dog runs.", "ab", "entailment"),
                                                              ("A dog runs.", "cd", "contradiction")]
    meta = json.loads((tmp_path / "out.jsonl.meta.json").read_text())
    assert meta["stats"]["accepted"] == 1 and meta["task_spec"]["output"]["format"] == "numbered"
