//! Walker tests over fake memory images of every supported version.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use span_profile_core::{Frame, StackWalker, WalkError};

use super::testing::{Collected, FakeFrame, FakeMemory, ImageBuilder};
use super::{CpuTimeSource, PythonVersion, PythonWalker, SetupError, WalkerConfig};

fn versions() -> impl Iterator<Item = PythonVersion> {
    (9..=13).map(|m| PythonVersion::new(3, m))
}

fn config() -> WalkerConfig {
    WalkerConfig::default().with_cpu_time(CpuTimeSource::Disabled)
}

fn walker(b: &ImageBuilder, cfg: WalkerConfig) -> PythonWalker<FakeMemory> {
    PythonWalker::new(b.mem.clone(), b.target(), cfg).expect("walker over fake image")
}

fn walk_once(w: &mut PythonWalker<FakeMemory>) -> Collected {
    let mut c = Collected::default();
    w.walk(&mut c);
    c
}

/// The function names of `frames` (leaf first), as `w` symbolizes them.
fn functions<R: super::MemoryReader + Send + 'static>(
    w: &mut PythonWalker<R>,
    frames: &[span_profile_core::RawFrame],
) -> Vec<String> {
    frames.iter().map(|&r| w.symbolize(r).function).collect()
}

fn three() -> Vec<FakeFrame> {
    vec![
        FakeFrame::new("alpha", "/app/a.py", 10, 12),
        FakeFrame::new("beta", "/app/b.py", 20, 25),
        FakeFrame::new("gamma", "/app/ü.py", 30, 31),
    ]
}

fn expected_name(v: PythonVersion, name: &str) -> String {
    if v.minor >= 11 {
        format!("Mod.{name}")
    } else {
        name.to_owned()
    }
}

#[test]
fn three_frame_stack_every_version() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let leaf = b.stack(&three());
        b.thread(77, 1077, leaf);
        let mut w = walker(&b, config());
        w.registry().set_thread_name(77, "worker");
        let c = walk_once(&mut w);
        assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
        assert_eq!(c.samples.len(), 1, "{v}");
        let s = &c.samples[0];
        assert_eq!(s.thread, 77);
        assert_eq!(s.name, "worker");
        assert!(!s.truncated);
        let frames: Vec<Frame> = s.frames.iter().map(|&r| w.symbolize(r)).collect();
        assert_eq!(
            frames,
            vec![
                Frame::new(expected_name(v, "gamma"), "/app/ü.py", 31),
                Frame::new(expected_name(v, "beta"), "/app/b.py", 25),
                Frame::new(expected_name(v, "alpha"), "/app/a.py", 12),
            ],
            "{v}"
        );
        // The second tick hits the cache: no new code objects.
        let misses = w.counters().snapshot().code_misses;
        let c2 = walk_once(&mut w);
        assert_eq!(c2.samples[0].frames, s.frames);
        assert_eq!(w.counters().snapshot().code_misses, misses);
        let stats = w.counters().snapshot();
        assert_eq!(stats.samples, 2);
        assert_eq!(stats.shim_frames, if v.minor >= 12 { 2 } else { 0 });
    }
}

#[test]
fn default_thread_name() {
    let mut b = ImageBuilder::new(PythonVersion::new(3, 12)).unwrap();
    let leaf = b.stack(&three());
    b.thread(5, 0, leaf);
    let mut w = walker(&b, config());
    assert_eq!(walk_once(&mut w).samples[0].name, "Thread-5");
}

#[test]
fn a_frame_cycle_is_counted_and_its_thread_kept() {
    for v in versions() {
        // Two-frame cycle: outer.previous = leaf.
        let mut b = ImageBuilder::new(v).unwrap();
        let frames = three();
        let c1 = b.code(&frames[0]);
        let outer = b.frame(c1, 0, 0);
        let c2 = b.code(&frames[1]);
        let leaf = b.frame(c2, outer, 0);
        b.mem.write_u64(b.frame_previous_addr(outer), leaf);
        b.thread(1, 0, leaf);
        // Self-loop on a second thread.
        let c3 = b.code(&frames[2]);
        let selfloop = b.frame(c3, 0, 0);
        b.mem.write_u64(b.frame_previous_addr(selfloop), selfloop);
        b.thread(2, 0, selfloop);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        let got: Vec<(u64, usize, bool)> = c
            .samples
            .iter()
            .map(|s| (s.thread, s.frames.len(), s.truncated))
            .collect();
        assert_eq!(got, [(1, 0, true), (2, 0, true)], "{v}");
        assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
        let stats = w.counters().snapshot();
        assert_eq!(stats.cycles, 2);
        assert_eq!((stats.unreadable_stacks, stats.invalid_reads), (2, 2));
    }
}

#[test]
fn deep_stack_is_truncated_at_the_cap() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let frames: Vec<FakeFrame> = (0..300)
            .map(|i| FakeFrame::new(&format!("f{i}"), "/deep.py", i + 1, i + 2))
            .collect();
        let leaf = b.stack(&frames);
        b.thread(1, 0, leaf);
        let mut w = walker(&b, config().with_max_depth(128));
        let c = walk_once(&mut w);
        assert_eq!(c.samples.len(), 1);
        let s = &c.samples[0];
        assert!(s.truncated, "{v}");
        assert_eq!(s.frames.len(), 128);
        assert_eq!(w.symbolize(s.frames[0]).function, expected_name(v, "f299"));
        assert_eq!(
            w.symbolize(s.frames[127]).function,
            expected_name(v, "f172")
        );
        assert_eq!(w.counters().snapshot().truncated, 1);
    }
}

#[test]
fn garbage_pointers_are_counted_and_their_threads_kept() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        // Thread 1: the outer frame's `previous` points into unmapped memory.
        let f = three();
        let leaf1 = b.stack(&f[..2]);
        b.mem
            .write_u64(b.frame_previous_addr(leaf1), 0xdead_beef_0000);
        b.thread(1, 0, leaf1);
        // Thread 2: the code pointer is garbage.
        let leaf2 = b.stack(&f[..1]);
        b.mem.write_u64(b.frame_code_addr(leaf2), 0x4141_4141_4141);
        b.thread(2, 0, leaf2);
        // Thread 3: the code pointer points at a str (wrong type).
        let leaf3 = b.stack(&f[..1]);
        let s = b.str_obj(&"not code".repeat(40));
        b.mem.write_u64(b.frame_code_addr(leaf3), s);
        b.thread(3, 0, leaf3);
        // Thread 4: fine, but its `next` is garbage.
        let leaf4 = b.stack(&f);
        let t4 = b.thread(4, 0, leaf4);
        b.mem.write_u64(b.tstate_next_addr(t4), 0x7777_0000_0000);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        let got: Vec<(u64, usize)> = c
            .samples
            .iter()
            .map(|s| (s.thread, s.frames.len()))
            .collect();
        // Threads 1-3 are kept, their frames unreadable: no frame, marked truncated. On 3.13
        // a non-code executable is skipped, not fatal: thread 3 has an empty stack (no sample).
        let want = if v.minor >= 13 {
            vec![(1, 0), (2, 0), (4, 3)]
        } else {
            vec![(1, 0), (2, 0), (3, 0), (4, 3)]
        };
        assert_eq!(got, want, "{v}");
        assert!(
            c.samples.iter().all(|s| s.truncated == s.frames.is_empty()),
            "{v}"
        );
        // The listing's garbage `next` is the one failure the sink hears of.
        assert_eq!(c.errors, vec![WalkError::InvalidRead], "{v}");
        let stats = w.counters().snapshot();
        let unreadable = want.len() as u64 - 1;
        assert_eq!(stats.unreadable_stacks, unreadable, "{v}");
        assert_eq!(stats.invalid_reads, unreadable + 1, "{v}");
    }
}

