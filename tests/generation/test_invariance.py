"""The machine's probe: which numerics make shared rows and prefixes exact, and the fallbacks.

These run on whatever CPU the tests run on (``make test`` runs them again on AVX2 kernels where the CPU has larger
ones, and on an Intel Xeon's MKL where an AMD CPU has AVX-512: tests/generation/test_other_kernels.py): the probe must
find a batch-invariant path on each, and the decoder must stop sharing where it finds none.
"""

import dataclasses
import os

import pytest
import torch

from dsgen.generation import invariance
from dsgen.generation.decode_step import exact_softmax
from dsgen.generation.kernels import model_counts
from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.invariance import numerics, probe
from dsgen.generation.probed import ATTENTIONS, assume
from dsgen.generation.sampling import SamplingConfig
from tests.conftest import build_tiny_lm
from tests.generation.test_decoding import QuoteBias, Script, make_requests


def test_exact_softmax_is_the_softmax_and_the_same_bits_at_any_width_and_offset():
    gen = torch.Generator().manual_seed(0)
    lowest = torch.finfo(torch.float32).min
    for n in (1, 3, 7, 12, 15, 16, 17, 33, 90):
        real = torch.randn(4, n, generator=gen) * 3
        alone = exact_softmax(real)
        assert torch.allclose(alone, torch.softmax(real, -1), rtol=1e-6, atol=1e-7)
        assert torch.allclose(alone.double().sum(-1), torch.ones(4, dtype=torch.float64), atol=1e-6)
        for before, after in ((0, 5), (3, 0), (9, 77), (16, 16), (1, 130)):
            wide = torch.full((4, before + n + after), lowest)
            wide[:, before:before + n] = real
            assert torch.equal(exact_softmax(wide)[:, before:before + n], alone), (n, before, after)


@pytest.mark.parametrize("arch", ["llama", "gpt2", "mistral"])
def test_the_probe_finds_an_exact_path_on_this_machine(arch):
    """On every CPU CI lands on (AVX2: PyTorch's softmax; AVX-512: the exact sum), sharing is exact."""
    model, _ = build_tiny_lm(seed=7, arch=arch)
    found = probe(model)
    print(found.summary(), found.failed)
    assert found.shared and found.threads and found.attention in ATTENTIONS
    assert found.counts and found.counts == model_counts(model) and found.cpu == torch.backends.cpu.get_cpu_capability()
    assert numerics(model) == found and numerics(model) is numerics(model)  # probed once per model
    if found.attention == "exact-sum":  # chosen only because PyTorch's softmax failed a probe
        assert found.failed and all(f.startswith("softmax: ") for f in found.failed)


def test_where_no_path_is_exact_the_decoder_stops_sharing_and_says_so(monkeypatch, tiny_lm):
    model, tok = build_tiny_lm(seed=8)
    monkeypatch.setattr(invariance, "_decode_failures", lambda *a, **k: ["decode rows 0-1 of 17"])
    found = probe(model)
    assert not found.shared and found.failed[-1] == "exact-sum: decode rows 0-1 of 17"
    assert "rows not shared" in found.summary()
    reqs = make_requests(4, n=3)
    sampling = SamplingConfig(max_new_tokens=8)
    with QuoteBias(model, tok, 2.0, triggers="aeiou"):
        with assume(found):
            dec = DebiasedDecoder(model, tok, sampling, max_rows=16)
            unshared = dec.decode(reqs, seed=3)
        with assume(dataclasses.replace(found, shared=False)):
            again = DebiasedDecoder(model, tok, sampling, max_rows=16, share_rows=False).decode(reqs, seed=3)
    assert dec.stats["row_forks"] == 0 and dec.stats["forward_rows"] >= dec.stats["unshared_rows"]
    assert dec.stats["prefill_batches"] == dec.stats["prefill_suffix_batches"]  # no shared prefix computed apart
    key = lambda res: [[(o.tokens, o.logprobs) for o in outs] for outs in res]  # noqa: E731
    assert key(unshared) == key(again)


