//! The policy entries that match a call by its arguments (core's `CALL_RULES`): a
//! `bash` command's prefix or a regular expression over it, and a glob over the paths
//! a writing tool writes. They are a convenience for asking about honest calls, not a
//! boundary: a command can spell `git push` in ways no prefix sees (`eval`, a script
//! file), so deny `bash` itself where a command must never run.

use globset::{Glob, GlobMatcher};
use jianmu_tool_core::{Policy, ToolSpec};
use regex::Regex;
use serde_json::Value;

/// Why a policy entry cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("policy entry `{entry}`: {why}")]
pub struct BadRule {
    /// The entry.
    pub entry: String,
    /// What is wrong with it.
    pub why: String,
}

/// One compiled entry of [`jianmu_tool_core::CALL_RULES`].
#[derive(Debug, Clone)]
enum Matcher {
    /// The words a simple command starts with.
    Prefix(Vec<String>),
    Regex(Regex),
    Path(GlobMatcher),
    /// An entry that did not compile: it matches every call it could apply to, so a
    /// bad deny or ask entry closes rather than opens ([`CallRules::check`] refuses it
    /// before a runtime starts).
    Broken {
        path: bool,
    },
}

#[derive(Debug, Clone)]
struct Rule {
    entry: String,
    matcher: Matcher,
}

/// The call rules of one policy, compiled.
#[derive(Debug, Clone, Default)]
pub(crate) struct CallRules {
    deny: Vec<Rule>,
    ask: Vec<Rule>,
    allow: Vec<Rule>,
}

/// What a call offers the rules: its command text and the paths it writes.
pub(crate) struct Subject {
    command: Option<String>,
    paths: Vec<String>,
}

impl Subject {
    /// What `args` of the tool `spec` offer: a command for a tool that runs programs
    /// (`command`, `cmd` or `input`), paths for a tool that writes files.
    pub(crate) fn of(spec: &ToolSpec, args: &Value) -> Self {
        let tagged = |tag: &str| spec.effect_tags.iter().any(|t| t == tag);
        // Every key a tool may run is read, joined by newlines: which one the tool
        // picks (the first non-blank) is its own affair, and a decoy in another key
        // must not hide it.
        let command = if tagged("process:exec") {
            let parts: Vec<&str> = ["command", "cmd", "input"]
                .iter()
                .filter_map(|key| args.get(key).and_then(Value::as_str))
                .filter(|text| !text.trim().is_empty())
                .collect();
            (!parts.is_empty()).then(|| parts.join("\n"))
        } else {
            None
        };
        let paths = if tagged("filesystem:write") {
            written_paths(args)
        } else {
            Vec::new()
        };
        Self { command, paths }
    }

    /// What to show a person about the call.
    pub(crate) fn summary(&self, args: &Value) -> String {
        if let Some(command) = &self.command {
            return command.clone();
        }
        if !self.paths.is_empty() {
            return format!("writes {}", self.paths.join(", "));
        }
        args.to_string()
    }
}

/// The paths a writing tool's arguments name: `path`, `paths`, and the files of an
/// `apply_patch` patch.
fn written_paths(args: &Value) -> Vec<String> {
    let mut paths = Vec::new();
    if let Some(path) = args.get("path").and_then(Value::as_str) {
        paths.push(path.to_owned());
    }
    if let Some(list) = args.get("paths").and_then(Value::as_array) {
        paths.extend(list.iter().filter_map(Value::as_str).map(str::to_owned));
    }
    if let Some(patch) = args.get("patch").and_then(Value::as_str) {
        for line in patch.lines().map(str::trim) {
            let named = [
                "*** Add File:",
                "*** Update File:",
                "*** Delete File:",
                "*** Move to:",
            ]
            .iter()
            .find_map(|head| line.strip_prefix(head));
            if let Some(path) = named {
                paths.push(path.trim().to_owned());
            }
        }
    }
    paths
}