/// What a thread whose frames cannot be read used of the CPU is kept, on a stack of no
/// frames: checked against the CPU time this test's own thread used, by its own clock (the
/// fake image's thread is this one, by its native id, so the walker reads this thread's clock).
#[test]
fn an_unreadable_stack_keeps_the_cpu_its_thread_used() {
    fn thread_cpu_ns() -> u64 {
        let mut ts = libc::timespec {
            tv_sec: 0,
            tv_nsec: 0,
        };
        // SAFETY: `ts` is a valid timespec, borrowed for the call only.
        let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
        assert_eq!(rc, 0);
        ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
    }
    let tid = u64::from(super::sched::tests::gettid());
    // 3.11+: the native id is in the thread state, where the image puts it.
    for v in versions().filter(|v| v.minor >= 11) {
        let mut b = ImageBuilder::new(v).unwrap();
        let leaf = b.stack(&three());
        b.thread(1, tid, leaf);
        // The same image after the thread moved on, its leaf now its own caller: a cycle.
        let mut looped = b.mem.clone();
        looped.write_u64(b.frame_previous_addr(leaf), leaf);
        let switch = Arc::new(AtomicUsize::new(0));
        let mem = SwapMemory {
            images: [b.mem.clone(), looped],
            current: Arc::clone(&switch),
        };
        let cfg = config().with_cpu_time(CpuTimeSource::ThreadClock);
        let mut w = PythonWalker::new(mem, b.target(), cfg).unwrap();
        let before_first = thread_cpu_ns();
        let first = walk_once_swapped(&mut w);
        assert_eq!(first.samples[0].frames.len(), 3, "{v}");
        let burn_from = thread_cpu_ns();
        while thread_cpu_ns() - burn_from < 30_000_000 {
            std::hint::black_box(burn_from);
        }
        let burned = thread_cpu_ns() - burn_from;
        switch.store(1, Ordering::Relaxed);
        let second = walk_once_swapped(&mut w);
        let around = thread_cpu_ns() - before_first;
        let s = second.samples.first().expect("the thread is kept");
        assert!(s.frames.is_empty() && s.truncated, "{v}");
        // At least what it burned between the two walks; at most all it used around them.
        assert!(
            (burned..=around).contains(&s.cpu_ns),
            "{v}: {} not in [{burned}, {around}]",
            s.cpu_ns
        );
        assert!(second.errors.is_empty(), "{v}");
    }
}

#[test]
fn huge_string_length_is_refused() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let f = FakeFrame::new("ok", "/f.py", 1, 1);
        let code = b.code(&f);
        let leaf = b.frame(code, 0, 0);
        b.thread(1, 0, leaf);
        // Point the name at a str with an absurd length.
        let s = b.str_obj("x");
        b.mem.write_u64(b.str_length_addr(s), 1 << 40);
        b.mem.write_u64(b.code_name_addr(code), s);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        assert_eq!(c.samples.len(), 1, "{v}");
        assert!(
            c.samples[0].frames.is_empty() && c.samples[0].truncated,
            "{v}"
        );
        assert!(c.errors.is_empty(), "{v}");
        assert_eq!(w.counters().snapshot().unreadable_stacks, 1, "{v}");
        // A long but plausible name is cut to the cap.
        let long = b.str_obj(&"n".repeat(5000));
        b.mem.write_u64(b.code_name_addr(code), long);
        let mut w = walker(&b, config().with_max_string_chars(100));
        let c = walk_once(&mut w);
        let name = w.symbolize(c.samples[0].frames[0]).function;
        assert_eq!(name.chars().count(), 101);
        assert!(name.ends_with('…'));
    }
}

#[test]
fn reused_code_address_gets_a_new_id() {
    let v = PythonVersion::new(3, 11);
    let mut b = ImageBuilder::new(v).unwrap();
    let code = b.code(&FakeFrame::new("old", "/f.py", 1, 1));
    let leaf = b.frame(code, 0, 0);
    b.thread(1, 0, leaf);
    // The code object is freed and another one is allocated at the same address.
    let new_name = b.str_obj("new");
    let mut after = b.mem.clone();
    after.write_u64(b.code_name_addr(code), new_name);
    let (mut w, switch) = swapping_walker(&b, after);
    let first = walk_once_swapped(&mut w).samples[0].frames[0];
    switch.store(1, Ordering::Relaxed);
    // The next tick reads the header again and sees another name.
    let second = walk_once_swapped(&mut w).samples[0].frames[0];
    assert_ne!(second.id, first.id);
    assert_eq!(w.symbolize(second).function, "new");
    assert_eq!(w.symbolize(first).function, "Mod.old");
    assert_eq!(w.counters().snapshot().code_replaced, 1);
}

