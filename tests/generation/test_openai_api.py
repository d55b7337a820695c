"""The ``openai`` generator against real servers on 127.0.0.1: a scripted OpenAI-compatible server
(429 and 5xx then success, malformed answers, a server killed mid-run, a client killed mid-run) and,
marked slow, ``transformers serve`` with the embedded SmolLM2-135M-Instruct. No test reaches beyond
the loopback: every connection this process opens is checked (``loopback_only``), and the real
server runs offline."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
import uuid
from pathlib import Path

import pytest

from dsgen.endpoints import TRANSPORT, ApiClient
from dsgen.errors import DsgenError
from dsgen.generation import GENERATORS
from dsgen.generation.openai_api import SELF_DEBIASING, OpenAIConfig, OpenAIGenerator, parse_chat_reply
from dsgen.taskspec import OutputFormat
from tests.conftest import require
from tests.generation.fake_openai_server import HTML, RATE_LIMITED, SERVER_ERROR, FakeOpenAIServer

REPO = Path(__file__).resolve().parents[2]
INPUTS = ["A man is playing a guitar.", "A woman is slicing an onion.", "Two dogs run across a field."]
LOOPBACK = {"127.0.0.1", "::1", "localhost"}


@pytest.fixture(autouse=True)
def loopback_only(monkeypatch):
    """Any connection of this process to a host other than the loopback fails the test."""
    real = socket.socket.connect

    def connect(self, address):
        if self.family in (socket.AF_INET, socket.AF_INET6) and address[0] not in LOOPBACK:
            raise AssertionError(f"a test tried to reach {address[0]}: tests stay on the loopback")
        return real(self, address)

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)


@pytest.fixture(autouse=True)
def fast_backoff(monkeypatch):
    """Retries wait milliseconds, not seconds (the schedule itself is tested on its own)."""
    monkeypatch.setattr(ApiClient, "backoff_base", 0.01)


@pytest.fixture
def server():
    with FakeOpenAIServer() as srv:
        yield srv


def make(url: str, **kw) -> OpenAIGenerator:
    base = dict(model="fake-model", base_url=url, per_label=2, max_tokens=24, concurrency=2, max_retries=2)
    base.update(kw)
    return OpenAIGenerator(OpenAIConfig(**base))


def meta(out: Path) -> dict:
    return json.loads(out.with_name(out.name + ".meta.json").read_text())


def request_files(out: Path) -> list[Path]:
    return sorted(out.with_name(out.name + ".requests").glob("*.json"))


# -- the component and its rules ------------------------------------------------------------------
def test_registered_with_its_metadata():
    assert GENERATORS.get("openai") is OpenAIGenerator and OpenAIGenerator.name == "openai"
    assert OpenAIGenerator.supports_debiasing is False and OpenAIGenerator.version == 1
    assert "@" in OpenAIGenerator.citation and "title" in OpenAIGenerator.citation
    cfg = OpenAIConfig()
    assert (cfg.model, cfg.base_url, cfg.api_key_env, cfg.task, cfg.mode) == ("", "", "OPENAI_API_KEY", "sts-x2", "completions")
    assert (cfg.per_label, cfg.entries_per_label, cfg.temperature, cfg.top_p, cfg.max_tokens) == (5, 100, 1.0, 0.9, 40)
    assert (cfg.concurrency, cfg.max_retries, cfg.timeout, cfg.chunk_inputs, cfg.seed) == (4, 5, 60.0, 32, 42)
    assert not cfg.allow_newlines and not cfg.keep_unclosed and cfg.remove_duplicates
    gen = OpenAIGenerator(OpenAIConfig(model="m"))
    settings = gen.get_config_dict()  # what the requests ask, not how they travel
    assert settings == {k: v for k, v in gen.config.to_dict().items() if k not in TRANSPORT}
    assert OpenAIConfig.from_dict(gen.config.to_dict()) == gen.config


LEAD = 'Sentence 2: "'


@pytest.mark.parametrize("reply, expected", [
    ('Sentence 2: "A cat sleeps."', ("A cat sleeps.", None, False)),                  # 1: the last line
    ('Sure.\nSentence 2: "A cat sleeps." Done', ("A cat sleeps.", None, False)),
    ('  "A cat sleeps."\n', ("A cat sleeps.", None, False)),                           # 2: opening quote
    ('Here it is: "A cat sleeps." Enjoy!', ("A cat sleeps.", None, False)),             # 3: quoted later
    ("A cat sleeps.", ("A cat sleeps.", None, True)),                                   # 4: one unquoted line
    ("Sentence 2: A cat sleeps.", ("A cat sleeps.", None, True)),
    ('A cat sleeps."', ("A cat sleeps.", None, False)),                                 # 5: continuation style
    ("Sure!\nA cat sleeps.", (None, "newline", False)),
    ('Sentence 2: "A cat\nsleeps."', ("A cat\nsleeps.", "newline", False)),
    ('Sentence 2: "A cat sleeps.', (None, "unclosed", False)),
    ('Sentence 2: ""', ("", "empty", False)),
    ("   ", (None, "unclosed", False)),
])
def test_chat_reply_rule(reply, expected):
    assert parse_chat_reply(reply, LEAD) == expected


def test_chat_reply_rule_with_typographic_quotes():
    curly = OutputFormat(end="\u201d")
    for reply in ("\u201cA cat sleeps.\u201d", "A cat sleeps.\u201d", "Sentence 2: \u201cA cat sleeps.\u201d and more"):
        assert parse_chat_reply(reply, "Sentence 2: \u201c", curly, "\u201c") == ("A cat sleeps.", None, False)
    assert parse_chat_reply("A cat sleeps.", "Sentence 2: \u201c", curly, "\u201c") == ("A cat sleeps.", None, True)


def test_chat_reply_rule_with_a_structured_output():
    fmt = OutputFormat("json", "}", ("S1", "S2"), "S1", (("S2", "1"),))
    triplet = '{"S1": "A cat sleeps.", "S2": "A cat naps."}'
    for reply in (triplet, f"Here:\n```json\n{triplet}\n```", 'JSON: {"S1": "A cat sleeps.", "S2": "A cat naps."'):
        text, rejected, unquoted = parse_chat_reply(reply, "JSON: {", fmt, "{")
        assert rejected is None and not unquoted and fmt.parse(text) == {"S1": "A cat sleeps.", "S2": "A cat naps."}
    assert parse_chat_reply("I cannot do that.", "JSON: {", fmt, "{")[1] == "unparsed"


def test_chat_messages_split_the_instruction_at_its_last_line_break():
    gen = OpenAIGenerator(OpenAIConfig(model="m", base_url="http://127.0.0.1:9/v1", mode="chat", per_label=2))
    samples = gen.samples(gen.spec(with_inputs=True), ["A cat sleeps."])
    first = samples[0]
    assert first.body["messages"] == [{"role": "user", "content": 'Task: Write two sentences that mean the same thing.\n'
                                                                   'Sentence 1: "A cat sleeps."'}]
    assert first.lead == LEAD and "prompt" not in first.body
    assert len(samples) == 3 * 2 and len({s.key for s in samples}) == 6 and len({s.body["seed"] for s in samples}) == 6
    from dsgen.taskspec import TaskSpec

    plain = TaskSpec("t", {"a": 'no line break "'}, {"a": ()})
    assert plain.turns("a", None) == ([{"role": "user", "content": 'no line break "'}], "")


def test_settings_no_run_can_use_fail_in_one_line(tmp_path, monkeypatch):
    with pytest.raises(DsgenError, match="mode"):
        OpenAIConfig(mode="responses").check()
    with pytest.raises(DsgenError, match="extra_body may not set seed"):
        OpenAIConfig(extra_body={"seed": 1}).check()
    with pytest.raises(DsgenError, match="at least 1"):
        OpenAIConfig(concurrency=0).check()
    with pytest.raises(DsgenError, match="needs a model"):
        OpenAIGenerator().generate(INPUTS, tmp_path / "p.jsonl", progress=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(DsgenError, match="set the environment variable OPENAI_API_KEY"):
        OpenAIGenerator(OpenAIConfig(model="gpt-4o-mini")).generate(INPUTS, tmp_path / "p.jsonl", progress=False)
    with pytest.raises(DsgenError, match="chat spec"):
        OpenAIGenerator(OpenAIConfig(model="m", task="sts-x2-chat")).spec(with_inputs=True)
    assert list(tmp_path.iterdir()) == []


def test_dataset_key_covers_the_api_the_model_and_the_spec_but_not_the_key(monkeypatch):
    from dsgen.identity import dataset_key, texts_key

    gen = OpenAIGenerator(OpenAIConfig(model="m", base_url="http://127.0.0.1:1/v1/"))
    spec = gen.spec(with_inputs=True)
    assert gen.base_url == "http://127.0.0.1:1/v1"
    assert gen.dataset_key(INPUTS) == dataset_key("openai", 1, gen.get_config_dict(), texts_key(INPUTS), spec.to_dict(),
                                                  {"api": "http://127.0.0.1:1/v1", "model": "m"})
    key = gen.dataset_key(INPUTS)
    # how requests travel is not what they ask: a run resumed with fewer requests in flight reuses every answer
    slower = OpenAIGenerator(OpenAIConfig(model="m", base_url="http://127.0.0.1:1/v1/", concurrency=1, timeout=5.0,
                                          max_retries=9, chunk_inputs=4, api_key_env="OTHER_KEY"))
    assert slower.dataset_key(INPUTS) == key
    monkeypatch.setenv("OPENAI_API_KEY", "another-key")
    assert gen.dataset_key(INPUTS) == key
    assert OpenAIGenerator(OpenAIConfig(model="m2", base_url="http://127.0.0.1:1/v1")).dataset_key(INPUTS) != key
    assert OpenAIGenerator(OpenAIConfig(model="m", base_url="http://127.0.0.1:2/v1")).dataset_key(INPUTS) != key
    assert gen.dataset_key(INPUTS[:2]) != key
    monkeypatch.setenv("OPENAI_BASE_URL", "http://127.0.0.1:3/v1")  # used when the config names none
    assert OpenAIGenerator(OpenAIConfig(model="m")).base_url == "http://127.0.0.1:3/v1"
    monkeypatch.delenv("OPENAI_BASE_URL")
    assert OpenAIGenerator(OpenAIConfig(model="m")).base_url == "https://api.openai.com/v1"


def test_backoff_doubles_is_capped_and_jittered_by_the_request_key():
    gen = ApiClient(model="m", mode="completions", who="test", share_setting="max_failed_share")
    gen.backoff_base, gen.backoff_cap = 0.5, 30.0
    delays = [gen._delay("k1", a) for a in range(10)]
    assert all(0.25 * 2**a <= d < 0.5 * 2**a for a, d in enumerate(delays[:5]))
    assert all(15.0 <= d < 30.0 for d in delays[7:]) and delays == [gen._delay("k1", a) for a in range(10)]
    assert gen._delay("k1", 0) != gen._delay("k2", 0)


# -- against the scripted server ------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_generate_caches_every_request_and_a_rerun_is_free(server, tmp_path, mode):
    out = tmp_path / "pairs.jsonl"
    pairs = make(server.url, mode=mode).generate(INPUTS, out, progress=False)
    m = meta(out)
    stats = m["stats"]
    assert stats["sampled"] == 18 and stats["requests_made"] == 18 and stats["requests_cached"] == 0
    assert stats["accepted"] + sum(stats[f"rejected_{r}"] for r in ("unclosed", "empty", "newline")) == 18
    assert len(pairs) == stats["accepted"] - stats["duplicates"] and pairs
    assert 0 < stats["accepted"] < 18 and (stats["accepted_unquoted"] > 0) == (mode == "chat")
    assert m["self_debiasing"] == SELF_DEBIASING and m["generator_name"] == "openai" and m["kind"] == "generated-pairs"
    assert m["dataset_key"] == make(server.url, mode=mode).dataset_key(INPUTS)
    assert m["generator"]["api"] == server.url and m["generator"]["served_models"] == ["fake-model"]
    assert m["generator"]["endpoint"] == server.url + ("/chat/completions" if mode == "chat" else "/completions")
    assert m["config"]["mode"] == mode and m["task_spec"]["task_name"] == "sts"
    for p in pairs:
        assert p.text_a in INPUTS and p.label in (1.0, 0.5, 0.0) and p.text_b and '"' not in p.text_b and "\n" not in p.text_b
    files = request_files(out)
    assert len(files) == 18 and all(json.loads(f.read_text())["key"] == f.stem for f in files)
    assert all("n" not in b and "logprobs" not in b for b in server.bodies)  # one request per sample
    assert len({(b.get("prompt") or json.dumps(b.get("messages")), b["seed"]) for b in server.bodies}) == 18

    first = out.read_bytes()
    server.stop()  # nothing listens any more: the rerun must come from the cache
    again = make(server.url, mode=mode).generate(INPUTS, out, progress=False)
    assert out.read_bytes() == first and len(again) == len(pairs)
    assert meta(out)["stats"]["requests_made"] == 0 and meta(out)["stats"]["requests_cached"] == 18


def test_x1_from_scratch_draws_entries_per_label(server, tmp_path):
    out = tmp_path / "x1.jsonl"
    pairs = make(server.url, task="sts-x1", entries_per_label=3).generate(None, out, progress=False)
    assert meta(out)["stats"]["sampled"] == 9 and len(request_files(out)) == 9 and meta(out)["n_inputs"] is None
    assert all(p.text_b is None and p.label in (1.0, 0.5, 0.0) for p in pairs)


TRIPLETS = {"task_name": "triplets", "output": {"format": "json", "fields": ["S1", "S2", "S3"], "anchor": "S1",
                                                "pairs": {"S2": "1", "S3": "0"}},
            "labels": {"sts": {"instruction": "Write three sentences as JSON.\nJSON: {", "counter_labels": []}}}


@pytest.mark.parametrize("mode", ["completions", "chat"])
def test_a_structured_output_gives_the_pairs_its_spec_names(server, tmp_path, mode):
    spec = tmp_path / "triplets.json"
    spec.write_text(json.dumps(TRIPLETS))
    out = tmp_path / "t.jsonl"
    pairs = make(server.url, task=str(spec), entries_per_label=12, mode=mode).generate(None, out, progress=False)
    stats = meta(out)["stats"]
    assert stats["sampled"] == 12 and stats["rejected_unparsed"] and stats["accepted"] + stats["rejected_unparsed"] == 12
    assert len(pairs) == 2 * stats["accepted"] - stats["duplicates"]
    assert {p.label for p in pairs} == {1.0, 0.0} and all(p.extra["prompt_label"] == "sts" for p in pairs)
    assert all(p.text_a and p.text_b and p.text_a != p.text_b for p in pairs)


def test_concurrency_is_bounded_and_repeated_inputs_are_asked_once(tmp_path):
    with FakeOpenAIServer(delay=0.05) as srv:
        make(srv.url, concurrency=3, chunk_inputs=2).generate(INPUTS + INPUTS[:1], tmp_path / "p.jsonl", progress=False)
    assert len(srv.bodies) == 18 and max(srv.received.values()) == 1  # the repeated input's requests: the same ones
    assert srv.max_in_flight == 3


def test_fresh_asks_again(server, tmp_path):
    out = tmp_path / "p.jsonl"
    make(server.url).generate(INPUTS, out, progress=False)
    make(server.url).generate(INPUTS, out, progress=False, resume=False)
    assert meta(out)["stats"]["requests_made"] == 18 and set(server.received.values()) == {2}


@pytest.mark.parametrize("failure", [RATE_LIMITED, SERVER_ERROR, {**SERVER_ERROR, "status": 503}])
def test_429_and_5xx_are_retried(tmp_path, failure):
    with FakeOpenAIServer() as clean:
        make(clean.url, concurrency=1).generate(INPUTS, tmp_path / "ref.jsonl", progress=False)
    with FakeOpenAIServer(port=clean.port, script=[failure]) as srv:  # the same URL: the same request keys
        out = tmp_path / "p.jsonl"
        make(srv.url, concurrency=1).generate(INPUTS, out, progress=False)
    stats = meta(out)["stats"]
    assert stats["retries"] == 1 and stats["requests_made"] == 18 and sum(srv.received.values()) == 19
    assert sorted(srv.received.values()) == [1] * 17 + [2] and len(request_files(out)) == 18
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()


def test_retries_run_out_in_one_line(tmp_path):
    with FakeOpenAIServer(script=[SERVER_ERROR] * 3) as srv:
        with pytest.raises(DsgenError) as err:
            make(srv.url, concurrency=1, max_retries=2).generate(INPUTS, tmp_path / "p.jsonl", progress=False)
    msg = str(err.value)
    assert "\n" not in msg and f"POST {srv.url}/completions failed after 3 tries" in msg and "500" in msg
    assert not (tmp_path / "p.jsonl").exists() and request_files(tmp_path / "p.jsonl") == []


@pytest.mark.parametrize("status", [401, 403, 404])
def test_setup_errors_stop_at_once(tmp_path, status):
    """401, 403 and 404 say the key, a permission, the route or the model is wrong: every request would get
    them, so the run stops at the first, retries nothing and caches nothing."""
    with FakeOpenAIServer(script=[{"status": status, "body": json.dumps({"detail": "no such model"})}]) as srv:
        with pytest.raises(DsgenError) as err:
            make(srv.url, concurrency=1).generate(INPUTS, tmp_path / "p.jsonl", progress=False)
        assert sum(srv.received.values()) == 1  # not retried, and nothing queued after it was sent
    assert "\n" not in str(err.value) and f"answered {status}: " in str(err.value) and "no such model" in str(err.value)
    assert "(check " in str(err.value)
    assert not (tmp_path / "p.jsonl").exists() and request_files(tmp_path / "p.jsonl") == []


REFUSED = {  # a non-retryable answer about one request -> the reason it is recorded with
    "400": ({"status": 400, "body": json.dumps({"error": {"message": "prompt too long"}})}, "status 400"),
    "422": ({"status": 422, "body": json.dumps({"detail": "bad field"})}, "status 422"),
    "html": (HTML, "not JSON"),
    "invalid-json": ({"status": 200, "body": '{"choices": [', "content_type": "application/json"}, "not JSON"),
    "no-choices": ({"status": 200, "body": json.dumps({"object": "text_completion"})}, "no choices"),
    "empty-choices": ({"status": 200, "body": json.dumps({"choices": []})}, "no choices"),
    "text-not-string": ({"status": 200, "body": json.dumps({"choices": [{"text": 5}]})}, "no text"),
    "chat-content-null": ({"status": 200, "body": json.dumps({"choices": [{"message": {"content": None}}]})},
                          "no text"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_refused_answer_is_a_rejected_output_and_a_resume_does_not_ask_it_again(tmp_path, case):
    """Issue 30: one non-retryable answer (null content, a 400) aborted the dataset and a resume asked it again,
    forever. Now it is recorded, cached, counted in the sidecar with its reason, and the run goes on."""
    answer, reason = REFUSED[case]
    mode = "chat" if case.startswith("chat") else "completions"
    out = tmp_path / "p.jsonl"
    with FakeOpenAIServer(script=[answer]) as srv:
        pairs = make(srv.url, concurrency=1, mode=mode, max_failed_share=0.1).generate(INPUTS, out, progress=False)
    assert sum(srv.received.values()) == 18 and max(srv.received.values()) == 1  # not retried
    stats = meta(out)["stats"]
    assert stats["rejected_refused"] == 1 and stats["refused_by"] == {reason: 1} and stats["requests_refused"] == 1
    assert stats["accepted"] + sum(stats[f"rejected_{r}"] for r in ("unclosed", "empty", "newline", "refused")) == 18
    assert stats["requests_made"] == 18 and len(pairs) == stats["accepted"] - stats["duplicates"]
    records = [json.loads(f.read_text()) for f in request_files(out)]
    (refused,) = [r for r in records if r["text"] is None]
    assert refused["refused"] == reason and "\n" not in refused["detail"] and refused["request"]["model"] == "fake-model"
    first = out.read_bytes()
    srv.stop()  # nothing listens: the rerun, refusal included, comes from the cache
    make(srv.url, concurrency=1, mode=mode, max_failed_share=0.1).generate(INPUTS, out, progress=False)
    assert out.read_bytes() == first and meta(out)["stats"]["requests_made"] == 0


def test_more_refusals_than_the_share_fail_in_one_line_and_stay_cached(tmp_path):
    """The run fails once more than max_failed_share (default 0.05) of its requests are refused, at the moment
    it is certain (one refusal of 18 here, nothing further asked); the refusal is cached like an answer: a
    rerun that allows it asks it not again."""
    assert OpenAIConfig().max_failed_share == 0.05
    refusal = {"status": 400, "body": json.dumps({"error": {"message": "content filter"}})}
    out = tmp_path / "p.jsonl"
    with FakeOpenAIServer(script=[refusal]) as srv:
        with pytest.raises(DsgenError) as err:
            make(srv.url, concurrency=1).generate(INPUTS, out, progress=False)
        msg = str(err.value)
        assert "\n" not in msg and "1 of 18 requests" in msg and "max_failed_share = 0.05" in msg
        assert "answered 400: " in msg and "content filter" in msg and "--fresh" in msg
        assert sum(srv.received.values()) == 1 and len(request_files(out)) == 1 and not out.exists()
        with pytest.raises(DsgenError, match="1 of 18 requests"):  # the cached refusal: fails again, asks nothing
            make(srv.url, concurrency=1).generate(INPUTS, out, progress=False)
        assert sum(srv.received.values()) == 1
        make(srv.url, concurrency=1, max_failed_share=0.1).generate(INPUTS, out, progress=False)
    assert sum(srv.received.values()) == 18 and max(srv.received.values()) == 1
    assert meta(out)["stats"]["rejected_refused"] == 1 and meta(out)["stats"]["requests_cached"] == 1
    with pytest.raises(DsgenError, match="max_failed_share must be in"):
        OpenAIConfig(max_failed_share=1.5).check()


def test_a_server_killed_mid_run_then_restarted_resumes_without_repeating(tmp_path):
    with FakeOpenAIServer() as ref:
        make(ref.url).generate(INPUTS, tmp_path / "ref.jsonl", progress=False)
    out = tmp_path / "p.jsonl"
    first = FakeOpenAIServer(die_after=7).start()
    with pytest.raises(DsgenError) as err:
        make(first.url, max_retries=2).generate(INPUTS, out, progress=False)
    first.stop()
    msg = str(err.value)
    assert "\n" not in msg and "failed after 3 tries" in msg and "connection error" in msg and "resume" in msg
    assert not out.exists()
    done = len(request_files(out))
    assert done == sum(first.answered.values()) >= 7
    with FakeOpenAIServer(port=first.port) as second:  # restarted at the same address
        make(second.url).generate(INPUTS, out, progress=False)
    assert sum(second.answered.values()) == 18 - done
    assert max((first.answered + second.answered).values()) == 1  # no completed request was repeated
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    stats = meta(out)["stats"]
    assert stats["requests_cached"] == done and stats["requests_made"] == 18 - done


CHILD = """
import sys
from pathlib import Path
from dsgen.generation.openai_api import OpenAIConfig, OpenAIGenerator
cfg = OpenAIConfig(model="fake-model", base_url=sys.argv[1], per_label=2, max_tokens=24, concurrency=2)
OpenAIGenerator(cfg).generate({inputs!r}, Path(sys.argv[2]), progress=False)
"""


def test_a_generator_killed_mid_run_resumes_without_repeating(tmp_path):
    with FakeOpenAIServer() as ref:
        make(ref.url).generate(INPUTS, tmp_path / "ref.jsonl", progress=False)
    out = tmp_path / "p.jsonl"
    with FakeOpenAIServer(hold_after=5) as srv:
        proc = subprocess.Popen([sys.executable, "-c", CHILD.format(inputs=INPUTS), srv.url, str(out)], cwd=REPO,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        deadline = time.time() + 60
        while len(request_files(out)) < 5 and proc.poll() is None and time.time() < deadline:
            time.sleep(0.01)
        assert len(request_files(out)) == 5, proc.stderr.read() if proc.poll() is not None else "timed out"
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        srv.hold_after = None
        srv.release()  # the held requests are dropped unanswered
        assert not out.exists() and srv.total_answered == 5
        make(srv.url).generate(INPUTS, out, progress=False)
    assert max(srv.answered.values()) == 1 and srv.total_answered == 18
    assert out.read_bytes() == (tmp_path / "ref.jsonl").read_bytes()
    assert meta(out)["stats"]["requests_cached"] == 5


def test_the_api_key_is_sent_but_never_written(tmp_path, monkeypatch):
    secret = f"sk-dsgen-test-{uuid.uuid4().hex}"
    monkeypatch.setenv("DSGEN_TEST_KEY", secret)
    unauthorised = {"status": 401, "body": json.dumps({"error": {"message": "Incorrect API key provided"}})}
    with FakeOpenAIServer(script=[unauthorised]) as srv:
        with pytest.raises(DsgenError) as err:
            make(srv.url, api_key_env="DSGEN_TEST_KEY", concurrency=1).generate(INPUTS, tmp_path / "p.jsonl", progress=False)
        assert "answered 401" in str(err.value) and "check DSGEN_TEST_KEY" in str(err.value) and secret not in str(err.value)
        for mode in ("completions", "chat"):
            make(srv.url, api_key_env="DSGEN_TEST_KEY", mode=mode).generate(INPUTS, tmp_path / f"{mode}.jsonl",
                                                                            progress=False)
            make(srv.url, api_key_env="DSGEN_TEST_KEY", mode=mode).generate(INPUTS, tmp_path / f"{mode}.jsonl",
                                                                            progress=False)
    assert set(srv.authorization) == {f"Bearer {secret}"} and len(srv.authorization) == 37
    files = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert len(files) > 36
    for path in files:
        assert secret.encode() not in path.read_bytes(), path


# -- credentials and malformed URLs ---------------------------------------------------------------
def credentialed(url: str, password: str, token: str) -> str:
    """``url`` with a user and password and an ``api_key`` query parameter."""
    return url.replace("http://", f"http://dsgen-user:{password}@") + f"?api_key={token}"


def assert_nowhere(secrets: list[str], texts: list[str], root: Path) -> int:
    """None of ``secrets`` in ``texts`` nor in any file under ``root``; returns how many files were read."""
    files = [p for p in root.rglob("*") if p.is_file()]
    for secret in secrets:
        for text in texts:
            assert secret not in text
        for path in files:
            assert secret.encode() not in path.read_bytes(), path
    return len(files)


def test_credentials_in_the_base_url_are_sent_but_never_written_or_printed(tmp_path):
    """Issue 30: with http://user:secret@host/v1?api_key=token the secret landed in the sidecar, in every
    cached request file and on stdout. `dsgen generate` and `dsgen plan` with such a URL: the server gets the
    credentials (basic auth from the userinfo, the query parameter on every request), and no file under --out
    and no line of either command's output holds them (nor the basic-auth header's encoding)."""
    import base64

    from tests.test_cli import dsgen

    password, token = f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    basic = base64.b64encode(f"dsgen-user:{password}".encode()).decode()
    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(INPUTS) + "\n")
    out = tmp_path / "out" / "pairs.jsonl"
    wide = {"COLUMNS": "1000"}  # no line wrapped through a secret
    with FakeOpenAIServer() as srv:
        url = credentialed(srv.url, password, token)
        gen = dsgen("generate", "--inputs", str(inputs), "--generator", "openai:fake-model", "--base-url", url,
                    "--decay", "0", "--per-label", "1", "--out", str(out), env=wide)
        plan = dsgen("plan", "syncse-partial", "--preset", "smoke", "--generator", "openai:fake-model", "--base-url",
                     url, env=wide)
    assert gen.returncode == 0, gen.stderr
    assert plan.returncode == 0, plan.stderr
    assert len(srv.queries) == 9 and all(q == {"api_key": token} for q in srv.queries)  # sent with every request
    assert set(srv.authorization) == {f"Basic {basic}"}
    masked = srv.url.replace("http://", "http://***@") + "?api_key=***"
    m = meta(out)
    assert m["generator"]["api"] == masked and m["config"]["base_url"] == masked and masked in gen.stdout
    assert m["generator"]["endpoint"] == srv.url.replace("http://", "http://***@") + "/completions?api_key=***"
    assert masked in plan.stdout
    assert assert_nowhere([password, token, basic], [gen.stdout, gen.stderr, plan.stdout, plan.stderr],
                          tmp_path / "out") == 2 + 9


def test_a_base_url_with_a_query_string_keeps_it_after_the_endpoint_path(tmp_path):
    """Issue 30: `.../v1?api_key=...` got the endpoint path appended after the query (a 404) and the error
    printed the token. The path is joined to the URL's path, the query sent with every request; an error
    (here a 401 whose body echoes the token) shows the URL and the server's words with the token masked."""
    token = f"tok-{uuid.uuid4().hex}"
    echo = {"status": 401, "body": json.dumps({"error": {"message": f"Incorrect API key provided: {token}"}})}
    out = tmp_path / "p.jsonl"
    with FakeOpenAIServer(script=[echo]) as srv:
        url = f"{srv.url}?api_key={token}&api-version=2024-06-01"
        with pytest.raises(DsgenError) as err:
            make(url, concurrency=1).generate(INPUTS, out, progress=False)
        msg = str(err.value)
        assert f"POST {srv.url}/completions?api_key=***&api-version=2024-06-01 answered 401" in msg
        assert token not in msg and "Incorrect API key provided: ***" in msg
        pairs = make(url).generate(INPUTS, out, progress=False)
    assert pairs and len(srv.queries) == 19
    assert all(q == {"api_key": token, "api-version": "2024-06-01"} for q in srv.queries)
    assert meta(out)["generator"]["endpoint"] == f"{srv.url}/completions?api_key=***&api-version=2024-06-01"
    assert assert_nowhere([token], [], tmp_path) == 2 + 18


