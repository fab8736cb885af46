//! Rules: named limits, and the rule sets loaded from TOML.

use std::collections::BTreeMap;
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use crate::observe::RuleMetrics;
use crate::{Algorithm, Error, Limit, Unit, Window};

/// The longest rule name accepted, in bytes.
pub const MAX_NAME_LEN: usize = 64;

/// The largest `max` accepted: 2^53 - 1, so that every count a check can
/// compare with it is exact in a Lua number (a double) as well as in Rust.
pub const MAX_MAX: u64 = (1 << 53) - 1;

/// A named limit: at most `max` units per key in each `window` (fixed
/// windows, or a sliding one: [`Algorithm`]), for keys of a fixed number
/// of named parts.
///
/// Names (of the rule and of its key parts) are 1 to 64 bytes of ASCII
/// letters, digits, `-`, `_` and `.`, so they are safe in a counter key and
/// in a `RateLimit` header. Cloning is cheap: clones share one allocation.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct Rule(Arc<Spec>);

/// What a rule is; shared by its clones, copied when a clone is changed.
#[derive(Clone, PartialEq, Eq, Hash, serde::Serialize)]
#[serde(rename = "Rule")]
struct Spec {
    name: Arc<str>,
    max: u64,
    window: Window,
    algorithm: Algorithm,
    burst: u64,
    key: Arc<[Arc<str>]>,
    unit: Unit,
    public: bool,
    shadow: bool,
    #[serde(skip)]
    metrics: RuleMetrics,
}

impl fmt::Debug for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let spec = &*self.0;
        f.debug_struct("Rule")
            .field("name", &spec.name)
            .field("max", &spec.max)
            .field("window", &spec.window)
            .field("algorithm", &spec.algorithm)
            .field("burst", &spec.burst)
            .field("key", &spec.key)
            .field("unit", &spec.unit)
            .field("public", &spec.public)
            .field("shadow", &spec.shadow)
            .field("metrics", &spec.metrics)
            .finish()
    }
}

impl serde::Serialize for Rule {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        self.0.serialize(serializer)
    }
}

impl Rule {
    /// A rule with no key parts, counting calls, public: the name must be
    /// valid and `max` in `1..=`[`MAX_MAX`].
    ///
    /// ```
    /// use tollgate_core::{Rule, Unit, Window};
    /// let ask = Rule::new("ask", 15, Window::DAY)?.with_key(&["project", "visitor"])?;
    /// assert_eq!(ask.max(), 15);
    /// assert_eq!(ask.key_parts().len(), 2);
    /// let tokens = Rule::new("ask-tokens", 200_000, Window::DAY)?
    ///     .with_key(&["project"])?
    ///     .with_unit(Unit::new("tokens")?)
    ///     .with_public(false);
    /// assert_eq!(tokens.unit().as_str(), "tokens");
    /// assert!(Rule::new("ask", 0, Window::DAY).is_err());
    /// # Ok::<(), tollgate_core::Error>(())
    /// ```
    pub fn new(name: &str, max: u64, window: Window) -> Result<Rule, Error> {
        check_name(name, name)?;
        if max == 0 {
            return Err(Error::rule(name, "max must be at least 1"));
        }
        if max > MAX_MAX {
            return Err(Error::rule(name, format!("max must be at most {MAX_MAX}")));
        }
        Ok(Rule(Arc::new(Spec {
            name: name.into(),
            max,
            window,
            algorithm: Algorithm::Fixed,
            burst: 1,
            key: Arc::new([]),
            unit: Unit::Calls,
            public: true,
            shadow: false,
            metrics: RuleMetrics::default(),
        })))
    }

    /// The same rule with keys of these named parts, e.g. `["project",
    /// "visitor"]`: every limit of the rule then takes exactly that many.
    pub fn with_key<S: AsRef<str>>(mut self, parts: &[S]) -> Result<Rule, Error> {
        let mut names: Vec<Arc<str>> = Vec::with_capacity(parts.len());
        for part in parts {
            let part = part.as_ref();
            check_name(self.name(), part)
                .map_err(|_| Error::rule(self.name(), format!("invalid key part name {part:?}")))?;
            if names.iter().any(|n| &**n == part) {
                return Err(Error::rule(
                    self.name(),
                    format!("key part `{part}` appears twice"),
                ));
            }
            names.push(part.into());
        }
        self.spec().key = names.into();
        Ok(self)
    }

