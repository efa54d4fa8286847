//! Trace and span identifiers.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

/// A W3C / OpenTelemetry trace id: 16 bytes, never all zero.
///
/// Prints and parses as 32 lowercase hex digits.
///
/// ```
/// use span_profile_core::TraceId;
/// let id: TraceId = "4bf92f3577b34da6a3ce929d0e0e4736".parse().unwrap();
/// assert_eq!(id.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
/// assert!("not-hex".parse::<TraceId>().is_err());
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct TraceId {
    // Two halves rather than a `u128`, whose 16-byte alignment would pad every sample and
    // span record that holds an id to a multiple of 16 bytes. Never both zero. The derived
    // order and equality are those of the 128-bit value (high half first).
    hi: u64,
    lo: u64,
}

/// A W3C / OpenTelemetry span id: 8 bytes, never all zero.
///
/// Prints and parses as 16 lowercase hex digits.
///
/// ```
/// use span_profile_core::SpanId;
/// let id = SpanId::from_u64(0x00f067aa0ba902b7).unwrap();
/// assert_eq!(id.to_string(), "00f067aa0ba902b7");
/// assert_eq!("00f067aa0ba902b7".parse::<SpanId>().unwrap(), id);
/// ```
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(into = "String", try_from = "String")]
pub struct SpanId(NonZeroU64);

/// Why a string is not a valid id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseIdError {
    /// The input does not have the expected number of hex digits.
    #[error("expected {expected} lowercase hex digits, got {got} characters")]
    Length {
        /// Digits expected: 32 for a trace id, 16 for a span id.
        expected: usize,
        /// Characters received.
        got: usize,
    },
    /// The input contains a character that is not `0-9a-f` (upper case is accepted).
    #[error("invalid hex digit {0:?}; ids are written as lowercase hex, e.g. 00f067aa0ba902b7")]
    Digit(char),
    /// All digits are zero, which OpenTelemetry reserves for "no id".
    #[error("an all-zero id means \"no id\" and is not valid")]
    Zero,
}

fn parse_hex(s: &str, digits: usize) -> Result<u128, ParseIdError> {
    if s.len() != digits || !s.is_ascii() {
        return Err(ParseIdError::Length {
            expected: digits,
            got: s.chars().count(),
        });
    }
    let mut v: u128 = 0;
    for c in s.chars() {
        let d = c.to_digit(16).ok_or(ParseIdError::Digit(c))?;
        v = (v << 4) | u128::from(d);
    }
    Ok(v)
}

impl TraceId {
    /// Builds an id from its integer value; `None` for zero.
    pub const fn from_u128(v: u128) -> Option<Self> {
        if v == 0 {
            return None;
        }
        Some(Self {
            hi: (v >> 64) as u64,
            lo: v as u64,
        })
    }
    /// Builds an id from its 16 big-endian bytes; `None` for all zeros.
    pub fn from_bytes(b: [u8; 16]) -> Option<Self> {
        Self::from_u128(u128::from_be_bytes(b))
    }
    /// The integer value.
    pub const fn to_u128(self) -> u128 {
        ((self.hi as u128) << 64) | self.lo as u128
    }
    /// The 16 big-endian bytes, as OTLP's `Link.trace_id` carries them.
    pub const fn to_bytes(self) -> [u8; 16] {
        self.to_u128().to_be_bytes()
    }
}

impl SpanId {
    /// Builds an id from its integer value; `None` for zero.
    pub const fn from_u64(v: u64) -> Option<Self> {
        match NonZeroU64::new(v) {
            Some(n) => Some(Self(n)),
            None => None,
        }
    }
    /// Builds an id from its 8 big-endian bytes; `None` for all zeros.
    pub fn from_bytes(b: [u8; 8]) -> Option<Self> {
        Self::from_u64(u64::from_be_bytes(b))
    }
    /// The integer value.
    pub const fn to_u64(self) -> u64 {
        self.0.get()
    }
    /// The 8 big-endian bytes, as OTLP's `Link.span_id` carries them.
    pub const fn to_bytes(self) -> [u8; 8] {
        self.0.get().to_be_bytes()
    }
}

