//! The Pyroscope exporter: each window as pprof, pushed to `POST /push.v1.PusherService/Push`
//! (Connect protobuf, gzip), or to the legacy `POST /ingest` for older servers.
//!
//! Series labels: `__name__` (`process_cpu`, and `wall` when enabled), `service_name`, the
//! resource labels (`service_version`, `deployment_environment`, `instance` and every other
//! resource attribute, with names made Prometheus-safe), and the configured tags, at most 30
//! in all (one place is kept for `route`, which the server promotes from the samples).
//! Per-sample pprof labels: `span_id` and `trace_id` (Pyroscope stores these per sample) and
//! `route`. With [`SpanScope::LocalRoot`] (the default, as Grafana's traces-to-profiles
//! expects) `span_id` is the sample's local root span; [`SpanScope::All`] keeps the innermost.
//!
//! Pyroscope's limits are met before sending: a profile over 4 MiB or 16,000 samples is
//! split, a window older than the ingestion window (1 h) is dropped and counted. Delivery
//! (retries, spool, timeouts) is [`crate::delivery`].
//!
//! # Environment
//!
//! | variable | meaning |
//! |---|---|
//! | `PYROSCOPE_SERVER_ADDRESS` | endpoint, when none is given (`http://host:4040`) |
//! | `PYROSCOPE_BASIC_AUTH_USERNAME`, `PYROSCOPE_BASIC_AUTH_PASSWORD` | basic auth (also `user:password@` in the URL) |
//! | `PYROSCOPE_AUTH_TOKEN` | bearer token |
//! | `PYROSCOPE_TENANT_ID` | `X-Scope-OrgID` |
//! | `PYROSCOPE_HTTP_HEADERS` | extra headers, `key=value,key2=value2` (percent-decoded) |
//! | `PYROSCOPE_TAGS` | extra series labels, `key=value,...` |
//! | `PYROSCOPE_SPAN_SCOPE` | `local_root` (default) or `all` |
//! | `PYROSCOPE_PROTOCOL` | `push` (default) or `ingest` |
//! | `PYROSCOPE_WALL` | `true` to send the wall profile too |
//! | `PYROSCOPE_TIMEOUT_MS` | per-request timeout (default 10000) |
//! | `PYROSCOPE_INGESTION_WINDOW_MS` | drop windows older than this (default 3600000) |
//! | `SPAN_PROFILE_SPOOL_DIR` | on-disk spool (`<dir>/pyroscope`); memory if unset |
//! | `SPAN_PROFILE_SPOOL_MAX_BYTES`, `SPAN_PROFILE_SPOOL_MAX_ENTRIES` | spool bounds |
//! | `SPAN_PROFILE_CA_FILE` | PEM file of CA certificates for `https://` (a private CA), in place of the bundled Mozilla roots |

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use prost::Message;
use span_profile_core::internal::XorShift;
use span_profile_core::{ExportError, Exporter, Profile, Stack};

use crate::config::{
    base64, parse_endpoint, parse_header_list, percent_encode, ConfigError, Secret,
};
use crate::delivery::{Delivery, DeliveryConfig, DeliveryStats, Request};
use crate::encode::{encode_pprof_with, gzip, EncodeOptions, ValueSet};
use crate::ExporterEnv;

/// The Connect push path.
pub const PUSH_PATH: &str = "/push.v1.PusherService/Push";
/// The legacy ingest path.
pub const INGEST_PATH: &str = "/ingest";
/// Pyroscope's default limit on series labels.
pub const MAX_SERIES_LABELS: usize = 30;
/// Pyroscope's default limit on one profile's uncompressed size.
pub const MAX_PROFILE_BYTES: usize = 4 << 20;
/// Pyroscope's default limit on one profile's samples.
pub const MAX_PROFILE_SAMPLES: usize = 16_000;

