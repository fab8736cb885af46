//! The errors of the core: [`Error`] for callers, [`StoreError`] for stores.

use std::time::Duration;

/// A boxed error from a store's client library, kept as the source of a [`StoreError`].
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Everything that can go wrong in the core, short of a caller being limited
/// (a limited caller is a [`Verdict`](crate::Verdict), not an error).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A rule or a rules file is invalid; raised when rules are loaded.
    #[error("invalid rule `{rule}`: {reason}")]
    InvalidRule {
        /// The rule's name, as written.
        rule: String,
        /// What is wrong with it.
        reason: String,
    },
    /// A rules file is not valid TOML or does not have the rules' shape.
    #[error("invalid rules file: {0}")]
    RulesFile(String),
    /// A window is not whole seconds or a number with a unit (`s`, `m`, `h`, `d`).
    #[error(
        "invalid window `{0}`: expected whole seconds or a number with s, m, h or d, at most 366 days"
    )]
    InvalidWindow(String),
    /// A rule's algorithm is not one tollgate knows.
    #[error("invalid algorithm `{0}`: expected `fixed`, `sliding` or `gcra`")]
    InvalidAlgorithm(String),
    /// A rule asked for by name is not in the rule set.
    #[error("unknown rule `{0}`")]
    UnknownRule(String),
    /// A key part is longer than [`MAX_PART_LEN`](crate::MAX_PART_LEN) bytes.
    #[error("key part {index} is {len} bytes, over the limit of {max}", max = crate::MAX_PART_LEN)]
    PartTooLong {
        /// Position of the part in the key.
        index: usize,
        /// Its length in bytes.
        len: usize,
    },
    /// A limit was built with another number of key parts than its rule declares.
    #[error("rule `{rule}` takes {expected} key parts, {found} given")]
    KeyArity {
        /// The rule's name.
        rule: String,
        /// How many parts the rule declares.
        expected: usize,
        /// How many were given.
        found: usize,
    },
    /// A cost is 0 or over [`MAX_COUNT`](crate::MAX_COUNT).
    #[error("invalid cost {0}: it must be 1 to {max}", max = crate::MAX_COUNT)]
    InvalidCost(u64),
    /// A unit name is not 1 to 32 bytes of lowercase ASCII letters, digits and `-`.
    #[error("invalid unit `{0}`: use 1 to 32 lowercase ASCII letters, digits or '-'")]
    InvalidUnit(String),
    /// A refund or settle named a rule the verdict spent nothing on.
    #[error("the verdict spent nothing on rule `{0}`")]
    NotSpent(String),
    /// Two limits of one check have the same key; each counter may appear once.
    #[error("two limits of one check share the key of rule `{0}`")]
    DuplicateKey(String),
    /// A webhook delivery id is empty or longer than [`MAX_PART_LEN`](crate::MAX_PART_LEN) bytes.
    #[error("invalid delivery id: it must be 1 to {max} bytes", max = crate::MAX_PART_LEN)]
    InvalidDeliveryId,
    /// A de-duplication prefix is empty, longer than
    /// [`Deliveries::MAX_PREFIX_LEN`](crate::Deliveries::MAX_PREFIX_LEN)
    /// bytes, or could make a key that starts as counter keys do (`limit:`).
    #[error(
        "invalid delivery prefix `{0}`: 1 to {max} bytes that cannot make a key starting with `limit:`",
        max = crate::Deliveries::MAX_PREFIX_LEN
    )]
    InvalidPrefix(String),
    /// No client address was given, and development mode was not asked for.
    #[error("missing client address")]
    MissingAddress,
    /// A client address is not an IPv4 or IPv6 address.
    #[error("malformed client address")]
    InvalidAddress,
    /// The store failed and the policy was fail-closed. The message never
    /// includes the store's own error text; it is kept as the error's source.
    #[error("rate limit store unavailable")]
    Unavailable(#[source] StoreError),
}

impl Error {
    /// Whether this is a store failure under the fail-closed policy (HTTP 503).
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Unavailable(_))
    }

    pub(crate) fn rule(rule: &str, reason: impl Into<String>) -> Error {
        Error::InvalidRule {
            rule: rule.to_owned(),
            reason: reason.into(),
        }
    }
}

/// A failed store call. Stores convert their client's errors into this type and
/// say whether a retry may succeed ([`is_transient`](StoreError::is_transient)).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    /// The store could not be reached or the connection broke (transient).
    #[error("store connection failed")]
    Connection(#[source] BoxError),
    /// No answer came by the check's deadline (transient).
    #[error("store call timed out after {0:?}")]
    Timeout(Duration),
    /// The store is reachable but cannot serve now: locked, loading, read-only (transient).
    #[error("store busy")]
    Busy(#[source] BoxError),
    /// The store answered something this client cannot read (permanent).
    #[error("invalid store reply: {0}")]
    InvalidReply(String),
    /// The store refused the call or failed in a way a retry will not fix (permanent).
    #[error("store failed")]
    Backend(#[source] BoxError),
    /// The store was not called: its breaker is open after repeated
    /// transient failures (see [`BreakerPolicy`](crate::BreakerPolicy)).
    /// Transient, but never retried within the check that got it.
    #[error("store skipped: it keeps failing")]
    Open,
}

impl StoreError {
    /// Whether the same call may succeed if tried again.
    pub fn is_transient(&self) -> bool {
        matches!(
            self,
            StoreError::Connection(_)
                | StoreError::Timeout(_)
                | StoreError::Busy(_)
                | StoreError::Open
        )
    }

    /// A short, stable name for the kind of failure, for logs and metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Connection(_) => "connection",
            StoreError::Timeout(_) => "timeout",
            StoreError::Busy(_) => "busy",
            StoreError::InvalidReply(_) => "invalid-reply",
            StoreError::Backend(_) => "backend",
            StoreError::Open => "breaker-open",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_store_failure_is_unavailable() {
        assert!(Error::Unavailable(StoreError::Busy("full".into())).is_unavailable());
        assert!(!Error::DuplicateKey("ask".into()).is_unavailable());
        assert!(!Error::InvalidCost(0).is_unavailable());
    }

    #[test]
    fn unavailable_message_hides_the_store_error_text() {
        let inner = StoreError::Backend("WRONGTYPE secret-key-name".into());
        let err = Error::Unavailable(inner);
        assert_eq!(err.to_string(), "rate limit store unavailable");
        assert!(err.is_unavailable());
    }

    #[test]
    fn only_connection_timeout_and_busy_are_transient() {
        assert!(StoreError::Connection("x".into()).is_transient());
        assert!(StoreError::Timeout(Duration::from_millis(5)).is_transient());
        assert!(StoreError::Busy("x".into()).is_transient());
        assert!(!StoreError::InvalidReply("x".into()).is_transient());
        assert!(!StoreError::Backend("x".into()).is_transient());
    }
}
