//! Test support for tollgate's own tests: private servers, log capture and
//! tests across processes. Not part of any store's contract: the
//! conformance suite (`tollgate-conformance`) holds the store checks, and
//! the store wrappers for tests (`Hooked`, `Faulty`) are in
//! `tollgate-core`'s `test-util` feature.

mod logs;
pub mod metrics;
pub mod postgres_server;
pub mod processes;
pub mod redis_cluster;
pub mod redis_info;
pub mod redis_server;
pub mod relay;
pub mod secrets;

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
