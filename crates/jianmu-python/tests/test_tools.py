"""Each documented built-in tool, as the documentation describes it, through the
Python API."""

import asyncio
import http.server
import json
import threading

import pytest

import jianmu_tools as jt
from jianmu_tools import ToolError, ToolSet


def call(tool, args):
    return asyncio.run(tool.execute(args))


def test_calculator_allows_only_math_characters():
    calc = jt.CalculatorTool()
    assert calc.name == "calculator"
    assert calc.run("2+2") == "4"
    assert call(calc, "2 + 3 * (4 - 1)") == "11"
    assert call(calc, {"input": "7/2"}) == "3.5"
    assert call(calc, "7//2") == "3"
    assert call(calc, "-7%3") == "2"
    assert call(calc, "2**100") == str(2**100)
    assert call(calc, "0.1+0.2") == str(0.1 + 0.2)
    with pytest.raises(ToolError) as e:
        calc.run("__import__('os').system('id')")
    assert str(e.value).startswith("Only math expressions allowed, got: __import__('os').system('id')")
    # What `eval` would hang on is refused at once.
    with pytest.raises(ToolError):
        calc.run("9**9**9")


def test_python_repl_evaluates_then_executes_and_keeps_state(ws):
    repl = jt.PythonREPLTool()
    assert repl.input_schema["required"] == ["code"]
    assert call(repl, {"code": "2+2"}) == "4"
    assert call(repl, {"code": "x = 21\nprint('set')"}).strip() == "set"
    assert call(repl, {"code": "x * 2"}) == "42"
    assert call(repl, {"code": "import math"}) == ""
    assert call(repl, {"code": "math.floor(2.5)"}) == "2"
    # The alias names the same tool.
    assert jt.BuiltinTool("python_eval").name == "python_repl"


def test_python_repl_allowed_modules(ws):
    repl = jt.PythonREPLTool(allowed_modules=["math"])
    assert call(repl, {"code": "import math; math.pi"}) == "3.141592653589793"
    with pytest.raises(ToolError) as e:
        call(repl, {"code": "import os"})
    assert "import of 'os' is not allowed" in str(e.value)


def test_python_repl_output_limit_and_timeout(ws):
    repl = jt.PythonREPLTool(max_output_length=100, timeout=1)
    out = call(repl, {"code": "print('x' * 5000)"})
    assert len(out) < 400 and "x" * 50 in out
    with pytest.raises(ToolError) as e:
        call(repl, {"code": "while True: pass"})
    assert e.value.kind == "timeout"
    # The interpreter was killed; the next call says so, starts afresh and works.
    after = call(repl, {"code": "1+1"})
    assert after.endswith("\n2") and "fresh" in after


def test_write_file_reports_what_it_wrote_and_makes_folders(ws):
    write = jt.FileWriteTool()
    assert call(write, {"path": "deep/down/a.txt", "content": "hello\n"}) == "Wrote deep/down/a.txt (6 bytes)"
    assert call(write, {"path": "deep/down/a.txt", "content": "more\n", "append": True}).startswith("Wrote")
    assert (ws / "deep/down/a.txt").read_text() == "hello\nmore\n"
    with pytest.raises(ToolError):
        call(write, {"path": "nowhere/b.txt", "content": "x", "create_dirs": False})
    small = jt.FileWriteTool(max_content_size=4)
    with pytest.raises(ToolError):
        call(small, {"path": "c.txt", "content": "too long"})
    assert not (ws / "c.txt").exists()


def test_read_file_limits_and_encoding_errors(ws):
    (ws / "a.txt").write_text("line 1\nline 2\n")
    (ws / "b.bin").write_bytes(b"\xff\xfe\x00text")
    (ws / "c.md").write_text("# title\n")
    read = jt.FileReadTool()
    assert call(read, {"path": "a.txt"}) == "line 1\nline 2\n"
    assert read.run.__name__ == "run"
    with pytest.raises(ToolError) as e:
        call(read, {"path": "missing.txt"})
    assert "missing.txt" in str(e.value)
    only_md = jt.FileReadTool(allowed_extensions=[".md"])
    assert call(only_md, {"path": "c.md"}) == "# title\n"
    with pytest.raises(ToolError) as e:
        call(only_md, {"path": "a.txt"})
    assert "xtension" in str(e.value)
    tiny = jt.FileReadTool(max_file_size=4)
    with pytest.raises(ToolError):
        call(tiny, {"path": "a.txt", "offset": None} if False else {"path": "a.txt"})
    (ws / "latin1.txt").write_bytes(b"caf\xe9\n")
    with pytest.raises(ToolError) as e:
        call(read, {"path": "latin1.txt"})
    assert str(e.value) == "`latin1.txt` is not UTF-8 text: invalid byte at offset 3"
    # A binary file is reported with its size, not decoded.
    assert call(read, {"path": "b.bin"}) == "`b.bin` is a binary file (7 bytes); its content is not shown"


