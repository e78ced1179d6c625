"""The framework's module paths (`jianmu-tools-compat`): code written for the framework
imports unchanged and gets the documented answers, running natively."""

import asyncio

from jianmu.tool import BuiltinToolProvider, Tool, ToolRunner, ToolSet, tool
from jianmu.tool.builtin import BashTool, CalculatorTool, FileReadTool, HTTPTool


def test_the_documented_imports_resolve_to_the_native_tools():
    import jianmu_tools

    assert ToolSet is jianmu_tools.ToolSet
    assert BuiltinToolProvider is jianmu_tools.BuiltinToolProvider
    assert issubclass(HTTPTool, jianmu_tools.BuiltinTool)
    assert HTTPTool().name == "http_request"
    assert issubclass(CalculatorTool, Tool)
    assert callable(tool)


def test_the_calculator_answers_as_documented():
    calc = CalculatorTool()
    assert calc.run("2+2") == "4"
    assert calc.run("2**100") == "1267650600228229401496703205376"
    assert calc.run("__import__('os')") == "Error: Only math expressions allowed, got: __import__('os')"
    assert calc.run("abc") == "Error: Only math expressions allowed, got: abc"
    # A failure inside the allowed characters is an answer too, not an exception.
    assert calc.run("1/0").startswith("Error")


def test_failures_are_answers_not_exceptions(tmp_path):
    failed = asyncio.run(BashTool(base_path=tmp_path).run("echo oops >&2; exit 3"))
    assert failed.startswith("Error (3):"), failed
    assert "oops" in failed
    missing = asyncio.run(FileReadTool(base_path=tmp_path).run("nope.txt"))
    assert missing.startswith("Error: "), missing


def test_the_runner_takes_the_configuration_as_written(tmp_path):
    # `jianmu.yaml` read whole, or its `execution` mapping alone.
    config = {"execution": {"tool_runner": "docker", "docker": {"image": "jianmu-sandbox:test"}}}
    runner = ToolRunner.from_config(config)
    assert type(runner.sandbox).__name__ == "DockerSandbox"
    runner = ToolRunner.from_config(config["execution"])
    assert type(runner.sandbox).__name__ == "DockerSandbox"
    assert type(ToolRunner.from_config({}).sandbox).__name__ == "LocalSandbox"
