"""The server scenarios of the MCP conformance suite that apply to a tool server, ported.

Usage: conformance.py URL TOKEN WORKSPACE. Prints one JSON object: {check: "ok" | "why it
failed"}, each check named after the suite's scenario and check. The suite's fixture tools
are stood in for by built-in tools that behave the same way: `calculator` for a tool that
answers text, `read_file` of a missing file for `test_error_handling`, `read_file` of a PNG
for `test_image_content`, `bash` running for a few seconds (it reports progress every
second) for `test_tool_with_progress`. Timed steps leave seconds of margin: the checks run beside
other tests on a loaded machine. Each tools scenario runs on both revisions:
2026-07-28 (stateless: per-request `_meta` and headers) and 2025-11-25 (a handshake and
a session).
"""
import asyncio
import base64
import json
import re
import sys

import httpx2

MODERN = "2026-07-28"
LEGACY = "2025-11-25"
CAPABILITIES = {}
CLIENT_INFO = {"name": "conformance-port", "version": "0"}
NAME_HEADER = {"tools/call": "name", "resources/read": "uri", "prompts/get": "name",
               "tasks/get": "taskId", "tasks/cancel": "taskId", "tasks/update": "taskId"}


def meta(version=MODERN, **drop):
    m = {
        "io.modelcontextprotocol/protocolVersion": version,
        "io.modelcontextprotocol/clientInfo": CLIENT_INFO,
        "io.modelcontextprotocol/clientCapabilities": CAPABILITIES,
    }
    for key in drop:
        m.pop(f"io.modelcontextprotocol/{key}", None)
    return m


def messages(response):
    """Every JSON-RPC message of a response, JSON or an SSE stream."""
    kind = response.headers.get("content-type", "")
    if "text/event-stream" in kind:
        out = []
        for line in response.text.splitlines():
            if line.startswith("data:") and line[5:].strip():
                out.append(json.loads(line[5:].strip()))
        return out
    try:
        return [response.json()]
    except ValueError:
        return []


class Wire:
    """What both revisions share: a request whose answer must be a result."""

    async def request(self, method, params=None):
        r, msgs = await self.send(method, params)
        final = [m for m in msgs if "result" in m or "error" in m]
        if r.status_code != 200 or not final or "error" in final[-1]:
            raise AssertionError(f"{method}: HTTP {r.status_code}: {msgs}")
        return final[-1]["result"], msgs


class Stateless(Wire):
    """The 2026-07-28 wire: no handshake; `_meta` and standard headers on every request."""

    revision = MODERN

    def __init__(self, http, url):
        self.http, self.url, self.next_id = http, url, 100

    def headers(self, method, params, overrides=None):
        h = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN,
            "Mcp-Method": method,
        }
        key = NAME_HEADER.get(method)
        if key and params and key in params:
            h["Mcp-Name"] = params[key]
        for k, v in (overrides or {}).items():
            for existing in [e for e in h if e.lower() == k.lower()]:
                del h[existing]
            if v is not None:
                h[k] = v
        return h

    async def send(self, method, params=None, headers=None, request_id=None, with_meta=True):
        if request_id is None:
            self.next_id += 1
            request_id = self.next_id
        params = dict(params or {})
        if with_meta:
            params["_meta"] = {**meta(), **params.get("_meta", {})}
        body = {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}
        r = await self.http.post(self.url, headers=self.headers(method, params, headers), json=body)
        return r, messages(r)


class Session(Wire):
    """The 2025-11-25 wire: a handshake, then requests in its session."""

    revision = LEGACY

    def __init__(self, http, url):
        self.http, self.url, self.sid, self.next_id = http, url, None, 1

    def headers(self):
        h = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.sid:
            h["Mcp-Session-Id"] = self.sid
            h["MCP-Protocol-Version"] = LEGACY
        return h

    async def open(self):
        params = {"protocolVersion": LEGACY, "capabilities": {}, "clientInfo": CLIENT_INFO}
        r = await self.http.post(self.url, headers=self.headers(),
                                 json={"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": params})
        assert r.status_code == 200, r.text
        self.sid = r.headers["mcp-session-id"]
        await self.http.post(self.url, headers=self.headers(),
                             json={"jsonrpc": "2.0", "method": "notifications/initialized"})
        return self

    async def send(self, method, params=None):
        self.next_id += 1
        body = {"jsonrpc": "2.0", "id": self.next_id, "method": method, "params": params or {}}
        r = await self.http.post(self.url, headers=self.headers(), json=body)
        return r, messages(r)

    async def close(self):
        await self.http.delete(self.url, headers=self.headers())


