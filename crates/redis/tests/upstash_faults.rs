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
            Canned::Json(200, r#"{"result":[[1,2]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[[1,2,3,4,5,6]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, "<html>gateway</html>".into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[["1","1","1","1"]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[[1,1,-1,1]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[[1,1,9007199254740993,1]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[[0,0,0,0.5]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":null}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(200, r#"{"result":[[1,1,1,1],[1,1,1,1]]}"#.into()),
            "invalid-reply",
        ),
        (
            Canned::Json(
                200,
                r#"{"result":[{"error":"ERR counter is not an integer"}]}"#.into(),
            ),
            "backend",
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
        Canned::Json(200, r#"{"result":[[3]]}"#.into()),
        Canned::Json(200, r#"{"result":[[4]]}"#.into()),
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
    assert_eq!(sent[1].body[1], tollgate_redis::scripts::CHECK);
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

/// The longest reply body the store reads: 1 MiB, as documented.
const MAX_BODY: usize = 1 << 20;

/// What a [`Hostile`] endpoint answers.
#[derive(Clone, Copy, Debug)]
enum Body {
    /// `Content-Length: n`: `n` bytes, JSON whitespace then a valid reply.
    Sized(usize),
    /// Chunked: `n` bytes, JSON whitespace then a valid reply.
    Chunked(usize),
    /// Chunked whitespace without end: up to [`ENDLESS_CAP`], then nothing
    /// more, the connection held open (a real endless body would exhaust
    /// the memory of a test run whose bound was removed).
    Endless,
}

/// How much an [`Body::Endless`] body sends at most before it stalls.
const ENDLESS_CAP: usize = 64 << 20;

/// The valid reply to a count of one counter, at the end of every body.
const REPLY: &[u8] = br#"{"result":[[1]]}"#;

/// A hostile HTTP endpoint (not a fake of Upstash): it answers every
/// request with `status` and a huge or endless body, and records for each
/// connection how many body bytes it wrote and whether the client hung up.
struct Hostile {
    port: u16,
    sent: std::sync::Arc<std::sync::Mutex<Vec<(usize, bool)>>>,
}

impl Hostile {
    async fn start(status: u16, body: Body) -> Hostile {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};

        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let sent = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let record = std::sync::Arc::clone(&sent);
        tokio::spawn(async move {
            while let Ok((mut stream, _)) = listener.accept().await {
                let record = std::sync::Arc::clone(&record);
                tokio::spawn(async move {
                    // The request: its head, then the body it declares.
                    let mut request = Vec::new();
                    let mut buf = [0; 4096];
                    loop {
                        match stream.read(&mut buf).await {
                            Ok(0) | Err(_) => return,
                            Ok(n) => request.extend_from_slice(&buf[..n]),
                        }
                        let text = String::from_utf8_lossy(&request).to_lowercase();
                        let Some(end) = text.find("\r\n\r\n") else {
                            continue;
                        };
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                    let (framing, total) = match body {
                        Body::Sized(n) => (format!("content-length: {n}"), n),
                        Body::Chunked(n) => ("transfer-encoding: chunked".to_owned(), n),
                        Body::Endless => ("transfer-encoding: chunked".to_owned(), ENDLESS_CAP),
                    };
                    let head = format!(
                        "HTTP/1.1 {status} X\r\ncontent-type: application/json\r\n{framing}\r\n\r\n"
                    );
                    if stream.write_all(head.as_bytes()).await.is_err() {
                        return;
                    }
                    let chunked = !matches!(body, Body::Sized(_));
                    let padding = match body {
                        Body::Endless => total,
                        _ => total - REPLY.len(),
                    };
                    let spaces = vec![b' '; 16 * 1024];
                    let mut written = 0;
                    let mut hung_up = false;
                    while written < total {
                        let piece = if written < padding {
                            &spaces[..spaces.len().min(padding - written)]
                        } else {
                            REPLY
                        };
                        let framed = if chunked {
                            let mut framed = format!("{:x}\r\n", piece.len()).into_bytes();
                            framed.extend_from_slice(piece);
                            framed.extend_from_slice(b"\r\n");
                            framed
                        } else {
                            piece.to_vec()
                        };
                        if stream.write_all(&framed).await.is_err() {
                            hung_up = true;
                            break;
                        }
                        written += piece.len();
                    }
                    if chunked && !hung_up && !matches!(body, Body::Endless) {
                        hung_up = stream.write_all(b"0\r\n\r\n").await.is_err();
                    }
                    record.lock().unwrap().push((written, hung_up));
                    if matches!(body, Body::Endless) && !hung_up {
                        // Stalls, holding the connection open.
                        tokio::time::sleep(Duration::from_secs(30)).await;
                    }
                });
            }
        });
        Hostile { port, sent }
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Per connection: body bytes written, and whether the client hung up;
    /// waits up to 5 s for `n` connections to be done.
    async fn sent(&self, n: usize) -> Vec<(usize, bool)> {
        let started = Instant::now();
        while self.sent.lock().unwrap().len() < n && started.elapsed() < Duration::from_secs(5) {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.sent.lock().unwrap().clone()
    }
}

/// One direct count of one counter against `endpoint`, with a 5 s deadline:
/// its counts or its error kind, and how long it took.
async fn count_against(endpoint: &Hostile) -> (Result<Vec<u64>, &'static str>, Duration) {
    let store = UpstashStore::open(&endpoint.url(), TOKEN).unwrap();
    let started = Instant::now();
    let counted = store
        .count(
            &[counter("c", 1, 9)],
            CheckId::new(),
            Deadline::after(Duration::from_secs(5)),
        )
        .await;
    (counted.map_err(|e| e.kind()), started.elapsed())
}

/// A reply body is read up to 1 MiB and no further: a longer one, declared
/// so or found so while reading it, chunked or endless, is `InvalidReply`
/// at once (not a count, though each body but the endless one ends in a
/// valid reply, and not a wait for the deadline), and the store hangs up
/// rather than drain it; a body of exactly 1 MiB is read.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_reply_body_over_one_mib_is_an_invalid_reply_read_no_further() {
    for body in [Body::Sized(MAX_BODY), Body::Chunked(MAX_BODY)] {
        let endpoint = Hostile::start(200, body).await;
        let (counted, took) = count_against(&endpoint).await;
        assert_eq!(counted, Ok(vec![1]), "{body:?} ({took:?})");
    }
    for body in [
        Body::Sized(MAX_BODY + 1),
        Body::Sized(8 * MAX_BODY),
        Body::Chunked(MAX_BODY + 1),
        Body::Chunked(8 * MAX_BODY),
        Body::Endless,
    ] {
        let endpoint = Hostile::start(200, body).await;
        let (counted, took) = count_against(&endpoint).await;
        assert_eq!(counted, Err("invalid-reply"), "{body:?} ({took:?})");
        assert!(took < Duration::from_secs(1), "{body:?} took {took:?}");
    }
    // The client hung up on an endless body long before its end (what the
    // kernel buffers on loopback is far less than the 64 MiB sent at most).
    let endpoint = Hostile::start(200, Body::Endless).await;
    let _ = count_against(&endpoint).await;
    let sent = endpoint.sent(1).await;
    assert!(
        matches!(sent[..], [(written, true)] if written < ENDLESS_CAP / 2),
        "{sent:?}"
    );
    // Another status says what happened by itself, whatever its body.
    let endpoint = Hostile::start(503, Body::Endless).await;
    let (counted, took) = count_against(&endpoint).await;
    assert_eq!(counted, Err("busy"), "({took:?})");
    assert!(took < Duration::from_secs(1), "took {took:?}");
}
