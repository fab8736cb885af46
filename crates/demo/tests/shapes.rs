//! The demo with its ask rules in other shapes, over real HTTP on loopback
//! and a private redis-server: with `ask` as a sliding window, a caller who
//! spent a whole window's budget at its end gets almost nothing at the
//! start of the next, where a fixed window gives a whole budget again; with
//! `ask-burst` as GCRA, a quiet caller gets its burst at once and then one
//! ask per emission interval, told how long to wait.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use reqwest::{Client, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tollgate::{Clock, DEFAULT_RULES_TOML, Limiter, ManualClock, RuleSet, SystemClock};
use tollgate_demo::{Options, app, serve};
use tollgate_test_support::redis_server::RedisServer;

/// The shipped rules with the table that starts `shipped` replaced.
fn replaced(shipped: &str, by: &str) -> RuleSet {
    assert!(
        DEFAULT_RULES_TOML.contains(shipped),
        "the shipped rule changed"
    );
    RuleSet::from_toml(&DEFAULT_RULES_TOML.replace(shipped, by)).unwrap()
}

/// The shipped rules with `ask` as `algorithm`, 10 asks per 10 s.
fn rules(algorithm: &str) -> RuleSet {
    replaced(
        "[ask]\nmax = 15\nwindow = \"1d\"\n",
        &format!("[ask]\nmax = 10\nwindow = \"10s\"\nalgorithm = \"{algorithm}\"\n"),
    )
}

/// The demo on `url` under `rules`, on `clock`; its base URL and a sender
/// that stops it.
async fn start(url: &str, rules: &RuleSet, clock: &ManualClock) -> (String, oneshot::Sender<()>) {
    let store = tollgate::open_store(url).unwrap();
    let limiter = Limiter::builder(store.clone()).clock(clock.clone()).build();
    let args = [
        "tollgate-demo",
        "--trust",
        "cf-connecting-ip",
        "--trusted-proxy",
        "127.0.0.0/8",
    ];
    let visitors = Options::try_parse_from(args).unwrap().visitors().unwrap();
    let router = app(limiter, store, rules, visitors).unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    let (stop, stopped) = oneshot::channel::<()>();
    tokio::spawn(serve(listener, router, async {
        let _ = stopped.await;
    }));
    (format!("http://{addr}"), stop)
}

/// Sends `n` asks from one visitor; the 200s, and the last 429's
/// `Retry-After` and body.
async fn asks(client: &Client, base: &str, ip: &str, n: usize) -> (usize, Option<(u64, Value)>) {
    let mut ok = 0;
    let mut limited = None;
    for _ in 0..n {
        let response = client
            .post(format!("{base}/sites/docs/ask"))
            .header("cf-connecting-ip", ip)
            .send()
            .await
            .unwrap();
        match response.status() {
            StatusCode::OK => ok += 1,
            StatusCode::TOO_MANY_REQUESTS => {
                let wait = response.headers()["retry-after"]
                    .to_str()
                    .unwrap()
                    .parse()
                    .unwrap();
                limited = Some((wait, response.json().await.unwrap()));
            }
            other => panic!("an ask answered {other}"),
        }
    }
    (ok, limited)
}

/// 10 asks in the last second of a window, then 10 at the start of the
/// next: how many of the second 10 are admitted, and the last refusal.
async fn burst_across_a_boundary(algorithm: &str) -> (usize, Option<(u64, Value)>) {
    let redis = RedisServer::start();
    let now = SystemClock.now().as_secs();
    let clock = ManualClock::new(Duration::from_secs(now - now % 10 + 9));
    let (base, stop) = start(&redis.url(), &rules(algorithm), &clock).await;
    let client = Client::new();
    let ip = "203.0.113.9";
    let (first, _) = asks(&client, &base, ip, 10).await;
    assert_eq!(first, 10, "{algorithm}: the first window's 10 asks");
    clock.advance(Duration::from_secs(1));
    let second = asks(&client, &base, ip, 10).await;
    let _ = stop.send(());
    second
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sliding_ask_admits_almost_nothing_right_after_a_full_window() {
    let (admitted, limited) = burst_across_a_boundary("sliding").await;
    assert!(admitted <= 2, "sliding: {admitted} of 10 admitted");
    let (wait, body) = limited.expect("sliding: nothing was refused");
    // At the window's start the previous 10 weigh 10; a second later 9.
    assert_eq!(wait, 1, "sliding: Retry-After is the exact wait");
    assert_eq!(body["limit"], "ask", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fixed_ask_admits_a_whole_budget_again_in_the_next_window() {
    let (admitted, limited) = burst_across_a_boundary("fixed").await;
    assert_eq!(admitted, 10, "fixed: a new window");
    assert!(limited.is_none());
}

/// `ask-burst` as GCRA: 20 a minute (one every 3 s), 5 at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gcra_ask_burst_admits_its_burst_then_one_every_interval() {
    let shipped = "[ask-burst]\nmax = 20\nwindow = \"1m\"\n";
    let gcra = "[ask-burst]\nmax = 20\nwindow = \"1m\"\nalgorithm = \"gcra\"\nburst = 5\n";
    let rules = replaced(shipped, gcra);
    let redis = RedisServer::start();
    let now = SystemClock.now().as_secs();
    let clock = ManualClock::new(Duration::from_secs(now));
    let (base, stop) = start(&redis.url(), &rules, &clock).await;
    let client = Client::new();
    let ip = "203.0.113.7";
    let (ok, limited) = asks(&client, &base, ip, 6).await;
    assert_eq!(ok, 5, "a quiet visitor's burst");
    let (wait, body) = limited.expect("the sixth ask at once");
    assert_eq!(wait, 3, "one ask every 3 s");
    assert_eq!(
        (&body["limit"], &body["algorithm"]),
        (&"ask-burst".into(), &"gcra".into())
    );
    for _ in 0..3 {
        clock.advance(Duration::from_secs(2));
        let (ok, limited) = asks(&client, &base, ip, 1).await;
        assert_eq!((ok, limited.map(|(wait, _)| wait)), (0, Some(1)), "2 s on");
        clock.advance(Duration::from_secs(1));
        let (ok, limited) = asks(&client, &base, ip, 2).await;
        assert_eq!((ok, limited.map(|(wait, _)| wait)), (1, Some(3)), "3 s on");
    }
    let _ = stop.send(());
}
