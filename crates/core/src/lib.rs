#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod cache;
mod clock;
mod deadline;
mod dedup;
mod error;
mod key;
mod limiter;
pub mod observe;
mod reply;
mod retry;
mod rule;
mod store;
mod throttle;
mod unit;
mod verdict;
mod visitor;
pub mod window;

#[cfg(feature = "test-util")]
pub use clock::ManualClock;
pub use clock::{Clock, SystemClock};
pub use deadline::Deadline;
pub use dedup::{Deliveries, Delivery};
pub use error::{BoxError, Error, StoreError};
pub use key::{KEY_PREFIX, Limit, MAX_PART_LEN};
pub use limiter::{Limiter, Mode, Policy};
pub use retry::RetryPolicy;
pub use rule::{DEFAULT_RULES_TOML, MAX_MAX, MAX_NAME_LEN, Rule, RuleSet};
pub use store::{Claim, Counter, CounterStore, MARK_DONE, MAX_COUNT, Reservation};
pub use unit::Unit;
pub use verdict::{RateLimited, Usage, Verdict};
pub use visitor::Visitor;
pub use window::Window;

/// The async-trait attribute used by [`CounterStore`], for store implementations.
pub use async_trait::async_trait;
