//! The proxy's connections to Redis: one shared multiplexed connection for
//! single commands and pipelines, and dedicated ones (kept in a small idle
//! pool) for transactions. Every call is bounded; a broken connection is
//! dropped and the next call connects again, so the proxy recovers when
//! Redis comes back.

use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Cmd, Pipeline, RedisError, Value};

use crate::acl::Users;
use crate::failure::LinkError;

/// How many dedicated connections wait for the next transaction: enough
/// for a few dozen concurrent transactions without connecting for each.
const MAX_IDLE: usize = 64;

/// How long the proxy keeps trying to kill a script that outran the timeout.
const KILL_FOR: Duration = Duration::from_secs(15);

/// How often it tries.
const KILL_EVERY: Duration = Duration::from_millis(100);

/// The connections to one Redis server.
pub(crate) struct Link {
    users: Users,
    timeout: Duration,
    /// The shared connection and its generation, once connected.
    shared: Mutex<Option<(u64, MultiplexedConnection)>>,
    /// Held while connecting the shared connection, so callers wait for one
    /// attempt instead of each making their own.
    connecting: tokio::sync::Mutex<()>,
    generation: AtomicU64,
    idle: Mutex<Vec<MultiplexedConnection>>,
    /// Set while a `SCRIPT KILL` is being attempted.
    killing: AtomicBool,
}

impl Link {
    /// A link that connects on first use; every call is bounded by `timeout`.
    pub(crate) fn new(users: Users, timeout: Duration) -> Link {
        Link {
            users,
            timeout,
            shared: Mutex::new(None),
            connecting: tokio::sync::Mutex::new(()),
            generation: AtomicU64::new(0),
            idle: Mutex::new(Vec::new()),
            killing: AtomicBool::new(false),
        }
    }

    /// The proxy's Redis user.
    pub(crate) fn users(&self) -> &Users {
        &self.users
    }

    /// Connects the shared connection now, if it is not connected.
    pub(crate) async fn ready(&self) -> Result<(), LinkError> {
        self.bounded(async { self.shared().await.map(|_| ()) })
            .await
    }

    /// Stops a script that outran the timeout: `SCRIPT KILL` on a
    /// connection of its own, tried every [`KILL_EVERY`] for up to
    /// [`KILL_FOR`]. Redis reads it only once the script has run for its
    /// `busy-reply-threshold` (5 s by default), and cannot kill a script
    /// that has written. One attempt runs at a time.
    pub(crate) async fn kill_script(&self) {
        if self.killing.swap(true, Ordering::AcqRel) {
            return;
        }
        let until = tokio::time::Instant::now() + KILL_FOR;
        let mut kill = redis::cmd("SCRIPT");
        kill.arg("KILL");
        while tokio::time::Instant::now() < until {
            // Bounded without `bounded`, which would drop the shared
            // connection on every attempt that times out.
            let attempt = async { Ok(self.connect().await?.send_packed_command(&kill).await?) };
            let reply = tokio::time::timeout(self.timeout, attempt)
                .await
                .unwrap_or(Err(LinkError::Timeout(self.timeout)));
            match reply {
                Ok(Value::ServerError(e)) if e.code() == "UNKILLABLE" => {
                    tracing::error!(
                        "a script outran the timeout after writing: Redis cannot kill it"
                    );
                    break;
                }
                Ok(Value::ServerError(e)) if e.code() == "NOTBUSY" => break,
                Ok(Value::ServerError(_)) | Err(_) => tokio::time::sleep(KILL_EVERY).await,
                Ok(_) => {
                    tracing::warn!("killed a script that outran the timeout");
                    break;
                }
            }
        }
        self.killing.store(false, Ordering::Release);
    }

    /// Sends one command on the shared connection.
    pub(crate) async fn command(&self, cmd: &Cmd) -> Result<Value, LinkError> {
        self.bounded(async {
            let (generation, mut conn) = self.shared().await?;
            let reply = conn.send_packed_command(cmd).await;
            self.check(generation, reply)
        })
        .await
    }

