import math

import pytest
import torch

from dsgen.training.losses import WeightedCachedMultipleNegativesRankingLoss, WeightedCosineSimilarityLoss


@pytest.fixture(scope="module")
def st_model(tiny_encoder_dir):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(str(tiny_encoder_dir), device="cpu")


def test_weighted_cosine_matches_hand_computed_value(st_model):
    u = torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    v = torch.tensor([[1.0, 0.0], [1.0, 0.0], [1.0, 0.0]])
    labels = torch.tensor([[0.9, 1.0], [0.5, 0.5], [0.1, 0.0]])
    loss = WeightedCosineSimilarityLoss(st_model).compute_loss_from_embeddings([u, v], labels)
    # cos = 1, 1/sqrt(2), 0 ; squared errors 0.01, (0.7071 - 0.5)^2, 0.01 ; weights 1, 0.5, 0
    expected = (1.0 * 0.01 + 0.5 * (1 / math.sqrt(2) - 0.5) ** 2 + 0.0 * 0.01) / 3
    assert loss.item() == pytest.approx(expected, rel=1e-6)


def test_weighted_cosine_with_unit_weights_equals_library_loss(st_model):
    from sentence_transformers.sentence_transformer.losses import CosineSimilarityLoss

    torch.manual_seed(0)
    u, v = torch.randn(5, 8), torch.randn(5, 8)
    scores = torch.rand(5)
    ours = WeightedCosineSimilarityLoss(st_model).compute_loss_from_embeddings([u, v], torch.stack([scores, torch.ones(5)], 1))
    lib = CosineSimilarityLoss(st_model).compute_loss_from_embeddings([u, v], scores)
    assert ours.item() == pytest.approx(lib.item(), rel=1e-6)


def test_weighted_cached_mnrl_matches_hand_computed_value_and_the_library(st_model):
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    a = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    pos = torch.tensor([[1.0, 0.0], [1.0, 1.0]])
    neg = torch.tensor([[0.0, 1.0], [0.0, -1.0]])
    loss = WeightedCachedMultipleNegativesRankingLoss(st_model, scale=20.0, mini_batch_size=1)
    value = loss.calculate_loss([[a[:1], a[1:]], [pos], [neg]], torch.tensor([1.0, 0.25]))
    s = 1 / math.sqrt(2)
    # anchor 0: candidates pos0, pos1, neg0, neg1 -> cos 1, s, 0, 0 ; target pos0
    ce0 = -20 * 1 + math.log(sum(math.exp(20 * c) for c in (1, s, 0, 0)))
    # anchor 1: cos with pos0, pos1, neg0, neg1 -> 0, s, 1, -1 ; target pos1
    ce1 = -20 * s + math.log(sum(math.exp(20 * c) for c in (0, s, 1, -1)))
    assert value.item() == pytest.approx((1.0 * ce0 + 0.25 * ce1) / 2, rel=1e-5)
    torch.manual_seed(1)
    q, d, n = torch.randn(6, 8), torch.randn(6, 8), torch.randn(6, 8)
    ours = WeightedCachedMultipleNegativesRankingLoss(st_model, mini_batch_size=4).calculate_loss([[q], [d], [n]], torch.ones(6))
    lib = MultipleNegativesRankingLoss(st_model, scale=20.0).compute_loss_from_embeddings([q, d, n], None)
    assert ours.item() == pytest.approx(lib.item(), rel=1e-5)


def test_cached_loss_gradients_equal_the_uncached_loss(st_model):
    """GradCache changes memory, not the gradient: one step on 8 triplets, mini-batches of 3."""
    from sentence_transformers.sentence_transformer.losses import MultipleNegativesRankingLoss

    feats = [st_model.tokenize([f"sentence {i} {k}" for i in range(8)]) for k in ("a", "p", "n")]
    grads = []
    for loss in (WeightedCachedMultipleNegativesRankingLoss(st_model, mini_batch_size=3),
                 MultipleNegativesRankingLoss(st_model, scale=20.0)):
        st_model.zero_grad()
        loss([dict(f) for f in feats], torch.ones(8)).backward()
        grads.append(torch.cat([p.grad.flatten() for p in st_model.parameters() if p.grad is not None]))
    assert torch.allclose(grads[0], grads[1], rtol=1e-4, atol=1e-6)
