//! Fixed-window math: pure functions of the time in whole Unix seconds.

use std::fmt;
use std::num::NonZeroU64;
use std::str::FromStr;
use std::time::Duration;

use crate::Error;

/// The length of a fixed window, in whole seconds: never zero, at most 366 days.
///
/// Window `k` covers the Unix seconds `[k·len, (k+1)·len)`, so a day is the UTC
/// day and an hour starts on the hour.
///
/// In a rules file a window is written as whole seconds (`window = 3600`) or as
/// a number with a unit, `s`, `m`, `h` or `d` (`window = "1h"`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Window(NonZeroU64);

impl Window {
    /// The longest window accepted: 366 days.
    pub const MAX_SECS: u64 = 366 * 86_400;
    /// One second.
    pub const SECOND: Window = Window(NonZeroU64::MIN);
    /// One minute.
    pub const MINUTE: Window = Window::const_secs(60);
    /// One hour.
    pub const HOUR: Window = Window::const_secs(3_600);
    /// One UTC day.
    pub const DAY: Window = Window::const_secs(86_400);

    const fn const_secs(secs: u64) -> Window {
        match NonZeroU64::new(secs) {
            Some(secs) => Window(secs),
            None => Window::SECOND,
        }
    }

    /// A window of `secs` seconds; an error when zero or over [`Window::MAX_SECS`].
    pub fn from_secs(secs: u64) -> Result<Window, Error> {
        match NonZeroU64::new(secs) {
            Some(n) if secs <= Window::MAX_SECS => Ok(Window(n)),
            _ => Err(Error::InvalidWindow(secs.to_string())),
        }
    }

    /// The window's length in seconds.
    pub const fn secs(self) -> u64 {
        self.0.get()
    }

    /// The window's length as a [`Duration`]; also the lifetime given to its counters.
    pub const fn duration(self) -> Duration {
        Duration::from_secs(self.secs())
    }

    /// The index of the window holding `now_secs`: `floor(now_secs / len)`.
    pub const fn index(self, now_secs: u64) -> u64 {
        now_secs / self.secs()
    }

    /// The first second of window `index`.
    pub const fn start(self, index: u64) -> u64 {
        index.saturating_mul(self.secs())
    }

    /// The first second after window `index`, when its counters reset.
    pub const fn end(self, index: u64) -> u64 {
        index.saturating_add(1).saturating_mul(self.secs())
    }

    /// When the window holding `now_secs` resets, in Unix seconds.
    pub const fn reset(self, now_secs: u64) -> u64 {
        self.end(self.index(now_secs))
    }

    /// Whole seconds from `now_secs` until the window resets: in `1..=len`.
    ///
    /// With the true time anywhere in the second `now_secs`, this is the wait
    /// rounded up, so a caller who waits this long is in the next window.
    pub const fn retry_after(self, now_secs: u64) -> u64 {
        let wait = self.reset(now_secs).saturating_sub(now_secs);
        if wait == 0 { 1 } else { wait }
    }
}

impl fmt::Display for Window {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.secs();
        match [(86_400, 'd'), (3_600, 'h'), (60, 'm')]
            .into_iter()
            .find(|(unit, _)| secs.is_multiple_of(*unit))
        {
            Some((unit, suffix)) => write!(f, "{}{suffix}", secs / unit),
            None => write!(f, "{secs}s"),
        }
    }
}

impl FromStr for Window {
    type Err = Error;

    /// Parses whole seconds (`"90"`) or a number with a unit (`"90s"`, `"5m"`, `"1h"`, `"1d"`).
    fn from_str(text: &str) -> Result<Window, Error> {
        let invalid = || Error::InvalidWindow(text.to_owned());
        let (digits, unit) = match text.char_indices().last() {
            Some((at, c)) if c.is_ascii_alphabetic() => (&text[..at], c),
            _ => (text, 's'),
        };
        let scale = match unit {
            's' => 1,
            'm' => 60,
            'h' => 3_600,
            'd' => 86_400,
            _ => return Err(invalid()),
        };
        if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
            return Err(invalid());
        }
        let count: u64 = digits.parse().map_err(|_| invalid())?;
        let secs = count.checked_mul(scale).ok_or_else(invalid)?;
        Window::from_secs(secs).map_err(|_| invalid())
    }
}

impl<'de> serde::Deserialize<'de> for Window {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Window, D::Error> {
        struct Visitor;
        impl serde::de::Visitor<'_> for Visitor {
            type Value = Window;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("whole seconds or a string such as \"30s\", \"5m\", \"1h\", \"1d\"")
            }
            fn visit_u64<E: serde::de::Error>(self, secs: u64) -> Result<Window, E> {
                Window::from_secs(secs).map_err(E::custom)
            }
            fn visit_i64<E: serde::de::Error>(self, secs: i64) -> Result<Window, E> {
                let secs = u64::try_from(secs)
                    .map_err(|_| E::custom(Error::InvalidWindow(secs.to_string())))?;
                self.visit_u64(secs)
            }
            fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<Window, E> {
                text.parse().map_err(E::custom)
            }
        }
        deserializer.deserialize_any(Visitor)
    }
}

impl serde::Serialize for Window {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_seconds_and_units() {
        assert_eq!("90".parse::<Window>().ok(), Window::from_secs(90).ok());
        assert_eq!("90s".parse::<Window>().ok(), Window::from_secs(90).ok());
        assert_eq!("1m".parse::<Window>().ok(), Some(Window::MINUTE));
        assert_eq!("1h".parse::<Window>().ok(), Some(Window::HOUR));
        assert_eq!("1d".parse::<Window>().ok(), Some(Window::DAY));
        assert_eq!(
            "366d".parse::<Window>().ok().map(Window::secs),
            Some(Window::MAX_SECS)
        );
    }

    #[test]
    fn rejects_zero_overlong_and_malformed_windows() {
        for bad in [
            "",
            "0",
            "0d",
            "367d",
            "d",
            "1w",
            "-1",
            "1.5h",
            " 1h",
            "1hh",
            "99999999999999999999d",
            "１h",
        ] {
            assert!(bad.parse::<Window>().is_err(), "{bad:?} should be rejected");
        }
    }

    #[test]
    fn displays_in_the_largest_whole_unit() {
        assert_eq!(Window::DAY.to_string(), "1d");
        assert_eq!(
            Window::from_secs(7_200).map(|w| w.to_string()).ok(),
            Some("2h".into())
        );
        assert_eq!(
            Window::from_secs(90).map(|w| w.to_string()).ok(),
            Some("90s".into())
        );
    }

    #[test]
    fn a_day_is_the_utc_day() {
        // 2025-11-29T00:00:00Z is day 20421.
        let midnight = 20_421 * 86_400;
        assert_eq!(Window::DAY.index(midnight), 20_421);
        assert_eq!(Window::DAY.index(midnight - 1), 20_420);
        assert_eq!(Window::DAY.retry_after(midnight), 86_400);
        assert_eq!(Window::DAY.retry_after(midnight - 1), 1);
    }

    #[test]
    fn math_saturates_at_the_end_of_time() {
        assert_eq!(Window::SECOND.end(u64::MAX), u64::MAX);
        assert_eq!(Window::SECOND.retry_after(u64::MAX), 1);
    }
}
