//! Counter keys: `limit:<rule>:<part>:…:<part>:<window index>` (a GCRA
//! limit's one counter: `…:<part>:gcra`), injective.

use std::time::Duration;

use crate::store::MAX_COUNT;
use crate::{Algorithm, Counter, Error, Rule, gcra};

/// What a GCRA limit's counter key ends in, after `limit:<key>:`.
const GCRA_SUFFIX: &str = "gcra";
/// The last part of a concurrency limit's one counter: `limit:<key>:lease`.
const LEASE_SUFFIX: &str = "lease";

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
/// let ask = Rule::new("ask", 15, Window::DAY)?.with_key(&["project", "visitor"])?;
/// let limit = ask.limit(&["docs", "203.0.113.9"])?;
/// assert_eq!(limit.key(), "ask:docs:203.0.113.9");
/// assert_eq!(limit.counter_key(20_421), "limit:ask:docs:203.0.113.9:20421");
/// assert_eq!(ask.limit(&["a:b", "c"])?.key(), "ask:a%3Ab:c");
/// # Ok::<(), tollgate_core::Error>(())
/// ```
///
/// Keys are injective per rule: a rule declares its key parts
/// ([`Rule::with_key`]), every limit of it takes exactly that many, and two
/// different lists of parts never give the same key, whatever bytes they
/// hold (`:`, `%`, empty, unicode, control characters). Parts longer than
/// [`MAX_PART_LEN`] bytes are rejected.
///
/// A limit spends a cost on its counter: 1 unit unless set with
/// [`with_cost`](Limit::with_cost) (e.g. the tokens a call is estimated to use).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Limit {
    rule: Rule,
    /// `limit:<key>:`, so that a counter key is one copy and the index.
    stored: Box<str>,
    cost: u64,
}

impl Limit {
    /// The limit of `rule` for the given key parts; see [`Rule::limit`].
    pub fn new<S: AsRef<str>>(rule: Rule, parts: &[S]) -> Result<Limit, Error> {
        if parts.len() != rule.key_parts().len() {
            return Err(Error::KeyArity {
                rule: rule.name().to_owned(),
                expected: rule.key_parts().len(),
                found: parts.len(),
            });
        }
        // `limit:<name>`, then `:<part>` each, then `:`: one allocation
        // unless a part needs escaping.
        let mut len = KEY_PREFIX.len() + rule.name().len() + 1;
        for (index, part) in parts.iter().enumerate() {
            let part = part.as_ref();
            if part.len() > MAX_PART_LEN {
                return Err(Error::PartTooLong {
                    index,
                    len: part.len(),
                });
            }
            len += part.len() + 1;
        }
        let mut key = String::with_capacity(len);
        key.push_str(KEY_PREFIX);
        key.push_str(rule.name());
        if let Some((last, init)) = parts.split_last() {
            for part in init {
                key.push(':');
                escape_into(&mut key, part.as_ref());
            }
            key.push(':');
            key.push_str(last.as_ref());
        }
        key.push(':');
        Ok(Limit {
            rule,
            stored: key.into_boxed_str(),
            cost: 1,
        })
    }

    /// The same limit spending `cost` units per call (1 by default).
    ///
    /// # Errors
    ///
    /// [`Error::InvalidCost`] for 0, a cost over [`MAX_COUNT`], or any
    /// cost but 1 of a [concurrency](Algorithm::Concurrency) limit (a call
    /// holds one lease). A cost above the rule's max is accepted: a
    /// reservation always refuses it, and a count takes it and is over.
    pub fn with_cost(mut self, cost: u64) -> Result<Limit, Error> {
        let lease = self.rule.algorithm() == Algorithm::Concurrency;
        if cost == 0 || cost > MAX_COUNT || (lease && cost != 1) {
            return Err(Error::InvalidCost(cost));
        }
        self.cost = cost;
        Ok(self)
    }

