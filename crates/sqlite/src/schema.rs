//! Opening the file: pragmas, and the versioned schema, checked, created or
//! migrated.

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, OpenFlags, TransactionBehavior};

use tollgate_core::{KEY_PREFIX, MARK_DONE};

use crate::{Error, SqliteOptions};

/// The schema version this crate reads and writes (`PRAGMA user_version`).
/// Version 1 kept counters only (a webhook mark was a counter of 1);
/// version 2 keeps marks in a table of their own. The `calls` table (what
/// recent calls applied, by id) and the `leases` and `lease_sets` tables
/// (sets of leases) are created in a version-2 file that lacks them,
/// without a new version: a version that does not know them ignores them.
pub const SCHEMA_VERSION: i64 = 2;

/// The `PRAGMA application_id` of a counter store file: `toll` in ASCII.
pub const APPLICATION_ID: i64 = 0x746f_6c6c;

/// The tables of version 1: counters.
const CREATE_COUNTERS: &str = "
    CREATE TABLE counters (
        key BLOB PRIMARY KEY NOT NULL,
        value INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX counters_by_expiry ON counters (expires_at);
";

/// What version 2 adds: webhook marks, a token or `done`, each with its expiry.
const CREATE_MARKS: &str = "
    CREATE TABLE marks (
        key BLOB PRIMARY KEY NOT NULL,
        value TEXT NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX marks_by_expiry ON marks (expires_at);
";

/// What recent counter calls applied, by
/// [`CheckId`](tollgate_core::CheckId), so that a retried attempt is
/// answered instead of applied again: one row per batch of calls (see
/// `calls.rs`), holding each call's id, whether it applied and the counts
/// it answered, until the latest of their lifetimes ends. Created when
/// missing, in a new file and in one written before it.
const CREATE_CALLS: &str = "
    CREATE TABLE IF NOT EXISTS calls (
        batch INTEGER PRIMARY KEY,
        expires_at INTEGER NOT NULL,
        records BLOB NOT NULL
    );
";

/// Sets of leases (a concurrency limit's): one row per lease (its set's
/// key, its id, the call's [`CheckId`](tollgate_core::CheckId) as 16 bytes
/// big endian, and when it ends, ms on the store's clock), and one row per
/// set holding when its last lease ends, indexed for the sweep (see
/// `leases.rs`). Created when missing, in a new file and in one written
/// before them.
const CREATE_LEASES: &str = "
    CREATE TABLE IF NOT EXISTS leases (
        key BLOB NOT NULL,
        id BLOB NOT NULL,
        ends_at INTEGER NOT NULL,
        PRIMARY KEY (key, id)
    ) WITHOUT ROWID;
    CREATE TABLE IF NOT EXISTS lease_sets (
        key BLOB PRIMARY KEY NOT NULL,
        ends_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX IF NOT EXISTS lease_sets_by_end ON lease_sets (ends_at);
";

/// Moves the marks a version-1 file kept as counters (every key that is not
/// a counter's, i.e. does not start with `?1`) into `marks` as done
/// (`?2`), keeping their expiry: a delivery seen before the upgrade stays a
/// duplicate after it.
const COPY_MARKS: &str = "
    INSERT INTO marks (key, value, expires_at)
        SELECT key, ?2, expires_at FROM counters WHERE substr(key, 1, length(?1)) != ?1";

/// Then removes them from `counters`.
const DROP_MARKS: &str = "DELETE FROM counters WHERE substr(key, 1, length(?1)) != ?1";

/// Opens `path` as a counter store, creating the file and schema when the
/// file is new or empty. Every problem with the file is found here.
pub(crate) fn open(path: &Path, options: &SqliteOptions) -> Result<Connection, Error> {
    let failed = |err| Error::opening(path, err);
    let flags = OpenFlags::SQLITE_OPEN_READ_WRITE
        | OpenFlags::SQLITE_OPEN_CREATE
        | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    let mut conn = Connection::open_with_flags(path, flags).map_err(failed)?;
    conn.busy_timeout(options.open_busy_timeout)
        .map_err(failed)?;
    if conn.is_readonly("main").map_err(failed)? {
        return Err(Error::ReadOnly {
            path: path.to_owned(),
        });
    }
    // The first read of the file: a file that is not a database fails here.
    // Several processes opening a new file at once may find it locked while
    // another sets its journal mode; SQLite does not wait there by itself.
    let deadline = Instant::now() + options.open_busy_timeout;
    let mode = retry_busy(deadline, || wal(&conn)).map_err(failed)?;
    if !mode.eq_ignore_ascii_case("wal") {
        return Err(Error::NoWal {
            path: path.to_owned(),
            mode,
        });
    }
    conn.pragma_update(None, "synchronous", options.durability.synchronous())
        .map_err(failed)?;
    retry_busy(deadline, || prepare_schema(&mut conn, path)).map_err(failed)??;
    Ok(conn)
}

/// Puts the file in WAL mode unless it is already; the journal mode kept.
fn wal(conn: &Connection) -> rusqlite::Result<String> {
    let mode: String = conn.pragma_query_value(None, "journal_mode", |row| row.get(0))?;
    if mode.eq_ignore_ascii_case("wal") {
        return Ok(mode);
    }
    conn.pragma_update_and_check(None, "journal_mode", "WAL", |row| row.get(0))
}

/// Runs `step` again while it fails because the file is busy, until `deadline`.
fn retry_busy<T>(
    deadline: Instant,
    mut step: impl FnMut() -> rusqlite::Result<T>,
) -> rusqlite::Result<T> {
    let mut pause = Duration::from_millis(1);
    loop {
        match step() {
            Err(err) if is_busy(&err) && Instant::now() < deadline => {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            result => return result,
        }
    }
}

/// Whether `err` is another connection holding the file's lock.
pub(crate) fn is_busy(err: &rusqlite::Error) -> bool {
    matches!(
        err.sqlite_error_code(),
        Some(rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked)
    )
}

/// Checks the schema of the file, creates it in an empty file, or migrates
/// a version-1 file to this version; creates the `calls` table and the
/// tables of leases when they are missing. Runs in a write transaction, so two
/// processes opening a new file at once agree.
/// The outer error is SQLite's; the inner one refuses the file.
fn prepare_schema(conn: &mut Connection, path: &Path) -> rusqlite::Result<Result<(), Error>> {
    let tx = conn.transaction_with_behavior(TransactionBehavior::Immediate)?;
    let application_id: i64 = tx.pragma_query_value(None, "application_id", |row| row.get(0))?;
    let version: i64 = tx.pragma_query_value(None, "user_version", |row| row.get(0))?;
    let tables: i64 = tx.query_row("SELECT count(*) FROM sqlite_schema", [], |row| row.get(0))?;
    let has = |table: &str| -> rusqlite::Result<bool> {
        tx.query_row(
            "SELECT count(*) FROM sqlite_schema WHERE type = 'table' AND name = ?1",
            [table],
            |row| row.get::<_, i64>(0),
        )
        .map(|n| n == 1)
    };
    let (counters, marks) = (has("counters")?, has("marks")?);
    let foreign = Error::ForeignDatabase {
        path: path.to_owned(),
    };
    if application_id != 0 && application_id != APPLICATION_ID {
        return Ok(Err(foreign));
    }
    match version {
        0 if tables == 0 => {
            tx.execute_batch(CREATE_COUNTERS)?;
            tx.execute_batch(CREATE_MARKS)?;
            tx.pragma_update(None, "application_id", APPLICATION_ID)?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        1 if counters && !marks => {
            tx.execute_batch(CREATE_MARKS)?;
            let prefix = KEY_PREFIX.as_bytes();
            tx.execute(COPY_MARKS, rusqlite::params![prefix, MARK_DONE])?;
            tx.execute(DROP_MARKS, [prefix])?;
            tx.pragma_update(None, "user_version", SCHEMA_VERSION)?;
        }
        SCHEMA_VERSION if counters && marks => {}
        0..=SCHEMA_VERSION => return Ok(Err(foreign)),
        found => {
            return Ok(Err(Error::UnknownSchemaVersion {
                path: path.to_owned(),
                found,
                supported: SCHEMA_VERSION,
            }));
        }
    }
    // Each statement creates only what is missing.
    tx.execute_batch(CREATE_CALLS)?;
    tx.execute_batch(CREATE_LEASES)?;
    tx.commit()?;
    Ok(Ok(()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Durability;

    fn synchronous(durability: Option<Durability>) -> i64 {
        let dir = tempfile::tempdir().unwrap_or_else(|e| panic!("{e}"));
        let options = match durability {
            Some(durability) => SqliteOptions::default().durability(durability),
            None => SqliteOptions::default(),
        };
        let conn =
            open(&dir.path().join("limits.sqlite"), &options).unwrap_or_else(|e| panic!("{e}"));
        conn.pragma_query_value(None, "synchronous", |row| row.get(0))
            .unwrap_or_else(|e| panic!("{e}"))
    }

    fn busy() -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_BUSY), None)
    }

    /// A step that finds the file busy is run again until its deadline,
    /// and only then fails busy; any other failure is not retried. (SQLite
    /// answers busy without waiting in a race of several opens of a new
    /// file, which no test can set up on demand.)
    #[test]
    fn a_busy_step_is_run_again_until_the_deadline() {
        let mut tries = 0;
        let result = retry_busy(Instant::now() + Duration::from_secs(10), || {
            tries += 1;
            if tries < 3 { Err(busy()) } else { Ok(tries) }
        });
        assert_eq!(result.ok(), Some(3));

        let started = Instant::now();
        let result: rusqlite::Result<()> =
            retry_busy(started + Duration::from_millis(30), || Err(busy()));
        assert!(result.as_ref().is_err_and(is_busy), "{result:?}");
        assert!(started.elapsed() >= Duration::from_millis(30));

        let mut tries = 0;
        let result: rusqlite::Result<()> = retry_busy(started + Duration::from_secs(10), || {
            tries += 1;
            Err(rusqlite::Error::QueryReturnedNoRows)
        });
        assert!(result.is_err());
        assert_eq!(tries, 1, "a failure other than busy was retried");
    }

    /// The durability asked for is the connection's `synchronous`: NORMAL
    /// (1) by default and for `Process`, FULL (2) for `PowerLoss`.
    #[test]
    fn the_durability_asked_for_reaches_the_connection() {
        assert_eq!(synchronous(None), 1);
        assert_eq!(synchronous(Some(Durability::Process)), 1);
        assert_eq!(synchronous(Some(Durability::PowerLoss)), 2);
    }
}
