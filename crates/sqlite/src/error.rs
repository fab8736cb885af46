//! [`Error`], for opening a store, and the mapping of SQLite failures into
//! the core's [`StoreError`].

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rusqlite::ErrorCode;
use tollgate_core::{BoxError, StoreError};

/// Why a store could not be opened. Every problem with the file shows here,
/// at open, never at the first request.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// The file cannot be created or opened: a missing or unwritable
    /// directory, a path through a regular file, no permission.
    #[error("cannot open counter store {path}")]
    CannotOpen {
        /// The path given to `open`.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: BoxError,
    },
    /// The file can only be read; a store must write.
    #[error("counter store {path} is read-only")]
    ReadOnly {
        /// The path given to `open`.
        path: PathBuf,
    },
    /// The file is not an SQLite database, or it is corrupt.
    #[error("{path} is not a database or is corrupt")]
    NotADatabase {
        /// The path given to `open`.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: BoxError,
    },
    /// The file is an SQLite database that belongs to something else: it has
    /// tables, or an application id, that are not this store's.
    #[error("{path} is an SQLite database of another application")]
    ForeignDatabase {
        /// The path given to `open`.
        path: PathBuf,
    },
    /// The file is a counter store written by another version of this crate,
    /// with a schema this version does not know.
    #[error(
        "counter store {path} has schema version {found}; this version reads version {supported}"
    )]
    UnknownSchemaVersion {
        /// The path given to `open`.
        path: PathBuf,
        /// The version found in the file.
        found: i64,
        /// The version this crate reads and writes.
        supported: i64,
    },
    /// The file could not be put in write-ahead-log mode (for example on a
    /// file system without shared memory).
    #[error("counter store {path} cannot use write-ahead logging (journal mode is `{mode}`)")]
    NoWal {
        /// The path given to `open`.
        path: PathBuf,
        /// The journal mode SQLite kept.
        mode: String,
    },
    /// Any other SQLite failure while opening or preparing the file.
    #[error("cannot prepare counter store {path}")]
    Sqlite {
        /// The path given to `open`.
        path: PathBuf,
        /// SQLite's error.
        #[source]
        source: BoxError,
    },
    /// The worker thread could not be started.
    #[error("cannot start the counter store's worker thread")]
    Worker(#[source] std::io::Error),
}

impl Error {
    /// Classifies an SQLite error met while opening `path`.
    pub(crate) fn opening(path: &Path, err: rusqlite::Error) -> Error {
        let path = path.to_owned();
        match err.sqlite_error_code() {
            Some(ErrorCode::CannotOpen | ErrorCode::PermissionDenied) => Error::CannotOpen {
                path,
                source: Box::new(err),
            },
            Some(ErrorCode::ReadOnly) => Error::ReadOnly { path },
            Some(ErrorCode::NotADatabase | ErrorCode::DatabaseCorrupt) => Error::NotADatabase {
                path,
                source: Box::new(err),
            },
            _ => Error::Sqlite {
                path,
                source: Box::new(err),
            },
        }
    }
}

/// An SQLite failure of a store call as a [`StoreError`]: busy or locked is
/// transient, everything else permanent. The failure may be shared by every
/// call of a batch.
pub(crate) fn from_shared(err: &Arc<rusqlite::Error>) -> StoreError {
    let source: BoxError = Box::new(Arc::clone(err));
    match err.sqlite_error_code() {
        Some(ErrorCode::DatabaseBusy | ErrorCode::DatabaseLocked) => StoreError::Busy(source),
        _ => StoreError::Backend(source),
    }
}

/// The error of a call made while the worker's queue holds `capacity` calls.
pub(crate) fn queue_full(capacity: usize) -> StoreError {
    StoreError::Busy(
        format!("the counter store's queue is full ({capacity} calls wait for the file)").into(),
    )
}

/// The error of a call whose worker has stopped.
pub(crate) fn worker_gone() -> StoreError {
    StoreError::Backend("the counter store's worker thread has stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn failure(code: i32) -> rusqlite::Error {
        rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None)
    }

    fn store_error(err: rusqlite::Error) -> StoreError {
        from_shared(&Arc::new(err))
    }

    #[test]
    fn busy_and_locked_are_transient_others_permanent() {
        assert_eq!(
            store_error(failure(rusqlite::ffi::SQLITE_BUSY)).kind(),
            "busy"
        );
        assert_eq!(
            store_error(failure(rusqlite::ffi::SQLITE_LOCKED)).kind(),
            "busy"
        );
        assert_eq!(
            store_error(failure(rusqlite::ffi::SQLITE_FULL)).kind(),
            "backend"
        );
        assert_eq!(
            store_error(failure(rusqlite::ffi::SQLITE_IOERR)).kind(),
            "backend"
        );
        let full = queue_full(8);
        assert_eq!(full.kind(), "busy");
        assert!(full.is_transient());
        let source = std::error::Error::source(&full).map(ToString::to_string);
        assert_eq!(
            source.as_deref(),
            Some("the counter store's queue is full (8 calls wait for the file)")
        );
        assert!(
            !worker_gone().is_transient(),
            "a stopped worker does not come back"
        );
    }

    #[test]
    fn open_failures_are_classified() {
        let path = Path::new("x.db");
        let err = Error::opening(path, failure(rusqlite::ffi::SQLITE_NOTADB));
        assert!(matches!(err, Error::NotADatabase { .. }));
        let err = Error::opening(path, failure(rusqlite::ffi::SQLITE_CANTOPEN));
        assert!(matches!(err, Error::CannotOpen { .. }));
        let err = Error::opening(path, failure(rusqlite::ffi::SQLITE_READONLY));
        assert!(matches!(err, Error::ReadOnly { .. }));
    }
}