/// The case that made names go stale: a new code object at a freed one's address, with its
/// name and line table at the addresses the old one's had too (pymalloc hands the same
/// blocks out again), and so the same header but for `co_version` (3.12+). The walker tells
/// them apart on the next tick, on every version: by the version where there is one, else by
/// the names' and line tables' content.
#[test]
fn a_code_object_reusing_every_address_of_a_freed_one_is_told_apart() {
    for v in versions() {
        let (b, code) = one_frame(v, FakeFrame::new("f_0001", "/gen.py", 10, 12));
        let (name, table) = b.code_name_and_table(code);
        let mut after = b.mem.clone();
        // Same length, other characters, in the same str block.
        let renamed = expected_name(v, "f_0002");
        assert!(after.write(b.str_data_addr(name), renamed.as_bytes()));
        // Another line table of the same length: the frame's line moves from 12 to 14.
        let other = {
            let mut c = ImageBuilder::new(v).unwrap();
            let t = c.code(&FakeFrame::new("x", "/x.py", 10, 14));
            let (_, ct) = c.code_name_and_table(t);
            let mut bytes = vec![0u8; 2];
            super::memory::MemoryReader::read(&c.mem, ct + 32, &mut bytes).unwrap();
            bytes
        };
        assert!(after.write(table + 32, &other));
        if let Some(at) = b.code_version_addr(code) {
            assert!(after.write(at, &1000u32.to_le_bytes()));
        }
        let (mut w, switch) = swapping_walker(&b, after);
        let first = walk_once_swapped(&mut w).samples[0].frames[0];
        assert_eq!(
            w.symbolize(first),
            Frame::new(expected_name(v, "f_0001"), "/gen.py", 12)
        );
        switch.store(1, Ordering::Relaxed);
        let second = walk_once_swapped(&mut w).samples[0].frames[0];
        assert_ne!(second.id, first.id, "{v}");
        assert_eq!(
            w.symbolize(second),
            Frame::new(renamed, "/gen.py", 14),
            "{v}"
        );
        // And it stays that one.
        assert_eq!(
            walk_once_swapped(&mut w).samples[0].frames[0],
            second,
            "{v}"
        );
        assert_eq!(w.counters().snapshot().code_replaced, 1, "{v}");
    }
}

/// Where the header has no version (3.9–3.11), the content decides; a name that was hashed or
/// interned since it was copied is still the same name.
#[test]
fn a_name_hashed_or_interned_later_is_the_same_name() {
    for v in (9..=11).map(|m| PythonVersion::new(3, m)) {
        let (b, code) = one_frame(v, FakeFrame::new("steady", "/s.py", 1, 1));
        let (name, _) = b.code_name_and_table(code);
        let mut after = b.mem.clone();
        let (hash, state) = b.str_hash_and_state_addr(name);
        after.write_u64(hash, 0x1234_5678);
        let mut s = [0u8; 1];
        super::memory::MemoryReader::read(&b.mem, state, &mut s).unwrap();
        assert!(
            after.write(state, &[s[0] | 0x01]),
            "interned: SSTATE_INTERNED_MORTAL"
        );
        // The reference count changes all the time.
        after.write_u64(name, 77);
        let (mut w, switch) = swapping_walker(&b, after);
        let first = walk_once_swapped(&mut w).samples[0].frames[0];
        switch.store(1, Ordering::Relaxed);
        for _ in 0..3 {
            assert_eq!(walk_once_swapped(&mut w).samples[0].frames[0], first, "{v}");
        }
        let n = w.counters().snapshot();
        assert_eq!((n.code_misses, n.code_replaced), (1, 0), "{v}");
    }
}

/// On 3.12+ the version alone proves a code object: a new one with the same name, file and
/// line table is still a new entry, and the old one is never read again.
#[test]
fn a_new_version_is_a_new_code_object() {
    for v in (12..=13).map(|m| PythonVersion::new(3, m)) {
        let (b, code) = one_frame(v, FakeFrame::new("same", "/s.py", 1, 1));
        let mut after = b.mem.clone();
        let at = b.code_version_addr(code).unwrap();
        assert!(after.write(at, &999u32.to_le_bytes()));
        let (mut w, switch) = swapping_walker(&b, after);
        let first = walk_once_swapped(&mut w).samples[0].frames[0];
        switch.store(1, Ordering::Relaxed);
        let second = walk_once_swapped(&mut w).samples[0].frames[0];
        assert_ne!(first.id, second.id, "{v}");
        assert_eq!(w.counters().snapshot().code_replaced, 1, "{v}");
    }
}

#[test]
fn frames_of_hidden_files_are_left_out() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let leaf = b.stack(&three());
        b.thread(1, 0, leaf);
        let mut w = walker(&b, config().with_hidden_file_prefix("/app/b"));
        let c = walk_once(&mut w);
        let names: Vec<String> = c.samples[0]
            .frames
            .iter()
            .map(|&r| w.symbolize(r).function)
            .collect();
        let shown: Vec<String> = ["gamma", "alpha"]
            .iter()
            .map(|n| expected_name(v, n))
            .collect();
        let mut sorted = names.clone();
        sorted.sort();
        let mut want = shown.clone();
        want.sort();
        assert_eq!(sorted, want, "{v}: beta's frame is hidden, the others stay");
    }
}

/// An image of one thread running one frame of `f`; returns it and the code object's address.
fn one_frame(v: PythonVersion, f: FakeFrame) -> (ImageBuilder, u64) {
    let mut b = ImageBuilder::new(v).unwrap();
    let code = b.code(&f);
    let leaf = b.frame(code, 0, 0);
    b.thread(1, 0, leaf);
    (b, code)
}

fn swapping_walker(
    b: &ImageBuilder,
    after: FakeMemory,
) -> (PythonWalker<SwapMemory>, Arc<AtomicUsize>) {
    let switch = Arc::new(AtomicUsize::new(0));
    let mem = SwapMemory {
        images: [b.mem.clone(), after],
        current: Arc::clone(&switch),
    };
    let w = PythonWalker::new(mem, b.target(), config()).unwrap();
    (w, switch)
}

fn walk_once_swapped(w: &mut PythonWalker<SwapMemory>) -> Collected {
    let mut c = Collected::default();
    w.walk(&mut c);
    c
}

/// Two images behind one reader, switched between ticks.
struct SwapMemory {
    images: [FakeMemory; 2],
    current: Arc<AtomicUsize>,
}

impl super::MemoryReader for SwapMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), super::ReadError> {
        let i = self.current.load(Ordering::Relaxed).min(1);
        self.images[i].read(addr, buf)
    }
}

#[test]
fn thread_cap_reports_skipped() {
    let mut b = ImageBuilder::new(PythonVersion::new(3, 12)).unwrap();
    for t in 1..=5 {
        let leaf = b.stack(&three());
        b.thread(t, 0, leaf);
    }
    let mut w = walker(&b, config().with_max_threads(2));
    let c = walk_once(&mut w);
    assert_eq!(c.samples.len(), 2);
    assert_eq!(c.errors, vec![WalkError::Skipped; 3]);
    assert_eq!(w.counters().snapshot().skipped_threads, 3);
}

#[test]
fn idle_threads_are_not_sampled() {
    let mut b = ImageBuilder::new(PythonVersion::new(3, 10)).unwrap();
    b.thread(1, 0, 0);
    let mut w = walker(&b, config());
    let c = walk_once(&mut w);
    assert!(c.samples.is_empty() && c.errors.is_empty());
    assert_eq!(w.counters().snapshot().idle_threads, 1);
}

