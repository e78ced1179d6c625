"""The MCP conformance suite's `input-required-result-*` server scenarios (SEP-2322,
multi round-trip requests), ported, against `jianmu mcp --http` started with
`--ask list_dir --ask file_info --ask command:echo --ask command:printf`.

Usage: mrtr.py URL TOKEN[,OTHER_TOKEN]. Prints one JSON object: {check: "ok" | "why it
failed"}. A suite check is named `input-required-result-<scenario> <check id>`, and each
ported scenario also gets the suite's `wire-schema-valid` check, cut down to what is
cheap to check by hand: complete results carry `resultType: "complete"` (and a
`content` array for tools/call); an `input_required` result carries `inputRequests`
and/or a string `requestState`, each input request is `{method, params}` (no `jsonrpc`,
no `id`) of one of the three methods, and a form elicitation has a string `message`
and a flat `requestedSchema` of primitive properties; errors are `{code: int,
message: string}`, -32021 with `data.requiredCapabilities` an object; every response
is JSON-RPC 2.0 answering the request's id.

The wire is the suite's (`sendRpc`): 2026-07-28 stateless requests, no handshake,
`_meta` with the suite's client info and capabilities (sampling, elicitation, roots),
`MCP-Protocol-Version`, `Mcp-Method` and `Mcp-Name` headers, a new id per request.

What stands in for the suite's fixtures. The server asks only for approval, so its one
kind of question is an elicitation form `{decision: allow_once|allow_session|deny}`
under the key `approval`, with a sealed `requestState` bound to the call:
- the fixture tools are built-in tools the server is started to ask about (see
  `FIXTURES`): `list_dir` (arguments `{}`) for `test_input_required_result_elicitation`
  and the rest, `file_info` (`{"path": "."}`) for `..._request_state` and
  `..._capabilities`;
- where the suite answers with its fixture's content (`{"name": "Alice"}`, `{"ok":
  true}`), the answer here is the approval `{"decision": "allow_once"}`; where it uses
  the key `user_name`, the key here is `approval`;
- ignore-extra-params: the suite sends its answer (and two unknown keys) without
  any `requestState`. An approval counts here only with the sealed state of the
  question it answers, so that exact request is asked again (the suite would give a
  WARNING). The check asserts that, then sends the same request with the state of a
  first round echoed, which must complete: the unknown keys are ignored;
- missing-input-response and validate-input send the suite's requests (no state),
  and again with a valid echoed state, so that the malformed answers are judged with
  a state that would otherwise let the call run.

Not applicable: a server that only asks for approval cannot meet the scenarios that
need another kind of question or a fixture of their own. Rather than fake them, each
`<scenario> not-applicable` entry is "ok" only once what the server does instead is
what the specification requires:
- basic-sampling, basic-list-roots, multiple-input-requests, multi-round: the suite's
  first request (fixture replaced by the gated tool) is asked with one
  `elicitation/create` under the single key `approval` (never sampling or roots/list,
  though the client declares them), and one round with the answer completes;
- non-tool-request: `prompts/get` of the suite's prompt is a JSON-RPC error (the server
  has no prompts), never `input_required`;
- capability-check: the suite's exact request (clientCapabilities `{"sampling": {}}`
  only) to a gated tool gets the error the specification requires of a server that
  needs an undeclared capability: -32021 with `data.requiredCapabilities.elicitation`,
  HTTP 400, the rule named. The suite's own check fails any error there, -32021
  included, which contradicts its `server-stateless` scenario (that one requires
  -32021 and HTTP 400 for an undeclared capability).

Checks of our own (`jianmu-approval ...`): a `deny`, `decline` or `cancel` answer is
an isError result naming the rule and is not remembered; a `requestState` replayed
for other arguments or another tool is refused (-32602, `requestState ...`); with two
tokens, one principal's `requestState` is refused for the other, and an
`allow_session` of one is not the other's; `allow_session` is remembered for its rule
(a later call it matches is not asked; another rule still is): last, on a rule
(`command:printf`) nothing else uses.
"""
import asyncio
import json
import os
import sys

sys.path.insert(0, os.path.dirname(__file__))
import conformance  # noqa: E402
import httpx2  # noqa: E402

