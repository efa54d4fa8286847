//! The pprof decoder that the CLI and the file store use, on arbitrary bytes (bare protobuf or
//! gzip). It must never panic; whatever it accepts must survive the encoder and decoder again
//! unchanged, and must be safe to merge (what `span-profile compact` does with stored files).
#![no_main]

use libfuzzer_sys::fuzz_target;
use span_profile_core::merge_windows;
use span_profile_export::{decode_pprof, encode_pprof_raw};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = decode_pprof(data) else {
        return;
    };
    let again = decode_pprof(&encode_pprof_raw(&p)).expect("a decoded profile re-encodes");
    assert_eq!(again, p, "decode(encode(decode(bytes))) != decode(bytes)");
    // A stored file merged with itself: counters of any size must not panic.
    let _ = merge_windows(&[p.clone(), p], true);
});