def test_paths_are_confined_to_the_workspace(ws, tmp_path):
    (tmp_path / "secret.txt").write_text("secret")
    read = jt.FileReadTool(base_path=ws)
    for path in ["../secret.txt", str(tmp_path / "secret.txt"), "/etc/passwd"]:
        with pytest.raises(ToolError) as e:
            call(read, {"path": path})
        assert "secret" not in str(e.value).replace("secret.txt", "")
    (ws / "link").symlink_to(tmp_path / "secret.txt")
    with pytest.raises(ToolError):
        call(read, {"path": "link"})
    with pytest.raises(ToolError):
        call(jt.FileWriteTool(base_path=ws), {"path": "../planted.txt", "content": "x"})
    assert not (tmp_path / "planted.txt").exists()


def test_list_dir_table(ws):
    (ws / "sub").mkdir()
    (ws / "b.txt").write_text("x" * 2048)
    (ws / "a.txt").write_text("abc")
    out = call(jt.ListDirTool(), {"path": "."})
    rows = [r.split() for r in out.strip().splitlines()]
    assert [r[-1] for r in rows] == ["a.txt", "b.txt", "sub"]
    assert rows[0][0] == "FILE" and rows[0][1:3] == ["3", "B"]
    assert rows[1][0] == "FILE" and rows[1][1:3] == ["2.0", "KB"]
    assert rows[2][0] == "DIR"


def test_coding_tools(ws):
    (ws / "src").mkdir()
    (ws / "src/main.py").write_text("def main():\n    return 'old'\n")
    (ws / "src/util.py").write_text("OLD = 1\n")
    (ws / "README.md").write_text("old readme\n")
    ts = ToolSet.resolve(["glob_search", "grep_search", "file_info", "str_replace"])
    globbed = asyncio.run(ts.execute("glob_search", {"pattern": "**/*.py"}))
    assert globbed.strip().splitlines() == ["src/main.py", "src/util.py"]
    grepped = asyncio.run(ts.execute("grep_search", {"query": "old", "glob": "*.py"}))
    assert grepped.strip() == "src/main.py:2:    return 'old'"
    insensitive = asyncio.run(ts.execute("grep_search", {"query": "old", "case_sensitive": False, "limit": 200}))
    assert len(insensitive.strip().splitlines()) == 3
    info = asyncio.run(ts.execute("file_info", {"path": "src/main.py"}))
    assert "main.py" in info and ".py" in info and info.structured["size"] == 29
    replaced = asyncio.run(ts.execute("str_replace", {"path": "README.md", "old": "old", "new": "new"}))
    assert "1" in replaced
    assert (ws / "README.md").read_text() == "new readme\n"
    asyncio.run(ts.execute("str_replace", {"path": "src/util.py", "old": "[A-Z]+", "new": "NEW", "regex": True}))
    assert (ws / "src/util.py").read_text() == "NEW = 1\n"


def test_bash_takes_command_input_or_cmd_and_reports_failures(ws):
    bash = jt.BashTool()
    assert call(bash, {"command": "echo one"}) == "one\n"
    assert call(bash, {"input": "echo two"}) == "two\n"
    assert call(bash, {"cmd": "echo three"}) == "three\n"
    assert bash.call_sync("pwd").strip() == str(ws)
    with pytest.raises(ToolError) as e:
        call(bash, {"command": "echo oops >&2; exit 3"})
    assert str(e.value).startswith("Error (3):") and "oops" in str(e.value)


def test_bash_jobs_are_shared_by_the_tools_of_one_provider(ws):
    ts = ToolSet.resolve(["bash", "bash_output"])
    started = asyncio.run(ts.execute("bash", {"command": "sleep 1.5; echo from-$((6*7))", "background": True, "yield_ms": 100}))
    job = started.structured["job"]
    import time

    assert "from-42" not in started
    seen = ""
    for _ in range(50):
        seen += asyncio.run(ts.execute("bash_output", {"job": job}))
        if "from-42" in seen:
            break
        time.sleep(0.1)
    assert "from-42" in seen
    # A tool built on its own has a session of its own: it does not know the job.
    with pytest.raises(ToolError):
        asyncio.run(jt.BuiltinTool("bash_output").execute({"job": job}))


