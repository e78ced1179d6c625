"""The tool contract of the documentation: `Tool`, `@tool`, `execute` with injected
arguments and runners, `as_node`, `BuiltinToolProvider`, `ToolSet`, events."""

import asyncio
import os

import pytest

import jianmu_tools as jt
from jianmu_tools import Tool, ToolError, ToolSet, tool


class Echo(Tool):
    name = "echo"
    description = "Echoes its arguments"
    input_schema = {"type": "object", "properties": {"a": {}, "b": {}}}

    def run(self, **kwargs):
        return kwargs


class Upper(Tool):
    name = "upper"

    async def run(self, input):
        await asyncio.sleep(0)
        return input.upper()


def test_tool_defaults_are_the_documented_ones():
    class Bare(Tool):
        def run(self, input):
            return input

    t = Bare()
    assert t.name == "unnamed_tool"
    assert t.description == "No description provided"
    assert t.input_schema == {"type": "string", "description": "Tool input string"}
    assert t.output_schema == {"type": "string", "description": "Tool output string"}
    assert t.parallel_safe is True
    assert t.effect_tags == ()
    with pytest.raises(TypeError):
        Tool()  # abstract: run is required


def test_execute_runs_sync_and_async_tools_in_process():
    assert asyncio.run(Echo().execute({"a": 1})) == {"a": 1}
    assert asyncio.run(Upper().execute("abc")) == "ABC"


def test_injected_arguments_win_unless_prefer_injected_is_false():
    e = Echo()
    assert asyncio.run(e.execute({"a": 1, "b": 2}, injected={"b": 3})) == {"a": 1, "b": 3}
    assert asyncio.run(e.execute({"a": 1, "b": 2}, injected={"b": 3}, prefer_injected=False)) == {"a": 1, "b": 2}
    assert asyncio.run(e.execute({"a": 1}, injected={"b": 3}, prefer_injected=False)) == {"a": 1, "b": 3}
    # The caller's mapping is not changed.
    args = {"a": 1}
    asyncio.run(e.execute(args, injected={"a": 2}))
    assert args == {"a": 1}


def test_injected_arguments_reach_a_builtin_tool(ws):
    (ws / "notes.txt").write_text("kept\n")
    read = jt.FileReadTool()
    out = asyncio.run(read.execute({"path": "elsewhere.txt"}, injected={"path": "notes.txt"}))
    assert out == "kept\n"
    with pytest.raises(ToolError) as e:
        asyncio.run(read.execute({"path": "elsewhere.txt"}, injected={"path": "notes.txt"}, prefer_injected=False))
    assert "elsewhere.txt" in str(e.value)


def test_tool_decorator_with_arguments():
    @tool(name="my_tool", description="does something")
    def my_tool(x: int, y: int) -> int:
        return x + y

    assert isinstance(my_tool, jt.FunctionTool)
    assert (my_tool.name, my_tool.description) == ("my_tool", "does something")
    assert my_tool.is_async is False
    assert my_tool.input_schema == {
        "type": "object",
        "properties": {"x": {"type": "integer"}, "y": {"type": "integer"}},
        "required": ["x", "y"],
    }
    assert asyncio.run(my_tool.execute({"x": 2, "y": 3})) == 5


def test_tool_decorator_falls_back_to_the_function_name_and_docstring():
    @tool
    async def fetch_note(key: str, limit: int | None = None, tags: list[str] = ()) -> str:
        """Fetches a note by key."""
        await asyncio.sleep(0)
        return f"{key}:{limit}"

    assert fetch_note.name == "fetch_note"
    assert fetch_note.description == "Fetches a note by key."
    assert fetch_note.is_async is True
    props = fetch_note.input_schema["properties"]
    assert props["key"] == {"type": "string"}
    assert props["limit"] == {"type": "integer", "default": None}
    assert props["tags"]["type"] == "array"
    assert fetch_note.input_schema["required"] == ["key"]
    assert asyncio.run(fetch_note.execute({"key": "k"}, injected={"limit": 3})) == "k:3"


