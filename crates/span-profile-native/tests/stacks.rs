//! Stacks match known call paths: a thread running `stack_a → stack_b → stack_c` is sampled
//! with those three frames, in that order, under the leaf.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{names, serial, walk_until, Collect};
use span_profile_native::NativeWalker;

/// A leaf: its inner loop makes no calls even unoptimised (no iterator, no `black_box`, no
/// wrapping helpers), so the sampled pc is in it whatever the build.
#[inline(never)]
fn stack_c(stop: &AtomicBool) {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    while !stop.load(Ordering::Relaxed) {
        burn!(x, 100_000);
    }
    std::hint::black_box(x);
}
#[inline(never)]
fn stack_b(stop: &AtomicBool) {
    stack_c(stop);
    std::hint::black_box(());
}
#[inline(never)]
fn stack_a(stop: &AtomicBool) {
    stack_b(stop);
    std::hint::black_box(());
}

fn position(names: &[String], suffix: &str) -> Option<usize> {
    names.iter().position(|n| n.ends_with(suffix))
}

#[test]
fn cpu_samples_show_the_call_path_a_b_c() {
    let _s = serial();
    let stop = Arc::new(AtomicBool::new(false));
    let worker = {
        let stop = stop.clone();
        std::thread::Builder::new()
            .name("abc".into())
            .spawn(move || {
                let _g = span_profile_native::register_current_thread().unwrap();
                stack_a(&stop);
            })
            .unwrap()
    };
    let mut w = NativeWalker::builder().with_cpu_hz(250).build().unwrap();
    let mut sink = Collect::default();
    walk_until(
        &mut w,
        &mut sink,
        Duration::from_millis(10),
        Duration::from_secs(20),
        |s| s.samples.iter().filter(|g| g.thread == "abc").count() >= 30,
    );
    stop.store(true, Ordering::Relaxed);
    worker.join().unwrap();
    let ours: Vec<_> = sink
        .samples
        .iter()
        .filter(|g| g.thread == "abc")
        .cloned()
        .collect();
    assert!(ours.len() >= 30, "only {} samples", ours.len());
    let mut with_path = 0;
    let mut leaf_c = 0;
    for g in &ours {
        let n = names(&mut w, &g.frames);
        if n.first().is_some_and(|f| f.ends_with("::stack_c")) {
            leaf_c += 1;
        }
        if let (Some(c), Some(b), Some(a)) = (
            position(&n, "::stack_c"),
            position(&n, "::stack_b"),
            position(&n, "::stack_a"),
        ) {
            assert_eq!((b, a), (c + 1, c + 2), "frames out of order: {n:?}");
            with_path += 1;
        }
    }
    // The leaf is exact in any build (the interrupted pc).
    assert!(
        leaf_c * 10 >= ours.len() * 9,
        "{leaf_c} of {} leaves in stack_c",
        ours.len()
    );
    if !cfg!(span_profile_frame_pointers) {
        eprintln!(
            "built without frame pointers: only the leaf is checked; run with \
             RUSTFLAGS=\"-C force-frame-pointers=yes\" to check a → b → c"
        );
        return;
    }
    // A sample taken in a prologue or epilogue can skip a frame: nearly all, not all.
    assert!(
        with_path * 10 >= ours.len() * 9,
        "{with_path} of {} samples show a → b → c; first: {:?}",
        ours.len(),
        names(&mut w, &ours[0].frames)
    );
    // How many wall samples find the thread on CPU depends on the machine's load (CI saw
    // fewer than half on a loaded 2-core machine); the CPU they carry is checked against the
    // thread's own CPU clock in cpu_weights.rs. Here: the spinning thread's CPU reaches its
    // stack at all.
    assert!(
        ours.iter().any(|g| g.cpu_ns > 0),
        "none of {} samples carried CPU time",
        ours.len()
    );
}

#[test]
fn symbols_are_demangled_with_file_and_line() {
    let _s = serial();
    let mut w = NativeWalker::builder()
        .with_cpu_hz(0)
        .with_wall(false)
        .build()
        .unwrap();
    let f = common::frame(
        &mut w,
        span_profile_core::RawFrame {
            id: stack_a as *const () as usize as u64,
            line: 0,
        },
    );
    assert!(f.function.ends_with("stacks::stack_a"), "{f:?}");
    assert!(!f.function.contains("::h"), "hash kept: {f:?}");
    assert!(f.file.ends_with("stacks.rs"), "{f:?}");
    assert!(f.line > 0);
}