class _Handler(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        sent = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self._answer({"method": "POST", "got": sent, "type": self.headers["Content-Type"]})

    def do_GET(self):
        if self.path == "/long":
            self._answer({"text": "y" * 5000})
        else:
            self._answer({"ok": True, "path": self.path})

    def _answer(self, value):
        body = json.dumps(value).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def server():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=srv.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()
    srv.server_close()


def test_http_request_pretty_prints_json_and_refuses_private_hosts(ws, server):
    refused = jt.HTTPTool()
    with pytest.raises(ToolError) as e:
        call(refused, {"url": server + "/x"})
    assert "127.0.0.1" in str(e.value)
    allowed = jt.BuiltinToolProvider(session=jt.Session(ws, allow_hosts=["127.0.0.1"])).get_tool("http_request")
    out = call(allowed, {"url": server + "/x", "retries": 0})
    assert '{\n  "ok": true,\n  "path": "/x"\n}' in out
    posted = call(allowed, {"url": server + "/p", "method": "POST", "body": {"a": [1, 2]}})
    assert '"got": {\n    "a": [\n      1,\n      2\n    ]\n  }' in posted
    assert '"type": "application/json"' in posted
    methods = {m["const"] for m in jt.HTTPTool().input_schema["properties"]["method"]["oneOf"]}
    assert methods >= {"GET", "POST", "PUT", "DELETE"}
    short = jt.BuiltinToolProvider(
        session=jt.Session(ws, allow_hosts=["127.0.0.1"], settings={"http_request": {"max_response_length": 1000}})
    ).get_tool("http_request")
    cut = call(short, {"url": server + "/long"})
    # Cut with a notice (the whole answer is saved for read_file and grep_search).
    assert "y" * 500 in cut and len(cut) < 2000 and "read_file" in cut


def test_duckduckgo_search_is_resolved_by_its_alias(ws):
    search = jt.BuiltinToolProvider().get_tool("web_search")
    assert isinstance(search, jt.DuckDuckGoSearchTool)
    assert search.input_schema["required"] == ["query"]
    assert "network" in search.effect_tags


def test_images_and_structured_output(ws):
    png = bytes.fromhex(
        "89504e470d0a1a0a0000000d4948445200000001000000010806000000"
        "1f15c4890000000d49444154789c6360000002000001e221bc330000000049454e44ae426082"
    )
    (ws / "dot.png").write_bytes(png)
    out = call(jt.FileReadTool(), {"path": "dot.png"})
    assert out.images and out.images[0].mime_type == "image/png"
    assert out.images[0].data == png
    assert isinstance(out, str) and out.text == str(out)


def test_checkpoints_undo_what_a_turn_changed(ws, tmp_path):
    """A turn's changes (bash's too) are undone from the checkpoint taken before it;
    `begin_turn` starts the next turn; with checkpoints off the tools say so."""
    (ws / "a.txt").write_text("one\n")
    s = jt.Session(ws, checkpoints={"dir": str(tmp_path / "store")})
    s.call_sync("bash", {"command": "echo two > a.txt; echo new > b.txt"})
    s.begin_turn()
    s.call_sync("write_file", {"path": "c.txt", "content": "c"})
    listed = s.call_sync("checkpoint_list", {}).structured["checkpoints"]
    assert [c["label"] for c in listed] == ["before write_file", "before bash"]
    restored = s.call_sync("checkpoint_restore", {"id": listed[1]["id"]})
    assert (ws / "a.txt").read_text() == "one\n"
    assert not (ws / "b.txt").exists() and not (ws / "c.txt").exists()
    assert restored.structured["undo"] in str(restored)
    assert (tmp_path / "store").is_dir()
    s.close()
    off = jt.Session(ws, checkpoints={"enabled": False})
    with pytest.raises(ToolError, match="checkpoints are off in this session"):
        off.call_sync("checkpoint_list", {})
    off.close()
    with pytest.raises(ToolError, match="checkpoint settings"):
        jt.Session(ws, checkpoints={"no_such_key": 1}).call_sync("calculator", {"input": "1"})
