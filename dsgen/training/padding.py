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

Where the encoder's transformer takes packed sequences, the batch is not cut but packed (:func:`packed_forward`):
its rows' real tokens laid end to end in one row (or a few, :data:`PACK_TOKENS`), position ids counting from 0 in
each sentence and no padding mask, so that transformers' attention masks keep every sentence to its own tokens
(its packed-sequence masks, ``masking_utils.find_packed_sequence_indices``; any attention implementation, no
flash-attention kernel needed), and the last hidden states are put back in the batch's padded shape for the pooling.
Every linear layer then multiplies the batch's real tokens once, in one product, instead of a few groups' padded
ones in several passes. Whether a model does keep packed sentences apart is checked, not assumed
(:func:`takes_packed_sequences`: a two-sentence batch packed and padded, before the model is trained); one that does
not (an architecture whose masks ignore the position ids) is cut into groups as above.

Hand-written: sentence-transformers pads each batch to its longest row; transformers packs sequences only for the
data collators of its own ``Trainer`` (``DataCollatorWithFlattening``), which a sentence-transformers loss, calling
the model once per column of a pair, never goes through.
"""

from __future__ import annotations

import functools
from contextlib import contextmanager
from typing import Any, Callable, Iterator

GROUP_OVERHEAD_TOKENS = 32
"""What one more group costs, in padded token positions: a group is another pass through every module (4-12 layers,
a few dozen kernel calls each, forward and backward) on fewer rows, whose matrix products use the cores less well.
With it, a batch is cut where the padding saved outweighs a pass: a group of a few rows stands alone only if it is
much longer than the rest. Measured on ``smollm2-l4`` (2-core AVX-512 EPYC, 320 STSb train pairs, batch 32, paired
runs): 0 (a group per distinct length) trained 1.5-1.8x slower than 32; 16, 64, 128 and 256 within the runs' noise
of it (``dsgen bench training --overhead N``)."""

PACK_TOKENS = 1024
"""About the most tokens packed into one row (a row holds at least one sentence, however long). Packed sentences
share a row's attention, which computes every pair of its tokens and masks those of two sentences out, so a row's
attention costs grow with its square: a side of a batch of 32 STS pairs (about 500 tokens) is one row. Measured on
``smollm2-l4`` (2-core EPYC, AVX2 kernels, 320 STSb train pairs, separate processes): rows of 256, 512 and 1024 tokens
within the runs' noise of each other, all 1.4-1.5x faster than the groups."""


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


