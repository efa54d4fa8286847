//! Helpers shared by the file-store fault tests (`fault_*.rs`).
// Shared by several test binaries, each using some of it: `pub`, and no dead-code warnings.
#![allow(dead_code, unreachable_pub)]

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use span_profile_core::{Frame, Profile, ProfileSample, Resource, Stack};

/// A window whose pprof is about `kib` KiB even after gzip: frame names are pseudo-random hex.
pub fn window(service: &str, i: u64, kib: usize) -> Profile {
    let (resource, _) = Resource::from_vars(Some(service), Some("service.instance.id=host-1"));
    let mut p = Profile::empty(
        resource,
        1_700_000_000_000_000_000 + i * 1_000_000_000,
        1,
        1,
    );
    let mut rng = span_profile_test::XorShift(0x9e37_79b9_7f4a_7c15 ^ i);
    let frames = kib * 1024 / 24;
    for f in 0..frames {
        let x = rng.next_u64();
        p.frames.push(Frame::new(
            format!("{x:016x}{:08x}", x >> 32),
            "a.py",
            f as u32,
        ));
    }
    p.stacks.push(Stack {
        frames: (0..frames as u32).collect(),
        truncated: false,
    });
    p.samples.push(
        ProfileSample::new(0, Arc::from("background"), Arc::from("main"))
            .with_cpu(i + 1, 1)
            .with_wall(i + 1, 1),
    );
    p
}

pub fn files_named(dir: &Path, pred: &dyn Fn(&str) -> bool) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        let Ok(entries) = fs::read_dir(&d) else {
            continue;
        };
        for e in entries.flatten() {
            let path = e.path();
            if path.is_dir() {
                todo.push(path);
            } else if pred(&e.file_name().to_string_lossy()) {
                out.push(path);
            }
        }
    }
    out
}
