//! The demo's routes and their guards.

use std::future::poll_fn;
use std::pin::Pin;
use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::rejection::RawPathParamsRejection;
use axum::extract::{FromRef, FromRequestParts, RawPathParams, Request, State};
use axum::http::request::Parts;
use axum::http::{HeaderMap, StatusCode};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;
use serde_json::json;
use tollgate::axum::{
    ClientVisitor, Guard, KeyPart, Problem, Rejection, VisitorSource, check, fields, hold_leases,
    problem,
};
use tollgate::{Deliveries, Limit, Limiter, MarkStore, Mode, Policy, Rule, RuleSet, Verdict};

use crate::Work;
use crate::grpc::AskService;
use crate::signature::{SIGNATURE_HEADER, SignatureError, WebhookSecret};

/// The header GitHub names each webhook delivery with.
pub const DELIVERY_HEADER: &str = "x-github-delivery";

/// The prefix of a webhook delivery's de-duplication mark in the store:
/// `github-delivery:<id>`.
pub const DELIVERY_PREFIX: &str = "github-delivery:";

/// What the demo's routes and its gRPC service share.
#[derive(Clone, Debug)]
pub(crate) struct Demo {
    pub(crate) work: Arc<Work>,
    pub(crate) limiter: Limiter,
    deliveries: Deliveries,
    pub(crate) ask: Arc<AskRules>,
    pub(crate) visitors: VisitorSource,
    /// The GitHub webhook's secret; `None`: deliveries are unverified.
    github_secret: Option<WebhookSecret>,
    /// How long the fake provider takes to answer.
    pub(crate) provider_delay: Duration,
}

/// The demo's services: [`services_with`].
#[derive(Debug)]
#[non_exhaustive]
pub struct Services {
    /// The HTTP routes ([`app_with`]).
    pub http: Router,
    /// The gRPC `tollgate.demo.v1.Ask` service.
    pub grpc: AskService,
}

/// What the demo's router is set up with beyond its store and rules.
#[derive(Clone, Debug, Default)]
pub struct Settings {
    /// The GitHub webhook's secret; `None`: deliveries are unverified.
    pub github_secret: Option<WebhookSecret>,
    /// How long the fake provider takes to answer an ask (0 by default):
    /// the time an ask holds its in-flight leases.
    pub provider_delay: Duration,
}

impl Demo {
    /// Reserves an ask's limits for `visitor` on `project`, `estimate`
    /// tokens among them, all or nothing and fail-closed: before any work,
    /// over HTTP and gRPC alike.
    pub(crate) async fn admit_ask(
        &self,
        project: &str,
        visitor: &str,
        estimate: u64,
    ) -> Result<Verdict, Rejection> {
        let limits = self
            .ask
            .limits(project, visitor, estimate)
            .map_err(Rejection::from)?;
        check(&self.limiter, &limits, Mode::Reserve, Policy::FailClosed).await
    }

    /// The fake provider's answer to the admitted ask `verdict`: the
    /// answer and the tokens it used, which settle `ask-tokens`.
    pub(crate) async fn answer_ask(&self, verdict: &Verdict, question: &str) -> (String, u64) {
        if !self.provider_delay.is_zero() {
            tokio::time::sleep(self.provider_delay).await;
        }
        let (answer, used) = provider(question);
        self.work.ask(used);
        if let Err(err) = self.limiter.settle(verdict, "ask-tokens", used).await {
            // The estimate stays spent: the safe direction.
            tracing::warn!(error = %err, "settling ask-tokens failed; the estimate stays spent");
        }
        (answer, used)
    }
}

impl FromRef<Demo> for VisitorSource {
    fn from_ref(demo: &Demo) -> VisitorSource {
        demo.visitors.clone()
    }
}

