//! The sweep of expired counters, marks and call records: in the background, every
//! interval, and on demand.

use std::time::{Duration, Instant};

use deadpool_postgres::Pool;
use tokio::sync::oneshot;
use tollgate_core::StoreError;

use crate::error;
use crate::lease::Lease;

/// Sweeps every `interval` until `stop` resolves (its sender, held by the
/// store, is dropped with the store's last clone). A sweep is over before
/// the next is due: the server gives up a sweep waiting for a lock after
/// `interval` (`lock_timeout`), and one still running (or still waiting for
/// a connection) after `interval` is cut off, its connection closed; the
/// next one starts on time, and blocked sweeps never pile up on the server.
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
            match tokio::time::timeout(interval, sweep(&pool, &sql, batch, Some(interval))).await {
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

/// Removes at most `batch` expired counters, `batch` expired marks and
/// `batch` expired call records; how many it removed. With `lock_wait`, the server gives the sweep up
/// when it waits longer than that for a lock. Otherwise bounded by its
/// caller: a sweep dropped before its reply closes its connection.
pub(crate) async fn sweep(
    pool: &Pool,
    sql: &str,
    batch: u32,
    lock_wait: Option<Duration>,
) -> Result<u64, StoreError> {
    let started = Instant::now();
    let mut lease = Lease::take_unbounded(pool, started).await?;
    let result = async {
        let tx = lease.transaction().await?;
        if let Some(wait) = lock_wait {
            let millis = wait.as_millis().clamp(1, i32::MAX as u128);
            tx.batch_execute(&format!("SET LOCAL lock_timeout = {millis}"))
                .await?;
        }
        let statement = tx.prepare_cached(sql).await?;
        let row = tx.query_one(&statement, &[&i64::from(batch)]).await?;
        tx.commit().await?;
        Ok(row)
    }
    .await;
    lease.give_back();
    let row = result.map_err(|e| error::from_pg(e, started))?;
    let removed = |i: usize| {
        row.try_get::<_, i64>(i)
            .map_err(|e| error::invalid(e.to_string()))
    };
    let (counters, marks, calls) = (removed(0)?, removed(1)?, removed(2)?);
    let removed = counters.saturating_add(marks).saturating_add(calls);
    Ok(u64::try_from(removed).unwrap_or(0))
}
