//! The properties of a visitor made from one address, shared by the targets.

use std::net::{IpAddr, Ipv6Addr};

use tollgate_core::{MAX_PART_LEN, Visitor};

/// The upper 64 bits of an IPv6 address, the part a visitor keeps.
const HIGH_64: u128 = !(u64::MAX as u128);

/// Checks that `visitor`, made from `ip`, is canonical, a valid key part and
/// stable when re-parsed; for IPv6, that it ends in `/64` and that changing
/// the last 64 bits of `ip` (by `salt`, among others) gives the same visitor.
pub(crate) fn check_visitor(visitor: &Visitor, ip: IpAddr, salt: u64) {
    let text = visitor.as_str();
    assert!(
        !text.is_empty() && text.len() <= MAX_PART_LEN,
        "visitor {text:?} of {ip} is no valid key part"
    );
    assert!(
        !text
            .bytes()
            .any(|b| b.is_ascii_uppercase() || b.is_ascii_whitespace() || !b.is_ascii()),
        "visitor {text:?} of {ip} is not canonical lowercase ASCII"
    );
    assert_ne!(text, Visitor::LOCAL, "the address {ip} became `local`");
    match ip.to_canonical() {
        IpAddr::V4(v4) => {
            assert_eq!(
                text,
                v4.to_string(),
                "IPv4 visitor of {ip} is not the address"
            );
            let again = Visitor::parse(text).ok();
            assert_eq!(
                again.as_ref(),
                Some(visitor),
                "{text:?} re-parses differently"
            );
        }
        IpAddr::V6(v6) => {
            let Some(network) = text.strip_suffix("/64") else {
                panic!("IPv6 visitor {text:?} of {ip} does not end in /64");
            };
            let base: Ipv6Addr = network
                .parse()
                .unwrap_or_else(|_| panic!("IPv6 visitor {text:?} is no address/64"));
            let high = u128::from(v6) & HIGH_64;
            assert_eq!(
                u128::from(base),
                high,
                "visitor {text:?} is not the /64 of {ip}"
            );
            let again = Visitor::parse(network).ok();
            assert_eq!(
                again.as_ref(),
                Some(visitor),
                "{network:?} re-parses differently"
            );
            for low in [0, u64::MAX, salt, !salt, salt.rotate_left(32)] {
                let other = Ipv6Addr::from(high | u128::from(low));
                // `::ffff:a.b.c.d` is read as IPv4, by design: it is no IPv6 visitor.
                if other.to_ipv4_mapped().is_some() {
                    continue;
                }
                let same = Visitor::from_ip(IpAddr::V6(other));
                assert_eq!(&same, visitor, "{other} and {ip} share a /64");
                let parsed = Visitor::parse(&other.to_string()).ok();
                assert_eq!(
                    parsed.as_ref(),
                    Some(visitor),
                    "{other} and {ip} share a /64"
                );
            }
        }
    }
}

/// A hash of the input, for the low bits that [`check_visitor`] tries.
pub(crate) fn salt(data: &[u8]) -> u64 {
    data.iter().fold(0xcbf2_9ce4_8422_2325, |h, &b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}