/// The five limits of an Ask AI call, checked together, all-or-nothing.
#[derive(Debug)]
pub(crate) struct AskRules {
    burst: Rule,
    ask: Rule,
    site: Rule,
    all: Rule,
    tokens: Rule,
    /// In flight, per visitor and per site (`ask-inflight`,
    /// `ask-inflight-site`), when the rules have them.
    inflight: Option<Rule>,
    inflight_site: Option<Rule>,
    /// The largest ask body read: [`max_ask_body`] of `tokens`' max, at
    /// most [`MAX_ASK_BODY`].
    pub(crate) max_body: u64,
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
        let tokens = keyed("ask-tokens", 1)?;
        let optional = |name: &str, parts: usize| match rules.get(name) {
            Ok(_) => keyed(name, parts).map(Some),
            Err(_) => Ok(None),
        };
        Ok(AskRules {
            inflight: optional("ask-inflight", 1)?,
            inflight_site: optional("ask-inflight-site", 1)?,
            burst: keyed("ask-burst", 1)?,
            ask: keyed("ask", 2)?,
            site: keyed("ask-site", 1)?,
            all: keyed("ask-all", 0)?,
            max_body: max_ask_body(tokens.max()),
            tokens,
        })
    }

    /// The limits of one question from `visitor` on `project`, reserving
    /// `estimate` tokens.
    pub(crate) fn limits(
        &self,
        project: &str,
        visitor: &str,
        estimate: u64,
    ) -> Result<Vec<Limit>, tollgate::Error> {
        let mut limits = vec![
            self.burst.limit(&[visitor])?,
            self.ask.limit(&[project, visitor])?,
            self.site.limit(&[project])?,
            self.all.limit::<&str>(&[])?,
            self.tokens.limit(&[project])?.with_cost(estimate)?,
        ];
        if let Some(rule) = &self.inflight {
            limits.push(rule.limit(&[visitor])?);
        }
        if let Some(rule) = &self.inflight_site {
            limits.push(rule.limit(&[project])?);
        }
        Ok(limits)
    }

    /// Gives back the whole `ask-tokens` reservation of `verdict`: an ask
    /// admitted whose body then proved unusable (malformed, cut short or
    /// slow) did no AI work, so it used no tokens. The four call limits
    /// (`ask-burst`, `ask`, `ask-site`, `ask-all`) stay spent: the call was
    /// admitted and counted, as one whose handler failed is. Were they given
    /// back too, a caller could hold a site's token budget with a slow body
    /// again and again for free. A refund that fails is logged: the tokens
    /// stay spent, the safe direction.
    async fn give_back_tokens(&self, limiter: &Limiter, verdict: &Verdict) {
        let rule = self.tokens.name();
        if let Err(err) = limiter.refund(verdict, rule, u64::MAX).await {
            tracing::warn!(
                rule,
                error = %err,
                "refunding an unusable ask's tokens failed; they stay spent"
            );
        }
    }
}

/// The longest name accepted in a path (a `{project}`, an `{org}`), in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// Whether `name` (a path segment, percent-decoded) is a valid name for
/// what a route's path names, a site (`{project}`) or an organisation
/// (`{org}`), both parts of rate limit keys: 1 to [`MAX_NAME_LEN`] bytes of
/// ASCII lowercase letters, digits, `-`, `_` and `.`, the first a letter or
/// a digit (so `.` and `..` are not names).
pub fn is_valid_name(name: &str) -> bool {
    let bytes = name.as_bytes();
    let allowed = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit() || b"-_.".contains(b);
    matches!(bytes.first(), Some(b) if b.is_ascii_lowercase() || b.is_ascii_digit())
        && bytes.len() <= MAX_NAME_LEN
        && bytes.iter().all(allowed)
}

/// The path parameter `param` of a request, when it is a valid name
/// ([`is_valid_name`]); a 400 naming `param` otherwise (a value that is not
/// UTF-8 once percent-decoded included).
async fn name_param(parts: &mut Parts, param: &'static str) -> Result<String, Rejection> {
    let invalid = || Rejection::BadRequest(invalid_name(param));
    let params = match RawPathParams::from_request_parts(parts, &()).await {
        Ok(params) => params,
        Err(RawPathParamsRejection::InvalidUtf8InPathParam(_)) => return Err(invalid()),
        Err(_) => return Err(missing(param)),
    };
    match params.iter().find(|(key, _)| *key == param) {
        Some((_, value)) if is_valid_name(value) => Ok(value.to_owned()),
        Some(_) => Err(invalid()),
        None => Err(missing(param)),
    }
}