RESULTS = {}


async def run(name, check, *args):
    try:
        why = await check(*args)
        RESULTS[name] = why or "ok"
    except Exception as e:  # a check that cannot even run has failed
        RESULTS[name] = f"{type(e).__name__}: {e}"


# ---- tools scenarios, on either revision ----

async def tools_list(conn):
    first, _ = await conn.request("tools/list")
    second, _ = await conn.request("tools/list")
    names = [t["name"] for t in first["tools"]]
    problems = []
    for t in first["tools"]:
        if not re.fullmatch(r"[A-Za-z0-9_./-]{1,64}", t.get("name", "")):
            problems.append(f"bad name {t.get('name')!r}")
        if not t.get("description"):
            problems.append(f"{t['name']}: no description")
        if (t.get("inputSchema") or {}).get("type") != "object":
            problems.append(f"{t['name']}: inputSchema is not an object schema")
    if names != [t["name"] for t in second["tools"]]:
        problems.append("the order differs between two lists")
    if names != sorted(names):
        problems.append("not in a deterministic (sorted) order")
    if not names:
        problems.append("no tools")
    return "; ".join(problems) or None


async def caching(conn):
    result, _ = await conn.request("tools/list")
    ttl, scope = result.get("ttlMs"), result.get("cacheScope")
    if not (isinstance(ttl, int) and ttl >= 0):
        return f"ttlMs is {ttl!r}"
    if scope not in ("public", "private"):
        return f"cacheScope is {scope!r}"


async def tools_call_simple_text(conn):
    result, _ = await conn.request("tools/call", {"name": "calculator", "arguments": {"input": "6*7"}})
    content = result.get("content") or []
    if not content or content[0].get("type") != "text" or content[0].get("text") != "42":
        return f"content is {content!r}"
    if result.get("isError"):
        return "isError is set"


async def tools_call_error(conn):
    r, msgs = await conn.send("tools/call", {"name": "read_file", "arguments": {"path": "no-such-file.txt"}})
    final = [m for m in msgs if "result" in m or "error" in m]
    if r.status_code != 200 or not final or "result" not in final[-1]:
        return f"a tool's failure must be a result, got HTTP {r.status_code}: {msgs}"
    result = final[-1]["result"]
    if result.get("isError") is not True:
        return "isError is not true"
    if not (result.get("content") and result["content"][0].get("text")):
        return "no error text"


async def tools_call_image(conn):
    result, _ = await conn.request("tools/call", {"name": "read_file", "arguments": {"path": "dot.png"}})
    images = [c for c in result.get("content", []) if c.get("type") == "image"]
    if not images:
        return f"no image content in {result.get('content')!r}"
    image = images[0]
    if image.get("mimeType") != "image/png":
        return f"mimeType is {image.get('mimeType')!r}"
    if not base64.b64decode(image.get("data", "")).startswith(b"\x89PNG"):
        return "data is not the PNG, base64"


async def tools_call_with_progress(conn):
    params = {"name": "bash", "arguments": {"command": "sleep 4.5; echo done"},
              "_meta": {"progressToken": "progress-test-1"}}
    result, msgs = await conn.request("tools/call", params)
    updates = [m["params"] for m in msgs if m.get("method") == "notifications/progress"
               and m["params"].get("progressToken") == "progress-test-1"]
    if len(updates) < 3:
        return f"expected at least 3 progress notifications, got {len(updates)}"
    values = [u["progress"] for u in updates]
    if values != sorted(values):
        return f"progress does not increase: {values}"
    if result.get("content", [{}])[0].get("text") != "done\n":
        return f"answer is {result!r}"


async def tools_call_unknown_tool(conn):
    r, msgs = await conn.send("tools/call", {"name": "no_such_tool", "arguments": {}})
    errors = [m["error"] for m in msgs if "error" in m]
    if not errors or errors[0].get("code") != -32602:
        return f"an unknown tool is a -32602 error, got HTTP {r.status_code}: {msgs}"
    if "no_such_tool" not in errors[0].get("message", ""):
        return "the message does not name the tool"


