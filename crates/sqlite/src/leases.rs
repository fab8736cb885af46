//! Sets of leases (a concurrency limit's [`lease`](Counter::lease)
//! counters), run by the worker inside a write transaction.
//!
//! A lease is a row of `leases`: the set's key, the lease's id (the
//! [`CheckId`] of the call that took it, as its 128 bits, 16 bytes big
//! endian) and when it ends (`ends_at`, ms since the epoch on the store's
//! clock). A lease whose `ends_at` is not after now has expired: it is
//! never counted, and any call on its set (a count, reservation or refund
//! of it, [`end`], [`renew`]) first removes its set's expired leases
//! ("reclaims" them). A set is its leases: it exists while it holds one,
//! and lives until the last one ends.
//!
//! `lease_sets` holds one row per set that has a lease row: its key and
//! the latest `ends_at` among them (the set's lifetime), kept so by every
//! call that writes the set, and indexed by it, so the sweep finds the
//! sets whose leases have all expired without reading the leases. Neither
//! table holds a row whose set lacks the other's.

use std::time::Duration;

use rusqlite::{Connection, OptionalExtension, params};
use tollgate_core::{CheckId, Counter, Leases};

use crate::ops::{Result, expires_at, millis};

/// Removes the expired leases of a set.
const RECLAIM: &str = "DELETE FROM leases WHERE key = ?1 AND ends_at <= ?2";

/// How many leases a set holds, and when the first and last end.
const HELD: &str = "SELECT count(*), min(ends_at), max(ends_at) FROM leases WHERE key = ?1";

/// How many unexpired leases a set holds, and when the first ends: a read.
const LIVE: &str = "SELECT count(*), min(ends_at) FROM leases WHERE key = ?1 AND ends_at > ?2";

/// Whether a set holds the lease `?2`.
const HOLDS: &str = "SELECT 1 FROM leases WHERE key = ?1 AND id = ?2";

/// Adds a lease.
const TAKE: &str = "INSERT INTO leases (key, id, ends_at) VALUES (?1, ?2, ?3)";

/// Makes a lease end at `?3`.
const RENEW: &str = "UPDATE leases SET ends_at = ?3 WHERE key = ?1 AND id = ?2";

/// Removes a lease.
const END: &str = "DELETE FROM leases WHERE key = ?1 AND id = ?2";

/// Removes the unexpired leases of a set.
const DROP_LIVE: &str = "DELETE FROM leases WHERE key = ?1 AND ends_at > ?2";

/// Removes every lease of a set.
const DROP_ALL: &str = "DELETE FROM leases WHERE key = ?1";

/// Sets a set's lifetime: when its last lease ends.
const LIVES: &str = "
    INSERT INTO lease_sets (key, ends_at) VALUES (?1, ?2)
    ON CONFLICT (key) DO UPDATE SET ends_at = excluded.ends_at";

/// Removes a set's lifetime (it holds no lease).
const DROP_SET: &str = "DELETE FROM lease_sets WHERE key = ?1";

/// Removes the leases of the sets whose last lease ended by `?1`, at most
/// `?2`, oldest first (all their leases have expired).
const SWEEP_LEASES: &str = "
    DELETE FROM leases WHERE key IN (
        SELECT key FROM lease_sets WHERE ends_at <= ?1 ORDER BY ends_at, key LIMIT ?2
    )";

/// Then those sets themselves: the same ones (one transaction, one order).
const SWEEP_SETS: &str = "
    DELETE FROM lease_sets WHERE key IN (
        SELECT key FROM lease_sets WHERE ends_at <= ?1 ORDER BY ends_at, key LIMIT ?2
    )";

/// A set of leases as a call found it, its expired leases removed, or as
/// the call left it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Set {
    /// The leases held (unexpired).
    pub(crate) held: u64,
    /// When the first of them ends (ms since the epoch), if any.
    first: Option<i64>,
    /// When the last of them ends, if any.
    last: Option<i64>,
    /// How many expired leases the call removed.
    reclaimed: u64,
}

impl Set {
    /// The two numbers a count or reservation answers for this set after
    /// the call: ms until its first lease ends (0 when it holds none),
    /// and how many expired leases the call removed.
    pub(crate) fn tail(&self, now: Duration) -> [u64; 2] {
        [until(self.first, now), self.reclaimed]
    }
}

/// ms from `now` until `ends_at`, rounded up (0 when `None` or past): as
/// `ends_at` is whole ms, `ends_at` less `now`'s whole ms.
fn until(ends_at: Option<i64>, now: Duration) -> u64 {
    ends_at.map_or(0, |ends_at| {
        u64::try_from(ends_at.saturating_sub(millis(now))).unwrap_or(0)
    })
}

/// The id of a lease as its row holds it.
fn id_bytes(id: CheckId) -> [u8; 16] {
    id.as_u128().to_be_bytes()
}

/// A count read by SQLite as a `u64` (`count(*)` is never negative).
fn count(n: i64) -> u64 {
    u64::try_from(n).unwrap_or(0)
}

