"""A real MCP client (PyPI `mcp`) answering `jianmu mcp --ask` by elicitation, on both
protocol generations: 2025-11-25 (the server sends `elicitation/create` on the protocol
session) and 2026-07-28 (the server answers `input_required`, the client retries with
its answer). Usage: mcp_ask.py JIANMU WORKSPACE. Prints one JSON object: per revision
and answer, what the client was asked and what each call returned.
"""
import json
import sys

import anyio
from mcp import Client, StdioServerParameters
from mcp.types import ElicitResult

COMMANDS = ["echo one", "echo two", "printf three"]


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


async def run(jianmu, workspace, mode, answer):
    asked = []

    async def elicit(context, params):
        asked.append({"message": params.message, "schema": params.requested_schema})
        if answer == "decline":
            return ElicitResult(action="decline")
        return ElicitResult(action="accept", content={"decision": answer})

    params = StdioServerParameters(
        command=jianmu, args=["mcp", "--workspace", workspace, "--ask", "command:echo"]
    )
    options = {"elicitation_callback": elicit} if answer is not None else {}
    calls = []
    async with Client(params, mode=mode, **options) as client:
        for command in COMMANDS:
            try:
                result = await client.call_tool("bash", {"command": command})
                calls.append(["error" if result.is_error else "ok", text(result)])
            except Exception as e:  # a JSON-RPC error
                calls.append(["raised", str(e)])
    return {"asked": asked, "calls": calls}


async def main(jianmu, workspace):
    seen = {}
    for mode in ["legacy", "2026-07-28"]:
        for answer in ["allow_session", "allow_once", "deny", "decline", None]:
            seen[f"{mode} {answer}"] = await run(jianmu, workspace, mode, answer)
    print(json.dumps(seen))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:3])
