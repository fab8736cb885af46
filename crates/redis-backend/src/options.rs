//! [`RedisOptions`]: how the store names its keys.

/// How a [`RedisStore`](crate::RedisStore) names its keys.
///
/// The store keeps no timer of its own: the limiter's
/// [`RetryPolicy`](tollgate_core::RetryPolicy) bounds every call, and each
/// write script applies nothing once the call's deadline has passed.
///
/// ```
/// use tollgate_redis::RedisOptions;
/// let options = RedisOptions::default().key_prefix("staging:");
/// assert_eq!(options.key_prefix, "staging:");
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisOptions {
    /// Written before every key (default empty, so that counters are stored
    /// as `limit:<key>:<window>`, the format other services share).
    pub key_prefix: String,
}

impl RedisOptions {
    /// Sets the key prefix.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> RedisOptions {
        self.key_prefix = prefix.into();
        self
    }
}
