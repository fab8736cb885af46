//! [`Network`]: an IP network in CIDR notation, for trusted proxies.

use std::fmt;
use std::net::IpAddr;
use std::str::FromStr;

use crate::Error;

/// An IP network such as `10.0.0.0/8` or `2001:db8::/32`; a bare address is
/// a network of one. Bits past the prefix are ignored.
///
/// ```
/// use tollgate_tower::Network;
/// let net: Network = "10.0.0.0/8".parse()?;
/// assert!(net.contains("10.1.2.3".parse().unwrap()));
/// assert!(net.contains("::ffff:10.1.2.3".parse().unwrap()));
/// assert!(!net.contains("11.0.0.1".parse().unwrap()));
/// assert!("10.0.0.0/33".parse::<Network>().is_err());
/// # Ok::<(), tollgate_tower::Error>(())
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Network {
    addr: IpAddr,
    prefix: u8,
}

impl Network {
    /// The network of `addr` with a `prefix`-bit mask; an error when the
    /// prefix is longer than the address.
    pub fn new(addr: IpAddr, prefix: u8) -> Result<Network, Error> {
        Network::canonical(addr, prefix).ok_or_else(|| Error::InvalidNetwork {
            text: format!("{addr}/{prefix}"),
            reason: "the prefix is longer than the address",
        })
    }

    /// The network, with an IPv4-mapped IPv6 network of prefix 96 or more
    /// read as the IPv4 network it maps (`::ffff:10.0.0.0/104` is
    /// `10.0.0.0/8`); `None` when the prefix is longer than the address.
    fn canonical(addr: IpAddr, prefix: u8) -> Option<Network> {
        let (addr, prefix) = match addr {
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) if prefix >= 96 => (IpAddr::V4(v4), prefix - 96),
                _ => (addr, prefix),
            },
            IpAddr::V4(_) => (addr, prefix),
        };
        (prefix <= bits(addr)).then_some(Network { addr, prefix })
    }

    /// The network's address (IPv4 for an IPv4-mapped network).
    pub fn addr(&self) -> IpAddr {
        self.addr
    }

    /// The prefix length in bits.
    pub fn prefix(&self) -> u8 {
        self.prefix
    }

    /// Whether `ip` is inside this network; an IPv4-mapped IPv6 address is
    /// read as IPv4.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, ip.to_canonical()) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                let mask = u32::MAX
                    .checked_shl(32 - u32::from(self.prefix))
                    .unwrap_or(0);
                u32::from(net) & mask == u32::from(ip) & mask
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                let mask = u128::MAX
                    .checked_shl(128 - u32::from(self.prefix))
                    .unwrap_or(0);
                u128::from(net) & mask == u128::from(ip) & mask
            }
            _ => false,
        }
    }
}

fn bits(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

impl FromStr for Network {
    type Err = Error;

    /// Parses `ADDRESS/PREFIX` or a bare `ADDRESS` (a network of one).
    fn from_str(text: &str) -> Result<Network, Error> {
        let invalid = |reason| Error::InvalidNetwork {
            text: text.to_owned(),
            reason,
        };
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr.parse().map_err(|_| invalid("not an IP address"))?;
        let prefix = match prefix {
            None => bits(addr),
            Some(p) if !p.is_empty() && p.bytes().all(|b| b.is_ascii_digit()) => p
                .parse()
                .map_err(|_| invalid("the prefix is longer than the address"))?,
            Some(_) => return Err(invalid("the prefix is not a number of bits")),
        };
        Network::canonical(addr, prefix)
            .ok_or_else(|| invalid("the prefix is longer than the address"))
    }
}

impl fmt::Display for Network {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn net(text: &str) -> Network {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn contains_addresses_inside_the_prefix_only() {
        assert!(net("10.0.0.0/8").contains(ip("10.255.0.1")));
        assert!(!net("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(net("192.168.1.7/24").contains(ip("192.168.1.200")));
        assert!(net("0.0.0.0/0").contains(ip("203.0.113.9")));
        assert!(!net("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(net("203.0.113.9").contains(ip("203.0.113.9")));
        assert!(!net("203.0.113.9").contains(ip("203.0.113.10")));
        assert!(net("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!net("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(net("::/0").contains(ip("::1")));
        assert!(net("10.0.0.0/8").contains(ip("::ffff:10.0.0.1")));
    }

    #[test]
    fn ipv4_mapped_networks_are_their_ipv4_networks() {
        assert_eq!(net("::ffff:10.0.0.0/104"), net("10.0.0.0/8"));
        assert_eq!(net("::ffff:0:0/96"), net("0.0.0.0/0"));
        assert!(net("::ffff:10.0.0.0/104").contains(ip("10.1.2.3")));
        assert!(net("::ffff:10.0.0.0/104").contains(ip("::ffff:10.1.2.3")));
        assert!(!net("::ffff:10.0.0.0/104").contains(ip("11.0.0.1")));
        assert!("::ffff:10.0.0.0/129".parse::<Network>().is_err());
        assert!(Network::new(ip("::ffff:10.0.0.0"), 104).is_ok());
    }

    #[test]
    fn malformed_networks_are_typed_errors() {
        for bad in [
            "",
            "/8",
            "10.0.0.0/",
            "10.0.0.0/33",
            "::/129",
            "10.0.0.0/-1",
            "10.0.0.0/8/8",
            "10.0.0.0/ 8",
            "ten/8",
            "10.0.0.0/99999999999",
        ] {
            assert!(
                matches!(bad.parse::<Network>(), Err(Error::InvalidNetwork { .. })),
                "{bad:?} was accepted"
            );
        }
        assert!(Network::new(ip("10.0.0.0"), 33).is_err());
        assert_eq!(net("10.0.0.0/8").to_string(), "10.0.0.0/8");
    }
}
