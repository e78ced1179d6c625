//! PDFs through `read_file`: a real manual read page by page, pages without text said
//! to be images or blank, and hostile files that cost a page or an error, never the
//! process.

use std::path::Path;
use std::sync::Arc;

use jianmu_test_support::pdf::{self, Content};
use jianmu_tool_core::{ExecuteOptions, ToolHandle};
use jianmu_tool_fs::{ReadFile, ReadSettings};
use jianmu_workspace::Workspace;
use serde_json::{Value, json};

fn reader(dir: &Path, settings: ReadSettings) -> ToolHandle {
    let ws = Arc::new(Workspace::open(dir).unwrap());
    ToolHandle::new(ReadFile::new(ws, settings)).unwrap()
}

async fn read(tool: &ToolHandle, args: Value) -> Result<(String, Value), String> {
    tool.execute(args, ExecuteOptions::default())
        .await
        .map(|o| (o.text, o.structured.unwrap_or_default()))
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn a_real_manual_reads_page_by_page() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::copy(
        jianmu_test_support::MANUAL_PDF,
        dir.path().join("manual.pdf"),
    )
    .unwrap();
    let tool = reader(dir.path(), ReadSettings::default());

    let (text, data) = read(&tool, json!({"path": "manual.pdf", "pages": "1-2"}))
        .await
        .unwrap();
    assert!(
        text.starts_with("`manual.pdf` is a PDF of 36 pages; pages 1-2 follow."),
        "{text}"
    );
    assert!(text.contains("\n--- page 1 ---\nLibtasn1\n"), "{text}");
    assert!(text.contains("--- page 2 ---"), "{text}");
    assert!(text.contains("Free Software Foundation"), "{text}");
    assert!(!text.contains("--- page 3 ---"), "{text}");
    assert_eq!(
        (data["pages"].clone(), data["pages_read"].clone()),
        (json!(36), json!("1-2"))
    );

    // An open range runs to the end; a list keeps its order without repeats.
    let (text, _) = read(&tool, json!({"path": "manual.pdf", "pages": "35-"}))
        .await
        .unwrap();
    assert!(text.contains("pages 35-36 follow"), "{text}");
    let (text, data) = read(&tool, json!({"path": "manual.pdf", "pages": "3,1,3"}))
        .await
        .unwrap();
    assert_eq!(data["pages_read"], json!("3,1"), "{text}");
    assert!(text.find("--- page 3").unwrap() < text.find("--- page 1").unwrap());

    // Read whole, it stops at the size of one reading and says how to go on; going on
    // as told reads the next pages.
    let small = ReadSettings {
        pdf_chars: 20_000,
        ..ReadSettings::default()
    };
    let small = reader(dir.path(), small);
    let (text, data) = read(&small, json!({"path": "manual.pdf"})).await.unwrap();
    assert_eq!(data["cut"], json!(true));
    // No page is cut at the end of a reading: the next one starts with it, whole.
    assert!(!text.contains("more characters on this page"), "{text}");
    let tail = text.lines().last().unwrap();
    let next = tail
        .split("read them with `pages: \"")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .unwrap_or_else(|| panic!("no way on in {tail:?}"));
    assert!(next.ends_with("-36"), "{tail}");
    let (more, _) = read(&small, json!({"path": "manual.pdf", "pages": next}))
        .await
        .unwrap();
    let first = next.split('-').next().unwrap();
    assert!(
        more.contains(&format!("\n--- page {first} ---\n")),
        "{more}"
    );

    let err = read(&tool, json!({"path": "manual.pdf", "pages": "40-50"}))
        .await
        .unwrap_err();
    assert!(err.contains("the PDF has 36 pages"), "{err}");
    let err = read(&tool, json!({"path": "manual.pdf", "pages": "2-1"}))
        .await
        .unwrap_err();
    assert!(err.contains("is not a page selection"), "{err}");
    let err = read(&tool, json!({"path": "manual.pdf", "offset": 5}))
        .await
        .unwrap_err();
    assert!(
        err.contains("is a PDF: read its pages with `pages`"),
        "{err}"
    );
    std::fs::write(dir.path().join("notes.txt"), "text\n").unwrap();
    let err = read(&tool, json!({"path": "notes.txt", "pages": "1"}))
        .await
        .unwrap_err();
    assert!(err.contains("`pages` is for PDFs"), "{err}");
}

