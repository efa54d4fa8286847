//! Decoding the three line-table formats CPython 3.9–3.13 use, from a copied table.
//!
//! All decoders are total: any byte string and any offset produce `Some(line)` or `None`, never
//! a panic, and run in time linear in the table length.

use super::layout::LineTableKind;

/// The line executing at `lasti` in a code object whose first line is `firstlineno`.
///
/// `lasti` is what the frame reports, in the unit of its version: a byte offset on 3.9, a
/// code-unit index on 3.10 (`f_lasti`) and on 3.11+ (`instr - co_code_adaptive`, in code units).
/// A negative `lasti` (the frame has not started) is the definition line.
pub(crate) fn line_for(
    kind: LineTableKind,
    table: &[u8],
    firstlineno: i32,
    lasti: i64,
) -> Option<u32> {
    if lasti < 0 {
        return u32::try_from(firstlineno).ok();
    }
    let line = match kind {
        LineTableKind::Lnotab => lnotab(table, firstlineno, lasti),
        LineTableKind::Linetable310 => linetable310(table, firstlineno, lasti.saturating_mul(2)),
        LineTableKind::Locations311 => locations311(table, firstlineno, lasti),
    }?;
    u32::try_from(line).ok().filter(|&l| l > 0)
}

/// 3.9 `co_lnotab`: pairs of (unsigned byte-offset increment, signed line increment). The line
/// of `addr` is the first line plus the line increments of every pair whose cumulative offset is
/// at most `addr`.
fn lnotab(table: &[u8], firstlineno: i32, addr: i64) -> Option<i64> {
    let mut line = i64::from(firstlineno);
    let mut at: i64 = 0;
    for pair in table.chunks_exact(2) {
        at += i64::from(pair[0]);
        if at > addr {
            break;
        }
        line += i64::from(pair[1] as i8);
    }
    Some(line)
}

/// 3.10 `co_linetable`: pairs of (unsigned byte length, signed line delta); a delta of -128
/// means the range has no line. Ranges are half-open `[start, start + length)` in bytes.
fn linetable310(table: &[u8], firstlineno: i32, addr: i64) -> Option<i64> {
    let mut line = i64::from(firstlineno);
    let mut start: i64 = 0;
    for pair in table.chunks_exact(2) {
        let end = start + i64::from(pair[0]);
        let delta = pair[1] as i8;
        let this = if delta == -128 {
            None
        } else {
            line += i64::from(delta);
            Some(line)
        };
        if start <= addr && addr < end {
            return this;
        }
        start = end;
    }
    None
}

/// A cursor over a 3.11+ location table.
struct Cursor<'a> {
    table: &'a [u8],
    pos: usize,
}

impl Cursor<'_> {
    fn byte(&mut self) -> Option<u8> {
        let b = *self.table.get(self.pos)?;
        self.pos += 1;
        Some(b)
    }
    /// Unsigned varint: 6-bit groups, least significant first, bit 6 = more follow.
    fn varint(&mut self) -> Option<u64> {
        let mut b = self.byte()?;
        let mut value = u64::from(b & 63);
        let mut shift = 6u32;
        while b & 64 != 0 {
            b = self.byte()?;
            if shift >= 60 {
                return None;
            }
            value |= u64::from(b & 63) << shift;
            shift += 6;
        }
        Some(value)
    }
    /// Signed varint: the low bit is the sign.
    fn svarint(&mut self) -> Option<i64> {
        let u = self.varint()?;
        let magnitude = (u >> 1) as i64;
        Some(if u & 1 != 0 { -magnitude } else { magnitude })
    }
}

