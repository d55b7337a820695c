"""The CUDA path, run where a GPU is present (skipped with a reason elsewhere). No GPU has been
lent to this project's machines: these tests are written to be right by construction and have
not run yet (see the README)."""

import pytest
import torch

from dsgen.generation.decoding import DebiasedDecoder
from dsgen.generation.outputs import DecodeRequest
from dsgen.generation.reference import reference_decode, same_output
from dsgen.generation.sampling import SamplingConfig
from dsgen.generation.debiased import DebiasedGenerator, GenerationConfig
from tests.conftest import build_tiny_lm, require
from tests.generation.test_decoding import QuoteBias, check_rederived, make_requests

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def cuda_lm():
    model, tok = build_tiny_lm(seed=0)
    return model.to("cuda"), tok


def test_cuda_core_matches_the_reference_loop_under_greedy_decoding(cuda_lm):
    model, tok = cuda_lm
    sampling = SamplingConfig(top_k=1, max_new_tokens=12)
    reqs = [DecodeRequest(r.prompt, r.counter_prompts, 1) for r in make_requests(8)]
    with QuoteBias(model, tok, 3.0, triggers="aeiou"):
        core = DebiasedDecoder(model, tok, sampling, max_rows=7).decode(reqs, seed=0)
        ref = reference_decode(model, tok, reqs, sampling, seed=0)
    assert all(same_output(c[0], r[0]) for c, r in zip(core, ref))  # the CPU twin's comparison


def test_cuda_sampled_tokens_are_rederived_from_uncached_passes(cuda_lm):
    model, tok = cuda_lm
    sampling = SamplingConfig(max_new_tokens=8)
    reqs = make_requests(3)
    with QuoteBias(model, tok, 1.0):
        dec = DebiasedDecoder(model, tok, sampling, max_rows=7)
        results = dec.decode(reqs, seed=5)
        assert check_rederived(model, tok, reqs, results, sampling, dec.blocked_ids()) > 20


def test_float32_by_default_and_bfloat16_on_request(tiny_lm_dir):
    from dsgen.models import load_causal_lm

    assert load_causal_lm(str(tiny_lm_dir), "cuda").model.dtype == torch.float32  # DINO: float32
    bf16 = load_causal_lm(str(tiny_lm_dir), "cuda", "bfloat16")
    assert bf16.model.dtype == torch.bfloat16 and bf16.model.device.type == "cuda"


def test_ray_actor_takes_one_gpu(tiny_lm_dir, tmp_path):
    ray = require("ray", "ray")
    from dsgen.generation.ray_backend import RayBackend

    cfg = GenerationConfig(generator=str(tiny_lm_dir), sampling=SamplingConfig(max_new_tokens=8), chunk_inputs=2,
                           per_label=2, device="cuda", seed=3)
    inputs = [f"Sentence {i} here." for i in range(6)]
    DebiasedGenerator(cfg).generate(inputs, tmp_path / "local.jsonl", progress=False)
    ray.init(address="local", include_dashboard=False, log_to_driver=False)
    try:
        DebiasedGenerator(cfg, backend=RayBackend(workers=1, device="cuda")).generate(inputs, tmp_path / "ray.jsonl",
                                                                                     progress=False)
    finally:
        ray.shutdown()
    assert (tmp_path / "ray.jsonl").read_bytes() == (tmp_path / "local.jsonl").read_bytes()