def test_the_dataset_key_does_not_depend_on_the_credentials(tmp_path):
    """Keys are computed from the masked URL (what the sidecar shows): two URLs that differ only in their
    credentials' values make one dataset and the same request keys, so a rotated key reuses every cached
    answer (as a changed api_key_env does); the endpoint still counts, and so does whether credentials were
    sent at all (the masked URL says so)."""
    a = make(credentialed("http://127.0.0.1:1/v1", "pw-aaaa", "tok-aaaa"))
    b = make(credentialed("http://127.0.0.1:1/v1", "pw-bbbb", "tok-bbbb"))
    assert a.base_url == b.base_url == "http://***@127.0.0.1:1/v1?api_key=***"
    assert a.dataset_key(INPUTS) == b.dataset_key(INPUTS)
    spec = a.spec(with_inputs=True)
    assert [s.key for s in a.samples(spec, INPUTS)] == [s.key for s in b.samples(spec, INPUTS)]
    assert make(credentialed("http://127.0.0.1:2/v1", "pw-aaaa", "tok-aaaa")).dataset_key(INPUTS) != a.dataset_key(INPUTS)
    assert make("http://127.0.0.1:1/v1").dataset_key(INPUTS) != a.dataset_key(INPUTS)
    out = tmp_path / "p.jsonl"
    with FakeOpenAIServer() as srv:
        make(credentialed(srv.url, "pw-aaaa", "tok-aaaa")).generate(INPUTS, out, progress=False)
    make(credentialed(srv.url, "pw-bbbb", "tok-bbbb")).generate(INPUTS, out, progress=False)  # nothing listens
    assert meta(out)["stats"]["requests_cached"] == 18 and meta(out)["stats"]["requests_made"] == 0


