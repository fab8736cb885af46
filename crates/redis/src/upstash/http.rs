//! The HTTP seam: [`Post`] posts one request and returns the status and
//! body; [`Http`] is its reqwest implementation.
//!
//! Everything above the seam (commands, replies, the `NOSCRIPT` fallback,
//! failure mapping) is plain Rust, so another client can be put below it:
//! a `fetch`-based one for wasm (Cloudflare Workers), which would read the
//! deadline to abort its request, since dropping a `fetch` future there
//! does not necessarily stop it.

use std::time::Duration;

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Client, Url};
use tollgate_core::{Deadline, StoreError, async_trait};

use super::endpoint::Endpoint;
use super::{Error, failure};

/// How long an idle pooled connection is kept: 30 s, shorter than the 60 s
/// idle limit common to HTTP front ends, so that the client rather than the
/// server usually closes it. Not a time budget: no call waits on an idle
/// connection.
const IDLE_KEPT: Duration = Duration::from_secs(30);

/// The most idle connections kept per host: 64, the number of calls that
/// may be in flight at once without opening a connection after a quiet spell.
const MAX_IDLE: usize = 64;

/// What an endpoint answered: the HTTP status and the whole body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// One HTTP request per call: `POST /` with a JSON body (one command).
#[async_trait]
pub(crate) trait Post: Send + Sync + 'static {
    /// Posts `body` (one command) to the endpoint's root with the store's
    /// token, within `deadline`. Errors are [`StoreError`]s already:
    /// `Connection` when the request could not be sent, `Timeout` when the
    /// deadline came first, `InvalidReply` when the body could not be read.
    async fn post(&self, body: Vec<u8>, deadline: Deadline) -> Result<Response, StoreError>;
}

/// The reqwest client: one pooled keep-alive client per store, HTTP/1.1.
pub(crate) struct Http {
    client: Client,
    root: Url,
    authorization: HeaderValue,
    address: String,
}

impl Http {
    pub(crate) fn new(endpoint: Endpoint) -> Result<Http, Error> {
        let builder = Client::builder()
            .pool_idle_timeout(IDLE_KEPT)
            .pool_max_idle_per_host(MAX_IDLE)
            .tcp_nodelay(true)
            .redirect(reqwest::redirect::Policy::none())
            .no_proxy();
        let client = builder
            .build()
            .map_err(|err| Error::Client(err.without_url().to_string()))?;
        Ok(Http {
            client,
            root: endpoint.root,
            authorization: endpoint.authorization,
            address: endpoint.address,
        })
    }
}

#[async_trait]
impl Post for Http {
    /// The request, connecting included, is bounded by `deadline`: the
    /// limiter's attempt timer also drops it there, but a connection made
    /// for it never outlives the call.
    async fn post(&self, body: Vec<u8>, deadline: Deadline) -> Result<Response, StoreError> {
        let waited = deadline.remaining();
        let response = self
            .client
            .post(self.root.clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .timeout(waited)
            .body(body)
            .send()
            .await
            .map_err(|err| failure::from_send(err, &self.address, waited))?;
        let status = response.status().as_u16();
        let body = response
            .bytes()
            .await
            .map_err(|err| failure::from_body(err, waited))?;
        Ok(Response {
            status,
            body: body.to_vec(),
        })
    }
}
