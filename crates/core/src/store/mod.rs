//! The storage contract, one trait per family of state a store keeps:
//! [`CounterStore`] (counters) and [`MarkStore`] (de-duplication marks).
//! [`Store`] is both, as every store of this workspace is; [`Prefixed`]
//! puts any store's keys under a prefix.
//!
//! A store only keeps integers and short strings: every rule, window and
//! policy stays in the core. Each family is checked by its own part of the
//! conformance suite (`tollgate-conformance`), which is the definition of
//! the contract.

mod counters;
mod marks;
mod prefixed;

pub use counters::{Counter, CounterStore, MAX_COUNT, Reservation};
pub use marks::{Claim, MARK_DONE, MarkStore};
pub use prefixed::Prefixed;

/// A store of counters and marks: what `tollgate::open_store` returns, and
/// every store of this workspace implements. Implemented for every type
/// that implements both traits; a `Arc<dyn Store>` is a [`CounterStore`]
/// (for a [`Limiter`](crate::Limiter)) and a [`MarkStore`] (for
/// [`Deliveries`](crate::Deliveries)) at once.
pub trait Store: CounterStore + MarkStore {}

impl<S: CounterStore + MarkStore + ?Sized> Store for S {}
