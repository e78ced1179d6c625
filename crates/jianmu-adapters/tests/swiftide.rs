//! Jianmu tools and a jianmu session in a real swiftide agent loop, with a scripted
//! model (a `ChatCompletion` that answers turn by turn) in place of a provider.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use futures::StreamExt as _;
use jianmu_adapters::swiftide::{SessionExecutor, session_tool, session_tools, toolset_tools};
use jianmu_runtime::{Policy, Runtime, SessionSettings};
use jianmu_tool_core::{ToolConfig, ToolSet};
use serde_json::json;
use swiftide_agents::{Agent, DefaultContext};
use swiftide_core::chat_completion::errors::{LanguageModelError, ToolError};
use swiftide_core::chat_completion::{
    ChatCompletion, ChatCompletionRequest, ChatCompletionResponse, ChatMessage, Tool, ToolCall,
    ToolOutput, ToolSpec,
};
use swiftide_core::{AgentContext, Command, CommandError, ToolExecutor};

/// A model that answers with its script, turn by turn, and keeps what it was asked.
#[derive(Clone, Default)]
struct Scripted {
    turns: Arc<Mutex<VecDeque<ChatCompletionResponse>>>,
    requests: Arc<Mutex<Vec<ChatCompletionRequest>>>,
}

impl Scripted {
    fn new(turns: impl IntoIterator<Item = ChatCompletionResponse>) -> Self {
        Self {
            turns: Arc::new(Mutex::new(turns.into_iter().collect())),
            requests: Arc::default(),
        }
    }
}

#[async_trait]
impl ChatCompletion for Scripted {
    async fn complete(
        &self,
        request: &ChatCompletionRequest,
    ) -> Result<ChatCompletionResponse, LanguageModelError> {
        self.requests.lock().unwrap().push(request.clone());
        self.turns
            .lock()
            .unwrap()
            .pop_front()
            .ok_or_else(|| LanguageModelError::permanent("the script has no more turns"))
    }
}

fn call(id: &str, name: &str, args: serde_json::Value) -> ChatCompletionResponse {
    let call = ToolCall::builder()
        .id(id)
        .name(name)
        .args(args.to_string())
        .build()
        .unwrap();
    ChatCompletionResponse::builder()
        .tool_calls(vec![call])
        .build()
        .unwrap()
}

fn reply(text: &str) -> ChatCompletionResponse {
    ChatCompletionResponse::builder()
        .message(text)
        .build()
        .unwrap()
}

/// A swiftide tool of the agent's own, which runs its command with the agent's
/// executor (as swiftide's tools do).
#[derive(Clone)]
struct RunTests;

#[async_trait]
impl Tool for RunTests {
    async fn invoke(
        &self,
        context: &dyn AgentContext,
        _call: &ToolCall,
    ) -> Result<ToolOutput, ToolError> {
        match context
            .executor()
            .exec_cmd(&Command::shell(
                "echo ran in $PWD; echo failing >&2; exit 3",
            ))
            .await
        {
            Ok(out) => Ok(ToolOutput::text(out.output)),
            Err(CommandError::NonZeroExit(out)) => Ok(ToolOutput::fail(out.output)),
            Err(e) => Err(ToolError::ExecutionFailed(e)),
        }
    }

    fn name(&self) -> Cow<'_, str> {
        Cow::Borrowed("run_tests")
    }

    fn tool_spec(&self) -> ToolSpec {
        ToolSpec::builder()
            .name("run_tests")
            .description("Runs the tests.")
            .build()
            .unwrap()
    }
}

fn tool_outputs(history: &[ChatMessage]) -> Vec<(String, ToolOutput)> {
    history
        .iter()
        .filter_map(|m| match m {
            ChatMessage::ToolOutput(call, out) => Some((call.name().to_owned(), out.clone())),
            _ => None,
        })
        .collect()
}

