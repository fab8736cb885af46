//! The demo's in-flight limits (`ask-inflight`, `ask-inflight-site`, in
//! the shipped rules) over real HTTP on loopback, on a SQLite file and on a
//! private `redis-server`: with a provider that takes a second, ten
//! concurrent asks from one visitor get exactly two answers and eight 429s
//! naming `ask-inflight`, which spend nothing of `ask`; once the two
//! answers have been sent, two more are admitted at once. And the demo
//! binary killed with `SIGKILL` while it holds two leases (of 5 s) leaves
//! that visitor refused at once, and admitted again no later than the lease
//! lifetime after the kill.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/demo_binary.rs"]
mod demo_binary;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use reqwest::{Client, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tollgate::{DEFAULT_RULES_TOML, Limiter, RuleSet};
use tollgate_demo::{Options, Settings, app_with, serve};
use tollgate_test_support::redis_server::RedisServer;

use demo_binary::Running;

fn rules() -> RuleSet {
    RuleSet::from_toml(DEFAULT_RULES_TOML).unwrap()
}

/// The demo on `url` with a provider taking `delay`; its base URL.
async fn start(url: &str, delay: Duration) -> String {
    let store = tollgate::open_store(url).unwrap();
    let limiter = Limiter::new(store.clone());
    let args = [
        "tollgate-demo",
        "--trust",
        "cf-connecting-ip",
        "--trusted-proxy",
        "127.0.0.0/8",
    ];
    let visitors = Options::try_parse_from(args).unwrap().visitors().unwrap();
    let settings = Settings {
        provider_delay: delay,
        ..Settings::default()
    };
    let router = app_with(limiter, store, &rules(), visitors, settings).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, router, std::future::pending()));
    format!("http://{addr}")
}

