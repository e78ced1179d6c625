# The python_repl child: runs code sent by the host, one request at a time, in one
# persistent namespace. Requests and answers are JSON lines on the pipes that were
# stdin and stdout when the process started; user code sees /dev/null there instead.
import ast
import builtins
import json
import os
import sys
import traceback

proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
sys.stdin = open(os.devnull, "r")

config = json.loads(proto_in.readline())
LIMIT = int(config.get("max_output", 10000))


class Capture:
    """Keeps the first LIMIT characters written and counts the rest, so printing
    forever costs the child nothing but time."""

    def __init__(self):
        self.parts = []
        self.kept = 0
        self.dropped = 0

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        room = LIMIT - self.kept
        if room > 0:
            piece = text[:room]
            self.parts.append(piece)
            self.kept += len(piece)
        self.dropped += max(0, len(text) - max(room, 0))
        return len(text)

    def flush(self):
        pass

    def isatty(self):
        return False

    @property
    def buffer(self):
        capture = self

        class Bytes:
            def write(self, data):
                capture.write(bytes(data).decode("utf-8", "replace"))
                return len(data)

            def flush(self):
                pass

        return Bytes()

    def text(self):
        return "".join(self.parts)


namespace = {"__name__": "__main__"}
allowed = config.get("allowed_modules")
if allowed is not None:
    allowed = set(allowed)
    real_import = builtins.__import__

    def guarded_import(name, globals=None, locals=None, fromlist=(), level=0):
        top = name.split(".")[0]
        if level == 0 and top not in allowed:
            raise ImportError("import of %r is not allowed (allowed modules: %s)" % (top, ", ".join(sorted(allowed))))
        return real_import(name, globals, locals, fromlist, level)

    user_builtins = dict(vars(builtins))
    user_builtins["__import__"] = guarded_import
    namespace["__builtins__"] = user_builtins
namespace.update(config.get("globals") or {})


def run(code):
    out, err = Capture(), Capture()
    saved = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = out, err
    value, error = None, None
    try:
        try:
            compiled = compile(code, "<repl>", "eval")
        except SyntaxError:
            compiled = None
        if compiled is not None:
            value = eval(compiled, namespace)
        else:
            exec(compile(code, "<repl>", "exec"), namespace)
    except BaseException as exc:  # noqa: BLE001 - everything goes back to the model
        if isinstance(exc, KeyboardInterrupt):
            raise
        # The traceback's last lines, from user code on: where it failed and why.
        lines = traceback.format_exception(type(exc), exc, exc.__traceback__.tb_next)
        if lines and lines[0].startswith("Traceback"):
            lines = lines[1:]
        error = "".join(lines[-8:])
    finally:
        sys.stdout, sys.stderr = saved
    answer = {"stdout": out.text(), "stderr": err.text(), "dropped": out.dropped + err.dropped}
    if error is not None:
        answer["error"] = error.rstrip("\n")
    elif value is not None:
        try:
            text = str(value)
            answer["value"] = text[:LIMIT]
            answer["dropped"] += max(0, len(text) - LIMIT)
        except BaseException as exc:  # noqa: BLE001
            answer["error"] = "str() of the result failed: %r" % (exc,)
    return answer


proto_out.write(json.dumps({"ready": sys.version.split()[0]}) + "\n")
proto_out.flush()
for line in proto_in:
    request = json.loads(line)
    answer = run(request["code"])
    proto_out.write(json.dumps(answer) + "\n")
    proto_out.flush()
