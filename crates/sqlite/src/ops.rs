//! The SQL of each counter call, run by the worker inside a write transaction.
//!
//! Times are milliseconds since the epoch on the store's clock. A row whose
//! `expires_at` is not after now is expired: it reads as absent and is
//! replaced when written.
//!
//! The worker holds the file's write lock for the whole batch, so a count
//! read here cannot change before the write that follows it; new counts are
//! computed here, with the core's arithmetic ([`Counter::added_to`],
//! [`Counter::fits`], [`Counter::refunded_from`], which raise a count to
//! the counter's floor first), so SQL never adds and nothing can overflow
//! SQLite's 64-bit integers (counts stay within
//! [`MAX_COUNT`](tollgate_core::MAX_COUNT) = 2^53). A count or reservation
//! of a counter with a floor also gives it a lifetime afresh
//! ([`Counter::lifetime_at`] its new count, from now: [`RENEW`]); one
//! without keeps the lifetime it started with. Writes do not use
//! `RETURNING`: SQLite would build a temporary table for every such
//! statement, which costs more than reading the row first.
//!
//! A counter with a [`prior`](Counter::prior) is checked against its
//! [`Counter::max_after`] the prior's live count, read with [`COUNT`] in the
//! same transaction before any of the call's writes (0 when absent or
//! expired; the prior's row is never written, deleted nor renewed), and
//! [`count`] and [`reserve`] answer the priors' counts after the counters',
//! in counter order. A call without a prior runs no statement for priors.
//!
//! A [`lease`](Counter::lease) counter is a set of leases, kept by
//! [`leases`] in tables of its own: its count is the number of its
//! unexpired leases (the expired ones removed first, even by a refused
//! reservation or a refund), and a count or applied reservation takes the
//! lease whose id is the call's (unless the set holds it already); a
//! refund leaves it as it is. After the priors' counts, [`count`] and
//! [`reserve`] answer two numbers per lease counter, in counter order: the
//! ms until its first lease ends after the call, and how many expired
//! leases the call removed from it ([`Set::tail`](leases::Set::tail));
//! they are recorded with the rest of the reply.
//!
//! A counter call runs [`once`]: an attempt whose call this worker
//! recorded before looks the record up (among the batch's, or in its row
//! of `calls`), and one found (an earlier attempt, committed or in the same
//! batch) is answered with what it recorded, applying nothing; else the
//! call is applied and its record noted, written with the batch's others
//! in one row of the same transaction ([`record_batch`]).

use std::time::Duration;

use rusqlite::types::Type;
use rusqlite::{Connection, OptionalExtension, params};
use tollgate_core::{CheckId, Counter, Deadline, Reservation};

use crate::calls::{self, Calls, Earlier};
use crate::leases;

/// `Ok(T)` or a failure, whether from SQLite or an unreadable value.
pub(crate) type Result<T> = std::result::Result<T, rusqlite::Error>;

/// Sets a live counter from the count read (`?2`) to its new count (`?3`).
/// Only `value` changes, so the expiry index is left alone: a counter
/// without a floor keeps the lifetime it was created with (at most one
/// `ttl` after any of its increments), and a refund keeps any counter's.
/// The condition on the old count turns a count changed under
/// the write lock (which cannot happen) into a failed call.
const SET: &str = "UPDATE counters SET value = ?3 WHERE key = ?1 AND value = ?2";

/// As [`SET`], and gives the counter a new expiry (`?4`): a count or
/// reservation of a counter with a floor, whose value is a time pushed
/// forward by each call, lives its `ttl` past that time from every one.
const RENEW: &str = "UPDATE counters SET value = ?3, expires_at = ?4 WHERE key = ?1 AND value = ?2";

/// Starts a counter at `?2`, replacing an expired row.
const START: &str = "
    INSERT INTO counters (key, value, expires_at) VALUES (?1, ?2, ?3)
    ON CONFLICT (key) DO UPDATE SET value = excluded.value, expires_at = excluded.expires_at";

/// The live count of a key.
const COUNT: &str = "SELECT value FROM counters WHERE key = ?1 AND expires_at > ?2";

/// A row, live or expired.
const READ: &str = "SELECT value, expires_at FROM counters WHERE key = ?1";

/// Removes a row if it has expired.
const DROP_EXPIRED: &str = "DELETE FROM counters WHERE key = ?1 AND expires_at <= ?2";

/// Removes a row if it is live.
const DROP_LIVE: &str = "DELETE FROM counters WHERE key = ?1 AND expires_at > ?2";

/// Removes at most `?2` expired counters, oldest first.
const SWEEP: &str = "
    DELETE FROM counters WHERE key IN (
        SELECT key FROM counters WHERE expires_at <= ?1 ORDER BY expires_at LIMIT ?2
    )";