def test_an_unreachable_endpoint_fails_in_one_line_before_any_progress_bar(tmp_path, capfd):
    """Issue 30: an unreachable --base-url drew a progress-bar line before the one-line error. The first
    request is asked before the bar appears: the error is all a user sees."""
    url = f"http://127.0.0.1:{_free_port()}/v1"  # nothing listens there
    with pytest.raises(DsgenError) as err:
        make(url, max_retries=1).generate(INPUTS, tmp_path / "p.jsonl", progress=True)
    assert "failed after 2 tries" in str(err.value) and "connection error" in str(err.value)
    captured = capfd.readouterr()
    assert captured.err == "" and captured.out == ""
    with FakeOpenAIServer() as srv:  # a reachable one draws its bar
        make(srv.url).generate(INPUTS, tmp_path / "p.jsonl", progress=True)
    assert "generate sts via fake-model" in capfd.readouterr().err


@pytest.mark.parametrize("url", ["notaurl", "127.0.0.1:8000/v1", "ftp://127.0.0.1/v1", "http://127.0.0.1:port/v1",
                                 "http:///v1"])
def test_a_malformed_base_url_is_refused_at_once(tmp_path, monkeypatch, url):
    """Issue 30: a URL without a scheme was retried 6 times over 11 s as a connection error. A base URL that
    is not http(s) with a host is refused with one line before anything is asked or written, from the
    config or from $OPENAI_BASE_URL."""
    with pytest.raises(DsgenError, match=r"is not an http\(s\) URL with a host"):
        OpenAIConfig(model="m", base_url=url).check()
    monkeypatch.setenv("OPENAI_BASE_URL", url)
    started = time.time()
    with pytest.raises(DsgenError, match=r"is not an http\(s\) URL with a host"):
        OpenAIGenerator(OpenAIConfig(model="m", max_retries=5)).generate(INPUTS, tmp_path / "p.jsonl", progress=False)
    assert time.time() - started < 1 and list(tmp_path.iterdir()) == []


