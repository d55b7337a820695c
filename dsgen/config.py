"""Typed configuration dataclasses with ``from_dict`` / ``to_dict``.

Every stage of the pipeline takes one of these; run cards and sidecars are written from
``to_dict()``, and ``from_dict`` rejects unknown keys with a did-you-mean hint.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any, TypeVar

from dsgen.errors import DsgenError

C = TypeVar("C", bound="Config")


class Config:
    """Mixin for dataclasses: strict ``from_dict`` and plain ``to_dict``."""

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any] | None = None, **overrides: Any) -> C:
        values = dict(data or {})
        values.update({k: v for k, v in overrides.items() if v is not None})
        names = [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]
        for key in values:
            if key not in names:
                close = difflib.get_close_matches(key, names, n=1)
                hint = f" (did you mean '{close[0]}'?)" if close else ""
                raise DsgenError(f"unknown {cls.__name__} setting '{key}'{hint}; known: {', '.join(names)}")
        for f in dataclasses.fields(cls):  # type: ignore[arg-type]
            value = values.get(f.name)
            if isinstance(value, dict) and f.default_factory is not dataclasses.MISSING:  # nested config
                default = f.default_factory()
                if isinstance(default, Config):
                    values[f.name] = type(default).from_dict(value)
        return cls(**values)  # type: ignore[call-arg]

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)  # type: ignore[call-overload]

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]
