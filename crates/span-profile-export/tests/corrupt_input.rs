//! Arbitrary, truncated or inconsistent bytes give a `DecodeError` that says what is wrong,
//! never a panic.

mod common;

use std::io::Write;

use prost::Message;
use span_profile_export::pprof;
use span_profile_export::{decode_pprof, encode_pprof, encode_pprof_raw, DecodeError};

#[test]
fn every_truncation_and_bit_flip_is_an_error_or_a_profile() {
    let p = common::checkout_profile();
    for bytes in [encode_pprof(&p), encode_pprof_raw(&p)] {
        for len in 0..bytes.len() {
            let _ = decode_pprof(&bytes[..len]);
        }
        for i in 0..bytes.len() {
            for bit in [0x01u8, 0x10, 0x80] {
                let mut b = bytes.clone();
                b[i] ^= bit;
                let _ = decode_pprof(&b);
            }
        }
    }
}

#[test]
fn truncated_gzip_says_so() {
    let bytes = encode_pprof(&common::checkout_profile());
    let err = decode_pprof(&bytes[..bytes.len() / 2]).unwrap_err();
    assert!(matches!(err, DecodeError::Gzip(_)), "{err:?}");
    assert!(err.to_string().contains("truncated or corrupt"), "{err}");
}

#[test]
fn random_bytes_never_panic() {
    let mut rng = span_profile_test::XorShift(0x1234_5678_9abc_def1);
    for n in 0..2000 {
        let bytes: Vec<u8> = (0..n % 300).map(|_| rng.next_u64() as u8).collect();
        let _ = decode_pprof(&bytes);
    }
    assert!(matches!(
        decode_pprof(b"not a profile at all"),
        Err(DecodeError::Protobuf(_))
    ));
}

#[test]
fn decompression_is_capped() {
    // 300 MiB of zeros gzip to about 300 KiB.
    let mut enc = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    let chunk = vec![0u8; 1 << 20];
    for _ in 0..300 {
        enc.write_all(&chunk).unwrap();
    }
    let bomb = enc.finish().unwrap();
    let err = decode_pprof(&bomb).unwrap_err();
    assert!(matches!(err, DecodeError::TooLarge { .. }), "{err:?}");
    assert!(err.to_string().contains("268435456 bytes"), "{err}");
}

fn valid() -> pprof::Profile {
    pprof::Profile::decode(encode_pprof_raw(&common::checkout_profile()).as_slice()).unwrap()
}

fn decode_msg(m: &pprof::Profile) -> DecodeError {
    decode_pprof(&m.encode_to_vec()).unwrap_err()
}

#[test]
fn out_of_range_indices_are_named() {
    let mut m = valid();
    m.function[0].name = 10_000;
    let e = decode_msg(&m);
    assert!(
        matches!(e, DecodeError::StringIndex { index: 10_000, .. }),
        "{e:?}"
    );
    assert!(e.to_string().contains("function 1 name"), "{e}");

    let mut m = valid();
    m.sample[0].label[0].str = -1;
    assert!(matches!(
        decode_msg(&m),
        DecodeError::StringIndex { index: -1, .. }
    ));

    let mut m = valid();
    m.sample[1].location_id.push(77);
    let e = decode_msg(&m);
    assert!(
        matches!(e, DecodeError::UnknownLocation { sample: 1, id: 77 }),
        "{e:?}"
    );

    let mut m = valid();
    m.location[0].line[0].function_id = 0;
    assert!(matches!(
        decode_msg(&m),
        DecodeError::UnknownFunction { location: 1, id: 0 }
    ));

    let mut m = valid();
    m.sample[0].value.pop();
    let e = decode_msg(&m);
    assert!(
        matches!(
            e,
            DecodeError::ValueCount {
                sample: 0,
                got: 3,
                expected: 4
            }
        ),
        "{e:?}"
    );

    let mut m = valid();
    m.string_table[0] = "x".into();
    assert!(matches!(decode_msg(&m), DecodeError::StringTableStart(_)));
}

#[test]
fn zero_bytes_and_an_empty_gzip_stream_are_not_an_empty_window() {
    // A zero-byte file (a writer killed before its first byte) once read as a valid window with
    // no samples, which `compact` then rolled into a phantom `unknown_service` roll-up.
    assert!(matches!(decode_pprof(&[]), Err(DecodeError::Empty)));
    let mut gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    gz.flush().unwrap();
    let empty_gzip = gz.finish().unwrap();
    assert!(matches!(decode_pprof(&empty_gzip), Err(DecodeError::Empty)));
    // The smallest real profile still decodes.
    let mut m = valid();
    m.sample.clear();
    assert!(decode_pprof(&m.encode_to_vec()).is_ok());
}