# The suite's default request `_meta` (`withRequestMeta`).
META_DEFAULT = {
    "io.modelcontextprotocol/protocolVersion": conformance.MODERN,
    "io.modelcontextprotocol/clientInfo": {"name": "conformance-test-client", "version": "1.0.0"},
    "io.modelcontextprotocol/clientCapabilities": {
        "sampling": {}, "elicitation": {}, "roots": {"listChanged": True}},
}
# The suite's fixture tools and what stands in for them: a tool and its arguments.
LIST = ("list_dir", {})
INFO = ("file_info", {"path": "."})
FIXTURES = {
    "test_input_required_result_elicitation": LIST,
    "test_input_required_result_request_state": INFO,
    "test_input_required_result_tampered_state": LIST,
    "test_input_required_result_capabilities": INFO,
    "test_input_required_result_sampling": LIST,
    "test_input_required_result_list_roots": LIST,
    "test_input_required_result_multiple_inputs": LIST,
    "test_input_required_result_multi_round": LIST,
}
PROMPT = "test_input_required_result_prompt"
KEY = "approval"
ALLOW_ONCE = {"action": "accept", "content": {"decision": "allow_once"}}
INPUT_METHODS = {"elicitation/create", "sampling/createMessage", "roots/list"}
RESULTS = conformance.RESULTS


def truthy(v):
    """JavaScript truthiness, as the suite tests it (`{}` and `[]` are truthy)."""
    return not (v is None or v is False or v == "" or (type(v) in (int, float) and v == 0))


def is_input_required(result):
    return result is not None and result.get("resultType") == "input_required"


def call(fixture, **extra):
    """The params of a `tools/call` of what stands in for `fixture`."""
    name, arguments = FIXTURES[fixture]
    return {"name": name, "arguments": arguments, **extra, "_meta": META_DEFAULT}


class Wire(conformance.Stateless):
    """The suite's stateless wire, keeping every request and answer for the wire check."""

    def __init__(self, http, url):
        super().__init__(http, url)
        self.log = []

    async def send(self, method, params=None, headers=None, request_id=None, with_meta=True):
        r, msgs = await super().send(method, params, headers, request_id, with_meta)
        self.log.append((method, request_id if request_id is not None else self.next_id, r, msgs))
        return r, msgs


async def rpc(wire, method, params):
    """One request: its JSON-RPC answer (`{"result": ...}` or `{"error": ...}`), or an
    exception when the body holds none (as `sendRpc` throws)."""
    r, msgs = await wire.send(method, params)
    final = [m for m in msgs if "result" in m or "error" in m]
    mine = [m for m in final if m.get("id") == wire.next_id]
    if not final:
        raise AssertionError(f"Expected a JSON-RPC response for {method}, got HTTP {r.status_code} "
                             f"({r.headers.get('content-type')}): {r.text[:300]}")
    return (mine or final)[-1]


def error_text(answer):
    return f"JSON-RPC error: {answer['error'].get('message')}"


def complete_problems(answer, expected, need_content=False):
    """The suite's test of a retry's answer: no error, a result, not input_required."""
    if "error" in answer:
        return [error_text(answer)]
    result = answer.get("result")
    if result is None:
        return ["No result in response"]
    if is_input_required(result):
        return [expected]
    if need_content and not (isinstance(result.get("content"), list) and result["content"]):
        return ["Complete result missing content array"]
    return []


# ---- the wire check (a cut-down WireSchemaValid) ----

PRIMITIVE_TYPES = {"string", "number", "integer", "boolean"}


def schema_problems(schema):
    if not isinstance(schema, dict) or schema.get("type") != "object":
        return ["requestedSchema is not {type: object}"]
    props = schema.get("properties")
    if not isinstance(props, dict):
        return ["requestedSchema has no properties object"]
    problems = []
    for name, prop in props.items():
        kind = prop.get("type") if isinstance(prop, dict) else None
        if kind in PRIMITIVE_TYPES:
            enum = prop.get("enum")
            if enum is not None and (kind != "string" or not all(isinstance(e, str) for e in enum)):
                problems.append(f"property {name}: enum is not a list of strings")
        elif kind == "array":
            items = prop.get("items") or {}
            if not (isinstance(items.get("enum"), list) or isinstance(items.get("anyOf"), list)):
                problems.append(f"property {name}: an array that is not a multi-select enum")
        else:
            problems.append(f"property {name} is not primitive: {prop!r}")
    required = schema.get("required")
    if required is not None and not (
            isinstance(required, list) and all(isinstance(r, str) for r in required)):
        problems.append("required is not a list of strings")
    return problems


