//! [`UpstashStore`]: counters and marks in Upstash Redis over its REST API
//! (or in any redis-server behind `tollgate-rest-proxy`), for code that
//! cannot hold a TCP connection to Redis: one HTTP request per call,
//! whatever the batch size, with the scripts of the TCP store (so both keep
//! the same counters and can share them).

mod answer;
mod body;
mod endpoint;
mod error;
mod failure;
#[cfg(test)]
mod fake;
#[doc(hidden)]
pub mod fuzz;
mod http;
mod options;

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use tollgate_core::{Deadline, StoreError};

use crate::batch::Batcher;
use crate::call::Size;
use crate::ops::endpoint_store;
use crate::reply::Reply;
use crate::scripts::Script;
use crate::transport::Transport;
use body::Tail;
use endpoint::Endpoint;
use http::{Http, Post};

pub use error::Error;
pub use options::{PlainHttp, UpstashOptions};

/// The environment variable holding the REST URL, as Upstash names it.
pub const URL_VAR: &str = "UPSTASH_REDIS_REST_URL";

/// The environment variable holding the REST token, as Upstash names it.
pub const TOKEN_VAR: &str = "UPSTASH_REDIS_REST_TOKEN";

/// Counters and marks in Upstash Redis over its REST API: one HTTP request
/// per call, whatever the batch size, with the scripts of the TCP store.
///
/// Cheap to clone; clones share one pooled HTTP client. See the
/// [crate docs](crate#upstash-rest) for the protocol, the failure mapping
/// and the connection settings.
#[derive(Clone)]
pub struct UpstashStore {
    rest: Arc<Rest>,
    batch: Arc<Batcher<Rest>>,
}

/// The transport of an [`UpstashStore`]: one HTTP request per command.
struct Rest {
    http: Box<dyn Post>,
    /// `host:port`, never the token.
    address: String,
    /// Whether the refused token was logged already (once per store).
    refusal_logged: AtomicBool,
}

impl fmt::Debug for UpstashStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstashStore")
            .field("address", &self.rest.address)
            .finish_non_exhaustive()
    }
}

impl UpstashStore {
    /// A store on the endpoint `url` with `token`, with the default
    /// [`UpstashOptions`]: `http://` only to a loopback host.
    ///
    /// `url` is `https://HOST` (Upstash), `http://HOST:PORT` to a loopback
    /// host (a local proxy), or either with an `upstash+` prefix (the
    /// facade's form). `http://` to another host is refused unless the URL
    /// ends in `?plain-http=trusted-network` (or see
    /// [`open_with`](UpstashStore::open_with)). Nothing is sent until the
    /// first call, so this succeeds while the endpoint is down.
    ///
    /// ```
    /// let store = tollgate_redis::UpstashStore::open("http://127.0.0.1:8079", "TOKEN")?;
    /// # let _ = store;
    /// # Ok::<(), tollgate_redis::upstash::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error`] when the URL or the token cannot be used, `http://` is
    /// asked to a host that is not loopback ([`Error::PlainHttp`]), or
    /// `https://` of a build without the `tls` feature.
    pub fn open(url: &str, token: &str) -> Result<UpstashStore, Error> {
        UpstashStore::open_with(url, token, UpstashOptions::default())
    }

    /// A store on the endpoint `url` with `token`, opened as `options`
    /// say: as [`open`](UpstashStore::open), and with
    /// [`PlainHttp::TrustedNetwork`] `http://` to any host.
    ///
    /// # Errors
    ///
    /// As [`open`](UpstashStore::open).
    pub fn open_with(
        url: &str,
        token: &str,
        options: UpstashOptions,
    ) -> Result<UpstashStore, Error> {
        let endpoint = Endpoint::new(url, token, &options)?;
        let address = endpoint.address.clone();
        Ok(UpstashStore::with_http(
            Box::new(Http::new(endpoint)?),
            address,
        ))
    }

