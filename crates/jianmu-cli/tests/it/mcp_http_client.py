"""A real MCP client (the `mcp` package from PyPI) driving `jianmu mcp --http` over Streamable HTTP.

Usage: mcp_http_client.py URL TOKEN [SCENARIO]. Prints JSON lines: {"step": ...} objects with
what it saw. After the step "held" it waits for a line on stdin before closing its sessions, so
the caller can look at the server's processes and folders while they are open and again after.
Scenarios: `main` (the default), `workspaces` (two sessions of a server with a folder per
session), `slow` (a call still running when the caller stops the server), `handles` (two
principals, TOKEN being `ALICE,BOB`, keeping state through handles on the stateless revision).
"""
import json
import re
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


async def handles(url, tokens):
    """Two principals (TOKEN is `ALICE,BOB`) on a server with a folder per principal."""
    alice, bob = tokens.split(",")

    async def call(c, tool, args):
        r = await c.call_tool(tool, args)
        return ("error: " if r.is_error else "") + text(r)

    # The stateless revision: state lives under handles the calls name.
    async with client(url, alice, "2026-07-28") as a:
        seen = {"version": a.protocol_version}
        await call(a, "python_repl", {"code": "x = 41", "session": "s"})
        seen["named"] = await call(a, "python_repl", {"code": "x + 1", "session": "s"})
        await call(a, "python_repl", {"code": "y = 1"})
        seen["unnamed"] = await call(a, "python_repl", {"code": "y"})
        await call(a, "bash", {"command": "mkdir -p sub && cd sub && export WHO=alice", "session": "s"})
        seen["shell"] = await call(a, "bash", {"command": "echo $WHO; basename $PWD", "session": "s"})
        started = await call(a, "bash", {"command": "echo up; exec sleep 300", "background": True, "yield_ms": 200})
        seen["job_started"] = started
        seen["jobs"] = await call(a, "bash_jobs", {})
        await call(a, "write_file", {"path": "note.txt", "content": "alice's"})
        seen["memory"] = await call(a, "python_repl", {"code": "len(bytearray(300 << 20))"})
        say("alice", **seen)
    job = int(re.search(r'"job": (\d+)', started).group(1))
    # Another principal with the same handles sees none of it.
    async with client(url, bob, "2026-07-28") as b:
        seen = {}
        seen["named"] = await call(b, "python_repl", {"code": "x", "session": "s"})
        seen["shell"] = await call(b, "bash", {"command": "echo \"[$WHO]\"; basename $PWD", "session": "s"})
        seen["jobs"] = await call(b, "bash_jobs", {})
        seen["output"] = await call(b, "bash_output", {"job": job})
        seen["kill"] = await call(b, "bash_kill", {"job": job})
        seen["note"] = await call(b, "read_file", {"path": "note.txt"})
        # Bob's limits: 100 MiB of memory per process.
        seen["memory"] = await call(b, "python_repl", {"code": "len(bytearray(300 << 20))"})
        # Bob's limits: one background job at most.
        await call(b, "bash", {"command": "exec sleep 300", "background": True, "yield_ms": 50})
        seen["second_job"] = await call(b, "bash", {"command": "exec sleep 300", "background": True, "yield_ms": 50})
        say("bob", job=job, **seen)
    # Alice again, in a new client: her handles, job and folder are still there.
    async with client(url, alice, "2026-07-28") as a:
        seen = {}
        seen["named"] = await call(a, "python_repl", {"code": "x", "session": "s"})
        seen["shell"] = await call(a, "bash", {"command": "echo $WHO", "session": "s"})
        seen["output"] = await call(a, "bash_output", {"job": job})
        say("alice_again", **seen)
    # A handshake-era session of alice's: the session is the default scope, in her folder.
    async with client(url, alice, "legacy") as a:
        seen = {"version": a.protocol_version}
        await call(a, "python_repl", {"code": "z = 1"})
        seen["unnamed"] = await call(a, "python_repl", {"code": "z"})
        seen["note"] = await call(a, "read_file", {"path": "note.txt"})
        say("alice_legacy", **seen)
    # A protocol session is its principal's: bob cannot use alice's.
    status, _, headers = await raw_post(url, {"Authorization": f"Bearer {alice}"}, INIT)
    sid = headers.get("mcp-session-id")
    ping = {"jsonrpc": "2.0", "id": 2, "method": "ping"}
    as_bob, _, _ = await raw_post(url, {"Authorization": f"Bearer {bob}", "Mcp-Session-Id": sid}, ping)
    as_alice, _, _ = await raw_post(url, {"Authorization": f"Bearer {alice}", "Mcp-Session-Id": sid}, ping)
    # Bob's own limit: one protocol session at a time.
    first, _, _ = await raw_post(url, {"Authorization": f"Bearer {bob}"}, INIT)
    second, body, _ = await raw_post(url, {"Authorization": f"Bearer {bob}"}, INIT)
    say("bound", opened=status, as_bob=as_bob, as_alice=as_alice, bob_first=first, bob_second=[second, body])
    base = url.rsplit("/", 1)[0]
    async with httpx2.AsyncClient() as http:
        metrics = await http.get(f"{base}/metrics", headers={"Authorization": f"Bearer {alice}"})
    say("metrics", text=metrics.text)


async def main(url, token, scenario="main"):
    if scenario == "handles":
        return await handles(url, token)
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