#[test]
fn the_gil_holder_is_read_where_each_version_keeps_it() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let leaf = b.stack(&three());
        let me = b.thread(1, 0, leaf);
        let other = b.thread(2, 0, leaf);
        // Held by the thread that starts the walker: the check holds.
        b.set_gil(me, true);
        assert!(walker(&b, config()).check_gil_holder(me), "{v}");
        // Held by another thread, or released: the layout is not trusted.
        b.set_gil(other, true);
        assert!(!walker(&b, config()).check_gil_holder(me), "{v}");
        b.set_gil(me, false);
        assert!(!walker(&b, config()).check_gil_holder(me), "{v}");
    }
}

#[test]
fn full_code_cache_reports_unknown() {
    let mut b = ImageBuilder::new(PythonVersion::new(3, 11)).unwrap();
    let leaf = b.stack(&three());
    b.thread(1, 0, leaf);
    let mut w = walker(&b, config().with_code_cache_capacity(1));
    let c = walk_once(&mut w);
    let names: Vec<String> = c.samples[0]
        .frames
        .iter()
        .map(|&r| w.symbolize(r).function)
        .collect();
    assert_eq!(names, vec!["Mod.gamma", "<unknown>", "<unknown>"]);
    assert_eq!(w.counters().snapshot().code_cache_full, 2);
}

#[test]
fn setup_errors() {
    let b = ImageBuilder::new(PythonVersion::new(3, 13)).unwrap();
    let mut t = b.target();
    t.version = PythonVersion::new(3, 14);
    assert!(matches!(
        PythonWalker::new(b.mem.clone(), t, config()),
        Err(SetupError::Layout(_))
    ));
    let mut t = b.target();
    t.runtime = 0x9999_0000;
    assert!(PythonWalker::new(b.mem.clone(), t, config()).is_err());
    // 3.12 image but the caller claims 3.13: the debug cookie is missing.
    let b12 = ImageBuilder::new(PythonVersion::new(3, 12)).unwrap();
    let mut t = b12.target();
    t.version = PythonVersion::new(3, 13);
    assert!(PythonWalker::new(b12.mem.clone(), t, config()).is_err());
}

/// Random corruption of a valid image: any outcome but a panic or an unbounded walk.
#[test]
fn random_corruption_never_panics() {
    let mut rng = span_profile_core::internal::XorShift(0x2545_f491_4f6c_dd1d);
    let mut rnd = move || rng.next_u64();
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let leaf = b.stack(&three());
        b.thread(1, 0, leaf);
        let leaf = b.stack(&three());
        b.thread(2, 0, leaf);
        let lo = 0x10_0000u64;
        let hi = lo + 0x4000 + 7400;
        for _ in 0..400 {
            let mut mem = b.mem.clone();
            for _ in 0..8 {
                let addr = lo + rnd() % (hi - lo);
                let val = match rnd() % 4 {
                    0 => rnd(),
                    1 => lo + rnd() % (hi - lo),
                    2 => 0,
                    _ => rnd() % 256,
                };
                mem.write_u64(addr & !7, val);
            }
            if let Ok(mut w) = PythonWalker::new(mem, b.target(), config()) {
                let mut c = Collected::default();
                w.walk(&mut c);
                for s in &c.samples {
                    assert!(s.frames.len() <= 128);
                    for &r in &s.frames {
                        let _ = w.symbolize(r);
                    }
                }
            }
        }
    }
}

#[test]
fn current_process_without_libpython_is_a_clear_error() {
    // The test binary has no interpreter: the symbol lookup fails cleanly.
    assert_eq!(super::target::dlsym("_PyRuntime\0"), None);
    let err = PythonWalker::for_current_process(PythonVersion::new(3, 12), config()).unwrap_err();
    assert_eq!(err, SetupError::SymbolNotFound("_PyRuntime\0"));
    assert_eq!(err.to_string(), "symbol _PyRuntime not found");
}

#[test]
fn walker_is_a_core_stack_walker() {
    fn assert_walker<W: StackWalker>() {}
    assert_walker::<PythonWalker<super::ProcessVmReader>>();
    assert_walker::<PythonWalker<FakeMemory>>();
}

/// Sums the weights of the samples of each thread.
#[derive(Default)]
struct WeightSink {
    by_thread: std::collections::BTreeMap<u64, u64>,
    skipped: usize,
}

impl span_profile_core::StackSink for WeightSink {
    fn sample(&mut self, s: &span_profile_core::RawSample<'_>) {
        *self.by_thread.entry(s.key.thread).or_default() += u64::from(s.weight);
    }
    fn error(&mut self, e: WalkError) {
        assert_eq!(e, WalkError::Skipped);
        self.skipped += 1;
    }
}

#[test]
fn thread_cap_weights_are_unbiased() {
    let mut b = ImageBuilder::new(PythonVersion::new(3, 11)).unwrap();
    for t in 1..=7 {
        let leaf = b.stack(&three());
        b.thread(t, 0, leaf);
    }
    let mut w = walker(&b, config().with_max_threads(3));
    let mut sink = WeightSink::default();
    let ticks = 6000u64;
    for _ in 0..ticks {
        w.walk(&mut sink);
    }
    assert_eq!(sink.skipped as u64, 4 * ticks);
    // Each thread stands for itself once per tick on average (weights 2 or 3 for 7/3).
    for t in 1..=7u64 {
        let per_tick = *sink.by_thread.get(&t).unwrap_or(&0) as f64 / ticks as f64;
        assert!((per_tick - 1.0).abs() < 0.08, "thread {t}: {per_tick}");
    }
    let total: u64 = sink.by_thread.values().sum();
    assert!((total as f64 / ticks as f64 - 7.0).abs() < 0.1);
}