#[tokio::test]
async fn pages_without_text_are_said_to_be_images_or_blank() {
    let dir = tempfile::tempdir().unwrap();
    let doc = pdf::pages(&[
        Content::Text("Quarterly report"),
        Content::Image,
        Content::Blank,
        Content::Text("Appendix"),
    ]);
    std::fs::write(dir.path().join("scan.pdf"), doc).unwrap();
    let tool = reader(dir.path(), ReadSettings::default());
    let (text, _) = read(&tool, json!({"path": "scan.pdf"})).await.unwrap();
    assert_eq!(
        text,
        "`scan.pdf` is a PDF of 4 pages; pages 1-4 follow.\n\
         \n--- page 1 ---\nQuarterly report\n\
         \n--- page 2 (no text layer: the page is an image, such as a scan) ---\n\
         \n--- page 3 (no text) ---\n\
         \n--- page 4 ---\nAppendix\n"
    );
}

#[tokio::test]
async fn hostile_pdfs_cost_a_page_or_an_error_never_the_process() {
    let dir = tempfile::tempdir().unwrap();
    let settings = ReadSettings {
        pdf_timeout_secs: 20,
        ..ReadSettings::default()
    };
    let tool = reader(dir.path(), settings);
    let put = |name: &str, bytes: &[u8]| std::fs::write(dir.path().join(name), bytes).unwrap();

    // 50,000 pages: the count is told, one reading holds at most 100 pages, and the
    // rest is named.
    put("huge.pdf", &pdf::many_pages(50_000));
    let (text, data) = read(&tool, json!({"path": "huge.pdf"})).await.unwrap();
    assert!(
        text.starts_with("`huge.pdf` is a PDF of 50000 pages; pages 1-100 follow."),
        "{}",
        &text[..200]
    );
    assert!(text.contains("the same page again"));
    assert!(
        text.ends_with("(pages 101-50000 were not read: one reading holds at most 100 pages; read them with `pages: \"101-50000\"`, or fewer at a time)"),
        "{}",
        &text[text.len() - 300..]
    );
    assert_eq!(data["pages"], json!(50_000));
    let (text, _) = read(&tool, json!({"path": "huge.pdf", "pages": "49999-"}))
        .await
        .unwrap();
    assert!(text.contains("pages 49999-50000 follow"), "{text}");

    // A loop in the page tree's parents: the page that needs it is lost, the pages
    // around it are read.
    put("loop.pdf", &pdf::parent_loop());
    let (text, _) = read(&tool, json!({"path": "loop.pdf"})).await.unwrap();
    assert!(text.contains("--- page 1 ---\nbefore the loop\n"), "{text}");
    assert!(
        text.contains("--- page 2 (could not be read: the PDF is damaged here) ---"),
        "{text}"
    );
    assert!(text.contains("--- page 3 ---\nafter the loop\n"), "{text}");

    // A form that draws itself: the parser's stack overflows on page 2, which is lost;
    // a new reader goes on with page 3.
    put("form.pdf", &pdf::form_loop());
    let (text, _) = read(&tool, json!({"path": "form.pdf"})).await.unwrap();
    assert!(text.contains("--- page 1 ---\nfirst page\n"), "{text}");
    assert!(
        text.contains("--- page 2 (could not be read: the PDF is damaged here) ---"),
        "{text}"
    );
    assert!(text.contains("--- page 3 ---\nthird page\n"), "{text}");

    // Arrays nested a million deep; a cross-reference table that points nowhere; a
    // file cut in half; a header and nothing else.
    put("deep.pdf", &pdf::deep_nesting(1_000_000));
    let real = std::fs::read(jianmu_test_support::MANUAL_PDF).unwrap();
    let mut bad_xref = real.clone();
    let at = bad_xref
        .windows(9)
        .rposition(|w| w == b"startxref")
        .unwrap();
    bad_xref.truncate(at);
    bad_xref.extend_from_slice(b"startxref\n99999999\n%%EOF\n");
    put("bad-xref.pdf", &bad_xref);
    put("half.pdf", &real[..real.len() / 2]);
    put("header.pdf", b"%PDF-1.7\n");
    for name in ["deep.pdf", "bad-xref.pdf", "half.pdf", "header.pdf"] {
        match read(&tool, json!({"path": name})).await {
            // A reader that recovers the structure is welcome to.
            Ok((text, _)) => assert!(text.contains("is a PDF of"), "{name}: {text}"),
            Err(e) => assert!(
                e.contains(&format!("`{name}`: the PDF could not be read (")),
                "{name}: {e}"
            ),
        }
    }
    // The process that read them is fine, and still reads.
    let (text, _) = read(&tool, json!({"path": "loop.pdf", "pages": "3"}))
        .await
        .unwrap();
    assert!(text.contains("after the loop"), "{text}");
}
