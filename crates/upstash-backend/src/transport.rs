//! The HTTP seam: [`Transport`] posts one request and returns the status and
//! body; [`Http`] is its reqwest implementation.
//!
//! Everything above the seam (commands, replies, the `NOSCRIPT` fallback,
//! failure mapping) is plain Rust, so another client can be put below it:
//! a `fetch`-based one for wasm (Cloudflare Workers), which would read the
//! deadline to abort its request, since dropping a `fetch` future there
//! does not necessarily stop it.

use reqwest::header::{AUTHORIZATION, CONTENT_TYPE, HeaderValue};
use reqwest::{Client, Url};
use tollgate_core::{Deadline, StoreError, async_trait};

use crate::endpoint::Endpoint;
use crate::{CONNECT_TIMEOUT, Error, POOL_IDLE_TIMEOUT, POOL_MAX_IDLE_PER_HOST, failure};

/// What an endpoint answered: the HTTP status and the whole body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    pub(crate) body: Vec<u8>,
}

/// One HTTP request per call: `POST /` with a JSON body (one command).
#[async_trait]
pub(crate) trait Transport: Send + Sync + 'static {
    /// Posts `body` (one command) to the endpoint's root with the store's
    /// token. Errors are [`StoreError`]s already: `Connection` when
    /// the request could not be sent, `InvalidReply` when the body could not
    /// be read. The deadline bounds nothing here (the caller's timer drops
    /// the future, which aborts the request); it is for clients that must
    /// abort by themselves.
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
            .connect_timeout(CONNECT_TIMEOUT)
            .pool_idle_timeout(POOL_IDLE_TIMEOUT)
            .pool_max_idle_per_host(POOL_MAX_IDLE_PER_HOST)
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
impl Transport for Http {
    async fn post(&self, body: Vec<u8>, _deadline: Deadline) -> Result<Response, StoreError> {
        let response = self
            .client
            .post(self.root.clone())
            .header(AUTHORIZATION, self.authorization.clone())
            .header(CONTENT_TYPE, HeaderValue::from_static("application/json"))
            .body(body)
            .send()
            .await
            .map_err(|err| failure::from_send(err, &self.address))?;
        let status = response.status().as_u16();
        let body = response.bytes().await.map_err(failure::from_body)?;
        Ok(Response {
            status,
            body: body.to_vec(),
        })
    }
}