def test_dsgen_generate_refuses_a_base_url_without_a_scheme_in_one_line(tmp_path):
    """The command line: `--base-url notaurl` is one line, exit 2, nothing written, no retry."""
    from tests.test_cli import dsgen

    inputs = tmp_path / "in.txt"
    inputs.write_text("\n".join(INPUTS) + "\n")
    res = dsgen("generate", "--inputs", str(inputs), "--generator", "openai:m", "--base-url", "notaurl", "--decay", "0",
                "--out", str(tmp_path / "o" / "p.jsonl"), env={"COLUMNS": "1000"})
    lines = [line for line in (res.stdout + res.stderr).splitlines() if line.strip()]
    assert res.returncode == 2 and len(lines) == 1, res.stdout + res.stderr
    assert "base URL 'notaurl' is not an http(s) URL" in lines[0] and not (tmp_path / "o").exists()


# -- against transformers serve -------------------------------------------------------------------
def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class _Serve:
    """``transformers serve`` on 127.0.0.1, pinned to the dequantised SmolLM2-135M-Instruct folder, started on
    demand and stopped by a test that needs it gone (its cache reruns) or at the module's end. Offline, on the CPU,
    one thread: on a shared 2-core machine a 24-token request takes ~1 s with one thread and 3-10 s with torch's
    default."""

    def __init__(self, exe: Path, folder: Path, log: Path):
        self.exe, self.folder, self.log = exe, folder, log
        self.proc: subprocess.Popen | None = None
        self.url = ""

    def start(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            return
        port = _free_port()
        env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1", "OMP_NUM_THREADS": "1"}
        with self.log.open("a") as log:
            self.proc = subprocess.Popen([str(self.exe), "serve", str(self.folder), "--host", "127.0.0.1", "--port",
                                          str(port), "--device", "cpu"], stdout=log, stderr=subprocess.STDOUT, env=env)
        started = time.time()
        while True:
            if self.proc.poll() is not None:
                pytest.fail(f"transformers serve exited: {self.log.read_text()[-2000:]}")
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.time() - started > 120:
                self.stop()
                pytest.fail(f"transformers serve not ready after 120 s: {self.log.read_text()[-2000:]}")
            time.sleep(0.5)
        print(f"transformers serve ready after {time.time() - started:.1f} s")
        self.url = f"http://127.0.0.1:{port}/v1"

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="module")
def _serve(tmp_path_factory):
    """One server for the module's tests (its start is the slow part), stopped at the module's end."""
    require("fastapi", "serving")
    require("uvicorn", "serving")
    exe = Path(sys.executable).with_name("transformers")
    if not exe.exists():
        pytest.skip(f"no transformers CLI beside {sys.executable}")
    from dsgen.models import dequantised_checkpoint, gguf_path_for

    folder, _ = dequantised_checkpoint(gguf_path_for("smollm2-135m"))
    serve = _Serve(exe, folder, tmp_path_factory.mktemp("serve") / "serve.log")
    try:
        yield serve
    finally:
        serve.stop()


