"""The api-judge against the scripted OpenAI-compatible server on 127.0.0.1: the score read where the answer
writes it (CLAIF's first number; the expected digit from the log-probabilities at that token), refusals
as abstentions, and one client with the ``openai`` generator (requests, retries, cache, credentials, the
settings kept out of keys)."""

from __future__ import annotations

import json
import math
import uuid

import pytest

from dsgen.data.pairs import Pair
from dsgen.endpoints import TRANSPORT, ApiClient
from dsgen.errors import DsgenError
from dsgen.generation.openai_api import OpenAIConfig, OpenAIGenerator
from dsgen.labelling import LabelContext
from dsgen.labelling.api_judge import ApiJudge, ApiJudgeConfig, written_score
from tests.generation.fake_openai_server import FakeOpenAIServer, digit_logprobs

PAIRS = [Pair("A man plays a guitar.", "A man is playing a guitar.", 1.0),
         Pair("A man plays a guitar.", "The stock market fell.", 0.0),
         Pair("A dog runs.", "A dog is running fast in the park today.", 0.5)]


@pytest.fixture(autouse=True)
def no_base_url_from_the_environment(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    monkeypatch.setattr(ApiClient, "backoff_base", 0.01)


def judge(url: str, **kw) -> ApiJudge:
    return ApiJudge(ApiJudgeConfig(**{"model": "m", "base_url": url, "max_retries": 0, **kw}))


def expected_digit(pair: Pair, cfg: ApiJudgeConfig) -> float:
    """E[digit] / 5 of the fake server's digit distribution for ``pair``'s prompt, computed here from the
    server's log-probabilities (not with the code under test)."""
    prompt = cfg.prompt.format(x1=pair.text_a, x2=pair.text_b)
    what = [{"role": "user", "content": prompt}] if cfg.chat else prompt + cfg.answer_prefix
    probs = {int(t): math.exp(v) for t, v in digit_logprobs(what).items() if t in "012345"}
    return sum(d * p for d, p in probs.items()) / sum(probs.values()) / 5


@pytest.mark.parametrize("chat", [False, True])
@pytest.mark.parametrize("style", ["space", "token", "words"])
def test_the_score_is_read_where_the_model_writes_it(tmp_path, chat, style):
    """Issue 30: SmolLM2 writes " 4" as a space token, then the digit; a judge that read the first token only
    saw the space and abstained on every pair. The digit is read where it is written: after the space, in one
    spaced token, or after words."""
    with FakeOpenAIServer(judge_style=style) as srv:
        j = judge(srv.url, chat=chat)
        report = j.score(PAIRS, LabelContext(progress=False, cache=tmp_path))
    assert report.scores == pytest.approx([expected_digit(p, j.config) for p in PAIRS], abs=1e-9)
    assert report.info["scores_read"] == {"expected": 3, "written": 0, "no_number": 0, "refused": 0}
    assert all(b["max_tokens"] == 16 and b["temperature"] == 0.0 for b in srv.bodies)


@pytest.mark.parametrize("style", ["none", "out-of-range"])
def test_an_answer_without_a_number_in_range_gives_no_score(tmp_path, style):
    """As CLAIF drops an answer without a number (modeling.py#L230-L233), and a number beyond the scale is
    not a score on it: the judge abstains (None), whatever digits the top tokens hold."""
    with FakeOpenAIServer(judge_style=style) as srv:
        report = judge(srv.url).score(PAIRS, LabelContext(progress=False, cache=tmp_path))
    assert report.scores == [None, None, None] and report.info["scores_read"]["no_number"] == 3


@pytest.mark.parametrize("text, score", [
    (" 4", 4.0), ("4", 4.0), (" 4.5, because both", 4.5), (" **3**", 3.0), (": 0", 0.0), (" about 2 out of 5", 2.0),
    ("\n 5.", 5.0), (" .5", 0.5), (" 7", None), (" 10", None), (" The two", None), ("", None), (" 1.2.3", None),
])
def test_written_score_is_claifs_first_number_within_the_scale(text, score):
    assert written_score(text, 5) == score


def test_refused_requests_are_abstentions_cached_like_answers(tmp_path):
    """A refused request (a 400, null content) gives no score; it is cached like any answer (a rerun asks
    nothing), and counted; more refusals than the labelling's abstention share (``max_abstention_share``,
    the labelling stage's) fail at once, before the rest is asked."""
    refusal = {"status": 400, "body": json.dumps({"error": {"message": "content filter"}})}
    ctx = LabelContext(progress=False, cache=tmp_path)
    with FakeOpenAIServer(script=[refusal], judge_style="space") as srv:
        j = judge(srv.url, max_abstention_share=0.5)
        report = j.score(PAIRS, ctx)
        assert report.scores[0] is None and report.scores[1:] == pytest.approx([expected_digit(p, j.config)
                                                                              for p in PAIRS[1:]])
        assert report.info["scores_read"]["refused"] == 1 and report.info["requests_refused"] == 1
        again = j.score(PAIRS, ctx)
    assert again.scores == report.scores and again.info["requests_made"] == 0 and sum(srv.received.values()) == 3
    with FakeOpenAIServer(script=[refusal]) as srv:
        with pytest.raises(DsgenError, match=r"1 of 3 requests .* \[labelling\] max_abstention_share = 0\.1"):
            judge(srv.url, max_abstention_share=0.1).score(PAIRS, LabelContext(progress=False, cache=tmp_path / "b"))
    assert sum(srv.received.values()) == 1


def test_the_judge_and_the_generator_ask_through_one_client(tmp_path, monkeypatch):
    """One client serves both: every request of the openai generator and of the api-judge goes through
    ApiClient.ask (its request, retry and cache loop); the settings of how requests travel are left out of
    both keys by one list (TRANSPORT)."""
    asked = []
    ask = ApiClient.ask

    def spy(self, samples, *args, **kw):
        asked.append(self.who)
        return ask(self, samples, *args, **kw)

    monkeypatch.setattr(ApiClient, "ask", spy)
    with FakeOpenAIServer() as srv:
        OpenAIGenerator(OpenAIConfig(model="m", base_url=srv.url, per_label=1)).generate(
            [PAIRS[0].text_a], tmp_path / "p.jsonl", progress=False)
        judge(srv.url).score(PAIRS, LabelContext(progress=False, cache=tmp_path))
    assert asked == ["openai generator", "api-judge"] and len(srv.bodies) == 3 + 3
    assert {"concurrency", "timeout", "max_retries", "api_key_env"} <= set(TRANSPORT)
    base = judge("http://127.0.0.1:1/v1")
    assert not set(TRANSPORT) & set(base.get_config_dict())
    slower = judge("http://127.0.0.1:1/v1", concurrency=1, timeout=5.0, max_retries=9, api_key_env="OTHER_KEY")
    assert slower.get_config_dict() == base.get_config_dict()
    assert judge("http://127.0.0.1:1/v1", max_tokens=4).get_config_dict() != base.get_config_dict()


def test_the_judges_base_url_is_checked_and_its_credentials_masked(tmp_path):
    """The same URL rules as the generator's: a malformed URL refused at once; credentials used (the query
    parameter sent, the path joined before it) but masked in the settings that keys and plans hold, and in
    the cached request files."""
    with pytest.raises(DsgenError, match=r"is not an http\(s\) URL"):
        ApiJudgeConfig(model="m", base_url="notaurl")
    with pytest.raises(DsgenError, match="extra_body may not set seed"):
        ApiJudgeConfig(model="m", extra_body={"seed": 1})
    token = f"tok-{uuid.uuid4().hex}"
    with FakeOpenAIServer(judge_style="space") as srv:
        j = judge(f"{srv.url}?api_key={token}")
        report = j.score(PAIRS, LabelContext(progress=False, cache=tmp_path))
    assert all(s is not None for s in report.scores) and all(q == {"api_key": token} for q in srv.queries)
    assert j.get_config_dict()["base_url"] == j.config.to_dict()["base_url"] == f"{srv.url}?api_key=***"
    assert token not in json.dumps(j.get_config_dict()) and token not in json.dumps(report.info)
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) == 3 and all(token.encode() not in p.read_bytes() for p in files)
