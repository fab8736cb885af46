//! [`Calls`]: the worker's records of what counter calls applied, by
//! [`CheckId`](tollgate_core::CheckId), so that a retried attempt is
//! answered instead of applied again.
//!
//! The records of a batch are written as one row of the `calls` table, in
//! the batch's transaction, just before it commits: one insert per batch,
//! not per call. The row holds, per call, its id, whether it applied and
//! the counts it answered (a count's or reservation's priors' counts
//! included, so a retry answers the priors its first attempt read); it
//! lives as long as the longest-lived record in it (a check's budget plus
//! the skew margin).
//!
//! A call's attempts all go through one store (a limiter holds one), so
//! through one worker thread: a record in the file whose id this thread has
//! not noted (within the record's lifetime) cannot be one of the call's. So
//! the worker keeps, in memory, the row each id it recorded went to, and
//! only an attempt whose id it noted reads that row. This is an index, not
//! the record: a row noted here whose batch rolled back is simply not found
//! (or, its row number taken by a later batch, holds no such id), and the
//! attempt is applied. Two attempts of one call in one batch find each
//! other among the batch's pending records.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

use tollgate_core::Reservation;

/// The bytes of an id in a row.
const ID_BYTES: usize = 16;

/// Where an earlier attempt of a call may be recorded.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Earlier {
    /// Not recorded by this worker.
    None,
    /// Recorded in the batch being run: its reply.
    Pending(Reservation),
    /// Recorded in the row `batch` (if that batch committed).
    Row(i64),
}

/// The worker thread's call records: those of the batch being run, and
/// where earlier ones went.
#[derive(Debug, Default)]
pub(crate) struct Calls {
    /// The batch's records, encoded as its row holds them.
    row: Vec<u8>,
    /// The batch's records: id and expiry (ms on the store's clock).
    pending: Vec<(u128, i64)>,
    /// Where in `row` each of the batch's records starts.
    pending_at: HashMap<u128, usize, Ids>,
    /// The row and expiry of each id recorded in an earlier batch.
    written: HashMap<u128, (i64, i64), Ids>,
    /// Ids in the order they were written, for dropping the expired ones.
    order: VecDeque<(i64, u128)>,
    /// The rows this worker wrote (expiry, row), oldest first, for purging.
    rows: VecDeque<(i64, i64)>,
}

thread_local! {
    static CALLS: RefCell<Calls> = RefCell::default();
}

impl Calls {
    /// Runs `f` on this thread's records (the worker's: one thread per store).
    pub(crate) fn with<T>(f: impl FnOnce(&mut Calls) -> T) -> T {
        CALLS.with_borrow_mut(f)
    }

    /// Starts a batch's transaction (or a run of it again): no record is
    /// pending.
    pub(crate) fn begin(&mut self) {
        self.row.clear();
        self.pending.clear();
        self.pending_at.clear();
    }

    /// Where the pending records stand, to go back to after a call fails
    /// alone.
    pub(crate) fn mark(&self) -> (usize, usize) {
        (self.row.len(), self.pending.len())
    }

    /// Forgets the records pending since `mark` (their call was rolled back).
    pub(crate) fn rollback_to(&mut self, (bytes, records): (usize, usize)) {
        self.row.truncate(bytes);
        for (id, _) in self.pending.drain(records..) {
            self.pending_at.remove(&id);
        }
    }

    /// Where an earlier attempt of the call `id` may be recorded, as of `now`.
    pub(crate) fn find(&mut self, id: u128, now: i64) -> Result<Earlier, String> {
        if let Some(&at) = self.pending_at.get(&id) {
            let (found, reply, _) = decode(&self.row[at..])?;
            debug_assert_eq!(found, id);
            return Ok(Earlier::Pending(reply));
        }
        self.expire(now);
        Ok(match self.written.get(&id) {
            Some(&(row, expires_at)) if expires_at > now => Earlier::Row(row),
            _ => Earlier::None,
        })
    }

    /// Notes what the call `id` applied in the batch being run, recorded
    /// until `expires_at`.
    pub(crate) fn add(&mut self, id: u128, reply: &Reservation, expires_at: i64) {
        self.pending_at.insert(id, self.row.len());
        self.pending.push((id, expires_at));
        self.row.extend_from_slice(&id.to_be_bytes());
        self.row.push(u8::from(reply.applied));
        varint(&mut self.row, reply.counts.len() as u64);
        for &count in &reply.counts {
            varint(&mut self.row, count);
        }
    }

    /// The row of the batch's records and its expiry (the latest of
    /// theirs); `None` when no call of the batch recorded anything.
    pub(crate) fn row(&self) -> Option<(&[u8], i64)> {
        let expires_at = self.pending.iter().map(|&(_, at)| at).max()?;
        Some((&self.row, expires_at))
    }