def result_problems(method, result):
    kind = result.get("resultType")
    if kind == "input_required":
        problems = []
        requests, state = result.get("inputRequests"), result.get("requestState")
        if requests is None and state is None:
            problems.append("an InputRequiredResult with neither inputRequests nor requestState")
        if state is not None and not isinstance(state, str):
            problems.append("requestState is not a string")
        for key, request in (requests or {}).items():
            if not isinstance(request, dict) or "jsonrpc" in request or "id" in request:
                problems.append(f"inputRequests[{key}] is not a bare {{method, params}}: {request!r}")
                continue
            m, params = request.get("method"), request.get("params")
            if m not in INPUT_METHODS:
                problems.append(f"inputRequests[{key}]: method {m!r}")
            elif m == "elicitation/create":
                if not isinstance(params, dict) or not isinstance(params.get("message"), str):
                    problems.append(f"inputRequests[{key}]: no message")
                elif params.get("mode", "form") == "form":
                    problems += [f"inputRequests[{key}]: {p}"
                                 for p in schema_problems(params.get("requestedSchema"))]
            elif m == "sampling/createMessage" and not (
                    isinstance(params, dict) and "messages" in params and "maxTokens" in params):
                problems.append(f"inputRequests[{key}]: sampling without messages and maxTokens")
        return problems
    if kind != "complete":
        return [f"{method}: resultType is {kind!r}, not \"complete\""]
    if method == "tools/call" and not isinstance(result.get("content"), list):
        return ["a CallToolResult without content"]
    if method in ("tools/list", "prompts/list") and not ("ttlMs" in result and "cacheScope" in result):
        return [f"{method}: no ttlMs or cacheScope"]
    if method == "prompts/get" and "messages" not in result:
        return ["a GetPromptResult without messages"]
    return []


def wire_problems(log):
    problems = []
    for method, rid, response, msgs in log:
        if not msgs:
            problems.append(f"{method} #{rid}: HTTP {response.status_code} without a JSON-RPC body")
        for m in msgs:
            if m.get("jsonrpc") != "2.0":
                problems.append(f"{method} #{rid}: not JSON-RPC 2.0: {m}")
            if "result" in m or "error" in m:
                if m.get("id") not in (rid, None) or ("result" in m and m.get("id") != rid):
                    problems.append(f"{method} #{rid}: answered id {m.get('id')!r}")
            if "result" in m:
                problems += [f"{method} #{rid}: {p}" for p in result_problems(method, m["result"])]
            elif "error" in m:
                e = m["error"]
                if not (isinstance(e.get("code"), int) and isinstance(e.get("message"), str)):
                    problems.append(f"{method} #{rid}: a malformed error {e}")
                elif e["code"] == -32021 and not isinstance(
                        (e.get("data") or {}).get("requiredCapabilities"), dict):
                    problems.append(f"{method} #{rid}: -32021 without data.requiredCapabilities")
    return problems


async def scenario(wire, name, checks, body):
    """Runs the suite's scenario `name`: `body(wire, out)` sets `out[check]` to a list
    of problems. A check an exception stops is failed with it, a check never reached
    says so; then the wire check over everything the scenario received."""
    wire.log = []
    out = {}
    try:
        await body(wire, out)
    except Exception as e:  # the suite records a scenario that throws as failed
        for check in checks:
            out.setdefault(check, [f"Failed: {type(e).__name__}: {e}"])
    for check in checks:
        problems = out.get(check, ["not run: an earlier check of the scenario failed"])
        RESULTS[f"input-required-result-{name} {check}"] = "; ".join(problems) or "ok"
    problems = wire_problems(wire.log)
    RESULTS[f"input-required-result-{name} wire-schema-valid"] = "; ".join(problems) or "ok"


# ---- the ported scenarios ----

