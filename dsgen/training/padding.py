"""A training batch's forward without most of its padding: the rows cut into groups of similar length, each
group run trimmed to its own longest row, the outputs put back in the batch's order. Serves the encoders' trainers
(:func:`dsgen.training.fit.fit`, a sentence-transformers model) and RISE's SDI classifier
(:mod:`dsgen.reweighting.sdi`, a Hugging Face model under its ``Trainer``).

A training batch is a random draw of sentences (the papers' sampler), tokenised and padded to its longest row. STS
sentences run from 5 to 50 tokens, so a batch of 32 is mostly padding: on ``intro``'s generated and human pairs and
a sample of STSb train (SmolLM2 tokenizer) the padded batch holds 2.4-2.9x the real tokens, and a small encoder's
linear layers spend that on positions the pooling then masks out. :func:`trimmed_padding` leaves the batches as they
are drawn and changes only how one is computed: a right-padded row's real positions never see its padding (the
attention mask keeps it out, position ids count from the first token), so its embedding is the same function of its
tokens in any group (equal up to float rounding: the matrix products have other shapes). The evaluation batches by
length for the same reason (:func:`dsgen.evaluation.evaluator.length_buckets`); there the sentences are known in
advance and the batches are formed from them, here the batch is given and only cut.

Hand-written: sentence-transformers pads each batch to its longest row, and Hugging Face's padding-free
("packed") training needs flash-attention kernels that CPUs and the presets' encoders do not have.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Iterator

GROUP_OVERHEAD_TOKENS = 32
"""What one more group costs, in padded token positions: a group is another pass through every module (4-12 layers,
a few dozen kernel calls each, forward and backward) on fewer rows, whose matrix products use the cores less well.
With it, a batch is cut where the padding saved outweighs a pass: a group of a few rows stands alone only if it is
much longer than the rest. Measured on ``smollm2-l4`` (2-core AVX-512 EPYC, 320 STSb train pairs, batch 32, paired
runs): 0 (a group per distinct length) trained 1.5-1.8x slower than 32; 16, 64, 128 and 256 within the runs' noise
of it (``dsgen bench training --overhead N``)."""


def length_groups(lengths: list[int], overhead: int = GROUP_OVERHEAD_TOKENS) -> list[list[int]]:
    """Row indices in groups of similar length: the rows sorted by length (ties by index) and cut where the
    padded positions saved outweigh ``overhead`` per group. The cut is the cheapest one (dynamic programming over
    the sorted rows, cost ``sum(rows x longest row) + overhead`` per group); it depends on the lengths alone."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    n = len(order)
    if n == 0:
        return []
    sorted_lengths = [lengths[i] for i in order]
    # a group ends at a row whose successor is longer (rows of one length always go together)
    ends = [j for j in range(n) if j == n - 1 or sorted_lengths[j + 1] > sorted_lengths[j]]
    best = {-1: (0, -1)}  # cost of the rows up to this end, and the previous cut
    for e in ends:
        best[e] = min((best[s][0] + (e - s) * sorted_lengths[e] + overhead, s) for s in best)  # every earlier end
    cuts, e = [], n - 1
    while e >= 0:
        cuts.append(e)
        e = best[e][1]
    groups, start = [], 0
    for end in reversed(cuts):
        groups.append(order[start:end + 1])
        start = end + 1
    return groups


def right_padded_lengths(features: dict[str, Any]) -> list[int] | None:
    """Each row's token count when ``features`` is a right-padded batch (every attention-mask row ones, then
    zeros) whose other tensors are token-level (the mask's shape) or row-level (one value per row, e.g. labels);
    None otherwise (left padding, other inputs), which is then run as it is."""
    import torch

    mask = features.get("attention_mask")
    if not isinstance(mask, torch.Tensor) or mask.dim() != 2 or mask.size(0) < 2:
        return None
    for value in features.values():
        if isinstance(value, torch.Tensor) and value.shape != mask.shape and tuple(value.shape) != (mask.size(0),):
            return None
    lengths = mask.sum(1)
    positions = torch.arange(mask.size(1), device=mask.device)
    if not torch.equal(mask.bool(), positions.unsqueeze(0) < lengths.unsqueeze(1)):
        return None
    return [int(n) for n in lengths.tolist()]


