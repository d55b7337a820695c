"""Shared fixtures: tiny randomly initialised causal LMs with a character tokenizer built here."""

from __future__ import annotations

import os
import string
from pathlib import Path

import pytest

SHARED_DATA = Path(__file__).resolve().parents[1].parent / "shared" / "data" / "sts"


def build_char_tokenizer():
    """A character tokenizer plus a few multi-character tokens ('."' carries text before a quote)."""
    from tokenizers import Tokenizer, decoders, models
    from transformers import PreTrainedTokenizerFast

    chars = list(string.ascii_letters + string.digits + " .,!?'-:\n\"")
    specials = ["<pad>", "<eos>"]
    vocab = {tok: i for i, tok in enumerate(specials + chars)}
    merges = [(".", '"'), ("t", "h"), ("th", "e")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    tok = Tokenizer(models.BPE(vocab=vocab, merges=merges))
    tok.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(tokenizer_object=tok, pad_token="<pad>", eos_token="<eos>", padding_side="left")


def build_tiny_lm(seed: int = 0):
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    tok = build_char_tokenizer()
    torch.manual_seed(seed)
    cfg = LlamaConfig(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256,
                      pad_token_id=tok.pad_token_id, eos_token_id=tok.eos_token_id)
    model = LlamaForCausalLM(cfg).eval()
    return model, tok


@pytest.fixture(scope="session")
def tiny_lm():
    from dsgen.models import LoadedLM

    model, tok = build_tiny_lm()
    return LoadedLM(model, tok, "tiny-llama", "test", 0.0, False)


@pytest.fixture(scope="session")
def tiny_lm_dir(tmp_path_factory, tiny_lm):
    path = tmp_path_factory.mktemp("tiny-llama")
    tiny_lm.model.save_pretrained(path)
    tiny_lm.tokenizer.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def sts_data_dir():
    path = Path(os.environ.get("DSGEN_DATA_DIR", SHARED_DATA))
    if not path.is_dir():
        pytest.skip("shared STS data not found; set DSGEN_DATA_DIR")
    return path


@pytest.fixture(scope="session")
def tiny_encoder_dir(tmp_path_factory):
    """A 2-layer randomly initialised BERT with all-MiniLM-L6-v2's tokenizer, saved as a plain
    transformer (sentence-transformers adds mean pooling when loading it)."""
    import torch
    from transformers import AutoTokenizer, BertConfig, BertModel

    from dsgen.models import encoder_path

    tok = AutoTokenizer.from_pretrained(encoder_path("minilm-l6"))
    torch.manual_seed(0)
    cfg = BertConfig(vocab_size=tok.vocab_size, hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                     intermediate_size=64, max_position_embeddings=128)
    path = tmp_path_factory.mktemp("tiny-bert")
    BertModel(cfg).save_pretrained(path)
    tok.save_pretrained(path)
    return path
