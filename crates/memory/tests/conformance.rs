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

tollgate_conformance::lease_conformance_tests!(MemoryHarness);

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

    tollgate_conformance::lease_conformance_tests!(SystemClockHarness);
}

/// The same suite through [`Prefixed`]: a prefix over any store is a
/// correct store (its keys read back with the prefix in the store below).
mod prefixed {
    use tollgate_core::Prefixed;

    use super::*;

    const PREFIX: &str = "tenant:{a}:";

    struct PrefixedHarness {
        store: Prefixed<MemoryStore>,
        clock: ManualClock,
    }

    impl Harness for PrefixedHarness {
        type Store = Prefixed<MemoryStore>;

        async fn start() -> PrefixedHarness {
            let clock = ManualClock::starting_now();
            PrefixedHarness {
                store: Prefixed::new(PREFIX, MemoryStore::with_clock(clock.clone())),
                clock,
            }
        }

        async fn open(&self) -> Prefixed<MemoryStore> {
            self.store.clone()
        }

        async fn expiry(&self, key: &str) -> Expiry {
            let inner = self.store.inner();
            assert_eq!(inner.expiry(key), None, "{key} stored without its prefix");
            let stored = format!("{PREFIX}{key}");
            inner.expiry(&stored).map_or(Expiry::Absent, Expiry::In)
        }

        fn store_clock(&self) -> Option<ManualClock> {
            Some(self.clock.clone())
        }
    }

    conformance_tests!(PrefixedHarness);

    tollgate_conformance::lease_conformance_tests!(PrefixedHarness);
}
