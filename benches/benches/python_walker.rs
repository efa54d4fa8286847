//! The CPython walker's cost against a real interpreter (pyenv CPython 3.12 by default;
//! `SPAN_PROFILE_BENCH_PYTHON` names another): a child process parks threads in recursive
//! Python functions and the walker reads it with `ProcessVmReader::for_pid`, as the
//! real-interpreter tests do.
//!
//! - `python_walker/stack/{10,30,100}`: one tick over a child with one thread parked at that
//!   depth (plus its main thread, 3 frames): the cost per sample of a stack that deep.
//! - `python_walker/tick/{8,64,256}`: one tick over a child with that many threads, each
//!   parked 12 frames deep: the whole tick.
//!
//! CPU time is disabled (`CpuTimeSource::Disabled`), so every thread is walked every tick:
//! this is the cost without the idle-thread shortcut (which only applies in-process, where a
//! thread's CPU clock is one `clock_gettime`). Missing interpreter: the bench prints a note and
//! measures nothing.

use std::io::{BufRead, BufReader, Write};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use span_profile::walker::{
    CpuTimeSource, ProcessVmReader, PythonVersion, PythonWalker, Target, TypeAddresses,
    WalkerConfig,
};
use span_profile_core::{RawSample, StackSink, StackWalker, WalkError};

const TARGET: &str = r#"
import ctypes, sys, threading, types
threads, depth = int(sys.argv[1]), int(sys.argv[2])
stop = threading.Event()
ready = threading.Barrier(threads + 1)
def park(n):
    if n > 1:
        return park(n - 1)
    ready.wait()
    stop.wait()
for _ in range(threads):
    threading.Thread(target=park, args=(depth,), daemon=True).start()
ready.wait()
print("runtime", ctypes.addressof(ctypes.c_char.in_dll(ctypes.pythonapi, "_PyRuntime")))
print("types", id(types.CodeType), id(str), id(bytes), id(types.FrameType))
print("version", sys.version_info[0], sys.version_info[1])
print("ready", flush=True)
sys.stdin.read()
"#;

struct Interp {
    child: Child,
    target: Target,
}

impl Drop for Interp {
    fn drop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn python() -> Option<PathBuf> {
    let p = std::env::var_os("SPAN_PROFILE_BENCH_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| span_profile_test::pyenv_versions().join("3.12.1/bin/python"));
    p.exists().then_some(p)
}

fn spawn(python: &PathBuf, threads: usize, depth: usize) -> Option<Interp> {
    let mut child = Command::new(python)
        .args(["-c", TARGET, &threads.to_string(), &depth.to_string()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .ok()?;
    let stdout = child.stdout.take()?;
    let mut runtime = 0;
    let mut types = TypeAddresses::default();
    let mut version = PythonVersion::new(0, 0);
    let num = |s: Option<&str>| s.and_then(|s| s.parse::<u64>().ok()).unwrap_or(0);
    for line in BufReader::new(stdout).lines() {
        let line = line.ok()?;
        let mut w = line.split_whitespace();
        match w.next() {
            Some("runtime") => runtime = num(w.next()),
            Some("types") => {
                types = TypeAddresses {
                    code: num(w.next()),
                    unicode: num(w.next()),
                    bytes: num(w.next()),
                    frame: num(w.next()),
                }
            }
            Some("version") => {
                let major = num(w.next()) as u8;
                version = PythonVersion::new(major, num(w.next()) as u8);
            }
            Some("ready") => break,
            _ => {}
        }
    }
    let _ = child.stdin.as_mut().map(|s| s.flush());
    Some(Interp {
        child,
        target: Target {
            version,
            runtime,
            interpreter: 0,
            types,
        },
    })
}

#[derive(Default)]
struct Count {
    samples: u64,
    frames: u64,
    errors: u64,
}

impl StackSink for Count {
    fn sample(&mut self, s: &RawSample<'_>) {
        self.samples += 1;
        self.frames += s.frames.len() as u64;
    }
    fn error(&mut self, _: WalkError) {
        self.errors += 1;
    }
}

fn walker(t: &Interp) -> PythonWalker<ProcessVmReader> {
    let reader = ProcessVmReader::for_pid(t.child.id()).expect("process_vm_readv on the child");
    let config = WalkerConfig::default().with_cpu_time(CpuTimeSource::Disabled);
    PythonWalker::new(reader, t.target, config).expect("walker over the child")
}

fn bench(c: &mut Criterion) {
    let Some(py) = python() else {
        eprintln!("note: python_walker: no interpreter (set SPAN_PROFILE_BENCH_PYTHON); skipped");
        return;
    };
    let mut g = c.benchmark_group("python_walker/stack");
    for depth in [10usize, 30, 100] {
        let Some(t) = spawn(&py, 1, depth) else {
            eprintln!("note: python_walker: cannot start {}", py.display());
            return;
        };
        let mut w = walker(&t);
        let mut warm = Count::default();
        w.walk(&mut warm);
        assert!(
            warm.frames as usize >= depth,
            "walked {} frames",
            warm.frames
        );
        g.throughput(Throughput::Elements(1));
        g.bench_with_input(BenchmarkId::from_parameter(depth), &depth, |b, _| {
            b.iter(|| {
                let mut s = Count::default();
                w.walk(&mut s);
                s.frames
            })
        });
    }
    g.finish();
    let mut g = c.benchmark_group("python_walker/tick");
    for threads in [8usize, 64, 256] {
        let Some(t) = spawn(&py, threads, 12) else {
            return;
        };
        let mut w = walker(&t);
        let mut warm = Count::default();
        w.walk(&mut warm);
        assert!(
            warm.samples as usize >= threads,
            "sampled {} threads",
            warm.samples
        );
        g.throughput(Throughput::Elements(threads as u64));
        g.bench_with_input(BenchmarkId::from_parameter(threads), &threads, |b, _| {
            b.iter(|| {
                let mut s = Count::default();
                w.walk(&mut s);
                s.samples
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