def grouped_forward(forward: Any, features: dict[str, Any], overhead: int = GROUP_OVERHEAD_TOKENS) -> Any:
    """``forward(features)`` computed group by group (:func:`length_groups`), each group trimmed to its longest row.

    ``forward`` returns a mapping, as a sentence-transformers model (the features with ``sentence_embedding`` added)
    or a Hugging Face model (a ``ModelOutput``) does; the result is one of the same type, in the batch's row order:
    an input it returns is the batch's own (untrimmed), a row output (one entry per row: embeddings, logits;
    token-level ones padded back to the batch's length with zeros) is put together from the groups, a scalar
    ``loss`` is the groups' losses weighted by their rows (exact for a loss that is a mean over rows, as the
    classifiers' cross-entropy is), anything else is the first group's. A batch that is not right-padded, or that
    one group covers anyway, runs as one call."""
    import torch

    lengths = right_padded_lengths(features)
    groups = length_groups(lengths, overhead) if lengths else None
    if not groups or len(groups) == 1:
        return forward(features)
    width = features["attention_mask"].size(1)
    outputs = []
    for group in groups:
        index = torch.tensor(group, device=features["attention_mask"].device)
        longest = max(lengths[i] for i in group)
        part = {k: (v.index_select(0, index)[:, :longest] if v.dim() == 2 else v.index_select(0, index))
                if isinstance(v, torch.Tensor) else v for k, v in features.items()}
        outputs.append(forward(part))
    inverse = torch.empty(len(lengths), dtype=torch.long)
    inverse[torch.tensor([i for group in groups for i in group])] = torch.arange(len(lengths))
    merged: dict[str, Any] = {}
    for key, first in outputs[0].items():
        if key in features and isinstance(features[key], torch.Tensor):
            merged[key] = features[key]  # the batch's own input
        elif isinstance(first, torch.Tensor) and first.dim() == 0 and key == "loss":
            merged[key] = sum(out[key] * len(group) for out, group in zip(outputs, groups)) / len(lengths)
        elif isinstance(first, torch.Tensor) and first.dim() > 0 and first.size(0) == len(groups[0]):
            parts = [out[key] for out in outputs]
            if first.dim() >= 2 and any(p.shape[1:] != first.shape[1:] for p in parts):  # token-level: pad back
                parts = [torch.nn.functional.pad(p, (0, 0) * (p.dim() - 2) + (0, width - p.size(1))) for p in parts]
            merged[key] = torch.cat(parts).index_select(0, inverse.to(first.device))
        else:
            merged[key] = first  # not a row output (e.g. the modality): as the first group returned it
    return merged if type(outputs[0]) is dict else type(outputs[0])(**merged)


def classifier_forward(forward: Any, inputs: dict[str, Any], overhead: int = GROUP_OVERHEAD_TOKENS) -> Any:
    """A Hugging Face model's ``forward(**inputs)`` by :func:`grouped_forward`, when its loss is a mean over the
    batch's rows: labels one per row (a sequence classifier's), and the ``num_items_in_batch`` a ``Trainer`` passes
    (the loss's normaliser, for models that sum) equal to the row count, so that every group's mean loss, weighted
    by its rows, is the batch's. Other losses (token-level labels, gradient accumulation's counts) run whole."""
    import torch

    labels, items = inputs.get("labels"), inputs.get("num_items_in_batch")
    mask = inputs.get("attention_mask")
    rows = mask.size(0) if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
    if labels is not None and (not isinstance(labels, torch.Tensor) or tuple(labels.shape) != (rows,)):
        return forward(**inputs)
    if items is not None and int(items) != rows:
        return forward(**inputs)
    rest = {k: v for k, v in inputs.items() if k != "num_items_in_batch"}  # each group's loss: its own mean
    return grouped_forward(lambda part: forward(**part), rest, overhead)


@contextmanager
def trimmed_padding(model: Any, enabled: bool = True, overhead: int = GROUP_OVERHEAD_TOKENS) -> Iterator[None]:
    """Within the block, ``model``'s forward computes each batch by :func:`grouped_forward` (the model's own
    forward restored afterwards, also on an error): a sentence-transformers model's, called on a features mapping,
    or a Hugging Face model's, called with keyword arguments (as its ``Trainer`` calls it). ``enabled = False``
    leaves the forward as it is."""
    if not enabled:
        yield
        return
    import functools
    import types

    replaced = model.__dict__.get("forward")  # an instance's own forward (e.g. a compiled one), put back after
    own_forward = type(model).forward

    @functools.wraps(own_forward)  # its signature: a Hugging Face Trainer keeps the dataset columns the forward takes
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        own = replaced if replaced is not None else own_forward.__get__(self)
        if args:  # sentence-transformers: forward(features, **kwargs)
            return grouped_forward(lambda part: own(part, *args[1:], **kwargs), args[0], overhead)
        return classifier_forward(own, kwargs, overhead)

    # a method bound to the model: a deep copy made within the block (an evaluator's) is bound to the copy
    forward = types.MethodType(forward, model)
    model.forward = forward
    try:
        yield
    finally:
        if replaced is None:
            del model.forward
        else:
            model.forward = replaced
