//! The `proxy_request` target: tollgate-rest-proxy's routes, in process,
//! in front of a Redis that is not there (so a command that reaches Redis
//! answers 500, one refused before answers 400).

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::Value;
use tollgate_rest_proxy::{Options, Proxy};
use tower::ServiceExt as _;

const TOKEN: &str = "fuzz-token";

/// The most commands per pipeline the proxy is given here.
const MAX_COMMANDS: usize = 8;

/// One request from `data`: a first byte choosing the method, the token
/// and the route, then `path \0 query \0 body`. Panics when a property
/// breaks: no token or a wrong one is a 401; a method other than GET and
/// POST runs nothing (405); a command of `NEVER` or `NEVER_SUB` (lists
/// written here, not read from the proxy) never reaches Redis (never a
/// 500; a 400 saying it is not allowed on `/`), and one of `ALWAYS` does
/// (a 500, since Redis is not there); a pipeline of refused commands only
/// is a 200 of errors; a transaction holding one is a 400; every answer is
/// JSON with a status from a short list. (The Redis ACL that holds scripts
/// to the list needs a Redis: `tollgate-rest-proxy`'s tests cover it.)
pub fn proxy_request(data: &[u8]) {
    let Some((&flags, rest)) = data.split_first() else {
        return;
    };
    let mut parts = rest.splitn(3, |&b| b == 0);
    let path = String::from_utf8_lossy(parts.next().unwrap_or_default()).into_owned();
    let query = parts
        .next()
        .map(|q| String::from_utf8_lossy(q).into_owned());
    let body = parts.next().unwrap_or_default().to_vec();

    let method = match flags & 3 {
        0 => Method::POST,
        1 => Method::GET,
        2 => Method::HEAD,
        _ => Method::PUT,
    };
    let route = match (flags >> 2) & 3 {
        0 => "/".to_owned(),
        1 => "/pipeline".to_owned(),
        2 => "/multi-exec".to_owned(),
        _ => format!("/{path}"),
    };
    let token = (flags >> 4) & 3;
    let query = match (token, query) {
        (1, Some(q)) => Some(format!("_token={TOKEN}&{q}")),
        (1, None) => Some(format!("_token={TOKEN}")),
        (_, q) => q,
    };
    let uri = match &query {
        Some(q) => format!("{route}?{q}"),
        None => route,
    };
    let mut request = Request::builder().method(method.clone()).uri(&uri);
    match token {
        0 => request = request.header("authorization", format!("Bearer {TOKEN}")),
        2 => request = request.header("authorization", "Bearer wrong"),
        _ => {}
    }
    let Ok(request) = request.body(Body::from(body.clone())) else {
        return; // Not a request hyper would hand to the router.
    };
    if request.uri().query() != query.as_deref() {
        return; // A `#` in the path made the rest a fragment.
    }
    let parsed = request.uri().path().to_owned();
    let (status, answer) = send(request);

    // Without a header, the first `_token` pair of the query decides.
    let query_admits = query
        .as_deref()
        .and_then(|q| q.split('&').find_map(|pair| pair.strip_prefix("_token=")))
        .is_some_and(|given| percent_decode_str(given).collect::<Vec<u8>>() == TOKEN.as_bytes());
    if token == 2 || token == 3 && !query_admits {
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{uri}");
        return;
    }
    assert!(
        [200, 400, 405, 413, 500].contains(&status.as_u16()),
        "{method} {uri}: {status} {answer}"
    );
    let batch = parsed == "/pipeline" || parsed == "/multi-exec";
    if method != Method::GET && method != Method::POST || batch && method == Method::GET {
        assert_eq!(status, StatusCode::METHOD_NOT_ALLOWED, "{method} {uri}");
        return;
    }
    let json: Option<Value> = serde_json::from_slice(&body).ok();
    let listed = |commands: &Vec<Value>| -> Option<Vec<Vec<String>>> {
        (!commands.is_empty() && commands.len() <= MAX_COMMANDS)
            .then(|| commands.iter().map(args_of).collect())
            .flatten()
    };
    let text = answer["error"].as_str().unwrap_or_default();
    match (parsed.as_str(), &method, &json) {
        ("/", &Method::POST, Some(command)) => {
            match args_of(command).as_deref().and_then(may_reach) {
                Some(false) => {
                    assert_eq!(status, StatusCode::BAD_REQUEST, "{command}: {answer}");
                    assert!(
                        text.starts_with("ERR command is not allowed"),
                        "{command}: {answer}"
                    );
                }
                // Sent, to a Redis that is not there.
                Some(true) => assert_eq!(
                    status,
                    StatusCode::INTERNAL_SERVER_ERROR,
                    "{command}: {answer}"
                ),
                None => {}
            }
        }
        ("/pipeline", &Method::POST, Some(Value::Array(commands))) => {
            if let Some(all) = listed(commands) {
                if all.iter().all(|a| may_reach(a) == Some(false)) {
                    assert_eq!(status, StatusCode::OK, "{commands:?}: {answer}");
                } else if all.iter().any(|a| may_reach(a) == Some(true)) {
                    assert_eq!(
                        status,
                        StatusCode::INTERNAL_SERVER_ERROR,
                        "{commands:?}: {answer}"
                    );
                }
            }
        }
        ("/multi-exec", &Method::POST, Some(Value::Array(commands))) => {
            if let Some(all) = listed(commands)
                && all.iter().any(|a| may_reach(a) == Some(false))
            {
                assert_eq!(status, StatusCode::BAD_REQUEST, "{commands:?}: {answer}");
            }
        }
        _ => {}
    }
    if status == StatusCode::INTERNAL_SERVER_ERROR && !batch {
        let args = if parsed == "/" && method == Method::POST {
            json.as_ref().and_then(args_of).unwrap_or_default()
        } else {
            path_form_args(&parsed, query.as_deref(), &body)
        };
        assert_ne!(
            may_reach(&args),
            Some(false),
            "{method} {uri} reached Redis with {args:?}"
        );
    }
}

