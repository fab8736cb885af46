//! The limit that `status` and `reset` act on: a rule of the rules file
//! (or the defaults) and exactly its number of key parts.

use std::time::Duration;

use tollgate::{CounterStore, Limit, Limiter, RetryPolicy, Rule, RuleSet};

use crate::args::LimitArgs;
use crate::failure::Failure;
use crate::redact::shown;
use crate::rules_file;

/// A limit, the limiter over its store, and the store as it may be shown.
pub(crate) struct Target {
    /// The limit named on the command line.
    pub(crate) limit: Limit,
    /// A limiter over the store.
    pub(crate) limiter: Limiter,
    /// The store's scheme and host (never its password).
    pub(crate) store: String,
}

impl Target {
    /// Loads the rules, builds the limit and opens the store (lazily).
    pub(crate) fn open(args: &LimitArgs) -> Result<Target, Failure> {
        let rules = rules_file::load_or_defaults(args.rules.as_deref())?;
        let limit = limit(&rules, &args.rule, &args.parts)?;
        let store = shown(&args.store.store);
        let opened = tollgate::open_store(&args.store.store)
            .map_err(|e| Failure::with(format_args!("cannot open the store {store}"), &e))?;
        let limiter = limiter(opened);
        Ok(Target {
            limit,
            limiter,
            store,
        })
    }
}

/// How the CLI bounds a store call: 300 ms per attempt (a request path's
/// 50 ms is tight for a process that has just opened its store on a busy
/// machine), 2 retries 100 ms apart: 1.1 s at worst.
pub(crate) const RETRY: RetryPolicy = RetryPolicy {
    retries: 2,
    delay: Duration::from_millis(100),
    timeout: Duration::from_millis(300),
};

/// A limiter over `store` bounded by [`RETRY`], with no local cache: every
/// answer comes from the store.
pub(crate) fn limiter(store: impl CounterStore) -> Limiter {
    Limiter::builder(store).retry(RETRY).cache(0).build()
}

/// The key parts, `docs / 203.0.113.9`, each quoted when it would not read
/// plainly (empty, spaces, control characters).
pub(crate) fn parts_shown(parts: &[String]) -> String {
    let shown: Vec<String> = parts.iter().map(|p| part_shown(p)).collect();
    shown.join(" / ")
}

/// The limit of rule `name` for `parts`, with an error naming the rule's
/// key parts when there are not as many.
fn limit(rules: &RuleSet, name: &str, parts: &[String]) -> Result<Limit, Failure> {
    let rule = rules.get(name).map_err(|_| {
        let names: Vec<&str> = rules.iter().map(Rule::name).collect();
        Failure::new(format!(
            "unknown rule `{name}`; the rules are: {}",
            names.join(", ")
        ))
    })?;
    let expected = rule.key_parts();
    if expected.len() != parts.len() {
        let takes = match expected.len() {
            0 => "no key parts".to_owned(),
            1 => format!("1 key part ({})", expected[0]),
            n => format!("{n} key parts ({})", expected.join(", ")),
        };
        return Err(Failure::new(format!(
            "rule `{name}` takes {takes}, {} given",
            parts.len()
        )));
    }
    Ok(rule.limit(parts)?)
}

/// One key part as shown: plain, or quoted with escapes when it is empty or
/// holds spaces, quotes or control characters.
pub(crate) fn part_shown(part: &str) -> String {
    let plain = !part.is_empty()
        && !part
            .chars()
            .any(|c| c.is_whitespace() || c.is_control() || matches!(c, '"' | '\\' | '/'));
    if plain {
        part.to_owned()
    } else {
        format!("{part:?}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn arity_error(name: &str, parts: &[&str]) -> String {
        let parts: Vec<String> = parts.iter().map(|p| (*p).to_owned()).collect();
        match limit(&RuleSet::defaults(), name, &parts) {
            Ok(limit) => panic!("built {limit:?}"),
            Err(err) => err.to_string(),
        }
    }

    #[test]
    fn a_wrong_number_of_parts_names_the_rules_key_parts() {
        assert_eq!(
            arity_error("ask", &["docs"]),
            "rule `ask` takes 2 key parts (project, visitor), 1 given"
        );
        assert_eq!(
            arity_error("github", &[]),
            "rule `github` takes 1 key part (org), 0 given"
        );
        assert_eq!(
            arity_error("ask-all", &["x"]),
            "rule `ask-all` takes no key parts, 1 given"
        );
        assert!(arity_error("nope", &[]).starts_with("unknown rule `nope`; the rules are: ask,"));
    }

    #[test]
    fn odd_parts_are_quoted() {
        assert_eq!(part_shown("docs"), "docs");
        assert_eq!(part_shown(""), "\"\"");
        assert_eq!(part_shown("a b\n"), "\"a b\\n\"");
    }
}