/// The messages of Pyroscope's `push.v1` API, written from the documented field numbers.
///
/// ```
/// use prost::Message;
/// use span_profile_export::pyroscope::push::{LabelPair, PushRequest, RawProfileSeries, RawSample};
///
/// let req = PushRequest {
///     series: vec![RawProfileSeries {
///         labels: vec![LabelPair { name: "__name__".into(), value: "process_cpu".into() }],
///         samples: vec![RawSample { raw_profile: vec![1, 2], id: "x".into() }],
///     }],
/// };
/// assert_eq!(PushRequest::decode(req.encode_to_vec().as_slice()).unwrap(), req);
/// ```
pub mod push {
    /// `push.v1.PushRequest`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct PushRequest {
        /// The series, each with its profiles.
        #[prost(message, repeated, tag = "1")]
        pub series: Vec<RawProfileSeries>,
    }
    /// `push.v1.RawProfileSeries`.
    #[derive(Clone, PartialEq, prost::Message)]
    pub struct RawProfileSeries {
        /// Series labels, `__name__` and `service_name` among them.
        #[prost(message, repeated, tag = "1")]
        pub labels: Vec<LabelPair>,
        /// The profiles.
        #[prost(message, repeated, tag = "2")]
        pub samples: Vec<RawSample>,
    }
    /// `types.v1.LabelPair`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct LabelPair {
        /// Label name.
        #[prost(string, tag = "1")]
        pub name: String,
        /// Label value.
        #[prost(string, tag = "2")]
        pub value: String,
    }
    /// `push.v1.RawSample`.
    #[derive(Clone, PartialEq, Eq, prost::Message)]
    pub struct RawSample {
        /// A pprof profile (gzip optional).
        #[prost(bytes = "vec", tag = "1")]
        pub raw_profile: Vec<u8>,
        /// A UUID for the profile.
        #[prost(string, tag = "2")]
        pub id: String,
    }
}

use span_profile_core::SpanScope;

/// Which Pyroscope API to send to.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Protocol {
    /// `POST /push.v1.PusherService/Push` (Pyroscope 1.0 and later).
    #[default]
    Push,
    /// `POST /ingest?name=...&format=pprof` (older servers).
    Ingest,
}

/// How to authenticate.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Auth {
    /// No credentials.
    #[default]
    None,
    /// HTTP basic auth (Grafana Cloud).
    Basic {
        /// User.
        user: String,
        /// Password.
        password: Secret,
    },
    /// `Authorization: Bearer <token>`.
    Bearer(Secret),
}

/// Settings of a [`PyroscopeExporter`].
///
/// ```
/// use span_profile_core::SpanScope;
/// use span_profile_export::pyroscope::PyroscopeConfig;
/// use span_profile_export::ExporterEnv;
///
/// let env = ExporterEnv::from_pairs([
///     ("PYROSCOPE_TENANT_ID", "team-a"),
///     ("PYROSCOPE_BASIC_AUTH_USERNAME", "123"),
///     ("PYROSCOPE_BASIC_AUTH_PASSWORD", "glc_secret"),
/// ]);
/// let config = PyroscopeConfig::from_env("http://localhost:4040", &env)
///     .unwrap()
///     .with_span_scope(SpanScope::All)
///     .with_tag("region", "eu-west-1");
/// assert!(!format!("{config:?}").contains("glc_secret"));
/// ```
#[derive(Debug, Clone)]
#[non_exhaustive]
pub struct PyroscopeConfig {
    /// Server base URL, without credentials.
    pub endpoint: String,
    /// Push or ingest.
    pub protocol: Protocol,
    /// Which span `span_id` names.
    pub span_scope: SpanScope,
    /// Also send the wall-clock profile (`__name__="wall"`).
    pub wall: bool,
    /// Write the `route` sample label.
    pub route_label: bool,
    /// Extra series labels.
    pub tags: Vec<(String, String)>,
    /// `X-Scope-OrgID`.
    pub tenant_id: Option<String>,
    /// Credentials.
    pub auth: Auth,
    /// Extra headers (values are secrets).
    pub headers: Vec<(String, Secret)>,
    /// Retries, spool and timeouts; `max_age` is the ingestion window.
    pub delivery: DeliveryConfig,
    /// Largest uncompressed profile (default 4 MiB).
    pub max_profile_bytes: usize,
    /// Most samples per profile (default 16,000).
    pub max_profile_samples: usize,
}

