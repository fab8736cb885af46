//! [`Algorithm`]: how a rule counts its window, and the sliding window's
//! math (pure functions of whole Unix seconds, as [`Window`]'s are).
//!
//! A sliding window reads two fixed-window counters of the same key: the
//! current window `i = floor(now / W)` and the previous one, `i - 1`. At
//! `e` whole seconds into window `i` it counts
//!
//! ```text
//! estimate = floor(previous × (W − e) / W) + current
//! ```
//!
//! and a call of cost `c` fits when `estimate + c ≤ max`. The counters are
//! the seed's own (`limit:<key>:<index>`, byte for byte); only the current
//! one is ever added to.

use std::fmt;
use std::str::FromStr;

use serde::Deserialize;

use crate::store::MAX_COUNT;
use crate::{Error, Window};

/// How a rule counts its window.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Algorithm {
    /// Fixed windows (the default, the seed's): at most `max` units in each
    /// window `[k·W, (k+1)·W)`. A caller may spend a whole budget at the end
    /// of one window and another at the start of the next: up to twice
    /// `max` in any span of `W`.
    #[default]
    Fixed,
    /// A sliding window over the same counters: the previous window's count,
    /// weighted by the part of it still inside the last `W` seconds, plus
    /// the current one's (see the [module](self)). A whole budget spent at
    /// the end of one window leaves almost nothing at the start of the
    /// next (fixed windows: a whole budget again). The weight assumes the
    /// previous window's calls were spread evenly: a caller who keeps
    /// calling through the next window still gets close to twice `max` in
    /// some span of `W` (measured in BENCHMARKS.md); GCRA bounds every span.
    Sliding,
    /// GCRA, a token bucket as a leaky one: `max` units per window spent
    /// one every `W / max`, at most [`burst`](crate::Rule::burst) at once
    /// after a quiet spell (see `gcra`). One counter per key, holding a
    /// time.
    Gcra,
    /// In flight: at most `max` calls at once per key, each holding a
    /// lease from its check until it is released (or its holder crashes
    /// and it expires: the rule's window is the lease's lifetime). In a
    /// rules file, `concurrency = N` and `lease = "60s"`. One counter per
    /// key, holding lease ids.
    Concurrency,
}

impl Algorithm {
    /// The name in a rules file, in metrics and in a 429's body: `fixed`,
    /// `sliding`, `gcra` or `concurrency`.
    pub const fn as_str(self) -> &'static str {
        match self {
            Algorithm::Fixed => "fixed",
            Algorithm::Sliding => "sliding",
            Algorithm::Gcra => "gcra",
            Algorithm::Concurrency => "concurrency",
        }
    }
}

impl fmt::Display for Algorithm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Algorithm {
    type Err = Error;

    /// `fixed`, `sliding`, `gcra` or `concurrency`.
    fn from_str(text: &str) -> Result<Algorithm, Error> {
        match text {
            "fixed" => Ok(Algorithm::Fixed),
            "sliding" => Ok(Algorithm::Sliding),
            "gcra" => Ok(Algorithm::Gcra),
            "concurrency" => Ok(Algorithm::Concurrency),
            other => Err(Error::InvalidAlgorithm(other.to_owned())),
        }
    }
}

impl<'de> Deserialize<'de> for Algorithm {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Algorithm, D::Error> {
        let text = String::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
    }
}

/// How much of the previous window's count a sliding window still counts
/// at `now_secs`: `floor(previous × (W − e) / W)`, `e` the whole seconds
/// elapsed in the current window. Exact (in 128 bits).
pub fn weighted(window: Window, now_secs: u64, previous: u64) -> u64 {
    let (part, whole) = share(window, now_secs);
    crate::store::weigh(previous, part, whole)
}

/// The share of the previous window a sliding window still counts at
/// `now_secs`: `(W − e, W)`, `e` the whole seconds elapsed in the current
/// window.
pub fn share(window: Window, now_secs: u64) -> (u64, u64) {
    let len = window.secs();
    (len - now_secs % len, len)
}

/// A sliding window's count at `now_secs`: [`weighted`] `previous` plus
/// `current`, saturating at [`MAX_COUNT`].
pub fn estimate(window: Window, now_secs: u64, previous: u64, current: u64) -> u64 {
    weighted(window, now_secs, previous)
        .saturating_add(current)
        .min(MAX_COUNT)
}

