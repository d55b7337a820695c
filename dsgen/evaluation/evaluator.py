"""The STS evaluator: every distinct sentence of the run encoded once, scores as MTEB computes them.

Sentences repeat within and across the STS sets, so the evaluator gathers the distinct
sentences of all requested tasks, encodes them once, and looks each pair's embeddings up.
Cosine similarity comes from ``sentence_transformers.util.pairwise_cos_sim``; Spearman and
Pearson from scipy.

The encoding is what ``SentenceTransformer.encode`` does (``preprocess``, then the module
pipeline: transformer, pooling, any normalisation), reorganised for a comparison's many runs:
the distinct sentences are cut into batches of equal token length and tokenised once per
process and tokenizer (:func:`token_plan`, keyed by content), the pipeline is called on the
cached batches (:func:`encode_features`), and on a CPU the batches run side by side, one per
thread. Nothing that depends on the weights is cached: every run encodes every sentence.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dsgen.data.scored_pairs import PairSet
from dsgen.data.sts import data_dir
from dsgen.evaluation.results import Result, TaskScore
from dsgen.evaluation.tasks import TASKS


# Padded tokens per encoding batch. 2,048 measured 1.15-1.2x faster than 8,192 for all-MiniLM-L6-v2
# on a 2-core AVX2 CPU (the activations of a batch stay in cache), same scores to 1e-6
# (`dsgen bench eval` times both).
TOKEN_BUDGET = 2048
MAX_BATCH = 512
# Tokenised batch plans kept per process (one per tokenizer, texts and batch shape: a comparison needs one).
TOKEN_CACHE_SIZE = 4
_TOKENS: dict[str, "TokenPlan"] = {}


@dataclass
class TokenPlan:
    """The distinct sentences of an evaluation cut into batches, tokenised once.

    Args:
        batches: indices into the texts, one list per batch, batches in ascending token length.
        features: ``model.preprocess`` of each batch's texts (the padded ``input_ids`` and
            ``attention_mask`` sentence-transformers would build inside ``encode``); None for an
            encoder that is called through ``encode``.
    """

    batches: list[list[int]]
    features: list[dict[str, Any]] | None


def length_buckets(lengths: list[int], token_budget: int = TOKEN_BUDGET, max_batch: int = MAX_BATCH) -> list[list[int]]:
    """Indices sorted by token count and cut into batches of about ``token_budget`` padded tokens
    (at most ``max_batch`` sentences): short sentences go many to a batch, long ones few, and almost
    no position is padding."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    batches: list[list[int]] = [[]]
    for i in order:
        batch = batches[-1]
        if batch and (len(batch) >= max_batch or (len(batch) + 1) * lengths[i] > token_budget):
            batches.append([])
        batches[-1].append(i)
    return batches


def callable_on_features(model: Any) -> bool:
    """Whether ``model`` is a sentence-transformers model whose ``encode`` is exactly
    ``preprocess`` then the module pipeline (no default prompt, no truncated dimension), so that
    its inputs can be tokenised once and fed to the modules directly."""
    import torch

    return (isinstance(model, torch.nn.Module) and callable(getattr(model, "preprocess", None))
            and getattr(model, "tokenizer", None) is not None and getattr(model, "default_prompt_name", None) is None
            and getattr(model, "truncate_dim", None) is None)


def preprocessing_identity(model: Any) -> dict[str, Any] | None:
    """What decides the inputs ``model.preprocess`` makes from a text, as plain values: the input
    module's class and config, the maximum length, and the tokenizer: its serialised parts (the
    model's vocabulary and merges, normaliser, pre-tokeniser, post-processor, decoder), its added
    tokens, and its padding and truncation settings. The padding and truncation state of the Rust
    tokenizer is left out: every call sets it. None for a tokenizer without a serialised state
    (such an encoder is tokenised at every evaluation)."""
    tok = getattr(model, "tokenizer", None)
    backend = getattr(tok, "backend_tokenizer", None)
    if backend is None:
        return None
    parts = {name: part.__getstate__().decode("utf-8") if part is not None else None
             for name in ("model", "normalizer", "pre_tokenizer", "post_processor", "decoder")
             for part in [getattr(backend, name)]}
    added = [[i, repr(t)] for i, t in sorted(backend.get_added_tokens_decoder().items())]
    first = model[0]
    return {"module": f"{type(first).__module__}.{type(first).__qualname__}",
            "config": first.get_config_dict() if hasattr(first, "get_config_dict") else None,
            "max_seq_length": model.max_seq_length, "do_lower_case": getattr(first, "do_lower_case", None),
            "processing_kwargs": getattr(first, "processing_kwargs", None),
            "tokenizer": {"class": type(tok).__name__, "parts": parts, "added_tokens": added,
                          "padding_side": tok.padding_side, "truncation_side": tok.truncation_side,
                          "pad_token_id": tok.pad_token_id, "model_max_length": tok.model_max_length}}