impl PyroscopeConfig {
    /// Settings for `endpoint` (`http[s]://[user:password@]host:port`), with defaults.
    pub fn new(endpoint: &str) -> Result<Self, ConfigError> {
        let e = parse_endpoint(endpoint)?;
        Ok(Self {
            endpoint: e.base,
            protocol: Protocol::Push,
            span_scope: SpanScope::LocalRoot,
            wall: false,
            route_label: true,
            tags: Vec::new(),
            tenant_id: None,
            auth: match e.user {
                Some((user, password)) => Auth::Basic { user, password },
                None => Auth::None,
            },
            headers: Vec::new(),
            delivery: DeliveryConfig::default(),
            max_profile_bytes: MAX_PROFILE_BYTES,
            max_profile_samples: MAX_PROFILE_SAMPLES,
        })
    }

    /// Settings for `endpoint` (or `PYROSCOPE_SERVER_ADDRESS` when `endpoint` is empty), with
    /// the `PYROSCOPE_*` and `SPAN_PROFILE_SPOOL_*` variables of `env` applied (see the
    /// [module docs](self)).
    pub fn from_env(endpoint: &str, env: &ExporterEnv) -> Result<Self, ConfigError> {
        let endpoint = match endpoint.trim() {
            "" => env
                .get("PYROSCOPE_SERVER_ADDRESS")
                .ok_or(ConfigError::InvalidVar {
                    name: "PYROSCOPE_SERVER_ADDRESS",
                    reason: "no endpoint given; set it to the server, e.g. http://localhost:4040"
                        .into(),
                })?,
            e => e,
        };
        let mut c = Self::new(endpoint)?;
        c.delivery = env.delivery("pyroscope")?;
        if let Some(user) = env.get("PYROSCOPE_BASIC_AUTH_USERNAME") {
            c.auth = Auth::Basic {
                user: user.to_string(),
                password: Secret::new(env.get("PYROSCOPE_BASIC_AUTH_PASSWORD").unwrap_or("")),
            };
        }
        if let Some(token) = env.get("PYROSCOPE_AUTH_TOKEN") {
            c.auth = Auth::Bearer(Secret::new(token));
        }
        c.tenant_id = env.get("PYROSCOPE_TENANT_ID").map(str::to_string);
        if let Some(h) = env.get("PYROSCOPE_HTTP_HEADERS") {
            c.headers = parse_header_list("PYROSCOPE_HTTP_HEADERS", h)?;
        }
        if let Some(t) = env.get("PYROSCOPE_TAGS") {
            let (pairs, problems) = span_profile_core::labels::parse_resource_attributes(t);
            if let Some(p) = problems.first() {
                return Err(ConfigError::InvalidVar {
                    name: "PYROSCOPE_TAGS",
                    reason: format!("{p}; expected key=value[,key=value...]"),
                });
            }
            c.tags = pairs;
        }
        if let Some(s) = env.get("PYROSCOPE_SPAN_SCOPE") {
            c.span_scope = crate::config::parse_span_scope("PYROSCOPE_SPAN_SCOPE", s)?;
        }
        if let Some(p) = env.get("PYROSCOPE_PROTOCOL") {
            c.protocol = match p.to_ascii_lowercase().as_str() {
                "push" => Protocol::Push,
                "ingest" => Protocol::Ingest,
                _ => {
                    return Err(ConfigError::InvalidVar {
                        name: "PYROSCOPE_PROTOCOL",
                        reason: format!("{p:?} is not push or ingest"),
                    })
                }
            };
        }
        if let Some(w) = env.flag("PYROSCOPE_WALL")? {
            c.wall = w;
        }
        if let Some(t) = env.duration_ms("PYROSCOPE_TIMEOUT_MS")? {
            c.delivery = c.delivery.with_timeout(t);
        }
        if let Some(w) = env.duration_ms("PYROSCOPE_INGESTION_WINDOW_MS")? {
            c.delivery = c.delivery.with_max_age(w);
        }
        Ok(c)
    }