    /// The same rule counting its window as `algorithm` says
    /// ([`Algorithm::Fixed`] unless set).
    ///
    /// ```
    /// use tollgate_core::{Algorithm, Rule, Window};
    /// let ask = Rule::new("ask", 10, Window::from_secs(10)?)?.with_algorithm(Algorithm::Sliding);
    /// assert_eq!(ask.algorithm(), Algorithm::Sliding);
    /// # Ok::<(), tollgate_core::Error>(())
    /// ```
    pub fn with_algorithm(mut self, algorithm: Algorithm) -> Rule {
        if self.algorithm() != algorithm {
            let spec = self.spec();
            spec.algorithm = algorithm;
            // Its checks count under their own `algorithm` label, apart
            // from the rule it was copied from.
            spec.metrics = RuleMetrics::default();
        }
        self
    }

    /// The same rule with a GCRA burst of `burst` units: how many one
    /// call, or calls in a row, may spend at once after a quiet spell (1
    /// unless set). Only a [`Algorithm::Gcra`] rule uses it.
    ///
    /// # Errors
    ///
    /// [`Error::InvalidRule`] unless `burst` is in `1..=max`.
    pub fn with_burst(mut self, burst: u64) -> Result<Rule, Error> {
        if burst == 0 || burst > self.max() {
            return Err(Error::rule(
                self.name(),
                format!("burst must be 1 to max ({})", self.max()),
            ));
        }
        self.spec().burst = burst;
        Ok(self)
    }

    /// The same rule counting `unit`.
    pub fn with_unit(mut self, unit: Unit) -> Rule {
        self.spec().unit = unit;
        self
    }

    /// The same rule, shown to callers or not: a rule that is not public is
    /// enforced and named in its own 429, but its budget is never shown in
    /// response fields (shared budgets tell an attacker when to strike).
    pub fn with_public(mut self, public: bool) -> Rule {
        self.spec().public = public;
        self
    }

    /// The same rule, dark-launched or not: a shadow rule is counted and
    /// reported (a warning, a metric, [`Verdict::shadow_limited`](crate::Verdict::shadow_limited))
    /// but never refuses a call, in count and reserve mode alike (a shadow
    /// rule over its max does not block the other limits of a reservation).
    /// A shadow GCRA rule is charged every call, admitted or not (an
    /// enforced one is charged only what it admits), so it reports more
    /// calls over than it would refuse: an upper bound.
    pub fn with_shadow(mut self, shadow: bool) -> Rule {
        self.spec().shadow = shadow;
        self
    }

    /// The rule's own copy, to change.
    fn spec(&mut self) -> &mut Spec {
        Arc::make_mut(&mut self.0)
    }

    /// Whether the rule is a shadow rule: counted, never refusing.
    pub fn is_shadow(&self) -> bool {
        self.0.shadow
    }

    /// The rule's name, e.g. `ask`.
    pub fn name(&self) -> &str {
        &self.0.name
    }

    pub(crate) fn shared_name(&self) -> &Arc<str> {
        &self.0.name
    }

    pub(crate) fn metrics(&self) -> &RuleMetrics {
        &self.0.metrics
    }

    /// How many units one key may spend per window.
    pub fn max(&self) -> u64 {
        self.0.max
    }

    /// The window length.
    pub fn window(&self) -> Window {
        self.0.window
    }

    /// How the rule counts its window.
    pub fn algorithm(&self) -> Algorithm {
        self.0.algorithm
    }

    /// A GCRA rule's burst (1 unless set; see [`Rule::with_burst`]).
    pub fn burst(&self) -> u64 {
        self.0.burst
    }

    /// The most units one call may spend on the rule: its burst for GCRA,
    /// one lease for [`Algorithm::Concurrency`], else its max. A cost above
    /// it never fits, however long the caller waits.
    pub fn capacity(&self) -> u64 {
        match self.0.algorithm {
            Algorithm::Gcra => self.0.burst,
            Algorithm::Concurrency => 1,
            Algorithm::Fixed | Algorithm::Sliding => self.0.max,
        }
    }

    /// A [`Algorithm::Concurrency`] rule: at most `concurrency` calls in
    /// flight at once per key, each lease ending at its release or
    /// `lease` after it was taken or last renewed.
    ///
    /// ```
    /// use tollgate_core::{Rule, Window};
    /// let inflight = Rule::concurrency("ask-inflight", 2, Window::MINUTE)?.with_key(&["visitor"])?;
    /// assert_eq!(inflight.lease(), Some(std::time::Duration::from_secs(60)));
    /// # Ok::<(), tollgate_core::Error>(())
    /// ```
    ///
    /// # Errors
    ///
    /// As [`Rule::new`], with `concurrency` as the max.
    pub fn concurrency(name: &str, concurrency: u64, lease: Window) -> Result<Rule, Error> {
        Ok(Rule::new(name, concurrency, lease)?.with_algorithm(Algorithm::Concurrency))
    }

