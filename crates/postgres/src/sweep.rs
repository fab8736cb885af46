//! The sweep of expired counters and marks: in the background, every
//! interval, and on demand.

use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::oneshot;
use tollgate_core::StoreError;

use crate::error;
use crate::lease::Lease;

/// Sweeps every `interval` until `stop` resolves (its sender, held by the
/// store, is dropped with the store's last clone). A sweep is over before
/// the next is due: one still running (or still waiting for a connection)
/// after `interval` is cut off, its connection closed, and the next one
/// starts on time.
pub(crate) fn spawn(
    pool: Pool,
    sql: String,
    interval: Duration,
    batch: u32,
    mut stop: oneshot::Receiver<()>,
) {
    tokio::spawn(async move {
        loop {
            if tokio::time::timeout(interval, &mut stop).await.is_ok() {
                return;
            }
            match tokio::time::timeout(interval, sweep(&pool, &sql, batch)).await {
                Ok(Ok(removed)) => {
                    tracing::debug!(removed, "tollgate-postgres: swept expired entries");
                }
                Ok(Err(err)) => {
                    tracing::warn!(kind = err.kind(), "tollgate-postgres: sweep failed");
                }
                Err(_) => tracing::warn!(
                    "tollgate-postgres: a sweep took longer than the sweep interval; cut off"
                ),
            }
        }
    });
}

/// Removes at most `batch` expired counters and `batch` expired marks;
/// how many it removed. Bounded by its caller: a sweep dropped before its
/// reply closes its connection.
pub(crate) async fn sweep(pool: &Pool, sql: &str, batch: u32) -> Result<u64, StoreError> {
    let started = Instant::now();
    let lease = Lease::take_unbounded(pool, started).await?;
    let result = async {
        let statement = lease.prepare_cached(sql).await?;
        lease.query_one(&statement, &[&i64::from(batch)]).await
    }
    .await;
    lease.give_back();
    let row = result.map_err(|e| error::from_pg(e, started))?;
    let removed = |i: usize| {
        row.try_get::<_, i64>(i)
            .map_err(|e| error::invalid(e.to_string()))
    };
    let (counters, marks) = (removed(0)?, removed(1)?);
    Ok(u64::try_from(counters.saturating_add(marks)).unwrap_or(0))
}
