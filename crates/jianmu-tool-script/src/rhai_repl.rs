//! `rhai_repl`: an embedded Rhai engine with hard limits and a persistent scope.

use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use jianmu_tool_core::{CallContext, Tool, ToolError, ToolOutput};
use rhai::{AST, Dynamic, Engine, EvalAltResult, Scope};
use serde::Deserialize;

/// Limits of `rhai_repl`; every one has a safe default.
#[derive(Debug, Clone, Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct RhaiSettings {
    /// Most operations one call may run.
    pub max_operations: u64,
    /// Deepest function call nesting.
    pub max_call_levels: usize,
    /// Deepest expression nesting (in functions, half of it).
    pub max_expr_depth: usize,
    /// Largest string, in bytes.
    pub max_string_size: usize,
    /// Largest array, in items.
    pub max_array_size: usize,
    /// Largest object map, in entries.
    pub max_map_size: usize,
    /// Wall-clock limit of one call, in seconds.
    pub timeout_secs: f64,
    /// Most characters of output returned; longer output keeps its start and end and is
    /// saved whole to a file the answer names.
    pub max_output: usize,
}

impl Default for RhaiSettings {
    fn default() -> Self {
        Self {
            max_operations: 50_000_000,
            max_call_levels: 48,
            max_expr_depth: 64,
            max_string_size: 1 << 20,
            max_array_size: 100_000,
            max_map_size: 100_000,
            timeout_secs: 30.0,
            max_output: 10_000,
        }
    }
}

/// Arguments of `rhai_repl`.
#[derive(Debug, Clone, Deserialize, schemars::JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RhaiArgs {
    /// Rhai code. Variables (`let`) and functions (`fn`) persist between calls.
    pub code: String,
    /// Forget every variable and function before running `code`.
    #[serde(default)]
    pub reset: bool,
}

/// State shared with the engine's callbacks for the call in progress.
#[derive(Default)]
struct CallState {
    printed: String,
    deadline: Option<Instant>,
}

struct State {
    scope: Scope<'static>,
    functions: AST,
}

/// An engine with `limits` (all but time and output), no modules and no `eval`, whose
/// `print` and `debug` lines go to `print` (which keeps them with [`keep_printed`]).
pub(crate) fn limited_engine(
    limits: &RhaiSettings,
    print: impl Fn(&str) + Send + Sync + 'static,
) -> Engine {
    let mut engine = Engine::new();
    engine
        .set_max_operations(limits.max_operations)
        .set_max_call_levels(limits.max_call_levels)
        .set_max_expr_depths(limits.max_expr_depth, (limits.max_expr_depth / 2).max(1))
        .set_max_string_size(limits.max_string_size)
        .set_max_array_size(limits.max_array_size)
        .set_max_map_size(limits.max_map_size)
        .set_module_resolver(rhai::module_resolvers::DummyModuleResolver::new());
    engine.disable_symbol("eval");
    // Arrays and maps become text (print, `${}`, to_string) only when that text fits
    // a string: sharing one string many times makes a small value huge written out.
    let max = limits.max_string_size;
    // (An error here would make Rhai write the value out itself.)
    let text_of = move |value: Dynamic, debug: bool| -> String {
        if crate::larger_than(&value, max) {
            too_large()
        } else if debug {
            format!("{value:?}")
        } else {
            value.to_string()
        }
    };
    for (name, debug) in [
        ("print", false),
        ("to_string", false),
        ("debug", true),
        ("to_debug", true),
    ] {
        engine
            .register_fn(name, move |a: rhai::Array| {
                text_of(Dynamic::from_array(a), debug)
            })
            .register_fn(name, move |m: rhai::Map| {
                text_of(Dynamic::from_map(m), debug)
            });
    }
    let print = Arc::new(print);
    let sink = Arc::clone(&print);
    engine.on_print(move |text| sink(&format!("{text}\n")));
    engine.on_debug(move |text, _source, pos| print(&format!("[{pos}] {text}\n")));
    engine
}

/// The answer for a value too large to write out.
pub(crate) fn too_large() -> String {
    format!(
        "(a value over {} MiB written out: its strings are counted each time they appear; return or print a part of it)",
        crate::MAX_VALUE_BYTES >> 20
    )
}

/// What ends printed output that went on past what is kept.
const PRINTED_PAST: &str = "\n... (printing went on; the rest was not kept)\n";

/// Adds `line` to `printed` while it holds no more than what an answer (or a saved
/// output) can use: [`crate::KEPT_FOR_SAVING`] characters, or four times
/// `max_output`; past that, a line once saying the rest was not kept.
pub(crate) fn keep_printed(printed: &mut String, line: &str, max_output: usize) {
    let cap = crate::KEPT_FOR_SAVING.max(max_output.saturating_mul(4).saturating_add(4));
    if printed.len() <= cap {
        printed.push_str(line);
    } else if !printed.ends_with(PRINTED_PAST) {
        printed.push_str(PRINTED_PAST);
    }
}

/// The `rhai_repl` tool. One engine per instance, built once; calls on one instance
/// run one at a time and share the scope.
#[derive(Clone)]
pub struct RhaiRepl {
    engine: Arc<Engine>,
    state: Arc<Mutex<CallState>>,
    session: Arc<Mutex<State>>,
    settings: RhaiSettings,
    saver: Option<jianmu_workspace::Saver>,
}

