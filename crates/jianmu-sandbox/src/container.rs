//! One sandbox container's life outside the connection: the hardened create body,
//! the owner label, and the sweep that removes containers whose owner is gone.

use std::collections::HashMap;
use std::path::Path;

use bollard::Docker;
use bollard::models::{
    ContainerCreateBody, HostConfig, Mount, MountBindOptions, MountTmpfsOptions, MountType,
};
use bollard::query_parameters::{ListContainersOptionsBuilder, RemoveContainerOptionsBuilder};

use super::{DockerSettings, LABEL};

/// The body sandbox containers are created with: image, user, owner label, the
/// workspace mounted at its own path, a tmpfs `/tmp`, and every limit.
pub(crate) fn body(
    s: &DockerSettings,
    workspace: &Path,
    user: &str,
    owner: &str,
    copy: bool,
) -> ContainerCreateBody {
    let ws = workspace.to_string_lossy().into_owned();
    let memory = i64::try_from(s.memory_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
    let host = HostConfig {
        mounts: Some(vec![
            tmp_mount(s),
            match copy {
                false => Mount {
                    typ: Some(MountType::BIND),
                    source: Some(ws.clone()),
                    target: Some(ws.clone()),
                    read_only: Some(false),
                    bind_options: Some(MountBindOptions {
                        non_recursive: Some(true),
                        ..Default::default()
                    }),
                    ..Default::default()
                },
                // A volume of the container's own on the workspace's parent (so the
                // workspace folder unpacked into it can belong to the sandbox's user),
                // removed with the container; the workspace is copied in (`copy.rs`).
                true => Mount {
                    typ: Some(MountType::VOLUME),
                    target: Some(
                        workspace
                            .parent()
                            .unwrap_or(Path::new("/"))
                            .to_string_lossy()
                            .into_owned(),
                    ),
                    read_only: Some(false),
                    ..Default::default()
                },
            },
        ]),
        network_mode: Some(if s.network { "bridge" } else { "none" }.into()),
        readonly_rootfs: Some(true),
        cap_drop: Some(vec!["ALL".into()]),
        security_opt: Some(vec!["no-new-privileges".into()]),
        pids_limit: Some(s.pids_limit),
        memory: Some(memory),
        memory_swap: Some(memory),
        nano_cpus: Some((s.cpus * 1e9) as i64),
        init: Some(true),
        ipc_mode: Some("private".into()),
        runtime: s.runtime.clone(),
        ..Default::default()
    };
    ContainerCreateBody {
        image: Some(s.image.clone()),
        user: Some(user.to_owned()),
        working_dir: Some(ws),
        labels: Some(HashMap::from([(LABEL.to_owned(), owner.to_owned())])),
        attach_stdin: Some(true),
        attach_stdout: Some(true),
        attach_stderr: Some(true),
        open_stdin: Some(true),
        stdin_once: Some(true),
        tty: Some(false),
        network_disabled: Some(!s.network),
        host_config: Some(host),
        ..Default::default()
    }
}

/// The size-capped tmpfs `/tmp` every sandbox gets.
pub(crate) fn tmp_mount(s: &DockerSettings) -> Mount {
    let tmp = i64::try_from(s.tmp_size_mib.saturating_mul(1024 * 1024)).unwrap_or(i64::MAX);
    Mount {
        typ: Some(MountType::TMPFS),
        target: Some("/tmp".into()),
        tmpfs_options: Some(MountTmpfsOptions {
            size_bytes: Some(tmp),
            mode: Some(0o1777),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// `host/machine/boot/pidns:pid:start-time` of this process: the host name, the
/// machine id, the kernel's boot id and the PID namespace, then the process, so a
/// later sweep can tell whether the owner of a container is still alive, and two
/// machines (or containers) of one host name never take each other's for their own.
pub fn owner_label() -> String {
    let pid = std::process::id();
    format!("{}:{pid}:{}", Machine::here(), start_time(pid).unwrap_or(0))
}

/// Where a process runs, as an owner label names it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Machine {
    host: String,
    id: String,
    boot: String,
    pidns: String,
}

impl Machine {
    /// This process's machine, read once.
    fn here() -> &'static Self {
        static HERE: std::sync::OnceLock<Machine> = std::sync::OnceLock::new();
        HERE.get_or_init(Self::read)
    }

    fn read() -> Self {
        let read = |path: &str| std::fs::read_to_string(path).unwrap_or_default();
        let hex = |text: String| -> String {
            text.chars()
                .filter(char::is_ascii_hexdigit)
                .take(16)
                .collect()
        };
        let id = match hex(read("/etc/machine-id")) {
            id if id.is_empty() => hex(read("/var/lib/dbus/machine-id")),
            id => id,
        };
        let pidns = std::fs::read_link("/proc/self/ns/pid").unwrap_or_default();
        Self {
            host: read("/proc/sys/kernel/hostname").trim().to_owned(),
            id,
            boot: hex(read("/proc/sys/kernel/random/boot_id")),
            pidns: pidns
                .to_string_lossy()
                .chars()
                .filter(char::is_ascii_digit)
                .collect(),
        }
    }

    /// The machine part of a label; `None` for an older label (a host name alone).
    fn parse(text: &str) -> Option<Self> {
        let mut parts = text.split('/');
        let (Some(host), Some(id), Some(boot), Some(pidns), None) = (
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
            parts.next(),
        ) else {
            return None;
        };
        Some(Self {
            host: host.to_owned(),
            id: id.to_owned(),
            boot: boot.to_owned(),
            pidns: pidns.to_owned(),
        })
    }
}

impl std::fmt::Display for Machine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}/{}/{}", self.host, self.id, self.boot, self.pidns)
    }
}

