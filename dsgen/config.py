"""Typed configuration dataclasses with ``from_dict`` / ``to_dict``.

Every stage of the pipeline takes one of these; run cards and sidecars are written from
``to_dict()``, and ``from_dict`` rejects unknown keys with a did-you-mean hint. Both coerce
values to the field's declared type (``100`` for a float field becomes ``100.0``, a list for a
tuple field becomes a tuple), so that two spellings of one setting hash to one cache key.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from functools import lru_cache
from typing import Any, TypeVar

from dsgen.errors import DsgenError
from dsgen.suggest import did_you_mean

C = TypeVar("C", bound="Config")


@lru_cache(maxsize=None)
def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def coerce(tp: Any, value: Any, where: str) -> Any:
    """``value`` as the declared type ``tp``; a one-line error when it cannot be one."""
    if value is None:
        return None
    origin = typing.get_origin(tp)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(tp) if a is not type(None)]
        for option in options:  # the first option the value already is wins, then the first that coerces
            if _is(option, value):
                return coerce(option, value, where)
        errors = []
        for option in options:
            try:
                return coerce(option, value, where)
            except DsgenError as exc:
                errors.append(str(exc))
        raise DsgenError(errors[0] if errors else f"{where}: bad value {value!r}")
    if tp is Any or tp is object:
        return value
    if isinstance(tp, type) and issubclass(tp, Config):
        if isinstance(value, tp):
            return value
        if isinstance(value, dict):
            return tp.from_dict(value)
        raise DsgenError(f"{where} must be a table of {tp.__name__} settings (got {value!r})")
    if tp is bool:
        if isinstance(value, bool):
            return value
        raise DsgenError(f"{where} must be true or false (got {value!r})")
    if tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        raise DsgenError(f"{where} must be a number (got {value!r})")
    if tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        raise DsgenError(f"{where} must be an integer (got {value!r})")
    if tp is str:
        if isinstance(value, str):
            return value
        raise DsgenError(f"{where} must be a string (got {value!r})")
    if origin in (tuple, list):
        if not isinstance(value, (list, tuple)):
            raise DsgenError(f"{where} must be a list (got {value!r})")
        args = typing.get_args(tp)
        item = args[0] if args else Any
        items = [coerce(item, v, f"{where}[{i}]") for i, v in enumerate(value)]
        return tuple(items) if origin is tuple else items
    if origin is dict:
        if not isinstance(value, dict):
            raise DsgenError(f"{where} must be a table (got {value!r})")
        return dict(value)
    return value


def _is(tp: Any, value: Any) -> bool:
    origin = typing.get_origin(tp) or tp
    if tp is float:
        return isinstance(value, float)
    if tp is int:
        return isinstance(value, int) and not isinstance(value, bool)
    return isinstance(origin, type) and isinstance(value, origin)


class Config:
    """Mixin for dataclasses: strict, coercing ``from_dict`` and plain ``to_dict``."""

    @classmethod
    def field_names(cls) -> list[str]:
        return [f.name for f in dataclasses.fields(cls)]  # type: ignore[arg-type]

    @classmethod
    def from_dict(cls: type[C], data: dict[str, Any] | None = None, **overrides: Any) -> C:
        values = dict(data or {})
        values.update({k: v for k, v in overrides.items() if v is not None})
        names = cls.field_names()
        for key in values:
            if key not in names:
                raise DsgenError(f"unknown {cls.__name__} setting '{key}'{did_you_mean(key, names)}; "
                                 f"known: {', '.join(names)}")
        hints = _hints(cls)
        values = {k: coerce(hints[k], v, f"{cls.__name__} setting '{k}'") for k, v in values.items()}
        return cls(**values)  # type: ignore[call-arg]

    def to_dict(self) -> dict[str, Any]:
        """Plain values, coerced to the declared field types (nested configs as dicts)."""
        hints = _hints(type(self))
        out: dict[str, Any] = {}
        for f in dataclasses.fields(self):  # type: ignore[arg-type]
            value = coerce(hints[f.name], getattr(self, f.name), f"{type(self).__name__} setting '{f.name}'")
            out[f.name] = value.to_dict() if isinstance(value, Config) else _plain(value)
        return out

    def replace(self: C, **changes: Any) -> C:
        return dataclasses.replace(self, **changes)  # type: ignore[type-var]


def _plain(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_plain(v) for v in value]
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    return value
