//! The shared conformance suite, on a temporary SQLite file.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use tempfile::TempDir;
use tollgate_sqlite::SqliteStore;

/// A temporary directory holding one counter store file.
struct SqliteHarness {
    dir: TempDir,
}

impl tollgate_conformance::Harness for SqliteHarness {
    type Store = SqliteStore;

    async fn start() -> SqliteHarness {
        SqliteHarness {
            dir: tempfile::tempdir().expect("temporary directory"),
        }
    }

    async fn open(&self) -> SqliteStore {
        SqliteStore::open(self.dir.path().join("limits.sqlite")).expect("open the counter store")
    }
}

tollgate_conformance::conformance_tests!(SqliteHarness);
