"""Base URLs of OpenAI-compatible endpoints: resolved, checked, joined, and their credentials masked.

**Credentials in the base URL.** A URL such as ``http://user:secret@host/v1`` or ``https://host/v1?api_key=...``
is used as given for the requests (its query string is sent with every request, after the endpoint's path),
and everywhere it is stored or shown (sidecar, request files, plans, keys, messages) its credentials are
masked by :func:`dsgen.redaction.redact_url` (the userinfo, every query value not known harmless, token-like
path segments). The dataset and request keys are computed from the masked
URL, so they do not change when only the credentials do (a rotated key reuses every cached answer, as a
changed ``api_key_env`` does) and can be recomputed from what the sidecar shows.

Example:
    >>> redact_url("http://user:pw@127.0.0.1:8000/v1?api_key=abc&api-version=2")
    'http://***@127.0.0.1:8000/v1?api_key=***&api-version=2'
    >>> join_url("http://127.0.0.1:8000/v1?k=v", "completions")
    'http://127.0.0.1:8000/v1/completions?k=v'
"""

from __future__ import annotations

import os
from urllib.parse import urlsplit, urlunsplit

from dsgen.errors import DsgenError
from dsgen.redaction import redact_url

__all__ = ["DEFAULT_BASE_URL", "check_base_url", "join_url", "redact_url", "resolve_base_url"]

DEFAULT_BASE_URL = "https://api.openai.com/v1"

def resolve_base_url(configured: str = "") -> str:
    """The API's base URL as it will be asked: ``configured``, else ``$OPENAI_BASE_URL``, else OpenAI's,
    without a trailing slash on its path (a query string stays)."""
    url = configured or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    path, sep, query = url.partition("?")
    return path.rstrip("/") + sep + query


def check_base_url(url: str) -> str:
    """``url`` when it is an http(s) URL with a host; else a one-line error at once (a URL without a scheme
    would otherwise reach the client, fail as a connection error and be retried)."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018 -- raises on a port that is not a number
        ok = parts.scheme in ("http", "https") and bool(parts.hostname)
    except ValueError:
        ok = False
    if not ok:
        raise DsgenError(f"the base URL {redact_url(url)!r} is not an http(s) URL with a host (e.g. "
                         "http://127.0.0.1:8000/v1); set --base-url or base_url")
    return url


def join_url(base: str, path: str) -> str:
    """``path`` under ``base``'s path, the query string kept after it (``.../v1?k=v`` + ``completions`` ->
    ``.../v1/completions?k=v``)."""
    parts = urlsplit(base)
    return urlunsplit((parts.scheme, parts.netloc, f"{parts.path.rstrip('/')}/{path}", parts.query, parts.fragment))
