//! read_file, write_file and list_dir through the real call path, on real files.

use std::os::unix::fs::symlink;
use std::path::PathBuf;
use std::sync::Arc;

use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_tool_fs::{
    Extensions, ListDir, ListSettings, ReadFile, ReadSettings, WriteFile, WriteSettings,
};
use jianmu_workspace::Workspace;

mod notebook;
mod pdf;
use serde_json::json;

struct Fx {
    _tmp: tempfile::TempDir,
    top: PathBuf,
    ws: Arc<Workspace>,
}

impl Fx {
    fn new() -> Self {
        let tmp = tempfile::tempdir().unwrap();
        let top = tmp.path().canonicalize().unwrap();
        std::fs::create_dir_all(top.join("ws/src")).unwrap();
        std::fs::create_dir_all(top.join("outside")).unwrap();
        std::fs::write(top.join("outside/secret.txt"), "SECRET").unwrap();
        let ws = Arc::new(Workspace::open(top.join("ws")).unwrap());
        Fx { _tmp: tmp, top, ws }
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.top.join("ws").join(rel)
    }

    fn put(&self, rel: &str, content: impl AsRef<[u8]>) {
        let p = self.path(rel);
        std::fs::create_dir_all(p.parent().unwrap()).unwrap();
        std::fs::write(p, content).unwrap();
    }

    fn read_tool(&self, settings: ReadSettings) -> ToolHandle {
        ToolHandle::new(ReadFile::new(self.ws.clone(), settings)).unwrap()
    }

    fn write_tool(&self, settings: WriteSettings) -> ToolHandle {
        ToolHandle::new(WriteFile::new(self.ws.clone(), settings)).unwrap()
    }

    fn list_tool(&self) -> ToolHandle {
        ToolHandle::new(ListDir::new(self.ws.clone(), ListSettings::default())).unwrap()
    }
}

use jianmu_test_support::call;

#[track_caller]
fn check(got: String, expect: &str) {
    assert_eq!(got, expect);
}

fn settings_with(exts: &[&str]) -> ReadSettings {
    ReadSettings {
        allowed_extensions: Extensions::only(exts.iter().copied()),
        ..ReadSettings::default()
    }
}

#[tokio::test]
async fn read_file_whole_window_binary_and_encoding() {
    let fx = Fx::new();
    fx.put("a.txt", "one\ntwo\nthree\n");
    let lines: String = (1..=5000).map(|i| format!("line {i}\n")).collect();
    fx.put("big.txt", &lines);
    fx.put("bin.dat", b"\x7fELF\x00\x01\x02");
    fx.put("latin1.txt", b"caf\xe9\n");
    let read = fx.read_tool(ReadSettings::default());
    check(
        call(&read, json!({"path": "a.txt"})).await,
        "one\ntwo\nthree\n",
    );
    check(
        call(&read, json!({"path": "big.txt", "offset": 4999})).await,
        "4999\tline 4999\n5000\tline 5000\n(lines 4999-5000 of 5000)",
    );
    check(
        call(&read, json!({"path": "big.txt", "offset": 10, "limit": 2})).await,
        "10\tline 10\n11\tline 11\n(lines 10-11 of 5000)",
    );
    check(
        call(&read, json!({"path": "a.txt", "limit": 10})).await,
        "1\tone\n2\ttwo\n3\tthree\n(lines 1-3 of 3)",
    );
    // Numbers on request, or off for a window.
    check(
        call(&read, json!({"path": "a.txt", "line_numbers": true})).await,
        "1\tone\n2\ttwo\n3\tthree\n(lines 1-3 of 3)",
    );
    check(
        call(
            &read,
            json!({"path": "big.txt", "offset": 10, "limit": 2, "line_numbers": false}),
        )
        .await,
        "line 10\nline 11\n(lines 10-11 of 5000)",
    );
    check(
        call(&read, json!({"path": "a.txt", "offset": 9})).await,
        "(no lines: the file has 3 lines)",
    );
    check(
        call(&read, json!({"path": "bin.dat"})).await,
        "`bin.dat` is a binary file (7 bytes); its content is not shown",
    );
    check(
        call(&read, json!({"path": "latin1.txt"})).await,
        "error: `latin1.txt` is not UTF-8 text: invalid byte at offset 3",
    );
    check(
        call(&read, json!({"path": "a.txt", "offset": 0})).await,
        "error: invalid arguments for `read_file`: at /offset: 0 is less than the minimum of 1",
    );
    let read_small = fx.read_tool(ReadSettings {
        max_file_size: 1000,
        ..ReadSettings::default()
    });
    check(
        call(&read_small, json!({"path": "big.txt"})).await,
        "error: refused `big.txt`: it is 48893 bytes, over the limit of 1000 bytes; read it in windows with `offset` and `limit`",
    );
    let out = call(
        &read_small,
        json!({"path": "big.txt", "offset": 1, "limit": 1000}),
    )
    .await;
    assert!(
        out.ends_with("(lines 1-123 of 5000; cut at the size limit)"),
        "{out}"
    );
}