/// The records of one batch's calls (see [`Calls`]).
const RECORDED: &str = "SELECT records FROM calls WHERE batch = ?1";

/// Writes the records of a batch's calls, in one row.
const RECORD: &str = "INSERT INTO calls (expires_at, records) VALUES (?1, ?2)";

/// Removes the expired rows of records up to row `?1`, this worker's newest
/// expired one: one range of the table's key. (Rows of other processes in
/// the range that have not expired are kept.)
const PURGE: &str = "DELETE FROM calls WHERE batch <= ?1 AND expires_at <= ?2";

/// Removes at most `?2` expired rows of records, oldest first, whoever
/// wrote them: for the sweep.
const SWEEP_RECORDS: &str = "
    DELETE FROM calls WHERE batch IN (
        SELECT batch FROM calls WHERE expires_at <= ?1 ORDER BY batch LIMIT ?2
    )";

/// Rows of records of this worker that must have expired before a batch
/// purges them (in one statement). Not a time budget.
const PURGE_ROWS: usize = 16;

/// The identity of a counter call across its attempts, and how long its
/// record lives: the check's budget and the skew margin, past which no
/// attempt of it is applied.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Once {
    id: u128,
    lifetime: Duration,
}

impl Once {
    /// The call `id`, whose attempts have `deadline`.
    pub(crate) fn new(id: CheckId, deadline: Deadline) -> Once {
        Once {
            id: id.as_u128(),
            lifetime: deadline
                .check_budget()
                .saturating_add(Deadline::SKEW_MARGIN),
        }
    }
}

/// Runs `apply` (which answers a reply of `expected` counts) unless an
/// earlier attempt of the call was recorded: then answers what that one
/// did, applying nothing. Otherwise notes what `apply` did among the
/// batch's records, which the worker writes in the same transaction
/// ([`record_batch`]). Only an attempt whose call this worker recorded
/// before reads the file for it.
pub(crate) fn once(
    conn: &Connection,
    call: &Once,
    expected: usize,
    now: Duration,
    apply: impl FnOnce() -> Result<Reservation>,
) -> Result<Reservation> {
    let found = Calls::with(|calls| calls.find(call.id, millis(now)));
    let earlier = match found.map_err(unreadable)? {
        Earlier::None => None,
        Earlier::Pending(reply) => Some(reply),
        Earlier::Row(batch) => recorded(conn, batch, call.id)?,
    };
    if let Some(reply) = earlier {
        if reply.counts.len() != expected {
            return Err(unreadable(format!(
                "a call record of {} counts for {expected} counters",
                reply.counts.len()
            )));
        }
        return Ok(reply);
    }
    let reply = apply()?;
    let expires_at = expires_at(now, call.lifetime);
    Calls::with(|calls| calls.add(call.id, &reply, expires_at));
    Ok(reply)
}

/// What the row `batch` recorded for the call `id`, if it holds it.
fn recorded(conn: &Connection, batch: i64, id: u128) -> Result<Option<Reservation>> {
    let mut stmt = conn.prepare_cached(RECORDED)?;
    let bytes = stmt
        .query_row([batch], |row| row.get::<_, Vec<u8>>(0))
        .optional()?;
    match bytes {
        Some(bytes) => calls::find_in(&bytes, id).map_err(unreadable),
        None => Ok(None),
    }
}

/// Writes the records of the batch being run in one row, and removes this
/// worker's expired rows once [`PURGE_ROWS`] have expired: in the batch's
/// transaction, after its calls. Nothing when no call recorded anything,
/// so reads never pay for it.
pub(crate) fn record_batch(conn: &Connection, now: Duration) -> Result<()> {
    let row = Calls::with(|calls| -> Result<Option<i64>> {
        let Some((bytes, expires_at)) = calls.row() else {
            return Ok(None);
        };
        conn.prepare_cached(RECORD)?
            .execute(params![expires_at, bytes])?;
        Ok(Some(expires_at))
    })?;
    let Some(expires_at) = row else {
        return Ok(());
    };
    let batch = conn.last_insert_rowid();
    let now = millis(now);
    let purge = Calls::with(|calls| {
        calls.written(batch, expires_at);
        calls.expired_rows(now, PURGE_ROWS)
    });
    if let Some(newest) = purge {
        conn.prepare_cached(PURGE)?.execute(params![newest, now])?;
    }
    Ok(())
}

/// A stored value that cannot be read as what it should be.
fn unreadable(what: String) -> rusqlite::Error {
    rusqlite::Error::FromSqlConversionFailure(0, Type::Blob, what.into())
}

/// Removes at most `batch` expired rows of call records; how many it removed.
pub(crate) fn sweep_records(conn: &Connection, batch: u32, now: Duration) -> Result<usize> {
    conn.prepare_cached(SWEEP_RECORDS)?
        .execute(params![millis(now), batch])
}

