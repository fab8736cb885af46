//! The demo's routes and their guards.

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;
use tollgate::axum::{Guard, Rejection, VisitorSource};
use tollgate::{Deliveries, Limiter, Mode, Policy, RuleSet};

use crate::Work;

/// The header GitHub names each webhook delivery with.
pub const DELIVERY_HEADER: &str = "x-github-delivery";

#[derive(Clone, Debug)]
struct Demo {
    work: Arc<Work>,
    deliveries: Deliveries,
}

/// The demo's router:
///
/// - `POST /sites/{project}/ask`: Ask AI, guarded by `ask-burst`, `ask`,
///   `ask-site` and `ask-all`, all-or-nothing and fail-closed; 200.
/// - `POST /orgs/{org}/runs`: a docs run, guarded by `docs-run`, fail-open; 202.
/// - `POST /webhooks/github`: processed once per `X-GitHub-Delivery`; 200.
/// - `GET /stats`: the domain work done per route; `GET /healthz`.
///
/// Every request is logged at info.
///
/// # Errors
///
/// [`tollgate::Error::UnknownRule`] when `rules` lacks one of the rules above.
pub fn app(
    limiter: Limiter,
    rules: &RuleSet,
    visitors: VisitorSource,
) -> Result<Router, tollgate::Error> {
    let ask = Guard::new(limiter.clone())
        .visitors(visitors)
        .rule(rules.get("ask-burst")?, |call| {
            Some(vec![call.visitor()?.into()])
        })
        .rule(rules.get("ask")?, |call| {
            Some(vec![call.param("project")?.into(), call.visitor()?.into()])
        })
        .rule(rules.get("ask-site")?, |call| {
            Some(vec![call.param("project")?.into()])
        })
        .rule(rules.get("ask-all")?, |_| Some(vec![]))
        .mode(Mode::Reserve)
        .policy(Policy::FailClosed);
    let runs = Guard::new(limiter.clone())
        .rule(rules.get("docs-run")?, |call| {
            Some(vec![call.param("org")?.into()])
        })
        .mode(Mode::Count)
        .policy(Policy::FailOpen);
    let demo = Demo {
        work: Arc::default(),
        deliveries: limiter.deliveries(),
    };
    Ok(Router::new()
        .route("/sites/{project}/ask", post(answer).route_layer(ask))
        .route("/orgs/{org}/runs", post(start_run).route_layer(runs))
        .route("/webhooks/github", post(github_webhook))
        .route("/stats", get(stats))
        .route("/healthz", get(healthz))
        .with_state(demo)
        .layer(middleware::from_fn(log_request)))
}

/// The Ask AI route's domain work: only reached when every limit allowed it.
async fn answer(State(demo): State<Demo>, Path(project): Path<String>) -> Json<serde_json::Value> {
    demo.work.ask();
    Json(json!({
        "project": project,
        "answer": "This is where the expensive AI answer would be.",
    }))
}

async fn start_run(State(demo): State<Demo>, Path(org): Path<String>) -> impl IntoResponse {
    demo.work.run();
    (
        StatusCode::ACCEPTED,
        Json(json!({ "org": org, "queued": true })),
    )
}

async fn github_webhook(
    State(demo): State<Demo>,
    headers: HeaderMap,
) -> Result<Json<serde_json::Value>, Rejection> {
    let id = match headers.get(DELIVERY_HEADER).map(|v| v.to_str()) {
        Some(Ok(id)) if !id.trim().is_empty() => id.trim(),
        Some(Ok(_)) | None => {
            return Err(Rejection::BadRequest(
                "missing X-GitHub-Delivery header".into(),
            ));
        }
        Some(Err(_)) => {
            return Err(Rejection::BadRequest(
                "malformed X-GitHub-Delivery header".into(),
            ));
        }
    };
    let first = demo.deliveries.first_delivery(id).await.map_err(|err| {
        if err.is_unavailable() {
            tracing::warn!("webhook delivery could not be de-duplicated; refusing it (503)");
        }
        Rejection::from(err)
    })?;
    if !first {
        return Ok(Json(json!({ "duplicate": true })));
    }
    // The domain work. Were it to fail, `demo.deliveries.release(id)` would
    // let GitHub's redelivery be processed.
    demo.work.webhook();
    Ok(Json(json!({ "processed": true })))
}

async fn stats(State(demo): State<Demo>) -> Json<serde_json::Value> {
    Json(demo.work.to_json())
}

async fn healthz() -> &'static str {
    "ok"
}

/// Logs one line per request at info.
async fn log_request(request: Request, next: Next) -> Response {
    let method = request.method().clone();
    let path = request.uri().path().to_owned();
    let started = Instant::now();
    let response = next.run(request).await;
    tracing::info!(
        %method,
        path,
        status = response.status().as_u16(),
        ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX),
        "request"
    );
    response
}
