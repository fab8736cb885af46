//! The shared conformance suite, on a temporary SQLite file whose store
//! expires rows by a clock the suite can move.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::PathBuf;
use std::time::Duration;

use rusqlite::{Connection, OptionalExtension};
use tempfile::TempDir;
use tollgate_conformance::{Expiry, Harness};
use tollgate_core::{Clock, ManualClock};
use tollgate_sqlite::{SqliteOptions, SqliteStore};

/// A temporary directory holding one counter store file, and the clock
/// every store opened on it expires rows by.
struct SqliteHarness {
    dir: TempDir,
    clock: ManualClock,
}

impl SqliteHarness {
    fn path(&self) -> PathBuf {
        self.dir.path().join("limits.sqlite")
    }
}

impl Harness for SqliteHarness {
    type Store = SqliteStore;

    async fn start() -> SqliteHarness {
        SqliteHarness {
            dir: tempfile::tempdir().expect("temporary directory"),
            clock: ManualClock::starting_now(),
        }
    }

    async fn open(&self) -> SqliteStore {
        let options = SqliteOptions::default().clock(self.clock.clone());
        SqliteStore::open_with(self.path(), options).expect("open the counter store")
    }

    /// Reads the key's row from the file with a connection of its own, in
    /// the counters table or the marks table; or, for a set of leases, when
    /// its last unexpired lease ends (checking that its lifetime row says
    /// so too).
    async fn expiry(&self, key: &str) -> Expiry {
        let conn = Connection::open(self.path()).expect("open the file");
        let now = i64::try_from(self.clock.now().as_millis()).expect("time in range");
        let mut found = None;
        for table in ["counters", "marks"] {
            let sql = format!("SELECT expires_at FROM {table} WHERE key = ?1");
            let row: Option<i64> = conn
                .query_row(&sql, [key.as_bytes()], |row| row.get(0))
                .optional()
                .expect("read the row");
            if let Some(expires_at) = row {
                assert!(found.is_none(), "{key} is both a counter and a mark");
                found = Some(expires_at);
            }
        }
        let (last, last_live): (Option<i64>, Option<i64>) = conn
            .query_row(
                "SELECT max(ends_at), max(ends_at) FILTER (WHERE ends_at > ?2) FROM leases \
                 WHERE key = ?1",
                rusqlite::params![key.as_bytes(), now],
                |row| Ok((row.get(0)?, row.get(1)?)),
            )
            .expect("read the leases");
        let lives: Option<i64> = conn
            .query_row(
                "SELECT ends_at FROM lease_sets WHERE key = ?1",
                [key.as_bytes()],
                |row| row.get(0),
            )
            .optional()
            .expect("read the set's lifetime");
        assert_eq!(
            lives, last,
            "{key}: the set lives until its last lease ends"
        );
        if let Some(ends_at) = last_live {
            assert!(
                found.is_none(),
                "{key} is both a set of leases and a counter or mark"
            );
            found = Some(ends_at);
        }
        match found {
            Some(expires_at) if expires_at > now => {
                Expiry::In(Duration::from_millis((expires_at - now) as u64))
            }
            _ => Expiry::Absent,
        }
    }

    fn store_clock(&self) -> Option<ManualClock> {
        Some(self.clock.clone())
    }
}

tollgate_conformance::conformance_tests!(SqliteHarness);
// The SQLite store keeps leases.
tollgate_conformance::lease_conformance_tests!(SqliteHarness);
