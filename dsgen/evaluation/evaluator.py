"""The STS evaluator: every distinct sentence of the run encoded once, scores as MTEB computes them.

Sentences repeat within and across the STS sets, so the evaluator gathers the distinct
sentences of all requested tasks, encodes them once (sentence-transformers sorts them by
length into batches), and looks each pair's embeddings up. Cosine similarity comes from
``sentence_transformers.util.pairwise_cos_sim``; Spearman and Pearson from scipy.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from dsgen.data.sts import PairSet, data_dir
from dsgen.evaluation.results import Result, TaskScore
from dsgen.evaluation.tasks import TASKS


# Padded tokens per encoding batch. 2,048 measured 1.15-1.2x faster than 8,192 for all-MiniLM-L6-v2
# on a 2-core AVX2 CPU (the activations of a batch stay in cache), same scores to 1e-6
# (`dsgen bench eval` times both).
TOKEN_BUDGET = 2048
MAX_BATCH = 512


def encode_bucketed(model: Any, texts: list[str], token_budget: int = TOKEN_BUDGET, max_batch: int = MAX_BATCH) -> Any:
    """Embeddings of ``texts`` (in order), encoded in batches of sentences of equal token length.

    Sentences are sorted by their token count (the encoder's own tokenizer) and cut into batches
    of about ``token_budget`` padded tokens: short sentences go many to a batch, long ones few,
    and almost no position is padding. Each sentence's embedding does not depend on its batch
    (attention masks keep padding out), so the scores equal those of any other batching.
    An encoder without a ``tokenizer`` (any object with a sentence-transformers style
    ``encode``) gets all texts in one call.
    """
    import torch

    if not texts:
        return torch.zeros(0)
    tok = getattr(model, "tokenizer", None)
    if tok is None:
        return model.encode(texts, batch_size=max_batch, convert_to_tensor=True).float()
    lengths = [len(ids) for ids in tok(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
    order = sorted(range(len(texts)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = [[]]
    for i in order:
        batch = batches[-1]
        if batch and (len(batch) >= max_batch or (len(batch) + 1) * lengths[i] > token_budget):
            batches.append([])
        batches[-1].append(i)
    out: list[Any] = [None] * len(texts)
    for batch in batches:
        emb = model.encode([texts[i] for i in batch], batch_size=len(batch), convert_to_tensor=True)
        for j, i in enumerate(batch):
            out[i] = emb[j]
    return torch.stack(out).float()


def cosine(emb1: Any, emb2: Any) -> Any:
    """Pairwise cosine similarity as a numpy array."""
    from sentence_transformers.util import pairwise_cos_sim

    return pairwise_cos_sim(emb1, emb2).float().cpu().numpy()


def pair_cosines(emb: Any, index: dict[str, int], pairs: PairSet) -> Any:
    """Cosine of each pair, its sentences looked up in ``emb`` (one row per distinct sentence, ``index``)."""
    import torch

    e1 = emb[torch.tensor([index[s] for s in pairs.sentences1], device=emb.device)]
    e2 = emb[torch.tensor([index[s] for s in pairs.sentences2], device=emb.device)]
    return cosine(e1, e2)


def distance_scores(emb: Any, index: dict[str, int], pairs: PairSet) -> dict[str, float]:
    """Spearman and Pearson x 100 of negative Euclidean and Manhattan distance against gold, as MTEB
    reports them beside the cosine's (sentence-transformers' pairwise similarities)."""
    import torch
    from sentence_transformers.util import pairwise_euclidean_sim, pairwise_manhattan_sim

    e1 = emb[torch.tensor([index[s] for s in pairs.sentences1], device=emb.device)]
    e2 = emb[torch.tensor([index[s] for s in pairs.sentences2], device=emb.device)]
    out = {}
    for name, fn in (("euclidean", pairwise_euclidean_sim), ("manhattan", pairwise_manhattan_sim)):
        spearman, pearson = score_cosine(fn(e1, e2).float().cpu().numpy(), pairs.scores)
        out[f"{name}_spearman"], out[f"{name}_pearson"] = spearman, pearson
    return out


def score_cosine(cos: Any, gold: list[float]) -> tuple[float, float]:
    """(Spearman x100, Pearson x100) of cosine similarities against gold scores."""
    from scipy.stats import pearsonr, spearmanr

    return float(spearmanr(cos, gold).statistic * 100), float(pearsonr(cos, gold).statistic * 100)


def score_pairs(emb1: Any, emb2: Any, gold: list[float]) -> tuple[float, float]:
    """(Spearman x100, Pearson x100) of pairwise cosine similarity against gold scores."""
    return score_cosine(cosine(emb1, emb2), gold)


class StsEvaluator:
    """Evaluate a sentence encoder on STS tasks.

    Args:
        tasks: task names (see ``dsgen.evaluation.tasks``).
        root: data directory (default: ``--data-dir`` / ``$DSGEN_DATA_DIR`` / Hub cache).
        batch_size: encoding batch size.
        dedup: encode each distinct sentence once for the whole run (False: per task, per side,
            as a naive loop does; kept for the benchmark).
        preprocess: text convention (:mod:`dsgen.evaluation.preprocess`): ``raw`` or ``senteval``.
        token_budget: padded tokens per encoding batch of the distinct-sentence path
            (:func:`encode_bucketed`); ``batch_size`` is the naive path's.
        dtype: ``float32``, or ``bfloat16`` to encode with a bfloat16 copy of the model (faster on
            CPUs with AMX; cosines are computed in float32 either way).

    Example:
        >>> ev = StsEvaluator(["stsb"])                                  # doctest: +SKIP
        >>> ev.evaluate(SentenceTransformer("all-MiniLM-L6-v2")).average  # doctest: +SKIP
    """

    def __init__(self, tasks: list[str], root: str | Path | None = None, batch_size: int = 64, dedup: bool = True,
                 preprocess: str = "raw", token_budget: int = TOKEN_BUDGET, dtype: str = "float32") -> None:
        from dsgen.evaluation.preprocess import check_preprocess
        from dsgen.models import check_dtype

        self.dtype = check_dtype(dtype)
        self.task_names = list(tasks)
        self.tasks = [TASKS.get(t) for t in self.task_names]
        self.preprocess = check_preprocess(preprocess)
        self.root = data_dir(root)
        self.batch_size = batch_size
        self.token_budget = token_budget
        self.dedup = dedup
        self._pairs: dict[str, PairSet] | None = None

    @property
    def pairs(self) -> dict[str, PairSet]:
        if self._pairs is None:
            self._pairs = {t.name: t.load(self.root, self.preprocess) for t in self.tasks}
        return self._pairs

    def fingerprint(self) -> str:
        """A hash of the exact pairs evaluated (sentences as encoded and gold scores), per task:
        the evaluation data's identity in run keys, whatever folder or Hub copy they came from."""
        from dsgen.identity import evaluation_data_key

        return evaluation_data_key({t: [list(p.sentences1), list(p.sentences2), [float(x) for x in p.scores]]
                                    for t, p in self.pairs.items()})

    def distinct_sentences(self) -> list[str]:
        return list(dict.fromkeys(s for p in self.pairs.values() for s in (*p.sentences1, *p.sentences2)))

    def evaluate(self, model: Any, name: str | None = None, progress: bool = False, keep_predictions: bool = False,
                 template: str | None = None) -> Result:
        """Score ``model`` on every task.

        Args:
            keep_predictions: attach per-pair cosine similarities and gold scores to the result
                (saved beside it; ``dsgen compare`` bootstraps over them).
            template: a ``str.format`` pattern every sentence is wrapped in before encoding
                (an encoder trained with a prompt, e.g. GenSE's).
        """
        if self.dtype != "float32":
            import copy

            from dsgen.models import resolve_dtype

            model = copy.deepcopy(model).to(resolve_dtype(self.dtype))  # the caller's model stays as it is
        start = time.perf_counter()
        pairs = self.pairs
        load_s = time.perf_counter() - start
        enc = time.perf_counter()
        scores: dict[str, TaskScore] = {}
        predictions: dict[str, Any] = {}
        n_encoded = 0
        if (keep_predictions or template) and not self.dedup:
            raise ValueError("predictions and templates need dedup=True")
        if self.dedup:
            sentences = self.distinct_sentences()
            texts = [template.format(s) for s in sentences] if template else sentences
            emb = encode_bucketed(model, texts, self.token_budget)
            n_encoded = len(sentences)
            index = {s: i for i, s in enumerate(sentences)}
            for task, p in pairs.items():
                cos = pair_cosines(emb, index, p)
                scores[task] = TaskScore(*score_cosine(cos, p.scores), len(p), **distance_scores(emb, index, p))
                if keep_predictions:
                    predictions[task], predictions[f"{task}:gold"] = cos, p.scores
        else:
            for task, p in pairs.items():
                e1 = model.encode(p.sentences1, batch_size=self.batch_size, convert_to_tensor=True)
                e2 = model.encode(p.sentences2, batch_size=self.batch_size, convert_to_tensor=True)
                n_encoded += 2 * len(p)
                scores[task] = TaskScore(*score_pairs(e1, e2, p.scores), len(p))
        encode_s = time.perf_counter() - enc
        return Result(model=name or type(model).__name__, tasks=scores, predictions=predictions or None,
                      timings={"load_seconds": round(load_s, 2), "encode_and_score_seconds": round(encode_s, 2),
                               "sentences_encoded": n_encoded,
                               "sentences_per_second": round(n_encoded / max(encode_s, 1e-9), 1)})
