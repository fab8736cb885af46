//! [`PostgresOptions`]: where a store keeps its tables and how it connects.

use std::time::Duration;

use crate::Error;

/// The schema a store uses unless told otherwise.
pub const DEFAULT_SCHEMA: &str = "tollgate";
/// The most connections a store's pool opens unless told otherwise.
pub const DEFAULT_POOL_SIZE: usize = 16;

/// How [`PostgresStore::open_with`](crate::PostgresStore::open_with) and
/// [`PostgresStore::connect_lazy`](crate::PostgresStore::connect_lazy) open a store.
///
/// ```
/// use std::time::Duration;
/// use tollgate_postgres::PostgresOptions;
/// let options = PostgresOptions::default()
///     .schema("limits")
///     .pool_size(8)
///     .sweep(Duration::from_secs(30), 5_000);
/// ```
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct PostgresOptions {
    pub(crate) schema: String,
    pub(crate) pool_size: usize,
    pub(crate) connect_timeout: Duration,
    pub(crate) sweep_interval: Duration,
    pub(crate) sweep_batch: u32,
}

impl Default for PostgresOptions {
    fn default() -> PostgresOptions {
        PostgresOptions {
            schema: DEFAULT_SCHEMA.to_owned(),
            pool_size: DEFAULT_POOL_SIZE,
            connect_timeout: Duration::from_secs(10),
            sweep_interval: Duration::from_secs(60),
            sweep_batch: 10_000,
        }
    }
}

impl PostgresOptions {
    /// The schema holding the store's tables ([`DEFAULT_SCHEMA`] by
    /// default), created on first open: 1 to 63 ASCII letters, digits and
    /// `_`, not starting with a digit; used as written (quoted, so case
    /// matters).
    pub fn schema(mut self, schema: impl Into<String>) -> PostgresOptions {
        self.schema = schema.into();
        self
    }

    /// The most connections the store opens ([`DEFAULT_POOL_SIZE`] by
    /// default). A call finding every connection in use waits for one until
    /// its deadline, then fails as busy.
    pub fn pool_size(mut self, size: usize) -> PostgresOptions {
        self.pool_size = size;
        self
    }

    /// How long [`PostgresStore::open`](crate::PostgresStore::open) may take
    /// to connect and prepare the schema (10 s by default; a
    /// `connect_timeout` in the URL bounds each connection attempt too).
    /// Checks are bounded by their own deadline instead.
    pub fn connect_timeout(mut self, timeout: Duration) -> PostgresOptions {
        self.connect_timeout = timeout;
        self
    }

    /// Removes at most `batch` expired counters and marks every `interval`
    /// (10,000 every minute by default), in a task that ends with the
    /// store. An interval of zero turns the sweep off.
    ///
    /// The interval also bounds each sweep: a sweep must be over before the
    /// next is due, so one still waiting for a connection or for the server
    /// after `interval` is cut off (its connection closed, a warning
    /// logged) and the next starts on time.
    pub fn sweep(mut self, interval: Duration, batch: u32) -> PostgresOptions {
        self.sweep_interval = interval;
        self.sweep_batch = batch;
        self
    }

    /// Checks every option, returning the quoted schema name.
    pub(crate) fn validate(&self) -> Result<String, Error> {
        if self.pool_size == 0 {
            return Err(Error::InvalidOption(
                "the pool needs at least one connection",
            ));
        }
        quote_schema(&self.schema)
    }
}

/// `name` as a quoted SQL identifier, when it is a valid schema name.
fn quote_schema(name: &str) -> Result<String, Error> {
    let valid = (1..=63).contains(&name.len())
        && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
        && !name.as_bytes()[0].is_ascii_digit();
    if valid {
        Ok(format!("\"{name}\""))
    } else {
        Err(Error::InvalidSchema(name.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schema_names_are_identifiers_quoted() {
        assert_eq!(
            quote_schema("tollgate").ok().as_deref(),
            Some("\"tollgate\"")
        );
        assert_eq!(
            quote_schema("Limits_2").ok().as_deref(),
            Some("\"Limits_2\"")
        );
        for bad in ["", "2fast", "a-b", "a\"b", "a b", "é", &"x".repeat(64)] {
            assert!(
                matches!(quote_schema(bad), Err(Error::InvalidSchema(_))),
                "{bad:?} accepted"
            );
        }
    }

    #[test]
    fn a_pool_of_no_connections_is_refused() {
        let options = PostgresOptions::default().pool_size(0);
        assert!(matches!(options.validate(), Err(Error::InvalidOption(_))));
    }
}