    /// Sets the span scope.
    pub fn with_span_scope(mut self, scope: SpanScope) -> Self {
        self.span_scope = scope;
        self
    }
    /// Sets the protocol.
    pub fn with_protocol(mut self, protocol: Protocol) -> Self {
        self.protocol = protocol;
        self
    }
    /// Also sends the wall profile.
    pub fn with_wall(mut self, wall: bool) -> Self {
        self.wall = wall;
        self
    }
    /// Adds a series label.
    pub fn with_tag(mut self, name: impl Into<String>, value: impl Into<String>) -> Self {
        self.tags.push((name.into(), value.into()));
        self
    }
    /// Sets `X-Scope-OrgID`.
    pub fn with_tenant_id(mut self, tenant: impl Into<String>) -> Self {
        self.tenant_id = Some(tenant.into());
        self
    }
    /// Sets the credentials.
    pub fn with_auth(mut self, auth: Auth) -> Self {
        self.auth = auth;
        self
    }
    crate::config::network_setters!();
    /// Sets the split limits (tests use small ones).
    pub fn with_profile_limits(mut self, max_bytes: usize, max_samples: usize) -> Self {
        self.max_profile_bytes = max_bytes.max(1);
        self.max_profile_samples = max_samples.max(1);
        self
    }

    fn http_headers(&self) -> Vec<(String, String)> {
        let mut h = Vec::new();
        match &self.auth {
            Auth::None => {}
            Auth::Basic { user, password } => h.push((
                "Authorization".into(),
                format!(
                    "Basic {}",
                    base64(format!("{user}:{}", password.expose()).as_bytes())
                ),
            )),
            Auth::Bearer(t) => h.push(("Authorization".into(), format!("Bearer {}", t.expose()))),
        }
        if let Some(t) = &self.tenant_id {
            h.push(("X-Scope-OrgID".into(), t.clone()));
        }
        if self.protocol == Protocol::Push {
            h.push(("Connect-Protocol-Version".into(), "1".into()));
        }
        h.extend(
            self.headers
                .iter()
                .map(|(k, v)| (k.clone(), v.expose().to_string())),
        );
        h
    }
}

/// Counters of a [`PyroscopeExporter`]. Every drop has one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct PyroscopeStats {
    /// Windows passed to `export`.
    pub windows: u64,
    /// Profiles encoded (one per series and split part).
    pub profiles: u64,
    /// Profiles that were split to meet the size or sample limit.
    pub split_profiles: u64,
    /// Windows dropped at `export` because they were older than the ingestion window.
    pub dropped_expired_windows: u64,
    /// Samples dropped because one sample alone exceeded the size limit.
    pub dropped_oversize_samples: u64,
    /// Series labels dropped (over the limit, invalid, empty or duplicate names).
    pub dropped_labels: u64,
    /// What the delivery worker counted.
    pub delivery: DeliveryStats,
}

/// An [`Exporter`] that sends windows to Pyroscope.
///
/// `export` encodes the window on the calling thread and returns once the requests are
/// queued; sending happens on the exporter's own thread (see [`crate::delivery`]), so a slow
/// or dead server never holds up the profiler. Failures since the previous call are returned
/// as [`ExportError::InternalFailure`] (the window itself is still queued).
///
/// ```no_run
/// use span_profile_core::Profiler;
/// use span_profile_export::pyroscope::{PyroscopeConfig, PyroscopeExporter};
/// # use span_profile_test::FakeWalker;
///
/// let exporter = PyroscopeExporter::new(PyroscopeConfig::new("http://localhost:4040")?)?;
/// let profiler = Profiler::builder()
///     .with_service("checkout")
///     .with_walker(FakeWalker::threads(2, 8))
///     .with_exporter(exporter)
///     .start()?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct PyroscopeExporter {
    config: PyroscopeConfig,
    delivery: Delivery,
    windows: AtomicU64,
    profiles: AtomicU64,
    split_profiles: AtomicU64,
    dropped_expired_windows: AtomicU64,
    dropped_oversize_samples: AtomicU64,
    dropped_labels: AtomicU64,
    ids: Mutex<XorShift>,
}

