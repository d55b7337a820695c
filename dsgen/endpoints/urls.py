"""Base URLs of OpenAI-compatible endpoints: resolved, checked, joined, and their credentials masked.

**Credentials in the base URL.** A URL such as ``http://user:secret@host/v1`` or ``https://host/v1?api_key=...``
is used as given for the requests (its query string is sent with every request, after the endpoint's path),
and everywhere it is stored or shown (sidecar, request files, plans, keys, messages) its credentials are
masked by :func:`redact_url`: the userinfo and the value of any parameter whose name says key, token, secret,
password, auth, signature or code become ``***``. The dataset and request keys are computed from the masked
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
import re
from urllib.parse import unquote, urlsplit, urlunsplit

from dsgen.errors import DsgenError

DEFAULT_BASE_URL = "https://api.openai.com/v1"

# a query parameter whose name (split at - _ .) holds one of these words carries a credential
_SECRET_WORDS = {"key", "apikey", "token", "secret", "password", "passwd", "pwd", "auth", "authorization", "sig",
                 "signature", "code", "credential", "credentials"}
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#@\s]*@")


def _secret_name(name: str) -> bool:
    return bool(_SECRET_WORDS & set(re.split(r"[-_.]", unquote(name).lower())))


def resolve_base_url(configured: str = "") -> str:
    """The API's base URL as it will be asked: ``configured``, else ``$OPENAI_BASE_URL``, else OpenAI's,
    without a trailing slash on its path (a query string stays)."""
    url = configured or os.environ.get("OPENAI_BASE_URL") or DEFAULT_BASE_URL
    path, sep, query = url.partition("?")
    return path.rstrip("/") + sep + query


def redact_url(url: str) -> str:
    """``url`` with its credentials masked: the userinfo (``user:secret@``) and the value of every query
    parameter named like a credential (``api_key``, ``key``, ``token``, ``access_token``, ``sig``, ``code``,
    ...) become ``***``. Anything else is kept as written (``api-version=...`` stays), so that the masked URL
    still says which endpoint was asked; works on any string, a malformed URL included."""
    url = _USERINFO.sub(lambda m: (m.group(1) or "") + "***@", url, count=1)
    head, sep, rest = url.partition("?")
    if not sep:
        return url
    query, hsep, fragment = rest.partition("#")
    parts = [f"{part.split('=', 1)[0]}=***" if "=" in part and _secret_name(part.split("=", 1)[0]) else part
             for part in query.split("&")]
    return head + sep + "&".join(parts) + hsep + fragment


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


def url_secrets(url: str) -> list[str]:
    """The credential values ``url`` holds (userinfo parts, credential-named query values), as written and
    decoded, longest first, for scrubbing from messages (:meth:`dsgen.endpoints.ApiClient.scrub`); those of
    fewer than 4 characters are not scrubbed (they would mangle ordinary words)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    values = [v for v in userinfo.split(":", 1) if userinfo]
    values += [part.split("=", 1)[1] for part in parts.query.split("&")
               if "=" in part and _secret_name(part.split("=", 1)[0])]
    found = {x for v in values for x in (v, unquote(v)) if len(x) >= 4}
    return sorted(found, key=len, reverse=True)
