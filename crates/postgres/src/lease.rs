//! [`Lease`]: a pooled connection for one call, given back only when the
//! call saw its reply.

use std::ops::{Deref, DerefMut};
use std::time::{Duration, Instant};

use deadpool_postgres::{ClientWrapper, Object, Pool, PoolError, Timeouts};
use tollgate_core::{Deadline, StoreError};

use crate::{error, tls};

/// A connection taken from the pool for one call.
///
/// A call whose caller gives up (its future dropped at the deadline) may
/// leave a statement running on the connection; the next call on it would
/// wait behind that statement. So a lease dropped before
/// [`give_back`](Lease::give_back) takes its connection out of the pool and
/// closes it, and the pool opens a fresh one when it needs one. The
/// abandoned statement, if the server runs it at all, applies nothing: its
/// deadline has passed.
pub(crate) struct Lease {
    client: Option<Object>,
}

impl Lease {
    /// A connection from `pool`, waiting for a free one or a new one no
    /// longer than `deadline`. This is the one wait a store bounds itself:
    /// it is not a server call, so nothing else would bound it if the
    /// caller's own timer were not there.
    pub(crate) async fn take(
        pool: &Pool,
        deadline: Deadline,
        started: Instant,
    ) -> Result<Lease, StoreError> {
        let remaining = deadline.remaining();
        if remaining.is_zero() {
            return Err(error::passed(started));
        }
        Lease::within(pool, Some(remaining), started).await
    }

    /// A connection from `pool`, with no limit of its own on the wait: for
    /// work that its caller bounds by dropping it (a sweep).
    pub(crate) async fn take_unbounded(pool: &Pool, started: Instant) -> Result<Lease, StoreError> {
        Lease::within(pool, None, started).await
    }

    /// A connection from `pool` within `limit` (no limit: `None`).
    async fn within(
        pool: &Pool,
        limit: Option<Duration>,
        started: Instant,
    ) -> Result<Lease, StoreError> {
        let timeouts = Timeouts {
            wait: limit,
            create: limit,
            recycle: limit,
        };
        // A new connection is opened in this task: a `prefer` one that
        // failed over TLS and then in plain notes the TLS attempt's error.
        let (taken, tls_failure) = tls::noting_tls_failure(pool.timeout_get(&timeouts)).await;
        let client = taken.map_err(|e| match (e, tls_failure) {
            (PoolError::Backend(plain), Some(tls)) => {
                error::from_tls_then_plain(tls, plain, started)
            }
            (e, _) => error::from_pool(e, started),
        })?;
        Ok(Lease {
            client: Some(client),
        })
    }

    /// Gives the connection back to the pool: the call has its reply, so
    /// nothing is left running on it.
    pub(crate) fn give_back(mut self) {
        drop(self.client.take());
    }
}

impl Deref for Lease {
    type Target = ClientWrapper;

    fn deref(&self) -> &ClientWrapper {
        // `client` is only None once the lease is given back or dropped.
        match &self.client {
            Some(client) => client,
            None => unreachable!("a lease is used after it was given back"),
        }
    }
}

impl DerefMut for Lease {
    fn deref_mut(&mut self) -> &mut ClientWrapper {
        match &mut self.client {
            Some(client) => client,
            None => unreachable!("a lease is used after it was given back"),
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        if let Some(client) = self.client.take() {
            // Out of the pool; dropping the client closes the connection.
            drop(Object::take(client));
        }
    }
}
