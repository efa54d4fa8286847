//! The encoder is lossless: for any window (odd strings, unused or out-of-range stacks and
//! frames, huge counters), `decode_pprof(encode_pprof(p)) == p`, gzip or bare.
#![no_main]

use arbitrary::Unstructured;
use libfuzzer_sys::fuzz_target;
use span_profile_export::{decode_pprof, encode_pprof, encode_pprof_raw};
use span_profile_fuzz::{profile, Shape};

fuzz_target!(|data: &[u8]| {
    let mut u = Unstructured::new(data);
    let Ok(p) = profile(
        &mut u,
        Shape {
            small_counts: false,
            mergeable: false,
        },
    ) else {
        return;
    };
    let raw = encode_pprof_raw(&p);
    let back = decode_pprof(&raw).expect("an encoded window decodes");
    assert_eq!(back, p, "bare round trip");
    if u.arbitrary().unwrap_or(false) {
        let back = decode_pprof(&encode_pprof(&p)).expect("a gzip window decodes");
        assert_eq!(back, p, "gzip round trip");
    }
});
