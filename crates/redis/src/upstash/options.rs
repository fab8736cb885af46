//! [`UpstashOptions`] and [`PlainHttp`]: how an Upstash store opens.

/// Where the token may travel over plain `http://`.
///
/// The token is a bearer token: whoever reads it off the wire can run
/// commands with it. So by default it travels in clear text only to a
/// loopback host, and everywhere else only over `https://`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PlainHttp {
    /// `http://` only to a loopback host: a literal `127.0.0.0/8` or `::1`
    /// address, or the exact name `localhost` (trusted to name this
    /// machine, as RFC 6761 reserves it; no other name is resolved to find
    /// out). Any other `http://` URL is
    /// [`Error::PlainHttp`](super::Error::PlainHttp). The default.
    #[default]
    LoopbackOnly,
    /// `http://` to any host: for an endpoint on a private network the
    /// operator trusts with the token in clear text (a REST proxy on the
    /// same private subnet, behind no untrusted hop). The URL form of this
    /// opt-in is the query `?plain-http=trusted-network`.
    TrustedNetwork,
}

/// How [`UpstashStore::open_with`](crate::UpstashStore::open_with) opens a
/// store. Holds no secret: the token is given apart.
///
/// ```
/// use tollgate_redis::upstash::{PlainHttp, UpstashOptions, UpstashStore};
///
/// // A REST proxy on a trusted private network, reached over plain http.
/// let options = UpstashOptions::default().plain_http(PlainHttp::TrustedNetwork);
/// let store = UpstashStore::open_with("http://10.0.0.5:8079", "TOKEN", options)?;
/// # let _ = store;
/// # Ok::<(), tollgate_redis::upstash::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct UpstashOptions {
    pub(crate) plain_http: PlainHttp,
}

impl UpstashOptions {
    /// Where the token may travel over plain `http://`: loopback only
    /// unless told otherwise (see [`PlainHttp`]). A URL with the query
    /// `?plain-http=trusted-network` opts in as
    /// [`PlainHttp::TrustedNetwork`] does, whatever this says.
    #[must_use]
    pub fn plain_http(mut self, plain_http: PlainHttp) -> UpstashOptions {
        self.plain_http = plain_http;
        self
    }
}
