"""The reference for the dispatch benchmark: the Python tools' call path in asyncio.

Tool.execute merges injected arguments and delegates to a ToolRunner, which emits
execution.started / execution.completed around InProcess.run_tool, as the Python tools'
base.py, runner.py and set.py describe. Prints seconds per call.
"""
import asyncio
import sys
import time


class EventBus:
    def __init__(self):
        self.subscribers = []

    def emit(self, name, payload):
        for subscriber in self.subscribers:
            subscriber(name, payload)


def emit_runtime_event(bus, name, **payload):
    bus.emit(name, payload)


class Tool:
    name = "noop"
    input_schema = {"type": "object", "properties": {}}

    def _merge_call_args(self, args, injected, prefer_injected):
        merged = dict(args or {})
        for key, value in (injected or {}).items():
            if prefer_injected or key not in merged:
                merged[key] = value
        return merged

    async def execute(self, args, *, injected=None, prefer_injected=True,
                      runner=None, runner_event_context=None):
        call_args = self._merge_call_args(args, injected, prefer_injected)
        if runner is not None:
            return await runner.run(self, call_args, event_context=runner_event_context)
        return await self._execute_local(call_args)

    async def _execute_local(self, args):
        return self.run(args)

    def run(self, input):
        return ""


class InProcess:
    async def run_tool(self, tool, args):
        return await tool._execute_local(args)


class ToolRunner:
    def __init__(self, sandbox, bus):
        self._sandbox = sandbox
        self._bus = bus

    async def run(self, tool, args, *, event_context=None):
        tool_name = getattr(tool, "name", type(tool).__name__)
        started = time.perf_counter()
        emit_runtime_event(self._bus, "execution.started", tool=tool_name, context=event_context)
        try:
            result = await self._sandbox.run_tool(tool, args)
        except Exception as exc:
            emit_runtime_event(self._bus, "execution.failed", tool=tool_name,
                               context=event_context, error=str(exc),
                               duration=time.perf_counter() - started)
            raise
        emit_runtime_event(self._bus, "execution.completed", tool=tool_name,
                           context=event_context, duration=time.perf_counter() - started)
        return result


class ToolSet:
    def __init__(self, tools):
        self._tools = {tool.name: tool for tool in tools}

    async def execute(self, name, args, runner=None):
        return await self._tools[name].execute(args, runner=runner)


async def main(n):
    tools = ToolSet([Tool()])
    bus = EventBus()
    seen = [0]
    bus.subscribers.append(lambda name, payload: seen.__setitem__(0, seen[0] + 1))
    runner = ToolRunner(InProcess(), bus)
    for _ in range(2000):
        await tools.execute("noop", {}, runner)
    best = float("inf")
    for _ in range(5):
        start = time.perf_counter()
        for _ in range(n):
            await tools.execute("noop", {}, runner)
        best = min(best, (time.perf_counter() - start) / n)
    print(best)


asyncio.run(main(int(sys.argv[1]) if len(sys.argv) > 1 else 50000))