async def resources_read_unknown(conn):
    uri = "test://nonexistent-resource-for-conformance-testing"
    r, msgs = await conn.send("resources/read", {"uri": uri})
    errors = [m["error"] for m in msgs if "error" in m]
    # SEP-2164: no empty result; -32602 with the URI asked for in `data`.
    if any("result" in m for m in msgs):
        return f"a result for an unknown resource: {msgs}"
    if not errors or errors[0].get("code") != -32602:
        return f"expected -32602, got HTTP {r.status_code}: {msgs}"
    if (errors[0].get("data") or {}).get("uri") != uri:
        return f"the error's data does not name the URI: {errors[0]}"


TOOLS = {
    "tools-list": tools_list,
    "tools-call-simple-text": tools_call_simple_text,
    "tools-call-error": tools_call_error,
    "tools-call-image": tools_call_image,
    "tools-call-with-progress": tools_call_with_progress,
    "tools-call-unknown-tool": tools_call_unknown_tool,
    "resources-read-unknown": resources_read_unknown,
}


# ---- server-stateless and server/discover (2026-07-28 only) ----

async def discover(c):
    r, msgs = await c.send("server/discover")
    if r.status_code != 200 or "result" not in msgs[-1]:
        return f"HTTP {r.status_code}: {msgs}"
    result = msgs[-1]["result"]
    if MODERN not in result.get("supportedVersions", []):
        return f"supportedVersions is {result.get('supportedVersions')!r}"
    if "tools" not in result.get("capabilities", {}):
        return "the tools capability is not declared"
    if "prompts" in result["capabilities"]:
        return "declares capabilities it does not serve"


async def identifies(c):
    r, msgs = await c.send("server/discover")
    info = (msgs[-1]["result"].get("_meta") or {}).get("io.modelcontextprotocol/serverInfo") or {}
    if info.get("name") != "jianmu":
        return f"serverInfo is {info!r}"


async def meta_invalid(c):
    problems = []
    for drop, rid in (("protocolVersion", 103), ("clientCapabilities", 104)):
        params = {"_meta": meta(**{drop: True})}
        r, msgs = await c.send("server/discover", params, request_id=rid, with_meta=False)
        err = msgs[0].get("error", {}) if msgs else {}
        if r.status_code != 400 or err.get("code") != -32602:
            problems.append(f"without {drop}: HTTP {r.status_code}, {msgs}")
        elif msgs[0].get("id") != rid:
            problems.append(f"without {drop}: id not echoed")
    return "; ".join(problems) or None


async def client_info_optional(c):
    r, msgs = await c.send("tools/list", {"_meta": meta(clientInfo=True)}, with_meta=False)
    if r.status_code != 200 or "result" not in msgs[-1]:
        return f"HTTP {r.status_code}: {msgs}"


async def unsupported_version(c):
    params = {"_meta": {**meta(), "io.modelcontextprotocol/protocolVersion": "v999.0.0"}}
    r, msgs = await c.send("server/discover", params, {"MCP-Protocol-Version": "v999.0.0"},
                           request_id=301, with_meta=False)
    err = msgs[0].get("error", {}) if msgs else {}
    data = err.get("data") or {}
    if r.status_code != 400:
        return f"HTTP {r.status_code}: {msgs}"
    if MODERN not in (data.get("supported") or []) or data.get("requested") != "v999.0.0":
        return f"error data is {data!r}"
    if msgs[0].get("id") != 301:
        return "id not echoed"


async def header_mismatch(c):
    r, msgs = await c.send("tools/list", None, {"MCP-Protocol-Version": LEGACY})
    err = msgs[0].get("error", {}) if msgs else {}
    if r.status_code != 400 or err.get("code") != -32020:
        return f"HTTP {r.status_code}: {msgs}"


async def method_not_found(c):
    problems = []
    for i, method in enumerate(["initialize", "ping", "logging/setLevel", "resources/subscribe",
                                "resources/unsubscribe", "no/such_method"]):
        r, msgs = await c.send(method, {}, request_id=500 + i)
        err = msgs[0].get("error", {}) if msgs else {}
        if r.status_code != 404 or err.get("code") != -32601 or msgs[0].get("id") != 500 + i:
            problems.append(f"{method}: HTTP {r.status_code}, {msgs}")
    return "; ".join(problems) or None


