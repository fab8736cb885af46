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

/// The longest response body read: 1 MiB. A tollgate reply is a JSON
/// array of at most one count per counter of the call, each at most 19
/// bytes (2^53 as a quoted JSON string, and a comma), or one short error
/// text; 1 MiB holds over 50,000 counters in one call, where a check names
/// a handful. Past it a body is not read further (nor kept): a broken or
/// hostile endpoint costs at most this much memory per call in flight.
pub(crate) const MAX_BODY: usize = 1 << 20;

/// What an endpoint answered: the HTTP status and the whole body.
#[derive(Debug)]
pub(crate) struct Response {
    pub(crate) status: u16,
    /// The body, or `None` when it was longer than [`MAX_BODY`] (declared
    /// so, or found so while reading it: the rest was not read).
    pub(crate) body: Option<Vec<u8>>,
}

/// One HTTP request per call: `POST /` with a JSON body (one command).
#[async_trait]
pub(crate) trait Post: Send + Sync + 'static {
    /// Posts `body` (one command) to the endpoint's root with the store's
    /// token, within `deadline`, and reads at most [`MAX_BODY`] bytes of
    /// the answer. Errors are [`StoreError`]s already: `Connection` when
    /// the request could not be sent, `Timeout` when the deadline came
    /// first, `InvalidReply` when the body could not be read.
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
            .http1_only()
            // reqwest retries only HTTP/2 and HTTP/3 refusals, which an
            // HTTP/1.1 client never meets, yet copies every request (body
            // and headers) in case it must: no retries, no copies.
            .retry(reqwest::retry::never().max_retries_per_request(0))
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
        let mut response = self
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
        let body = bounded_body(&mut response)
            .await
            .map_err(|err| failure::from_body(err, waited))?;
        Ok(Response { status, body })
    }
}

/// The body of `response`, or `None` as soon as it is known to be longer
/// than [`MAX_BODY`]: by its `Content-Length` (then nothing is read), or
/// while reading it (then no further chunk is read). Never more than
/// `MAX_BODY` bytes are kept; the connection of a body left unread is
/// closed, not reused.
async fn bounded_body(response: &mut reqwest::Response) -> Result<Option<Vec<u8>>, reqwest::Error> {
    let declared = response.content_length().unwrap_or(0);
    if declared > MAX_BODY as u64 {
        return Ok(None);
    }
    // At most MAX_BODY, so the conversion cannot fail.
    let mut body = Vec::with_capacity(usize::try_from(declared).unwrap_or(0));
    while let Some(chunk) = response.chunk().await? {
        if !appended(&mut body, &chunk, MAX_BODY) {
            return Ok(None);
        }
    }
    Ok(Some(body))
}

/// Appends `chunk` to `body` when the two together are at most `limit`
/// bytes long; `false`, `body` unchanged, otherwise.
fn appended(body: &mut Vec<u8>, chunk: &[u8], limit: usize) -> bool {
    if chunk.len() > limit.saturating_sub(body.len()) {
        return false;
    }
    body.extend_from_slice(chunk);
    true
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_grows_up_to_the_limit_and_never_past_it() {
        let mut body = Vec::new();
        assert!(appended(&mut body, b"abc", 5));
        assert!(appended(&mut body, b"de", 5));
        assert!(appended(&mut body, b"", 5));
        assert!(!appended(&mut body, b"f", 5));
        assert_eq!(body, b"abcde");
        let mut body = Vec::new();
        assert!(!appended(&mut body, &[b' '; 6], 5));
        assert!(body.is_empty());
    }
}
