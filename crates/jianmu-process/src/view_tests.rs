//! Unit tests of the view's layout: what is shown, rebuilt, masked and left out.

use std::path::{Path, PathBuf};

use super::*;

fn config(dir: &Path) -> ViewConfig {
    ViewConfig {
        readable: vec![dir.join("sys")],
        homes: vec![dir.join("home")],
        writable: vec![dir.join("home/ws")],
        hidden: vec![dir.join("sys/secret")],
        sockets: Vec::new(),
        protected: Vec::new(),
        secret_homes: vec![dir.join("home")],
    }
}

#[test]
fn a_home_with_a_secret_is_rebuilt_without_it() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    for p in [
        "sys/bin",
        "sys/secret",
        "home/ws",
        "home/.ssh",
        "home/.cargo/registry",
    ] {
        std::fs::create_dir_all(d.join(p)).unwrap();
    }
    std::fs::write(d.join("home/.netrc"), "x").unwrap();
    std::fs::write(d.join("home/.bash_history"), "x").unwrap();
    std::fs::write(d.join("home/.cargo/credentials.toml"), "x").unwrap();
    std::fs::write(d.join("home/notes"), "x").unwrap();
    std::os::unix::fs::symlink("notes", d.join("home/link")).unwrap();
    let steps = config(&d).layout();
    let binds: Vec<&PathBuf> = steps
        .iter()
        .filter_map(|s| match s {
            Step::Bind { target, .. } => Some(target),
            _ => None,
        })
        .collect();
    let shown = |p: &str| binds.contains(&&d.join(p));
    assert!(shown("sys/bin") && shown("home/notes") && shown("home/ws"));
    assert!(shown("home/.cargo/registry"));
    for hidden in [
        "sys/secret",
        "home/.ssh",
        "home/.netrc",
        "home/.bash_history",
        "home/.cargo/credentials.toml",
    ] {
        assert!(
            !binds.iter().any(|b| b.starts_with(d.join(hidden))),
            "{hidden} shown: {steps:#?}"
        );
    }
    assert!(steps.contains(&Step::Link(d.join("home/link"), "notes".into())));
    // The workspace is writable, the rest read-only.
    assert!(steps.contains(&Step::Bind {
        source: d.join("home/ws"),
        target: d.join("home/ws"),
        writable: true
    }));
    // The read rules for Landlock show the same.
    let rules = read_rules(&steps);
    assert!(rules.contains(&(d.join("home/notes"), true)));
    assert!(rules.contains(&(d.join("home"), false)));
    assert!(
        !rules
            .iter()
            .any(|(p, _)| p.starts_with(d.join("home/.ssh")))
    );
}

#[test]
fn a_secret_inside_the_workspace_is_masked_and_the_workspace_stays_whole() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(d.join("ws/keys")).unwrap();
    std::fs::write(d.join("ws/token"), "x").unwrap();
    let config = ViewConfig {
        writable: vec![d.join("ws")],
        hidden: vec![d.join("ws/keys"), d.join("ws/token")],
        ..ViewConfig::default()
    };
    let steps = config.layout();
    assert!(
        steps.contains(&Step::MaskDir(d.join("ws/keys"))),
        "{steps:#?}"
    );
    assert!(steps.contains(&Step::MaskFile(d.join("ws/token"))));
}

#[test]
fn a_principal_sees_its_folder_and_not_the_others() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(d.join("home/principals/alice")).unwrap();
    std::fs::create_dir_all(d.join("home/principals/bob")).unwrap();
    let config = ViewConfig {
        homes: vec![d.join("home")],
        secret_homes: vec![d.join("home")],
        writable: vec![d.join("home/principals/alice")],
        hidden: vec![d.join("home/principals")],
        ..ViewConfig::default()
    };
    let steps = config.layout();
    assert!(
        steps.contains(&Step::Dir(d.join("home/principals"))),
        "{steps:#?}"
    );
    assert!(!steps.iter().any(|s| matches!(s, Step::Bind { target, .. } | Step::Dir(target) if target.starts_with(d.join("home/principals/bob")))));
}

