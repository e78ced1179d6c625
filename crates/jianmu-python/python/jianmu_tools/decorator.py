"""`@tool`: a Python function as a tool (`FunctionTool`). It runs in this process."""

from __future__ import annotations

import inspect
import types
import typing
from collections.abc import Callable, Mapping
from typing import Any

from .base import Tool, ToolError

_JSON_TYPES: dict[Any, str] = {
    str: "string",
    int: "integer",
    float: "number",
    bool: "boolean",
    list: "array",
    tuple: "array",
    dict: "object",
}


def _schema_of(annotation: Any) -> dict[str, Any]:
    if annotation is inspect.Parameter.empty or annotation is Any:
        return {}
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        options = [a for a in typing.get_args(annotation) if a is not type(None)]
        if len(options) == 1:
            return _schema_of(options[0])
        return {"anyOf": [_schema_of(a) for a in options]}
    if origin is typing.Literal:
        return {"enum": list(typing.get_args(annotation))}
    base = origin or annotation
    kind = _JSON_TYPES.get(base)
    if kind is None:
        return {}
    schema: dict[str, Any] = {"type": kind}
    if kind == "array" and typing.get_args(annotation):
        item = _schema_of(typing.get_args(annotation)[0])
        if item:
            schema["items"] = item
    return schema


def schema_from_signature(fn: Callable[..., Any]) -> dict[str, Any]:
    """A JSON Schema of `fn`'s parameters: one property per parameter, typed from its
    annotation, required unless it has a default."""
    try:
        hints = typing.get_type_hints(fn)
    except Exception:  # an annotation that cannot be resolved: untyped
        hints = {}
    properties: dict[str, Any] = {}
    required: list[str] = []
    for param in inspect.signature(fn).parameters.values():
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            continue
        schema = _schema_of(hints.get(param.name, param.annotation))
        if param.default is not inspect.Parameter.empty:
            if isinstance(param.default, (str, int, float, bool)) or param.default is None:
                schema["default"] = param.default
        else:
            required.append(param.name)
        properties[param.name] = schema
    schema = {"type": "object", "properties": properties}
    if required:
        schema["required"] = required
    return schema


class FunctionTool(Tool):
    """A tool whose `run` is a Python function, sync or async."""

    def __init__(
        self,
        fn: Callable[..., Any],
        *,
        name: str | None = None,
        description: str | None = None,
        input_schema: dict[str, Any] | None = None,
        output_schema: dict[str, Any] | None = None,
        parallel_safe: bool = True,
        effect_tags: tuple[str, ...] = (),
    ):
        self.fn = fn
        self._signature = inspect.signature(fn)
        self.is_async = inspect.iscoroutinefunction(fn)
        self.name = name or fn.__name__
        doc = inspect.getdoc(fn)
        self.description = description or (doc.strip() if doc else "No description provided")
        self.input_schema = input_schema or schema_from_signature(fn)
        if output_schema is not None:
            self.output_schema = output_schema
        self.parallel_safe = parallel_safe
        self.effect_tags = tuple(effect_tags)

    def run(self, *args: Any, **kwargs: Any) -> Any:
        # A coroutine function's call is awaited by `execute`; a plain one answers here.
        return self.fn(*args, **kwargs)

    async def _execute_local(self, call_args: Any) -> Any:
        # Arguments that do not fit the function are the model's mistake: say which.
        try:
            if isinstance(call_args, Mapping):
                self._signature.bind(**call_args)
            else:
                self._signature.bind(call_args)
        except TypeError as e:
            raise ToolError(
                f"invalid arguments for `{self.name}`: {e}", tool=self.name, kind="invalid_arguments"
            ) from None
        return await super()._execute_local(call_args)


def tool(
    fn: Callable[..., Any] | None = None,
    *,
    name: str | None = None,
    description: str | None = None,
    input_schema: dict[str, Any] | None = None,
    output_schema: dict[str, Any] | None = None,
    parallel_safe: bool = True,
    effect_tags: tuple[str, ...] = (),
) -> Any:
    """Turns a function into a `FunctionTool`: `@tool` or `@tool(name=..., ...)`. The
    name and description default to the function's name and docstring, the input
    schema to one built from its signature."""

    def wrap(f: Callable[..., Any]) -> FunctionTool:
        return FunctionTool(
            f,
            name=name,
            description=description,
            input_schema=input_schema,
            output_schema=output_schema,
            parallel_safe=parallel_safe,
            effect_tags=effect_tags,
        )

    return wrap(fn) if fn is not None else wrap
