//! Tests of context reading over fake memory images: HAMT, dict and slot lookups, and the
//! reader's span, task and switch detection.

use std::sync::Arc;

use span_profile_core::labels::LabelId;
use span_profile_core::{ActiveSpan, SpanContext, SpanId, TraceId};

use super::dict::{dict_find, DICT_HEAD, DICT_KEYS, DICT_VALUES, MAX_CONTEXT_ENTRIES};
use super::hamt::{hamt_find, hamt_hash};
use super::reader::ContextSpan;
use super::slot::{MAX_TASK_NAMES, OTHER_TASK};
use super::*;
use crate::walker::layout::{tstate_context, PythonVersion, CONTEXT_VARS};
use crate::walker::memory::{field_u64, FakeMemory, MemoryReader};
use crate::walker::namebuf::NameBuf;
use crate::walker::object_table::SpanObjectTable;
use crate::walker::Insert;

const TYPES: HamtTypes = HamtTypes {
    context: 0xc0_0000,
    hamt: 0xc1_0000,
    bitmap: 0xc2_0000,
    array: 0xc3_0000,
    collision: 0xc4_0000,
};
const SLOT_TYPE: u64 = 0xd0_0000;

/// A tiny allocator over a [`FakeMemory`].
struct Image {
    mem: FakeMemory,
    next: u64,
}

impl Image {
    fn new() -> Self {
        Self {
            mem: FakeMemory::new(),
            next: 0x10_0000,
        }
    }
    fn alloc(&mut self, words: &[u64]) -> u64 {
        let a = self.next;
        let bytes: Vec<u8> = words.iter().flat_map(|w| w.to_le_bytes()).collect();
        self.next += bytes.len() as u64 + 0x40;
        self.mem.insert(a, bytes);
        a
    }
    fn bitmap(&mut self, entries: &[(u32, u64, u64)]) -> u64 {
        let mut bitmap = 0u32;
        let mut sorted = entries.to_vec();
        sorted.sort_by_key(|e| e.0);
        let mut words = vec![1, TYPES.bitmap, 2 * sorted.len() as u64, 0];
        for &(idx, k, v) in &sorted {
            bitmap |= 1 << idx;
            words.push(k);
            words.push(v);
        }
        words[3] = u64::from(bitmap);
        self.alloc(&words)
    }
    fn array(&mut self, children: &[(u32, u64)]) -> u64 {
        let mut words = vec![1, TYPES.array];
        words.extend([0u64; 32]);
        words.push(children.len() as u64);
        for &(i, c) in children {
            words[2 + i as usize] = c;
        }
        self.alloc(&words)
    }
    fn collision(&mut self, hash: i32, pairs: &[(u64, u64)]) -> u64 {
        let mut words = vec![
            1,
            TYPES.collision,
            2 * pairs.len() as u64,
            u64::from(hash as u32),
        ];
        for &(k, v) in pairs {
            words.push(k);
            words.push(v);
        }
        self.alloc(&words)
    }
    fn slot(&mut self, data: SlotData) -> u64 {
        self.alloc(&[
            1,
            SLOT_TYPE,
            data.magic,
            data.trace_hi,
            data.trace_lo,
            data.span_id,
            data.local_root,
            u64::from(data.route) | u64::from(data.name_id) << 32,
        ])
    }
}

fn idx(hash: i32, level: u32) -> u32 {
    ((hash as u32) >> (5 * level)) & 0x1f
}

#[test]
fn hash_folding_matches_cpython() {
    assert_eq!(hamt_hash(0x1234_5678), 0x1234_5678);
    assert_eq!(hamt_hash(0x0000_0001_0000_0001), 0);
    assert_eq!(hamt_hash(-1), 0);
    assert_eq!(hamt_hash(0xffff_ffff), -2); // folds to -1
}

