//! Resource labels (per process) and per-sample label values with cardinality caps.

use std::collections::HashMap;
use std::sync::Arc;

use serde::{Deserialize, Serialize};

/// The route label of samples taken while no span was active.
pub const BACKGROUND_ROUTE: &str = "background";
/// The value that replaces label values past a key's cardinality cap.
pub const OTHER_VALUE: &str = "_other";
/// Longest label value kept, in bytes; longer values are cut at a character boundary.
pub const MAX_LABEL_VALUE_LEN: usize = 256;

/// The labels that describe the process, taken from the same variables that traces use.
///
/// ```
/// use span_profile_core::Resource;
/// let (r, problems) = Resource::from_vars(
///     Some("checkout"),
///     Some("service.version=1.4.2,deployment.environment=prod,team=payments"),
/// );
/// assert!(problems.is_empty());
/// assert_eq!(r.service, "checkout");
/// assert_eq!(r.version.as_deref(), Some("1.4.2"));
/// assert_eq!(r.environment.as_deref(), Some("prod"));
/// assert_eq!(r.attributes, vec![("team".to_string(), "payments".to_string())]);
/// ```
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Resource {
    /// `service.name`; `unknown_service` when unset, as OpenTelemetry does.
    pub service: String,
    /// `service.version`.
    pub version: Option<String>,
    /// `deployment.environment` (or `deployment.environment.name`).
    pub environment: Option<String>,
    /// `service.instance.id`, else `host.name`, else the host name and pid.
    pub instance: Option<String>,
    /// Every other resource attribute, in input order.
    pub attributes: Vec<(String, String)>,
}

impl Default for Resource {
    fn default() -> Self {
        Self {
            service: "unknown_service".into(),
            version: None,
            environment: None,
            instance: None,
            attributes: Vec::new(),
        }
    }
}

/// A problem found in `OTEL_RESOURCE_ATTRIBUTES`. The rest of the variable is still used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResourceAttributeError {
    /// An entry has no `=`.
    #[error(
        "OTEL_RESOURCE_ATTRIBUTES entry {entry:?} has no '='; expected key=value[,key=value...]"
    )]
    MissingEquals {
        /// The offending entry.
        entry: String,
    },
    /// An entry has an empty key.
    #[error("OTEL_RESOURCE_ATTRIBUTES entry {entry:?} has an empty key")]
    EmptyKey {
        /// The offending entry.
        entry: String,
    },
    /// A value has a `%` that does not start a valid percent-encoded UTF-8 sequence.
    #[error("OTEL_RESOURCE_ATTRIBUTES value for {key:?} has an invalid percent-encoding; it was kept as written")]
    BadPercentEncoding {
        /// The key whose value was kept verbatim.
        key: String,
    },
}

impl Resource {
    /// The instance label used when none is configured: `<host name>-<pid>`, distinct per
    /// process, so a forked child gets its own.
    pub fn default_instance() -> String {
        let host = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .map(|h| h.trim().to_string())
            .ok()
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok())
            .unwrap_or_else(|| "localhost".into());
        format!("{host}-{}", std::process::id())
    }

    /// Reads `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` from the environment.
    /// Malformed entries are skipped and returned, never fatal.
    pub fn from_env() -> (Self, Vec<ResourceAttributeError>) {
        let name = std::env::var("OTEL_SERVICE_NAME").ok();
        let attrs = std::env::var("OTEL_RESOURCE_ATTRIBUTES").ok();
        Self::from_vars(name.as_deref(), attrs.as_deref())
    }

    /// Like [`Resource::from_env`], from explicit values. `OTEL_SERVICE_NAME` wins over a
    /// `service.name` attribute, as the OpenTelemetry specification requires.
    pub fn from_vars(
        service_name: Option<&str>,
        resource_attributes: Option<&str>,
    ) -> (Self, Vec<ResourceAttributeError>) {
        let (pairs, problems) = parse_resource_attributes(resource_attributes.unwrap_or(""));
        let mut r = Resource::default();
        for (k, v) in pairs {
            match k.as_str() {
                // An empty name is no name: keep `unknown_service` (backends reject "").
                "service.name" if v.trim().is_empty() => {}
                "service.name" => r.service = v,
                "service.version" => r.version = Some(v),
                "deployment.environment" | "deployment.environment.name" => r.environment = Some(v),
                "service.instance.id" => r.instance = Some(v),
                _ => r.attributes.push((k, v)),
            }
        }
        if let Some(s) = service_name.map(str::trim).filter(|s| !s.is_empty()) {
            r.service = s.to_string();
        }
        (r, problems)
    }
}

