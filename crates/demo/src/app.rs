//! The demo's routes and their guards.

use std::sync::Arc;
use std::time::Instant;

use std::time::Duration;

use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{FromRef, Path, Request, State};
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tollgate::axum::{
    ClientVisitor, Guard, KeyPart, Problem, Rejection, VisitorSource, check, fields, problem,
};
use tollgate::{Deliveries, Limit, Limiter, MarkStore, Mode, Policy, Rule, RuleSet};

use crate::Work;

/// The header GitHub names each webhook delivery with.
pub const DELIVERY_HEADER: &str = "x-github-delivery";

/// The prefix of a webhook delivery's de-duplication mark in the store:
/// `github-delivery:<id>`.
pub const DELIVERY_PREFIX: &str = "github-delivery:";

#[derive(Clone, Debug)]
struct Demo {
    work: Arc<Work>,
    limiter: Limiter,
    deliveries: Deliveries,
    ask: Arc<AskRules>,
    visitors: VisitorSource,
}

impl FromRef<Demo> for VisitorSource {
    fn from_ref(demo: &Demo) -> VisitorSource {
        demo.visitors.clone()
    }
}

/// The five limits of an Ask AI call, checked together, all-or-nothing.
#[derive(Debug)]
struct AskRules {
    burst: Rule,
    ask: Rule,
    site: Rule,
    all: Rule,
    tokens: Rule,
}

impl AskRules {
    /// The rules, each checked now for the number of key parts the route gives it.
    fn new(rules: &RuleSet) -> Result<AskRules, tollgate::Error> {
        let keyed = |name: &str, parts: usize| -> Result<Rule, tollgate::Error> {
            let rule = rules.get(name)?;
            if rule.key_parts().len() != parts {
                return Err(tollgate::Error::KeyArity {
                    rule: name.to_owned(),
                    expected: rule.key_parts().len(),
                    found: parts,
                });
            }
            Ok(rule.clone())
        };
        Ok(AskRules {
            burst: keyed("ask-burst", 1)?,
            ask: keyed("ask", 2)?,
            site: keyed("ask-site", 1)?,
            all: keyed("ask-all", 0)?,
            tokens: keyed("ask-tokens", 1)?,
        })
    }

    /// The limits of one question from `visitor` on `project`, reserving
    /// `estimate` tokens.
    fn limits(
        &self,
        project: &str,
        visitor: &str,
        estimate: u64,
    ) -> Result<Vec<Limit>, tollgate::Error> {
        Ok(vec![
            self.burst.limit(&[visitor])?,
            self.ask.limit(&[project, visitor])?,
            self.site.limit(&[project])?,
            self.all.limit::<&str>(&[])?,
            self.tokens.limit(&[project])?.with_cost(estimate)?,
        ])
    }
}

/// The demo's router:
///
/// - `POST /sites/{project}/ask`: Ask AI with an optional JSON body
///   `{"question": "..."}`. The handler estimates the tokens from the body
///   (`ceil(question bytes / 4) + 512`), checks `ask-burst`, `ask`,
///   `ask-site`, `ask-all` and `ask-tokens` (with that estimate) in one
///   all-or-nothing, fail-closed reservation, runs the fake provider call,
///   and settles `ask-tokens` with the tokens it used; 200
///   `{"project", "answer", "tokens"}`.
/// - `POST /orgs/{org}/runs`: a docs run, guarded by `docs-run`, fail-open; 202.
/// - `POST /webhooks/github`: processed once per `X-GitHub-Delivery`; 200.
/// - `GET /stats`: the domain work done per route, and the tokens settled
///   (a demo's proof of work; a real service would not publish it);
///   `GET /healthz`. The metrics are on their own router,
///   [`metrics_router`](crate::metrics_router), for an operator's address.
///
/// The limits are counted by `limiter`; webhook deliveries are marked in
/// `marks` (usually the store the limiter counts in: a store
/// [`tollgate::open_store`] opens is both) as
/// [`DELIVERY_PREFIX`]`<id>`. Every request is logged at info.
///
/// # Errors
///
/// [`tollgate::Error::UnknownRule`] when `rules` lacks one of the rules above.
pub fn app(
    limiter: Limiter,
    marks: impl MarkStore,
    rules: &RuleSet,
    visitors: VisitorSource,
) -> Result<Router, tollgate::Error> {
    // Before the first check, so that every check is recorded.
    crate::prometheus();
    let runs = Guard::new(limiter.clone())
        .keyed(rules.get("docs-run")?, &[KeyPart::Param("org")])?
        .mode(Mode::Count)
        .policy(Policy::FailOpen);
    // Under the limiter's policy: one time budget for the whole app.
    let deliveries = Deliveries::new(marks, DELIVERY_PREFIX)?.retry(limiter.retry_policy());
    let demo = Demo {
        work: Arc::default(),
        ask: Arc::new(AskRules::new(rules)?),
        limiter,
        deliveries,
        visitors,
    };
    Ok(Router::new()
        .route("/sites/{project}/ask", post(answer))
        .route("/orgs/{org}/runs", post(start_run).route_layer(runs))
        .route("/webhooks/github", post(github_webhook))
        .route("/stats", get(stats))
        .route("/healthz", get(healthz))
        .with_state(demo)
        .layer(middleware::from_fn(log_request)))
}