#[test]
fn finds_keys_through_bitmap_array_and_collision_nodes() {
    let mut m = Image::new();
    let (key, hash) = (0xabc0u64, 0x0a5f_3c21i32);
    let other = 0xdef0u64;
    // Root bitmap: an unrelated key, and a sub-node where our key lives.
    let coll = m.collision(hash, &[(other, 7), (key, 42)]);
    let arr = m.array(&[(idx(hash, 2), coll)]);
    let sub = m.bitmap(&[(idx(hash, 1), 0, arr), ((idx(hash, 1) + 1) % 32, other, 9)]);
    let root = m.bitmap(&[(idx(hash, 0), 0, sub), ((idx(hash, 0) + 3) % 32, other, 1)]);
    assert_eq!(hamt_find(&m.mem, &TYPES, root, key, hash), Ok(Some(42)));
    // Same hash, different key in a collision node: not found.
    assert_eq!(hamt_find(&m.mem, &TYPES, root, 0x1, hash), Ok(None));
    // Missing bit at the root.
    assert_eq!(hamt_find(&m.mem, &TYPES, root, key, hash ^ 0x4), Ok(None));
    // A direct hit in a bitmap node.
    let flat = m.bitmap(&[(idx(hash, 0), key, 5)]);
    assert_eq!(hamt_find(&m.mem, &TYPES, flat, key, hash), Ok(Some(5)));
    assert_eq!(hamt_find(&m.mem, &TYPES, flat, other, hash), Ok(None));
}

#[test]
fn rejects_garbage_nodes_and_cycles() {
    let mut m = Image::new();
    let hash = 0x21;
    // Wrong type.
    let bad = m.alloc(&[1, 0x9999, 0, 0, 0]);
    assert_eq!(
        hamt_find(&m.mem, &TYPES, bad, 1, hash),
        Err(ContextError::Invalid)
    );
    // Size disagreeing with the bitmap.
    let lying = m.alloc(&[1, TYPES.bitmap, 6, 1 << idx(hash, 0), 0, 0]);
    assert_eq!(
        hamt_find(&m.mem, &TYPES, lying, 1, hash),
        Err(ContextError::Invalid)
    );
    // A sub-node pointing at itself: bounded by the depth cap.
    let a = m.array(&[]);
    for i in 0..32 {
        m.mem.write_u64(a + 16 + i * 8, a);
    }
    assert_eq!(
        hamt_find(&m.mem, &TYPES, a, 1, hash),
        Err(ContextError::TooDeep)
    );
    // Unmapped child.
    let dangling = m.array(&[(idx(hash, 0), 0xdead_0000)]);
    assert!(matches!(
        hamt_find(&m.mem, &TYPES, dangling, 1, hash),
        Err(ContextError::Read(_))
    ));
    // Oversized collision node.
    let huge = m.alloc(&[1, TYPES.collision, 1000, hash as u64]);
    assert_eq!(
        hamt_find(&m.mem, &TYPES, huge, 1, hash),
        Err(ContextError::Invalid)
    );
}

