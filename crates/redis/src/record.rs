//! [`Record`]: where a counter call keeps its reply under its
//! [`CheckId`], so that a retry of a call it applied is answered that reply
//! and applies nothing.
//!
//! Records live in hashes, one per 100 ms of deadlines and record lifetime
//! (`limit:#<lifetime>.<deadline / 100 ms>`), a field per call (its id): a
//! check's attempts all carry its one deadline, so they all look in the
//! same hash, and the calls of a batch share one `HMGET` and one `HSET`
//! instead of a `GET` and a `SET` each.

use std::time::Duration;

use tollgate_core::{CheckId, Deadline};

/// The start of every record's key: `limit:#`. No counter key starts so
/// (rule names are ASCII letters, digits, `-`, `_` and `.`), nor a webhook
/// mark (`Deliveries` refuses a prefix that could make a `limit:` key).
pub const RECORD_PREFIX: &str = "limit:#";

/// How many milliseconds of deadlines share one hash of records: a hash
/// holds at most this much of a store's traffic, so expiring it is short.
const SPAN_MS: u64 = 100;

/// A call's record: the hash it is kept in, its field there, and how long
/// it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// `limit:#<lifetime>.<deadline / 100 ms>`, or `limit:#{<tag>}…` in
    /// the hash slot of `tag`; empty: no record.
    pub(crate) key: String,
    /// The call's id, as 32 hex digits: its field in the hash.
    pub(crate) id: String,
    /// Twice the check's budget and four skew margins, in ms: past it no
    /// attempt of the check can arrive, nor a give-back of it (which starts
    /// at most the budget and 40 ms after the check, and has the check's
    /// budget and a skew margin). 0: no record.
    pub(crate) lifetime_ms: u64,
}

impl Record {
    /// The record of the call `id` on a single endpoint.
    pub(crate) fn new(id: CheckId, deadline: Deadline) -> Record {
        Record::in_hash(String::new(), id, deadline)
    }

    /// No record of the call `id`: it is applied without one, and a retry
    /// of it is applied again (sent while its slot migrates on Redis
    /// Cluster). The id stays: a lease the call takes is its.
    #[cfg(feature = "tcp")]
    pub(crate) fn none(id: CheckId) -> Record {
        Record {
            key: String::new(),
            id: id.to_string(),
            lifetime_ms: 0,
        }
    }

    /// The record of the call `id` in the hash slot of `tag` (Redis
    /// Cluster runs a script on the keys of one slot).
    #[cfg(feature = "tcp")]
    pub(crate) fn tagged(tag: u32, id: CheckId, deadline: Deadline) -> Record {
        Record::in_hash(format!("{{{tag}}}"), id, deadline)
    }

    fn in_hash(tag: String, id: CheckId, deadline: Deadline) -> Record {
        let lifetime_ms = lifetime_ms(deadline);
        let span = deadline.unix_millis() / SPAN_MS;
        Record {
            key: format!("{RECORD_PREFIX}{tag}{lifetime_ms}.{span}"),
            id: id.to_string(),
            lifetime_ms,
        }
    }

    /// How long the hash is kept from the write that creates it (the
    /// script gives it that lifetime then, and only then): twice the
    /// records' lifetime and 100 ms. Every record in it lives its lifetime
    /// after its write: its calls' deadlines fall within 100 ms, and each
    /// writes, on the server's clock, from its budget and a skew margin
    /// before its deadline until its cutoff, a skew margin after it; so the
    /// hash takes writes for at most a budget, two skew margins and 100
    /// ms, and twice the lifetime (twice the budget and four skew margins)
    /// is the lifetime and more than that. Past a budget of about 12 hours
    /// the lifetime stops at a day, and a record written late in its
    /// hash's span may live less than a day.
    pub(crate) fn keep_ms(&self) -> u64 {
        self.lifetime_ms.saturating_mul(2).saturating_add(SPAN_MS)
    }

    /// Whether the call has a record.
    pub(crate) fn is_kept(&self) -> bool {
        !self.key.is_empty()
    }
}

fn lifetime_ms(deadline: Deadline) -> u64 {
    let budget = deadline.check_budget();
    millis(
        budget
            .saturating_add(budget)
            .saturating_add(Deadline::SKEW_MARGIN.saturating_mul(4))
            .min(Duration::from_secs(86_400)),
    )
}

/// A lifetime in whole milliseconds, at least 1 (`PX 0` is an error) and
/// saturating rather than wrapping.
pub(crate) fn millis(ttl: Duration) -> u64 {
    u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_is_kept_twice_the_check_budget_and_four_skew_margins() {
        let id = CheckId::from_u128(0xab);
        let deadline = Deadline::after(Duration::from_millis(350));
        let record = Record::new(id, deadline);
        let span = deadline.unix_millis() / 100;
        assert_eq!(record.key, format!("limit:#780.{span}"));
        assert_eq!(record.id, format!("{}ab", "0".repeat(30)));
        assert_eq!(record.lifetime_ms, 780);
        assert_eq!(record.keep_ms(), 1_660);
        assert!(record.is_kept());
        let huge = Record::new(id, Deadline::after(Duration::MAX));
        assert_eq!(huge.lifetime_ms, 86_400_000, "a day at most");
    }

    #[test]
    fn every_attempt_of_a_check_looks_in_one_hash() {
        let deadline = Deadline::after(Duration::from_millis(350));
        let id = CheckId::new();
        assert_eq!(Record::new(id, deadline), Record::new(id, deadline));
        let other = Record::new(CheckId::new(), deadline);
        assert_eq!(other.key, Record::new(id, deadline).key);
        assert_ne!(other.id, Record::new(id, deadline).id);
    }
}
