"""The reference side of the agent toolset's differential test.

`fixture DIR` makes the test's files in DIR, with fixed modification times.
`reference DIR CALLS` runs each call of the JSON file CALLS (a list of
`{"name", "input"}`; a `file_path` of `$SAVED` is the file the latest
answer naming one named) through the SDK's own executor
(`anthropic.lib.tools.agent_toolset`) with DIR as its working directory, and prints
one JSON list of `[text, is_error]`.
"""

import asyncio
import json
import os
import sys
from contextlib import AsyncExitStack


def fixture(root):
    files = {
        "README.md": "# Demo\n\nA small project.\n",
        "src/app.py": "def main():\n    print('hello')\n    return 0\n",
        "src/util.py": "def helper(x):\n    return x * 2\n\n\ndef other():\n    return helper(21)\n",
        "src/data/notes.txt": "alpha\nbeta\ngamma\nbeta\n",
        "docs/guide.md": "Use `main`.\nThen `helper`.\n",
        "big.txt": "".join(f"line {i:06d} " + "x" * 80 + "\n" for i in range(1, 2001)),
        "crlf.txt": "one\r\ntwo\r\n",
        "unicode.txt": "héllo wörld\n日本語\n",
        "nb.ipynb": '{"cells": [{"cell_type": "code", "source": ["x = 1\\n"], "metadata": {}, '
        '"outputs": [], "execution_count": null}], "metadata": {}, "nbformat": 4, "nbformat_minor": 5}\n',
        "odd!name #1.txt": "bang here\nnothing\n",
    }
    for i, (rel, text) in enumerate(sorted(files.items())):
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as f:
            f.write(text.encode())
        # Distinct times, so "newest first" has one order.
        os.utime(path, (1_700_000_000 + i * 100, 1_700_000_000 + i * 100))
    # A link to a file in the workspace, read and edited through.
    os.symlink("src/app.py", os.path.join(root, "link.py"))


async def reference(root, calls):
    from anthropic.lib.tools._beta_functions import ToolError
    from anthropic.lib.tools.agent_toolset import AgentToolContext, beta_agent_toolset_20260401

    os.chdir(root)
    ctx = AgentToolContext(workdir=root)
    tools = {t.name: t for t in beta_agent_toolset_20260401(ctx)}
    answers = []
    async with AsyncExitStack() as stack:
        stack.push_async_callback(ctx.close)
        for call in calls:
            tool = tools[call["name"]]
            if call["input"].get("file_path") == "$SAVED":
                # The file the latest answer that names one named.
                named = next(a[0] for a in reversed(answers) if "saved to: " in a[0])
                call["input"]["file_path"] = named.split("saved to: ")[1].split(" — ")[0]
            try:
                out = await tool.call(call["input"])
                if not isinstance(out, str):
                    out = json.dumps(out)
                answers.append([out or "(no output)", False])
            except ToolError as e:
                content = e.content
                if not isinstance(content, str):
                    content = "".join(b.get("text", "") for b in content)
                answers.append([content or "(no output)", True])
        for tool in tools.values():
            from anthropic.lib.tools._beta_functions import aclose_runnable_tool

            await aclose_runnable_tool(tool)
    print(json.dumps(answers))


if __name__ == "__main__":
    if sys.argv[1] == "fixture":
        fixture(sys.argv[2])
    else:
        with open(sys.argv[3]) as f:
            calls = json.load(f)
        asyncio.run(reference(os.path.realpath(sys.argv[2]), calls))
