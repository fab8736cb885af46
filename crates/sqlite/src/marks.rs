//! The SQL of the webhook mark calls, in the `marks` table: a mark holds a
//! token (a delivery being processed) or [`MARK_DONE`], and expires like a
//! counter. Run by the worker inside a write transaction, so a mark read
//! here cannot change before the write that follows it.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tollgate_core::{Claim, MARK_DONE};

use crate::ops::{Result, expires_at, millis};

/// The live value of a mark.
const READ: &str = "SELECT value FROM marks WHERE key = ?1 AND expires_at > ?2";

/// Stores a mark, replacing an expired row (or the caller's own live one).
const STORE: &str = "
    INSERT INTO marks (key, value, expires_at) VALUES (?1, ?2, ?3)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at";

/// Removes a mark if it holds `?2`, live.
const DROP_HELD: &str = "DELETE FROM marks WHERE key = ?1 AND value = ?2 AND expires_at > ?3";

/// Removes a mark if it has expired.
const DROP_EXPIRED: &str = "DELETE FROM marks WHERE key = ?1 AND expires_at <= ?2";

/// Removes at most `?2` expired marks, oldest first.
const SWEEP: &str = "
    DELETE FROM marks WHERE key IN (
        SELECT key FROM marks WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2
    )";

/// The live value of mark `key`, `None` when absent or expired.
fn value(conn: &Connection, key: &str, now: Duration) -> Result<Option<String>> {
    conn.prepare_cached(READ)?
        .query_row(params![key.as_bytes(), millis(now)], |row| row.get(0))
        .optional()
}

/// Stores `value` in mark `key` for `ttl`.
fn store(conn: &Connection, key: &str, value: &str, ttl: Duration, now: Duration) -> Result<()> {
    conn.prepare_cached(STORE)?
        .execute(params![key.as_bytes(), value, expires_at(now, ttl)])?;
    Ok(())
}

/// Stores `token` in mark `key` for `ttl` unless a live mark holds another
/// value. A mark already holding `token` (an earlier attempt of this claim)
/// is acquired and left as it is.
pub(crate) fn claim(
    conn: &Connection,
    key: &str,
    token: &str,
    ttl: Duration,
    now: Duration,
) -> Result<Claim> {
    match value(conn, key, now)? {
        Some(held) if held == token => Ok(Claim::Acquired),
        Some(_) => Ok(Claim::Held),
        None => {
            store(conn, key, token, ttl, now)?;
            Ok(Claim::Acquired)
        }
    }
}

/// Sets mark `key` to [`MARK_DONE`] for `ttl` when it holds `token`,
/// nothing or already [`MARK_DONE`]; false (changing nothing) when another
/// token holds it.
pub(crate) fn finish(
    conn: &Connection,
    key: &str,
    token: &str,
    ttl: Duration,
    now: Duration,
) -> Result<bool> {
    match value(conn, key, now)? {
        Some(held) if held != token && held != MARK_DONE => Ok(false),
        _ => {
            store(conn, key, MARK_DONE, ttl, now)?;
            Ok(true)
        }
    }
}

/// Removes mark `key` when it holds `token`; whether it did. An expired
/// mark is removed too, but holds nothing.
pub(crate) fn release(conn: &Connection, key: &str, token: &str, now: Duration) -> Result<bool> {
    let removed =
        conn.prepare_cached(DROP_HELD)?
            .execute(params![key.as_bytes(), token, millis(now)])?;
    conn.prepare_cached(DROP_EXPIRED)?
        .execute(params![key.as_bytes(), millis(now)])?;
    Ok(removed == 1)
}

/// Removes at most `batch` expired marks; how many it removed.
pub(crate) fn sweep(conn: &Connection, batch: u32, now: Duration) -> Result<usize> {
    conn.prepare_cached(SWEEP)?
        .execute(params![millis(now), batch])
}