def test_the_probe_runs_without_the_models_hooks():
    """A hook on the model (a logits processor, a call counter) sees the decoder's calls, never the probe's."""
    model, tok = build_tiny_lm(seed=9)
    with Script(model, lambda call: None) as script:
        found = numerics(model)
        assert script.calls == 0 and script.seen == []
        DebiasedDecoder(model, tok, SamplingConfig(max_new_tokens=3)).decode(make_requests(1, n=1)[:1], seed=0)
    assert found.shared and script.calls > 0  # the hooks were back for the decoder


def test_a_model_off_the_cpu_is_not_probed_and_gets_no_cpu_row_counts():
    """A GPU's kernels are not this CPU's: a model on another device (here PyTorch's "meta" device, which holds
    shapes only) gets no row counts, so each step is one block of its own rows, whatever the host's thread count."""
    model, _ = build_tiny_lm(seed=9)
    found = probe(model.to("meta"))
    assert found.counts == () and found.cpu == "meta" and found.attention == "softmax"
    assert [found.rows(n) for n in (1, 5, 11, 100)] == [1, 5, 11, 100] and found.blocks(100) == (100,)


def test_the_sidecar_records_the_numerics(tiny_lm, tmp_path):
    from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig

    cfg = GenerationConfig(generator="tiny", sampling=SamplingConfig(max_new_tokens=6), chunk_inputs=2, batch_size=24,
                           seed=5, per_label=2)
    DebiasedGenerator(cfg, lm=tiny_lm).generate(["One input.", "Two inputs."], tmp_path / "p.jsonl", progress=False)
    import json

    meta = json.loads((tmp_path / "p.jsonl.meta.json").read_text())
    assert meta["numerics"] == [numerics(tiny_lm.model).summary()]
    assert all(c["numerics"] == meta["numerics"][0] for c in meta["backend"]["chunks"])


@pytest.mark.slow
def test_the_real_generator_is_probed_at_its_own_sizes_and_its_prefill_is_exact():
    """SmolLM2-135M: the probe passes on this machine, and DINO's real prompts prefilled after their
    shared instruction head give the bits of the whole prompts (the extend-after-past path)."""
    from dsgen.generation.batch import PromptBank
    from dsgen.models import load_causal_lm
    from dsgen.taskspec import load_task_spec

    lm = load_causal_lm("smollm2-135m", "cpu")
    found = numerics(lm.model)
    print(found.summary(), found.failed)
    assert found.shared and found.threads
    spec = load_task_spec("sts-x2")
    inputs = ["A man is playing a guitar.", "Two dogs run.", "A woman is slicing an onion on a board in the kitchen."]
    prompts = [spec.prompt(label, x1) for x1 in inputs for label in spec.labels]
    with torch.inference_mode():
        shared = PromptBank(lm.model, lm.tokenizer, prompts, batch_size=4, share_prefixes=True, numerics=found)
        whole = PromptBank(lm.model, lm.tokenizer, prompts, batch_size=4, share_prefixes=False, numerics=found)
    assert shared.forward_tokens < whole.forward_tokens
    assert torch.equal(shared.logits, whole.logits)
    assert all(torch.equal(a, b) for a, b in zip(shared.keys + shared.values, whole.keys + whole.values))


def test_mkl_reports_the_code_path_it_runs():
    """The probe's key and record name MKL's code path as MKL reports it (on an AMD EPYC its generic path, on an
    Intel CPU the AVX-512 or AVX2 one), so a probe stored where MKL ran one path is not read where it runs another."""
    from dsgen.generation.invariance import cpu_identity, mkl_code_path

    path = mkl_code_path()
    if not torch.backends.mkl.is_available():
        assert path == ""
        return
    assert path.startswith("Intel(R) "), path  # MKL names every path so ("Intel(R) Architecture processors", ...)
    assert cpu_identity()["mkl"] == path


