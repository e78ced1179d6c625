"""`BuiltinToolProvider`: built-in tools by name (or alias), built when asked for."""

from __future__ import annotations

import os
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from .base import Tool, ToolError
from .builtin import BUILTIN_CLASSES, BuiltinTool, Session, _unknown, builtin_specs, canonical_tool_name


class ToolProvider(ABC):
    """Something that offers tools (`ToolSet.from_providers`)."""

    @abstractmethod
    def get_tools(self) -> list[Tool]:
        """Every tool it offers."""


class BuiltinToolProvider(ToolProvider):
    """Resolves built-in tools by name or alias. The tools it builds share one
    `Session`: one workspace (`base_path`, default the current folder), the tool
    settings in `settings` (`{"read_file": {"max_file_size": 1024}}`), and their state.
    Pass `session` to share one across providers, or a `Session(docker=...)` to run
    every call in a container."""

    def __init__(
        self,
        *,
        base_path: str | os.PathLike[str] | None = None,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        session: Session | None = None,
    ):
        if session is not None and (base_path is not None or settings):
            raise ToolError("give base_path and settings to the session", kind="config")
        self.session = session or Session(base_path, settings=settings)
        self._builtins: dict[str, Callable[..., Tool]] | None = None

    def _ensure_builtins(self) -> dict[str, Callable[..., Tool]]:
        if self._builtins is None:
            builtins: dict[str, Callable[..., Tool]] = {}
            for name in builtin_specs():
                builtins[name] = BUILTIN_CLASSES.get(name, BuiltinTool)
            self._builtins = builtins
        return self._builtins

    def register_tool(self, name: str, cls: Callable[..., Tool]) -> None:
        """Adds (or replaces) `name`: `cls()` builds it."""
        self._ensure_builtins()[name] = cls

    def canonical_tool_name(self, name: str) -> str:
        return canonical_tool_name(name)

    def available_tools(self) -> list[str]:
        """Every name it resolves, sorted."""
        return sorted(self._ensure_builtins())

    def get_tool(self, name: str) -> Tool:
        """The tool `name` (a name or alias)."""
        canonical = canonical_tool_name(name)
        factory = self._ensure_builtins().get(canonical)
        if factory is None:
            raise _unknown(name)
        if isinstance(factory, type) and issubclass(factory, BuiltinTool):
            # Built on the shared session, with its settings (refused ones raise here).
            return factory(canonical, session=self.session)
        return factory()

    def resolve_named_tools(self, names: Iterable[str]) -> list[Tool]:
        """The tools `names` (names or aliases), in order."""
        return [self.get_tool(name) for name in names]

    def get_tools(self) -> list[Tool]:
        """Every tool, sorted by name."""
        return [self.get_tool(name) for name in self.available_tools()]

    def close(self) -> bool:
        """Closes the shared session: ends what the calls started."""
        return self.session.close()