/// Why `what` (a project, an org) is not a valid name ([`is_valid_name`]).
pub(crate) fn invalid_name(what: &str) -> String {
    format!(
        "the {what} must be 1 to {MAX_NAME_LEN} of a-z, 0-9, '-', '_' and '.', \
         starting with a letter or digit"
    )
}

/// A route without the parameter its name extractor reads: the demo's own
/// mistake, a 500.
fn missing(param: &str) -> Rejection {
    tracing::error!(param, "the route has no such path parameter");
    Rejection::Internal
}

/// The `{project}` of a route, a valid name ([`is_valid_name`]); any other
/// value is a 400 before anything is counted.
#[derive(Debug)]
struct Project(String);

impl<S: Send + Sync> FromRequestParts<S> for Project {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Project, Rejection> {
        name_param(parts, "project").await.map(Project)
    }
}

/// The `{org}` of a route, a valid name ([`is_valid_name`]); any other
/// value is a 400. On a route whose guard keys by `{org}` it is checked
/// before the guard, by [`valid_org`], so that it is a 400 before anything
/// is counted.
#[derive(Debug)]
struct Org(String);

impl<S: Send + Sync> FromRequestParts<S> for Org {
    type Rejection = Rejection;

    async fn from_request_parts(parts: &mut Parts, _: &S) -> Result<Org, Rejection> {
        name_param(parts, "org").await.map(Org)
    }
}

/// Passes on only a request whose `{org}` is valid ([`Org`]): a route layer
/// added after (so run before) the route's guard.
async fn valid_org(_: Org, request: Request, next: Next) -> Response {
    next.run(request).await
}

/// The demo's router, with unverified webhook deliveries: see [`app_with`].
///
/// # Errors
///
/// As [`app_with`].
pub fn app(
    limiter: Limiter,
    marks: impl MarkStore,
    rules: &RuleSet,
    visitors: VisitorSource,
) -> Result<Router, tollgate::Error> {
    app_with(limiter, marks, rules, visitors, Settings::default())
}

/// The demo's router:
///
/// - `POST /sites/{project}/ask`: Ask AI with an optional JSON body
///   `{"question": "..."}`. `project` must be a valid name
///   ([`is_valid_name`]), else 400. The body's declared length
///   (`Content-Length`; none is an empty body, a chunked body is 411) must
///   be at most [`max_ask_body`] of `ask-tokens`' max (the largest useful
///   body, capped at one question's [`MAX_ASK_BODY`], 32 KiB), else 413,
///   before anything is counted. The handler
///   estimates the tokens from that length ([`estimate_body_tokens`]),
///   checks `ask-burst`, `ask`, `ask-site`, `ask-all` and `ask-tokens`
///   (with that estimate), and the in-flight rules `ask-inflight` (per
///   visitor) and `ask-inflight-site` when the rules have them (their
///   leases held until the answer is sent), in one all-or-nothing,
///   fail-closed reservation,
///   and only then reads the body, within [`ASK_BODY_TIMEOUT`]; a body that
///   proves unusable (408, 400) gives back the `ask-tokens` reservation (no
///   work, no tokens used), while the four call limits stay spent (the call
///   was admitted and counted). It runs the fake provider call and settles
///   `ask-tokens` with the tokens it used; 200
///   `{"project", "answer", "tokens"}`.
/// - `POST /orgs/{org}/runs`: `org` must be a valid name (the rule of
///   [`is_valid_name`]), else 400 before anything is counted; a docs
///   run, guarded by `docs-run`, fail-open; 202.
/// - `POST /webhooks/github`: the body is read (at most
///   [`MAX_WEBHOOK_BODY`] bytes, within [`WEBHOOK_BODY_TIMEOUT`]); with a
///   `github_secret`, a delivery whose `X-Hub-Signature-256` is missing,
///   malformed or not the body's HMAC-SHA256 with the secret is 401 before
///   any mark is written; then it is processed once per `X-GitHub-Delivery`; 200.
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
pub fn app_with(
    limiter: Limiter,
    marks: impl MarkStore,
    rules: &RuleSet,
    visitors: VisitorSource,
    settings: Settings,
) -> Result<Router, tollgate::Error> {
    services_with(limiter, marks, rules, visitors, settings).map(|services| services.http)
}

