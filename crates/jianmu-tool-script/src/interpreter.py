# The python_repl child: runs code sent by the host, one request at a time, in one
# persistent namespace. Requests and answers are JSON lines on the pipes that were
# stdin and stdout when the process started; user code sees /dev/null there instead.
# Each answer carries its request's id. After each request, every process the code
# started is ended.
import ast
import builtins
import json
import os
import signal
import sys
import threading
import time
import traceback

proto_in = os.fdopen(os.dup(0), "r", encoding="utf-8")
proto_out = os.fdopen(os.dup(1), "w", encoding="utf-8")
null = os.open(os.devnull, os.O_RDWR)
for fd in (0, 1, 2):
    os.dup2(null, fd)
sys.stdin = open(os.devnull, "r")

config = json.loads(proto_in.readline())
LIMIT = int(config.get("max_output", 10000))
# What is kept of an answer: more than LIMIT when the rest is saved to a file.
KEEP = max(LIMIT, int(config.get("keep", LIMIT)))
OWN_PID_NAMESPACE = bool(config.get("own_pid_namespace")) and os.getpid() == 1
if not OWN_PID_NAMESPACE:
    # Become the subreaper of what the code starts, so orphans come back here to be
    # ended (in its own PID namespace the interpreter is their reaper already).
    try:
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except Exception:  # noqa: BLE001 - without it the host's supervisor still ends them
        pass


def children():
    found = []
    try:
        for tid in os.listdir("/proc/self/task"):
            with open("/proc/self/task/%s/children" % tid) as f:
                found.extend(int(p) for p in f.read().split())
    except OSError:
        pass
    return found


def reap():
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def end_children():
    """Ends every process below the interpreter."""
    if OWN_PID_NAMESPACE:
        try:
            os.kill(-1, signal.SIGKILL)  # in its own PID namespace: only the code's processes
        except OSError:
            pass
    for _ in range(1000):
        found = children()
        if not found:
            break
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        try:
            os.waitpid(-1, 0)
        except ChildProcessError:
            break
    reap()


# The protocol stream is written by the main thread (answers) and by the sender of
# partial output; one lock keeps their lines whole.
proto_lock = threading.Lock()
# What the running request printed and has not been sent yet: [request id, stream
# name, text] triples, sent as `partial` lines at most every PARTIAL_EVERY seconds, so
# that a request stopped by its time limit is answered with what it printed until then.
pending = []
PARTIAL_EVERY = 0.05


def send_pending():
    with proto_lock:
        if not pending:
            return
        lines = []
        for request, stream, text in pending:
            if lines and lines[-1]["id"] == request and stream in lines[-1]["partial"]:
                lines[-1]["partial"][stream] += text
            elif lines and lines[-1]["id"] == request:
                lines[-1]["partial"][stream] = text
            else:
                lines.append({"id": request, "partial": {stream: text}})
        del pending[:]
        try:
            for line in lines:
                proto_out.write(json.dumps(line) + "\n")
            proto_out.flush()
        except (OSError, ValueError):
            pass


def sender():
    while True:
        time.sleep(PARTIAL_EVERY)
        if pending:
            send_pending()


def forked():
    # A process the code forks has no sender and must never write to the protocol
    # stream; the lock may have been held by the sender at the fork.
    global proto_lock, pending, IN_FORK
    proto_lock = threading.Lock()
    pending = []
    IN_FORK = True


IN_FORK = False
os.register_at_fork(after_in_child=forked)


class Capture:
    """Keeps the first KEEP characters written and counts the rest, so printing
    forever costs the child nothing but time. The first LIMIT of it is also sent as it comes,
    as partial output of request `request`."""

    def __init__(self, request=None, stream="stdout"):
        self.parts = []
        self.kept = 0
        self.dropped = 0
        self.request = request
        self.stream = stream

    def write(self, text):
        if not isinstance(text, str):
            raise TypeError("write() argument must be str, not %s" % type(text).__name__)
        room = KEEP - self.kept
        if room > 0:
            piece = text[:room]
            # Sent as it comes only up to LIMIT, for progress.
            shown = piece[: max(0, LIMIT - self.kept)]
            self.parts.append(piece)
            self.kept += len(piece)
            if self.request is not None and shown and not IN_FORK:
                with proto_lock:
                    pending.append([self.request, self.stream, shown])
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


def run(code, request):
    out, err = Capture(request, "stdout"), Capture(request, "stderr")
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
            # As a notebook cell: when the last statement is an expression, its value
            # is the answer's value, after what the code printed.
            tree = ast.parse(code, "<repl>", "exec")
            last = tree.body.pop() if tree.body and isinstance(tree.body[-1], ast.Expr) else None
            exec(compile(tree, "<repl>", "exec"), namespace)
            if last is not None:
                value = eval(compile(ast.Expression(last.value), "<repl>", "eval"), namespace)
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
        # A thread the code left may still hold them: what it writes is not this
        # request's output any more.
        out.request = err.request = None
    answer = {"stdout": out.text(), "stderr": err.text(), "dropped": out.dropped + err.dropped}
    if error is not None:
        answer["error"] = error.rstrip("\n")
    elif value is not None:
        try:
            text = str(value)
            answer["value"] = text[:KEEP]
            answer["dropped"] += max(0, len(text) - KEEP)
        except BaseException as exc:  # noqa: BLE001
            answer["error"] = "str() of the result failed: %r" % (exc,)
    return answer


proto_out.write(json.dumps({"ready": sys.version.split()[0]}) + "\n")
proto_out.flush()
threading.Thread(target=sender, daemon=True).start()
for line in proto_in:
    request = json.loads(line)
    answer = run(request["code"], request.get("id"))
    end_children()
    answer["id"] = request.get("id")
    with proto_lock:
        # The answer holds all of it: what was not sent yet need not be.
        del pending[:]
        proto_out.write(json.dumps(answer) + "\n")
        proto_out.flush()
