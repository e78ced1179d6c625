//! Unit tests of the call path: merging, validation, sets, nodes, events.

use std::sync::{Arc, Mutex};

use expect_test::{Expect, expect};
use serde_json::{Map, Value, json};

use crate::*;

/// Echoes its validated arguments back as JSON text.
fn echo(spec: ToolSpec) -> ToolHandle {
    ToolHandle::new(FunctionTool::from_sync(spec, |args| {
        Ok(ToolOutput::text(args.to_string()))
    }))
    .unwrap()
}

fn object_tool() -> ToolHandle {
    echo(
        ToolSpec::new("pair", "Takes a and b.").with_input_schema(json!({
            "type": "object",
            "properties": {
                "a": {"type": "integer"},
                "b": {"type": "string", "maxLength": 3},
            },
            "required": ["a"],
            "additionalProperties": false,
        })),
    )
}

fn block_on<F: std::future::Future>(f: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(f)
}

#[track_caller]
fn check_call(tool: &ToolHandle, args: Value, options: ExecuteOptions<'_>, expect: Expect) {
    let got = match block_on(tool.execute(args, options)) {
        Ok(out) => format!("ok: {}", out.text),
        Err(e) => format!("err: {e}"),
    };
    expect.assert_eq(&got);
}

#[test]
fn a_lone_required_string_argument_may_come_bare() {
    let tool = echo(ToolSpec::new("patch", "Patches.").with_input_schema(json!({
        "type": "object",
        "properties": {"patch": {"type": "string"}},
        "required": ["patch"],
        "additionalProperties": false,
    })));
    let o = ExecuteOptions::default();
    check_call(&tool, json!("p"), o, expect![[r#"ok: {"patch":"p"}"#]]);
    check_call(
        &tool,
        json!({"patch": "p"}),
        o,
        expect![[r#"ok: {"patch":"p"}"#]],
    );
    // Not for tools with more arguments: the schema says what is wrong.
    check_call(
        &object_tool(),
        json!("p"),
        o,
        expect![[r#"err: invalid arguments for `pair`: at /: "p" is not of type "object""#]],
    );
}

#[test]
fn bare_string_tool_takes_string_or_input_object() {
    let tool = echo(ToolSpec::new("shout", "Shouts."));
    let o = ExecuteOptions::default();
    check_call(&tool, json!("hi"), o, expect![[r#"ok: "hi""#]]);
    check_call(&tool, json!({"input": "hi"}), o, expect![[r#"ok: "hi""#]]);
    check_call(
        &tool,
        json!(5),
        o,
        expect![[
            r#"err: invalid arguments for `shout`: at /: expected a string or {"input": string}, got a number"#
        ]],
    );
    check_call(
        &tool,
        json!({"input": "hi", "extra": 1}),
        o,
        expect![
            "err: invalid arguments for `shout`: at /extra: this tool takes a single `input` string; unexpected key `extra`"
        ],
    );
    check_call(
        &tool,
        json!({"input": 7}),
        o,
        expect![[r#"err: invalid arguments for `shout`: at /input: 7 is not of type "string""#]],
    );
    check_call(
        &tool,
        json!({}),
        o,
        expect![[
            r#"err: invalid arguments for `shout`: at /: expected a string or {"input": string}, got an object without `input`"#
        ]],
    );
}

#[test]
fn every_violation_is_listed_with_its_pointer() {
    let tool = object_tool();
    check_call(
        &tool,
        json!({"a": "x", "b": "long", "c": true}),
        ExecuteOptions::default(),
        expect![[
            r#"err: invalid arguments for `pair`: at /a: "x" is not of type "integer"; at /b: "long" is longer than 3 characters; at /: Additional properties are not allowed ('c' was unexpected)"#
        ]],
    );
    check_call(
        &tool,
        Value::Null,
        ExecuteOptions::default(),
        expect![[r#"err: invalid arguments for `pair`: at /: "a" is a required property"#]],
    );
}

#[test]
fn injected_arguments_win_unless_told_otherwise() {
    let tool = object_tool();
    let mut injected = Map::new();
    injected.insert("a".into(), json!(2));
    let args = json!({"a": 1, "b": "x"});
    check_call(
        &tool,
        args.clone(),
        ExecuteOptions::default().injected(&injected),
        expect![[r#"ok: {"a":2,"b":"x"}"#]],
    );
    check_call(
        &tool,
        args,
        ExecuteOptions::default()
            .injected(&injected)
            .prefer_injected(false),
        expect![[r#"ok: {"a":1,"b":"x"}"#]],
    );
    // Injected values fill what the model left out, and are validated like the rest.
    check_call(
        &tool,
        json!({"b": "y"}),
        ExecuteOptions::default()
            .injected(&injected)
            .prefer_injected(false),
        expect![[r#"ok: {"a":2,"b":"y"}"#]],
    );
    injected.insert("b".into(), json!("toolong"));
    check_call(
        &tool,
        json!({"a": 1}),
        ExecuteOptions::default().injected(&injected),
        expect![[
            r#"err: invalid arguments for `pair`: at /b: "toolong" is longer than 3 characters"#
        ]],
    );
}

#[derive(serde::Deserialize, schemars::JsonSchema)]
struct AddArgs {
    /// The left operand.
    a: i64,
    /// The right operand.
    b: i64,
}

struct Add;

#[derive(Debug)]
struct Overflow;

impl From<Overflow> for ToolError {
    fn from(_: Overflow) -> Self {
        ToolError::failed("the sum overflows i64")
    }
}

impl Tool for Add {
    type Args = AddArgs;
    type Output = i64;
    type Error = Overflow;

    const NAME: &'static str = "add";
    const DESCRIPTION: &'static str = "Adds two integers.\nSecond line.";
    const EFFECTS: &'static [&'static str] = &["pure"];
    async fn call(&self, args: AddArgs, _cx: &CallContext) -> Result<i64, Overflow> {
        args.a.checked_add(args.b).ok_or(Overflow)
    }
}

#[test]
fn typed_tool_derives_its_schema_and_maps_its_error() {
    let tool = ToolHandle::new(Add).unwrap();
    let spec = tool.spec();
    assert_eq!(spec.summary(), "Adds two integers.");
    assert_eq!(spec.effect_tags, ["pure"]);
    expect![[r#"{"properties":{"a":{"description":"The left operand.","format":"int64","type":"integer"},"b":{"description":"The right operand.","format":"int64","type":"integer"}},"required":["a","b"],"type":"object"}"#]]
        .assert_eq(&spec.input_schema.to_string());
    let o = ExecuteOptions::default();
    check_call(&tool, json!({"a": 2, "b": 3}), o, expect!["ok: 5"]);
    check_call(
        &tool,
        json!({"a": i64::MAX, "b": 1}),
        o,
        expect!["err: the sum overflows i64"],
    );
    let out = block_on(tool.execute(json!({"a": 1, "b": 1}), o)).unwrap();
    assert_eq!(out.structured, Some(json!(2)));
}

#[test]
fn invalid_schema_is_a_config_error() {
    let err = ToolHandle::new(FunctionTool::from_sync(
        ToolSpec::new("bad", "").with_input_schema(json!({"type": 12})),
        |_| Ok(ToolOutput::default()),
    ))
    .unwrap_err();
    assert!(matches!(err, ToolError::Config { .. }), "{err}");
    assert!(!err.is_model_facing());
}

/// Records every call it runs, then runs the tool in-process.
#[derive(Default)]
struct Recording(Mutex<Vec<(String, Value, String)>>);

impl Runner for Recording {
    async fn run(&self, call: PreparedCall<'_>) -> Result<ToolOutput, ToolError> {
        let id = format!("{}|{:?}", call.cx.call_id(), call.cx.event_context());
        self.0
            .lock()
            .unwrap()
            .push((call.tool.name().to_owned(), call.args.clone(), id));
        call.run_here().await
    }
}

#[test]
fn runner_receives_merged_validated_arguments_and_context() {
    let tool = object_tool();
    let runner = Recording::default();
    let ctx = json!({"agent": "a1"});
    let out = block_on(
        tool.execute(
            json!({"a": 1}),
            ExecuteOptions::default()
                .runner(&runner)
                .call_id("model-7")
                .event_context(&ctx),
        ),
    )
    .unwrap();
    assert_eq!(out.text, r#"{"a":1}"#);
    let calls = runner.0.lock().unwrap();
    assert_eq!(
        *calls,
        [(
            "pair".to_owned(),
            json!({"a": 1}),
            r#"model-7|Some(Object {"agent": String("a1")})"#.to_owned()
        )]
    );
    // Invalid arguments never reach the runner.
    drop(calls);
    let err = block_on(tool.execute(json!({}), ExecuteOptions::default().runner(&runner)));
    assert!(err.is_err());
    assert_eq!(runner.0.lock().unwrap().len(), 1);
}

#[test]
fn toolset_dedupes_last_wins_and_resolves_aliases() {
    let first = echo(ToolSpec::new("x", "first"));
    let second = echo(ToolSpec::new("x", "second"));
    let y = echo(ToolSpec::new("y", "y"));
    let set = ToolSet::from_tools([first, y.clone()]).merge(ToolSet::from_tools([second]));
    assert_eq!(set.names(), ["x", "y"]);
    assert_eq!(set.get("x").unwrap().spec().description, "second");

    struct P(ToolHandle);
    impl ToolProvider for P {
        fn tools(&self) -> Result<Vec<ToolHandle>, ToolError> {
            Ok(vec![self.0.clone()])
        }
        fn resolve(&self, _: &[&str]) -> Result<Vec<ToolHandle>, ToolError> {
            self.tools()
        }
        fn aliases(&self) -> &[(&'static str, &'static str)] {
            &[("why", "y")]
        }
    }
    let set = ToolSet::from_providers(&[&P(y)]).unwrap();
    assert_eq!(set.canonical_name("why"), "y");
    let out = block_on(set.execute("why", json!("q"), None)).unwrap();
    assert_eq!(out.text, r#""q""#);
    let err = block_on(set.execute("zzz", json!("q"), None)).unwrap_err();
    assert_eq!(err.to_string(), "unknown tool `zzz`; known tools: why, y");
    assert!(err.is_model_facing());
}

#[test]
fn node_binds_arguments_and_takes_state() {
    let node = object_tool()
        .as_node()
        .with_args(json!({"a": 1, "b": "n"}))
        .inject("b", json!("i"));
    let out = block_on(node.run(None)).unwrap();
    assert_eq!(out.text, r#"{"a":1,"b":"i"}"#);
    let mut state = Map::new();
    state.insert("a".into(), json!(9));
    let out = block_on(node.run_with(&state, None)).unwrap();
    assert_eq!(out.text, r#"{"a":9,"b":"i"}"#);
    assert_eq!(node.tool().name(), "pair");
}

#[test]
fn event_bus_delivers_to_all_and_survives_a_panicking_subscriber() {
    let bus = EventBus::new();
    assert!(!bus.has_subscribers());
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s1 = seen.clone();
    let a = bus.subscribe(move |e| s1.lock().unwrap().push(format!("a:{}", e.kind.as_str())));
    bus.subscribe(|_| panic!("subscriber bug"));
    let s2 = seen.clone();
    bus.subscribe(move |e| s2.lock().unwrap().push(format!("c:{}", e.tool)));
    bus.emit(&ExecutionEvent::new(EventKind::Started, "t", "c1"));
    assert!(bus.unsubscribe(a));
    assert!(!bus.unsubscribe(a));
    bus.emit(&ExecutionEvent::new(EventKind::Failed, "u", "c2"));
    assert_eq!(*seen.lock().unwrap(), ["a:execution.started", "c:t", "c:u"]);
}

#[test]
fn config_settings_decode_or_name_the_tool() {
    #[derive(serde::Deserialize, Default, Debug, PartialEq)]
    struct S {
        limit: u32,
    }
    let cfg = ToolConfig::new("/ws").with_settings("t", json!({"limit": 3}));
    assert_eq!(cfg.settings::<S>("t").unwrap(), S { limit: 3 });
    assert_eq!(cfg.settings::<S>("other").unwrap(), S::default());
    let bad = ToolConfig::new("/ws").with_settings("t", json!({"limit": "x"}));
    let err = bad.settings::<S>("t").unwrap_err();
    assert!(
        err.to_string()
            .starts_with("invalid configuration for `t`: "),
        "{err}"
    );
}

#[test]
fn a_setting_laid_over_keeps_the_rest_of_its_table() {
    let cfg = ToolConfig::new("/ws")
        .with_settings(
            "bash",
            json!({"max_jobs": 16, "isolation": {"network": true, "writable": ["/x"]}}),
        )
        .with_setting("bash", "isolation", json!({"max_memory_mb": 512}))
        .with_setting("bash", "max_jobs", json!(2))
        .with_setting("new", "k", json!(1))
        .with_settings("scalar", json!(7))
        .with_setting("scalar", "k", json!(1));
    assert_eq!(
        cfg.raw_settings("bash").unwrap(),
        &json!({"max_jobs": 2, "isolation": {"network": true, "writable": ["/x"], "max_memory_mb": 512}})
    );
    assert_eq!(cfg.raw_settings("new").unwrap(), &json!({"k": 1}));
    assert_eq!(cfg.raw_settings("scalar").unwrap(), &json!({"k": 1}));
}

#[test]
fn object_form_of_a_bare_string_schema() {
    let spec = ToolSpec::new("c", "calc");
    assert_eq!(
        spec.parameters(),
        json!({
            "type": "object",
            "properties": {"input": {"type": "string", "description": "Tool input string"}},
            "required": ["input"],
            "additionalProperties": false,
        })
    );
    let obj = object_tool();
    assert_eq!(obj.spec().parameters(), obj.spec().input_schema);
}

mod batch {
    use std::sync::atomic::{AtomicU64, Ordering};
    use std::time::Duration;

    use super::*;

    /// A logical clock: every start and end takes the next tick.
    static CLOCK: AtomicU64 = AtomicU64::new(0);

    type Spans = Arc<Mutex<Vec<(String, u64, u64)>>>;

    fn timed(
        name: &str,
        parallel_safe: bool,
        spans: &Spans,
        barrier: &Arc<tokio::sync::Barrier>,
    ) -> ToolHandle {
        let spans = spans.clone();
        let barrier = barrier.clone();
        let spec = ToolSpec::new(name, "records when it runs").with_parallel_safe(parallel_safe);
        ToolHandle::new(FunctionTool::new(spec, move |args| {
            let spans = spans.clone();
            let barrier = barrier.clone();
            async move {
                let label = args.as_str().unwrap_or_default().to_owned();
                let start = CLOCK.fetch_add(1, Ordering::SeqCst);
                if parallel_safe {
                    // Two parallel-safe calls of a group must be in flight together,
                    // or this never returns (and the timeout below fails the test).
                    tokio::time::timeout(Duration::from_secs(10), barrier.wait())
                        .await
                        .map_err(|_| ToolError::failed("parallel-safe calls did not overlap"))?;
                } else {
                    for _ in 0..10 {
                        tokio::task::yield_now().await;
                    }
                }
                let end = CLOCK.fetch_add(1, Ordering::SeqCst);
                spans.lock().unwrap().push((label.clone(), start, end));
                Ok(ToolOutput::text(label))
            }
        }))
        .unwrap()
    }

    #[test]
    fn parallel_safe_calls_overlap_and_exclusive_ones_run_alone() {
        let spans: Spans = Arc::default();
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let set = ToolSet::from_tools([
            timed("read", true, &spans, &barrier),
            timed("write", false, &spans, &barrier),
        ]);
        let calls: Vec<ToolCall> = [
            ("read", "a"),
            ("read", "b"),
            ("write", "c"),
            ("nope", "x"),
            ("read", "d"),
            ("read", "e"),
        ]
        .iter()
        .map(|(tool, label)| ToolCall::new(*tool, json!(label)).with_call_id(*label))
        .collect();
        let results = block_on(set.execute_batch(&calls, None));
        let texts: Vec<String> = results
            .iter()
            .map(|r| match r {
                Ok(o) => o.text.clone(),
                Err(e) => format!("error: {e}"),
            })
            .collect();
        assert_eq!(texts[..3], ["a", "b", "c"]);
        assert!(texts[3].starts_with("error: unknown tool `nope`"));
        assert_eq!(texts[4..], ["d", "e"]);

        let spans = spans.lock().unwrap().clone();
        let span = |l: &str| spans.iter().find(|s| s.0 == l).map(|s| (s.1, s.2)).unwrap();
        let overlap = |x: (u64, u64), y: (u64, u64)| x.0 < y.1 && y.0 < x.1;
        assert!(overlap(span("a"), span("b")), "{spans:?}");
        assert!(overlap(span("d"), span("e")), "{spans:?}");
        for other in ["a", "b", "d", "e"] {
            assert!(
                !overlap(span("c"), span(other)),
                "write overlapped {other}: {spans:?}"
            );
        }
        // Effects keep the model's order around the exclusive call.
        assert!(span("b").1 < span("c").0 && span("c").1 < span("d").0);
    }
}

mod policy {
    use super::*;

    fn spec(name: &str, tags: &[&str]) -> ToolSpec {
        ToolSpec::new(name, "").with_effect_tags(tags.iter().copied())
    }

    #[track_caller]
    fn check(policy: &Policy, name: &str, tags: &[&str], expect: &str) {
        let got = match policy.check(&spec(name, tags)) {
            Ok(()) => "ok".to_owned(),
            Err(e) => e.to_string(),
        };
        assert_eq!(got, expect);
    }

    #[test]
    fn rules() {
        let open = Policy::default();
        assert!(open.is_open());
        check(&open, "bash", &["process:exec"], "ok");

        let read_only = Policy {
            read_only: true,
            ..Policy::default()
        };
        check(&read_only, "read_file", &["filesystem:read"], "ok");
        check(&read_only, "calculator", &[], "ok");
        check(
            &read_only,
            "write_file",
            &["filesystem:write"],
            "call to `write_file` denied: effect `filesystem:write` is denied (read-only mode)",
        );
        check(
            &read_only,
            "http_request",
            &["network"],
            "call to `http_request` denied: effect `network` is denied (read-only mode)",
        );

        let deny = Policy {
            deny: vec!["bash".into(), "filesystem".into()],
            ..Policy::default()
        };
        check(
            &deny,
            "bash",
            &[],
            "call to `bash` denied: the tool is denied (deny `bash`)",
        );
        check(
            &deny,
            "list_dir",
            &["filesystem:read"],
            "call to `list_dir` denied: effect `filesystem:read` is denied (deny `filesystem`)",
        );
        check(&deny, "calculator", &[], "ok");
        // A prefix matches only at a `:` boundary.
        let deny_fs = Policy {
            deny: vec!["file".into()],
            ..Policy::default()
        };
        check(&deny_fs, "list_dir", &["filesystem:read"], "ok");

        let allow = Policy {
            allow: vec!["filesystem:read".into(), "bash".into()],
            ..Policy::default()
        };
        check(&allow, "read_file", &["filesystem:read"], "ok");
        check(&allow, "calculator", &[], "ok");
        check(&allow, "bash", &["process:exec"], "ok");
        check(
            &allow,
            "write_file",
            &["filesystem:write"],
            "call to `write_file` denied: effect `filesystem:write` is not allowed (allow: filesystem:read, bash)",
        );

        let both = Policy {
            allow: vec!["bash".into()],
            deny: vec!["process:exec".into()],
            ..Policy::default()
        };
        check(
            &both,
            "bash",
            &["process:exec"],
            "call to `bash` denied: effect `process:exec` is denied (deny `process:exec`)",
        );
    }
}

#[test]
fn a_lazy_set_builds_each_tool_on_first_use_and_names_missing_ones_by_its_provider() {
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Offers `y` (aliased `why`) and `broken`; knows `z` is not compiled in.
    struct P(Arc<AtomicUsize>);
    impl ToolProvider for P {
        fn tools(&self) -> Result<Vec<ToolHandle>, ToolError> {
            unreachable_in_test()
        }
        fn resolve(&self, _: &[&str]) -> Result<Vec<ToolHandle>, ToolError> {
            unreachable_in_test()
        }
        fn aliases(&self) -> &[(&'static str, &'static str)] {
            &[("why", "y"), ("zed", "z")]
        }
        fn names(&self) -> Result<Vec<String>, ToolError> {
            Ok(vec!["broken".into(), "y".into()])
        }
        fn build(&self, name: &str) -> Result<ToolHandle, ToolError> {
            self.0.fetch_add(1, Ordering::SeqCst);
            match name {
                "y" => Ok(echo(ToolSpec::new("y", "y"))),
                "z" => Err(ToolError::NotCompiled {
                    name: "z".into(),
                    feature: "zz".into(),
                }),
                _ => Err(ToolError::Config {
                    tool: name.into(),
                    message: "bad setting".into(),
                }),
            }
        }
    }
    fn unreachable_in_test() -> Result<Vec<ToolHandle>, ToolError> {
        Err(ToolError::failed("a lazy set never builds everything"))
    }

    let builds = Arc::new(AtomicUsize::new(0));
    let set = ToolSet::lazy(P(builds.clone())).unwrap();
    assert_eq!(set.names(), ["broken", "y"]);
    assert_eq!(
        builds.load(Ordering::SeqCst),
        0,
        "nothing is built up front"
    );
    // The alias of a tool not in the set is not kept.
    assert_eq!(set.canonical_name("zed"), "zed");
    let out = block_on(set.execute("why", json!("q"), None)).unwrap();
    assert_eq!(out.text, r#""q""#);
    block_on(set.execute("y", json!("r"), None)).unwrap();
    assert_eq!(builds.load(Ordering::SeqCst), 1, "built once, then kept");
    // Clones share what was built.
    let clone = set.clone();
    block_on(clone.execute("y", json!("s"), None)).unwrap();
    assert_eq!(builds.load(Ordering::SeqCst), 1);
    // A tool that cannot be built fails its calls, not the set.
    let err = set.tool("broken").unwrap_err();
    assert_eq!(
        err.to_string(),
        "invalid configuration for `broken`: bad setting"
    );
    assert_eq!(set.specs().len(), 1);
    // A missing tool is named by the provider when it knows which feature adds it.
    let err = set.tool("z").unwrap_err();
    assert!(matches!(err, ToolError::NotCompiled { .. }), "{err}");
    let err = set.tool("nope").unwrap_err();
    assert_eq!(
        err.to_string(),
        "unknown tool `nope`; known tools: broken, why, y"
    );
}

#[test]
fn fresh_call_ids_are_distinct_call_numbers_and_given_ones_are_kept() {
    let a = CallContext::new();
    let b = CallContext::new();
    let number = |cx: &CallContext| {
        cx.call_id()
            .strip_prefix("call-")
            .and_then(|n| n.parse::<u64>().ok())
            .unwrap_or_else(|| panic!("not a call number: {}", cx.call_id()))
    };
    assert!(number(&b) > number(&a));
    let given = CallContext::new().with_call_id("toolu_01");
    assert_eq!(given.call_id(), "toolu_01");
    assert_eq!(given.clone().call_id(), "toolu_01");
}

#[test]
fn a_merge_of_lazy_sets_builds_each_tool_with_its_own_provider() {
    /// Offers and builds only the tool it is named after.
    struct One(&'static str);
    impl ToolProvider for One {
        fn tools(&self) -> Result<Vec<ToolHandle>, ToolError> {
            Ok(vec![echo(ToolSpec::new(self.0, self.0))])
        }
        fn resolve(&self, names: &[&str]) -> Result<Vec<ToolHandle>, ToolError> {
            match names {
                [name] if *name == self.0 => self.tools(),
                _ => Err(ToolError::failed(format!(
                    "{} cannot build {names:?}",
                    self.0
                ))),
            }
        }
        fn names(&self) -> Result<Vec<String>, ToolError> {
            Ok(vec![self.0.to_owned()])
        }
    }
    let set = ToolSet::lazy(One("a"))
        .unwrap()
        .merge(ToolSet::lazy(One("b")).unwrap());
    assert_eq!(set.names(), ["a", "b"]);
    for name in ["a", "b"] {
        let out = block_on(set.execute(name, json!("q"), None)).unwrap();
        assert_eq!(out.text, r#""q""#, "{name}");
        assert_eq!(set.tool(name).unwrap().spec().description, name);
    }
}

#[test]
fn errors_and_outputs_survive_serialization_as_themselves() {
    let errors = [
        ToolError::InvalidArguments {
            tool: "t".into(),
            violations: vec![Violation {
                pointer: "/a".into(),
                message: "not a number".into(),
            }],
        },
        ToolError::failed("no luck"),
        ToolError::Timeout {
            tool: "bash".into(),
            after: std::time::Duration::from_millis(1500),
            partial: Some("so far".into()),
        },
        ToolError::UnknownTool {
            name: "nope".into(),
            known: vec!["a".into(), "b".into()],
        },
        ToolError::NotCompiled {
            name: "bash".into(),
            feature: "shell".into(),
        },
        ToolError::Denied {
            tool: "bash".into(),
            rule: "denied by `process:exec`".into(),
        },
        ToolError::Config {
            tool: "t".into(),
            message: "bad".into(),
        },
        ToolError::runner("t", "disk gone"),
        ToolError::Cancelled { tool: "t".into() },
    ];
    for error in errors {
        let text = serde_json::to_string(&error).unwrap();
        let back: ToolError = serde_json::from_str(&text).unwrap();
        assert_eq!(
            crate::error_chain(&back),
            crate::error_chain(&error),
            "{text}"
        );
        assert_eq!(back.is_model_facing(), error.is_model_facing(), "{text}");
        assert_eq!(
            std::mem::discriminant(&back),
            std::mem::discriminant(&error),
            "{text}"
        );
    }
    let mut out = ToolOutput::text("hi");
    out.structured = Some(json!({"n": 1}));
    let back: ToolOutput = serde_json::from_str(&serde_json::to_string(&out).unwrap()).unwrap();
    assert_eq!(back, out);
    assert_eq!(
        serde_json::to_string(&ToolOutput::text("x")).unwrap(),
        r#"{"text":"x"}"#
    );
}

#[tokio::test]
async fn a_deferred_tool_is_built_at_its_first_call_and_a_failed_build_is_tried_again() {
    let builds = Arc::new(Mutex::new(0u32));
    let counter = Arc::clone(&builds);
    let spec = ToolSpec::new("late", "Built late.");
    let late = ToolHandle::deferred(spec.clone(), move || {
        let mut n = counter.lock().unwrap();
        *n += 1;
        if *n == 1 {
            return Err(ToolError::Config {
                tool: "late".into(),
                message: "not yet".into(),
            });
        }
        ToolHandle::new(FunctionTool::from_sync(
            ToolSpec::new("late", "Built late."),
            |_| Ok("built".into()),
        ))
    });
    assert!(!late.is_built());
    assert_eq!(late.spec(), &spec);
    let first = late.execute(json!("x"), ExecuteOptions::default()).await;
    assert!(matches!(first, Err(ToolError::Config { .. })), "{first:?}");
    let second = late.execute(json!("x"), ExecuteOptions::default()).await;
    assert_eq!(second.unwrap().text, "built");
    assert!(late.is_built());
    late.execute(json!("x"), ExecuteOptions::default())
        .await
        .unwrap();
    assert_eq!(*builds.lock().unwrap(), 2);

    let boom = ToolHandle::deferred(ToolSpec::new("boom", "Panics when built."), || {
        panic!("no parts")
    });
    let e = boom
        .execute(json!("x"), ExecuteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::Runner { .. }), "{e}");
    assert!(
        crate::error_chain(&e).contains("the tool panicked: no parts"),
        "{e}"
    );
}

/// A schema is compiled once per process: a deferred handle and the tool it builds,
/// and a second set of the same tools (another session's), validate with one compiled
/// schema; a different schema has its own.
#[test]
fn an_input_schema_is_compiled_once() {
    let schema = json!({
        "type": "object",
        "properties": {"once": {"type": "string", "description": "compiled once"}},
        "required": ["once"]
    });
    let spec = ToolSpec::new("once", "Compiled once.").with_input_schema(schema.clone());
    let make = {
        let spec = spec.clone();
        move || ToolHandle::new(FunctionTool::from_sync(spec.clone(), |_| Ok("ok".into())))
    };
    let built = make().unwrap();
    let deferred = ToolHandle::deferred(spec.clone(), make.clone());
    let again = ToolHandle::deferred(spec, make);
    assert!(deferred.shares_validator(&built));
    assert!(again.shares_validator(&deferred));
    let other = ToolHandle::new(FunctionTool::from_sync(
        ToolSpec::new("other", "Another schema.").with_input_schema(json!({"type": "object"})),
        |_| Ok("ok".into()),
    ))
    .unwrap();
    assert!(!other.shares_validator(&built));
}

/// Listing a deferred tool compiles nothing: its input schema is compiled at its
/// first validation, and a schema that is not valid JSON Schema fails that call, not
/// the listing.
#[tokio::test]
async fn a_deferred_tool_compiles_its_schema_at_its_first_call() {
    let spec = ToolSpec::new("lazy", "Compiled late.").with_input_schema(json!({
        "type": "object",
        "properties": {"n": {"type": "integer", "description": "compiled late"}},
    }));
    let make = {
        let spec = spec.clone();
        move || ToolHandle::new(FunctionTool::from_sync(spec.clone(), |_| Ok("ok".into())))
    };
    let lazy = ToolHandle::deferred(spec, make);
    assert_eq!(lazy.spec().name, "lazy");
    assert!(!lazy.is_compiled());
    let e = lazy
        .execute(json!({"n": "x"}), ExecuteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::InvalidArguments { .. }), "{e:?}");
    assert!(lazy.is_compiled());

    let broken = ToolHandle::deferred(
        ToolSpec::new("broken", "A bad schema.").with_input_schema(json!({"type": 7})),
        || panic!("not built: the arguments cannot be checked"),
    );
    let e = broken
        .execute(json!({}), ExecuteOptions::default())
        .await
        .unwrap_err();
    assert!(matches!(e, ToolError::Config { .. }), "{e:?}");
}

/// What a typed tool's calls return.
#[derive(serde::Serialize, schemars::JsonSchema)]
struct Measured {
    /// How long the text is.
    chars: usize,
}

struct Measure;

impl Tool for Measure {
    type Args = String;
    type Output = crate::Structured<Measured>;
    type Error = ToolError;

    const NAME: &'static str = "measure";
    const DESCRIPTION: &'static str = "Measures a text.";

    async fn call(
        &self,
        args: String,
        _cx: &CallContext,
    ) -> Result<crate::Structured<Measured>, ToolError> {
        let chars = args.chars().count();
        Ok(crate::Structured::new(
            format!("{chars} characters"),
            Measured { chars },
        ))
    }
}

/// A tool's output schema is derived from the type its calls return, and what a call
/// gives, made whole, is what that schema (with `text`) describes.
#[tokio::test]
async fn a_typed_output_declares_the_schema_its_values_follow() {
    let handle = ToolHandle::new(Measure).unwrap();
    let schema = handle
        .spec()
        .whole_output_schema()
        .expect("an object schema");
    assert_eq!(schema["properties"]["chars"]["type"], "integer");
    let out = handle
        .execute(json!("héllo"), ExecuteOptions::default())
        .await
        .unwrap();
    let (text, whole, _) = out.into_whole();
    assert_eq!(text, "5 characters");
    let whole = whole.unwrap();
    assert_eq!(whole, json!({"chars": 5, "text": "5 characters"}));
    let validator = jsonschema::validator_for(&schema).unwrap();
    assert!(validator.is_valid(&whole), "{whole} against {schema}");
}

/// MCP's `structuredContent` is an object: a value of another kind (a number, a
/// list) stays in the text alone.
#[test]
fn only_an_object_is_made_whole() {
    let number = 42i64.into_tool_output().unwrap();
    assert_eq!(number.structured, Some(json!(42)));
    assert_eq!(number.into_whole().1, None);
    let list = json!([1, 2]).into_tool_output().unwrap();
    assert_eq!(list.into_whole(), ("[1,2]".to_owned(), None, Vec::new()));
}
