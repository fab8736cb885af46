//! The memory store runs the whole conformance suite.

use tollgate_conformance::{Harness, conformance_tests};
use tollgate_memory::MemoryStore;

/// One map shared by every client, as one server is.
struct MemoryHarness(MemoryStore);

impl Harness for MemoryHarness {
    type Store = MemoryStore;

    async fn start() -> MemoryHarness {
        MemoryHarness(MemoryStore::new())
    }

    async fn open(&self) -> MemoryStore {
        self.0.clone()
    }
}

conformance_tests!(MemoryHarness);
