import json
import os
import subprocess
import sys

import pytest

from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
from dsgen.generation.decoding import SamplingConfig

INPUTS = [f"Sentence number {i} is short." for i in range(7)]


def cfg(**kw):
    base = dict(generator="tiny", sampling=SamplingConfig(max_new_tokens=10), chunk_inputs=2, batch_size=24, seed=5)
    base.update(kw)
    return GenerationConfig(**base)


def test_generate_writes_pairs_and_sidecar_deterministically(tiny_lm, tmp_path):
    a = DebiasedGenerator(cfg(), lm=tiny_lm).generate(INPUTS, tmp_path / "a.jsonl", progress=False)
    b = DebiasedGenerator(cfg(), lm=tiny_lm).generate(INPUTS, tmp_path / "b.jsonl", progress=False)
    assert (tmp_path / "a.jsonl").read_text() == (tmp_path / "b.jsonl").read_text()
    meta = json.loads((tmp_path / "a.jsonl.meta.json").read_text())
    assert meta["config"]["seed"] == 5 and meta["n_pairs"] == len(a) == len(b)
    assert {"torch", "transformers"} <= set(meta["versions"])
    assert meta["stats"]["sampled"] >= len(INPUTS) * 3 * 2
    assert not (tmp_path / "a.jsonl.partial").exists()
    for p in a:
        assert p.text_a in INPUTS and p.label in (1.0, 0.5, 0.0)
    assert len({p.key() for p in a}) == len(a)  # duplicates removed


def test_x1_from_scratch_uses_top_p_only(tiny_lm, tmp_path):
    gen = DebiasedGenerator(cfg(task="sts-x1", entries_per_label=3), lm=tiny_lm)
    spec = gen.spec(with_inputs=False)
    assert gen.sampling(spec).top_k == 0 and gen.sampling(spec).top_p == 0.9
    pairs = gen.generate(None, tmp_path / "x1.jsonl", progress=False)
    assert all(p.text_b is None and p.label in (2.0, 1.0, 0.0) for p in pairs)


def run_cli(model_dir, inputs, out, env_extra=None):
    env = {**os.environ, **(env_extra or {})}
    cmd = [sys.executable, "-m", "dsgen.cli", "generate", "--task", "sts-x2", "--inputs", str(inputs),
           "--generator", str(model_dir), "--chunk-inputs", "2", "--batch-size", "16", "--max-new-tokens", "8",
           "--seed", "3", "--out", str(out), "--quiet", "--device", "cpu"]
    return subprocess.run(cmd, capture_output=True, text=True, env=env)


def test_resume_after_sigkill_gives_the_same_file(tiny_lm_dir, tmp_path):
    inputs = tmp_path / "inputs.txt"
    inputs.write_text("\n".join(INPUTS) + "\n")
    full = tmp_path / "full.jsonl"
    assert run_cli(tiny_lm_dir, inputs, full).returncode == 0

    out = tmp_path / "resumed.jsonl"
    killed = run_cli(tiny_lm_dir, inputs, out, {"DSGEN_TEST_KILL_AFTER_CHUNK": "1"})
    assert killed.returncode == -9
    assert not out.exists()  # nothing that looks complete
    done = sorted(p.name for p in (tmp_path / "resumed.jsonl.partial").glob("chunk-*.jsonl"))
    assert done == ["chunk-00000.jsonl", "chunk-00001.jsonl"]
    resumed = run_cli(tiny_lm_dir, inputs, out)
    assert resumed.returncode == 0, resumed.stderr
    assert out.read_text() == full.read_text()
    assert json.loads((tmp_path / "resumed.jsonl.meta.json").read_text())["stats"]["resumed_chunks"] == 2


@pytest.mark.slow
def test_real_smollm2_two_inputs(tmp_path):
    """Integration: the embedded SmolLM2-135M-Instruct generates sensible STS pairs."""
    inputs = ["A man is playing a guitar.", "A woman is slicing an onion."]
    gen = DebiasedGenerator(GenerationConfig(generator="smollm2-135m", device="cpu", seed=1))
    pairs = gen.generate(inputs, tmp_path / "real.jsonl", progress=False)
    assert gen.lm.describe()["architecture"] == "llama"
    assert len(pairs) >= 4
    assert {p.label for p in pairs} <= {1.0, 0.5, 0.0}
    assert all(p.text_b and '"' not in p.text_b and "\n" not in p.text_b for p in pairs)
