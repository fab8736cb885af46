//! [`Link`]: one multiplexed connection to Redis, made lazily and remade when it breaks.
//!
//! - Nothing connects until the first call, so a store opens while Redis is down.
//! - One connection attempt runs at a time, in its own task, bounded by the
//!   longest check budget ([`Deadline::check_budget`]) among the store's
//!   calls so far ([`Longest`]): a caller that gives up waiting (its
//!   attempt's deadline) does not cancel it, so a slow handshake still
//!   completes for the next caller, but it never outlives a whole check. A caller waits for it without a timer of
//!   its own: the limiter's attempt timer drops the wait.
//! - After a failed attempt, calls fail at once with that error for
//!   [`RECONNECT_DELAY`] instead of hammering a dead server; the next call
//!   after it tries again.
//! - Health comes from the server's replies. A connection that breaks
//!   (reset, closed) or answers `READONLY` (its server was demoted to a
//!   replica) is dropped and remade on the next call. A call that ends
//!   without its reply (the caller's deadline passed) proves nothing by
//!   itself: it starts one probe, a `PING` on the same connection. Replies
//!   come in order, so the probe's reply means every earlier request was
//!   answered too; a connection that answers nothing at all for that
//!   longest check budget (a frozen server, a dead host, a partition) is
//!   remade.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, RedisError, Value};
use tokio::sync::watch;
use tollgate_core::{Deadline, StoreError};

use super::{Longest, failure};

/// Least time between two connection attempts: not a time budget, a pace.
/// After a failed attempt, calls fail at once with its error until it has
/// passed, so a dead server is not hammered; it is shorter than the pause
/// between a check's attempts (100 ms by default), so a retry finds a new
/// attempt under way.
pub(crate) const RECONNECT_DELAY: Duration = Duration::from_millis(50);

type Attempt = Option<Result<Live, RedisError>>;

/// A lazily made, self-repairing connection to one server. Not `Debug`:
/// its client holds the password.
pub(crate) struct Link {
    client: Client,
    config: AsyncConnectionConfig,
    state: Arc<Mutex<State>>,
    /// What bounds a connection attempt and a probe.
    budget: Longest,
}

#[derive(Default)]
struct State {
    live: Option<Live>,
    connecting: Option<watch::Receiver<Attempt>>,
    /// The last failed attempt: when it ended, why, and how long it could wait.
    failed: Option<(Instant, RedisError, Duration)>,
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
    /// How long a probe waits for an answer.
    stale_after: Duration,
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
            self.link.probe(self.live, self.stale_after);
        }
    }
}

impl Link {
    /// A link to the server `client` names; connects on first use.
    pub(crate) fn new(client: Client) -> Link {
        let config = AsyncConnectionConfig::new().set_response_timeout(None);
        Link {
            client,
            config,
            state: Arc::default(),
            budget: Longest::default(),
        }
    }

    /// The current connection, connecting first when there is none. Waits
    /// for the background attempt (at most the longest check budget so
    /// far); the caller's own timer may drop the wait sooner.
    pub(crate) async fn connection(&self, deadline: Deadline) -> Result<Live, StoreError> {
        let budget = self.budget.note(deadline);
        let mut attempt = match self.ready_or_attempt(budget)? {
            Ok(live) => return Ok(live),
            Err(attempt) => attempt,
        };
        let ended = || StoreError::Connection("redis connection attempt ended early".into());
        let Ok(result) = attempt.wait_for(Option::is_some).await else {
            return Err(ended());
        };
        match &*result {
            Some(Ok(live)) => Ok(live.clone()),
            Some(Err(err)) => Err(failure::from_redis(err.clone(), budget)),
            None => Err(ended()),
        }
    }

    /// Tracks one request sent on `live` under `deadline`.
    pub(crate) fn pending<'a>(&'a self, live: &'a Live, deadline: Deadline) -> Pending<'a> {
        Pending {
            link: self,
            live,
            stale_after: self.budget.note(deadline),
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
    /// the connection when nothing answers within `stale_after`.
    fn probe(&self, live: &Live, stale_after: Duration) {
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
            let reply = tokio::time::timeout(stale_after, ping.query_async::<Value>(&mut conn));
            match reply.await {
                Ok(Ok(_)) => {}
                // An error reply (LOADING, NOPERM, ...) is a reply too.
                Ok(Err(err)) if failure::is_reply(&err) => {}
                Ok(Err(err)) => {
                    tracing::debug!(error = %err, "redis connection broken; it will be remade");
                    discard(&state, live.id);
                }
                Err(_) => {
                    tracing::warn!(after = ?stale_after, "redis connection unanswered; reconnecting");
                    discard(&state, live.id);
                }
            }
            live.probing.store(false, Ordering::Release);
        });
    }

    /// The live connection, or the attempt to wait for (started if needed,
    /// bounded by `budget`).
    fn ready_or_attempt(
        &self,
        budget: Duration,
    ) -> Result<Result<Live, watch::Receiver<Attempt>>, StoreError> {
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
        if let Some((at, err, waited)) = &state.failed
            && at.elapsed() < RECONNECT_DELAY
        {
            return Err(failure::from_redis(err.clone(), *waited));
        }
        let runtime = tokio::runtime::Handle::try_current()
            .map_err(|_| StoreError::Backend("tollgate-redis needs a tokio runtime".into()))?;
        let (done, attempt) = watch::channel(None);
        state.connecting = Some(attempt.clone());
        state.made = state.made.wrapping_add(1);
        let id = state.made;
        let shared = Arc::clone(&self.state);
        let client = self.client.clone();
        let config = self.config.clone().set_connection_timeout(Some(budget));
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
                        state.failed = Some((Instant::now(), err.clone(), budget));
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
