//! The give-back script: [`REFUND_SCRIPT`](crate::REFUND_SCRIPT), except
//! that a counter brought back to 0 is removed.
//!
//! A reservation that a slot applied may have created its counters there;
//! giving back must leave them as they were, so absent again rather than
//! present at 0 (a refused reservation creates no counter). A counter that
//! held 0 before (refunded to 0) reads the same absent, and a racing
//! caller's increment in between keeps the counter above 0, so it stays,
//! with its lifetime. `KEYS`, `ARGV` and the reply are `REFUND_SCRIPT`'s.

use std::sync::LazyLock;

use crate::scripts;

/// What `REFUND_SCRIPT` writes per counter.
const REFUND_WRITE: &str =
    "redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'KEEPTTL')";

/// What the give-back writes instead.
const GIVE_BACK_WRITE: &str = "if counts[i] == 0 then
      redis.call('DEL', KEYS[i])
    else
      redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'KEEPTTL')
    end";

/// The give-back script, made from `REFUND_SCRIPT` once (so both read and
/// check counters with the same code).
pub(crate) static GIVE_BACK: LazyLock<String> =
    LazyLock::new(|| scripts::REFUND.replacen(REFUND_WRITE, GIVE_BACK_WRITE, 1));

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_give_back_is_the_refund_removing_counters_back_at_zero() {
        assert_eq!(scripts::REFUND.matches(REFUND_WRITE).count(), 1);
        assert_ne!(GIVE_BACK.as_str(), scripts::REFUND);
        assert!(GIVE_BACK.contains("redis.call('DEL', KEYS[i])"));
        assert_eq!(
            GIVE_BACK.replacen(GIVE_BACK_WRITE, REFUND_WRITE, 1),
            scripts::REFUND
        );
    }
}
