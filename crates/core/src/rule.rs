//! Rules: named limits, and the rule sets loaded from TOML.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde::Deserialize;

use crate::{Error, Limit, Window};

/// The longest rule name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// The largest `max` accepted, so that `max - count` always fits an `i64`.
pub const MAX_MAX: u64 = i64::MAX as u64;

/// A named limit: at most `max` calls per key in each fixed `window`.
///
/// Names are 1 to 64 bytes of ASCII letters, digits, `-`, `_` and `.`, so they
/// are safe in a counter key and in a `RateLimit` header. Cloning is cheap.
#[derive(Clone, Debug, PartialEq, Eq, Hash, serde::Serialize)]
pub struct Rule {
    name: Arc<str>,
    max: u64,
    window: Window,
}

impl Rule {
    /// A rule, checked: the name must be valid and `max` in `1..=i64::MAX`.
    ///
    /// ```
    /// use tollgate_core::{Rule, Window};
    /// let ask = Rule::new("ask", 15, Window::DAY)?;
    /// assert_eq!(ask.max(), 15);
    /// assert!(Rule::new("ask", 0, Window::DAY).is_err());
    /// # Ok::<(), tollgate_core::Error>(())
    /// ```
    pub fn new(name: &str, max: u64, window: Window) -> Result<Rule, Error> {
        check_name(name)?;
        if max == 0 {
            return Err(Error::rule(name, "max must be at least 1"));
        }
        if max > MAX_MAX {
            return Err(Error::rule(name, format!("max must be at most {MAX_MAX}")));
        }
        Ok(Rule {
            name: name.into(),
            max,
            window,
        })
    }

    /// The rule's name, e.g. `ask`.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.name
    }

    /// How many calls one key may make per window.
    pub fn max(&self) -> u64 {
        self.max
    }

    /// The window length.
    pub fn window(&self) -> Window {
        self.window
    }

    /// The limit of this rule for one principal or resource, e.g.
    /// `ask.limit(&[project, visitor])`. See [`Limit`] for the key format.
    pub fn limit<S: AsRef<str>>(&self, parts: &[S]) -> Result<Limit, Error> {
        Limit::new(self.clone(), parts)
    }
}

fn check_name(name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::rule(name, "the name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::rule(
            name,
            format!("the name is longer than {MAX_NAME_LEN} bytes"),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(Error::rule(
            name,
            format!("the name holds {bad:?}; use ASCII letters, digits, '-', '_' or '.'"),
        ));
    }
    Ok(())
}

/// The body of a rule in a file; the name comes from its table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleBody {
    max: u64,
    window: Window,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    max: u64,
    window: Window,
}

impl TryFrom<RawRule> for Rule {
    type Error = Error;
    fn try_from(raw: RawRule) -> Result<Rule, Error> {
        Rule::new(&raw.name, raw.max, raw.window)
    }
}

impl<'de> Deserialize<'de> for Rule {
    /// Reads `{ name, max, window }` and checks it as [`Rule::new`] does.
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Rule, D::Error> {
        let raw = RawRule::deserialize(deserializer)?;
        Rule::try_from(raw).map_err(serde::de::Error::custom)
    }
}

/// A set of rules by name, as loaded from a TOML file:
///
/// ```toml
/// [ask]
/// max = 15
/// window = "1d"   # or whole seconds: 86400
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RuleSet {
    rules: BTreeMap<Arc<str>, Rule>,
}

/// The default rules of DESIGN.md, as shipped with this crate.
pub const DEFAULT_RULES_TOML: &str = include_str!("../rules.toml");

impl RuleSet {
    /// Parses and checks a rules file; every rule is validated here, at load time.
    pub fn from_toml(text: &str) -> Result<RuleSet, Error> {
        let bodies: BTreeMap<String, RuleBody> =
            toml::from_str(text).map_err(|e| Error::RulesFile(e.message().to_owned()))?;
        let mut rules = BTreeMap::new();
        for (name, body) in bodies {
            let rule = Rule::new(&name, body.max, body.window)?;
            rules.insert(rule.shared_name().clone(), rule);
        }
        Ok(RuleSet { rules })
    }