/// Parses the W3C-baggage-like `key=value,key=value` form of `OTEL_RESOURCE_ATTRIBUTES`.
/// Returns the valid pairs (values percent-decoded) and one error per malformed entry.
///
/// ```
/// let (pairs, errs) = span_profile_core::labels::parse_resource_attributes("a=1,broken,b=x%20y");
/// assert_eq!(pairs, vec![("a".into(), "1".into()), ("b".into(), "x y".into())]);
/// assert_eq!(errs.len(), 1);
/// ```
pub fn parse_resource_attributes(s: &str) -> (Vec<(String, String)>, Vec<ResourceAttributeError>) {
    let mut pairs = Vec::new();
    let mut errors = Vec::new();
    for entry in s.split(',') {
        let entry = entry.trim();
        if entry.is_empty() {
            continue;
        }
        let Some((k, v)) = entry.split_once('=') else {
            errors.push(ResourceAttributeError::MissingEquals {
                entry: entry.to_string(),
            });
            continue;
        };
        let k = k.trim();
        if k.is_empty() {
            errors.push(ResourceAttributeError::EmptyKey {
                entry: entry.to_string(),
            });
            continue;
        }
        let v = v.trim();
        let value = match percent_decode(v) {
            Some(d) => d,
            None => {
                errors.push(ResourceAttributeError::BadPercentEncoding { key: k.to_string() });
                v.to_string()
            }
        };
        pairs.push((k.to_string(), value));
    }
    (pairs, errors)
}

