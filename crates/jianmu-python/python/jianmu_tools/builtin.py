"""The built-in tools, which run natively: confined to a workspace, with bounded
inputs and outputs, locally or in a Docker sandbox.

A tool built on its own (`FileReadTool(base_path=...)`) has a session of its own; the
tools one `BuiltinToolProvider` resolves share one, so that `bash` and `bash_output`
see the same background jobs. A session holds the tools' state (the `python_repl`
interpreter, shell sessions) and ends what its calls started when it is closed, when
its tools are gone, or when the interpreter exits."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import threading
import warnings
import weakref
from collections.abc import Mapping
from pathlib import Path
from typing import Any, ClassVar

from . import _native
from .base import Image, Tool, ToolError, ToolResult

_SPECS: dict[str, dict[str, Any]] | None = None
ALIASES: dict[str, str] = dict(_native.aliases())


def builtin_specs() -> dict[str, dict[str, Any]]:
    """Every built-in tool's spec, by name."""
    global _SPECS
    if _SPECS is None:
        _SPECS = {spec["name"]: spec for spec in json.loads(_native.specs())}
    return _SPECS


def canonical_tool_name(name: str) -> str:
    """The canonical name of `name`: `file_read` is `read_file`, `file_write` is
    `write_file`, `web_search` is `duckduckgo_search`, `python_eval` is
    `python_repl`; any other name is itself."""
    return ALIASES.get(name, name)


def _unknown(name: str) -> ToolError:
    known = ", ".join(sorted(builtin_specs()))
    aliases = ", ".join(f"{a} -> {c}" for a, c in sorted(ALIASES.items()))
    return ToolError(
        f"unknown tool `{name}`; the built-in tools are: {known} (aliases: {aliases})",
        tool=name,
        kind="unknown_tool",
    )


# The documented settings whose names differ here: (tool, documented) -> ours.
_SETTING_NAMES: dict[tuple[str, str], str] = {
    ("python_repl", "timeout"): "timeout_secs",
    ("python_repl", "max_output_length"): "max_output",
    ("python_repl", "globals_dict"): "globals",
    ("bash", "timeout"): "timeout_secs",
}


def _tool_settings(settings: Mapping[str, Mapping[str, Any]] | None) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for tool, values in (settings or {}).items():
        name = canonical_tool_name(tool)
        out[name] = {_SETTING_NAMES.get((name, k), k): v for k, v in values.items()}
    return out


_OPEN: weakref.WeakSet[Session] = weakref.WeakSet()