def token_plan(model: Any, texts: list[str], token_budget: int = TOKEN_BUDGET, max_batch: int = MAX_BATCH) -> TokenPlan:
    """The batches of ``texts`` for ``model`` (:func:`length_buckets` of their token counts under the
    encoder's own tokenizer), each tokenised by ``model.preprocess`` when the model is called on
    features (:func:`callable_on_features`).

    Every run of a comparison evaluates a freshly trained copy of one encoder on the same sentences,
    so the plan is kept for the process, keyed by content (:func:`dsgen.identity.tokens_key`: the
    tokenizer's state and settings, the texts, the batch shape): the second and later runs skip
    tokenising (twice: once for the lengths, once per batch) and batching.
    """
    from dsgen.identity import texts_key, tokens_key

    fast = callable_on_features(model)
    identity = preprocessing_identity(model) if fast else None
    key = None
    if identity is not None:
        try:
            key = tokens_key(identity, texts_key(texts), {"token_budget": token_budget, "max_batch": max_batch})
        except TypeError:  # a setting that is not a plain value: tokenise again rather than guess a key
            key = None
    if key is not None and key in _TOKENS:
        _TOKENS[key] = _TOKENS.pop(key)  # most recently used last
        return _TOKENS[key]
    tok = model.tokenizer
    lengths = [len(ids) for ids in tok(texts, truncation=True, max_length=model.max_seq_length)["input_ids"]]
    batches = length_buckets(lengths, token_budget, max_batch)
    features = [model.preprocess([texts[i] for i in batch]) for batch in batches] if fast else None
    plan = TokenPlan(batches, features)
    if key is not None:
        _TOKENS[key] = plan
        while len(_TOKENS) > TOKEN_CACHE_SIZE:
            _TOKENS.pop(next(iter(_TOKENS)))
    return plan


def encode_features(model: Any, features: list[dict[str, Any]]) -> list[Any]:
    """Sentence embeddings of pre-tokenised batches: the model's module pipeline (transformer,
    pooling, any normalisation) called on each batch's features, as ``encode`` calls it, without
    tokenising again.

    On a CPU the batches run side by side, one per intra-op thread, each op single-threaded,
    instead of one batch at a time with every op split across the threads. On a small CPU (2 cores)
    the element-wise ops of a small encoder (RMSNorm, rotary embedding, SiLU, residual adds) last
    tens of microseconds, and splitting each across the threads costs a synchronisation per op;
    when the cores are shared, a thread that is not running holds every op up, and the bfloat16
    encoding of ``smollm2-l4`` ran several times slower with 2 threads than with 1 (`dsgen bench eval --threads`).
    A batch's embeddings do not depend on how many threads compute it or beside which other batch.
    """
    import torch

    device = getattr(model, "device", torch.device("cpu"))
    model.eval()

    def one(batch: dict[str, Any]) -> Any:
        with torch.inference_mode():
            inputs = {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in batch.items()}
            return model(inputs)["sentence_embedding"]

    workers = min(torch.get_num_threads(), len(features))
    if torch.device(device).type != "cpu" or workers < 2:
        return [one(batch) for batch in features]
    from concurrent.futures import ThreadPoolExecutor

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with ThreadPoolExecutor(workers, initializer=torch.set_num_threads, initargs=(1,)) as pool:
            # longest batches first, so that no thread is left with a long one at the end
            done = list(pool.map(one, features[::-1]))
    finally:
        torch.set_num_threads(threads)
    return done[::-1]