#[test]
fn bad_ids_and_meta_are_named() {
    let mut m = valid();
    let span_value = m.sample[0].label[1].str as usize;
    m.string_table[span_value] = "not-hex-at-all!!".into();
    let e = decode_msg(&m);
    assert!(
        matches!(e, DecodeError::BadId { key: "span_id", .. }),
        "{e:?}"
    );

    // The meta document in its field (ADR 0024): the message as prost writes it (no meta,
    // since `pprof::Profile` does not declare the field), plus the field appended.
    let with_meta = |json: &str| {
        let mut bytes = valid().encode_to_vec();
        prost::encoding::bytes::encode(21328, &json.as_bytes().to_vec(), &mut bytes);
        decode_pprof(&bytes)
    };
    assert!(matches!(with_meta("{oops"), Err(DecodeError::Meta(_))));
    let e = with_meta("{\"v\":99}").unwrap_err();
    assert!(e.to_string().contains("upgrade span-profile"), "{e}");
    assert!(e.to_string().contains("span table"), "{e}");

    // And in the comment of files written before it.
    let old = |comment: &str| {
        let mut m = valid();
        m.comment = vec![m.string_table.len() as i64];
        m.string_table.push(comment.into());
        decode_msg(&m)
    };
    assert!(matches!(
        old("span-profile.meta={oops"),
        DecodeError::Meta(_)
    ));
    let e = old("span-profile.meta={\"v\":99}");
    assert!(e.to_string().contains("upgrade span-profile"), "{e}");
}

#[test]
fn foreign_profiles_decode_with_defaults() {
    // A Go-like CPU profile: samples/count + cpu/nanoseconds, an unsymbolized location,
    // an inlined one, a span_id label without a trace id, a numeric label.
    let s = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    let m = pprof::Profile {
        string_table: s(&[
            "",
            "samples",
            "count",
            "cpu",
            "nanoseconds",
            "main.work",
            "main.go",
            "inl",
            "span_id",
            "00f067aa0ba902b7",
            "bytes",
        ]),
        sample_type: vec![
            pprof::ValueType { r#type: 1, unit: 2 },
            pprof::ValueType { r#type: 3, unit: 4 },
        ],
        function: vec![
            pprof::Function {
                id: 5,
                name: 5,
                system_name: 5,
                filename: 6,
                start_line: 1,
            },
            pprof::Function {
                id: 6,
                name: 7,
                system_name: 7,
                filename: 6,
                start_line: 1,
            },
        ],
        location: vec![
            pprof::Location {
                id: 9,
                address: 0x4000,
                ..Default::default()
            },
            pprof::Location {
                id: 3,
                line: vec![
                    pprof::Line {
                        function_id: 6,
                        line: 20,
                        column: 0,
                    },
                    pprof::Line {
                        function_id: 5,
                        line: -4,
                        column: 0,
                    },
                ],
                ..Default::default()
            },
        ],
        sample: vec![pprof::Sample {
            location_id: vec![9, 3],
            value: vec![3, 30_000_000],
            label: vec![
                pprof::Label {
                    key: 8,
                    str: 9,
                    num: 0,
                    num_unit: 0,
                },
                pprof::Label {
                    key: 10,
                    str: 0,
                    num: 7,
                    num_unit: 10,
                },
            ],
        }],
        period: 10_000_000,
        ..Default::default()
    };
    let p = decode_pprof(&m.encode_to_vec()).unwrap();
    assert_eq!(p.resource, span_profile_core::Resource::default());
    let names: Vec<_> = p
        .stack_frames(0)
        .map(|f| (f.function.as_str(), f.line))
        .collect();
    assert_eq!(names, [("0x4000", 0), ("inl", 20), ("main.work", 0)]);
    let s = &p.samples[0];
    assert_eq!(
        (s.wall_samples, s.cpu_ns, s.wall_ns, s.cpu_samples),
        (3, 30_000_000, 0, 0)
    );
    assert_eq!(
        s.span, None,
        "a span id without a trace id is not a span context"
    );
    assert_eq!(&*s.route, "background");
    assert_eq!(p.period_ns, 10_000_000);
}
