"""Jianmu's built-in agent tools for Python.

The documented API of the Jianmu tool system (`Tool`, `@tool`, `ToolSet`,
`BuiltinToolProvider` with its aliases, `execute(args, injected=, prefer_injected=,
runner=)`, `LocalSandbox`/`DockerSandbox`/`ToolRunner` and their events, `as_node`),
with the built-in tools running natively: confined to a workspace, bounded, and
killable. Python function tools run in this process."""

from .base import Image, Tool, ToolError, ToolNode, ToolResult
from .builtin import (
    ALIASES,
    BashTool,
    BuiltinTool,
    CalculatorTool,
    DuckDuckGoSearchTool,
    FileInfoTool,
    FileReadTool,
    FileWriteTool,
    GlobSearchTool,
    GrepSearchTool,
    HTTPTool,
    ListDirTool,
    PythonREPLTool,
    Session,
    StrReplaceTool,
    builtin_specs,
    canonical_tool_name,
)
from .decorator import FunctionTool, tool
from .provider import BuiltinToolProvider, ToolProvider
from .runner import DockerSandbox, EventBus, LocalSandbox, ToolRunner, emit_runtime_event
from .set import ToolSet, merge_groups

__all__ = [
    "ALIASES",
    "BashTool",
    "BuiltinTool",
    "BuiltinToolProvider",
    "CalculatorTool",
    "DockerSandbox",
    "DuckDuckGoSearchTool",
    "EventBus",
    "FileInfoTool",
    "FileReadTool",
    "FileWriteTool",
    "FunctionTool",
    "GlobSearchTool",
    "GrepSearchTool",
    "HTTPTool",
    "Image",
    "ListDirTool",
    "LocalSandbox",
    "PythonREPLTool",
    "Session",
    "StrReplaceTool",
    "Tool",
    "ToolError",
    "ToolNode",
    "ToolProvider",
    "ToolResult",
    "ToolRunner",
    "ToolSet",
    "builtin_specs",
    "canonical_tool_name",
    "emit_runtime_event",
    "merge_groups",
    "tool",
]
