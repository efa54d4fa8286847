//! The OTLP profiles exporter: each window as an `ExportProfilesServiceRequest` (proto v1.10
//! numbering, through the `opentelemetry-proto` crate), protobuf, gzip, `POST
//! /v1development/profiles`.
//!
//! Encoding ([`otlp_request`]):
//! - one dictionary per request; row 0 of every table is the zero value, `link_table[0]` is
//!   the all-zero link;
//! - each `(trace_id, span_id)` is one `link_table` row that samples reference by
//!   `link_index` (0 = no span); the span is the innermost one by default
//!   ([`SpanScope::All`]), or the local root;
//! - the CPU profile: `sample_type` samples/count, `period_type` cpu/nanoseconds, `period`
//!   = 1e9/Hz (Pyroscope maps exactly this to `process_cpu`); the wall profile is a second
//!   `Profile` with `period_type` wall/nanoseconds;
//! - sample attributes `thread.name` and `http.route` (`background` without a span);
//! - resource attributes `service.name`, `service.version`, `deployment.environment.name`,
//!   `service.instance.id` and the rest of `OTEL_RESOURCE_ATTRIBUTES`.
//!
//! The response's partial success is read: `rejected_profiles` is counted in
//! [`DeliveryStats::rejected_items`] and its message reported by the next `export`; a message
//! with nothing rejected (the spec's warning) is counted in [`DeliveryStats::warnings`] and
//! kept as [`OtlpExporter::last_warning`].
//!
//! # Environment
//!
//! | variable | meaning |
//! |---|---|
//! | `OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT` | full URL, used as is |
//! | `OTEL_EXPORTER_OTLP_ENDPOINT` | base URL; `/v1development/profiles` is appended (default `http://localhost:4318`) |
//! | `OTEL_EXPORTER_OTLP_HEADERS`, `OTEL_EXPORTER_OTLP_PROFILES_HEADERS` | `key=value,...`; the profiles list wins per key |
//! | `OTEL_EXPORTER_OTLP_TIMEOUT`, `OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT` | milliseconds (default 10000) |
//! | `OTEL_EXPORTER_OTLP_COMPRESSION`, `OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION` | `gzip` (default) or `none` |
//! | `OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL`, `OTEL_EXPORTER_OTLP_PROTOCOL` | only `http/protobuf` |
//! | `SPAN_PROFILE_OTLP_SPAN_SCOPE` | `all` (default) or `local_root` |
//! | `SPAN_PROFILE_SPOOL_DIR` | on-disk spool (`<dir>/otlp`); memory if unset |
//! | `OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE`, `OTEL_EXPORTER_OTLP_CERTIFICATE`, `SPAN_PROFILE_CA_FILE` | PEM file of CA certificates for `https://`, in place of the bundled Mozilla roots (first set wins) |
//!
//! An `otlp+http://host:4318` output URL is a base URL, like `OTEL_EXPORTER_OTLP_ENDPOINT`,
//! and wins over the variables.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesServiceRequest, ExportProfilesServiceResponse,
};
use opentelemetry_proto::tonic::common::v1::{any_value, AnyValue, InstrumentationScope, KeyValue};
use opentelemetry_proto::tonic::profiles::v1development as pb;
use opentelemetry_proto::tonic::resource::v1::Resource as PbResource;
use prost::Message;
use rustc_hash::FxHashMap;
use span_profile_core::internal::XorShift;
use span_profile_core::{ExportError, Exporter, Profile, SpanContext};

use crate::config::{parse_endpoint, parse_header_list, ConfigError, Secret};
use crate::delivery::{Delivery, DeliveryConfig, DeliveryStats, Request, ResponseOutcome};
use crate::encode::{gzip, TRUNCATED_FRAME};
use crate::ExporterEnv;
use span_profile_core::SpanScope;

/// The OTLP/HTTP path of the profiles signal.
pub const PROFILES_PATH: &str = "/v1development/profiles";
/// Sample attribute key of the thread name.
pub const THREAD_NAME_KEY: &str = "thread.name";
/// Sample attribute key of the route.
pub const ROUTE_KEY: &str = "http.route";

