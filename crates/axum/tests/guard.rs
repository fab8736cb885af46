//! The guard and its responses, served through the router (no network).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::ConnectInfo;
use axum::response::Response;
use axum::routing::post;
use http::{Request, StatusCode};
use serde_json::Value;
use tollgate_axum::{Guard, KeyPart, Trust, VisitorSource};
use tollgate_core::{Algorithm, Fault, Faulty, Limiter, ManualClock, Mode, Policy, Rule, Window};
use tollgate_memory::MemoryStore;
use tower::ServiceExt;

/// 2025-11-29T23:00:00Z: one hour before the UTC day resets.
const NOW: u64 = 20_421 * 86_400 + 23 * 3_600;

fn clock() -> ManualClock {
    ManualClock::new(Duration::from_secs(NOW))
}

/// The rule `name`, with the key parts these tests give it.
fn rule(name: &str, max: u64, window: Window) -> Rule {
    let parts: &[&str] = match name {
        "ask" => &["project", "visitor"],
        "runs" | "tokens" => &["project"],
        _ => &[],
    };
    Rule::new(name, max, window)
        .and_then(|r| r.with_key(parts))
        .unwrap()
}

/// The route of these tests, and their guards' path.
const ASK: &str = "/sites/{project}/ask";

/// A router with one guarded POST route, `/sites/{project}/ask`, whose
/// handler counts its runs.
fn app(guard: Guard) -> (Router, Arc<AtomicUsize>) {
    let runs = Arc::new(AtomicUsize::new(0));
    let counter = runs.clone();
    let handler = move || async move {
        counter.fetch_add(1, Ordering::SeqCst);
        "done"
    };
    let router = Router::new().route(ASK, post(handler).route_layer(guard));
    (router, runs)
}

/// The usual guard of these tests: `ask` per project and visitor (max 3 a
/// day), `ask-all` (max 100 a day), visitors from `cf-connecting-ip` behind
/// Cloudflare.
fn ask_guard(limiter: Limiter) -> Guard {
    Guard::new(limiter)
        .path(ASK)
        .unwrap()
        .visitors(VisitorSource::new(Trust::cloudflare()))
        .rule(&rule("ask", 3, Window::DAY), |call| {
            Some(vec![call.param("project")?.into(), call.visitor()?.into()])
        })
        .rule(&rule("ask-all", 100, Window::DAY), |_| Some(vec![]))
        .mode(Mode::Reserve)
}

fn memory_limiter() -> Limiter {
    let clock = clock();
    Limiter::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock)
        .build()
}

/// A POST from Cloudflare's edge for the visitor `ip`.
async fn post_ask(router: &Router, project: &str, ip: &str) -> Response {
    let mut request = Request::post(format!("/sites/{project}/ask"))
        .header("cf-connecting-ip", ip)
        .body(Body::empty())
        .unwrap();
    let edge: SocketAddr = "173.245.48.1:443".parse().unwrap();
    request.extensions_mut().insert(ConnectInfo(edge));
    router.clone().oneshot(request).await.unwrap()
}

fn header<'a>(response: &'a Response, name: &str) -> Option<&'a str> {
    response.headers().get(name).map(|v| v.to_str().unwrap())
}

async fn body_text(response: Response) -> String {
    let bytes = to_bytes(response.into_body(), 1 << 20).await.unwrap();
    String::from_utf8(bytes.to_vec()).unwrap()
}

fn json(text: &str) -> Value {
    serde_json::from_str(text).unwrap()
}

/// Everything a response shows: status, headers (`name<TAB>value`) and body.
async fn whole(response: Response) -> String {
    let mut text = format!("{}\n", response.status());
    for (name, value) in response.headers() {
        text.push_str(&format!(
            "{name}\t{}\n",
            value.to_str().unwrap_or("<binary>")
        ));
    }
    text + &body_text(response).await
}

