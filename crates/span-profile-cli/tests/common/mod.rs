//! Shared by the end-to-end tests: a store written by the real pipeline (core `Profiler` with
//! a walker, the `FileStore` exporter, spans started in the span table and entered in the
//! registry), and a way to run the built binary.
// Shared by several test binaries, each using some of it: `pub`, and no dead-code warnings.
#![allow(dead_code, unreachable_pub)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, Frame, Profiler, RawFrame, RawSample, SpanId,
    SpanSource, SpanStart, StackSink, StackWalker, TraceId,
};
use span_profile_export::FileStore;

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> Self {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        let p = std::env::temp_dir().join(format!(
            "span-profile-cli-{name}-{}-{nanos}",
            std::process::id()
        ));
        std::fs::create_dir_all(&p).unwrap();
        Self(p)
    }
    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The stacks of the checkout scenario, leaf first.
pub const PARSE_DATE: &[&str] = &["parse_date", "calculate", "handle", "serve"];
pub const APPLY_DISCOUNT: &[&str] = &["apply_discount", "calculate", "handle", "serve"];
pub const CALCULATE: &[&str] = &["calculate", "handle", "serve"];
pub const HANDLE: &[&str] = &["render", "handle", "serve"];
pub const LIST_ORDERS: &[&str] = &["parse_date", "list_orders", "handle", "serve"];
pub const IDLE: &[&str] = &["wait", "idle_loop"];
/// A new cost under a chain of callers: `audit_log` calls `json.dumps`, whose time is spent in
/// `JSONEncoder.iterencode`. A name `function@file` is a frame in that file (else `app.py`).
pub const AUDIT: &[&str] = &[
    "iterencode@json/encoder.py",
    "encode@json/encoder.py",
    "dumps@json/__init__.py",
    "audit_log",
    "handle",
    "serve",
];
/// Two functions named `run` in different files.
pub const RUN_ASYNCIO: &[&str] = &["run@asyncio/runners.py", "serve"];
pub const RUN_UVICORN: &[&str] = &["run@uvicorn/main.py", "serve"];
/// The short-span workload's stacks, leaf first.
pub const CACHE_GET: &[&str] = &["cache_get", "lookup", "handle", "serve"];
pub const DB_QUERY: &[&str] = &["db_query", "handle", "serve"];
pub const DB_DECODE: &[&str] = &["decode_row", "db_query", "handle", "serve"];
/// A leaf frame whose function name holds a line break, ESC and NUL: text that must reach a
/// terminal escaped.
pub const EVIL_FRAME: &[&str] = &["evil\nREGRESSION frame\u{1b}[2J\0", "handle", "serve"];

/// A walker with two threads: thread 1 (the request thread) runs whatever stack the test
/// sets with [`Script::set`] or [`Script::run`], thread 2 always idles in `idle_loop`.
#[derive(Debug, Clone)]
pub struct Script {
    current: Arc<AtomicUsize>,
    /// How many walks found thread 1 in each of [`STACKS`].
    walks: Arc<Vec<AtomicU64>>,
}

impl Default for Script {
    fn default() -> Self {
        Self {
            current: Arc::default(),
            walks: Arc::new(STACKS.iter().map(|_| AtomicU64::new(0)).collect()),
        }
    }
}

const STACKS: &[&[&str]] = &[
    IDLE,
    PARSE_DATE,
    APPLY_DISCOUNT,
    CALCULATE,
    HANDLE,
    LIST_ORDERS,
    AUDIT,
    RUN_ASYNCIO,
    RUN_UVICORN,
    CACHE_GET,
    DB_QUERY,
    DB_DECODE,
    EVIL_FRAME,
];

fn stack_index(stack: &[&str]) -> usize {
    STACKS.iter().position(|s| *s == stack).unwrap()
}

fn frame_id(name: &str) -> u64 {
    let all: Vec<&str> = STACKS.iter().flat_map(|s| s.iter().copied()).collect();
    all.iter().position(|n| *n == name).unwrap() as u64 + 1
}

impl Script {
    /// Thread 1 runs `stack` from now on.
    pub fn set(&self, stack: &[&str]) {
        // Relaxed: the sampler only needs to see the change eventually.
        self.current.store(stack_index(stack), Ordering::Relaxed);
    }

