//! Text from the store, made safe for a terminal.

use std::fmt;
use std::io;

/// Shows a string from the store (a span name, a route, a function) with its control
/// characters escaped: a newline prints as `\n`, ESC as `\u{1b}`, so a name cannot move the
/// cursor, recolour the terminal or forge a line of the report. Everything else, Unicode
/// included, prints as it is. `--json` output needs no such care: JSON escapes them.
pub(crate) struct Shown<'a>(pub(crate) &'a str);

impl fmt::Display for Shown<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if !self.0.chars().any(char::is_control) {
            // Padding (`{:<24}`) applies only on this path; an escaped name is shown whole.
            return f.pad(self.0);
        }
        for c in self.0.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Everything the command writes to stdout and stderr passes through this writer
/// ([`outln!`], [`out!`], [`errln!`]): a control character that is not a line break or a tab
/// (ESC, NUL, CR, DEL, the C1 range) is written escaped as [`Shown`] writes it, so nothing a
/// store holds can drive the terminal, even on a line that forgot [`Shown`]. Line breaks
/// pass, as the reports make them: a line break inside a name needs [`Shown`]. JSON output
/// is unchanged, as JSON strings hold no raw control characters.
pub(crate) struct Escaping<W>(pub(crate) W);

impl<W: io::Write> io::Write for Escaping<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_all(buf)?;
        Ok(buf.len())
    }

    fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        let mut from = 0;
        let mut i = 0;
        while let Some(&b) = buf.get(i) {
            let control = match b {
                b'\n' | b'\t' => None,
                0x00..=0x1f | 0x7f => Some((u32::from(b), 1)),
                // U+0080..U+009F in UTF-8; fmt writes whole `str`s, so the pair is never split.
                0xc2 => match buf.get(i + 1) {
                    Some(&c @ 0x80..=0x9f) => Some((u32::from(c), 2)),
                    _ => None,
                },
                _ => None,
            };
            let Some((c, width)) = control else {
                i += 1;
                continue;
            };
            self.0.write_all(buf.get(from..i).unwrap_or_default())?;
            match char::from_u32(c) {
                Some(c) => write!(self.0, "{}", c.escape_default())?,
                None => write!(self.0, "\\u{{{c:x}}}")?,
            }
            i += width;
            from = i;
        }
        self.0.write_all(buf.get(from..).unwrap_or_default())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.0.flush()
    }
}

#[cfg(test)]
mod tests {
    use super::{Escaping, Shown};

    #[test]
    fn the_writer_escapes_what_could_drive_a_terminal() {
        use std::io::Write as _;
        let mut out = Escaping(Vec::new());
        write!(out, "a\x1b[2J\0b\r\u{9b}31m\u{7f}\tok ✓\nnext").unwrap();
        assert_eq!(
            String::from_utf8(out.0).unwrap(),
            "a\\u{1b}[2J\\u{0}b\\r\\u{9b}31m\\u{7f}\tok ✓\nnext"
        );
    }

    #[test]
    fn control_characters_are_escaped_and_the_rest_kept() {
        assert_eq!(
            Shown("a\nb\u{1b}[2J\0").to_string(),
            "a\\nb\\u{1b}[2J\\u{0}"
        );
        assert_eq!(
            Shown("GET /orders/{id} ✓").to_string(),
            "GET /orders/{id} ✓"
        );
        assert_eq!(format!("{:<6}|", Shown("ab")), "ab    |");
        assert_eq!(Shown("tab\there").to_string(), "tab\\there");
    }
}
