//! The guarded in-process reader catches only its own faults.
//!
//! Each case runs in a child process (this test binary, re-run on the ignored `child` test with
//! `GUARD_CASE` set), because it installs process-wide signal handlers or crashes on purpose:
//! - a real crash outside the reader still reaches the handler that was installed before ours
//!   (`faulthandler`, a crash reporter), or kills the process by default;
//! - when someone replaces our handler, reads fall back to `process_vm_readv` (still safe), and
//!   go back to direct copies once ours is restored.

use std::os::unix::process::ExitStatusExt;
use std::process::Command;

use span_profile::walker::testing::{forbidden_page, ReadExt};
use span_profile::walker::{GuardedReader, MemoryReader, ReadMode};

fn run_child(case: &str) -> std::process::ExitStatus {
    let exe = std::env::current_exe().expect("test binary path");
    Command::new(exe)
        .args([
            "--exact",
            "child",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("GUARD_CASE", case)
        .status()
        .expect("child runs")
}

#[test]
fn a_real_crash_reaches_the_handler_installed_before_ours() {
    let status = run_child("previous-handler");
    assert_eq!(status.code(), Some(42), "child: {status:?}");
}

#[test]
fn a_real_crash_with_no_previous_handler_kills_the_process() {
    let status = run_child("default");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "child: {status:?}");
}

#[test]
fn a_sigsegv_sent_by_kill_still_ends_the_process() {
    let status = run_child("sent");
    assert_eq!(status.signal(), Some(libc::SIGSEGV), "child: {status:?}");
}

#[test]
fn a_thread_that_inherited_a_blocked_sigsegv_still_catches_its_faults() {
    let status = run_child("blocked-mask");
    assert_eq!(status.code(), Some(0), "child: {status:?}");
}

#[test]
fn a_replaced_handler_makes_reads_fall_back_to_the_syscall() {
    let status = run_child("replaced");
    assert_eq!(status.code(), Some(0), "child: {status:?}");
}

extern "C" fn previous_handler(_sig: libc::c_int) {
    // SAFETY: (1) `_exit` is async-signal-safe and ends the process with the code the parent
    // checks.
    unsafe { libc::_exit(42) };
}

extern "C" fn other_handler(_sig: libc::c_int) {
    // SAFETY: (1) As above; this handler must never run in these tests (exit 43 says it did).
    unsafe { libc::_exit(43) };
}

fn set_handler(sig: libc::c_int, f: extern "C" fn(libc::c_int)) -> libc::sigaction {
    // SAFETY: (1) A zeroed `sigaction` is a valid value; the handler has the plain signature
    // (no SA_SIGINFO). (2) The old action is written into a valid local.
    unsafe {
        let mut act: libc::sigaction = std::mem::zeroed();
        act.sa_sigaction = f as *const () as usize;
        libc::sigemptyset(&mut act.sa_mask);
        let mut old: libc::sigaction = std::mem::zeroed();
        assert_eq!(libc::sigaction(sig, &act, &mut old), 0);
        old
    }
}

fn restore(sig: libc::c_int, act: &libc::sigaction) {
    // SAFETY: (1) `act` was returned by the kernel for this signal.
    unsafe { assert_eq!(libc::sigaction(sig, act, std::ptr::null_mut()), 0) };
}

fn crash() {
    let bad = forbidden_page() as *const u64;
    // SAFETY: deliberately not sound: reading a PROT_NONE page raises the SIGSEGV this test is
    // about, outside the guarded reader.
    let v = unsafe { std::ptr::read_volatile(bad) };
    println!("unreachable: read {v}");
}

#[test]
#[ignore = "helper: run in a child process by the tests above"]
fn child() {
    let Ok(case) = std::env::var("GUARD_CASE") else {
        return;
    };
    let x = 7u64;
    let here = std::ptr::addr_of!(x) as u64;
    match case.as_str() {
        "previous-handler" => {
            set_handler(libc::SIGSEGV, previous_handler);
            let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
            r.begin_tick();
            assert!(r.is_direct());
            // Our own fault is caught and is not passed on ...
            assert!(r.read_u64(forbidden_page()).is_err());
            assert_eq!(r.read_u64(here).unwrap(), 7);
            // ... a real one is: the previous handler exits with 42.
            crash();
        }
        "default" => {
            let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
            r.begin_tick();
            assert!(r.read_u64(forbidden_page()).is_err());
            crash();
        }
        "replaced" => {
            let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
            r.begin_tick();
            assert!(r.is_direct());
            let ours = set_handler(libc::SIGSEGV, other_handler);
            r.begin_tick();
            assert!(!r.is_direct(), "another SIGSEGV handler is installed");
            // Through the syscall, a bad read is still only an error (the other handler,
            // which exits 43, never runs).
            assert!(r.read_u64(forbidden_page()).is_err());
            let mut buf = [0u8; 8];
            assert!(r.read(here, &mut buf).is_ok());
            restore(libc::SIGSEGV, &ours);
            r.begin_tick();
            assert!(r.is_direct(), "ours is back");
            assert!(r.read_u64(forbidden_page()).is_err());
            std::process::exit(0);
        }
        "sent" => {
            // `kill -SEGV` (here `raise`) has no faulting instruction to run again: the
            // default action must still end the process. (Rust's runtime has its own SIGSEGV
            // handler for stack overflows; the default action is put back first.)
            // SAFETY: (1) A zeroed `sigaction` is SIG_DFL with an empty mask.
            unsafe {
                let dfl: libc::sigaction = std::mem::zeroed();
                assert_eq!(
                    libc::sigaction(libc::SIGSEGV, &dfl, std::ptr::null_mut()),
                    0
                );
            }
            let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
            assert!(r.begin_tick());
            // SAFETY: (1) `raise` sends a signal to this thread; the test expects it to kill.
            unsafe { libc::raise(libc::SIGSEGV) };
        }
        "blocked-mask" => {
            // A host that blocks every signal in its threads: the sampler thread it spawns
            // inherits the mask. A fault arriving blocked would kill the process.
            // SAFETY: (1) `set` is a valid local `sigset_t`, initialised by `sigfillset`;
            // `pthread_sigmask` changes only this thread's mask.
            unsafe {
                let mut set: libc::sigset_t = std::mem::zeroed();
                libc::sigfillset(&mut set);
                assert_eq!(
                    libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()),
                    0
                );
            }
            let faults = std::thread::spawn(|| {
                let r = GuardedReader::new(ReadMode::Guarded).expect("reader");
                assert!(
                    r.begin_tick(),
                    "direct reads on a thread born with SIGSEGV blocked"
                );
                (0..100)
                    .filter(|_| r.read_u64(forbidden_page()).is_err())
                    .count()
            })
            .join()
            .expect("the reading thread survives");
            assert_eq!(faults, 100);
            std::process::exit(0);
        }
        other => panic!("unknown GUARD_CASE {other}"),
    }
    std::process::exit(1);
}
