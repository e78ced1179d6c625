//! The patch format's parser and the placing of hunks, on in-memory lines.

use super::parse::{HunkLine, OpKind, parse};
use super::place::{Budget, Placing, place};

#[track_caller]
fn check_parse_error(patch: &str, expect: &str) {
    let err = parse(patch).expect_err("the patch should be refused");
    assert!(err.contains(expect), "{err}");
}

#[test]
fn parses_every_operation() {
    let patch = parse(
        "\n*** Begin Patch\n*** Add File: a.txt\n+one\n+\n*** Delete File: b.txt\n*** Update File: c.txt\n*** Move to: d.txt\n@@ fn main\n ctx\n-old\n+new\n\n*** End of File\n*** End Patch\n\n",
    )
    .unwrap();
    assert_eq!(patch.ops.len(), 3);
    assert_eq!(
        patch.ops[0].kind,
        OpKind::Add(vec!["one".into(), String::new()])
    );
    assert_eq!(
        (patch.ops[1].path.as_str(), patch.ops[1].line),
        ("b.txt", 6)
    );
    let OpKind::Update { move_to, chunks } = &patch.ops[2].kind else {
        panic!("an update")
    };
    assert_eq!(move_to.as_deref(), Some("d.txt"));
    assert_eq!(chunks.len(), 1);
    assert_eq!(chunks[0].anchor.as_deref(), Some("fn main"));
    assert!(chunks[0].eof);
    assert_eq!(
        chunks[0].lines,
        vec![
            HunkLine::Keep("ctx".into()),
            HunkLine::Remove("old".into()),
            HunkLine::Insert("new".into()),
            HunkLine::Keep(String::new()),
        ]
    );
}

#[test]
fn a_heredoc_around_the_patch_and_crlf_lines_are_accepted() {
    let patch = parse(
        "apply_patch <<'EOF'\r\n*** Begin Patch\r\n*** Update File: a\r\n-x\r\n+y\r\n*** End Patch\r\nEOF\r\n",
    )
    .unwrap();
    let OpKind::Update { chunks, .. } = &patch.ops[0].kind else {
        panic!("an update")
    };
    assert_eq!(chunks[0].lines[1], HunkLine::Insert("y".into()));
}

#[test]
fn malformed_patches_name_the_line() {
    check_parse_error("", "the patch is empty");
    check_parse_error(
        "--- a/x\n+++ b/x\n",
        "line 1: a patch starts with `*** Begin Patch`",
    );
    check_parse_error(
        "*** Begin Patch\n*** Update File: a\n-x\n",
        "may have been cut off",
    );
    check_parse_error(
        "*** Begin Patch\n*** Update File: a\n@@\n-x\nbad\n*** End Patch",
        "line 5: each line of a hunk starts with",
    );
    check_parse_error(
        "*** Begin Patch\n*** Add File: a\nx\n*** End Patch",
        "line 3: every line",
    );
    check_parse_error(
        "*** Begin Patch\n*** Update File: a\n*** End Patch",
        "has no hunk",
    );
    check_parse_error(
        "*** Begin Patch\n*** Add File: \n*** End Patch",
        "path is missing",
    );
    check_parse_error("*** Begin Patch\n*** End Patch", "changes no file");
    check_parse_error(
        "*** Begin Patch\n*** Frobnicate: a\n*** End Patch",
        "line 2: expected",
    );
    check_parse_error(
        "*** Begin Patch\n*** Update File: a\n*** End of File\n*** End Patch",
        "no hunk is open",
    );
}

fn chunks_of(patch: &str) -> Vec<super::parse::Chunk> {
    let patch = parse(patch).unwrap();
    match patch.ops.into_iter().next().unwrap().kind {
        OpKind::Update { chunks, .. } => chunks,
        _ => panic!("an update"),
    }
}

#[track_caller]
fn check_place(file: &[&str], hunks: &str, expect: &[&str]) {
    check_placing(Placing::Strict, file, hunks, expect);
}

#[track_caller]
fn check_placing(placing: Placing, file: &[&str], hunks: &str, expect: &[&str]) {
    let patch = format!("*** Begin Patch\n*** Update File: f\n{hunks}*** End Patch\n");
    let chunks = chunks_of(&patch);
    let placed = place(file, &chunks, placing, &mut Budget(Budget::DEFAULT))
        .unwrap_or_else(|m| panic!("{}", m.0));
    assert_eq!(placed.lines, expect);
}

#[track_caller]
fn check_miss(file: &[&str], hunks: &str, expect: &str) {
    let patch = format!("*** Begin Patch\n*** Update File: f\n{hunks}*** End Patch\n");
    let miss = place(
        file,
        &chunks_of(&patch),
        Placing::Strict,
        &mut Budget(Budget::DEFAULT),
    )
    .expect_err("the hunk should not be placed");
    assert!(miss.0.contains(expect), "{}", miss.0);
}

#[test]
fn hunks_go_where_their_context_is() {
    let file = ["a", "b", "c", "d", "e"];
    check_place(&file, " b\n-c\n+C\n d\n", &["a", "b", "C", "d", "e"]);
    // Two hunks, each after the previous one.
    check_place(
        &file,
        "@@\n-a\n+A\n@@\n-e\n+E\n",
        &["A", "b", "c", "d", "E"],
    );
    // A pure addition goes right after its `@@` line, not at the end of the file.
    check_place(
        &file,
        "@@ b\n+after b\n",
        &["a", "b", "after b", "c", "d", "e"],
    );
    // ... or at the end with `*** End of File`.
    check_place(
        &file,
        "@@\n+tail\n*** End of File\n",
        &["a", "b", "c", "d", "e", "tail"],
    );
    // `*** End of File` holds the hunk to the end.
    check_place(
        &["x", "y", "x"],
        " x\n+z\n*** End of File\n",
        &["x", "y", "x", "z"],
    );
    // The anchor picks between repeated context.
    check_place(
        &["f", "x", "g", "x"],
        "@@ g\n-x\n+X\n",
        &["f", "x", "g", "X"],
    );
}

