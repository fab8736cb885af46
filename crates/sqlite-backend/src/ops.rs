//! The SQL of each store call, run by the worker inside a write transaction.
//!
//! Times are milliseconds since the epoch on the store's clock. A row whose
//! `expires_at` is not after now is expired: it reads as absent and is
//! replaced when written.
//!
//! The worker holds the file's write lock for the whole batch, so a count
//! read here cannot change before the write that follows it. Writes do not
//! use `RETURNING`: SQLite would build a temporary table for every such
//! statement, which costs more than reading the row first.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tollgate_core::{Counter, Expiry, Reservation};

/// `Ok(T)` or a failure, whether from SQLite or an unreadable value.
pub(crate) type Result<T> = std::result::Result<T, rusqlite::Error>;

/// Increments a live counter that is below `?2`. Only `value` changes, so
/// the expiry index is left alone: a counter keeps the lifetime it was
/// created with (at most one `ttl` after any of its increments).
const BUMP: &str = "UPDATE counters SET value = value + 1 WHERE key = ?1 AND value < ?2";

/// Starts a counter at 1, replacing an expired row.
const START: &str = "
    INSERT INTO counters (key, value, expires_at) VALUES (?1, 1, ?2)
    ON CONFLICT (key) DO UPDATE SET value = 1, expires_at = excluded.expires_at";

/// The live count of a key.
const COUNT: &str = "SELECT value FROM counters WHERE key = ?1 AND expires_at > ?2";

/// A row, live or expired.
const READ: &str = "SELECT value, expires_at FROM counters WHERE key = ?1";

/// Removes a row if it has expired.
const DROP_EXPIRED: &str = "DELETE FROM counters WHERE key = ?1 AND expires_at <= ?2";

/// Removes a row if it is live.
const DROP_LIVE: &str = "DELETE FROM counters WHERE key = ?1 AND expires_at > ?2";

/// Stores a mark unless a live row holds the key: changes no row when one does.
const SET_IF_ABSENT: &str = "
    INSERT INTO counters (key, value, expires_at) VALUES (?1, 1, ?2)
    ON CONFLICT (key) DO UPDATE SET value = 1, expires_at = excluded.expires_at
    WHERE expires_at <= ?3";

/// Removes at most `?2` expired rows, oldest first.
const SWEEP: &str = "
    DELETE FROM counters WHERE key IN (
        SELECT key FROM counters WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2
    )";

/// Milliseconds since the epoch, as SQLite stores them.
fn millis(time: Duration) -> i64 {
    i64::try_from(time.as_millis()).unwrap_or(i64::MAX)
}

/// When a counter given `ttl` now expires.
fn expires_at(now: Duration, ttl: Duration) -> i64 {
    millis(now.saturating_add(ttl))
}

/// A stored count as a `u64`; a negative one is an unreadable value.
fn count(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, value))
}

/// Increments every counter; the new counts, in order.
pub(crate) fn increment(
    conn: &Connection,
    counters: &[Counter],
    now: Duration,
) -> Result<Vec<u64>> {
    counters
        .iter()
        .map(|c| {
            let before = current(conn, &c.key, now)?;
            bump(conn, c, before, u64::MAX, now)
        })
        .collect()
}

/// Adds one to a counter whose live count is `before` (`None`: absent or
/// expired), if it is below `max`; the new count. The worker holds the
/// write lock, so `before` is still true; a counter that changed anyway
/// fails the call, which its batch then rolls back.
fn bump(
    conn: &Connection,
    c: &Counter,
    before: Option<u64>,
    max: u64,
    now: Duration,
) -> Result<u64> {
    let changed = match before {
        Some(_) => {
            let max = i64::try_from(max).unwrap_or(i64::MAX);
            conn.prepare_cached(BUMP)?
                .execute(params![c.key.as_bytes(), max])?
        }
        None => conn
            .prepare_cached(START)?
            .execute(params![c.key.as_bytes(), expires_at(now, c.ttl)])?,
    };
    match changed {
        1 => Ok(before.unwrap_or(0).saturating_add(1)),
        changed => Err(rusqlite::Error::StatementChangedRows(changed)),
    }
}

