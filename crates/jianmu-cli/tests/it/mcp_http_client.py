"""A real MCP client (the `mcp` package from PyPI) driving `jianmu mcp --http` over Streamable HTTP.

Usage: mcp_http_client.py URL TOKEN [SCENARIO]. Prints JSON lines: {"step": ...} objects with
what it saw. After the step "held" it waits for a line on stdin before closing its sessions, so
the caller can look at the server's processes and folders while they are open and again after.
Scenarios: `main` (the default), `workspaces` (two sessions of a server with a folder per
session), `slow` (a call still running when the caller stops the server).
"""
import json
import sys

import anyio
import httpx2
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def say(step, **seen):
    print(json.dumps({"step": step, **seen}), flush=True)


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def client(url, token, mode):
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    return Client(streamable_http_client(url, http_client=http), mode=mode)


async def raw_post(url, headers, body):
    async with httpx2.AsyncClient() as http:
        r = await http.post(
            url,
            headers={
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
                **headers,
            },
            content=body if isinstance(body, str) else json.dumps(body),
        )
        return r.status_code, r.text, dict(r.headers)


INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {"protocolVersion": "2025-03-26", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
}


async def workspaces(url, token):
    async with client(url, token, "legacy") as a, client(url, token, "legacy") as b:
        await a.call_tool("write_file", {"path": "mine.txt", "content": "a's"})
        seen_a = await a.call_tool("list_dir", {"path": "."})
        seen_b = await b.call_tool("list_dir", {"path": "."})
        where = await a.call_tool("bash", {"command": "pwd"})
        say("workspaces", a=text(seen_a), b=text(seen_b), pwd=text(where).strip())
        say("held")
        await anyio.to_thread.run_sync(sys.stdin.readline)
    say("closed")


async def slow(url, token):
    async with client(url, token, "legacy") as c:
        say("calling")
        try:
            r = await c.call_tool("bash", {"command": "sleep 30 # jianmu-slow-marker; echo finished"})
            say("answered", error=r.is_error, text=text(r))
        except Exception as e:
            say("failed", error=str(e))


async def containers(url, token):
    async with client(url, token, "legacy") as a, client(url, token, "legacy") as b:
        await a.call_tool("python_repl", {"code": "x = 'a'"})
        await b.call_tool("python_repl", {"code": "x = 'b'"})
        ha = await a.call_tool("bash", {"command": "hostname"})
        hb = await b.call_tool("bash", {"command": "hostname"})
        xa = await a.call_tool("python_repl", {"code": "x"})
        xb = await b.call_tool("python_repl", {"code": "x"})
        say("containers", a=[text(ha).strip(), text(xa)], b=[text(hb).strip(), text(xb)])
        say("held")
        await anyio.to_thread.run_sync(sys.stdin.readline)
    say("closed")


async def limits(url, token):
    auth = {"Authorization": f"Bearer {token}"}
    async with client(url, token, "legacy") as a:
        await a.call_tool("python_repl", {"code": "x = 1"})
        status, body, headers = await raw_post(url, auth, INIT)
        say("full", status=status, body=body, retry_after=headers.get("retry-after"))
        big = dict(INIT, params=dict(INIT["params"], padding="x" * 4096))
        status, _, _ = await raw_post(url, {**auth, "Mcp-Session-Id": "any"}, big)
        say("too_big", status=status)
        say("held")
        await anyio.to_thread.run_sync(sys.stdin.readline)
        # The session expired meanwhile: its id is no longer known.
        try:
            await a.call_tool("python_repl", {"code": "x"})
            say("expired", gone=False)
        except Exception as e:
            say("expired", gone=True, error=str(e))
    status, body, _ = await raw_post(url, auth, INIT)
    say("room_again", status=status)


