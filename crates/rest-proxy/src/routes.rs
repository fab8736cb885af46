//! The HTTP side: `POST /`, `/pipeline`, `/multi-exec` and the path form.

use std::sync::Arc;

use axum::Json;
use axum::Router;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{any, post};
use serde_json::{Value as JsonValue, json};

use crate::auth;
use crate::command::{Command, ShapeError};
use crate::link::{Link, LinkError};
use crate::reply::{self, Encoding};
use crate::run::{Reply, Runner, Transaction};

/// What every request handler shares.
pub(crate) struct Shared {
    runner: Runner,
    token: Vec<u8>,
    max_body: usize,
}

impl Shared {
    /// The state for a proxy over `link` admitting `token`.
    pub(crate) fn new(link: Link, token: Vec<u8>, max_body: usize) -> Shared {
        Shared {
            runner: Runner::new(link),
            token,
            max_body,
        }
    }
}

type AppState = State<Arc<Shared>>;

/// The routes, behind the token check and the body limit.
pub(crate) fn router(shared: Shared) -> Router {
    let max_body = shared.max_body;
    let shared = Arc::new(shared);
    Router::new()
        .route("/", post(single).fallback(path_form))
        .route("/pipeline", post(pipeline).fallback(not_allowed))
        .route("/multi-exec", post(multi_exec).fallback(not_allowed))
        .fallback(any(path_form))
        .layer(DefaultBodyLimit::max(max_body))
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

async fn single(
    State(shared): AppState,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let command = match parse(body, Command::from_json) {
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
    body: Result<Bytes, BytesRejection>,
) -> Response {
    if ![Method::GET, Method::POST, Method::PUT, Method::HEAD].contains(&method) {
        return not_allowed().await;
    }
    let body = match body {
        Ok(body) => body,
        Err(rejection) => return error(rejection.status(), &rejection.body_text()),
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

async fn pipeline(
    State(shared): AppState,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let commands = match parse(body, Command::list_from_json) {
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

async fn multi_exec(
    State(shared): AppState,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Response {
    let commands = match parse(body, Command::list_from_json) {
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
        "ERR only HEAD, GET, POST and PUT are allowed",
    )
}

/// Why a request is refused before anything is sent to Redis.
struct Refusal(StatusCode, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        error(self.0, &self.1)
    }
}

/// What `shape` reads from the request's JSON body; a 413 when the body is
/// too large, a 400 when it is not JSON or not of that shape.
fn parse<T>(
    body: Result<Bytes, BytesRejection>,
    shape: impl FnOnce(&JsonValue) -> Result<T, ShapeError>,
) -> Result<T, Refusal> {
    let body = body.map_err(|r| Refusal(r.status(), r.body_text()))?;
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
