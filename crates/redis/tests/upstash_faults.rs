//! The REST store when things fail: the proxy killed or frozen, Redis down
//! behind it, and an endpoint answering what no Upstash server should. Every
//! check goes through `Limiter::new(store)` (the default retry policy: 350 ms
//! at worst) and must come back within [`BOUND`], then recover by itself.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use support::frozen::Frozen;
use support::upstash::fake::{Canned, FakeServer};
use support::upstash::proxy::Proxy;
use support::upstash::{BOUND, TOKEN};
use support::{
    SHORT, SHORT_BOUND, assert_a_short_check_gives_up_in_time, assert_held_within_the_short_bound,
    counter, deadline, limits,
};
use tollgate_core::{CheckId, CounterStore, Deadline, Error, Limiter};
use tollgate_redis::upstash::UpstashStore;
use tollgate_test_support::Logs;
use tollgate_test_support::redis_server::RedisServer;

async fn timed<F: std::future::Future>(what: &str, check: F) -> F::Output {
    let started = Instant::now();
    let output = check.await;
    let took = started.elapsed();
    println!("{what}: {took:?}");
    assert!(took < BOUND, "{what} took {took:?}, over {BOUND:?}");
    output
}

/// Fail-open allows (degraded), fail-closed counts and reserves are
/// `Unavailable`, each within the bound; the store error has `kind` (or
/// is the breaker's, once it opened).
async fn assert_bounded(limiter: &Limiter, situation: &str, kind: &str) {
    let limits = limits(4);
    let verdict = timed(&format!("{situation}: within"), limiter.within(&limits)).await;
    assert!(
        verdict.is_allowed() && verdict.is_degraded(),
        "{situation}: {verdict:?}"
    );
    for (op, result) in [
        (
            "count",
            timed(&format!("{situation}: count"), limiter.count(&limits)).await,
        ),
        (
            "reserve",
            timed(&format!("{situation}: reserve"), limiter.reserve(&limits)).await,
        ),
    ] {
        match result {
            // Or, once the breaker opened, answered without the store.
            Err(Error::Unavailable(err)) => assert!(
                [kind, "breaker-open"].contains(&err.kind()),
                "{situation}: {op}: {err:?}"
            ),
            other => panic!("{situation}: {op}: {other:?}"),
        }
    }
}

async fn assert_healthy(limiter: &Limiter, situation: &str) {
    let limits = limits(4);
    support::until_answered(limiter, &support::limits(1), situation).await;
    let counted = limiter.count(&limits).await;
    assert!(
        counted
            .as_ref()
            .is_ok_and(|v| v.is_allowed() && !v.is_degraded()),
        "{situation}: {counted:?}"
    );
    let reserved = limiter.reserve(&limits).await;
    assert!(
        reserved
            .as_ref()
            .is_ok_and(|v| v.is_allowed() && !v.is_degraded()),
        "{situation}: {reserved:?}"
    );
    assert_eq!(reserved.unwrap().usage()[0].remaining(), 998, "{situation}");
}