#[tokio::test]
async fn a_swiftide_agent_calls_jianmu_tools_and_runs_commands_in_the_session() {
    let workspace = tempfile::tempdir().unwrap();
    let outside = tempfile::tempdir().unwrap();
    std::fs::write(outside.path().join("secret.txt"), "outside").unwrap();
    let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(workspace.path()))).unwrap();
    let executor = SessionExecutor::open(&runtime).unwrap();
    let mut tools = session_tools(executor.session()).unwrap();
    assert!(tools.iter().any(|t| t.name() == "bash"));
    tools.push(RunTests.boxed());

    let model = Scripted::new([
        call("1", "calculator", json!({"input": "2**100"})),
        call(
            "2",
            "write_file",
            json!({"path": "notes/answer.txt", "content": "42\n"}),
        ),
        call(
            "3",
            "read_file",
            json!({"path": outside.path().join("secret.txt")}),
        ),
        call("4", "run_tests", json!({})),
        reply("Done."),
    ]);
    let mut agent = Agent::builder()
        .context(DefaultContext::from_executor(executor.clone()))
        .llm(&model)
        .tools(tools)
        .build()
        .unwrap();
    agent.query("Work it out.").await.unwrap();

    // Every turn was asked with jianmu's specs, in the object form.
    let requests = model.requests.lock().unwrap().clone();
    assert_eq!(requests.len(), 5);
    let specs = requests[0].tools_spec();
    let calc = specs.iter().find(|s| s.name == "calculator").unwrap();
    let schema = serde_json::to_value(calc.parameters_schema.as_ref().unwrap()).unwrap();
    assert_eq!(schema["type"], "object");
    assert!(schema["properties"]["input"].is_object(), "{schema}");

    let history = agent.history().await.unwrap();
    let outputs = tool_outputs(&history);
    assert_eq!(outputs.len(), 4, "{outputs:?}");
    assert_eq!(
        outputs[0],
        (
            "calculator".into(),
            ToolOutput::text("1267650600228229401496703205376")
        )
    );
    assert!(outputs[1].1.is_text(), "{:?}", outputs[1]);
    assert_eq!(
        std::fs::read_to_string(workspace.path().join("notes/answer.txt")).unwrap(),
        "42\n"
    );
    // A path outside the workspace is refused, in words the model can act on.
    let refused = outputs[2].1.as_fail().expect("a failure the model reads");
    assert!(refused.contains("outside the workspace"), "{refused}");
    // The agent's own tool ran its command in the session (the workspace), and its
    // non-zero exit came back as swiftide's NonZeroExit with the output.
    let ran = outputs[3].1.as_fail().expect("the command failed");
    let root = workspace.path().canonicalize().unwrap();
    assert!(ran.contains(&format!("ran in {}", root.display())), "{ran}");
    assert!(ran.ends_with("failing"), "{ran}");
    assert!(matches!(history.last(), Some(ChatMessage::Assistant(Some(m), None)) if m == "Done."));
    assert!(executor.close().await.is_complete());
}

#[tokio::test]
async fn invalid_arguments_count_against_the_retry_limit_and_other_errors_do_not() {
    let workspace = tempfile::tempdir().unwrap();
    let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(workspace.path()))).unwrap();
    let executor = SessionExecutor::open(&runtime).unwrap();
    let calc = session_tool(executor.session(), "calculator").unwrap();
    let context = DefaultContext::default();
    let invoke = |args: &str| {
        let call = ToolCall::builder()
            .id("1")
            .name("calculator")
            .args(args)
            .build()
            .unwrap();
        let calc = calc.clone();
        let context = &context;
        async move { calc.invoke(context, &call).await }
    };
    match invoke(r#"{"input": 7}"#).await {
        Err(ToolError::WrongArguments(e)) => assert!(e.to_string().contains("input"), "{e}"),
        other => panic!("{other:?}"),
    }
    match invoke("{not json").await {
        Err(ToolError::WrongArguments(_)) => {}
        other => panic!("{other:?}"),
    }
    let failed = invoke(r#"{"input": "1/0"}"#).await.unwrap();
    assert!(
        failed.as_fail().is_some_and(|m| m.contains("zero")),
        "{failed:?}"
    );
    executor.close().await;
}

