#![doc = include_str!("../README.md")]

mod command;
mod endpoint;
mod error;
mod failure;
#[cfg(test)]
mod fake;
mod ops;
mod reply;
mod script;
mod store;
mod transport;

use std::time::Duration;

pub use error::Error;
pub use store::UpstashStore;

/// The environment variable holding the REST URL, as Upstash names it.
pub const URL_VAR: &str = "UPSTASH_REDIS_REST_URL";

/// The environment variable holding the REST token, as Upstash names it.
pub const TOKEN_VAR: &str = "UPSTASH_REDIS_REST_TOKEN";

/// The longest a new connection (TCP and TLS) may take: the default retry
/// policy's worst case for a whole check (350 ms,
/// `RetryPolicy::default().worst_case()`). A connection that cannot be
/// made within a check's whole budget serves no check; the limiter's
/// attempt timer (50 ms) usually drops the attempt before this fires.
pub const CONNECT_TIMEOUT: Duration = Duration::from_millis(350);

/// How long an idle pooled connection is kept: 30 s, shorter than the 60 s
/// idle limit common to HTTP front ends, so that the client rather than the
/// server usually closes it. Not derived from the retry policy: a check
/// never waits on an idle connection.
pub const POOL_IDLE_TIMEOUT: Duration = Duration::from_secs(30);

/// The most idle connections kept per host: 64, the number of calls that
/// may be in flight at once without opening a connection after a quiet spell.
pub const POOL_MAX_IDLE_PER_HOST: usize = 64;

#[cfg(test)]
mod tests {
    use tollgate_core::RetryPolicy;

    use super::*;

    #[test]
    fn the_connect_timeout_is_the_default_policys_worst_case() {
        assert_eq!(CONNECT_TIMEOUT, RetryPolicy::default().worst_case());
    }

    #[cfg(feature = "tls")]
    #[test]
    fn https_stores_open_and_other_reqwest_clients_still_build() {
        assert!(UpstashStore::open("https://eu1-x.upstash.io", "t").is_ok());
        // No process-wide crypto provider is needed, by this client or any other.
        assert!(reqwest::Client::builder().build().is_ok());
    }
}
