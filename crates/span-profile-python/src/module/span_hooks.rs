//! The span processor's work, done natively: read the SDK span, record it in the span table,
//! list the span object for the sampler (`span_objects.rs`, ADR 0011) and set
//! `pyroscope.profile.id`.
//!
//! The OpenTelemetry SDK's `Span`/`ReadableSpan` keep their state in plain instance attributes
//! (`_context`, `_parent`, `_name`, `_start_time`, `_end_time`, `_attributes`) behind Python
//! properties. Reading the attributes directly saves a Python call per property, which is most
//! of the hook's cost; every read falls back to the public property when the attribute is not
//! there, so a different span class still works, only slower. On CPython 3.11–3.13 the
//! attributes are read from the span's inline values rather than by `getattr`
//! (`instance_attrs.rs`, ADR 0018).

use std::borrow::Cow;

use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyBool, PyDict, PyInt, PySlice, PyString, PyTuple};

use span_profile_core::labels::{truncate_label, MAX_LABEL_VALUE_LEN};

use super::instance_attrs::Field;

/// `pyroscope.profile.id`.
pub(crate) const PROFILE_ID_KEY: &str = "pyroscope.profile.id";
/// `http.route`.
pub(crate) const ROUTE_KEY: &str = "http.route";

/// A span id as 16 lowercase hex digits (what `SpanId`'s `Display` prints), kept on the stack:
/// the formatting machinery and a heap string cost more than the rest of the conversion.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Hex16([u8; 16]);

impl Hex16 {
    pub(crate) fn new(id: u64) -> Self {
        const DIGITS: &[u8; 16] = b"0123456789abcdef";
        let mut out = [0u8; 16];
        for (i, d) in out.iter_mut().enumerate() {
            *d = DIGITS[((id >> ((15 - i) * 4)) & 0xf) as usize];
        }
        Self(out)
    }

    pub(crate) fn as_str(&self) -> &str {
        // Every byte is an ASCII hex digit.
        std::str::from_utf8(&self.0).unwrap_or_default()
    }
}

/// The SDK span's fields the hooks read (`instance_attrs.rs`): the private attribute, else
/// the public property, so a different span class still works, only slower.
pub(crate) static CONTEXT: Field = Field::new("_context", "context");
pub(crate) static PARENT: Field = Field::new("_parent", "parent");
pub(crate) static NAME: Field = Field::new("_name", "name");
pub(crate) static START_TIME: Field = Field::new("_start_time", "start_time");
pub(crate) static END_TIME: Field = Field::new("_end_time", "end_time");
pub(crate) static ATTRIBUTES: Field = Field::new("_attributes", "attributes");

