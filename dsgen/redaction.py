"""Credentials masked wherever a URL or a command line is recorded or printed: one function for both.

A URL such as ``http://user:secret@host/v1?api_key=...`` is used as given for requests, and everywhere it is
stored or shown (sidecars, request files, plans, keys, messages, the *Command* line of every table, report and
export, the lock file) it goes through :func:`redact_url`, and a command line through :func:`redact_command`:

- the userinfo (``user:secret@``) becomes ``***@``;
- the value of every query parameter becomes ``***`` unless the parameter is known harmless
  (:data:`HARMLESS_PARAMETERS`: ``api-version``, ``model``, ...): ``?bearer=``, ``?jwt=``, ``?pass=``,
  ``?sk=`` and names nobody foresaw are masked;
- a path segment that looks like a token becomes ``***``: one that starts like a known key (``sk-``, ``key-``,
  ``ghp_``, ...) or a single run of 24 or more letters and digits holding upper case, lower case and digits
  (``/v1/AbCdEf0123...``); a model or deployment name (``Meta-Llama-3.1-70B-Instruct``, words joined by
  hyphens) is kept, so that the masked URL still says which endpoint was asked.

Dataset and request keys are computed from the masked URL: a rotated credential reuses every cached answer.

Example:
    >>> redact_url("http://user:pw@127.0.0.1:8000/v1?api_key=abc&api-version=2&jwt=x.y.z")
    'http://***@127.0.0.1:8000/v1?api_key=***&api-version=2&jwt=***'
    >>> redact_command("dsgen compare dino --base-url=https://host/v1/sk-abcdefgh12345678 --preset smoke")
    'dsgen compare dino --base-url=https://host/v1/*** --preset smoke'
"""

from __future__ import annotations

import re
from urllib.parse import unquote, urlsplit

# query parameters whose values say nothing secret: the only ones shown
HARMLESS_PARAMETERS = frozenset({"api-version", "api_version", "apiversion", "version", "v", "model", "format",
                                 "region", "location", "deployment", "stream", "timeout", "lang", "language"})
_USERINFO = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*://)?[^/?#@\s]*@")
_KEY_PREFIX = re.compile(r"^(sk|pk|rk|key|token|tok|api|bearer|ghp|gho|ghs|github_pat|hf|xox[abprs]|glpat|AKIA)[-_]",
                         re.IGNORECASE)
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"]+")


def secret_parameter(name: str) -> bool:
    """Whether a query parameter named ``name`` carries a secret: every one not known harmless."""
    return unquote(name).strip().lower() not in HARMLESS_PARAMETERS


def token_segment(segment: str) -> bool:
    """Whether a URL path segment looks like a credential (see the module's rules)."""
    text = unquote(segment)
    if _KEY_PREFIX.match(text) and len(text) >= 8:
        return True
    return (len(text) >= 24 and re.fullmatch(r"[A-Za-z0-9_.~+/=]+", text) is not None
            and any(c.isupper() for c in text) + any(c.islower() for c in text) + any(c.isdigit() for c in text) >= 2
            and any(c.isdigit() for c in text))


def redact_url(url: str) -> str:
    """``url`` with its credentials masked (userinfo, every query value not known harmless, token-like path
    segments); works on any string, a malformed URL included."""
    url = _USERINFO.sub(lambda m: (m.group(1) or "") + "***@", url, count=1)
    head, sep, rest = url.partition("?")
    query, hsep, fragment = rest.partition("#")
    if not sep:
        head, hsep, fragment = url.partition("#")
    scheme, colon, tail = head.partition("://")
    if colon:
        host, slash, path = tail.partition("/")
        head = scheme + colon + host + slash + "/".join("***" if token_segment(s) else s for s in path.split("/"))
    if not sep:
        return head + hsep + fragment
    parts = [f"{part.split('=', 1)[0]}=***" if "=" in part and secret_parameter(part.split("=", 1)[0]) else part
             for part in query.split("&")]
    return head + sep + "&".join(parts) + hsep + fragment


def redact_command(command: str) -> str:
    """``command`` (a command line as recorded) with every URL in it masked by :func:`redact_url`."""
    return _URL.sub(lambda m: redact_url(m.group(0)), command)


def url_secrets(url: str) -> list[str]:
    """The credential values ``url`` holds (userinfo parts, secret query values, token-like path segments), as
    written and decoded, longest first, for scrubbing from messages; those of fewer than 4 characters are not
    scrubbed (they would mangle ordinary words)."""
    parts = urlsplit(url)
    userinfo = parts.netloc.rpartition("@")[0]
    values = [v for v in userinfo.split(":", 1) if userinfo]
    values += [part.split("=", 1)[1] for part in parts.query.split("&")
               if "=" in part and secret_parameter(part.split("=", 1)[0])]
    values += [s for s in parts.path.split("/") if token_segment(s)]
    found = {x for v in values for x in (v, unquote(v)) if len(x) >= 4}
    return sorted(found, key=len, reverse=True)


def command_block(command: str) -> list[str]:
    """The markdown lines that record ``command`` in a table, report or analysis (masked), none when empty."""
    return ["Command:", "", "```bash", redact_command(command), "```", ""] if command else []