async def only_answers_on_the_stream(c):
    _, msgs = await c.request("tools/call", {"name": "calculator", "arguments": {"input": "1+1"}})
    for m in msgs:
        if "method" in m and "id" in m:
            return f"a server request on the stream: {m}"
        if m.get("method") == "notifications/message":
            return f"a log message without logLevel: {m}"


async def mcp_method_header(c):
    problems = []
    for label, overrides in (("mismatched", {"Mcp-Method": "prompts/list"}),
                             ("missing", {"Mcp-Method": None}),
                             ("case", {"Mcp-Method": "TOOLS/LIST"})):
        r, msgs = await c.send("tools/list", None, overrides)
        err = msgs[0].get("error", {}) if msgs else {}
        if r.status_code != 400 or err.get("code") != -32020:
            problems.append(f"{label}: HTTP {r.status_code}, {msgs}")
    return "; ".join(problems) or None


async def mcp_name_header(c):
    problems = []
    call = {"name": "calculator", "arguments": {"input": "1"}}
    for label, overrides in (("mismatched", {"Mcp-Name": "wrong_tool_name"}),
                             ("missing", {"Mcp-Name": None})):
        r, msgs = await c.send("tools/call", call, overrides)
        err = msgs[0].get("error", {}) if msgs else {}
        if r.status_code != 400 or err.get("code") != -32020:
            problems.append(f"{label}: HTTP {r.status_code}, {msgs}")
    # Whitespace around a value is not part of it (RFC 9110 5.5); the HTTP client
    # refuses to send it, so this one goes over a raw socket.
    status, answer = await raw_call(c.url, c.http.headers["Authorization"], call, "  calculator  ")
    if status != 200 or '"result"' not in answer:
        problems.append(f"whitespace around the value: HTTP {status}, {answer[:300]}")
    return "; ".join(problems) or None


async def raw_call(url, authorization, params, name_header):
    host, port = url.split("/")[2].split(":")
    body = json.dumps({"jsonrpc": "2.0", "id": 7, "method": "tools/call",
                       "params": {**params, "_meta": meta()}}).encode()
    head = (f"POST /mcp HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
            f"Accept: application/json, text/event-stream\r\nMCP-Protocol-Version: {MODERN}\r\n"
            f"Mcp-Method: tools/call\r\nMcp-Name: {name_header}\r\nAuthorization: {authorization}\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n").encode()
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(head + body)
    await writer.drain()
    answer = (await reader.read()).decode(errors="replace")
    writer.close()
    status = int(answer.split(" ", 2)[1]) if answer.startswith("HTTP/") else 0
    return status, answer


TASKS = {"extensions": {"io.modelcontextprotocol/tasks": {}}}


async def with_tasks(c, method, params):
    params = {**params, "_meta": {**meta(), "io.modelcontextprotocol/clientCapabilities": TASKS}}
    r, msgs = await c.send(method, params, with_meta=False)
    final = [m for m in msgs if "result" in m or "error" in m]
    return r.status_code, (final[-1] if final else {})


ISO = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")


async def tasks_lifecycle(c):
    """tasks-lifecycle: a background job is a task; tasks/get inlines its result."""
    status, created = await with_tasks(c, "tools/call", {"name": "bash", "arguments": {
        "command": "echo started; sleep 3; echo finished", "background": True, "yield_ms": 100}})
    result = created.get("result", {})
    if status != 200 or result.get("resultType") != "task" or not result.get("taskId"):
        return f"sep-2663-result-type-task-on-create: HTTP {status}: {created}"
    if result.get("status") != "working" or "result" in result:
        return f"a running job is a working task without a result: {result}"
    if not (ISO.match(result.get("createdAt", "")) and ISO.match(result.get("lastUpdatedAt", ""))):
        return f"timestamps are not ISO 8601: {result}"
    task_id = result["taskId"]
    _, got = await with_tasks(c, "tasks/get", {"taskId": task_id})
    if got.get("result", {}).get("status") != "working" or got["result"].get("taskId") != task_id:
        return f"sep-2663-tasks-get-status-working: {got}"
    # The job is a job too.
    jobs, _ = await c.request("tools/call", {"name": "bash_jobs", "arguments": {}})
    if "finished" not in json.dumps(jobs):
        return f"bash_jobs does not list the task's job: {jobs}"
    # Polled often, so that polls land between the job's last line and its end: a
    # poll of a running task must not take output away from the result.
    for _ in range(750):
        await asyncio.sleep(0.02)
        _, got = await with_tasks(c, "tasks/get", {"taskId": task_id})
        if got.get("result", {}).get("status") != "working":
            break
    done = got.get("result", {})
    content = (done.get("result") or {}).get("content") or []
    if done.get("status") != "completed" or not content or "finished" not in content[0].get("text", ""):
        return f"sep-2663-tasks-get-status-completed: {done}"
    if done["result"].get("isError"):
        return "a job that exited 0 is not an error"