/// Field 22 of `/proc/PID/stat`: when the process started, in clock ticks since boot.
fn start_time(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 2..];
    rest.split(' ').nth(19)?.parse().ok()
}

/// True when `owner` names a process of this machine that is gone: one of an
/// earlier boot, or of this boot and PID namespace whose pid is free or reused.
/// Another machine's are never gone to us (nor, by its host name alone, an older
/// label's of another host), nor another PID namespace's of this boot.
pub(crate) fn owner_is_gone(owner: &str) -> bool {
    let mut parts = owner.rsplitn(3, ':');
    let (Some(start), Some(pid), Some(place)) = (parts.next(), parts.next(), parts.next()) else {
        return false;
    };
    let here = Machine::here();
    match Machine::parse(place) {
        Some(there) => {
            if there.host != here.host || there.id != here.id {
                return false;
            }
            if there.boot != here.boot {
                // Without a machine id, another boot may be another machine.
                return !there.id.is_empty();
            }
            if there.pidns != here.pidns {
                return false;
            }
        }
        None if place == here.host => {}
        None => return false,
    }
    let (Ok(pid), Ok(start)) = (pid.parse::<u32>(), start.parse::<u64>()) else {
        return false;
    };
    start_time(pid) != Some(start)
}

/// Removes the sandbox containers left by processes of this host that are gone.
pub(crate) async fn sweep(docker: &Docker) {
    let filters = HashMap::from([("label", vec![LABEL])]);
    let options = ListContainersOptionsBuilder::default()
        .all(true)
        .filters(&filters)
        .build();
    let Ok(list) = docker.list_containers(Some(options)).await else {
        return;
    };
    for c in list {
        let owner = c.labels.as_ref().and_then(|l| l.get(LABEL));
        if let (Some(id), Some(owner)) = (c.id.as_deref(), owner)
            && owner_is_gone(owner)
        {
            tracing::info!(
                container = id,
                owner = owner.as_str(),
                "removing a stale sandbox"
            );
            remove(docker, id).await;
        }
    }
}

/// Kills and removes container `id` with its anonymous volume (a copied workspace);
/// whether the engine did.
pub(crate) async fn remove(docker: &Docker, id: &str) -> bool {
    let options = RemoveContainerOptionsBuilder::default()
        .force(true)
        .v(true)
        .build();
    match docker.remove_container(id, Some(options)).await {
        Ok(()) => true,
        Err(e) => {
            tracing::debug!(container = id, "cannot remove the sandbox container: {e}");
            false
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn owner_of_this_process_is_alive_and_a_dead_pid_is_gone() {
        let me = owner_label();
        assert!(!owner_is_gone(&me));
        // Same pid, other start time: the pid was reused.
        let reused = format!("{}:{}:1", Machine::here(), std::process::id());
        assert!(owner_is_gone(&reused));
        // Another host's containers are never ours to remove.
        assert!(!owner_is_gone("elsewhere.example:1:1"));
        let here = Machine::here();
        let with = |edit: &dyn Fn(&mut Machine)| {
            let mut m = Machine::here().clone();
            edit(&mut m);
            format!("{m}:{}:1", std::process::id())
        };
        // Another machine of this host name: never ours.
        assert!(!owner_is_gone(&with(&|m| m.id = "0123456789abcdef".into())));
        // An earlier boot of this machine: every process of it is gone.
        assert!(owner_is_gone(
            &with(&|m| m.boot = "0123456789abcdef".into())
        ));
        // Another PID namespace of this boot (another container): cannot be told.
        assert!(!owner_is_gone(&with(&|m| m.pidns = "1".into())));
        // An older label (the host name alone) is read as it was.
        assert!(owner_is_gone(&format!(
            "{}:{}:1",
            here.host,
            std::process::id()
        )));
        assert!(!owner_is_gone("garbage"));
    }
}