    /// The units one call spends on this limit.
    pub fn cost(&self) -> u64 {
        self.cost
    }

    /// `limit:<key>:`: the counter key without the window index.
    pub(crate) fn stored(&self) -> &str {
        &self.stored
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
        counter_key(&self.stored, index)
    }

    /// This limit's counter at `now_secs`: the current window's key, its
    /// rule's [counter lifetime](Rule::counter_ttl), this limit's cost and
    /// its rule's max (for a shadow rule, [`MAX_COUNT`]: it is counted but
    /// never blocks a reservation).
    ///
    /// For a sliding window that is the counter with an empty previous
    /// window; [`Limiter`](crate::Limiter) lowers its max by what the
    /// previous window still counts. For GCRA it is the counter of its
    /// arrival time at the start of `now_secs` (see
    /// [`Algorithm::Gcra`](crate::Algorithm::Gcra)).
    pub fn counter(&self, now_secs: u64) -> Counter {
        self.counter_at(Duration::from_secs(now_secs), 0)
    }

    /// This limit's counter at `at` with `weighted` units of the previous
    /// window still counted (a sliding window's): its max is lowered by
    /// them (a shadow rule's stays [`MAX_COUNT`]).
    pub(crate) fn counter_at(&self, at: Duration, weighted: u64) -> Counter {
        let now_secs = at.as_secs();
        match self.rule.algorithm() {
            Algorithm::Gcra => {
                return gcra::counter(&self.rule, self.current_key(now_secs), self.cost, at);
            }
            Algorithm::Concurrency => {
                return Counter {
                    key: self.current_key(now_secs),
                    ttl: self.rule.counter_ttl(),
                    cost: 1,
                    max: self.counter_max(),
                    floor: 0,
                    prior: None,
                    lease: true,
                };
            }
            Algorithm::Fixed | Algorithm::Sliding => {}
        }
        let max = if self.rule.is_shadow() {
            MAX_COUNT
        } else {
            self.rule.max().saturating_sub(weighted)
        };
        Counter {
            key: self.current_key(now_secs),
            ttl: self.rule.counter_ttl(),
            cost: self.cost,
            max,
            floor: 0,
            prior: None,
            lease: false,
        }
    }

    /// The key of the counter a check at `now_secs` spends on: the current
    /// window's, `limit:<key>:<index>`, a GCRA limit's one counter,
    /// `limit:<key>:gcra`, or a concurrency limit's set of leases,
    /// `limit:<key>:lease`.
    pub fn current_key(&self, now_secs: u64) -> String {
        let suffix = match self.rule.algorithm() {
            Algorithm::Gcra => GCRA_SUFFIX,
            Algorithm::Concurrency => LEASE_SUFFIX,
            Algorithm::Fixed | Algorithm::Sliding => {
                return self.counter_key(self.rule.window().index(now_secs));
            }
        };
        let mut key = String::with_capacity(self.stored.len() + suffix.len());
        key.push_str(&self.stored);
        key.push_str(suffix);
        key
    }

    /// The ceiling of this limit's counter: its rule's max, or for a shadow
    /// rule [`MAX_COUNT`] (it never blocks a reservation).
    #[inline]
    fn counter_max(&self) -> u64 {
        if self.rule.is_shadow() {
            MAX_COUNT
        } else {
            self.rule.max()
        }
    }

    /// Whether this limit's cost fits on top of `count`: what
    /// [`Counter::fits`] says of its [`counter`](Limit::counter), without
    /// building the counter's key.
    pub(crate) fn fits(&self, count: u64) -> bool {
        count
            .checked_add(self.cost)
            .is_some_and(|total| total <= self.counter_max())
    }
}

