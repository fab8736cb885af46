//! [`RedisStore`]: the [`CounterStore`](tollgate_core::CounterStore) on Redis.

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use redis::{Client, Cmd, ErrorKind, Script, ServerErrorKind, Value};
use tollgate_core::{Counter, Deadline, StoreError};
use tollgate_redis_scripts::{Counters, Single};

use crate::link::Link;
use crate::{Error, RedisOptions, command, failure, reply, scripts, tls};

/// Counters in Redis: one round trip per call, whatever the batch size.
///
/// Cheap to clone; clones share one connection. See the [crate docs](crate)
/// for the commands used, the failure bound and durability settings.
#[derive(Clone)]
pub struct RedisStore {
    pub(crate) inner: Arc<Inner>,
}

pub(crate) struct Inner {
    link: Link,
    prefix: String,
    pub(crate) scripts: Scripts,
    /// `host:port` (or the socket path), never the password.
    address: String,
}

/// The script handles, made once per store (each holds its code and hash).
pub(crate) struct Scripts {
    pub(crate) count: Script,
    pub(crate) reserve: Script,
    pub(crate) refund: Script,
    pub(crate) delete: Script,
    pub(crate) claim: Script,
    pub(crate) finish: Script,
    pub(crate) release: Script,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("address", &self.inner.address)
            .field("key_prefix", &self.inner.prefix)
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
    ///
    /// Opening a `rediss://` store makes rustls's ring provider the
    /// process's default unless one is installed already: an application
    /// that wants another installs it before opening the store.
    pub fn open(url: &str) -> Result<RedisStore, Error> {
        RedisStore::open_with(url, RedisOptions::default())
    }

    /// A store on the server at `url` with `options`; lazy, like [`open`](RedisStore::open).
    ///
    /// # Errors
    ///
    /// As [`open`](RedisStore::open).
    pub fn open_with(url: &str, options: RedisOptions) -> Result<RedisStore, Error> {
        let client = client(url)?;
        let address = client.get_connection_info().addr().to_string();
        Ok(RedisStore {
            inner: Arc::new(Inner {
                link: Link::new(client),
                prefix: options.key_prefix,
                scripts: Scripts {
                    count: Script::new(scripts::COUNT),
                    reserve: Script::new(scripts::RESERVE),
                    refund: Script::new(scripts::REFUND),
                    delete: Script::new(scripts::DELETE),
                    claim: Script::new(scripts::CLAIM),
                    finish: Script::new(scripts::FINISH),
                    release: Script::new(scripts::RELEASE),
                },
                address,
            }),
        })
    }

    /// How many connections this store (and its clones) started so far:
    /// for tests of reconnection, not part of the store's contract.
    #[doc(hidden)]
    pub fn connections_made(&self) -> u64 {
        self.inner.link.made()
    }

    /// An `EVALSHA` of the counter script `script` on `counters`.
    pub(crate) fn counters(
        &self,
        script: &Script,
        layout: Counters,
        counters: &[Counter],
        deadline: Deadline,
    ) -> Cmd {
        let cutoff = deadline.cutoff_unix_millis();
        command::counters(script, layout, counters, cutoff, &self.inner.prefix)
    }

    /// An `EVALSHA` of the one-key script `script` on `key`.
    pub(crate) fn single(
        &self,
        script: &Script,
        layout: Single<'_>,
        key: &str,
        deadline: Deadline,
    ) -> Cmd {
        let cutoff = deadline.cutoff_unix_millis();
        command::single(script, layout, key, cutoff, &self.inner.prefix)
    }

    /// Appends `key` with the store's prefix as one argument.
    pub(crate) fn key(&self, cmd: &mut Cmd, key: &str) {
        command::push_key(cmd, &self.inner.prefix, key);
    }

    /// Runs one `EVALSHA` of `script` in one round trip (two more, once,
    /// after `NOSCRIPT`: the script is loaded and run again in the same
    /// call). A `DEADLINE` reply is [`StoreError::Timeout`].
    pub(crate) async fn eval(
        &self,
        script: &Script,
        cmd: Cmd,
        deadline: Deadline,
    ) -> Result<Value, StoreError> {
        self.send(cmd, Some(script), deadline).await
    }

