//! `bash` running `echo hi` through the tool, isolated (the default: a private
//! network), isolated with the host's network, with isolation off (supervision only)
//! and in a warm shell session, against a bare spawn of the same command in the same
//! run; and the cost of making a session's private network and a tool's view.

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_shell::{Bash, BashArgs, BashSettings};

fn bench(c: &mut Criterion) {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // A workspace of its own, as a project's is (not the host's `/tmp` itself).
    let ws = tempfile::tempdir().unwrap();
    let ws = ws.path();
    let tool = Bash::new(BashSettings::default(), ws.to_owned()).unwrap();
    let mut off = BashSettings::default();
    off.isolation.mode = jianmu_process::IsolationMode::Off;
    let supervised_only = Bash::new(off, ws.to_owned()).unwrap();
    let mut host = BashSettings::default();
    host.isolation.network = true;
    let host_network = Bash::new(host.clone(), ws.to_owned()).unwrap();
    eprintln!("bash isolation: {}", tool.isolation());
    eprintln!(
        "bash isolation, network = true: {}",
        host_network.isolation()
    );
    let cx = jianmu_tool_core::CallContext::new();
    let args = BashArgs {
        command: Some("echo hi".into()),
        ..BashArgs::default()
    };
    assert_eq!(rt.block_on(tool.run(&args, &cx)).unwrap().text, "hi\n");
    let mut group = c.benchmark_group("bash");
    group.bench_function("tool_echo_hi", |b| {
        b.to_async(&rt)
            .iter(|| async { tool.run(&args, &cx).await.unwrap() })
    });
    group.bench_function("tool_echo_hi_host_network", |b| {
        b.to_async(&rt)
            .iter(|| async { host_network.run(&args, &cx).await.unwrap() })
    });
    // What a session's first command pays once: a network namespace with loopback up.
    group.bench_function("make_private_network", |b| {
        b.iter(|| jianmu_process::Network::new().make().unwrap());
    });
    // What a tool's first command in a session pays once: its jail and its view (here
    // with a user namespace of its own, as without a private network).
    group.bench_function("make_view", |b| {
        b.iter(|| {
            let jail = jianmu_process::Jail::new(&host.isolation, ws).unwrap();
            jail.make_view().unwrap();
        });
    });
    group.bench_function("tool_echo_hi_supervised_only", |b| {
        b.to_async(&rt)
            .iter(|| async { supervised_only.run(&args, &cx).await.unwrap() })
    });
    // A session's shell lives across calls: the first call starts it, the rest reuse it.
    let in_session = BashArgs {
        command: Some("echo hi".into()),
        session: Some("bench".into()),
        ..BashArgs::default()
    };
    assert_eq!(
        rt.block_on(tool.run(&in_session, &cx)).unwrap().text,
        "hi\n"
    );
    group.bench_function("session_echo_hi", |b| {
        b.to_async(&rt)
            .iter(|| async { tool.run(&in_session, &cx).await.unwrap() })
    });
    group.bench_function("bare_spawn_echo_hi", |b| {
        b.to_async(&rt).iter(|| async {
            let out = jianmu_process::command("bash")
                .args(["-c", "echo hi"])
                .output()
                .await
                .unwrap();
            assert_eq!(out.stdout, b"hi\n");
        })
    });
    group.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