impl CallRules {
    /// `policy`'s call rules; an entry that does not compile matches every call it
    /// could apply to.
    pub(crate) fn new(policy: &Policy) -> Self {
        let compile = |entries: &[String]| -> Vec<Rule> {
            entries
                .iter()
                .filter(|e| jianmu_tool_core::is_call_rule(e))
                .map(|entry| Rule {
                    entry: entry.clone(),
                    matcher: compile(entry).unwrap_or_else(|_| Matcher::Broken {
                        path: entry.starts_with("path:"),
                    }),
                })
                .collect()
        };
        Self {
            deny: compile(&policy.deny),
            ask: compile(&policy.ask),
            allow: compile(&policy.allow),
        }
    }

    /// Whether every call rule of `policy` compiles.
    ///
    /// # Errors
    /// The first entry that does not, and why.
    pub(crate) fn check(policy: &Policy) -> Result<(), BadRule> {
        for entry in policy.deny.iter().chain(&policy.ask).chain(&policy.allow) {
            if jianmu_tool_core::is_call_rule(entry) {
                compile(entry)?;
            }
        }
        Ok(())
    }

    /// Whether the policy has call rules that could refuse or ask.
    pub(crate) fn is_empty(&self) -> bool {
        self.deny.is_empty() && self.ask.is_empty()
    }

    /// The first deny entry matching `subject`, with what it matched.
    pub(crate) fn denied(&self, subject: &Subject) -> Option<(&str, String)> {
        self.deny.iter().find_map(|rule| {
            rule.matched(subject)
                .map(|what| (rule.entry.as_str(), what))
        })
    }

    /// The first ask entry matching `subject`.
    #[cfg(test)]
    pub(crate) fn asked<'s>(&'s self, subject: &'s Subject) -> Option<&'s str> {
        self.asked_all(subject).next()
    }

    /// Every ask entry matching `subject`.
    pub(crate) fn asked_all<'s>(&'s self, subject: &'s Subject) -> impl Iterator<Item = &'s str> {
        self.ask
            .iter()
            .filter(|rule| rule.matched(subject).is_some())
            .map(|rule| rule.entry.as_str())
    }

    /// Whether the allow entries answer an ask for `subject`: every simple command of
    /// its command starts with an allowed prefix (or an allowed expression matches it),
    /// or every path it writes matches an allowed glob.
    pub(crate) fn approved(&self, subject: &Subject) -> bool {
        if self.allow.is_empty() {
            return false;
        }
        if let Some(command) = subject.command.as_deref() {
            let whole = self.allow.iter().any(|rule| match &rule.matcher {
                Matcher::Regex(re) => re.is_match(command),
                _ => false,
            });
            let parts = simple_commands(command);
            let each = !parts.is_empty()
                && parts.iter().all(|part| {
                    part.plain
                        && self.allow.iter().any(|rule| match &rule.matcher {
                            Matcher::Prefix(words) if part.folder => {
                                starts_with_words(&part.written, words)
                            }
                            Matcher::Prefix(words) => starts_with_words(&part.words, words),
                            _ => false,
                        })
                });
            return whole || each;
        }
        !subject.paths.is_empty()
            && subject.paths.iter().all(|path| {
                self.allow.iter().any(|rule| match &rule.matcher {
                    Matcher::Path(glob) => path_matches(glob, path),
                    _ => false,
                })
            })
    }
}

impl Rule {
    /// What of `subject` the rule matches (the simple command or the path), if any.
    fn matched(&self, subject: &Subject) -> Option<String> {
        match &self.matcher {
            Matcher::Prefix(words) => simple_commands(subject.command.as_deref()?)
                .into_iter()
                .find(|part| starts_with_words(&part.words, words))
                .map(|part| format!("command `{}`", part.words.join(" "))),
            Matcher::Regex(re) => {
                let command = subject.command.as_deref()?;
                re.is_match(command)
                    .then(|| format!("command `{}`", jianmu_tool_core::shorten(command, 80)))
            }
            Matcher::Path(glob) => subject
                .paths
                .iter()
                .find(|path| path_matches(glob, path))
                .map(|path| format!("path `{path}`")),
            Matcher::Broken { path: false } => {
                subject.command.as_ref().map(|_| "the command".to_owned())
            }
            Matcher::Broken { path: true } => subject.paths.first().map(|p| format!("path `{p}`")),
        }
    }
}

