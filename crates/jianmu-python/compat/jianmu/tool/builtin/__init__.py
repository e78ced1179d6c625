"""`jianmu.tool.builtin`: the framework's documented tool classes, running natively
through `jianmu_tools`, answering as the framework documents: a failure is returned
as text starting with `Error`, not raised (`jianmu_tools` raises `ToolError`), and
`CalculatorTool` refuses any character outside `0123456789+-*/().% ` with
`Error: Only math expressions allowed, got: ...`."""

from typing import Any

import jianmu_tools
from jianmu_tools import ToolError, ToolResult

# The calculator's documented character set.
_MATH = set("0123456789+-*/().% ")


def _as_text(error: ToolError) -> str:
    """A failure as the framework's tools answer it."""
    text = str(error)
    return text if text.startswith("Error") else f"Error: {text}"


class CalculatorTool(jianmu_tools.CalculatorTool):
    """`calculator`: arithmetic on `0123456789+-*/().% `, answered as Python prints it;
    anything else is answered with the documented refusal."""

    def run(self, input: Any = None, **kwargs: Any) -> ToolResult | str:  # type: ignore[override]
        text = kwargs.get("input", input)
        if not isinstance(text, str) or not all(c in _MATH for c in text):
            return f"Error: Only math expressions allowed, got: {text}"
        try:
            return super().run(text)
        except ToolError as e:
            return _as_text(e)


def _answering(native: type[jianmu_tools.BuiltinTool]) -> type[jianmu_tools.BuiltinTool]:
    """`native` with its failures answered as text."""

    async def run(self: Any, input: Any = None, **kwargs: Any) -> ToolResult | str:
        try:
            return await native.run(self, input, **kwargs)
        except ToolError as e:
            return _as_text(e)

    return type(native.__name__, (native,), {"run": run, "__doc__": native.__doc__, "__module__": __name__})


PythonREPLTool = _answering(jianmu_tools.PythonREPLTool)
FileReadTool = _answering(jianmu_tools.FileReadTool)
FileWriteTool = _answering(jianmu_tools.FileWriteTool)
ListDirTool = _answering(jianmu_tools.ListDirTool)
HTTPTool = _answering(jianmu_tools.HTTPTool)
DuckDuckGoSearchTool = _answering(jianmu_tools.DuckDuckGoSearchTool)
GlobSearchTool = _answering(jianmu_tools.GlobSearchTool)
GrepSearchTool = _answering(jianmu_tools.GrepSearchTool)
FileInfoTool = _answering(jianmu_tools.FileInfoTool)
StrReplaceTool = _answering(jianmu_tools.StrReplaceTool)
BashTool = _answering(jianmu_tools.BashTool)

__all__ = [
    "BashTool",
    "CalculatorTool",
    "DuckDuckGoSearchTool",
    "FileInfoTool",
    "FileReadTool",
    "FileWriteTool",
    "GlobSearchTool",
    "GrepSearchTool",
    "HTTPTool",
    "ListDirTool",
    "PythonREPLTool",
    "StrReplaceTool",
]