@pytest.fixture
def transformers_server(_serve):
    """(base URL, model id, stop) of the module's running server (started again if a test stopped it)."""
    _serve.start()
    return _serve.url, str(_serve.folder), _serve.stop


@pytest.mark.slow
def test_dsgen_generate_and_a_method_through_transformers_serve(transformers_server, tmp_path, tiny_encoder_dir,
                                                                 sts_data_dir):
    """The command line end to end through a real server: `dsgen generate --generator openai:<model>` and
    `dsgen run syncse-partial --generator openai:<model>` (the server's sampling switched on in the preset)."""
    from tests.test_cli import dsgen

    url, model, stop = transformers_server
    inputs = tmp_path / "in.txt"
    inputs.write_text(INPUTS[0] + "\n")  # one input: 3 requests (a label each), ~2 s apiece on the busy cores
    out = tmp_path / "pairs.jsonl"
    gen = dsgen("generate", "--inputs", str(inputs), "--generator", f"openai:{model}", "--base-url", url, "--decay", "0",
                "--per-label", "1", "--max-new-tokens", "24", "--out", str(out), "--quiet")
    assert gen.returncode == 0, gen.stderr
    assert "openai generator" in gen.stdout and json.loads(out.with_name(out.name + ".meta.json").read_text())[
        "stats"]["requests_made"] == 3
    preset = tmp_path / "tiny.toml"
    preset.write_text(f"""seeds = [1]
data_seeds = [1]
max_inputs = 3
tasks = ["sts16"]
[generation.openai]
extra_body = {{generation_config = '{{"do_sample": true}}'}}
[training]
encoder = "{tiny_encoder_dir}"
device = "cpu"
# 3 inputs train a step or two: no warm-up, and a floor of one step (dsgen.training.fit.training_failure)
warmup_ratio = 0.0
min_trained_steps = 1
[training.contrastive]
batch_size = 4
""")
    run = dsgen("run", "syncse-partial", "--preset", str(preset), "--generator", f"openai:{model}", "--base-url", url,
                "--out", str(tmp_path / "runs"), "--quiet", env={"DSGEN_DATA_DIR": str(sts_data_dir)})
    assert run.returncode == 0, run.stderr + run.stdout
    (result,) = (tmp_path / "runs" / "results").rglob("data-1-seed-1.json")
    extra = json.loads(result.read_text())["extra"]
    assert extra["plan"]["generator"] == "openai" and extra["generated_pairs"] > 0