    /// Thread 1 runs `stack` for `ms` milliseconds, and then on until the sampler has walked
    /// it the `ms / 10` times (rounded) a 100 Hz sampler would have. On a loaded machine the
    /// sampler's ticks come late (CI once saw 5 walks in a 200 ms stage); a stage cut short of
    /// its walks would leave a test's sample counts, and the shares between its stages, to the
    /// machine's load. A late sampler stretches the stages instead, all in proportion. Gives up
    /// after 30 s, and the test's own assertions then say what is missing.
    pub fn run(&self, stack: &[&str], ms: u64) {
        self.set(stack);
        let walks = &self.walks[stack_index(stack)];
        let before = walks.load(Ordering::Relaxed);
        let start = Instant::now();
        std::thread::sleep(Duration::from_millis(ms));
        let want = (ms + 5) / 10;
        while walks.load(Ordering::Relaxed) - before < want
            && start.elapsed() < Duration::from_secs(30)
        {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The walker; it reads each thread's span from `registry`, which [`start_span`] feeds.
    pub fn walker(&self, registry: Arc<ActiveSpanRegistry>) -> ScriptWalker {
        ScriptWalker {
            registry,
            current: self.current.clone(),
            walks: self.walks.clone(),
            raw: STACKS
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|n| RawFrame {
                            id: frame_id(n),
                            line: 1,
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

#[derive(Debug)]
pub struct ScriptWalker {
    registry: Arc<ActiveSpanRegistry>,
    current: Arc<AtomicUsize>,
    walks: Arc<Vec<AtomicU64>>,
    raw: Vec<Vec<RawFrame>>,
}

impl StackWalker for ScriptWalker {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        let i = self.current.load(Ordering::Relaxed);
        self.walks[i].fetch_add(1, Ordering::Relaxed);
        for (key, stack, name) in [(1, i, "request"), (2, 0, "idler")] {
            let key = ExecutionKey::thread(key);
            sink.sample(
                &RawSample::new(key, &self.raw[stack], name)
                    .with_cpu_ns(10_000_000)
                    .with_span(SpanSource::current_in(&self.registry, key)),
            );
        }
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        let all: Vec<&str> = STACKS.iter().flat_map(|s| s.iter().copied()).collect();
        let name = all[raw.id as usize - 1];
        let (function, file) = name.split_once('@').unwrap_or((name, "app.py"));
        Frame::new(function, file, raw.line)
    }
}

/// A profiler writing 60 s windows to a file store at `dir`, sampling `script` at 100 Hz.
pub fn profiler(dir: &Path, service: &str, version: &str, script: &Script) -> Profiler {
    profiler_with_window(dir, service, version, script, Duration::from_secs(60))
}

/// The same with windows of `window`.
pub fn profiler_with_window(
    dir: &Path,
    service: &str,
    version: &str,
    script: &Script,
    window: Duration,
) -> Profiler {
    let builder = Profiler::builder();
    let registry = builder.registry().clone();
    builder
        .with_window(window)
        .with_service(service)
        .with_version(version)
        .with_instance("test-1")
        .with_sample_rate_hz(100)
        .with_walker(script.walker(registry))
        .with_exporter(FileStore::new(dir))
        .start()
        .unwrap()
}

pub fn unix_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos() as u64
}

/// A span started in the span table and entered on thread 1, as the span hooks do.
pub struct Span<'a> {
    profiler: &'a Profiler,
    pub id: SpanId,
    pub active: ActiveSpan,
    entered: bool,
}

pub fn start_span<'a>(
    profiler: &'a Profiler,
    trace: u128,
    id: u64,
    parent: Option<u64>,
    name: &str,
    route: Option<&str>,
) -> Span<'a> {
    let span_id = SpanId::from_u64(id).unwrap();
    let active = profiler.span_table().start(SpanStart {
        trace_id: TraceId::from_u128(trace).unwrap(),
        span_id,
        parent_span_id: parent.map(|p| SpanId::from_u64(p).unwrap()),
        parent_is_remote: false,
        name,
        route,
        start_unix_ns: unix_ns(),
    });
    profiler.registry().enter(ExecutionKey::thread(1), active);
    Span {
        profiler,
        id: span_id,
        active,
        entered: true,
    }
}

/// A span started in the span table but never entered on a sampled thread: a root whose work
/// all happens in its children, so it never is a sample's innermost span.
pub fn start_unentered_span<'a>(
    profiler: &'a Profiler,
    trace: u128,
    id: u64,
    name: &str,
    route: Option<&str>,
) -> Span<'a> {
    let span_id = SpanId::from_u64(id).unwrap();
    let active = profiler.span_table().start(SpanStart {
        trace_id: TraceId::from_u128(trace).unwrap(),
        span_id,
        parent_span_id: None,
        parent_is_remote: false,
        name,
        route,
        start_unix_ns: unix_ns(),
    });
    Span {
        profiler,
        id: span_id,
        active,
        entered: false,
    }
}

