//! [`Unit`]: what a rule counts.

use std::fmt;
use std::sync::Arc;

use crate::Error;

/// What one unit of a rule is: a call (the default) or a named unit such as
/// `tokens`. Verdicts, diagnostics and response fields speak in it.
///
/// ```
/// use tollgate_core::Unit;
/// assert_eq!(Unit::default(), Unit::Calls);
/// assert_eq!(Unit::new("tokens")?.as_str(), "tokens");
/// assert_eq!(Unit::new("calls")?, Unit::Calls);
/// assert!(Unit::new("to kens").is_err());
/// # Ok::<(), tollgate_core::Error>(())
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq, Hash)]
pub enum Unit {
    /// One call is one unit.
    #[default]
    Calls,
    /// A unit named by the rule, e.g. `tokens`: 1 to 32 bytes of lowercase
    /// ASCII letters, digits and `-`.
    Named(Arc<str>),
}

impl Unit {
    /// The longest unit name accepted, in bytes.
    pub const MAX_LEN: usize = 32;

    /// The unit called `name`; `calls` is [`Unit::Calls`].
    pub fn new(name: &str) -> Result<Unit, Error> {
        if name == "calls" {
            return Ok(Unit::Calls);
        }
        let valid = !name.is_empty()
            && name.len() <= Unit::MAX_LEN
            && name
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
        if valid {
            Ok(Unit::Named(name.into()))
        } else {
            Err(Error::InvalidUnit(name.to_owned()))
        }
    }

    /// The unit's name: `calls`, or the named unit.
    pub fn as_str(&self) -> &str {
        match self {
            Unit::Calls => "calls",
            Unit::Named(name) => name,
        }
    }

    /// The IETF RateLimit draft's quota unit (`qu`) for this unit, when the
    /// draft defines it and it is not the default (`requests`):
    /// `content-bytes` and `concurrent-requests`.
    pub fn quota_unit(&self) -> Option<&'static str> {
        match self.as_str() {
            "content-bytes" => Some("content-bytes"),
            "concurrent-requests" => Some("concurrent-requests"),
            _ => None,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl serde::Serialize for Unit {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_lowercase_tokens_of_at_most_32_bytes_name_a_unit() {
        for bad in ["", "Tokens", "to kens", "tökens", "a:b", &"x".repeat(33)] {
            assert!(Unit::new(bad).is_err(), "accepted {bad:?}");
        }
        assert!(Unit::new(&"x".repeat(32)).is_ok());
        for draft in ["content-bytes", "concurrent-requests"] {
            assert_eq!(
                Unit::new(draft).ok().map(|u| u.quota_unit()),
                Some(Some(draft)),
                "the draft's quota unit {draft}"
            );
        }
        assert_eq!(Unit::new("tokens").ok().map(|u| u.quota_unit()), Some(None));
        assert_eq!(Unit::Calls.quota_unit(), None);
    }
}
