//! [`RedisStore`]: the [`CounterStore`] on Redis.

use std::borrow::Cow;
use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionLike, MultiplexedConnection};
use redis::{Client, RedisResult, Script, Value};
use tollgate_core::{Counter, CounterStore, Expiry, Reservation, StoreError, async_trait};

use crate::link::Link;
use crate::{Error, RedisOptions, failure, reply, script};

/// Counters in Redis: one round trip per call, whatever the batch size.
///
/// Cheap to clone; clones share one connection. See the [crate docs](crate)
/// for the commands used, the failure bound and durability settings.
#[derive(Clone)]
pub struct RedisStore {
    inner: Arc<Inner>,
}

struct Inner {
    link: Link,
    prefix: String,
    response_timeout: Duration,
    reserve: Script,
    /// `host:port` (or the socket path), never the password.
    address: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("address", &self.inner.address)
            .field("key_prefix", &self.inner.prefix)
            .field("response_timeout", &self.inner.response_timeout)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on the server at `url`, with default [`RedisOptions`].
    ///
    /// Connects lazily: this succeeds while Redis is down, and the first
    /// call connects. URLs are `redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` (TLS, with the `tls` feature) or `unix:///path/to/socket`.
    ///
    /// ```
    /// let store = tollgate_redis::RedisStore::open("redis://127.0.0.1:6390/0")?;
    /// # let _ = store;
    /// # Ok::<(), tollgate_redis::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// [`Error`] when the URL cannot be read, or is `rediss://` without the
    /// `tls` feature.
    pub fn open(url: &str) -> Result<RedisStore, Error> {
        RedisStore::open_with(url, RedisOptions::default())
    }

    /// A store on the server at `url` with `options`; lazy, like [`open`](RedisStore::open).
    ///
    /// # Errors
    ///
    /// As [`open`](RedisStore::open), and [`Error::InvalidOption`] for a zero timeout.
    pub fn open_with(url: &str, options: RedisOptions) -> Result<RedisStore, Error> {
        if options.connect_timeout.is_zero() {
            return Err(Error::InvalidOption {
                name: "connect_timeout",
                reason: "must be more than zero",
            });
        }
        if options.response_timeout.is_zero() {
            return Err(Error::InvalidOption {
                name: "response_timeout",
                reason: "must be more than zero",
            });
        }
        let client = client(url)?;
        let address = client.get_connection_info().addr().to_string();
        Ok(RedisStore {
            inner: Arc::new(Inner {
                link: Link::new(client, options.connect_timeout),
                prefix: options.key_prefix,
                response_timeout: options.response_timeout,
                reserve: Script::new(script::RESERVE),
                address,
            }),
        })
    }

    fn key<'a>(&self, key: &'a str) -> Cow<'a, str> {
        if self.inner.prefix.is_empty() {
            Cow::Borrowed(key)
        } else {
            Cow::Owned(format!("{}{key}", self.inner.prefix))
        }
    }

    /// Runs one request on the connection, under the response timeout.
    async fn call<T, F, Fut>(&self, send: F) -> Result<T, StoreError>
    where
        F: FnOnce(MultiplexedConnection) -> Fut,
        Fut: Future<Output = RedisResult<T>>,
    {
        let live = self.inner.link.connection().await?;
        live.sending();
        let timeout = self.inner.response_timeout;
        match tokio::time::timeout(timeout, send(live.conn.clone())).await {
            Err(_) => Err(StoreError::Timeout(timeout)),
            Ok(Ok(value)) => {
                live.answered();
                Ok(value)
            }
            Ok(Err(err)) => {
                if failure::breaks_connection(&err) {
                    tracing::debug!(error = %err, "redis connection broken; it will be remade");
                    self.inner.link.discard(&live);
                } else if !err.is_io_error() {
                    live.answered();
                }
                Err(failure::from_redis(err, timeout))
            }
        }
    }

    async fn command(&self, cmd: redis::Cmd) -> Result<Value, StoreError> {
        self.call(|mut conn| async move { cmd.query_async::<Value>(&mut conn).await })
            .await
    }
}

/// Whole milliseconds of `ttl`, at least 1 (`PEXPIRE 0` would delete the key).
fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

fn client(url: &str) -> Result<Client, Error> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::InvalidUrl(
            "expected a URL such as redis://127.0.0.1:6379".into(),
        ));
    };
    match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" | "unix" | "redis+unix" | "valkey+unix" => {}
        "rediss" | "valkeys" if cfg!(feature = "tls") => {}
        "rediss" | "valkeys" => return Err(Error::TlsNotEnabled),
        other => return Err(Error::UnsupportedScheme(other.to_owned())),
    }
    Client::open(url).map_err(|err| Error::InvalidUrl(err.to_string()))
}

