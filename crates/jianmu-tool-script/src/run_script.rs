//! `run_script`: one Rhai program that calls the session's tools as functions, so a
//! loop over many calls costs one model turn.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use jianmu_tool_core::{
    CALLS_TOOLS, CallContext, Calls, Tool, ToolConfig, ToolError, ToolOutput, ToolSpec,
    calls_tools, cut_chars,
};
use rhai::{Array, Dynamic, Engine, EvalAltResult, Position};
use serde::Deserialize;
use serde_json::Value;

/// Limits of `run_script`; every one has a safe default.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ScriptSettings {
    /// Most script operations one call may run (tool calls count as one each).
    pub max_operations: u64,
    /// Wall-clock limit of one script, tool calls included, in seconds.
    pub timeout_secs: f64,
    /// Most tool calls one script may make.
    pub max_calls: usize,
    /// Most characters the script's tool calls may return, all together.
    pub max_call_output: usize,
    /// Most calls of one `parallel` that run at once.
    pub max_parallel: usize,
    /// Most characters of the answer; a longer one keeps its start and end and is saved
    /// whole to a file the answer names.
    pub max_output: usize,
    /// Largest string, in bytes.
    pub max_string_size: usize,
    /// Largest array, in items.
    pub max_array_size: usize,
    /// Largest object map, in entries.
    pub max_map_size: usize,
}

impl Default for ScriptSettings {
    fn default() -> Self {
        Self {
            max_operations: 10_000_000,
            timeout_secs: 120.0,
            max_calls: 500,
            max_call_output: 4 << 20,
            max_parallel: 8,
            max_output: 20_000,
            max_string_size: 4 << 20,
            max_array_size: 100_000,
            max_map_size: 100_000,
        }
    }
}

/// Arguments of `run_script`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ScriptArgs {
    /// The Rhai program. Each tool of this session is a function taking a map of the
    /// tool's arguments, for example `read_file(#{path: "a.txt"})`.
    pub code: String,
}

/// The `run_script` tool.
#[derive(Clone)]
pub struct RunScript {
    settings: ScriptSettings,
    prepared: Arc<Mutex<Option<Arc<Prepared>>>>,
    saver: Option<jianmu_workspace::Saver>,
}

impl std::fmt::Debug for RunScript {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RunScript")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RunScript {
    /// A script tool with these limits.
    pub fn new(settings: ScriptSettings) -> Self {
        Self {
            settings,
            prepared: Arc::default(),
            saver: None,
        }
    }

    /// The same tool, saving an answer longer than `max_output` whole to a file the
    /// answer names.
    #[must_use]
    pub fn with_saver(mut self, saver: jianmu_workspace::Saver) -> Self {
        self.saver = Some(saver);
        self
    }
}

/// Why a script was stopped before its end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Stop {
    Time,
    Calls,
    CallOutput,
    Cancelled,
}

/// What a script needs to know of a tool it can call.
struct Callable {
    parallel_safe: bool,
    /// The tool's one required argument, when it is a string: a bare string stands
    /// for it.
    shorthand: Option<String>,
}

impl Callable {
    fn of(spec: &ToolSpec) -> Self {
        let schema = &spec.input_schema;
        let required = schema["required"].as_array().map(Vec::as_slice);
        let shorthand = match required {
            Some([Value::String(name)]) if schema["properties"][name]["type"] == "string" => {
                Some(name.clone())
            }
            _ => None,
        };
        Self {
            parallel_safe: spec.parallel_safe,
            shorthand,
        }
    }
}

/// One tool call a script made, for the answer's log.
struct Logged {
    tool: String,
    error: Option<String>,
    took: Duration,
}

