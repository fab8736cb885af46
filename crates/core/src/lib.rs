#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod algorithm;
mod breaker;
mod cache;
mod clock;
mod deadline;
mod dedup;
mod error;
mod failure;
mod gcra;
mod key;
mod lease;
mod limiter;
pub mod observe;
mod reply;
mod retry;
mod rule;
mod store;
#[cfg(feature = "test-util")]
mod test_util;
mod throttle;
mod unit;
mod verdict;
mod visitor;
pub mod window;

pub use algorithm::Algorithm;
pub use breaker::BreakerPolicy;
#[cfg(feature = "test-util")]
pub use clock::ManualClock;
pub use clock::{Clock, SystemClock};
pub use deadline::Deadline;
pub use dedup::{Deliveries, Delivery};
pub use error::{BoxError, Error, StoreError};
pub use key::{KEY_PREFIX, Limit, MAX_PART_LEN};
pub use lease::Lease;
pub use limiter::{Limiter, LimiterBuilder, Mode, Policy};
pub use retry::RetryPolicy;
pub use rule::{DEFAULT_RULES_TOML, MAX_MAX, MAX_NAME_LEN, Rule, RuleSet};
pub use store::{
    CheckId, Claim, Counter, CounterStore, Leases, MARK_DONE, MAX_COUNT, MarkStore, Named,
    Prefixed, Prior, Reservation, Store,
};
#[cfg(feature = "test-util")]
pub use test_util::{Fault, Faults, Faulty, Hook, Hooked};
pub use unit::Unit;
pub use verdict::{RateLimited, Usage, Verdict};
pub use visitor::Visitor;
pub use window::Window;

/// The async-trait attribute used by [`CounterStore`] and [`MarkStore`], for store implementations.
pub use async_trait::async_trait;
