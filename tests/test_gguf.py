"""The GGUF path of dsgen.models, end to end, on a tiny Llama GGUF written here with the `gguf` package.

transformers reads the file for real (no mocking): config and tokenizer from the metadata, weights
dequantised from the tensors. What is checked is loading and the dequantised-checkpoint cache, not
text quality: the weights are random.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import require

gguf = require("gguf")
torch = require("torch")

from dsgen.errors import DsgenError  # noqa: E402
from dsgen.models import (  # noqa: E402
    dequantised_checkpoint,
    gguf_path_for,
    load_causal_lm,
    model_fingerprint,
)

HIDDEN, FFN, LAYERS, HEADS, KV_HEADS = 32, 64, 2, 4, 2
HEAD_DIM = HIDDEN // HEADS
MERGES = ["Ġ t", "h e", "Ġt he", "i n"]
EOS = "<|endoftext|>"


def _vocab() -> list[str]:
    """A byte-level BPE vocabulary: the 256 byte symbols, one token per merge, and an end-of-text token."""
    from transformers.convert_slow_tokenizer import bytes_to_unicode

    return list(bytes_to_unicode().values()) + [m.replace(" ", "") for m in MERGES] + [EOS]


VOCAB = len(_vocab())


def write_tiny_gguf(path: Path, seed: int = 0) -> dict[str, np.ndarray]:
    """Write a 2-layer Llama GGUF with a "gpt2" (byte-level BPE) tokenizer; return its float32 tensors."""
    rng = np.random.default_rng(seed)
    tokens = _vocab()
    eos_id = len(tokens) - 1

    def rand(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    tensors = {"token_embd.weight": rand(VOCAB, HIDDEN)}
    for i in range(LAYERS):
        p = f"blk.{i}."
        tensors.update({
            p + "attn_norm.weight": np.ones(HIDDEN, np.float32),
            p + "attn_q.weight": rand(HEADS * HEAD_DIM, HIDDEN),
            p + "attn_k.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "attn_v.weight": rand(KV_HEADS * HEAD_DIM, HIDDEN),
            p + "attn_output.weight": rand(HIDDEN, HEADS * HEAD_DIM),
            p + "ffn_norm.weight": np.ones(HIDDEN, np.float32),
            p + "ffn_gate.weight": rand(FFN, HIDDEN),
            p + "ffn_up.weight": rand(FFN, HIDDEN),
            p + "ffn_down.weight": rand(HIDDEN, FFN),
        })
    tensors["output_norm.weight"] = np.ones(HIDDEN, np.float32)
    tensors["output.weight"] = rand(VOCAB, HIDDEN)

    w = gguf.GGUFWriter(str(path), arch="llama")
    w.add_name("tiny-llama")
    w.add_context_length(128)
    w.add_embedding_length(HIDDEN)
    w.add_feed_forward_length(FFN)
    w.add_block_count(LAYERS)
    w.add_head_count(HEADS)
    w.add_head_count_kv(KV_HEADS)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_dimension_count(HEAD_DIM)
    w.add_rope_freq_base(10000.0)
    w.add_vocab_size(VOCAB)
    w.add_tokenizer_model("gpt2")
    w.add_tokenizer_pre("llama-bpe")
    w.add_token_list(tokens)
    w.add_token_types([1] * eos_id + [3])  # 1 NORMAL, 3 CONTROL
    w.add_token_merges(MERGES)
    w.add_bos_token_id(eos_id)
    w.add_eos_token_id(eos_id)
    for name, array in tensors.items():
        w.add_tensor(name, array)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()
    return tensors


@pytest.fixture(scope="module")
def tiny_gguf(tmp_path_factory) -> tuple[Path, dict[str, np.ndarray]]:
    path = tmp_path_factory.mktemp("gguf") / "tiny-llama.gguf"
    return path, write_tiny_gguf(path, seed=0)


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    root = tmp_path / "dsgen-cache"
    monkeypatch.setenv("DSGEN_CACHE_DIR", str(root))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root


def _dequantised_dirs(cache: Path) -> list[Path]:
    models = cache / "models"
    return sorted(p for p in models.iterdir() if p.is_dir()) if models.is_dir() else []


def test_gguf_path_for_accepts_existing_file(tiny_gguf):
    path, _ = tiny_gguf
    assert gguf_path_for(str(path)) == path


def test_load_dequantises_once_then_hits_the_cache(tiny_gguf, cache):
    path, tensors = tiny_gguf

    first = load_causal_lm(str(path), "cpu")
    info = first.describe()
    assert info["dequantised_cache_hit"] is False
    assert first.from_cache is False
    assert info["architecture"] == "llama"
    assert info["dtype"] == "float32"
    assert info["fingerprint"] == model_fingerprint(str(path))
    assert list(info["fingerprint"]) == ["content"]  # the file's bytes, not its name (tests/test_identity.py)
    assert first.source == str(path)

    (built,) = _dequantised_dirs(cache)
    assert built.name.startswith(f"{path.stem}-{path.stat().st_size}-")
    assert (built / "config.json").is_file()
    assert not [p for p in built.parent.iterdir() if ".tmp" in p.name], "temporary build directory left behind"

    # The weights are the ones in the file (embeddings and lm_head are not permuted by the loader).
    model = first.model
    assert model.config.vocab_size == VOCAB
    assert model.config.num_hidden_layers == LAYERS
    assert model.config.num_key_value_heads == KV_HEADS
    np.testing.assert_array_equal(model.get_input_embeddings().weight.detach().numpy(), tensors["token_embd.weight"])
    np.testing.assert_array_equal(model.get_output_embeddings().weight.detach().numpy(), tensors["output.weight"])

    # The tokenizer came back from the GGUF metadata, through the saved checkpoint.
    tok = first.tokenizer
    assert tok.eos_token == EOS
    assert tok.pad_token is not None
    assert first.end_ids() == [VOCAB - 1]
    ids = tok("the in", add_special_tokens=False)["input_ids"]
    assert ids and all(0 <= i < VOCAB for i in ids)
    assert tok.decode(ids) == "the in"

    with torch.no_grad():
        out = model(torch.tensor([ids]))
    assert tuple(out.logits.shape) == (1, len(ids), VOCAB)
    assert torch.isfinite(out.logits).all()

    second = load_causal_lm(str(path), "cpu")
    assert second.describe()["dequantised_cache_hit"] is True
    assert _dequantised_dirs(cache) == [built]
    for (name, a), (_, b) in zip(first.model.state_dict().items(), second.model.state_dict().items()):
        assert torch.equal(a, b), name
    with torch.no_grad():
        again = second.model(torch.tensor([ids]))
    torch.testing.assert_close(again.logits, out.logits)


def test_changed_file_is_a_new_model(tmp_path, cache):
    path = tmp_path / "model" / "tiny-llama.gguf"
    path.parent.mkdir()
    write_tiny_gguf(path, seed=0)

    dir_before, hit = dequantised_checkpoint(path)
    assert hit is False
    assert dequantised_checkpoint(path) == (dir_before, True)
    fp_before = model_fingerprint(str(path))
    before = load_causal_lm(str(path), "cpu")
    assert before.from_cache is True

    old_mtime = path.stat().st_mtime_ns
    tensors = write_tiny_gguf(path, seed=1)
    os.utime(path, ns=(old_mtime + 5_000_000_000, old_mtime + 5_000_000_000))

    fp_after = model_fingerprint(str(path))
    assert fp_after != fp_before
    assert fp_after["content"] != fp_before["content"]  # its bytes, not its mtime

    after = load_causal_lm(str(path), "cpu")
    assert after.describe()["dequantised_cache_hit"] is False
    assert after.describe()["fingerprint"] == fp_after
    dirs = _dequantised_dirs(cache)
    assert len(dirs) == 2 and dir_before in dirs
    dir_after = next(d for d in dirs if d != dir_before)
    assert dequantised_checkpoint(path) == (dir_after, True)

    emb_before = before.model.get_input_embeddings().weight
    emb_after = after.model.get_input_embeddings().weight
    assert not torch.equal(emb_before, emb_after)
    np.testing.assert_array_equal(emb_after.detach().numpy(), tensors["token_embd.weight"])


def test_missing_gguf_is_a_one_line_error(tmp_path, cache):
    missing = tmp_path / "nowhere" / "absent.gguf"
    for call in (lambda: gguf_path_for(str(missing)), lambda: load_causal_lm(str(missing), "cpu")):
        with pytest.raises(DsgenError) as err:
            call()
        message = str(err.value)
        assert "\n" not in message
        assert str(missing) in message
    assert not (cache / "models").exists()


def test_unreadable_gguf_is_a_one_line_error(tmp_path, cache):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"this is not a gguf file" * 4)
    with pytest.raises(DsgenError) as err:
        load_causal_lm(str(bad), "cpu")
    assert "\n" not in str(err.value)
    assert str(bad) in str(err.value)


def test_a_shared_gguf_parse_writes_the_same_checkpoint(tiny_gguf, tmp_path, monkeypatch):
    """gguf_read_once parses the file once for tokenizer, config and weights, writes the same bytes
    as transformers' own three parses, and puts gguf's names back afterwards."""
    import contextlib

    import dsgen.models

    path, _ = tiny_gguf
    parses: list[str] = []
    original = gguf.GGUFReader

    class CountingReader(original):
        def __init__(self, *args, **kwargs):
            parses.append(str(args[0]))
            super().__init__(*args, **kwargs)

    monkeypatch.setattr(gguf, "GGUFReader", CountingReader)
    name_map = gguf.get_tensor_name_map

    monkeypatch.setenv("DSGEN_CACHE_DIR", str(tmp_path / "shared"))
    shared, hit = dequantised_checkpoint(path)
    assert hit is False and len(parses) == 1
    assert gguf.GGUFReader is CountingReader and gguf.get_tensor_name_map is name_map

    monkeypatch.setattr(dsgen.models, "gguf_read_once", contextlib.nullcontext)
    monkeypatch.setenv("DSGEN_CACHE_DIR", str(tmp_path / "unshared"))
    unshared, _ = dequantised_checkpoint(path)
    assert len(parses) > 2  # transformers' own way: tokenizer, config and weights each parse the file

    files = sorted(p.relative_to(shared) for p in shared.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(unshared) for p in unshared.rglob("*") if p.is_file())
    assert any(f.suffix == ".safetensors" for f in files)
    for f in files:
        assert (shared / f).read_bytes() == (unshared / f).read_bytes(), f
