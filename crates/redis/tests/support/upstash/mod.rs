//! Helpers of the Upstash store's test binaries.

pub mod fake;
pub mod proxy;

use std::time::Duration;

/// The token every test proxy admits.
pub const TOKEN: &str = "test-token-0123456789";

/// The failure bound of a check with the default retry policy (350 ms)
/// plus scheduling on a loaded 2-core machine.
pub const BOUND: Duration = Duration::from_secs(1);