    /// A [`Algorithm::Concurrency`] rule's lease lifetime (its window);
    /// `None` for any other rule.
    pub fn lease(&self) -> Option<Duration> {
        (self.0.algorithm == Algorithm::Concurrency).then(|| self.0.window.duration())
    }

    /// How long the rule's counters live: one window from their first
    /// count for fixed windows, two for a sliding window (whose counter is
    /// read through the next window too), for GCRA a burst's worth of
    /// emission intervals past the arrival time it holds (set by every
    /// call: [`Counter::lifetime_at`](crate::Counter::lifetime_at)), and
    /// for a concurrency rule its lease (each lease's lifetime; the set
    /// lives until its latest lease ends).
    pub fn counter_ttl(&self) -> Duration {
        match self.0.algorithm {
            Algorithm::Fixed => self.0.window.duration(),
            Algorithm::Sliding => self.0.window.duration().saturating_mul(2),
            Algorithm::Gcra => crate::gcra::lifetime(self),
            Algorithm::Concurrency => self.0.window.duration(),
        }
    }

    /// The names of the key parts, in order, e.g. `["project", "visitor"]`.
    pub fn key_parts(&self) -> &[Arc<str>] {
        &self.0.key
    }

    /// What the rule counts.
    pub fn unit(&self) -> &Unit {
        &self.0.unit
    }

    /// Whether the rule's budget may be shown to callers.
    pub fn is_public(&self) -> bool {
        self.0.public
    }

    /// The limit of this rule for one principal or resource, e.g.
    /// `ask.limit(&[project, visitor])`, costing 1. See [`Limit`] for the
    /// key format.
    ///
    /// # Errors
    ///
    /// [`Error::KeyArity`] when `parts` are not as many as the rule's key
    /// parts; [`Error::PartTooLong`] for a part over [`MAX_PART_LEN`](crate::MAX_PART_LEN).
    pub fn limit<S: AsRef<str>>(&self, parts: &[S]) -> Result<Limit, Error> {
        Limit::new(self.clone(), parts)
    }
}

