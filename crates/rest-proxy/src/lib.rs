#![doc = include_str!("../README.md")]

mod acl;
pub mod allow;
mod auth;
mod command;
mod failure;
mod link;
mod parse;
mod reply;
mod routes;
mod run;
mod script;

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::IntoConnectionInfo as _;
use tokio::net::TcpListener;
use tollgate::url::shown;
use tollgate_axum::serve::Limits;

use crate::acl::{Access, Users};
use crate::failure::LinkError;
use crate::link::Link;
use crate::routes::{Bounds, Shared};

/// The default largest request body, in bytes (1 MiB); larger ones get a 413.
pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

/// The default most commands in one pipeline or transaction (1,000); more get a 413.
pub const DEFAULT_MAX_COMMANDS: usize = 1_000;

/// The default bound on one Redis call, connecting included.
pub const DEFAULT_REDIS_TIMEOUT: Duration = Duration::from_secs(1);

/// The default time a client has to send a request head (10 s); past it
/// the connection is closed.
pub const DEFAULT_HEADER_TIMEOUT: Duration = tollgate_axum::serve::DEFAULT_HEADER_TIMEOUT;

/// The default time a client has to send a request body once its head is
/// in (10 s); past it the answer is a 408 and the connection is closed.
pub const DEFAULT_BODY_TIMEOUT: Duration = Duration::from_secs(10);

/// The default most connections open at once (1,024).
pub const DEFAULT_MAX_CONNECTIONS: usize = tollgate_axum::serve::DEFAULT_MAX_CONNECTIONS;

/// How the proxy is configured: the Redis it fronts, the token callers
/// must present, the Redis user their commands run as, and its limits.
#[derive(Clone)]
pub struct Options {
    redis_url: String,
    token: String,
    access: Access,
    bounds: Bounds,
    redis_timeout: Duration,
    limits: Limits,
}

impl Options {
    /// Options for a proxy in front of `redis_url` (`redis://[user:password@]host:port[/db]`)
    /// that admits callers presenting `token`. The URL's user must be
    /// restricted to the [allow-list](allow::COMMANDS): the proxy checks
    /// and serves nothing otherwise (see [`create_user`](Options::create_user)).
    pub fn new(redis_url: impl Into<String>, token: impl Into<String>) -> Options {
        Options {
            redis_url: redis_url.into(),
            token: token.into(),
            access: Access::Checked,
            bounds: Bounds {
                max_body: DEFAULT_MAX_BODY,
                max_commands: DEFAULT_MAX_COMMANDS,
                body_timeout: DEFAULT_BODY_TIMEOUT,
            },
            redis_timeout: DEFAULT_REDIS_TIMEOUT,
            limits: Limits::default(),
        }
    }

    /// Runs callers' commands as Redis user `name`, created (or updated)
    /// through the URL's user, which must be allowed `ACL SETUSER`: the
    /// user may run the allow-list's commands on every key, and nothing
    /// else; its password is random and known only to this process (each
    /// proxy adds its own, so several proxies can share one user).
    pub fn create_user(mut self, name: impl Into<String>) -> Options {
        self.access = Access::Create(name.into());
        self
    }

    /// Serves even when the URL's user may run commands outside the
    /// allow-list, which scripts sent through the proxy can then run too
    /// (for a Redis without ACLs; not for a server anyone else relies on).
    pub fn allow_unrestricted_user(mut self) -> Options {
        self.access = Access::Unrestricted;
        self
    }

    /// Sets the largest request body, in bytes ([`DEFAULT_MAX_BODY`] unless set).
    pub fn max_body(mut self, bytes: usize) -> Options {
        self.bounds.max_body = bytes;
        self
    }

    /// Sets the most commands in one pipeline or transaction
    /// ([`DEFAULT_MAX_COMMANDS`] unless set).
    pub fn max_commands(mut self, commands: usize) -> Options {
        self.bounds.max_commands = commands;
        self
    }

    /// Sets the bound on one Redis call ([`DEFAULT_REDIS_TIMEOUT`] unless
    /// set). A script still running at this bound is killed when Redis lets
    /// it be (see the README).
    pub fn redis_timeout(mut self, timeout: Duration) -> Options {
        self.redis_timeout = timeout;
        self
    }

    /// Sets how long a client has to send a request head
    /// ([`DEFAULT_HEADER_TIMEOUT`] unless set).
    pub fn header_timeout(mut self, timeout: Duration) -> Options {
        self.limits.header_timeout = timeout;
        self
    }

    /// Sets how long a client has to send a request body once its head is
    /// in ([`DEFAULT_BODY_TIMEOUT`] unless set).
    pub fn body_timeout(mut self, timeout: Duration) -> Options {
        self.bounds.body_timeout = timeout;
        self
    }

