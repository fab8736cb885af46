//! Every problem with the file is a typed error at open, never a panic and
//! never a failure at the first request.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::Path;

use rusqlite::Connection;
use tempfile::TempDir;
use tollgate_core::{CheckId, Claim, Counter, CounterStore, Deadline, MarkStore};
use tollgate_sqlite::{APPLICATION_ID, Error, SCHEMA_VERSION, SqliteStore};

fn dir() -> TempDir {
    tempfile::tempdir().unwrap()
}

/// An SQLite file prepared by hand with `sql`.
fn database(dir: &TempDir, sql: &str) -> std::path::PathBuf {
    let path = dir.path().join("limits.sqlite");
    Connection::open(&path).unwrap().execute_batch(sql).unwrap();
    path
}

fn deadline() -> Deadline {
    Deadline::after(std::time::Duration::from_secs(10))
}

fn open_error(path: &Path) -> Error {
    match SqliteStore::open(path) {
        Ok(_) => panic!("{} opened", path.display()),
        Err(err) => err,
    }
}

#[tokio::test]
async fn a_new_file_gets_the_versioned_schema_and_works() {
    let dir = dir();
    let path = dir.path().join("limits.sqlite");
    let store = SqliteStore::open(&path).unwrap();
    let counter = Counter {
        key: "limit:a:1".into(),
        ttl: std::time::Duration::from_secs(60),
        cost: 1,
        max: 1,
        floor: 0,
        prior: None,
        lease: false,
    };
    assert_eq!(
        store
            .count(&[counter], CheckId::new(), deadline())
            .await
            .unwrap(),
        vec![1]
    );
    let conn = Connection::open(&path).unwrap();
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .unwrap();
    let id: i64 = conn
        .query_row("PRAGMA application_id", [], |r| r.get(0))
        .unwrap();
    let mode: String = conn
        .query_row("PRAGMA journal_mode", [], |r| r.get(0))
        .unwrap();
    assert_eq!(
        (version, id, mode.as_str()),
        (SCHEMA_VERSION, APPLICATION_ID, "wal")
    );
}

/// A file as version 1 of this crate wrote it: counters only, a webhook
/// mark being a counter of 1.
const VERSION_1: &str = "
    CREATE TABLE counters (
        key BLOB PRIMARY KEY NOT NULL,
        value INTEGER NOT NULL,
        expires_at INTEGER NOT NULL
    ) WITHOUT ROWID;
    CREATE INDEX counters_by_expiry ON counters (expires_at);
    PRAGMA user_version = 1;
    INSERT INTO counters VALUES (CAST('limit:ask:docs:1:20000' AS BLOB), 7, 32503680000000);
    INSERT INTO counters VALUES (CAST('github-delivery:abc' AS BLOB), 1, 32503680000000);
";

fn scalar<T: rusqlite::types::FromSql>(path: &Path, sql: &str) -> T {
    let conn = Connection::open(path).unwrap();
    conn.query_row(sql, [], |r| r.get(0)).unwrap()
}

#[tokio::test]
async fn a_version_1_file_is_migrated_in_place_keeping_counts_and_marks() {
    let dir = dir();
    let path = database(
        &dir,
        &format!("PRAGMA application_id = {APPLICATION_ID}; {VERSION_1}"),
    );
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(scalar::<i64>(&path, "PRAGMA user_version"), SCHEMA_VERSION);
    assert_eq!(SCHEMA_VERSION, 2);
    let key = ["limit:ask:docs:1:20000".to_owned()];
    let counts = store.get(&key, deadline());
    assert_eq!(counts.await.unwrap(), vec![7], "a count was lost");
    let claim = store.claim(
        "github-delivery:abc",
        "token",
        std::time::Duration::from_secs(60),
        deadline(),
    );
    assert_eq!(
        claim.await.unwrap(),
        Claim::Held,
        "a delivery seen before the upgrade must stay a duplicate"
    );
    assert_eq!(scalar::<i64>(&path, "SELECT count(*) FROM counters"), 1);
    assert_eq!(
        scalar::<String>(&path, "SELECT value || ' ' || expires_at FROM marks"),
        "done 32503680000000",
        "the old mark moved to the marks table as done, keeping its expiry"
    );
    drop(store);
    let reopened = SqliteStore::open(&path).unwrap();
    let counts = reopened.get(&key, deadline());
    assert_eq!(
        counts.await.unwrap(),
        vec![7],
        "a second open changed the file"
    );
}

