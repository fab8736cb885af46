//! Store-failure logs: rate-limited, with the error's cause chain.

use std::collections::HashMap;
use std::error::Error as StdError;
use std::fmt;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// At most one line per key per [`Throttle::EVERY`]; the lines kept say how
/// many were suppressed since the last one. Time is tokio's (the system's,
/// or a test's paused clock).
#[derive(Debug, Default)]
pub(crate) struct Throttle {
    seen: Mutex<HashMap<Box<str>, Slot>>,
}

#[derive(Debug)]
struct Slot {
    last: Instant,
    suppressed: u64,
}

impl Throttle {
    /// One line per key per second.
    pub(crate) const EVERY: Duration = Duration::from_secs(1);
    /// Keys remembered at most (rule-name lists come from code, so few);
    /// past it the memory starts over.
    const MAX_KEYS: usize = 1_024;

    /// `Some(suppressed)` when a line for `key` may be written now, with how
    /// many were suppressed since the last one; `None` to stay quiet.
    pub(crate) fn admit(&self, key: &str) -> Option<u64> {
        let now = Instant::now();
        let mut seen = self.seen.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(slot) = seen.get_mut(key) {
            if now.duration_since(slot.last) < Throttle::EVERY {
                slot.suppressed += 1;
                return None;
            }
            let suppressed = std::mem::take(&mut slot.suppressed);
            slot.last = now;
            return Some(suppressed);
        }
        if seen.len() >= Throttle::MAX_KEYS {
            seen.clear();
        }
        seen.insert(
            key.into(),
            Slot {
                last: now,
                suppressed: 0,
            },
        );
        Some(0)
    }
}

/// An error and its sources, `outer: inner: innermost`.
pub(crate) struct Chain<'a>(pub(crate) &'a (dyn StdError + 'static));

impl fmt::Display for Chain<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)?;
        let mut source = self.0.source();
        while let Some(err) = source {
            write!(f, ": {err}")?;
            source = err.source();
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::StoreError;

    #[test]
    fn one_line_per_key_per_second_counting_the_rest() {
        let throttle = Throttle::default();
        assert_eq!(throttle.admit("ask"), Some(0));
        for _ in 0..5 {
            assert_eq!(throttle.admit("ask"), None);
        }
        assert_eq!(throttle.admit("runs"), Some(0), "keys are apart");
        if let Ok(mut seen) = throttle.seen.lock()
            && let Some(slot) = seen.get_mut("ask")
        {
            slot.last -= Throttle::EVERY;
        }
        assert_eq!(throttle.admit("ask"), Some(5));
    }

    #[test]
    fn the_chain_shows_every_cause() {
        let io = std::io::Error::other("connection refused");
        let err = StoreError::Connection(Box::new(io));
        assert_eq!(
            Chain(&err).to_string(),
            "store connection failed: connection refused"
        );
    }
}
