//! `jianmu sandbox status`: the isolation local commands get on this machine, what the
//! kernel offers, and whether the Docker sandbox is ready. One line each.

use jianmu_process::{Isolation, IsolationSettings, Jail};
use serde_json::{Value, json};

use crate::settings::Settings;

/// The report, as text or JSON.
pub(crate) fn run(settings: &Settings, as_json: bool) -> anyhow::Result<String> {
    let workspace = settings.tools.workspace();
    let tools = jianmu_runtime::with_hidden_paths(settings.tools.clone(), &settings.hidden_paths());
    let mut local = serde_json::Map::new();
    let mut views = serde_json::Map::new();
    // The git tools share `[tools.git]`, the language servers `[tools.lsp]`.
    for &tool in jianmu_runtime::ISOLATED_TOOLS {
        let isolation: IsolationSettings =
            match tools.raw_settings(tool).and_then(|s| s.get("isolation")) {
                Some(v) => serde_json::from_value(v.clone())
                    .map_err(|e| anyhow::anyhow!("[tools.{tool}.isolation]: {e}"))?,
                None => IsolationSettings::default(),
            };
        let line = match Jail::new(&isolation, workspace) {
            Ok(jail) => {
                // Made now, so that a view this machine refuses is reported.
                let made = jail.make_view();
                if let Some(lines) = jail.view_lines() {
                    let mut view: serde_json::Map<String, Value> = lines
                        .into_iter()
                        .map(|(kind, paths)| {
                            let paths: Vec<String> =
                                paths.iter().map(|p| p.display().to_string()).collect();
                            (kind.replace([' ', '-'], "_"), json!(paths))
                        })
                        .collect();
                    view.insert(
                        "error".into(),
                        made.as_ref().err().map(ToString::to_string).into(),
                    );
                    views.insert(tool.to_owned(), Value::Object(view));
                }
                match made {
                    Ok(()) => jail.describe().to_owned(),
                    Err(e) => format!("{} (but {e}: reads are not narrowed)", jail.describe()),
                }
            }
            Err(e) => format!("cannot run: {}", jianmu_tool_core::error_chain(&e)),
        };
        local.insert(tool.to_owned(), Value::String(line));
    }
    let kernel = Isolation::probe();
    let docker = docker(settings);
    if as_json {
        let report = json!({
            "local": local,
            "view": views,
            "kernel": {
                "user_namespaces": kernel.namespaces,
                "landlock_abi": kernel.landlock_abi,
                "seccomp": kernel.seccomp,
                "private_networks": kernel.private_network,
            },
            "docker": docker,
        });
        return Ok(format!("{}\n", serde_json::to_string_pretty(&report)?));
    }
    let mut text = String::new();
    for (tool, line) in &local {
        text.push_str(&format!("{tool}: {}\n", line.as_str().unwrap_or_default()));
    }
    let yes = |b: bool| if b { "yes" } else { "no" };
    text.push_str(&format!(
        "kernel: user namespaces {}, Landlock {}, seccomp {}, private networks {}\n",
        yes(kernel.namespaces),
        match kernel.landlock_abi {
            0 => "no".to_owned(),
            abi => format!("ABI {abi}"),
        },
        yes(kernel.seccomp),
        yes(kernel.private_network)
    ));
    text.push_str(&format!(
        "docker: {}\n",
        docker["summary"].as_str().unwrap_or_default()
    ));
    // The view, once per distinct one (the tools' differ only by their settings and
    // private temporary directories).
    let mut shown: Vec<String> = Vec::new();
    for (tool, view) in &views {
        let key = serde_json::to_string(&json!([
            view["read_only"],
            view["hidden"],
            view["sockets_let_in"]
        ]))?;
        if shown.contains(&key) {
            continue;
        }
        shown.push(key);
        text.push_str(&format!("view of {tool}'s commands:\n"));
        for (kind, label) in [
            ("read_only", "read-only"),
            ("writable", "writable"),
            ("hidden", "hidden"),
            ("sockets_let_in", "sockets let in"),
        ] {
            let paths: Vec<&str> = view[kind]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .collect();
            if !paths.is_empty() {
                text.push_str(&format!("  {label}: {}\n", paths.join(", ")));
            }
        }
    }
    Ok(text)
}

#[cfg(feature = "docker")]
fn docker(settings: &Settings) -> Value {
    use jianmu_runtime::docker::image;
    let tag = settings.docker.image.clone();
    let engines = settings.docker.engines();
    let checked = crate::runtime().map(|rt| {
        rt.block_on(async {
            // With several engines, the first that is not ready is reported.
            for (host, tls) in &engines {
                let docker = match image::connect_with(host.as_deref(), tls.as_ref()).await {
                    Ok(d) => d,
                    Err(e) => return (false, false, format!("no engine answers ({e})")),
                };
                if docker.inspect_image(&tag).await.is_err() {
                    return (
                        true,
                        false,
                        format!(
                            "the engine answers, but image {tag} is missing: run `jianmu sandbox build-image`"
                        ),
                    );
                }
            }
            let summary = match engines.len() {
                1 => format!("ready (image {tag})"),
                n => format!("ready on {n} engines (image {tag})"),
            };
            (true, true, summary)
        })
    });
    match checked {
        Ok((engine, image, summary)) => {
            json!({"engine": engine, "image": image, "summary": summary})
        }
        Err(e) => json!({"engine": false, "image": false, "summary": e.to_string()}),
    }
}

#[cfg(not(feature = "docker"))]
fn docker(_: &Settings) -> Value {
    json!({"engine": false, "image": false, "summary": "not compiled in (the `docker` feature)"})
}