#[test]
fn whitespace_is_a_reported_fallback_and_the_file_keeps_its_context() {
    let file = ["def f():", "    return 1  ", "x"];
    let patch = "*** Begin Patch\n*** Update File: f\n def f():\n-  return 1\n+    return 2\n x\n*** End Patch";
    let chunks = chunks_of(patch);
    let placed = place(&file, &chunks, Placing::Codex, &mut Budget(Budget::DEFAULT)).unwrap();
    assert_eq!(placed.lines, ["def f():", "    return 2", "x"]);
    assert_eq!(placed.loose, [1]);
}

#[test]
fn a_missing_hunk_points_at_the_closest_lines() {
    let file = ["a", "b", "c", "d"];
    check_miss(
        &file,
        " b\n c\n-D\n",
        "its 3 context and removed lines were not found.\nClosest: file lines 2-3 match the hunk's first 2 lines; then the hunk has\n  `D`\nwhere line 4 of the file is `d`",
    );
    check_miss(
        &file,
        "-zzz\n",
        "No line of the file from there on is `zzz`",
    );
    check_miss(
        &file,
        "@@ nowhere\n+x\n",
        "its `@@ nowhere` line was not found",
    );
    check_miss(&file, "+x\n", "only adds lines and does not say where");
    check_miss(
        &file,
        " b\n+x\n*** End of File\n",
        "which is not the end of the file",
    );
    // A later hunk is searched after the earlier one only.
    check_miss(&file, "@@\n-c\n+C\n@@\n-a\n+A\n", "after line 3");
}

#[test]
fn search_is_linear_on_repetitive_input() {
    // 200,000 equal lines and a hunk of 50,000 of them plus one that never matches:
    // a naive search would compare 10^10 lines.
    let file: Vec<&str> = std::iter::repeat_n("x", 200_000).collect();
    let mut hunk = "-x\n".repeat(50_000);
    hunk.push_str("-y\n");
    let patch = format!("*** Begin Patch\n*** Update File: f\n{hunk}*** End Patch\n");
    let miss = place(
        &file,
        &chunks_of(&patch),
        Placing::Codex,
        &mut Budget(Budget::DEFAULT),
    )
    .expect_err("no match");
    assert!(
        miss.0.contains("match the hunk's first 50000 lines"),
        "{}",
        &miss.0[..200]
    );
}

#[test]
fn many_hunks_that_each_scan_the_file_run_out_of_budget() {
    // Each hunk matches only when whitespace is ignored, so the exact and the
    // trailing-space searches scan to the end of the file for every hunk.
    let file: Vec<String> = (0..100_000).map(|i| format!("  line {i}")).collect();
    let file: Vec<&str> = file.iter().map(String::as_str).collect();
    let hunks: String = (0..50_000)
        .map(|i| format!("@@\n-line {i}\n+x\n"))
        .collect();
    let patch = format!("*** Begin Patch\n*** Update File: f\n{hunks}*** End Patch\n");
    let miss = place(
        &file,
        &chunks_of(&patch),
        Placing::Codex,
        &mut Budget(Budget::DEFAULT),
    )
    .expect_err("too costly");
    assert!(
        miss.0
            .contains("looked at more lines than a patch should need"),
        "{}",
        miss.0
    );
}

#[test]
fn codex_places_pure_additions_at_the_end_and_retries_without_a_final_blank() {
    let file = ["a", "b", "c"];
    // Lines that are only added go at the end, even under an `@@` line.
    check_placing(Placing::Codex, &file, "@@ a\n+x\n", &["a", "b", "c", "x"]);
    check_placing(Placing::Codex, &file, "+x\n", &["a", "b", "c", "x"]);
    // ... before a last empty line.
    check_placing(Placing::Codex, &["a", ""], "+x\n", &["a", "x", ""]);
    // A final empty context line stands for the file's last line break.
    check_placing(Placing::Codex, &file, " b\n-c\n+C\n\n", &["a", "b", "C"]);
    check_placing(Placing::Codex, &file, " c\n-\n+d\n", &["a", "b", "c", "d"]);
    // An added line and a later hunk keep file order.
    check_placing(
        Placing::Codex,
        &file,
        "@@\n+end\n@@\n-a\n+A\n",
        &["A", "b", "c", "end"],
    );
    // Typographic quotes and dashes in the file match their ASCII forms.
    check_placing(
        Placing::Codex,
        &["say(\u{201C}hi\u{201D}) \u{2014} ok", "z"],
        "-say(\"hi\") - ok\n+said\n",
        &["said", "z"],
    );
}

#[test]
fn headers_may_have_whitespace_around_them() {
    let patch = parse(
        "  *** Begin Patch  \n *** Add File: a.txt \n+x\n  *** Update File: b.txt\t\n *** Move to: c.txt \n@@  \n-y\n+z\n *** End of File \n*** End Patch \n",
    )
    .unwrap();
    assert_eq!(patch.ops[0].path, "a.txt");
    assert_eq!(patch.ops[0].kind, OpKind::Add(vec!["x".into()]));
    let OpKind::Update { move_to, chunks } = &patch.ops[1].kind else {
        panic!("an update")
    };
    assert_eq!(
        (patch.ops[1].path.as_str(), move_to.as_deref()),
        ("b.txt", Some("c.txt"))
    );
    assert!(chunks[0].eof && chunks[0].anchor.is_none());
}