#[test]
fn resolves_span_and_task_from_a_thread_context() {
    let mut m = Image::new();
    let version = PythonVersion::new(3, 12);
    let off = tstate_context(version).unwrap();
    let span_var = SlotVar {
        var: 0x5000,
        hash: 0x1111_2222_3333_4444,
        value_type: SLOT_TYPE,
        data_offset: 16,
    };
    let task_var = SlotVar {
        var: 0x6000,
        hash: 77,
        ..span_var
    };
    let active = ActiveSpan {
        ctx: SpanContext {
            trace_id: TraceId::from_u128(0x0102_0304_0506_0708_090a_0b0c_0d0e_0f10).unwrap(),
            span_id: SpanId::from_u64(0xaa).unwrap(),
            local_root_span_id: SpanId::from_u64(0xbb).unwrap(),
        },
        route: LabelId(5),
    };
    let slot = m.slot(SlotData::span(&active));
    let tag = m.slot(SlotData::task(1));
    let (hs, ht) = (hamt_hash(span_var.hash), hamt_hash(task_var.hash));
    assert_ne!(idx(hs, 0), idx(ht, 0));
    let root = m.bitmap(&[
        (idx(hs, 0), span_var.var, slot),
        (idx(ht, 0), task_var.var, tag),
    ]);
    let hamt = m.alloc(&[1, TYPES.hamt, root, 0, 2]);
    let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
    let mut tstate = vec![0u64; off / 8 + 2];
    tstate[off / 8] = ctx;
    let ts = m.alloc(&tstate);
    let mut no_ctx = vec![0u64; off / 8 + 2];
    no_ctx[0] = 1;
    let ts_empty = m.alloc(&no_ctx);

    let mut r = ContextReader::new(version);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown); // not configured
    r.set_target(ContextTarget {
        types: TYPES,
        otel: OtelTarget::default(),
        span: span_var,
        task: task_var,
    });
    let id = r.names().intern("handler");
    assert_eq!(id, 1);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Known(Some(active)));
    assert_eq!(r.task_name(), Some("handler"));
    assert_eq!(r.resolve(&m.mem, ts_empty), ContextSpan::Known(None));
    assert_eq!(r.task_name(), None);
    // A value of another type (None, after a detach) means no span.
    m.mem.write_u64(slot + 8, 0x1234);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Known(None));
    // Right type, wrong magic: garbage, counted, no span.
    m.mem.write_u64(slot + 8, SLOT_TYPE);
    m.mem.write_u64(slot + 16, 0);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown);
    // A context of the wrong type.
    m.mem.write_u64(ctx + 8, 0x4321);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown);
    // The thread entered another context while its frames were copied: dropped.
    m.mem.write_u64(ctx + 8, TYPES.context);
    let mut other = vec![0u64; off / 8 + 2];
    other[off / 8] = 0x7777_0000; // another context (only compared)
    let ts_other = m.alloc(&other);
    r.before(&m.mem, ts_other);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Switched);
    // A thread's first context, created lazily, is not a switch.
    r.before(&m.mem, ts_empty);
    assert_ne!(r.resolve(&m.mem, ts), ContextSpan::Switched);
    r.before(&m.mem, ts);
    assert_ne!(r.resolve(&m.mem, ts), ContextSpan::Switched);
    // Same context, but a span was entered or left while the frames were copied (every
    // ContextVar.set installs a new HAMT): dropped too.
    r.before(&m.mem, ts);
    m.mem.write_u64(ctx + CONTEXT_VARS as u64, 0x8888_0000);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Switched);
    m.mem.write_u64(ctx + CONTEXT_VARS as u64, hamt);
    r.before(&m.mem, ts);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown); // the slot's magic is still 0
    let s = r.counters().snapshot();
    assert_eq!(s.switched, 2);
    assert_eq!(
        (s.lookups, s.spans, s.no_span, s.tasks, s.invalid),
        (10, 1, 2, 2, 5)
    );
}

#[test]
fn task_names_are_capped() {
    let names = TaskNames::default();
    for i in 0..MAX_TASK_NAMES {
        assert_eq!(names.intern(&format!("t{i}")), i as u32 + 1);
    }
    assert_eq!(names.intern("t0"), 1);
    assert_eq!(names.intern("one-too-many"), 0);
    let mut buf = NameBuf::new();
    names.lookup(0, &mut buf);
    assert_eq!(buf.as_str(), OTHER_TASK);
    names.lookup(2, &mut buf);
    assert_eq!(buf.as_str(), "t1");
}

const OTEL_CONTEXT_TYPE: u64 = 0xe0_0000;
const SPAN_KEY: u64 = 0xe1_0000;

