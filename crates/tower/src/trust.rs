//! [`Trust`]: which source of a client address a service believes.

use std::fmt;
use std::str::FromStr;

use crate::{Error, Network, cloudflare};

/// Which source of the client address to believe. A header that clients can
/// set themselves is believed only from a peer inside the networks configured
/// here; from any other peer the peer address is the client.
///
/// ```
/// use tollgate_tower::{Network, Trust};
/// assert_eq!("peer".parse::<Trust>()?, Trust::Peer);
/// assert_eq!("cf-connecting-ip".parse::<Trust>()?, Trust::cloudflare());
/// let proxies: Vec<Network> = vec!["10.0.0.0/8".parse()?];
/// let trust = Trust::XForwardedFor(proxies);
/// assert_eq!(trust.to_string(), "x-forwarded-for");
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub enum Trust {
    /// The socket peer address (the default). Needs the server to record
    /// it: a [`PeerAddr`](crate::PeerAddr) in the request's extensions, or
    /// axum's `ConnectInfo<SocketAddr>` (an axum router served with
    /// `into_make_service_with_connect_info::<SocketAddr>()`, feature
    /// `axum`), or the peer tonic's server records (feature `tonic`).
    #[default]
    Peer,
    /// The `cf-connecting-ip` header, believed only when the socket peer is
    /// inside these networks (Cloudflare's edge: [`Trust::cloudflare`]); from
    /// any other peer the peer address is the client. Needs the peer address,
    /// as [`Trust::Peer`] does.
    CfConnectingIp(Vec<Network>),
    /// `X-Forwarded-For`, read from the right starting at the peer address,
    /// skipping addresses inside these trusted proxy networks: the client is
    /// the first address not in them. With no networks, this is the peer.
    XForwardedFor(Vec<Network>),
}

impl Trust {
    /// `cf-connecting-ip` from Cloudflare's published networks
    /// ([`cloudflare::networks`]): the usual setting behind Cloudflare.
    pub fn cloudflare() -> Trust {
        Trust::CfConnectingIp(cloudflare::networks())
    }
}

impl FromStr for Trust {
    type Err = Error;

    /// Parses `peer`, `cf-connecting-ip` (from Cloudflare's published
    /// networks, [`Trust::cloudflare`]) or `x-forwarded-for` (with no trusted
    /// proxies yet: add them to the [`Trust::XForwardedFor`] list).
    fn from_str(text: &str) -> Result<Trust, Error> {
        match text.trim().to_ascii_lowercase().as_str() {
            "peer" => Ok(Trust::Peer),
            "cf-connecting-ip" => Ok(Trust::cloudflare()),
            "x-forwarded-for" => Ok(Trust::XForwardedFor(Vec::new())),
            _ => Err(Error::UnknownTrust(text.to_owned())),
        }
    }
}

impl fmt::Display for Trust {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Trust::Peer => "peer",
            Trust::CfConnectingIp(_) => "cf-connecting-ip",
            Trust::XForwardedFor(_) => "x-forwarded-for",
        })
    }
}
