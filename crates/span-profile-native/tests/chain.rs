//! The application's own signal handlers keep working: signals on our signal that are not
//! ours reach the handler that was there before, and SIGPROF is left alone.

mod common;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use span_profile_core::StackWalker;
use span_profile_native::NativeWalker;

static APP_RT: AtomicU64 = AtomicU64::new(0);
static APP_PROF: AtomicU64 = AtomicU64::new(0);

extern "C" fn app_rt(_sig: i32, info: *mut libc::siginfo_t, _uc: *mut libc::c_void) {
    // SAFETY: the kernel's siginfo for an SA_SIGINFO handler.
    let v = unsafe { (*info).si_value() }.sival_ptr as u64;
    APP_RT.fetch_add(v, Ordering::Relaxed);
}
extern "C" fn app_prof(_sig: i32) {
    APP_PROF.fetch_add(1, Ordering::Relaxed);
}

fn install(sig: i32, h: usize, siginfo: bool) {
    // SAFETY: all-zero sigaction is valid; the handler has the signature its flags say.
    unsafe {
        let mut a: libc::sigaction = std::mem::zeroed();
        a.sa_sigaction = h;
        a.sa_flags = if siginfo { libc::SA_SIGINFO } else { 0 } | libc::SA_RESTART;
        assert_eq!(libc::sigaction(sig, &a, std::ptr::null_mut()), 0);
    }
}

#[test]
fn foreign_signals_reach_the_previous_handler_and_sigprof_is_untouched() {
    let sig = libc::SIGRTMIN() + 5;
    install(sig, app_rt as *const () as usize, true);
    install(libc::SIGPROF, app_prof as *const () as usize, false);
    span_profile_native::set_signal(sig).unwrap();
    assert_eq!(span_profile_native::signal(), Some(sig));
    let _g = span_profile_native::register_current_thread().unwrap();
    let mut w = NativeWalker::builder().build().unwrap();
    // The application's own queued signal, with its own value.
    // SAFETY: sigqueue to ourselves with a plain value.
    unsafe {
        let v = libc::sigval {
            sival_ptr: 42usize as *mut libc::c_void,
        };
        assert_eq!(libc::sigqueue(libc::getpid(), sig, v), 0);
        assert_eq!(libc::raise(libc::SIGPROF), 0);
    }
    let mut sink = common::Collect::default();
    let before = span_profile_native::stats().samples;
    for _ in 0..2000 {
        common::spin_for(Duration::from_millis(2));
        w.walk(&mut sink);
        if APP_RT.load(Ordering::Relaxed) == 42 && span_profile_native::stats().samples > before + 5
        {
            break;
        }
    }
    assert_eq!(APP_RT.load(Ordering::Relaxed), 42);
    assert_eq!(APP_PROF.load(Ordering::Relaxed), 1);
    assert!(span_profile_native::stats().foreign_signals >= 1);
    assert!(
        span_profile_native::stats().samples > before + 5,
        "our sampling stopped"
    );
}
