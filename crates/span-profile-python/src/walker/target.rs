//! Target discovery: where the interpreter to walk lives ([`Target`]) and
//! why a walker could not be built ([`SetupError`]).

use super::layout::{LayoutError, PythonVersion};
use super::memory::ReadError;
use super::objects::TypeAddresses;

/// Where the interpreter lives: what the caller must supply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The running interpreter's `sys.version_info[:2]`.
    pub version: PythonVersion,
    /// The address of `_PyRuntime` (in this process: [`Target::current_process`]).
    pub runtime: u64,
    /// The address of the (main) `PyInterpreterState` to walk, or 0 to follow
    /// `_PyRuntime.interpreters.head` and every interpreter after it.
    pub interpreter: u64,
    /// Type objects used to validate reads (0 disables a check).
    pub types: TypeAddresses,
}

impl Target {
    /// The interpreter that this process runs: `_PyRuntime` and the type objects found with
    /// `dlsym(RTLD_DEFAULT, ...)`. Requires libpython's symbols to be globally visible (true
    /// for the `python` executable and for extension modules loaded into it).
    pub fn current_process(version: PythonVersion) -> Result<Self, SetupError> {
        let sym = |name: &'static str| dlsym(name).ok_or(SetupError::SymbolNotFound(name));
        Ok(Self {
            version,
            runtime: sym("_PyRuntime\0")?,
            interpreter: 0,
            types: TypeAddresses {
                code: sym("PyCode_Type\0")?,
                unicode: sym("PyUnicode_Type\0")?,
                bytes: sym("PyBytes_Type\0")?,
                frame: sym("PyFrame_Type\0")?,
            },
        })
    }
}

/// Looks a NUL-terminated symbol up in the global scope.
pub(crate) fn dlsym(name: &'static str) -> Option<u64> {
    if !name.ends_with('\0') {
        return None;
    }
    // SAFETY: (1) `name` is a NUL-terminated static string. (2) RTLD_DEFAULT is a valid pseudo
    // handle; dlsym only looks the name up and returns an address (or null), which we do not
    // dereference here.
    let p = unsafe { libc::dlsym(libc::RTLD_DEFAULT, name.as_ptr().cast()) };
    (!p.is_null()).then_some(p as u64)
}

/// Why a walker could not be built.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum SetupError {
    /// `process_vm_readv` is unavailable (seccomp, permissions) or the runtime is unreadable.
    Read(ReadError),
    /// The version is unsupported or its layout disagrees with the interpreter's.
    Layout(LayoutError),
    /// A symbol the walker needs is not visible.
    SymbolNotFound(&'static str),
    /// `_PyRuntime` has no interpreter (not initialized, or the address is wrong).
    NoInterpreter,
}

impl std::fmt::Display for SetupError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Read(e) => write!(f, "cannot read interpreter memory: {e}"),
            Self::Layout(e) => e.fmt(f),
            Self::SymbolNotFound(s) => {
                write!(f, "symbol {} not found", s.trim_end_matches('\0'))
            }
            Self::NoInterpreter => f.write_str("_PyRuntime has no interpreter"),
        }
    }
}

impl std::error::Error for SetupError {}

impl From<ReadError> for SetupError {
    fn from(e: ReadError) -> Self {
        Self::Read(e)
    }
}

impl From<LayoutError> for SetupError {
    fn from(e: LayoutError) -> Self {
        Self::Layout(e)
    }
}
