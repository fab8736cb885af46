//! The demo over real HTTP on loopback: limits, restarts, visitors, webhooks,
//! and a stopped Redis.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/stats.rs"]
mod stats;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::{Arc, Weak};
use std::time::Duration;

use clap::Parser;
use reqwest::{Client, Response, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::{Clock, Limiter, ManualClock, RuleSet, Store, SystemClock};
use tollgate_demo::{Options, app, serve};
use tollgate_test_support::redis_server::RedisServer;

use stats::stats;

/// Today at 12:00 UTC: the `ask` window resets in 12 hours.
fn noon() -> ManualClock {
    let now = SystemClock.now().as_secs();
    ManualClock::new(Duration::from_secs(now - now % 86_400 + 43_200))
}

/// Loopback stands in for Cloudflare's edge: `cf-connecting-ip` is believed
/// from 127.0.0.1 and ::1.
const LOOPBACK_EDGE: &[&str] = &[
    "--trust",
    "cf-connecting-ip",
    "--trusted-proxy",
    "127.0.0.0/8",
    "--trusted-proxy",
    "::1/128",
];

/// The demo, served on a free loopback port, believing `cf-connecting-ip`
/// from loopback.
struct Demo {
    base: String,
    store: Weak<dyn Store>,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Demo {
    async fn start(url: &str, clock: &ManualClock) -> Demo {
        Demo::start_with(url, clock, LOOPBACK_EDGE).await
    }

    /// The demo with the visitor source of these command-line `args`.
    async fn start_with(url: &str, clock: &ManualClock, args: &[&str]) -> Demo {
        let store = tollgate::open_store(url).unwrap();
        let weak = Arc::downgrade(&store);
        let limiter = Limiter::builder(store.clone()).clock(clock.clone()).build();
        let options = Options::try_parse_from(["tollgate-demo"].iter().chain(args)).unwrap();
        let visitors = options.visitors().unwrap();
        let router = app(limiter, store, &RuleSet::defaults(), visitors).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr: SocketAddr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve(listener, router, async {
            let _ = stopped.await;
        }));
        Demo {
            base: format!("http://{addr}"),
            store: weak,
            stop,
            task,
        }
    }

    /// Stops serving, waits for open connections to end, and checks that the
    /// store is gone with the server.
    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
        // The last connection task may drop its router a moment after the
        // server returns, on another worker thread.
        for _ in 0..200 {
            if self.store.upgrade().is_none() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        panic!("the store outlived the server");
    }

    fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}

fn client() -> Client {
    Client::builder().build().unwrap()
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("demo.sqlite3").display())
}

async fn ask(client: &Client, demo: &Demo, project: &str, ip: &str) -> Response {
    client
        .post(demo.url(&format!("/sites/{project}/ask")))
        .header("cf-connecting-ip", ip)
        .send()
        .await
        .unwrap()
}

async fn run(client: &Client, demo: &Demo, org: &str) -> Response {
    client
        .post(demo.url(&format!("/orgs/{org}/runs")))
        .send()
        .await
        .unwrap()
}

fn header(response: &Response, name: &str) -> String {
    response
        .headers()
        .get(name)
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default()
}

/// Asks `n` times, expecting 200 each time.
async fn ask_ok(client: &Client, demo: &Demo, project: &str, ip: &str, n: usize) {
    for i in 0..n {
        let response = ask(client, demo, project, ip).await;
        assert_eq!(response.status(), StatusCode::OK, "ask {} from {ip}", i + 1);
    }
}

