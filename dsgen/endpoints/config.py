"""The settings of one OpenAI-compatible endpoint, declared once for every component that asks one.

:class:`EndpointConfig` holds the endpoint's fields (model, base URL, key variable, how requests travel,
extra body fields) and the checks every such component applies; the ``openai`` generator's config
(:class:`dsgen.generation.openai_api.OpenAIConfig`) and the ``api-judge``'s
(:class:`dsgen.labelling.api_judge.ApiJudgeConfig`) inherit it and add their own settings.

Its stored form (:meth:`EndpointConfig.to_dict`: sidecars, plans, keys) masks the base URL's credentials
(:mod:`dsgen.endpoints.urls`); the object keeps the URL as given, for the requests.

Example:
    >>> cfg = EndpointConfig(model="m", base_url="http://user:pw@127.0.0.1:8000/v1")
    >>> cfg.to_dict()["base_url"]
    'http://***@127.0.0.1:8000/v1'
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from dsgen.config import Config
from dsgen.endpoints.urls import check_base_url, redact_url
from dsgen.errors import DsgenError

# How requests travel and how many may be refused, not what they ask: left out of every key (the openai
# generator's dataset key, the api-judge's run key), so that a run resumed with other settings of these (fewer
# requests in flight after 429s, a longer timeout) reuses every cached answer. One list for every component
# (``chunk_inputs`` and ``max_failed_share`` are the generator's; a component without them is unaffected).
TRANSPORT = ("concurrency", "timeout", "max_retries", "api_key_env", "chunk_inputs", "max_failed_share")

SET_BY_THE_CLIENT = {"model", "prompt", "messages", "seed", "stream", "n"}  # never from extra_body


@dataclass
class EndpointConfig(Config):
    """The endpoint settings of a component that asks an OpenAI-compatible server (module docstring).

    A subclass names itself in ``who`` (for messages) and, where its stored form predates these shared
    fields, keeps that form's order in ``field_order``. The checks are methods a subclass calls where its
    own validation runs (:meth:`check_url`, :meth:`check_body`), so that each keeps when it validates (the
    generator when it is built, the judge's config when it is made) and which error comes first.

    Args:
        model: the model id the server expects (``transformers serve <folder>`` expects the folder exactly as
            given on its command line).
        base_url: the API's base URL, ending in ``/v1`` (empty: ``$OPENAI_BASE_URL``, then OpenAI's); a
            credential in it is used, never stored (:mod:`dsgen.endpoints.urls`).
        api_key_env: the NAME of the environment variable holding the key (the key is never stored; a local
            server without a key needs none).
        concurrency: requests in flight at once.
        max_retries: retries of a request on 408, 409, 429, 5xx, timeouts and connection errors.
        timeout: seconds before a request times out (then retried).
        extra_body: fields added to every request body, for a server's own extensions (they enter the request
            keys); never one the client sets itself (``SET_BY_THE_CLIENT``).
    """

    model: str = ""
    base_url: str = ""
    api_key_env: str = "OPENAI_API_KEY"
    concurrency: int = 4
    max_retries: int = 5
    timeout: float = 60.0
    extra_body: dict[str, Any] = field(default_factory=dict)

    who: ClassVar[str] = "endpoint"  # the component, in messages (``openai generator``, ``api-judge``)
    # the order of field_names() and to_dict() when it is not the declaration order (empty: declaration order):
    # a subclass's stored order from before these fields were shared, so that its sidecars stay byte-identical
    field_order: ClassVar[tuple[str, ...]] = ()

    @classmethod
    def field_names(cls) -> list[str]:
        names = super().field_names()
        if not cls.field_order:
            return names
        if sorted(cls.field_order) != sorted(names):
            raise TypeError(f"{cls.__name__}.field_order must name each of its fields once: {', '.join(names)}")
        return list(cls.field_order)

    def to_dict(self) -> dict[str, Any]:
        """:meth:`Config.to_dict` in :meth:`field_names` order, with the base URL's credentials masked."""
        out = super().to_dict()
        out["base_url"] = redact_url(out["base_url"])
        return {name: out[name] for name in self.field_names()}

    def check_url(self) -> None:
        """A one-line error when ``base_url`` is set and is not an http(s) URL with a host (an empty one is
        resolved when a client is made)."""
        if self.base_url:
            check_base_url(self.base_url)

    def check_body(self) -> None:
        """A one-line error when ``extra_body`` sets a field the client sets itself."""
        clash = sorted(set(self.extra_body) & SET_BY_THE_CLIENT)
        if clash:
            raise DsgenError(f"{self.who} setting extra_body may not set {', '.join(clash)}: the {self.who} sets them")