/// The demo's HTTP router ([`app_with`]) and its gRPC `Ask` service
/// ([`AskService`]), sharing one limiter, one set of rules and one record of
/// the work done: an ask over either is counted against the same limits.
///
/// # Errors
///
/// As [`app_with`].
pub fn services_with(
    limiter: Limiter,
    marks: impl MarkStore,
    rules: &RuleSet,
    visitors: VisitorSource,
    settings: Settings,
) -> Result<Services, tollgate::Error> {
    // Before the first check, so that every check is recorded.
    crate::prometheus();
    let docs_run = rules.get("docs-run")?;
    let runs = Guard::new(limiter.clone())
        .path("/orgs/{org}/runs")
        .and_then(|guard| guard.keyed(docs_run, &[KeyPart::Param("org")]))
        .map_err(|err| tollgate::Error::InvalidRule {
            rule: "docs-run".into(),
            reason: err.to_string(),
        })?
        .mode(Mode::Count)
        .fail_open();
    // Under the limiter's policy: one time budget for the whole app.
    let deliveries = Deliveries::new(marks, DELIVERY_PREFIX)?.retry(limiter.retry_policy());
    let demo = Demo {
        work: Arc::default(),
        ask: Arc::new(AskRules::new(rules)?),
        limiter,
        deliveries,
        visitors,
        github_secret: settings.github_secret,
        provider_delay: settings.provider_delay,
    };
    Ok(Services {
        grpc: AskService::new(demo.clone()),
        http: Router::new()
            .route("/sites/{project}/ask", post(answer))
            // The org is checked before the guard counts it: the layer added
            // last runs first.
            .route(
                "/orgs/{org}/runs",
                post(start_run)
                    .route_layer(runs)
                    .route_layer(middleware::from_fn(valid_org)),
            )
            .route("/webhooks/github", post(github_webhook))
            .route("/stats", get(stats))
            .route("/healthz", get(healthz))
            .with_state(demo)
            .layer(middleware::from_fn(log_request)),
    })
}

/// The body of an Ask AI call; an empty body is an empty question.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    question: String,
}

/// The tokens every question is estimated to cost beyond its own: the answer's.
const ANSWER_TOKENS: u64 = 512;

/// The bytes of the smallest body holding a question: `{"question":""}`.
/// Every body that holds a question of `n` bytes is at least `n` bytes
/// longer than this (JSON escapes only lengthen a string).
pub const ASK_ENVELOPE: u64 = 15;

/// The largest ask body read, whatever the rules: 32 KiB (32,768 bytes),
/// one question's cap, independent of the token budget.
///
/// A question to a docs assistant is at most a few thousand words, a pasted
/// error or config included: 5,000 words of English are about 30 KB, which
/// this holds. The cap bounds what one request can hold while its body is
/// awaited: the tokens reserved before the body is read are at most
/// [`estimate_body_tokens`] of 32 KiB, 8,701, about 4% of the shipped
/// `ask-tokens` budget (200,000 a day) where a bound derived from the
/// budget alone (797,967 bytes) let one slow body hold all of it for up to
/// [`ASK_BODY_TIMEOUT`]. Even a visitor's whole day of asks (the shipped
/// `ask` rule: 15) held at once, 130,515 tokens, leaves a third of the
/// budget to the site's other visitors. (64 KiB would reserve 16,893
/// tokens an ask, and 15 of them more than the whole day.) It also bounds
/// what the demo buffers for one ask, whatever the rules.
pub const MAX_ASK_BODY: u64 = 32 * 1024;

/// The tokens a question is estimated to cost before the provider call:
/// its bytes over four, rounded up, plus 512 for the answer.
pub fn estimate_tokens(question: &str) -> u64 {
    (question.len() as u64)
        .div_ceil(4)
        .saturating_add(ANSWER_TOKENS)
}

/// The tokens reserved for an ask body of `length` bytes before it is read:
/// [`estimate_tokens`] of the longest question such a body can hold,
/// `ceil((length - 15) / 4) + 512`. Never less than the estimate of the
/// question the body turns out to hold.
pub fn estimate_body_tokens(length: u64) -> u64 {
    length
        .saturating_sub(ASK_ENVELOPE)
        .div_ceil(4)
        .saturating_add(ANSWER_TOKENS)
}