/// Settings of an [`OtlpExporter`].
///
/// ```
/// use span_profile_export::otlp::OtlpConfig;
/// use span_profile_export::ExporterEnv;
///
/// let env = ExporterEnv::from_pairs([
///     ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318"),
///     ("OTEL_EXPORTER_OTLP_HEADERS", "authorization=Bearer%20abc"),
///     ("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "2500"),
/// ]);
/// let c = OtlpConfig::from_env("", &env).unwrap();
/// assert_eq!(c.url(), "http://collector:4318/v1development/profiles");
/// assert_eq!(c.delivery.timeout.as_millis(), 2500);
/// assert!(!format!("{c:?}").contains("abc"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct OtlpConfig {
    /// `scheme://host[:port]`, without credentials.
    pub base: String,
    /// Path of the profiles endpoint.
    pub path: String,
    /// Headers on every request (values are secrets).
    pub headers: Vec<(String, Secret)>,
    /// Gzip the body.
    pub gzip: bool,
    /// Which span a sample's link names.
    pub span_scope: SpanScope,
    /// Send the wall profile as a second `Profile`.
    pub wall: bool,
    /// Retries, spool and timeouts.
    pub delivery: DeliveryConfig,
}

impl OtlpConfig {
    /// Settings for a base URL (`http://host:4318`); `/v1development/profiles` is appended
    /// unless the URL already ends with it.
    pub fn new(base_url: &str) -> Result<Self, ConfigError> {
        let e = parse_endpoint(base_url)?;
        let (base, path) = if e.path.ends_with(PROFILES_PATH) {
            let base = e.base.trim_end_matches(PROFILES_PATH).to_string();
            (base, PROFILES_PATH.to_string())
        } else {
            (e.base, PROFILES_PATH.to_string())
        };
        let mut headers = Vec::new();
        if let Some((user, password)) = e.user {
            headers.push((
                "Authorization".to_string(),
                Secret::new(format!(
                    "Basic {}",
                    crate::config::base64(format!("{user}:{}", password.expose()).as_bytes())
                )),
            ));
        }
        Ok(Self {
            base,
            path,
            headers,
            gzip: true,
            span_scope: SpanScope::All,
            wall: true,
            delivery: DeliveryConfig::default(),
        })
    }

    /// Settings from `base_url` (if not empty) and the OpenTelemetry variables of `env` (see
    /// the [module docs](self)).
    pub fn from_env(base_url: &str, env: &ExporterEnv) -> Result<Self, ConfigError> {
        for name in [
            "OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(p) = env.get(name) {
                if p != "http/protobuf" {
                    return Err(ConfigError::InvalidVar {
                        name,
                        reason: format!("{p:?} is not supported; use http/protobuf"),
                    });
                }
                break;
            }
        }
        let mut c = if !base_url.trim().is_empty() {
            Self::new(base_url)?
        } else if let Some(full) = env.get("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT") {
            let e = parse_endpoint(full)?;
            let mut c = Self::new(full)?;
            let origin_len = e.base.len() - e.path.len();
            c.base = e.base[..origin_len].to_string();
            c.path = if e.path.is_empty() {
                "/".into()
            } else {
                e.path
            };
            c
        } else {
            Self::new(
                env.get("OTEL_EXPORTER_OTLP_ENDPOINT")
                    .unwrap_or("http://localhost:4318"),
            )?
        };
        c.delivery = env.delivery("otlp")?;
        let mut headers = std::mem::take(&mut c.headers);
        for name in [
            "OTEL_EXPORTER_OTLP_HEADERS",
            "OTEL_EXPORTER_OTLP_PROFILES_HEADERS",
        ] {
            if let Some(h) = env.get(name) {
                for (k, v) in parse_header_list(name, h)? {
                    headers.retain(|(old, _)| !old.eq_ignore_ascii_case(&k));
                    headers.push((k, v));
                }
            }
        }
        c.headers = headers;
        let timeout = match env.duration_ms("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT")? {
            Some(t) => Some(t),
            None => env.duration_ms("OTEL_EXPORTER_OTLP_TIMEOUT")?,
        };
        if let Some(t) = timeout {
            c.delivery = c.delivery.with_timeout(t);
        }
        for name in [
            "OTEL_EXPORTER_OTLP_PROFILES_CERTIFICATE",
            "OTEL_EXPORTER_OTLP_CERTIFICATE",
        ] {
            if let Some(f) = env.get(name) {
                c.delivery = c.delivery.with_ca_file(f);
                break;
            }
        }
        for name in [
            "OTEL_EXPORTER_OTLP_PROFILES_COMPRESSION",
            "OTEL_EXPORTER_OTLP_COMPRESSION",
        ] {
            if let Some(v) = env.get(name) {
                c.gzip = match v {
                    "gzip" => true,
                    "none" => false,
                    _ => {
                        return Err(ConfigError::InvalidVar {
                            name,
                            reason: format!("{v:?} is not gzip or none"),
                        })
                    }
                };
                break;
            }
        }
        if let Some(s) = env.get("SPAN_PROFILE_OTLP_SPAN_SCOPE") {
            c.span_scope = crate::config::parse_span_scope("SPAN_PROFILE_OTLP_SPAN_SCOPE", s)?;
        }
        Ok(c)
    }

    /// The full URL requests go to.
    pub fn url(&self) -> String {
        format!("{}{}", self.base, self.path)
    }
    /// Sets the span scope.
    pub fn with_span_scope(mut self, scope: SpanScope) -> Self {
        self.span_scope = scope;
        self
    }
    /// Sends the wall profile too (default on).
    pub fn with_wall(mut self, wall: bool) -> Self {
        self.wall = wall;
        self
    }
    crate::config::network_setters!();
}