impl std::fmt::Debug for RhaiRepl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RhaiRepl")
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl RhaiRepl {
    /// A REPL with these limits.
    pub fn new(settings: RhaiSettings) -> Self {
        let state = Arc::new(Mutex::new(CallState::default()));
        let sink = state.clone();
        let max_output = settings.max_output;
        let mut engine = limited_engine(&settings, move |line| {
            let mut state = sink.lock().unwrap_or_else(PoisonError::into_inner);
            keep_printed(&mut state.printed, line, max_output);
        });
        let clock = state.clone();
        engine.on_progress(move |ops| {
            // Checking the clock every 1024 operations keeps the check cheap.
            if ops % 1024 != 0 {
                return None;
            }
            let s = clock.lock().unwrap_or_else(PoisonError::into_inner);
            match s.deadline {
                Some(d) if Instant::now() >= d => Some(Dynamic::from("timeout")),
                _ => None,
            }
        });
        Self {
            engine: Arc::new(engine),
            state,
            session: Arc::new(Mutex::new(State {
                scope: Scope::new(),
                functions: AST::empty(),
            })),
            settings,
            saver: None,
        }
    }

    /// The same REPL, saving an answer longer than `max_output` whole to a file the
    /// answer names.
    #[must_use]
    pub fn with_saver(mut self, saver: jianmu_workspace::Saver) -> Self {
        self.saver = Some(saver);
        self
    }

    /// The synchronous body.
    ///
    /// # Errors
    /// A syntax error, a runtime error, or a limit hit, each with Rhai's message.
    pub fn run(&self, args: &RhaiArgs) -> Result<ToolOutput, ToolError> {
        let mut session = self.session.lock().unwrap_or_else(PoisonError::into_inner);
        if args.reset {
            session.scope = Scope::new();
            session.functions = AST::empty();
            if args.code.trim().is_empty() {
                return Ok(ToolOutput::text("(the scope was cleared)"));
            }
        }
        let timeout =
            Duration::try_from_secs_f64(self.settings.timeout_secs).unwrap_or(Duration::MAX);
        {
            let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
            s.printed.clear();
            s.deadline = Instant::now().checked_add(timeout);
        }
        let session = &mut *session;
        let ast = self
            .engine
            .compile_with_scope(&session.scope, &args.code)
            .map_err(|e| ToolError::failed(format!("syntax error: {e}")))?;
        let program = session.functions.merge(&ast);
        let result = self
            .engine
            .eval_ast_with_scope::<Dynamic>(&mut session.scope, &program);
        let printed = std::mem::take(
            &mut self
                .state
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .printed,
        );
        let dropped = drop_deep(&mut session.scope);
        let mut answer = match result {
            Ok(value) => {
                // Functions defined by a call that succeeded stay defined.
                session.functions = session.functions.merge(&ast.clone_functions_only());
                let text = if value.is_unit() {
                    printed
                } else if crate::nested_deeper_than(&value, KEPT_DEPTH) {
                    format!("(a value nested more than {KEPT_DEPTH} levels deep)")
                } else if crate::larger_than(&value, crate::MAX_VALUE_BYTES) {
                    too_large()
                } else {
                    value.to_string()
                };
                Ok(crate::bounded(
                    &text,
                    self.settings.max_output,
                    self.saver.as_ref(),
                    0,
                ))
            }
            Err(e) => Err(describe(&e, timeout)),
        };
        if !dropped.is_empty() {
            let note = format!(
                "\n(not kept: {}, nested more than {KEPT_DEPTH} levels deep)",
                dropped.join(", ")
            );
            match &mut answer {
                Ok(text) | Err(text) => text.push_str(&note),
            }
        }
        answer.map(ToolOutput::text).map_err(ToolError::failed)
    }
}

/// How deep a value kept between calls may nest: dropping one nested deeper could
/// overflow the stack of whatever thread drops the tool.
const KEPT_DEPTH: usize = 500;

/// Empties the variables of `scope` nested more than [`KEPT_DEPTH`] deep (here, on the
/// script's thread), and returns their names.
fn drop_deep(scope: &mut Scope<'static>) -> Vec<String> {
    let deep: Vec<String> = scope
        .iter_raw()
        .filter(|(_, _, value)| crate::nested_deeper_than(value, KEPT_DEPTH))
        .map(|(name, _, _)| name.to_owned())
        .collect();
    for name in &deep {
        match scope.get_mut(name) {
            Some(value) => drop(std::mem::take(value)),
            None => drop(scope.remove::<Dynamic>(name)),
        }
    }
    deep
}

fn describe(e: &EvalAltResult, timeout: Duration) -> String {
    match e {
        EvalAltResult::ErrorTerminated(..) => format!(
            "the code ran past the time limit of {} s and was stopped",
            timeout.as_secs_f64()
        ),
        EvalAltResult::ErrorTooManyOperations(..) => {
            "the code ran too many operations and was stopped (an endless loop?)".to_owned()
        }
        EvalAltResult::ErrorStackOverflow(..) => {
            "function calls nest too deeply and were stopped (runaway recursion?)".to_owned()
        }
        other => format!("error: {other}"),
    }
}

impl Tool for RhaiRepl {
    type Args = RhaiArgs;
    type Output = ToolOutput;
    type Error = ToolError;

    const NAME: &'static str = "rhai_repl";

    const DESCRIPTION: &'static str = "Runs Rhai script code in an embedded, sandboxed engine and returns the value of the last \
     expression, or what the code printed.\n\
     Variables and functions persist between calls (`reset` clears them). No file, \
     network or process access; operations, recursion, sizes and time are limited. \
     Rhai computes 3-15x slower than CPython; use python_repl for heavy work.";

    const PARALLEL_SAFE: bool = false;

    const EFFECTS: &'static [&'static str] = &["code:exec"];

    async fn call(&self, args: RhaiArgs, _cx: &CallContext) -> Result<ToolOutput, ToolError> {
        let this = self.clone();
        crate::on_script_thread(Self::NAME, move || this.run(&args)).await?
    }
}
