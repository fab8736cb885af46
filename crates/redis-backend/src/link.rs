//! [`Link`]: one multiplexed connection to Redis, made lazily and remade when it breaks.
//!
//! - Nothing connects until the first call, so a store opens while Redis is down.
//! - One connection attempt runs at a time, in its own task, bounded by
//!   [`CONNECT_TIMEOUT`]: a caller that gives up waiting (its attempt's
//!   deadline) does not cancel it, so a slow handshake still completes for
//!   the next caller. A caller waits for it without a timer of its own: the
//!   limiter's attempt timer drops the wait.
//! - After a failed attempt, calls fail at once with that error for
//!   [`RECONNECT_DELAY`] instead of hammering a dead server; the next call
//!   after it tries again.
//! - Health comes from the server's replies. A connection that breaks
//!   (reset, closed) or answers `READONLY` (its server was demoted to a
//!   replica) is dropped and remade on the next call. A call that ends
//!   without its reply (the caller's deadline passed) proves nothing by
//!   itself: it starts one probe, a `PING` on the same connection. Replies
//!   come in order, so the probe's reply means every earlier request was
//!   answered too; a connection that answers nothing at all for
//!   [`STALE_AFTER`] (a frozen server, a dead host, a partition) is remade.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};
use tokio::sync::watch;
use tollgate_core::StoreError;

use crate::failure;

/// Least time between two connection attempts.
pub(crate) const RECONNECT_DELAY: Duration = Duration::from_millis(50);

/// Limit on one background connection attempt, handshake included: the
/// default [`RetryPolicy::worst_case`](tollgate_core::RetryPolicy::worst_case)
/// (350 ms), the longest any check waits. An attempt may outlive the
/// attempts of the calls waiting for it, never the whole check.
pub(crate) const CONNECT_TIMEOUT: Duration = Duration::from_millis(350);

/// How long a connection may answer nothing at all, with requests waiting,
/// before it is remade: the default
/// [`RetryPolicy::worst_case`](tollgate_core::RetryPolicy::worst_case)
/// (350 ms), a whole check's budget without one reply.
pub(crate) const STALE_AFTER: Duration = Duration::from_millis(350);

type Attempt = Option<Result<Live, RedisError>>;

/// A lazily made, self-repairing connection to one server. Not `Debug`:
/// its client holds the password.
pub(crate) struct Link {
    client: Client,
    config: AsyncConnectionConfig,
    state: Arc<Mutex<State>>,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    connecting: Option<watch::Receiver<Attempt>>,
    failed: Option<(Instant, RedisError)>,
    made: u64,
}

/// A connection handed to one call.
#[derive(Clone)]
pub(crate) struct Live {
    /// The connection; clones share it.
    pub(crate) conn: MultiplexedConnection,
    id: u64,
    /// Whether a probe of this connection is running.
    probing: Arc<AtomicBool>,
}

/// One request in flight: when dropped before [`answered`](Pending::answered)
/// (its caller's deadline passed), the connection is probed.
pub(crate) struct Pending<'a> {
    link: &'a Link,
    live: &'a Live,
    answered: bool,
}

impl Pending<'_> {
    /// Notes that the server answered (a value or an error reply).
    pub(crate) fn answered(&mut self) {
        self.answered = true;
    }
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.answered {
            self.link.probe(self.live);
        }
    }
}

impl Link {
    /// A link to the server `client` names; connects on first use.
    pub(crate) fn new(client: Client) -> Link {
        let config = AsyncConnectionConfig::new()
            .set_connection_timeout(Some(CONNECT_TIMEOUT))
            .set_response_timeout(None);
        Link {
            client,
            config,
            state: Arc::default(),
        }
    }

    /// The current connection, connecting first when there is none. Waits
    /// for the background attempt (at most [`CONNECT_TIMEOUT`]); the
    /// caller's own timer may drop the wait sooner.
    pub(crate) async fn connection(&self) -> Result<Live, StoreError> {
        let mut attempt = match self.ready_or_attempt()? {
            Ok(live) => return Ok(live),
            Err(attempt) => attempt,
        };
        let ended = || StoreError::Connection("redis connection attempt ended early".into());
        let Ok(result) = attempt.wait_for(Option::is_some).await else {
            return Err(ended());
        };
        match &*result {
            Some(Ok(live)) => Ok(live.clone()),
            Some(Err(err)) => Err(failure::from_redis(err.clone())),
            None => Err(ended()),
        }
    }

    /// Tracks one request sent on `live`.
    pub(crate) fn pending<'a>(&'a self, live: &'a Live) -> Pending<'a> {
        Pending {
            link: self,
            live,
            answered: false,
        }
    }

    /// Forgets `live` if it is still the current connection, so that the
    /// next call connects again.
    pub(crate) fn discard(&self, live: &Live) {
        discard(&self.state, live.id);
    }

    /// Connections made (attempts started) so far.
    pub(crate) fn made(&self) -> u64 {
        lock(&self.state).made
    }

    /// Sends one `PING` on `live` unless a probe of it is running; remakes
    /// the connection when nothing answers within [`STALE_AFTER`].
    fn probe(&self, live: &Live) {
        if live.probing.swap(true, Ordering::AcqRel) {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            live.probing.store(false, Ordering::Release);
            return;
        };
        let state = Arc::clone(&self.state);
        let live = live.clone();
        runtime.spawn(async move {
            let mut conn = live.conn.clone();
            let ping = redis::cmd("PING");
            let reply = tokio::time::timeout(STALE_AFTER, ping.query_async::<Value>(&mut conn));
            match reply.await {
                Ok(Ok(_)) => {}
                // An error reply (LOADING, NOPERM, ...) is a reply too.
                Ok(Err(err)) if failure::is_reply(&err) => {}
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "redis connection broken; it will be remade");
                    discard(&state, live.id);
                }
                Err(_) => {
                    tracing::warn!(after = ?STALE_AFTER, "redis connection unanswered; reconnecting");
                    discard(&state, live.id);
                }
            }
            live.probing.store(false, Ordering::Release);
        });
    }

    /// The live connection, or the attempt to wait for (started if needed).
    fn ready_or_attempt(&self) -> Result<Result<Live, watch::Receiver<Attempt>>, StoreError> {
        let mut state = lock(&self.state);
        if let Some(live) = &state.live {
            return Ok(Ok(live.clone()));
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
            return Err(failure::from_redis(err.clone()));
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
                    probing: Arc::default(),
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

fn discard(state: &Mutex<State>, id: u64) {
    let mut state = lock(state);
    if state.live.as_ref().is_some_and(|l| l.id == id) {
        state.live = None;
    }
}

fn lock(state: &Mutex<State>) -> MutexGuard<'_, State> {
    // The state holds plain values, consistent even after a panic elsewhere.
    state
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[cfg(test)]
mod tests {
    use super::*;
    use tollgate_core::RetryPolicy;

    #[test]
    fn the_link_waits_no_longer_than_a_whole_check() {
        let check = RetryPolicy::default().worst_case();
        assert_eq!(CONNECT_TIMEOUT, check);
        assert_eq!(STALE_AFTER, check);
        assert!(RECONNECT_DELAY < RetryPolicy::default().delay);
    }
}