/// Counters of an [`OtlpExporter`].
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct OtlpStats {
    /// Windows passed to `export`.
    pub windows: u64,
    /// Windows dropped at `export` because they were older than `max_age`.
    pub dropped_expired_windows: u64,
    /// What the delivery worker counted; `rejected_items` holds the partial-success
    /// `rejected_profiles`.
    pub delivery: DeliveryStats,
}

/// An [`Exporter`] that sends windows to an OTLP/HTTP profiles receiver (the collector with
/// `--feature-gates=service.profilesSupport`, or Pyroscope).
///
/// ```no_run
/// use span_profile_export::otlp::{OtlpConfig, OtlpExporter};
/// use span_profile_export::ExporterEnv;
///
/// let exporter = OtlpExporter::new(OtlpConfig::from_env("", &ExporterEnv::from_process())?)?;
/// println!("{:?}", exporter.stats());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct OtlpExporter {
    config: OtlpConfig,
    delivery: Delivery,
    windows: AtomicU64,
    dropped_expired_windows: AtomicU64,
    ids: Mutex<XorShift>,
}

impl OtlpExporter {
    /// Starts the exporter's delivery thread.
    pub fn new(config: OtlpConfig) -> Result<Self, ConfigError> {
        let headers = config
            .headers
            .iter()
            .map(|(k, v)| (k.clone(), v.expose().to_string()))
            .collect();
        let delivery = Delivery::start(
            &config.base,
            headers,
            config.delivery.clone(),
            "the OTLP endpoint",
            Some(read_partial_success),
        )?;
        Ok(Self {
            config,
            delivery,
            windows: AtomicU64::new(0),
            dropped_expired_windows: AtomicU64::new(0),
            ids: Mutex::new(XorShift::seeded()),
        })
    }

    /// Counters so far.
    pub fn stats(&self) -> OtlpStats {
        OtlpStats {
            windows: self.windows.load(Ordering::Relaxed),
            dropped_expired_windows: self.dropped_expired_windows.load(Ordering::Relaxed),
            delivery: self.delivery.stats(),
        }
    }

    /// The last delivery failure, without credentials.
    pub fn last_error(&self) -> Option<String> {
        self.delivery.last_error()
    }

    /// The last warning of a receiver that accepted a window whole (a partial success with
    /// nothing rejected and a message); counted in `stats().delivery.warnings`.
    pub fn last_warning(&self) -> Option<String> {
        self.delivery.last_warning()
    }

    /// The settings in use.
    pub fn config(&self) -> &OtlpConfig {
        &self.config
    }