#[test]
fn datastack_copy_replaces_frame_reads() {
    use super::memory::{MemoryReader, ReadExt};
    for minor in 11..=13 {
        let v = PythonVersion::new(3, minor);
        let mut b = ImageBuilder::new(v).unwrap();
        let frames: Vec<FakeFrame> = (0..30)
            .map(|i| FakeFrame::new(&format!("f{i}"), "/app/deep.py", 10 * i + 1, 10 * i + 3))
            .collect();
        let leaf = b.stack(&frames);
        let tstate = b.thread(1, 0, leaf);
        let (prev_off, fsize) = match minor {
            11 => (48u64, 72u64),
            _ => (8, 72),
        };
        // Gather the frames into one chunk that spans them, as CPython's data stack holds them.
        let mut addrs = vec![leaf];
        while let Ok(p) = b.mem.read_u64(addrs[addrs.len() - 1] + prev_off) {
            if p == 0 {
                break;
            }
            addrs.push(p);
        }
        let lo = *addrs.iter().min().unwrap();
        let hi = *addrs.iter().max().unwrap() + fsize;
        let chunk = lo - 24;
        let mut bytes = vec![0u8; (hi - chunk) as usize];
        let mut copied = 0;
        for &a in &addrs {
            let mut f = vec![0u8; fsize as usize];
            b.mem.read(a, &mut f).unwrap();
            let off = (a - chunk) as usize;
            bytes[off..off + fsize as usize].copy_from_slice(&f);
            copied += 1;
        }
        bytes[8..16].copy_from_slice(&(hi - chunk + 4096).to_le_bytes()); // size
        b.mem.insert(chunk, bytes);
        let (c_off, t_off) = if minor == 11 { (296, 304) } else { (232, 240) };
        b.mem.write_u64(tstate + c_off, chunk);
        b.mem.write_u64(tstate + t_off, hi);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        assert_eq!(c.samples.len(), 1, "{v}");
        assert_eq!(c.samples[0].frames.len(), 30, "{v}");
        let names: Vec<String> = c.samples[0]
            .frames
            .iter()
            .map(|&f| w.symbolize(f).function.to_string())
            .collect();
        assert_eq!(names[0], expected_name(v, "f29"), "{v}");
        let s = w.counters().snapshot();
        assert_eq!(
            (s.stack_copies, s.frame_reads),
            (1, 0),
            "{v}: {copied} frames"
        );
        // A `top` beyond the chunk's size is refused and the frames are read one by one.
        b.mem.write_u64(chunk + 8, 32);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        assert_eq!(c.samples[0].frames.len(), 30, "{v}");
        let s = w.counters().snapshot();
        assert_eq!(s.stack_copies, 0, "{v}");
        assert!(s.frame_reads >= 30, "{v}");
    }
}

/// An image shared with the test, which changes it between ticks; counts the one-by-one
/// reads of the addresses in `watched` (batched reads are not counted).
#[derive(Clone, Default)]
struct SharedMemory {
    mem: Arc<std::sync::Mutex<FakeMemory>>,
    watched: Arc<std::sync::Mutex<Vec<u64>>>,
    single_reads: Arc<AtomicUsize>,
}

impl super::MemoryReader for SharedMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), super::ReadError> {
        if self.watched.lock().unwrap().contains(&addr) {
            self.single_reads.fetch_add(1, Ordering::Relaxed);
        }
        self.mem.lock().unwrap().read(addr, buf)
    }

    fn read_scatter(&self, addrs: &[u64], len: usize, out: &mut [u8], ok: &mut [bool]) {
        let mem = self.mem.lock().unwrap();
        super::memory::scatter_one_by_one(&*mem, addrs, len, out, ok);
    }
}

/// An image with threads 1, 2 and 3 listed in that order, each three frames deep; and their
/// thread states.
fn three_threads(v: PythonVersion) -> (ImageBuilder, Vec<u64>) {
    let mut b = ImageBuilder::new(v).unwrap();
    let ts = (1..=3)
        .map(|t| {
            let leaf = b.stack(&three());
            b.thread(t, 0, leaf)
        })
        .collect();
    (b, ts)
}

/// The thread list is read in one batch from the addresses of the last tick, and followed
/// through those copies only while it is the same list: threads that start, exit or move are
/// seen at the next tick exactly as with reads one by one.
#[test]
fn thread_listing_is_batched_and_follows_list_changes() {
    for v in versions() {
        let (mut b, ts) = three_threads(v);
        let shared = SharedMemory::default();
        *shared.mem.lock().unwrap() = b.mem.clone();
        let mut w = PythonWalker::new(shared.clone(), b.target(), config()).unwrap();
        let mut tick = |watched: &[u64]| {
            *shared.watched.lock().unwrap() = watched.to_vec();
            shared.single_reads.store(0, Ordering::Relaxed);
            let mut c = Collected::default();
            w.walk(&mut c);
            let threads: Vec<u64> = c.samples.iter().map(|s| s.thread).collect();
            (threads, shared.single_reads.load(Ordering::Relaxed))
        };
        let (first, _) = tick(&ts);
        assert_eq!(first, [1, 2, 3], "{v:?}");
        assert_eq!(
            tick(&ts),
            (vec![1, 2, 3], 0),
            "{v:?}: an unchanged list is one batch"
        );

        // Thread 2 exits (unlinked) and thread 4 starts (appended after thread 3).
        let leaf = b.stack(&three());
        let t4 = b.thread(4, 0, leaf);
        b.mem.write_u64(b.tstate_next_addr(ts[0]), ts[2]);
        *shared.mem.lock().unwrap() = b.mem.clone();
        let (threads, single) = tick(&[ts[0], ts[2], t4]);
        assert_eq!(threads, [1, 3, 4], "{v:?}");
        assert!(single >= 1, "{v:?}: the new thread is read on its own");
        assert_eq!(tick(&[ts[0], ts[2], t4]), (vec![1, 3, 4], 0), "{v:?}");

        // The head moves: thread 1 exits.
        let head = b.threads_head_addr();
        b.mem.write_u64(head, ts[2]);
        *shared.mem.lock().unwrap() = b.mem.clone();
        assert_eq!(tick(&[]).0, [3, 4], "{v:?}");
    }
}

/// [`SharedMemory`] whose every tick reads "directly", as the guarded in-process reader's do:
/// the walker then lists threads without batching, one copy of each thread state's listing
/// span, after prefetching last tick's thread states.
#[derive(Clone, Default)]
struct DirectMemory(SharedMemory);

impl super::MemoryReader for DirectMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), super::ReadError> {
        self.0.read(addr, buf)
    }

    fn begin_tick(&self) -> bool {
        true
    }
}

/// With direct reads the listing copies each thread state from its first listed field, never
/// whole from its start, and follows the list through the same changes as the batched
/// listing: the frame pointer and data stack are read when a thread is walked.
#[test]
fn direct_reads_list_threads_as_batched_reads_do() {
    for v in versions() {
        let (mut b, ts) = three_threads(v);
        let direct = DirectMemory::default();
        *direct.0.mem.lock().unwrap() = b.mem.clone();
        let mut w = PythonWalker::new(direct.clone(), b.target(), config()).unwrap();
        let mut tick = |watched: &[u64]| {
            *direct.0.watched.lock().unwrap() = watched.to_vec();
            direct.0.single_reads.store(0, Ordering::Relaxed);
            let mut c = Collected::default();
            w.walk(&mut c);
            assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
            let threads: Vec<(u64, usize)> = c
                .samples
                .iter()
                .map(|s| (s.thread, s.frames.len()))
                .collect();
            (threads, direct.0.single_reads.load(Ordering::Relaxed))
        };
        let whole = |threads: &[u64]| threads.iter().map(|&t| (t, 3)).collect::<Vec<_>>();
        assert_eq!(tick(&ts), (whole(&[1, 2, 3]), 0), "{v}");
        assert_eq!(tick(&ts), (whole(&[1, 2, 3]), 0), "{v}");
        // Thread 2 exits (unlinked) and thread 4 starts (appended after thread 3).
        let leaf = b.stack(&three());
        let t4 = b.thread(4, 0, leaf);
        b.mem.write_u64(b.tstate_next_addr(ts[0]), ts[2]);
        *direct.0.mem.lock().unwrap() = b.mem.clone();
        let now = [ts[0], ts[2], t4];
        assert_eq!(tick(&now), (whole(&[1, 3, 4]), 0), "{v}");
        // The head moves: thread 1 exits.
        b.mem.write_u64(b.threads_head_addr(), ts[2]);
        *direct.0.mem.lock().unwrap() = b.mem.clone();
        assert_eq!(tick(&now), (whole(&[3, 4]), 0), "{v}");
    }
}

