//! `jianmu native`: a model API's own tool calls as JSON lines, one conversation.

use anyhow::Context as _;
use jianmu_native::{Native, NativeOptions};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt as _, AsyncReadExt as _, AsyncWriteExt as _, BufReader};

use crate::Failure;
use crate::args::{NativeApi, NativeArgs};
use crate::settings::Settings;
use crate::term::terminated;

/// The longest call item read: far over any real patch or command.
const MAX_LINE: u64 = 32 * 1024 * 1024;

/// Reads call items from stdin until it ends, answering each on stdout.
pub(crate) async fn run(settings: &Settings, args: &NativeArgs) -> Result<(), Failure> {
    let runtime = jianmu_runtime::Runtime::new(settings.session()?).map_err(anyhow::Error::from)?;
    let mut options = NativeOptions::new();
    options.root = args.root.clone();
    options.memories = args.memories.clone();
    options.max_characters = args.max_characters;
    options.agent_toolset = args.agent_toolset;
    if let Some(declaration) = &args.shell_tool {
        let declaration: Value = serde_json::from_str(declaration)
            .map_err(|e| Failure::Usage(anyhow::anyhow!("--shell-tool is not JSON: {e}")))?;
        options.shell_skills = jianmu_native::ShellSkill::of_declaration(&declaration)
            .map_err(|e| Failure::Usage(anyhow::anyhow!("--shell-tool: {e}")))?;
    }
    let native = Native::open(&runtime, options).map_err(anyhow::Error::from)?;
    let served = tokio::select! {
        served = serve(&native, args.api) => served,
        n = terminated() => Err(Failure::Signal(n)),
    };
    let closed = native.close().await;
    if !closed.is_complete() {
        eprintln!("jianmu: {closed}");
    }
    runtime.shutdown(std::time::Duration::from_secs(10)).await;
    served
}

async fn serve(native: &Native, api: NativeApi) -> Result<(), Failure> {
    let mut input = BufReader::new(tokio::io::stdin());
    let mut stdout = tokio::io::stdout();
    let mut line = Vec::new();
    for number in 1.. {
        line.clear();
        let read = (&mut input)
            .take(MAX_LINE + 1)
            .read_until(b'\n', &mut line)
            .await
            .context("cannot read stdin")?;
        if read == 0 {
            return Ok(());
        }
        if line.len() as u64 > MAX_LINE {
            return Err(usage(number, &format!("over {MAX_LINE} bytes")));
        }
        let text = String::from_utf8_lossy(&line);
        if text.trim().is_empty() {
            continue;
        }
        let item: Value =
            serde_json::from_str(&text).map_err(|e| usage(number, &format!("not JSON: {e}")))?;
        let answer = match api {
            NativeApi::Anthropic => native.anthropic(&item).await,
            NativeApi::Openai => native.openai(&item).await,
        }
        .map_err(|e| usage(number, &e.to_string()))?;
        let mut out = serde_json::to_vec(&answer).context("cannot write the answer")?;
        out.push(b'\n');
        stdout
            .write_all(&out)
            .await
            .context("cannot write stdout")?;
        stdout.flush().await.context("cannot write stdout")?;
    }
    Ok(())
}

fn usage(line: usize, what: &str) -> Failure {
    Failure::Usage(anyhow::anyhow!("line {line}: {what}"))
}
