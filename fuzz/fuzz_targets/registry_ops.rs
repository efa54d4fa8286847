//! Sequences of registry operations over a few keys, checked after every step against a model
//! (a map from key to its stack of entered spans):
//!
//! - `current(key)` is the innermost span of the model's stack, or `None`;
//! - `stack(key)` is the model's stack;
//! - `stats()` counts the keys with spans and the exits that matched nothing.
//!
//! At most 8 keys are live, so a key always finds one of its 8 probe slots free: `full` must
//! stay 0. Thread ids include 0 and `u64::MAX`, which the slot table uses as its empty marker.
#![no_main]

use std::collections::HashMap;
use std::num::NonZeroU64;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use span_profile_core::labels::LabelId;
use span_profile_core::{
    ActiveSpan, ActiveSpanRegistry, ExecutionKey, SpanContext, SpanId, TraceId,
};

#[derive(Arbitrary, Debug, Clone, Copy)]
enum Op {
    Enter { key: u8, span: u8 },
    Exit { key: u8, span: u8 },
    SetCurrent { key: u8, span: Option<u8> },
    Forget { key: u8 },
    Current { key: u8 },
}

/// Thread ids: two fixed (0 and the slot table's empty marker `u64::MAX`), two from the input,
/// so that the fuzzer can find ids whose slots collide.
fn key(threads: &[u64; 4], k: u8) -> ExecutionKey {
    let thread = threads[usize::from(k & 3)];
    match (k >> 2) & 1 {
        0 => ExecutionKey { thread, task: None },
        _ => ExecutionKey {
            thread,
            task: NonZeroU64::new(0x7a5c),
        },
    }
}

fn span(s: u8) -> ActiveSpan {
    // Span ids 1..=16; the trace and route derive from the id so a torn value would show.
    let id = u64::from(s % 16) + 1;
    ActiveSpan {
        ctx: SpanContext {
            trace_id: TraceId::from_u128(u128::from(id) << 64 | 7)
                .unwrap_or_else(|| unreachable!()),
            span_id: SpanId::from_u64(id).unwrap_or_else(|| unreachable!()),
            local_root_span_id: SpanId::from_u64(100 + id).unwrap_or_else(|| unreachable!()),
        },
        route: LabelId(id as u32),
    }
}

fuzz_target!(|input: (u64, u64, Vec<Op>)| {
    let (a, b, ops) = input;
    let threads = [0, u64::MAX, a, b];
    let key = |k: u8| key(&threads, k);
    let reg = ActiveSpanRegistry::with_capacity(64);
    let mut model: HashMap<ExecutionKey, Vec<ActiveSpan>> = HashMap::new();
    let mut unmatched = 0u64;
    for op in ops.into_iter().take(2048) {
        let touched = match op {
            Op::Enter { key: k, span: s } => {
                reg.enter(key(k), span(s));
                model.entry(key(k)).or_default().push(span(s));
                k
            }
            Op::Exit { key: k, span: s } => {
                let sid = span(s).ctx.span_id;
                reg.exit(key(k), sid);
                let stack = model.entry(key(k)).or_default();
                match stack.iter().rposition(|a| a.ctx.span_id == sid) {
                    Some(i) => {
                        stack.remove(i);
                    }
                    None => unmatched += 1,
                }
                k
            }
            Op::SetCurrent { key: k, span: s } => {
                reg.set_current(key(k), s.map(span));
                model.insert(key(k), s.map(span).into_iter().collect());
                k
            }
            Op::Forget { key: k } => {
                reg.forget(key(k));
                model.remove(&key(k));
                k
            }
            Op::Current { key: k } => k,
        };
        model.retain(|_, v| !v.is_empty());
        let k = key(touched);
        let want = model.get(&k).and_then(|v| v.last().copied());
        assert_eq!(reg.current(k), want, "current({k:?}) after {op:?}");
        assert_eq!(reg.stack(k), model.get(&k).cloned().unwrap_or_default());
        let stats = reg.stats();
        assert_eq!(stats.active_keys, model.len());
        assert_eq!(stats.unmatched_exits, unmatched);
        assert_eq!(stats.full, 0);
    }
    // Every key, not only the last touched: no operation disturbed another key's slot.
    for k in 0..8u8 {
        let k = key(k);
        assert_eq!(
            reg.current(k),
            model.get(&k).and_then(|v| v.last().copied())
        );
    }
});