def pack_rows(lengths: list[int], capacity: int = PACK_TOKENS) -> list[list[int]]:
    """The batch's rows in packed rows: runs of consecutive rows (so that the packed tokens keep the batch's order),
    as many as ``capacity`` asks (the real tokens over it, rounded up) and of about equal token counts."""
    total = sum(lengths)
    count = min(len(lengths), max(1, -(-total // max(capacity, 1))))
    runs: list[list[int]] = [[]]
    done = 0
    for i, n in enumerate(lengths):
        # a row starts the next run once the runs so far are full at its middle token
        if runs[-1] and len(runs) < count and done + n / 2 > total * len(runs) / count:
            runs.append([])
        runs[-1].append(i)
        done += n
    return runs


@functools.lru_cache(maxsize=64)
def _takes_use_cache(function: Any) -> bool:
    """Whether a forward function has a ``use_cache`` parameter (asked once per function, not per call)."""
    import inspect

    return "use_cache" in inspect.signature(function).parameters


def _packed_call(own: Any, kwargs: dict[str, Any], capacity: int) -> Any:
    """``own(**kwargs)`` (a Hugging Face model's forward on a right-padded batch) computed on the batch's real tokens
    packed (:func:`pack_rows`); its ``last_hidden_state`` in the batch's padded shape (zeros at the padding), nothing
    else; None where the call is not one it packs (other inputs, left padding, a batch no smaller packed)."""
    import torch

    mask = kwargs.get("attention_mask")
    unpackable = ("position_ids", "inputs_embeds", "past_key_values", "cache", "output_hidden_states",
                  "output_attentions", "labels")
    if (kwargs.get("input_ids") is None or mask is None
            or any(kwargs.get(k) is not None and kwargs.get(k) is not False for k in unpackable)):
        return None
    tokens = {k: v for k, v in kwargs.items() if isinstance(v, torch.Tensor) and k != "attention_mask"}
    lengths = right_padded_lengths({"attention_mask": mask, **tokens})
    if lengths is None or any(v.shape != mask.shape for v in tokens.values()):
        return None
    runs = pack_rows(lengths, capacity)
    width = max(sum(lengths[i] for i in run) for run in runs)
    if len(runs) * width >= mask.numel():
        return None
    real = mask.bool()
    packed_real = torch.zeros((len(runs), width), dtype=torch.bool, device=mask.device)
    positions = torch.zeros((len(runs), width), dtype=torch.long, device=mask.device)
    for j, run in enumerate(runs):
        used = sum(lengths[i] for i in run)
        packed_real[j, :used] = True
        # each sentence counts from 0; a row's padding after its sentences is one more sequence, discarded
        positions[j] = torch.cat([torch.arange(lengths[i], device=mask.device) for i in run]
                                 + [torch.arange(width - used, device=mask.device)])
    packed = {}
    for k, v in tokens.items():
        packed[k] = v.new_zeros((len(runs), width))
        packed[k][packed_real] = v[real]
    rest = {k: v for k, v in kwargs.items() if k not in tokens and k != "attention_mask"}
    if _takes_use_cache(getattr(own, "__func__", own)):  # a bound method's function: the same for every call
        rest["use_cache"] = False  # transformers looks for packed sequences only without a cache (nor a padding mask)
    out = own(**packed, position_ids=positions, **rest)
    hidden = out["last_hidden_state"] if isinstance(out, dict) else out[0]
    full = hidden.new_zeros(mask.shape + hidden.shape[2:])
    full[real] = hidden[packed_real]
    return type(out)(last_hidden_state=full) if isinstance(out, dict) else (full,)


def packed_forward(own: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """``own(*args, **kwargs)`` for a Hugging Face model whose forward ``own`` takes packed sequences: a right-padded
    batch computed packed in rows of about :data:`PACK_TOKENS` tokens (:func:`_packed_call`), anything else by
    ``own`` as it is."""
    out = None if args else _packed_call(own, kwargs, PACK_TOKENS)
    return own(*args, **kwargs) if out is None else out


def transformer_of(model: Any) -> Any:
    """The Hugging Face model inside a sentence-transformers model's first module (its ``Transformer``), or None."""
    import torch

    try:
        first = model[0]
    except (TypeError, IndexError, KeyError):
        return None
    inner = getattr(first, "model", None)
    return inner if isinstance(inner, torch.nn.Module) and hasattr(inner, "config") else None


def packable_transformer(model: Any) -> Any:
    """The Hugging Face model inside a sentence-transformers ``model`` (:func:`transformer_of`) where it takes packed
    sequences (:func:`takes_packed_sequences`), else None: where :func:`trimmed_padding` packs."""
    inner = transformer_of(model)
    return inner if inner is not None and takes_packed_sequences(inner) else None


def takes_packed_sequences(hf_model: Any) -> bool:
    """Whether ``hf_model`` computes packed sentences as it computes them padded: a batch of two (3 and 7 tokens),
    right-padded and packed, in eval mode without gradients; the last hidden states of their real tokens must agree
    to 1e-4 of their largest value (float rounding, as between any two shapes; a model that let the second sentence
    attend to the first, or ignored the position ids, is off by far more). False also where the call fails."""
    import torch

    vocab = int(getattr(hf_model.config, "vocab_size", 0) or 0)
    if vocab < 16:
        return False
    device = next(hf_model.parameters()).device
    ids = torch.tensor([[(5 + 7919 * i) % (vocab - 5) + 5 for i in range(7)]] * 2, device=device)
    ids[0, 3:] = 0
    mask = torch.ones_like(ids)
    mask[0, 3:] = 0
    was_training = hf_model.training
    hf_model.eval()
    try:
        with torch.no_grad():
            padded = hf_model(input_ids=ids, attention_mask=mask)["last_hidden_state"]
            packed = _packed_call(hf_model.forward, {"input_ids": ids, "attention_mask": mask}, PACK_TOKENS)
    except Exception:  # noqa: BLE001 - any model that cannot be called so is simply not packed
        return False
    finally:
        hf_model.train(was_training)
    if packed is None:
        return False
    packed = packed["last_hidden_state"] if isinstance(packed, dict) else packed[0]
    real = mask.bool()
    a, b = padded[real].float(), packed[real].float()
    return bool(torch.isfinite(b).all()) and float((a - b).abs().max()) <= 1e-4 * max(float(a.abs().max()), 1e-6)


@contextmanager
def _forward_replaced(module: Any, compute: Callable[[Any, tuple[Any, ...], dict[str, Any]], Any]) -> Iterator[None]:
    """Within the block, ``module``'s forward is ``compute(own, args, kwargs)``, ``own`` its own forward (an
    instance's own, e.g. a compiled one, where it has one), put back afterwards, also on an error."""
    import functools
    import types

    replaced = module.__dict__.get("forward")
    own_forward = type(module).forward

    @functools.wraps(own_forward)  # its signature: a Hugging Face Trainer keeps the dataset columns the forward takes
    def forward(self: Any, *args: Any, **kwargs: Any) -> Any:
        return compute(replaced if replaced is not None else own_forward.__get__(self), args, kwargs)

    # a method bound to the module: a deep copy made within the block (an evaluator's) is bound to the copy
    module.forward = types.MethodType(forward, module)
    try:
        yield
    finally:
        if replaced is None:
            del module.forward
        else:
            module.forward = replaced


@contextmanager
def trimmed_padding(model: Any, enabled: bool = True, overhead: int = GROUP_OVERHEAD_TOKENS,
                    pack: bool = True) -> Iterator[None]:
    """Within the block, ``model`` computes each batch without most of its padding (its own forward restored
    afterwards, also on an error): a sentence-transformers model whose transformer takes packed sequences
    (:func:`takes_packed_sequences`, checked here) with that transformer's forward packing the batch
    (:func:`packed_forward`); any other, and every model with ``pack = False``, by :func:`grouped_forward`: a
    sentence-transformers model's forward, called on a features mapping, or a Hugging Face model's, called with
    keyword arguments (as its ``Trainer`` calls it). ``enabled = False`` leaves the forward as it is."""
    if not enabled:
        yield
        return
    inner = packable_transformer(model) if pack else None
    if inner is not None:
        with _forward_replaced(inner, packed_forward):
            yield
        return

    def grouped(own: Any, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
        if args:  # sentence-transformers: forward(features, **kwargs)
            return grouped_forward(lambda part: own(part, *args[1:], **kwargs), args[0], overhead)
        return classifier_forward(own, kwargs, overhead)

    with _forward_replaced(model, grouped):
        yield