fn server() -> RedisServer {
    RedisServer::start()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn killed_proxy_fails_within_the_bound_and_recovers() {
    let server = server();
    let mut proxy = Proxy::start(&server.url());
    let store = UpstashStore::open(&proxy.url(), TOKEN).unwrap();
    let limiter = Limiter::new(store.clone());
    assert_healthy(&limiter, "before the kill").await;

    proxy.stop();
    let logs = Logs::default();
    logs.capture(assert_bounded(&limiter, "killed, round 0", "connection"))
        .await;
    assert!(logs.text().contains("fail-open"), "{}", logs.text());
    for round in 1..3 {
        assert_bounded(&limiter, &format!("killed, round {round}"), "connection").await;
    }
    let err = store.get(&["k".into()], deadline()).await.unwrap_err();
    assert_eq!(err.kind(), "connection");

    proxy.restart();
    assert_healthy(&limiter, "after the restart").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn store_opens_while_nothing_listens_and_serves_once_the_proxy_starts() {
    let server = server();
    let mut proxy = Proxy::start(&server.url());
    proxy.stop();
    let limiter = Limiter::new(UpstashStore::open(&proxy.url(), TOKEN).unwrap());
    assert_bounded(&limiter, "not started yet", "connection").await;
    proxy.restart();
    assert_healthy(&limiter, "once started").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frozen_proxy_fails_within_the_bound_and_recovers_when_replaced() {
    let server = server();
    let frozen = Frozen::start(0).await;
    let port = frozen.port();
    let limiter = Limiter::new(UpstashStore::open(&frozen.url(), TOKEN).unwrap());
    for round in 0..2 {
        assert_bounded(&limiter, &format!("frozen, round {round}"), "timeout").await;
    }
    frozen.stop().await;
    let _proxy = Proxy::start_on(port, &server.url());
    assert_healthy(&limiter, "after the thaw").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_down_behind_the_proxy_fails_within_the_bound_and_recovers() {
    let mut server = server();
    let proxy = Proxy::start(&server.url());
    let store = UpstashStore::open(&proxy.url(), TOKEN).unwrap();
    let limiter = Limiter::new(store.clone());
    assert_healthy(&limiter, "before the kill").await;

    server.stop();
    for round in 0..3 {
        assert_bounded(
            &limiter,
            &format!("redis down, round {round}"),
            "connection",
        )
        .await;
    }
    // The proxy answers HTTP 500 at once: a transient failure, retried.
    let err = store
        .count(&[counter("c", 1, 9)], CheckId::new(), deadline())
        .await
        .unwrap_err();
    assert!(err.is_transient(), "{err:?}");

    server.restart();
    assert_healthy(&limiter, "after the restart").await;
}

/// A fake endpoint answering `canned` to every attempt of one check.
async fn fake(canned: Canned) -> (FakeServer, UpstashStore) {
    let fake = FakeServer::start(vec![canned; 16]).await;
    let store = UpstashStore::open(&fake.url(), TOKEN).unwrap();
    (fake, store)
}

fn truncated_by_length() -> Canned {
    Canned::Raw(
        b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 64\r\n\r\n{\"result\":[1,"
            .to_vec(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn malformed_answers_are_typed_errors_never_a_count_taken_as_zero() {
    let cases = [
        (
            Canned::Json(
                200,
                r#"{"error":"WRONGTYPE Operation against a key"}"#.into(),
            ),
            "backend",
        ),
        (
            Canned::Json(200, r#"{"result":[1,2,"#.into()),
            "invalid-reply",
        ),
        (truncated_by_length(), "invalid-reply"),
        (
            Canned::Json(200, r#"{"result":[1,2]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[1,2,3,4,5,6]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, "<html>gateway</html>".into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":["1","1","1","1"]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[1,1,-1,1]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[1,1,9007199254740993,1]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[0,0,0,0.5]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":null}"#.into()),
            "invalid-reply",
        ),
        (Canned::Json(200, "[]".into()), "invalid-reply"),
    ];
    for (canned, kind) in cases {
        let what = format!("{canned:?}");
        let (fake, store) = fake(canned).await;
        let limiter = Limiter::new(store.clone());
        let counted = timed(&what, limiter.count(&limits(4))).await;
        match counted {
            Err(Error::Unavailable(err)) => assert_eq!(err.kind(), kind, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
        // Permanent: the limiter sent one request, never a retry.
        assert_eq!(fake.requests().len(), 1, "{what}");
        let verdict = limiter.within(&limits(4)).await;
        assert!(verdict.is_degraded(), "{what}: {verdict:?}");
        // The store itself refuses the answer (the core checks counts too).
        let batch: Vec<_> = (0..4).map(|_| counter("c", 1, 9)).collect();
        let direct = store.count(&batch, CheckId::new(), deadline()).await;
        assert_eq!(direct.map_err(|e| e.kind()), Err(kind), "{what}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_token_is_a_permanent_failure_logged_once_without_the_token() {
    let body = r#"{"error":"WRONGPASS invalid or missing auth token"}"#;
    let (fake, store) = fake(Canned::Json(401, body.into())).await;
    let limiter = Limiter::new(store.clone());
    let logs = Logs::default();
    let errors = logs
        .capture_from(tracing::Level::DEBUG, async {
            let mut errors = Vec::new();
            for _ in 0..3 {
                errors.push(limiter.count(&limits(2)).await.unwrap_err());
            }
            errors.push(Error::Unavailable(
                store
                    .reserve(&[counter("c", 1, 2)], CheckId::new(), deadline())
                    .await
                    .unwrap_err(),
            ));
            errors
        })
        .await;
    assert_eq!(
        fake.requests().len(),
        4,
        "a permanent failure is not retried"
    );
    let text = logs.text();
    assert_eq!(
        text.matches("ERROR tollgate_redis::upstash").count(),
        1,
        "{text}"
    );
    assert!(text.contains("refused the token"), "{text}");
    for err in &errors {
        let Error::Unavailable(source) = err else {
            panic!("{err:?}");
        };
        assert_eq!(source.kind(), "backend");
        assert!(!source.is_transient());
        let mut chain = format!("{err:?}");
        let mut cause: Option<&dyn std::error::Error> = Some(err);
        while let Some(e) = cause {
            chain.push_str(&e.to_string());
            cause = e.source();
        }
        assert!(chain.contains("127.0.0.1:"), "{chain}");
        assert!(
            !chain.contains(TOKEN) && !chain.contains("http://"),
            "{chain}"
        );
    }
    assert!(!text.contains(TOKEN), "{text}");
    assert!(!format!("{store:?}").contains(TOKEN));
    let sent = fake.requests();
    assert_eq!(
        sent[0].authorization.as_deref(),
        Some(&*format!("Bearer {TOKEN}"))
    );
    assert_eq!(sent[0].path, "/");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transient_answers_are_retried_twice_and_fail_within_the_bound() {
    for (canned, kind) in [
        (
            Canned::Json(500, r#"{"error":"ERR redis is unavailable"}"#.into()),
            "connection",
        ),
        (Canned::Json(502, String::new()), "connection"),
        (
            Canned::Json(429, r#"{"error":"ERR max requests limit exceeded"}"#.into()),
            "busy",
        ),
        (
            Canned::Json(400, r#"{"error":"LOADING Redis is loading"}"#.into()),
            "busy",
        ),
        (
            Canned::Json(400, r#"{"error":"READONLY You can't write"}"#.into()),
            "busy",
        ),
    ] {
        let what = format!("{canned:?}");
        let (fake, store) = fake(canned).await;
        let limiter = Limiter::new(store);
        match timed(&what, limiter.reserve(&limits(4))).await {
            Err(Error::Unavailable(err)) => assert_eq!(err.kind(), kind, "{what}"),
            other => panic!("{what}: {other:?}"),
        }
        assert_eq!(
            fake.requests().len(),
            3,
            "{what}: one attempt and two retries"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_noscript_answer_costs_exactly_one_more_request() {
    let fake = FakeServer::start(vec![
        Canned::Json(
            400,
            r#"{"error":"NOSCRIPT No matching script. Please use EVAL."}"#.into(),
        ),
        Canned::Json(200, r#"{"result":[3]}"#.into()),
        Canned::Json(200, r#"{"result":[4]}"#.into()),
    ])
    .await;
    let store = UpstashStore::open(&fake.url(), TOKEN).unwrap();
    let c = counter("c", 1, 9);
    assert_eq!(
        store
            .count(std::slice::from_ref(&c), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![3]
    );
    assert_eq!(fake.requests().len(), 2);
    assert_eq!(
        store
            .count(std::slice::from_ref(&c), CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![4]
    );
    let sent = fake.requests();
    assert_eq!(sent.len(), 3);
    let names: Vec<_> = sent
        .iter()
        .map(|r| r.body[0].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(names, ["EVALSHA", "EVAL", "EVALSHA"]);
    assert_eq!(sent[1].body[1], tollgate_redis::scripts::COUNT);
    assert_eq!(sent[0].body[1], sent[2].body[1]);
}

/// The REST store waits for nothing longer than the limiter's policy
/// allows, and ends each request at its deadline by itself, for a client
/// whose dropped requests are not stopped (a runtime that does not cancel
/// them): against an endpoint that accepts connections and never answers,
/// a limiter of one 25 ms attempt is unavailable within its budget, and a
/// call made directly with a 25 ms deadline is a timeout by then, each
/// connection closed (without a deadline of its own, the direct call would
/// wait for ever).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_short_policy_and_a_request_deadline_bound_every_wait() {
    let frozen = Frozen::start(0).await;
    let store = UpstashStore::open(&frozen.url(), TOKEN).unwrap();
    assert_a_short_check_gives_up_in_time(store.clone(), &limits(2), &frozen, "upstash").await;
    let started = Instant::now();
    let direct = store
        .count(
            &[counter("a", 1, 5)],
            CheckId::new(),
            Deadline::after(SHORT.timeout),
        )
        .await;
    let took = started.elapsed();
    assert_eq!(direct.map_err(|e| e.kind()), Err("timeout"));
    assert!(took < SHORT_BOUND, "a 25 ms call took {took:?}");
    let held = frozen.closed(2, Duration::from_secs(2)).await;
    assert_eq!(held.len(), 2, "{held:?}");
    assert_held_within_the_short_bound(&frozen, "upstash").await;
}