/// What one script run shares with the engine's functions.
struct Run {
    calls: Arc<dyn Calls>,
    parent: Arc<str>,
    context: Option<Value>,
    /// Who answers the policy's `ask` rules for the script's calls: the script's own.
    approver: Option<Arc<dyn jianmu_tool_core::Approver>>,
    handle: tokio::runtime::Handle,
    settings: ScriptSettings,
    deadline: Option<tokio::time::Instant>,
    tools: Arc<HashMap<String, Callable>>,
    made: AtomicUsize,
    returned: AtomicUsize,
    stop: Mutex<Option<Stop>>,
    cancelled: AtomicBool,
    cancel: tokio::sync::Notify,
    log: Mutex<Vec<Logged>>,
    printed: Mutex<String>,
}

impl Run {
    /// Records why the script stops (the first reason wins).
    fn note_stop(&self, why: Stop) {
        self.stop
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .get_or_insert(why);
    }

    /// Records why the script stops, as the error that stops the engine (which no
    /// `catch` can take).
    fn stopped(&self, why: Stop) -> Box<EvalAltResult> {
        self.note_stop(why);
        Box::new(EvalAltResult::ErrorTerminated(
            Dynamic::from("stopped"),
            Position::NONE,
        ))
    }

    fn past_deadline(&self) -> bool {
        self.deadline
            .is_some_and(|d| tokio::time::Instant::now() >= d)
    }

    /// Takes `n` calls from the budget, or stops the script.
    fn admit(&self, n: usize) -> Result<usize, Box<EvalAltResult>> {
        if self.cancelled.load(Ordering::Acquire) {
            return Err(self.stopped(Stop::Cancelled));
        }
        if self.past_deadline() {
            return Err(self.stopped(Stop::Time));
        }
        let before = self.made.fetch_add(n, Ordering::AcqRel);
        if before + n > self.settings.max_calls {
            return Err(self.stopped(Stop::Calls));
        }
        Ok(before)
    }