impl Span<'_> {
    pub fn end(self) {
        if self.entered {
            self.profiler
                .registry()
                .exit(ExecutionKey::thread(1), self.id);
        }
        self.profiler.span_table().end(self.id, unix_ns(), None);
    }
}

pub fn ms(n: u64) {
    std::thread::sleep(Duration::from_millis(n));
}

/// The checkout scenario, recorded into `dir`: trace 0xfeed with `POST /checkout` (span 1,
/// route `/checkout`) around `pricing.calculate` (span 2, about 720 ms: mostly `parse_date`,
/// some `apply_discount`), then a quicker `pricing.calculate` (span 3, about 150 ms) in trace
/// 0xbeef, and a `GET /orders` request (span 4, trace 0xcafe) that also parses dates.
pub fn record_checkout(dir: &Path, version: &str) {
    record_checkout_in_windows(dir, version, Duration::from_secs(60));
}

/// [`record_checkout`] with windows of `window`, so that spans cross windows.
pub fn record_checkout_in_windows(dir: &Path, version: &str, window: Duration) {
    let script = Script::default();
    let p = profiler_with_window(dir, "checkout", version, &script, window);
    let root = start_span(&p, 0xfeed, 1, None, "POST /checkout", Some("/checkout"));
    script.run(HANDLE, 50);
    let calc = start_span(&p, 0xfeed, 2, Some(1), "pricing.calculate", None);
    script.run(PARSE_DATE, 560);
    script.run(APPLY_DISCOUNT, 90);
    script.run(CALCULATE, 70);
    calc.end();
    script.run(HANDLE, 30);
    root.end();

    let root = start_span(&p, 0xbeef, 5, None, "POST /checkout", Some("/checkout"));
    let calc = start_span(&p, 0xbeef, 3, Some(5), "pricing.calculate", None);
    script.run(APPLY_DISCOUNT, 150);
    calc.end();
    root.end();

    let orders = start_span(&p, 0xcafe, 4, None, "GET /orders", Some("/orders"));
    script.run(LIST_ORDERS, 200);
    orders.end();
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
}

/// Trace 0xab0, one request whose root span has no samples of its own, in windows of
/// `window`: `POST /checkout` (span 0x10, route `/checkout`, never entered on the sampled
/// thread) has the children `pricing.calculate` (0x11, `parse_date` for about 300 ms), which
/// has `db.query` (0x12, `apply_discount` for about 100 ms), and then `render` (0x13,
/// `handle`'s `render` for about 100 ms). Each leaf frame runs in one span only, so a test
/// knows which span every sample of a frame belongs to; between spans the thread idles with
/// no span.
pub fn record_request_with_empty_root(dir: &Path, window: Duration) {
    let script = Script::default();
    let p = profiler_with_window(dir, "checkout", "1.0", &script, window);
    script.set(PARSE_DATE);
    let root = start_unentered_span(&p, 0xab0, 0x10, "POST /checkout", Some("/checkout"));
    let calc = start_span(&p, 0xab0, 0x11, Some(0x10), "pricing.calculate", None);
    script.run(PARSE_DATE, 300);
    script.set(APPLY_DISCOUNT);
    let db = start_span(&p, 0xab0, 0x12, Some(0x11), "db.query", None);
    script.run(APPLY_DISCOUNT, 100);
    db.end();
    script.set(IDLE);
    calc.end();
    script.set(HANDLE);
    let render = start_span(&p, 0xab0, 0x13, Some(0x10), "render", None);
    script.run(HANDLE, 100);
    script.set(IDLE);
    render.end();
    root.end();
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
}

