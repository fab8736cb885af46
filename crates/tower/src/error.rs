//! The errors of this crate: bad configuration and unusable client addresses.

use std::fmt;

/// Everything that can go wrong in `tollgate-tower` (and `tollgate-axum`).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A trusted proxy network is not an address or `ADDRESS/PREFIX`.
    #[error("invalid network `{text}`: {reason}")]
    InvalidNetwork {
        /// The network as written.
        text: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A trust setting is not `peer`, `cf-connecting-ip` or `x-forwarded-for`.
    #[error("unknown trust `{0}`: expected peer, cf-connecting-ip or x-forwarded-for")]
    UnknownTrust(String),
    /// The trusted source gave no client address (and development mode is off).
    /// The message names no header (it may reach a caller); the source is
    /// in the variant, for logs.
    #[error("missing client address")]
    MissingAddress(AddressSource),
    /// The trusted source gave something that is not an IP address. The
    /// message names no header; the source is in the variant, for logs.
    #[error("malformed client address")]
    MalformedAddress(AddressSource),
    /// A guard's rule is keyed by another number of parts than it declares.
    #[error("rule `{rule}` takes {expected} key parts, {found} given")]
    KeyArity {
        /// The rule.
        rule: String,
        /// The parts it declares.
        expected: usize,
        /// The parts given.
        found: usize,
    },
    /// A guard's path template is not `/literal/{name}/…`.
    #[error("invalid path `{path}`: {reason}")]
    InvalidPath {
        /// The template as written.
        path: String,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// A rule is keyed by a path parameter that the guard's path template
    /// does not name (or the guard has none).
    #[error("rule `{rule}` is keyed by the path parameter `{param}`, which the guard's path {}", path.as_deref().map_or("is not set (Guard::path)".to_owned(), |p| format!("`{p}` does not name")))]
    UnknownParam {
        /// The rule.
        rule: String,
        /// The parameter.
        param: String,
        /// The guard's path template, if any.
        path: Option<String>,
    },
}

/// Where a client address was looked for: for server logs, never for a
/// response (it would tell a caller which header to forge).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum AddressSource {
    /// The socket peer address of the connection.
    Peer,
    /// The `cf-connecting-ip` header set by Cloudflare.
    CfConnectingIp,
    /// The `X-Forwarded-For` header set by trusted proxies.
    XForwardedFor,
}

impl fmt::Display for AddressSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            AddressSource::Peer => "the connection's peer address",
            AddressSource::CfConnectingIp => "the cf-connecting-ip header",
            AddressSource::XForwardedFor => "the X-Forwarded-For header",
        })
    }
}