def test_as_node_binds_arguments():
    node = Echo().as_node({"a": 1}, injected={"b": 2})
    assert node.name == "echo"
    assert asyncio.run(node.run()) == {"a": 1, "b": 2}
    assert asyncio.run(node.run({"a": 5})) == {"a": 5, "b": 2}
    calc = jt.CalculatorTool().as_node("6*7", name="answer")
    assert calc.name == "answer"
    assert asyncio.run(calc()) == "42"


def test_provider_resolves_names_and_aliases(ws):
    provider = jt.BuiltinToolProvider()
    tools = provider.resolve_named_tools(["calculator", "web_search", "file_read", "file_write", "python_eval"])
    assert [t.name for t in tools] == ["calculator", "duckduckgo_search", "read_file", "write_file", "python_repl"]
    assert isinstance(tools[0], jt.CalculatorTool)
    assert isinstance(tools[1], jt.DuckDuckGoSearchTool)
    assert isinstance(tools[2], jt.FileReadTool)
    assert jt.canonical_tool_name("web_search") == "duckduckgo_search"
    assert jt.canonical_tool_name("calculator") == "calculator"
    names = provider.available_tools()
    for documented in [
        "calculator", "python_repl", "read_file", "write_file", "list_dir", "http_request",
        "duckduckgo_search", "glob_search", "grep_search", "file_info", "str_replace", "bash",
    ]:
        assert documented in names
    with pytest.raises(ToolError) as e:
        provider.get_tool("no_such_tool")
    assert e.value.kind == "unknown_tool"
    assert "calculator" in str(e.value) and "web_search -> duckduckgo_search" in str(e.value)


def test_provider_register_tool_adds_a_tool():
    provider = jt.BuiltinToolProvider()
    provider.register_tool("echo", Echo)
    assert isinstance(provider.get_tool("echo"), Echo)
    assert "echo" in provider.available_tools()


def test_documented_attributes_of_the_builtin_tools(ws):
    ts = ToolSet.resolve(["calculator", "str_replace", "write_file", "bash", "read_file", "http_request"])
    assert ts["calculator"].input_schema["type"] == "string"
    replace = ts["str_replace"]
    assert replace.parallel_safe is False
    assert "filesystem:write" in replace.effect_tags
    assert "filesystem:write" in ts["write_file"].effect_tags
    assert "network" in ts["http_request"].effect_tags
    assert "filesystem:write" not in ts["read_file"].effect_tags
    for t in ts:
        assert t.description and t.input_schema and t.output_schema


def test_toolset_constructors_and_last_wins_merge(ws):
    by_name = ToolSet.resolve(["calculator", "python_repl", "read_file"])
    assert by_name.names == ["calculator", "python_repl", "read_file"]
    mine = Echo()
    from_tools = ToolSet.from_tools([jt.CalculatorTool(), mine])
    assert from_tools.names == ["calculator", "echo"]
    from_providers = ToolSet.from_providers([jt.BuiltinToolProvider()])
    assert "bash" in from_providers and "file_read" in from_providers
    assert len(from_providers) == len(jt.builtin_specs())

    class OtherCalc(Tool):
        name = "calculator"

        def run(self, input):
            return "mine"

    merged = by_name.merge(ToolSet.from_tools([OtherCalc(), mine]))
    assert merged.names == ["calculator", "python_repl", "read_file", "echo"]
    assert asyncio.run(merged.execute("calculator", "1+1")) == "mine"
    assert asyncio.run(by_name.execute("calculator", "1+1")) == "2"
    assert jt.merge_groups([[Echo()], [mine]])[0] is mine
    with pytest.raises(ToolError) as e:
        asyncio.run(by_name.execute("bash", {"command": "true"}))
    assert e.value.kind == "unknown_tool"