    /// A store configured by the environment, as Upstash's own clients are:
    /// [`URL_VAR`] (`UPSTASH_REDIS_REST_URL`) and [`TOKEN_VAR`]
    /// (`UPSTASH_REDIS_REST_TOKEN`); lazy, like [`open`](UpstashStore::open).
    ///
    /// # Errors
    ///
    /// [`Error::MissingVar`] or [`Error::InvalidVar`] when a variable is
    /// unset, empty or not Unicode; otherwise as [`open`](UpstashStore::open).
    pub fn from_env() -> Result<UpstashStore, Error> {
        UpstashStore::from_env_with(UpstashOptions::default())
    }

    /// As [`from_env`](UpstashStore::from_env), opened as `options` say.
    ///
    /// # Errors
    ///
    /// As [`from_env`](UpstashStore::from_env).
    pub fn from_env_with(options: UpstashOptions) -> Result<UpstashStore, Error> {
        let url = var(URL_VAR)?;
        let token = var(TOKEN_VAR)?;
        UpstashStore::open_with(&url, &token, options)
    }

    fn with_http(http: Box<dyn Post>, address: String) -> UpstashStore {
        let rest = Arc::new(Rest {
            http,
            address,
            refusal_logged: AtomicBool::new(false),
        });
        UpstashStore {
            batch: Arc::new(Batcher::new(Arc::clone(&rest))),
            rest,
        }
    }
}

endpoint_store!(UpstashStore, "upstash", rest, batch);

impl Transport for Rest {
    type Args = Tail;
    type Route = ();

    fn args(&self, _: &Script, size: Size) -> Tail {
        Tail::new(size)
    }

    async fn eval(
        &self,
        script: &Script,
        args: &Tail,
        code: bool,
        _: &mut (),
        deadline: Deadline,
    ) -> Result<Reply, StoreError> {
        let body = if code {
            args.eval(script.code)
        } else {
            args.evalsha(&script.sha)
        };
        self.request(body, deadline).await
    }

    async fn mget(
        &self,
        keys: &[&str],
        _: &mut (),
        deadline: Deadline,
    ) -> Result<Reply, StoreError> {
        self.request(body::mget(keys), deadline).await
    }
}

impl Rest {
    /// Sends one command (`POST /`) and reads its answer.
    async fn request(&self, body: Vec<u8>, deadline: Deadline) -> Result<Reply, StoreError> {
        let response = self.http.post(body, deadline).await?;
        match (response.status, response.body) {
            (200 | 400, Some(body)) => answer::read(response.status, &body),
            // No command's answer is this long: not an answer at all.
            (200 | 400, None) => Err(failure::too_long(http::MAX_BODY)),
            // Another status says what happened by itself; an error text
            // is read from a body of bounded length only.
            (status, body) => {
                if matches!(status, 401 | 403) && !self.refusal_logged.swap(true, Ordering::Relaxed)
                {
                    tracing::error!(
                        store = "upstash",
                        address = %self.address,
                        status,
                        "the Upstash REST endpoint refused the token: check {TOKEN_VAR}; \
                         every call fails until it is fixed (logged once per store)"
                    );
                }
                let body = body.unwrap_or_default();
                Err(failure::from_status(status, &body, &self.address))
            }
        }
    }
}

fn var(name: &'static str) -> Result<String, Error> {
    match std::env::var(name) {
        Ok(value) if !value.trim().is_empty() => Ok(value),
        Ok(_) | Err(std::env::VarError::NotPresent) => Err(Error::MissingVar(name)),
        Err(std::env::VarError::NotUnicode(_)) => Err(Error::InvalidVar(name)),
    }
}

#[cfg(all(test, feature = "tls"))]
mod tests {
    use super::*;

    /// The TLS client builds (with its own provider, none installed for the
    /// process): an `https://` store opens.
    #[test]
    fn https_stores_open_with_the_tls_feature() {
        assert!(UpstashStore::open("https://eu1-x.upstash.io", "t").is_ok());
    }
}