/// Sends `request` through the proxy's router; its status and JSON body.
fn send(request: Request<Body>) -> (StatusCode, Value) {
    static PROXY: OnceLock<(tokio::runtime::Runtime, axum::Router)> = OnceLock::new();
    let (runtime, router) = PROXY.get_or_init(|| {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|e| panic!("no runtime: {e}"));
        // Port 1 on loopback: nothing listens, connecting fails at once.
        let options = Options::new("redis://127.0.0.1:1", TOKEN)
            .allow_unrestricted_user()
            .max_commands(MAX_COMMANDS)
            .redis_timeout(Duration::from_millis(200));
        let router = Proxy::new(options)
            .unwrap_or_else(|e| panic!("no proxy: {e}"))
            .router();
        (runtime, router)
    });
    runtime.block_on(async {
        let response = router.clone().oneshot(request).await;
        let Ok(response) = response;
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), usize::MAX)
            .await
            .unwrap_or_else(|e| panic!("no body: {e}"));
        let json = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap_or_else(|e| {
                panic!(
                    "{status}: not JSON ({e}): {:?}",
                    String::from_utf8_lossy(&bytes)
                )
            })
        };
        (status, json)
    })
}

/// The arguments of a JSON command, as the proxy would read them (strings
/// and numbers are arguments; anything else makes it no command).
fn args_of(command: &Value) -> Option<Vec<String>> {
    let items = command.as_array()?;
    let args: Option<Vec<String>> = items
        .iter()
        .map(|a| match a {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect();
    args.filter(|a| !a.is_empty())
}

/// The path form's command, as Upstash documents it: the segments, then a
/// non-empty body, then the query's pairs but `_token`, percent-decoded.
fn path_form_args(path: &str, query: Option<&str>, body: &[u8]) -> Vec<String> {
    let decode = |text: &str| {
        String::from_utf8_lossy(&percent_decode_str(text).collect::<Vec<u8>>()).into_owned()
    };
    let path = path.strip_prefix('/').unwrap_or(path);
    let mut args: Vec<String> = if path.is_empty() {
        Vec::new()
    } else {
        path.split('/').map(decode).collect()
    };
    if !body.is_empty() {
        args.push(String::from_utf8_lossy(body).into_owned());
    }
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
        if key != "_token" {
            args.push(decode(key));
            if !value.is_empty() {
                args.push(decode(value));
            }
        }
    }
    args
}

/// Commands that must never reach Redis, written here rather than read from
/// the proxy's allow-list, so that a wrong entry there is caught.
const NEVER: &[&str] = &[
    "ACL",
    "AUTH",
    "BGREWRITEAOF",
    "BGSAVE",
    "BLMOVE",
    "BLMPOP",
    "BLPOP",
    "BRPOP",
    "BRPOPLPUSH",
    "BZMPOP",
    "BZPOPMAX",
    "BZPOPMIN",
    "CLIENT",
    "CLUSTER",
    "CONFIG",
    "COPY",
    "DEBUG",
    "DISCARD",
    "EXEC",
    "FAILOVER",
    "FCALL",
    "FCALL_RO",
    "FLUSHALL",
    "FLUSHDB",
    "FUNCTION",
    "HELLO",
    "KEYS",
    "LATENCY",
    "MIGRATE",
    "MODULE",
    "MONITOR",
    "MOVE",
    "MULTI",
    "PSUBSCRIBE",
    "PSYNC",
    "PUBLISH",
    "QUIT",
    "REPLICAOF",
    "RESET",
    "RESTORE",
    "SAVE",
    "SELECT",
    "SHUTDOWN",
    "SLAVEOF",
    "SLOWLOG",
    "SSUBSCRIBE",
    "SUBSCRIBE",
    "SWAPDB",
    "SYNC",
    "UNWATCH",
    "WAIT",
    "WAITAOF",
    "WATCH",
];

/// Subcommands that must never reach Redis, of commands whose other
/// subcommands may.
const NEVER_SUB: &[(&str, &str)] = &[
    ("SCRIPT", "FLUSH"),
    ("SCRIPT", "KILL"),
    ("SCRIPT", "DEBUG"),
    ("XGROUP", "HELP"),
    ("XINFO", "HELP"),
];

/// Commands the official clients send, which must reach Redis.
const ALWAYS: &[&str] = &[
    "GET",
    "SET",
    "INCRBY",
    "PEXPIRE",
    "EVAL",
    "EVALSHA",
    "HSET",
    "HGETALL",
    "HMGET",
    "ZADD",
    "ZRANGE",
    "SADD",
    "SMISMEMBER",
    "DEL",
    "SCAN",
    "TTL",
    "MGET",
    "PING",
];

/// Whether the command `args` (name first) may reach Redis, by [`NEVER`]
/// and [`NEVER_SUB`]; `None` when they do not say.
fn may_reach(args: &[String]) -> Option<bool> {
    let name = args.first()?.to_ascii_uppercase();
    let sub = args.get(1).map(|s| s.to_ascii_uppercase());
    if NEVER.contains(&name.as_str())
        || NEVER_SUB
            .iter()
            .any(|(c, s)| *c == name && sub.as_deref() == Some(*s))
    {
        return Some(false);
    }
    ALWAYS.contains(&name.as_str()).then_some(true)
}
