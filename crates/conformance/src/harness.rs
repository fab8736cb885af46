//! [`Harness`]: how the suite reaches a store under test.

use std::future::Future;
use std::time::Duration;

use tollgate_core::{ManualClock, Store};
use tollgate_test_support::relay::Relay;

/// A store under test: its storage, and a way to open clients on it.
///
/// `start` prepares fresh storage for one check (a temporary file, a new
/// server, or an existing server: every check uses unique keys, so nothing
/// is wiped). `open` connects a new, independent client to that same
/// storage; the restart check drops every client and opens new ones.
pub trait Harness: Sized + Send + Sync + 'static {
    /// The store type under test: counters and marks.
    type Store: Store;

    /// Prepares the storage for one check.
    fn start() -> impl Future<Output = Self> + Send;

    /// Opens a new client on the storage; panics (failing the check) when it cannot.
    fn open(&self) -> impl Future<Output = Self::Store> + Send;

    /// The remaining lifetime of `key`, read from the storage itself (not
    /// through the store under test); panics when it cannot be read.
    fn expiry(&self, key: &str) -> impl Future<Output = Expiry> + Send;

    /// The clock the storage expires entries by, when the harness can move
    /// it (a store given a [`ManualClock`]); `None` for a server keeping its
    /// own time. Return clones of one clock, fresh for each [`start`](Harness::start).
    ///
    /// A check sets this clock to [`FIXED_NOW`](crate::FIXED_NOW) when it
    /// starts, gives the same clock to its limiters and moves it forward to
    /// prove lifetimes (by up to about 60 days). So a store must expire
    /// entries by this clock but measure its [`Deadline`](tollgate_core::Deadline)s
    /// in real time. With `None`, the checks keep their own fixed clock for
    /// the limiters and read lifetimes with [`expiry`](Harness::expiry) (and a
    /// few bounded real-time waits) instead.
    fn store_clock(&self) -> Option<ManualClock> {
        None
    }

    /// The relay every client [`open`](Harness::open) returns talks to its
    /// server through, for a store that has one: the checks of replies
    /// lost after the write lose them on the wire with it
    /// ([`Relay::lose_reply_to`]). `None` (a store without a server): those
    /// checks lose the reply in the client instead.
    fn relay(&self) -> Option<&Relay> {
        None
    }

    /// Whether the property checks save the counterexamples they find, to
    /// be committed and replayed first by every later run (`true`); `false`
    /// for a store broken on purpose, whose failures are expected.
    fn keeps_counterexamples(&self) -> bool {
        true
    }
}

/// The remaining lifetime of a stored key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expiry {
    /// No such key (or it has expired).
    Absent,
    /// The key exists without a lifetime: a broken store contract.
    Never,
    /// The key expires after this long.
    In(Duration),
}
