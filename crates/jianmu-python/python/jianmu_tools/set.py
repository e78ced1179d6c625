"""`ToolSet`: the tools an agent is given, by name, instance or provider."""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

from .base import Tool, ToolError
from .builtin import canonical_tool_name
from .provider import BuiltinToolProvider, ToolProvider


def merge_groups(groups: Iterable[Iterable[Tool]]) -> list[Tool]:
    """The tools of `groups`, one per name: a later tool replaces an earlier one of
    the same name, in the earlier one's place (last wins, order kept)."""
    merged: dict[str, Tool] = {}
    for group in groups:
        for tool in group:
            merged[tool.name] = tool
    return list(merged.values())


class ToolSet:
    """An ordered set of tools, one per name."""

    def __init__(self, tools: Iterable[Tool] = ()):
        self._tools: dict[str, Tool] = {t.name: t for t in merge_groups([tools])}

    @classmethod
    def resolve(
        cls,
        names: Iterable[str],
        *,
        provider: BuiltinToolProvider | None = None,
        base_path: str | os.PathLike[str] | None = None,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
    ) -> ToolSet:
        """Built-in tools by name or alias (`["calculator", "file_read"]`)."""
        provider = provider or BuiltinToolProvider(base_path=base_path, settings=settings)
        return cls(provider.resolve_named_tools(names))

    @classmethod
    def from_tools(cls, tools: Iterable[Tool]) -> ToolSet:
        """These tool instances."""
        return cls(tools)

    @classmethod
    def from_providers(cls, providers: Iterable[ToolProvider]) -> ToolSet:
        """Every tool of every provider (a later provider's tool wins a name)."""
        return cls(merge_groups(p.get_tools() for p in providers))

    def merge(self, *others: ToolSet | Iterable[Tool]) -> ToolSet:
        """A new set with the tools of `others` over these (last wins)."""
        return ToolSet(merge_groups([self, *others]))

    @property
    def names(self) -> list[str]:
        return list(self._tools)

    @property
    def tools(self) -> list[Tool]:
        return list(self._tools.values())

    def get(self, name: str) -> Tool | None:
        """The tool `name` (a name or alias), or `None`."""
        return self._tools.get(name) or self._tools.get(canonical_tool_name(name))

    def __getitem__(self, name: str) -> Tool:
        tool = self.get(name)
        if tool is None:
            raise KeyError(name)
        return tool

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def __iter__(self) -> Iterator[Tool]:
        return iter(list(self._tools.values()))

    def __len__(self) -> int:
        return len(self._tools)

    def specs(self) -> list[dict[str, Any]]:
        """Every tool's attributes, in order."""
        return [t.spec() for t in self._tools.values()]

    async def execute(
        self,
        name: str,
        args: Any,
        *,
        injected: Mapping[str, Any] | None = None,
        prefer_injected: bool = True,
        runner: Any = None,
        runner_event_context: Mapping[str, Any] | None = None,
    ) -> Any:
        """Calls tool `name`, as `Tool.execute` does."""
        tool = self.get(name)
        if tool is None:
            raise ToolError(
                f"unknown tool `{name}`; this set has: {', '.join(self._tools)}",
                tool=name,
                kind="unknown_tool",
            )
        return await tool.execute(
            args,
            injected=injected,
            prefer_injected=prefer_injected,
            runner=runner,
            runner_event_context=runner_event_context,
        )

    def __repr__(self) -> str:
        return f"ToolSet({self.names!r})"