/// The set at `key`, its expired leases removed first (a set left without
/// leases loses its lifetime row too).
pub(crate) fn found(conn: &Connection, key: &str, now: Duration) -> Result<Set> {
    let key = key.as_bytes();
    let reclaimed = conn
        .prepare_cached(RECLAIM)?
        .execute(params![key, millis(now)])?;
    let (held, first, last) = conn.prepare_cached(HELD)?.query_row([key], |row| {
        Ok((
            row.get::<_, i64>(0)?,
            row.get::<_, Option<i64>>(1)?,
            row.get::<_, Option<i64>>(2)?,
        ))
    })?;
    if reclaimed > 0 && held == 0 {
        conn.prepare_cached(DROP_SET)?.execute([key])?;
    }
    Ok(Set {
        held: count(held),
        first,
        last,
        reclaimed: reclaimed as u64,
    })
}

/// Takes the lease `id` in the set of `counter` as [`found`] (unless it
/// holds it already, a retry's), ending the counter's `ttl` from now; the
/// set after. Its lifetime row follows its last lease.
pub(crate) fn take(
    conn: &Connection,
    counter: &Counter,
    id: CheckId,
    set: Set,
    now: Duration,
) -> Result<Set> {
    let key = counter.key.as_bytes();
    let id = id_bytes(id);
    let holds = conn
        .prepare_cached(HOLDS)?
        .query_row(params![key, id], |_| Ok(()))
        .optional()?
        .is_some();
    if holds {
        return Ok(set);
    }
    let ends_at = expires_at(now, counter.ttl);
    conn.prepare_cached(TAKE)?
        .execute(params![key, id, ends_at])?;
    let last = set.last.map_or(ends_at, |last| last.max(ends_at));
    conn.prepare_cached(LIVES)?.execute(params![key, last])?;
    Ok(Set {
        held: set.held.saturating_add(1),
        first: Some(set.first.map_or(ends_at, |first| first.min(ends_at))),
        last: Some(last),
        reclaimed: set.reclaimed,
    })
}

/// Gives the set at `key` the lifetime of its last lease, or removes its
/// lifetime row when it holds none.
fn settle(conn: &Connection, key: &[u8]) -> Result<()> {
    let last = conn
        .prepare_cached(HELD)?
        .query_row([key], |row| row.get::<_, Option<i64>>(2))?;
    match last {
        Some(last) => conn.prepare_cached(LIVES)?.execute(params![key, last])?,
        None => conn.prepare_cached(DROP_SET)?.execute([key])?,
    };
    Ok(())
}

/// Ends the lease `id` at `key`; whether it was held (unexpired).
pub(crate) fn end(conn: &Connection, key: &str, id: CheckId, now: Duration) -> Result<bool> {
    if found(conn, key, now)?.held == 0 {
        return Ok(false);
    }
    let key = key.as_bytes();
    let ended = conn
        .prepare_cached(END)?
        .execute(params![key, id_bytes(id)])?
        > 0;
    if ended {
        settle(conn, key)?;
    }
    Ok(ended)
}

/// Makes the lease `id` at `key` end `lifetime` from now, and the set live
/// as long as its last lease; whether it was held (unexpired). A lease not
/// held is not taken.
pub(crate) fn renew(
    conn: &Connection,
    key: &str,
    id: CheckId,
    lifetime: Duration,
    now: Duration,
) -> Result<bool> {
    if found(conn, key, now)?.held == 0 {
        return Ok(false);
    }
    let key = key.as_bytes();
    let renewed = conn.prepare_cached(RENEW)?.execute(params![
        key,
        id_bytes(id),
        expires_at(now, lifetime)
    ])? > 0;
    if renewed {
        settle(conn, key)?;
    }
    Ok(renewed)
}

/// The leases held at `key` and the time until the first ends; only reads.
pub(crate) fn status(conn: &Connection, key: &str, now: Duration) -> Result<Leases> {
    let (held, first) = conn
        .prepare_cached(LIVE)?
        .query_row(params![key.as_bytes(), millis(now)], |row| {
            Ok((row.get::<_, i64>(0)?, row.get::<_, Option<i64>>(1)?))
        })?;
    Ok(Leases {
        held: count(held),
        first_ends: Duration::from_millis(until(first, now)),
    })
}

/// Removes the set at `key`; whether it held a lease (unexpired).
pub(crate) fn delete(conn: &Connection, key: &str, now: Duration) -> Result<bool> {
    let key = key.as_bytes();
    let live = conn
        .prepare_cached(DROP_LIVE)?
        .execute(params![key, millis(now)])?;
    conn.prepare_cached(DROP_ALL)?.execute([key])?;
    conn.prepare_cached(DROP_SET)?.execute([key])?;
    Ok(live > 0)
}

/// Removes at most `batch` sets whose every lease has expired, with their
/// leases; how many sets it removed.
pub(crate) fn sweep(conn: &Connection, batch: u32, now: Duration) -> Result<usize> {
    if batch == 0 {
        return Ok(0);
    }
    let now = millis(now);
    conn.prepare_cached(SWEEP_LEASES)?
        .execute(params![now, batch])?;
    conn.prepare_cached(SWEEP_SETS)?
        .execute(params![now, batch])
}
