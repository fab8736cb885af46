//! The demo logs one line per request at info, and a fail-open store
//! failure at warn.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use tollgate::axum::{Trust, VisitorSource};
use tollgate::memory::MemoryStore;
use tollgate::{Fault, Faulty, Limiter, ManualClock, RuleSet};
use tollgate_test_support::Logs;
use tower::ServiceExt;

#[tokio::test]
async fn each_request_is_one_info_line_and_a_fail_open_failure_a_warning() {
    let store = Arc::new(Faulty::new(MemoryStore::new()));
    let limiter = Limiter::builder(store.clone())
        .clock(ManualClock::starting_now())
        .build();
    let visitors = VisitorSource::new(Trust::Peer).development(true);
    let app = tollgate_demo::app(limiter, store.clone(), &RuleSet::defaults(), visitors).unwrap();
    store.set(Fault::Transient);

    let logs = Logs::default();
    let request = Request::post("/orgs/acme/runs")
        .body(Body::empty())
        .unwrap();
    let response = logs
        .capture_from(tracing::Level::INFO, app.oneshot(request))
        .await
        .unwrap();

    assert_eq!(
        response.status(),
        StatusCode::ACCEPTED,
        "fail-open allows the run"
    );
    let text = logs.text();
    let request_lines: Vec<&str> = text
        .lines()
        .filter(|l| l.contains(" INFO ") && l.contains("path=\"/orgs/acme/runs\""))
        .collect();
    assert_eq!(request_lines.len(), 1, "one info line per request: {text}");
    assert!(request_lines[0].contains("status=202"), "{text}");
    let warnings: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
    assert_eq!(
        warnings.len(),
        1,
        "one warning for the store failure: {text}"
    );
    assert!(
        warnings[0].contains("fail-open") && warnings[0].contains("docs-run"),
        "{text}"
    );
}
