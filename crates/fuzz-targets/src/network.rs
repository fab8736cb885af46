//! The `network` target: [`Network`]'s `FromStr`, CIDR text for trusted proxies.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tollgate_axum::{Error, Network};

/// Parses `data` as a network; panics when a property breaks: text is
/// accepted exactly when it is an address with an optional decimal prefix
/// that fits it, a network re-parses from its display, and it contains an
/// address exactly when the address agrees with it on the first `prefix`
/// bits (an IPv4-mapped address being IPv4).
pub fn network(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let network = match (text.parse::<Network>(), accepts(text)) {
        (Ok(network), true) => network,
        (Err(Error::InvalidNetwork { .. }), false) => return,
        (Err(err), true) => panic!("{text:?} is a network but was refused: {err}"),
        (Err(err), false) => panic!("{text:?}: not an InvalidNetwork error: {err:?}"),
        (Ok(network), false) => panic!("{text:?} is no network but gave {network}"),
    };
    let (addr, prefix) = (network.addr(), network.prefix());
    let bits = bits(addr);
    assert!(prefix <= bits, "{network}: prefix past the address");
    assert!(
        !mapped(addr) || prefix < 96,
        "{network}: an IPv4 network kept as IPv6"
    );
    let again = network.to_string().parse::<Network>().ok();
    assert_eq!(again, Some(network), "{text:?}: display does not re-parse");
    assert_eq!(Network::new(addr, prefix).ok(), Some(network), "{text:?}");
    // An IPv4-mapped address is read as IPv4, so the IPv6 network it starts
    // (`::ffff:10.0.0.0/64`, prefix under 96) does not contain it, by design.
    let own = network.contains(addr);
    assert_eq!(
        own,
        !mapped(addr),
        "{network} contains its own address: {own}"
    );
    for bit in 0..bits {
        let flipped = flip(addr, bits - 1 - bit);
        let expected = bit >= prefix && !mapped(flipped);
        let contains = network.contains(flipped);
        assert_eq!(
            contains, expected,
            "{network} contains {flipped}: {contains}"
        );
        if let IpAddr::V4(v4) = flipped {
            let as_v6 = IpAddr::V6(v4.to_ipv6_mapped());
            assert_eq!(network.contains(as_v6), expected, "{network}: {as_v6}");
        }
    }
}

/// Whether `text` is `ADDRESS` or `ADDRESS/DIGITS` with a prefix that fits.
fn accepts(text: &str) -> bool {
    let (addr, prefix) = match text.split_once('/') {
        Some((addr, prefix)) => (addr, Some(prefix)),
        None => (text, None),
    };
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return false;
    };
    let Some(prefix) = prefix else {
        return true;
    };
    if prefix.is_empty() || !prefix.bytes().all(|b| b.is_ascii_digit()) {
        return false;
    }
    let significant = prefix.trim_start_matches('0');
    significant.len() <= 3 && significant.parse::<u32>().unwrap_or(0) <= u32::from(bits(addr))
}

fn mapped(addr: IpAddr) -> bool {
    matches!(addr, IpAddr::V6(v6) if v6.to_ipv4_mapped().is_some())
}

fn bits(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 32 } else { 128 }
}

/// `addr` with bit `at` (0 the lowest) flipped.
fn flip(addr: IpAddr, at: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from(u32::from(v4) ^ (1 << at))),
        IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from(u128::from(v6) ^ (1 << at))),
    }
}
