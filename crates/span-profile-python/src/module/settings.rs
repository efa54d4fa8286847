//! Settings that the Python API passes down: where profiles go, and the resource labels.

use span_profile_core::Resource;

/// The resource labels: `OTEL_SERVICE_NAME` and `OTEL_RESOURCE_ATTRIBUTES` first, then the
/// explicit settings on top. The instance defaults to `<host>-<pid>`; a process forked from a
/// profiled parent gets its pid appended to an explicit instance, so parent and child never
/// write the same file names.
pub(crate) fn resource(
    service: Option<&str>,
    version: Option<&str>,
    environment: Option<&str>,
    instance: Option<&str>,
    forked: bool,
) -> (Resource, Vec<String>) {
    let (mut r, problems) = Resource::from_env();
    if let Some(s) = service.filter(|s| !s.trim().is_empty()) {
        r.service = s.trim().to_string();
    }
    if let Some(v) = version {
        r.version = Some(v.to_string());
    }
    if let Some(e) = environment {
        r.environment = Some(e.to_string());
    }
    if let Some(i) = instance {
        r.instance = Some(i.to_string());
    }
    r.instance = Some(match r.instance.take() {
        Some(i) if forked => format!("{i}-{}", std::process::id()),
        Some(i) => i,
        None => Resource::default_instance(),
    });
    (r, problems.into_iter().map(|p| p.to_string()).collect())
}