    /// Sends a pipeline on the shared connection and returns its `count`
    /// replies, error replies among them.
    pub(crate) async fn pipeline(
        &self,
        pipe: &Pipeline,
        count: usize,
    ) -> Result<Vec<Value>, LinkError> {
        self.bounded(async {
            let (generation, mut conn) = self.shared().await?;
            let replies = conn.send_packed_commands(pipe, 0, count).await;
            self.check(generation, replies)
        })
        .await
    }

    /// Sends `MULTI`, then (only if it answered `OK`) `pipe` on the same
    /// connection, which no other caller uses meanwhile; the replies: `MULTI`'s,
    /// then `pipe`'s `count`, or only `MULTI`'s when it was refused (so that
    /// no command of `pipe` runs outside the transaction).
    pub(crate) async fn transaction(
        &self,
        pipe: &Pipeline,
        count: usize,
    ) -> Result<Vec<Value>, LinkError> {
        self.bounded(async {
            let idle = self
                .idle
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .pop();
            let mut conn = match idle {
                Some(conn) => conn,
                None => self.connect().await?,
            };
            let multi = conn.send_packed_command(&redis::cmd("MULTI")).await?;
            if multi != Value::Okay {
                return Ok(vec![multi]);
            }
            let mut replies = conn.send_packed_commands(pipe, 0, count).await?;
            replies.insert(0, multi);
            // Only a connection that answered in full goes back: a timed-out
            // or broken one is dropped with this future.
            let mut idle = self.idle.lock().unwrap_or_else(PoisonError::into_inner);
            if idle.len() < MAX_IDLE {
                idle.push(conn);
            }
            Ok(replies)
        })
        .await
    }

    async fn bounded<T>(
        &self,
        call: impl Future<Output = Result<T, LinkError>>,
    ) -> Result<T, LinkError> {
        match tokio::time::timeout(self.timeout, call).await {
            Ok(result) => result,
            Err(_) => {
                // A server that stopped answering may have wedged the shared
                // connection: the next call starts a fresh one.
                self.forget(None);
                Err(LinkError::Timeout(self.timeout))
            }
        }
    }

    /// The shared connection, connecting it first if there is none.
    async fn shared(&self) -> Result<(u64, MultiplexedConnection), LinkError> {
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let _connecting = self.connecting.lock().await;
        if let Some(current) = self.current() {
            return Ok(current);
        }
        let conn = self.connect().await?;
        let generation = self.generation.fetch_add(1, Ordering::Relaxed) + 1;
        *self.shared.lock().unwrap_or_else(PoisonError::into_inner) =
            Some((generation, conn.clone()));
        tracing::info!("connected to redis");
        Ok((generation, conn))
    }

    fn current(&self) -> Option<(u64, MultiplexedConnection)> {
        self.shared
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// A new connection. Its replies are not bounded by the client (each
    /// would cost a timer of its own): every call made on it is bounded
    /// already, by [`bounded`](Link::bounded) or `kill_script`'s timeout.
    async fn connect(&self) -> Result<MultiplexedConnection, LinkError> {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(self.timeout))
            .set_response_timeout(None);
        self.users.connect(&config).await
    }

    /// Passes `result` on; drops the shared connection of `generation` if
    /// the error says it is broken.
    fn check<T>(&self, generation: u64, result: Result<T, RedisError>) -> Result<T, LinkError> {
        result.map_err(|error| {
            if error.is_io_error()
                || error.is_connection_dropped()
                || error.is_unrecoverable_error()
                || error.is_timeout()
            {
                self.forget(Some(generation));
            }
            LinkError::Redis(error)
        })
    }

    /// Drops the shared connection (only if it is still `generation`, when given)
    /// and the idle ones.
    fn forget(&self, generation: Option<u64>) {
        let mut shared = self.shared.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((current, _)) = shared.as_ref()
            && generation.is_none_or(|g| g == *current)
        {
            *shared = None;
            tracing::warn!("lost the redis connection; the next call connects again");
        }
        drop(shared);
        self.idle
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clear();
        // The server may have restarted with other ACLs.
        self.users.recheck();
    }
}
