"""The Python package against the original framework's pure-Python tools, in one
process: `calculator`, `read_file` (a whole 4 KB and 700 KB file) and `grep`-like search (a
folder of the bench corpus), each called through `await tool.execute(...)` as an agent
would, best of several repeats. Prints one JSON object of seconds per call.

The reference tools are written from the original documentation: the calculator's
character check and `eval`; the file reader's path checks and `read_text` in the
default executor; a grep that walks the folder (hidden entries skipped), reads each
file as text and matches each line with `re`, stopping at `limit`.

usage: python_package.py CORPUS_DIR DATA_DIR
"""

import asyncio
import json
import os
import re
import sys
import time
from pathlib import Path

import jianmu_tools as jt

EXPR = "(12+34)*5-67//8+9%4**2/3-1.5*2"


class SeedCalculator:
    name = "calculator"

    def run(self, input):
        allowed = set("0123456789+-*/().% ")
        if not all(c in allowed for c in input):
            return f"Error: Only math expressions allowed, got: {input}"
        return str(eval(input))

    async def execute(self, args):
        return self.run(args)


class SeedFileRead:
    name = "read_file"

    def __init__(self, base_path, max_file_size=1024 * 1024):
        self.base_path = Path(base_path).resolve()
        self.max_file_size = max_file_size

    def _validate_path(self, path):
        file_path = (self.base_path / path).resolve()
        file_path.relative_to(self.base_path)
        if not file_path.exists():
            return file_path, f"Error: File not found: {path}"
        if not file_path.is_file():
            return file_path, f"Error: Not a file: {path}"
        if file_path.stat().st_size > self.max_file_size:
            return file_path, "Error: File too large"
        return file_path, None

    async def execute(self, args):
        file_path, error = self._validate_path(args["path"])
        if error:
            return error
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(None, file_path.read_text)
        except UnicodeDecodeError:
            return f"Error: Cannot decode file as UTF-8: {args['path']}"


class SeedGrep:
    name = "grep_search"

    def __init__(self, base_path):
        self.base_path = Path(base_path).resolve()

    def _search(self, query, path=".", limit=200):
        pattern = re.compile(re.escape(query))
        root = (self.base_path / path).resolve()
        results = []
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
            for name in sorted(filenames):
                if name.startswith("."):
                    continue
                file_path = Path(dirpath) / name
                try:
                    text = file_path.read_text()
                except (UnicodeDecodeError, OSError):
                    continue
                for number, line in enumerate(text.splitlines(), 1):
                    if pattern.search(line):
                        rel = file_path.relative_to(self.base_path)
                        results.append(f"{rel}:{number}:{line}")
                        if len(results) >= limit:
                            return "\n".join(results)
        return "\n".join(results) if results else "No matches found"

    async def execute(self, args):
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(None, lambda: self._search(**args))


def best(fn, number, repeat=5):
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        for _ in range(number):
            fn()
        times.append((time.perf_counter() - start) / number)
    return min(times)


def best_async(make, number, repeat=5):
    async def main():
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            for _ in range(number):
                await make()
            times.append((time.perf_counter() - start) / number)
        return min(times)

    return asyncio.run(main())


def main():
    corpus, data = Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve()
    data.mkdir(parents=True, exist_ok=True)
    text = "".join(f"{i:06}: the quick brown fox jumps!\n" for i in range(20_000))
    (data / "read-700k.txt").write_text(text)
    (data / "read-4k.txt").write_text(text[:4000])
    os.chdir(data)

    calc, seed_calc = jt.CalculatorTool(), SeedCalculator()
    assert calc.run(EXPR) == seed_calc.run(EXPR), (calc.run(EXPR), seed_calc.run(EXPR))
    read, seed_read = jt.FileReadTool(base_path=data), SeedFileRead(data)
    read_args = {"path": "read-700k.txt"}
    small_args = {"path": "read-4k.txt"}
    for args in (read_args, small_args):
        assert asyncio.run(read.execute(args)) == asyncio.run(seed_read.execute(args))
    grep = jt.GrepSearchTool(base_path=corpus.parent)
    seed_grep = SeedGrep(corpus.parent)
    grep_args = {"query": "jiffies_to_msecs", "path": corpus.name, "limit": 200}
    ours = asyncio.run(grep.execute(grep_args)).strip().splitlines()
    theirs = asyncio.run(seed_grep.execute(grep_args)).strip().splitlines()
    assert sorted(ours) == sorted(theirs) and len(ours) > 0, (len(ours), len(theirs))

    result = {
        "calc_sync": best(lambda: calc.run(EXPR), 20_000),
        "calc_execute": best_async(lambda: calc.execute(EXPR), 20_000),
        "seed_calc_execute": best_async(lambda: seed_calc.execute(EXPR), 20_000),
        "read_small_execute": best_async(lambda: read.execute(small_args), 2000),
        "seed_read_small_execute": best_async(lambda: seed_read.execute(small_args), 2000),
        "read_execute": best_async(lambda: read.execute(read_args), 200),
        "seed_read_execute": best_async(lambda: seed_read.execute(read_args), 200),
        "grep_execute": best_async(lambda: grep.execute(grep_args), 3, repeat=3),
        "seed_grep_execute": best_async(lambda: seed_grep.execute(grep_args), 1, repeat=3),
        "grep_matches": len(ours),
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