async def basic_elicitation(w, out):
    """A1: asked by elicitation under the key; the retry with the answer completes."""
    fixture = "test_input_required_result_elicitation"
    r1 = await rpc(w, "tools/call", call(fixture))
    problems = []
    result = r1.get("result")
    if "error" in r1:
        problems.append(error_text(r1))
    elif result is None:
        problems.append("No result in response")
    elif not is_input_required(result):
        problems.append('Expected InputRequiredResult but got a complete result. Server should return '
                        'resultType: "input_required" with inputRequests.')
    elif not truthy(result.get("inputRequests")):
        problems.append("InputRequiredResult missing inputRequests")
    elif not truthy(result["inputRequests"].get(KEY)):
        problems.append(f'inputRequests missing expected key "{KEY}"')
    elif result["inputRequests"][KEY].get("method") != "elicitation/create":
        got = result["inputRequests"][KEY].get("method")
        problems.append(f'Expected method "elicitation/create", got "{got}"')
    out["sep-2322-elicitation-incomplete"] = problems
    if problems:
        return
    extra = {"inputResponses": {KEY: ALLOW_ONCE}}
    if "requestState" in result:
        extra["requestState"] = result["requestState"]
    r2 = await rpc(w, "tools/call", call(fixture, **extra))
    out["sep-2322-elicitation-complete"] = complete_problems(
        r2, "Expected complete result after retry with inputResponses", need_content=True)


async def request_state(w, out):
    """A4: the question comes with a requestState; echoed with the answer, the call completes."""
    fixture = "test_input_required_result_request_state"
    r1 = await rpc(w, "tools/call", call(fixture))
    result = r1.get("result")
    problems = []
    if "error" in r1:
        problems.append(error_text(r1))
    elif not is_input_required(result):
        problems.append("Expected InputRequiredResult")
    else:
        if not truthy(result.get("requestState")):
            problems.append("InputRequiredResult missing requestState")
        elif not isinstance(result["requestState"], str):
            problems.append("requestState must be a string")
        if not truthy(result.get("inputRequests")):
            problems.append("InputRequiredResult missing inputRequests")
    out["sep-2322-request-state-incomplete"] = problems
    if problems:
        return
    first = next(iter(result["inputRequests"]))
    r2 = await rpc(w, "tools/call", call(fixture, inputResponses={first: ALLOW_ONCE},
                                          requestState=result["requestState"]))
    out["sep-2322-request-state-complete"] = complete_problems(
        r2, "Expected complete result after retry with requestState")


async def missing_input_response(w, out):
    """A7: an answer under a wrong key is asked again (the suite's request, without a
    state; then with a valid echoed state)."""
    fixture = "test_input_required_result_elicitation"
    wrong = {"wrong_key": {"action": "accept", "content": {"data": "wrong"}}}
    r1 = await rpc(w, "tools/call", call(fixture, inputResponses=wrong))
    answers = [("without requestState", r1)]
    state = (r1.get("result") or {}).get("requestState")
    if state:
        answers.append(("with a valid requestState",
                        await rpc(w, "tools/call", call(fixture, inputResponses=wrong, requestState=state))))
    problems = []
    for label, answer in answers:
        result = answer.get("result")
        if "error" in answer:
            problems.append(f"{label}: Server returned JSON-RPC error instead of re-requesting via "
                            f"InputRequiredResult: {answer['error'].get('message')}")
        elif result is None:
            problems.append(f"{label}: No result in response")
        elif not is_input_required(result):
            problems.append(f"{label}: Expected InputRequiredResult re-requesting missing information, "
                            "but got a complete result")
    if not state:
        problems.append(f"no requestState to echo: {r1}")
    out["sep-2322-missing-response-rerequests"] = problems


async def result_type(w, out):
    """A10: the first call's result says `resultType: "input_required"`."""
    r1 = await rpc(w, "tools/call", call("test_input_required_result_elicitation"))
    result = r1.get("result")
    if "error" in r1:
        problems = [error_text(r1)]
    elif result is None:
        problems = ["No result in response"]
    elif "resultType" not in result:
        problems = ["resultType field is missing from response. Servers MUST include resultType to "
                    "indicate the type of the result."]
    elif result["resultType"] != "input_required":
        problems = [f'Expected resultType "input_required", got "{result["resultType"]}"']
    else:
        problems = []
    out["sep-2322-result-type-included"] = problems


async def unsupported_methods(w, out):
    """A11: tools/list and prompts/list never answer input_required."""
    problems = []
    for method in ("tools/list", "prompts/list"):
        answer = await rpc(w, method, {"_meta": META_DEFAULT})
        if is_input_required(answer.get("result")):
            problems.append(
                f"{method} returned InputRequiredResult, but it is not a supported method for MRTR")
    out["sep-2322-not-on-unsupported-requests"] = problems


