//! Text that goes back to the model: names and echoed input made safe to show.

use std::borrow::Cow;
use std::fmt::Write as _;

/// How many characters of model input an error message repeats.
pub const ECHO_CHARS: usize = 100;

/// `text` with every control character but tab escaped (`\n`, `\r`, `\u{1b}`,
/// `\u{7f}`), so a file name or a matched line cannot forge a line of a listing or
/// drive a terminal. Unchanged (borrowed) when there is nothing to escape.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let escaped = |c: char| c.is_control() && c != '\t';
    if !text.chars().any(escaped) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c if escaped(c) => {
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Model input as an error message repeats it: control characters escaped, at most
/// [`ECHO_CHARS`] characters, then a marker saying how much was left out.
pub fn echo(text: &str) -> Cow<'_, str> {
    shorten(text, ECHO_CHARS)
}

/// `text` made safe to show: control characters escaped, at most `max` characters,
/// then a marker (`…[N more bytes]`) saying how much was left out.
pub fn shorten(text: &str, max: usize) -> Cow<'_, str> {
    let (kept, rest) = crate::cut_chars(text, max);
    match (escape_controls(kept), rest) {
        (Cow::Borrowed(_), 0) => Cow::Borrowed(text),
        (shown, 0) => Cow::Owned(shown.into_owned()),
        (shown, _) => Cow::Owned(format!("{shown}…[{} more bytes]", text.len() - kept.len())),
    }
}

/// 128 random bits from the kernel, as 32 hex digits: names and markers nothing else
/// can guess (a shell session's end marker, a session folder). Should the kernel not
/// answer, the time and a stack address stand in.
#[must_use]
pub fn random_hex() -> String {
    let mut bytes = [0u8; 16];
    if getrandom::fill(&mut bytes).is_err() {
        let t = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_nanos())
            ^ (&raw const bytes as u128);
        bytes = t.to_le_bytes();
    }
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `2026-11-30T09:45:12Z`, from days since the epoch by the civil calendar.
pub fn rfc3339(t: std::time::SystemTime) -> String {
    let secs = match t.duration_since(std::time::UNIX_EPOCH) {
        Ok(d) => d.as_secs() as i64,
        Err(e) => -(e.duration().as_secs() as i64),
    };
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Howard Hinnant's days-to-civil.
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

#[cfg(test)]
mod tests {
    use super::{echo, escape_controls};

    #[test]
    fn controls_are_escaped_and_long_input_is_cut_with_a_marker() {
        assert_eq!(escape_controls("plain"), "plain");
        assert_eq!(
            escape_controls("a\nb\tc\u{1b}[31m\u{7f}"),
            "a\\nb\tc\\u{1b}[31m\\u{7f}"
        );
        assert_eq!(echo("short"), "short");
        let long = "x".repeat(1_000_000);
        assert_eq!(
            echo(&long),
            format!("{}…[999900 more bytes]", "x".repeat(100))
        );
        assert_eq!(echo("a\nb"), "a\\nb");
    }
}
