//! The demo's in-flight limits (`ask-inflight`, `ask-inflight-site`, added
//! to the shipped rules) over real HTTP on loopback and a SQLite file: with
//! a provider that takes a second, ten concurrent asks
//! from one visitor get exactly two answers and eight 429s naming
//! `ask-inflight`, which spend nothing of `ask`; once the two answers have
//! been sent, two more are admitted at once.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use clap::Parser;
use reqwest::{Client, StatusCode};
use serde_json::Value;
use tokio::net::TcpListener;
use tollgate::{DEFAULT_RULES_TOML, Limiter, RuleSet};
use tollgate_demo::{Options, Settings, app_with, serve};

/// The in-flight rules of the demo's ask route.
const INFLIGHT: &str = "
[ask-inflight]
concurrency = 2
lease = \"60s\"
key = [\"visitor\"]

[ask-inflight-site]
concurrency = 20
lease = \"60s\"
key = [\"project\"]
public = false
";

fn rules() -> RuleSet {
    RuleSet::from_toml(&format!("{DEFAULT_RULES_TOML}{INFLIGHT}")).unwrap()
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_asks_in_flight_per_visitor_and_the_rest_refused_for_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = format!("sqlite:{}", dir.path().join("inflight.sqlite3").display());
    let base = start(&url, Duration::from_millis(1_000)).await;
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
    let limiter = Limiter::new(tollgate::open_store(&url).unwrap());
    let rules = rules();
    let ask = rules.get("ask").unwrap().limit(&["docs", ip]).unwrap();
    let usage = limiter.remaining(&[ask]).await.unwrap();
    assert_eq!(usage[0].remaining(), 15 - 4, "refused asks spent `ask`");
}