def test_the_probe_is_stored_on_disk_and_read_by_the_next_process(monkeypatch, tmp_path):
    """A probe runs once per kind of machine and model: the answer is stored under its key, and a fresh copy of
    the same model (what the next process loads) reads it instead of probing; another model, thread count or
    CPU is another key."""
    from dsgen.generation.invariance import cpu_identity, probe_key, stored_probe

    monkeypatch.setenv("DSGEN_CACHE_DIR", str(tmp_path))
    calls = []
    real = invariance.probe
    monkeypatch.setattr(invariance, "probe", lambda m: calls.append(m) or real(m))
    model, _ = build_tiny_lm(seed=10)
    first = stored_probe(model)
    files = list((tmp_path / "numerics").glob("*.json"))
    assert len(files) == 1 and files[0].stem == probe_key(model) and len(calls) == 1
    again, _ = build_tiny_lm(seed=10)
    assert probe_key(again) == probe_key(model) and stored_probe(again) == first and len(calls) == 1
    other, _ = build_tiny_lm(seed=11)
    assert probe_key(other) != probe_key(model)
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1 if threads > 1 else 2)
        assert probe_key(model) != files[0].stem
    finally:
        torch.set_num_threads(threads)
    copies = [tmp_path / "copy-1", tmp_path / "elsewhere" / "copy-2"]  # the same model saved in two folders
    for folder in copies:
        model.save_pretrained(folder)
    loaded = [type(model).from_pretrained(folder) for folder in copies]
    assert probe_key(loaded[0]) == probe_key(loaded[1]) == probe_key(model) == files[0].stem  # saving changed nothing
    assert stored_probe(loaded[0]) == stored_probe(loaded[1]) == first and len(calls) == 1
    # MKL on another code path (an Intel CPU's, or another MKL_ENABLE_INSTRUCTIONS cap) is another key
    monkeypatch.setattr(invariance, "mkl_code_path", lambda: "Intel(R) Advanced Vector Extensions 512 (AVX-512)")
    assert probe_key(model) != files[0].stem
    monkeypatch.setattr(invariance, "cpu_identity", lambda: {**cpu_identity(), "vendor": "GenuineIntel"})
    assert probe_key(model) != files[0].stem
    monkeypatch.undo()
    # oneDNN capped at another instruction set, or allowed to multiply float32 in bfloat16, is another key
    monkeypatch.setenv("ONEDNN_MAX_CPU_ISA", "AVX2" if os.environ.get("ONEDNN_MAX_CPU_ISA") != "AVX2" else "SSE41")
    assert probe_key(model) != files[0].stem
    monkeypatch.undo()
    assert probe_key(model) == files[0].stem
    new_api = hasattr(getattr(torch.backends.mkldnn, "matmul", None), "fp32_precision")  # torch 2.9 on
    full, reduced = ("ieee", "bf16") if new_api else ("highest", "medium")
    assert invariance.onednn_fp32_precision() == full  # nothing set: oneDNN multiplies float32 in float32
    matmuls = (torch.backends.mkldnn.matmul, torch.backends.cuda.matmul) if new_api else ()  # what the call sets
    before = [m.fp32_precision for m in matmuls]
    try:
        torch.set_float32_matmul_precision("medium")  # oneDNN may multiply float32 in bfloat16
        assert invariance.onednn_fp32_precision() == reduced and probe_key(model) != files[0].stem
        torch.set_float32_matmul_precision("highest")
        assert invariance.onednn_fp32_precision() == full and probe_key(model) == files[0].stem
    finally:
        for m, value in zip(matmuls, before):
            m.fp32_precision = value
    files[0].write_text("not json")  # a damaged file costs a probe, nothing else
    monkeypatch.undo()
    monkeypatch.setenv("DSGEN_CACHE_DIR", str(tmp_path))
    assert stored_probe(model) == first
