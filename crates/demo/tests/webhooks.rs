//! Signed GitHub webhooks over real HTTP on loopback: with a secret, a
//! delivery is verified before it is de-duplicated, and a refused one
//! leaves no mark.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/calls.rs"]
mod calls;
#[path = "support/stats.rs"]
mod stats;

use std::sync::Arc;
use std::time::Duration;

use reqwest::{Client, RequestBuilder, StatusCode};
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::axum::{Trust, VisitorSource};
use tollgate::memory::MemoryStore;
use tollgate::{Hooked, Limiter, RuleSet};
use tollgate_demo::signature::WebhookSecret;
use tollgate_demo::{BAD_SIGNATURE, MAX_WEBHOOK_BODY, Settings, app_with, serve};

use calls::Calls;
use stats::stats;

const SECRET: &str = "planted-webhook-secret-7f3a";

/// The demo with `secret`, its store calls recorded; its base URL.
async fn start(secret: Option<&str>) -> (String, Arc<Calls>) {
    let calls = Arc::new(Calls::default());
    let store = Arc::new(Hooked::around(MemoryStore::new(), calls.clone()));
    let router = app_with(
        Limiter::new(store.clone()),
        store,
        &RuleSet::defaults(),
        VisitorSource::new(Trust::Peer),
        Settings {
            github_secret: secret.map(|s| WebhookSecret::new(s.as_bytes()).unwrap()),
            ..Settings::default()
        },
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, router, std::future::pending()));
    (format!("http://{addr}"), calls)
}

fn sign(secret: &str, body: &str) -> String {
    WebhookSecret::new(secret.as_bytes())
        .unwrap()
        .sign(body.as_bytes())
}

fn delivery(client: &Client, base: &str, id: &str, body: &str) -> RequestBuilder {
    client
        .post(format!("{base}/webhooks/github"))
        .header("X-GitHub-Delivery", id)
        .header("X-GitHub-Event", "push")
        .header("content-type", "application/json")
        .body(body.to_owned())
}

#[tokio::test]
async fn an_unsigned_or_wrongly_signed_delivery_is_401_and_leaves_no_mark() {
    let (base, calls) = start(Some(SECRET)).await;
    let client = Client::new();
    let id = "72d3162e-cc78-11e3-81ab-4c9367dc0958";
    let body = r#"{"ref":"refs/heads/main"}"#;
    let good = sign(SECRET, body);
    let hex = good.strip_prefix("sha256=").unwrap();
    let mut flipped = good.clone().into_bytes();
    let last = flipped.len() - 1;
    flipped[last] = if flipped[last] == b'0' { b'1' } else { b'0' };
    let flipped = String::from_utf8(flipped).unwrap();

    let refused: Vec<(&str, RequestBuilder)> = vec![
        ("unsigned", delivery(&client, &base, id, body)),
        (
            "another secret",
            delivery(&client, &base, id, body)
                .header("X-Hub-Signature-256", sign("another secret", body)),
        ),
        (
            "one digit changed",
            delivery(&client, &base, id, body).header("X-Hub-Signature-256", flipped),
        ),
        (
            "another body",
            delivery(&client, &base, id, r#"{"ref":"refs/heads/evil"}"#)
                .header("X-Hub-Signature-256", good.clone()),
        ),
        (
            "sha1",
            delivery(&client, &base, id, body).header("X-Hub-Signature-256", format!("sha1={hex}")),
        ),
        (
            "short",
            delivery(&client, &base, id, body)
                .header("X-Hub-Signature-256", &good[..good.len() - 2]),
        ),
        (
            "not hex",
            delivery(&client, &base, id, body)
                .header("X-Hub-Signature-256", format!("sha256={}zz", &hex[2..])),
        ),
        (
            "twice",
            delivery(&client, &base, id, body)
                .header("X-Hub-Signature-256", good.clone())
                .header("X-Hub-Signature-256", good.clone()),
        ),
        (
            "the old SHA-1 header only",
            delivery(&client, &base, id, body).header("X-Hub-Signature", format!("sha1={hex}")),
        ),
    ];
    for (case, request) in refused {
        let response = request.send().await.unwrap();
        assert_eq!(response.status(), StatusCode::UNAUTHORIZED, "{case}");
        assert_eq!(
            response.headers()["content-type"],
            "application/problem+json",
            "{case}"
        );
        let text = response.text().await.unwrap();
        assert!(!text.contains(SECRET), "{case}: {text}");
        let problem: Value = serde_json::from_str(&text).unwrap();
        assert_eq!(problem["type"], BAD_SIGNATURE, "{case}");
        assert_eq!(problem["status"], 401, "{case}");
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains("X-Hub-Signature-256"),
            "{case}: {problem}"
        );
    }
    assert_eq!(calls.take(), [], "a refused delivery touched the store");

    // The real delivery of that id is processed: nothing had claimed it.
    let first = delivery(&client, &base, id, body)
        .header("X-Hub-Signature-256", good.clone())
        .send()
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first.json::<Value>().await.unwrap(),
        json!({"processed": true})
    );
    // Hex digits in either case are the same signature.
    let again = delivery(&client, &base, id, body)
        .header(
            "X-Hub-Signature-256",
            format!("sha256={}", hex.to_uppercase()),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        json!({"duplicate": true})
    );
    // Signed but without an id: 400, after the signature, still no mark.
    calls.take();
    let no_id = client
        .post(format!("{base}/webhooks/github"))
        .header("X-Hub-Signature-256", good)
        .body(body)
        .send()
        .await
        .unwrap();
    assert_eq!(no_id.status(), StatusCode::BAD_REQUEST);
    assert_eq!(calls.take(), []);
    let stats = stats(&client, &base).await;
    assert_eq!(stats["webhooks"], 1);
}

#[tokio::test]
async fn a_delivery_body_over_the_bound_is_413_and_leaves_no_mark() {
    let (base, calls) = start(Some(SECRET)).await;
    let addr = base.strip_prefix("http://").unwrap();
    // Declared too long, signature well formed, nothing of the body sent:
    // refused at once, the body never read.
    let head = format!(
        "POST /webhooks/github HTTP/1.1\r\nHost: x\r\nX-GitHub-Delivery: big\r\n\
         X-Hub-Signature-256: {}\r\nContent-Length: {}\r\n\r\n",
        sign(SECRET, ""),
        MAX_WEBHOOK_BODY + 1
    );
    let mut stream = TcpStream::connect(addr).await.unwrap();
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = String::new();
    // A guard against a hung server, not a timing assertion.
    tokio::time::timeout(Duration::from_secs(60), stream.read_to_string(&mut answer))
        .await
        .expect("no answer")
        .unwrap();
    assert!(answer.starts_with("HTTP/1.1 413"), "{answer}");
    assert!(
        answer.contains(&format!("the body is over {MAX_WEBHOOK_BODY} bytes")),
        "{answer}"
    );
    assert_eq!(calls.take(), []);
}

#[tokio::test]
async fn without_a_secret_deliveries_are_unverified() {
    let (base, _calls) = start(None).await;
    let client = Client::new();
    let response = delivery(&client, &base, "unsigned", "{}")
        .send()
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.json::<Value>().await.unwrap(),
        json!({"processed": true})
    );
}
