//! The CPython walker over arbitrary memory images, through its `MemoryReader` trait.
//!
//! A valid image of a random CPython version (3.9-3.13) is laid out with the walker's own
//! `testing::ImageBuilder` (threads, frames, code objects, strings, line tables), then
//! corrupted by the fuzzer: words and bytes overwritten, pointers redirected into other
//! objects or themselves, regions replaced by raw bytes. The walker must never panic, must
//! honour its caps (threads per tick, frames per stack, characters per name), and its counters
//! must agree with what it reported.
#![no_main]

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use span_profile::walker::testing::{Collected, FakeFrame, ImageBuilder};
use span_profile::walker::{
    CpuTimeSource, MemoryReader, PythonVersion, PythonWalker, WalkerConfig,
};
use span_profile_core::{StackWalker, WalkError};

#[derive(Arbitrary, Debug)]
struct FrameSpec {
    name: String,
    file: String,
    firstlineno: i32,
    delta: u8,
}

#[derive(Arbitrary, Debug)]
struct ThreadSpec {
    id: u64,
    native: u64,
    frames: Vec<FrameSpec>,
    /// Extra frames repeating one code object, to cross the depth cap.
    repeat: u8,
}

#[derive(Arbitrary, Debug)]
enum Mutation {
    WriteU64 {
        obj: u8,
        offset: u8,
        value: u64,
    },
    WriteByte {
        obj: u8,
        offset: u8,
        value: u8,
    },
    /// Writes the address of object `to` (plus `delta`) into `obj`: links across objects,
    /// cycles, pointers into the middle of an object.
    Pointer {
        obj: u8,
        offset: u8,
        to: u8,
        delta: i8,
    },
    /// Maps raw bytes at an object's address plus `delta` (replacing the region at 0).
    Region {
        obj: u8,
        delta: u16,
        bytes: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    minor: u8,
    threads: Vec<ThreadSpec>,
    mutations: Vec<Mutation>,
    max_depth: u8,
    max_threads: u8,
    max_chars: u8,
    cache: u8,
    ticks: u8,
}

fuzz_target!(|input: Input| {
    let version = PythonVersion::new(3, 9 + input.minor % 5);
    let Some(mut b) = ImageBuilder::new(version) else {
        return;
    };
    let target = b.target();
    let mut objects = vec![target.runtime];
    for (i, t) in input.threads.iter().take(4).enumerate() {
        let frames: Vec<FakeFrame> = t
            .frames
            .iter()
            .take(12)
            .map(|f| FakeFrame {
                qualname: format!("Q.{}", f.name),
                name: f.name.clone(),
                file: f.file.clone(),
                firstlineno: f.firstlineno,
                line: f.firstlineno.saturating_add(i32::from(f.delta % 61)),
            })
            .collect();
        let mut leaf = b.stack(&frames);
        if t.repeat > 0 {
            let code = b.code(&FakeFrame::new("recurse", "deep.py", 1, 2));
            objects.push(code);
            for _ in 0..u16::from(t.repeat) * 2 {
                leaf = b.frame(code, leaf, 0);
            }
        }
        // Collect the leaf frame, its code object and that code's name string.
        objects.push(leaf);
        let mut word = [0u8; 8];
        if leaf != 0 && b.mem.read(b.frame_code_addr(leaf), &mut word).is_ok() {
            let code = u64::from_le_bytes(word);
            objects.push(code);
            if b.mem.read(b.code_name_addr(code), &mut word).is_ok() {
                objects.push(u64::from_le_bytes(word));
            }
            if b.mem.read(b.frame_previous_addr(leaf), &mut word).is_ok() {
                objects.push(u64::from_le_bytes(word));
            }
        }
        let ts = b.thread(t.id | (i as u64), t.native, leaf);
        objects.push(ts);
    }
    objects.retain(|&a| a != 0);
    for m in input.mutations.iter().take(16) {
        let at = |i: u8| objects[usize::from(i) % objects.len()];
        match m {
            Mutation::WriteU64 { obj, offset, value } => {
                b.mem.write_u64(at(*obj) + u64::from(*offset), *value);
            }
            Mutation::WriteByte { obj, offset, value } => {
                b.mem.write(at(*obj) + u64::from(*offset), &[*value]);
            }
            Mutation::Pointer {
                obj,
                offset,
                to,
                delta,
            } => {
                let p = at(*to).wrapping_add_signed(i64::from(*delta));
                b.mem.write_u64(at(*obj) + u64::from(*offset), p);
            }
            Mutation::Region { obj, delta, bytes } => {
                let mut bytes = bytes.clone();
                bytes.truncate(4096);
                b.mem.insert(at(*obj) + u64::from(*delta), bytes);
            }
        }
    }

    let max_depth = usize::from(input.max_depth % 64) + 1;
    let max_threads = usize::from(input.max_threads % 6) + 1;
    let max_chars = usize::from(input.max_chars % 40) + 1;
    let config = WalkerConfig::default()
        .with_max_depth(max_depth)
        .with_max_threads(max_threads)
        .with_max_string_chars(max_chars)
        .with_code_cache_capacity(usize::from(input.cache % 16))
        .with_cpu_time(CpuTimeSource::Disabled);
    let Ok(mut w) = PythonWalker::new(b.mem, target, config) else {
        return;
    };
    let mut reported = 0u64;
    let mut errors = 0u64;
    for _ in 0..(input.ticks % 3) + 1 {
        let mut c = Collected::default();
        w.walk(&mut c);
        assert!(
            c.samples.len() <= max_threads,
            "{} samples",
            c.samples.len()
        );
        for s in &c.samples {
            // A stack has frames, or none at all when they could not be read: then it is
            // marked truncated (ADR 0020, decision 7).
            assert!(s.frames.len() <= max_depth);
            assert!(!s.frames.is_empty() || s.truncated);
            for &raw in &s.frames {
                let f = w.symbolize(raw);
                assert!(f.function.chars().count() <= max_chars.max(9) + 1, "{f:?}");
                assert!(f.file.chars().count() <= max_chars + 1, "{f:?}");
            }
        }
        let skipped = c
            .errors
            .iter()
            .filter(|e| **e == WalkError::Skipped)
            .count();
        assert!(skipped <= 1024);
        reported += c.samples.len() as u64;
        errors += c.errors.len() as u64;
    }
    let stats = w.counters().snapshot();
    assert_eq!(stats.samples, reported);
    // Unreadable stacks are invalid reads reported as samples, not as errors.
    assert!(stats.unreadable_stacks <= stats.invalid_reads);
    assert_eq!(
        stats.invalid_reads - stats.unreadable_stacks + stats.skipped_threads,
        errors
    );
    assert!(w.code_cache_len() <= usize::from(input.cache % 16));
});
