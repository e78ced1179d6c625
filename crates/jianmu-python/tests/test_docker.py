"""`DockerSandbox`: built-in tools run in a container of their own, on the image
`cargo xtask test-all` builds from the `jianmu` under test."""

import asyncio
import os

import pytest

import jianmu_tools as jt
from jianmu_tools import ToolError, ToolSet


@pytest.fixture
def docker_ws(ws):
    # As the tests run as root, the workspace is given to the sandbox user, as a user
    # would `chown` one for it.
    if os.stat(ws).st_uid == 0:
        os.chown(ws, 65534, 65534)
    return ws


def test_builtin_tools_run_in_the_container(docker_ws, docker_image):
    sandbox = jt.DockerSandbox(image=docker_image)
    bus = jt.EventBus()
    events = []
    bus.subscribe(events.append)
    runner = jt.ToolRunner(sandbox, bus=bus)
    ts = ToolSet.resolve(["bash", "write_file", "read_file", "calculator"])

    async def main():
        uid = await ts.execute("bash", {"command": "id -u"}, runner=runner)
        host = await ts.execute("bash", {"command": "cat /etc/hostname; echo $HOME"}, runner=runner)
        # State is the container's: a file it writes appears in the workspace.
        wrote = await ts.execute("write_file", {"path": "made/in.txt", "content": "container\n"}, runner=runner)
        read = await ts.execute("read_file", {"path": "made/in.txt"}, runner=runner)
        calc = await ts.execute("calculator", "6*7", runner=runner)
        no_net = None
        try:
            await ts.execute("bash", {"command": "wget -q -T 2 -O- http://10.255.255.1/ || exit 9"}, runner=runner)
        except ToolError as e:
            no_net = e
        return uid, host, wrote, read, calc, no_net

    try:
        uid, host, wrote, read, calc, no_net = asyncio.run(main())
    finally:
        assert sandbox.close()
    assert uid.strip() == "65534"
    assert os.uname().nodename not in host
    assert wrote == "Wrote made/in.txt (10 bytes)"
    assert read == "container\n"
    assert (docker_ws / "made/in.txt").read_text() == "container\n"
    assert calc == "42"
    assert no_net is not None and str(no_net).startswith("Error (")
    kinds = [e["event"] for e in events]
    assert kinds.count("execution.started") == 6
    assert kinds.count("execution.completed") == 5 and kinds.count("execution.failed") == 1


def test_the_sandbox_refuses_a_python_function_tool(docker_ws, docker_image):
    @jt.tool
    def add(a: int, b: int) -> int:
        return a + b

    sandbox = jt.DockerSandbox(image=docker_image)
    with pytest.raises(ToolError) as e:
        asyncio.run(add.execute({"a": 1, "b": 2}, runner=sandbox))
    assert e.value.kind == "runner" and "LocalSandbox" in str(e.value)
    assert asyncio.run(add.execute({"a": 1, "b": 2}, runner=jt.LocalSandbox())) == 3
    sandbox.close()


def test_a_missing_image_is_an_error_that_says_what_to_do(docker_ws):
    sandbox = jt.DockerSandbox(image="jianmu-sandbox:no-such-tag")
    with pytest.raises(ToolError) as e:
        asyncio.run(jt.BashTool().execute({"command": "true"}, runner=sandbox))
    assert "no-such-tag" in str(e.value)
    sandbox.close()


def test_unknown_docker_settings_are_refused(docker_ws):
    sandbox = jt.DockerSandbox(image="x", no_such_setting=1)
    with pytest.raises(ToolError) as e:
        asyncio.run(jt.BashTool().execute({"command": "true"}, runner=sandbox))
    assert e.value.kind == "config" and "no_such_setting" in str(e.value)


def test_the_documented_example_runs_as_written(docker_ws, docker_image, tmp_path):
    import re
    import subprocess
    import sys
    from pathlib import Path

    page = (Path(__file__).resolve().parents[3] / "docs" / "integrations.md").read_text()
    example = re.search(r"## In Python\n.*?```python\n(.*?)```", page, re.S).group(1)
    (docker_ws / "README.md").write_text("# readme\n")
    os.chown(docker_ws / "README.md", os.stat(docker_ws).st_uid, os.stat(docker_ws).st_gid)
    script = example.replace("jianmu-sandbox:0.1.0", docker_image)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=docker_ws, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = [line for line in out.stdout.splitlines() if line]
    assert lines[0] == str(2**100)
    assert "# readme" in lines
    assert any("'event': 'execution.completed'" in line for line in lines)
    assert lines[-1] == "65534"


def test_a_change_that_does_not_come_back_is_named(docker_ws, docker_image):
    # A copied workspace with a 1 MiB limit: a bigger file made in the sandbox stays
    # there, and closing says so.
    sandbox = jt.DockerSandbox(image=docker_image, workspace_mode="copy", copy_limit_mib=1)
    bash = jt.BashTool()
    asyncio.run(bash.execute({"command": "echo kept > kept.txt; head -c 1100000 /dev/zero > over.bin"}, runner=sandbox))
    with pytest.warns(RuntimeWarning) as caught:
        assert sandbox.close() is False
    report = str(caught[0].message)
    assert "over.bin: 1100000 bytes would pass copy_limit_mib (1 MiB)" in report
    assert (docker_ws / "kept.txt").read_text() == "kept\n"
    assert not (docker_ws / "over.bin").exists()
