//! Lifecycle: SA_RESTART keeps blocking reads going under wall signals; a fork child starts
//! with no registered thread and samples itself again with a new walker.

mod common;

use std::time::Duration;

use common::{serial, Collect};
use span_profile_core::StackWalker;
use span_profile_native::NativeWalker;

#[test]
fn a_blocking_read_is_restarted_not_interrupted() {
    let _s = serial();
    let mut fds = [0i32; 2];
    // SAFETY: `fds` has room for the two descriptors.
    assert_eq!(unsafe { libc::pipe(fds.as_mut_ptr()) }, 0);
    let (rd, wr) = (fds[0], fds[1]);
    let reader = std::thread::spawn(move || {
        let _g = span_profile_native::register_current_thread().unwrap();
        let mut b = [0u8; 1];
        // SAFETY: reads one byte into `b` from our pipe.
        let n = unsafe { libc::read(rd, b.as_mut_ptr().cast(), 1) };
        (n, std::io::Error::last_os_error())
    });
    let mut w = NativeWalker::builder().build().unwrap();
    let mut sink = Collect::default();
    let before = span_profile_native::stats().samples;
    // Wall signals every millisecond at the blocked reader, until it has taken some.
    for _ in 0..5000 {
        w.walk(&mut sink);
        std::thread::sleep(Duration::from_millis(1));
        if span_profile_native::stats().samples >= before + 20 {
            break;
        }
    }
    // SAFETY: writes one byte from a live buffer to our pipe.
    assert_eq!(unsafe { libc::write(wr, b"x".as_ptr().cast(), 1) }, 1);
    let (n, err) = reader.join().unwrap();
    assert_eq!(n, 1, "read returned {n}: {err}");
    assert!(span_profile_native::stats().samples >= before + 20);
    assert!(
        sink.samples.iter().any(|g| g.cpu_ns == 0),
        "no off-CPU sample of the reader"
    );
}

#[test]
fn a_fork_child_starts_clean_and_samples_again() {
    let _s = serial();
    let _g = span_profile_native::register_current_thread().unwrap();
    let w = NativeWalker::builder().build().unwrap();
    assert!(span_profile_native::stats().registered_threads >= 1);
    // SAFETY: the child uses only the forking thread (glibc's malloc is reset for the child by
    // its own fork handlers), registers it, samples it and exits with `_exit`.
    let pid = unsafe { libc::fork() };
    assert!(pid >= 0);
    if pid == 0 {
        let clean = span_profile_native::stats().registered_threads == 0;
        let again = span_profile_native::register_current_thread();
        let walker = NativeWalker::builder().build();
        // The child samples itself: its own timer fires and the new walker drains it.
        let mut sampled = false;
        if let (Ok(_g), Ok(mut w)) = (again.as_ref(), walker) {
            let mut sink = Collect::default();
            for _ in 0..500 {
                common::spin_for(Duration::from_millis(4));
                w.walk(&mut sink);
                if !sink.samples.is_empty() {
                    sampled = true;
                    break;
                }
            }
        }
        let code = if clean && again.is_ok() && sampled {
            0
        } else {
            1 + clean as i32 * 2 + again.is_ok() as i32 * 4 + sampled as i32 * 8
        };
        // SAFETY: ends the child without running the parent's destructors.
        unsafe { libc::_exit(code) };
    }
    let mut status = 0;
    // SAFETY: waits for our child.
    assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
    assert!(libc::WIFEXITED(status), "child died: {status}");
    assert_eq!(
        libc::WEXITSTATUS(status),
        0,
        "child: exit 1 + 2 (clean) + 4 (registered) + 8 (sampled) = {}",
        libc::WEXITSTATUS(status)
    );
    // The parent is unaffected.
    assert!(span_profile_native::stats().registered_threads >= 1);
    drop(w);
}