def test_runner_emits_started_then_completed_or_failed(ws):
    bus = jt.EventBus()
    events = []
    bus.subscribe(events.append)
    bad = bus.subscribe(lambda e: 1 / 0)  # a broken subscriber disturbs nothing
    runner = jt.ToolRunner(jt.LocalSandbox(), bus=bus)
    ts = ToolSet.from_tools([jt.CalculatorTool(), Echo()])
    assert asyncio.run(ts.execute("calculator", "2+3", runner=runner, runner_event_context={"turn": 7})) == "5"
    assert [e["event"] for e in events] == ["execution.started", "execution.completed"]
    assert all(e["tool"] == "calculator" and e["context"] == {"turn": 7} for e in events)
    assert events[0]["call_id"] == events[1]["call_id"]
    assert events[1]["elapsed_us"] >= 0 and events[1]["error"] is None
    events.clear()
    with pytest.raises(ToolError):
        asyncio.run(ts.execute("calculator", "import os", runner=runner))
    assert [e["event"] for e in events] == ["execution.started", "execution.failed"]
    assert "Only math expressions allowed" in events[1]["error"]
    events.clear()
    assert asyncio.run(ts.execute("echo", {"a": 1}, runner=runner)) == {"a": 1}
    assert [e["event"] for e in events] == ["execution.started", "execution.completed"]
    assert bus.unsubscribe(bad) and not bus.unsubscribe(bad)


def test_a_sandbox_is_accepted_as_the_runner(ws):
    assert asyncio.run(jt.CalculatorTool().execute("9-4", runner=jt.LocalSandbox())) == "5"


def test_runner_from_config_and_its_timeout(ws):
    assert isinstance(jt.ToolRunner.from_config({"tool_runner": "local"}).sandbox, jt.LocalSandbox)
    assert isinstance(jt.ToolRunner.from_config({"tool_runner": "docker", "docker": {"image": "x"}}).sandbox, jt.DockerSandbox)
    with pytest.raises(ToolError):
        jt.ToolRunner.from_config({"tool_runner": "cloud"})
    slow = jt.BashTool()
    runner = jt.ToolRunner(timeout=0.5)
    with pytest.raises(ToolError) as e:
        asyncio.run(slow.execute({"command": "sleep 3; touch late"}, runner=runner))
    assert e.value.kind == "timeout"
    # The stopped command's processes are gone: the file never appears.
    import time

    time.sleep(3.5)
    assert not (ws / "late").exists()


def test_cancelling_a_call_ends_its_processes(ws):
    bash = jt.BashTool()

    async def main():
        task = asyncio.ensure_future(bash.execute({"command": "sleep 2; touch late"}))
        await asyncio.sleep(0.5)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await asyncio.sleep(2.5)

    asyncio.run(main())
    assert not (ws / "late").exists()


def test_calls_run_concurrently_without_holding_the_event_loop(ws):
    bash = jt.BashTool()
    # The first command waits for a file only the second one makes: it finishes only
    # if both run at once.
    first = "for i in $(seq 200); do [ -e made ] && echo a && exit 0; sleep 0.05; done; exit 7"
    second = "sleep 0.3; touch made; echo b"

    async def main():
        ticks = 0
        done = False

        async def ticker():
            nonlocal ticks
            while not done:
                ticks += 1
                await asyncio.sleep(0.01)

        ticking = asyncio.ensure_future(ticker())
        results = await asyncio.gather(bash.execute({"command": first}), bash.execute({"command": second}))
        done = True
        await ticking
        return results, ticks

    (a, b), ticks = asyncio.run(main())
    assert (a.strip(), b.strip()) == ("a", "b")
    assert ticks >= 10  # the event loop kept running while the commands ran


def test_errors_are_raised_with_their_kind(ws):
    with pytest.raises(ToolError) as e:
        asyncio.run(jt.FileWriteTool().execute({"content": "no path"}))
    assert e.value.kind == "invalid_arguments" and e.value.tool == "write_file"
    with pytest.raises(ToolError) as e:
        asyncio.run(jt.FileReadTool().execute({"path": object()}))
    assert e.value.kind == "invalid_arguments"
    with pytest.raises(ToolError) as e:
        jt.FileReadTool(no_such_setting=1)
    assert e.value.kind == "config"
    with pytest.raises(ToolError) as e:
        jt.BuiltinTool("no_such_tool")
    assert e.value.kind == "unknown_tool"


