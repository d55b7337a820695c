"""A training batch computed without most of its padding (dsgen.training.padding), packed or in groups of similar
length: the same embeddings and gradients as the padded batch, the cheapest cut, packing only where the model keeps
packed sentences apart, the model's own forward back afterwards."""

import copy
import itertools
import random

import pytest

from dsgen.data.pairs import Pair
from dsgen.training.padding import (grouped_forward, length_groups, pack_rows, right_padded_lengths,
                                   takes_packed_sequences, transformer_of, trimmed_padding)

WORDS = "a man woman dog cat plays runs guitar piano eats food street car red blue".split()


def sentences(seed, n=24):
    """Sentences of 1 to 30 words: a batch with much padding."""
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.choice([1, 2, 3, 5, 8, 13, 30]))) + "." for _ in range(n)]


def padded_cost(groups, lengths, overhead):
    return sum(len(g) * max(lengths[i] for i in g) + overhead for g in groups)


@pytest.mark.parametrize("seed", range(6))
def test_the_cut_is_the_cheapest_and_covers_every_row_once(seed):
    """Against every cut of the rows sorted by length (brute force over the 2^(n-1) cuts)."""
    rng = random.Random(seed)
    lengths = [rng.choice([3, 4, 4, 9, 12, 20, 41]) for _ in range(rng.randint(2, 11))]
    overhead = rng.choice([0, 5, 32, 400])
    groups = length_groups(lengths, overhead)
    assert sorted(i for g in groups for i in g) == list(range(len(lengths)))
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    best = min(padded_cost([order[a:b] for a, b in zip((0, *cuts), (*cuts, len(order)))], lengths, overhead)
               for k in range(len(order)) for cuts in itertools.combinations(range(1, len(order)), k))
    assert padded_cost(groups, lengths, overhead) == best
    assert length_groups(lengths, overhead) == groups  # the lengths alone decide it
    assert length_groups([7] * 5, 0) == [[0, 1, 2, 3, 4]] and length_groups([], 3) == []


