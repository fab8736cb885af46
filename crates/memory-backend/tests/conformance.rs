//! The memory store runs the whole conformance suite twice: expiring by a
//! clock the suite moves, and by the system clock (as a server keeping its
//! own time does, which takes the suite's real-time paths).

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

/// The same suite on a memory store expiring by the system clock, with no
/// clock for the suite to move.
mod system_clock {
    use super::*;

    struct SystemClockHarness {
        store: MemoryStore,
    }

    impl Harness for SystemClockHarness {
        type Store = MemoryStore;

        async fn start() -> SystemClockHarness {
            SystemClockHarness {
                store: MemoryStore::new(),
            }
        }

        async fn open(&self) -> MemoryStore {
            self.store.clone()
        }

        async fn expiry(&self, key: &str) -> Expiry {
            self.store.expiry(key).map_or(Expiry::Absent, Expiry::In)
        }
    }

    conformance_tests!(SystemClockHarness);
}
