"""A real MCP client (the `mcp` package from PyPI) driving `jianmu mcp` over stdio.

Usage: mcp_client.py JIANMU WORKSPACE AUDIT_LOG [SERVER_FLAG...]. Prints one JSON object with what it saw.
"""
import base64
import json
import os
import sys

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def main(jianmu, workspace, audit_log, *flags):
    params = StdioServerParameters(
        command=jianmu,
        args=["mcp", "--workspace", workspace, "--audit-log", audit_log, *flags],
    )
    seen = {}
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            init = await session.initialize()
            seen["server"] = init.server_info.name
            tools = await session.list_tools()
            seen["tools"] = {
                t.name: {
                    "schema_type": t.input_schema.get("type"),
                    "read_only": t.annotations.read_only_hint if t.annotations else None,
                    "destructive": t.annotations.destructive_hint if t.annotations else None,
                    "output_schema": t.output_schema is not None,
                }
                for t in tools.tools
            }
            ok = await session.call_tool("calculator", {"input": "2**100"})
            seen["ok"] = [ok.is_error, text(ok)]
            err = await session.call_tool("calculator", {"input": "1/0"})
            seen["tool_error"] = [err.is_error, text(err)]
            bad = await session.call_tool("calculator", {"input": 7})
            seen["bad_arguments"] = [bad.is_error, text(bad)]
            refused = await session.call_tool("read_file", {"path": "../outside.txt"})
            seen["refused"] = [refused.is_error, text(refused)]
            try:
                await session.call_tool("no_such_tool", {})
                seen["unknown"] = ["answered"]
            except Exception as e:
                seen["unknown"] = [getattr(getattr(e, "error", None), "code", None), str(e)]
            await session.call_tool("python_repl", {"code": "state = 'kept'"})
            kept = await session.call_tool("python_repl", {"code": "state"})
            seen["stateful"] = [kept.is_error, text(kept)]
            listing = await session.call_tool("write_file", {"path": "a.txt", "content": "hi"})
            seen["structured"] = listing.structured_content
            # Under MCP every read is numbered; an image comes back as image content.
            numbered = await session.call_tool("read_file", {"path": "a.txt"})
            seen["numbered"] = text(numbered)
            # One script, several calls of the same session's tools.
            script = await session.call_tool(
                "run_script",
                {"code": 'let r = read_file("a.txt"); let n = parse_int(calculator("6*7")); [r.lines, n]'},
            )
            seen["script"] = [script.is_error, text(script)]
            picture = await session.call_tool("read_file", {"path": "pixel.png"})
            with open(os.path.join(workspace, "pixel.png"), "rb") as f:
                raw = f.read()
            seen["image"] = [[c.type, getattr(c, "mime_type", None) or getattr(c, "mimeType", None)] for c in picture.content] + [
                base64.b64decode(picture.content[-1].data) == raw,
                picture.structured_content["image"]["width"],
            ]
            # The client checks every structuredContent against the tool's
            # outputSchema and raises when it does not match.
            checked = {}
            for name, args in [
                ("read_file", {"path": "a.txt"}),
                ("list_dir", {"path": "."}),
                ("glob_search", {"pattern": "*.txt"}),
                ("grep_search", {"query": "hi", "glob": "a.txt"}),
                ("file_info", {"path": "a.txt"}),
                ("str_replace", {"path": "a.txt", "old": "hi", "new": "ho"}),
                ("edit_file", {"path": "a.txt", "edits": [{"old": "ho", "new": "hey"}]}),
                (
                    "apply_patch",
                    {"patch": "*** Begin Patch\n*** Update File: a.txt\n-hey\n+hi\n*** End Patch"},
                ),
                ("bash", {"command": "echo out; echo err >&2"}),
                ("bash_jobs", {}),
            ]:
                result = await session.call_tool(name, args)
                # A client that reads only structuredContent reads the whole answer.
                whole = (result.structured_content or {}).get("text")
                checked[name] = [result.is_error, result.structured_content is not None, whole == text(result) and bool(whole)]
            seen["checked"] = checked
            # A call that sends a progress token hears how it is going.
            updates = []

            async def on_progress(progress, total, message):
                updates.append([progress, total, message])

            slow = await session.call_tool(
                "bash",
                {"command": "echo begun; sleep 3; echo over"},
                progress_callback=on_progress,
            )
            seen["progress"] = {"result": [slow.is_error, text(slow)], "updates": updates}
            # A background job started by one call is read and stopped by later ones.
            job = await session.call_tool(
                "bash", {"command": "echo ready; exec sleep 600", "background": True, "yield_ms": 300}
            )
            job_id = job.structured_content["job"]
            read = await session.call_tool("bash_output", {"job": job_id})
            killed = await session.call_tool("bash_kill", {"job": job_id})
            seen["job"] = [
                job.structured_content["running"],
                job.structured_content["output"],
                read.structured_content["running"],
                killed.structured_content["running"],
                killed.is_error,
            ]
            # Abandoning a call makes the client send notifications/cancelled; the
            # grep over a big file is still running then.
            with anyio.move_on_after(0.02):
                await session.call_tool(
                    "grep_search",
                    {"query": r"\w+\d{3}zz\b", "regex": True, "glob": "big.txt"},
                )
            after = await session.call_tool("calculator", {"input": "6*7"})
            seen["after_cancel"] = [after.is_error, text(after)]
    print(json.dumps(seen))


anyio.run(main, *sys.argv[1:])