#[tokio::test]
async fn the_executor_runs_reads_writes_and_streams_within_the_session() {
    let workspace = tempfile::tempdir().unwrap();
    let root = workspace.path();
    std::fs::create_dir_all(root.join("src/deep")).unwrap();
    std::fs::write(root.join("src/a.rs"), "fn a() {}\n").unwrap();
    std::fs::write(root.join("src/deep/b.rs"), "fn b() {}\n").unwrap();
    std::fs::write(root.join("src/c.py"), "c = 1\n").unwrap();
    std::fs::write(root.join("src/blob.rs"), b"\0\x01\x02binary").unwrap();
    let runtime = Runtime::new(SessionSettings::new(ToolConfig::new(root))).unwrap();
    let executor = SessionExecutor::open(&runtime).unwrap();

    // A shell command in a folder of the workspace.
    let out = executor
        .exec_cmd(&Command::shell("pwd; echo err >&2").with_current_dir("src"))
        .await
        .unwrap();
    let src = root.canonicalize().unwrap().join("src");
    assert_eq!(out.output, format!("{}\nerr", src.display()));
    match executor
        .exec_cmd(&Command::shell("echo partial; exit 5"))
        .await
    {
        Err(CommandError::NonZeroExit(out)) => assert_eq!(out.output, "partial"),
        other => panic!("{other:?}"),
    }
    match executor
        .exec_cmd(
            &Command::shell("echo started; sleep 30").with_timeout(Duration::from_millis(300)),
        )
        .await
    {
        Err(CommandError::TimedOut { output, .. }) => {
            assert!(output.output.contains("started"), "{output}")
        }
        other => panic!("{other:?}"),
    }

    // A limit longer than `bash` takes still runs the command.
    let long = executor
        .exec_cmd(&Command::shell("echo ok").with_timeout(Duration::from_secs(3 * 86_400)))
        .await
        .unwrap();
    assert_eq!(long.output, "ok");

    // Files: written and read back whole, relative to the command's folder.
    executor
        .exec_cmd(&Command::write_file("new/x.txt", "one\ntwo\n").with_current_dir("src"))
        .await
        .unwrap();
    assert_eq!(
        std::fs::read_to_string(root.join("src/new/x.txt")).unwrap(),
        "one\ntwo\n"
    );
    let read = executor
        .exec_cmd(&Command::read_file("src/new/x.txt"))
        .await
        .unwrap();
    assert_eq!(read.output, "one\ntwo\n");
    match executor.exec_cmd(&Command::read_file("src/blob.rs")).await {
        Err(CommandError::NonZeroExit(out)) => assert!(out.output.contains("binary"), "{out}"),
        other => panic!("{other:?}"),
    }
    // Confinement holds for every command.
    let escape = executor
        .exec_cmd(&Command::read_file("../../etc/passwd"))
        .await;
    assert!(
        matches!(&escape, Err(CommandError::ExecutorError(e)) if e.to_string().contains("outside")),
        "{escape:?}"
    );
    let escape = executor
        .exec_cmd(&Command::write_file("/tmp/planted-by-swiftide", "x"))
        .await;
    assert!(escape.is_err(), "{escape:?}");
    assert!(!Path::new("/tmp/planted-by-swiftide").exists());

    // Streaming files for indexing: only text files with the extensions asked for.
    let stream = executor
        .stream_files(Path::new("src"), Some(vec!["rs".into()]))
        .await
        .unwrap();
    let mut nodes: Vec<(String, String)> = stream
        .map(|n| n.unwrap())
        .map(|n| (n.path.display().to_string(), n.chunk))
        .collect()
        .await;
    nodes.sort();
    assert_eq!(
        nodes,
        [
            ("src/a.rs".to_owned(), "fn a() {}\n".to_owned()),
            ("src/deep/b.rs".to_owned(), "fn b() {}\n".to_owned()),
        ]
    );
    // A text file too large to read whole is an error item naming it, not dropped.
    std::fs::create_dir(root.join("big")).unwrap();
    std::fs::write(root.join("big/huge.rs"), "// filler\n".repeat(200_000)).unwrap();
    let items: Vec<_> = executor
        .stream_files(Path::new("big"), Some(vec!["rs".into()]))
        .await
        .unwrap()
        .collect()
        .await;
    assert_eq!(items.len(), 1);
    let err = items[0].as_ref().unwrap_err().to_string();
    assert!(
        err.contains("big/huge.rs is larger than the read limit"),
        "{err}"
    );
    std::fs::remove_dir_all(root.join("big")).unwrap();

    let all = executor.stream_files(Path::new("."), None).await.unwrap();
    assert_eq!(
        all.count().await,
        4,
        "a.rs, b.rs, c.py, x.txt; not the binary"
    );
    assert!(executor.close().await.is_complete());
}

#[tokio::test]
async fn a_toolset_through_a_runner_with_a_policy_and_images_named() {
    use jianmu_runtime::RunnerExt as _;
    let workspace = tempfile::tempdir().unwrap();
    std::fs::write(workspace.path().join("red.png"), jianmu_test_support::PNG).unwrap();
    let set = Arc::new(
        ToolSet::resolve(
            &jianmu_provider::BuiltinToolProvider::new(ToolConfig::new(workspace.path())),
            &["calculator", "file_read", "write_file"],
        )
        .unwrap(),
    );
    let policy = Policy {
        deny: vec!["write_file".into()],
        ..Policy::default()
    };
    let runner: Arc<dyn jianmu_tool_core::DynRunner> =
        Arc::new(jianmu_runtime::InProcess.with_policy(policy));
    let tools = toolset_tools(&set, Some(runner));
    assert_eq!(
        tools
            .iter()
            .map(|t| t.name().into_owned())
            .collect::<Vec<_>>(),
        ["calculator", "read_file", "write_file"]
    );
    let context = DefaultContext::default();
    let call = |name: &str, args: serde_json::Value| {
        ToolCall::builder()
            .id("1")
            .name(name)
            .args(args.to_string())
            .build()
            .unwrap()
    };
    let out = tools[2]
        .invoke(
            &context,
            &call("write_file", json!({"path": "x", "content": "y"})),
        )
        .await
        .unwrap();
    assert!(
        out.as_fail().is_some_and(|m| m.contains("denied")),
        "{out:?}"
    );
    assert!(!workspace.path().join("x").exists());
    let out = tools[1]
        .invoke(&context, &call("read_file", json!({"path": "red.png"})))
        .await
        .unwrap();
    let text = out.as_text().unwrap();
    assert!(
        text.ends_with(
            "[an image (image/png, about 1 KB) is part of this answer; images cannot be shown here]"
        ),
        "{text}"
    );
}