#[tokio::test]
async fn read_file_refusals_name_the_rule() {
    let fx = Fx::new();
    fx.put("notes.TXT", "upper");
    fx.put("trailing.txt.", "dot");
    fx.put("key.pem", "private");
    symlink("key.pem", fx.path("innocent.txt")).unwrap();
    // Absolute symlink targets are refused even when they point inside: resolution
    // happens beneath the root, where an absolute path cannot be followed.
    symlink(fx.path("notes.TXT"), fx.path("absolute.txt")).unwrap();
    symlink(fx.top.join("outside/secret.txt"), fx.path("escape.txt")).unwrap();
    let read = fx.read_tool(settings_with(&["txt", ".MD"]));
    check(call(&read, json!({"path": "notes.TXT"})).await, "upper");
    check(
        call(&read, json!({"path": "trailing.txt."})).await,
        "error: refused `trailing.txt.`: extension `.` is not allowed (allowed: .txt, .md)",
    );
    check(
        call(&read, json!({"path": "key.pem"})).await,
        "error: refused `key.pem`: extension `.pem` is not allowed (allowed: .txt, .md)",
    );
    check(
        call(&read, json!({"path": "innocent.txt"})).await,
        "error: refused `key.pem`: extension `.pem` is not allowed (allowed: .txt, .md)",
    );
    check(
        call(&read, json!({"path": "absolute.txt"})).await,
        "error: refused `absolute.txt`: the path leads outside the workspace through a symbolic link",
    );
    let read = fx.read_tool(ReadSettings::default());
    let outside = fx.top.join("outside/secret.txt");
    let evil = format!("{}-evil/x.txt", fx.ws.root().display());
    for (path, expect) in [
        ("../../etc/passwd".to_owned(), "error: refused `../../etc/passwd`: the path is outside the workspace".to_owned()),
        (outside.display().to_string(), format!("error: refused `{}`: the path is outside the workspace", outside.display())),
        (evil.clone(), format!("error: refused `{evil}`: the path is outside the workspace")),
        ("escape.txt".to_owned(), "error: refused `escape.txt`: the path leads outside the workspace through a symbolic link".to_owned()),
        ("a\u{0}b".to_owned(), "error: refused the path: it contains a NUL byte".to_owned()),
        ("missing.txt".to_owned(), "error: `missing.txt` does not exist".to_owned()),
        ("src".to_owned(), "error: refused `src`: it is a directory, not a regular file".to_owned()),
    ] {
        check(call(&read, json!({"path": path})).await, &expect);
    }
}

#[tokio::test]
async fn read_file_on_a_fifo_returns_at_once() {
    let fx = Fx::new();
    let status = jianmu_process::std_command("mkfifo")
        .arg(fx.path("pipe"))
        .status()
        .unwrap();
    assert!(status.success());
    let read = fx.read_tool(ReadSettings::default());
    check(
        call(&read, json!({"path": "pipe"})).await,
        "error: refused `pipe`: it is a FIFO, not a regular file",
    );
}

#[tokio::test]
async fn write_file_writes_appends_and_refuses() {
    let fx = Fx::new();
    let write = fx.write_tool(WriteSettings::default());
    check(
        call(
            &write,
            json!({"path": "docs/new.md", "content": "# Title\n"}),
        )
        .await,
        "Wrote docs/new.md (8 bytes)",
    );
    check(
        call(
            &write,
            json!({"path": "docs/new.md", "content": "more\n", "append": true}),
        )
        .await,
        "Wrote docs/new.md (5 bytes)",
    );
    assert_eq!(
        std::fs::read_to_string(fx.path("docs/new.md")).unwrap(),
        "# Title\nmore\n"
    );
    check(
        call(
            &write,
            json!({"path": "deep/er/x.md", "content": "x", "create_dirs": false}),
        )
        .await,
        "error: `deep/er/x.md (its folder; set create_dirs to make it)` does not exist",
    );
    check(
        call(&write, json!({"path": "../evil.txt", "content": "x"})).await,
        "error: refused `../evil.txt`: the path is outside the workspace",
    );
    symlink(fx.top.join("outside"), fx.path("out")).unwrap();
    check(
        call(&write, json!({"path": "out/planted.txt", "content": "x"})).await,
        "error: refused `out/planted.txt`: the path leads outside the workspace through a symbolic link",
    );
    assert!(!fx.top.join("outside/planted.txt").exists());

    let write = fx.write_tool(WriteSettings {
        max_content_size: 4,
        allowed_extensions: Extensions::only([".md"]),
        durable: true,
        diagnostics: false,
    });
    check(
        call(&write, json!({"path": "a.md", "content": "12345"})).await,
        "error: refused writing `a.md`: the content is 5 bytes, over the limit of 4 bytes",
    );
    check(
        call(&write, json!({"path": "a.sh", "content": "x"})).await,
        "error: refused `a.sh`: extension `.sh` is not allowed (allowed: .md)",
    );
    check(
        call(&write, json!({"path": "A.MD", "content": "ok"})).await,
        "Wrote A.MD (2 bytes)",
    );
}