def test_only_a_right_padded_batch_is_cut():
    import torch

    ids = torch.ones(3, 4, dtype=torch.long)
    right = torch.tensor([[1, 1, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert right_padded_lengths({"input_ids": ids, "attention_mask": right, "modality": "text"}) == [3, 1, 4]
    left = torch.tensor([[0, 1, 1, 1], [0, 0, 0, 1], [1, 1, 1, 1]])
    assert right_padded_lengths({"input_ids": ids, "attention_mask": left}) is None
    holes = torch.tensor([[1, 0, 1, 0], [1, 0, 0, 0], [1, 1, 1, 1]])
    assert right_padded_lengths({"input_ids": ids, "attention_mask": holes}) is None
    assert right_padded_lengths({"input_ids": ids, "attention_mask": right, "pixel_values": torch.ones(3, 2)}) is None
    assert right_padded_lengths({"input_ids": ids, "attention_mask": right, "labels": torch.ones(3)}) == [3, 1, 4]
    assert right_padded_lengths({"input_ids": ids[:1], "attention_mask": right[:1]}) is None  # one row: nothing to cut


def encoders(tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
    """The cpu preset's kind of encoder (a raw causal LM, mean pooled, standardised) and a BERT, both tiny and random."""
    from dsgen.data.sts import using_data_dir
    from dsgen.encoders import load_encoder

    with using_data_dir(sts_data_dir):
        yield "raw-lm", load_encoder(f"lm:{tiny_lm_dir}?layers=2&pooling=mean&token_norm=1&standardize=1", "cpu")
    yield "bert", load_encoder(str(tiny_encoder_dir), "cpu")


def test_groups_give_the_padded_batchs_embeddings_and_gradients(tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
    import torch

    for kind, model in encoders(tiny_lm_dir, tiny_encoder_dir, sts_data_dir):
        model.eval()  # no dropout: both paths compute the same function
        texts = sentences(1)
        features = model.preprocess(texts)
        calls = []

        def forward(part):
            calls.append(part["input_ids"].shape)
            return model.forward(part)

        grads = []
        for grouped in (False, True):
            model.zero_grad()
            out = grouped_forward(forward, dict(features), overhead=8) if grouped else model(dict(features))
            emb = out["sentence_embedding"]
            (emb[:12] * emb[12:]).sum().backward()
            grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
            if not grouped:
                reference = emb.detach(), out["token_embeddings"].detach(), out["modality"]
        assert len(calls) > 1, kind  # the batch was cut
        assert sum(rows for rows, _ in calls) == len(texts) and max(width for _, width in calls) == features["input_ids"].size(1)
        assert sum(rows * width for rows, width in calls) < features["input_ids"].numel()
        assert torch.allclose(emb.detach(), reference[0], atol=1e-5), kind
        mask = features["attention_mask"].unsqueeze(-1).bool()
        tokens = out["token_embeddings"].detach()
        assert tokens.shape == reference[1].shape
        assert torch.allclose(tokens * mask, reference[1] * mask, atol=1e-5), kind  # real positions as padded
        assert out["input_ids"] is features["input_ids"] and out["modality"] == reference[2]  # inputs whole, other outputs kept
        for a, b in zip(*grads, strict=True):  # equal up to float rounding (the products have other shapes)
            assert float((a - b).norm()) <= 1e-5 * float(a.norm()) + 1e-7, kind  # + a key bias's zero gradient


def test_a_classifier_in_groups_gives_the_padded_batchs_logits_loss_and_gradients(tiny_encoder_dir):
    """A Hugging Face model called as its Trainer calls it (keyword inputs with labels; RISE's SDI classifier): the
    same logits, a loss that is the mean over all rows, the same gradients; its signature is the model's own, so the
    Trainer keeps the dataset's columns."""
    import inspect

    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(tiny_encoder_dir)
    torch.manual_seed(0)
    model = AutoModelForSequenceClassification.from_pretrained(tiny_encoder_dir, num_labels=2).eval()
    texts = sentences(4)
    batch = dict(tok(texts, padding=True, return_tensors="pt"))
    batch["labels"] = torch.tensor([i % 2 for i in range(len(texts))])
    assert len(length_groups(batch["attention_mask"].sum(1).tolist(), 8)) > 1  # the batch is cut
    results = []
    for trim in (False, True):
        model.zero_grad()
        with trimmed_padding(model, trim, overhead=8):
            assert "input_ids" in inspect.signature(model.forward).parameters
            out = model(**batch)
        out.loss.backward()
        results.append((out, [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (whole, whole_grads), (grouped, grouped_grads) = results
    assert type(grouped) is type(whole) and torch.allclose(grouped.logits, whole.logits, atol=1e-5)
    assert float(grouped.loss.detach()) == pytest.approx(float(whole.loss.detach()), rel=1e-5)
    assert float(torch.nn.functional.cross_entropy(grouped.logits.detach(), batch["labels"])) == pytest.approx(
        float(grouped.loss.detach()), rel=1e-5)
    for a, b in zip(whole_grads, grouped_grads, strict=True):
        assert float((a - b).norm()) <= 1e-5 * float(a.norm()) + 1e-7


def test_a_classifier_batch_is_cut_only_when_its_loss_is_a_mean_over_rows():
    """The Trainer's ``num_items_in_batch`` equal to the rows: cut, and the models never see it; another count
    (gradient accumulation) or token-level labels: one call with every input, as the Trainer made them."""
    import torch

    from dsgen.training.padding import classifier_forward

    mask = torch.tensor([[1, 1, 1, 1, 1, 1], [1, 0, 0, 0, 0, 0], [1, 1, 0, 0, 0, 0]])
    seen = []

    def forward(**inputs):
        seen.append(dict(inputs))
        rows = inputs["attention_mask"].size(0)
        return {"loss": inputs["labels"].float().mean() if inputs["labels"].dim() == 1 else torch.tensor(0.0),
                "logits": torch.zeros(rows, 2)}

    batch = {"input_ids": mask.clone(), "attention_mask": mask, "labels": torch.tensor([1, 0, 1])}
    out = classifier_forward(forward, {**batch, "num_items_in_batch": torch.tensor(3)}, overhead=0)
    assert len(seen) == 3 and all("num_items_in_batch" not in s for s in seen)
    assert float(out["loss"]) == pytest.approx(2 / 3) and out["logits"].shape == (3, 2)
    for other in ({**batch, "num_items_in_batch": torch.tensor(6)}, {**batch, "labels": mask}):
        seen.clear()
        classifier_forward(forward, other, overhead=0)
        assert len(seen) == 1 and seen[0].keys() == other.keys()


def without_packed_masks(monkeypatch) -> None:
    """transformers as before 5.25 for an encoder: its mask is built from the attention mask alone, never from packed
    position ids, so a BERT's packed sentences attend to each other (from 5.25 on they do not, and BERT is packed)."""
    import transformers.masking_utils as masking

    monkeypatch.setattr(masking, "find_packed_sequence_indices", lambda position_ids: None, raising=False)


@pytest.mark.parametrize("packed_masks", [True, False])
def test_the_models_own_forward_is_back_after_the_block_even_on_an_error(tiny_encoder_dir, monkeypatch, packed_masks):
    """Whichever forward the block replaces (the transformer's where it packs, else the model's), it is the module's
    own again after the block, also on an error, and a copy made inside computes with its own weights."""
    from dsgen.encoders import load_encoder

    if not packed_masks:
        without_packed_masks(monkeypatch)
    model = load_encoder(str(tiny_encoder_dir), "cpu")
    inner = transformer_of(model)
    replaced = inner if takes_packed_sequences(inner) else model
    assert "forward" not in vars(model) and "forward" not in vars(inner)
    with pytest.raises(RuntimeError, match="inside"), trimmed_padding(model):
        assert "forward" in vars(replaced)
        copied = copy.deepcopy(model)  # e.g. an evaluator's copy in another dtype: it computes with its own weights
        if replaced is model:
            assert copied.forward.__self__ is copied and model.forward.__self__ is model
        else:
            assert transformer_of(copied).forward.__self__ is transformer_of(copied) and inner.forward.__self__ is inner
        raise RuntimeError("inside")
    assert "forward" not in vars(model) and "forward" not in vars(inner)
    with trimmed_padding(model, enabled=False):
        assert "forward" not in vars(model) and "forward" not in vars(inner)


def test_training_with_and_without_trimming_agree(tiny_lm_dir, sts_data_dir, monkeypatch):
    """The regression trainer on the same pairs and seed, batches packed or padded whole: the same training up to
    float rounding (a Llama encoder has no dropout, so nothing random depends on the packing)."""
    from dsgen.data.sts import using_data_dir
    from dsgen.training.fit import TrainingConfig
    from dsgen.training.regression import RegressionTrainer

    texts = sentences(2, 64)
    rng = random.Random(3)
    train = [Pair(texts[i], texts[-1 - i], rng.choice([0.1, 0.5, 0.9])) for i in range(64)]
    cfg = TrainingConfig(encoder=f"lm:{tiny_lm_dir}?layers=2&pooling=mean&standardize=1", batch_size=16,
                         learning_rate=1e-3, device="cpu", model_selection=False, min_trained_steps=1)
    import dsgen.training.padding as padding

    packed = []
    monkeypatch.setattr(padding, "pack_rows", lambda *a: packed.append(runs := pack_rows(*a)) or runs)
    weights = []
    with using_data_dir(sts_data_dir):
        for trim in (False, True):
            packed.clear()
            outcome = RegressionTrainer(cfg.replace(trim_padding=trim)).train(train, [], seed=1, progress=False)
            assert bool(packed) == trim  # batches were packed exactly when asked (a Llama keeps packed sentences apart)
            assert "forward" not in vars(outcome.model) and "forward" not in vars(transformer_of(outcome.model))
            assert outcome.log["weight_update"] > 0
            weights.append([p.detach() for p in outcome.model.parameters() if p.requires_grad])
    for a, b in zip(*weights, strict=True):
        assert float((a - b).norm()) <= 1e-4 * float(a.norm())


@pytest.mark.parametrize("seed", range(8))
def test_packed_rows_keep_the_batchs_order_and_about_equal_tokens(seed):
    rng = random.Random(seed)
    lengths = [rng.choice([1, 3, 9, 20, 41, 120]) for _ in range(rng.randint(1, 40))]
    capacity = rng.choice([8, 64, 256, 1024])
    runs = pack_rows(lengths, capacity)
    assert [i for run in runs for i in run] == list(range(len(lengths)))  # runs of consecutive rows, each row once
    count = min(len(lengths), -(-sum(lengths) // capacity))
    assert all(runs) and len(runs) <= count
    assert max(sum(lengths[i] for i in run) for run in runs) <= sum(lengths) / count + max(lengths)
    assert pack_rows(lengths, capacity) == runs  # the lengths alone decide it
    assert pack_rows([5, 5, 5, 5], 10) == [[0, 1], [2, 3]] and pack_rows([5, 5, 5], 1000) == [[0, 1, 2]]


@pytest.mark.parametrize("capacity", [1024, 40])
def test_a_packed_batch_gives_the_padded_batchs_embeddings_and_gradients(tiny_lm_dir, sts_data_dir, capacity,
                                                                         monkeypatch):
    """A raw causal-LM encoder (the cpu preset's kind): its transformer sees the batch's real tokens once, in one
    packed row or (rows of about 40 tokens) a few, and the embeddings, token embeddings and gradients are the padded
    batch's to float rounding."""
    import torch

    import dsgen.training.padding as padding
    from dsgen.data.sts import using_data_dir
    from dsgen.encoders import load_encoder

    with using_data_dir(sts_data_dir):
        model = load_encoder(f"lm:{tiny_lm_dir}?layers=2&pooling=mean&token_norm=1&standardize=1", "cpu")
    model.eval()
    inner = transformer_of(model)
    assert takes_packed_sequences(inner)
    monkeypatch.setattr(padding, "PACK_TOKENS", capacity)
    texts = sentences(1)
    features = model.preprocess(texts)
    real = int(features["attention_mask"].sum())
    seen = []
    hook = inner.get_input_embeddings().register_forward_hook(lambda m, i, o: seen.append(tuple(i[0].shape)))
    results = []
    for trim in (False, True):
        model.zero_grad()
        with trimmed_padding(model, trim):  # (its check calls the transformer on a batch of two first)
            assert ("forward" in vars(inner)) == trim and "forward" not in vars(model)
            seen.clear()
            out = model(dict(features))
        emb = out["sentence_embedding"]
        (emb[:12] * emb[12:]).sum().backward()
        results.append((emb.detach(), out["token_embeddings"].detach(), list(seen),
                        [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    hook.remove()
    (emb0, tok0, seen0, grads0), (emb1, tok1, seen1, grads1) = results
    assert seen0 == [tuple(features["input_ids"].shape)]
    rows, width = seen1[0]
    assert len(seen1) == 1 and (rows == 1) == (capacity >= real)
    assert real <= rows * width < features["input_ids"].numel()
    assert torch.allclose(emb1, emb0, atol=1e-5)
    mask = features["attention_mask"].unsqueeze(-1).bool()
    assert tok1.shape == tok0.shape and torch.allclose(tok1 * mask, tok0 * mask, atol=1e-5)
    assert not (tok1 * ~mask).any()  # the padding's token embeddings are zeros, not another sentence's
    for a, b in zip(grads0, grads1, strict=True):
        assert float((a - b).norm()) <= 1e-5 * float(a.norm()) + 1e-7


def test_only_a_model_that_keeps_packed_sentences_apart_is_packed(tiny_lm_dir, tiny_encoder_dir, sts_data_dir,
                                                                   monkeypatch):
    """Where a BERT's padding mask is all that keeps its sentences apart (transformers before 5.25: packed, the
    second attends to the first), the check finds it and the batch is cut into groups; from 5.25 on BERT builds its
    mask from packed position ids too, and is packed. A Llama is packed, unless packing is turned off."""
    from dsgen.data.sts import using_data_dir
    from dsgen.encoders import load_encoder

    bert = load_encoder(str(tiny_encoder_dir), "cpu")
    if takes_packed_sequences(transformer_of(bert)):
        with trimmed_padding(bert):
            assert "forward" in vars(transformer_of(bert)) and "forward" not in vars(bert)
    without_packed_masks(monkeypatch)
    assert not takes_packed_sequences(transformer_of(bert))
    with trimmed_padding(bert):
        assert "forward" in vars(bert) and "forward" not in vars(transformer_of(bert))
    monkeypatch.undo()  # the library's masks again (a Llama's causal mask keeps packed sentences apart by them too)
    with using_data_dir(sts_data_dir):
        llama = load_encoder(f"lm:{tiny_lm_dir}?layers=2&pooling=mean", "cpu")
    llama.train()
    with trimmed_padding(llama, pack=False):
        assert "forward" in vars(llama) and "forward" not in vars(transformer_of(llama))
    assert takes_packed_sequences(transformer_of(llama)) and llama.training  # the check leaves the mode as it was
    assert transformer_of(object()) is None


def test_the_packing_forward_is_gone_after_the_block_even_on_an_error(tiny_lm_dir, sts_data_dir):
    from dsgen.data.sts import using_data_dir
    from dsgen.encoders import load_encoder

    with using_data_dir(sts_data_dir):
        model = load_encoder(f"lm:{tiny_lm_dir}?layers=2&pooling=mean", "cpu")
    inner = transformer_of(model)
    with pytest.raises(RuntimeError, match="inside"), trimmed_padding(model):
        assert "forward" in vars(inner)
        copied = copy.deepcopy(model)  # an evaluator's copy computes with its own weights
        assert transformer_of(copied).forward.__self__ is transformer_of(copied)
        raise RuntimeError("inside")
    assert "forward" not in vars(inner)


def test_only_a_plain_right_padded_call_is_packed():
    """Position ids, embeddings, a cache or hidden states asked for (tensors or flags), left padding, or nothing to
    gain: the model's own call; a flag left False is no reason not to pack."""
    import torch

    from dsgen.training.padding import _packed_call

    calls = []

    def own(**kwargs):
        calls.append(kwargs)
        return {"last_hidden_state": torch.ones(*kwargs["input_ids"].shape, 2)}

    ids, mask = torch.ones(2, 3, dtype=torch.long), torch.tensor([[1, 1, 0], [1, 0, 0]])
    for other in ({"position_ids": torch.zeros(2, 3)}, {"inputs_embeds": torch.zeros(2, 3, 2)},
                  {"output_hidden_states": True}, {"attention_mask": torch.tensor([[0, 1, 1], [0, 0, 1]])}):
        assert _packed_call(own, {"input_ids": ids, "attention_mask": mask, **other}, 1024) is None
    assert _packed_call(own, {"input_ids": ids, "attention_mask": torch.ones(2, 3)}, 1024) is None  # no padding
    out = _packed_call(own, {"input_ids": ids, "attention_mask": mask, "output_hidden_states": False}, 1024)
    assert calls[-1]["input_ids"].shape == (1, 3) and calls[-1]["position_ids"].tolist() == [[0, 1, 0]]
    assert out["last_hidden_state"].tolist() == [[[1, 1], [1, 1], [0, 0]], [[1, 1], [0, 0], [0, 0]]]
