//! Visitor identity: the key part for an anonymous caller, from a trusted address.

use std::fmt;
use std::net::IpAddr;

use crate::Error;

/// An anonymous caller, as a key part: an IPv4 address as it is, an IPv6
/// address reduced to its /64 (one person usually owns a whole /64), or
/// `local` in development mode.
///
/// ```
/// use tollgate_core::Visitor;
/// let a = Visitor::parse("2001:0DB8:0000:0001:aaaa::1")?;
/// let b = Visitor::parse("2001:db8:0:1:ffff:ffff:ffff:ffff")?;
/// assert_eq!(a, b);
/// assert_eq!(a.as_str(), "2001:db8:0:1::/64");
/// assert_eq!(Visitor::parse("::ffff:203.0.113.9")?.as_str(), "203.0.113.9");
/// # Ok::<(), tollgate_core::Error>(())
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Visitor(String);

impl Visitor {
    /// The visitor of a caller with no address, in development mode only.
    pub const LOCAL: &str = "local";

    /// The visitor for an address.
    pub fn from_ip(ip: IpAddr) -> Visitor {
        match ip {
            IpAddr::V4(v4) => Visitor(v4.to_string()),
            IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
                Some(v4) => Visitor(v4.to_string()),
                None => {
                    let [a, b, c, d, ..] = v6.segments();
                    Visitor(format!("{a:x}:{b:x}:{c:x}:{d:x}::/64"))
                }
            },
        }
    }

    /// The visitor for an address written as text (surrounding spaces are
    /// ignored); [`Error::InvalidAddress`] when it is not an IP address.
    pub fn parse(address: &str) -> Result<Visitor, Error> {
        address
            .trim_matches([' ', '\t'])
            .parse::<IpAddr>()
            .map(Visitor::from_ip)
            .map_err(|_| Error::InvalidAddress)
    }

    /// The visitor for a possibly missing address: a missing or empty address
    /// is `local` when `development` is true and [`Error::MissingAddress`]
    /// otherwise, never a bucket shared by everyone in production.
    pub fn resolve(address: Option<&str>, development: bool) -> Result<Visitor, Error> {
        match address.map(|a| a.trim_matches([' ', '\t'])) {
            Some(a) if !a.is_empty() => Visitor::parse(a),
            _ if development => Ok(Visitor::local()),
            _ => Err(Error::MissingAddress),
        }
    }

    /// The development-mode visitor, `local`.
    pub fn local() -> Visitor {
        Visitor(Visitor::LOCAL.to_owned())
    }

    /// The key part.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl AsRef<str> for Visitor {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for Visitor {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn visitor(text: &str) -> String {
        Visitor::parse(text)
            .map(|v| v.0)
            .unwrap_or_else(|e| panic!("{text}: {e}"))
    }

    #[test]
    fn a_visitor_keys_a_limit_and_shows_as_its_key_part() {
        let visitor = Visitor::parse("2001:db8:0:1::9").unwrap_or_else(|e| panic!("{e}"));
        let rule =
            crate::Rule::new("ask", 1, crate::Window::DAY).and_then(|r| r.with_key(&["visitor"]));
        let limit = rule.and_then(|r| r.limit(&[&visitor]));
        assert_eq!(
            limit.map(|l| l.key().to_owned()).ok().as_deref(),
            Some("ask:2001:db8:0:1::/64")
        );
        assert_eq!(visitor.to_string(), "2001:db8:0:1::/64");
    }

    #[test]
    fn ipv4_is_used_as_it_is() {
        assert_eq!(visitor("203.0.113.9"), "203.0.113.9");
        assert_eq!(visitor(" 203.0.113.9 "), "203.0.113.9");
    }

    #[test]
    fn every_spelling_of_one_ipv6_64_is_one_visitor() {
        for spelling in [
            "2001:db8:0:1::1",
            "2001:DB8:0:1::ffff",
            "2001:0db8:0000:0001:0000:0000:0000:0001",
            "2001:db8::1:0:0:0:1",
            "2001:db8:0:1:1:2:3:4",
        ] {
            assert_eq!(visitor(spelling), "2001:db8:0:1::/64", "{spelling}");
        }
        assert_eq!(visitor("::1"), "0:0:0:0::/64");
        assert_eq!(visitor("2001:db8::"), "2001:db8:0:0::/64");
        assert_ne!(visitor("2001:db8:0:2::1"), visitor("2001:db8:0:1::1"));
    }

    #[test]
    fn ipv4_mapped_ipv6_is_ipv4() {
        assert_eq!(visitor("::ffff:203.0.113.9"), "203.0.113.9");
        assert_eq!(visitor("::FFFF:cb00:7109"), "203.0.113.9");
    }

    #[test]
    fn malformed_addresses_are_typed_errors() {
        for bad in [
            "",
            "local",
            "1.2.3",
            "1.2.3.4:80",
            "[::1]",
            "fe80::1%eth0",
            "1.2.3.4, 5.6.7.8",
            "::g",
            "999.1.1.1",
        ] {
            assert!(
                matches!(Visitor::parse(bad), Err(Error::InvalidAddress)),
                "{bad:?}"
            );
        }
    }

    #[test]
    fn missing_address_is_local_only_in_development() {
        assert_eq!(Visitor::resolve(None, true).ok(), Some(Visitor::local()));
        assert_eq!(
            Visitor::resolve(Some(" "), true).ok(),
            Some(Visitor::local())
        );
        assert!(matches!(
            Visitor::resolve(None, false),
            Err(Error::MissingAddress)
        ));
        assert!(matches!(
            Visitor::resolve(Some(""), false),
            Err(Error::MissingAddress)
        ));
        assert!(matches!(
            Visitor::resolve(Some("nope"), true),
            Err(Error::InvalidAddress)
        ));
    }
}