impl Image {
    /// A combined dict of `layout` holding `entries` (key, value), with its keys object;
    /// `deleted` leaves a hole (key NULL, or 3.9's dummy with a NULL value) first.
    fn dict(&mut self, layout: DictLayout, ty: u64, entries: &[(u64, u64)], hole: bool) -> u64 {
        let mut all: Vec<(u64, u64)> = Vec::new();
        if hole {
            all.push((if layout == DictLayout::Py39 { 0x77 } else { 0 }, 0));
        }
        all.extend_from_slice(entries);
        let n = all.len() as u64;
        let mut keys: Vec<u64> = match layout {
            // refcnt, dk_size 8, lookup, usable, nentries; then 8 one-byte indices.
            DictLayout::Py39 => vec![1, 8, 0, 8 - n, n, 0],
            // refcnt, log2_size 3 | log2_index_bytes 3 << 8 | kind UNICODE << 16,
            // usable, nentries; then 8 one-byte indices.
            DictLayout::Py311 => vec![1, 3 | 3 << 8 | 1 << 16, 8 - n, n, 0],
        };
        for (k, v) in all {
            if layout == DictLayout::Py39 {
                keys.push(0x1234); // me_hash
            }
            keys.push(k);
            keys.push(v);
        }
        let keys = self.alloc(&keys);
        self.alloc(&[1, ty, n, 0, keys, 0])
    }
}

#[test]
fn finds_the_span_key_in_a_context_dict_of_every_layout() {
    for layout in [DictLayout::Py39, DictLayout::Py311] {
        let mut m = Image::new();
        let d = m.dict(
            layout,
            OTEL_CONTEXT_TYPE,
            &[(0x10, 1), (SPAN_KEY, 0xabc)],
            true,
        );
        let mut head = [0u8; DICT_HEAD];
        m.mem.read(d, &mut head).unwrap();
        assert_eq!(
            dict_find(&m.mem, layout, &head, SPAN_KEY),
            Ok(Some(0xabc)),
            "{layout:?}"
        );
        assert_eq!(
            dict_find(&m.mem, layout, &head, 0x99),
            Ok(None),
            "{layout:?}"
        );
        let empty = m.dict(layout, OTEL_CONTEXT_TYPE, &[], false);
        m.mem.read(empty, &mut head).unwrap();
        assert_eq!(
            dict_find(&m.mem, layout, &head, SPAN_KEY),
            Ok(None),
            "{layout:?}"
        );
    }
}

#[test]
fn a_split_or_oversized_dict_is_invalid_not_guessed() {
    let mut m = Image::new();
    let d = m.dict(
        DictLayout::Py311,
        OTEL_CONTEXT_TYPE,
        &[(SPAN_KEY, 5)],
        false,
    );
    let mut head = [0u8; DICT_HEAD];
    m.mem.read(d, &mut head).unwrap();
    let mut split = head;
    split[DICT_VALUES..DICT_VALUES + 8].copy_from_slice(&0x5000u64.to_le_bytes());
    assert_eq!(
        dict_find(&m.mem, DictLayout::Py311, &split, SPAN_KEY),
        Err(ContextError::Invalid)
    );
    let keys = field_u64(&head, DICT_KEYS);
    m.mem.write_u64(keys + 24, MAX_CONTEXT_ENTRIES + 1);
    assert_eq!(
        dict_find(&m.mem, DictLayout::Py311, &head, SPAN_KEY),
        Err(ContextError::Invalid)
    );
    // A readable keys header whose entries would lie past the top of the address space.
    let top = u64::MAX - 100;
    let mut wrapping = head;
    wrapping[DICT_KEYS..DICT_KEYS + 8].copy_from_slice(&top.to_le_bytes());
    let mut py39 = vec![0u8; 48];
    py39[8..16].copy_from_slice(&(1u64 << 32).to_le_bytes()); // dk_size
    m.mem.insert(top, py39);
    assert_eq!(
        dict_find(&m.mem, DictLayout::Py39, &wrapping, SPAN_KEY),
        Err(ContextError::Invalid)
    );
    let mut py311 = vec![0u8; 48];
    py311[8..11].copy_from_slice(&[32, 35, 1]); // log2 size, log2 index bytes, kind
    m.mem.insert(top, py311);
    assert_eq!(
        dict_find(&m.mem, DictLayout::Py311, &wrapping, SPAN_KEY),
        Err(ContextError::Invalid)
    );
    let mut dangling = head;
    dangling[DICT_KEYS..DICT_KEYS + 8].copy_from_slice(&0xdead_0000u64.to_le_bytes());
    assert!(matches!(
        dict_find(&m.mem, DictLayout::Py311, &dangling, SPAN_KEY),
        Err(ContextError::Read(_))
    ));
}

