//! The span-object table makes resident only the pages its objects map to. Its 16,384 slots
//! take 896 KiB, which used to be written whole at start; a service lists a few dozen span
//! objects at once, from a few of the interpreter's pools. Measured with `mincore(2)`, in a
//! test binary of its own so that the allocator is fresh (a large zeroed allocation then
//! comes straight from the kernel).

use span_profile::walker::{Insert, SpanObjectTable};
use span_profile_core::labels::LabelId;
use span_profile_core::{ActiveSpan, SpanContext, SpanId, TraceId};

/// Pages of `len` bytes from `start` that are resident.
fn resident_pages(start: *const u8, len: usize) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as usize;
    let first = start as usize & !(page - 1);
    let end = (start as usize + len).div_ceil(page) * page;
    let pages = (end - first) / page;
    let mut vec = vec![0u8; pages];
    // SAFETY: [first, end) covers the table's allocation rounded out to whole pages; the
    // allocation is mapped, so every page of the range is (mincore only reads the page
    // tables), and `vec` has one byte per page of it.
    let rc = unsafe { libc::mincore(first as *mut libc::c_void, end - first, vec.as_mut_ptr()) };
    assert_eq!(rc, 0, "mincore: {}", std::io::Error::last_os_error());
    vec.iter().filter(|&&b| b & 1 == 1).count()
}

fn span(id: u64) -> ActiveSpan {
    ActiveSpan {
        ctx: SpanContext {
            trace_id: TraceId::from_u128(9).unwrap(),
            span_id: SpanId::from_u64(id).unwrap(),
            local_root_span_id: SpanId::from_u64(1).unwrap(),
        },
        route: LabelId(0),
    }
}

#[test]
fn a_table_touches_only_the_pages_its_objects_map_to() {
    let table = SpanObjectTable::with_slots(16384);
    let (start, len) = table.memory();
    assert!(len >= 896 * 1024);
    let all = len / 4096;
    assert!(
        resident_pages(start, len) <= 2,
        "a new table is untouched, but {} of its {all} pages are resident",
        resident_pages(start, len)
    );
    // 256 span objects of 96 bytes from two 16 KiB pools of different arenas: two runs of
    // slots, a few pages each.
    let pools = [0x7f3a_1c24_4000u64, 0x7f3a_9e80_0000];
    for (p, pool) in pools.iter().enumerate() {
        for i in 0..128u64 {
            let addr = pool + 96 * i;
            assert_eq!(table.insert(addr, span(2 + i), true), Insert::Listed);
            assert_eq!(table.get(addr), Some(span(2 + i)), "pool {p}, object {i}");
        }
    }
    let touched = resident_pages(start, len);
    assert!(
        touched <= 2 * 14 + 2,
        "256 objects of two pools made {touched} of {all} pages resident"
    );
}
