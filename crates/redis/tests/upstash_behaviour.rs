//! What the REST store sends through the proxy: one HTTP request per call
//! (counted by a TCP relay in front of the proxy), exactly two after the
//! server lost its scripts, and counters other Redis clients read as
//! `limit:<key>:<window>`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use redis::Value;
use support::upstash::TOKEN;
use support::upstash::proxy::Proxy;
use support::{admin, counter, deadline, limits, run};
use tollgate_core::{
    CheckId, Claim, Clock, CounterStore, Limiter, ManualClock, MarkStore, Rule, Window,
};
use tollgate_redis::upstash::UpstashStore;
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::relay::Relay;
use tollgate_test_support::unique;

/// Runs `call` and returns how many HTTP requests it made.
async fn requests<F: std::future::Future>(relay: &Relay, call: F) -> (F::Output, u64) {
    let before = relay.turns();
    let output = call.await;
    (output, relay.turns() - before)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_call_is_one_request_and_a_lost_script_costs_exactly_one_more() {
    let server = RedisServer::start();
    server.require_private("flush the scripts of");
    let proxy = Proxy::start(&server.url());
    let relay = Relay::start(proxy.port()).await;
    let store = UpstashStore::open(&relay.http_url(), TOKEN).unwrap();
    let d = deadline();
    let batch = [
        counter("a", 1, 9),
        counter("b", 2, 9),
        counter("c", 3, 9),
        counter("d", 4, 9),
    ];
    let ttl = Duration::from_secs(30);
    let mark = format!("mark:{}", unique());

    // A fresh server knows no script: each first call of one is EVALSHA,
    // then EVAL. Count, reserve and refund share one script.
    let (counted, n) = requests(&relay, store.count(&batch, CheckId::new(), d)).await;
    assert_eq!((counted.unwrap(), n), (vec![1, 2, 3, 4], 2));

    let (reserved, n) = requests(&relay, store.reserve(&batch, CheckId::new(), d)).await;
    assert_eq!((reserved.unwrap().counts, n), (vec![2, 4, 6, 8], 1));
    for _ in 0..3 {
        let (counted, n) = requests(&relay, store.count(&batch, CheckId::new(), d)).await;
        counted.unwrap();
        assert_eq!(n, 1, "count");
        let (reserved, n) = requests(&relay, store.reserve(&batch, CheckId::new(), d)).await;
        reserved.unwrap();
        assert_eq!(n, 1, "reserve");
    }
    let (refunded, n) = requests(&relay, store.refund(&batch, CheckId::new(), d)).await;
    assert_eq!((refunded.is_ok(), n), (true, 1), "refund");
    let (got, n) = requests(&relay, store.get(&[batch[0].key.clone()], d)).await;
    assert!(got.is_ok());
    assert_eq!(n, 1, "get");
    let (_, n) = requests(&relay, store.claim(&mark, "t1", ttl, d)).await;
    assert_eq!(n, 2, "the first claim loads its script");
    let (claim, n) = requests(&relay, store.claim(&mark, "t1", ttl, d)).await;
    assert_eq!((claim.unwrap(), n), (Claim::Acquired, 1), "claim");

    // The server forgets every script: the next call makes exactly two requests.
    let mut admin = admin(&server.url()).await;
    assert_eq!(run(&mut admin, &["SCRIPT", "FLUSH"]).await, Value::Okay);
    let (counted, n) = requests(&relay, store.count(&batch, CheckId::new(), d)).await;
    counted.unwrap();
    assert_eq!(n, 2, "EVALSHA answered NOSCRIPT, then EVAL");
    let (counted, n) = requests(&relay, store.count(&batch, CheckId::new(), d)).await;
    counted.unwrap();
    assert_eq!(n, 1, "EVAL cached the script again");

    // Through the limiter, a check of four limits is one request.
    let limiter = Limiter::new(store.clone());
    let limits = limits(4);
    let (verdict, n) = requests(&relay, limiter.count(&limits)).await;
    assert!(verdict.unwrap().is_allowed());
    assert_eq!(n, 1, "a limiter count");
    run(&mut admin, &["SCRIPT", "FLUSH"]).await;
    let (verdict, n) = requests(&relay, limiter.reserve(&limits)).await;
    assert!(verdict.unwrap().is_allowed());
    assert_eq!(n, 2, "a limiter reserve after SCRIPT FLUSH");
    let (verdict, n) = requests(&relay, limiter.reserve(&limits)).await;
    assert_eq!(
        verdict.unwrap().usage()[0].remaining(),
        997,
        "count, reserve, reserve"
    );
    assert_eq!(n, 1, "a limiter reserve");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn counters_are_plain_limit_key_window_strings_other_clients_share() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.url());
    let clock = ManualClock::starting_now();
    let limiter = Limiter::builder(UpstashStore::open(&proxy.url(), TOKEN).unwrap())
        .clock(clock.clone())
        .build();
    let github = Rule::new("github", 60, Window::HOUR)
        .unwrap()
        .with_key(&["org"])
        .unwrap();
    let ask = Rule::new("ask", 15, Window::DAY)
        .unwrap()
        .with_key(&["project", "visitor"])
        .unwrap();
    let org = unique();
    let limits = [
        github.limit(&[org.as_str()]).unwrap(),
        ask.limit(&[org.as_str(), "203.0.113.9"]).unwrap(),
    ];
    for _ in 0..3 {
        assert!(limiter.count(&limits).await.unwrap().is_allowed());
    }
    let now = clock.now().as_secs();
    let hour = format!("limit:github:{org}:{}", now / 3_600);
    let day = format!("limit:ask:{org}:203.0.113.9:{}", now / 86_400);
    let mut admin = admin(&server.url()).await;
    for key in [&hour, &day] {
        assert_eq!(
            run(&mut admin, &["GET", key]).await,
            Value::BulkString(b"3".to_vec()),
            "{key}"
        );
        let Value::Int(ttl) = run(&mut admin, &["PTTL", key]).await else {
            panic!("PTTL {key}");
        };
        assert!(ttl > 0, "{key} has a lifetime: {ttl}");
    }
    // Another service increments the same key with a plain INCRBY.
    run(&mut admin, &["INCRBY", &hour, "50"]).await;
    let verdict = limiter.reserve(&limits[..1]).await.unwrap();
    assert_eq!(verdict.usage()[0].remaining(), 6, "60 - 53 - 1");
    let left = limiter.remaining(&limits[..1]).await.unwrap();
    assert_eq!(left[0].remaining(), 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_counter_of_another_type_is_a_backend_failure_that_changes_nothing() {
    let server = RedisServer::start();
    let proxy = Proxy::start(&server.url());
    let store = UpstashStore::open(&proxy.url(), TOKEN).unwrap();
    let list = counter("list", 1, 9);
    let text = counter("text", 1, 9);
    let mut admin = admin(&server.url()).await;
    run(&mut admin, &["RPUSH", &list.key, "x"]).await;
    run(&mut admin, &["SET", &text.key, "twelve"]).await;
    for bad in [&list, &text] {
        let batch = [counter("ok", 1, 9), bad.clone()];
        let err = store
            .count(&batch, CheckId::new(), deadline())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "backend", "{err:?}");
        assert_eq!(
            run(&mut admin, &["GET", &batch[0].key]).await,
            Value::Nil,
            "nothing written"
        );
        let err = store
            .reserve(&batch, CheckId::new(), deadline())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), "backend", "{err:?}");
    }
    let err = store
        .get(std::slice::from_ref(&text.key), deadline())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "invalid-reply");
}
