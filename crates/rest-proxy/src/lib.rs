#![doc = include_str!("../README.md")]

mod auth;
mod command;
mod link;
mod reply;
mod routes;
mod run;
mod script;

use std::fmt;
use std::time::Duration;

use tokio::net::TcpListener;

/// The default largest request body, in bytes (1 MiB); larger ones get a 413.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// The default bound on one Redis call, connecting included.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// How the proxy is configured: the Redis it fronts, the token callers
/// must present, and its limits.
#[derive(Clone)]
pub struct Options {
    redis_url: String,
    token: String,
    max_body: usize,
    redis_timeout: Duration,
}

impl Options {
    /// Options for a proxy in front of `redis_url` (`redis://host:port[/db]`)
    /// that admits callers presenting `token`.
    pub fn new(redis_url: impl Into<String>, token: impl Into<String>) -> Options {
        Options {
            redis_url: redis_url.into(),
            token: token.into(),
            max_body: DEFAULT_MAX_BODY,
            redis_timeout: DEFAULT_REDIS_TIMEOUT,
        }
    }

    /// Sets the largest request body, in bytes ([`DEFAULT_MAX_BODY`] unless set).
    pub fn max_body(mut self, bytes: usize) -> Options {
        self.max_body = bytes;
        self
    }

    /// Sets the bound on one Redis call ([`DEFAULT_REDIS_TIMEOUT`] unless set).
    pub fn redis_timeout(mut self, timeout: Duration) -> Options {
        self.redis_timeout = timeout;
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("redis_url", &redacted_url(&self.redis_url))
            .field("token", &"<redacted>")
            .field("max_body", &self.max_body)
            .field("redis_timeout", &self.redis_timeout)
            .finish()
    }
}

/// Why the proxy cannot start or stopped serving.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The token is empty: every caller would be admitted.
    #[error("the token is empty")]
    EmptyToken,
    /// The Redis URL does not parse.
    #[error("invalid Redis URL {url}: {reason}")]
    RedisUrl {
        /// The URL, with any password replaced by `***`.
        url: String,
        /// What the redis client says is wrong with it.
        reason: String,
    },
    /// Accepting connections failed.
    #[error("serving failed: {0}")]
    Io(#[from] std::io::Error),
}

/// The proxy's routes, ready to be served. Connects to Redis lazily, on the
/// first request, and again after the connection is lost.
///
/// # Errors
///
/// [`Error::EmptyToken`] and [`Error::RedisUrl`].
pub fn router(options: Options) -> Result<axum::Router, Error> {
    if options.token.is_empty() {
        return Err(Error::EmptyToken);
    }
    let client = redis::Client::open(options.redis_url.as_str()).map_err(|e| Error::RedisUrl {
        url: redacted_url(&options.redis_url),
        reason: e.to_string(),
    })?;
    let link = link::Link::new(client, options.redis_timeout);
    Ok(routes::router(routes::Shared::new(
        link,
        options.token.into_bytes(),
        options.max_body,
    )))
}

/// Serves the proxy on `listener` until accepting fails.
///
/// # Errors
///
/// As [`router`], and [`Error::Io`] when the listener fails.
pub async fn serve(listener: TcpListener, options: Options) -> Result<(), Error> {
    let app = router(options)?;
    axum::serve(listener, app).await?;
    Ok(())
}

/// `url` with the password of its user information, if any, replaced by `***`.
pub fn redacted_url(url: &str) -> String {
    let Some((scheme, rest)) = url.split_once("://") else {
        return url.to_owned();
    };
    let authority_end = rest.find('/').unwrap_or(rest.len());
    let (authority, path) = rest.split_at(authority_end);
    match authority.rsplit_once('@') {
        Some((user_info, host)) => {
            let user = user_info
                .split_once(':')
                .map_or(user_info, |(user, _)| user);
            format!("{scheme}://{user}:***@{host}{path}")
        }
        None => url.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn redacted_url_hides_only_the_password() {
        assert_eq!(
            redacted_url("redis://127.0.0.1:6390/2"),
            "redis://127.0.0.1:6390/2"
        );
        assert_eq!(
            redacted_url("redis://:secret@host:1/0"),
            "redis://:***@host:1/0"
        );
        assert_eq!(redacted_url("redis://me:p@ss@host"), "redis://me:***@host");
    }

    #[test]
    fn options_debug_shows_no_token() {
        let text = format!("{:?}", Options::new("redis://:pw@h:1", "sekrit"));
        assert!(!text.contains("sekrit") && !text.contains("pw"), "{text}");
    }
}