    /// The request for one window, as it would be sent (exposed for benches and tests).
    pub fn request(&self, profile: &Profile) -> Request {
        let mut req = otlp_request(profile, self.config.span_scope, self.config.wall);
        {
            let mut rng = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
            for p in req
                .resource_profiles
                .iter_mut()
                .flat_map(|r| r.scope_profiles.iter_mut())
                .flat_map(|s| s.profiles.iter_mut())
            {
                let mut id = Vec::with_capacity(16);
                id.extend_from_slice(&rng.next_u64().to_le_bytes());
                id.extend_from_slice(&rng.next_u64().to_le_bytes());
                p.profile_id = id;
            }
        }
        let raw = req.encode_to_vec();
        Request {
            path: self.config.path.clone(),
            content_type: "application/x-protobuf".into(),
            content_encoding: self.config.gzip.then(|| "gzip".to_string()),
            window_end_unix_ns: profile.start_unix_ns.saturating_add(profile.duration_ns),
            body: if self.config.gzip { gzip(&raw) } else { raw },
        }
    }
}

fn read_partial_success(body: &[u8]) -> ResponseOutcome {
    match ExportProfilesServiceResponse::decode(body) {
        Ok(r) => match r.partial_success {
            Some(p) if p.rejected_profiles > 0 || !p.error_message.is_empty() => ResponseOutcome {
                rejected_items: p.rejected_profiles.max(0) as u64,
                message: (!p.error_message.is_empty()).then_some(p.error_message),
            },
            _ => ResponseOutcome::default(),
        },
        Err(_) => ResponseOutcome::default(),
    }
}

/// Interns strings into the dictionary's string table (row 0 is `""`).
#[derive(Debug)]
struct Strings {
    table: Vec<String>,
    index: FxHashMap<String, i32>,
}

impl Strings {
    fn new() -> Self {
        let mut index = FxHashMap::default();
        index.insert(String::new(), 0);
        Self {
            table: vec![String::new()],
            index,
        }
    }
    fn get(&mut self, s: &str) -> i32 {
        if let Some(&i) = self.index.get(s) {
            return i;
        }
        let i = self.table.len() as i32;
        self.table.push(s.to_string());
        self.index.insert(s.to_string(), i);
        i
    }
}