    /// Notes that the batch's records went to row `batch`, expiring at
    /// `expires_at`.
    pub(crate) fn written(&mut self, batch: i64, expires_at: i64) {
        for (id, at) in self.pending.drain(..) {
            self.written.insert(id, (batch, at));
            self.order.push_back((at, id));
        }
        self.row.clear();
        self.pending_at.clear();
        self.rows.push_back((expires_at, batch));
    }

    /// The newest of this worker's rows expired by `now` when at least
    /// `least` of them have; those rows are then forgotten (the caller
    /// deletes them).
    pub(crate) fn expired_rows(&mut self, now: i64, least: usize) -> Option<i64> {
        let expired = self.rows.iter().take_while(|(at, _)| *at <= now).count();
        if expired == 0 || expired < least {
            return None;
        }
        self.rows.drain(..expired).map(|(_, row)| row).max()
    }

    /// Drops the ids whose records expired by `now`, oldest written first.
    fn expire(&mut self, now: i64) {
        while let Some(&(expires_at, id)) = self.order.front() {
            if expires_at > now {
                break;
            }
            self.order.pop_front();
            if self
                .written
                .get(&id)
                .is_some_and(|&(_, at)| at == expires_at)
            {
                self.written.remove(&id);
            }
        }
    }
}

/// Appends `n` as a LEB128 varint: counts are small, most fit in 1 to 3 bytes.
fn varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reads a varint from the front of `bytes`; what follows it.
fn read_varint(bytes: &[u8]) -> Option<(u64, &[u8])> {
    let mut n = 0u64;
    for (i, &byte) in bytes.iter().enumerate().take(10) {
        let bits = u64::from(byte & 0x7f);
        n |= bits
            .checked_shl(7 * i as u32)
            .filter(|v| v >> (7 * i as u32) == bits)?;
        if byte & 0x80 == 0 {
            return Some((n, &bytes[i + 1..]));
        }
    }
    None
}

/// The record at the front of `bytes`: its id, reply and the bytes after it.
fn decode(bytes: &[u8]) -> Result<(u128, Reservation, &[u8]), String> {
    let cut = || format!("a call record cut short ({} bytes)", bytes.len());
    let (id, rest) = bytes.split_first_chunk::<ID_BYTES>().ok_or_else(cut)?;
    let (&applied, rest) = rest.split_first().ok_or_else(cut)?;
    let applied = match applied {
        0 => false,
        1 => true,
        other => return Err(format!("a call record of unknown outcome {other}")),
    };
    let (n, mut rest) = read_varint(rest).ok_or_else(cut)?;
    // Every count takes at least one byte.
    if n > rest.len() as u64 {
        return Err(cut());
    }
    let mut counts = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let (count, next) = read_varint(rest).ok_or_else(cut)?;
        counts.push(count);
        rest = next;
    }
    Ok((
        u128::from_be_bytes(*id),
        Reservation { applied, counts },
        rest,
    ))
}

/// The record of `id` in a row's bytes, if it holds one; `Err` when the
/// bytes cannot be read as records.
pub(crate) fn find_in(mut bytes: &[u8], id: u128) -> Result<Option<Reservation>, String> {
    while !bytes.is_empty() {
        let (found, reply, rest) = decode(bytes)?;
        if found == id {
            return Ok(Some(reply));
        }
        bytes = rest;
    }
    Ok(None)
}

/// Hashes ids, which this process made (64 random bits per thread, then a
/// counter), so no caller can choose them: a multiply of their two halves
/// is enough, and far cheaper than the default hasher.
#[derive(Debug, Default)]
pub(crate) struct IdHasher(u64);

/// The hasher of the maps keyed by id.
type Ids = BuildHasherDefault<IdHasher>;

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &byte in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(byte)).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        }
    }

    fn write_u128(&mut self, id: u128) {
        // The low half varies most (a counter): multiplied, it spreads to
        // the high bits, and folded back, to the low ones too.
        let mixed = ((id >> 64) as u64 ^ id as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
        self.0 = mixed ^ (mixed >> 32);
    }
}

#[cfg(test)]
mod tests {
    use std::hash::BuildHasher;

    use super::*;

    #[test]
    fn ids_of_one_thread_spread_over_buckets_and_control_bytes() {
        let seed = u128::from(0x1234_5678_9abc_def0_u64) << 64;
        let hashes: Vec<u64> = (0..1_024u128)
            .map(|n| Ids::default().hash_one(seed | n))
            .collect();
        let buckets: std::collections::HashSet<u64> = hashes.iter().map(|h| h & 1_023).collect();
        let tops: std::collections::HashSet<u64> = hashes.iter().map(|h| h >> 57).collect();
        assert!(buckets.len() > 600, "{} buckets of 1,024", buckets.len());
        assert!(tops.len() > 100, "{} control bytes of 128", tops.len());
    }