async def tampered_state(w, out):
    """A12: the requestState with `-TAMPERED` appended is a JSON-RPC error."""
    fixture = "test_input_required_result_tampered_state"
    check = "sep-2322-reject-tampered-state"
    r1 = await rpc(w, "tools/call", call(fixture))
    result = r1.get("result")
    if "error" in r1 or not is_input_required(result):
        out[check] = ["Prerequisite failed: could not get initial InputRequiredResult with requestState"]
        return
    if not truthy(result.get("requestState")):
        out[check] = ["Server did not include requestState in InputRequiredResult"]
        return
    first = next(iter(result["inputRequests"]))
    r2 = await rpc(w, "tools/call", call(fixture, inputResponses={first: ALLOW_ONCE},
                                          requestState=result["requestState"] + "-TAMPERED"))
    if "error" in r2:
        out[check] = []
    elif r2.get("result") is not None and not is_input_required(r2["result"]):
        out[check] = ["Server accepted tampered requestState and returned complete result. Servers MUST "
                      f"reject state that fails integrity verification. ({r2['result']})"]
    else:
        out[check] = ["Server did not return a JSON-RPC error for tampered requestState. Servers MUST "
                      f"reject state that fails integrity verification. ({r2.get('result')})"]


async def ignore_extra_params(w, out):
    """A14: unknown keys beside the answer are ignored. The suite's request (no state)
    is asked again, an approval counting only with its question's sealed state; with
    the state of a first round echoed, it completes."""
    fixture = "test_input_required_result_elicitation"
    responses = {KEY: ALLOW_ONCE,
                 "unknown_extra_key": {"action": "accept", "content": {"foo": "bar"}},
                 "another_unexpected": {"action": "accept", "content": {"baz": 123}}}
    problems = []
    bare = await rpc(w, "tools/call", call(fixture, inputResponses=responses))
    if not is_input_required(bare.get("result")):
        problems.append(
            f"without requestState, an answer is not asked for, so the call must be asked: {bare}")
    r1 = await rpc(w, "tools/call", call(fixture))
    state = (r1.get("result") or {}).get("requestState")
    if not state:
        problems.append(f"no requestState to echo: {r1}")
    else:
        answer = await rpc(w, "tools/call", call(fixture, inputResponses=responses, requestState=state))
        if "error" in answer:
            problems.append(f"Server returned JSON-RPC error when extra params were included: "
                            f"{answer['error'].get('message')}. Servers SHOULD ignore unrecognized "
                            "information.")
        elif answer.get("result") is None:
            problems.append("No result in response")
        elif is_input_required(answer["result"]):
            problems.append("Server did not return complete result when valid inputResponses were provided "
                            "alongside extra keys. Servers SHOULD ignore information they do not recognize.")
    out["sep-2322-ignore-unexpected-params"] = problems


async def validate_input(w, out):
    """A15: `{approval: 12345}` and `inputResponses: null` are not taken as answers
    (an error or a new question), without a state as the suite sends them, then with
    a valid echoed state."""
    fixture = "test_input_required_result_elicitation"
    r1 = await rpc(w, "tools/call", call(fixture))
    state = (r1.get("result") or {}).get("requestState")
    checks = {
        "sep-2322-validate-input-responses": (
            {KEY: 12345}, "invalid inputResponses (number instead of object)"),
        "sep-2322-error-on-protocol-error": (None, "null inputResponses"),
    }
    for check, (responses, what) in checks.items():
        problems = []
        for extra in [{}] + ([{"requestState": state}] if state else []):
            answer = await rpc(w, "tools/call", call(fixture, inputResponses=responses, **extra))
            result = answer.get("result")
            if "error" not in answer and result is not None and not is_input_required(result):
                problems.append(f"Server accepted {what} and returned complete result"
                                f"{' (with a valid requestState)' if extra else ''}.")
        if not state:
            problems.append(f"no requestState to echo: {r1}")
        out[check] = problems


# ---- the scenarios a server asking only for approval cannot meet ----