/// A version-2 file written before call records (no `calls` table) gets
/// the table when it is opened, keeping its version (a version that does
/// not know the table ignores it), and its calls are recorded from then on.
#[tokio::test]
async fn a_version_2_file_made_before_call_records_gets_their_table() {
    let dir = dir();
    let marks = "CREATE TABLE marks (key BLOB PRIMARY KEY NOT NULL, value TEXT NOT NULL, \
                 expires_at INTEGER NOT NULL) WITHOUT ROWID;";
    let v2 = VERSION_1.replace("PRAGMA user_version = 1;", "PRAGMA user_version = 2;");
    let path = database(
        &dir,
        &format!("PRAGMA application_id = {APPLICATION_ID}; {v2} {marks}"),
    );
    let store = SqliteStore::open(&path).unwrap();
    assert_eq!(scalar::<i64>(&path, "PRAGMA user_version"), 2);
    let counter = Counter {
        key: "limit:ask:docs:1:20000".into(),
        ttl: std::time::Duration::from_secs(60),
        cost: 1,
        max: 100,
        floor: 0,
        prior: None,
        lease: false,
    };
    let id = CheckId::new();
    let batch = std::slice::from_ref(&counter);
    assert_eq!(store.count(batch, id, deadline()).await.unwrap(), [8]);
    assert_eq!(store.count(batch, id, deadline()).await.unwrap(), [8]);
    assert_eq!(scalar::<i64>(&path, "SELECT count(*) FROM calls"), 1);
}

#[test]
fn a_version_2_file_without_its_marks_table_is_refused() {
    let dir = dir();
    let v1_tables = VERSION_1.replace("PRAGMA user_version = 1;", "PRAGMA user_version = 2;");
    let path = database(
        &dir,
        &format!("PRAGMA application_id = {APPLICATION_ID}; {v1_tables}"),
    );
    assert!(matches!(open_error(&path), Error::ForeignDatabase { .. }));
}

#[test]
fn an_unknown_schema_version_is_refused() {
    let dir = dir();
    let path = database(
        &dir,
        &format!(
            "PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 99; CREATE TABLE counters (x);"
        ),
    );
    let err = open_error(&path);
    assert!(
        matches!(
            err,
            Error::UnknownSchemaVersion {
                found: 99,
                supported: SCHEMA_VERSION,
                ..
            }
        ),
        "{err:?}"
    );
    assert!(err.to_string().contains("schema version 99"), "{err}");
}

#[test]
fn a_version_without_application_id_is_still_an_unknown_version() {
    let dir = dir();
    let path = database(&dir, "PRAGMA user_version = 7;");
    assert!(matches!(
        open_error(&path),
        Error::UnknownSchemaVersion { found: 7, .. }
    ));
}

#[test]
fn another_applications_database_is_refused_and_left_alone() {
    let dir = dir();
    let path = database(
        &dir,
        "CREATE TABLE users (name TEXT); INSERT INTO users VALUES ('ada');",
    );
    assert!(matches!(open_error(&path), Error::ForeignDatabase { .. }));
    let conn = Connection::open(&path).unwrap();
    let tables: i64 = conn
        .query_row("SELECT count(*) FROM sqlite_schema", [], |r| r.get(0))
        .unwrap();
    assert_eq!(tables, 1, "open must not add tables to a foreign database");

    let dir = self::dir();
    let path = database(&dir, "PRAGMA application_id = 42;");
    assert!(matches!(open_error(&path), Error::ForeignDatabase { .. }));
}

#[test]
fn a_garbage_file_is_not_a_database() {
    let dir = dir();
    let path = dir.path().join("limits.sqlite");
    std::fs::write(
        &path,
        "this is not a database, just some text that is long enough. ".repeat(100),
    )
    .unwrap();
    let err = open_error(&path);
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    assert!(err.to_string().contains("not a database"), "{err}");
}

