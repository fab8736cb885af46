//! The HTTP side: `POST /`, `/pipeline`, `/multi-exec` and the path form.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{Request, State};
use axum::http::header::CONTENT_TYPE;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};

use crate::command::Command;
use crate::failure::LinkError;
use crate::link::Link;
use crate::reply::{self, Encoding};
use crate::run::{Reply, Runner, Transaction};
use crate::{auth, parse};

/// What every request handler shares.
pub(crate) struct Shared {
    runner: Runner,
    token: Vec<u8>,
    bounds: Bounds,
}

/// What one request may hold of the proxy.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Bounds {
    /// The largest body, in bytes.
    pub(crate) max_body: usize,
    /// The most commands in one pipeline or transaction.
    pub(crate) max_commands: usize,
    /// How long the body may take to arrive once the head is in.
    pub(crate) body_timeout: Duration,
}

impl Shared {
    /// The state for a proxy over `link` admitting `token`.
    pub(crate) fn new(link: Arc<Link>, token: Vec<u8>, bounds: Bounds) -> Shared {
        Shared {
            runner: Runner::new(link),
            token,
            bounds,
        }
    }

    /// The link to Redis.
    pub(crate) fn link(&self) -> &Link {
        self.runner.link()
    }
}

/// The routes, behind the token check: one handler that reads the method
/// and path itself (cheaper than a router and a middleware per request).
/// Bodies are read by the handlers, within [`Bounds`].
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new().fallback(dispatch).with_state(shared)
}

/// Every request: the token, then `POST /`, `POST /pipeline`,
/// `POST /multi-exec` (other methods there are a 405), or the path form.
async fn dispatch(State(shared): State<Arc<Shared>>, request: Request) -> Response {
    if !auth::admits(&shared.token, request.headers(), request.uri().query()) {
        return error(StatusCode::UNAUTHORIZED, auth::WRONG_TOKEN);
    }
    let post = request.method() == Method::POST;
    match request.uri().path() {
        "/" if post => single(&shared, request).await,
        "/pipeline" if post => pipeline(&shared, request).await,
        "/multi-exec" if post => multi_exec(&shared, request).await,
        "/pipeline" | "/multi-exec" => not_allowed(),
        _ => path_form(&shared, request).await,
    }
}

async fn single(shared: &Shared, request: Request) -> Response {
    let encoding = encoding(request.headers());
    let body = match read(shared, request.into_body()).await {
        Ok(body) => body,
        Err(refusal) => return refusal.into_response(),
    };
    match parse::command(&body) {
        Ok(command) => run_single(shared, &command, encoding).await,
        Err(e) => bad(e),
    }
}

async fn path_form(shared: &Shared, request: Request) -> Response {
    // HEAD, like every method but GET and POST, runs nothing.
    if request.method() != Method::GET && request.method() != Method::POST {
        return not_allowed();
    }
    let encoding = encoding(request.headers());
    let (parts, body) = request.into_parts();
    let body = match read(shared, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal.into_response(),
    };
    match Command::from_path(parts.uri.path(), parts.uri.query(), &body) {
        Ok(command) => run_single(shared, &command, encoding).await,
        Err(e) => bad(e),
    }
}

async fn run_single(shared: &Shared, command: &Command, encoding: Encoding) -> Response {
    let outcome = shared.runner.single(command).await;
    tracing::debug!(command = %command.name(), ok = matches!(outcome, Ok(Reply::Value(_))), "command");
    match outcome {
        Ok(Reply::Value(redis::Value::ServerError(e))) => {
            error(StatusCode::BAD_REQUEST, &reply::error_text(&e))
        }
        Ok(Reply::Value(value)) => {
            let mut out = Vec::with_capacity(64);
            reply::result_entry(&mut out, &value, encoding);
            json(StatusCode::OK, out)
        }
        Ok(Reply::Refused(why)) => error(StatusCode::BAD_REQUEST, &why),
        Err(e) => unavailable(&e),
    }
}

async fn pipeline(shared: &Shared, request: Request) -> Response {
    let encoding = encoding(request.headers());
    let commands = match parse_list(shared, request.into_body()).await {
        Ok(commands) => commands,
        Err(refusal) => return refusal.into_response(),
    };
    match shared.runner.pipeline(&commands).await {
        Ok(replies) => json(
            StatusCode::OK,
            entries(replies.iter(), |out, r| match r {
                Reply::Value(value) => reply::entry(out, value, encoding),
                Reply::Refused(why) => reply::error_entry(out, why),
            }),
        ),
        Err(e) => unavailable(&e),
    }
}

