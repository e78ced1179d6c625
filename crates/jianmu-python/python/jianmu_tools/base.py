"""`Tool`, the contract every tool keeps; `ToolNode`, a tool as one workflow step;
`ToolError` and `ToolResult`, what a call raises and returns."""

from __future__ import annotations

import base64
import inspect
import json
from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any


class ToolError(Exception):
    """A call that failed. The message is what a model should read; `kind` says how it
    failed: `invalid_arguments`, `timeout`, `cancelled`, `unknown_tool`,
    `not_compiled`, `denied`, `config`, `runner` (the sandbox broke, not the tool) or
    `failed` (the tool refused or could not do it)."""

    def __init__(self, message: str, *, tool: str | None = None, kind: str = "failed"):
        super().__init__(message)
        self.tool = tool
        self.kind = kind

    @property
    def message(self) -> str:
        return str(self)


@dataclass(frozen=True)
class Image:
    """An image in an answer (`read_file` of a PNG, JPEG, GIF or WebP file)."""

    mime_type: str
    base64: str

    @property
    def data(self) -> bytes:
        return base64.b64decode(self.base64)


class ToolResult(str):
    """The text of an answer, as a `str`, with the rest of it: `structured` (the
    answer as JSON, when the tool has a structured form; its shape is the tool's
    `output_schema`) and `images`."""

    images: tuple[Image, ...]

    def __new__(cls, text: str, structured: Any = None, images: tuple[Image, ...] = ()):
        result = super().__new__(cls, text)
        result._structured = structured
        result._lazy = None
        result.images = tuple(images)
        return result

    @property
    def structured(self) -> Any:
        lazy = self._lazy
        if lazy is not None:
            self._structured = json.loads(lazy.text())
            self._lazy = None
        return self._structured

    @property
    def text(self) -> str:
        return str.__str__(self)


def merge_call_args(args: Any, injected: Mapping[str, Any] | None, prefer_injected: bool) -> Any:
    """The arguments a call runs with: the model's `args` and the runtime's `injected`,
    the injected ones winning unless `prefer_injected` is false. A bare (string)
    argument becomes `{"input": ...}` when anything is injected."""
    if not injected:
        return dict(args) if isinstance(args, Mapping) else args
    if args is None:
        base: dict[str, Any] = {}
    elif isinstance(args, Mapping):
        base = dict(args)
    else:
        base = {"input": args}
    if prefer_injected:
        base.update(injected)
        return base
    return {**injected, **base}


class Tool(ABC):
    """A tool: a name and a description for the model, JSON Schemas of its input and
    output, whether calls may run in parallel, its side effects, and `run`.

    Call it through `execute`, which merges injected arguments and runs the tool here
    or, given a `runner`, there."""

    name: str = "unnamed_tool"
    description: str = "No description provided"
    input_schema: dict[str, Any] = {"type": "string", "description": "Tool input string"}
    output_schema: dict[str, Any] = {"type": "string", "description": "Tool output string"}
    parallel_safe: bool = True
    effect_tags: tuple[str, ...] = ()

    @abstractmethod
    def run(self, input: Any) -> Any:
        """The tool's work: sync or async. A mapping of arguments is passed as keyword
        arguments, anything else as one positional argument."""

    async def execute(
        self,
        args: Any,
        *,
        injected: Mapping[str, Any] | None = None,
        prefer_injected: bool = True,
        runner: Any = None,
        runner_event_context: Mapping[str, Any] | None = None,
    ) -> Any:
        """Calls the tool: `injected` arguments are merged into `args` (winning unless
        `prefer_injected` is false); with a `runner` (a `ToolRunner`, or a sandbox)
        the call runs there and emits its events, else here."""
        call_args = self._merge_call_args(args, injected, prefer_injected)
        if runner is not None:
            from .runner import as_runner

            return await as_runner(runner).run(self, call_args, event_context=runner_event_context)
        return await self._execute_local(call_args)

    def _merge_call_args(
        self, args: Any, injected: Mapping[str, Any] | None = None, prefer_injected: bool = True
    ) -> Any:
        return merge_call_args(args, injected, prefer_injected)

    async def _execute_local(self, call_args: Any) -> Any:
        if isinstance(call_args, Mapping):
            result = self.run(**call_args)
        else:
            result = self.run(call_args)
        if inspect.isawaitable(result):
            result = await result
        return result

    def as_node(
        self,
        args: Any = None,
        *,
        name: str | None = None,
        injected: Mapping[str, Any] | None = None,
        runner: Any = None,
    ) -> ToolNode:
        """This tool bound to fixed arguments, as one step of an explicit workflow."""
        return ToolNode(self, args, name=name, injected=injected, runner=runner)

    def spec(self) -> dict[str, Any]:
        """The tool's attributes as one JSON-ready mapping."""
        return {
            "name": self.name,
            "description": self.description,
            "input_schema": self.input_schema,
            "output_schema": self.output_schema,
            "parallel_safe": self.parallel_safe,
            "effect_tags": list(self.effect_tags),
        }

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name!r}>"


class ToolNode:
    """A tool bound to fixed arguments: a step a workflow runs, or a branch calls."""

    def __init__(
        self,
        tool: Tool,
        args: Any = None,
        *,
        name: str | None = None,
        injected: Mapping[str, Any] | None = None,
        runner: Any = None,
    ):
        self.tool = tool
        self.args = args
        self.name = name or tool.name
        self.injected = dict(injected or {})
        self.runner = runner

    async def run(
        self,
        args: Any = None,
        *,
        injected: Mapping[str, Any] | None = None,
        runner: Any = None,
        event_context: Mapping[str, Any] | None = None,
    ) -> Any:
        """Runs the tool with the bound arguments; `args` given here are laid over
        them (a mapping) or replace them, and `injected` over the bound ones."""
        call_args = self.args
        if isinstance(args, Mapping) and isinstance(call_args, Mapping):
            call_args = {**call_args, **args}
        elif args is not None:
            call_args = args
        if call_args is None:
            call_args = {}
        return await self.tool.execute(
            call_args,
            injected={**self.injected, **(injected or {})},
            runner=runner if runner is not None else self.runner,
            runner_event_context=event_context,
        )

    __call__ = run

    def __repr__(self) -> str:
        return f"<ToolNode {self.name!r} of {self.tool!r}>"