/// The largest ask body read when `ask-tokens` allows `max_tokens` a
/// window: the smaller of the largest useful body, the longest whose
/// [`estimate_body_tokens`] fits, `(max_tokens - 512) × 4 + 15` bytes (0
/// when not even an empty question fits: a question that could never fit
/// is refused), and one question's cap, [`MAX_ASK_BODY`] (32 KiB). The cap
/// binds from 8,701 tokens a window up: with the shipped rules (200,000
/// tokens a day) the bound is 32,768 bytes, reserving at most 8,701 tokens.
pub fn max_ask_body(max_tokens: u64) -> u64 {
    max_tokens
        .checked_sub(ANSWER_TOKENS)
        .map_or(0, |tokens| {
            tokens.saturating_mul(4).saturating_add(ASK_ENVELOPE)
        })
        .min(MAX_ASK_BODY)
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

/// How long a client has to send an ask's body once the limits admitted it.
pub const ASK_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a client has to send a webhook delivery's body once its head is in.
pub const WEBHOOK_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The largest webhook delivery body read: 1 MiB. GitHub caps payloads at
/// 25 MB; a service receiving larger pushes raises this.
pub const MAX_WEBHOOK_BODY: u64 = 1 << 20;

/// Why a body could not be read.
#[derive(Debug)]
enum BodyError {
    /// Longer than the limit (413).
    TooLarge(u64),
    /// Not all in within the timeout (408).
    Timeout,
    /// Cut short or otherwise broken (400).
    Broken,
}

impl IntoResponse for BodyError {
    fn into_response(self) -> Response {
        match self {
            BodyError::TooLarge(limit) => too_large(limit),
            BodyError::Timeout => Problem::new(
                StatusCode::REQUEST_TIMEOUT,
                problem::BAD_REQUEST,
                "Request Timeout",
            )
            .detail("the body did not arrive in time")
            .into_response(),
            BodyError::Broken => {
                Rejection::BadRequest("the body was cut short".into()).into_response()
            }
        }
    }
}

fn too_large(limit: u64) -> Response {
    Problem::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        problem::BAD_REQUEST,
        "Payload Too Large",
    )
    .detail(format!("the body is over {limit} bytes"))
    .into_response()
}

fn length_required() -> Response {
    Problem::new(
        StatusCode::LENGTH_REQUIRED,
        problem::BAD_REQUEST,
        "Length Required",
    )
    .detail("an ask declares its body's length (Content-Length); chunked bodies are refused")
    .into_response()
}

/// Reads `body` whole: at most `limit` bytes, within `timeout`.
async fn read_body(mut body: Body, limit: u64, timeout: Duration) -> Result<Bytes, BodyError> {
    if body.size_hint().lower() > limit {
        return Err(BodyError::TooLarge(limit));
    }
    let read = async {
        let mut bytes = Vec::new();
        while let Some(frame) = poll_fn(|cx| Pin::new(&mut body).poll_frame(cx)).await {
            let Ok(data) = frame.map_err(|_| BodyError::Broken)?.into_data() else {
                continue; // trailers
            };
            if (bytes.len() as u64).saturating_add(data.len() as u64) > limit {
                return Err(BodyError::TooLarge(limit));
            }
            bytes.extend_from_slice(&data);
        }
        Ok(Bytes::from(bytes))
    };
    tokio::time::timeout(timeout, read)
        .await
        .unwrap_or(Err(BodyError::Timeout))
}

/// Ask AI: the project is checked and the cost estimated from the body's
/// declared length before anything is counted; the limits are checked
/// before the body is read and before any work; the tokens are settled,
/// or all given back when the body proves unusable (the calls stay spent).
async fn answer(
    State(demo): State<Demo>,
    Project(project): Project,
    ClientVisitor(visitor): ClientVisitor,
    body: Body,
) -> Result<Response, Response> {
    // A request without Content-Length or Transfer-Encoding has an empty
    // body (exactly 0); only a chunked one has no length known in advance.
    let Some(length) = body.size_hint().exact() else {
        return Err(length_required());
    };
    if length > demo.ask.max_body {
        return Err(too_large(demo.ask.max_body));
    }
    let verdict = demo
        .admit_ask(&project, visitor.as_str(), estimate_body_tokens(length))
        .await
        .map_err(IntoResponse::into_response)?;
    // Admitted: only now is the body read.
    let question = match read_question(body, length).await {
        Ok(question) => question,
        Err(refused) => {
            demo.ask.give_back_tokens(&demo.limiter, &verdict).await;
            return Err(refused);
        }
    };
    let (answer, used) = demo.answer_ask(&verdict, &question.question).await;
    let mut response = Json(json!({
        "project": project,
        "answer": answer,
        "tokens": used,
    }))
    .into_response();
    fields::insert(&verdict, response.headers_mut());
    // The in-flight leases end once the answer has been sent.
    Ok(hold_leases(response, &verdict))
}

