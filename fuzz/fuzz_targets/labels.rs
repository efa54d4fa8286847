//! Label parsing and capping: `OTEL_RESOURCE_ATTRIBUTES`, `OTEL_SERVICE_NAME`, label values
//! with cardinality and length caps, and file-store path components built from labels.
//!
//! - arbitrary text never panics, and every pair it yields has a trimmed, non-empty key
//!   without `,` or `=`;
//! - pairs written in the documented form (values percent-encoded) parse back exactly;
//! - `LabelValues` agrees with a model: same value → same id, at most `cap` values, every
//!   value past the cap is `_other` and counted, values cut at 256 bytes on a char boundary;
//! - `sanitize_component` never yields a separator, a leading dot or an empty name.
#![no_main]

use std::collections::HashMap;

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use span_profile_core::labels::{
    parse_resource_attributes, truncate_label, LabelId, LabelValues, BACKGROUND_ROUTE,
    MAX_LABEL_VALUE_LEN, OTHER_VALUE,
};
use span_profile_core::Resource;
use span_profile_export::sanitize_component;

#[derive(Arbitrary, Debug)]
struct Input<'a> {
    service: Option<&'a str>,
    attributes: &'a str,
    pairs: Vec<(&'a str, String)>,
    cap: u8,
    values: Vec<Value<'a>>,
}

#[derive(Arbitrary, Debug)]
enum Value<'a> {
    Short(&'a str),
    /// A long value: `unit` repeated, to cross the length cap at every char width.
    Long {
        unit: char,
        times: u16,
    },
    /// One of a few values, so repeats and the cap are hit often.
    Pool(u8),
}

fn percent_encode(s: &str) -> String {
    let mut out = String::new();
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

fuzz_target!(|input: Input<'_>| {
    // Arbitrary text.
    let (pairs, errors) = parse_resource_attributes(input.attributes);
    let entries = input
        .attributes
        .split(',')
        .filter(|e| !e.trim().is_empty())
        .count();
    assert!(pairs.len() <= entries && errors.len() <= entries);
    for (k, _) in &pairs {
        assert!(!k.is_empty() && k.trim() == k && !k.contains(',') && !k.contains('='));
    }
    let (r, _) = Resource::from_vars(input.service, Some(input.attributes));
    match input.service.map(str::trim).filter(|s| !s.is_empty()) {
        Some(s) => assert_eq!(r.service, s),
        None => assert!(!r.service.is_empty()),
    }

    // The documented form parses back exactly.
    let wanted: Vec<(String, String)> = input
        .pairs
        .iter()
        .map(|(k, v)| (k.trim().to_owned(), v.clone()))
        .filter(|(k, _)| !k.is_empty() && !k.contains(',') && !k.contains('='))
        .collect();
    let text = wanted
        .iter()
        .map(|(k, v)| format!("{k}={}", percent_encode(v)))
        .collect::<Vec<_>>()
        .join(",");
    let (got, errors) = parse_resource_attributes(&text);
    assert!(errors.is_empty(), "{text:?}: {errors:?}");
    assert_eq!(got, wanted, "{text:?}");

    // Label values against a model.
    let cap = usize::from(input.cap).max(2);
    let mut table = LabelValues::with_cap(usize::from(input.cap));
    let mut model: HashMap<String, LabelId> = HashMap::new();
    model.insert(OTHER_VALUE.into(), LabelValues::OTHER);
    model.insert(BACKGROUND_ROUTE.into(), LabelValues::BACKGROUND);
    let mut overflow = 0u64;
    let pool = ["/a", "/b", "/c", "", "background", "_other", "/d/{id}", "é"];
    for v in input.values.iter().take(512) {
        let owned;
        let value: &str = match v {
            Value::Short(s) => s,
            Value::Long { unit, times } => {
                owned = unit.to_string().repeat(usize::from(*times % 600));
                &owned
            }
            Value::Pool(i) => pool[usize::from(*i) % pool.len()],
        };
        let id = table.intern(value);
        let cut = truncate_label(value);
        assert!(cut.len() <= MAX_LABEL_VALUE_LEN && value.starts_with(cut));
        assert!(value.len() <= MAX_LABEL_VALUE_LEN || cut.len() + 4 > MAX_LABEL_VALUE_LEN);
        let expected = match model.get(cut) {
            Some(&id) => id,
            None if model.len() >= cap => {
                overflow += 1;
                LabelValues::OTHER
            }
            None => {
                let id = LabelId(model.len() as u32);
                model.insert(cut.to_owned(), id);
                id
            }
        };
        assert_eq!(id, expected, "{value:?}");
        assert_eq!(
            table.get(id),
            if id == LabelValues::OTHER {
                OTHER_VALUE
            } else {
                cut
            }
        );
        assert_eq!(table.find(value), model.get(cut).copied());
        // Labels name files in the store: never a path separator, hidden or empty name.
        let c = sanitize_component(value);
        assert!(!c.is_empty() && !c.starts_with('.') && !c.contains('/') && c.len() <= 100);
    }
    assert_eq!(table.len(), model.len());
    assert!(table.len() <= cap);
    assert_eq!(table.overflowed(), overflow);
});