fn percent_decode(s: &str) -> Option<String> {
    if !s.contains('%') {
        return Some(s.to_string());
    }
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hex = b.get(i + 1..i + 3)?;
            let hex = std::str::from_utf8(hex).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Cuts `s` to at most [`MAX_LABEL_VALUE_LEN`] bytes at a character boundary.
pub fn truncate_label(s: &str) -> &str {
    if s.len() <= MAX_LABEL_VALUE_LEN {
        return s;
    }
    let mut end = MAX_LABEL_VALUE_LEN;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

/// Index of a value in a [`LabelValues`] table.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct LabelId(pub u32);

/// The distinct values of one per-sample label key (route, thread name, task name), with a cap
/// on how many there may be. Past the cap every new value maps to [`OTHER_VALUE`] and is counted.
///
/// Id 0 is always [`OTHER_VALUE`], id 1 is always [`BACKGROUND_ROUTE`].
///
/// ```
/// use span_profile_core::labels::{LabelValues, OTHER_VALUE};
/// let mut routes = LabelValues::with_cap(3);
/// let a = routes.intern("/orders/{id}");
/// assert_eq!(routes.intern("/orders/{id}"), a);
/// let over = routes.intern("/a-fourth-value");
/// assert_eq!(routes.get(over), OTHER_VALUE);
/// assert_eq!(routes.overflowed(), 1);
/// ```
#[derive(Debug, Clone)]
pub struct LabelValues {
    values: Vec<Arc<str>>,
    index: HashMap<Arc<str>, LabelId>,
    cap: usize,
    overflowed: u64,
}

impl LabelValues {
    /// The id of [`OTHER_VALUE`].
    pub const OTHER: LabelId = LabelId(0);
    /// The id of [`BACKGROUND_ROUTE`].
    pub const BACKGROUND: LabelId = LabelId(1);

    /// A table that holds at most `cap` distinct values (counting the two built-in ones).
    pub fn with_cap(cap: usize) -> Self {
        let mut t = Self {
            values: Vec::new(),
            index: HashMap::new(),
            cap: cap.max(2),
            overflowed: 0,
        };
        for v in [OTHER_VALUE, BACKGROUND_ROUTE] {
            let v: Arc<str> = Arc::from(v);
            t.index.insert(v.clone(), LabelId(t.values.len() as u32));
            t.values.push(v);
        }
        t
    }

    /// The id of `value` (cut to [`MAX_LABEL_VALUE_LEN`]), adding it if there is room.
    pub fn intern(&mut self, value: &str) -> LabelId {
        let value = truncate_label(value);
        if let Some(&id) = self.index.get(value) {
            return id;
        }
        if self.values.len() >= self.cap {
            self.overflowed += 1;
            return Self::OTHER;
        }
        let id = LabelId(self.values.len() as u32);
        let v: Arc<str> = Arc::from(value);
        self.index.insert(v.clone(), id);
        self.values.push(v);
        id
    }

    /// Looks a value up without adding it.
    pub fn find(&self, value: &str) -> Option<LabelId> {
        self.index.get(truncate_label(value)).copied()
    }

    /// The value of `id`; [`OTHER_VALUE`] for an unknown id.
    pub fn get(&self, id: LabelId) -> &str {
        self.values
            .get(id.0 as usize)
            .map(|v| &**v)
            .unwrap_or(OTHER_VALUE)
    }

    /// The shared value of `id`.
    pub fn get_arc(&self, id: LabelId) -> Arc<str> {
        self.values
            .get(id.0 as usize)
            .cloned()
            .unwrap_or_else(|| self.values[0].clone())
    }

    /// How many values were replaced by [`OTHER_VALUE`] because the cap was reached.
    pub fn overflowed(&self) -> u64 {
        self.overflowed
    }

    /// Number of distinct values held.
    pub fn len(&self) -> usize {
        self.values.len()
    }

    /// Always false: the built-in values are always present.
    pub fn is_empty(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_resource_attributes_keep_the_good_entries() {
        let (r, errs) = Resource::from_vars(
            None,
            Some("service.name=api,=x,novalue,,k=%zz,k2=%E2%82%AC"),
        );
        assert_eq!(r.service, "api");
        assert_eq!(errs.len(), 3, "{errs:?}");
        assert_eq!(
            r.attributes,
            vec![("k".into(), "%zz".into()), ("k2".into(), "€".into())]
        );
        assert!(errs[0].to_string().contains("empty key"));
    }

    #[test]
    fn service_name_variable_wins_and_blank_is_ignored() {
        let (r, _) = Resource::from_vars(Some("checkout"), Some("service.name=other"));
        assert_eq!(r.service, "checkout");
        let (r, _) = Resource::from_vars(Some("  "), None);
        assert_eq!(r.service, "unknown_service");
        // Found by the labels fuzz target: an empty attribute used to give service "".
        let (r, _) = Resource::from_vars(Some(""), Some("service.name=,x=1"));
        assert_eq!(r.service, "unknown_service");
    }

    #[test]
    fn label_values_of_any_characters_are_kept_and_capped_in_length() {
        let mut t = LabelValues::with_cap(10);
        let weird = "é\u{0}\n\"{}=,🙂";
        let id = t.intern(weird);
        assert_eq!(t.get(id), weird);
        let long = "é".repeat(1000);
        let id = t.intern(&long);
        assert!(t.get(id).len() <= MAX_LABEL_VALUE_LEN);
        assert!(long.starts_with(t.get(id)));
    }

    #[test]
    fn a_hundred_thousand_routes_stay_within_the_cap() {
        let mut t = LabelValues::with_cap(1000);
        for i in 0..100_000 {
            t.intern(&format!("/r/{i}"));
        }
        assert_eq!(t.len(), 1000);
        assert_eq!(t.overflowed(), 100_000 - 998);
    }
}