/// `n` asks from `ip` at once: each one's status and body.
async fn at_once(client: &Client, base: &str, ip: &str, n: usize) -> Vec<(StatusCode, Value)> {
    let asks = (0..n).map(|_| {
        let request = client
            .post(format!("{base}/sites/docs/ask"))
            .header("cf-connecting-ip", ip)
            .send();
        async move {
            let response = request.await.unwrap();
            let status = response.status();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    });
    let tasks: Vec<_> = asks.map(tokio::spawn).collect();
    let mut done = Vec::new();
    for task in tasks {
        done.push(task.await.unwrap());
    }
    done
}

/// Ten concurrent asks from one visitor through the demo on `url`: two
/// answered, eight refused by `ask-inflight` spending nothing, and two
/// more admitted once the answers have been sent.
async fn two_asks_in_flight_per_visitor_and_the_rest_refused_for_nothing(url: &str) {
    let base = start(url, Duration::from_millis(1_000)).await;
    let client = Client::new();
    let ip = "198.51.100.23";
    let first = at_once(&client, &base, ip, 10).await;
    let answered = first.iter().filter(|(s, _)| *s == StatusCode::OK).count();
    let refused: Vec<&Value> = first
        .iter()
        .filter(|(s, _)| *s == StatusCode::TOO_MANY_REQUESTS)
        .map(|(_, body)| body)
        .collect();
    assert_eq!((answered, refused.len()), (2, 8), "{first:?}");
    for body in &refused {
        assert_eq!(body["limit"], "ask-inflight", "{body}");
        assert_eq!(body["algorithm"], "concurrency", "{body}");
    }
    // The eight refusals spent no `ask`: 15 a day, 2 spent. The two answers
    // have been sent: their leases are free (released in the background).
    tokio::time::sleep(Duration::from_millis(200)).await;
    let second = at_once(&client, &base, ip, 2).await;
    assert!(
        second.iter().all(|(s, _)| *s == StatusCode::OK),
        "{second:?}"
    );
    let limiter = Limiter::new(tollgate::open_store(url).unwrap());
    let rules = rules();
    let ask = rules.get("ask").unwrap().limit(&["docs", ip]).unwrap();
    let usage = limiter.remaining(&[ask]).await.unwrap();
    assert_eq!(usage[0].remaining(), 15 - 4, "refused asks spent `ask`");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_asks_in_flight_per_visitor_on_sqlite() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("inflight.sqlite3").display());
    two_asks_in_flight_per_visitor_and_the_rest_refused_for_nothing(&url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_asks_in_flight_per_visitor_on_redis() {
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    two_asks_in_flight_per_visitor_and_the_rest_refused_for_nothing(&server.url()).await;
}

/// One ask from `ip` to the demo at `base`: its status, and the limit a
/// 429 names.
async fn ask(client: &Client, base: &str, ip: &str) -> (StatusCode, Value) {
    let response = client
        .post(format!("{base}/sites/docs/ask"))
        .header("cf-connecting-ip", ip)
        .send()
        .await
        .unwrap();
    let status = response.status();
    let body = response.json::<Value>().await.unwrap_or(Value::Null);
    (status, body["limit"].clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_demo_killed_holding_leases_frees_them_within_their_lifetime() {
    const LEASE: Duration = Duration::from_secs(5);
    let server = tokio::task::spawn_blocking(RedisServer::start)
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("rules.toml");
    let shipped = "[ask-inflight]\nconcurrency = 2\nlease = \"60s\"";
    assert!(
        DEFAULT_RULES_TOML.contains(shipped),
        "the shipped ask-inflight"
    );
    let five =
        DEFAULT_RULES_TOML.replace(shipped, "[ask-inflight]\nconcurrency = 2\nlease = \"5s\"");
    std::fs::write(&file, five).unwrap();
    let (store, rules) = (server.url(), file.to_str().unwrap().to_owned());
    let demo = |delay: &'static str| {
        let args = [
            "--store",
            &store,
            "--rules",
            &rules,
            "--trust",
            "cf-connecting-ip",
            "--trusted-proxy",
            "127.0.0.0/8",
            "--provider-delay-ms",
            delay,
        ]
        .map(str::to_owned);
        async move {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            Running::start(&args).await
        }
    };
    let client = Client::new();
    let ip = "198.51.100.77";
    let mut first = demo("60000").await;
    // Three asks at once: two hold their leases for a minute, so the first
    // answer is the third's refusal. Then the demo dies.
    let (answers, mut answered) = tokio::sync::mpsc::unbounded_channel();
    for _ in 0..3 {
        let (client, base, answers) = (client.clone(), first.base.clone(), answers.clone());
        tokio::spawn(async move {
            let _ = answers.send(ask(&client, &base, ip).await);
        });
    }
    let (status, limit) = tokio::time::timeout(Duration::from_secs(20), answered.recv())
        .await
        .expect("no ask answered in 20 s")
        .unwrap();
    assert_eq!(
        (status, limit.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("ask-inflight")),
        "two leases were not held"
    );
    first.child.start_kill().unwrap();
    let killed = Instant::now();
    first.child.wait().await.unwrap();
    // A new demo on the same Redis: the dead one's leases still count.
    let second = demo("0").await;
    let (status, limit) = ask(&client, &second.base, ip).await;
    assert_eq!(
        (status, limit.as_str()),
        (StatusCode::TOO_MANY_REQUESTS, Some("ask-inflight")),
        "the killed demo's leases were lost at once"
    );
    let freed = loop {
        let (status, limit) = ask(&client, &second.base, ip).await;
        if status == StatusCode::OK {
            break killed.elapsed();
        }
        assert_eq!(limit, "ask-inflight", "refused by another limit");
        assert!(
            killed.elapsed() < LEASE + Duration::from_secs(2),
            "still refused {:?} after the kill",
            killed.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    eprintln!("admitted again {freed:?} after the kill (lease {LEASE:?})");
    assert!(
        freed <= LEASE + Duration::from_millis(300),
        "admitted {freed:?} after the kill"
    );
}