/// One window as an OTLP profiles request: a CPU `Profile` and, with `wall`, a wall
/// `Profile`, sharing one dictionary. `profile_id` is left empty.
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_export::otlp::otlp_request;
/// use span_profile_core::SpanScope;
///
/// let p = Profile::empty(Resource::default(), 1_700_000_000_000_000_000, 10_000_000_000, 10_000_000);
/// let req = otlp_request(&p, SpanScope::All, true);
/// let d = req.dictionary.unwrap();
/// assert_eq!(d.string_table[0], "");
/// assert_eq!(d.link_table[0].trace_id, vec![0; 16]);
/// assert_eq!(req.resource_profiles[0].scope_profiles[0].profiles.len(), 2);
/// ```
pub fn otlp_request(
    profile: &Profile,
    scope: SpanScope,
    wall: bool,
) -> ExportProfilesServiceRequest {
    let mut strings = Strings::new();
    let mut dict = pb::ProfilesDictionary {
        mapping_table: vec![pb::Mapping::default()],
        location_table: vec![pb::Location::default()],
        function_table: vec![pb::Function::default()],
        link_table: vec![pb::Link {
            trace_id: vec![0; 16],
            span_id: vec![0; 8],
        }],
        string_table: Vec::new(),
        attribute_table: vec![pb::KeyValueAndUnit::default()],
        stack_table: vec![pb::Stack::default()],
    };

    // Functions per (name, file); one location per frame, at index frame + 1.
    let mut functions: FxHashMap<(&str, &str), i32> = FxHashMap::default();
    for frame in &profile.frames {
        let key = (frame.function.as_str(), frame.file.as_str());
        let function_index = *functions.entry(key).or_insert_with(|| {
            let name = strings.get(key.0);
            dict.function_table.push(pb::Function {
                name_strindex: name,
                system_name_strindex: name,
                filename_strindex: strings.get(key.1),
                start_line: 0,
            });
            dict.function_table.len() as i32 - 1
        });
        dict.location_table.push(pb::Location {
            mapping_index: 0,
            address: 0,
            lines: vec![pb::Line {
                function_index,
                line: i64::from(frame.line),
                column: 0,
            }],
            attribute_indices: Vec::new(),
        });
    }
    let truncated_location = profile.stacks.iter().any(|s| s.truncated).then(|| {
        let name = strings.get(TRUNCATED_FRAME);
        dict.function_table.push(pb::Function {
            name_strindex: name,
            system_name_strindex: name,
            ..Default::default()
        });
        dict.location_table.push(pb::Location {
            lines: vec![pb::Line {
                function_index: dict.function_table.len() as i32 - 1,
                ..Default::default()
            }],
            ..Default::default()
        });
        dict.location_table.len() as i32 - 1
    });
    let n_frames = profile.frames.len();
    for stack in &profile.stacks {
        let mut location_indices: Vec<i32> = stack
            .frames
            .iter()
            .filter(|&&f| (f as usize) < n_frames)
            .map(|&f| f as i32 + 1)
            .collect();
        if let (true, Some(t)) = (stack.truncated, truncated_location) {
            location_indices.push(t);
        }
        dict.stack_table.push(pb::Stack { location_indices });
    }

    let thread_key = strings.get(THREAD_NAME_KEY);
    let route_key = strings.get(ROUTE_KEY);
    let mut attrs: FxHashMap<(i32, &str), i32> = FxHashMap::default();
    let mut links: FxHashMap<([u8; 16], [u8; 8]), i32> = FxHashMap::default();
    let mut link = |dict: &mut pb::ProfilesDictionary, ctx: &SpanContext| -> i32 {
        let span = match scope {
            SpanScope::LocalRoot => ctx.local_root_span_id,
            _ => ctx.span_id,
        };
        let key = (ctx.trace_id.to_bytes(), span.to_bytes());
        *links.entry(key).or_insert_with(|| {
            dict.link_table.push(pb::Link {
                trace_id: key.0.to_vec(),
                span_id: key.1.to_vec(),
            });
            dict.link_table.len() as i32 - 1
        })
    };

    // Per sample row: (stack, attributes, link); shared by both profiles.
    let n_stacks = profile.stacks.len();
    let mut rows: Vec<(i32, [i32; 2], i32)> = Vec::with_capacity(profile.samples.len());
    for s in &profile.samples {
        let stack = if (s.stack as usize) < n_stacks {
            s.stack as i32 + 1
        } else {
            0
        };
        let mut a = [0; 2];
        for (slot, (key, value)) in a
            .iter_mut()
            .zip([(thread_key, &*s.thread_name), (route_key, &*s.route)])
        {
            *slot = *attrs.entry((key, value)).or_insert_with(|| {
                dict.attribute_table.push(pb::KeyValueAndUnit {
                    key_strindex: key,
                    value: Some(string_value(value)),
                    unit_strindex: 0,
                });
                dict.attribute_table.len() as i32 - 1
            });
        }
        let l = s.span.as_ref().map(|c| link(&mut dict, c)).unwrap_or(0);
        rows.push((stack, a, l));
    }

    let samples_of = |value: &dyn Fn(&span_profile_core::ProfileSample) -> u64| {
        let mut out: Vec<pb::Sample> = Vec::new();
        let mut seen: FxHashMap<(i32, [i32; 2], i32), usize> = FxHashMap::default();
        for (s, &(stack, a, l)) in profile.samples.iter().zip(&rows) {
            let v = value(s);
            if v == 0 {
                continue;
            }
            // A sample's identity is (stack, attributes, link): rows that map to the same
            // one (spans folded to their local root, task names dropped) are summed.
            match seen.get(&(stack, a, l)) {
                Some(&i) => {
                    if let Some(x) = out[i].values.first_mut() {
                        *x = x.saturating_add(v as i64);
                    }
                }
                None => {
                    seen.insert((stack, a, l), out.len());
                    out.push(pb::Sample {
                        stack_index: stack,
                        attribute_indices: a.to_vec(),
                        link_index: l,
                        values: vec![v as i64],
                        timestamps_unix_nano: Vec::new(),
                    });
                }
            }
        }
        out
    };
    let samples_count = pb::ValueType {
        type_strindex: strings.get("samples"),
        unit_strindex: strings.get("count"),
    };
    let nanos = strings.get("nanoseconds");
    let mut profiles = vec![pb::Profile {
        sample_type: Some(samples_count),
        samples: samples_of(&|s| s.cpu_samples),
        time_unix_nano: profile.start_unix_ns,
        duration_nano: profile.duration_ns,
        period_type: Some(pb::ValueType {
            type_strindex: strings.get("cpu"),
            unit_strindex: nanos,
        }),
        period: profile.period_ns as i64,
        ..Default::default()
    }];
    if wall {
        profiles.push(pb::Profile {
            sample_type: Some(samples_count),
            samples: samples_of(&|s| s.wall_samples),
            time_unix_nano: profile.start_unix_ns,
            duration_nano: profile.duration_ns,
            period_type: Some(pb::ValueType {
                type_strindex: strings.get("wall"),
                unit_strindex: nanos,
            }),
            period: profile.period_ns as i64,
            ..Default::default()
        });
    }
    dict.string_table = strings.table;

    let r = &profile.resource;
    let mut attributes = vec![kv("service.name", &r.service)];
    let optional = [
        ("service.version", r.version.as_deref()),
        ("deployment.environment.name", r.environment.as_deref()),
        ("service.instance.id", r.instance.as_deref()),
    ];
    attributes.extend(optional.iter().filter_map(|(k, v)| v.map(|v| kv(k, v))));
    attributes.extend(r.attributes.iter().map(|(k, v)| kv(k, v)));
    ExportProfilesServiceRequest {
        resource_profiles: vec![pb::ResourceProfiles {
            resource: Some(PbResource {
                attributes,
                ..Default::default()
            }),
            scope_profiles: vec![pb::ScopeProfiles {
                scope: Some(InstrumentationScope {
                    name: "span-profile".into(),
                    version: env!("CARGO_PKG_VERSION").into(),
                    ..Default::default()
                }),
                profiles,
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
        dictionary: Some(dict),
    }
}

/// [`otlp_request`] encoded as bare protobuf (what is gzipped and sent).
///
/// ```
/// use span_profile_core::{Profile, Resource};
/// use span_profile_core::SpanScope;
/// use span_profile_export::otlp::encode_otlp_raw;
/// let p = Profile::empty(Resource::default(), 0, 1_000, 10);
/// assert!(!encode_otlp_raw(&p, SpanScope::All, true).is_empty());
/// ```
pub fn encode_otlp_raw(profile: &Profile, scope: SpanScope, wall: bool) -> Vec<u8> {
    otlp_request(profile, scope, wall).encode_to_vec()
}

fn string_value(v: &str) -> AnyValue {
    AnyValue {
        value: Some(any_value::Value::StringValue(v.to_string())),
    }
}

fn kv(k: &str, v: &str) -> KeyValue {
    KeyValue {
        key: k.to_string(),
        value: Some(string_value(v)),
        ..Default::default()
    }
}

impl Exporter for OtlpExporter {
    /// Encodes the window and queues it for the delivery thread; never waits for the
    /// network (delivery owns the request timeout, the retries and the spool).
    fn export(&self, profile: Arc<Profile>) -> Result<(), ExportError> {
        self.windows.fetch_add(1, Ordering::Relaxed);
        let end_ns = profile.start_unix_ns.saturating_add(profile.duration_ns);
        self.delivery
            .export_window(end_ns, &self.dropped_expired_windows, || {
                vec![self.request(&profile)]
            })
    }

    fn force_flush(&self) -> Result<(), ExportError> {
        self.delivery.flush_default()
    }

    fn shutdown_with_timeout(&self, timeout: Duration) -> Result<(), ExportError> {
        self.delivery.shutdown_with_timeout(timeout)
    }

    /// Windows are delivered by the delivery thread: its window accounting (ADR 0027).
    fn window_counts(&self) -> Option<span_profile_core::WindowCounts> {
        Some(self.delivery.stats().window_counts())
    }

    /// The configured scope (`with_span_scope` or its environment variable).
    fn span_scope(&self) -> SpanScope {
        self.config.span_scope
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_follow_the_otel_rules() {
        let env = ExporterEnv::from_pairs([
            (
                "OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT",
                "https://c.example:4318/custom/profiles",
            ),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
        ]);
        let c = OtlpConfig::from_env("", &env).unwrap();
        assert_eq!(c.url(), "https://c.example:4318/custom/profiles");
        let c = OtlpConfig::from_env("http://explicit:4318", &env).unwrap();
        assert_eq!(c.url(), "http://explicit:4318/v1development/profiles");
        let c = OtlpConfig::from_env("", &ExporterEnv::default()).unwrap();
        assert_eq!(c.url(), "http://localhost:4318/v1development/profiles");
        let grpc = ExporterEnv::default().with("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc");
        assert!(OtlpConfig::from_env("", &grpc).is_err());
        // Traces on gRPC, profiles on HTTP: the profiles variable wins.
        let grpc = grpc.with("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "http/protobuf");
        assert!(OtlpConfig::from_env("", &grpc).is_ok());
        let grpc = ExporterEnv::default().with("OTEL_EXPORTER_OTLP_PROFILES_PROTOCOL", "grpc");
        assert!(OtlpConfig::from_env("", &grpc).is_err());
    }

    #[test]
    fn the_general_endpoint_is_a_base_url() {
        for (general, url) in [
            ("http://c:4318", "http://c:4318/v1development/profiles"),
            ("http://c:4318/", "http://c:4318/v1development/profiles"),
            ("https://gw/otlp/", "https://gw/otlp/v1development/profiles"),
            (
                "http://c:4318/v1development/profiles",
                "http://c:4318/v1development/profiles",
            ),
        ] {
            let env = ExporterEnv::from_pairs([("OTEL_EXPORTER_OTLP_ENDPOINT", general)]);
            assert_eq!(OtlpConfig::from_env("", &env).unwrap().url(), url);
        }
        // A blank profiles endpoint counts as unset, so the general one is used.
        let env = ExporterEnv::from_pairs([
            ("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", " "),
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"),
        ]);
        assert_eq!(
            OtlpConfig::from_env("", &env).unwrap().url(),
            "http://c:4318/v1development/profiles"
        );
        // The signal endpoint is used as is, even without a path.
        let env = ExporterEnv::from_pairs([("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "http://p:9")]);
        assert_eq!(OtlpConfig::from_env("", &env).unwrap().url(), "http://p:9/");
    }

    #[test]
    fn timeouts_follow_the_otel_rules() {
        let timeout = |pairs: &[(&str, &str)]| {
            OtlpConfig::from_env("", &ExporterEnv::from_pairs(pairs.iter().copied()))
                .map(|c| c.delivery.timeout)
        };
        assert_eq!(timeout(&[]).unwrap(), Duration::from_secs(10), "default");
        assert_eq!(
            timeout(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "1500")]).unwrap(),
            Duration::from_millis(1500),
            "the general variable alone"
        );
        assert_eq!(
            timeout(&[
                ("OTEL_EXPORTER_OTLP_TIMEOUT", "1500"),
                ("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "250"),
            ])
            .unwrap(),
            Duration::from_millis(250),
            "the profiles variable wins"
        );
        let err = timeout(&[("OTEL_EXPORTER_OTLP_TIMEOUT", "10s")])
            .unwrap_err()
            .to_string();
        assert!(err.contains("OTEL_EXPORTER_OTLP_TIMEOUT"), "{err}");
        // The connect timeout never exceeds the request timeout.
        let c = OtlpConfig::from_env(
            "",
            &ExporterEnv::from_pairs([("OTEL_EXPORTER_OTLP_PROFILES_TIMEOUT", "200")]),
        )
        .unwrap();
        assert!(c.delivery.connect_timeout <= Duration::from_millis(200));
    }

    #[test]
    fn profile_headers_win_per_key() {
        let env = ExporterEnv::from_pairs([
            ("OTEL_EXPORTER_OTLP_HEADERS", "a=1,B=2"),
            ("OTEL_EXPORTER_OTLP_PROFILES_HEADERS", "b=3"),
        ]);
        let c = OtlpConfig::from_env("", &env).unwrap();
        let h: Vec<_> = c
            .headers
            .iter()
            .map(|(k, v)| (k.as_str(), v.expose()))
            .collect();
        assert_eq!(h, vec![("a", "1"), ("b", "3")]);
    }

    #[test]
    fn partial_success_is_read() {
        use opentelemetry_proto::tonic::collector::profiles::v1development::ExportProfilesPartialSuccess;
        let body = ExportProfilesServiceResponse {
            partial_success: Some(ExportProfilesPartialSuccess {
                rejected_profiles: 2,
                error_message: "too old".into(),
            }),
        }
        .encode_to_vec();
        let o = read_partial_success(&body);
        assert_eq!(o.rejected_items, 2);
        assert_eq!(o.message.as_deref(), Some("too old"));
        assert_eq!(read_partial_success(b""), ResponseOutcome::default());
    }
}