fn check_name(rule: &str, name: &str) -> Result<(), Error> {
    if name.is_empty() {
        return Err(Error::rule(rule, "the name is empty"));
    }
    if name.len() > MAX_NAME_LEN {
        return Err(Error::rule(
            rule,
            format!("the name is longer than {MAX_NAME_LEN} bytes"),
        ));
    }
    if let Some(bad) = name
        .chars()
        .find(|c| !(c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.')))
    {
        return Err(Error::rule(
            rule,
            format!("the name holds {bad:?}; use ASCII letters, digits, '-', '_' or '.'"),
        ));
    }
    Ok(())
}

/// The body of a rule in a file; the name comes from its table.
#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RuleBody {
    max: Option<u64>,
    window: Option<Window>,
    concurrency: Option<u64>,
    lease: Option<Window>,
    #[serde(default)]
    algorithm: Algorithm,
    burst: Option<u64>,
    #[serde(default)]
    key: Vec<String>,
    unit: Option<String>,
    public: Option<bool>,
    shadow: Option<bool>,
}

impl RuleBody {
    /// The rule's max, window and algorithm: `max` and `window` (and an
    /// `algorithm`), or `concurrency` and a `lease` (60 s unless given).
    fn shape(&self, name: &str) -> Result<(u64, Window, Algorithm), Error> {
        match (self.max, self.window, self.concurrency) {
            (None, None, Some(_)) if self.algorithm != Algorithm::Fixed => {
                Err(Error::rule(name, "a concurrency rule takes no algorithm"))
            }
            (None, None, Some(n)) => Ok((
                n,
                self.lease.unwrap_or(Window::MINUTE),
                Algorithm::Concurrency,
            )),
            (_, _, Some(_)) => Err(Error::rule(
                name,
                "give either max and window, or concurrency (and lease)",
            )),
            (_, _, None) if self.lease.is_some() => {
                Err(Error::rule(name, "lease applies to concurrency rules only"))
            }
            (Some(max), Some(window), None) => Ok((max, window, self.algorithm)),
            (None, _, None) => Err(Error::rule(name, "missing max (or concurrency)")),
            (Some(_), None, None) => Err(Error::rule(name, "missing window")),
        }
    }

    fn into_rule(self, name: &str) -> Result<Rule, Error> {
        let unit = match &self.unit {
            Some(unit) => Unit::new(unit).map_err(|e| Error::rule(name, e.to_string()))?,
            None => Unit::Calls,
        };
        let (max, window, algorithm) = self.shape(name)?;
        let rule = Rule::new(name, max, window)?.with_algorithm(algorithm);
        let rule = match (self.burst, algorithm) {
            (None, _) => rule,
            (Some(burst), Algorithm::Gcra) => rule.with_burst(burst)?,
            (Some(_), _) => {
                return Err(Error::rule(
                    name,
                    "burst applies to algorithm = \"gcra\" only",
                ));
            }
        };
        Ok(rule
            .with_key(&self.key)?
            .with_unit(unit)
            .with_public(self.public.unwrap_or(true))
            .with_shadow(self.shadow.unwrap_or(false)))
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawRule {
    name: String,
    max: Option<u64>,
    window: Option<Window>,
    concurrency: Option<u64>,
    lease: Option<Window>,
    #[serde(default)]
    algorithm: Algorithm,
    burst: Option<u64>,
    #[serde(default)]
    key: Vec<String>,
    unit: Option<String>,
    public: Option<bool>,
    shadow: Option<bool>,
}

impl TryFrom<RawRule> for Rule {
    type Error = Error;
    fn try_from(raw: RawRule) -> Result<Rule, Error> {
        let body = RuleBody {
            max: raw.max,
            window: raw.window,
            concurrency: raw.concurrency,
            lease: raw.lease,
            algorithm: raw.algorithm,
            burst: raw.burst,
            key: raw.key,
            unit: raw.unit,
            public: raw.public,
            shadow: raw.shadow,
        };
        body.into_rule(&raw.name)
    }
}

impl<'de> Deserialize<'de> for Rule {
    /// Reads `{ name, max, window, algorithm, burst, key, unit, public, shadow }` and checks it as
    /// [`Rule::new`] and its setters do.
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
/// window = "1d"                  # or whole seconds: 86400
/// algorithm = "fixed"            # or "sliding" or "gcra"; "fixed" when left out
/// # burst = 5                    # gcra only: units at once after a quiet spell (1)
/// key = ["project", "visitor"]   # the key parts; none when left out
///
/// [ask-inflight]
/// concurrency = 2                # at most 2 calls in flight at once
/// lease = "60s"                  # a lease's lifetime, unless renewed (60 s)
/// key = ["visitor"]
///
/// [ask-tokens]
/// max = 200000
/// window = "1d"
/// key = ["project"]
/// unit = "tokens"                # what one unit is; "calls" when left out
/// public = false                 # never shown in response fields
/// shadow = false                 # true: counted and reported, never refusing
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
            let rule = body.into_rule(&name)?;
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

    fn shape(set: &RuleSet, name: &str) -> (Vec<String>, String, bool) {
        let rule = set.get(name).unwrap_or_else(|e| panic!("{e}"));
        let parts = rule.key_parts().iter().map(|p| p.to_string()).collect();
        (parts, rule.unit().to_string(), rule.is_public())
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
            ("ask-tokens", 200_000, 86_400),
            ("ask-inflight", 2, 60),
            ("ask-inflight-site", 20, 60),
        ];
        assert_eq!(set.len(), expected.len());
        for (name, max, window) in expected {
            assert_eq!(get(&set, name), (max, window), "{name}");
        }
        let org = (vec!["org".to_owned()], "calls".to_owned(), true);
        assert_eq!(shape(&set, "github"), org);
        assert_eq!(shape(&set, "docs-update"), org);
        assert_eq!(
            shape(&set, "ask"),
            (
                vec!["project".into(), "visitor".into()],
                "calls".into(),
                true
            )
        );
        assert_eq!(shape(&set, "ask-burst").0, ["visitor"]);
        assert_eq!(
            shape(&set, "ask-site"),
            (vec!["project".into()], "calls".into(), false)
        );
        assert_eq!(shape(&set, "ask-all"), (vec![], "calls".into(), false));
        assert_eq!(
            shape(&set, "ask-tokens"),
            (vec!["project".into()], "tokens".into(), false)
        );
        assert_eq!(shape(&set, "ask-inflight").0, ["visitor"]);
        assert_eq!(
            shape(&set, "ask-inflight-site"),
            (vec!["project".into()], "calls".into(), false)
        );
        for name in ["ask-inflight", "ask-inflight-site"] {
            let rule = set.get(name).unwrap_or_else(|e| panic!("{e}"));
            assert_eq!(rule.algorithm(), crate::Algorithm::Concurrency, "{name}");
        }
    }

    #[test]
    fn concurrency_rules_load_with_a_lease_and_nothing_else() {
        let set =
            RuleSet::from_toml("[a]\nconcurrency = 3\n[b]\nconcurrency = 1\nlease = \"5s\"\n");
        let set = set.unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(get(&set, "a"), (3, 60), "60 s unless given");
        assert_eq!(get(&set, "b"), (1, 5));
        assert_eq!(set.get("b").map(Rule::capacity).ok(), Some(1));
        for bad in [
            "[a]\nconcurrency = 0",
            "[a]\nconcurrency = 2\nmax = 2",
            "[a]\nconcurrency = 2\nwindow = 1",
            "[a]\nconcurrency = 2\nalgorithm = \"gcra\"",
            "[a]\nconcurrency = 2\nburst = 1",
            "[a]\nmax = 2\nwindow = 1\nlease = \"5s\"",
            "[a]\nconcurrency = 2\nlease = 0",
        ] {
            assert!(RuleSet::from_toml(bad).is_err(), "accepted {bad:?}");
        }
    }

    #[test]
    fn key_units_and_visibility_load_and_are_checked() {
        let text =
            "[a]\nmax = 1\nwindow = 1\nkey = [\"x\", \"y\"]\nunit = \"bytes\"\npublic = false\n";
        let set = RuleSet::from_toml(text).unwrap_or_else(|e| panic!("{e}"));
        let (parts, unit, public) = shape(&set, "a");
        assert_eq!((parts.len(), unit.as_str(), public), (2, "bytes", false));
        assert!(!set.get("a").is_ok_and(Rule::is_shadow));
        let dark = RuleSet::from_toml("[d]\nmax = 1\nwindow = 1\nshadow = true\n");
        assert!(dark.is_ok_and(|set| set.get("d").is_ok_and(Rule::is_shadow)));
        for bad in [
            "[a]\nmax = 1\nwindow = 1\nkey = [\"x\", \"x\"]",
            "[a]\nmax = 1\nwindow = 1\nkey = [\"\"]",
            "[a]\nmax = 1\nwindow = 1\nkey = [\"a:b\"]",
            "[a]\nmax = 1\nwindow = 1\nkey = \"x\"",
            "[a]\nmax = 1\nwindow = 1\nunit = \"Tokens\"",
            "[a]\nmax = 1\nwindow = 1\npublic = \"no\"",
            "[a]\nmax = 1\nwindow = 1\nshadow = 1",
            "[a]\nmax = 9007199254740992\nwindow = 1",
        ] {
            assert!(RuleSet::from_toml(bad).is_err(), "accepted {bad:?}");
        }
        assert!(RuleSet::from_toml("[a]\nmax = 9007199254740991\nwindow = 1").is_ok());
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
    #[test]
    fn names_of_up_to_64_bytes_are_accepted() {
        let longest = "n".repeat(MAX_NAME_LEN);
        assert!(Rule::new(&longest, 1, Window::DAY).is_ok());
        assert!(Rule::new(&format!("{longest}n"), 1, Window::DAY).is_err());
        let part = Rule::new("r", 1, Window::DAY).and_then(|r| r.with_key(&[longest.as_str()]));
        assert!(part.is_ok(), "a 64-byte key part name");
    }

    #[test]
    fn a_rule_set_holds_what_is_inserted_ordered_by_name() {
        let mut set = RuleSet::default();
        assert!(set.is_empty());
        let rule =
            |name: &str, max| Rule::new(name, max, Window::DAY).unwrap_or_else(|e| panic!("{e}"));
        set.insert(rule("b", 1));
        set.insert(rule("a", 2));
        assert!(!set.is_empty());
        assert_eq!(set.len(), 2);
        set.insert(rule("b", 3));
        let names: Vec<(&str, u64)> = set.iter().map(|r| (r.name(), r.max())).collect();
        assert_eq!(
            names,
            [("a", 2), ("b", 3)],
            "ordered, the second b replacing the first"
        );
    }
}
