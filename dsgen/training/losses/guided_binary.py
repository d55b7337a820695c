"""MultiCSR's in-batch loss: negatives a guide encoder finds too similar to the anchor are masked, and every entry
of the softmax is scored by a binary cross-entropy."""

from __future__ import annotations

from typing import Any, Iterable

from sentence_transformers.sentence_transformer.losses import GISTEmbedLoss
from torch import Tensor


class MultiCSRGuidedLoss(GISTEmbedLoss):
    """MultiCSR's stage-3 loss (Wang et al., NAACL 2024; ``Circle-Ming/MultiCSR@596898f:simcse/models.py#L243-L270``),
    with per-anchor weights.

    For a batch of (anchor, positive, hard negative) triplets, each anchor ``a_i`` is compared with every positive
    and every hard negative of the batch: ``s_ij = cos(a_i, c_j) / temperature`` over ``2B`` candidates. A frozen
    guide encoder embeds the same texts; a candidate whose guide cosine with the anchor exceeds ``threshold`` (0.95,
    MultiCSR's ``phi``, ``run.sh -p 0.95``) is a likely false negative and is masked, except the anchor's own
    positive, which never is (``#L264-L266``). As in MultiCSR, the masked logit is multiplied by 0 (it becomes 0,
    not -inf: it stays in the softmax as a candidate of cosine 0, ``#L268``), and the loss is a binary cross-entropy
    of every entry of the row's softmax against the one-hot target, ``-(y log p + (1 - y) log(1 - p))``, averaged
    over the ``B x 2B`` entries (``#L269-L270``). Here each anchor's row mean is multiplied by its weight before
    the batch mean (every weight 1: MultiCSR's mean).

    MultiCSR compares ``cos / temperature`` with ``phi * 20`` (``#L264``), which is ``cos > phi`` at its temperature
    0.05; the guide's cosine is compared with the threshold directly here, the same test at 0.05. Its guide is a
    submodule of the trained model and so runs with dropout (the model is in training mode); here the guide runs
    without dropout, so a pair's mask does not change from one step to the next.

    Args:
        model: the ``SentenceTransformer`` being trained.
        guide: the frozen guide encoder (MultiCSR: unsupervised SimCSE; :mod:`dsgen.training.guide` trains one).
        temperature: of the logits (MultiCSR: 0.05, ``run.sh#L35`` ``--temp 0.05``).
        threshold: guide cosine above which a candidate is masked (MultiCSR: 0.95).

    Inputs: (anchor, positive, hard negative) triplets as texts, with a weight per triplet as the label (the guide
    reads the same texts).

    Example:
        >>> loss = MultiCSRGuidedLoss(model, guide, temperature=0.05, threshold=0.95)  # doctest: +SKIP
    """

    def __init__(self, model: Any, guide: Any, temperature: float = 0.05, threshold: float = 0.95) -> None:
        super().__init__(model, guide, temperature=temperature, contrast_anchors=False, contrast_positives=False)
        self.threshold = threshold
        guide.eval()
        guide.requires_grad_(False)
        self.masked_fraction: list[float] = []  # share of the off-target entries masked, per batch (for the log)

    def forward(self, sentence_features: Iterable[dict[str, Tensor]], labels: Tensor | None) -> Tensor:
        import torch
        from sentence_transformers.base.losses.merged_forward import embed_columns
        from sentence_transformers.util import batch_to_device

        features = list(sentence_features)
        guide_features = [dict(f) for f in features]  # the guide writes its outputs into what it is given
        embeddings = embed_columns(self.model, features)
        with torch.no_grad():
            if self.must_retokenize:  # as GISTEmbedLoss: the guide reads the texts with its own tokenizer
                guide_features = [batch_to_device(self.guide.preprocess(self.tokenizer.batch_decode(
                    f["input_ids"], skip_special_tokens=True)), self.guide.device) for f in features]
            guide_embeddings = embed_columns(self.guide, guide_features)
        return self.compute_loss(embeddings, guide_embeddings, labels)

    def compute_loss(self, embeddings: list[Tensor], guide_embeddings: list[Tensor], labels: Tensor | None) -> Tensor:
        """The loss of one batch from its embeddings and the guide's (the class docstring)."""
        import torch

        anchor, candidates = embeddings[0], torch.cat(embeddings[1:])
        guide_anchor, guide_candidates = guide_embeddings[0], torch.cat(guide_embeddings[1:])
        n = anchor.size(0)
        rows = torch.arange(n, device=anchor.device)
        logits = self.sim_matrix(anchor, candidates) / self.temperature
        masked = self.sim_matrix(guide_anchor, guide_candidates) > self.threshold
        masked[rows, rows] = False  # the anchor's own positive is never masked
        self.masked_fraction.append(float(masked.sum()) / max(1, masked.numel() - n))
        logits = logits * (~masked).to(logits.dtype)
        log_p = torch.log_softmax(logits, dim=-1)
        target = torch.zeros_like(logits, dtype=torch.bool)
        target[rows, rows] = True
        # -log p on the target, -log(1 - p) elsewhere (clamped: a p of exactly 1 would give -inf)
        log_not_p = torch.log1p(-log_p.exp().clamp(max=1.0 - 1e-6))
        entry = -torch.where(target, log_p, log_not_p)
        weights = torch.ones(n, device=anchor.device) if labels is None else labels.float().view(-1).to(anchor.device)
        return (entry.mean(dim=1) * weights).mean()

    def get_config_dict(self) -> dict[str, Any]:
        return {"guide": self.guide, "temperature": self.temperature, "threshold": self.threshold,
                "masked_logit": "multiplied by 0 (MultiCSR)", "loss": "binary cross-entropy of every softmax entry",
                "weighted": True, "reduction": "mean of w_i * mean_j loss_ij"}

    @property
    def citation(self) -> str:
        from dsgen.reweighting.curation import MULTICSR

        return MULTICSR
