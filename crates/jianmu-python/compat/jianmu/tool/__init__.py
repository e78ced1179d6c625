"""`jianmu.tool`, the module path of the Jianmu framework's tool system, over
`jianmu_tools`: code written for the framework imports unchanged.

Installed by the `jianmu-tools-compat` distribution, beside `jianmu-tools`. It owns
`jianmu/tool/`; `jianmu` stays a namespace. Do not install it where the framework itself
is installed: both would own `jianmu.tool` (docs/python-compat.md)."""

from jianmu_tools import (
    BuiltinToolProvider,
    DockerSandbox,
    EventBus,
    FunctionTool,
    Image,
    LocalSandbox,
    Tool,
    ToolError,
    ToolNode,
    ToolProvider,
    ToolResult,
    ToolRunner,
    ToolSet,
    emit_runtime_event,
    merge_groups,
    tool,
)

__all__ = [
    "BuiltinToolProvider",
    "DockerSandbox",
    "EventBus",
    "FunctionTool",
    "Image",
    "LocalSandbox",
    "Tool",
    "ToolError",
    "ToolNode",
    "ToolProvider",
    "ToolResult",
    "ToolRunner",
    "ToolSet",
    "emit_runtime_event",
    "merge_groups",
    "tool",
]
