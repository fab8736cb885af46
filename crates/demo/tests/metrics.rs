//! `GET /metrics` over real HTTP: the outcome counters move as a probe
//! spends a visitor's budget. (One test: the recorder is per process.)
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::net::SocketAddr;
use std::time::Duration;

use reqwest::{Client, StatusCode};
use tokio::net::TcpListener;
use tollgate::axum::{Trust, VisitorSource};
use tollgate::{Limiter, ManualClock, RuleSet};
use tollgate_demo::{app, metrics_router, serve};

/// The value of the sample `name{labels}` in a Prometheus scrape; 0 when absent.
fn sample(scrape: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    scrape
        .lines()
        .filter(|line| line.starts_with(name) && !line.starts_with('#'))
        .find(|line| {
            labels
                .iter()
                .all(|(k, v)| line.contains(&format!("{k}=\"{v}\"")))
        })
        .and_then(|line| line.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test]
async fn the_outcome_counters_move_as_a_visitor_spends_its_budget() {
    let store = tollgate::open_store("memory").unwrap();
    let clock = ManualClock::new(Duration::from_secs(20_619 * 86_400 + 43_200));
    let loopback = vec!["127.0.0.0/8".parse().unwrap()];
    let router = app(
        Limiter::builder(store.clone()).clock(clock).build(),
        store,
        &RuleSet::defaults(),
        VisitorSource::new(Trust::CfConnectingIp(loopback)),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr: SocketAddr = listener.local_addr().unwrap();
    tokio::spawn(serve(listener, router, std::future::pending()));
    let admin = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let admin_addr: SocketAddr = admin.local_addr().unwrap();
    tokio::spawn(serve(admin, metrics_router(), std::future::pending()));
    let client = Client::new();
    let public = client
        .get(format!("http://{addr}/metrics"))
        .send()
        .await
        .unwrap();
    assert_eq!(
        public.status(),
        StatusCode::NOT_FOUND,
        "metrics on the public address"
    );
    let scrape = || async {
        let response = client
            .get(format!("http://{admin_addr}/metrics"))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), StatusCode::OK);
        response.text().await.unwrap()
    };
    let ask = || async {
        client
            .post(format!("http://{addr}/sites/docs/ask"))
            .header("cf-connecting-ip", "203.0.113.9")
            .send()
            .await
            .unwrap()
            .status()
    };
    for _ in 0..15 {
        assert_eq!(ask().await, StatusCode::OK);
    }
    let after_15 = scrape().await;
    let checks = "tollgate_checks_total";
    assert_eq!(
        sample(
            &after_15,
            checks,
            &[
                ("rule", "ask"),
                ("algorithm", "fixed"),
                ("outcome", "allowed")
            ]
        ),
        15.0
    );
    assert_eq!(
        sample(
            &after_15,
            checks,
            &[
                ("rule", "ask-tokens"),
                ("algorithm", "fixed"),
                ("outcome", "allowed")
            ]
        ),
        15.0
    );
    assert_eq!(
        sample(
            &after_15,
            checks,
            &[
                ("rule", "ask"),
                ("algorithm", "fixed"),
                ("outcome", "limited")
            ]
        ),
        0.0
    );
    for _ in 0..3 {
        assert_eq!(ask().await, StatusCode::TOO_MANY_REQUESTS);
    }
    let after_18 = scrape().await;
    // The first refusal came from the store, the next two from the cache.
    assert_eq!(
        sample(
            &after_18,
            checks,
            &[
                ("rule", "ask"),
                ("algorithm", "fixed"),
                ("outcome", "limited")
            ]
        ),
        1.0
    );
    assert_eq!(
        sample(
            &after_18,
            checks,
            &[
                ("rule", "ask"),
                ("algorithm", "fixed"),
                ("outcome", "answered-locally")
            ]
        ),
        2.0
    );
    assert_eq!(
        sample(
            &after_18,
            checks,
            &[
                ("rule", "ask"),
                ("algorithm", "fixed"),
                ("outcome", "allowed")
            ]
        ),
        15.0
    );
    // The other rules of the refused asks had room: they spent nothing.
    for rule in ["ask-site", "ask-all", "ask-tokens", "ask-burst"] {
        for (outcome, n) in [
            ("limited", 0.0),
            ("answered-locally", 0.0),
            ("not-spent", 3.0),
        ] {
            let found = sample(
                &after_18,
                checks,
                &[("rule", rule), ("algorithm", "fixed"), ("outcome", outcome)],
            );
            assert_eq!(found, n, "{rule} {outcome}: {after_18}");
        }
    }
    // Every check counter names its rule's shape: the defaults are fixed
    // windows and the two in-flight limits.
    let lines: Vec<&str> = after_18.lines().filter(|l| l.starts_with(checks)).collect();
    assert!(!lines.is_empty(), "{after_18}");
    for line in lines {
        let shape = match line.contains("rule=\"ask-inflight") {
            true => "algorithm=\"concurrency\"",
            false => "algorithm=\"fixed\"",
        };
        assert!(line.contains(shape), "{line}");
    }
    // The 15 answers each took and gave back one lease of each.
    let leases = "tollgate_leases_total";
    for rule in ["ask-inflight", "ask-inflight-site"] {
        for event in ["acquired", "released"] {
            let found = sample(&after_18, leases, &[("rule", rule), ("event", event)]);
            assert_eq!(found, 15.0, "{rule} {event}: {after_18}");
        }
    }
    let calls = "tollgate_store_call_seconds_count";
    assert!(
        sample(&after_18, calls, &[("store", "memory"), ("op", "reserve")]) >= 16.0,
        "{after_18}"
    );
    assert!(
        !after_18.contains("store=\"store\""),
        "a store metric not named for its store: {after_18}"
    );
    assert!(after_18.contains("tollgate_cache_entries"), "{after_18}");
}
