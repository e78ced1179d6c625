//! Small PDFs written from scratch for tests: well-formed ones with text, image-only
//! and blank pages, and hostile ones (a huge page tree, a loop in the tree, nesting
//! without end), each with a correct cross-reference table unless the test breaks it.

/// A PDF made of `objects` (object `i + 1` is `objects[i]`, its body between `obj`
/// and `endobj`), with object 1 as the catalog.
pub fn build(objects: &[String]) -> Vec<u8> {
    let mut out = b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n".to_vec();
    let mut offsets = Vec::with_capacity(objects.len());
    for (i, body) in objects.iter().enumerate() {
        offsets.push(out.len());
        out.extend_from_slice(format!("{} 0 obj\n{body}\nendobj\n", i + 1).as_bytes());
    }
    let xref = out.len();
    out.extend_from_slice(
        format!("xref\n0 {}\n0000000000 65535 f \n", objects.len() + 1).as_bytes(),
    );
    for o in offsets {
        out.extend_from_slice(format!("{o:010} 00000 n \n").as_bytes());
    }
    out.extend_from_slice(
        format!(
            "trailer\n<< /Size {} /Root 1 0 R >>\nstartxref\n{xref}\n%%EOF\n",
            objects.len() + 1
        )
        .as_bytes(),
    );
    out
}

fn stream(content: &str) -> String {
    format!(
        "<< /Length {} >>\nstream\n{content}\nendstream",
        content.len()
    )
}

/// What one page of [`pages`] holds.
#[derive(Debug, Clone, Copy)]
pub enum Content<'a> {
    /// A line of text in Helvetica.
    Text(&'a str),
    /// A 2x2 grey image and no text, as a scanned page.
    Image,
    /// Nothing.
    Blank,
}

/// A PDF with one page per entry of `content`.
pub fn pages(content: &[Content<'_>]) -> Vec<u8> {
    // 1 catalog, 2 pages, 3 font, 4 image, then a page and its content per entry.
    let first = 5;
    let kids: Vec<String> = (0..content.len())
        .map(|i| format!("{} 0 R", first + 2 * i))
        .collect();
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {} >>",
            kids.join(" "),
            content.len()
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
        "<< /Type /XObject /Subtype /Image /Width 2 /Height 2 /ColorSpace /DeviceGray /BitsPerComponent 8 /Length 4 >>\nstream\n\u{1}\u{2}\u{3}\u{4}\nendstream".to_owned(),
    ];
    for (i, c) in content.iter().enumerate() {
        let body = match c {
            Content::Text(t) => format!("BT /F1 12 Tf 72 720 Td ({t}) Tj ET"),
            Content::Image => "q 200 0 0 200 72 400 cm /Im1 Do Q".to_owned(),
            Content::Blank => String::new(),
        };
        objects.push(format!(
            "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents {} 0 R /Resources << /Font << /F1 3 0 R >> /XObject << /Im1 4 0 R >> >> >>",
            first + 2 * i + 1
        ));
        objects.push(stream(&body));
    }
    build(&objects)
}

/// A PDF whose page tree has `count` pages, all drawing the same line of text.
pub fn many_pages(count: usize) -> Vec<u8> {
    let kids: Vec<String> = (0..count).map(|i| format!("{} 0 R", 5 + i)).collect();
    let mut objects = vec![
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        format!(
            "<< /Type /Pages /Kids [{}] /Count {count} >>",
            kids.join(" ")
        ),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
        stream("BT /F1 12 Tf 72 720 Td (the same page again) Tj ET"),
    ];
    objects.extend((0..count).map(|_| {
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R /Resources << /Font << /F1 3 0 R >> >> >>".to_owned()
    }));
    build(&objects)
}

/// Three pages; the second inherits its resources from a parent chain that loops
/// (`Parent` of the tree's root points at a node whose `Parent` points back), which
/// sends a naive reader into endless recursion.
pub fn parent_loop() -> Vec<u8> {
    build(&[
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [4 0 R 6 0 R 8 0 R] /Count 3 /Parent 3 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [] /Count 0 /Parent 2 0 R >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 5 0 R /Resources << /Font << /F1 10 0 R >> >> >>".to_owned(),
        stream("BT /F1 12 Tf 72 720 Td (before the loop) Tj ET"),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 7 0 R >>".to_owned(),
        stream("BT /F1 12 Tf 72 720 Td (inside the loop) Tj ET"),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 9 0 R /Resources << /Font << /F1 10 0 R >> >> >>".to_owned(),
        stream("BT /F1 12 Tf 72 720 Td (after the loop) Tj ET"),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
    ])
}

/// A one-page PDF with an object of arrays nested `depth` deep.
pub fn deep_nesting(depth: usize) -> Vec<u8> {
    let deep = format!("{}1{}", "[".repeat(depth), "]".repeat(depth));
    build(&[
        "<< /Type /Catalog /Pages 2 0 R /Deep 5 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R] /Count 1 >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /MediaBox [0 0 612 792] /Contents 4 0 R >>".to_owned(),
        stream(""),
        deep,
    ])
}

/// Three pages; the second draws a form that draws itself, which sends a naive reader
/// into recursion until its stack overflows.
pub fn form_loop() -> Vec<u8> {
    build(&[
        "<< /Type /Catalog /Pages 2 0 R >>".to_owned(),
        "<< /Type /Pages /Kids [3 0 R 5 0 R 7 0 R] /Count 3 /MediaBox [0 0 612 792] >>".to_owned(),
        "<< /Type /Page /Parent 2 0 R /Contents 4 0 R /Resources << /Font << /F1 9 0 R >> >> >>".to_owned(),
        stream("BT /F1 12 Tf 72 720 Td (first page) Tj ET"),
        "<< /Type /Page /Parent 2 0 R /Contents 6 0 R /Resources << /XObject << /X1 10 0 R >> >> >>".to_owned(),
        stream("/X1 Do"),
        "<< /Type /Page /Parent 2 0 R /Contents 8 0 R /Resources << /Font << /F1 9 0 R >> >> >>".to_owned(),
        stream("BT /F1 12 Tf 72 720 Td (third page) Tj ET"),
        "<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>".to_owned(),
        "<< /Type /XObject /Subtype /Form /BBox [0 0 10 10] /Resources << /XObject << /X1 10 0 R >> >> /Length 6 >>\nstream\n/X1 Do\nendstream".to_owned(),
    ])
}