class Session:
    """Where built-in tools run and keep their state: a workspace, tool settings
    (`{"read_file": {"max_file_size": 1024}}`), and either this machine or a Docker
    container of the session's own (`docker`: Docker settings, e.g. `{"image": ...}`).
    Opened on its first call; `close()` ends everything its calls started.

    It takes a checkpoint of the workspace before the first changing call of each
    turn (`begin_turn()`, or a quiet gap), which the `checkpoint_list`,
    `checkpoint_diff` and `checkpoint_restore` tools list, show and undo;
    `checkpoints` holds their settings (`{"enabled": False}`, `{"dir": ...}`)."""

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        settings: Mapping[str, Mapping[str, Any]] | None = None,
        docker: Mapping[str, Any] | None = None,
        timeout: float | None = None,
        allow_hosts: list[str] | tuple[str, ...] = (),
        checkpoints: Mapping[str, Any] | None = None,
    ):
        self.workspace = Path(workspace if workspace is not None else os.getcwd()).resolve()
        self.checkpoints = dict(checkpoints) if checkpoints is not None else None
        self.settings = _tool_settings(settings)
        self.docker = dict(docker) if docker is not None else None
        self.timeout = timeout
        self.allow_hosts = list(allow_hosts)
        self._native: _native.NativeSession | None = None
        self._lock = threading.Lock()

    def native(self) -> _native.NativeSession:
        """The native session, opened now if it is not yet."""
        native = self._native
        if native is None or native.closed:
            with self._lock:
                native = self._native
                if native is None or native.closed:
                    try:
                        native = _native.NativeSession(
                            str(self.workspace),
                            json.dumps(self.settings),
                            None if self.docker is None else json.dumps(self.docker),
                            self.timeout,
                            self.allow_hosts,
                            None if self.checkpoints is None else json.dumps(self.checkpoints),
                        )
                    except (ValueError, RuntimeError) as e:
                        raise ToolError(str(e), kind="config") from None
                    self._native = native
                    _OPEN.add(self)
        return native

    def begin_turn(self) -> None:
        """Marks the start of a turn (a user's message): the next call that changes
        files takes a checkpoint first, however soon it comes."""
        self.native().begin_turn()

    def check(self, name: str) -> None:
        """Builds tool `name` now, so that settings it refuses are reported here."""
        try:
            self.native().check(name)
        except ValueError as e:
            raise ToolError(str(e), tool=name, kind="config") from None

    def spec(self, name: str) -> dict[str, Any]:
        """The spec of tool `name` with this session's settings; the tool is built now,
        so that settings it refuses are reported here."""
        self.check(name)
        return json.loads(self.native().spec(name))

    def call_sync(self, name: str, args: Any) -> ToolResult:
        """Calls `name` and waits (blocking this thread, not others)."""
        return _result(name, self.native().call(name, _dump(name, args)))

    async def call(self, name: str, args: Any) -> ToolResult:
        """Calls `name` without blocking the event loop. Cancelling the awaiting task
        stops the call and what it started."""
        native = self.native()
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(answer: Any) -> None:
            try:
                loop.call_soon_threadsafe(_settle, future, answer)
            except RuntimeError:  # the loop is closed: nobody waits any more
                pass

        answer, call = native.start(name, _dump(name, args), done)
        if call is None:  # answered at once
            return _result(name, answer)
        try:
            answer = await future
        except asyncio.CancelledError:
            call.cancel()
            raise
        return _result(name, answer)

    def close(self) -> bool:
        """Ends every process, job and interpreter the calls started (and removes the
        container, bringing a copied workspace back first). Returns whether everything
        came back; when something did not, a `RuntimeWarning` names each change and
        why."""
        native, self._native = self._native, None
        _OPEN.discard(self)
        if native is None:
            return True
        complete, report = native.close()
        if not complete:
            warnings.warn(f"{self!r} closed: {report}", RuntimeWarning, stacklevel=2)
        return complete

    def __repr__(self) -> str:
        where = "docker" if self.docker is not None else "local"
        return f"<Session {where} {str(self.workspace)!r}>"


@atexit.register
def _close_all() -> None:
    for session in list(_OPEN):
        try:
            session.close()
        except Exception:
            pass
    # Before the interpreter finalizes: no runtime thread may enter Python after it.
    _native.stop_callbacks()


def _settle(future: asyncio.Future[Any], answer: Any) -> None:
    if not future.done():
        future.set_result(answer)


def _dump(name: str, args: Any) -> str:
    try:
        return json.dumps({} if args is None else args, allow_nan=False)
    except (TypeError, ValueError, RecursionError) as e:
        raise ToolError(
            f"invalid arguments for `{name}`: not JSON ({e})", tool=name, kind="invalid_arguments"
        ) from None


def _result(name: str, answer: tuple[bool, str, Any, list[tuple[str, str]], str]) -> ToolResult:
    ok, text, structured, images, kind = answer
    if not ok:
        raise ToolError(text, tool=name, kind=kind)
    result = ToolResult(text, None, tuple(Image(mime, data) for mime, data in images) if images else ())
    # Decoded on first use: most callers read the text alone.
    result._lazy = structured
    return result


