//! Tidy checks over the source tree: conventions a compiler cannot enforce.

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("..")
}

fn files(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy();
        if path.is_dir() {
            if name != "target" && !name.starts_with('.') {
                files(&path, ext, out);
            }
        } else if name.ends_with(ext) {
            out.push(path);
        }
    }
}

fn rust_files() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for dir in ["crates", "xtask", "tests"] {
        files(&root().join(dir), ".rs", &mut out);
    }
    assert!(
        out.len() > 20,
        "the walk found too few files: {}",
        out.len()
    );
    out
}

fn rel(path: &Path) -> String {
    path.strip_prefix(root())
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

#[test]
fn every_source_file_says_what_it_is_for() {
    let missing: Vec<String> = rust_files()
        .into_iter()
        // trybuild inputs are deliberately broken programs, not modules.
        .filter(|p| !rel(p).contains("/tests/ui/"))
        .filter(|p| !std::fs::read_to_string(p).unwrap().starts_with("//!"))
        .map(|p| rel(&p))
        .collect();
    assert!(
        missing.is_empty(),
        "files without a leading `//!` line: {missing:?}"
    );
}

/// Spelt in two halves so this file does not match itself.
const SPAWN: &str = concat!("Command", "::new(");

#[test]
fn only_jianmu_process_spawns_processes() {
    // Build scripts run while building, never inside a call.
    let allowed = [
        "crates/jianmu-process/src/lib.rs",
        "xtask/",
        "crates/jianmu-cli/build.rs",
    ];
    let offenders: Vec<String> = rust_files()
        .into_iter()
        .filter(|p| !allowed.iter().any(|a| rel(p).starts_with(a)))
        .filter(|p| {
            let text = std::fs::read_to_string(p).unwrap();
            text.lines()
                .any(|l| l.contains(SPAWN) && !l.trim_start().starts_with("//"))
        })
        .map(|p| rel(&p))
        .collect();
    assert!(
        offenders.is_empty(),
        "spawn through jianmu_process: {offenders:?}"
    );
}

/// Spelt in two halves so this file does not match itself.
const UNSAFE: &str = concat!("allow(unsafe", "_code)");

#[test]
fn only_jianmu_process_has_unsafe_code() {
    let offenders: Vec<String> = rust_files()
        .into_iter()
        .filter(|p| !rel(p).starts_with("crates/jianmu-process/src/"))
        .filter(|p| std::fs::read_to_string(p).unwrap().contains(UNSAFE))
        .map(|p| rel(&p))
        .collect();
    assert!(
        offenders.is_empty(),
        "unsafe code outside jianmu-process: {offenders:?}"
    );
}

fn manifests() -> Vec<(String, String)> {
    let mut out = Vec::new();
    files(&root().join("crates"), "Cargo.toml", &mut out);
    out.push(root().join("xtask/Cargo.toml"));
    out.push(root().join("tests/Cargo.toml"));
    out.into_iter()
        .map(|p| (rel(&p), std::fs::read_to_string(&p).unwrap()))
        .collect()
}

#[test]
fn every_crate_uses_the_workspace_lints_and_its_folder_name() {
    for (path, text) in manifests() {
        assert!(
            text.contains("[lints]\nworkspace = true"),
            "{path} lacks [lints] workspace = true"
        );
        if let Some(folder) = path
            .strip_prefix("crates/")
            .and_then(|p| p.split('/').next())
        {
            assert!(
                text.contains(&format!("name = \"{folder}\"")),
                "{path}: package name must equal its folder"
            );
        }
    }
}

#[test]
fn tool_crates_never_depend_on_each_other() {
    for (path, text) in manifests() {
        let Some(krate) = path
            .strip_prefix("crates/jianmu-tool-")
            .and_then(|p| p.split('/').next())
        else {
            continue;
        };
        for line in text.lines() {
            let dep = line.split(['=', ' ', '.']).next().unwrap_or("");
            if let Some(other) = dep.strip_prefix("jianmu-tool-") {
                assert!(
                    ["core", "macros"].contains(&other) || other == krate,
                    "{path} depends on jianmu-tool-{other}: only the provider may link tool crates"
                );
            }
        }
    }
}

/// The `[dependencies]` table of a manifest (not dev- or build-dependencies).
fn normal_dependencies(manifest: &str) -> &str {
    manifest
        .split("\n[dependencies]")
        .nth(1)
        .map_or("", |rest| rest.split("\n[").next().unwrap_or(""))
}

#[test]
fn tool_and_support_crates_never_depend_on_the_runtime() {
    // Runners wrap tools, never the other way round: a tool that needs a process uses
    // jianmu-process, so jianmu-runtime stays free to use the provider.
    let mut checked = 0;
    for (path, text) in manifests() {
        let krate = path.split('/').nth(1).unwrap_or("");
        let leaf = krate.starts_with("jianmu-tool-")
            || [
                "jianmu-process",
                "jianmu-workspace",
                "jianmu-net",
                "jianmu-egress",
                // The sandboxes: given their tools, never linking the built-ins.
                "jianmu-sandbox",
            ]
            .contains(&krate);
        if !path.starts_with("crates/") || !leaf {
            continue;
        }
        checked += 1;
        assert!(
            !normal_dependencies(&text).contains("jianmu-runtime")
                && !normal_dependencies(&text).contains("jianmu-sandbox"),
            "{path} depends on jianmu-runtime or jianmu-sandbox: spawn through jianmu-process instead"
        );
        // Nor their tests and benches: a test-only edge upward would turn the crate
        // graph upside down (and could not be published).
        for upper in [
            "jianmu-runtime",
            "jianmu-provider",
            "jianmu-sandbox",
            "jianmu-cli",
        ] {
            assert!(
                !text.contains(&format!("\n{upper} ")) && !text.contains(&format!("\n{upper}.")),
                "{path} depends on {upper} (in some table): test it with what it depends on, or move the test up"
            );
        }
    }
    assert!(checked >= 10, "only {checked} manifests checked");
}

#[test]
fn provider_feature_table_lists_every_feature() {
    let manifest =
        std::fs::read_to_string(root().join("crates/jianmu-provider/Cargo.toml")).unwrap();
    let lib = std::fs::read_to_string(root().join("crates/jianmu-provider/src/lib.rs")).unwrap();
    let features = manifest.split("[features]").nth(1).unwrap();
    let features = features.split("\n[").next().unwrap();
    for line in features.lines() {
        let Some((name, _)) = line.split_once('=') else {
            continue;
        };
        let name = name.trim();
        if name == "default" {
            continue;
        }
        assert!(
            lib.contains(&format!("//! | `{name}` |")),
            "the feature table in jianmu-provider's lib.rs lacks `{name}`"
        );
        let cli = std::fs::read_to_string(root().join("crates/jianmu-cli/Cargo.toml")).unwrap();
        assert!(
            cli.contains(&format!("\n{name} = ")),
            "jianmu-cli lacks the `{name}` feature"
        );
        let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "README's feature table lacks `{name}`"
        );
    }
}

