//! `jianmu serve` (the runner: on stdin and stdout inside a sandbox container, or
//! listening over mutual TLS) and `jianmu sandbox tls init`.

use anyhow::Context as _;

use crate::args::{ServeArgs, TlsCommand};

/// Serves calls until the host goes (stdio) or forever (`--listen`, unless `--once`).
pub(crate) fn serve(args: &ServeArgs) -> anyhow::Result<()> {
    let (Some(addr), Some(tls_dir)) = (args.listen, &args.tls_dir) else {
        return jianmu_runtime::docker::serve_stdio(jianmu_runtime::Tools::builtin_set)
            .context("the sandbox runner failed");
    };
    let root = match &args.root {
        Some(root) => root.clone(),
        None => std::env::current_dir().context("no current folder for --root")?,
    };
    let listen = jianmu_runtime::docker::Listen {
        addr,
        tls_dir: tls_dir.clone(),
        root,
        once: args.once,
    };
    jianmu_runtime::docker::serve_listen(listen, jianmu_runtime::Tools::builtin_set)
        .context("the runner failed")
}

/// What `jianmu sandbox tls init` made, in words.
pub(crate) fn tls(command: &TlsCommand) -> anyhow::Result<String> {
    let TlsCommand::Init { dir, names } = command;
    let names = if names.is_empty() {
        vec!["localhost".to_owned(), "127.0.0.1".to_owned()]
    } else {
        names.clone()
    };
    let made = jianmu_runtime::docker::tls_init(dir, &names)?;
    Ok(format!(
        "made a certificate authority in {} (keep ca-key.pem away from runners)\n\
         host: {} (ca.pem, cert.pem, key.pem: the `ca`, `cert` and `key` of a \
         `jianmu://` entry in [execution.docker] hosts)\n\
         runner: {} (for `jianmu serve --listen ADDR --tls-dir`; its certificate names {})",
        made.ca.display(),
        made.host.display(),
        made.runner.display(),
        names.join(", ")
    ))
}
