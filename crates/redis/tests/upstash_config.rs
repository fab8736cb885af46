//! `UpstashStore::from_env` reads `UPSTASH_REDIS_REST_URL` and
//! `UPSTASH_REDIS_REST_TOKEN`. The environment is process-wide (and setting
//! it is `unsafe` in edition 2024), so each case runs this binary again as a
//! child with its own environment.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use tollgate_redis::upstash::{Error, TOKEN_VAR, URL_VAR, UpstashStore};

/// Set in the child: what `from_env` must give.
const EXPECT: &str = "TOLLGATE_UPSTASH_EXPECT";

/// The child's half: does nothing unless [`EXPECT`] is set.
#[test]
fn child_reads_its_environment() {
    let Ok(expected) = std::env::var(EXPECT) else {
        return;
    };
    let got = match UpstashStore::from_env() {
        Ok(store) => format!("ok {store:?}"),
        Err(Error::MissingVar(var)) => format!("missing {var}"),
        Err(Error::InvalidUrl(_)) => "invalid url".into(),
        Err(Error::InvalidToken(_)) => "invalid token".into(),
        Err(err @ Error::PlainHttp { .. }) => format!("plain http: {err}"),
        Err(other) => format!("other {other}"),
    };
    assert!(got.starts_with(&expected), "expected {expected}, got {got}");
    assert!(!got.contains("s3cret"), "{got}");
}

#[test]
fn from_env_reads_both_variables_with_typed_errors() {
    let cases: [(Option<&str>, Option<&str>, &str); 8] = [
        (
            Some("https://eu1-x.upstash.io"),
            Some("s3cret"),
            "ok UpstashStore { address: \"eu1-x.upstash.io:443\"",
        ),
        (
            Some("http://127.0.0.1:8079\n"),
            Some("s3cret\n"),
            "ok UpstashStore { address: \"127.0.0.1:8079\"",
        ),
        (None, Some("s3cret"), &format!("missing {URL_VAR}")),
        (
            Some("http://127.0.0.1:8079"),
            None,
            &format!("missing {TOKEN_VAR}"),
        ),
        (
            Some("http://127.0.0.1:8079"),
            Some(""),
            &format!("missing {TOKEN_VAR}"),
        ),
        (Some("127.0.0.1:8079"), Some("s3cret"), "invalid url"),
        // The token would cross a network in clear text: refused, unless
        // the URL opts in for a trusted network.
        (
            Some("http://203.0.113.9:8079"),
            Some("s3cret"),
            "plain http: the token would travel in clear text to 203.0.113.9:8079",
        ),
        (
            Some("http://203.0.113.9:8079?plain-http=trusted-network"),
            Some("s3cret"),
            "ok UpstashStore { address: \"203.0.113.9:8079\"",
        ),
    ];
    for (url, token, expected) in cases {
        let mut child = Command::new(std::env::current_exe().unwrap());
        child
            .args(["--exact", "child_reads_its_environment", "--nocapture"])
            .env(EXPECT, expected)
            .env_remove(URL_VAR)
            .env_remove(TOKEN_VAR);
        if let Some(url) = url {
            child.env(URL_VAR, url);
        }
        if let Some(token) = token {
            child.env(TOKEN_VAR, token);
        }
        let output = child.output().unwrap();
        assert!(
            output.status.success(),
            "{url:?} {token:?}: {}",
            String::from_utf8_lossy(&output.stdout)
        );
    }
}