fn compile(entry: &str) -> Result<Matcher, BadRule> {
    let bad = |why: String| BadRule {
        entry: entry.to_owned(),
        why,
    };
    if let Some(re) = entry.strip_prefix("command-re:") {
        return regex::RegexBuilder::new(re)
            .size_limit(1 << 20)
            .build()
            .map(Matcher::Regex)
            .map_err(|e| bad(format!("not a regular expression: {e}")));
    }
    if let Some(prefix) = entry.strip_prefix("command:") {
        let words = words(prefix);
        if words.is_empty() {
            return Err(bad("a command prefix needs at least one word".into()));
        }
        return Ok(Matcher::Prefix(words));
    }
    if let Some(glob) = entry.strip_prefix("path:") {
        let glob = glob.trim_start_matches("./");
        if glob.is_empty() {
            return Err(bad("a path glob cannot be empty".into()));
        }
        return globset::GlobBuilder::new(glob)
            .literal_separator(true)
            .build()
            .map(|g: Glob| Matcher::Path(g.compile_matcher()))
            .map_err(|e| bad(format!("not a glob: {e}")));
    }
    Err(bad("not a call rule".into()))
}

/// A command's words as a shell reads them, near enough for prefixes: split on
/// blanks, quotes and backslashes dropped.
fn words(text: &str) -> Vec<String> {
    text.split_ascii_whitespace()
        .map(|w| {
            w.chars()
                .filter(|c| !matches!(c, '\'' | '"' | '\\'))
                .collect()
        })
        .filter(|w: &String| !w.is_empty())
        .collect()
}

/// One simple command of a command line, as the rules read it.
struct Part {
    /// Its words from the program on (see [`simple_commands`]), the program without
    /// its folder.
    words: Vec<String>,
    /// The same with the program as written (`./gradlew`).
    written: Vec<String>,
    /// Run as written: through no assignment or wrapper, with no global option of
    /// git's and no output redirected (but to `/dev/null`). Only such commands are
    /// pre-approved by an `allow` prefix.
    plain: bool,
    /// The program was named with a folder: only an `allow` prefix that names it the
    /// same way pre-approves it.
    folder: bool,
}

/// Words before the program that start a compound command or negate it.
const KEYWORDS: [&str; 8] = ["if", "then", "elif", "else", "do", "while", "until", "!"];

/// The simple commands of a command line: lines joined at a backslash before a
/// newline, then split at `;`, `&`, `|`, newlines, parentheses, braces and backquotes
/// (so `$(...)` too). Each is read from its program on, past variable assignments,
/// shell keywords (`if`, `do`, `!`, ...), wrappers that run the next word with their
/// options (`env`, `sudo`, `command`, `exec`, `time`, `nohup`, `nice`, `timeout DURATION`,
/// `xargs`, `eval`, ...), and a shell's `-c` (`bash -c 'git push'` reads `git push`;
/// quotes are dropped). The program is named without its folder, and `git`'s global
/// options (`-C DIR`, `-c KEY=VALUE`, `--git-dir=...`, `--no-pager`) are dropped, so
/// `git -C repo push` is `git push`.
fn simple_commands(command: &str) -> Vec<Part> {
    let mut joined = command.replace("\\\n", " ");
    // Harmless redirections: output thrown away, one descriptor copied to another
    // (`2>&1` would otherwise split at its `&`).
    for harmless in ["&>/dev/null", "2>/dev/null", "1>/dev/null", ">/dev/null"] {
        joined = joined.replace(harmless, " ");
    }
    for fd in ['0', '1', '2'] {
        for to in ['0', '1', '2'] {
            joined = joined.replace(&format!("{fd}>&{to}"), " ");
        }
    }
    joined
        .split(['\n', ';', '&', '|', '(', ')', '{', '}', '`'])
        .filter_map(|text| {
            let words = words(text);
            let redirected = words.iter().any(|w| w.contains('>'));
            let (mut words, wrapped) = from_program(words);
            let written = words.clone();
            let first = words.first_mut()?;
            let mut plain = !redirected && !wrapped;
            let mut folder = false;
            if let Some((_, name)) = first.rsplit_once('/') {
                *first = name.to_owned();
                folder = true;
            }
            // A global option can make git run a program of the caller's choosing
            // (`-c core.fsmonitor=./x`, `-C` into another repository's config).
            if words[0] == "git" && git_globals(&mut words) {
                plain = false;
            }
            Some(Part {
                words,
                written,
                plain,
                folder,
            })
        })
        .collect()
}

