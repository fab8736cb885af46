//! The storage contract, one trait per family of state a store keeps:
//! [`CounterStore`] (counters) and [`MarkStore`] (de-duplication marks),
//! each extending [`Named`], what every store is. [`Store`] is both
//! families, as every store of this workspace is; [`Prefixed`] puts any
//! store's keys under a prefix.
//!
//! A store only keeps integers and short strings: every rule, window and
//! policy stays in the core. Each family is checked by its own part of the
//! conformance suite (`tollgate-conformance`), which is the definition of
//! the contract.

mod check_id;
mod counters;
mod marks;
mod prefixed;

use std::fmt::Debug;
use std::sync::Arc;

pub use check_id::CheckId;
pub(crate) use counters::weigh;
pub use counters::{Counter, CounterStore, Leases, MAX_COUNT, Prior, Reservation};
pub use marks::{Claim, MARK_DONE, MarkStore};
pub use prefixed::Prefixed;

/// What every store is, whatever it keeps: shareable across tasks, and
/// named in logs and metrics. Each family of the contract extends it, so a
/// store that keeps several names itself once.
pub trait Named: Debug + Send + Sync + 'static {
    /// A short name for logs and metrics, e.g. `redis` (`store` by default).
    fn name(&self) -> &'static str {
        "store"
    }
}

impl<S: Named + ?Sized> Named for Arc<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

impl<S: Named + ?Sized> Named for Box<S> {
    fn name(&self) -> &'static str {
        (**self).name()
    }
}

/// A store of counters and marks: what `tollgate::open_store` returns, and
/// every store of this workspace implements. Implemented for every type
/// that implements both traits; a `Arc<dyn Store>` is a [`CounterStore`]
/// (for a [`Limiter`](crate::Limiter)) and a [`MarkStore`] (for
/// [`Deliveries`](crate::Deliveries)) at once.
pub trait Store: CounterStore + MarkStore {}

impl<S: CounterStore + MarkStore + ?Sized> Store for S {}