#[test]
fn readme_feature_table_lists_every_feature_of_the_command() {
    let manifest = std::fs::read_to_string(root().join("crates/jianmu-cli/Cargo.toml")).unwrap();
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let features = manifest.split("[features]").nth(1).unwrap();
    let features = features.split("\n[").next().unwrap();
    let names: Vec<&str> = features
        .lines()
        .filter_map(|l| l.split_once('=').map(|(name, _)| name.trim()))
        .filter(|name| *name != "default" && !name.starts_with('#'))
        .collect();
    assert!(
        names.contains(&"docker") && names.contains(&"mcp"),
        "{names:?}"
    );
    for name in names {
        assert!(
            readme.contains(&format!("| `{name}` |")),
            "README's feature table lacks the command's `{name}` feature"
        );
    }
}

#[test]
fn ci_runs_the_command_the_readme_documents() {
    let readme = std::fs::read_to_string(root().join("README.md")).unwrap();
    let ci = std::fs::read_to_string(root().join(".ci/run")).unwrap();
    assert!(readme.contains("cargo xtask test-all"));
    assert!(
        ci.lines()
            .any(|l| l.trim_start().starts_with("cargo xtask test-all"))
    );
}

#[test]
fn the_tests_helpers_are_never_a_normal_dependency() {
    for (path, text) in manifests() {
        assert!(
            !normal_dependencies(&text).contains("jianmu-test-support"),
            "{path}: jianmu-test-support is for [dev-dependencies] only"
        );
    }
}

/// The paths the file tools refuse to write are the ones a session's view keeps
/// read-only to commands: one list, kept twice (the crates do not depend on each other).
#[test]
fn protected_workspace_paths_agree() {
    let tools: Vec<&str> = jianmu_workspace::PROTECTED
        .iter()
        .map(|(p, _)| *p)
        .collect();
    assert_eq!(tools, jianmu_process::PROTECTED_IN_WORKSPACE);
}

