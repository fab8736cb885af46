//! [`Link`]: one multiplexed connection to Redis, made lazily and remade when it breaks.
//!
//! - Nothing connects until the first call, so a store opens while Redis is down.
//! - One connection attempt runs at a time, in its own task: a caller that
//!   gives up waiting (a timeout) does not cancel it, so a slow handshake
//!   still completes for the next caller.
//! - After a failed attempt, calls fail at once with that error for
//!   [`RECONNECT_DELAY`] instead of hammering a dead server; the next call
//!   after it tries again.
//! - A connection that breaks (reset, closed) is dropped and remade on the
//!   next call. One that stays silent (requests sent, no reply at all for
//!   [`STALE_AFTER`], as behind a dead host or a partition) is remade too.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError};
use tokio::sync::watch;
use tollgate_core::StoreError;

use crate::failure;

/// Least time between two connection attempts.
pub(crate) const RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// How long a connection may leave requests unanswered before it is remade.
pub(crate) const STALE_AFTER: Duration = Duration::from_secs(1);

type Attempt = Option<Result<Live, RedisError>>;

/// A lazily made, self-repairing connection to one server. Not `Debug`:
/// its client holds the password.
pub(crate) struct Link {
    client: Client,
    config: AsyncConnectionConfig,
    connect_timeout: Duration,
    state: Arc<Mutex<State>>,
}

#[derive(Debug, Default)]
struct State {
    live: Option<Live>,
    connecting: Option<watch::Receiver<Attempt>>,
    failed: Option<(Instant, RedisError)>,
    made: u64,
}

/// A connection handed to one call, with the health record it shares.
#[derive(Clone)]
pub(crate) struct Live {
    /// The connection; clones share it.
    pub(crate) conn: MultiplexedConnection,
    id: u64,
    health: Arc<Health>,
}

impl std::fmt::Debug for Live {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Live")
            .field("id", &self.id)
            .finish_non_exhaustive()
    }
}

/// When the oldest request still waiting for any reply was sent.
#[derive(Debug)]
struct Health {
    since: Instant,
    /// Milliseconds after `since`, plus one; 0 when nothing is waiting.
    unanswered_since: AtomicU64,
}

impl Health {
    fn now(&self) -> u64 {
        u64::try_from(self.since.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    fn is_stale(&self) -> bool {
        match self.unanswered_since.load(Ordering::Relaxed) {
            0 => false,
            at => self.now().saturating_sub(at) > STALE_AFTER.as_millis() as u64,
        }
    }
}

impl Live {
    /// Notes that a request is about to be sent.
    pub(crate) fn sending(&self) {
        let now = self.health.now();
        let _ = self.health.unanswered_since.compare_exchange(
            0,
            now,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    /// Notes that the server answered (a value or an error reply).
    pub(crate) fn answered(&self) {
        self.health.unanswered_since.store(0, Ordering::Relaxed);
    }
}

impl Link {
    /// A link to the server `client` names; connects on first use.
    pub(crate) fn new(client: Client, connect_timeout: Duration) -> Link {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(connect_timeout))
            .set_response_timeout(None);
        Link {
            client,
            config,
            connect_timeout,
            state: Arc::default(),
        }
    }

    /// The current connection, connecting first when there is none; waits
    /// at most the connect timeout.
    pub(crate) async fn connection(&self) -> Result<Live, StoreError> {
        let mut attempt = match self.ready_or_attempt()? {
            Ok(live) => return Ok(live),
            Err(attempt) => attempt,
        };
        let waited =
            tokio::time::timeout(self.connect_timeout, attempt.wait_for(Option::is_some)).await;
        let to_store = |err: RedisError| failure::from_redis(err, self.connect_timeout);
        match waited {
            Err(_) => Err(StoreError::Timeout(self.connect_timeout)),
            Ok(Err(_)) => Err(StoreError::Connection(
                "redis connection attempt ended early".into(),
            )),
            Ok(Ok(result)) => match &*result {
                Some(Ok(live)) => Ok(live.clone()),
                Some(Err(err)) => Err(to_store(err.clone())),
                None => Err(StoreError::Connection(
                    "redis connection attempt ended early".into(),
                )),
            },
        }
    }

    /// Forgets `live` if it is still the current connection, so that the
    /// next call connects again.
    pub(crate) fn discard(&self, live: &Live) {
        let mut state = lock(&self.state);
        if state.live.as_ref().is_some_and(|l| l.id == live.id) {
            state.live = None;
        }
    }

    /// The live connection, or the attempt to wait for (started if needed).
    fn ready_or_attempt(&self) -> Result<Result<Live, watch::Receiver<Attempt>>, StoreError> {
        let mut state = lock(&self.state);
        if let Some(live) = &state.live {
            if !live.health.is_stale() {
                return Ok(Ok(live.clone()));
            }
            tracing::warn!(after = ?STALE_AFTER, "redis connection unanswered; reconnecting");
            state.live = None;
        }
        if let Some(attempt) = &state.connecting {
            // An attempt whose task died (its runtime shut down) never ends.
            if attempt.has_changed().is_ok() {
                return Ok(Err(attempt.clone()));
            }
            state.connecting = None;
        }
        if let Some((at, err)) = &state.failed
            && at.elapsed() < RECONNECT_DELAY
        {
            return Err(failure::from_redis(err.clone(), self.connect_timeout));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Backend("tollgate-redis needs a tokio runtime".into()))?;
        let (done, attempt) = watch::channel(None);
        state.connecting = Some(attempt.clone());
        state.made = state.made.wrapping_add(1);
        let id = state.made;
        let shared = Arc::clone(&self.state);
        let client = self.client.clone();
        let config = self.config.clone();
        runtime.spawn(async move {
            let result = client
                .get_multiplexed_async_connection_with_config(&config)
                .await
                .map(|conn| Live {
                    conn,
                    id,
                    health: Arc::new(Health {
                        since: Instant::now(),
                        unanswered_since: AtomicU64::new(0),
                    }),
                });
            {
                let mut state = lock(&shared);
                state.connecting = None;
                match &result {
                    Ok(live) => {
                        state.live = Some(live.clone());
                        state.failed = None;
                    }
                    Err(err) => {
                        tracing::debug!(error = %err, "redis connection attempt failed");
                        state.failed = Some((Instant::now(), err.clone()));
                    }
                }
            }
            done.send_replace(Some(result));
        });
        Ok(Err(attempt))
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state holds plain values, consistent even after a panic elsewhere.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}