/// The body of an Ask AI call; an empty body is an empty question.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    question: String,
}

/// The tokens a question is estimated to cost before the provider call:
/// its bytes over four, rounded up, plus 512 for the answer.
pub fn estimate_tokens(question: &str) -> u64 {
    (question.len() as u64).div_ceil(4).saturating_add(512)
}

/// The fake provider call: a deterministic answer, and the tokens it used
/// (the question's, plus 64 to 319 for the answer; never over the estimate).
fn provider(question: &str) -> (String, u64) {
    let answer_tokens = 64 + (question.len() as u64 % 256);
    let used = (question.len() as u64).div_ceil(4) + answer_tokens;
    (
        "This is where the expensive AI answer would be.".into(),
        used,
    )
}

/// Ask AI: the body is read and the cost estimated before anything is
/// counted; the limits are checked before any work; the tokens are settled.
async fn answer(
    State(demo): State<Demo>,
    ClientVisitor(visitor): ClientVisitor,
    Path(project): Path<String>,
    body: Body,
) -> Result<Response, Response> {
    let body = match tokio::time::timeout(BODY_TIMEOUT, to_bytes(body, MAX_BODY)).await {
        Ok(Ok(body)) => body,
        Ok(Err(_)) => return Err(too_large()),
        Err(_) => return Err(body_timeout()),
    };
    ask(demo, visitor, project, body)
        .await
        .map_err(IntoResponse::into_response)
}

/// How long a client has to send an ask's body once its head is in.
pub(crate) const BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest ask body read: 1 MiB.
pub(crate) const MAX_BODY: usize = 1 << 20;

fn too_large() -> Response {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        problem::BAD_REQUEST,
        "Payload Too Large",
    )
    .detail(format!("the body is over {MAX_BODY} bytes"))
    .into_response()
}

fn body_timeout() -> Response {
    Problem::new(
        StatusCode::REQUEST_TIMEOUT,
        problem::BAD_REQUEST,
        "Request Timeout",
    )
    .detail("the body did not arrive in time")
    .into_response()
}

async fn ask(
    demo: Demo,
    visitor: tollgate::Visitor,
    project: String,
    body: Bytes,
) -> Result<Response, Rejection> {
    let question = if body.is_empty() {
        Question::default()
    } else {
        serde_json::from_slice::<Question>(&body)
            .map_err(|_| Rejection::BadRequest("the body must be {\"question\": \"...\"}".into()))?
    };
    let estimate = estimate_tokens(&question.question);
    let limits = demo.ask.limits(&project, visitor.as_str(), estimate)?;
    let verdict = check(&demo.limiter, &limits, Mode::Reserve, Policy::FailClosed).await?;
    let (answer, used) = provider(&question.question);
    demo.work.ask(used);
    if let Err(err) = demo.limiter.settle(&verdict, "ask-tokens", used).await {
        // The estimate stays spent: the safe direction.
        tracing::warn!(error = %err, "settling ask-tokens failed; the estimate stays spent");
    }
    let mut response = Json(json!({
        "project": project,
        "answer": answer,
        "tokens": used,
    }))
    .into_response();
    fields::insert(&verdict, response.headers_mut());
    Ok(response)
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
    let begun = demo.deliveries.begin(id).await.map_err(|err| {
        if err.is_unavailable() {
            tracing::warn!("webhook delivery could not be de-duplicated; refusing it (503)");
        }
        Rejection::from(err)
    })?;
    let Some(delivery) = begun else {
        return Ok(Json(json!({ "duplicate": true })));
    };
    // The domain work. Were it to fail, `delivery.release()` (or dropping
    // the handle) would let GitHub's redelivery be processed.
    demo.work.webhook();
    if let Err(err) = delivery.complete().await {
        // The lease ends by itself; a redelivery may be processed again.
        tracing::warn!(error = %err, "marking a webhook delivery done failed");
    }
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