/// What [`record_short_spans`] ran, as the test measured it.
#[derive(Debug, Clone, Default)]
pub struct ShortSpans {
    /// `cache.get` spans run.
    pub cache_spans: u64,
    /// `db.query` spans run (each with one `db.decode` child).
    pub db_spans: u64,
    /// Each `cache.get` span's time, from just before its start to just after its end (ns).
    pub cache_ns: Vec<u64>,
    /// The same for each `db.query` span.
    pub db_ns: Vec<u64>,
}

/// Many spans shorter than the sampling interval, in windows of `window`: 150 `cache.get`
/// spans of about 2 ms (stack [`CACHE_GET`], set before each span starts and reset after it
/// ends, so every sample of one has the leaf `cache_get`), 3 ms apart with no span; then 10
/// `db.query` spans of about 80 ms ([`DB_QUERY`]) with a `db.decode` child of about 30 ms
/// ([`DB_DECODE`]) in the middle; then more than a second with no span, so that no span is
/// carried past the last window (ADR 0010).
pub fn record_short_spans(dir: &Path, window: Duration) -> ShortSpans {
    let script = Script::default();
    let p = profiler_with_window(dir, "cache", "1.0", &script, window);
    let mut truth = ShortSpans::default();
    let mut id = 0x100;
    for i in 0..150u128 {
        script.set(CACHE_GET);
        let t0 = unix_ns();
        let span = start_span(&p, 0xc000 + i, id, None, "cache.get", Some("/items"));
        ms(2);
        span.end();
        truth.cache_ns.push(unix_ns() - t0);
        script.set(IDLE);
        truth.cache_spans += 1;
        id += 1;
        ms(3);
    }
    for i in 0..10u128 {
        script.set(DB_QUERY);
        let t0 = unix_ns();
        let q = start_span(&p, 0xd000 + i, id, None, "db.query", Some("/items"));
        ms(25);
        script.set(DB_DECODE);
        let d = start_span(&p, 0xd000 + i, id + 1, Some(id), "db.decode", None);
        ms(30);
        d.end();
        script.set(DB_QUERY);
        ms(25);
        q.end();
        truth.db_ns.push(unix_ns() - t0);
        script.set(IDLE);
        truth.db_spans += 1;
        id += 2;
    }
    ms(1_200);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
    truth
}

/// The stored windows (`.pb.gz` files) under `dir`.
pub fn window_files(dir: &Path) -> Vec<PathBuf> {
    files_ending(dir, ".pb.gz")
}