    /// Sets the most connections open at once ([`DEFAULT_MAX_CONNECTIONS`]
    /// unless set); past it new clients wait in the listen backlog.
    pub fn max_connections(mut self, connections: usize) -> Options {
        self.limits.max_connections = connections;
        self
    }
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Options")
            .field("redis_url", &shown(&self.redis_url))
            .field("token", &"<redacted>")
            .field("access", &self.access)
            .field("bounds", &self.bounds)
            .field("redis_timeout", &self.redis_timeout)
            .field("limits", &self.limits)
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
        /// The URL's scheme and host only, as [`tollgate::url::shown`]
        /// gives them: never its user, password, path or query.
        url: String,
        /// What the redis client says is wrong with it.
        reason: String,
    },
    /// The proxy's Redis user may run commands outside the allow-list, or
    /// cannot be created: the proxy serves nothing.
    #[error("{0}")]
    RedisUser(String),
    /// Redis did not answer.
    #[error("{0}")]
    Unavailable(String),
    /// Accepting connections failed.
    #[error("serving failed: {0}")]
    Io(#[from] std::io::Error),
}

impl From<LinkError> for Error {
    fn from(error: LinkError) -> Error {
        match error {
            LinkError::Unrestricted { .. } | LinkError::Setup(_) => {
                Error::RedisUser(error.to_string())
            }
            LinkError::Timeout(_) | LinkError::Redis(_) => Error::Unavailable(error.to_string()),
        }
    }
}

/// A proxy, ready to connect and serve.
pub struct Proxy {
    shared: Arc<Shared>,
    limits: Limits,
}

impl Proxy {
    /// A proxy with `options`. Connects to Redis lazily, on the first
    /// request or [`connect`](Proxy::connect), and again after the
    /// connection is lost.
    ///
    /// # Errors
    ///
    /// [`Error::EmptyToken`] and [`Error::RedisUrl`].
    pub fn new(options: Options) -> Result<Proxy, Error> {
        if options.token.is_empty() {
            return Err(Error::EmptyToken);
        }
        let url_error = |e: redis::RedisError| Error::RedisUrl {
            url: shown(&options.redis_url),
            reason: e.to_string(),
        };
        let info = options
            .redis_url
            .as_str()
            .into_connection_info()
            .map_err(url_error)?;
        if let Access::Create(name) = &options.access {
            check_name(name)?;
        }
        if options.access != Access::Unrestricted {
            database_zero(&info)?;
        }
        let users = Users::new(info, &options.access).map_err(url_error)?;
        let link = Arc::new(Link::new(users, options.redis_timeout));
        Ok(Proxy {
            shared: Arc::new(Shared::new(
                link,
                options.token.into_bytes(),
                options.bounds,
            )),
            limits: options.limits,
        })
    }

    /// Connects to Redis now: creates the proxy's user if it was asked to,
    /// and checks that the user is restricted to the allow-list.
    ///
    /// # Errors
    ///
    /// [`Error::RedisUser`] when the user may run more (the proxy then
    /// answers every request with a 500 saying so) or cannot be created,
    /// [`Error::Unavailable`] when Redis does not answer (the proxy tries
    /// again on the next request).
    pub async fn connect(&self) -> Result<(), Error> {
        Ok(self.shared.link().ready().await?)
    }

    /// The Redis user callers' commands run as.
    pub fn redis_user(&self) -> &str {
        self.shared.link().users().name()
    }

    /// What a token holder can do, in one line for the start-up log.
    pub fn describe(&self) -> String {
        let what = format!(
            "a token holder can run {} data commands (strings, keys, hashes, lists, sets, \
             sorted sets, HyperLogLog, bitmaps, geo, streams, scripts; `--print-acl` lists \
             them) as Redis user {:?}",
            allow::COMMANDS.len(),
            self.redis_user()
        );
        if self.shared.link().users().is_checked() {
            format!(
                "{what}, whose ACL holds scripts to the same commands: none that administers \
                 the server or reaches another database (a script can still use memory and \
                 time: see the README)"
            )
        } else {
            format!(
                "{what}; that user is NOT restricted (--allow-unrestricted-user): a script \
                 can run any command it may, FLUSHALL and CONFIG included"
            )
        }
    }

    /// Whether the proxy runs as a user it checked (or made) to be
    /// restricted to the allow-list.
    pub fn is_restricted(&self) -> bool {
        self.shared.link().users().is_checked()
    }

    /// The proxy's routes.
    pub fn router(&self) -> axum::Router {
        routes::router(Arc::clone(&self.shared))
    }