@pytest.mark.slow
def test_through_transformers_serve(transformers_server, tmp_path):
    """End to end through a real OpenAI-compatible server: both modes, pairs, sidecars and request
    files; then the server is stopped and the reruns come from the cache. It comes after the module's other test on
    the server, which would otherwise pay a second start."""
    url, model, stop = transformers_server
    started = time.time()
    # transformers serve decodes greedily unless asked to sample through its own generation_config field
    sample = {"generation_config": json.dumps({"do_sample": True})}

    def gen(mode: str, **kw) -> OpenAIGenerator:
        return make(url, model=model, mode=mode, per_label=1, max_tokens=24, extra_body=sample, **kw)

    inputs = INPUTS[:2]  # 2 inputs x 3 labels x 1 continuation: 6 requests a mode (each ~1 s on 2 busy cores)

    with pytest.raises(DsgenError, match="answered 400: .*pinned"):  # it serves its pinned model id only
        make(url, model="smollm2", max_retries=0).generate(INPUTS[:1], tmp_path / "wrong.jsonl", progress=False)
    first = {}
    for mode in ("completions", "chat"):
        t = time.time()
        out = tmp_path / f"{mode}.jsonl"
        pairs = gen(mode).generate(inputs, out, progress=False)
        print(f"{mode}: {len(pairs)} pairs from 6 requests in {time.time() - t:.1f} s; {meta(out)['stats']}")
        m = meta(out)
        assert m["stats"]["sampled"] == 6 and m["stats"]["requests_made"] == 6 and m["stats"]["requests_cached"] == 0
        # what the server lists: the folder, with "@main" appended by transformers before 5.24
        assert m["generator"]["served_models"] in ([model], [f"{model}@main"]) and m["self_debiasing"] == SELF_DEBIASING
        assert pairs and all(p.text_a in inputs and p.label in (1.0, 0.5, 0.0) for p in pairs)
        assert all(p.text_b and '"' not in p.text_b and "\n" not in p.text_b for p in pairs)
        records = [json.loads(f.read_text()) for f in request_files(out)]
        assert len(records) == 6 and all(r["request"]["model"] == model and isinstance(r["text"], str) for r in records)
        assert len({r["text"] for r in records}) > 1  # it sampled
        first[mode] = out.read_bytes()
    stop()
    for mode in ("completions", "chat"):
        out = tmp_path / f"{mode}.jsonl"
        gen(mode).generate(inputs, out, progress=False)
        assert out.read_bytes() == first[mode]
        assert meta(out)["stats"]["requests_made"] == 0 and meta(out)["stats"]["requests_cached"] == 6
    print(f"through transformers serve: {time.time() - started:.1f} s after the server was ready")