impl FromStr for TraceId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::from_u128(parse_hex(s, 32)?).ok_or(ParseIdError::Zero)
    }
}

impl FromStr for SpanId {
    type Err = ParseIdError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        // parse_hex with 16 digits yields at most u64::MAX.
        let v = parse_hex(s, 16)? as u64;
        Self::from_u64(v).ok_or(ParseIdError::Zero)
    }
}

impl fmt::Display for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.to_u128())
    }
}
impl fmt::Debug for TraceId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "TraceId({self})")
    }
}
impl fmt::Display for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:016x}", self.0.get())
    }
}
impl fmt::Debug for SpanId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "SpanId({self})")
    }
}

impl From<TraceId> for String {
    fn from(v: TraceId) -> String {
        v.to_string()
    }
}
impl From<SpanId> for String {
    fn from(v: SpanId) -> String {
        v.to_string()
    }
}
impl TryFrom<String> for TraceId {
    type Error = ParseIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}
impl TryFrom<String> for SpanId {
    type Error = ParseIdError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        s.parse()
    }
}

/// The span a sample belongs to: the innermost active span, and the local root of its trace
/// in this process (the first span of the trace here; a remote parent starts a new local root).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct SpanContext {
    /// The trace.
    pub trace_id: TraceId,
    /// The innermost span that was current.
    pub span_id: SpanId,
    /// The local root span of `span_id`; equal to it for a local root.
    pub local_root_span_id: SpanId,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trace_ids_order_and_compare_as_their_128_bit_values() {
        let values = [
            1u128,
            2,
            u128::from(u64::MAX),
            1 << 64,
            (1 << 64) + 1,
            u128::MAX,
        ];
        for &a in &values {
            for &b in &values {
                let (x, y) = (
                    TraceId::from_u128(a).unwrap(),
                    TraceId::from_u128(b).unwrap(),
                );
                assert_eq!(x.cmp(&y), a.cmp(&b), "{a:#x} against {b:#x}");
                assert_eq!(x == y, a == b);
            }
            assert_eq!(TraceId::from_u128(a).unwrap().to_u128(), a);
        }
        assert_eq!(TraceId::from_u128(0), None);
        assert_eq!(TraceId::from_bytes([0; 16]), None);
    }

    #[test]
    fn ids_roundtrip_through_lowercase_hex() {
        let t: TraceId = "4BF92F3577B34DA6A3CE929D0E0E4736".parse().unwrap();
        assert_eq!(t.to_string(), "4bf92f3577b34da6a3ce929d0e0e4736");
        let s = SpanId::from_u64(1).unwrap();
        assert_eq!(s.to_string(), "0000000000000001");
        assert_eq!(SpanId::from_bytes(s.to_bytes()), Some(s));
        assert_eq!(TraceId::from_bytes(t.to_bytes()), Some(t));
    }

    #[test]
    fn malformed_ids_are_errors_not_panics() {
        for bad in [
            "",
            "0",
            "zz",
            "00f067aa0ba902b",
            "00f067aa0ba902b7a",
            "00f067aa0ba902é",
            "+0f067aa0ba902b7",
        ] {
            assert!(bad.parse::<SpanId>().is_err(), "{bad:?}");
        }
        assert_eq!(
            "0000000000000000".parse::<SpanId>(),
            Err(ParseIdError::Zero)
        );
        assert!(matches!(
            "x".repeat(32).parse::<TraceId>(),
            Err(ParseIdError::Digit('x'))
        ));
        assert!("0".repeat(32).parse::<TraceId>().is_err());
        assert!("ü".repeat(16).parse::<TraceId>().is_err());
    }

    #[test]
    fn ids_serialize_as_hex_strings() {
        let s = SpanId::from_u64(0xab).unwrap();
        assert_eq!(serde_json::to_string(&s).unwrap(), "\"00000000000000ab\"");
        assert!(serde_json::from_str::<SpanId>("\"0\"").is_err());
    }
}
