"""The endpoint package on its own: the shared settings (stored form, order, checks), the client made by keyword
or from a config, and its floor (it imports no stage). Requests against a server are tested through their
users (tests/generation/test_openai_api.py, tests/labelling/test_api_judge.py)."""

from __future__ import annotations

import ast
import subprocess
import sys
from dataclasses import dataclass
from typing import ClassVar

import pytest

from dsgen.endpoints import ApiClient, EndpointConfig, redact_url
from dsgen.errors import DsgenError
from dsgen.generation.openai_api import OpenAIConfig
from dsgen.labelling.api_judge import ApiJudgeConfig

# the stored order of the two configs (sidecars, plans, messages): as it was before the endpoint fields were shared
OPENAI_ORDER = ["model", "base_url", "api_key_env", "task", "mode", "per_label", "entries_per_label", "temperature",
                "top_p", "max_tokens", "concurrency", "max_retries", "timeout", "max_failed_share", "allow_newlines",
                "keep_unclosed", "remove_duplicates", "chunk_inputs", "seed", "extra_body"]
JUDGE_ORDER = ["model", "prompt", "chat", "answer_prefix", "read", "parse", "answer_tokens", "max_score",
               "max_per_x1_score", "replace_label", "label_smoothing", "judge_random_pairs", "max_abstention_share",
               "batch_size", "device", "dtype", "base_url", "api_key_env", "concurrency", "max_retries", "timeout",
               "top_logprobs", "max_tokens", "extra_body"]


def test_the_stored_form_keeps_each_configs_order_and_masks_the_url():
    url = "http://user:s3cret@127.0.0.1:8000/v1?api_key=abcd&api-version=2"
    for cfg, order in ((OpenAIConfig(base_url=url), OPENAI_ORDER), (ApiJudgeConfig(base_url=url), JUDGE_ORDER)):
        assert type(cfg).field_names() == order and list(cfg.to_dict()) == order
        assert cfg.to_dict()["base_url"] == redact_url(url) == "http://***@127.0.0.1:8000/v1?api_key=***&api-version=2"
        assert cfg.base_url == url  # the object keeps it as given, for the requests
    assert ApiJudgeConfig().model == "" and OpenAIConfig.from_dict(OpenAIConfig().to_dict()) == OpenAIConfig()
    with pytest.raises(DsgenError, match="known: model, base_url, api_key_env, task, mode,"):
        OpenAIConfig.from_dict({"modle": "m"})


def test_a_field_order_that_misses_a_field_is_refused():
    @dataclass
    class Partial(EndpointConfig):
        extra: int = 1
        field_order: ClassVar[tuple[str, ...]] = ("model", "extra")

    with pytest.raises(TypeError, match="field_order must name each of its fields once"):
        Partial().to_dict()


def test_the_checks_name_the_component():
    @dataclass
    class Tool(EndpointConfig):
        who: ClassVar[str] = "my tool"

    with pytest.raises(DsgenError, match="my tool setting extra_body may not set n, seed: the my tool sets them"):
        Tool(extra_body={"seed": 1, "n": 2, "top_k": 5}).check_body()
    with pytest.raises(DsgenError, match=r"the base URL 'ftp://\*\*\*@h/v1' is not an http\(s\) URL"):
        Tool(base_url="ftp://u:password@h/v1").check_url()
    Tool().check_url()  # empty: resolved when a client is made


def test_the_client_is_made_by_keyword_or_from_a_config(monkeypatch):
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with pytest.raises(TypeError):
        ApiClient("m", "chat")  # type: ignore[misc]
    cfg = ApiJudgeConfig(model="m", base_url="http://127.0.0.1:1/v1/?token=abcdef", concurrency=2, timeout=5.0)
    client = ApiClient.from_config(cfg, mode="chat", max_failed_share=0.2, share_setting="[labelling] x")
    assert (client.who, client.model, client.concurrency, client.timeout, client.max_retries) == ("api-judge", "m", 2,
                                                                                                5.0, 5)
    assert client.endpoint == "http://127.0.0.1:1/v1/chat/completions?token=***"
    assert client.scrub("refused abcdef") == "refused ***"
    same = ApiClient(model="m", mode="chat", base_url=cfg.base_url, concurrency=2, timeout=5.0, max_failed_share=0.2,
                     who="api-judge", share_setting="[labelling] x")
    assert vars(same) == vars(client)


def test_the_package_imports_no_stage():
    """Layer 2: foundations only (and ``openai`` when a request is made)."""
    code = ("import sys, dsgen.endpoints; "
            "print(sorted(m for m in sys.modules if m.startswith(('dsgen.', 'openai', 'torch', 'transformers'))))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    higher = ("generation", "labelling", "reweighting", "training", "evaluation", "data", "scheduling", "runner",
              "planning", "cli", "claims", "export", "models", "encoders", "taskspec")
    assert not [m for m in ast.literal_eval(loaded) if m.split(".")[1] in higher or not m.startswith("dsgen.")]