#[tokio::test]
async fn refused_call_never_runs_the_handler() {
    let (router, runs) = app(ask_guard(memory_limiter()));
    for _ in 0..3 {
        assert_eq!(
            post_ask(&router, "docs", "203.0.113.9").await.status(),
            StatusCode::OK
        );
    }
    for _ in 0..5 {
        let response = post_ask(&router, "docs", "203.0.113.9").await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    }
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn limited_call_is_a_typed_429_with_standard_fields() {
    let (router, _) = app(ask_guard(memory_limiter()));
    for _ in 0..3 {
        post_ask(&router, "docs", "203.0.113.9").await;
    }
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&response, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&response, "retry-after"), Some("3600"));
    assert_eq!(
        header(&response, "ratelimit-policy"),
        Some(r#""ask";q=3;w=86400, "ask-all";q=100;w=86400"#)
    );
    assert_eq!(
        header(&response, "ratelimit"),
        Some(r#""ask";r=0;t=3600, "ask-all";r=97;t=3600"#)
    );
    let text = body_text(response).await;
    assert!(
        text.starts_with(
            r#"{"type":"tag:tollgate,2025:rate-limited","title":"Too Many Requests","status":429,"#
        ),
        "{text}"
    );
    let body = json(&text);
    assert_eq!(body["type"], "tag:tollgate,2025:rate-limited");
    assert_eq!(body["title"], "Too Many Requests");
    assert_eq!(body["status"], 429);
    assert_eq!(
        body["detail"],
        "rate limit `ask` reached: 3 per 1d; retry in 3600 s"
    );
    assert_eq!(body["limit"], "ask");
    assert_eq!(body["algorithm"], "fixed");
    assert_eq!(body["retry_after"], 3600);
    assert_eq!(body["reset"], (20_421 + 1) * 86_400);
}

/// A sliding window's 429: the same policy item as a fixed window's, the
/// estimate as what remains, and the exact wait (not the window's end)
/// as `Retry-After`, `t` and the body's wait; the body names the shape.
#[tokio::test]
async fn a_sliding_window_429_says_the_exact_wait_and_names_its_shape() {
    let clock = clock();
    let limiter = Limiter::builder(MemoryStore::with_clock(clock.clone()))
        .clock(clock.clone())
        .build();
    let burst = rule("burst", 10, Window::MINUTE).with_algorithm(Algorithm::Sliding);
    let guard = Guard::new(limiter)
        .path(ASK)
        .unwrap()
        .rule(&burst, |_| Some(vec![]))
        .mode(Mode::Reserve);
    let (router, runs) = app(guard);
    // A full budget in the last second of a minute (NOW is on one).
    clock.advance(Duration::from_secs(59));
    for _ in 0..10 {
        let response = post_ask(&router, "docs", "203.0.113.9").await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    // At 0 s into the next minute all of it still weighs; at 1 s,
    // floor(10 × 59/60) = 9 does: one call fits, then none until 7 s.
    clock.advance(Duration::from_secs(1));
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), Some("1"));
    clock.advance(Duration::from_secs(1));
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "ratelimit"), Some(r#""burst";r=0;t=59"#));
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(header(&response, "retry-after"), Some("6"));
    assert_eq!(
        header(&response, "ratelimit-policy"),
        Some(r#""burst";q=10;w=60"#)
    );
    assert_eq!(header(&response, "ratelimit"), Some(r#""burst";r=0;t=6"#));
    let body = json(&body_text(response).await);
    assert_eq!(
        (body["limit"].as_str(), body["algorithm"].as_str()),
        (Some("burst"), Some("sliding"))
    );
    assert_eq!(body["retry_after"], 6);
    assert_eq!(body["reset"], NOW + 61 + 6);
    clock.advance(Duration::from_secs(6));
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::OK, "the wait was exact");
    assert_eq!(runs.load(Ordering::SeqCst), 12);
}

#[tokio::test]
async fn allowed_calls_carry_the_ratelimit_fields() {
    let (router, _) = app(ask_guard(memory_limiter()));
    let first = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        header(&first, "ratelimit-policy"),
        Some(r#""ask";q=3;w=86400, "ask-all";q=100;w=86400"#)
    );
    assert_eq!(
        header(&first, "ratelimit"),
        Some(r#""ask";r=2;t=3600, "ask-all";r=99;t=3600"#)
    );
    assert_eq!(header(&first, "retry-after"), None);
    assert_eq!(body_text(first).await, "done");
}

#[tokio::test]
async fn counted_calls_past_the_max_show_zero_remaining() {
    let limiter = memory_limiter();
    let guard = Guard::new(limiter)
        .path(ASK)
        .unwrap()
        .rule(&rule("runs", 1, Window::MINUTE), |call| {
            Some(vec![call.param("project")?.into()])
        })
        .mode(Mode::Count);
    let (router, runs) = app(guard);
    assert_eq!(
        post_ask(&router, "p", "203.0.113.9").await.status(),
        StatusCode::OK
    );
    for _ in 0..2 {
        let response = post_ask(&router, "p", "203.0.113.9").await;
        assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
        // 23:00:00 is on a minute boundary: a full minute to wait.
        assert_eq!(header(&response, "ratelimit"), Some(r#""runs";r=0;t=60"#));
        assert_eq!(header(&response, "retry-after"), Some("60"));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn longest_wait_names_the_limit_when_several_are_over() {
    let guard = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&rule("burst", 1, Window::MINUTE), |_| Some(vec![]))
        .rule(&rule("daily", 1, Window::DAY), |_| Some(vec![]))
        .mode(Mode::Count);
    let (router, _) = app(guard);
    post_ask(&router, "p", "203.0.113.9").await;
    let response = post_ask(&router, "p", "203.0.113.9").await;
    assert_eq!(header(&response, "retry-after"), Some("3600"));
    let body = json(&body_text(response).await);
    assert_eq!(body["limit"], "daily");
}

#[tokio::test]
async fn store_failure_under_fail_closed_is_503_without_store_details() {
    let clock = clock();
    let store = Arc::new(Faulty::new(MemoryStore::with_clock(clock.clone())));
    let (router, runs) = app(ask_guard(
        Limiter::builder(store.clone()).clock(clock).build(),
    ));
    for fault in [Fault::Permanent, Fault::Transient] {
        store.set(fault);
        let response = post_ask(&router, "docs", "203.0.113.9").await;
        assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert_eq!(
            header(&response, "content-type"),
            Some("application/problem+json")
        );
        assert_eq!(header(&response, "retry-after"), Some("2"));
        assert_eq!(header(&response, "ratelimit"), None);
        let text = whole(response).await;
        assert_no_storage_text(&text);
        let body = json(text.rsplit('\n').next().unwrap());
        assert_eq!(body["status"], 503);
        assert_eq!(body["title"], "Service Unavailable");
        assert_eq!(body["retry_after"], 2);
        assert!(body["detail"].as_str().is_some_and(|d| !d.is_empty()));
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn limited_response_holds_no_storage_text() {
    let (router, _) = app(ask_guard(memory_limiter()));
    for _ in 0..3 {
        post_ask(&router, "docs", "203.0.113.9").await;
    }
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let text = whole(response).await;
    assert_no_storage_text(&text);
    assert!(!text.contains("203.0.113.9"), "{text}");
    assert!(!text.contains("docs"), "{text}");
}

fn assert_no_storage_text(text: &str) {
    let lower = text.to_lowercase();
    for leak in [
        "limit:",
        "ask:",
        "20421",
        "secret",
        "injected",
        "err ",
        "connection refused",
        "memory",
        "redis",
        "sqlite",
        "store",
        "backend",
    ] {
        assert!(!lower.contains(leak), "response shows {leak:?}:\n{text}");
    }
}

#[tokio::test]
async fn store_failure_under_fail_open_runs_the_handler_without_fields() {
    let clock = clock();
    let store = Arc::new(Faulty::new(MemoryStore::with_clock(clock.clone())));
    store.set(Fault::Permanent);
    let guard = ask_guard(Limiter::builder(store).clock(clock).build()).policy(Policy::FailOpen);
    let (router, runs) = app(guard);
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(header(&response, "ratelimit"), None);
    assert_eq!(header(&response, "ratelimit-policy"), None);
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn reservation_refused_by_one_limit_spends_no_other() {
    let (router, _) = app(ask_guard(memory_limiter()));
    for _ in 0..3 {
        post_ask(&router, "docs", "203.0.113.9").await;
    }
    for _ in 0..10 {
        post_ask(&router, "docs", "203.0.113.9").await;
    }
    let other = post_ask(&router, "docs", "198.51.100.7").await;
    assert_eq!(other.status(), StatusCode::OK);
    // ask-all: 3 + 1 spent; the 10 refused calls spent nothing.
    assert_eq!(
        header(&other, "ratelimit"),
        Some(r#""ask";r=2;t=3600, "ask-all";r=96;t=3600"#)
    );
}

#[tokio::test]
async fn key_function_without_its_value_is_a_500_and_runs_nothing() {
    let guard = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&rule("ask", 3, Window::DAY), |call| {
            Some(vec![call.param("missing")?.into()])
        });
    let (router, runs) = app(guard);
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(
        header(&response, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn overlong_key_value_is_a_400_and_runs_nothing() {
    let (router, runs) = app(ask_guard(memory_limiter()));
    let project = "p".repeat(300);
    let response = post_ask(&router, &project, "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::BAD_REQUEST);
    let body = json(&body_text(response).await);
    assert_eq!(body["status"], 400);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
}

#[tokio::test]
async fn path_parameters_are_percent_decoded_and_isolated() {
    let (router, _) = app(ask_guard(memory_limiter()));
    for _ in 0..3 {
        assert_eq!(
            post_ask(&router, "a%3Ab", "203.0.113.9").await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        post_ask(&router, "a:b", "203.0.113.9").await.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "a%3Ab and a:b are the same decoded project"
    );
    assert_eq!(
        post_ask(&router, "a", "203.0.113.9").await.status(),
        StatusCode::OK
    );
}

#[tokio::test]
async fn a_key_of_the_wrong_arity_is_a_500_at_request_time_and_refused_at_build_time() {
    let guard = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&rule("runs", 3, Window::DAY), |call| {
            Some(vec![call.param("project")?.into(), "extra".into()])
        });
    let (router, runs) = app(guard);
    let response = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    let refused = Guard::new(memory_limiter()).path(ASK).unwrap().keyed(
        &rule("runs", 3, Window::DAY),
        &[KeyPart::Param("project"), KeyPart::Visitor],
    );
    assert!(matches!(
        refused,
        Err(tollgate_axum::Error::KeyArity {
            expected: 1,
            found: 2,
            ..
        })
    ));
    let keyed = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .keyed(&rule("runs", 1, Window::DAY), &[KeyPart::Param("project")])
        .unwrap();
    let (router, _) = app(keyed);
    assert_eq!(post_ask(&router, "docs", "203.0.113.9").await.status(), 200);
    assert_eq!(post_ask(&router, "docs", "203.0.113.9").await.status(), 429);
    assert_eq!(
        post_ask(&router, "other", "203.0.113.9").await.status(),
        200
    );
}

#[tokio::test]
async fn a_header_key_is_counted_per_value_and_a_call_without_a_usable_one_is_a_400() {
    let limiter = memory_limiter();
    let guard = Guard::new(limiter.clone())
        .path(ASK)
        .unwrap()
        .keyed(
            &rule("runs", 1, Window::DAY),
            &[KeyPart::Header("x-project")],
        )
        .unwrap();
    let (router, runs) = app(guard);
    let send = |values: &'static [&'static [u8]]| {
        let router = router.clone();
        async move {
            let mut request = Request::post("/sites/docs/ask");
            for value in values {
                request = request.header("x-project", *value);
            }
            router
                .oneshot(request.body(Body::empty()).unwrap())
                .await
                .unwrap()
        }
    };
    assert_eq!(send(&[b"a"]).await.status(), 200);
    assert_eq!(send(&[b"a"]).await.status(), 429);
    assert_eq!(
        send(&[b"b"]).await.status(),
        200,
        "another value, another key"
    );
    const MISSING: &[&[u8]] = &[];
    const REPEATED: &[&[u8]] = &[b"a", b"b"];
    const NOT_TEXT: &[&[u8]] = &[b"caf\xc3\xa9"];
    for (values, what) in [
        (MISSING, "missing"),
        (REPEATED, "repeated"),
        (NOT_TEXT, "not visible ASCII"),
    ] {
        let response = send(values).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{what}");
        let problem = json(&body_text(response).await);
        let detail = problem["detail"].as_str().unwrap_or_default();
        assert!(!detail.is_empty(), "{what}: {problem}");
        assert!(
            !detail.contains("x-project"),
            "{what}: the header is named: {problem}"
        );
    }
    assert_eq!(
        runs.load(Ordering::SeqCst),
        2,
        "refused calls never reach the handler"
    );
}

#[tokio::test]
async fn a_cost_from_the_request_head_is_spent_and_a_bad_one_is_a_400_spending_nothing() {
    let limiter = memory_limiter();
    let tokens =
        rule("tokens", 100, Window::DAY).with_unit(tollgate_core::Unit::new("tokens").unwrap());
    let guard = Guard::new(limiter.clone())
        .path(ASK)
        .unwrap()
        .rule(&tokens, |call| Some(vec![call.param("project")?.into()]))
        .cost(|call| call.header("x-cost")?.parse().ok())
        .mode(Mode::Reserve);
    let (router, runs) = app(guard);
    let send = |cost: &str| {
        let request = Request::post("/sites/docs/ask")
            .header("x-cost", cost)
            .body(Body::empty())
            .unwrap();
        router.clone().oneshot(request)
    };
    let first = send("60").await.unwrap();
    assert_eq!(first.status(), 200);
    assert_eq!(header(&first, "ratelimit"), Some("\"tokens\";r=40;t=3600"));
    for bad in ["", "zero", "0", "-5", "99999999999999999999"] {
        let response = send(bad).await.unwrap();
        assert_eq!(response.status(), 400, "cost {bad:?}");
    }
    let refused = send("41").await.unwrap();
    assert_eq!(refused.status(), 429);
    let body = json(&body_text(refused).await);
    assert_eq!(body["limit"], "tokens");
    assert_eq!(body["unit"], "tokens");
    assert!(
        body["detail"]
            .as_str()
            .unwrap()
            .contains("100 tokens per 1d")
    );
    assert_eq!(
        send("40").await.unwrap().status(),
        200,
        "refused calls spent nothing"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn a_rule_that_is_not_public_never_shows_its_budget() {
    let limiter = memory_limiter();
    let guard = Guard::new(limiter)
        .path(ASK)
        .unwrap()
        .rule(&rule("runs", 2, Window::DAY), |call| {
            Some(vec![call.param("project")?.into()])
        })
        .rule(&rule("ask-all", 1, Window::DAY).with_public(false), |_| {
            Some(vec![])
        })
        .mode(Mode::Reserve);
    let (router, _) = app(guard);
    let allowed = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(allowed.status(), 200);
    assert_eq!(header(&allowed, "ratelimit"), Some("\"runs\";r=1;t=3600"));
    assert_eq!(
        header(&allowed, "ratelimit-policy"),
        Some("\"runs\";q=2;w=86400")
    );
    let refused = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(refused.status(), 429);
    let text = whole(refused).await;
    assert!(
        text.contains("\"limit\":\"ask-all\""),
        "named in its own 429: {text}"
    );
    for line in text.lines().filter(|l| l.starts_with("ratelimit")) {
        assert!(!line.contains("ask-all"), "budget shown: {line}");
    }
    let only_hidden = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&rule("ask-all", 5, Window::DAY).with_public(false), |_| {
            Some(vec![])
        });
    let (router, _) = app(only_hidden);
    let allowed = post_ask(&router, "docs", "203.0.113.9").await;
    assert_eq!(allowed.status(), 200);
    assert!(header(&allowed, "ratelimit").is_none());
    assert!(header(&allowed, "ratelimit-policy").is_none());
}

#[tokio::test]
async fn a_cost_above_the_max_is_a_429_that_never_promises_a_retry() {
    let limiter = memory_limiter();
    let tokens =
        rule("tokens", 100, Window::DAY).with_unit(tollgate_core::Unit::new("tokens").unwrap());
    let guard = Guard::new(limiter.clone())
        .path(ASK)
        .unwrap()
        .rule(&tokens, |call| Some(vec![call.param("project")?.into()]))
        .cost(|call| call.header("x-cost")?.parse().ok())
        .mode(Mode::Reserve);
    let (router, runs) = app(guard);
    let send = |cost: &str| {
        let request = Request::post("/sites/docs/ask")
            .header("x-cost", cost)
            .body(Body::empty())
            .unwrap();
        router.clone().oneshot(request)
    };
    let never = send("101").await.unwrap();
    assert_eq!(never.status(), 429);
    assert_eq!(
        header(&never, "content-type"),
        Some("application/problem+json")
    );
    assert_eq!(header(&never, "retry-after"), None, "no wait helps");
    assert_eq!(header(&never, "ratelimit"), Some("\"tokens\";r=100;t=3600"));
    let body = json(&body_text(never).await);
    assert_eq!(
        body,
        serde_json::json!({
            "type": "tag:tollgate,2025:rate-limited", "title": "Too Many Requests", "status": 429,
            "detail": "a cost of 101 tokens never fits rate limit `tokens`: 100 tokens per 1d",
            "limit": "tokens", "algorithm": "fixed", "unit": "tokens", "never_fits": true,
        })
    );
    // A cost that fits an empty window, refused only by what is spent:
    // the usual 429, with its wait.
    assert_eq!(send("60").await.unwrap().status(), 200);
    let full = send("41").await.unwrap();
    assert_eq!(header(&full, "retry-after"), Some("3600"));
    let body = json(&body_text(full).await);
    assert_eq!(
        (body["retry_after"].as_u64(), body.get("never_fits")),
        (Some(3600), None)
    );
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

#[tokio::test]
async fn a_guard_holding_a_shared_budget_reserves_unless_told_otherwise() {
    let limiter = memory_limiter();
    let ask = rule("ask", 1, Window::DAY);
    let all = rule("ask-all", 100, Window::DAY);
    let guard = Guard::new(limiter.clone())
        .path(ASK)
        .unwrap()
        .visitors(VisitorSource::new(Trust::cloudflare()))
        .rule(&ask, |call| {
            Some(vec![call.param("project")?.into(), call.visitor()?.into()])
        })
        .rule(&all, |_| Some(vec![]));
    // `ask-all` has fewer key parts than `ask`: a budget every caller shares.
    assert_eq!(guard.spends(), Mode::Reserve);
    let (router, runs) = app(guard);
    for _ in 0..4 {
        post_ask(&router, "docs", "203.0.113.9").await;
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    let all_limit = all.limit::<&str>(&[]).unwrap();
    let left = limiter.remaining(&[all_limit]).await.unwrap();
    assert_eq!(
        left[0].remaining(),
        99,
        "refused callers drained the shared budget"
    );

    // One public rule keyed per caller: every call counted, as fail-open
    // routes are; a rule not shown to callers is a shared budget too; an
    // explicit mode wins.
    let solo = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&ask, |_| Some(vec!["p".into(), "v".into()]));
    assert_eq!(solo.spends(), Mode::Count);
    // Rules keyed by different parts of one arity: a visitor refused by
    // one would still spend the other's (one site's) budget.
    let by_site = rule("runs", 50, Window::DAY);
    let by_visitor = Rule::new("per-visitor", 5, Window::DAY)
        .and_then(|r| r.with_key(&["visitor"]))
        .unwrap();
    let crossed = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&by_site, |_| Some(vec!["p".into()]))
        .rule(&by_visitor, |_| Some(vec!["v".into()]));
    assert_eq!(crossed.spends(), Mode::Reserve);
    let same = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&by_site, |_| Some(vec!["p".into()]))
        .rule(&rule("tokens", 9, Window::DAY), |_| Some(vec!["p".into()]));
    assert_eq!(same.spends(), Mode::Count);
    let hidden = rule("runs", 5, Window::DAY).with_public(false);
    let private = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .rule(&hidden, |_| Some(vec!["p".into()]));
    assert_eq!(private.spends(), Mode::Reserve);
    assert_eq!(private.mode(Mode::Count).spends(), Mode::Count);
    let open = Guard::new(memory_limiter()).path(ASK).unwrap().fail_open();
    assert!(format!("{open:?}").contains("FailOpen"), "{open:?}");
}

/// Mounted with `layer` (on the whole router, or on the route's method
/// router) instead of `route_layer`, the guard keys by its own path
/// template: the same counts, and other routes pass through unchecked.
#[tokio::test]
async fn a_guard_mounted_with_layer_works_as_with_route_layer() {
    let handler = || async { "done" };
    for mounted in ["router", "method router"] {
        let guard = ask_guard(memory_limiter());
        let router = match mounted {
            "router" => Router::new()
                .route(ASK, post(handler))
                .route("/healthz", axum::routing::get(handler))
                .layer(guard),
            _ => Router::new()
                .route(ASK, post(handler).layer(guard))
                .route("/healthz", axum::routing::get(handler)),
        };
        for n in 1..=3 {
            let response = post_ask(&router, "docs", "203.0.113.9").await;
            assert_eq!(response.status(), StatusCode::OK, "{mounted}: ask {n}");
            let fields = header(&response, "ratelimit").unwrap();
            assert!(
                fields.starts_with(&format!("\"ask\";r={};t=3600,", 3 - n)),
                "{mounted}: {fields}"
            );
        }
        let refused = post_ask(&router, "docs", "203.0.113.9").await;
        assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS, "{mounted}");
        assert_eq!(
            post_ask(&router, "blog", "203.0.113.9").await.status(),
            StatusCode::OK
        );
        let health = Request::get("/healthz").body(Body::empty()).unwrap();
        let health = router.clone().oneshot(health).await.unwrap();
        assert_eq!(health.status(), StatusCode::OK, "{mounted}");
        assert!(header(&health, "ratelimit").is_none(), "{mounted}");
    }
}

#[test]
fn a_key_by_a_parameter_the_path_does_not_name_is_refused_when_built() {
    let runs = rule("runs", 3, Window::DAY);
    let unnamed = Guard::new(memory_limiter())
        .path(ASK)
        .unwrap()
        .keyed(&runs, &[KeyPart::Param("org")]);
    assert!(
        matches!(&unnamed, Err(tollgate_axum::Error::UnknownParam { param, .. }) if param == "org"),
        "{unnamed:?}"
    );
    let no_path = Guard::new(memory_limiter()).keyed(&runs, &[KeyPart::Param("project")]);
    let err = no_path.unwrap_err();
    assert!(
        err.to_string().contains("is not set (Guard::path)"),
        "{err}"
    );
}

/// Inside a route (axum's `MatchedPath` is set), a guard checks the calls
/// of the route its template names: nested under a prefix, its template
/// (the route's own path) is that route's; a template written with the
/// prefix the nested router strips is a 500 that counts nothing, never a
/// call let through unchecked.
#[tokio::test]
async fn a_guard_keys_a_nested_route_by_its_own_path() {
    let handler = || async { "done" };
    let nested = Router::new().nest(
        "/api",
        Router::new().route(ASK, post(handler).route_layer(ask_guard(memory_limiter()))),
    );
    let ask_at = |router: Router, path: &'static str| async move {
        let mut request = Request::post(path)
            .header("cf-connecting-ip", "203.0.113.9")
            .body(Body::empty())
            .unwrap();
        let edge: SocketAddr = "173.245.48.1:443".parse().unwrap();
        request.extensions_mut().insert(ConnectInfo(edge));
        router.oneshot(request).await.unwrap()
    };
    for _ in 0..3 {
        let response = ask_at(nested.clone(), "/api/sites/docs/ask").await;
        assert_eq!(response.status(), StatusCode::OK);
    }
    let refused = ask_at(nested.clone(), "/api/sites/docs/ask").await;
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);

    let prefixed = Guard::new(memory_limiter())
        .path("/api/sites/{project}/ask")
        .unwrap()
        .keyed(&rule("runs", 1, Window::DAY), &[KeyPart::Param("project")])
        .unwrap();
    let misnested = Router::new().nest(
        "/api",
        Router::new().route(ASK, post(handler).route_layer(prefixed)),
    );
    for _ in 0..3 {
        let response = ask_at(misnested.clone(), "/api/sites/docs/ask").await;
        assert_eq!(response.status(), StatusCode::INTERNAL_SERVER_ERROR);
    }
}

/// A guard without a path template, keyed by a function of axum's route
/// parameters, keys as it did before templates (with `route_layer`).
#[tokio::test]
async fn a_guard_without_a_template_reads_the_routes_parameters() {
    let guard = Guard::new(memory_limiter())
        .visitors(VisitorSource::new(Trust::cloudflare()))
        .rule(&rule("ask", 2, Window::DAY), |call| {
            Some(vec![call.param("project")?.into(), call.visitor()?.into()])
        });
    let (router, runs) = app(guard);
    for project in ["docs", "docs", "blog"] {
        assert_eq!(
            post_ask(&router, project, "203.0.113.9").await.status(),
            StatusCode::OK
        );
    }
    assert_eq!(
        post_ask(&router, "docs", "203.0.113.9").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );
    assert_eq!(runs.load(Ordering::SeqCst), 3);
}

/// On the outer router (`layer`), a guard sees the full path: its template
/// has the nest prefix, and a route naming its parameter otherwise is the
/// template's route all the same; a route of another path passes.
#[tokio::test]
async fn on_an_outer_router_a_guard_keys_the_nested_routes_full_path() {
    let handler = || async { "done" };
    let guard = Guard::new(memory_limiter())
        .path("/api/sites/{project}/ask")
        .unwrap()
        .keyed(&rule("runs", 2, Window::DAY), &[KeyPart::Param("project")])
        .unwrap();
    let router = Router::new()
        .nest(
            "/api",
            Router::new()
                .route("/sites/{site}/ask", post(handler))
                .route("/sites/{site}/other", post(handler)),
        )
        .layer(guard);
    let post_to = |path: &'static str| {
        let request = Request::post(path).body(Body::empty()).unwrap();
        router.clone().oneshot(request)
    };
    for _ in 0..2 {
        assert_eq!(
            post_to("/api/sites/docs/ask").await.unwrap().status(),
            StatusCode::OK
        );
    }
    let refused = post_to("/api/sites/docs/ask").await.unwrap();
    assert_eq!(refused.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        post_to("/api/sites/blog/ask").await.unwrap().status(),
        StatusCode::OK
    );
    for _ in 0..3 {
        let other = post_to("/api/sites/docs/other").await.unwrap();
        assert_eq!(other.status(), StatusCode::OK);
        assert!(header(&other, "ratelimit").is_none());
    }
}