/// OpenTelemetry's context variable in the images of the tests below.
const OTEL: OtelTarget = OtelTarget {
    var: 0x7000,
    hash: 0x55,
    context_type: OTEL_CONTEXT_TYPE,
    span_key: SPAN_KEY,
};

#[test]
fn the_span_comes_from_opentelemetrys_context_when_our_processor_started_it() {
    let mut m = Image::new();
    let version = PythonVersion::new(3, 12);
    let off = tstate_context(version).unwrap();
    let otel = OTEL;
    let slot_var = SlotVar {
        var: 0x5000,
        hash: 0x1111_2222_3333_4444,
        value_type: SLOT_TYPE,
        data_offset: 16,
    };
    let active = |id: u64| ActiveSpan {
        ctx: SpanContext {
            trace_id: TraceId::from_u128(7).unwrap(),
            span_id: SpanId::from_u64(id).unwrap(),
            local_root_span_id: SpanId::from_u64(1).unwrap(),
        },
        route: LabelId(3),
    };
    let (ours, foreign, handed) = (0xa000u64, 0xb000u64, m.slot(SlotData::span(&active(9))));
    let table = Arc::new(SpanObjectTable::with_slots(64));
    assert_eq!(table.insert(ours, active(2), true), Insert::Listed);
    let thread = |m: &mut Image, span: Option<u64>, slot: Option<u64>| {
        let entries: Vec<(u64, u64)> = span.map(|s| (SPAN_KEY, s)).into_iter().collect();
        let ctx_dict = m.dict(DictLayout::Py311, OTEL_CONTEXT_TYPE, &entries, false);
        let (ho, hs) = (hamt_hash(otel.hash), hamt_hash(slot_var.hash));
        assert_ne!(idx(ho, 0), idx(hs, 0));
        let mut pairs = vec![(idx(ho, 0), otel.var, ctx_dict)];
        if let Some(s) = slot {
            pairs.push((idx(hs, 0), slot_var.var, s));
        }
        let root = m.bitmap(&pairs);
        let hamt = m.alloc(&[1, TYPES.hamt, root, 0, pairs.len() as u64]);
        let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
        let mut tstate = vec![0u64; off / 8 + 2];
        tstate[off / 8] = ctx;
        m.alloc(&tstate)
    };
    let with_ours = thread(&mut m, Some(ours), None);
    let with_foreign = thread(&mut m, Some(foreign), None);
    let without = thread(&mut m, None, None);
    let in_worker = thread(&mut m, None, Some(handed));
    let ours_in_worker = thread(&mut m, Some(ours), Some(handed));

    let mut r = ContextReader::new(version);
    r.set_target(ContextTarget {
        types: TYPES,
        otel,
        span: slot_var,
        task: SlotVar::default(),
    });
    r.set_span_objects(table.clone());
    assert_eq!(
        r.resolve(&m.mem, with_ours),
        ContextSpan::Known(Some(active(2)))
    );
    // A span our processor did not start is not attributed, and is counted.
    assert_eq!(r.resolve(&m.mem, with_foreign), ContextSpan::Known(None));
    assert_eq!(r.counters().snapshot().untracked, 1);
    assert_eq!(r.resolve(&m.mem, without), ContextSpan::Known(None));
    // A run_in_executor worker runs under the span it was handed...
    assert_eq!(
        r.resolve(&m.mem, in_worker),
        ContextSpan::Known(Some(active(9)))
    );
    // ...unless it made a span of its own current.
    assert_eq!(
        r.resolve(&m.mem, ours_in_worker),
        ContextSpan::Known(Some(active(2)))
    );
    // Once the table lets the object go, its samples carry no span.
    table.remove(ours);
    assert_eq!(r.resolve(&m.mem, with_ours), ContextSpan::Known(None));
    // A value that is not an OpenTelemetry Context is not read as one.
    let not_a_context = m.dict(DictLayout::Py311, 0x1, &[(SPAN_KEY, ours)], false);
    let root = m.bitmap(&[(idx(hamt_hash(otel.hash), 0), otel.var, not_a_context)]);
    let hamt = m.alloc(&[1, TYPES.hamt, root, 0, 1]);
    let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
    let mut tstate = vec![0u64; off / 8 + 2];
    tstate[off / 8] = ctx;
    let ts = m.alloc(&tstate);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Unknown);
    assert_eq!(r.counters().snapshot().invalid, 1);
}

