//! Closed by default: with the right token, what administers, empties or
//! stalls the server is refused on every route and changes nothing, scripts
//! included (the proxy's Redis user is restricted by a real Redis ACL), and
//! a slow client cannot hold a connection.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use percent_encoding::{NON_ALPHANUMERIC, utf8_percent_encode};
use reqwest::StatusCode;
use serde_json::{Value, json};
use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;
use tollgate_rest_proxy::{Error, Options, Proxy as Server};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::{redis_info, unique};

mod support;

use support::{Proxy, error_of};

/// What a token holder must not be able to do.
fn refused_commands() -> Vec<Value> {
    vec![
        json!(["FLUSHALL"]),
        json!(["flushdb"]),
        json!(["CONFIG", "SET", "appendonly", "yes"]),
        json!(["config", "set", "requirepass", "locked-out"]),
        json!(["SWAPDB", "0", "1"]),
        json!(["SHUTDOWN", "NOSAVE"]),
        json!(["REPLICAOF", "127.0.0.1", "1"]),
        json!(["ACL", "SETUSER", "default", "off"]),
        json!(["KEYS", "*"]),
        json!([
            "FUNCTION",
            "LOAD",
            "#!lua name=lib\nredis.register_function('f', function() return 1 end)"
        ]),
        json!(["SCRIPT", "FLUSH"]),
        json!(["DEBUG", "SLEEP", "0"]),
        json!(["MODULE", "LIST"]),
    ]
}

/// Scripts that call what the token holder must not run: Redis's ACL stops
/// the call inside the script.
fn refused_scripts() -> Vec<Value> {
    vec![
        json!(["EVAL", "return redis.call('FLUSHALL')", "0"]),
        json!(["EVAL", "return redis.call('SWAPDB', '0', '1')", "0"]),
        json!(["EVAL", "return redis.call('FLUSHDB')", "0"]),
        json!(["EVAL", "return redis.pcall('KEYS', '*')", "0"]),
    ]
}

/// What the administrator sees of the server: the key planted in
/// databases 0 and 1, the settings the commands would change, its role.
async fn state(proxy: &Proxy, key: &str) -> Vec<redis::Value> {
    let mut seen = vec![
        proxy.admin(&["GET", key]).await,
        proxy.admin(&["CONFIG", "GET", "appendonly"]).await,
        proxy.admin(&["CONFIG", "GET", "requirepass"]).await,
        proxy.admin(&["ROLE"]).await,
        proxy.admin(&["ACL", "LIST"]).await,
        proxy.admin(&["FUNCTION", "LIST"]).await,
    ];
    seen.push(
        proxy
            .admin(&["SCRIPT", "EXISTS", &sha1("return 'planted'")])
            .await,
    );
    seen
}

fn sha1(text: &str) -> String {
    sha1_smol::Sha1::from(text).digest().to_string()
}

/// The path form of a command: its arguments percent-encoded as segments.
fn path_of(command: &Value) -> String {
    command
        .as_array()
        .expect("a command")
        .iter()
        .map(|a| {
            let text = a.as_str().expect("a string argument");
            format!("/{}", utf8_percent_encode(text, NON_ALPHANUMERIC))
        })
        .collect()
}