/// Milliseconds since the epoch, as SQLite stores them.
pub(crate) fn millis(time: Duration) -> i64 {
    i64::try_from(time.as_millis()).unwrap_or(i64::MAX)
}

/// When a row given `ttl` now expires.
pub(crate) fn expires_at(now: Duration, ttl: Duration) -> i64 {
    millis(now.saturating_add(ttl))
}

/// A stored count as a `u64`; a negative one is an unreadable value.
fn from_stored(value: i64) -> Result<u64> {
    u64::try_from(value).map_err(|_| rusqlite::Error::IntegralValueOutOfRange(0, value))
}

/// A count as SQLite stores it. Counts are at most 2^53, so this only fails
/// on a count no call can produce.
fn to_stored(count: u64) -> Result<i64> {
    i64::try_from(count).map_err(|err| rusqlite::Error::ToSqlConversionFailure(Box::new(err)))
}

/// How many counts a count or reservation of `counters` answers: one per
/// counter, then one per counter with a [`prior`](Counter::prior), then two
/// per [`lease`](Counter::lease) counter.
pub(crate) fn replied(counters: &[Counter]) -> usize {
    let priors = counters.iter().filter(|c| c.prior.is_some()).count();
    let leases = counters.iter().filter(|c| c.lease).count();
    counters.len() + priors + 2 * leases
}

/// The live count of each counter's [`prior`](Counter::prior), in counter
/// order, 0 when absent or expired. Only reads: a prior's row and lifetime
/// are left as they are (an expired one too, which a write would replace).
/// Empty, running no statement, when no counter has a prior.
fn priors(conn: &Connection, counters: &[Counter], now: Duration) -> Result<Vec<u64>> {
    counters
        .iter()
        .filter_map(|c| c.prior.as_ref())
        .map(|prior| Ok(current(conn, &prior.key, now)?.unwrap_or(0)))
        .collect()
}

/// Adds every counter's cost (raised to its floor first), saturating, and
/// takes the lease `id` of every lease counter; the new counts, in order,
/// then each counter's prior's count, in order (read before the writes),
/// then each lease counter's [`Set::tail`](leases::Set::tail).
pub(crate) fn count(
    conn: &Connection,
    counters: &[Counter],
    id: CheckId,
    now: Duration,
) -> Result<Vec<u64>> {
    let priors = priors(conn, counters, now)?;
    let mut counts = Vec::with_capacity(replied(counters));
    let mut tail = Vec::new();
    for c in counters {
        if c.lease {
            let set = leases::take(conn, c, id, leases::found(conn, &c.key, now)?, now)?;
            counts.push(set.held);
            tail.extend(set.tail(now));
            continue;
        }
        let before = current(conn, &c.key, now)?;
        let after = c.added_to(before.unwrap_or(0));
        counts.push(write(conn, c, before, after, Lifetime::of_added(c), now)?);
    }
    counts.extend(priors);
    counts.extend(tail);
    Ok(counts)
}

/// Adds every counter's cost, and takes the lease `id` of every lease
/// counter, if each [fits](Counter::fits) (within its
/// [`max_after`](Counter::max_after) its prior's count; a set of leases
/// when one more lease does), else none and returns the current counts;
/// then, either way, each counter's prior's count, in order, then each
/// lease counter's [`Set::tail`](leases::Set::tail) (its expired leases
/// removed either way).
pub(crate) fn reserve(
    conn: &Connection,
    counters: &[Counter],
    id: CheckId,
    now: Duration,
) -> Result<Reservation> {
    let priors = priors(conn, counters, now)?;
    // Per lease counter, in order: its set as found.
    let mut sets = Vec::new();
    let before = counters
        .iter()
        .map(|c| {
            if c.lease {
                let set = leases::found(conn, &c.key, now)?;
                sets.push(set);
                return Ok(Some(set.held));
            }
            current(conn, &c.key, now)
        })
        .collect::<Result<Vec<Option<u64>>>>()?;
    let mut prior = priors.iter().copied();
    let fits = counters.iter().zip(&before).all(|(c, count)| {
        let count = count.unwrap_or(0);
        match c.prior {
            // `priors` holds one count per counter with a prior, in order.
            Some(_) => c.fits_after(count, prior.next().unwrap_or(0)),
            None => c.fits(count),
        }
    });
    let mut counts = Vec::with_capacity(replied(counters));
    if fits {
        // Within its max, a cost is `added_to` the count unchanged (it only
        // saturates for a max above 2^53, which no rule has).
        let mut found = sets.iter_mut();
        for (c, before) in counters.iter().zip(before) {
            if c.lease
                && let Some(set) = found.next()
            {
                *set = leases::take(conn, c, id, *set, now)?;
                counts.push(set.held);
                continue;
            }
            let after = c.added_to(before.unwrap_or(0));
            counts.push(write(conn, c, before, after, Lifetime::of_added(c), now)?);
        }
    } else {
        counts.extend(before.into_iter().map(|n| n.unwrap_or(0)));
    }
    counts.extend(priors);
    counts.extend(sets.iter().flat_map(|set| set.tail(now)));
    Ok(Reservation {
        applied: fits,
        counts,
    })
}

