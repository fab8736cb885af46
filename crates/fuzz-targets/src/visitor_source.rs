//! The `visitor_source` target: the client address of a request, from its
//! peer, `X-Forwarded-For` and `cf-connecting-ip`, under every trust setting.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::{Result, Unstructured};
use axum::extract::ConnectInfo;
use http::HeaderValue;
use http::request::Parts;
use tollgate_axum::{Error, Network, Trust, VisitorSource};
use tollgate_core::Visitor;

use crate::address::{check_visitor, salt};

/// The Cloudflare trust setting, believing `cf-connecting-ip` from peers
/// inside the networks the request may trust.
pub fn cloudflare(trusted: &[Network]) -> Trust {
    Trust::CfConnectingIp(trusted.to_vec())
}

/// Builds a request from `data` (an optional peer, trusted networks around
/// its addresses, `X-Forwarded-For` and `cf-connecting-ip` values as raw
/// bytes) and finds its visitor under every trust setting, in production and
/// in development; panics when a property breaks: development differs only
/// by `local` for a missing address, a visitor is always the visitor of the
/// peer or of a header address, and `X-Forwarded-For` gives the first
/// untrusted hop from the right.
pub fn visitor_source(data: &[u8]) {
    let Ok(request) = Request::new(&mut Unstructured::new(data)) else {
        return;
    };
    let salt = salt(data);
    let parts = request.parts();
    for trust in [
        Trust::Peer,
        cloudflare(&request.trusted),
        Trust::XForwardedFor(request.trusted.clone()),
    ] {
        let production = VisitorSource::new(trust.clone()).visitor(&parts);
        let development = VisitorSource::new(trust.clone())
            .development(true)
            .visitor(&parts);
        match &production {
            Err(Error::MissingAddress(_)) => {
                assert_eq!(development, Ok(Visitor::local()), "{trust}: {request:?}");
            }
            Err(Error::MalformedAddress(_)) => {
                assert_eq!(development, production, "{trust}: {request:?}");
            }
            Err(err) => panic!("{trust}: unexpected error {err:?} for {request:?}"),
            Ok(visitor) => {
                assert_eq!(development.as_ref(), Ok(visitor), "{trust}: {request:?}");
                let Some(ip) = request.candidate(&trust, visitor) else {
                    panic!("{trust}: visitor {visitor} is no address of {request:?}");
                };
                check_visitor(visitor, ip, salt);
            }
        }
        let expected = match &trust {
            Trust::Peer => request.peer.map(|peer| peer.ip()),
            Trust::XForwardedFor(_) => request.forwarded_client(),
            _ => continue,
        };
        let expected = expected.map(Visitor::from_ip);
        assert_eq!(production.ok(), expected, "{trust}: {request:?}");
    }
}

const X_FORWARDED_FOR: &str = "x-forwarded-for";
const CF_CONNECTING_IP: &str = "cf-connecting-ip";

/// A request head, as the fuzzer chose it.
#[derive(Debug)]
struct Request {
    peer: Option<SocketAddr>,
    trusted: Vec<Network>,
    /// The `X-Forwarded-For` values that `HeaderValue` accepted, in order.
    forwarded: Vec<HeaderValue>,
    /// The `cf-connecting-ip` values that `HeaderValue` accepted, in order.
    cloudflare: Vec<HeaderValue>,
}