class BuiltinTool(Tool):
    """A built-in tool by name (`BuiltinTool("grep_search")`). Keyword arguments are
    the tool's settings (`max_file_size=...`); `base_path` is its workspace (default:
    the current folder). Every path it takes is inside the workspace."""

    tool_name: ClassVar[str | None] = None

    def __init__(
        self,
        name: str | None = None,
        *,
        base_path: str | os.PathLike[str] | None = None,
        session: Session | None = None,
        **settings: Any,
    ):
        wanted = name or self.tool_name
        if wanted is None:
            raise ToolError("BuiltinTool needs a tool name", kind="unknown_tool")
        spec = builtin_specs().get(canonical_tool_name(wanted))
        if spec is None:
            raise _unknown(wanted)
        name = spec["name"]
        if session is None:
            session = Session(base_path, settings={name: settings} if settings else None)
        elif settings:
            raise ToolError(
                f"`{name}`: give settings to the session, not to a tool that shares one",
                tool=name,
                kind="config",
            )
        if name in session.settings:
            # Settings can change what the model is told (limits in the description).
            spec = session.spec(name)
        self.name = spec["name"]
        self.description = spec["description"]
        self.input_schema = spec["input_schema"]
        self.output_schema = spec["output_schema"]
        self.parallel_safe = spec["parallel_safe"]
        self.effect_tags = tuple(spec["effect_tags"])
        self.session = session

    @property
    def base_path(self) -> Path:
        return self.session.workspace

    def _args(self, input: Any, kwargs: dict[str, Any]) -> Any:
        if input is None:
            return kwargs
        if not kwargs and self.input_schema.get("type") == "string":
            return input
        if self.input_schema.get("type") == "string":
            return {"input": input, **kwargs}
        # A positional argument is the first required one (`path`, `command`, ...).
        first = (self.input_schema.get("required") or ["input"])[0]
        return {first: input, **kwargs}

    async def run(self, input: Any = None, **kwargs: Any) -> ToolResult:
        """Calls the tool here (in its session) without blocking the event loop."""
        return await self.session.call(self.name, self._args(input, kwargs))

    def call_sync(self, input: Any = None, **kwargs: Any) -> ToolResult:
        """Calls the tool and waits: for scripts without an event loop."""
        return self.session.call_sync(self.name, self._args(input, kwargs))

    async def _execute_local(self, call_args: Any) -> Any:
        return await self.session.call(self.name, call_args)

    def close(self) -> bool:
        """Closes the tool's session (and so ends what its calls started)."""
        return self.session.close()


class CalculatorTool(BuiltinTool):
    """`calculator`: arithmetic on `0123456789+-*/().% `, answered as Python prints it."""

    tool_name = "calculator"

    def run(self, input: Any = None, **kwargs: Any) -> ToolResult:  # type: ignore[override]
        # The documented calculator's `run` is synchronous; it still runs natively.
        return self.call_sync(input, **kwargs)


def _builtin_class(class_name: str, name: str, doc: str) -> type[BuiltinTool]:
    return type(class_name, (BuiltinTool,), {"tool_name": name, "__doc__": doc, "__module__": __name__})


PythonREPLTool = _builtin_class("PythonREPLTool", "python_repl", "`python_repl`: a persistent Python interpreter.")
FileReadTool = _builtin_class("FileReadTool", "read_file", "`read_file`: reads a file of the workspace.")
FileWriteTool = _builtin_class("FileWriteTool", "write_file", "`write_file`: writes or appends to a file.")
ListDirTool = _builtin_class("ListDirTool", "list_dir", "`list_dir`: lists a folder.")
HTTPTool = _builtin_class("HTTPTool", "http_request", "`http_request`: an HTTP request.")
DuckDuckGoSearchTool = _builtin_class(
    "DuckDuckGoSearchTool", "duckduckgo_search", "`duckduckgo_search`: a web search."
)
GlobSearchTool = _builtin_class("GlobSearchTool", "glob_search", "`glob_search`: files by glob pattern.")
GrepSearchTool = _builtin_class("GrepSearchTool", "grep_search", "`grep_search`: text in files.")
FileInfoTool = _builtin_class("FileInfoTool", "file_info", "`file_info`: size, time, type of a path.")
StrReplaceTool = _builtin_class("StrReplaceTool", "str_replace", "`str_replace`: replaces text in a file.")
BashTool = _builtin_class("BashTool", "bash", "`bash`: runs a shell command.")

# The documented classes; every other built-in tool is `BuiltinTool(name)`.
BUILTIN_CLASSES: dict[str, type[BuiltinTool]] = {
    cls.tool_name: cls  # type: ignore[misc]
    for cls in (
        CalculatorTool,
        PythonREPLTool,
        FileReadTool,
        FileWriteTool,
        ListDirTool,
        HTTPTool,
        DuckDuckGoSearchTool,
        GlobSearchTool,
        GrepSearchTool,
        FileInfoTool,
        StrReplaceTool,
        BashTool,
    )
}