#[tokio::test]
async fn every_route_refuses_administration_and_changes_nothing() {
    let proxy = Proxy::start().await;
    let key = unique();
    proxy.admin(&["SET", &key, "planted"]).await;
    proxy.admin(&["SCRIPT", "LOAD", "return 'planted'"]).await;
    let before = state(&proxy, &key).await;
    let acl_refusal = "can't run this command or subcommand";
    for command in refused_commands().into_iter().chain(refused_scripts()) {
        let is_script = command[0] == "EVAL";
        let expected = if is_script {
            acl_refusal
        } else {
            "ERR command is not allowed: "
        };
        let (status, body) = proxy.post("/", command.clone()).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "POST / {command}: {body}");
        assert!(
            error_of(&body).contains(expected),
            "POST / {command}: {body}"
        );

        let (status, body) = proxy
            .post("/pipeline", json!([command, ["GET", key]]))
            .await;
        assert_eq!(status, StatusCode::OK, "/pipeline {command}: {body}");
        assert!(
            error_of(&body[0]).contains(expected),
            "/pipeline {command}: {body}"
        );
        assert_eq!(body[1], json!({"result": "planted"}), "{body}");

        let (status, body) = proxy
            .post("/multi-exec", json!([["GET", key], command]))
            .await;
        if is_script {
            // Queued, then refused inside EXEC: the transaction's other
            // commands ran, the refused call did nothing.
            assert_eq!(status, StatusCode::OK, "/multi-exec {command}: {body}");
            assert!(error_of(&body[1]).contains(acl_refusal), "{body}");
        } else {
            assert_eq!(
                status,
                StatusCode::BAD_REQUEST,
                "/multi-exec {command}: {body}"
            );
            assert!(
                error_of(&body).contains(expected),
                "/multi-exec {command}: {body}"
            );
        }

        let path = path_of(&command);
        let (status, body) = proxy.get(&path).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "GET {path}: {body}");
        assert!(error_of(&body).contains(expected), "GET {path}: {body}");

        let head = proxy
            .http
            .head(proxy.url(&path))
            .bearer_auth(&proxy.token)
            .send()
            .await
            .expect("a response");
        assert_eq!(head.status(), StatusCode::METHOD_NOT_ALLOWED, "HEAD {path}");
        assert_eq!(state(&proxy, &key).await, before, "after {command}");
    }
    // The server is up, a master, with its data: and the proxy still serves.
    assert_eq!(proxy.ok(json!(["GET", key])).await, json!("planted"));
}

#[tokio::test]
async fn the_proxy_serves_nothing_as_an_unrestricted_user() {
    let server = RedisServer::start();
    let key = unique();
    let planted = Options::new(server.url(), "t").allow_unrestricted_user();
    let app = Server::new(planted).expect("a proxy").router();
    let (status, _) = call(app, json!(["SET", key, "planted"])).await;
    assert_eq!(status, StatusCode::OK);

    let proxy = Server::new(Options::new(server.url(), "t")).expect("a proxy");
    let refused = proxy.connect().await;
    assert!(
        matches!(&refused, Err(Error::RedisUser(why)) if why.contains("\"default\" can run FLUSHALL")),
        "{refused:?}"
    );
    let (status, body) = call(
        proxy.router(),
        json!(["EVAL", "return redis.call('FLUSHALL')", "0"]),
    )
    .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    assert!(error_of(&body).contains("not on the allow-list"), "{body}");
    let mut conn = admin(&server).await;
    let kept: Option<String> = redis::cmd("GET")
        .arg(&key)
        .query_async(&mut conn)
        .await
        .unwrap();
    assert_eq!(kept.as_deref(), Some("planted"));
}

#[tokio::test]
async fn a_user_made_from_print_acl_is_accepted_and_holds_scripts() {
    let server = RedisServer::start();
    let line = tollgate_rest_proxy::acl_setuser_line(&server.url(), "made-by-hand")
        .await
        .expect("the ACL line");
    assert!(
        line.starts_with(
            "ACL SETUSER made-by-hand on resetkeys ~* resetchannels clearselectors -@all +"
        ),
        "{line}"
    );
    assert!(
        !line.contains("+flushall") && !line.contains("+config") && !line.contains("+keys "),
        "{line}"
    );
    as_admin(&server, &format!("{line} >by-hand-pw")).await;
    let url = format!(
        "redis://made-by-hand:by-hand-pw@127.0.0.1:{}",
        server.port()
    );
    let proxy = Server::new(Options::new(url, "t")).expect("a proxy");
    proxy
        .connect()
        .await
        .expect("a restricted user is accepted");
    assert_eq!(proxy.redis_user(), "made-by-hand");
    let (status, body) = call(
        proxy.router(),
        json!(["EVAL", "return redis.call('FLUSHALL')", "0"]),
    )
    .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert!(error_of(&body).contains("can't run this command"), "{body}");
    let (status, body) = call(proxy.router(), json!(["INCR", unique()])).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": 1})));
}

