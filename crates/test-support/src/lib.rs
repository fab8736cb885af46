//! Test support for tollgate's own tests: private servers, log capture, a
//! store wrapper that runs a test's hook around each call (one that fails on
//! demand among them) and tests across processes. Not part of any store's
//! contract: the conformance suite (`tollgate-conformance`) holds the store
//! checks.

mod faulty;
mod hooked;
mod logs;
pub mod postgres_server;
pub mod processes;
pub mod redis_cluster;
pub mod redis_server;

pub use faulty::{Fault, Faults, Faulty};
pub use hooked::{Call, Hook, Hooked};
pub use logs::Logs;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// A key part no other test, run or process uses: time, process id and a counter.
pub fn unique() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    let n = NEXT.fetch_add(1, Ordering::Relaxed);
    format!("t{nanos:x}-{:x}-{n}", std::process::id())
}
