"""A real MCP client (the `mcp` package from PyPI) against `jianmu mcp` with deferred tools.

Usage: mcp_defer.py JIANMU WORKSPACE CONFIG. Prints one JSON object with what it saw.
"""
import json
import sys

import anyio
import mcp.types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def text(result):
    return "".join(getattr(c, "text", "") for c in result.content)


def size(tools):
    # The characters of the listing as a client would put it in a model's context:
    # each tool's definition as compact JSON.
    return sum(
        len(json.dumps(t.model_dump(by_alias=True, exclude_none=True), separators=(",", ":")))
        for t in tools
    )


async def main(jianmu, workspace, config):
    seen = {"changed": 0, "messages": []}

    async def on_message(message):
        seen["messages"].append(repr(message)[:200])
        root = getattr(message, "root", message)
        if isinstance(root, types.ToolListChangedNotification):
            seen["changed"] += 1

    for flags, key in (([], "plain"), (["--config", config], "deferred")):
        params = StdioServerParameters(
            command=jianmu, args=["mcp", "--workspace", workspace, *flags]
        )
        async with stdio_client(params) as (read, write):
            async with ClientSession(read, write, message_handler=on_message) as session:
                init = await session.initialize()
                listed = (await session.list_tools()).tools
                seen[key] = {
                    "names": sorted(t.name for t in listed),
                    "chars": size(listed),
                    "list_changed": bool(init.capabilities.tools and init.capabilities.tools.list_changed),
                }
                if key != "deferred":
                    continue
                early = await session.call_tool("git_status", {})
                seen["early"] = [early.is_error, text(early)]
                found = await session.call_tool("tool_search", {"query": "working tree status"})
                seen["found"] = [
                    found.is_error,
                    [t["name"] for t in found.structured_content["tools"]],
                    found.structured_content["text"] == text(found),
                ]
                bad = await session.call_tool("tool_search", {"query": "x", "max_results": 99})
                seen["bad"] = [bad.is_error, text(bad)]
                picked = await session.call_tool("tool_search", {"query": "select:hover"})
                seen["picked"] = [t["name"] for t in picked.structured_content["tools"]]
                await anyio.sleep(0.2)
                seen["relisted"] = sorted(t.name for t in (await session.list_tools()).tools)
                status = await session.call_tool("git_status", {})
                seen["status"] = [status.is_error, text(status)]
    print(json.dumps(seen))


if __name__ == "__main__":
    anyio.run(main, *sys.argv[1:])