    #[test]
    fn ids_of_many_threads_and_ids_apart_in_high_bits_spread_too() {
        // Threads' ids share their counters and differ in their seeds: the
        // seed half is hashed, so they do not collide.
        let seeds = (1..=64u128).map(|s| s.wrapping_mul(0x9e37_79b9_7f4a_7c15_f39c_c060_5ced_c835));
        let hashes: std::collections::HashSet<u64> = seeds
            .flat_map(|seed| (0..16u128).map(move |n| Ids::default().hash_one(seed << 64 | n)))
            .collect();
        assert_eq!(hashes.len(), 64 * 16, "ids of different threads collide");
        // Ids that differ only above their low 32 bits: the product's high
        // bits are folded down to the bucket bits.
        let buckets: std::collections::HashSet<u64> = (0..1_024u128)
            .map(|n| Ids::default().hash_one(n << 32) & 1_023)
            .collect();
        assert!(buckets.len() > 600, "{} buckets of 1,024", buckets.len());
    }

    fn reply(applied: bool, counts: &[u64]) -> Reservation {
        Reservation {
            applied,
            counts: counts.to_vec(),
        }
    }

    #[test]
    fn a_batch_row_holds_each_record_and_nothing_else() {
        let mut calls = Calls::default();
        calls.begin();
        calls.add(7, &reply(true, &[1, 200, u64::MAX, 0]), 100);
        calls.add(u128::MAX, &reply(false, &[]), 150);
        calls.add(9, &reply(false, &[5]), 120);
        let (bytes, expires_at) = calls.row().unwrap_or_default();
        let bytes = bytes.to_vec();
        assert_eq!(expires_at, 150);
        assert_eq!(
            find_in(&bytes, 7),
            Ok(Some(reply(true, &[1, 200, u64::MAX, 0])))
        );
        assert_eq!(find_in(&bytes, u128::MAX), Ok(Some(reply(false, &[]))));
        assert_eq!(find_in(&bytes, 9), Ok(Some(reply(false, &[5]))));
        assert_eq!(find_in(&bytes, 8), Ok(None));
        assert!(find_in(&bytes[..bytes.len() - 1], 9).is_err());
        assert!(find_in(&bytes[..10], 9).is_err());
        assert_eq!(find_in(&[], 9), Ok(None));
        // An overlong varint is unreadable, not a wrapped count.
        let mut bad = 9u128.to_be_bytes().to_vec();
        bad.extend_from_slice(&[1, 1]);
        bad.extend_from_slice(&[0xff; 10]);
        bad.push(0x01);
        assert!(find_in(&bad, 9).is_err());
    }

    #[test]
    fn ids_are_found_pending_then_in_their_row_until_they_expire() {
        let mut calls = Calls::default();
        calls.begin();
        assert_eq!(calls.find(1, 0), Ok(Earlier::None));
        calls.add(1, &reply(true, &[3]), 100);
        assert_eq!(calls.find(1, 0), Ok(Earlier::Pending(reply(true, &[3]))));
        let mark = calls.mark();
        calls.add(2, &reply(true, &[4]), 100);
        calls.rollback_to(mark);
        assert_eq!(calls.find(2, 0), Ok(Earlier::None), "rolled back");
        assert_eq!(calls.row().map(|(_, at)| at), Some(100));
        calls.written(42, 100);
        assert_eq!(calls.find(1, 99), Ok(Earlier::Row(42)));
        assert_eq!(calls.find(1, 100), Ok(Earlier::None), "expired");
        assert!(calls.written.is_empty() && calls.order.is_empty());
        // A batch run again (rolled back): nothing of the first run is pending.
        calls.begin();
        calls.add(3, &reply(true, &[1]), 200);
        calls.begin();
        assert_eq!(calls.find(3, 0), Ok(Earlier::None));
        assert_eq!(calls.row(), None);
    }

    #[test]
    fn an_id_expires_at_its_own_time_behind_a_longer_lived_one() {
        // Records live as long as their check's budget, so one written
        // later can expire sooner: it is not dropped from the index until
        // the one in front of it is, yet it is not found from its expiry.
        let mut calls = Calls::default();
        calls.begin();
        calls.add(1, &reply(true, &[1]), 200);
        calls.written(10, 200);
        calls.begin();
        calls.add(2, &reply(true, &[1]), 100);
        calls.written(11, 100);
        assert_eq!(calls.find(2, 99), Ok(Earlier::Row(11)));
        assert_eq!(calls.find(2, 100), Ok(Earlier::None), "expired");
        assert_eq!(calls.find(2, 150), Ok(Earlier::None), "expired");
        assert_eq!(calls.find(1, 150), Ok(Earlier::Row(10)));
    }

    #[test]
    fn rows_are_purged_once_enough_have_expired() {
        let mut calls = Calls::default();
        for (row, at) in [(1, 10), (2, 20), (3, 30)] {
            calls.begin();
            calls.add(row as u128, &reply(true, &[1]), at);
            calls.written(row, at);
        }
        assert_eq!(calls.expired_rows(25, 3), None, "only two expired");
        assert_eq!(calls.expired_rows(25, 2), Some(2));
        assert_eq!(calls.expired_rows(25, 1), None, "already purged");
        assert_eq!(calls.expired_rows(30, 1), Some(3));
    }
}
