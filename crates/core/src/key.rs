//! Counter keys: `limit:<rule>:<part>:…:<part>:<window index>`, injective.

use crate::{Error, Rule};

/// The longest key part accepted, in bytes.
pub const MAX_PART_LEN: usize = 256;

/// The prefix of every counter key.
pub const KEY_PREFIX: &str = "limit:";

/// One rule applied to one principal or resource: what a check counts.
///
/// The key is the rule's name followed by the parts, joined by `:`. Every part
/// but the last has `%` written as `%25` and `:` as `%3A`; the last part is
/// kept as it is, so an IPv6 visitor such as `2001:db8:0:1::/64` reads
/// naturally. For ordinary parts the counter key is therefore byte-identical
/// to `limit:<key>:<window index>`, the format other services already share:
///
/// ```
/// use tollgate_core::{Rule, Window};
/// let ask = Rule::new("ask", 15, Window::DAY)?;
/// let limit = ask.limit(&["docs", "203.0.113.9"])?;
/// assert_eq!(limit.key(), "ask:docs:203.0.113.9");
/// assert_eq!(limit.counter_key(20_421), "limit:ask:docs:203.0.113.9:20421");
/// assert_eq!(ask.limit(&["a:b", "c"])?.key(), "ask:a%3Ab:c");
/// # Ok::<(), tollgate_core::Error>(())
/// ```
///
/// Keys are injective for one rule and one number of parts: two different
/// lists of parts of the same length never give the same key, whatever bytes
/// they hold (`:`, `%`, empty, unicode, control characters). A rule should be
/// used with the same number of parts everywhere (`ask` always takes a project
/// and a visitor). Parts longer than [`MAX_PART_LEN`] bytes are rejected.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    rule: Rule,
    /// `limit:<key>:`, so that a counter key is one copy and the index.
    stored: String,
}

impl Limit {
    /// The limit of `rule` for the given key parts; see [`Rule::limit`].
    pub fn new<S: AsRef<str>>(rule: Rule, parts: &[S]) -> Result<Limit, Error> {
        let len = parts.iter().map(|p| p.as_ref().len() + 1).sum::<usize>();
        let mut key = String::with_capacity(KEY_PREFIX.len() + rule.name().len() + len + 1);
        key.push_str(KEY_PREFIX);
        key.push_str(rule.name());
        let last = parts.len().saturating_sub(1);
        for (index, part) in parts.iter().enumerate() {
            let part = part.as_ref();
            if part.len() > MAX_PART_LEN {
                return Err(Error::PartTooLong {
                    index,
                    len: part.len(),
                });
            }
            key.push(':');
            if index == last {
                key.push_str(part);
            } else {
                escape_into(&mut key, part);
            }
        }
        key.push(':');
        Ok(Limit { rule, stored: key })
    }

    /// The rule this limit applies.
    pub fn rule(&self) -> &Rule {
        &self.rule
    }

    /// The key without prefix or window, e.g. `ask:docs:203.0.113.9`.
    pub fn key(&self) -> &str {
        let end = self.stored.len().saturating_sub(1);
        self.stored.get(KEY_PREFIX.len()..end).unwrap_or_default()
    }

    /// The stored key of this limit's counter in window `index`:
    /// `limit:<key>:<index>`.
    pub fn counter_key(&self, index: u64) -> String {
        let mut digits = itoa::Buffer::new();
        let digits = digits.format(index);
        let mut out = String::with_capacity(self.stored.len() + digits.len());
        out.push_str(&self.stored);
        out.push_str(digits);
        out
    }
}

/// Appends `part` with `%` as `%25` and `:` as `%3A`.
fn escape_into(out: &mut String, part: &str) {
    let mut rest = part;
    while let Some(at) = rest.find([':', '%']) {
        out.push_str(&rest[..at]);
        out.push_str(if rest.as_bytes()[at] == b':' {
            "%3A"
        } else {
            "%25"
        });
        rest = &rest[at + 1..];
    }
    out.push_str(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Window;

    fn key(parts: &[&str]) -> String {
        let rule = Rule::new("r", 1, Window::DAY).unwrap_or_else(|e| panic!("{e}"));
        let limit = Limit::new(rule, parts).unwrap_or_else(|e| panic!("{e}"));
        limit.key().to_owned()
    }

    #[test]
    fn escapes_every_part_but_the_last() {
        assert_eq!(key(&[]), "r");
        assert_eq!(key(&[""]), "r:");
        assert_eq!(key(&["", ""]), "r::");
        assert_eq!(key(&["a:b", "c:d"]), "r:a%3Ab:c:d");
        assert_eq!(key(&["100%", "x%y"]), "r:100%25:x%y");
        assert_eq!(key(&["%3A", "z"]), "r:%253A:z");
        assert_eq!(key(&["é\u{0}\n", "ü"]), "r:é\u{0}\n:ü");
    }

    #[test]
    fn counter_keys_end_with_the_window_index() {
        let rule = Rule::new("r", 1, Window::DAY).unwrap_or_else(|e| panic!("{e}"));
        let limit = rule.limit(&["a"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(limit.counter_key(0), "limit:r:a:0");
        assert_eq!(limit.counter_key(20_421), "limit:r:a:20421");
        assert_eq!(
            limit.counter_key(u64::MAX),
            format!("limit:r:a:{}", u64::MAX)
        );
    }

    #[test]
    fn parts_over_256_bytes_are_rejected() {
        let rule = Rule::new("r", 1, Window::DAY).unwrap_or_else(|e| panic!("{e}"));
        let long = "x".repeat(MAX_PART_LEN + 1);
        let err = Limit::new(rule.clone(), &["ok", long.as_str()]);
        assert!(matches!(
            err,
            Err(Error::PartTooLong { index: 1, len: 257 })
        ));
        assert!(Limit::new(rule, &["x".repeat(MAX_PART_LEN)]).is_ok());
    }
}