/// Marks the code object at `code` as a generator's (`co_flags` = `CO_GENERATOR` plus the
/// usual `CO_OPTIMIZED | CO_NEWLOCALS`).
fn make_generator(b: &mut ImageBuilder, code: u64) {
    let l = super::layout::Layout::for_version(b.version()).unwrap();
    assert!(b
        .mem
        .write(code + l.code_flags as u64, &0x23i32.to_le_bytes()));
}

#[test]
fn a_chain_that_ends_at_a_generator_is_truncated_not_whole() {
    for v in versions() {
        // The thread resumed or suspended the generator while its frame was read: the
        // generator's `previous` is NULL, so the chain ends at it.
        let mut b = ImageBuilder::new(v).unwrap();
        let gen = b.code(&FakeFrame::new("produce", "/app/gen.py", 10, 11));
        make_generator(&mut b, gen);
        let leaf_code = b.code(&FakeFrame::new("step", "/app/gen.py", 20, 21));
        let gen_frame = b.frame(gen, 0, 1);
        let leaf = b.frame(leaf_code, gen_frame, 0);
        b.thread(1, 0, leaf);
        // A whole stack with a generator in it stays whole.
        let mut frames = three();
        frames.insert(1, FakeFrame::new("produce2", "/app/gen.py", 40, 41));
        let whole = b.stack(&frames);
        b.thread(2, 0, whole);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
        let torn = c.samples.iter().find(|s| s.thread == 1).unwrap();
        assert!(torn.truncated, "{v}");
        let names: Vec<String> = torn
            .frames
            .iter()
            .map(|&r| w.symbolize(r).function)
            .collect();
        assert_eq!(
            names,
            [expected_name(v, "step"), expected_name(v, "produce")],
            "{v}"
        );
        let whole = c.samples.iter().find(|s| s.thread == 2).unwrap();
        assert!(!whole.truncated, "{v}");
        let stats = w.counters().snapshot();
        assert_eq!((stats.torn_roots, stats.truncated), (1, 1), "{v}");
    }
}

#[test]
fn a_chain_that_ends_at_a_frame_owned_by_a_generator_is_truncated() {
    // 3.11+: the owner byte says so even where the code's flags were not read as a generator's.
    for v in versions().filter(|v| v.minor >= 11) {
        let mut b = ImageBuilder::new(v).unwrap();
        let code = b.code(&FakeFrame::new("resumed", "/app/gen.py", 10, 11));
        let leaf = b.frame(code, 0, 1);
        b.thread(1, 0, leaf);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        assert_eq!(c.samples.len(), 1, "{v}");
        assert!(c.samples[0].truncated, "{v}");
        assert_eq!(w.counters().snapshot().torn_roots, 1, "{v}");
    }
}

#[test]
fn the_trampoline_is_never_a_frame_and_never_a_root() {
    for v in versions() {
        // A shim frame whose owner byte was read as another (a C-stack slot being reused):
        // its code still names it.
        let mut b = ImageBuilder::new(v).unwrap();
        let name = super::code::TRAMPOLINE_NAME;
        let tramp = b.code(&FakeFrame {
            qualname: name.into(),
            ..FakeFrame::new(name, "", 1, 1)
        });
        let body = b.code(&FakeFrame::new("body", "/app/a.py", 10, 11));
        let root = b.frame(tramp, 0, 0);
        let leaf = b.frame(body, root, 0);
        b.thread(1, 0, leaf);
        let mut w = walker(&b, config());
        let c = walk_once(&mut w);
        assert_eq!(c.samples.len(), 1, "{v}");
        let s = &c.samples[0];
        let names = functions(&mut w, &s.frames);
        assert_eq!(names, [expected_name(v, "body")], "{v}");
        assert!(s.truncated, "{v}");
        assert_eq!(w.counters().snapshot().torn_roots, 1, "{v}");
    }
}

/// An image that changes as its thread runs on: the `after + 1`th read that touches `trigger`
/// returns what was there, then `then` (addresses and pointers) is written, as if the thread
/// had moved on just after that read.
#[derive(Clone)]
struct MovingMemory {
    mem: Arc<std::sync::Mutex<FakeMemory>>,
    trigger: u64,
    after: usize,
    then: Vec<(u64, u64)>,
    touched: Arc<AtomicUsize>,
}

impl MovingMemory {
    /// One tick of a new walker over `b`'s image, moved as [`MovingMemory`] says.
    fn walk_once(
        b: &ImageBuilder,
        trigger: u64,
        after: usize,
        then: &[(u64, u64)],
    ) -> (PythonWalker<MovingMemory>, Collected) {
        let mem = MovingMemory {
            mem: Arc::new(std::sync::Mutex::new(b.mem.clone())),
            trigger,
            after,
            then: then.to_vec(),
            touched: Arc::default(),
        };
        let mut w = PythonWalker::new(mem, b.target(), config()).expect("walker over fake image");
        let mut c = Collected::default();
        w.walk(&mut c);
        (w, c)
    }
}

impl super::MemoryReader for MovingMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), super::ReadError> {
        let mut mem = self.mem.lock().unwrap();
        let r = mem.read(addr, buf);
        let touched = addr <= self.trigger && self.trigger < addr + buf.len() as u64;
        if touched && self.touched.fetch_add(1, Ordering::SeqCst) == self.after {
            for &(at, v) in &self.then {
                mem.write_u64(at, v);
            }
        }
        r
    }
}