/// `words` from the program on (see [`simple_commands`]), and whether anything was
/// passed on the way but shell keywords: an assignment (`GIT_DIR=...`), a wrapper
/// (`env -S`, `sudo`, `xargs`, `eval`, a shell's `-c`), any of which can change what
/// runs, so such a command is never pre-approved.
fn from_program(mut words: Vec<String>) -> (Vec<String>, bool) {
    let mut wrapped = false;
    // Each round drops one wrapper and its options; a line holds few words.
    for _ in 0..words.len() {
        let Some(first) = words.first() else {
            break;
        };
        if KEYWORDS.contains(&first.as_str()) {
            words.remove(0);
            continue;
        }
        if first.contains('=') && !first.starts_with('-') {
            words.remove(0);
            wrapped = true;
            continue;
        }
        let name = first.rsplit('/').next().unwrap_or(first).to_owned();
        // Options of the wrapper that take the next word as their value.
        let valued: &[&str] = match name.as_str() {
            "sudo" | "doas" => &["-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U"],
            "env" => &["-u", "-C", "-S"],
            "nice" => &["-n"],
            "ionice" => &["-c", "-n", "-p"],
            "stdbuf" => &["-i", "-o", "-e"],
            "timeout" => &["-s", "-k", "--signal", "--kill-after"],
            "exec" => &["-a", "-ca", "-la", "-cla", "-lca"],
            "xargs" => &["-n", "-P", "-I", "-L", "-d", "-E", "-s", "-a"],
            "command" | "time" | "nohup" | "builtin" | "eval" | "chronic" => &[],
            "bash" | "sh" | "zsh" | "dash" | "ksh" | "ash" | "busybox" => {
                // A shell runs a command of its own only with `-c` (or `-lc`, ...).
                let Some(at) = words
                    .iter()
                    .position(|w| w.starts_with('-') && !w.starts_with("--") && w.contains('c'))
                else {
                    break;
                };
                words.drain(..=at);
                wrapped = true;
                continue;
            }
            _ => break,
        };
        wrapped = true;
        words.remove(0);
        while let Some(word) = words.first() {
            if !word.starts_with('-') {
                break;
            }
            let takes_value = valued.contains(&word.as_str());
            words.remove(0);
            if takes_value && !words.is_empty() {
                words.remove(0);
            }
        }
        if name == "timeout" && !words.is_empty() {
            words.remove(0); // the duration, whatever it reads as (`30`, `1e3`, `inf`)
        }
    }
    (words, wrapped)
}

/// Drops `git`'s global options, those before its subcommand; whether there were any.
fn git_globals(words: &mut Vec<String>) -> bool {
    let at = 1;
    let before = words.len();
    while let Some(word) = words.get(at) {
        if !word.starts_with('-') {
            break;
        }
        let takes_value = matches!(
            word.as_str(),
            "-C" | "-c" | "--git-dir" | "--work-tree" | "--namespace" | "--config-env"
        );
        words.remove(at);
        if takes_value && at < words.len() {
            words.remove(at);
        }
    }
    words.len() != before
}

