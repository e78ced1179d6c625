"""Where calls run (`LocalSandbox`, `DockerSandbox`) and `ToolRunner`, which runs a
call in a sandbox and emits `execution.started`, then `execution.completed` or
`execution.failed`, on an `EventBus`."""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
import uuid
from collections.abc import Callable, Mapping
from typing import Any

from .base import Tool, ToolError
from .builtin import BuiltinTool, Session

Event = dict[str, Any]


class EventBus:
    """Subscribers to call events. An event is a dict: `event` (`execution.started`,
    `execution.completed`, `execution.failed`), `tool`, `call_id`, `parent_call_id`,
    `context` (the caller's event context), `arguments`, `elapsed_us`, `error`. A
    subscriber that raises does not disturb the call."""

    def __init__(self) -> None:
        self._subscribers: dict[int, Callable[[Event], Any]] = {}
        self._next = 0
        self._lock = threading.Lock()

    def subscribe(self, callback: Callable[[Event], Any]) -> int:
        with self._lock:
            self._next += 1
            self._subscribers[self._next] = callback
            return self._next

    def unsubscribe(self, subscription: int) -> bool:
        with self._lock:
            return self._subscribers.pop(subscription, None) is not None

    def emit(self, event: Event) -> None:
        for callback in list(self._subscribers.values()):
            try:
                callback(event)
            except Exception:
                pass


def emit_runtime_event(bus: EventBus | None, kind: str, **fields: Any) -> None:
    """Emits one event of `kind` on `bus` (nothing without a bus)."""
    if bus is not None:
        bus.emit({"event": kind, **fields})


class LocalSandbox:
    """Runs calls in this process: a Python tool calls its function, a built-in tool
    calls into its session (confined to its workspace; the tools that start programs
    isolate them)."""

    async def run_tool(self, tool: Tool, args: Any) -> Any:
        return await tool._execute_local(args)

    def close(self) -> None:
        pass

    def __repr__(self) -> str:
        return "LocalSandbox()"


class DockerSandbox:
    """Runs built-in tools in a hardened Docker container: no network, a read-only
    root, the workspace mounted (or copied in and back), limits on memory, CPUs and
    processes. Keyword arguments are Docker settings (`image`, `memory_mib`, `cpus`,
    `pids_limit`, `network`, `runtime`, `docker_host`, ...). The image must exist
    (`jianmu sandbox build-image`); nothing is pulled.

    `workspace` is the folder mounted (default: each tool's own `base_path`). The
    tools of one provider share one container; it is removed by `close()`. A Python
    function tool cannot run here: its code lives in this process."""

    def __init__(
        self,
        workspace: str | os.PathLike[str] | None = None,
        *,
        timeout: float | None = None,
        **docker: Any,
    ):
        self.workspace = workspace
        self.timeout = timeout
        self.docker = docker
        self._sessions: dict[tuple[str, str], Session] = {}
        self._lock = threading.Lock()

    def session_for(self, tool: BuiltinTool) -> Session:
        """The container session `tool` runs in."""
        local = tool.session
        workspace = self.workspace if self.workspace is not None else local.workspace
        key = (str(workspace), json.dumps(local.settings, sort_keys=True))
        with self._lock:
            session = self._sessions.get(key)
            if session is None:
                session = Session(
                    workspace,
                    settings=local.settings,
                    docker=self.docker,
                    timeout=self.timeout,
                    allow_hosts=local.allow_hosts,
                    checkpoints=local.checkpoints,
                )
                self._sessions[key] = session
        return session

    async def run_tool(self, tool: Tool, args: Any) -> Any:
        if not isinstance(tool, BuiltinTool):
            raise ToolError(
                f"`{tool.name}` is a Python function tool and cannot run in the Docker "
                "sandbox; run it without a runner or with LocalSandbox",
                tool=tool.name,
                kind="runner",
            )
        return await self.session_for(tool).call(tool.name, args)

    def close(self) -> bool:
        """Removes the containers (after bringing copied workspaces back)."""
        with self._lock:
            sessions, self._sessions = list(self._sessions.values()), {}
        return all([s.close() for s in sessions])

    def __repr__(self) -> str:
        return f"DockerSandbox({self.docker!r})"


class ToolRunner:
    """Runs calls in a sandbox (default: `LocalSandbox`) and emits their events on
    `bus`; with `timeout` (seconds), a call still running then is stopped and fails
    with `ToolError(kind="timeout")`."""

    def __init__(
        self,
        sandbox: LocalSandbox | DockerSandbox | None = None,
        *,
        bus: EventBus | None = None,
        timeout: float | None = None,
    ):
        self.sandbox = sandbox if sandbox is not None else LocalSandbox()
        self.bus = bus if bus is not None else EventBus()
        self.timeout = timeout

    @classmethod
    def from_config(cls, execution: Mapping[str, Any], *, bus: EventBus | None = None) -> ToolRunner:
        """From settings like `execution:` of the documented configuration:
        `{"tool_runner": "local" | "docker", "docker": {...Docker settings}}`, or the
        whole configuration (`jianmu.yaml` read as a mapping) that holds it."""
        if "execution" in execution and "tool_runner" not in execution:
            execution = execution.get("execution") or {}
        kind = execution.get("tool_runner", "local")
        if kind == "local":
            return cls(LocalSandbox(), bus=bus)
        if kind == "docker":
            return cls(DockerSandbox(**dict(execution.get("docker") or {})), bus=bus)
        raise ToolError(f"tool_runner must be `local` or `docker`, not `{kind}`", kind="config")

    async def run(self, tool: Tool, args: Any, *, event_context: Mapping[str, Any] | None = None) -> Any:
        name = getattr(tool, "name", type(tool).__name__)
        call_id = uuid.uuid4().hex
        common = {
            "tool": name,
            "call_id": call_id,
            "parent_call_id": None,
            "context": dict(event_context) if event_context is not None else None,
            "arguments": args,
        }
        emit_runtime_event(self.bus, "execution.started", **common, elapsed_us=0, error=None)
        start = time.perf_counter()
        try:
            work = self.sandbox.run_tool(tool, args)
            if self.timeout is not None:
                try:
                    result = await asyncio.wait_for(work, self.timeout)
                except TimeoutError:
                    raise ToolError(
                        f"`{name}` did not finish within {self.timeout:g} s and was stopped",
                        tool=name,
                        kind="timeout",
                    ) from None
            else:
                result = await work
        except BaseException as e:
            error = str(e) or type(e).__name__
            elapsed = int((time.perf_counter() - start) * 1e6)
            emit_runtime_event(self.bus, "execution.failed", **common, elapsed_us=elapsed, error=error)
            raise
        elapsed = int((time.perf_counter() - start) * 1e6)
        emit_runtime_event(self.bus, "execution.completed", **common, elapsed_us=elapsed, error=None)
        return result

    def close(self) -> Any:
        return self.sandbox.close()

    def __repr__(self) -> str:
        return f"ToolRunner({self.sandbox!r})"


def as_runner(runner: Any) -> ToolRunner:
    """`runner` as a `ToolRunner`: a sandbox is wrapped (its calls then emit on a bus
    of their own); anything with `run(tool, args, event_context=)` is used as it is."""
    if isinstance(runner, (LocalSandbox, DockerSandbox)):
        wrapped = getattr(runner, "_runner", None)
        if wrapped is None:
            wrapped = ToolRunner(runner)
            runner._runner = wrapped  # type: ignore[union-attr]
        return wrapped
    return runner