/// A span that starts and ends while a thread's frames are copied leaves no span current
/// both before and after the copy, and its context's variables may even be reallocated at
/// their old address; but its frames may be in the copy. The span processor counts the
/// boundary, and the sample is dropped as switched.
#[test]
fn a_span_that_began_and_ended_during_the_copy_drops_the_sample() {
    let mut m = Image::new();
    let version = PythonVersion::new(3, 12);
    let off = tstate_context(version).unwrap();
    let otel = OTEL;
    // A thread with no span current: its context holds an empty OpenTelemetry Context.
    let ctx_dict = m.dict(DictLayout::Py311, OTEL_CONTEXT_TYPE, &[], false);
    let root = m.bitmap(&[(idx(hamt_hash(otel.hash), 0), otel.var, ctx_dict)]);
    let hamt = m.alloc(&[1, TYPES.hamt, root, 0, 1]);
    let ctx = m.alloc(&[1, TYPES.context, 0, hamt, 0, 0]);
    let mut tstate = vec![0u64; off / 8 + 2];
    tstate[off / 8] = ctx;
    let ts = m.alloc(&tstate);
    let (me, other) = (0x7f00_1234_5700u64, 0x7f00_9876_5700u64);
    let table = Arc::new(SpanObjectTable::with_slots(64));

    let mut r = ContextReader::new(version);
    r.set_target(ContextTarget {
        types: TYPES,
        otel,
        span: SlotVar::default(),
        task: SlotVar::default(),
    });
    r.set_span_objects(table.clone());
    let copy = |r: &mut ContextReader, during: &dyn Fn()| {
        let boundaries = r.span_boundaries(me);
        let found = r.look_before(&m.mem, ts);
        during();
        r.expect_after(found, boundaries);
        r.resolve(&m.mem, ts)
    };

    assert_eq!(copy(&mut r, &|| {}), ContextSpan::Known(None));
    // A span started and ended on the thread: the same context on both sides.
    let both = || {
        table.span_boundary(me);
        table.span_boundary(me);
    };
    assert_eq!(copy(&mut r, &both), ContextSpan::Switched);
    assert_eq!(r.counters().snapshot().switched, 1);
    // Only the end of a span seen before the copy began.
    assert_eq!(
        copy(&mut r, &|| table.span_boundary(me)),
        ContextSpan::Switched
    );
    // Another thread's spans do not drop this thread's samples (unless their ids share a
    // counter, which these do not).
    assert_ne!(table.span_boundaries(other), table.span_boundaries(me));
    assert_eq!(
        copy(&mut r, &|| table.span_boundary(other)),
        ContextSpan::Known(None)
    );
    // A resolve with no count before it (a thread that did not run) does not compare.
    table.span_boundary(me);
    assert_eq!(r.resolve(&m.mem, ts), ContextSpan::Known(None));
}
