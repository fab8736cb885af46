//! [`CheckId`]: what makes a retried attempt the same call as the first.

use std::cell::Cell;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

/// The identity of one store call across its attempts: a check, a refund
/// or a give-back. The [`Limiter`](crate::Limiter) makes one per call and
/// hands the same id to every attempt of it, so that a store that applied
/// an attempt whose reply was lost recognises the retry and answers what it
/// applied the first time instead of applying it again.
///
/// 128 bits: 64 random bits drawn once per thread, then a per-thread
/// counter, so that two ids made anywhere differ with overwhelming
/// probability and making one costs no system call. Shown as 32 lowercase
/// hex digits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckId(u128);

impl CheckId {
    /// A new id, never made before by this thread.
    pub fn new() -> CheckId {
        thread_local! {
            static NEXT: Cell<(u64, u64)> = Cell::new((random_u64(), 0));
        }
        let (seed, n) = NEXT.with(|next| {
            let (seed, n) = next.get();
            next.set((seed, n.wrapping_add(1)));
            (seed, n)
        });
        CheckId((u128::from(seed) << 64) | u128::from(n))
    }

    /// The id with these 128 bits (as [`as_u128`](CheckId::as_u128) gives).
    pub const fn from_u128(bits: u128) -> CheckId {
        CheckId(bits)
    }

    /// The id's 128 bits.
    pub const fn as_u128(self) -> u128 {
        self.0
    }
}

impl Default for CheckId {
    /// A [`new`](CheckId::new) id.
    fn default() -> CheckId {
        CheckId::new()
    }
}

impl fmt::Display for CheckId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{:032x}", self.0)
    }
}

/// 64 random bits; from the clock, the process and a counter if the
/// system's random source fails.
fn random_u64() -> u64 {
    if let Ok(bits) = getrandom::u64() {
        return bits;
    }
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    nanos
        ^ NEXT.fetch_add(1, Ordering::Relaxed).rotate_left(17)
        ^ u64::from(std::process::id()) << 32
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_differ_within_a_thread_and_across_threads() {
        let mut ids: Vec<CheckId> = (0..1_000).map(|_| CheckId::new()).collect();
        let other = std::thread::spawn(|| (0..1_000).map(|_| CheckId::new()).collect::<Vec<_>>());
        ids.extend(other.join().unwrap_or_default());
        let count = ids.len();
        ids.sort();
        ids.dedup();
        assert_eq!(ids.len(), count, "an id was made twice");
        assert_eq!(count, 2_000);
    }

    #[test]
    fn shown_as_32_hex_digits_of_its_bits() {
        let id = CheckId::from_u128(0xab);
        assert_eq!(id.to_string(), format!("{}ab", "0".repeat(30)));
        assert_eq!(CheckId::from_u128(id.as_u128()), id);
        let text = CheckId::new().to_string();
        assert_eq!(text.len(), 32);
        assert!(
            text.bytes()
                .all(|b| b.is_ascii_hexdigit() && !b.is_ascii_uppercase())
        );
    }
}