def test_a_method_runs_through_an_api_generator_in_place_of_the_core(tmp_path, tiny_encoder_dir, sts_data_dir, capfd):
    """`--generator openai:<model>` puts the API generator where a method has the debiased core: the plan
    adapts the method's settings and says what an API cannot do (lambda 0 and why), the run keys and caches
    the dataset like any other, and loads no local LM; a method that needs self-debiasing is refused. The
    base URL carries credentials: no file of the run's folder and nothing it printed holds them (issue 30)."""
    from dsgen.planning import Overrides, plan_run
    from dsgen.presets import Preset
    from dsgen.runs.pipeline import Runner

    preset = Preset(name="unit", seeds=[1], data_seed=3, inputs="stsb-train", max_inputs=4, tasks=["sts16"],
                    generation={"per_label": 2}, training={"encoder": str(tiny_encoder_dir), "batch_size": 8,
                                                          "device": "cpu", "contrastive": {"batch_size": 8},
                                                          "min_trained_steps": 1})  # 4 inputs train 2 steps
    password, token = f"pw-{uuid.uuid4().hex}", f"tok-{uuid.uuid4().hex}"
    with FakeOpenAIServer() as srv:
        ov = Overrides(generator="openai:fake-model", base_url=credentialed(srv.url, password, token))
        plan = plan_run("syncse-partial", preset, 1, ov)
        assert plan.generator == "openai" and plan.generation.model == "fake-model" and plan.generation.mode == "chat"
        assert plan.generation.top_p == 0.9 and plan.generation.per_label == 1  # the method's settings, adapted
        assert plan.origins["generation"]["model"] == "command line" and plan.origins["generation"]["top_p"] == "method"
        assert "self-debiasing off" in plan.notes["generation"]["sampling.decay_constant"]
        assert plan.to_dict()["generator"] == "openai" and ("generation", "sampling.decay_constant") in {
            (r[0], r[1]) for r in plan.rows()}
        with pytest.raises(DsgenError, match="method 'dino' needs self-debiasing"):
            plan_run("dino", preset, 1, ov)
        runner = Runner(tmp_path / "runs", str(sts_data_dir), progress=False)
        result = runner.run(plan)
        assert result.extra["generated_pairs"] > 0 and result.extra["training"]["triplets"] > 0
        sidecar = next((tmp_path / "runs" / "cache" / "datasets").glob("syncse-*.jsonl.meta.json"))
        assert json.loads(sidecar.read_text())["self_debiasing"] == SELF_DEBIASING
        asked = len(srv.bodies)
        again = Runner(tmp_path / "runs", str(sts_data_dir), progress=False).run(plan_run("syncse-partial", preset, 1, ov))
        assert len(srv.bodies) == asked and again.tasks == result.tasks  # a rerun asks nothing
    assert all(q == {"api_key": token} for q in srv.queries)
    masked = srv.url.replace("http://", "http://***@") + "?api_key=***"
    assert result.extra["plan"]["overrides"]["base_url"] == result.extra["plan"]["generation"]["base_url"] == masked
    captured = capfd.readouterr()
    assert assert_nowhere([password, token], [captured.out, captured.err], tmp_path / "runs") > 10
