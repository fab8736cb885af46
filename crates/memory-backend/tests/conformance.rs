//! The memory store runs the whole conformance suite.

use tollgate_conformance::{Expiry, Harness, conformance_tests};
use tollgate_core::ManualClock;
use tollgate_memory::MemoryStore;

/// One map shared by every client, as one server is, expiring entries by
/// a clock the suite can move.
struct MemoryHarness {
    store: MemoryStore,
    clock: ManualClock,
}

impl Harness for MemoryHarness {
    type Store = MemoryStore;

    async fn start() -> MemoryHarness {
        let clock = ManualClock::starting_now();
        MemoryHarness {
            store: MemoryStore::with_clock(clock.clone()),
            clock,
        }
    }

    async fn open(&self) -> MemoryStore {
        self.store.clone()
    }

    async fn expiry(&self, key: &str) -> Expiry {
        self.store.expiry(key).map_or(Expiry::Absent, Expiry::In)
    }

    fn store_clock(&self) -> Option<ManualClock> {
        Some(self.clock.clone())
    }
}

conformance_tests!(MemoryHarness);