#[test]
fn toolchains_are_their_prefix() {
    assert_eq!(
        toolchain_root(Path::new("/home/u/.cargo/bin")),
        Some(PathBuf::from("/home/u/.cargo"))
    );
    assert_eq!(
        toolchain_root(Path::new("/work/target/venv/bin")),
        Some(PathBuf::from("/work/target/venv"))
    );
    // Too wide to show for one program.
    assert_eq!(
        toolchain_root(Path::new("/usr/bin")),
        Some(PathBuf::from("/usr/bin"))
    );
    assert_eq!(toolchain_root(Path::new("/bin")), None);
    assert_eq!(
        toolchain_root(Path::new("/opt/bin")),
        Some(PathBuf::from("/opt/bin"))
    );
}

/// A hidden home entry that is a link is hidden with what it leads to, and a program
/// in `~/bin` does not make the whole home a toolchain.
#[test]
fn a_linked_secret_is_hidden_with_its_target() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    std::fs::create_dir_all(d.join("home/dotfiles/ssh")).unwrap();
    std::fs::write(d.join("home/dotfiles/ssh/id_ed25519"), "x").unwrap();
    std::fs::write(d.join("home/dotfiles/vimrc"), "x").unwrap();
    std::os::unix::fs::symlink("dotfiles/ssh", d.join("home/.ssh")).unwrap();
    let config = ViewConfig {
        homes: vec![d.join("home")],
        secret_homes: vec![d.join("home")],
        ..ViewConfig::default()
    };
    let steps = config.layout();
    let shown = |p: &Path| {
        steps
            .iter()
            .any(|s| matches!(s, Step::Bind { target, .. } if p.starts_with(target)))
    };
    assert!(shown(&d.join("home/dotfiles/vimrc")), "{steps:#?}");
    assert!(
        !shown(&d.join("home/dotfiles/ssh/id_ed25519")),
        "{steps:#?}"
    );
    let mut strict = ViewConfig {
        secret_homes: vec![d.join("home")],
        ..ViewConfig::default()
    };
    std::fs::create_dir_all(d.join("home/bin")).unwrap();
    std::fs::write(d.join("home/bin/tool"), "x").unwrap();
    strict.show_program(d.join("home/bin/tool").as_os_str());
    assert!(strict.readable.is_empty(), "{:?}", strict.readable);
}

/// `read_also` shows what it names, read-only, but never `/`, a top-level folder,
/// the host's sockets, or anything inside what is hidden (a home's keys, `read_deny`).
#[test]
fn read_also_shows_its_paths_but_never_what_is_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().canonicalize().unwrap();
    let skill = d.join("skills/demo");
    let denied = d.join("denied");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::create_dir_all(denied.join("inner")).unwrap();
    let home_key = std::env::var_os("HOME")
        .map(PathBuf::from)
        .map(|h| h.join(".ssh/id_ed25519"));
    let mut asked = vec![
        PathBuf::from("/"),
        PathBuf::from("/usr"),
        PathBuf::from("/run/user"),
        denied.join("inner"),
        skill.clone(),
    ];
    asked.extend(home_key.clone());
    let settings = crate::IsolationSettings {
        read_also: asked,
        read_deny: vec![denied.clone()],
        ..crate::IsolationSettings::default()
    };
    let workspace = d.join("ws");
    std::fs::create_dir_all(&workspace).unwrap();
    let config = ViewConfig::new(&settings, &workspace, None).unwrap();
    let plain = ViewConfig::new(&crate::IsolationSettings::default(), &workspace, None).unwrap();
    let added: Vec<&PathBuf> = config
        .readable
        .iter()
        .filter(|p| !plain.readable.contains(p))
        .collect();
    assert_eq!(added, [&skill], "{added:?}");
}