#[tokio::test]
async fn a_pipeline_over_the_command_limit_is_413_and_runs_nothing() {
    let proxy = Proxy::start_with(|o| o.max_commands(3)).await;
    let key = unique();
    let four = json!([["INCR", key], ["INCR", key], ["INCR", key], ["INCR", key]]);
    for route in ["/pipeline", "/multi-exec"] {
        let (status, body) = proxy.post(route, four.clone()).await;
        assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{route}: {body}");
        assert!(error_of(&body).contains("over the limit of 3"), "{body}");
    }
    assert_eq!(proxy.ok(json!(["GET", key])).await, Value::Null);
    let (status, _) = proxy
        .post(
            "/pipeline",
            json!([["INCR", key], ["INCR", key], ["INCR", key]]),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

/// Reads from `stream` until the peer closes it (or 5 s pass): what arrived,
/// and whether it closed.
async fn read_to_close(stream: &mut TcpStream) -> (Vec<u8>, bool) {
    let mut seen = Vec::new();
    let mut buffer = [0u8; 1024];
    let until = Instant::now() + Duration::from_secs(5);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        match tokio::time::timeout(left, stream.read(&mut buffer)).await {
            Ok(Ok(0)) | Ok(Err(_)) => return (seen, true),
            Ok(Ok(n)) => seen.extend_from_slice(&buffer[..n]),
            Err(_) => return (seen, false),
        }
    }
}

#[tokio::test]
async fn half_sent_heads_are_closed_after_the_header_timeout() {
    let proxy = Proxy::start_with(|o| o.header_timeout(Duration::from_millis(300))).await;
    let address = proxy.base.trim_start_matches("http://").to_owned();
    let mut streams = Vec::new();
    for _ in 0..20 {
        let mut stream = TcpStream::connect(&address).await.unwrap();
        let head = format!(
            "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n",
            proxy.token
        );
        stream.write_all(head.as_bytes()).await.unwrap();
        streams.push(stream);
    }
    let mut closed = 0;
    for stream in &mut streams {
        let (_, was_closed) = read_to_close(stream).await;
        closed += usize::from(was_closed);
    }
    assert_eq!(closed, 20, "connections closed of 20 half-sent heads");
}

/// A body that breaks off malformed (a chunk size that is not hex) is a
/// 400 that says it could not be read: not a 413, whatever its size.
#[tokio::test]
async fn a_malformed_body_is_400() {
    let proxy = Proxy::start().await;
    let address = proxy.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let request = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\n\
         Transfer-Encoding: chunked\r\n\r\n5\r\n[\"get\r\nzz\r\n",
        proxy.token
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let (answer, _) = read_to_close(&mut stream).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 400"), "{answer}");
    assert!(answer.contains("could not be read"), "{answer}");
}

#[tokio::test]
async fn a_slow_body_is_408_and_the_connection_closes() {
    let proxy = Proxy::start_with(|o| o.body_timeout(Duration::from_millis(300))).await;
    let key = unique();
    let address = proxy.base.trim_start_matches("http://").to_owned();
    let mut stream = TcpStream::connect(&address).await.unwrap();
    let body = json!(["SET", key, "v"]).to_string();
    let head = format!(
        "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer {}\r\nContent-Length: {}\r\n\r\n",
        proxy.token,
        body.len()
    );
    stream.write_all(head.as_bytes()).await.unwrap();
    stream.write_all(&body.as_bytes()[..5]).await.unwrap();
    let (answer, closed) = read_to_close(&mut stream).await;
    let answer = String::from_utf8_lossy(&answer);
    assert!(answer.starts_with("HTTP/1.1 408"), "{answer}");
    assert!(closed, "the connection stays open after a 408");
    assert_eq!(proxy.ok(json!(["GET", key])).await, Value::Null);
}

#[tokio::test]
async fn a_runaway_script_is_killed_once_redis_lets_it_be() {
    let proxy = proxy_for_scripts(300, 200).await;
    let (status, body) = proxy
        .post("/", json!(["EVAL", "while true do end", "0"]))
        .await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    // The proxy kills it in the background; Redis answers again.
    let until = Instant::now() + Duration::from_secs(10);
    let mut last = Value::Null;
    while Instant::now() < until {
        let (status, body) = proxy.post("/", json!(["PING"])).await;
        if status == StatusCode::OK {
            assert_eq!(body, json!({"result": "PONG"}));
            return;
        }
        last = body;
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("Redis still busy 10 s after the script outran the timeout: {last}");
}

/// A proxy whose Redis calls time out after `timeout_ms`, on a Redis that
/// reads commands again during a script (a `SCRIPT KILL`) only once it has
/// run `busy_ms` (its `busy-reply-threshold`, 5,000 by default), once it
/// has served a first call.
async fn proxy_for_scripts(timeout_ms: u64, busy_ms: u64) -> Proxy {
    let proxy = Proxy::start_with(|o| o.redis_timeout(Duration::from_millis(timeout_ms))).await;
    let busy = busy_ms.to_string();
    proxy
        .admin(&["CONFIG", "SET", "busy-reply-threshold", &busy])
        .await;
    assert_eq!(proxy.ok(json!(["PING"])).await, json!("PONG"));
    proxy
}

/// A script busy for `micros` by the server's clock, then answering `done`.
fn busy_for(micros: u64) -> String {
    format!(
        "local s = redis.call('TIME') while true do local t = redis.call('TIME') \
         if (t[1] - s[1]) * 1000000 + t[2] - s[2] > {micros} then return 'done' end end"
    )
}

/// Runs `script` as another client of `server` (not through the proxy),
/// waiting as long as it runs; its answer.
fn another_clients(
    server: &RedisServer,
    script: String,
) -> tokio::task::JoinHandle<Result<String, String>> {
    let url = server.url();
    tokio::spawn(async move {
        let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
        let mut own = redis::Client::open(url)
            .unwrap()
            .get_multiplexed_async_connection_with_config(&config)
            .await
            .unwrap();
        redis::cmd("EVAL")
            .arg(script)
            .arg(0)
            .query_async::<String>(&mut own)
            .await
            .map_err(|e| e.to_string())
    })
}

/// A call that timed out for a script another client runs (not one sent
/// through the proxy) leaves that script alone: the proxy kills only
/// scripts it sent.
#[tokio::test]
async fn a_call_timed_out_by_another_clients_script_does_not_kill_it() {
    // The call, sent 200 ms into the script, times out (150 ms) well
    // before Redis reads commands again during a script (1 s), when it
    // would read a SCRIPT KILL; the script runs on to 2.5 s.
    let proxy = proxy_for_scripts(150, 1_000).await;
    // Busy for 2.5 s, then done.
    let other = another_clients(&proxy.server, busy_for(2_500_000));
    tokio::time::sleep(Duration::from_millis(200)).await;
    let (status, body) = proxy.post("/", json!(["INCR", unique()])).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    let finished = other.await.unwrap();
    assert_eq!(finished, Ok("done".to_owned()), "the other client's script");
}

/// A script that outran the timeout but ended before Redis read the
/// proxy's `SCRIPT KILL` is answered `NOTBUSY`: the proxy stops there
/// (not trying every 100 ms for 15 s).
#[tokio::test]
async fn a_script_that_ended_before_its_kill_is_killed_once() {
    let proxy = proxy_for_scripts(300, 5_000).await;
    // 1 s by the server's clock: past the timeout, short of Redis's
    // busy-reply threshold (5 s), so the kill waits for the script's end.
    kills_once(&proxy, json!(["EVAL", busy_for(1_000_000), "0"])).await;
}

/// Sends `eval`, a script call that outruns the proxy's timeout and ends
/// within 1.5 s, waits 2 s, and checks that the proxy sent one `SCRIPT
/// KILL` (up to three: attempts cut off by their own timeout while the
/// script ran may each have sent one; a kill tried every 100 ms would be
/// past 5).
async fn kills_once(proxy: &Proxy, eval: Value) {
    let (status, body) = proxy.post("/", eval).await;
    assert_eq!(status, StatusCode::INTERNAL_SERVER_ERROR, "{body}");
    tokio::time::sleep(Duration::from_millis(2_000)).await;
    let stats = proxy.info("commandstats").await;
    let kills = redis_info::command_calls(&stats)
        .get("script|kill")
        .copied();
    assert!(matches!(kills, Some(1..=3)), "{kills:?}: {stats}");
}

/// A script that wrote before it outran the timeout cannot be killed:
/// Redis answers the proxy's `SCRIPT KILL` `UNKILLABLE`, and the proxy
/// stops there (not trying every 100 ms while the script runs on).
#[tokio::test]
async fn a_script_that_wrote_is_not_killed_again_and_again() {
    let proxy = proxy_for_scripts(300, 200).await;
    // A write, then 1.5 s busy by the server's clock.
    let script = format!("redis.call('INCR', KEYS[1]) {}", busy_for(1_500_000));
    kills_once(&proxy, json!(["EVAL", script, "1", unique()])).await;
    let errors = proxy.info("errorstats").await;
    let unkillable = redis_info::error_count(&errors, "UNKILLABLE");
    assert!(matches!(unkillable, Some(1..=3)), "{errors}");
}

/// One command through `app`, without a socket.
async fn call(app: axum::Router, command: Value) -> (StatusCode, Value) {
    use tower::ServiceExt as _;
    let request = axum::http::Request::post("/")
        .header("authorization", "Bearer t")
        .body(axum::body::Body::from(command.to_string()))
        .unwrap();
    let response = app.oneshot(request).await.unwrap();
    let status = StatusCode::from_u16(response.status().as_u16()).unwrap();
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, serde_json::from_slice(&bytes).unwrap())
}

/// A private server's administrator connection.
async fn admin(server: &RedisServer) -> redis::aio::MultiplexedConnection {
    redis::Client::open(server.url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap()
}

/// Runs `line` (a command's words, space-separated, e.g. `ACL SETUSER NAME
/// RULE…`) as `server`'s administrator.
async fn as_admin(server: &RedisServer, line: &str) {
    let mut cmd = redis::Cmd::new();
    for word in line.split(' ') {
        cmd.arg(word);
    }
    let () = cmd.query_async(&mut admin(server).await).await.unwrap();
}

#[tokio::test]
async fn a_database_other_than_0_is_refused_unless_unrestricted() {
    let server = RedisServer::start();
    let url = format!("{}/1", server.url().trim_end_matches("/0"));
    for options in [
        Options::new(url.clone(), "t").create_user("px"),
        Options::new(url.clone(), "t"),
    ] {
        let refused = Server::new(options).map(|_| ());
        assert!(
            matches!(&refused, Err(Error::RedisUser(why)) if why.contains("selects database 1")),
            "{refused:?}"
        );
    }
    let refused = tollgate_rest_proxy::acl_setuser_line(&url, "px").await;
    assert!(matches!(refused, Err(Error::RedisUser(_))), "{refused:?}");
    let proxy = Server::new(Options::new(url, "t").allow_unrestricted_user()).expect("a proxy");
    assert!(!proxy.is_restricted());
    assert!(
        proxy.describe().contains("NOT restricted"),
        "{}",
        proxy.describe()
    );
}

#[tokio::test]
async fn a_user_allowed_one_command_more_than_the_list_is_refused() {
    let server = RedisServer::start();
    let line = tollgate_rest_proxy::acl_setuser_line(&server.url(), "one-more")
        .await
        .expect("the ACL line");
    let port = server.port();
    for (extra, named) in [
        ("+select", "SELECT"),
        ("+copy", "COPY"),
        ("+bgsave", "BGSAVE"),
        ("+bgrewriteaof", "BGREWRITEAOF"),
    ] {
        as_admin(&server, &format!("{line} >pw {extra}")).await;
        let url = format!("redis://one-more:pw@127.0.0.1:{port}");
        let refused = Server::new(Options::new(url, "t"))
            .expect("a proxy")
            .connect()
            .await;
        assert!(
            matches!(&refused, Err(Error::RedisUser(why)) if why.contains(&format!("can run {named}"))),
            "{extra}: {refused:?}"
        );
        as_admin(&server, &format!("ACL SETUSER one-more -{}", &extra[1..])).await;
    }
}

/// A proxy on `server` as `user`, made restricted from `--print-acl`'s
/// line, once it has served a first call (and so checked the user).
async fn served_as(server: &RedisServer, user: &str) -> Server {
    let line = tollgate_rest_proxy::acl_setuser_line(&server.url(), user)
        .await
        .expect("the ACL line");
    as_admin(server, &format!("{line} >pw")).await;
    let url = format!("redis://{user}:pw@127.0.0.1:{}", server.port());
    let proxy = Server::new(Options::new(url, "t")).expect("a proxy");
    let (status, _) = call(proxy.router(), json!(["INCR", unique()])).await;
    assert_eq!(status, StatusCode::OK);
    proxy
}

/// Lets `user` run FLUSHALL, and closes its connections: the proxy's next
/// call finds its connection gone and connects again.
async fn widen_and_disconnect(server: &RedisServer, user: &str) {
    as_admin(server, &format!("ACL SETUSER {user} +flushall")).await;
    let _: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("USER")
        .arg(user)
        .query_async(&mut admin(server).await)
        .await
        .unwrap();
}

/// A user checked when the proxy connected is checked again after the
/// connection is lost (Redis may be back with other ACLs): widened
/// meanwhile, it serves nothing more.
#[tokio::test]
async fn a_user_widened_while_connected_is_refused_once_it_reconnects() {
    let server = RedisServer::start();
    let proxy = served_as(&server, "widened").await;
    widen_and_disconnect(&server, "widened").await;
    let mut said = Vec::new();
    for i in 0..3 {
        let (status, body) = call(proxy.router(), json!(["INCR", unique()])).await;
        assert_ne!(status, StatusCode::OK, "call {i} after the kill: {body}");
        said.push(error_of(&body).to_owned());
    }
    // The first may fail on the lost connection; then the check refuses.
    assert!(
        said[1..].iter().all(|e| e.contains("can run FLUSHALL")),
        "{said:?}"
    );
}

/// A check of the user while Redis is busy with a script learns nothing
/// (a probe the user may run is answered BUSY, not queued): it does not
/// pass. A user widened meanwhile is refused once Redis answers again,
/// never served.
#[tokio::test]
async fn a_user_check_while_redis_is_busy_does_not_pass() {
    let server = RedisServer::start();
    let proxy = served_as(&server, "busy-check").await;
    as_admin(&server, "CONFIG SET busy-reply-threshold 100").await;
    widen_and_disconnect(&server, "busy-check").await;
    let script = another_clients(&server, busy_for(1_500_000));
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The first call finds its connection gone; the next ones connect and
    // check while Redis is busy.
    for i in 0..3 {
        let (status, body) = call(proxy.router(), json!(["INCR", unique()])).await;
        assert_ne!(status, StatusCode::OK, "call {i} while busy: {body}");
    }
    assert_eq!(script.await.unwrap(), Ok("done".into()));
    let (status, body) = call(proxy.router(), json!(["INCR", unique()])).await;
    assert_ne!(status, StatusCode::OK, "served by a widened user: {body}");
    assert!(error_of(&body).contains("can run FLUSHALL"), "{body}");
}

/// Creating the proxy's user as an administrator who may not: the refusal
/// of `COMMAND INFO` or of `ACL SETUSER` is the error, by name.
#[tokio::test]
async fn an_administrator_who_may_not_create_the_user_is_told_which_command_failed() {
    let server = RedisServer::start();
    for (denied, failed) in [
        ("-command", "COMMAND INFO failed"),
        ("-acl", "ACL SETUSER px failed"),
    ] {
        let admin_name = format!("admin{denied}");
        as_admin(
            &server,
            &format!("ACL SETUSER {admin_name} on >pw ~* +@all {denied}"),
        )
        .await;
        let url = format!("redis://{admin_name}:pw@127.0.0.1:{}", server.port());
        let refused = Server::new(Options::new(url, "t").create_user("px"))
            .expect("a proxy")
            .connect()
            .await;
        let said = format!("{refused:?}");
        assert!(
            refused.is_err() && said.contains(failed) && said.contains("NOPERM"),
            "{denied}: {said}"
        );
    }
}

#[tokio::test]
async fn create_user_works_over_resp3() {
    let server = RedisServer::start();
    let url = format!("{}?protocol=resp3", server.url());
    let proxy = Server::new(Options::new(url, "t").create_user("px3")).expect("a proxy");
    proxy
        .connect()
        .await
        .expect("the user is created over RESP3 too");
    let (status, body) = call(proxy.router(), json!(["INCR", unique()])).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": 1})));
}

#[tokio::test]
async fn a_refused_multi_runs_none_of_the_transaction() {
    let server = RedisServer::start();
    as_admin(&server, "ACL SETUSER no-multi on >pw ~* +@all -multi").await;
    let url = format!("redis://no-multi:pw@127.0.0.1:{}", server.port());
    let proxy = Server::new(Options::new(url, "t").allow_unrestricted_user()).expect("a proxy");
    let key = unique();
    let app = proxy.router();
    let request = axum::http::Request::post("/multi-exec")
        .header("authorization", "Bearer t")
        .body(axum::body::Body::from(
            json!([["INCR", key], ["INCR", key]]).to_string(),
        ))
        .unwrap();
    use tower::ServiceExt as _;
    let response = app.clone().oneshot(request).await.unwrap();
    assert_eq!(response.status().as_u16(), 400);
    // The refusal is Redis's own, named.
    let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    let refusal: Value = serde_json::from_slice(&bytes).unwrap();
    assert!(error_of(&refusal).starts_with("NOPERM"), "{refusal}");
    let (status, body) = call(app, json!(["GET", key])).await;
    assert_eq!((status, body), (StatusCode::OK, json!({"result": null})));
}