/// The source files under `crates/*/src`.
fn library_files() -> Vec<PathBuf> {
    rust_files()
        .into_iter()
        .filter(|p| {
            let r = rel(p);
            r.starts_with("crates/") && r.contains("/src/")
        })
        .collect()
}

#[test]
fn every_unsafe_fn_says_why_it_is_unsafe() {
    let mut missing = Vec::new();
    for path in library_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            let code = line.trim_start();
            if code.starts_with("//") || !code.contains(concat!("unsafe", " fn ")) {
                continue;
            }
            let doc = lines[..i]
                .iter()
                .rev()
                .take_while(|l| {
                    let l = l.trim_start();
                    l.starts_with("///") || l.starts_with("#[")
                })
                .any(|l| l.contains("# Safety"));
            if !doc {
                missing.push(format!("{}:{}", rel(&path), i + 1));
            }
        }
    }
    assert!(
        missing.is_empty(),
        "unsafe fns without a `# Safety` section: {missing:?}"
    );
}

#[test]
fn no_public_function_fails_with_a_bare_string() {
    let pattern = concat!(", ", "String>");
    let mut found = Vec::new();
    for path in library_files() {
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            let code = line.trim_start();
            if code.starts_with("pub fn ") && code.contains("Result<") && code.contains(pattern) {
                found.push(format!("{}:{}", rel(&path), i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "public functions returning Result<_, String> (give them an error type): {found:?}"
    );
}

#[test]
fn the_commands_main_stays_a_dispatcher() {
    let main = std::fs::read_to_string(root().join("crates/jianmu-cli/src/main.rs")).unwrap();
    let lines = main.lines().count();
    assert!(
        lines <= 250,
        "crates/jianmu-cli/src/main.rs has {lines} lines; move work into its modules"
    );
}

/// `jianmu-process`'s modules, lowest first: each imports only from modules before it.
const PROCESS_LAYERS: &[&[&str]] = &[
    &["sys", "spec", "pty", "tree", "seccomp", "clone"],
    &["view", "landlock", "child", "userns"],
    &["plan", "netns", "mount"],
    &["isolate"],
    &["spawn"],
    &["supervisor"],
    &["jail"],
    &["lib", "tests", "view_tests"],
];

#[test]
fn jianmu_process_imports_in_one_direction() {
    let layer_of = |module: &str| PROCESS_LAYERS.iter().position(|l| l.contains(&module));
    let dir = root().join("crates/jianmu-process/src");
    let mut wrong = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let Some(module) = path.file_stem().map(|s| s.to_string_lossy().into_owned()) else {
            continue;
        };
        let Some(own) = layer_of(&module) else {
            wrong.push(format!(
                "{module}: not in PROCESS_LAYERS (tests/it/tidy.rs)"
            ));
            continue;
        };
        let text = std::fs::read_to_string(&path).unwrap();
        for used in text.split("crate::").skip(1) {
            let name: String = used
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            match layer_of(&name) {
                Some(layer) if layer < own || name == module => {}
                Some(_) => wrong.push(format!("{module} imports {name}")),
                None => {}
            }
        }
    }
    wrong.sort();
    wrong.dedup();
    assert!(
        wrong.is_empty(),
        "jianmu-process imports against its layers: {wrong:?}"
    );
}

/// A tool's output schema is derived from the type its calls return
/// (`Structured<T>`, `Json<T>`), so the schema and the values cannot drift apart: no
/// tool crate writes an output schema or sets an untyped structured output.
#[test]
fn tool_outputs_are_typed() {
    let written = [
        concat!("fn output", "_schema("),
        concat!(".with_", "structured("),
    ];
    let mut found = Vec::new();
    for path in library_files() {
        let r = rel(&path);
        if !r.starts_with("crates/jianmu-tool-")
            || r.starts_with("crates/jianmu-tool-core/")
            || r.starts_with("crates/jianmu-tool-macros/")
        {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        for (i, line) in text.lines().enumerate() {
            if written.iter().any(|w| line.contains(w)) {
                found.push(format!("{r}:{}", i + 1));
            }
        }
    }
    assert!(
        found.is_empty(),
        "tools that write their output schema or an untyped structured output \
         (return `Structured<T>` instead): {found:?}"
    );
}
