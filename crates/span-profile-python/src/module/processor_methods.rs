//! `SpanProcessor.on_start`, `_on_ending` and `on_end`: the methods the OpenTelemetry SDK
//! calls for every span, as CPython method descriptors over hand-written
//! `METH_FASTCALL | METH_KEYWORDS` functions (ADR 0017).
//!
//! pyo3's `#[pymethods]` entry parses every call through its general argument extractor and
//! checks `self` again after the descriptor has; on this VM an empty native processor built
//! that way cost more time than a Python one that does nothing (docs/benchmarks.md, "What the
//! span hooks cost"). Here a call goes through pyo3's trampoline (which keeps its own
//! bookkeeping of the GIL and its deferred reference counts, and its panic guard), takes its
//! `span` from the vectorcall arguments as they come, and does the work. The descriptor has
//! checked `self`'s type.

use std::ffi::CStr;

use pyo3::exceptions::PyTypeError;
use pyo3::ffi;
use pyo3::intern;
use pyo3::prelude::*;
use pyo3::types::{PyString, PyType};
use pyo3::Borrowed;

use super::processor;

/// One hook: its Python name, whether it takes `parent_context` after `span`, and its
/// docstring (with the signature `inspect` reads, in CPython's `--` form).
struct Hook {
    name: &'static str,
    takes_parent: bool,
    c_name: &'static CStr,
    doc: &'static CStr,
    entry: ffi::PyCFunctionFastWithKeywords,
}

const HOOKS: [Hook; 3] = [
    Hook {
        name: "on_start",
        takes_parent: true,
        c_name: c"on_start",
        doc: c"on_start($self, /, span, parent_context=None)\n--\n\nRecords the span with the running agent: its ids, local root and route in the span table, and the span object in the list the sampler reads. Never raises.",
        entry: on_start_entry,
    },
    Hook {
        name: "_on_ending",
        takes_parent: false,
        c_name: c"_on_ending",
        doc: c"_on_ending($self, /, span)\n--\n\nRecords the end of the live span (OpenTelemetry SDK 1.35 and later call it just before on_end) and links it to its profile if it may have samples. Never raises.",
        entry: on_ending_entry,
    },
    Hook {
        name: "on_end",
        takes_parent: false,
        c_name: c"on_end",
        doc: c"on_end($self, /, span)\n--\n\nRecords the end from the finished span, for an SDK that does not call _on_ending; else nothing. Never raises.",
        entry: on_end_entry,
    },
];

/// Puts the three hooks on `SpanProcessor`'s type, as method descriptors (so CPython caches
/// their lookup at the call site, as for any method of a native class).
pub(crate) fn install(ty: &Bound<'_, PyType>) -> PyResult<()> {
    let py = ty.py();
    for hook in &HOOKS {
        // Read by CPython for as long as the type lives: leaked, once per module import.
        let def: &'static mut ffi::PyMethodDef = Box::leak(Box::new(ffi::PyMethodDef {
            ml_name: hook.c_name.as_ptr(),
            ml_meth: ffi::PyMethodDefPointer {
                PyCFunctionFastWithKeywords: hook.entry,
            },
            ml_flags: ffi::METH_FASTCALL | ffi::METH_KEYWORDS,
            ml_doc: hook.doc.as_ptr(),
        }));
        // SAFETY: the GIL is held (`ty` is a `Bound`), `ty` is a live type object and `def`
        // outlives it (leaked above). `PyDescr_NewMethod` returns a new reference or null
        // with an exception set, which `from_owned_ptr_or_err` takes either way.
        let descr = unsafe {
            Bound::from_owned_ptr_or_err(py, ffi::PyDescr_NewMethod(ty.as_type_ptr(), def))?
        };
        ty.setattr(hook.name, descr)?;
    }
    Ok(())
}