/// `stored` (`limit:<key>:`) followed by the window index.
#[inline]
pub(crate) fn counter_key(stored: &str, index: u64) -> String {
    let mut digits = itoa::Buffer::new();
    let digits = digits.format(index);
    let mut out = String::with_capacity(stored.len() + digits.len());
    out.push_str(stored);
    out.push_str(digits);
    out
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

    fn rule(parts: usize) -> Rule {
        let names: Vec<String> = (0..parts).map(|i| format!("p{i}")).collect();
        let rule = Rule::new("r", 1, Window::DAY).and_then(|r| r.with_key(&names));
        rule.unwrap_or_else(|e| panic!("{e}"))
    }

    fn key(parts: &[&str]) -> String {
        let rule = rule(parts.len());
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
        let limit = rule(1).limit(&["a"]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(limit.counter_key(0), "limit:r:a:0");
        assert_eq!(limit.counter_key(20_421), "limit:r:a:20421");
        assert_eq!(
            limit.counter_key(u64::MAX),
            format!("limit:r:a:{}", u64::MAX)
        );
    }

    #[test]
    fn parts_over_256_bytes_are_rejected() {
        let rule = rule(2);
        let long = "x".repeat(MAX_PART_LEN + 1);
        let err = Limit::new(rule.clone(), &["ok", long.as_str()]);
        assert!(matches!(
            err,
            Err(Error::PartTooLong { index: 1, len: 257 })
        ));
        assert!(Limit::new(rule, &["x".repeat(MAX_PART_LEN), String::new()]).is_ok());
    }

    #[test]
    fn a_limit_takes_exactly_its_rules_number_of_parts() {
        let two = rule(2);
        assert!(two.limit(&["a", "b"]).is_ok());
        for parts in [&[][..], &["a"][..], &["a", "b", "c"][..]] {
            assert!(
                matches!(
                    two.limit(parts),
                    Err(Error::KeyArity { expected: 2, found, .. }) if found == parts.len()
                ),
                "{parts:?}"
            );
        }
        // The collision arity prevents: one part `a:b` and two parts `a`, `b`
        // spell the same key, so one rule may only ever take one of them.
        assert_eq!(key(&["a:b"]), key(&["a", "b"]));
        assert!(rule(1).limit(&["a", "b"]).is_err());
    }

    #[test]
    fn costs_are_one_by_default_and_bounded() {
        let limit = rule(0).limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(limit.cost(), 1);
        assert_eq!(limit.counter(100).cost, 1);
        let heavy = limit.clone().with_cost(MAX_COUNT);
        assert_eq!(heavy.map(|l| l.counter(100).cost).ok(), Some(MAX_COUNT));
        assert!(matches!(
            limit.clone().with_cost(0),
            Err(Error::InvalidCost(0))
        ));
        assert!(limit.with_cost(MAX_COUNT + 1).is_err());
    }

    #[test]
    fn a_limit_fits_exactly_when_its_counter_does() {
        let rule = Rule::new("r", 10, Window::DAY).unwrap_or_else(|e| panic!("{e}"));
        let shadow = rule.clone().with_shadow(true);
        for rule in [rule, shadow] {
            for cost in [1, 3, 10, 11, MAX_COUNT] {
                let limit = rule.limit::<&str>(&[]).and_then(|l| l.with_cost(cost));
                let limit = limit.unwrap_or_else(|e| panic!("{e}"));
                let counter = limit.counter(100);
                for count in [0, 7, 8, 10, MAX_COUNT - 1, MAX_COUNT, u64::MAX] {
                    assert_eq!(
                        limit.fits(count),
                        counter.fits(count),
                        "cost {cost}, count {count}, shadow {}",
                        rule.is_shadow()
                    );
                }
            }
        }
    }

    #[test]
    fn a_counter_lives_one_window_and_carries_the_max() {
        let limit = rule(1).limit(&["a"]).unwrap_or_else(|e| panic!("{e}"));
        let counter = limit.counter(86_400 * 3 + 5);
        assert_eq!(counter.key, "limit:r:a:3");
        assert_eq!(counter.ttl, Window::DAY.duration());
        assert_eq!(counter.max, 1);
    }
}