    /// Runs `work` on the session until it ends, the script's time is up or the
    /// script's call is cancelled.
    fn block_on<T>(&self, work: impl Future<Output = T>) -> Result<T, Box<EvalAltResult>> {
        let outcome = self.handle.block_on(async {
            // Most tools answer on their first poll: no timer for them.
            let mut work = std::pin::pin!(work);
            let first =
                std::future::poll_fn(|cx| std::task::Poll::Ready(work.as_mut().poll(cx))).await;
            if let std::task::Poll::Ready(done) = first {
                return Ok(done);
            }
            let deadline = async {
                match self.deadline {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            let cancelled = async {
                let notified = self.cancel.notified();
                if !self.cancelled.load(Ordering::Acquire) {
                    notified.await;
                }
            };
            tokio::select! {
                done = work => Ok(done),
                () = deadline => Err(Stop::Time),
                () = cancelled => Err(Stop::Cancelled),
            }
        });
        outcome.map_err(|why| self.stopped(why))
    }

    /// The context of the `n`th call (counting from 0) the script makes.
    fn context(&self, n: usize) -> CallContext {
        let mut cx = CallContext::new()
            .with_call_id(format!("{}.{}", self.parent, n + 1))
            .with_parent(Arc::clone(&self.parent));
        if let Some(context) = &self.context {
            cx = cx.with_event_context(context.clone());
        }
        if let Some(approver) = &self.approver {
            cx = cx.with_approver(Arc::clone(approver));
        }
        cx
    }

    /// One call's outcome as the script sees it, logged and counted against the
    /// output budget.
    fn settle(
        &self,
        tool: &str,
        took: Duration,
        result: Result<ToolOutput, ToolError>,
    ) -> Result<Result<Dynamic, String>, Box<EvalAltResult>> {
        let (logged, seen) = match result {
            Ok(output) => {
                let size = output.text.len() + output.structured.as_ref().map_or(0, json_len);
                let total = self.returned.fetch_add(size, Ordering::AcqRel) + size;
                if total > self.settings.max_call_output {
                    self.record(tool, took, None);
                    return Err(self.stopped(Stop::CallOutput));
                }
                (None, Ok(value_of(output)))
            }
            Err(e) => {
                let text = e.to_string();
                (Some(text.clone()), Err(text))
            }
        };
        self.record(tool, took, logged);
        Ok(seen)
    }

    fn record(&self, tool: &str, took: Duration, error: Option<String>) {
        self.log
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Logged {
                tool: tool.to_owned(),
                error,
                took,
            });
    }

    /// `args`, with a bare string given to a tool whose one required argument is a
    /// string made that argument.
    fn shorthand(&self, tool: &str, args: Value) -> Value {
        match (
            &args,
            self.tools.get(tool).and_then(|t| t.shorthand.as_ref()),
        ) {
            (Value::String(_), Some(name)) => {
                let mut map = serde_json::Map::new();
                map.insert(name.clone(), args);
                Value::Object(map)
            }
            _ => args,
        }
    }

    /// One tool call from the script: its result, or a catchable error with the
    /// tool's message.
    fn call(&self, tool: &str, args: Value) -> Result<Dynamic, Box<EvalAltResult>> {
        let args = self.shorthand(tool, args);
        let n = self.admit(1)?;
        let cx = self.context(n);
        let started = Instant::now();
        let result = self.block_on(self.calls.call(tool, args, &cx))?;
        self.settle(tool, started.elapsed(), result)?
            .map_err(runtime_error)
    }

    /// Several calls at once: consecutive calls of parallel-safe tools run together
    /// (at most `max_parallel` at a time); any other call runs alone, in order.
    /// A failed call is `#{error: "..."}` in its place.
    fn parallel(&self, list: Array) -> Result<Array, Box<EvalAltResult>> {
        let mut calls = Vec::with_capacity(list.len());
        for (i, item) in list.into_iter().enumerate() {
            let (tool, args) = pair(item).map_err(|e| {
                runtime_error(format!(
                    "parallel: item {i} is not [tool name, arguments]: {e}"
                ))
            })?;
            let args = self.shorthand(&tool, args);
            calls.push((tool, args));
        }
        let first = self.admit(calls.len())?;
        let mut results: Vec<Option<Dynamic>> = vec![None; calls.len()];
        let mut at = 0;
        while at < calls.len() {
            let safe = |c: &(String, Value)| self.tools.get(&c.0).is_some_and(|t| t.parallel_safe);
            let end = if safe(&calls[at]) {
                at + calls[at..].iter().take_while(|c| safe(c)).count()
            } else {
                at + 1
            };
            let group = (at..end).map(|i| {
                let (tool, args) = calls[i].clone();
                let cx = self.context(first + i);
                async move {
                    let started = Instant::now();
                    let result = self.calls.call(&tool, args, &cx).await;
                    (i, tool, started.elapsed(), result)
                }
            });
            let mut done: Vec<_> = self.block_on(
                futures::stream::iter(group)
                    .buffer_unordered(self.settings.max_parallel.max(1))
                    .collect(),
            )?;
            // Logged in the script's order, not the order they ended in.
            done.sort_by_key(|d| d.0);
            for (i, tool, took, result) in done {
                results[i] = Some(match self.settle(&tool, took, result)? {
                    Ok(value) => value,
                    Err(text) => {
                        let mut map = rhai::Map::new();
                        map.insert("error".into(), Dynamic::from(text));
                        Dynamic::from_map(map)
                    }
                });
            }
            at = end;
        }
        Ok(results.into_iter().map(Option::unwrap_or_default).collect())
    }
}

/// The length of `value` as JSON text, counted without making the text.
fn json_len(value: &Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
            self.0 += buf.len();
            Ok(buf.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// A tool's answer as the script sees it: its text, or, when it has structured
/// output, that output as a map with the text under `text` too.
fn value_of(output: ToolOutput) -> Dynamic {
    let Some(Value::Object(mut map)) = output.structured else {
        return Dynamic::from(output.text);
    };
    map.entry("text").or_insert(Value::String(output.text));
    rhai::serde::to_dynamic(Value::Object(map)).unwrap_or_default()
}

fn runtime_error(text: String) -> Box<EvalAltResult> {
    Box::new(EvalAltResult::ErrorRuntime(
        Dynamic::from(text),
        Position::NONE,
    ))
}

/// `[name, args]` of a `parallel` list.
fn pair(item: Dynamic) -> Result<(String, Value), String> {
    let mut pair = item
        .into_array()
        .map_err(|kind| format!("got {kind}"))?
        .into_iter();
    let (Some(name), args, None) = (pair.next(), pair.next(), pair.next()) else {
        return Err("expected two items".into());
    };
    let name = name
        .into_string()
        .map_err(|kind| format!("the tool name is {kind}"))?;
    Ok((name, arguments(args.unwrap_or(Dynamic::UNIT))?))
}

/// How deep a tool's arguments may nest, and a value shown in the answer.
const ARGS_DEPTH: usize = 64;

/// A script value as a tool's JSON arguments.
fn arguments(value: Dynamic) -> Result<Value, String> {
    if value.is_unit() {
        return Ok(Value::Object(serde_json::Map::new()));
    }
    if crate::nested_deeper_than(&value, ARGS_DEPTH) {
        return Err(format!("they nest more than {ARGS_DEPTH} levels deep"));
    }
    if crate::larger_than(&value, crate::MAX_VALUE_BYTES) {
        return Err(format!(
            "they are over {} MiB written out (strings counted each time they appear)",
            crate::MAX_VALUE_BYTES >> 20
        ));
    }
    rhai::serde::from_dynamic::<Value>(&value).map_err(|e| e.to_string())
}

/// How a tool is shown in the description: `name(#{required, optional?})`, or
/// `name("…")` for a tool that takes one string.
fn signature(spec: &ToolSpec) -> String {
    if spec.takes_bare_string() {
        return format!("{}(\"…\")", spec.name);
    }
    let schema = &spec.input_schema;
    let required: Vec<&str> = schema["required"]
        .as_array()
        .map(|r| r.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    let mut fields: Vec<String> = required.iter().map(|r| (*r).to_owned()).collect();
    if let Some(properties) = schema["properties"].as_object() {
        fields.extend(
            properties
                .keys()
                .filter(|k| !required.contains(&k.as_str()))
                .map(|k| format!("{k}?")),
        );
    }
    format!("{}(#{{{}}})", spec.name, fields.join(", "))
}

/// The description: the calling convention, then every tool a script can call here.
fn describe(specs: &[ToolSpec]) -> String {
    let mut text = String::from(
        "Runs a short Rhai program in which this session's tools are functions, so that \
         many tool calls take one turn (for example: for each file, read it and search it). \
         Each tool takes a map of its usual arguments (or, where its one required \
         argument is a string, just that string) and returns its text answer, or, for a tool with \
         structured output, that output as a map with the text also under `text`; a failed call throws its error text, which \
         `try { ... } catch (e) { ... }` can catch. \
         `parallel([[\"tool\", #{...}], ...])` runs calls together and returns their \
         results in order (a failed one is `#{error: \"...\"}`); `call_tool(\"tool\", \
         #{...})` calls a tool by a name held in a variable. The answer is what the \
         program printed (`print`), its last value, and a log of the calls it made. Every \
         call obeys the same rules as a direct call; calls, their total output and the \
         program's time are limited. No file, network or process access except through \
         the tools.\nExample: `let found = #{}; for dir in [\"src\", \"tests\"] { let r = \
         grep_search(#{query: \"TODO\", path: dir}); found[dir] = r.total; } found`\nFunctions:",
    );
    for spec in specs {
        let _ = write!(text, " {};", signature(spec));
    }
    text.pop();
    text
}

/// The tools of the spec's description: every linked tool that a script may call.
fn callable_specs(config: &ToolConfig) -> Vec<ToolSpec> {
    let mut specs: Vec<ToolSpec> = jianmu_tool_core::registrations()
        .filter(|r| r.name != RunScript::NAME)
        .filter_map(|r| (r.spec)(config).ok())
        .filter(|spec| !calls_tools(spec))
        .collect();
    specs.sort_by(|a, b| a.name.cmp(&b.name));
    specs.dedup_by(|a, b| a.name == b.name);
    specs
}

/// The spec of `run_script` under `config`: its description lists the tools it can
/// call, and its effects are its own and every effect of those tools (what a script
/// may do), so that policies and clients' hints see them.
pub(crate) fn spec(config: &ToolConfig) -> Result<ToolSpec, ToolError> {
    let callable = callable_specs(config);
    let mut spec = jianmu_tool_core::spec_of::<RunScript>();
    spec.description = describe(&callable);
    let mut theirs: Vec<&String> = callable.iter().flat_map(|s| &s.effect_tags).collect();
    theirs.sort();
    theirs.dedup();
    for tag in theirs {
        if !spec.effect_tags.contains(tag) {
            spec.effect_tags.push(tag.clone());
        }
    }
    Ok(spec)
}

/// Sets the call's cancellation when the call's future is dropped.
struct CancelOnDrop(Arc<Run>);

impl Drop for CancelOnDrop {
    fn drop(&mut self) {
        self.0.cancelled.store(true, Ordering::Release);
        self.0.cancel.notify_waiters();
    }
}

thread_local! {
    /// The script this thread is running: the engine's functions act on it.
    static CURRENT: std::cell::RefCell<Option<Arc<Run>>> = const { std::cell::RefCell::new(None) };
}

/// The run in progress on this thread (there is one while an engine evaluates).
fn current() -> Result<Arc<Run>, Box<EvalAltResult>> {
    CURRENT
        .with(|c| c.borrow().clone())
        .ok_or_else(|| runtime_error("no script is running".to_owned()))
}

/// Makes `run` the thread's current run until dropped.
struct Current;

impl Current {
    fn set(run: &Arc<Run>) -> Self {
        CURRENT.with(|c| *c.borrow_mut() = Some(Arc::clone(run)));
        Self
    }
}

impl Drop for Current {
    fn drop(&mut self) {
        CURRENT.with(|c| c.borrow_mut().take());
    }
}

/// What every run of one `run_script` shares, made on its first call: the engine
/// (building one costs more than most scripts take to run) and the tools it calls.
struct Prepared {
    engine: Engine,
    tools: Arc<HashMap<String, Callable>>,
}

impl RunScript {
    /// An engine with the limits, whose functions are `tools` and act on the
    /// thread's current run.
    fn engine(&self, tools: &HashMap<String, Callable>) -> Engine {
        let settings = &self.settings;
        let limits = crate::RhaiSettings {
            max_operations: settings.max_operations,
            max_call_levels: 48,
            max_expr_depth: 64,
            max_string_size: settings.max_string_size,
            max_array_size: settings.max_array_size,
            max_map_size: settings.max_map_size,
            timeout_secs: settings.timeout_secs,
            max_output: settings.max_output,
        };
        let mut engine = crate::rhai_repl::limited_engine(&limits, move |line| {
            if let Ok(run) = current() {
                let mut printed = run.printed.lock().unwrap_or_else(PoisonError::into_inner);
                crate::rhai_repl::keep_printed(&mut printed, line, limits.max_output);
            }
        });
        engine.on_progress(move |ops| {
            if ops % 1024 != 0 {
                return None;
            }
            let Ok(run) = current() else {
                return Some(Dynamic::from("no run"));
            };
            if run.cancelled.load(Ordering::Acquire) {
                return Some(Dynamic::from("cancelled"));
            }
            run.past_deadline().then(|| {
                run.note_stop(Stop::Time);
                Dynamic::from("timeout")
            })
        });
        for name in tools.keys() {
            let tool = name.clone();
            engine.register_fn(name.as_str(), move |args: Dynamic| {
                let args = arguments(args).map_err(|e| {
                    runtime_error(format!("{tool}: the arguments are not JSON: {e}"))
                })?;
                current()?.call(&tool, args)
            });
            let tool = name.clone();
            engine.register_fn(name.as_str(), move || {
                current()?.call(&tool, Value::Object(serde_json::Map::new()))
            });
        }
        engine.register_fn("parallel", |list: Array| current()?.parallel(list));
        engine.register_fn("call_tool", |tool: &str, args: Dynamic| {
            let args = arguments(args)
                .map_err(|e| runtime_error(format!("{tool}: the arguments are not JSON: {e}")))?;
            current()?.call(tool, args)
        });
        engine
    }

    /// The engine and tools, made on the first call from the session's tools.
    fn prepared(&self, calls: &dyn Calls) -> Arc<Prepared> {
        let mut slot = self.prepared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(prepared) = slot.as_ref() {
            return Arc::clone(prepared);
        }
        let tools: HashMap<String, Callable> = calls
            .specs()
            .iter()
            .map(|s| (s.name.clone(), Callable::of(s)))
            .collect();
        let prepared = Arc::new(Prepared {
            engine: self.engine(&tools),
            tools: Arc::new(tools),
        });
        *slot = Some(Arc::clone(&prepared));
        prepared
    }

    /// Compiles and runs `code` on a blocking thread.
    fn run(&self, code: &str, run: &Arc<Run>, engine: &Engine) -> Result<ToolOutput, ToolError> {
        let ast = engine
            .compile(code)
            .map_err(|e| ToolError::failed(format!("syntax error: {e}")))?;
        let result = {
            let _current = Current::set(run);
            engine.eval_ast::<Dynamic>(&ast)
        };
        let printed =
            std::mem::take(&mut *run.printed.lock().unwrap_or_else(PoisonError::into_inner));
        let log = std::mem::take(&mut *run.log.lock().unwrap_or_else(PoisonError::into_inner));
        let stop = *run.stop.lock().unwrap_or_else(PoisonError::into_inner);
        let mut text = printed;
        let failed = match (&result, stop) {
            (_, Some(why)) => Some(self.limit_text(why)),
            (Ok(value), None) => {
                if !value.is_unit() {
                    let _ = writeln!(text, "value: {}", show(value));
                }
                None
            }
            (Err(e), None) => Some(script_error(e)),
        };
        text.push_str(&summary(&log));
        if let Some(reason) = &failed {
            let _ = write!(text, "\n{reason}");
        }
        let text = crate::bounded(&text, self.settings.max_output, self.saver.as_ref(), 0);
        match failed {
            Some(_) => Err(ToolError::failed(text)),
            None => Ok(ToolOutput::text(text)),
        }
    }

    fn limit_text(&self, why: Stop) -> String {
        let s = &self.settings;
        match why {
            Stop::Time => format!(
                "stopped: the script ran past its time limit of {} s; the calls above were made",
                s.timeout_secs
            ),
            Stop::Calls => format!(
                "stopped: the script reached its limit of {} tool calls; the calls above were made",
                s.max_calls
            ),
            Stop::CallOutput => format!(
                "stopped: the script's tool calls returned more than {} characters in all; \
                 the calls above were made (ask for less per call)",
                s.max_call_output
            ),
            Stop::Cancelled => "stopped: the call was cancelled".to_owned(),
        }
    }
}

/// A value for the answer: JSON when it is data, else Rhai's own text.
fn show(value: &Dynamic) -> String {
    if value.is_string() {
        return value.to_string();
    }
    if crate::nested_deeper_than(value, ARGS_DEPTH) {
        return format!("(a value nested more than {ARGS_DEPTH} levels deep)");
    }
    if crate::larger_than(value, crate::MAX_VALUE_BYTES) {
        return crate::rhai_repl::too_large();
    }
    rhai::serde::from_dynamic::<Value>(value).map_or_else(|_| value.to_string(), |v| v.to_string())
}

fn script_error(e: &EvalAltResult) -> String {
    match e {
        EvalAltResult::ErrorTooManyOperations(..) => {
            "stopped: the script ran too many operations (an endless loop?)".to_owned()
        }
        EvalAltResult::ErrorStackOverflow(..) => {
            "stopped: function calls nest too deeply (runaway recursion?)".to_owned()
        }
        EvalAltResult::ErrorDataTooLarge(..) => format!("stopped: {e}"),
        EvalAltResult::ErrorRuntime(value, pos) => {
            format!("error: uncaught error at {pos}: {value}")
        }
        other => format!("error: {other}"),
    }
}

/// The log of calls: a count, then one line per run of successful calls of one tool
/// and one per failed call (the first 15 and the last 5 lines when there are more).
fn summary(log: &[Logged]) -> String {
    if log.is_empty() {
        return "calls: none\n".to_owned();
    }
    let failed = log.iter().filter(|l| l.error.is_some()).count();
    let total: Duration = log.iter().map(|l| l.took).sum();
    let mut text = format!(
        "calls: {} ({} ok, {failed} failed; {:.1} ms in tools)\n",
        log.len(),
        log.len() - failed,
        total.as_secs_f64() * 1e3
    );
    let mut lines: Vec<String> = Vec::new();
    let mut at = 0;
    while at < log.len() {
        let first = &log[at];
        let ms = |took: Duration| took.as_secs_f64() * 1e3;
        if let Some(e) = &first.error {
            let (e, _) = cut_chars(e.lines().next().unwrap_or(""), 160);
            lines.push(format!(
                "  {} error {:.1} ms: {e}",
                first.tool,
                ms(first.took)
            ));
            at += 1;
            continue;
        }
        let run = log[at..]
            .iter()
            .take_while(|l| l.error.is_none() && l.tool == first.tool)
            .count();
        let took: Duration = log[at..at + run].iter().map(|l| l.took).sum();
        lines.push(match run {
            1 => format!("  {} ok {:.1} ms", first.tool, ms(took)),
            n => format!("  {} ok ×{n} {:.1} ms", first.tool, ms(took)),
        });
        at += run;
    }
    if lines.len() > 20 {
        let left = lines.len() - 20;
        lines.splice(15..lines.len() - 5, [format!("  … {left} more lines …")]);
    }
    for line in lines {
        text.push_str(&line);
        text.push('\n');
    }
    text
}

impl Tool for RunScript {
    type Args = ScriptArgs;
    type Output = ToolOutput;
    type Error = ToolError;

    const NAME: &'static str = "run_script";

    // The description a session lists is generated from its tools (`spec`).
    const DESCRIPTION: &'static str =
        "Runs a short Rhai program in which this session's tools are functions.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["code:exec", CALLS_TOOLS];

    async fn call(&self, args: ScriptArgs, cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let Some(calls) = cx.calls().cloned() else {
            return Err(ToolError::failed(
                "run_script can only run inside a session, which gives it the tools to call",
            ));
        };
        let prepared = self.prepared(calls.as_ref());
        let timeout =
            Duration::try_from_secs_f64(self.settings.timeout_secs).unwrap_or(Duration::MAX);
        let run = Arc::new(Run {
            tools: Arc::clone(&prepared.tools),
            calls,
            parent: Arc::from(cx.call_id()),
            context: cx.event_context().cloned(),
            approver: cx.approver().cloned(),
            handle: tokio::runtime::Handle::current(),
            settings: self.settings.clone(),
            deadline: tokio::time::Instant::now().checked_add(timeout),
            made: AtomicUsize::new(0),
            returned: AtomicUsize::new(0),
            stop: Mutex::new(None),
            cancelled: AtomicBool::new(false),
            cancel: tokio::sync::Notify::new(),
            log: Mutex::new(Vec::new()),
            printed: Mutex::new(String::new()),
        });
        let _cancel = CancelOnDrop(Arc::clone(&run));
        let this = self.clone();
        crate::on_script_thread(Self::NAME, move || {
            this.run(&args.code, &run, &prepared.engine)
        })
        .await?
    }
}