async fn multi_exec(shared: &Shared, request: Request) -> Response {
    let encoding = encoding(request.headers());
    let commands = match parse_list(shared, request.into_body()).await {
        Ok(commands) => commands,
        Err(refusal) => return refusal.into_response(),
    };
    match shared.runner.transaction(&commands).await {
        Ok(Transaction::Committed(values)) => json(
            StatusCode::OK,
            entries(values.iter(), |out, v| reply::entry(out, v, encoding)),
        ),
        Ok(Transaction::Aborted(why)) => error(StatusCode::BAD_REQUEST, &why),
        Err(e) => unavailable(&e),
    }
}

/// A JSON array of one entry per item, each written by `entry`.
fn entries<T>(items: impl Iterator<Item = T>, entry: impl Fn(&mut Vec<u8>, T)) -> Vec<u8> {
    let mut out = Vec::with_capacity(128);
    out.push(b'[');
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(b',');
        }
        entry(&mut out, item);
    }
    out.push(b']');
    out
}

fn not_allowed() -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        "ERR only GET and POST are allowed",
    )
}

/// Why a request is refused before anything is sent to Redis.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, &self.1)
    }
}

/// The request's body: a 413 when it is larger than the bound, a 408 when
/// it is slower (the connection then closes, its body unread).
async fn read(shared: &Shared, body: Body) -> Result<Bytes, Refusal> {
    let bounds = shared.bounds;
    match tokio::time::timeout(bounds.body_timeout, to_bytes(body, bounds.max_body)).await {
        Ok(Ok(body)) => Ok(body),
        Ok(Err(e)) if is_too_large(&e) => Err(Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!("ERR the body is over {} bytes", bounds.max_body),
        )),
        Ok(Err(_)) => Err(Refusal(
            StatusCode::BAD_REQUEST,
            "ERR the body could not be read".to_owned(),
        )),
        Err(_) => Err(Refusal(
            StatusCode::REQUEST_TIMEOUT,
            format!(
                "ERR the body did not arrive within {:?}",
                bounds.body_timeout
            ),
        )),
    }
}

fn is_too_large(error: &axum::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(error);
    while let Some(e) = source {
        if e.is::<http_body_util::LengthLimitError>() {
            return true;
        }
        source = e.source();
    }
    false
}

/// The commands of a pipeline or transaction, at most [`Bounds::max_commands`].
async fn parse_list(shared: &Shared, body: Body) -> Result<Vec<Command>, Refusal> {
    let body = read(shared, body).await?;
    let commands =
        parse::list(&body).map_err(|e| Refusal(StatusCode::BAD_REQUEST, e.to_string()))?;
    let max = shared.bounds.max_commands;
    if commands.len() > max {
        return Err(Refusal(
            StatusCode::PAYLOAD_TOO_LARGE,
            format!(
                "ERR {} commands are over the limit of {max} per request",
                commands.len()
            ),
        ));
    }
    Ok(commands)
}

fn encoding(headers: &HeaderMap) -> Encoding {
    let base64 = headers
        .get("upstash-encoding")
        .is_some_and(|v| v.as_bytes().eq_ignore_ascii_case(b"base64"));
    if base64 {
        Encoding::Base64
    } else {
        Encoding::Plain
    }
}

fn bad(e: impl std::fmt::Display) -> Response {
    error(StatusCode::BAD_REQUEST, &e.to_string())
}

fn unavailable(e: &LinkError) -> Response {
    tracing::warn!(error = %e, "redis call failed");
    error(StatusCode::INTERNAL_SERVER_ERROR, &format!("ERR {e}"))
}

fn error(status: StatusCode, text: &str) -> Response {
    let mut out = Vec::with_capacity(text.len() + 16);
    reply::error_entry(&mut out, text);
    json(status, out)
}

/// A response of `status` with the JSON `body`.
fn json(status: StatusCode, body: Vec<u8>) -> Response {
    let mut response = Response::new(Body::from(body));
    *response.status_mut() = status;
    response
        .headers_mut()
        .insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    response
}
