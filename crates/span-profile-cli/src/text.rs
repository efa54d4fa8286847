//! Text from the store, made safe for a terminal.

use std::fmt;

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

#[cfg(test)]
mod tests {
    use super::Shown;

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
