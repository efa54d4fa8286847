//! The span processor's work, done natively: read the SDK span, record it in the span table,
//! cache the [`PyActiveSpan`] on it and set `pyroscope.profile.id`.
//!
//! The OpenTelemetry SDK's `Span`/`ReadableSpan` keep their state in plain instance attributes
//! (`_context`, `_parent`, `_name`, `_start_time`, `_end_time`, `_attributes`) behind Python
//! properties. Reading the attributes directly saves a Python call per property, which is most
//! of the hook's cost; every read falls back to the public property when the attribute is not
//! there, so a different span class still works, only slower.

use std::borrow::Cow;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PyString, PyTuple};

/// `pyroscope.profile.id`.
pub(crate) const PROFILE_ID_KEY: &str = "pyroscope.profile.id";
/// `http.route`.
pub(crate) const ROUTE_KEY: &str = "http.route";

/// `id` as 16 lowercase hex digits (what `SpanId`'s `Display` prints, without the formatting
/// machinery, which costs more than the rest of the conversion).
pub(crate) fn hex16(id: u64) -> String {
    const DIGITS: &[u8; 16] = b"0123456789abcdef";
    let mut out = String::with_capacity(16);
    for shift in (0..16).rev() {
        out.push(char::from(DIGITS[((id >> (shift * 4)) & 0xf) as usize]));
    }
    out
}

/// A span attribute: the SDK's private field, else the public property.
pub(crate) fn field<'py>(
    span: &Bound<'py, PyAny>,
    private: &Bound<'py, PyString>,
    public: &Bound<'py, PyString>,
) -> PyResult<Bound<'py, PyAny>> {
    match span.getattr_opt(private)? {
        Some(v) => Ok(v),
        None => span.getattr(public),
    }
}

/// The fields of an OpenTelemetry `SpanContext`, unconverted.
pub(crate) struct SpanContextFields<'py> {
    trace_id: Bound<'py, PyAny>,
    /// The span id.
    pub(crate) span_id: u64,
    /// The span lives in another process.
    pub(crate) is_remote: bool,
}

impl SpanContextFields<'_> {
    /// The trace id (a 128-bit conversion, so only done when needed).
    pub(crate) fn trace_id(&self) -> PyResult<u128> {
        self.trace_id.extract()
    }
}

/// The ids of an OpenTelemetry `SpanContext`. It is a tuple subclass whose first three items
/// are `trace_id`, `span_id` and `is_remote` (`SpanContext.__new__`); anything else is read
/// through the properties.
pub(crate) fn span_context<'py>(sc: &Bound<'py, PyAny>) -> PyResult<SpanContextFields<'py>> {
    if let Ok(t) = sc.cast::<PyTuple>() {
        if t.len() >= 3 {
            let (a, b, c) = (t.get_item(0)?, t.get_item(1)?, t.get_item(2)?);
            if a.is_instance_of::<PyInt>()
                && b.is_instance_of::<PyInt>()
                && c.is_instance_of::<PyBool>()
            {
                return Ok(SpanContextFields {
                    trace_id: a,
                    span_id: b.extract()?,
                    is_remote: c.is_truthy()?,
                });
            }
        }
    }
    let py = sc.py();
    Ok(SpanContextFields {
        trace_id: sc.getattr(intern!(py, "trace_id"))?,
        span_id: sc.getattr(intern!(py, "span_id"))?.extract()?,
        is_remote: sc.getattr(intern!(py, "is_remote"))?.is_truthy()?,
    })
}

/// The dict behind the SDK's `BoundedAttributes` (its `_dict`), if this is one.
fn attributes_dict<'py>(attrs: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyDict>>> {
    let py = attrs.py();
    if let Ok(d) = attrs.cast::<PyDict>() {
        return Ok(Some(d.clone()));
    }
    Ok(match attrs.getattr_opt(intern!(py, "_dict"))? {
        Some(d) => d.cast_into::<PyDict>().ok(),
        None => None,
    })
}

/// The span's `http.route`, as a string (non-string values are converted with `str()`).
pub(crate) fn route_of<'py>(span: &Bound<'py, PyAny>) -> PyResult<Option<Bound<'py, PyString>>> {
    let py = span.py();
    let attrs = field(span, intern!(py, "_attributes"), intern!(py, "attributes"))?;
    if attrs.is_none() {
        return Ok(None);
    }
    let value = match attributes_dict(&attrs)? {
        Some(d) => d.get_item(intern!(py, ROUTE_KEY))?,
        None => {
            let v = attrs.call_method1(intern!(py, "get"), (intern!(py, ROUTE_KEY),))?;
            (!v.is_none()).then_some(v)
        }
    };
    Ok(match value {
        None => None,
        Some(v) => Some(match v.cast_into::<PyString>() {
            Ok(s) => s,
            Err(e) => e.into_inner().str()?,
        }),
    })
}

/// A Python string as Rust text (borrowed when the interpreter allows it).
pub(crate) fn text<'a>(s: &'a Bound<'_, PyString>) -> PyResult<Cow<'a, str>> {
    s.to_cow()
}

/// Sets `pyroscope.profile.id` on a span that is being started. The SDK's `set_attribute`
/// takes two locks and validates the value; during `on_start` the span is not yet visible to
/// any other thread and the value is a 16-character string, so when the attributes are the
/// SDK's mutable `BoundedAttributes` with room and no value-length cap under 16, the entry is
/// written into its dict directly. Otherwise `set_attribute` is called.
pub(crate) fn set_profile_id(span: &Bound<'_, PyAny>, profile_id: &str) -> PyResult<()> {
    let py = span.py();
    if let Some(attrs) = span.getattr_opt(intern!(py, "_attributes"))? {
        if let Some(d) = attributes_dict(&attrs)? {
            let mutable = attrs
                .getattr_opt(intern!(py, "_immutable"))?
                .is_some_and(|v| v.is_instance_of::<PyBool>() && !v.is_truthy().unwrap_or(true));
            let has_room = match attrs.getattr_opt(intern!(py, "maxlen"))? {
                Some(m) if m.is_none() => true,
                Some(m) => m.extract::<usize>().is_ok_and(|m| d.len() < m),
                None => false,
            };
            let long_enough = match attrs.getattr_opt(intern!(py, "max_value_len"))? {
                Some(m) if m.is_none() => true,
                Some(m) => m.extract::<usize>().is_ok_and(|m| m >= profile_id.len()),
                None => false,
            };
            if mutable && has_room && long_enough {
                return d.set_item(intern!(py, PROFILE_ID_KEY), profile_id);
            }
        }
    }
    span.call_method1(
        intern!(py, "set_attribute"),
        (intern!(py, PROFILE_ID_KEY), profile_id),
    )
    .map(drop)
}
