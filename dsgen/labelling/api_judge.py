"""The LM judge through an OpenAI-compatible endpoint: the expected 0-5 score read from the log-probabilities
the server returns for the answer's first token (``logprobs``), where it gives them.

The same judgement as :mod:`dsgen.labelling.lm_judge` (prompt, scale, smoothing, what replaces the label),
asked of a served model: one request per pair, ``max_tokens`` 1, greedy, with ``logprobs`` (completions) or
``logprobs`` and ``top_logprobs`` (chat); the digits' probabilities among the top tokens are normalised over
the digits. Requests go through the ``openai`` generator's client (bounded concurrency, retries, one cached
file per request: a rerun asks nothing). A server that returns no log-probabilities (``transformers serve``
ignores the field) is a one-line error: use ``lm-judge`` with a local model there. An answer whose top tokens
hold no digit gives no score: the pair keeps its label, and the summary counts it (``no_score``). A chat
endpoint cannot be given the start of the answer (no assistant prefill): a chat judge takes no
``answer_prefix``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dsgen.data.pairs import Pair
from dsgen.errors import DsgenError
from dsgen.labelling.base import LABELLERS, LabelContext, LabelReport
from dsgen.labelling.lm_judge import LmJudge, LmJudgeConfig


@dataclass
class ApiJudgeConfig(LmJudgeConfig):
    """:class:`LmJudgeConfig` for a served model. Args (besides the judge's): ``model``, ``base_url``,
    ``api_key_env``, ``concurrency``, ``max_retries``, ``timeout`` as the ``openai`` generator's;
    ``top_logprobs``: how many top tokens a chat answer lists (their digits are read)."""

    model: str = ""
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 4
    max_retries: int = 5
    timeout: float = 60.0
    top_logprobs: int = 5  # OpenAI's legacy completions endpoint gives at most 5
    extra_body: dict[str, Any] = field(default_factory=dict)


@LABELLERS.register("api-judge")
class ApiJudge(LmJudge):
    """The LM judge's score from a served model's first-token log-probabilities (module docstring)."""

    config_class = ApiJudgeConfig

    def models(self, plan: Any) -> list[str]:
        return []  # a served model: its base URL and name enter the key through the config dict

    def needs_generator_lm(self) -> bool:
        return False

    def get_config_dict(self) -> dict[str, Any]:
        """The settings, with the endpoint as it will be asked (``$OPENAI_BASE_URL`` resolved), and without
        how requests travel (concurrency, retries, timeout, the key's variable)."""
        out = {k: v for k, v in super().get_config_dict().items()
               if k not in ("concurrency", "max_retries", "timeout", "api_key_env", "device", "dtype")}
        from dsgen.generation.openai_api import resolve_base_url

        return {**out, "base_url": resolve_base_url(self.config.base_url)}

    def generator(self) -> Any:
        from dsgen.generation.openai_api import OpenAIConfig, OpenAIGenerator

        cfg = self.config
        if not cfg.model:
            raise DsgenError("the api-judge needs the served model: set [labelling] model")
        if cfg.chat and cfg.answer_prefix:
            raise DsgenError("a chat endpoint cannot be given the start of an answer: set [labelling] answer_prefix = \"\" "
                             "or chat = false")
        logprobs = {"logprobs": True, "top_logprobs": cfg.top_logprobs} if cfg.chat else {"logprobs": cfg.top_logprobs}
        return OpenAIGenerator(OpenAIConfig(model=cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
                                            mode="chat" if cfg.chat else "completions", max_tokens=1, temperature=0.0,
                                            top_p=1.0, concurrency=cfg.concurrency, max_retries=cfg.max_retries,
                                            timeout=cfg.timeout, extra_body={**cfg.extra_body, **logprobs}))

    def score(self, pairs: list[Pair], context: LabelContext) -> LabelReport:
        from dsgen.generation.openai_api import RequestCache, Sample
        from dsgen.identity import request_key
        from dsgen.progress import progress_bar

        cfg = self.config
        gen = self.generator()
        body = dict(gen.config.extra_body, max_tokens=1, temperature=0.0, top_p=1.0)
        samples: dict[str, Sample] = {}
        order = []
        for p in pairs:
            text = cfg.prompt.format(x1=p.text_a, x2=p.text_b or "")
            if cfg.chat:
                request = {"model": cfg.model, "messages": [{"role": "user", "content": text}], **body}
            else:
                request = {"model": cfg.model, "prompt": text + cfg.answer_prefix, **body}
            key = request_key(gen.config.mode, gen.base_url, cfg.model, request)
            samples.setdefault(key, Sample(p.text_a, "", 0, request, key))
            order.append(key)
        cache = RequestCache(Path(context.cache or ".") / "api-judge")
        records = {k: r for k in samples if (r := cache.get(k)) is not None}
        todo = [s for k, s in samples.items() if k not in records]
        counts = {"requests_made": 0, "requests_cached": len(records), "retries": 0}
        with progress_bar(f"label via {cfg.model}", total=len(samples), unit="requests",
                          enabled=context.progress) as advance:
            advance(len(records))
            gen.run_requests(todo, gen.api_key(), cache, records, counts, advance, 1)
        scores = {k: self.expected(records[k]["response"], gen.endpoint) for k in samples}
        return LabelReport([scores[k] for k in order], {"judge": f"{cfg.model} at {gen.base_url}", **counts})

    def expected(self, response: dict[str, Any], where: str) -> float | None:
        """E[digit] / max_score from the answer's first-token top log-probabilities."""
        cfg = self.config
        try:
            choice = response["choices"][0]
            if cfg.chat:
                top = {t["token"]: t["logprob"] for t in choice["logprobs"]["content"][0]["top_logprobs"]}
            else:
                top = choice["logprobs"]["top_logprobs"][0]
        except (KeyError, IndexError, TypeError):
            raise DsgenError(f"api-judge: {where} returned no log-probabilities (the server ignores `logprobs`); use "
                             "the labeller lm-judge with a local model") from None
        mass = [0.0] * (cfg.max_score + 1)
        for token, logprob in top.items():
            digit = str(token).strip()
            if len(digit) == 1 and digit in "0123456789" and int(digit) <= cfg.max_score:
                mass[int(digit)] += math.exp(logprob)
        total = sum(mass)
        if total <= 0:
            return None  # no digit among the top tokens: no score, the pair keeps its label
        return sum(d * m for d, m in enumerate(mass)) / total / cfg.max_score
