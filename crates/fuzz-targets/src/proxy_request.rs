//! The `proxy_request` target: tollgate-rest-proxy's routes, in process,
//! in front of a Redis that is not there (so a command that reaches Redis
//! answers 500, one refused before answers 400).

use std::sync::OnceLock;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use percent_encoding::percent_decode_str;
use serde_json::Value;
use tollgate_rest_proxy::{Options, Proxy, allow};
use tower::ServiceExt as _;

const TOKEN: &str = "fuzz-token";

/// One request from `data`: a first byte choosing the method, the token
/// and the route, then `path \0 query \0 body`. Panics when a property
/// breaks: no token or a wrong one is a 401; a method other than GET and
/// POST runs nothing (405); a command off the allow-list never reaches
/// Redis (never a 500, and a 400 saying it is not allowed on `/`); a
/// pipeline of refused commands only is a 200 of errors; a transaction
/// holding one is a 400; every answer is JSON with a status from a short
/// list.
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
    match (parsed.as_str(), &method, &json) {
        ("/", &Method::POST, Some(command)) => {
            if let Some(name) = name_of(command)
                && !allowed(&name)
            {
                assert_eq!(status, StatusCode::BAD_REQUEST, "{command}: {answer}");
                let text = answer["error"].as_str().unwrap_or_default();
                assert!(
                    text.starts_with("ERR command is not allowed"),
                    "{command}: {answer}"
                );
            }
        }
        ("/pipeline", &Method::POST, Some(Value::Array(commands))) if !commands.is_empty() => {
            let names: Vec<Option<String>> = commands.iter().map(name_of).collect();
            if names
                .iter()
                .all(|n| n.as_ref().is_some_and(|n| !allowed(n)))
                && status != StatusCode::PAYLOAD_TOO_LARGE
            {
                assert_eq!(status, StatusCode::OK, "{commands:?}: {answer}");
            }
        }
        ("/multi-exec", &Method::POST, Some(Value::Array(commands))) => {
            let refused = commands.iter().filter_map(name_of).any(|n| !allowed(&n));
            if refused && commands.iter().all(|c| name_of(c).is_some()) {
                assert!(
                    status == StatusCode::BAD_REQUEST || status == StatusCode::PAYLOAD_TOO_LARGE,
                    "{commands:?}: {answer}"
                );
            }
        }
        _ => {}
    }
    if status == StatusCode::INTERNAL_SERVER_ERROR && !batch {
        let name = if parsed == "/" && method == Method::POST {
            json.as_ref().and_then(name_of)
        } else {
            path_form_name(&parsed, query.as_deref(), &body)
        };
        assert!(
            name.as_deref().is_some_and(allowed),
            "{method} {uri} reached Redis with {name:?}"
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
            .max_commands(8)
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

/// The name of a JSON command, as the proxy would read it (strings and
/// numbers are arguments; anything else makes it no command).
fn name_of(command: &Value) -> Option<String> {
    let items = command.as_array()?;
    let args: Option<Vec<String>> = items
        .iter()
        .map(|a| match a {
            Value::String(s) => Some(s.clone()),
            Value::Number(n) => Some(n.to_string()),
            _ => None,
        })
        .collect();
    args?.into_iter().next()
}

/// The name of the path form's command: the first segment, else the body,
/// else the first query key but `_token`.
fn path_form_name(path: &str, query: Option<&str>, body: &[u8]) -> Option<String> {
    let path = path.strip_prefix('/').unwrap_or(path);
    if !path.is_empty() {
        let first = path.split('/').next().unwrap_or_default();
        return Some(
            String::from_utf8_lossy(&percent_decode_str(first).collect::<Vec<u8>>()).into_owned(),
        );
    }
    if !body.is_empty() {
        return Some(String::from_utf8_lossy(body).into_owned());
    }
    query?
        .split('&')
        .filter(|p| !p.is_empty())
        .map(|p| p.split_once('=').map_or(p, |(k, _)| k))
        .find(|k| *k != "_token")
        .map(|k| String::from_utf8_lossy(&percent_decode_str(k).collect::<Vec<u8>>()).into_owned())
}

/// Whether the allow-list names `name` (any case), alone or as a container
/// of allowed subcommands.
fn allowed(name: &str) -> bool {
    let upper = String::from_utf8_lossy(name.as_bytes()).to_ascii_uppercase();
    allow::COMMANDS
        .iter()
        .any(|c| c.split('|').next() == Some(upper.as_str()))
}
