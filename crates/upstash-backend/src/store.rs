//! [`UpstashStore`]: the [`CounterStore`](tollgate_core::CounterStore) on
//! Upstash Redis over REST.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::Value;
use tollgate_core::{Deadline, StoreError};

use crate::command::Tail;
use crate::endpoint::Endpoint;
use crate::reply::{self, Answer};
use crate::script::{Script, Scripts};
use crate::transport::{Http, Transport};
use crate::{Error, TOKEN_VAR, URL_VAR, failure};

/// Counters in Upstash Redis over its REST API: one HTTP request per call,
/// whatever the batch size, with the scripts of the TCP store.
///
/// Cheap to clone; clones share one pooled HTTP client. See the
/// [crate docs](crate) for the protocol, the failure mapping and the
/// connection settings.
#[derive(Clone)]
pub struct UpstashStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    transport: Box<dyn Transport>,
    pub(crate) scripts: Scripts,
    /// `host:port`, never the token.
    address: String,
    /// Whether the refused token was logged already (once per store).
    refusal_logged: AtomicBool,
}

impl fmt::Debug for UpstashStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UpstashStore")
            .field("address", &self.inner.address)
            .finish_non_exhaustive()
    }
}

impl UpstashStore {
    /// A store on the endpoint `url` with `token`.
    ///
    /// `url` is `https://HOST` (Upstash), `http://HOST:PORT` (a local proxy),
    /// or either with an `upstash+` prefix (the facade's form). Nothing is
    /// sent until the first call, so this succeeds while the endpoint is down.
    ///
    /// ```
    /// let store = tollgate_upstash::UpstashStore::open("http://127.0.0.1:8079", "TOKEN")?;
    /// # let _ = store;
    /// # Ok::<(), tollgate_upstash::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error`] when the URL or the token cannot be used, or `https://`
    /// is asked of a build without the `tls` feature.
    pub fn open(url: &str, token: &str) -> Result<UpstashStore, Error> {
        let endpoint = Endpoint::new(url, token)?;
        let address = endpoint.address.clone();
        Ok(UpstashStore::with_transport(
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
        let url = var(URL_VAR)?;
        let token = var(TOKEN_VAR)?;
        UpstashStore::open(&url, &token)
    }

    pub(crate) fn with_transport(transport: Box<dyn Transport>, address: String) -> UpstashStore {
        UpstashStore {
            inner: Arc::new(Inner {
                transport,
                scripts: Scripts::new(),
                address,
                refusal_logged: AtomicBool::new(false),
            }),
        }
    }

    /// Sends one command (`POST /`) and reads its answer.
    async fn request(&self, body: Vec<u8>, deadline: Deadline) -> Result<Answer, StoreError> {
        let response = self.inner.transport.post(body, deadline).await?;
        match response.status {
            200 | 400 => reply::answer(response.status, &response.body),
            status => {
                if matches!(status, 401 | 403)
                    && !self.inner.refusal_logged.swap(true, Ordering::Relaxed)
                {
                    tracing::error!(
                        store = "upstash",
                        address = %self.inner.address,
                        status,
                        "the Upstash REST endpoint refused the token: check {TOKEN_VAR}; \
                         every call fails until it is fixed (logged once per store)"
                    );
                }
                Err(failure::from_status(
                    status,
                    &response.body,
                    &self.inner.address,
                ))
            }
        }
    }

    /// Runs `script` with the arguments of `tail`: one `EVALSHA` request,
    /// and only when it answers `NOSCRIPT` a second request, `EVAL` of the
    /// script's text, in the same call (never `SCRIPT LOAD`: a replica may
    /// not have the loaded script yet). A `DEADLINE` reply is
    /// [`StoreError::Timeout`].
    pub(crate) async fn eval(
        &self,
        script: &Script,
        tail: Tail,
        deadline: Deadline,
    ) -> Result<Value, StoreError> {
        let started = Instant::now();
        if deadline.has_passed() {
            // Nobody waits for the reply any more; the script would refuse it.
            return Err(StoreError::Timeout(Duration::ZERO));
        }
        let mut answer = self.request(tail.evalsha(&script.sha), deadline).await?;
        if matches!(&answer, Answer::Error(text) if failure::is_noscript(text)) {
            if deadline.has_passed() {
                return Err(StoreError::Timeout(started.elapsed()));
            }
            tracing::debug!(
                store = "upstash",
                "script not cached by the server; sending it with EVAL"
            );
            answer = self.request(tail.eval(script.text), deadline).await?;
        }
        match answer {
            Answer::Result(value) if reply::is_deadline(&value) => {
                Err(StoreError::Timeout(started.elapsed()))
            }
            Answer::Result(value) => Ok(value),
            Answer::Error(text) => Err(failure::from_server(&text)),
        }
    }

    /// Runs one plain command (a read) in one request.
    pub(crate) async fn command(
        &self,
        body: Vec<u8>,
        deadline: Deadline,
    ) -> Result<Value, StoreError> {
        if deadline.has_passed() {
            return Err(StoreError::Timeout(Duration::ZERO));
        }
        match self.request(body, deadline).await? {
            Answer::Result(value) => Ok(value),
            Answer::Error(text) => Err(failure::from_server(&text)),
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