/// 3.11+ location table (Objects/locations.md in CPython): each entry starts with a byte
/// `1 cccc lll`: code `cccc`, length `lll + 1` code units. Codes 0–9 (short form) and 10–12
/// (one-line forms, delta = code − 10) carry column bytes; 13 = line delta only (svarint);
/// 14 = long form (svarint line delta, then end-line, column and end-column varints);
/// 15 = no location.
fn locations311(table: &[u8], firstlineno: i32, index: i64) -> Option<i64> {
    let mut c = Cursor { table, pos: 0 };
    let mut line = i64::from(firstlineno);
    let mut start: i64 = 0;
    while let Some(first) = c.byte() {
        if first & 0x80 == 0 {
            // Not an entry start: the table is corrupt (or we lost sync).
            return None;
        }
        let code = (first >> 3) & 15;
        let len = i64::from(first & 7) + 1;
        let this = match code {
            15 => None,
            14 => {
                line = line.saturating_add(c.svarint()?);
                c.varint()?; // end line delta
                c.varint()?; // column + 1
                c.varint()?; // end column + 1
                Some(line)
            }
            13 => {
                line = line.saturating_add(c.svarint()?);
                Some(line)
            }
            10..=12 => {
                line += i64::from(code - 10);
                c.byte()?; // column
                c.byte()?; // end column
                Some(line)
            }
            _ => {
                c.byte()?; // packed columns
                Some(line)
            }
        };
        let end = start + len;
        if start <= index && index < end {
            return this;
        }
        start = end;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lnotab_39() {
        // lines: 10 at 0, 11 at 4, 13 at 10, 12 at 20 (negative delta).
        let t = [4u8, 1, 6, 2, 10, (-1i8) as u8];
        assert_eq!(line_for(LineTableKind::Lnotab, &t, 10, 0), Some(10));
        assert_eq!(line_for(LineTableKind::Lnotab, &t, 10, 3), Some(10));
        assert_eq!(line_for(LineTableKind::Lnotab, &t, 10, 4), Some(11));
        assert_eq!(line_for(LineTableKind::Lnotab, &t, 10, 12), Some(13));
        assert_eq!(line_for(LineTableKind::Lnotab, &t, 10, 25), Some(12));
        assert_eq!(line_for(LineTableKind::Lnotab, &t, 10, -1), Some(10));
    }

    #[test]
    fn linetable_310() {
        // [0,4) line 11, [4,8) no line, [8,14) line 13.
        let t = [4u8, 1, 4, 0x80, 6, 2];
        let k = LineTableKind::Linetable310;
        assert_eq!(line_for(k, &t, 10, 0), Some(11)); // byte 0
        assert_eq!(line_for(k, &t, 10, 2), None); // byte 4
        assert_eq!(line_for(k, &t, 10, 4), Some(13)); // byte 8
        assert_eq!(line_for(k, &t, 10, 100), None);
    }

    #[test]
    fn locations_311() {
        let k = LineTableKind::Locations311;
        // entry 1: code 13 (no columns), len 2, delta +1 (svarint 2)
        // entry 2: code 15 (none), len 1
        // entry 3: code 11 (one-line, +1), len 3, two column bytes
        // entry 4: code 14 (long), len 1, delta -2 (svarint 5), end 0, col 1, endcol 1
        // entry 5: code 0 (short), len 1, one column byte
        let t = [
            0x80 | (13 << 3) | 1,
            2,
            0x80 | (15 << 3),
            0x80 | (11 << 3) | 2,
            4,
            9,
            0x80 | (14 << 3),
            5,
            0,
            1,
            1,
            0x80,
            0x11,
        ];
        assert_eq!(line_for(k, &t, 100, 0), Some(101));
        assert_eq!(line_for(k, &t, 100, 1), Some(101));
        assert_eq!(line_for(k, &t, 100, 2), None);
        assert_eq!(line_for(k, &t, 100, 3), Some(102));
        assert_eq!(line_for(k, &t, 100, 5), Some(102));
        assert_eq!(line_for(k, &t, 100, 6), Some(100));
        assert_eq!(line_for(k, &t, 100, 7), Some(100));
        assert_eq!(line_for(k, &t, 100, 8), None);
        // multi-byte varint: delta +100 = svarint 200 = 0b11_001000 -> [0x40|8, 3]
        let t2 = [0x80 | (13 << 3), 0x40 | 8, 3];
        assert_eq!(line_for(k, &t2, 1, 0), Some(101));
    }

    #[test]
    fn garbage_never_panics() {
        let mut rng = span_profile_core::internal::XorShift(0x1234_5678_9abc_def0);
        for _ in 0..2000 {
            let mut t = [0u8; 64];
            for b in &mut t {
                *b = rng.next_u64() as u8;
            }
            let state = rng.next_u64();
            for kind in [
                LineTableKind::Lnotab,
                LineTableKind::Linetable310,
                LineTableKind::Locations311,
            ] {
                let _ = line_for(kind, &t, i32::MAX, (state % 300) as i64);
                let _ = line_for(kind, &t, i32::MIN, i64::MAX);
                let _ = line_for(kind, &[0xff; 64], 0, 3);
            }
        }
    }
}