/// Increments every counter if each stays within its max, else none and
/// returns the current counts. Each increment is still conditional on its
/// counter being below its max; one that is not fails the call, which its
/// batch then rolls back.
pub(crate) fn increment_within(
    conn: &Connection,
    counters: &[Counter],
    now: Duration,
) -> Result<Reservation> {
    let before = counters
        .iter()
        .map(|c| current(conn, &c.key, now))
        .collect::<Result<Vec<Option<u64>>>>()?;
    if counters
        .iter()
        .zip(&before)
        .any(|(c, count)| count.unwrap_or(0) >= c.max)
    {
        return Ok(Reservation {
            applied: false,
            counts: before.into_iter().map(|n| n.unwrap_or(0)).collect(),
        });
    }
    let counts = counters
        .iter()
        .zip(before)
        .map(|(c, before)| bump(conn, c, before, c.max, now))
        .collect::<Result<Vec<u64>>>()?;
    Ok(Reservation {
        applied: true,
        counts,
    })
}

/// The live count of `key`, `None` when absent or expired; changes nothing.
fn current(conn: &Connection, key: &str, now: Duration) -> Result<Option<u64>> {
    let mut stmt = conn.prepare_cached(COUNT)?;
    let value = stmt
        .query_row(params![key.as_bytes(), millis(now)], |row| {
            row.get::<_, i64>(0)
        })
        .optional()?;
    value.map(count).transpose()
}

/// The live counts of `keys`, 0 when absent; removes the expired rows it meets.
pub(crate) fn get<K: AsRef<str>>(
    conn: &Connection,
    keys: impl IntoIterator<Item = K>,
    now: Duration,
) -> Result<Vec<u64>> {
    keys.into_iter()
        .map(|k| Ok(live(conn, k.as_ref(), now)?.map_or(0, |(value, _)| value)))
        .collect()
}

/// The live row of `key` as (count, expires_at); removes it when expired.
fn live(conn: &Connection, key: &str, now: Duration) -> Result<Option<(u64, i64)>> {
    let mut stmt = conn.prepare_cached(READ)?;
    let row = stmt
        .query_row([key.as_bytes()], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, i64>(1)?))
        })
        .optional()?;
    match row {
        Some((value, expires)) if expires > millis(now) => Ok(Some((count(value)?, expires))),
        Some(_) => {
            conn.prepare_cached(DROP_EXPIRED)?
                .execute(params![key.as_bytes(), millis(now)])?;
            Ok(None)
        }
        None => Ok(None),
    }
}

/// Stores `key` for `ttl` if no live row holds it; whether it was stored.
pub(crate) fn set_if_absent(
    conn: &Connection,
    key: &str,
    ttl: Duration,
    now: Duration,
) -> Result<bool> {
    let mut stmt = conn.prepare_cached(SET_IF_ABSENT)?;
    Ok(stmt.execute(params![key.as_bytes(), expires_at(now, ttl), millis(now)])? == 1)
}

/// Removes `key`; whether a live row held it.
pub(crate) fn delete(conn: &Connection, key: &str, now: Duration) -> Result<bool> {
    let params = params![key.as_bytes(), millis(now)];
    let live = conn.prepare_cached(DROP_LIVE)?.execute(params)?;
    conn.prepare_cached(DROP_EXPIRED)?.execute(params)?;
    Ok(live == 1)
}

/// The remaining lifetime of `key`.
pub(crate) fn expiry(conn: &Connection, key: &str, now: Duration) -> Result<Expiry> {
    Ok(match live(conn, key, now)? {
        Some((_, expires)) => {
            let left = u64::try_from(expires.saturating_sub(millis(now))).unwrap_or(0);
            Expiry::In(Duration::from_millis(left))
        }
        None => Expiry::Absent,
    })
}

/// Removes at most `batch` expired rows; how many it removed.
pub(crate) fn sweep(conn: &Connection, batch: u32, now: Duration) -> Result<usize> {
    conn.prepare_cached(SWEEP)?
        .execute(params![millis(now), batch])
}