#[tokio::test]
async fn sixteenth_ask_is_a_typed_429_and_only_15_did_work() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(&sqlite_url(dir.path()), &noon()).await;
    let client = client();
    ask_ok(&client, &demo, "docs", "203.0.113.9", 15).await;

    let response = ask(&client, &demo, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(
        header(&response, "content-type"),
        "application/problem+json"
    );
    assert_eq!(header(&response, "retry-after"), "43200");
    assert_eq!(
        header(&response, "ratelimit-policy"),
        // ask-site, ask-all, ask-tokens and ask-inflight-site are not
        // public: never shown.
        r#""ask-burst";q=20;w=60, "ask";q=15;w=86400, "ask-inflight";q=2;qu="concurrent-requests""#
    );
    assert!(header(&response, "ratelimit").contains(r#""ask";r=0;t=43200"#));
    assert!(!header(&response, "ratelimit").contains("ask-all"));
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["status"], 429);
    assert_eq!(body["limit"], "ask");
    assert_eq!(body["retry_after"], 43_200);
    assert!(
        body["type"]
            .as_str()
            .is_some_and(|t| t.ends_with("rate-limited"))
    );

    assert_eq!(
        stats(&client, &demo.base).await,
        serde_json::json!({"ask": 15, "tokens": 15 * 64, "runs": 0, "webhooks": 0})
    );
    demo.stop().await;
}

#[tokio::test]
async fn restart_on_the_same_sqlite_file_keeps_the_visitor_limited() {
    let dir = tempfile::tempdir().unwrap();
    let clock = noon();
    let client = client();
    let first = Demo::start(&sqlite_url(dir.path()), &clock).await;
    ask_ok(&client, &first, "docs", "203.0.113.9", 15).await;
    drop(client);
    first.stop().await;

    let client = self::client();
    let second = Demo::start(&sqlite_url(dir.path()), &clock).await;
    let response = ask(&client, &second, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["limit"], "ask");
    assert_eq!(stats(&client, &second.base).await["ask"], 0);
    second.stop().await;
}

#[tokio::test]
async fn another_visitor_is_unaffected() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(&sqlite_url(dir.path()), &noon()).await;
    let client = client();
    ask_ok(&client, &demo, "docs", "203.0.113.9", 15).await;
    assert_eq!(
        ask(&client, &demo, "docs", "203.0.113.9").await.status(),
        StatusCode::TOO_MANY_REQUESTS
    );

    let other = ask(&client, &demo, "docs", "198.51.100.7").await;
    assert_eq!(other.status(), StatusCode::OK);
    assert!(
        header(&other, "ratelimit").contains(r#""ask";r=14;"#),
        "{}",
        header(&other, "ratelimit")
    );
    // The same visitor on another site has its own `ask` budget too.
    assert_eq!(
        ask(&client, &demo, "blog", "203.0.113.9").await.status(),
        StatusCode::OK
    );
    assert_eq!(stats(&client, &demo.base).await["ask"], 17);
    demo.stop().await;
}

#[tokio::test]
async fn cf_connecting_ip_from_a_peer_outside_cloudflare_is_ignored() {
    let dir = tempfile::tempdir().unwrap();
    // Cloudflare's ranges only: the loopback peer is the visitor.
    let demo = Demo::start_with(
        &sqlite_url(dir.path()),
        &noon(),
        &["--trust", "cf-connecting-ip"],
    )
    .await;
    let client = client();
    for i in 0..15 {
        let forged = format!("198.51.100.{}", i + 1);
        let response = ask(&client, &demo, "docs", &forged).await;
        assert_eq!(response.status(), StatusCode::OK, "ask {}", i + 1);
    }
    let response = ask(&client, &demo, "docs", "198.51.100.16").await;
    assert_eq!(
        response.status(),
        StatusCode::TOO_MANY_REQUESTS,
        "16 forged headers from one peer are one visitor"
    );
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["limit"], "ask");
    assert_eq!(stats(&client, &demo.base).await["ask"], 15);
    demo.stop().await;
}

#[tokio::test]
async fn two_spellings_of_one_ipv6_64_share_a_bucket() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(&sqlite_url(dir.path()), &noon()).await;
    let client = client();
    let spellings = ["2001:db8:0:1::1", "2001:0DB8:0000:0001:ffff:ffff:ffff:fffe"];
    for i in 0..15 {
        let response = ask(&client, &demo, "docs", spellings[i % 2]).await;
        assert_eq!(response.status(), StatusCode::OK, "ask {}", i + 1);
    }
    for spelling in spellings {
        let response = ask(&client, &demo, "docs", spelling).await;
        assert_eq!(
            response.status(),
            StatusCode::TOO_MANY_REQUESTS,
            "{spelling}"
        );
    }
    let next_64 = ask(&client, &demo, "docs", "2001:db8:0:2::1").await;
    assert_eq!(next_64.status(), StatusCode::OK);
    demo.stop().await;
}