async def one_round(w, fixture):
    """The suite's first request for `fixture`: asked once, by elicitation under the
    key `approval` only; the answer completes the call in one round. Problems."""
    r1 = await rpc(w, "tools/call", call(fixture))
    result = r1.get("result")
    if not is_input_required(result):
        return [f"the gated tool was not asked: {r1}"]
    requests = result.get("inputRequests") or {}
    problems = []
    if list(requests) != [KEY] or requests[KEY].get("method") != "elicitation/create":
        problems.append(f"asked {requests!r}, not one elicitation/create under `{KEY}`")
    if not result.get("requestState"):
        problems.append("no requestState")
    r2 = await rpc(w, "tools/call", call(fixture, inputResponses={KEY: ALLOW_ONCE},
                                          requestState=result.get("requestState")))
    if "error" in r2 or is_input_required(r2.get("result")) or (r2.get("result") or {}).get("isError"):
        problems.append(f"the answered call did not complete in one round: {r2}")
    return problems


def not_applicable(fixture):
    async def check(w):
        return "; ".join(await one_round(w, fixture) + wire_problems(w.log)) or None
    return check


async def non_tool_request(w):
    """prompts/get of the suite's prompt: a JSON-RPC error (there are no prompts)."""
    answer = await rpc(w, "prompts/get", {"name": PROMPT, "_meta": META_DEFAULT})
    if "error" not in answer or "result" in answer:
        return f"prompts/get of {PROMPT} is not a JSON-RPC error: {answer}"
    return "; ".join(wire_problems(w.log)) or None


async def capability_check(w):
    """The suite's request, with only `sampling` declared: -32021, HTTP 400, asking
    for `elicitation`, the rule named."""
    name, arguments = FIXTURES["test_input_required_result_capabilities"]
    meta = {**META_DEFAULT, "io.modelcontextprotocol/clientCapabilities": {"sampling": {}}}
    r, msgs = await w.send("tools/call", {"name": name, "arguments": arguments, "_meta": meta})
    error = msgs[-1].get("error") if msgs else None
    if not error or any("result" in m for m in msgs):
        return f"expected a -32021 error, got HTTP {r.status_code}: {msgs}"
    required = (error.get("data") or {}).get("requiredCapabilities")
    problems = []
    if error.get("code") != -32021:
        problems.append(f"code {error.get('code')}, not -32021")
    if not (isinstance(required, dict) and isinstance(required.get("elicitation"), dict)):
        problems.append(f"data.requiredCapabilities does not name elicitation: {error.get('data')}")
    if r.status_code != 400:
        problems.append(f"HTTP {r.status_code}, not 400")
    if f"ask `{name}`" not in error.get("message", ""):
        problems.append(f"the message does not name the rule `{name}`: {error.get('message')}")
    return "; ".join(problems + wire_problems(w.log)) or None


# ---- checks of our own ----

def bash(command):
    return {"name": "bash", "arguments": {"command": command}, "_meta": META_DEFAULT}


async def ask(w, params):
    """A first call that must be asked: its requestState."""
    answer = await rpc(w, "tools/call", params)
    result = answer.get("result")
    if not is_input_required(result) or not result.get("requestState"):
        raise AssertionError(f"{params['name']} {params['arguments']} was not asked: {answer}")
    return result["requestState"]


async def answered(w, params, response):
    state = await ask(w, params)
    return await rpc(w, "tools/call", {**params, "inputResponses": {KEY: response}, "requestState": state})


async def deny_names_the_rule(w):
    problems = []
    for label, response in [("deny", {"action": "accept", "content": {"decision": "deny"}}),
                            ("decline", {"action": "decline"}), ("cancel", {"action": "cancel"})]:
        answer = await answered(w, bash(f"echo {label}"), response)
        result = answer.get("result") or {}
        text = "".join(c.get("text", "") for c in result.get("content") or [])
        if result.get("isError") is not True or "(ask `command:echo`)" not in text:
            problems.append(f"{label}: not an isError result naming the rule: {answer}")
        if result.get("resultType") != "complete":
            problems.append(f"{label}: resultType is {result.get('resultType')!r}")
    # Refused is not remembered: the next call is asked again.
    await ask(w, bash("echo after"))
    return "; ".join(problems) or None


def refused_state(answer, label):
    error = answer.get("error") or {}
    if error.get("code") != -32602 or not error.get("message", "").startswith("requestState "):
        return [f"{label}: expected -32602 `requestState ...`, got {answer}"]
    return []