#[async_trait]
impl CounterStore for RedisStore {
    /// `MULTI`, then `INCR` + `PEXPIRE` per counter, then `EXEC`, in one write.
    async fn increment(&self, counters: &[Counter]) -> Result<Vec<u64>, StoreError> {
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let mut pipe = redis::pipe();
        pipe.cmd("MULTI");
        for counter in counters {
            let key = self.key(&counter.key);
            pipe.cmd("INCR").arg(&*key);
            pipe.cmd("PEXPIRE").arg(&*key).arg(millis(counter.ttl));
        }
        pipe.cmd("EXEC");
        let replies = self
            .call(|mut conn| async move { conn.req_packed_commands(&pipe, 0, pipe.len()).await })
            .await?;
        reply::increments(replies, counters.len())
    }

    /// One `EVALSHA` of the reserve script (loaded again after a `NOSCRIPT`).
    async fn increment_within(&self, counters: &[Counter]) -> Result<Reservation, StoreError> {
        if counters.is_empty() {
            return Ok(Reservation {
                applied: true,
                counts: Vec::new(),
            });
        }
        let mut invocation = self.inner.reserve.prepare_invoke();
        for counter in counters {
            invocation.key(&*self.key(&counter.key));
            invocation.arg(millis(counter.ttl)).arg(counter.max);
        }
        let value = self
            .call(|mut conn| async move { invocation.invoke_async::<Value>(&mut conn).await })
            .await?;
        reply::reservation(value, counters.len())
    }

    /// `MGET`.
    async fn get(&self, keys: &[String]) -> Result<Vec<u64>, StoreError> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let mut cmd = redis::cmd("MGET");
        for key in keys {
            cmd.arg(&*self.key(key));
        }
        reply::counts(self.command(cmd).await?, keys.len())
    }

    /// `SET key 1 NX PX ms`.
    async fn set_if_absent(&self, key: &str, ttl: Duration) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("SET");
        cmd.arg(&*self.key(key))
            .arg(1)
            .arg("NX")
            .arg("PX")
            .arg(millis(ttl));
        reply::stored_if_absent(self.command(cmd).await?)
    }

    /// `DEL`.
    async fn delete(&self, key: &str) -> Result<bool, StoreError> {
        let mut cmd = redis::cmd("DEL");
        cmd.arg(&*self.key(key));
        reply::deleted(self.command(cmd).await?)
    }

    /// `PTTL`.
    async fn expiry(&self, key: &str) -> Result<Expiry, StoreError> {
        let mut cmd = redis::cmd("PTTL");
        cmd.arg(&*self.key(key));
        reply::expiry(self.command(cmd).await?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_without_a_server() {
        // Nothing listens on port 1; opening is lazy, so it still succeeds.
        assert!(RedisStore::open("redis://127.0.0.1:1").is_ok());
        assert!(RedisStore::open("redis://localhost:1/3").is_ok());
    }

    #[test]
    fn refuses_bad_urls_and_options_with_typed_errors() {
        assert!(matches!(
            RedisStore::open("127.0.0.1:6379"),
            Err(Error::InvalidUrl(_))
        ));
        assert!(matches!(
            RedisStore::open("redis://127.0.0.1/db"),
            Err(Error::InvalidUrl(_))
        ));
        assert!(
            matches!(RedisStore::open("http://127.0.0.1"), Err(Error::UnsupportedScheme(s)) if s == "http")
        );
        let zero = RedisOptions::default().response_timeout(Duration::ZERO);
        let err = RedisStore::open_with("redis://127.0.0.1", zero);
        assert!(matches!(
            err,
            Err(Error::InvalidOption {
                name: "response_timeout",
                ..
            })
        ));
        let zero = RedisOptions::default().connect_timeout(Duration::ZERO);
        let err = RedisStore::open_with("redis://127.0.0.1", zero);
        assert!(matches!(
            err,
            Err(Error::InvalidOption {
                name: "connect_timeout",
                ..
            })
        ));
    }

    #[cfg(not(feature = "tls"))]
    #[test]
    fn rediss_needs_the_tls_feature() {
        let err = RedisStore::open("rediss://127.0.0.1:6380");
        assert!(matches!(err, Err(Error::TlsNotEnabled)), "{err:?}");
    }

    #[cfg(feature = "tls")]
    #[test]
    fn rediss_opens_with_the_tls_feature() {
        assert!(RedisStore::open("rediss://127.0.0.1:6380").is_ok());
    }

    #[test]
    fn never_shows_the_password() {
        let store = RedisStore::open("redis://user:hunter2@127.0.0.1:1/0");
        let text = format!("{store:?}");
        assert!(
            text.contains("127.0.0.1:1") && !text.contains("hunter2"),
            "{text}"
        );
        let err = RedisStore::open("redis://user:hunter2@127.0.0.1:1/x").map(|_| ());
        let text = format!(
            "{err:?} {}",
            err.as_ref()
                .map_or_else(ToString::to_string, |()| String::new())
        );
        assert!(!text.contains("hunter2"), "{text}");
    }

    #[test]
    fn ttls_are_whole_milliseconds_never_zero() {
        assert_eq!(millis(Duration::from_secs(60)), 60_000);
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
