"""The request cache: one JSON file per answered request, so that a rerun asks nothing.

**Cache and resume.** Every request and its answer are one JSON file ``<out>.requests/<key>.json``, named by
:func:`dsgen.identity.request_key` (endpoint, base URL with its credentials masked, model, request body; never
the API key) and written atomically once the answer arrived (:class:`~dsgen.endpoints.ApiClient` writes them).
A rerun reads the files and makes no network call; a run interrupted by a crash, a kill or a dead server
resumes and repeats no completed request. The folder is kept after success (it makes reruns free); the
``openai`` generator's ``resume=False`` (``--fresh``) deletes it first (:meth:`RequestCache.clear`). The API
key is read from the environment variable named by ``api_key_env`` and is never written anywhere.

Example:
    >>> cache = RequestCache(Path("pairs.jsonl"))
    >>> cache.folder.name
    'pairs.jsonl.requests'
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from dsgen.artifacts import write_json


class RequestCache:
    """The ``<out>.requests/`` folder: one JSON file per answered request, named by its key.

    Args:
        out: the artefact the requests make (a pairs file; the api-judge's cache folder); the folder is its
            sibling ``<out>.requests``.
    """

    def __init__(self, out: Path) -> None:
        self.folder = out.with_name(out.name + ".requests")

    def path(self, key: str) -> Path:
        return self.folder / f"{key}.json"

    def get(self, key: str) -> dict[str, Any] | None:
        """The cached record of ``key`` (an answer's text, or a refusal's reason), or None (a file that does
        not read as a record is not one)."""
        try:
            record = json.loads(self.path(key).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return None
        ok = isinstance(record, dict) and (isinstance(record.get("text"), str) or isinstance(record.get("refused"), str))
        return record if ok else None

    def put(self, key: str, record: dict[str, Any]) -> None:
        write_json(self.path(key), record)

    def clear(self) -> None:
        import shutil

        shutil.rmtree(self.folder, ignore_errors=True)
