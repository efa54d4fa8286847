//! A 200 whose `ExportProfilesServiceResponse` reports a partial success: the rejected
//! profiles are counted and the server's message comes back from the next `export`. A message
//! with nothing rejected is the spec's warning: counted and kept, not a failure.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::recent_checkout;
use common::server::{CaptureServer, Reply};
use opentelemetry_proto::tonic::collector::profiles::v1development::{
    ExportProfilesPartialSuccess, ExportProfilesServiceResponse,
};
use prost::Message;
use span_profile_core::Exporter;
use span_profile_export::otlp::{OtlpConfig, OtlpExporter};

#[test]
fn rejected_profiles_are_counted_and_reported() {
    let body = ExportProfilesServiceResponse {
        partial_success: Some(ExportProfilesPartialSuccess {
            rejected_profiles: 1,
            error_message: "wall profile: unsupported sample type".into(),
        }),
    }
    .encode_to_vec();
    let server = CaptureServer::start(move |_, _| Reply::Status(200, Vec::new(), body.clone()));
    let e = OtlpExporter::new(OtlpConfig::new(&server.url()).unwrap()).unwrap();
    e.export(Arc::new(recent_checkout())).unwrap();
    e.force_flush().unwrap();
    let s = e.stats();
    assert_eq!(
        (s.windows, s.delivery.sent, s.delivery.rejected_items),
        (1, 1, 1),
        "{s:?}"
    );
    let err = e.export(Arc::new(recent_checkout())).unwrap_err();
    assert!(err.to_string().contains("unsupported sample type"), "{err}");
    e.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
}

#[test]
fn a_message_with_nothing_rejected_is_a_warning_not_a_failure() {
    let body = ExportProfilesServiceResponse {
        partial_success: Some(ExportProfilesPartialSuccess {
            rejected_profiles: 0,
            error_message: "profiles signal is in development".into(),
        }),
    }
    .encode_to_vec();
    let server = CaptureServer::start(move |_, _| Reply::Status(200, Vec::new(), body.clone()));
    let e = OtlpExporter::new(OtlpConfig::new(&server.url()).unwrap()).unwrap();
    e.export(Arc::new(recent_checkout())).unwrap();
    e.force_flush().unwrap();
    let s = e.stats().delivery;
    assert_eq!((s.sent, s.rejected_items, s.warnings), (1, 0, 1), "{s:?}");
    let warning = e.last_warning().expect("the warning is kept");
    assert!(warning.contains("in development"), "{warning}");
    assert_eq!(e.last_error(), None);
    e.export(Arc::new(recent_checkout()))
        .expect("a warning is not a failure");
    e.shutdown_with_timeout(Duration::from_secs(2)).unwrap();
}
