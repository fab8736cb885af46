//! [`Record`]: where a counter script keeps its reply under the call's
//! [`CheckId`], so that a retry of a call it applied is answered that reply
//! and applies nothing.

use std::time::Duration;

use tollgate_core::{CheckId, Deadline};

/// The start of every record's key: `limit:#`. No counter key starts so
/// (rule names are ASCII letters, digits, `-`, `_` and `.`), nor a webhook
/// mark (`Deliveries` refuses a prefix that could make a `limit:` key).
pub const RECORD_PREFIX: &str = "limit:#";

/// A call's record: its key, and how long it is kept.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Record {
    /// `limit:#<id>`, or `limit:#{<tag>}<id>` in the hash slot of `tag`.
    pub(crate) key: String,
    /// Twice the check's budget and four skew margins, in ms: past it no
    /// attempt of the check can arrive, nor a give-back of it (which starts
    /// at most the budget and 40 ms after the check, and has the check's
    /// budget and a skew margin). 0: no record.
    pub(crate) lifetime_ms: u64,
}

impl Record {
    /// The record of the call `id` on a single endpoint.
    pub(crate) fn new(id: CheckId, deadline: Deadline) -> Record {
        Record {
            key: format!("{RECORD_PREFIX}{id}"),
            lifetime_ms: lifetime_ms(deadline),
        }
    }

    /// No record: the call is applied without one, and a retry of it is
    /// applied again (sent while its slot migrates on Redis Cluster).
    #[cfg(feature = "tcp")]
    pub(crate) fn none() -> Record {
        Record {
            key: String::new(),
            lifetime_ms: 0,
        }
    }

    /// The record of the call `id` in the hash slot of `tag` (Redis
    /// Cluster runs a script on the keys of one slot).
    #[cfg(feature = "tcp")]
    pub(crate) fn tagged(tag: u32, id: CheckId, deadline: Deadline) -> Record {
        Record {
            key: format!("{RECORD_PREFIX}{{{tag}}}{id}"),
            lifetime_ms: lifetime_ms(deadline),
        }
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
        let record = Record::new(id, Deadline::after(Duration::from_millis(350)));
        assert_eq!(record.key, format!("limit:#{}ab", "0".repeat(30)));
        assert_eq!(record.lifetime_ms, 780);
        let huge = Record::new(id, Deadline::after(Duration::MAX));
        assert_eq!(huge.lifetime_ms, 86_400_000, "a day at most");
    }
}