/// For the specs: each field's index in the inline values of the span class last seen, or
/// `None` where it is read with `getattr` (CPython before 3.11, or a class not recognised).
#[pyfunction]
pub(crate) fn span_field_indices(py: Python<'_>) -> PyResult<Bound<'_, PyDict>> {
    let d = PyDict::new(py);
    for f in [
        &CONTEXT,
        &PARENT,
        &NAME,
        &START_TIME,
        &END_TIME,
        &ATTRIBUTES,
    ] {
        d.set_item(f.name(), f.learned_index())?;
    }
    Ok(d)
}

/// An `int` as a `u64`: a span id, or a time in nanoseconds. pyo3's `u64` extraction calls
/// `PyLong_AsUnsignedLongLong`, which converts an `int` of more than one 30-bit digit (nearly
/// every span id, and every time since 1970) through `_PyLong_AsByteArray`, several times a
/// span (docs/benchmarks.md, "Why the hooks are built the way they are").
/// `PyLong_AsUnsignedLong` takes the same values on a 64-bit Unix and shifts the digits
/// together in a loop. It takes an `int` (or a subclass) only; anything else goes through
/// pyo3, which calls `__index__`.
pub(crate) fn u64_of(v: &Bound<'_, PyAny>) -> PyResult<u64> {
    // An `unsigned long` is 64 bits on a 64-bit Unix (LP64).
    #[cfg(all(unix, target_pointer_width = "64"))]
    if v.is_instance_of::<PyInt>() {
        // SAFETY: `v` is a live `int` (checked above) and the GIL is held (`Bound`).
        // `PyLong_AsUnsignedLong` only reads it, and on a negative or too large value sets
        // an exception and returns -1, which is taken below.
        let x: u64 = unsafe { pyo3::ffi::PyLong_AsUnsignedLong(v.as_ptr()) };
        if x == u64::MAX {
            if let Some(e) = PyErr::take(v.py()) {
                return Err(e);
            }
        }
        return Ok(x);
    }
    v.extract()
}

/// A span's start or end time in Unix nanoseconds ([`START_TIME`] or [`END_TIME`]), 0 if it
/// is not set or not an integer.
pub(crate) fn time_ns(span: &Bound<'_, PyAny>, field: &Field) -> PyResult<u64> {
    Ok(u64_of(&field.of(span)?).unwrap_or(0))
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
    /// The trace id, through `cache`: the SDK gives a child span its parent's trace id
    /// object, so a request's spans convert it once.
    pub(crate) fn trace_id(&self, cache: &TraceIds) -> PyResult<u128> {
        cache.get(&self.trace_id)
    }
}

/// Trace ids recently converted, by the address of their Python `int`. Converting a 128-bit
/// `int` (`_PyLong_AsByteArray`) was a large share of the hooks' work (docs/benchmarks.md, "Why
/// the hooks are built the way they are"); a request's spans share one trace id object. Each
/// entry holds a reference to its `int`, so while it is cached no other object can take its
/// address, and an `int` never changes value: a hit is exact.
#[derive(Debug, Default)]
pub(crate) struct TraceIds(std::sync::Mutex<TraceIdEntries>);

/// Entries a few threads' requests at once can share.
const TRACE_ID_ENTRIES: usize = 8;

#[derive(Debug, Default)]
struct TraceIdEntries {
    entries: [Option<(Py<PyAny>, u128)>; TRACE_ID_ENTRIES],
    /// The entry the next miss replaces.
    next: usize,
}

impl TraceIds {
    fn entries(&self) -> std::sync::MutexGuard<'_, TraceIdEntries> {
        // Poisoned only by a panic between two assignments; every entry is still a pair.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value of the trace id `id`. No Python code runs while the lock is held: the
    /// conversion (which may call `__index__` on an object that is not an `int`) runs
    /// outside it, only exact `int`s are cached, and the entry let go (an exact `int`, with
    /// no finaliser) is dropped after the lock. Else a finaliser that starts a span would
    /// find the lock taken by its own thread.
    pub(crate) fn get(&self, id: &Bound<'_, PyAny>) -> PyResult<u128> {
        {
            let t = self.entries();
            let hit = t
                .entries
                .iter()
                .flatten()
                .find(|(o, _)| o.as_ptr() == id.as_ptr());
            if let Some(&(_, v)) = hit {
                return Ok(v);
            }
        }
        let v: u128 = id.extract()?;
        if id.is_exact_instance_of::<PyInt>() {
            let old = {
                let mut t = self.entries();
                let i = t.next;
                t.next = (i + 1) % TRACE_ID_ENTRIES;
                t.entries[i].replace((id.clone().unbind(), v))
            };
            drop(old);
        }
        Ok(v)
    }

    /// Lets every cached `int` go.
    pub(crate) fn clear(&self) {
        let entries = std::mem::take(&mut *self.entries());
        drop(entries);
    }
}

/// The ids of an OpenTelemetry `SpanContext`. It is a tuple subclass whose first three items
/// are `trace_id`, `span_id` and `is_remote` (`SpanContext.__new__`); anything else is read
/// through the properties.
pub(crate) fn span_context<'py>(sc: &Bound<'py, PyAny>) -> PyResult<SpanContextFields<'py>> {
    if let Ok(t) = sc.cast::<PyTuple>() {
        if t.len() >= 3 {
            // Borrowed: the tuple holds the items for as long as this call looks at them, so
            // only the trace id, kept for later, takes a reference.
            let (a, b, c) = (
                t.get_borrowed_item(0)?,
                t.get_borrowed_item(1)?,
                t.get_borrowed_item(2)?,
            );
            if a.is_instance_of::<PyInt>()
                && b.is_instance_of::<PyInt>()
                && c.is_instance_of::<PyBool>()
            {
                return Ok(SpanContextFields {
                    trace_id: a.to_owned(),
                    span_id: u64_of(&b)?,
                    is_remote: c.is(PyBool::new(sc.py(), true)),
                });
            }
        }
    }
    let py = sc.py();
    Ok(SpanContextFields {
        trace_id: sc.getattr(intern!(py, "trace_id"))?,
        span_id: u64_of(&sc.getattr(intern!(py, "span_id"))?)?,
        is_remote: sc.getattr(intern!(py, "is_remote"))?.is_truthy()?,
    })
}