fn starts_with_words(part: &[String], prefix: &[String]) -> bool {
    part.len() >= prefix.len() && part.iter().zip(prefix).all(|(a, b)| a == b)
}

/// Whether `glob` matches `path`, read lexically (`./` and `..` resolved); an
/// absolute path also matches when any of its tails does (the workspace's own prefix
/// is not known here, so a tail may stand for it).
fn path_matches(glob: &GlobMatcher, path: &str) -> bool {
    let mut parts: Vec<&str> = Vec::new();
    for part in path.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                if parts.pop().is_none() {
                    parts.push("..");
                }
            }
            part => parts.push(part),
        }
    }
    if path.starts_with('/') {
        (0..parts.len()).any(|i| glob.is_match(parts[i..].join("/")))
    } else {
        glob.is_match(parts.join("/"))
    }
}

#[cfg(test)]
mod tests {
    use jianmu_tool_core::{Policy, ToolSpec};
    use serde_json::{Value, json};

    use super::{CallRules, Subject};

    fn bash() -> ToolSpec {
        ToolSpec::new("bash", "Runs.").with_effect_tags(["process:exec"])
    }

    fn write() -> ToolSpec {
        ToolSpec::new("write_file", "Writes.").with_effect_tags(["filesystem:write"])
    }

    #[track_caller]
    fn check(ask: &[&str], allow: &[&str], spec: &ToolSpec, args: Value, expect: Option<&str>) {
        let policy = Policy {
            ask: ask.iter().map(|s| (*s).to_owned()).collect(),
            allow: allow.iter().map(|s| (*s).to_owned()).collect(),
            ..Policy::default()
        };
        CallRules::check(&policy).unwrap();
        let rules = CallRules::new(&policy);
        let subject = Subject::of(spec, &args);
        let asked = rules.asked(&subject).filter(|_| !rules.approved(&subject));
        assert_eq!(asked, expect, "{args}");
    }

    #[test]
    fn command_prefixes_match_each_simple_command() {
        let ask = ["command:git push"];
        for command in [
            "git push",
            "git push origin main",
            "cd repo && git push",
            "make; git  push -f",
            "FOO=1 git push",
            "sudo -E git push",
            "/usr/bin/git push",
            "echo $(git push)",
            "git 'push'",
            "true\ngit push",
            "git -C repo push",
            "git -c user.name=x --no-pager push",
            "git --git-dir=.git push",
            "bash -c 'git push'",
            "sh -ec \"cd x; git push\"",
            "busybox sh -c 'git push'",
            "eval git push",
            "echo . | xargs -n 1 git push",
            "timeout 30 git push",
            "timeout -k 5 2.5s git push",
            "timeout inf git push",
            "timeout --kill-after 5 1e3 git push",
            "exec -a name git push",
            "exec -la name git push",
            "exec git push",
            "nice -n 5 git push",
            "if true; then git push; fi",
            "for r in a b; do git push; done",
            "! git push",
            "git \\\npush",
        ] {
            check(
                &ask,
                &[],
                &bash(),
                json!({"command": command}),
                Some("command:git push"),
            );
        }
        for command in [
            "git pushx",
            "git status",
            "echo git push",
            "gitpush",
            "git",
            "bash push.sh",
            "git -C push status",
        ] {
            check(&ask, &[], &bash(), json!({"command": command}), None);
        }
        // `cmd` and a shell session's `input` are commands too.
        check(
            &ask,
            &[],
            &bash(),
            json!({"cmd": "git push"}),
            Some("command:git push"),
        );
        // A tool that runs nothing has no command.
        check(&ask, &[], &write(), json!({"command": "git push"}), None);
    }

    #[test]
    fn regexes_search_the_whole_command() {
        let ask = ["command-re:rm\\s+-rf?\\s"];
        check(
            &ask,
            &[],
            &bash(),
            json!({"command": "x; rm -rf /"}),
            Some(ask[0]),
        );
        check(&ask, &[], &bash(), json!({"command": "rm x"}), None);
    }

