//! [`RedisStore`]: counters and marks on one Redis server, over TCP (or a
//! unix socket), and the parts the cluster store shares with it.

mod budget;
mod command;
pub(crate) mod failure;
mod link;
pub(crate) mod tls;
pub(crate) mod value;

use std::fmt;
use std::sync::Arc;
use std::time::Instant;

use redis::{Client, Cmd, Value};
use tollgate_core::{Deadline, StoreError};

use crate::Error;
use crate::batch::Batcher;
use crate::ops::endpoint_store;
use crate::reply::Reply;
use link::Link;

pub(crate) use budget::Longest;
pub(crate) use command::Resp;

/// Counters and marks on one Redis (or Valkey) server: one round trip per
/// call, whatever the number of counters; calls waiting together share
/// one script call.
///
/// Cheap to clone; clones share one connection. See the [crate docs](crate)
/// for the commands used, the failure bound and durability settings.
#[derive(Clone)]
pub struct RedisStore {
    tcp: Arc<Tcp>,
    batch: Arc<Batcher<Tcp>>,
}

/// The transport of a [`RedisStore`]: one multiplexed connection, made
/// lazily and remade when it breaks. Not `Debug`: its client holds the password.
struct Tcp {
    link: Link,
    /// `host:port` (or the socket path), never the password.
    address: String,
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("address", &self.tcp.address)
            .finish_non_exhaustive()
    }
}

impl RedisStore {
    /// A store on the server at `url`.
    ///
    /// Connects lazily: this succeeds while Redis is down, and the first
    /// call connects. URLs are `redis://[user:password@]host[:port][/db]`,
    /// `rediss://…` (TLS, with the `tls` feature), `unix:///path/to/socket`,
    /// and the same with `valkey` for `redis`. To keep several
    /// applications' keys apart on one server, wrap the store in
    /// [`Prefixed`](tollgate_core::Prefixed).
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
        let client = client(url)?;
        let address = client.get_connection_info().addr().to_string();
        let tcp = Arc::new(Tcp {
            link: Link::new(client),
            address,
        });
        Ok(RedisStore {
            batch: Arc::new(Batcher::new(Arc::clone(&tcp))),
            tcp,
        })
    }

    /// How many connections this store (and its clones) started so far:
    /// for tests of reconnection, not part of the store's contract.
    #[doc(hidden)]
    pub fn connections_made(&self) -> u64 {
        self.tcp.link.made()
    }
}

endpoint_store!(RedisStore, "redis", tcp, batch);

impl Resp for Tcp {
    type Route = ();

    /// Sends `cmd` on the connection (made first if needed, within the
    /// call's deadline), in one round trip.
    async fn send(&self, cmd: &Cmd, _: &mut (), deadline: Deadline) -> Result<Reply, StoreError> {
        let started = Instant::now();
        let live = self.link.connection(deadline).await?;
        if deadline.has_passed() {
            // Nobody waits for the reply any more; the server would refuse it.
            return Err(StoreError::Timeout(started.elapsed()));
        }
        let mut conn = live.conn.clone();
        let mut pending = self.link.pending(&live, deadline);
        match cmd.query_async::<Value>(&mut conn).await {
            Ok(value) => {
                pending.answered();
                Ok(value::reply(value))
            }
            Err(err) => {
                if failure::breaks_connection(&err) {
                    tracing::debug!(error = %err, "redis connection broken; it will be remade");
                    self.link.discard(&live);
                    pending.answered();
                } else if !err.is_io_error() {
                    pending.answered();
                    if failure::is_read_only(&err) {
                        tracing::warn!("redis server is a replica now; reconnecting");
                        self.link.discard(&live);
                    }
                }
                match value::error_reply(&err) {
                    Some(reply) => Ok(reply),
                    None => Err(failure::from_redis(err, started.elapsed())),
                }
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

    use super::*;

    #[test]
    fn opens_without_a_server() {
        // Nothing listens on port 1; opening is lazy, so it still succeeds.
        assert!(RedisStore::open("redis://127.0.0.1:1").is_ok());
        assert!(RedisStore::open("redis://localhost:1/3").is_ok());
    }

    #[test]
    fn its_metrics_and_logs_name_it_redis() {
        let store = RedisStore::open("redis://127.0.0.1:1").unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(tollgate_core::Named::name(&store), "redis");
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
}