/// A span's attributes (`_attributes`, else `attributes`), read once for both the route and
/// `pyroscope.profile.id`.
pub(crate) struct Attributes<'py> {
    attrs: Bound<'py, PyAny>,
    /// The plain dict behind them: the attributes themselves, or the SDK's
    /// `BoundedAttributes._dict`.
    dict: Option<Bound<'py, PyDict>>,
}

impl<'py> Attributes<'py> {
    /// The attributes of `span`, or `None` if it has none.
    pub(crate) fn of(span: &Bound<'py, PyAny>) -> PyResult<Option<Self>> {
        let py = span.py();
        let attrs = ATTRIBUTES.of(span)?;
        if attrs.is_none() {
            return Ok(None);
        }
        let dict = match attrs.cast::<PyDict>() {
            Ok(d) => Some(d.clone()),
            Err(_) => match attrs.getattr_opt(intern!(py, "_dict"))? {
                Some(d) => d.cast_into::<PyDict>().ok(),
                None => None,
            },
        };
        Ok(Some(Self { attrs, dict }))
    }

    /// `http.route`, as a string (non-string values are converted with `str()`; `None` when
    /// that fails).
    pub(crate) fn route(&self) -> PyResult<Option<Bound<'py, PyString>>> {
        let py = self.attrs.py();
        let value = match &self.dict {
            Some(d) => d.get_item(intern!(py, ROUTE_KEY))?,
            None => {
                let v = self
                    .attrs
                    .call_method1(intern!(py, "get"), (intern!(py, ROUTE_KEY),))?;
                (!v.is_none()).then_some(v)
            }
        };
        Ok(value.and_then(as_py_string))
    }

    /// The dict `pyroscope.profile.id` can be written into directly: the SDK's mutable
    /// `BoundedAttributes` with room for one more entry and no value-length cap under `len`.
    fn writable_dict(&self, len: usize) -> PyResult<Option<&Bound<'py, PyDict>>> {
        let (py, attrs) = (self.attrs.py(), &self.attrs);
        let mutable = attrs
            .getattr_opt(intern!(py, "_immutable"))?
            .is_some_and(|v| v.is_instance_of::<PyBool>() && !v.is_truthy().unwrap_or(true));
        if !mutable {
            return Ok(None);
        }
        self.dict_with_room(len)
    }

    /// The SDK's `BoundedAttributes` dict, if it has room for one more entry and no
    /// value-length cap under `len` (what `BoundedAttributes.__setitem__` would check, short
    /// of evicting the oldest entry when full).
    fn dict_with_room(&self, len: usize) -> PyResult<Option<&Bound<'py, PyDict>>> {
        let (py, attrs) = (self.attrs.py(), &self.attrs);
        let Some(d) = &self.dict else {
            return Ok(None);
        };
        let has_room = || -> PyResult<bool> {
            Ok(match attrs.getattr_opt(intern!(py, "maxlen"))? {
                Some(m) if m.is_none() => true,
                Some(m) => m.extract::<usize>().is_ok_and(|m| d.len() < m),
                None => false,
            })
        };
        let long_enough = || -> PyResult<bool> {
            Ok(match attrs.getattr_opt(intern!(py, "max_value_len"))? {
                Some(m) if m.is_none() => true,
                Some(m) => m.extract::<usize>().is_ok_and(|m| m >= len),
                None => false,
            })
        };
        Ok((has_room()? && long_enough()?).then_some(d))
    }
}

/// The most bytes of UTF-8 kept of a span name or route: the core's cap on label values and
/// span-table names ([`MAX_LABEL_VALUE_LEN`], which the span table cuts to with the same rule).
/// Cutting here too means a megabyte string is never copied whole.
pub(crate) const MAX_TEXT_BYTES: usize = MAX_LABEL_VALUE_LEN;

/// A span name or route as Rust text, repaired so that no string loses its span: a lone
/// surrogate (which has no UTF-8 form) and a NUL become U+FFFD, and the text is cut to
/// [`MAX_TEXT_BYTES`] at a character boundary. Borrowed when the interpreter's UTF-8 form
/// needs no repair, which is the common case.
pub(crate) fn text<'a>(s: &'a Bound<'_, PyString>) -> Cow<'a, str> {
    match s.to_cow() {
        Ok(t) => repaired(t),
        Err(_) => repaired(Cow::Owned(with_surrogates_replaced(s))),
    }
}