    /// The default rules of DESIGN.md ([`DEFAULT_RULES_TOML`]).
    pub fn defaults() -> RuleSet {
        // The shipped file is checked by a test; an empty set is never reached.
        RuleSet::from_toml(DEFAULT_RULES_TOML).unwrap_or_default()
    }

    /// Adds or replaces a rule.
    pub fn insert(&mut self, rule: Rule) {
        self.rules.insert(rule.shared_name().clone(), rule);
    }

    /// The rule called `name`, or [`Error::UnknownRule`].
    pub fn get(&self, name: &str) -> Result<&Rule, Error> {
        self.rules
            .get(name)
            .ok_or_else(|| Error::UnknownRule(name.to_owned()))
    }

    /// The rules, ordered by name.
    pub fn iter(&self) -> impl Iterator<Item = &Rule> {
        self.rules.values()
    }

    /// How many rules the set holds.
    pub fn len(&self) -> usize {
        self.rules.len()
    }

    /// Whether the set holds no rule.
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn get(set: &RuleSet, name: &str) -> (u64, u64) {
        let rule = set.get(name).map(|r| (r.max(), r.window().secs()));
        rule.unwrap_or_else(|e| panic!("{e}"))
    }

    #[test]
    fn shipped_defaults_match_the_design_table() {
        let set = RuleSet::from_toml(DEFAULT_RULES_TOML).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(set, RuleSet::defaults());
        let expected = [
            ("github", 60, 3_600),
            ("docs-run", 10, 86_400),
            ("page-retry", 50, 86_400),
            ("publish", 50, 86_400),
            ("docs-update", 15, 86_400),
            ("ask-burst", 20, 60),
            ("ask", 15, 86_400),
            ("ask-site", 500, 86_400),
            ("ask-all", 5_000, 86_400),
        ];
        assert_eq!(set.len(), expected.len());
        for (name, max, window) in expected {
            assert_eq!(get(&set, name), (max, window), "{name}");
        }
    }

    #[test]
    fn windows_load_as_seconds_or_units() {
        let set = RuleSet::from_toml("[a]\nmax = 1\nwindow = 90\n[b]\nmax = 2\nwindow = \"2h\"\n");
        let set = set.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(get(&set, "a"), (1, 90));
        assert_eq!(get(&set, "b"), (2, 7_200));
    }

    #[test]
    fn invalid_rules_fail_at_load_time() {
        let long = format!("[{}]\nmax = 1\nwindow = 1", "n".repeat(MAX_NAME_LEN + 1));
        let cases = [
            "[a]\nmax = 0\nwindow = \"1d\"",
            "[a]\nmax = 1\nwindow = 0",
            "[a]\nmax = 1\nwindow = \"0h\"",
            "[a]\nmax = -1\nwindow = 1",
            "[a]\nmax = 1\nwindow = -5",
            "[a]\nmax = 1\nwindow = \"soon\"",
            "[a]\nmax = 1",
            "[a]\nmax = 1\nwindow = 1\nburst = 3",
            "[\"\"]\nmax = 1\nwindow = 1",
            "[\"a:b\"]\nmax = 1\nwindow = 1",
            "[a]\nmax = 9223372036854775808\nwindow = 1",
            "not toml at all",
            long.as_str(),
        ];
        for text in cases {
            assert!(RuleSet::from_toml(text).is_err(), "accepted {text:?}");
        }
    }

    #[test]
    fn a_rule_deserializes_from_name_max_window() {
        let rule: Rule = toml::from_str("name = \"ask\"\nmax = 15\nwindow = \"1d\"")
            .unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(
            (rule.name(), rule.max(), rule.window()),
            ("ask", 15, Window::DAY)
        );
        let bad: Result<Rule, _> = toml::from_str("name = \"\"\nmax = 15\nwindow = \"1d\"");
        assert!(bad.is_err());
    }

    #[test]
    fn unknown_rule_is_a_typed_error() {
        assert!(
            matches!(RuleSet::defaults().get("nope"), Err(Error::UnknownRule(n)) if n == "nope")
        );
    }
}