#[tokio::test]
async fn list_dir_table() {
    let fx = Fx::new();
    fx.put("b.txt", vec![b'x'; 1536]);
    fx.put("a.bin", vec![b'x'; 3 * 1024 * 1024]);
    fx.put(".hidden", "h");
    fx.put("src/main.rs", "fn main() {}\n");
    symlink("b.txt", fx.path("link")).unwrap();
    let list = fx.list_tool();
    check(
        call(&list, json!({})).await,
        "FILE         1 B  .hidden\nFILE      3.0 MB  a.bin\nFILE      1.5 KB  b.txt\nLINK           -  link\nDIR            -  src\n",
    );
    check(
        call(&list, json!({"path": "src"})).await,
        "FILE        13 B  main.rs\n",
    );
    std::fs::create_dir(fx.path("empty")).unwrap();
    check(
        call(&list, json!({"path": "empty"})).await,
        "(`empty` is empty)\n",
    );
    check(
        call(&list, json!({"path": "b.txt"})).await,
        "error: `b.txt` is not a directory",
    );
    check(
        call(&list, json!({"path": "/"})).await,
        "error: refused `/`: the path is outside the workspace",
    );
}

#[tokio::test]
async fn numbered_reads_count_right_and_cut_long_lines() {
    let fx = Fx::new();
    let body: String = (1..=1000).map(|i| format!("row {i}\n")).collect();
    fx.put("k.txt", &body);
    let read = fx.read_tool(ReadSettings::default());
    let out = call(&read, json!({"path": "k.txt", "offset": 990, "limit": 20})).await;
    let expected: String = (990..=1000).map(|i| format!("{i}\trow {i}\n")).collect();
    check(out, &format!("{expected}(lines 990-1000 of 1000)"));
    let out = call(&read, json!({"path": "k.txt", "line_numbers": true})).await;
    assert!(out.starts_with("1\trow 1\n2\trow 2\n"), "{}", &out[..40]);
    assert!(out.ends_with("1000\trow 1000\n(lines 1-1000 of 1000)"));
    // A minified line is cut, and says how much.
    fx.put("min.js", format!("{}\nnext\n", "x".repeat(5000)));
    let out = call(&read, json!({"path": "min.js", "limit": 5})).await;
    check(
        out,
        &format!(
            "1\t{}…[3000 more characters]\n2\tnext\n(lines 1-2 of 2)",
            "x".repeat(2000)
        ),
    );
}

#[tokio::test]
async fn images_come_back_as_images() {
    use base64::Engine as _;
    let fx = Fx::new();
    // Judged by content, not by name.
    fx.put("pixel.dat", jianmu_test_support::PNG);
    fx.put("anim.gif", b"GIF89a\x05\x00\x04\x00\x00\x00\x00;");
    // A damaged header still returns the image, without dimensions.
    fx.put("broken.jpg", b"\xff\xd8\xff\xe0garbage");
    let t = fx.read_tool(ReadSettings::default());
    let out = t
        .execute(json!({"path": "pixel.dat"}), ExecuteOptions::default())
        .await
        .unwrap();
    assert_eq!(
        out.text,
        "`pixel.dat` is a PNG image (73 bytes, 3x2 pixels); it follows as an image."
    );
    assert_eq!(out.images.len(), 1);
    assert_eq!(out.images[0].mime_type, "image/png");
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(&out.images[0].base64)
        .unwrap();
    assert_eq!(decoded, jianmu_test_support::PNG);
    let data = out.structured.unwrap();
    assert_eq!(data["image"]["width"], 3);
    assert_eq!(data["image"]["base64"], out.images[0].base64);
    assert_eq!(data["binary"], true);
    check(
        call(&t, json!({"path": "anim.gif"})).await,
        "`anim.gif` is a GIF image (14 bytes, 5x4 pixels); it follows as an image.",
    );
    check(
        call(&t, json!({"path": "broken.jpg"})).await,
        "`broken.jpg` is a JPEG image (11 bytes); it follows as an image.",
    );
    // Over the image limit: refused before it is read.
    let small = fx.read_tool(ReadSettings {
        max_image_size: 50,
        ..ReadSettings::default()
    });
    check(
        call(&small, json!({"path": "pixel.dat"})).await,
        "error: `pixel.dat` is a PNG image of 73 bytes, over the limit of 50 bytes for images; it was not read",
    );
}

#[tokio::test]
async fn the_line_numbers_setting_is_the_default_for_every_read() {
    let fx = Fx::new();
    fx.put("a.txt", "one\ntwo\n");
    let on = fx.read_tool(ReadSettings {
        line_numbers: Some(true),
        ..ReadSettings::default()
    });
    check(
        call(&on, json!({"path": "a.txt"})).await,
        "1\tone\n2\ttwo\n(lines 1-2 of 2)",
    );
    check(
        call(&on, json!({"path": "a.txt", "line_numbers": false})).await,
        "one\ntwo\n",
    );
    let off = fx.read_tool(ReadSettings {
        line_numbers: Some(false),
        ..ReadSettings::default()
    });
    check(
        call(&off, json!({"path": "a.txt", "offset": 2})).await,
        "two\n(lines 2-2 of 2)",
    );
}