impl PyroscopeExporter {
    /// Starts the exporter's delivery thread.
    pub fn new(config: PyroscopeConfig) -> Result<Self, ConfigError> {
        let delivery = Delivery::start(
            &config.endpoint,
            config.http_headers(),
            config.delivery.clone(),
            "Pyroscope",
            None,
        )?;
        Ok(Self {
            config,
            delivery,
            windows: AtomicU64::new(0),
            profiles: AtomicU64::new(0),
            split_profiles: AtomicU64::new(0),
            dropped_expired_windows: AtomicU64::new(0),
            dropped_oversize_samples: AtomicU64::new(0),
            dropped_labels: AtomicU64::new(0),
            ids: Mutex::new(XorShift::seeded()),
        })
    }

    /// The settings in use.
    pub fn config(&self) -> &PyroscopeConfig {
        &self.config
    }

    /// Counters so far.
    pub fn stats(&self) -> PyroscopeStats {
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        PyroscopeStats {
            windows: l(&self.windows),
            profiles: l(&self.profiles),
            split_profiles: l(&self.split_profiles),
            dropped_expired_windows: l(&self.dropped_expired_windows),
            dropped_oversize_samples: l(&self.dropped_oversize_samples),
            dropped_labels: l(&self.dropped_labels),
            delivery: self.delivery.stats(),
        }
    }

    /// The last delivery failure, without credentials.
    pub fn last_error(&self) -> Option<String> {
        self.delivery.last_error()
    }

