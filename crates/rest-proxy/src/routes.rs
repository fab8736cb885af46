//! The HTTP side: `POST /`, `/pipeline`, `/multi-exec` and the path form.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::Router;
use axum::body::{Body, Bytes, to_bytes};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::command::{Command, ShapeError};
use crate::failure::LinkError;
use crate::link::Link;
use crate::reply::{self, Encoding};
use crate::run::{Reply, Runner, Transaction};

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

type AppState = State<Arc<Shared>>;

/// The routes, behind the token check. Bodies are read by the handlers,
/// within [`Bounds`].
pub(crate) fn router(shared: Arc<Shared>) -> Router {
    Router::new()
        .route("/", post(single).fallback(path_form))
        .route("/pipeline", post(pipeline).fallback(not_allowed))
        .route("/multi-exec", post(multi_exec).fallback(not_allowed))
        .fallback(any(path_form))
        .layer(DefaultBodyLimit::disable())
        .layer(middleware::from_fn_with_state(
            Arc::clone(&shared),
            require_token,
        ))
        .with_state(shared)
}

async fn require_token(State(shared): AppState, request: Request, next: Next) -> Response {
    if auth::admits(&shared.token, request.headers(), request.uri().query()) {
        next.run(request).await
    } else {
        error(StatusCode::UNAUTHORIZED, auth::WRONG_TOKEN)
    }
}

async fn single(State(shared): AppState, headers: HeaderMap, body: Body) -> Response {
    let command = match parse(&shared, body, Command::from_json).await {
        Ok(command) => command,
        Err(refusal) => return refusal.into_response(),
    };
    run_single(&shared, &command, encoding(&headers)).await
}

async fn path_form(
    State(shared): AppState,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Body,
) -> Response {
    // HEAD, like every method but GET and POST, runs nothing.
    if method != Method::GET && method != Method::POST {
        return not_allowed().await;
    }
    let body = match read(&shared, body).await {
        Ok(body) => body,
        Err(refusal) => return refusal.into_response(),
    };
    match Command::from_path(uri.path(), uri.query(), &body) {
        Ok(command) => run_single(&shared, &command, encoding(&headers)).await,
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
            Json(json!({ "result": reply::result(value, encoding) })).into_response()
        }
        Ok(Reply::Refused(why)) => error(StatusCode::BAD_REQUEST, &why),
        Err(e) => unavailable(&e),
    }
}

async fn pipeline(State(shared): AppState, headers: HeaderMap, body: Body) -> Response {
    let commands = match parse_list(&shared, body).await {
        Ok(commands) => commands,
        Err(refusal) => return refusal.into_response(),
    };
    let encoding = encoding(&headers);
    match shared.runner.pipeline(&commands).await {
        Ok(replies) => Json(JsonValue::Array(
            replies
                .into_iter()
                .map(|r| match r {
                    Reply::Value(value) => reply::entry(value, encoding),
                    Reply::Refused(why) => json!({ "error": why }),
                })
                .collect(),
        ))
        .into_response(),
        Err(e) => unavailable(&e),
    }
}

async fn multi_exec(State(shared): AppState, headers: HeaderMap, body: Body) -> Response {
    let commands = match parse_list(&shared, body).await {
        Ok(commands) => commands,
        Err(refusal) => return refusal.into_response(),
    };
    let encoding = encoding(&headers);
    match shared.runner.transaction(&commands).await {
        Ok(Transaction::Committed(values)) => Json(JsonValue::Array(
            values
                .into_iter()
                .map(|v| reply::entry(v, encoding))
                .collect(),
        ))
        .into_response(),
        Ok(Transaction::Aborted(why)) => error(StatusCode::BAD_REQUEST, &why),
        Err(e) => unavailable(&e),
    }
}

async fn not_allowed() -> Response {
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
    let commands = parse(shared, body, Command::list_from_json).await?;
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

/// What `shape` reads from the request's JSON body; a 413 when the body is
/// too large, a 408 when it is too slow, a 400 when it is not JSON or not
/// of that shape.
async fn parse<T>(
    shared: &Shared,
    body: Body,
    shape: impl FnOnce(&JsonValue) -> Result<T, ShapeError>,
) -> Result<T, Refusal> {
    let body = read(shared, body).await?;
    let json = serde_json::from_slice(&body).map_err(|e| {
        Refusal(
            StatusCode::BAD_REQUEST,
            format!("ERR invalid JSON body: {e}"),
        )
    })?;
    shape(&json).map_err(|e| Refusal(StatusCode::BAD_REQUEST, e.to_string()))
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
    (status, Json(json!({ "error": text }))).into_response()
}