    /// Serves on `listener` until `shutdown` completes, with the header
    /// timeout and the connection cap of the options.
    ///
    /// # Errors
    ///
    /// [`Error::Io`] when the listener fails.
    pub async fn serve(
        &self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) -> Result<(), Error> {
        tollgate_axum::serve::serve_with(listener, self.router(), self.limits, shutdown).await?;
        Ok(())
    }
}

/// `ACL SETUSER <name> <rules>` for the Redis at `redis_url`: the proxy's
/// user, restricted to the allow-list's commands that server knows, as one
/// line for `redis-cli` (append a password rule, `>PASSWORD`).
///
/// # Errors
///
/// [`Error::RedisUrl`], [`Error::RedisUser`] for an invalid name, and
/// [`Error::Unavailable`] when Redis does not answer.
pub async fn acl_setuser_line(redis_url: &str, name: &str) -> Result<String, Error> {
    check_name(name)?;
    let info = redis_url
        .into_connection_info()
        .map_err(|e| Error::RedisUrl {
            url: shown(redis_url),
            reason: e.to_string(),
        })?;
    let config = redis::AsyncConnectionConfig::new()
        .set_connection_timeout(Some(DEFAULT_REDIS_TIMEOUT))
        .set_response_timeout(Some(DEFAULT_REDIS_TIMEOUT));
    database_zero(&info)?;
    Ok(acl::setuser_line(info, name, &config).await?)
}

/// Refuses a URL that selects a database other than 0: a user may run
/// `SELECT` inside a script whenever it may run it at all (redis-rs sends it
/// to select the URL's database), and a Redis ACL cannot hold a user to one
/// database, so a script could reach every other database.
fn database_zero(info: &redis::ConnectionInfo) -> Result<(), Error> {
    match info.redis_settings().db() {
        0 => Ok(()),
        db => Err(Error::RedisUser(format!(
            "the URL selects database {db}: a restricted proxy serves database 0 only, since a \
             Redis ACL cannot keep a script that may SELECT in one database (use database 0, \
             or --allow-unrestricted-user)"
        ))),
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    if acl::valid_name(name) {
        Ok(())
    } else {
        Err(Error::RedisUser(format!(
            "invalid Redis user name {name:?}: use 1 to 64 ASCII letters, digits, '-', '_' or '.'"
        )))
    }
}

/// The proxy's routes, ready to be served (without the header timeout and
/// connection cap of [`serve`]).
///
/// # Errors
///
/// [`Error::EmptyToken`] and [`Error::RedisUrl`].
pub fn router(options: Options) -> Result<axum::Router, Error> {
    Ok(Proxy::new(options)?.router())
}

/// Connects (see [`Proxy::connect`]), then serves the proxy on `listener`
/// until accepting fails. Redis being unreachable at the start is not an
/// error: the proxy connects on the first request.
///
/// # Errors
///
/// As [`Proxy::new`], [`Error::RedisUser`], and [`Error::Io`] when the listener fails.
pub async fn serve(listener: TcpListener, options: Options) -> Result<(), Error> {
    let proxy = Proxy::new(options)?;
    match proxy.connect().await {
        Err(Error::Unavailable(why)) => tracing::warn!(%why, "redis is not answering yet"),
        other => other?,
    }
    proxy.serve(listener, std::future::pending()).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_bad_redis_url_is_named_by_its_scheme_and_host_only() {
        for (url, want) in [
            ("redis://me:p@ss@[::1/0", "redis://[::1"),
            ("redis://:hunter2@h:99999/0", "redis://h:99999"),
            ("redis://u:hunter2@h:1/x?password=y", "redis://h:1"),
            ("me:hunter2@h:1", tollgate::url::NOT_A_URL),
        ] {
            let err = match router(Options::new(url, "t")) {
                Ok(_) => panic!("{url} was accepted"),
                Err(err) => err,
            };
            assert!(
                matches!(&err, Error::RedisUrl { url: shown, .. } if shown == want),
                "{url}: {err:?}"
            );
            let text = format!("{err} {err:?}");
            assert!(!text.contains("hunter2") && !text.contains("me:"), "{text}");
        }
    }

    #[test]
    fn options_debug_shows_no_token_and_the_url_by_scheme_and_host() {
        let text = format!(
            "{:?}",
            Options::new("redis://planted-user:pw@h:1/2", "sekrit").create_user("u")
        );
        assert!(!text.contains("sekrit") && !text.contains("pw"), "{text}");
        assert!(!text.contains("planted-user"), "{text}");
        assert!(text.contains("redis_url: \"redis://h:1\""), "{text}");
    }
}
