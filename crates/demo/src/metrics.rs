//! `GET /metrics`: the limiter's metrics in the Prometheus text format.

use std::sync::OnceLock;

use axum::Router;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};

/// The process's Prometheus recorder, installed on first use (before the
/// first check, so that every metric is recorded); `None` when another
/// recorder was installed first.
pub fn prometheus() -> Option<&'static PrometheusHandle> {
    static HANDLE: OnceLock<Option<PrometheusHandle>> = OnceLock::new();
    HANDLE
        .get_or_init(|| match PrometheusBuilder::new().install_recorder() {
            Ok(handle) => Some(handle),
            Err(err) => {
                tracing::warn!(error = %err, "metrics are not exported: another recorder is installed");
                None
            }
        })
        .as_ref()
}

/// The operator's router: `GET /metrics`, every metric in the Prometheus
/// text format. Serve it on an address callers cannot reach (`--metrics-listen`):
/// the metrics show budgets that responses keep hidden.
pub fn metrics_router() -> Router {
    prometheus();
    Router::new().route("/metrics", get(scrape))
}

/// The scrape: every metric in the Prometheus text format.
pub(crate) async fn scrape() -> Response {
    match prometheus() {
        Some(handle) => (
            [(header::CONTENT_TYPE, "text/plain; version=0.0.4")],
            handle.render(),
        )
            .into_response(),
        None => (
            StatusCode::SERVICE_UNAVAILABLE,
            "metrics are not exported\n",
        )
            .into_response(),
    }
}