    /// Runs one plain command (a read) in one round trip.
    pub(crate) async fn command(&self, cmd: Cmd, deadline: Deadline) -> Result<Value, StoreError> {
        self.send(cmd, None, deadline).await
    }

    async fn send(
        &self,
        cmd: Cmd,
        script: Option<&Script>,
        deadline: Deadline,
    ) -> Result<Value, StoreError> {
        let started = Instant::now();
        let link = &self.inner.link;
        let live = link.connection().await?;
        if deadline.has_passed() {
            // Nobody waits for the reply any more; the server would refuse it.
            return Err(StoreError::Timeout(started.elapsed()));
        }
        let mut conn = live.conn.clone();
        let mut pending = link.pending(&live);
        let mut result = cmd.query_async::<Value>(&mut conn).await;
        if let (Err(err), Some(script)) = (&result, script)
            && err.kind() == ErrorKind::Server(ServerErrorKind::NoScript)
        {
            result = match script.load_async(&mut conn).await {
                Ok(_) => cmd.query_async::<Value>(&mut conn).await,
                Err(err) => Err(err),
            };
        }
        match result {
            Ok(value) => {
                pending.answered();
                if reply::is_deadline(&value) {
                    Err(StoreError::Timeout(started.elapsed()))
                } else {
                    Ok(value)
                }
            }
            Err(err) => {
                if failure::breaks_connection(&err) {
                    tracing::debug!(error = %err, "redis connection broken; it will be remade");
                    link.discard(&live);
                    pending.answered();
                } else if !err.is_io_error() {
                    pending.answered();
                    if failure::is_read_only(&err) {
                        tracing::warn!("redis server is a replica now; reconnecting");
                        link.discard(&live);
                    }
                }
                Err(failure::from_redis(err))
            }
        }
    }
}

fn client(url: &str) -> Result<Client, Error> {
    let Some((scheme, _)) = url.split_once("://") else {
        return Err(Error::InvalidUrl(
            "expected a URL such as redis://127.0.0.1:6379".into(),
        ));
    };
    let tls = match scheme.to_ascii_lowercase().as_str() {
        "redis" | "valkey" | "unix" | "redis+unix" | "valkey+unix" => false,
        #[cfg(feature = "tls")]
        "rediss" | "valkeys" => true,
        #[cfg(not(feature = "tls"))]
        "rediss" | "valkeys" => return Err(Error::TlsNotEnabled),
        other => return Err(Error::UnsupportedScheme(other.to_owned())),
    };
    let client = Client::open(url).map_err(|err| Error::InvalidUrl(err.to_string()))?;
    if tls {
        tls::provide();
    }
    Ok(client)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    #[test]
    fn opens_without_a_server() {
        // Nothing listens on port 1; opening is lazy, so it still succeeds.
        assert!(RedisStore::open("redis://127.0.0.1:1").is_ok());
        assert!(RedisStore::open("redis://localhost:1/3").is_ok());
    }

    #[test]
    fn refuses_bad_urls_with_typed_errors() {
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
    fn a_prefixed_key_is_one_argument() {
        let store = RedisStore::open_with(
            "redis://127.0.0.1:1",
            RedisOptions::default().key_prefix("tenant:"),
        )
        .unwrap_or_else(|e| panic!("{e}"));
        let deadline = Deadline::after(Duration::from_secs(1));
        let script = &store.inner.scripts.delete;
        let cmd = store.single(script, Single::Delete, "k:1", deadline);
        let args: Vec<Vec<u8>> = cmd
            .args_iter()
            .filter_map(|arg| match arg {
                redis::Arg::Simple(bytes) => Some(bytes.to_vec()),
                _ => None,
            })
            .collect();
        assert_eq!(args.len(), 5);
        assert_eq!(args[0], b"EVALSHA");
        assert_eq!(args[1], script.get_hash().as_bytes());
        assert_eq!(args[2], b"1");
        assert_eq!(args[3], b"tenant:k:1");
        assert_eq!(
            args[4],
            deadline.cutoff_unix_millis().to_string().as_bytes()
        );
    }
}