/// 3.9/3.10: a frame object freed while its thread's chain is read keeps its type, its code
/// and a stale `f_back` (CPython keeps it for reuse, with a reference count of 0), so
/// following it splices another stack's frames into the sample. The walker stops at it and
/// reads the chain again from where the thread then stands, twice at most; a chain that meets
/// a freed frame every time keeps the frames read before it, marked truncated, or, with none,
/// no frame at all (`[truncated]` alone: its time is kept). Every freed frame met is counted.
#[test]
fn a_freed_frame_is_not_followed() {
    for v in versions().filter(|v| v.minor <= 10) {
        let mut b = ImageBuilder::new(v).unwrap();
        // Thread 1 returned from `returned` (whose stale `f_back` leads into frames freed
        // earlier, of another stack) just as its frame pointer was read; it now stands in
        // `three()`, where the walker must find it.
        let gone = b.stack(&[
            FakeFrame::new("elsewhere", "/app/other.py", 1, 2),
            FakeFrame::new("returned", "/app/r.py", 5, 6),
        ]);
        let gone_caller = b.frame_previous(gone);
        assert!(b.free_frame(gone) && b.free_frame(gone_caller), "{v}");
        let now = b.stack(&three());
        let t1 = b.thread(1, 0, gone);
        // Thread 2: its leaf is alive but its caller was freed, and stays so: the leaf is
        // kept, marked truncated.
        let f = three();
        let leaf2 = b.stack(&f);
        let caller2 = b.frame_previous(leaf2);
        assert!(b.free_frame(caller2), "{v}");
        b.thread(2, 0, leaf2);
        // Thread 3: its only frame is freed, and stays so: nothing of its stack is alive to
        // report, but the thread is.
        let leaf3 = b.stack(&f[..1]);
        assert!(b.free_frame(leaf3), "{v}");
        b.thread(3, 0, leaf3);

        let (mut w, c) = MovingMemory::walk_once(&b, gone, 0, &[(b.current_frame_addr(t1), now)]);
        let by_thread = |t: u64| c.samples.iter().find(|s| s.thread == t);
        let s1 = by_thread(1).expect("thread 1 sampled where it stands");
        let got = functions(&mut w, &s1.frames);
        assert_eq!(got, ["gamma", "beta", "alpha"], "{v}");
        assert!(!s1.truncated, "{v}");
        let s2 = by_thread(2).expect("thread 2 sampled");
        let got = functions(&mut w, &s2.frames);
        assert_eq!(got, ["gamma"], "{v}");
        assert!(s2.truncated, "{v}");
        let s3 = by_thread(3).expect("thread 3 kept, with nothing of its stack");
        assert!(s3.frames.is_empty() && s3.truncated, "{v}");
        assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
        let stats = w.counters().snapshot();
        // Thread 1 once, threads 2 and 3 three times each (the walk and its two repeats).
        assert_eq!(stats.moved_chains, 7, "{v}");
        assert_eq!((stats.truncated, stats.torn_roots), (2, 0), "{v}");
        assert_eq!(
            (stats.unreadable_stacks, stats.invalid_reads),
            (1, 1),
            "{v}"
        );
    }
}

/// Every version: a thread pushes a frame by writing its fields one by one where a frame it
/// popped lay, so a copy made meanwhile can hold the new frame's code under the old frame's
/// caller (seen on 3.11: a coroutine made by `whole_coro_outer` shown as called by the
/// function that drove `whole_coro_outer`). The walker reads the leaf again at once and, when
/// it no longer holds what was copied, reads the chain again.
#[test]
fn a_leaf_frame_written_while_read_is_read_again() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let drive = run_drive(&mut b);
        let outer_code = b.code(&FakeFrame::new("outer", "/app/c.py", 20, 21));
        let outer = b.frame(outer_code, drive, 0);
        let leaf_code = b.code(&FakeFrame::new("leaf", "/app/c.py", 30, 31));
        // As copied: the new frame's code, the popped frame's caller.
        let leaf = b.frame(leaf_code, drive, 0);
        b.thread(1, 0, leaf);
        let (mut w, c) =
            MovingMemory::walk_once(&b, leaf, 0, &[(b.frame_previous_addr(leaf), outer)]);
        assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
        let s = &c.samples[0];
        let got = functions(&mut w, &s.frames);
        let want: Vec<String> = ["leaf", "outer", "drive", "run"]
            .iter()
            .map(|n| expected_name(v, n))
            .collect();
        assert_eq!(got, want, "{v}");
        assert!(!s.truncated, "{v}");
        assert_eq!(w.counters().snapshot().moved_chains, 1, "{v}");
    }
}

/// The stack `drive ← run` (leaf first); returns `drive`'s frame.
fn run_drive(b: &mut ImageBuilder) -> u64 {
    b.stack(&[
        FakeFrame::new("run", "/app/threading.py", 1, 2),
        FakeFrame::new("drive", "/app/d.py", 10, 11),
    ])
}

/// A leaf can hold still through the read at once and change later: a C-stack shim's slot
/// (3.12+), which the thread's next C call overwrites as soon as the eval loop leaves it, held
/// a code under the shim's caller (seen on 3.12 and 3.13). The leaf is read again after the
/// walk too; one overwritten since is a move, and the chain is read again from where the
/// thread stands.
#[test]
fn a_leaf_overwritten_during_the_walk_is_read_again() {
    for v in versions() {
        let mut b = ImageBuilder::new(v).unwrap();
        let drive = run_drive(&mut b);
        let other = b.code(&FakeFrame::new("other", "/app/o.py", 30, 31));
        // The slot as read: some code under the shim's caller.
        let slot = b.frame(other, drive, 0);
        let t = b.thread(1, 0, slot);
        // After the second read of the slot (the walk's, then its check at once), the thread
        // has left the eval loop for `drive`, and the slot holds something else.
        let (mut w, c) = MovingMemory::walk_once(
            &b,
            b.frame_previous_addr(slot),
            1,
            &[
                (b.current_frame_addr(t), drive),
                (b.frame_code_addr(slot), 0x4141_4141_4140),
            ],
        );
        assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
        let s = &c.samples[0];
        let got = functions(&mut w, &s.frames);
        let want: Vec<String> = ["drive", "run"]
            .iter()
            .map(|n| expected_name(v, n))
            .collect();
        assert_eq!(got, want, "{v}");
        assert_eq!(w.counters().snapshot().moved_chains, 1, "{v}");
    }
}

/// An image shared with the test that counts, for each watched thread state, the reads that
/// touch it, one by one or batched; `direct` makes every tick read as the guarded reader does.
#[derive(Clone, Default)]
struct CountingMemory {
    mem: Arc<std::sync::Mutex<FakeMemory>>,
    /// Each watched state's first and last byte, and the reads that touched it.
    watched: Arc<std::sync::Mutex<Vec<(u64, u64, usize)>>>,
    direct: bool,
}

impl CountingMemory {
    fn count(&self, addr: u64, len: usize) {
        for (start, last, n) in self.watched.lock().unwrap().iter_mut() {
            if addr <= *last && addr + len as u64 > *start {
                *n += 1;
            }
        }
    }