async def main(url, token, scenario="main"):
    if scenario == "containers":
        return await containers(url, token)
    if scenario == "limits":
        return await limits(url, token)
    if scenario == "workspaces":
        return await workspaces(url, token)
    if scenario == "slow":
        return await slow(url, token)
    # Refusals: no token, a wrong token, a browser origin not allowed.
    status, body, headers = await raw_post(url, {}, INIT)
    say("no_token", status=status, body=body, www_authenticate=headers.get("www-authenticate"))
    status, body, _ = await raw_post(url, {"Authorization": "Bearer wrong-token-wrong-token"}, INIT)
    say("wrong_token", status=status)
    status, body, _ = await raw_post(
        url, {"Authorization": f"Bearer {token}", "Origin": "https://evil.example"}, INIT
    )
    say("foreign_origin", status=status, body=body)
    status, body, _ = await raw_post(
        url, {"Authorization": f"Bearer {token}", "Origin": "http://allowed.example"}, INIT
    )
    say("allowed_origin", status=status)
    # Malformed bodies are answered too.
    answers = []
    for bad in ["{", "[1, 2]", "\u0000", '{"jsonrpc": "2.0", "id": 1}']:
        status, body, _ = await raw_post(url, {"Authorization": f"Bearer {token}"}, bad)
        answers.append([status, bool(body.strip())])
    say("malformed", answers=answers)

    # An older revision, negotiated by a raw handshake.
    status, body, headers = await raw_post(url, {"Authorization": f"Bearer {token}"}, INIT)
    line = next(l for l in body.splitlines() if l.startswith("data: {"))
    say("old_revision", status=status, version=json.loads(line[6:])["result"]["protocolVersion"],
        session=bool(headers.get("mcp-session-id")))

    # The handshake era's newest revision: list and call, structured output.
    async with client(url, token, "legacy") as c:
        tools = await c.list_tools()
        by_name = {t.name: t for t in tools.tools}
        ok = await c.call_tool("calculator", {"input": "2**100"})
        written = await c.call_tool("write_file", {"path": "a.txt", "content": "hi"})
        say(
            "legacy",
            version=c.protocol_version,
            tools=sorted(by_name),
            calculator_output_schema=by_name["calculator"].output_schema,
            ok=[ok.is_error, text(ok), ok.structured_content],
            written=written.structured_content,
        )

    # The stateless revision.
    async with client(url, token, "2026-07-28") as c:
        tools = await c.list_tools()
        ok = await c.call_tool("calculator", {"input": "6*7"})
        say("modern", version=c.protocol_version, tools=len(tools.tools), ok=[ok.is_error, text(ok)])

    # Health needs no token; metrics do.
    base = url.rsplit("/", 1)[0]
    async with httpx2.AsyncClient() as http:
        health = await http.get(f"{base}/healthz")
        anonymous = await http.get(f"{base}/metrics")
        metrics = await http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {token}"})
    say(
        "observed",
        health=[health.status_code, health.text],
        anonymous=anonymous.status_code,
        metrics=[metrics.status_code, metrics.headers.get("content-type"), metrics.text],
    )

    # Two sessions, one interpreter each.
    async with client(url, token, "legacy") as a, client(url, token, "legacy") as b:
        await a.call_tool("python_repl", {"code": "x = 1"})
        await b.call_tool("python_repl", {"code": "x = 2"})
        await a.call_tool("bash", {"command": "export WHO=a", "session": "s"})
        await b.call_tool("bash", {"command": "export WHO=b", "session": "s"})
        ra = await a.call_tool("python_repl", {"code": "x"})
        rb = await b.call_tool("python_repl", {"code": "x"})
        sa = await a.call_tool("bash", {"command": "echo $WHO", "session": "s"})
        sb = await b.call_tool("bash", {"command": "echo $WHO", "session": "s"})
        say("isolated", a=text(ra), b=text(rb), shell_a=text(sa), shell_b=text(sb))
        say("held")
        await anyio.to_thread.run_sync(sys.stdin.readline)
    say("closed")


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:4])
