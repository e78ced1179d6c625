//! `read_file` of a 2,000-line window from a 700 KB file (`cargo xtask bench` times
//! Python's `read_text().splitlines()` window on the same file), and of a 106-page PDF
//! (bash's manual, set by groff) against `pdftotext` on the same file.

use std::path::PathBuf;
use std::sync::Arc;

use criterion::{Criterion, criterion_group, criterion_main};
use jianmu_tool_fs::{ReadArgs, ReadFile, ReadSettings};
use jianmu_workspace::Workspace;

/// Where the file is written, so the Python reference reads the very same bytes.
fn data_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target/bench-data")
}

fn bench(c: &mut Criterion) {
    let dir = data_dir();
    std::fs::create_dir_all(&dir).unwrap();
    let text: String = (0..20_000)
        .map(|i| format!("{i:06}: the quick brown fox jumps!\n"))
        .collect();
    assert!((690_000..=720_000).contains(&text.len()), "{}", text.len());
    std::fs::write(dir.join("read-700k.txt"), &text).unwrap();
    let ws = Arc::new(Workspace::open(&dir).unwrap());
    let tool = ReadFile::new(ws, ReadSettings::default());
    let args = ReadArgs {
        path: "read-700k.txt".into(),
        offset: Some(9001),
        limit: Some(2000),
        // Plain lines, as the reference returns them.
        line_numbers: Some(false),
        pages: None,
    };
    let out = tool.read(&args).unwrap();
    assert!(out.text.starts_with("009000: "), "{}", &out.text[..20]);
    let mut group = c.benchmark_group("read_file");
    group.bench_function("window_2000_of_700k", |b| {
        b.iter(|| tool.read(&args).unwrap())
    });
    pdf(&mut group, &dir);
    group.finish();
}

/// bash's manual page set as a PDF by groff at 11 points: 106 pages of text.
fn manual_pdf(dir: &std::path::Path) -> PathBuf {
    let pdf = dir.join("bash-manual.pdf");
    if !pdf.exists() {
        let page = std::fs::read("/usr/share/man/man1/bash.1.gz").expect("bash's manual page");
        let mut groff = jianmu_process::std_command("sh")
            .args(["-c", "gzip -dc | groff -man -rS11 -Tpdf"])
            .stdin(std::process::Stdio::piped())
            .stdout(std::process::Stdio::piped())
            .spawn()
            .expect("sh");
        let mut input = groff.stdin.take().unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            input.write_all(&page).unwrap();
        });
        let out = groff.wait_with_output().unwrap();
        writer.join().unwrap();
        assert!(
            out.status.success() && out.stdout.starts_with(b"%PDF-"),
            "groff -Tpdf failed: install groff (cargo xtask test-all does)"
        );
        std::fs::write(&pdf, out.stdout).unwrap();
    }
    pdf
}

fn pdf(
    group: &mut criterion::BenchmarkGroup<'_, criterion::measurement::WallTime>,
    dir: &std::path::Path,
) {
    let pdf = manual_pdf(dir);
    let ws = Arc::new(Workspace::open(dir).unwrap());
    let settings = ReadSettings {
        pdf_chars: 2_000_000,
        pdf_pages: 1_000,
        ..ReadSettings::default()
    };
    let tool = ReadFile::new(ws, settings);
    let args = ReadArgs {
        path: "bash-manual.pdf".into(),
        offset: None,
        limit: None,
        line_numbers: None,
        pages: None,
    };
    let out = tool.read(&args).unwrap();
    assert!(
        out.text
            .contains("is a PDF of 106 pages; pages 1-106 follow."),
        "{}",
        &out.text[..200]
    );
    assert!(out.text.contains("--- page 106 ---"));
    group.sample_size(10);
    group.bench_function("pdf_106_pages", |b| b.iter(|| tool.read(&args).unwrap()));
    group.bench_function("pdftotext_106_pages", |b| {
        b.iter(|| {
            let out = jianmu_process::std_command("pdftotext")
                .arg(&pdf)
                .arg("-")
                .output()
                .expect("pdftotext (poppler-utils; cargo xtask test-all installs it)");
            assert!(out.status.success() && out.stdout.len() > 100_000);
        })
    });
}

criterion_group!(benches, bench);
criterion_main!(benches);