    /// The requests for one window, in sending order (exposed for benches and tests).
    pub fn requests(&self, profile: &Profile) -> Vec<Request> {
        let mut series: Vec<(&'static str, ValueSet)> = vec![("process_cpu", ValueSet::Cpu)];
        if self.config.wall {
            series.push(("wall", ValueSet::Wall));
        }
        let end_ns = profile.start_unix_ns.saturating_add(profile.duration_ns);
        let mut out = Vec::new();
        let mut push = push::PushRequest::default();
        let mut push_bytes = 0usize;
        for (name, values) in series {
            let labels = self.series_labels(profile, name);
            for raw in self.profiles_for(profile, values) {
                self.profiles.fetch_add(1, Ordering::Relaxed);
                match self.config.protocol {
                    Protocol::Push => {
                        if push_bytes > 0 && push_bytes + raw.len() > self.config.max_profile_bytes
                        {
                            out.push(push_request(std::mem::take(&mut push), end_ns));
                            push_bytes = 0;
                        }
                        push_bytes += raw.len();
                        let id = self.uuid();
                        match push.series.last_mut() {
                            Some(s) if s.labels == labels => s.samples.push(push::RawSample {
                                raw_profile: raw,
                                id,
                            }),
                            _ => push.series.push(push::RawProfileSeries {
                                labels: labels.clone(),
                                samples: vec![push::RawSample {
                                    raw_profile: raw,
                                    id,
                                }],
                            }),
                        }
                    }
                    Protocol::Ingest => out.push(ingest_request(profile, &labels, raw, end_ns)),
                }
            }
        }
        if !push.series.is_empty() {
            out.push(push_request(push, end_ns));
        }
        out
    }

    fn uuid(&self) -> String {
        let mut rng = self.ids.lock().unwrap_or_else(PoisonError::into_inner);
        let (a, b) = (rng.next_u64(), rng.next_u64());
        // Version 4, variant 1.
        let a = (a & !0xf000) | 0x4000;
        let b = (b & !(0b11 << 62)) | (0b10 << 62);
        format!(
            "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
            a >> 32,
            (a >> 16) & 0xffff,
            a & 0xffff,
            b >> 48,
            b & 0xffff_ffff_ffff
        )
    }

    /// Series labels for one profile type, within Pyroscope's rules.
    fn series_labels(&self, p: &Profile, name: &str) -> Vec<push::LabelPair> {
        let r = &p.resource;
        let mut wanted: Vec<(&str, &str)> = vec![("__name__", name), ("service_name", &r.service)];
        let fixed = [
            ("service_version", r.version.as_deref()),
            ("deployment_environment", r.environment.as_deref()),
            ("instance", r.instance.as_deref()),
        ];
        wanted.extend(fixed.iter().filter_map(|(k, v)| v.map(|v| (*k, v))));
        wanted.extend(r.attributes.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        wanted.extend(
            self.config
                .tags
                .iter()
                .map(|(k, v)| (k.as_str(), v.as_str())),
        );
        let room = MAX_SERIES_LABELS - usize::from(self.config.route_label);
        let mut out: Vec<push::LabelPair> = Vec::with_capacity(room);
        let mut dropped = 0;
        for (i, (k, v)) in wanted.into_iter().enumerate() {
            let name = if i == 0 {
                Some(k.to_string())
            } else {
                label_name(k)
            };
            let value = cut(v, 2048);
            match name {
                Some(n)
                    if !value.is_empty()
                        && out.len() < room
                        && (i == 0 || n != "route" || !self.config.route_label)
                        && !out.iter().any(|l| l.name == n) =>
                {
                    out.push(push::LabelPair {
                        name: n,
                        value: value.to_string(),
                    })
                }
                _ => dropped += 1,
            }
        }
        if dropped > 0 {
            self.dropped_labels.fetch_add(dropped, Ordering::Relaxed);
        }
        out
    }

    fn options(&self, values: ValueSet) -> EncodeOptions {
        EncodeOptions {
            values,
            span_id_is_local_root: self.config.span_scope == SpanScope::LocalRoot,
            local_root_label: false,
            route_label: self.config.route_label,
            thread_label: false,
            task_label: false,
            meta: false,
        }
    }

    /// The bare pprof profiles of one series, each within the limits.
    fn profiles_for(&self, p: &Profile, values: ValueSet) -> Vec<Vec<u8>> {
        let kept: Vec<usize> = (0..p.samples.len())
            .filter(|&i| values.keeps(&p.samples[i]))
            .collect();
        if kept.is_empty() {
            return Vec::new();
        }
        let opts = self.options(values);
        let (max_b, max_s) = (
            self.config.max_profile_bytes,
            self.config.max_profile_samples,
        );
        let mut out = Vec::new();
        if kept.len() <= max_s {
            let raw = encode_pprof_with(p, &opts);
            if raw.len() <= max_b {
                out.push(raw);
                return out;
            }
            let parts = raw.len().div_ceil(max_b).max(2);
            self.split_profiles.fetch_add(1, Ordering::Relaxed);
            self.split(p, &kept, parts, &opts, &mut out);
        } else {
            self.split_profiles.fetch_add(1, Ordering::Relaxed);
            self.split(p, &kept, kept.len().div_ceil(max_s), &opts, &mut out);
        }
        out
    }

    /// Encodes `indices` in `parts` sub-profiles, halving any that is still too large.
    fn split(
        &self,
        p: &Profile,
        indices: &[usize],
        parts: usize,
        opts: &EncodeOptions,
        out: &mut Vec<Vec<u8>>,
    ) {
        let per = indices.len().div_ceil(parts.max(1)).max(1);
        for chunk in indices.chunks(per) {
            let sub = sub_profile(p, chunk);
            let raw = encode_pprof_with(&sub, opts);
            if raw.len() <= self.config.max_profile_bytes
                && chunk.len() <= self.config.max_profile_samples
            {
                out.push(raw);
            } else if chunk.len() == 1 {
                self.dropped_oversize_samples
                    .fetch_add(1, Ordering::Relaxed);
            } else {
                self.split(p, chunk, 2, opts, out);
            }
        }
    }
}

/// A window with only the samples at `indices`, and only the frames and stacks they use.
fn sub_profile(p: &Profile, indices: &[usize]) -> Profile {
    let mut q = Profile::empty(
        p.resource.clone(),
        p.start_unix_ns,
        p.duration_ns,
        p.period_ns,
    );
    let mut frame_map = vec![u32::MAX; p.frames.len()];
    let mut stack_map = vec![u32::MAX; p.stacks.len()];
    for &i in indices {
        let Some(s) = p.samples.get(i) else { continue };
        let Some(stack) = p.stacks.get(s.stack as usize) else {
            continue;
        };
        let si = s.stack as usize;
        if stack_map[si] == u32::MAX {
            let frames = stack
                .frames
                .iter()
                .filter_map(|&f| {
                    let slot = frame_map.get_mut(f as usize)?;
                    if *slot == u32::MAX {
                        *slot = q.frames.len() as u32;
                        q.frames.push(p.frames[f as usize].clone());
                    }
                    Some(*slot)
                })
                .collect();
            stack_map[si] = q.stacks.len() as u32;
            q.stacks.push(Stack {
                frames,
                truncated: stack.truncated,
            });
        }
        let mut row = s.clone();
        row.stack = stack_map[si];
        q.samples.push(row);
    }
    q
}

fn push_request(req: push::PushRequest, end_ns: u64) -> Request {
    Request {
        path: PUSH_PATH.into(),
        content_type: "application/proto".into(),
        content_encoding: Some("gzip".into()),
        window_end_unix_ns: end_ns,
        body: gzip(&req.encode_to_vec()),
    }
}

fn ingest_request(p: &Profile, labels: &[push::LabelPair], raw: Vec<u8>, end_ns: u64) -> Request {
    let app = labels
        .iter()
        .find(|l| l.name == "service_name")
        .map(|l| l.value.as_str())
        .unwrap_or("unknown_service");
    let app: String = app
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || "_.-/".contains(c) {
                c
            } else {
                '_'
            }
        })
        .collect();
    let tags: Vec<String> = labels
        .iter()
        .filter(|l| !l.name.starts_with("__") && l.name != "service_name")
        .map(|l| {
            let v: String = l
                .value
                .chars()
                .map(|c| if ",{}=\"".contains(c) { '_' } else { c })
                .collect();
            format!("{}={v}", l.name)
        })
        .collect();
    let name = format!("{app}{{{}}}", tags.join(","));
    let rate = 1_000_000_000u64.checked_div(p.period_ns).unwrap_or(100);
    let path = format!(
        "{INGEST_PATH}?name={}&from={}&until={}&format=pprof&sampleRate={rate}&spyName=span-profile",
        percent_encode(&name),
        p.start_unix_ns / 1_000_000_000,
        end_ns.div_ceil(1_000_000_000),
    );
    Request {
        path,
        content_type: "application/octet-stream".into(),
        content_encoding: None,
        window_end_unix_ns: end_ns,
        // Pyroscope sniffs gzip in pprof bodies.
        body: gzip(&raw),
    }
}