/// The question an admitted ask's body of `length` declared bytes holds.
async fn read_question(body: Body, length: u64) -> Result<Question, Response> {
    let body = read_body(body, length, ASK_BODY_TIMEOUT)
        .await
        .map_err(IntoResponse::into_response)?;
    if body.is_empty() {
        return Ok(Question::default());
    }
    serde_json::from_slice::<Question>(&body).map_err(|_| {
        Rejection::BadRequest("the body must be {\"question\": \"...\"}".into()).into_response()
    })
}

async fn start_run(State(demo): State<Demo>, Org(org): Org) -> impl IntoResponse {
    demo.work.run();
    (
        StatusCode::ACCEPTED,
        Json(json!({ "org": org, "queued": true })),
    )
}

/// The problem type of a webhook delivery refused for its signature (401).
pub const BAD_SIGNATURE: &str = "tag:tollgate,2025:bad-signature";

fn unauthorized(err: SignatureError) -> Response {
    Problem::new(StatusCode::UNAUTHORIZED, BAD_SIGNATURE, "Unauthorized")
        .detail(err.to_string())
        .into_response()
}

/// The one `X-Hub-Signature-256` value of a delivery, if any; several are malformed.
fn signature_header(headers: &HeaderMap) -> Result<Option<&[u8]>, SignatureError> {
    let mut values = headers.get_all(SIGNATURE_HEADER).iter();
    let first = values.next().map(|v| v.as_bytes());
    if values.next().is_some() {
        return Err(SignatureError::Malformed);
    }
    Ok(first)
}

/// A GitHub webhook delivery: its body read within bounds, its signature
/// verified (with a secret), then de-duplicated and processed once.
async fn github_webhook(
    State(demo): State<Demo>,
    headers: HeaderMap,
    body: Body,
) -> Result<Json<serde_json::Value>, Response> {
    if demo.github_secret.is_some() {
        // The header's shape first: a malformed one needs no body read.
        let header = signature_header(&headers).map_err(unauthorized)?;
        crate::signature::parse(header).map_err(unauthorized)?;
    }
    let body = read_body(body, MAX_WEBHOOK_BODY, WEBHOOK_BODY_TIMEOUT)
        .await
        .map_err(IntoResponse::into_response)?;
    if let Some(secret) = &demo.github_secret {
        // Before any mark: an unsigned delivery claims no id.
        let header = signature_header(&headers).map_err(unauthorized)?;
        secret.verify(header, &body).map_err(unauthorized)?;
    }
    let id = match headers.get(DELIVERY_HEADER).map(|v| v.to_str()) {
        Some(Ok(id)) if !id.trim().is_empty() => id.trim(),
        Some(Ok(_)) | None => {
            return Err(
                Rejection::BadRequest("missing X-GitHub-Delivery header".into()).into_response(),
            );
        }
        Some(Err(_)) => {
            return Err(
                Rejection::BadRequest("malformed X-GitHub-Delivery header".into()).into_response(),
            );
        }
    };
    let begun = demo.deliveries.begin(id).await.map_err(|err| {
        if err.is_unavailable() {
            tracing::warn!("webhook delivery could not be de-duplicated; refusing it (503)");
        }
        Rejection::from(err).into_response()
    })?;
    let Some(delivery) = begun else {
        return Ok(Json(json!({ "duplicate": true })));
    };
    // The domain work (on `body`). Were it to fail, `delivery.release()` (or
    // dropping the handle) would let GitHub's redelivery be processed.
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