impl Request {
    fn new(u: &mut Unstructured<'_>) -> Result<Request> {
        let mut pool = vec![address(u)?];
        for _ in 0..u.int_in_range(0..=3)? {
            pool.push(address(u)?);
        }
        let peer = match u.ratio(1, 8)? {
            true => None,
            false => Some(SocketAddr::new(pool[0], u.arbitrary()?)),
        };
        let mut trusted = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            let addr = match u.ratio(3, 4)? {
                true => *u.choose(&pool)?,
                false => address(u)?,
            };
            let bits = if addr.is_ipv4() { 32 } else { 128 };
            if let Ok(net) = Network::new(addr, u.int_in_range(0..=bits)?) {
                trusted.push(net);
            }
        }
        let mut forwarded = Vec::new();
        for _ in 0..u.int_in_range(0..=3)? {
            let mut value = hop(u, &pool)?;
            for _ in 0..u.int_in_range(0..=3)? {
                value.extend_from_slice(u.choose(&[&b","[..], b", ", b" ,", b",\t"])?);
                value.extend(hop(u, &pool)?);
            }
            forwarded.extend(HeaderValue::from_bytes(&value).ok());
        }
        let mut cloudflare = Vec::new();
        for _ in 0..u.int_in_range(0..=2)? {
            cloudflare.extend(HeaderValue::from_bytes(&hop(u, &pool)?).ok());
        }
        Ok(Request {
            peer,
            trusted,
            forwarded,
            cloudflare,
        })
    }

    fn parts(&self) -> Parts {
        let mut request = http::Request::new(());
        let headers = request.headers_mut();
        for value in &self.forwarded {
            headers.append(X_FORWARDED_FOR, value.clone());
        }
        for value in &self.cloudflare {
            headers.append(CF_CONNECTING_IP, value.clone());
        }
        if let Some(peer) = self.peer {
            request.extensions_mut().insert(ConnectInfo(peer));
        }
        request.into_parts().0
    }

    /// The address that `visitor` is the visitor of, among those `trust` may
    /// believe: the peer, or an address in a header.
    fn candidate(&self, trust: &Trust, visitor: &Visitor) -> Option<IpAddr> {
        let headers = match trust {
            Trust::Peer => &[][..],
            Trust::XForwardedFor(_) => &self.forwarded,
            _ => &self.cloudflare,
        };
        let texts = headers
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|text| text.split(','));
        let addresses = texts.filter_map(|text| text.trim_matches([' ', '\t']).parse().ok());
        self.peer
            .map(|peer| peer.ip())
            .into_iter()
            .chain(addresses)
            .find(|ip| Visitor::from_ip(*ip) == *visitor)
    }

    /// The client per `X-Forwarded-For` as documented: walking leftwards from
    /// the peer, the first address outside the trusted networks, or the
    /// leftmost when all are trusted; `None` where an error is due.
    fn forwarded_client(&self) -> Option<IpAddr> {
        let peer = self.peer?.ip();
        let trusted = |ip: IpAddr| self.trusted.iter().any(|net| net.contains(ip));
        if !trusted(peer) {
            return Some(peer);
        }
        let mut hops = Vec::new();
        for value in &self.forwarded {
            hops.extend(value.to_str().ok()?.split(','));
        }
        let mut client = None;
        for hop in hops.iter().rev() {
            let ip: IpAddr = hop.trim_matches([' ', '\t']).parse().ok()?;
            client = Some(ip);
            if !trusted(ip) {
                break;
            }
        }
        client
    }
}

/// An address: IPv4, IPv6, IPv4-mapped IPv6, or a common one.
fn address(u: &mut Unstructured<'_>) -> Result<IpAddr> {
    Ok(match u.int_in_range(0..=3)? {
        0 => IpAddr::V4(Ipv4Addr::from(u.arbitrary::<u32>()?)),
        1 => IpAddr::V6(Ipv6Addr::from(u.arbitrary::<u128>()?)),
        2 => IpAddr::V6(Ipv4Addr::from(u.arbitrary::<u32>()?).to_ipv6_mapped()),
        _ => *u.choose(&[
            IpAddr::V4(Ipv4Addr::LOCALHOST),
            IpAddr::V4(Ipv4Addr::new(10, 0, 0, 1)),
            IpAddr::V6(Ipv6Addr::LOCALHOST),
            IpAddr::V6(Ipv6Addr::new(0x2001, 0xdb8, 0, 1, 0, 0, 0, 1)),
        ])?,
    })
}

/// One hop of a header: an address written some way, or any bytes.
fn hop(u: &mut Unstructured<'_>, pool: &[IpAddr]) -> Result<Vec<u8>> {
    let ip = match u.ratio(3, 4)? {
        true => *u.choose(pool)?,
        false => address(u)?,
    };
    let text = ip.to_string();
    Ok(match u.int_in_range(0..=7)? {
        0..=2 => text.into_bytes(),
        3 => text.to_ascii_uppercase().into_bytes(),
        4 => format!("{}{text}{}", pad(u)?, pad(u)?).into_bytes(),
        5 => format!("{}:{}", text, u.arbitrary::<u16>()?).into_bytes(),
        6 => pad(u)?.as_bytes().to_vec(),
        _ => u.arbitrary()?,
    })
}

fn pad(u: &mut Unstructured<'_>) -> Result<&'static str> {
    u.choose(&["", " ", "\t", "  ", " \t"]).copied()
}
