//! [`VisitorSource`]: the visitor of a request, from the address its trust setting believes.

use std::net::{IpAddr, SocketAddr};

use http::request::Parts;
use http::{Extensions, HeaderMap};
use tollgate_core::Visitor;

use crate::{AddressSource, Error, Network, Trust};

/// The `cf-connecting-ip` header.
const CF_CONNECTING_IP: &str = "cf-connecting-ip";
/// The `X-Forwarded-For` header.
const X_FORWARDED_FOR: &str = "x-forwarded-for";

/// Finds the [`Visitor`] of a request: a [`Trust`] setting, and whether
/// development mode lets a request with no address be the `local` visitor.
///
/// In production a missing or malformed address is an error (answered with
/// 400), never a bucket shared by every caller.
///
/// ```
/// use tollgate_tower::{PeerAddr, Trust, VisitorSource};
///
/// let source = VisitorSource::new(Trust::cloudflare());
/// let request = |peer: &str| {
///     let mut request = http::Request::builder()
///         .header("cf-connecting-ip", "2001:DB8:0:1::7")
///         .body(())
///         .unwrap();
///     // What the server inserts (axum's `ConnectInfo` and tonic's do too).
///     request.extensions_mut().insert(PeerAddr(peer.parse().unwrap()));
///     request.into_parts().0
/// };
/// // From Cloudflare's edge, the header is the visitor...
/// let visitor = source.visitor(&request("173.245.48.1:443"))?;
/// assert_eq!(visitor.as_str(), "2001:db8:0:1::/64");
/// // ...from anyone else, the peer is.
/// let visitor = source.visitor(&request("203.0.113.9:50000"))?;
/// assert_eq!(visitor.as_str(), "203.0.113.9");
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct VisitorSource {
    trust: Trust,
    development: bool,
}

impl VisitorSource {
    /// A production source believing `trust`.
    pub fn new(trust: Trust) -> VisitorSource {
        VisitorSource {
            trust,
            development: false,
        }
    }

    /// Sets development mode: a request with no address is then `local`.
    pub fn development(mut self, development: bool) -> VisitorSource {
        self.development = development;
        self
    }

    /// The trust setting.
    pub fn trust(&self) -> &Trust {
        &self.trust
    }

    /// Whether development mode is on.
    pub fn is_development(&self) -> bool {
        self.development
    }

    /// The visitor of a request.
    ///
    /// # Errors
    ///
    /// [`Error::MissingAddress`] when the trusted source gives no address in
    /// production mode; [`Error::MalformedAddress`] when it gives something
    /// that is not an IP address (in either mode).
    pub fn visitor(&self, parts: &Parts) -> Result<Visitor, Error> {
        self.visitor_from(peer(&parts.extensions), &parts.headers)
    }

    /// The visitor of a call from `peer` (the address that connected, if
    /// known) and its `headers`, for servers that do not keep the request
    /// head as [`Parts`] (a gRPC handler: `grpc::visitor`, feature `tonic`).
    ///
    /// # Errors
    ///
    /// As [`visitor`](VisitorSource::visitor).
    pub fn visitor_from(
        &self,
        peer: Option<IpAddr>,
        headers: &HeaderMap,
    ) -> Result<Visitor, Error> {
        let peer = peer.ok_or(Error::MissingAddress(AddressSource::Peer));
        let found = match &self.trust {
            Trust::Peer => peer,
            Trust::CfConnectingIp(edges) => {
                peer.and_then(|peer| cf_connecting_ip(peer, headers, edges))
            }
            Trust::XForwardedFor(proxies) => {
                peer.and_then(|peer| forwarded_for(peer, headers, proxies))
            }
        };
        match found {
            Ok(ip) => Ok(Visitor::from_ip(ip)),
            Err(Error::MissingAddress(_)) if self.development => Ok(Visitor::local()),
            Err(err) => {
                if err == Error::MissingAddress(AddressSource::Peer) {
                    tracing::warn!(
                        "no peer address: insert a PeerAddr in the request's extensions, \
                         or serve an axum router with \
                         into_make_service_with_connect_info::<SocketAddr>()"
                    );
                }
                Err(err)
            }
        }
    }
}

/// The address that connected, as a server puts it in a request's
/// extensions for [`VisitorSource`] to find: a plain hyper or tower server
/// inserts it itself (axum's `ConnectInfo<SocketAddr>`, with the `axum`
/// feature, and the peer tonic's server records, with the `tonic` feature,
/// are found too).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerAddr(pub SocketAddr);

/// The peer address a server recorded in a request's extensions.
fn peer(extensions: &Extensions) -> Option<IpAddr> {
    let found = extensions.get::<PeerAddr>().map(|PeerAddr(addr)| addr.ip());
    #[cfg(feature = "axum")]
    let found = found.or_else(|| {
        extensions
            .get::<axum::extract::ConnectInfo<SocketAddr>>()
            .map(|axum::extract::ConnectInfo(addr)| addr.ip())
    });
    #[cfg(feature = "tonic")]
    let found = found.or_else(|| crate::grpc::peer(extensions));
    found
}

/// The client per `cf-connecting-ip` when the peer is inside `edges`; the
/// peer otherwise.
fn cf_connecting_ip(peer: IpAddr, headers: &HeaderMap, edges: &[Network]) -> Result<IpAddr, Error> {
    if edges.iter().any(|net| net.contains(peer)) {
        return cf_connecting_ip_header(headers);
    }
    if headers.contains_key(CF_CONNECTING_IP) {
        tracing::debug!(
            %peer,
            "cf-connecting-ip ignored: the peer is not in the trusted networks"
        );
    }
    Ok(peer)
}

fn cf_connecting_ip_header(headers: &HeaderMap) -> Result<IpAddr, Error> {
    let source = AddressSource::CfConnectingIp;
    let mut values = headers.get_all(CF_CONNECTING_IP).iter();
    let Some(value) = values.next() else {
        return Err(Error::MissingAddress(source));
    };
    if values.next().is_some() {
        return Err(Error::MalformedAddress(source));
    }
    let text = value
        .to_str()
        .map_err(|_| Error::MalformedAddress(source))?;
    let text = text.trim_matches([' ', '\t']);
    if text.is_empty() {
        return Err(Error::MissingAddress(source));
    }
    text.parse().map_err(|_| Error::MalformedAddress(source))
}

/// The client per `X-Forwarded-For`: walking from the peer leftwards through
/// the header, the first address outside the trusted proxies; the leftmost
/// address when every hop is trusted.
fn forwarded_for(peer: IpAddr, headers: &HeaderMap, proxies: &[Network]) -> Result<IpAddr, Error> {
    let source = AddressSource::XForwardedFor;
    let trusted = |ip: IpAddr| proxies.iter().any(|net| net.contains(ip));
    if !trusted(peer) {
        return Ok(peer);
    }
    let mut hops = Vec::new();
    for value in headers.get_all(X_FORWARDED_FOR) {
        let text = value
            .to_str()
            .map_err(|_| Error::MalformedAddress(source))?;
        hops.extend(text.split(',').map(|hop| hop.trim_matches([' ', '\t'])));
    }
    if hops.iter().all(|hop| hop.is_empty()) {
        return Err(Error::MissingAddress(source));
    }
    let mut client = None;
    for hop in hops.iter().rev() {
        let ip: IpAddr = hop.parse().map_err(|_| Error::MalformedAddress(source))?;
        client = Some(ip);
        if !trusted(ip) {
            break;
        }
    }
    client.ok_or(Error::MissingAddress(source))
}
