//! The defaults every spawn gets.

#[tokio::test]
async fn commands_close_stdin() {
    // `cat` would wait forever on an inherited terminal or pipe.
    let out = crate::command("cat").output().await.unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
    let out = crate::std_command("cat").output().unwrap();
    assert!(out.status.success());
    assert!(out.stdout.is_empty());
}

#[tokio::test]
async fn dropping_an_async_child_kills_it() {
    let child = crate::command("sleep").arg("1000").spawn().unwrap();
    let pid = child.id().unwrap();
    drop(child);
    // kill_on_drop sends SIGKILL at once; the zombie is reaped by tokio's orphan queue,
    // so wait until the process is no longer running (state Z or gone).
    for _ in 0..200 {
        let state = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let running = state
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z'));
        if !running {
            return;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    panic!("the dropped child {pid} is still running");
}
