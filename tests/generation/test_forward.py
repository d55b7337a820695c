"""The shared left-padded, position-aware batched forward: a sequence scores the same alone and in
any batch, on a model with absolute position embeddings too (GPT-2, the paper preset's generator)."""

import pytest
import torch

from dsgen.generation.forward import forward_last, left_padded, pad_id, tokenize
from dsgen.models import LoadedLM
from dsgen.reweighting.discriminator import DiscriminatorConfig, lm_true_probability
from tests.conftest import build_tiny_lm


@pytest.fixture(scope="module")
def tiny_gpt2():
    model, tok = build_tiny_lm(seed=7, arch="gpt2")
    return LoadedLM(model, tok, "tiny-gpt2", "test", 0.0, False)


def test_left_padding_and_positions():
    ids, mask, pos = left_padded([[5, 6, 7], [8]], pad=0, device="cpu")
    assert ids.tolist() == [[5, 6, 7], [0, 0, 8]]
    assert mask.tolist() == [[1, 1, 1], [0, 0, 1]]
    assert pos.tolist() == [[0, 1, 2], [0, 0, 0]]


def test_a_prompt_scores_the_same_alone_and_in_a_batch(tiny_gpt2):
    tok = tiny_gpt2.tokenizer
    short, long = tokenize(tok, ["Hi there.", "A much longer prompt than the other one."])
    with torch.inference_mode():
        alone = forward_last(tiny_gpt2.model, [short], pad_id(tok)).logits[0]
        batched = forward_last(tiny_gpt2.model, [long, short], pad_id(tok)).logits[1]
    assert torch.allclose(alone, batched, rtol=1e-5, atol=1e-5)


def test_gpt2_discriminator_score_does_not_depend_on_the_batch(tiny_gpt2):
    prompt = DiscriminatorConfig().prompt
    pair = ("A man plays a guitar.", "A man plays music.")
    others = [("The cat sleeps on the very long and comfortable sofa all day.", "A cat is sleeping."),
              ("Dogs run.", "Two dogs are running across a field of tall green grass.")]
    alone = lm_true_probability(tiny_gpt2, [pair], prompt)[0]
    batched = lm_true_probability(tiny_gpt2, [*others, pair], prompt, batch_size=8)[2]
    assert batched == pytest.approx(alone, rel=1e-5)
