//! The window-summary decoder that the CLI reads `.pb.gz.summary` sidecars with, on arbitrary
//! bytes, whole and for one part. It must never panic; what it accepts must re-encode to bytes
//! that decode the same, and must answer every summary question without panicking.
#![no_main]

use libfuzzer_sys::fuzz_target;
use span_profile_export::store::query::Filter;
use span_profile_export::store::summary::SummaryScope;
use span_profile_export::store::{decode_summary, decode_summary_scoped, encode_summary};

fuzz_target!(|data: &[u8]| {
    for scope in [
        SummaryScope::AllRoutes,
        SummaryScope::Route("/checkout".into()),
    ] {
        if let Ok(part) = decode_summary_scoped(data.to_vec(), &scope) {
            let _ = part.summary.report(&Filter::default());
            let _ = part.summary.report(&Filter::default().route("/checkout"));
        }
    }
    let Ok(s) = decode_summary(data) else {
        return;
    };
    let again = decode_summary(&encode_summary(&s.summary, s.pprof_len))
        .expect("a decoded summary re-encodes");
    assert_eq!(again, s, "decode(encode(decode(bytes))) != decode(bytes)");
    for f in [Filter::default(), Filter::default().route("/checkout")] {
        let _ = s.summary.report(&f);
        let _ = s.summary.cpu_by_frame(&f);
        let _ = s.summary.cpu_by_root_frame(&f);
        let _ = s.summary.frame_cpu_by_route(&f, "parse_date");
    }
});
