"""Endpoints: one client for OpenAI-compatible servers (OpenAI, vLLM, SGLang, llama.cpp, ``transformers serve``),
shared by every component that asks one (the ``openai`` generator, the ``api-judge``).

| module | role |
| --- | --- |
| :mod:`~dsgen.endpoints.urls` | base URLs: resolved, checked, joined, credentials masked |
| :mod:`~dsgen.endpoints.config` | :class:`EndpointConfig`, the endpoint's settings declared once; :data:`TRANSPORT` |
| :mod:`~dsgen.endpoints.cache` | :class:`RequestCache`, one file per answered request |
| :mod:`~dsgen.endpoints.client` | :class:`ApiClient`: concurrency, retries, refusals |

A layer-2 package: it imports foundations only (errors, config, artifacts, identity, progress) and ``openai``
when a request is made, never a stage.
"""

from dsgen.endpoints.cache import RequestCache
from dsgen.endpoints.client import MAX_FAILED_SHARE, MODES, ApiClient, Sample
from dsgen.endpoints.config import TRANSPORT, EndpointConfig
from dsgen.endpoints.urls import DEFAULT_BASE_URL, check_base_url, join_url, redact_url, resolve_base_url

__all__ = ["ApiClient", "DEFAULT_BASE_URL", "EndpointConfig", "MAX_FAILED_SHARE", "MODES", "RequestCache", "Sample",
           "TRANSPORT", "check_base_url", "join_url", "redact_url", "resolve_base_url"]