/// The files under `dir` whose names end with `suffix`, sorted.
fn files_ending(dir: &Path, suffix: &str) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(d).unwrap().flatten() {
            let p = e.path();
            if p.is_dir() {
                todo.push(p);
            } else if p.to_string_lossy().ends_with(suffix) {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// The number of stored windows under `dir`.
pub fn count_files(dir: &Path) -> usize {
    window_files(dir).len()
}

/// Parses JSON output.
pub fn json(out: &str) -> serde_json::Value {
    serde_json::from_str(out).unwrap_or_else(|e| panic!("{e}: {out}"))
}

/// Runs the built `span-profile` with `args`.
pub fn run(args: &[&str]) -> Output {
    run_with_env(args, &[])
}

/// Runs the built `span-profile` with `args` and environment variables `env`.
pub fn run_with_env(args: &[&str], env: &[(&str, &str)]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_span-profile"))
        .args(args)
        .envs(env.iter().copied())
        .output()
        .unwrap()
}

/// The window summaries (`.pb.gz.summary` files) under `dir`.
pub fn summary_files(dir: &Path) -> Vec<PathBuf> {
    files_ending(dir, ".pb.gz.summary")
}

/// Every window under `dir` has its summary, and no summary is without its window.
pub fn assert_one_summary_per_window(dir: &Path) {
    let want: Vec<PathBuf> = window_files(dir)
        .into_iter()
        .map(|p| PathBuf::from(format!("{}.summary", p.display())))
        .collect();
    assert_eq!(summary_files(dir), want);
}

pub fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

pub fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// Runs and expects exit code `code`, returning stdout.
pub fn run_ok(args: &[&str], code: i32) -> String {
    let o = run(args);
    assert_eq!(
        o.status.code(),
        Some(code),
        "span-profile {args:?}\nstdout:\n{}\nstderr:\n{}",
        stdout(&o),
        stderr(&o)
    );
    stdout(&o)
}

pub fn s(p: &Path) -> &str {
    p.to_str().unwrap()
}

/// The rows of `go tool pprof -top`: (flat count, function name), in its order.
pub fn pprof_top_rows(top: &str) -> Vec<(u64, String)> {
    top.lines()
        .skip_while(|l| !l.trim_start().starts_with("flat"))
        .skip(1)
        .filter_map(|l| {
            let cols: Vec<&str> = l.split_whitespace().collect();
            let flat = cols.first()?.parse().ok()?;
            Some((flat, cols.get(5..)?.join(" ")))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------------
// A tape: a walker that plays exact numbers of samples, so tests know every count.

/// Frames of the tape's stacks, written `function@file:line`.
pub mod tape_frames {
    pub const PARSER: &str = "/srv/venv/lib/python3.11/site-packages/dateutil/parser/_parser.py";
    pub const PARSE_640: &str =
        "_parse@/srv/venv/lib/python3.11/site-packages/dateutil/parser/_parser.py:640";
    pub const PARSE_700: &str =
        "_parse@/srv/venv/lib/python3.11/site-packages/dateutil/parser/_parser.py:700";
    pub const PARSE_DATE: &str = "parse_date@pricing/dates.py:8";
    pub const APPLY_DISCOUNT: &str = "apply_discount@pricing/rules.py:12";
    pub const CALCULATE: &str = "calculate@pricing/rules.py:30";
    pub const RENDER: &str = "render@/srv/app/app/views.py:5";
    pub const CHECKOUT: &str = "checkout@/srv/app/app/routes.py:20";
    pub const ORDERS: &str = "orders@/srv/app/app/routes.py:40";
    pub const ITERENCODE: &str = "iterencode@/usr/lib/python3.11/json/encoder.py:430";
    pub const DUMPS: &str = "dumps@/usr/lib/python3.11/json/__init__.py:231";
    pub const FORMAT: &str = "format@/usr/lib/python3.11/logging/__init__.py:700";
    pub const EMIT: &str = "emit@/usr/lib/python3.11/logging/__init__.py:1100";
    pub const ASYNCIO_RUN: &str = "run@/usr/lib/python3.11/asyncio/runners.py:190";
    pub const UVICORN_RUN: &str = "run@/srv/venv/lib/python3.11/site-packages/uvicorn/main.py:577";
    pub const RUN_FOREVER: &str = "run_forever@/usr/lib/python3.11/asyncio/base_events.py:607";
    pub const RUN_MAIN: &str = "_run_module_as_main@<frozen runpy>:198";
    pub const BOOTSTRAP_INNER: &str = "_bootstrap_inner@/usr/lib/python3.11/threading.py:1038";
    pub const BOOTSTRAP: &str = "_bootstrap@/usr/lib/python3.11/threading.py:995";
}

use tape_frames as tf;

/// The tape's stacks, leaf first. Requests enter through `asyncio.run` (checkout) or
/// `uvicorn`'s `run` (orders): two functions named `run` in different files.
pub const T_PARSE_640: &[&str] = &[
    tf::PARSE_640,
    tf::PARSE_DATE,
    tf::CALCULATE,
    tf::CHECKOUT,
    tf::ASYNCIO_RUN,
    tf::RUN_MAIN,
];
pub const T_PARSE_700: &[&str] = &[
    tf::PARSE_700,
    tf::PARSE_DATE,
    tf::CALCULATE,
    tf::CHECKOUT,
    tf::ASYNCIO_RUN,
    tf::RUN_MAIN,
];
pub const T_DISCOUNT: &[&str] = &[
    tf::APPLY_DISCOUNT,
    tf::CALCULATE,
    tf::CHECKOUT,
    tf::ASYNCIO_RUN,
    tf::RUN_MAIN,
];
pub const T_RENDER: &[&str] = &[tf::RENDER, tf::CHECKOUT, tf::ASYNCIO_RUN, tf::RUN_MAIN];
pub const T_ENCODE: &[&str] = &[
    tf::ITERENCODE,
    tf::DUMPS,
    tf::ORDERS,
    tf::UVICORN_RUN,
    tf::RUN_MAIN,
];
pub const T_LOG: &[&str] = &[
    tf::FORMAT,
    tf::EMIT,
    tf::RUN_FOREVER,
    tf::BOOTSTRAP_INNER,
    tf::BOOTSTRAP,
];

const TAPE_STACKS: &[&[&str]] = &[
    T_PARSE_640,
    T_PARSE_700,
    T_DISCOUNT,
    T_RENDER,
    T_ENCODE,
    T_LOG,
];

fn tape_frame_id(spec: &str) -> u64 {
    let all: Vec<&str> = TAPE_STACKS.iter().flat_map(|s| s.iter().copied()).collect();
    all.iter().position(|n| *n == spec).unwrap() as u64 + 1
}

/// `function@file:line` as a frame.
pub fn tape_frame(spec: &str) -> Frame {
    let (function, rest) = spec.split_once('@').unwrap();
    let (file, line) = rest.rsplit_once(':').unwrap();
    Frame::new(function, file, line.parse().unwrap())
}

#[derive(Debug)]
struct Play {
    thread: u64,
    stack: usize,
    ticks: u64,
    span: Option<ActiveSpan>,
}

/// Samples to play, one per tick, in order; nothing is sampled when the tape is empty. Each
/// sample stands for one sampling period of CPU (10 ms at 100 Hz), so its CPU samples equal
/// its wall samples.
#[derive(Debug, Clone, Default)]
pub struct Tape {
    queue: Arc<std::sync::Mutex<std::collections::VecDeque<Play>>>,
}

impl Tape {
    /// Plays `ticks` samples of `stack` on `thread`, in `span` (none: background).
    pub fn play(&self, thread: u64, stack: &[&str], ticks: u64, span: Option<&Span<'_>>) {
        let stack = TAPE_STACKS.iter().position(|s| *s == stack).unwrap();
        self.queue.lock().unwrap().push_back(Play {
            thread,
            stack,
            ticks,
            span: span.map(|s| s.active),
        });
    }

    /// Waits until every queued sample was taken.
    pub fn wait(&self) {
        while !self.queue.lock().unwrap().is_empty() {
            ms(5);
        }
    }

    pub fn walker(&self) -> TapeWalker {
        TapeWalker {
            queue: self.queue.clone(),
            raw: TAPE_STACKS
                .iter()
                .map(|s| {
                    s.iter()
                        .map(|spec| RawFrame {
                            id: tape_frame_id(spec),
                            line: tape_frame(spec).line,
                        })
                        .collect()
                })
                .collect(),
        }
    }
}

#[derive(Debug)]
pub struct TapeWalker {
    queue: Arc<std::sync::Mutex<std::collections::VecDeque<Play>>>,
    raw: Vec<Vec<RawFrame>>,
}

impl StackWalker for TapeWalker {
    fn walk(&mut self, sink: &mut dyn StackSink) {
        let mut q = self.queue.lock().unwrap();
        let Some(front) = q.front_mut() else { return };
        sink.sample(
            &RawSample::new(
                ExecutionKey::thread(front.thread),
                &self.raw[front.stack],
                "worker",
            )
            .with_cpu_ns(10_000_000)
            .with_span(SpanSource::Resolved(front.span)),
        );
        front.ticks -= 1;
        if front.ticks == 0 {
            q.pop_front();
        }
    }

    fn symbolize(&mut self, raw: RawFrame) -> Frame {
        let all: Vec<&str> = TAPE_STACKS.iter().flat_map(|s| s.iter().copied()).collect();
        tape_frame(all[raw.id as usize - 1])
    }
}

/// A profiler writing 60 s windows of service `service` to `dir`, playing `tape` at 100 Hz.
pub fn tape_profiler(dir: &Path, service: &str, version: &str, tape: &Tape) -> Profiler {
    Profiler::builder()
        .with_window(Duration::from_secs(60))
        .with_service(service)
        .with_version(version)
        .with_instance("test-1")
        .with_sample_rate_hz(100)
        .with_walker(tape.walker())
        .with_exporter(FileStore::new(dir))
        .start()
        .unwrap()
}

/// The shop scenario, every count exact. Two `POST /checkout` requests (route `/checkout`,
/// root spans 1 and 3) each with a `pricing.calculate` child (spans 2 and 4); one
/// `GET /orders` request (route `/orders`, span 5); a logging thread in the background:
///
/// | route      | stack       | samples |
/// |------------|-------------|---------|
/// | /checkout  | T_PARSE_640 | 30 (span 2) |
/// | /checkout  | T_PARSE_700 | 10 (span 2) |
/// | /checkout  | T_DISCOUNT  | 8 (span 2) + 4 (span 4) |
/// | /checkout  | T_RENDER    | 5 (span 1) + 3 (span 3) |
/// | /orders    | T_ENCODE    | 20 (span 5) |
/// | background | T_LOG       | 6 (thread 2) |
pub fn record_shop(dir: &Path) {
    let tape = Tape::default();
    let p = tape_profiler(dir, "shop", "1.0", &tape);
    let root = start_span(&p, 0xa1, 1, None, "POST /checkout", Some("/checkout"));
    let calc = start_span(&p, 0xa1, 2, Some(1), "pricing.calculate", None);
    tape.play(1, T_PARSE_640, 30, Some(&calc));
    tape.play(1, T_PARSE_700, 10, Some(&calc));
    tape.play(1, T_DISCOUNT, 8, Some(&calc));
    tape.wait();
    calc.end();
    tape.play(1, T_RENDER, 5, Some(&root));
    tape.play(2, T_LOG, 6, None);
    tape.wait();
    root.end();

    let root = start_span(&p, 0xa2, 3, None, "POST /checkout", Some("/checkout"));
    let calc = start_span(&p, 0xa2, 4, Some(3), "pricing.calculate", None);
    tape.play(1, T_DISCOUNT, 4, Some(&calc));
    tape.wait();
    calc.end();
    tape.play(1, T_RENDER, 3, Some(&root));
    tape.wait();
    root.end();

    let orders = start_span(&p, 0xa3, 5, None, "GET /orders", Some("/orders"));
    tape.play(1, T_ENCODE, 20, Some(&orders));
    tape.wait();
    orders.end();
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
}

/// Where a recorded deploy ran: the resource labels of its windows.
#[derive(Debug, Clone, Copy)]
pub struct Deploy<'a> {
    pub service: &'a str,
    pub version: &'a str,
    /// `deployment.environment`, if set.
    pub environment: Option<&'a str>,
    pub instance: &'a str,
}

/// A profiler writing 60 s windows of `deploy` to a file store at `dir`, sampling `script` at
/// 100 Hz.
pub fn profiler_for(dir: &Path, deploy: Deploy<'_>, script: &Script) -> Profiler {
    let b = Profiler::builder();
    let registry = b.registry().clone();
    let mut b = b
        .with_window(Duration::from_secs(60))
        .with_service(deploy.service)
        .with_version(deploy.version)
        .with_instance(deploy.instance)
        .with_sample_rate_hz(100)
        .with_walker(script.walker(registry))
        .with_exporter(FileStore::new(dir));
    if let Some(e) = deploy.environment {
        b = b.with_environment(e);
    }
    b.start().unwrap()
}

/// One request of `deploy`: a root span `name` (id `span`, trace `trace`) with route `route`
/// that runs `stack` for `run_ms`, then the profiler stops. Returns the window files the run
/// wrote, decoded: what the store holds for it.
pub fn record_request(
    dir: &Path,
    deploy: Deploy<'_>,
    (trace, span): (u128, u64),
    name: &str,
    route: &str,
    stack: &[&str],
    run_ms: u64,
) -> Vec<span_profile_core::Profile> {
    let before = window_files(dir);
    let script = Script::default();
    let p = profiler_for(dir, deploy, &script);
    script.set(stack);
    let root = start_span(&p, trace, span, None, name, Some(route));
    ms(run_ms);
    root.end();
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
    window_files(dir)
        .into_iter()
        .filter(|f| !before.contains(f))
        .map(|f| span_profile_export::decode_pprof(&std::fs::read(f).unwrap()).unwrap())
        .collect()
}

/// Rewrites every window summary under `dir` as a summary from before summaries recorded the
/// environment and instance (same window, same counts, no deployment fields).
pub fn strip_deployment_from_summaries(dir: &Path) {
    use span_profile_export::store::{decode_summary, encode_summary};
    for path in summary_files(dir) {
        let mut stored = decode_summary(&std::fs::read(&path).unwrap()).unwrap();
        assert!(stored.summary.deployment.is_some(), "{}", path.display());
        stored.summary.deployment = None;
        std::fs::write(&path, encode_summary(&stored.summary, stored.pprof_len)).unwrap();
    }
}

/// A gzip bomb: a valid gzip stream (one fixed-Huffman deflate block of 258-byte repeats)
/// that inflates to `len` zero bytes (rounded up to a whole repeat) from about `len / 160`
/// bytes. Its trailer states `stated_len` as the length (mod 2^32): the true length for an
/// honest bomb, or a small one, so that a reader cannot rely on it. The CRC is not computed:
/// a reader that inflates the whole stream finds it wrong, after the memory is spent.
pub fn gzip_bomb(len: u64, stated_len: u32) -> Vec<u8> {
    struct Bits {
        out: Vec<u8>,
        acc: u32,
        n: u32,
    }
    impl Bits {
        /// `count` bits of `v`, least significant first (deflate's order for headers).
        fn lsb(&mut self, v: u32, count: u32) {
            for i in 0..count {
                self.acc |= ((v >> i) & 1) << self.n;
                self.n += 1;
                if self.n == 8 {
                    self.out.push(self.acc as u8);
                    (self.acc, self.n) = (0, 0);
                }
            }
        }
        /// A Huffman code of `count` bits, most significant first.
        fn code(&mut self, v: u32, count: u32) {
            for i in (0..count).rev() {
                self.lsb((v >> i) & 1, 1);
            }
        }
    }
    let mut b = Bits {
        out: vec![0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3],
        acc: 0,
        n: 0,
    };
    b.lsb(1, 1); // BFINAL
    b.lsb(1, 2); // BTYPE 01: fixed Huffman codes
    b.code(0x30, 8); // the literal 0
    for _ in 0..(len.saturating_sub(1)).div_ceil(258) {
        b.code(0xc5, 8); // length code 285: 258 bytes
        b.code(0, 5); // distance code 0: 1 byte back
    }
    b.code(0, 7); // end of block (256)
    if b.n > 0 {
        b.out.push(b.acc as u8);
    }
    b.out.extend_from_slice(&0u32.to_le_bytes()); // CRC32, not computed
    b.out.extend_from_slice(&stated_len.to_le_bytes());
    b.out
}

/// A deploy for the diff's specs: 20 requests of `/checkout` (root spans `POST /checkout`,
/// span ids 1 to 20) on `version`, each running the `steps` (a stack for some milliseconds)
/// in turn, in 200 ms windows (the window is the unit of the diff's test).
pub fn record_deploy(dir: &Path, version: &str, steps: &[(&[&str], u64)]) {
    let script = Script::default();
    let p = profiler_with_window(
        dir,
        "checkout",
        version,
        &script,
        Duration::from_millis(200),
    );
    for i in 0..20u64 {
        let root = start_span(
            &p,
            0xd1 + u128::from(i),
            1 + i,
            None,
            "POST /checkout",
            Some("/checkout"),
        );
        for &(stack, t) in steps {
            script.run(stack, t);
        }
        root.end();
    }
    script.set(IDLE);
    p.shutdown_with_timeout(Duration::from_secs(10)).unwrap();
}