    #[test]
    fn path_globs_match_written_paths_read_lexically() {
        let ask = ["path:deploy/**"];
        for path in [
            "deploy/a.yml",
            "./deploy/x/y",
            "src/../deploy/k",
            "/ws/deploy/a",
        ] {
            check(
                &ask,
                &[],
                &write(),
                json!({"path": path}),
                Some("path:deploy/**"),
            );
        }
        for path in ["deployer/a", "src/deploy.rs", "deploy"] {
            check(&ask, &[], &write(), json!({"path": path}), None);
        }
        let patch = "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n+b\n*** Add File: deploy/n\n+x\n*** End Patch";
        check(
            &ask,
            &[],
            &write(),
            json!({"patch": patch}),
            Some("path:deploy/**"),
        );
        check(
            &ask,
            &[],
            &write(),
            json!({"paths": ["a", "deploy/b"]}),
            Some("path:deploy/**"),
        );
        // Reading tools are never asked by a path rule.
        let read = ToolSpec::new("read_file", "Reads.").with_effect_tags(["filesystem:read"]);
        check(&ask, &[], &read, json!({"path": "deploy/a"}), None);
    }

    #[test]
    fn allow_entries_answer_asks_only_when_they_cover_the_whole_call() {
        let ask = ["bash"];
        // `bash` as a tool entry is asked by the core policy; here only call rules.
        let ask_calls = ["command:git"];
        let allow = ["command:git status", "command:git diff"];
        check(
            &ask_calls,
            &allow,
            &bash(),
            json!({"command": "git status"}),
            None,
        );
        check(
            &ask_calls,
            &allow,
            &bash(),
            json!({"command": "git status && git diff"}),
            None,
        );
        check(
            &ask_calls,
            &allow,
            &bash(),
            json!({"command": "git status; git push"}),
            Some("command:git"),
        );
        // Output thrown away or descriptors copied are still the command as written,
        // and a program named with its folder is pre-approved by an entry naming it so.
        for command in [
            "git status 2>/dev/null",
            "git diff 2>&1",
            "git status >/dev/null && git diff",
        ] {
            check(
                &ask_calls,
                &allow,
                &bash(),
                json!({"command": command}),
                None,
            );
        }
        check(
            &["command:gradlew"],
            &["command:./gradlew build"],
            &bash(),
            json!({"command": "./gradlew build"}),
            None,
        );
        // Only a command run as written is pre-approved: not one whose output goes to
        // a file, nor a program from a folder, nor one a wrapper runs from a string.
        for command in [
            "git status > ~/.bashrc",
            "./git status",
            "bash -c 'git status'",
            "echo x | xargs git status",
            "git -c core.fsmonitor=./x.sh status",
            "git -C sub status",
            "GIT_DIR=evil/.git git status",
            "env -Stouch git status",
        ] {
            check(
                &ask_calls,
                &allow,
                &bash(),
                json!({"command": command}),
                Some("command:git"),
            );
        }
        let _ = ask;
        let allow = ["path:docs/**"];
        check(
            &["path:**"],
            &allow,
            &write(),
            json!({"path": "docs/a.md"}),
            None,
        );
        check(
            &["path:**"],
            &allow,
            &write(),
            json!({"paths": ["docs/a", "x"]}),
            Some("path:**"),
        );
    }

    #[test]
    fn bad_entries_are_refused_and_close_when_used_anyway() {
        for entry in ["command-re:(", "command:", "path:a[", "path:"] {
            let policy = Policy {
                ask: vec![entry.into()],
                ..Policy::default()
            };
            let err = CallRules::check(&policy).unwrap_err();
            assert!(
                err.to_string()
                    .starts_with(&format!("policy entry `{entry}`")),
                "{err}"
            );
            let rules = CallRules::new(&policy);
            let args = json!({"command": "ls", "path": "x"});
            let spec = if entry.starts_with("path") {
                write()
            } else {
                bash()
            };
            assert_eq!(rules.asked(&Subject::of(&spec, &args)), Some(entry));
        }
    }
}
