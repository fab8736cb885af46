//! [`Harness`]: how the suite reaches a store under test.

use std::future::Future;

use tollgate_core::CounterStore;

/// A store under test: its storage, and a way to open clients on it.
///
/// `start` prepares fresh storage (a temporary file, a new server, or an
/// existing server: every check uses unique keys, so nothing is wiped).
/// `open` connects a new, independent client to that same storage; the
/// restart check drops every client and opens new ones.
pub trait Harness: Sized + Send + Sync + 'static {
    /// The store type under test.
    type Store: CounterStore;

    /// Prepares the storage for one check.
    fn start() -> impl Future<Output = Self> + Send;

    /// Opens a new client on the storage; panics (failing the check) when it cannot.
    fn open(&self) -> impl Future<Output = Self::Store> + Send;
}