async def tasks_cancel(c):
    _, created = await with_tasks(c, "tools/call", {"name": "bash", "arguments": {
        "command": "exec sleep 300", "background": True, "yield_ms": 50}})
    task_id = created.get("result", {}).get("taskId")
    if not task_id:
        return f"no task: {created}"
    status, ack = await with_tasks(c, "tasks/cancel", {"taskId": task_id})
    if status != 200 or "result" not in ack:
        return f"tasks/cancel: HTTP {status}: {ack}"
    _, got = await with_tasks(c, "tasks/get", {"taskId": task_id})
    if got.get("result", {}).get("status") == "working":
        return f"still working after tasks/cancel: {got}"
    status, unknown = await with_tasks(c, "tasks/get", {"taskId": "nonexistent-12345"})
    if unknown.get("error", {}).get("code") != -32602:
        return f"an unknown taskId: HTTP {status}: {unknown}"
    # Without the extension declared, the same call answers at once, as a result.
    plain, _ = await c.request("tools/call", {"name": "bash", "arguments": {
        "command": "echo plain", "background": True, "yield_ms": 500}})
    if plain.get("resultType") == "task" or "plain" not in plain["content"][0]["text"]:
        return f"a client without the extension got {plain}"


async def dns_rebinding(url, token):
    auth = {"Authorization": f"Bearer {token}"}
    body = {"jsonrpc": "2.0", "id": 1, "method": "server/discover", "params": {"_meta": meta()}}
    base = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream",
            "MCP-Protocol-Version": MODERN, "Mcp-Method": "server/discover", **auth}
    host = url.split("/")[2]
    async with httpx2.AsyncClient() as http:
        evil = await http.post(url, json=body, headers={**base, "Host": "evil.example.com",
                                                        "Origin": "http://evil.example.com"})
        good = await http.post(url, json=body, headers={**base, "Host": host, "Origin": f"http://{host}"})
    if not 400 <= evil.status_code < 500:
        return f"a rebound Host/Origin got HTTP {evil.status_code}"
    if good.status_code != 200:
        return f"a localhost Host/Origin got HTTP {good.status_code}: {good.text}"


async def main(url, token, workspace):
    # A one-pixel PNG for the image scenario.
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg==")
    with open(f"{workspace}/dot.png", "wb") as f:
        f.write(png)
    auth = {"Authorization": f"Bearer {token}"}
    async with httpx2.AsyncClient(headers=auth, timeout=30) as http:
        stateless = Stateless(http, url)
        legacy = await Session(http, url).open()
        for name, check in TOOLS.items():
            await run(f"{MODERN} {name}", check, stateless)
            await run(f"{LEGACY} {name}", check, legacy)
        await legacy.close()
        for name, check in {
            "caching": caching,
            "server/discover": discover,
            "server-stateless sep-2575-server-identifies-in-result-meta": identifies,
            "server-stateless sep-2575-request-meta-invalid": meta_invalid,
            "server-stateless sep-2575-request-meta-client-info-optional": client_info_optional,
            "server-stateless sep-2575-server-unsupported-version-error": unsupported_version,
            "server-stateless sep-2575-http-server-header-mismatch-400": header_mismatch,
            "server-stateless sep-2575-http-server-method-not-found-404": method_not_found,
            "server-stateless sep-2575-server-no-independent-requests-and-no-log": only_answers_on_the_stream,
            "tasks-lifecycle": tasks_lifecycle,
            "tasks-cancel": tasks_cancel,
            "http-standard-headers Mcp-Method": mcp_method_header,
            "http-standard-headers Mcp-Name": mcp_name_header,
        }.items():
            await run(name, check, stateless)
    await run("dns-rebinding-protection", dns_rebinding, url, token)
    print(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