#[test]
fn a_database_with_a_damaged_header_is_not_a_database() {
    let dir = dir();
    let path = database(&dir, "CREATE TABLE t (x); INSERT INTO t VALUES (1);");
    let mut bytes = std::fs::read(&path).unwrap();
    bytes[..16].copy_from_slice(b"not sqlite here\0");
    std::fs::write(&path, bytes).unwrap();
    assert!(matches!(open_error(&path), Error::NotADatabase { .. }));
}

#[test]
fn a_missing_directory_cannot_be_opened() {
    let dir = dir();
    let path = dir.path().join("no/such/dir/limits.sqlite");
    let err = open_error(&path);
    assert!(matches!(err, Error::CannotOpen { .. }), "{err:?}");
    assert!(err.to_string().contains("no/such/dir"), "{err}");
}

#[test]
fn a_path_through_a_regular_file_cannot_be_opened() {
    let dir = dir();
    let file = dir.path().join("file");
    std::fs::write(&file, "x").unwrap();
    assert!(matches!(
        open_error(&file.join("limits.sqlite")),
        Error::CannotOpen { .. }
    ));
}

#[test]
fn a_directory_cannot_be_opened() {
    let dir = dir();
    assert!(matches!(open_error(dir.path()), Error::CannotOpen { .. }));
}

#[test]
fn a_read_only_file_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = dir();
    let path = dir.path().join("limits.sqlite");
    drop(SqliteStore::open(&path).unwrap());
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o444)).unwrap();
    // Permissions do not bind root (CI runs as root): make the file
    // immutable instead, so the test still proves the refusal.
    let immutable = std::fs::OpenOptions::new().write(true).open(&path).is_ok();
    if immutable {
        let status = std::process::Command::new("chattr")
            .arg("+i")
            .arg(&path)
            .status();
        assert!(
            status.is_ok_and(|s| s.success()),
            "file permissions do not bind this user and `chattr +i` failed: \
             run this test as another user or on a file system with immutable files"
        );
    }
    let err = open_error(&path);
    if immutable {
        let _ = std::process::Command::new("chattr")
            .arg("-i")
            .arg(&path)
            .status();
    }
    assert!(
        matches!(err, Error::ReadOnly { .. } | Error::CannotOpen { .. }),
        "{err:?}"
    );
}

/// Only a version-1 file of the shape version 1 wrote (a `counters` table,
/// no `marks`) is migrated: one that already has `marks`, or has `marks`
/// without `counters`, was not written by us and is refused untouched.
#[test]
fn a_version_1_file_of_another_shape_is_refused() {
    let marks = "CREATE TABLE marks (key BLOB PRIMARY KEY, value TEXT, expires_at INTEGER);";
    for sql in [
        format!("PRAGMA application_id = {APPLICATION_ID}; {VERSION_1} {marks}"),
        format!("PRAGMA application_id = {APPLICATION_ID}; PRAGMA user_version = 1; {marks}"),
    ] {
        let dir = dir();
        let path = database(&dir, &sql);
        let err = open_error(&path);
        assert!(matches!(err, Error::ForeignDatabase { .. }), "{err:?}");
        assert_eq!(scalar::<i64>(&path, "PRAGMA user_version"), 1, "left alone");
    }
}

/// A file that is not a database is refused at once: only a busy file is
/// tried again (for up to its `open_busy_timeout`), not every failure.
#[test]
fn a_file_that_is_not_a_database_is_refused_without_waiting() {
    let dir = dir();
    let path = dir.path().join("limits.sqlite");
    std::fs::write(&path, "not a database at all; ".repeat(200)).unwrap();
    let started = std::time::Instant::now();
    let err = open_error(&path);
    assert!(matches!(err, Error::NotADatabase { .. }), "{err:?}");
    assert!(
        started.elapsed() < tollgate_sqlite::SqliteOptions::DEFAULT_OPEN_BUSY_TIMEOUT / 2,
        "refused after {:?}, as if the file were busy",
        started.elapsed()
    );
}
