//! [`Calls`]: a hook that counts the store calls a limiter makes, by kind,
//! so that a round can say how many round trips each check took.

use std::sync::atomic::{AtomicU64, Ordering};

use tollgate::observe::Op;
use tollgate::{Hook, StoreError, async_trait};

/// Store calls seen so far (every attempt, retries included).
#[derive(Debug, Default)]
pub(crate) struct Calls {
    /// Reservations and counts: one per check, as a rule.
    spend: AtomicU64,
    /// Reads: a sliding limit's previous counter, when not kept yet.
    get: AtomicU64,
    /// Anything else (refunds, deletes, marks).
    other: AtomicU64,
}

/// The calls seen, in one reading.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Tally {
    pub(crate) spend: u64,
    pub(crate) get: u64,
    pub(crate) other: u64,
}

impl Tally {
    /// Every call.
    pub(crate) fn total(self) -> u64 {
        self.spend + self.get + self.other
    }

    /// The calls seen since `earlier`.
    pub(crate) fn since(self, earlier: Tally) -> Tally {
        Tally {
            spend: self.spend.saturating_sub(earlier.spend),
            get: self.get.saturating_sub(earlier.get),
            other: self.other.saturating_sub(earlier.other),
        }
    }
}

impl Calls {
    /// The calls seen so far.
    pub(crate) fn tally(&self) -> Tally {
        Tally {
            spend: self.spend.load(Ordering::Relaxed),
            get: self.get.load(Ordering::Relaxed),
            other: self.other.load(Ordering::Relaxed),
        }
    }
}

#[async_trait]
impl Hook for Calls {
    async fn before(&self, call: Op) -> Result<(), StoreError> {
        let counter = match call {
            Op::Count | Op::Reserve => &self.spend,
            Op::Get => &self.get,
            _ => &self.other,
        };
        counter.fetch_add(1, Ordering::Relaxed);
        Ok(())
    }
}
