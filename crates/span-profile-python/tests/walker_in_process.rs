//! The in-process path the PyO3 module uses: libpython is loaded into this test process
//! (`dlopen` with `RTLD_GLOBAL`, as when Python imports the extension), Python threads are
//! parked at known functions, and `PythonWalker::for_current_process` walks them with
//! `process_vm_readv` on its own pid, symbols from `dlsym`, and per-thread CPU clocks.
//!
//! One interpreter per process, so this file holds a single test (3.12; skipped if absent and
//! `CI` is unset).

use std::ffi::{c_char, c_int, c_void, CString};
use std::time::Duration;

use span_profile::walker::testing::Collected;
use span_profile::walker::{PythonVersion, PythonWalker, WalkerConfig};
use span_profile_core::StackWalker;

/// The pyenv CPython this test embeds (its shared library, `--enable-shared`).
const VERSION: &str = "3.12.1";
const LIB: &str = "lib/libpython3.12.so.1.0";

const SCRIPT: &str = r#"
import threading
stop = threading.Event()
parked = threading.Event()
def gamma():
    parked.set()
    stop.wait()
def beta():
    gamma()
def alpha():
    beta()
def burn():
    x = 0
    while not stop.is_set():
        x += 1
threading.Thread(target=alpha, name="alpha-thread", daemon=True).start()
threading.Thread(target=burn, name="burn-thread", daemon=True).start()
parked.wait()
"#;

/// Looks `name` up in `lib` as a function pointer of type `F`.
///
/// # Safety
/// `F` must be the function's true signature.
unsafe fn sym<F: Copy>(lib: *mut c_void, name: &str) -> F {
    let cname = CString::new(name).expect("no NUL");
    // SAFETY: (1) `lib` is a handle from dlopen and `cname` is NUL-terminated.
    let p = unsafe { libc::dlsym(lib, cname.as_ptr()) };
    assert!(!p.is_null(), "{name} not found");
    assert_eq!(std::mem::size_of::<F>(), std::mem::size_of::<*mut c_void>());
    // SAFETY: (1) `p` is the address of `name`, whose signature the caller vouches is `F`, a
    // function pointer type of pointer size (checked above).
    unsafe { std::mem::transmute_copy(&p) }
}

#[test]
fn walks_its_own_interpreter() {
    let home = span_profile_test::pyenv_versions().join(VERSION);
    let lib_path = home.join(LIB);
    if !lib_path.exists() {
        let lib = lib_path.display();
        assert!(std::env::var_os("CI").is_none(), "{lib} is required in CI");
        eprintln!("note: skipping: {lib} not found");
        return;
    }
    // The embedded interpreter finds its standard library through PYTHONHOME; set before any
    // Python code runs, while this test is the only thread touching the environment.
    std::env::set_var("PYTHONHOME", &home);
    let path = CString::new(lib_path.to_string_lossy().into_owned()).expect("no NUL");
    // SAFETY: (1) `path` is NUL-terminated; loading libpython runs only its constructors.
    let lib = unsafe { libc::dlopen(path.as_ptr(), libc::RTLD_NOW | libc::RTLD_GLOBAL) };
    assert!(!lib.is_null(), "dlopen libpython");
    // SAFETY: (1) The signatures are those of the CPython C API (Include/pylifecycle.h,
    // pythonrun.h, ceval.h).
    let (init, run, save): (
        extern "C" fn(c_int),
        extern "C" fn(*const c_char) -> c_int,
        extern "C" fn() -> *mut c_void,
    ) = unsafe {
        (
            sym(lib, "Py_InitializeEx"),
            sym(lib, "PyRun_SimpleString"),
            sym(lib, "PyEval_SaveThread"),
        )
    };
    init(0);
    let script = CString::new(SCRIPT).expect("no NUL");
    assert_eq!(run(script.as_ptr()), 0, "the script ran");
    // Release the GIL for good so the Python threads run; the walker never needs it.
    let _ = save();

    let mut walker =
        PythonWalker::for_current_process(PythonVersion::new(3, 12), WalkerConfig::default())
            .expect("in-process walker");
    let mut c = Collected::default();
    walker.walk(&mut c);
    std::thread::sleep(Duration::from_millis(100));
    let mut c2 = Collected::default();
    walker.walk(&mut c2);
    assert!(c2.errors.is_empty(), "{:?}", c2.errors);
    let mut found_parked = false;
    let mut found_burn = false;
    for s in &c2.samples {
        let names: Vec<String> = s
            .frames
            .iter()
            .map(|&r| walker.symbolize(r).function)
            .collect();
        if let Some(i) = names.iter().position(|n| n == "gamma") {
            assert_eq!(&names[i..i + 3], ["gamma", "beta", "alpha"]);
            assert_eq!(names[0], "Condition.wait");
            assert!(s.cpu_ns == 0, "a parked thread is off CPU");
            found_parked = true;
        }
        if names.iter().any(|n| n == "burn") {
            assert!(
                s.cpu_ns > 0,
                "the busy thread is on CPU (thread clock advanced)"
            );
            found_burn = true;
        }
    }
    assert!(found_parked && found_burn, "{:?}", c2.samples);
    let stats = walker.counters().snapshot();
    assert_eq!(stats.invalid_reads, 0);
    assert!(stats.samples >= 4);
}
