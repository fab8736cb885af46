//! Failed calls, as the core's [`StoreError`].
//!
//! | what happened | [`StoreError`] | transient |
//! |---|---|---|
//! | no connection (refused, reset, DNS, TLS handshake), the request not sent | `Connection` | yes |
//! | no answer by the call's deadline | `Timeout` | yes |
//! | HTTP 429 or 503 | `Busy` | yes |
//! | another HTTP 5xx (the proxy or Upstash could not reach Redis) | `Connection` | yes |
//! | HTTP 401 or 403: the token was refused (logged once per store, at ERROR) | `Backend` | no |
//! | a body that is not the JSON expected, or cut short | `InvalidReply` | no |
//! | an HTTP 200 or 400 body over the transport's bound (1 MiB), read no further | `InvalidReply` | no |
//! | any other HTTP status | `Backend` | no |
//!
//! An error reply (`{"error": ...}` with HTTP 200 or 400) is the server's,
//! read as every transport reads one ([`crate::failure`]), and a write
//! script's `DEADLINE` reply is a timeout ([`crate::reply`]).
//!
//! A body cut short after the status line is not retried: the server had
//! already run the command, so a retry would spend twice.

use std::time::Duration;

use tollgate_core::StoreError;

use crate::failure::clipped;

/// What failed: the source of a [`StoreError`]. It names the endpoint by
/// `host:port` only, never by URL or token.
#[derive(Debug, thiserror::Error)]
pub(crate) enum Failure {
    /// HTTP 401 or 403.
    #[error("the Upstash REST endpoint {address} refused the token (HTTP {status})")]
    Refused { address: String, status: u16 },
    /// Another status than 200 or 400.
    #[error("the Upstash REST endpoint {address} answered HTTP {status}{text}")]
    Status {
        address: String,
        status: u16,
        /// `: <the error text of the body>`, or nothing.
        text: String,
    },
    /// The request could not be sent.
    #[error("cannot reach the Upstash REST endpoint {address}")]
    Unreachable {
        address: String,
        #[source]
        source: reqwest::Error,
    },
}

/// A status other than 200 and 400; `body` may hold an `{"error"}` text.
pub(crate) fn from_status(status: u16, body: &[u8], address: &str) -> StoreError {
    let address = address.to_owned();
    if status == 401 || status == 403 {
        return StoreError::Backend(Box::new(Failure::Refused { address, status }));
    }
    let text = serde_json::from_slice::<serde_json::Value>(body)
        .ok()
        .and_then(|value| value.get("error")?.as_str().map(clipped))
        .map_or_else(String::new, |text| format!(": {text}"));
    let failure = Box::new(Failure::Status {
        address,
        status,
        text,
    });
    match status {
        429 | 503 => StoreError::Busy(failure),
        500..=599 => StoreError::Connection(failure),
        _ => StoreError::Backend(failure),
    }
}

/// A request that got no answer; `waited` is how long it could wait (its
/// deadline), for a timeout's message.
pub(crate) fn from_send(err: reqwest::Error, address: &str, waited: Duration) -> StoreError {
    if err.is_timeout() {
        return StoreError::Timeout(waited);
    }
    StoreError::Connection(Box::new(Failure::Unreachable {
        address: address.to_owned(),
        source: err.without_url(),
    }))
}

/// A body that could not be read to its end. By the call's deadline it is
/// a timeout (`waited`), as when the limiter's own timer ends the attempt
/// there; for another reason it is not transient, since the server had
/// already run the command, so a retry would spend twice.
pub(crate) fn from_body(err: reqwest::Error, waited: Duration) -> StoreError {
    if err.is_timeout() {
        return StoreError::Timeout(waited);
    }
    tracing::debug!(error = %err.without_url(), "an Upstash reply body could not be read");
    StoreError::InvalidReply("the reply body could not be read to its end".into())
}

/// An answer to a command (HTTP 200 or 400) whose body is longer than
/// `limit` bytes, the transport's bound: no reply of a command is, so it is
/// not one. Not transient, as a body cut short is not.
pub(crate) fn too_long(limit: usize) -> StoreError {
    StoreError::InvalidReply(format!(
        "the reply body is over {} KiB, longer than any reply",
        limit / 1024
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_error_text_in_a_status_body_is_kept_up_to_200_characters() {
        let short = "ERR é".repeat(40);
        let long = format!("{short}and more");
        let body = format!("{{\"error\":\"{long}\"}}");
        let err = from_status(500, body.as_bytes(), "h:1");
        let text = std::error::Error::source(&err).map(ToString::to_string);
        let text = text.unwrap_or_default();
        assert!(text.ends_with(&format!(": {short}…")), "{text}");
    }

    #[test]
    fn statuses_map_to_transient_or_permanent_failures() {
        let cases = [
            (401, "backend"),
            (403, "backend"),
            (429, "busy"),
            (503, "busy"),
            (500, "connection"),
            (502, "connection"),
            (504, "connection"),
            (404, "backend"),
            (413, "backend"),
            (302, "backend"),
        ];
        for (status, kind) in cases {
            assert_eq!(from_status(status, b"", "h:1").kind(), kind, "{status}");
        }
    }

    #[test]
    fn messages_name_the_address_and_clip_the_text() {
        let err = from_status(401, b"{}", "example.upstash.io:443");
        let text = std::error::Error::source(&err).map(ToString::to_string);
        assert_eq!(
            text.as_deref(),
            Some("the Upstash REST endpoint example.upstash.io:443 refused the token (HTTP 401)")
        );
        let long = format!("{{\"error\":\"ERR {}\"}}", "x".repeat(1000));
        let err = from_status(500, long.as_bytes(), "h:1");
        let text = std::error::Error::source(&err).map_or(0, |e| e.to_string().len());
        assert!(text < 300, "{text}");
    }
}