def test_a_function_tool_refuses_arguments_that_do_not_fit():
    @tool
    def add(a: int, b: int = 1) -> int:
        return a + b

    with pytest.raises(ToolError) as e:
        asyncio.run(add.execute({"a": 1, "c": 2}))
    assert e.value.kind == "invalid_arguments" and "c" in str(e.value)
    with pytest.raises(ToolError) as e:
        asyncio.run(add.execute({}))
    assert e.value.kind == "invalid_arguments" and "a" in str(e.value)
    assert asyncio.run(add.execute({"a": 1})) == 2


def test_settings_reach_the_spec_and_are_checked_for_provider_tools(ws):
    provider = jt.BuiltinToolProvider(settings={"file_read": {"max_file_size": 10}})
    read = provider.get_tool("read_file")
    (ws / "big.txt").write_text("x" * 100)
    with pytest.raises(ToolError):
        asyncio.run(read.execute({"path": "big.txt"}))
    bad = jt.BuiltinToolProvider(settings={"read_file": {"no_such_setting": 1}})
    with pytest.raises(ToolError) as e:
        bad.get_tool("read_file")
    assert e.value.kind == "config" and "no_such_setting" in str(e.value)


def test_hostile_arguments_are_refused_not_crashed_on(ws):
    read = jt.FileReadTool()
    deep = []
    for _ in range(100_000):
        deep = [deep]
    for args in [{"path": deep}, {"path": float("nan")}, {"path": "\x00"}, {"path": "a" * 100_000}]:
        with pytest.raises(ToolError):
            asyncio.run(read.execute(args))
    # Deeper than the native JSON reader takes, though Python encodes it.
    nesting = []
    for _ in range(300):
        nesting = [nesting]
    for call in (lambda: asyncio.run(read.execute({"path": nesting})), lambda: read.call_sync(path=nesting)):
        with pytest.raises(ToolError) as e:
            call()
        assert e.value.kind == "invalid_arguments" and "not JSON" in str(e.value)
    nested = "(" * 10_000 + "1" + ")" * 10_000
    with pytest.raises(ToolError) as e:
        jt.CalculatorTool().run(nested)
    assert e.value.kind in ("failed", "invalid_arguments")


def test_nothing_a_session_started_outlives_the_interpreter(ws):
    import subprocess
    import sys
    import time

    marker = f"97.{os.getpid()}"
    script = f"""
import asyncio, jianmu_tools as jt
bash = jt.BashTool()
print(asyncio.run(bash.execute({{"command": "sleep {marker}", "background": True, "yield_ms": 100}})))
repl = jt.PythonREPLTool()
print(asyncio.run(repl.execute({{"code": "import time; 'sleep {marker}'"}})))
"""
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert "job 1 running" in out.stdout
    time.sleep(0.5)
    left = [
        p for p in os.listdir("/proc") if p.isdigit() and _cmdline(p).find(f"sleep {marker}") >= 0
    ]
    assert left == []


def _cmdline(pid):
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return f.read().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def test_the_interpreter_exits_cleanly_right_after_calls_answer(ws):
    # Answers are handed to Python from runtime threads; one still on its way while the
    # interpreter finalizes must not crash it (a dev server in the background, then a
    # call, then exit: this crashed about one run in two before).
    import subprocess
    import sys

    script = """
import asyncio, jianmu_tools as jt
ts = jt.ToolSet.resolve(["bash"])
async def main():
    await ts.execute("bash", {"command": "python3 -m http.server 0 --bind 127.0.0.1 >/dev/null 2>&1", "background": True, "yield_ms": 300})
    print((await ts.execute("bash", {"command": "echo hi"})).strip())
asyncio.run(main())
"""
    for _ in range(6):
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
        assert (out.returncode, out.stdout, out.stderr) == (0, "hi\n", "")
