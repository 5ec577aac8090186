//! Error text for people: an error with its causes on one line ([`error_chain`]), and
//! messages made safe to print ([`sanitize`], [`shorten`]).
//!
//! Messages quote what images and their users control (variables, annotations, paths in
//! the rootfs): every line nvc writes to a log, to stderr or to runc's log is one line
//! without control characters, so a value can neither forge another log line nor send
//! escape codes to a terminal.

use std::borrow::Cow;
use std::fmt::Write as _;

/// An error and its causes on one line, `: `-separated.
pub fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut cur = e.source();
    while let Some(c) = cur {
        s.push_str(": ");
        s.push_str(&c.to_string());
        cur = c.source();
    }
    s
}

/// The longest error message [`shorten`] lets through, in bytes: room for every path and
/// value a real message names.
pub const MAX_MESSAGE: usize = 4096;

/// `message` with every control character escaped (see [`sanitize`]), then cut to about
/// [`MAX_MESSAGE`] bytes, keeping its start and end and saying how much was left out. A
/// container's environment can hold values of megabytes; a message quoting one whole
/// would flood the runtime's log and the user's terminal.
pub fn shorten(message: &str) -> Cow<'_, str> {
    match sanitize(message) {
        Cow::Borrowed(clean) => cut(clean),
        Cow::Owned(clean) => Cow::Owned(cut(&clean).into_owned()),
    }
}

/// `message` with every control character (`char::is_control`: C0, newline, carriage
/// return and tab included, DEL, C1) replaced by an escape: `\n`, `\r`, `\t`, else
/// `\u{1b}`. The result is one line that sends no escape codes to a terminal; it is
/// borrowed when nothing needed escaping, and escaping it again changes nothing.
pub fn sanitize(message: &str) -> Cow<'_, str> {
    if !message.chars().any(needs_escape) {
        return Cow::Borrowed(message);
    }
    let mut out = String::with_capacity(message.len() + 16);
    for c in message.chars() {
        match c {
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if needs_escape(c) => {
                // Writing to a String cannot fail.
                let _ = write!(out, "\\u{{{:x}}}", u32::from(c));
            }
            c => out.push(c),
        }
    }
    Cow::Owned(out)
}

/// Control characters, and the bidirectional marks and overrides with which a text can be
/// shown in another order than it is (a path that reads as another on a terminal).
fn needs_escape(c: char) -> bool {
    c.is_control()
        || matches!(c, '\u{200e}' | '\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{2066}'..='\u{2069}')
}

/// `message` cut to about [`MAX_MESSAGE`] bytes (see [`shorten`]).
fn cut(message: &str) -> Cow<'_, str> {
    if message.len() <= MAX_MESSAGE {
        return message.into();
    }
    let head = floor_char_boundary(message, MAX_MESSAGE * 3 / 4);
    let tail = ceil_char_boundary(message, message.len() - MAX_MESSAGE / 4);
    format!(
        "{} [... {} bytes left out ...] {}",
        &message[..head],
        tail - head,
        &message[tail..]
    )
    .into()
}

fn floor_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i -= 1;
    }
    i
}

fn ceil_char_boundary(s: &str, mut i: usize) -> usize {
    while !s.is_char_boundary(i) {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn short_messages_are_kept() {
        assert_eq!(shorten("cannot open /x"), "cannot open /x");
        let exact = "a".repeat(MAX_MESSAGE);
        assert_eq!(shorten(&exact), exact);
    }

    #[test]
    fn control_characters_are_escaped() {
        let cases = [
            ("a\nb", "a\\nb"),
            ("a\r\nforged line", "a\\r\\nforged line"),
            ("col\tcol", "col\\tcol"),
            ("\u{1b}[31mred\u{1b}[0m", "\\u{1b}[31mred\\u{1b}[0m"),
            ("del\u{7f}", "del\\u{7f}"),
            ("csi\u{9b}2J", "csi\\u{9b}2J"),
            ("nul\0", "nul\\u{0}"),
            ("bell\u{7}", "bell\\u{7}"),
            // A right-to-left override makes "/etc/cod.exe" show as "/etc/exe.doc".
            ("/etc/\u{202e}cod.exe", "/etc/\\u{202e}cod.exe"),
            ("\u{2066}x\u{2069}", "\\u{2066}x\\u{2069}"),
        ];
        for (input, want) in cases {
            let got = sanitize(input);
            assert_eq!(got, want, "{input:?}");
            assert!(matches!(got, Cow::Owned(_)), "{input:?}");
            assert!(!got.chars().any(char::is_control), "{input:?}");
            // Escaping again changes nothing.
            assert!(matches!(sanitize(&got), Cow::Borrowed(_)), "{input:?}");
            assert_eq!(shorten(input), want, "{input:?}");
        }
    }

    #[test]
    fn clean_messages_are_borrowed_unchanged() {
        for clean in [
            "",
            "cannot open /x",
            "GPU-ÄÖÜ 日本語 🚀 \\n (an escaped backslash stays)",
            "a zero\u{200b}width space changes no order and is kept",
        ] {
            assert!(
                matches!(sanitize(clean), Cow::Borrowed(s) if s == clean),
                "{clean:?}"
            );
            assert!(
                matches!(shorten(clean), Cow::Borrowed(s) if s == clean),
                "{clean:?}"
            );
        }
    }

    #[test]
    fn long_messages_with_control_characters_are_escaped_and_cut() {
        let value = "x\u{1b}[2J\n".repeat(1 << 16);
        let message = format!("NVIDIA_VISIBLE_DEVICES: unknown device \"{value}\" (expected)");
        let short = shorten(&message);
        assert!(short.len() < MAX_MESSAGE + 100, "{}", short.len());
        assert!(!short.chars().any(char::is_control));
        assert_eq!(short.lines().count(), 1);
        assert!(short.starts_with("NVIDIA_VISIBLE_DEVICES: unknown device \"x\\u{1b}[2J\\nx"));
        assert!(short.ends_with("[2J\\n\" (expected)"), "{short}");
        assert!(short.contains(" bytes left out ...] "));
    }

    #[test]
    fn long_messages_keep_both_ends() {
        let value = "é".repeat(1 << 20);
        let message = format!("NVIDIA_VISIBLE_DEVICES: unknown device \"{value}\" (expected)");
        let short = shorten(&message);
        assert!(short.len() < MAX_MESSAGE + 100, "{}", short.len());
        assert!(short.starts_with("NVIDIA_VISIBLE_DEVICES: unknown device \"éé"));
        assert!(short.ends_with("éé\" (expected)"));
        let left_out: usize = short
            .split("[... ")
            .nth(1)
            .and_then(|s| s.split(' ').next())
            .and_then(|n| n.parse().ok())
            .unwrap();
        let kept = short.len() - " [... ".len() - " bytes left out ...] ".len();
        assert_eq!(kept - left_out.to_string().len() + left_out, message.len());
    }
}
