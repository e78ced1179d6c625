//! Notebooks: a real one (from nbformat's own sources on PyPI) read as cells, edits
//! that nbformat's validator accepts, and hostile files.

use std::path::Path;
use std::sync::Arc;

use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_tool_fs::{NotebookEdit, NotebookSettings, ReadFile, ReadSettings};
use jianmu_workspace::Workspace;
use serde_json::{Value, json};

fn tools(dir: &Path) -> (ToolHandle, ToolHandle) {
    let ws = Arc::new(Workspace::open(dir).unwrap());
    (
        ToolHandle::new(ReadFile::new(ws.clone(), ReadSettings::default())).unwrap(),
        ToolHandle::new(NotebookEdit::new(ws, NotebookSettings::default())).unwrap(),
    )
}

/// nbformat's own validator on `file`: `None` when valid, else why not.
fn invalid(python: &Path, file: &Path) -> Option<String> {
    let out = jianmu_process::std_command(python)
        .args([
            "-c",
            "import sys, nbformat; nb = nbformat.read(sys.argv[1], as_version=nbformat.NO_CONVERT); nbformat.validate(nb)",
        ])
        .arg(file)
        .output()
        .unwrap();
    (!out.status.success()).then(|| String::from_utf8_lossy(&out.stderr).into_owned())
}