    /// Watches `states` (each `size` bytes) from now on, with no read counted.
    fn watch(&self, states: &[u64], size: usize) {
        *self.watched.lock().unwrap() = states
            .iter()
            .map(|&s| (s, s + size as u64 - 1, 0))
            .collect();
    }

    /// The reads of each watched state since [`CountingMemory::watch`], and sets them to 0.
    fn take(&self) -> Vec<usize> {
        let mut w = self.watched.lock().unwrap();
        w.iter_mut().map(|(_, _, n)| std::mem::take(n)).collect()
    }
}

impl super::MemoryReader for CountingMemory {
    fn read(&self, addr: u64, buf: &mut [u8]) -> Result<(), super::ReadError> {
        self.count(addr, buf.len());
        self.mem.lock().unwrap().read(addr, buf)
    }

    fn read_scatter(&self, addrs: &[u64], len: usize, out: &mut [u8], ok: &mut [bool]) {
        for &a in addrs {
            self.count(a, len);
        }
        let mem = self.mem.lock().unwrap();
        super::memory::scatter_one_by_one(&*mem, addrs, len, out, ok);
    }

    fn begin_tick(&self) -> bool {
        self.direct
    }
}

/// A thread state whose thread, and the next one's in the list, have not run since the last
/// tick is not read again (ADR 0038). Real waiting threads stand behind an image's thread
/// states (their tids are the states' native ids), so the walker's scheduler pages watch them:
/// once they prove the threads idle, a tick reads only the list's last state; a thread that
/// runs has its state, and the one before it, read again; one that leaves the list (it must
/// run to) is gone at the next tick; one that starts is found at the head; and a state unlinked
/// while its thread did not run (another thread deleted it) is gone by the next full listing.
#[test]
fn a_waiting_threads_state_is_not_read_again() {
    use super::listing::FULL_LISTING_EVERY;
    use super::sched::tests::{perf_available, Spinner};
    if !perf_available() {
        return;
    }
    for direct in [true, false] {
        for v in versions() {
            let sp: Vec<Spinner> = (0..5).map(|_| Spinner::start()).collect();
            let mut b = ImageBuilder::new(v).unwrap();
            let mut ts: Vec<u64> = (0..4)
                .map(|i| {
                    let leaf = b.stack(&three());
                    b.thread(i as u64 + 1, u64::from(sp[i].tid), leaf)
                })
                .collect();
            let size = super::layout::Layout::for_version(v)
                .unwrap()
                .tstate_read_size();
            let mem = CountingMemory {
                direct,
                ..CountingMemory::default()
            };
            *mem.mem.lock().unwrap() = b.mem.clone();
            let mut w = PythonWalker::new(mem.clone(), b.target(), WalkerConfig::default())
                .expect("walker over fake image");
            for (i, s) in sp.iter().enumerate() {
                w.registry().set_native_id(i as u64 + 1, s.tid);
            }
            let mut n = 0u64;
            // One tick (after a full listing, when the next would be one): the threads
            // sampled, each state's reads, the states skipped.
            let mut tick = |w: &mut PythonWalker<CountingMemory>, b: &ImageBuilder| {
                *mem.mem.lock().unwrap() = b.mem.clone();
                let mut c = Collected::default();
                if (n + 1).is_multiple_of(FULL_LISTING_EVERY) {
                    let before = w.counters().snapshot().thread_states_skipped;
                    w.walk(&mut c);
                    n += 1;
                    let after = w.counters().snapshot().thread_states_skipped;
                    assert_eq!(before, after, "{v} direct {direct}: a full listing");
                    c = Collected::default();
                }
                mem.take();
                let before = w.counters().snapshot().thread_states_skipped;
                w.walk(&mut c);
                n += 1;
                assert!(c.errors.is_empty(), "{v}: {:?}", c.errors);
                assert!(c.samples.iter().all(|s| s.frames.len() == 3), "{v}");
                let threads: Vec<u64> = c.samples.iter().map(|s| s.thread).collect();
                let skipped = w.counters().snapshot().thread_states_skipped - before;
                (threads, mem.take(), skipped)
            };
            mem.watch(&ts, size);
            let what = format!("{v} direct {direct}");
            // Until the threads' pages are open and prove them idle.
            let mut warm = 0;
            while tick(&mut w, &b).2 == 0 {
                warm += 1;
                assert!(warm < 40, "{what}: never skipped");
            }
            let (threads, reads, skipped) = tick(&mut w, &b);
            assert_eq!(threads, [1, 2, 3, 4], "{what}");
            assert_eq!((&reads[..3], skipped), (&[0, 0, 0][..], 3), "{what}");
            assert!(reads[3] >= 1, "{what}: the list's end is read");

            // Thread 2 runs: its state, and thread 1's (whose next it is), are read again.
            sp[1].burn(2);
            let (threads, reads, skipped) = tick(&mut w, &b);
            assert_eq!(threads, [1, 2, 3, 4], "{what}");
            assert!(
                reads[0] >= 1 && reads[1] >= 1 && reads[2] == 0,
                "{what}: {reads:?}"
            );
            assert_eq!(skipped, 1, "{what}");

            // Thread 2 leaves the list (its thread runs to do so).
            sp[1].burn(2);
            b.mem.write_u64(b.tstate_next_addr(ts[0]), ts[2]);
            assert_eq!(tick(&mut w, &b).0, [1, 3, 4], "{what}");
            assert_eq!(tick(&mut w, &b).0, [1, 3, 4], "{what}");

            // Thread 5 starts: its state goes to the head.
            let leaf = b.stack(&three());
            let t5 = b.thread(5, u64::from(sp[4].tid), leaf);
            w.registry().set_native_id(5, sp[4].tid);
            b.mem.write_u64(b.tstate_next_addr(ts[3]), 0);
            b.mem.write_u64(b.tstate_next_addr(t5), ts[0]);
            b.mem.write_u64(b.threads_head_addr(), t5);
            ts.push(t5);
            mem.watch(&ts, size);
            let (threads, reads, _) = tick(&mut w, &b);
            assert_eq!(threads, [5, 1, 3, 4], "{what}");
            assert!(reads[4] >= 1, "{what}: a new state is read");

            // Another thread unlinks thread 3's state while thread 3 waits: it may be sampled
            // from the last listing until the next full listing, not after.
            b.mem.write_u64(b.tstate_next_addr(ts[0]), ts[3]);
            let mut seen = vec![];
            for _ in 0..FULL_LISTING_EVERY {
                seen.push(tick(&mut w, &b).0);
            }
            assert_eq!(seen.last().unwrap(), &[5, 1, 4], "{what}: {seen:?}");
            for s in sp {
                s.stop();
            }
        }
    }
}