#[tokio::test]
async fn webhook_delivered_twice_is_processed_once() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(&sqlite_url(dir.path()), &noon()).await;
    let client = client();
    let deliver = |id: Option<&str>| {
        let mut request = client.post(demo.url("/webhooks/github")).body("{}");
        if let Some(id) = id {
            request = request.header("X-GitHub-Delivery", id);
        }
        request.send()
    };
    let first = deliver(Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"))
        .await
        .unwrap();
    assert_eq!(first.status(), StatusCode::OK);
    assert_eq!(
        first.json::<Value>().await.unwrap(),
        serde_json::json!({"processed": true})
    );
    let again = deliver(Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"))
        .await
        .unwrap();
    assert_eq!(again.status(), StatusCode::OK);
    assert_eq!(
        again.json::<Value>().await.unwrap(),
        serde_json::json!({"duplicate": true})
    );
    let missing = deliver(None).await.unwrap();
    assert_eq!(missing.status(), StatusCode::BAD_REQUEST);
    assert_eq!(header(&missing, "content-type"), "application/problem+json");
    assert_eq!(stats(&client, &demo.base).await["webhooks"], 1);
    demo.stop().await;
}

#[tokio::test]
async fn runs_are_limited_per_org() {
    let dir = tempfile::tempdir().unwrap();
    let demo = Demo::start(&sqlite_url(dir.path()), &noon()).await;
    let client = client();
    for i in 0..10 {
        assert_eq!(
            run(&client, &demo, "acme").await.status(),
            StatusCode::ACCEPTED,
            "run {}",
            i + 1
        );
    }
    let response = run(&client, &demo, "acme").await;
    assert_eq!(response.status(), StatusCode::TOO_MANY_REQUESTS);
    let body: Value = response.json().await.unwrap();
    assert_eq!(body["limit"], "docs-run");
    assert_eq!(
        run(&client, &demo, "globex").await.status(),
        StatusCode::ACCEPTED
    );
    assert_eq!(stats(&client, &demo.base).await["runs"], 11);
    let health = client.get(demo.url("/healthz")).send().await.unwrap();
    assert_eq!(health.status(), StatusCode::OK);
    demo.stop().await;
}

#[tokio::test]
async fn stopped_redis_fails_ask_closed_and_runs_open() {
    let mut server = RedisServer::start();
    let demo = Demo::start(&server.url(), &noon()).await;
    let client = client();
    ask_ok(&client, &demo, "docs", "203.0.113.9", 1).await;
    assert_eq!(
        run(&client, &demo, "acme").await.status(),
        StatusCode::ACCEPTED
    );

    server.stop();
    let response = ask(&client, &demo, "docs", "203.0.113.9").await;
    assert_eq!(response.status(), StatusCode::SERVICE_UNAVAILABLE);
    assert_eq!(
        header(&response, "content-type"),
        "application/problem+json"
    );
    let retry_after: u64 = header(&response, "retry-after").parse().unwrap();
    assert!((1..=5).contains(&retry_after), "{retry_after}");
    let text = response.text().await.unwrap().to_lowercase();
    for leak in [
        "redis",
        "127.0.0.1",
        "limit:",
        "connection",
        "refused",
        "store",
    ] {
        assert!(!text.contains(leak), "503 body shows {leak:?}: {text}");
    }
    let webhook = client
        .post(demo.url("/webhooks/github"))
        .header("X-GitHub-Delivery", "while-redis-is-down")
        .send()
        .await
        .unwrap();
    assert_eq!(
        webhook.status(),
        StatusCode::SERVICE_UNAVAILABLE,
        "a delivery is not processed unmarked"
    );
    let degraded = run(&client, &demo, "acme").await;
    assert_eq!(degraded.status(), StatusCode::ACCEPTED);
    assert!(
        degraded.headers().get("ratelimit").is_none(),
        "a degraded verdict has no fields"
    );
    assert_eq!(
        stats(&client, &demo.base).await,
        serde_json::json!({"ask": 1, "tokens": 64, "runs": 2, "webhooks": 0})
    );
    demo.stop().await;
}