async fn run(tool: &ToolHandle, args: Value) -> Result<jianmu_tool_core::ToolOutput, String> {
    tool.execute(args, ExecuteOptions::default())
        .await
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_real_notebook_reads_as_cells_and_stays_valid_through_edits() {
    let (python, samples) = jianmu_test_support::nbformat();
    let dir = tempfile::tempdir().unwrap();
    let nb = dir.path().join("real.ipynb");
    std::fs::copy(samples.join("test4.5.ipynb"), &nb).unwrap();
    assert_eq!(invalid(&python, &nb), None);
    let (read, edit) = tools(dir.path());

    let out = run(&read, json!({"path": "real.ipynb"})).await.unwrap();
    assert!(
        out.text.starts_with("Jupyter notebook: 9 cells"),
        "{}",
        out.text
    );
    assert!(
        out.text.contains("--- cell 4 · id 38f37a24 · code"),
        "{}",
        out.text
    );
    assert!(out.text.contains("[stdout]\n"), "{}", out.text);
    assert!(
        out.text.contains("(image/png: image 1 of this answer)"),
        "{}",
        out.text
    );
    assert_eq!(out.images.len(), 1);
    assert_eq!(out.images[0].mime_type, "image/png");
    assert_eq!(out.structured.as_ref().unwrap()["cells"], 9);
    // A window reads the raw JSON.
    let raw = run(&read, json!({"path": "real.ipynb", "limit": 3}))
        .await
        .unwrap();
    assert!(raw.text.contains("\"cells\""), "{}", raw.text);

    // Every mode, each result checked by nbformat itself.
    let said = run(
        &edit,
        json!({"path": "real.ipynb", "cell_id": "8206b3b9", "new_source": "x = 1\nx"}),
    )
    .await
    .unwrap();
    assert_eq!(
        said.text,
        "Replaced cell 6 (id 8206b3b9) (code); its outputs were cleared in real.ipynb"
    );
    assert_eq!(invalid(&python, &nb), None);
    run(&edit, json!({"path": "real.ipynb", "cell_id": "38f37a24", "new_source": "## Notes", "cell_type": "markdown"}))
        .await
        .unwrap();
    assert_eq!(invalid(&python, &nb), None);
    run(&edit, json!({"path": "real.ipynb", "cell_id": "2fcdfa53", "new_source": "print('new')", "edit_mode": "insert"}))
        .await
        .unwrap();
    run(&edit, json!({"path": "real.ipynb", "new_source": "first", "cell_type": "raw", "edit_mode": "insert"}))
        .await
        .unwrap();
    run(
        &edit,
        json!({"path": "real.ipynb", "cell_id": "bb687f78", "edit_mode": "delete"}),
    )
    .await
    .unwrap();
    assert_eq!(invalid(&python, &nb), None);
    let after = run(&read, json!({"path": "real.ipynb"})).await.unwrap();
    assert!(
        after.text.starts_with("Jupyter notebook: 10 cells"),
        "{}",
        after.text
    );
    assert!(after.text.contains("--- cell 1 · id "), "{}", after.text);
    assert!(after.text.contains("· raw ---\nfirst\n"), "{}", after.text);
    assert!(
        after.text.contains("```python\nprint('new')\n```"),
        "{}",
        after.text
    );
    assert!(!after.text.contains("bb687f78"));

    // A notebook from before cell ids (4.4) gets no ids, and stays valid.
    let old = dir.path().join("old.ipynb");
    std::fs::copy(samples.join("test4.ipynb"), &old).unwrap();
    run(
        &edit,
        json!({"path": "old.ipynb", "cell_id": "1", "new_source": "new", "edit_mode": "insert"}),
    )
    .await
    .unwrap();
    assert_eq!(invalid(&python, &old), None);
    let written: Value = serde_json::from_slice(&std::fs::read(&old).unwrap()).unwrap();
    assert!(written["cells"][1].get("id").is_none());
}

#[tokio::test]
async fn hostile_notebooks_are_bounded_and_refused_cleanly() {
    let dir = tempfile::tempdir().unwrap();
    let (read, edit) = tools(dir.path());
    // A 50 MB output: shown cut, with a count.
    let big = json!({
        "nbformat": 4, "nbformat_minor": 5, "metadata": {},
        "cells": [{"cell_type": "code", "id": "big", "metadata": {}, "execution_count": 1,
                   "source": "print('x' * 50_000_000)",
                   "outputs": [{"output_type": "stream", "name": "stdout", "text": "x".repeat(50_000_000)}]}]
    });
    std::fs::write(dir.path().join("big.ipynb"), big.to_string()).unwrap();
    let out = run(&read, json!({"path": "big.ipynb"})).await.unwrap();
    assert!(out.text.len() < 10_000, "{}", out.text.len());
    assert!(
        out.text
            .contains("… (49995000 more characters of this output not shown)"),
        "{}",
        out.text
    );

    std::fs::write(dir.path().join("bad.ipynb"), "{\"cells\": [").unwrap();
    let err = run(&read, json!({"path": "bad.ipynb"})).await.unwrap_err();
    assert!(
        err.contains("is not valid JSON") && err.contains("offset"),
        "{err}"
    );
    let before = b"{\"nbformat\": 3, \"worksheets\": []}";
    std::fs::write(dir.path().join("v3.ipynb"), before).unwrap();
    let err = run(
        &edit,
        json!({"path": "v3.ipynb", "new_source": "x", "edit_mode": "insert"}),
    )
    .await
    .unwrap_err();
    assert!(
        err.contains("nbformat 3") && err.contains("it was not changed"),
        "{err}"
    );
    assert_eq!(std::fs::read(dir.path().join("v3.ipynb")).unwrap(), before);
    let err = run(&edit, json!({"path": "notes.txt", "new_source": "x"}))
        .await
        .unwrap_err();
    assert!(err.contains("not a Jupyter notebook"), "{err}");
    let err = run(&edit, json!({"path": "../x.ipynb", "new_source": "x"}))
        .await
        .unwrap_err();
    assert!(err.contains("outside") || err.contains("refused"), "{err}");
    let deep = format!("{}{}", "[".repeat(100_000), "]".repeat(100_000));
    std::fs::write(dir.path().join("deep.ipynb"), deep).unwrap();
    let err = run(&read, json!({"path": "deep.ipynb"})).await.unwrap_err();
    assert!(err.contains("recursion limit"), "{err}");
}
