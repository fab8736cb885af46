//! The proxy's protocol over real HTTP on loopback, in front of a private
//! redis-server: every endpoint, every error case, base64, scripts.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use reqwest::StatusCode;
use serde_json::{Value, json};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::{redis_info, unique};

mod support;

use support::{Proxy, error_of, send};

/// The sha1 Redis names a script by.
fn sha1(text: &str) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

fn base64_of(text: &str) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(text)
}

const LOCKING: &str =
    "#!lua flags=allow-key-locking\nreturn redis.call('INCRBY', KEYS[1], ARGV[1])";

// --- auth ---

#[tokio::test]
async fn a_missing_token_is_401_on_every_route() {
    let proxy = Proxy::start().await;
    for path in ["/", "/pipeline", "/multi-exec", "/incr/k"] {
        let (status, body) =
            send(proxy.http.post(proxy.url(path)).json(&json!(["incr", "k"]))).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{path}");
        assert_eq!(
            body,
            json!({"error": "WRONGPASS invalid or missing auth token"}),
            "{path}"
        );
    }
    let (status, _) = send(proxy.http.get(proxy.url("/get/k"))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn a_wrong_token_is_401() {
    let proxy = Proxy::start().await;
    let wrong = format!("{}x", proxy.token);
    let request = proxy
        .http
        .post(proxy.url("/"))
        .bearer_auth(&wrong)
        .json(&json!(["ping"]));
    let (status, body) = send(request).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert!(!body.to_string().contains(&proxy.token), "{body}");
    let prefix = &proxy.token[..proxy.token.len() - 1];
    let request = proxy
        .http
        .post(proxy.url("/"))
        .bearer_auth(prefix)
        .json(&json!(["ping"]));
    assert_eq!(send(request).await.0, StatusCode::UNAUTHORIZED);
    let (status, _) = send(proxy.http.get(proxy.url(&format!("/ping?_token={wrong}")))).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
}

#[tokio::test]
async fn the_token_may_come_in_the_query() {
    let proxy = Proxy::start().await;
    let key = unique();
    let url = proxy.url(&format!("/set/{key}/v?_token={}", proxy.token));
    assert_eq!(
        send(proxy.http.get(url)).await,
        (StatusCode::OK, json!({"result": "OK"}))
    );
    let url = proxy.url(&format!("/?_token={}", proxy.token));
    let (status, body) = send(proxy.http.post(url).json(&json!(["get", key]))).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": "v"})));
}

// --- POST / ---

#[tokio::test]
async fn post_root_runs_one_command_and_maps_its_reply() {
    let proxy = Proxy::start().await;
    let key = unique();
    assert_eq!(proxy.ok(json!(["set", key, "héllo"])).await, json!("OK"));
    assert_eq!(proxy.ok(json!(["get", key])).await, json!("héllo"));
    assert_eq!(proxy.ok(json!(["get", unique()])).await, Value::Null);
    let n = unique();
    assert_eq!(proxy.ok(json!(["incrby", n, 5])).await, json!(5));
    assert_eq!(proxy.ok(json!(["INCRBY", n, -2])).await, json!(3));
    let list = unique();
    assert_eq!(
        proxy.ok(json!(["rpush", list, "a", 1, 2.5])).await,
        json!(3)
    );
    assert_eq!(
        proxy.ok(json!(["lrange", list, 0, -1])).await,
        json!(["a", "1", "2.5"])
    );
    assert_eq!(proxy.ok(json!(["ping"])).await, json!("PONG"));
}

#[tokio::test]
async fn malformed_bodies_are_400_with_a_json_error() {
    let proxy = Proxy::start().await;
    let raw = |body: &'static str| {
        proxy
            .http
            .post(proxy.url("/"))
            .bearer_auth(&proxy.token)
            .body(body)
    };
    for (body, why) in [
        ("[\"get\"", "bad JSON"),
        ("{\"get\": \"k\"}", "not an array"),
        ("\"get\"", "not an array"),
        ("[]", "empty command"),
        ("[\"set\", \"k\", true]", "boolean argument"),
        ("[\"set\", \"k\", null]", "null argument"),
        ("[\"set\", [\"k\"]]", "array argument"),
        ("[\"set\", {\"k\": 1}]", "object argument"),
    ] {
        let (status, body) = send(raw(body)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{why}: {body}");
        assert!(error_of(&body).starts_with("ERR "), "{why}: {body}");
    }
    for (path, body, why) in [
        (
            "/pipeline",
            "[[\"get\", \"k\"], \"get\"]",
            "a command that is not an array",
        ),
        ("/pipeline", "[]", "an empty pipeline"),
        ("/multi-exec", "[[\"get\", \"k\"], []]", "an empty command"),
        ("/multi-exec", "{}", "not an array"),
    ] {
        let request = proxy
            .http
            .post(proxy.url(path))
            .bearer_auth(&proxy.token)
            .body(body);
        let (status, body) = send(request).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path} with {why}: {body}");
        assert!(body["error"].is_string(), "{path} with {why}: {body}");
    }
}

#[tokio::test]
async fn a_failing_command_is_400_with_the_redis_error_text() {
    let proxy = Proxy::start().await;
    let key = unique();
    proxy.ok(json!(["set", key, "not a number"])).await;
    let (status, body) = proxy.post("/", json!(["incr", key])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"error": "ERR value is not an integer or out of range"})
    );
    let (status, body) = proxy.post("/", json!(["lpush", key, "x"])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).starts_with("WRONGTYPE Operation against a key"),
        "{body}"
    );
    // A command Redis does not know is not on the allow-list either.
    let (status, body) = proxy.post("/", json!(["nosuchcommand", "a"])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error_of(&body),
        "ERR command is not allowed: NOSUCHCOMMAND is not on tollgate-rest-proxy's allow-list"
    );
}

