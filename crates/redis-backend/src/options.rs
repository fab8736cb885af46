//! [`RedisOptions`]: key prefix and timeouts.

use std::time::Duration;

/// How a [`RedisStore`](crate::RedisStore) names its keys and bounds its calls.
///
/// ```
/// use std::time::Duration;
/// use tollgate_redis::RedisOptions;
/// let options = RedisOptions::default()
///     .key_prefix("staging:")
///     .response_timeout(Duration::from_millis(80));
/// assert_eq!(options.connect_timeout, RedisOptions::DEFAULT_CONNECT_TIMEOUT);
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Written before every key (default empty, so that counters are stored
    /// as `limit:<key>:<window>`, the format other services share).
    pub key_prefix: String,
    /// Limit on one connection attempt, handshake included (default 250 ms).
    /// Connecting runs in the background: a caller waits for it at most this
    /// long, and under the core's `Retry` only for its per-attempt timeout.
    pub connect_timeout: Duration,
    /// Limit on one store call once connected (default 50 ms, the core's
    /// per-attempt timeout); a slower reply fails the call as a timeout.
    pub response_timeout: Duration,
}

impl RedisOptions {
    /// The default [`connect_timeout`](RedisOptions::connect_timeout): 250 ms.
    pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_millis(250);
    /// The default [`response_timeout`](RedisOptions::response_timeout): 50 ms.
    pub const DEFAULT_RESPONSE_TIMEOUT: Duration = Duration::from_millis(50);

    /// Sets the key prefix.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> RedisOptions {
        self.key_prefix = prefix.into();
        self
    }

    /// Sets the connect timeout.
    pub fn connect_timeout(mut self, timeout: Duration) -> RedisOptions {
        self.connect_timeout = timeout;
        self
    }

    /// Sets the response timeout.
    pub fn response_timeout(mut self, timeout: Duration) -> RedisOptions {
        self.response_timeout = timeout;
        self
    }
}

impl Default for RedisOptions {
    fn default() -> RedisOptions {
        RedisOptions {
            key_prefix: String::new(),
            connect_timeout: RedisOptions::DEFAULT_CONNECT_TIMEOUT,
            response_timeout: RedisOptions::DEFAULT_RESPONSE_TIMEOUT,
        }
    }
}