/// The `span` argument of `hook(self, span)`, or of `hook(self, span, parent_context=None)`
/// when it takes a parent, as CPython's vectorcall passes them: `nargs` positional values at
/// `args`, then one for each name in the tuple `kwnames` (null if none). `parent_context` is
/// checked, not used. The errors are the ones a Python method with that signature raises.
///
/// # Safety
///
/// The GIL is held, and `args`, `nargs` and `kwnames` are what CPython passed to a
/// `METH_FASTCALL | METH_KEYWORDS` function, alive for `'a`.
unsafe fn span_arg<'a, 'py>(
    py: Python<'py>,
    hook: &Hook,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
) -> PyResult<Borrowed<'a, 'py, PyAny>> {
    let name = hook.name;
    let max = if hook.takes_parent { 2 } else { 1 };
    let nargs = usize::try_from(nargs).unwrap_or(0);
    if nargs > max {
        let takes = if max == 1 {
            "1 positional argument"
        } else {
            "at most 2 positional arguments"
        };
        return Err(PyTypeError::new_err(format!(
            "{name}() takes {takes} ({nargs} given)"
        )));
    }
    let arg = |i: usize| {
        // SAFETY: `args` holds `nargs` values and then one for each keyword, all borrowed
        // for the call (this function's contract), and `i` is below that count.
        unsafe { Borrowed::from_ptr(py, *args.add(i)) }
    };
    let mut values: [Option<Borrowed<'a, 'py, PyAny>>; 2] = [None, None];
    for (i, v) in values.iter_mut().enumerate().take(nargs) {
        *v = Some(arg(i));
    }
    if !kwnames.is_null() {
        // SAFETY: `kwnames` is a tuple of `str` (CPython's vectorcall convention), alive for
        // the call.
        let names = unsafe { Borrowed::from_ptr(py, kwnames) };
        let names = names.cast::<pyo3::types::PyTuple>()?;
        for (i, key) in names.iter_borrowed().enumerate() {
            let slot = if is_name(&key, intern!(py, "span"), "span")? {
                0
            } else if hook.takes_parent
                && is_name(&key, intern!(py, "parent_context"), "parent_context")?
            {
                1
            } else {
                return Err(PyTypeError::new_err(format!(
                    "{name}() got an unexpected keyword argument '{}'",
                    key.to_owned()
                )));
            };
            if values[slot].is_some() {
                let arg_name = if slot == 0 { "span" } else { "parent_context" };
                return Err(PyTypeError::new_err(format!(
                    "{name}() got multiple values for argument '{arg_name}'"
                )));
            }
            values[slot] = Some(arg(nargs + i));
        }
    }
    values[0]
        .ok_or_else(|| PyTypeError::new_err(format!("{name}() missing required argument 'span'")))
}

/// Whether a keyword's name is `text`: by identity with the interned `interned` first, as the
/// SDK's call sites pass their names, else by value.
fn is_name(
    key: &Borrowed<'_, '_, PyAny>,
    interned: &Bound<'_, PyString>,
    text: &str,
) -> PyResult<bool> {
    if key.as_ptr() == interned.as_ptr() {
        return Ok(true);
    }
    Ok(match key.cast::<PyString>() {
        Ok(s) => s.to_cow()? == text,
        Err(_) => false,
    })
}

/// One hook's body, run inside pyo3's trampoline: parse `span`, do the work, return `None`.
///
/// # Safety
///
/// As [`span_arg`].
unsafe fn run(
    py: Python<'_>,
    hook: &Hook,
    args: *const *mut ffi::PyObject,
    nargs: ffi::Py_ssize_t,
    kwnames: *mut ffi::PyObject,
    work: fn(&Bound<'_, PyAny>),
) -> PyResult<*mut ffi::PyObject> {
    // SAFETY: this function's contract.
    let span = unsafe { span_arg(py, hook, args, nargs, kwnames)? };
    work(&span);
    Ok(py.None().into_ptr())
}

macro_rules! entry {
    ($entry:ident, $body:ident, $index:expr, $work:path) => {
        /// The body of one hook for pyo3's trampoline.
        ///
        /// # Safety
        ///
        /// Called only by the trampoline below, with what CPython passed it.
        unsafe fn $body(
            py: Python<'_>,
            _slf: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> PyResult<*mut ffi::PyObject> {
            // SAFETY: CPython's arguments to a `METH_FASTCALL | METH_KEYWORDS` method, under the
            // GIL, for the length of the call.
            unsafe { run(py, &HOOKS[$index], args, nargs, kwnames, $work) }
        }

        /// The C entry point CPython calls through the method descriptor.
        unsafe extern "C" fn $entry(
            slf: *mut ffi::PyObject,
            args: *const *mut ffi::PyObject,
            nargs: ffi::Py_ssize_t,
            kwnames: *mut ffi::PyObject,
        ) -> *mut ffi::PyObject {
            // SAFETY: CPython calls this with the GIL held and the vectorcall arguments of a
            // `METH_FASTCALL | METH_KEYWORDS` method; the trampoline is the one pyo3's own
            // methods use (it counts the GIL as held, catches panics and restores errors).
            unsafe {
                pyo3::impl_::trampoline::fastcall_with_keywords(slf, args, nargs, kwnames, $body)
            }
        }
    };
}

entry!(
    on_start_entry,
    on_start_body,
    0,
    processor::processor_on_start
);
entry!(
    on_ending_entry,
    on_ending_body,
    1,
    processor::processor_on_ending
);
entry!(on_end_entry, on_end_body, 2, processor::processor_on_end);