#[tokio::test]
async fn commands_that_would_hold_the_shared_connection_are_refused() {
    let proxy = Proxy::start().await;
    for command in [
        json!(["multi"]),
        json!(["select", 1]),
        json!(["blpop", unique(), 0]),
        json!(["subscribe", "c"]),
    ] {
        let (status, body) = proxy.post("/", command.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{command}");
        assert!(
            error_of(&body).starts_with("ERR command is not allowed"),
            "{command}: {body}"
        );
    }
    // The shared connection is still in its normal state.
    assert_eq!(proxy.ok(json!(["ping"])).await, json!("PONG"));
}

// --- /pipeline ---

#[tokio::test]
async fn a_pipeline_answers_200_with_one_entry_per_command_errors_included() {
    let proxy = Proxy::start().await;
    let (k, s) = (unique(), unique());
    let (status, body) = proxy
        .post(
            "/pipeline",
            json!([
                ["set", s, "text"],
                ["incr", k],
                ["incr", s],
                ["get", k],
                ["blpop", k, 0],
                ["incr", k]
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let entries = body.as_array().expect("an array");
    assert_eq!(entries.len(), 6, "{body}");
    assert_eq!(entries[0], json!({"result": "OK"}));
    assert_eq!(entries[1], json!({"result": 1}));
    assert_eq!(
        entries[2],
        json!({"error": "ERR value is not an integer or out of range"})
    );
    assert_eq!(entries[3], json!({"result": "1"}));
    assert!(
        error_of(&entries[4]).starts_with("ERR command is not allowed"),
        "{body}"
    );
    assert_eq!(entries[5], json!({"result": 2}));
}

// --- /multi-exec ---

#[tokio::test]
async fn multi_exec_answers_each_command_of_the_transaction() {
    let proxy = Proxy::start().await;
    let (k, s) = (unique(), unique());
    let (status, body) = proxy
        .post(
            "/multi-exec",
            json!([
                ["set", s, "x"],
                ["incr", k],
                ["incr", s],
                ["incrby", k, 4],
                ["get", k]
            ]),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body,
        json!([
            {"result": "OK"},
            {"result": 1},
            {"error": "ERR value is not an integer or out of range"},
            {"result": 5},
            {"result": "5"}
        ])
    );
}

#[tokio::test]
async fn a_queue_time_error_discards_the_whole_transaction() {
    let proxy = Proxy::start().await;
    let (a, b) = (unique(), unique());
    let (status, body) = proxy
        .post(
            "/multi-exec",
            json!([["set", a, "1"], ["set", b], ["incr", a]]),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        body,
        json!({"error": "ERR wrong number of arguments for 'set' command"})
    );
    assert_eq!(
        proxy.ok(json!(["exists", a, b])).await,
        json!(0),
        "a command ran"
    );
    let (status, body) = proxy
        .post("/multi-exec", json!([["set", a, "1"], ["watch", b]]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(
        proxy.ok(json!(["exists", a])).await,
        json!(0),
        "a command ran"
    );
}

#[tokio::test]
async fn transactions_are_not_interleaved_with_other_traffic() {
    let proxy = std::sync::Arc::new(Proxy::start().await);
    let key = unique();
    let mut tasks = Vec::new();
    for i in 0..40 {
        let proxy = std::sync::Arc::clone(&proxy);
        let key = key.clone();
        tasks.push(tokio::spawn(async move {
            if i % 2 == 0 {
                let (status, body) = proxy
                    .post(
                        "/multi-exec",
                        json!([["incr", key], ["incr", key], ["get", key]]),
                    )
                    .await;
                assert_eq!(status, StatusCode::OK, "{body}");
                let first = body[0]["result"].as_i64().expect("a count");
                assert_eq!(body[1]["result"], json!(first + 1), "interleaved: {body}");
                assert_eq!(
                    body[2]["result"],
                    json!((first + 1).to_string()),
                    "interleaved: {body}"
                );
            } else {
                proxy.ok(json!(["incr", key])).await;
                proxy
                    .post("/pipeline", json!([["incr", key], ["incr", key]]))
                    .await;
            }
        }));
    }
    for task in tasks {
        task.await.expect("a task panicked");
    }
    assert_eq!(proxy.ok(json!(["get", key])).await, json!("100"));
}

// --- Upstash-Encoding: base64 ---

#[tokio::test]
async fn base64_encodes_every_string_except_a_top_level_ok() {
    let proxy = Proxy::start().await;
    let (key, list) = (unique(), unique());
    let (_, body) = proxy.post_base64("/", json!(["set", key, "héllo"])).await;
    assert_eq!(body, json!({"result": "OK"}));
    let (_, body) = proxy.post_base64("/", json!(["get", key])).await;
    assert_eq!(body, json!({"result": "aMOpbGxv"}));
    let (_, body) = proxy.post_base64("/", json!(["ping"])).await;
    assert_eq!(body, json!({"result": "UE9ORw=="}));
    let (_, body) = proxy.post_base64("/", json!(["incr", unique()])).await;
    assert_eq!(body, json!({"result": 1}));
    let (_, body) = proxy.post_base64("/", json!(["get", unique()])).await;
    assert_eq!(body, json!({"result": null}));
    proxy.ok(json!(["rpush", list, "a", "OK"])).await;
    let (_, body) = proxy.post_base64("/", json!(["lrange", list, 0, -1])).await;
    assert_eq!(body, json!({"result": ["YQ==", "T0s="]}));
    let script = "return {KEYS[1], {ARGV[1], 7}, redis.call('SET', KEYS[1], 'v')}";
    let (_, body) = proxy
        .post_base64("/", json!(["eval", script, 1, "k", "b"]))
        .await;
    assert_eq!(body, json!({"result": ["aw==", ["Yg==", 7], "T0s="]}));
    let (_, body) = proxy
        .post_base64(
            "/pipeline",
            json!([["set", key, "x"], ["get", key], ["lrange", list, 0, 0]]),
        )
        .await;
    assert_eq!(
        body,
        json!([{"result": "OK"}, {"result": "eA=="}, {"result": ["YQ=="]}])
    );
    let (_, body) = proxy
        .post_base64("/multi-exec", json!([["set", key, "y"], ["get", key]]))
        .await;
    assert_eq!(body, json!([{"result": "OK"}, {"result": "eQ=="}]));
    let (status, body) = proxy.post_base64("/", json!(["incr", list])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        error_of(&body).starts_with("WRONGTYPE"),
        "errors stay text: {body}"
    );
}

// --- the path form ---

#[tokio::test]
async fn the_path_form_runs_segments_as_a_command() {
    let proxy = Proxy::start().await;
    let key = unique();
    assert_eq!(
        proxy.get(&format!("/set/{key}/v%2F1%20x")).await,
        (StatusCode::OK, json!({"result": "OK"}))
    );
    assert_eq!(proxy.ok(json!(["get", key])).await, json!("v/1 x"));
    assert_eq!(
        proxy.get(&format!("/GET/{key}")).await,
        (StatusCode::OK, json!({"result": "v/1 x"}))
    );
    let counter = unique();
    assert_eq!(
        proxy.get(&format!("/incr/{counter}")).await.1,
        json!({"result": 1})
    );
    let request = proxy
        .http
        .post(proxy.url(&format!("/incr/{counter}")))
        .bearer_auth(&proxy.token);
    assert_eq!(send(request).await.1, json!({"result": 2}));
    let request = proxy
        .http
        .post(proxy.url(&format!("/set/{key}?EX=100")))
        .bearer_auth(&proxy.token)
        .body("the body [is] the value");
    assert_eq!(
        send(request).await,
        (StatusCode::OK, json!({"result": "OK"}))
    );
    assert_eq!(
        proxy.ok(json!(["get", key])).await,
        json!("the body [is] the value")
    );
    let ttl = proxy.ok(json!(["ttl", key])).await.as_i64().expect("a ttl");
    assert!((1..=100).contains(&ttl), "ttl {ttl}");
    let (status, body) = proxy.get(&format!("/incr/{key}")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        error_of(&body),
        "ERR value is not an integer or out of range"
    );
    let (status, body) = proxy.get("/").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    // Only GET and POST run a command; HEAD, PUT, DELETE run nothing.
    for method in [
        reqwest::Method::HEAD,
        reqwest::Method::PUT,
        reqwest::Method::DELETE,
    ] {
        let request = proxy
            .http
            .request(method.clone(), proxy.url(&format!("/set/{key}/{method}")))
            .bearer_auth(&proxy.token);
        let response = request.send().await.expect("a response");
        assert_eq!(
            response.status(),
            StatusCode::METHOD_NOT_ALLOWED,
            "{method}"
        );
    }
    assert_eq!(
        proxy.ok(json!(["get", key])).await,
        json!("the body [is] the value")
    );
    let (status, body) = send(
        proxy
            .http
            .get(proxy.url("/pipeline"))
            .bearer_auth(&proxy.token),
    )
    .await;
    assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{body}");
    // Only a POST runs a body's command, pipeline or transaction.
    for path in ["/", "/pipeline", "/multi-exec"] {
        let command = json!(["set", key, "not by a PUT"]);
        let body = if path == "/" {
            command
        } else {
            json!([command])
        };
        let request = proxy
            .http
            .put(proxy.url(path))
            .bearer_auth(&proxy.token)
            .json(&body);
        let (status, body) = send(request).await;
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "PUT {path}: {body}");
    }
    assert_eq!(
        proxy.ok(json!(["get", key])).await,
        json!("the body [is] the value")
    );
}

// --- limits and failures ---

#[tokio::test]
async fn a_body_over_max_body_is_413() {
    let proxy = Proxy::start_with(|o| o.max_body(256)).await;
    let big = "x".repeat(300);
    let (status, body) = proxy.post("/", json!(["set", unique(), big])).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    assert!(body["error"].is_string(), "{body}");
    let request = proxy
        .http
        .post(proxy.url(&format!("/set/{}", unique())))
        .bearer_auth(&proxy.token)
        .body(big.clone());
    assert_eq!(send(request).await.0, StatusCode::PAYLOAD_TOO_LARGE);
    let (status, _) = proxy
        .post("/pipeline", json!([["set", unique(), big]]))
        .await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
    assert_eq!(
        proxy.ok(json!(["set", unique(), "x".repeat(200)])).await,
        json!("OK")
    );
}

/// The default bound is 1 MiB: a body just under it is served, one just
/// over it is 413.
#[tokio::test]
async fn the_default_max_body_is_one_mebibyte() {
    let proxy = Proxy::start().await;
    // `["set","<key>","<value>"]`: the value fills the rest.
    let key = unique();
    let body = |len: usize| {
        let value = "x".repeat(len - key.len() - 13);
        json!(["set", key, value])
    };
    assert_eq!(body(1024).to_string().len(), 1024);
    let (status, reply) = proxy.post("/", body(1024 * 1024)).await;
    assert_eq!((status, reply), (StatusCode::OK, json!({"result": "OK"})));
    let (status, _) = proxy.post("/", body(1024 * 1024 + 1)).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE);
}

/// Connections the server has accepted so far.
async fn accepted(proxy: &Proxy) -> u64 {
    let info = proxy.info("stats").await;
    redis_info::field(&info, "total_connections_received")
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no total_connections_received in {info}"))
}

/// Calls one after the other share one connection, and transactions
/// reuse the connection an earlier one gave back: a burst of each opens
/// no connection per call.
#[tokio::test]
async fn calls_and_transactions_reuse_their_connections() {
    let proxy = Proxy::start().await;
    let key = unique();
    proxy.ok(json!(["incr", key])).await;
    let (status, _) = proxy.post("/multi-exec", json!([["incr", key]])).await;
    assert_eq!(status, StatusCode::OK);
    let before = accepted(&proxy).await;
    for _ in 0..20 {
        proxy.ok(json!(["incr", key])).await;
        let (status, _) = proxy.post("/multi-exec", json!([["incr", key]])).await;
        assert_eq!(status, StatusCode::OK);
    }
    // The administrator's own, to read INFO, and a few more should a
    // connection be lost under load; not one per call (40).
    let opened = accepted(&proxy).await - before;
    assert!(opened < 5, "{opened} connections opened for 40 calls");
}

/// At most 64 connections wait for the next transaction: after a burst of
/// 80 transactions at once (each reply held 200 ms on the wire, so that
/// nearly each has a connection of its own), 64 stay open, the others close.
#[tokio::test]
async fn at_most_64_connections_wait_for_the_next_transaction() {
    // Each transaction waits for three replies held back: well within 5 s.
    let (proxy, relay) =
        Proxy::through_relay_with(|o| o.redis_timeout(Duration::from_secs(5))).await;
    let key = unique();
    proxy.ok(json!(["incr", key])).await;
    let before = relay.connections();
    relay.delay_replies(Duration::from_millis(200));
    let mut burst = tokio::task::JoinSet::new();
    for _ in 0..80 {
        let request = proxy
            .http
            .post(proxy.url("/multi-exec"))
            .bearer_auth(&proxy.token)
            .json(&json!([["incr", key]]));
        burst.spawn(send(request));
    }
    for (status, body) in burst.join_all().await {
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    relay.delay_replies(Duration::ZERO);
    // More connections than the pool keeps, one per transaction at most.
    let opened = relay.connections() - before;
    assert!(opened > 64, "the burst opened only {opened} connections");
    let connected = || async {
        let list = proxy.admin_text(&["CLIENT", "LIST"]).await;
        list.lines()
            .filter(|line| line.contains(" user=tollgate-proxy "))
            .count()
    };
    // Closed connections leave the server's list soon after.
    let started = Instant::now();
    while connected().await != 65 && started.elapsed() < Duration::from_secs(5) {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert_eq!(
        connected().await,
        1 + 64,
        "the shared connection and the idle ones"
    );
}

/// Polls until the proxy answers PING again, for at most 10 s.
async fn wait_for_recovery(proxy: &Proxy) {
    let started = Instant::now();
    loop {
        let (status, body) = proxy.post("/", json!(["ping"])).await;
        if status == StatusCode::OK {
            assert_eq!(body, json!({"result": "PONG"}));
            return;
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "no recovery: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn redis_down_is_a_500_within_a_second_and_the_proxy_recovers() {
    let mut proxy = Proxy::start().await;
    let key = unique();
    proxy.ok(json!(["incr", key])).await;
    proxy.server.stop();
    for (path, body) in [
        ("/", json!(["incr", key])),
        ("/pipeline", json!([["incr", key]])),
        ("/multi-exec", json!([["incr", key]])),
    ] {
        let started = Instant::now();
        let (status, reply) = proxy.post(path, body).await;
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}: {reply}");
        assert!(error_of(&reply).starts_with("ERR redis"), "{path}: {reply}");
        assert!(
            started.elapsed() < Duration::from_millis(1500),
            "{path} took {:?}",
            started.elapsed()
        );
    }
    proxy.server.restart();
    wait_for_recovery(&proxy).await;
    assert_eq!(
        proxy.ok(json!(["incr", key])).await,
        json!(1),
        "a new, empty server"
    );
    let (status, body) = proxy.post("/multi-exec", json!([["incr", key]])).await;
    assert_eq!((status, body), (StatusCode::OK, json!([{"result": 2}])));
}

/// A reply garbled on the wire fails its call (Redis applied it) and
/// drops the connection it came on: the next call is served on a new one,
/// not failed on a connection left out of step with its replies.
#[tokio::test]
async fn a_garbled_reply_fails_its_call_and_the_next_call_connects_again() {
    let (proxy, relay) = Proxy::through_relay().await;
    let key = unique();
    assert_eq!(proxy.ok(json!(["incr", key])).await, json!(1));
    let connections = relay.connections();
    relay.garble_next_reply();
    let (status, reply) = proxy.post("/", json!(["incr", key])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{reply}");
    assert_eq!(proxy.ok(json!(["incr", key])).await, json!(3));
    assert_eq!(relay.connections(), connections + 1, "connected again once");
}

/// A connection that fails for another reason than its password (here the
/// reply to its handshake is lost) fails the call: the proxy sets its
/// user's rules only when Redis refuses the password (the user is gone),
/// never after a network fault, which would undo rules an operator changed
/// meanwhile.
#[tokio::test]
async fn a_connection_lost_in_its_handshake_does_not_set_the_user_again() {
    let (proxy, relay) = Proxy::through_relay().await;
    assert_eq!(proxy.ok(json!(["ping"])).await, json!("PONG"));
    // Run, not refused: the user check queues `ACL SETUSER` as a probe,
    // which Redis refuses.
    let set_user =
        || async { redis_info::command_runs(&proxy.info("commandstats").await, "acl|setuser") };
    let created = set_user().await;
    assert_eq!(created, Some(1), "the proxy created its user once");
    // The shared connection is lost with the reply to a call...
    relay.break_next_reply();
    let (status, reply) = proxy.post("/", json!(["ping"])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{reply}");
    // ... and the next connection with the reply to its handshake.
    relay.break_next_reply();
    let (status, reply) = proxy.post("/", json!(["ping"])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{reply}");
    assert_eq!(set_user().await, created, "the user was set again");
    assert_eq!(proxy.ok(json!(["ping"])).await, json!("PONG"));
    assert_eq!(set_user().await, created);
}

#[tokio::test]
async fn a_frozen_redis_is_a_500_within_a_second_not_a_hang() {
    let mut proxy = Proxy::start_with(|o| o.redis_timeout(Duration::from_millis(500))).await;
    proxy.ok(json!(["ping"])).await;
    proxy.server.freeze();
    for path in ["/", "/multi-exec", "/"] {
        let started = Instant::now();
        let body = if path == "/" {
            json!(["ping"])
        } else {
            json!([["ping"]])
        };
        let (status, reply) = proxy.post(path, body).await;
        let took = started.elapsed();
        assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{path}: {reply}");
        assert!(took < Duration::from_millis(1000), "{path} took {took:?}");
    }
    proxy.server.thaw();
    wait_for_recovery(&proxy).await;
}

// --- allow-key-locking scripts ---

#[tokio::test]
async fn stock_redis_refuses_the_allow_key_locking_flag() {
    // What the proxy exists to work around: sent directly, Redis refuses it.
    let server = RedisServer::start();
    let client = redis::Client::open(server.url()).expect("a redis URL");
    let mut conn = client
        .get_multiplexed_async_connection()
        .await
        .expect("connect");
    let error = redis::cmd("EVAL")
        .arg(LOCKING)
        .arg(1)
        .arg("k")
        .arg(1)
        .query_async::<redis::Value>(&mut conn)
        .await
        .expect_err(
            "stock Redis runs allow-key-locking scripts now: the proxy's rewrite may be moot",
        );
    assert!(
        error
            .to_string()
            .contains("Unexpected flag in script shebang"),
        "{error}"
    );
}

#[tokio::test]
async fn eval_runs_an_allow_key_locking_script_without_the_flag() {
    let proxy = Proxy::start().await;
    let key = unique();
    assert_eq!(
        proxy.ok(json!(["eval", LOCKING, 1, key, 3])).await,
        json!(3)
    );
    assert_eq!(
        proxy.ok(json!(["EVAL", LOCKING, 1, key, 4])).await,
        json!(7)
    );
    // Other flags stay: no-writes still forbids a write.
    let no_writes =
        "#!lua flags=allow-key-locking,no-writes\nreturn redis.call('SET', KEYS[1], 'x')";
    let (status, body) = proxy.post("/", json!(["eval", no_writes, 1, key])).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(
        error_of(&body).contains("Write commands are not allowed"),
        "{body}"
    );
    let read_only = "#!lua flags=no-writes,allow-key-locking\nreturn redis.call('GET', KEYS[1])";
    assert_eq!(
        proxy.ok(json!(["eval_ro", read_only, 1, key])).await,
        json!("7")
    );
}

/// A rewritten script that fails (not for NOSCRIPT) by its original sha
/// is answered its failure: it ran once, and is not sent again as EVAL.
/// A script call that did not time out kills no script.
#[tokio::test]
async fn a_failing_rewritten_script_runs_once() {
    let proxy = Proxy::start().await;
    let key = unique();
    let failing = "#!lua flags=allow-key-locking\n\
        redis.call('INCR', KEYS[1]) return redis.error_reply('ERR boom')";
    for (command, runs) in [("eval", failing.to_owned()), ("evalsha", sha1(failing))] {
        let (status, body) = proxy.post("/", json!([command, runs, 1, key])).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{command}: {body}");
        assert_eq!(error_of(&body), "ERR boom", "{command}");
    }
    assert_eq!(proxy.ok(json!(["get", key])).await, json!("2"), "runs");
    sends_no_script_kill(&proxy).await;
}

/// Gives a kill the proxy might try in the background 300 ms to reach
/// Redis, then checks that none did.
async fn sends_no_script_kill(proxy: &Proxy) {
    tokio::time::sleep(Duration::from_millis(300)).await;
    let stats = proxy.info("commandstats").await;
    assert_eq!(
        redis_info::command_calls(&stats).get("script|kill"),
        None,
        "{stats}"
    );
}

/// A script call that fails on the link, but not for lack of time (its
/// reply garbled on the wire), sends no `SCRIPT KILL`: the script ended,
/// and a kill would stop whatever script another client runs.
#[tokio::test]
async fn a_script_call_failing_other_than_by_timeout_kills_no_script() {
    let (proxy, relay) = Proxy::through_relay().await;
    let key = unique();
    assert_eq!(
        proxy.ok(json!(["eval", LOCKING, 1, key, 3])).await,
        json!(3)
    );
    relay.garble_next_reply();
    let (status, body) = proxy.post("/", json!(["eval", LOCKING, 1, key, 4])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    sends_no_script_kill(&proxy).await;
}

/// Only `SCRIPT LOAD` loads a script: another command whose first argument
/// is `load` (here a SET of the key `load`) is sent as it came.
#[tokio::test]
async fn a_command_that_only_looks_like_script_load_is_sent_as_is() {
    let proxy = Proxy::start().await;
    assert_eq!(proxy.ok(json!(["set", "load", LOCKING])).await, json!("OK"));
    assert_eq!(proxy.ok(json!(["get", "load"])).await, json!(LOCKING));
}

#[tokio::test]
async fn evalsha_of_the_original_sha_runs_the_stripped_script() {
    let proxy = Proxy::start().await;
    let key = unique();
    let original = sha1(LOCKING);
    // Unknown yet: Redis answers NOSCRIPT, as clients expect before they EVAL.
    let (status, body) = proxy
        .post("/", json!(["evalsha", original, 1, key, 1]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).starts_with("NOSCRIPT"), "{body}");
    assert_eq!(
        proxy.ok(json!(["eval", LOCKING, 1, key, 1])).await,
        json!(1)
    );
    assert_eq!(
        proxy.ok(json!(["evalsha", original, 1, key, 1])).await,
        json!(2)
    );
    assert_eq!(
        proxy
            .ok(json!(["EVALSHA", original.to_uppercase(), 1, key, 1]))
            .await,
        json!(3)
    );
    // After Redis forgets its scripts, the proxy loads the stripped one again.
    proxy.admin(&["script", "flush"]).await;
    assert_eq!(
        proxy.ok(json!(["evalsha", original, 1, key, 1])).await,
        json!(4)
    );
    let (_, body) = proxy
        .post(
            "/pipeline",
            json!([
                ["evalsha", original, 1, key, 1],
                ["evalsha", original, 1, key, 1]
            ]),
        )
        .await;
    assert_eq!(body, json!([{"result": 5}, {"result": 6}]));
    proxy.admin(&["script", "flush"]).await;
    let (_, body) = proxy
        .post(
            "/multi-exec",
            json!([["get", key], ["evalsha", original, 1, key, 1]]),
        )
        .await;
    assert_eq!(body, json!([{"result": "6"}, {"result": 7}]));
}

#[tokio::test]
async fn script_load_answers_the_original_sha() {
    let proxy = Proxy::start().await;
    let key = unique();
    let script = format!("{LOCKING} -- {key}");
    let original = sha1(&script);
    assert_eq!(
        proxy.ok(json!(["script", "load", script])).await,
        json!(original)
    );
    assert_eq!(
        proxy.ok(json!(["evalsha", original, 1, key, 2])).await,
        json!(2)
    );
    let (_, body) = proxy
        .post_base64("/", json!(["script", "load", script]))
        .await;
    assert_eq!(body["result"], json!(base64_of(&original)));
    // A script without the flag is Redis's own business.
    let plain = format!("return '{key}'");
    assert_eq!(
        proxy.ok(json!(["script", "load", plain])).await,
        json!(sha1(&plain))
    );
    let (status, body) = proxy
        .post("/", json!(["evalsha", sha1("return 'never loaded'"), 0]))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(error_of(&body).starts_with("NOSCRIPT"), "{body}");
}