/// A string the interpreter cannot encode as UTF-8 (it holds lone surrogates), decoded with
/// each lone surrogate as U+FFFD. Only the first [`MAX_TEXT_BYTES`] code points are read:
/// each takes at least one byte of UTF-8, so that covers the cap. A high surrogate followed by
/// a low one is read as the character the pair stands for (how UTF-16 reads them).
fn with_surrogates_replaced(s: &Bound<'_, PyString>) -> String {
    let py = s.py();
    let cap = isize::try_from(MAX_TEXT_BYTES).unwrap_or(isize::MAX);
    let units = s
        .as_any()
        .get_item(PySlice::new(py, 0, cap, 1))
        .and_then(|head| head.call_method1(intern!(py, "encode"), ("utf-16-le", "surrogatepass")))
        .and_then(|b| b.extract::<Vec<u8>>());
    match units {
        Ok(bytes) => char::decode_utf16(
            bytes
                .chunks_exact(2)
                .map(|c| u16::from_le_bytes([c[0], c[1]])),
        )
        .map(|c| c.unwrap_or(char::REPLACEMENT_CHARACTER))
        .collect(),
        // `surrogatepass` encodes every code point to UTF-16, so this is not expected; a
        // string that still cannot be read keeps its span under one replacement character.
        Err(_) => char::REPLACEMENT_CHARACTER.to_string(),
    }
}

/// `t` with each NUL replaced by U+FFFD and cut to [`MAX_TEXT_BYTES`] at a character
/// boundary ([`truncate_label`], the span table's own rule); borrowed when it has no NUL.
fn repaired(t: Cow<'_, str>) -> Cow<'_, str> {
    let has_nul = t.as_bytes().contains(&0);
    match t {
        Cow::Borrowed(b) if !has_nul => Cow::Borrowed(truncate_label(b)),
        t => {
            let mut s = if has_nul {
                t.replace('\0', "\u{fffd}")
            } else {
                t.into_owned()
            };
            let end = truncate_label(&s).len();
            s.truncate(end);
            Cow::Owned(s)
        }
    }
}

/// `v` as a Python string: itself if it is one, else its `str()`; `None` if `str()` fails
/// (the span is kept without this text rather than lost).
pub(crate) fn as_py_string<'py>(v: Bound<'py, PyAny>) -> Option<Bound<'py, PyString>> {
    match v.cast_into::<PyString>() {
        Ok(s) => Some(s),
        Err(e) => e.into_inner().str().ok(),
    }
}

/// Sets `pyroscope.profile.id` on a span that is being started, given its attributes
/// ([`Attributes::of`]). The SDK's `set_attribute` takes two locks and validates the value;
/// during `on_start` the span is not yet visible to any other thread and the value is a
/// 16-character string, so when the attributes are the SDK's mutable `BoundedAttributes` with
/// room and no value-length cap under 16, the entry is written into its dict directly.
/// Otherwise `set_attribute` is called.
pub(crate) fn set_profile_id(
    span: &Bound<'_, PyAny>,
    attributes: Option<&Attributes<'_>>,
    profile_id: &str,
) -> PyResult<()> {
    let py = span.py();
    if let Some(a) = attributes {
        if let Some(d) = a.writable_dict(profile_id.len())? {
            return d.set_item(intern!(py, PROFILE_ID_KEY), profile_id);
        }
    }
    span.call_method1(
        intern!(py, "set_attribute"),
        (intern!(py, PROFILE_ID_KEY), profile_id),
    )
    .map(drop)
}

/// Sets `pyroscope.profile.id` on a span that is ending (`SpanProcessor._on_ending`, given
/// its attributes). By then the SDK has made the attributes immutable and `set_attribute`
/// would only log a warning; the span is finished, so no other thread writes them, and the
/// span processors' `on_end` and the exporters read them only after this. So the entry goes
/// into the `BoundedAttributes` dict directly, when it has room: an attribute the application
/// set is never evicted for it. Returns whether it was written.
pub(crate) fn set_profile_id_ending(
    attributes: &Attributes<'_>,
    profile_id: &str,
) -> PyResult<bool> {
    let py = attributes.attrs.py();
    match attributes.dict_with_room(profile_id.len())? {
        Some(d) => d
            .set_item(intern!(py, PROFILE_ID_KEY), profile_id)
            .map(|()| true),
        None => Ok(false),
    }
}
