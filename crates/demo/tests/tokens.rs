//! Ask AI metered in tokens, over real HTTP on loopback: an estimate
//! reserved with the four call limits, settled with the tokens used.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/ask_counts.rs"]
mod ask_counts;
#[path = "support/stats.rs"]
mod stats;

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tollgate::axum::{Trust, VisitorSource};
use tollgate::{Limiter, ManualClock, RuleSet};
use tollgate_demo::{MAX_ASK_BODY, app, estimate_body_tokens, estimate_tokens, serve};

use ask_counts::ask_counts;
use stats::stats;

/// 2026-06-15T12:00:00Z.
const NOON: u64 = 20_619 * 86_400 + 43_200;

/// The demo over `store` with the default rules (`ask-tokens`: 200,000 a
/// day per site), trusting loopback as the edge; its base URL, and a
/// limiter reading the same counters.
async fn start(store: &str) -> (String, Limiter) {
    let store = tollgate::open_store(store).unwrap();
    let clock = ManualClock::new(Duration::from_secs(NOON));
    let reader = Limiter::builder(store.clone()).clock(clock.clone()).build();
    let limiter = Limiter::builder(store.clone()).clock(clock).build();
    let loopback = vec!["127.0.0.0/8".parse().unwrap()];
    let visitors = VisitorSource::new(Trust::CfConnectingIp(loopback));
    let router = app(limiter, store, &RuleSet::defaults(), visitors).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, router, std::future::pending()));
    (format!("http://{addr}"), reader)
}

async fn ask(client: &Client, base: &str, visitor: &str, body: String) -> reqwest::Response {
    client
        .post(format!("{base}/sites/docs/ask"))
        .header("cf-connecting-ip", visitor)
        .header("content-type", "application/json")
        .body(body)
        .send()
        .await
        .unwrap()
}

fn question(bytes: usize) -> String {
    json!({ "question": "q".repeat(bytes) }).to_string()
}

#[tokio::test]
async fn large_questions_spend_tokens_until_the_budget_is_settled_full() {
    let dir = tempfile::tempdir().unwrap();
    let (base, _) = start(&format!(
        "sqlite:{}",
        dir.path().join("t.sqlite3").display()
    ))
    .await;
    let client = Client::new();
    // The largest question one ask can hold, 32,753 bytes in a body of
    // one question's cap (32 KiB): an estimate of 8,701 tokens (8,189 +
    // 512), 8,189 + 64 + 241 = 8,494 used.
    let bytes = usize::try_from(MAX_ASK_BODY).unwrap() - 15;
    let body = question(bytes);
    assert_eq!(body.len() as u64, MAX_ASK_BODY);
    let estimate = estimate_tokens(&"q".repeat(bytes));
    assert_eq!(estimate, 8_701);
    assert_eq!(estimate_body_tokens(MAX_ASK_BODY), estimate);
    let mut settled = 0u64;
    let mut allowed = 0;
    for i in 0..30 {
        // A new visitor each time: only ask-tokens (per site) can refuse.
        let response = ask(&client, &base, &format!("203.0.113.{i}"), body.clone()).await;
        if response.status() == StatusCode::TOO_MANY_REQUESTS {
            let problem: Value = response.json().await.unwrap();
            assert_eq!(problem["limit"], "ask-tokens");
            assert_eq!(problem["unit"], "tokens");
            // The estimate no longer fits on top of what was settled.
            assert!(settled + estimate > 200_000, "refused with room: {settled}");
            break;
        }
        assert_eq!(response.status(), StatusCode::OK, "ask {i}");
        let answer: Value = response.json().await.unwrap();
        settled += answer["tokens"].as_u64().unwrap();
        allowed += 1;
    }
    assert_eq!(
        allowed, 23,
        "23 × 8,494 settled tokens fit, the 24th estimate does not"
    );
    assert_eq!(settled, 23 * 8_494);
    assert!(settled <= 200_000);
    let stats = stats(&client, &base).await;
    assert_eq!(stats["tokens"].as_u64(), Some(settled));
    assert_eq!(stats["ask"], allowed);
    // Refused asks spent no call: a visitor can still ask a small question.
    let small = ask(&client, &base, "198.51.100.1", question(10)).await;
    assert_eq!(small.status(), StatusCode::OK);
}

#[tokio::test]
async fn a_bad_body_is_a_400_spending_its_call_but_no_tokens() {
    let (base, reader) = start("memory").await;
    let client = Client::new();
    // (A body over the bound, one question's cap of 32 KiB with these
    // rules, is a 413 before any limit: tests/ask_body.rs, over a raw socket.)
    for bad in ["{", "[]", r#"{"question": 5}"#, r#"{"q": "x"}"#] {
        let response = ask(&client, &base, "203.0.113.1", bad.to_owned()).await;
        assert_eq!(response.status(), StatusCode::BAD_REQUEST, "{bad}");
    }
    // Each was admitted, then its tokens given back: no work was done. The
    // calls stay spent, as a failed handler's would.
    assert_eq!(
        ask_counts(&reader, "docs", "203.0.113.1").await,
        [4, 4, 4, 4, 0]
    );
    // So the visitor has 11 of its 15 asks of the day left.
    for i in 0..11 {
        let response = ask(&client, &base, "203.0.113.1", question(8)).await;
        assert_eq!(response.status(), StatusCode::OK, "ask {i}");
    }
    let last = ask(&client, &base, "203.0.113.1", question(8)).await;
    assert_eq!(last.status(), StatusCode::TOO_MANY_REQUESTS);
    let problem: Value = last.json().await.unwrap();
    assert_eq!(problem["limit"], "ask");
    let stats = stats(&client, &base).await;
    assert_eq!(stats["ask"], 11);
    let settled = 11 * (2 + 64 + 8);
    assert_eq!(stats["tokens"], settled);
    assert_eq!(
        ask_counts(&reader, "docs", "203.0.113.1").await,
        [15, 15, 15, 15, settled]
    );
}
