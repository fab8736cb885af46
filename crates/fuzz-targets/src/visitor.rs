//! The `visitor` target: [`Visitor::parse`], [`Visitor::resolve`] and [`Visitor::from_ip`].

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use tollgate_core::Visitor;

use crate::address::{check_visitor, salt};

/// Parses `data` as address text, and reads its first 4 and 16 bytes as raw
/// IPv4 and IPv6 addresses; panics when a visitor breaks a property: it must
/// be the address's visitor (text parses exactly when it is an IP address),
/// canonical lowercase, stable when re-parsed, and one per IPv6 /64.
pub fn visitor(data: &[u8]) {
    let salt = salt(data);
    if let Ok(text) = std::str::from_utf8(data) {
        parsed(text, salt);
    }
    if let Some(octets) = data.first_chunk::<4>() {
        let ip = IpAddr::V4(Ipv4Addr::from(*octets));
        check_visitor(&Visitor::from_ip(ip), ip, salt);
    }
    if let Some(octets) = data.first_chunk::<16>() {
        let ip = IpAddr::V6(Ipv6Addr::from(*octets));
        check_visitor(&Visitor::from_ip(ip), ip, salt);
    }
}

fn parsed(text: &str, salt: u64) {
    let trimmed = text.trim_matches([' ', '\t']);
    let address = trimmed.parse::<IpAddr>().ok();
    let visitor = Visitor::parse(text);
    match (&visitor, address) {
        (Ok(visitor), Some(ip)) => {
            assert_eq!(
                visitor,
                &Visitor::from_ip(ip),
                "{text:?}: parse and from_ip differ"
            );
            check_visitor(visitor, ip, salt);
        }
        (Err(_), None) => {}
        (Ok(visitor), None) => panic!("{text:?} is no IP address but gave visitor {visitor}"),
        (Err(err), Some(ip)) => panic!("{text:?} is the address {ip} but was refused: {err}"),
    }
    for development in [false, true] {
        let resolved = Visitor::resolve(Some(text), development).ok();
        let expected = if trimmed.is_empty() {
            development.then(Visitor::local)
        } else {
            visitor.as_ref().ok().cloned()
        };
        assert_eq!(resolved, expected, "{text:?}: resolve disagrees with parse");
    }
}