/// Gives every counter's cost back, never below zero nor its floor,
/// keeping its expiry; an absent or expired counter stays absent. A lease
/// counter is left as it is (its expired leases removed) and answers the
/// leases it holds. The new counts, in order.
pub(crate) fn refund(conn: &Connection, counters: &[Counter], now: Duration) -> Result<Vec<u64>> {
    counters
        .iter()
        .map(|c| {
            if c.lease {
                return Ok(leases::found(conn, &c.key, now)?.held);
            }
            match live(conn, &c.key, now)? {
                Some((before, _)) => {
                    let after = c.refunded_from(before);
                    write(conn, c, Some(before), after, Lifetime::Keep, now)
                }
                None => Ok(0),
            }
        })
        .collect()
}

/// What a write of a live counter does to its expiry.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Lifetime {
    /// Keeps it: a refund, or a count of a counter without a floor.
    Keep,
    /// Sets it afresh ([`Counter::lifetime_at`] the new count from now): a
    /// count or reservation of a counter with a floor.
    Renew,
}

impl Lifetime {
    /// The lifetime of a counter whose cost is added (a count or an
    /// applied reservation).
    fn of_added(c: &Counter) -> Lifetime {
        if c.floor > 0 {
            Lifetime::Renew
        } else {
            Lifetime::Keep
        }
    }
}

/// Stores `after` for a counter whose live count is `before` (`None`:
/// absent or expired, so it starts with lifetime `ttl`, or
/// [`Counter::lifetime_at`] `after` for a counter with a floor), renewing
/// its lifetime when `lifetime` says so; returns `after`. The worker holds the
/// write lock, so `before` is still true; a counter that changed anyway
/// fails the call, which its batch then rolls back.
fn write(
    conn: &Connection,
    c: &Counter,
    before: Option<u64>,
    after: u64,
    lifetime: Lifetime,
    now: Duration,
) -> Result<u64> {
    let changed = match (before, lifetime) {
        (Some(before), Lifetime::Renew) => conn.prepare_cached(RENEW)?.execute(params![
            c.key.as_bytes(),
            to_stored(before)?,
            to_stored(after)?,
            expires_at(now, c.lifetime_at(after))
        ])?,
        (Some(before), Lifetime::Keep) if before == after => return Ok(after),
        (Some(before), Lifetime::Keep) => conn.prepare_cached(SET)?.execute(params![
            c.key.as_bytes(),
            to_stored(before)?,
            to_stored(after)?
        ])?,
        (None, _) => {
            let ttl = if c.floor > 0 {
                c.lifetime_at(after)
            } else {
                c.ttl
            };
            conn.prepare_cached(START)?.execute(params![
                c.key.as_bytes(),
                to_stored(after)?,
                expires_at(now, ttl)
            ])?
        }
    };
    match changed {
        1 => Ok(after),
        changed => Err(rusqlite::Error::StatementChangedRows(changed)),
    }
}

/// The live count of `key`, `None` when absent or expired; changes nothing.
fn current(conn: &Connection, key: &str, now: Duration) -> Result<Option<u64>> {
    let mut stmt = conn.prepare_cached(COUNT)?;
    let value = stmt
        .query_row(params![key.as_bytes(), millis(now)], |row| {
            row.get::<_, i64>(0)
        })
        .optional()?;
    value.map(from_stored).transpose()
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
        Some((value, expires)) if expires > millis(now) => Ok(Some((from_stored(value)?, expires))),
        Some(_) => {
            conn.prepare_cached(DROP_EXPIRED)?
                .execute(params![key.as_bytes(), millis(now)])?;
            Ok(None)
        }
        None => Ok(None),
    }
}

/// Removes the counter `key`, or the set of leases at `key`; whether a
/// live row held it (a live counter, or an unexpired lease).
pub(crate) fn delete(conn: &Connection, key: &str, now: Duration) -> Result<bool> {
    let params = params![key.as_bytes(), millis(now)];
    let live = conn.prepare_cached(DROP_LIVE)?.execute(params)?;
    conn.prepare_cached(DROP_EXPIRED)?.execute(params)?;
    let leased = leases::delete(conn, key, now)?;
    Ok(live == 1 || leased)
}

/// Removes at most `batch` expired counters; how many it removed.
pub(crate) fn sweep(conn: &Connection, batch: u32, now: Duration) -> Result<usize> {
    conn.prepare_cached(SWEEP)?
        .execute(params![millis(now), batch])
}
