//! Failed calls, as the core's [`StoreError`].
//!
//! | what happened | [`StoreError`] | transient |
//! |---|---|---|
//! | no connection (refused, reset, DNS, TLS handshake), the request not sent | `Connection` | yes |
//! | a connection attempt over [`CONNECT_TIMEOUT`] | `Timeout` | yes |
//! | a write script's `DEADLINE` reply (nothing was applied) | `Timeout` | yes |
//! | HTTP 429 or 503 | `Busy` | yes |
//! | another HTTP 5xx (the proxy or Upstash could not reach Redis) | `Connection` | yes |
//! | an error reply `LOADING`, `BUSY`, `TRYAGAIN`, `READONLY`, `MASTERDOWN`, `CLUSTERDOWN` | `Busy` | yes |
//! | HTTP 401 or 403: the token was refused (logged once per store, at ERROR) | `Backend` | no |
//! | a body that is not the JSON expected, or cut short | `InvalidReply` | no |
//! | any other error reply (`WRONGTYPE`, `NOPERM`, `OOM`, ...) or HTTP status | `Backend` | no |
//!
//! A body cut short after the status line is not retried: the server had
//! already run the command, so a retry would spend twice.

use tollgate_core::StoreError;

use crate::CONNECT_TIMEOUT;

/// Error reply codes that a later attempt may get past.
const BUSY_CODES: [&str; 6] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
];

/// The longest piece of a server's error text kept in a message.
const MAX_TEXT: usize = 200;

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
    /// An error reply: Redis's (or the endpoint's) text.
    #[error("{0}")]
    Server(String),
    /// The request could not be sent.
    #[error("cannot reach the Upstash REST endpoint {address}")]
    Unreachable {
        address: String,
        #[source]
        source: reqwest::Error,
    },
}

fn clipped(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

/// Whether an error reply says the server does not have the script.
pub(crate) fn is_noscript(text: &str) -> bool {
    text.starts_with("NOSCRIPT")
}

/// An error reply (`{"error": text}`).
pub(crate) fn from_server(text: &str) -> StoreError {
    let code = text.split_whitespace().next().unwrap_or("");
    let failure = Box::new(Failure::Server(clipped(text)));
    if BUSY_CODES.contains(&code) {
        StoreError::Busy(failure)
    } else {
        StoreError::Backend(failure)
    }
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

/// A request that got no answer. The client has no request timeout, so a
/// timeout is a connection attempt's.
pub(crate) fn from_send(err: reqwest::Error, address: &str) -> StoreError {
    if err.is_timeout() {
        return StoreError::Timeout(CONNECT_TIMEOUT);
    }
    StoreError::Connection(Box::new(Failure::Unreachable {
        address: address.to_owned(),
        source: err.without_url(),
    }))
}

/// A body that could not be read to its end.
pub(crate) fn from_body(err: reqwest::Error) -> StoreError {
    tracing::debug!(error = %err.without_url(), "an Upstash reply body could not be read");
    StoreError::InvalidReply("the reply body could not be read to its end".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passing_refusals_are_busy_and_others_permanent() {
        for code in BUSY_CODES {
            let err = from_server(&format!("{code} try again later"));
            assert_eq!(err.kind(), "busy", "{code}");
        }
        for text in [
            "WRONGTYPE no",
            "ERR counter is not an integer",
            "NOPERM x",
            "",
        ] {
            let err = from_server(text);
            assert_eq!(err.kind(), "backend", "{text}");
            assert!(!err.is_transient());
        }
        assert!(is_noscript("NOSCRIPT No matching script. Please use EVAL."));
        assert!(!is_noscript("ERR NOSCRIPT"));
    }

    #[test]
    fn an_error_text_is_kept_up_to_200_characters() {
        let source = |err: &StoreError| {
            std::error::Error::source(err)
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        let short = "ERR é".repeat(40);
        assert_eq!(
            source(&from_server(&short)),
            short,
            "200 characters kept whole"
        );
        let long = format!("{short}and more");
        let clipped = source(&from_server(&long));
        assert_eq!(clipped, format!("{short}…"));
        let body = format!("{{\"error\":\"{long}\"}}");
        let status = source(&from_status(500, body.as_bytes(), "h:1"));
        assert!(status.ends_with(&format!(": {short}…")), "{status}");
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