async def state_for_other_call(w):
    listing = call("test_input_required_result_elicitation")
    state = await ask(w, listing)
    problems = []
    for label, params in [("other arguments", {**listing, "arguments": {"path": "."}}),
                          ("another tool", call("test_input_required_result_request_state"))]:
        retry = {**params, "inputResponses": {KEY: ALLOW_ONCE}, "requestState": state}
        answer = await rpc(w, "tools/call", retry)
        problems += refused_state(answer, label)
    return "; ".join(problems) or None


async def state_for_other_principal(alice, bob):
    params = call("test_input_required_result_elicitation")
    state = await ask(alice, params)
    retry = {**params, "inputResponses": {KEY: ALLOW_ONCE}, "requestState": state}
    problems = refused_state(await rpc(bob, "tools/call", retry), "bob with alice's state")
    mine = await rpc(alice, "tools/call", retry)
    if (mine.get("result") or {}).get("resultType") != "complete" or mine["result"].get("isError"):
        problems.append(f"alice with her own state: {mine}")
    return "; ".join(problems) or None


async def allow_session_remembered(w, other=None):
    """`allow_session` on `command:printf`: later printf calls run unasked; echo (another
    rule of the same tool) is still asked; so is `other` principal's printf."""
    session = {"action": "accept", "content": {"decision": "allow_session"}}
    answer = await answered(w, bash("printf one"), session)
    problems = []
    if (answer.get("result") or {}).get("content", [{}])[0].get("text") != "one":
        problems.append(f"the answered call: {answer}")
    for command in ("printf two", "printf '%s' three"):
        later = await rpc(w, "tools/call", bash(command))
        result = later.get("result") or {}
        if result.get("resultType") != "complete" or result.get("isError"):
            problems.append(f"{command}: asked again or refused: {later}")
    await ask(w, bash("echo other rule"))
    if other is not None:
        await ask(other, bash("printf four"))
    return "; ".join(problems) or None


async def main(url, tokens):
    tokens = tokens.split(",")
    clients = [httpx2.AsyncClient(headers={"Authorization": f"Bearer {t}"}, timeout=30) for t in tokens]
    try:
        wires = [Wire(http, url) for http in clients]
        w = wires[0]
        for name, checks, body in [
            ("basic-elicitation", ["sep-2322-elicitation-incomplete", "sep-2322-elicitation-complete"],
             basic_elicitation),
            ("request-state", ["sep-2322-request-state-incomplete", "sep-2322-request-state-complete"],
             request_state),
            ("missing-input-response", ["sep-2322-missing-response-rerequests"], missing_input_response),
            ("result-type", ["sep-2322-result-type-included"], result_type),
            ("unsupported-methods", ["sep-2322-not-on-unsupported-requests"], unsupported_methods),
            ("tampered-state", ["sep-2322-reject-tampered-state"], tampered_state),
            ("ignore-extra-params", ["sep-2322-ignore-unexpected-params"], ignore_extra_params),
            ("validate-input", ["sep-2322-validate-input-responses", "sep-2322-error-on-protocol-error"],
             validate_input),
        ]:
            await scenario(w, name, checks, body)
        for name, check in [
            ("basic-sampling", not_applicable("test_input_required_result_sampling")),
            ("basic-list-roots", not_applicable("test_input_required_result_list_roots")),
            ("multiple-input-requests", not_applicable("test_input_required_result_multiple_inputs")),
            ("multi-round", not_applicable("test_input_required_result_multi_round")),
            ("non-tool-request", non_tool_request),
            ("capability-check", capability_check),
        ]:
            w.log = []
            await conformance.run(f"input-required-result-{name} not-applicable", check, w)
        own = "jianmu-approval"
        await conformance.run(f"{own} deny-decline-cancel-refuse-naming-the-rule", deny_names_the_rule, w)
        await conformance.run(f"{own} request-state-of-another-call-refused", state_for_other_call, w)
        if len(wires) > 1:
            await conformance.run(f"{own} request-state-of-another-principal-refused",
                                  state_for_other_principal, w, wires[1])
        # Last: what it allows stays allowed.
        await conformance.run(f"{own} allow-session-remembered", allow_session_remembered, *wires[:2])
    finally:
        for http in clients:
            await http.aclose()
    print(json.dumps(RESULTS, indent=1))


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:3]))