/// Whole seconds from `now_secs` until a call of `cost` fits a sliding
/// window of `max` whose counters stand at `previous` and `current`, if
/// nothing else is counted meanwhile: 0 when it fits now, `None` when it
/// never does (`cost > max`).
///
/// Within the current window the estimate falls as the previous window's
/// weight does; from the next window on, `current` is the previous count
/// and falls in its turn; two windows on, nothing is left.
pub fn wait(
    window: Window,
    now_secs: u64,
    previous: u64,
    current: u64,
    cost: u64,
    max: u64,
) -> Option<u64> {
    if cost > max {
        return None;
    }
    let len = window.secs();
    let elapsed = now_secs % len;
    // Room left for the weighted previous count, in this window.
    let room = max - cost;
    if let Some(room_now) = room.checked_sub(current) {
        // The latest second of this window where floor(previous × left / len) ≤ room_now:
        // left ≤ most_left(previous, room_now).
        let left = len - elapsed;
        let most = most_left(len, previous, room_now);
        if most >= left {
            return Some(0);
        }
        if most >= 1 {
            return Some(left - most);
        }
    }
    // In the next window `current` is weighted, and nothing new counts.
    let most = most_left(len, current, room);
    // `most` < len unless current is 0: then the next window's start fits.
    let elapsed_next = len - most.min(len);
    Some(len - elapsed + elapsed_next)
}

/// The largest `left` in `0..=len` with `floor(count × left / len) ≤ room`.
fn most_left(len: u64, count: u64, room: u64) -> u64 {
    if count == 0 {
        return len;
    }
    // floor(count·left/len) ≤ room ⟺ count·left < (room + 1)·len.
    let bound = (u128::from(room) + 1) * u128::from(len);
    let left = (bound - 1) / u128::from(count);
    u64::try_from(left.min(u128::from(len))).unwrap_or(len)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_algorithm_displays_as_the_name_it_is_parsed_from() {
        for (algorithm, name) in [
            (Algorithm::Fixed, "fixed"),
            (Algorithm::Sliding, "sliding"),
            (Algorithm::Gcra, "gcra"),
            (Algorithm::Concurrency, "concurrency"),
        ] {
            assert_eq!(algorithm.to_string(), name);
            assert_eq!(name.parse::<Algorithm>().ok(), Some(algorithm));
        }
    }

    fn ten() -> Window {
        Window::from_secs(10).unwrap_or_else(|e| panic!("{e}"))
    }

    /// The wait by brute force: the first second from now whose estimate
    /// (with the counters moving to the next windows) lets the cost in.
    fn slow_wait(w: Window, now: u64, prev: u64, cur: u64, cost: u64, max: u64) -> Option<u64> {
        let index = w.index(now);
        (0..=3 * w.secs()).find(|s| {
            let t = now + s;
            let (p, c) = match w.index(t) - index {
                0 => (prev, cur),
                1 => (cur, 0),
                _ => (0, 0),
            };
            estimate(w, t, p, c) + cost <= max
        })
    }

    #[test]
    fn the_weight_is_the_part_of_the_previous_window_still_inside() {
        let w = ten();
        assert_eq!(weighted(w, 100, 10), 10, "at the start, all of it");
        assert_eq!(weighted(w, 101, 10), 9);
        assert_eq!(weighted(w, 109, 10), 1);
        assert_eq!(weighted(w, 105, 7), 3, "floor(3.5)");
        assert_eq!(weighted(w, 105, MAX_COUNT), MAX_COUNT / 2);
        assert_eq!(estimate(w, 100, MAX_COUNT, MAX_COUNT), MAX_COUNT);
    }

    #[test]
    fn the_wait_is_the_first_second_the_cost_fits() {
        let w = ten();
        for now in 100..110 {
            for prev in 0..14 {
                for cur in 0..14 {
                    for cost in 1..4 {
                        for max in [1, 3, 10, 12] {
                            assert_eq!(
                                wait(w, now, prev, cur, cost, max),
                                slow_wait(w, now, prev, cur, cost, max),
                                "now {now} prev {prev} cur {cur} cost {cost} max {max}"
                            );
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn names_parse_and_print_both_ways() {
        for algorithm in [
            Algorithm::Fixed,
            Algorithm::Sliding,
            Algorithm::Gcra,
            Algorithm::Concurrency,
        ] {
            assert_eq!(
                algorithm.as_str().parse::<Algorithm>().ok(),
                Some(algorithm)
            );
        }
        assert!("gcra ".parse::<Algorithm>().is_err());
        assert!("GCRA".parse::<Algorithm>().is_err());
        assert_eq!(Algorithm::default(), Algorithm::Fixed);
    }
}
