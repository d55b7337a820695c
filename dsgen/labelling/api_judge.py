"""The LM judge through an OpenAI-compatible endpoint: the expected 0-5 score read from the log-probabilities
the server returns where the answer writes its score (``logprobs``).

The same judgement as :mod:`dsgen.labelling.lm_judge` (prompt, scale, smoothing, what replaces the label),
asked of a served model: one request per pair, greedy, up to ``max_tokens`` tokens, with ``logprobs``
(completions) or ``logprobs`` and ``top_logprobs`` (chat). Requests go through the endpoint client the ``openai``
generator asks through too (:class:`~dsgen.endpoints.ApiClient`: bounded concurrency, retries, refusals
recorded, one cached file per request: a rerun asks nothing), with the same endpoint settings
(:class:`~dsgen.endpoints.EndpointConfig`).

**Where the score is read.** The answer is parsed as CLAIF parses its judge's
(xiami2019/CLAIF@34f0dce:modeling.py#L225-L237): its first number (``[0-9\\.]*[0-9]``, whatever precedes it:
a space, words, markup). None, or one outside 0 to ``max_score``, gives no score: the judge abstains (CLAIF
drops such an answer; the labelling stage counts abstentions). The score is then read where that number is
written: at the answer token that holds its first digit, the digits' probabilities among the top tokens,
normalised over the digits 0 to ``max_score``, give the expected digit, as the local judge reads it. That
token is not always the first: SmolLM2's tokenizer writes ``" 4"`` as ``" "`` then ``"4"``, so a judge that
read the first token only saw a space and abstained on every pair. Where the top tokens there hold no digit
(a number spelled in one token with what follows it), the number as written is the score; with ``read =
"written"`` (CLAIF's and MultiCSR's judges) it always is, and ``parse = "exact"`` takes MultiCSR's rule (the answer
is the number). A server that
returns no log-probabilities (``transformers serve`` ignores the field) is a one-line error: use
``lm-judge`` with a local model there. A request the server refuses (a 4xx, an answer that is not a
completion) gives no score either. A chat endpoint cannot be given the start of the answer (no assistant
prefill): a chat judge takes no ``answer_prefix``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from dsgen.data.pairs import Pair
from dsgen.endpoints import TRANSPORT, ApiClient, EndpointConfig, RequestCache, redact_url, resolve_base_url
from dsgen.errors import DsgenError
from dsgen.labelling.base import LABELLERS, LabelContext, LabelReport
from dsgen.labelling.lm_judge import LmJudge, LmJudgeConfig, written_score  # noqa: F401 (written_score: one parser)


@dataclass
class ApiJudgeConfig(EndpointConfig, LmJudgeConfig):
    """:class:`LmJudgeConfig` for a served model. Args (besides the judge's): ``model`` (the served model's id),
    ``base_url``, ``api_key_env``, ``concurrency``, ``max_retries``, ``timeout``, ``extra_body``: the endpoint's
    (:class:`~dsgen.endpoints.EndpointConfig`), as the ``openai`` generator's; ``top_logprobs``: how many top
    tokens a chat answer lists at each position (their digits are read); ``max_tokens``: the answer's length,
    enough to reach a score written after a space, markup or a few words (``I would rate it 4``)."""

    top_logprobs: int = 5  # OpenAI's legacy completions endpoint gives at most 5
    max_tokens: int = 16

    who: ClassVar[str] = "api-judge"
    field_order: ClassVar[tuple[str, ...]] = (*LmJudgeConfig.field_names(), "base_url", "api_key_env", "concurrency",
                                              "max_retries", "timeout", "top_logprobs", "max_tokens", "extra_body")

    def __post_init__(self) -> None:
        super().__post_init__()  # the judge's checks (LmJudgeConfig)
        self.check_url()
        self.check_body()
        if self.max_tokens < 1:
            raise DsgenError(f"api-judge setting max_tokens must be at least 1 (got {self.max_tokens})")


@LABELLERS.register("api-judge")
class ApiJudge(LmJudge):
    """The LM judge's score from a served model's log-probabilities where it writes the score (module docstring)."""

    config_class = ApiJudgeConfig

    def models(self, plan: Any) -> list[str]:
        return []  # a served model: its base URL and name enter the key through the config dict

    def needs_generator_lm(self) -> bool:
        return False

    def get_config_dict(self) -> dict[str, Any]:
        """The settings, with the endpoint as it will be asked (``$OPENAI_BASE_URL`` resolved, credentials
        masked), and without how requests travel (:data:`~dsgen.endpoints.TRANSPORT`) or where a
        local judge would run."""
        out = {k: v for k, v in super().get_config_dict().items() if k not in TRANSPORT and k not in ("device", "dtype")}
        return {**out, "base_url": redact_url(resolve_base_url(self.config.base_url))}

    def client(self) -> ApiClient:
        cfg = self.config
        if not cfg.model:
            raise DsgenError("the api-judge needs the served model: set [labelling] model")
        if cfg.chat and cfg.answer_prefix:
            raise DsgenError("a chat endpoint cannot be given the start of an answer: set [labelling] answer_prefix = \"\" "
                             "or chat = false")
        # a refused request is an abstention: more refusals than the abstention share allows fail the run at once
        return ApiClient.from_config(cfg, mode="chat" if cfg.chat else "completions",
                                     max_failed_share=float(getattr(cfg, "max_abstention_share", 1.0)),
                                     share_setting="[labelling] max_abstention_share")

    def score(self, pairs: list[Pair], context: LabelContext) -> LabelReport:
        cfg = self.config
        client = self.client()
        logprobs = {"logprobs": True, "top_logprobs": cfg.top_logprobs} if cfg.chat else {"logprobs": cfg.top_logprobs}
        body = {**cfg.extra_body, **logprobs, "max_tokens": cfg.max_tokens, "temperature": 0.0, "top_p": 1.0}
        samples = []
        for p in pairs:
            text = cfg.prompt.format(x1=p.text_a, x2=p.text_b or "")
            if cfg.chat:
                request = {"model": cfg.model, "messages": [{"role": "user", "content": text}], **body}
            else:
                request = {"model": cfg.model, "prompt": text + cfg.answer_prefix, **body}
            samples.append(client.sample(request, p.text_a))
        records, counts = client.ask(samples, RequestCache(Path(context.cache or ".") / "api-judge"),
                                     f"label via {cfg.model}", context.progress)
        read = {key: self.read(record, client.endpoint) for key, record in records.items()}
        how = [read[s.key][1] for s in samples]
        info = {"judge": f"{cfg.model} at {client.base_url}", **counts,
                "scores_read": {w: how.count(w) for w in ("expected", "written", "no_number", "refused")}}
        return LabelReport([read[s.key][0] for s in samples], info)

    def read(self, record: dict[str, Any], where: str) -> tuple[float | None, str]:
        """(score / max_score or None, how it was read: ``expected``, ``written``, ``no_number``, ``refused``)
        of one answer (module docstring)."""
        if record.get("refused"):
            return None, "refused"
        cfg = self.config
        positions = self.positions(record.get("response"), where)
        value = written_score(record["text"], cfg.max_score, cfg.parse)
        if value is None:
            return None, "no_number"
        if cfg.read == "written":  # the number as written is the score (CLAIF, MultiCSR)
            return value / cfg.max_score, "written"
        top = next((top for token, top in positions if any(c in "0123456789" for c in token)), {})
        mass = [0.0] * (cfg.max_score + 1)
        for token, logprob in top.items():
            digit = str(token).strip()
            if len(digit) == 1 and digit in "0123456789" and int(digit) <= cfg.max_score:
                mass[int(digit)] += math.exp(logprob)
        total = sum(mass)
        if total <= 0:
            return value / cfg.max_score, "written"
        return sum(d * m for d, m in enumerate(mass)) / total / cfg.max_score, "expected"

    def positions(self, response: Any, where: str) -> list[tuple[str, dict[str, float]]]:
        """(token, top log-probabilities there) for every answer token; a one-line error when the server
        returned none."""
        try:
            logprobs = response["choices"][0]["logprobs"]
            if self.config.chat:
                out = [(str(t["token"]), {str(x["token"]): x["logprob"] for x in t["top_logprobs"]})
                       for t in logprobs["content"]]
            else:
                out = [(str(t), dict(top or {})) for t, top in zip(logprobs["tokens"], logprobs["top_logprobs"])]
        except (KeyError, IndexError, TypeError):
            out = []
        if not out:
            raise DsgenError(f"api-judge: {where} returned no log-probabilities (the server ignores `logprobs`); use "
                             "the labeller lm-judge with a local model")
        return out