/// A Prometheus-safe label name (`[A-Za-z_][A-Za-z0-9_]*`, not `__`-prefixed), or `None`.
fn label_name(k: &str) -> Option<String> {
    let mut n: String = k
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '_' })
        .collect();
    if n.starts_with(|c: char| c.is_ascii_digit()) {
        n.insert(0, '_');
    }
    if n.is_empty() || n.starts_with("__") || n.len() > 1024 {
        return None;
    }
    Some(n)
}

fn cut(s: &str, max: usize) -> &str {
    if s.len() <= max {
        return s;
    }
    let mut end = max;
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

impl Exporter for PyroscopeExporter {
    /// Encodes the window and queues it for the delivery thread; never waits for the
    /// network (delivery owns the request timeout, the retries and the spool).
    fn export(&self, profile: Arc<Profile>) -> Result<(), ExportError> {
        self.windows.fetch_add(1, Ordering::Relaxed);
        let end_ns = profile.start_unix_ns.saturating_add(profile.duration_ns);
        self.delivery
            .export_window(end_ns, &self.dropped_expired_windows, || {
                self.requests(&profile)
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
    fn label_names_are_made_safe() {
        assert_eq!(
            label_name("service.version").as_deref(),
            Some("service_version")
        );
        assert_eq!(label_name("9lives").as_deref(), Some("_9lives"));
        assert_eq!(label_name("__name__"), None);
        assert_eq!(label_name(""), None);
    }

    #[test]
    fn uuids_are_version_4() {
        let e =
            PyroscopeExporter::new(PyroscopeConfig::new("http://127.0.0.1:9").unwrap()).unwrap();
        let id = e.uuid();
        assert_eq!(id.len(), 36);
        assert_eq!(&id[14..15], "4");
        assert!("89ab".contains(&id[19..20]), "{id}");
    }
}