def encode_bucketed(model: Any, texts: list[str], token_budget: int = TOKEN_BUDGET, max_batch: int = MAX_BATCH) -> Any:
    """Embeddings of ``texts`` (in order), encoded in batches of sentences of equal token length.

    The batches are :func:`token_plan`'s (tokenised once per process for every run of a
    comparison). Each sentence's embedding does not depend on its batch (attention masks keep
    padding out), so the scores equal those of any other batching. A sentence-transformers model
    is called on the pre-tokenised batches (:func:`encode_features`); one with a default prompt or
    a truncated dimension through ``encode`` per batch; an encoder without a ``tokenizer`` (any
    object with a sentence-transformers style ``encode``) gets all texts in one call.
    """
    import torch

    if not texts:
        return torch.zeros(0)
    if getattr(model, "tokenizer", None) is None:
        return model.encode(texts, batch_size=max_batch, convert_to_tensor=True).float()
    plan = token_plan(model, texts, token_budget, max_batch)
    if plan.features is not None:
        embeddings = encode_features(model, plan.features)
    else:
        embeddings = [model.encode([texts[i] for i in batch], batch_size=len(batch), convert_to_tensor=True)
                      for batch in plan.batches]
    out = torch.empty((len(texts), embeddings[0].shape[-1]), dtype=torch.float32, device=embeddings[0].device)
    for batch, emb in zip(plan.batches, embeddings):
        out[torch.tensor(batch, device=emb.device)] = emb.float()
    return out


def cosine(emb1: Any, emb2: Any) -> Any:
    """Pairwise cosine similarity as a numpy array."""
    from sentence_transformers.util import pairwise_cos_sim

    return pairwise_cos_sim(emb1, emb2).float().cpu().numpy()


def pair_rows(index: dict[str, int], pairs: PairSet) -> tuple[Any, Any]:
    """The rows of each pair's two sentences in an embedding matrix of distinct sentences (``index``)."""
    import torch

    return (torch.tensor([index[s] for s in pairs.sentences1]), torch.tensor([index[s] for s in pairs.sentences2]))


def pair_cosines(emb: Any, index: dict[str, int], pairs: PairSet) -> Any:
    """Cosine of each pair, its sentences looked up in ``emb`` (one row per distinct sentence, ``index``)."""
    rows1, rows2 = pair_rows(index, pairs)
    return cosine(emb[rows1.to(emb.device)], emb[rows2.to(emb.device)])


def distance_scores(emb1: Any, emb2: Any, gold: list[float]) -> dict[str, float]:
    """Spearman and Pearson x 100 of negative Euclidean and Manhattan distance against gold, as MTEB
    reports them beside the cosine's (sentence-transformers' pairwise similarities)."""
    from sentence_transformers.util import pairwise_euclidean_sim, pairwise_manhattan_sim

    out = {}
    for name, fn in (("euclidean", pairwise_euclidean_sim), ("manhattan", pairwise_manhattan_sim)):
        spearman, pearson = score_cosine(fn(emb1, emb2).float().cpu().numpy(), gold)
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
        self._rows: tuple[list[str], dict[str, tuple[Any, Any]]] | None = None

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

    def distinct_rows(self) -> tuple[list[str], dict[str, tuple[Any, Any]]]:
        """The distinct sentences and, per task, the rows of its pairs' sentences among them; built
        once per evaluator (the runner keeps one for every run of a comparison)."""
        if self._rows is None:
            sentences = self.distinct_sentences()
            index = {s: i for i, s in enumerate(sentences)}
            self._rows = (sentences, {task: pair_rows(index, p) for task, p in self.pairs.items()})
        return self._rows

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
            sentences, rows = self.distinct_rows()
            texts = [template.format(s) for s in sentences] if template else sentences
            emb = encode_bucketed(model, texts, self.token_budget)
            n_encoded = len(sentences)
            for task, p in pairs.items():
                emb1, emb2 = emb[rows[task][0].to(emb.device)], emb[rows[task][1].to(emb.device)]
                cos = cosine(emb1, emb2)
                scores[task] = TaskScore(*score_cosine(cos, p.scores), len(p), **distance_scores(emb1, emb2, p.scores))
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
