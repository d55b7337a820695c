"""One small generic registry: name -> object, or a lazy ``"module:attr"`` target.

Duplicate names are rejected, unknown names are answered with close matches, and a
registry may load further entries from an entry-point group on first lookup.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from typing import Any, Generic, TypeVar

from dsgen.errors import DsgenError

T = TypeVar("T")


class Registry(Generic[T]):
    """A named collection of objects of one kind.

    Args:
        kind: what the entries are, used in error messages ("method", "trainer").
        base_cls: when given, every entry must be a subclass of it (checked on registration, or on
            first use of a lazy entry, as lm-evaluation-harness does); the registry sets the class's
            ``name`` to the name it is registered under, so a name is written once.
        entry_point_group: optional ``importlib.metadata`` entry-point group whose entries
            are registered the first time the registry is read (``dsgen.trainers``: a plug-in package
            adds a trainer as it adds a method).
        builtins: optional callable run once before the first lookup; it imports the
            modules whose decorators register the built-in entries.

    Example:
        >>> reg = Registry[int]("number")
        >>> reg.add("one", 1)
        1
        >>> reg.get("one")
        1
    """

    def __init__(self, kind: str, base_cls: type | None = None, entry_point_group: str | None = None,
                 builtins: Callable[[], None] | None = None) -> None:
        self.kind = kind
        self.base_cls = base_cls
        self.entry_point_group = entry_point_group
        self._builtins = builtins
        self._entries: dict[str, Any] = {}
        self._loaded = False

    def add(self, name: str, obj: Any) -> Any:
        """Register ``obj`` (or a lazy ``"module:attr"`` string) under ``name``."""
        from dsgen.folders import check_path_name

        check_path_name(f"{self.kind} name", name, "register it under a plain name such as 'my-method'")
        if name in self._entries:
            raise DsgenError(f"{self.kind} '{name}' is registered twice; give one of them another name")
        if not isinstance(obj, str):
            self._accept(name, obj)
        self._entries[name] = obj
        return obj

    def _accept(self, name: str, obj: Any) -> None:
        """Check an entry against ``base_cls`` and give it its name."""
        if self.base_cls is None:
            return
        if not (isinstance(obj, type) and issubclass(obj, self.base_cls)):
            raise DsgenError(f"{self.kind} '{name}' must be a subclass of {self.base_cls.__module__}."
                             f"{self.base_cls.__qualname__} (got {obj!r})")
        own = obj.__dict__.get("name")
        if own and own != name:
            raise DsgenError(f"{self.kind} class {obj.__qualname__} is already registered as '{own}'; register a "
                             f"subclass under '{name}'")
        obj.name = name

    def register(self, name: str) -> Callable[[T], T]:
        """Decorator form of :meth:`add`."""

        def deco(obj: T) -> T:
            self.add(name, obj)
            return obj

        return deco

    def _load(self) -> None:
        if self._loaded:
            return
        self._loaded = True
        if self._builtins is not None:
            self._builtins()
        if self.entry_point_group:
            from importlib.metadata import entry_points

            for ep in entry_points(group=self.entry_point_group):
                if ep.name not in self._entries:
                    self.add(ep.name, ep.value)

    def get(self, name: str) -> T:
        """Return the entry, importing a lazy target on first use."""
        self._load()
        if name not in self._entries:
            raise DsgenError(self.unknown_message(name))
        obj = self._entries[name]
        if isinstance(obj, str) and ":" in obj:
            module, attr = obj.split(":", 1)
            obj = getattr(importlib.import_module(module), attr)
            self._accept(name, obj)
            self._entries[name] = obj
        return obj

    def unknown_message(self, name: str) -> str:
        from dsgen.suggest import unknown

        return unknown(self.kind, name, self.names(), n=3)

    def names(self) -> list[str]:
        self._load()
        return sorted(self._entries)

    def __contains__(self, name: object) -> bool:
        self._load()
        return name in self._entries

    def __iter__(self) -> Iterator[str]:
        return iter(self.names())
