//! The limit that `status` and `reset` act on: a rule of the rules file
//! (or the defaults) and exactly its number of key parts, a `visitor` part
//! keyed as the service keys a visitor's address.

use std::net::{IpAddr, Ipv6Addr};
use std::time::Duration;

use tollgate::url::shown;
use tollgate::{CounterStore, Limit, Limiter, RetryPolicy, Rule, RuleSet, Visitor};

use crate::args::LimitArgs;
use crate::failure::Failure;
use crate::rules_file;

/// A limit, the limiter over its store, and the store as it may be shown.
pub(crate) struct Target {
    /// The limit named on the command line.
    pub(crate) limit: Limit,
    /// Its key parts as stored (a visitor's address as its key part).
    pub(crate) parts: Vec<String>,
    /// A limiter over the store.
    pub(crate) limiter: Limiter,
    /// The store's scheme and host (never its password).
    pub(crate) store: String,
}

impl Target {
    /// Loads the rules, builds the limit and opens the store (lazily).
    pub(crate) fn open(args: &LimitArgs) -> Result<Target, Failure> {
        let rules = rules_file::load_or_defaults(args.rules.as_deref())?;
        let (limit, parts) = limit(&rules, &args.rule, &args.parts, args.raw)?;
        let store = shown(&args.store.store);
        let opened = tollgate::open_store(&args.store.store)
            .map_err(|e| Failure::with(format_args!("cannot open the store {store}"), &e))?;
        let limiter = limiter(opened);
        Ok(Target {
            limit,
            parts,
            limiter,
            store,
        })
    }
}

/// How the CLI bounds a store call: 300 ms for each attempt in the budget
/// (a request path's 50 ms is tight for a process that has just opened its
/// store on a busy machine), failures retried twice 100 ms apart: a 1.1 s
/// budget.
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

/// The name of the key part that holds a visitor's address.
pub(crate) const VISITOR_PART: &str = "visitor";

/// The limit of rule `name` for `parts`, and its parts as stored: each
/// part the rule names [`VISITOR_PART`] read as a visitor's address unless
/// `raw`. An error names the rule's key parts when there are not as many,
/// and says what a visitor part takes when one is not an address.
fn limit(
    rules: &RuleSet,
    name: &str,
    parts: &[String],
    raw: bool,
) -> Result<(Limit, Vec<String>), Failure> {
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
    let parts = expected
        .iter()
        .zip(parts)
        .map(|(part, given)| match &**part {
            VISITOR_PART if !raw => visitor(name, given),
            _ => Ok(given.clone()),
        })
        .collect::<Result<Vec<String>, Failure>>()?;
    Ok((rule.limit(&parts)?, parts))
}

/// The key part of the visitor at `address`, as the service derives it
/// ([`Visitor`]): an IPv4 address as it is, an IPv6 address's /64 (given
/// as any address of it, or as the /64 itself), `local`.
fn visitor(rule: &str, address: &str) -> Result<String, Failure> {
    let given = address.trim_matches([' ', '\t']);
    if given == Visitor::LOCAL {
        return Ok(Visitor::local().to_string());
    }
    let network = given
        .strip_suffix("/64")
        .and_then(|ip| ip.parse::<Ipv6Addr>().ok())
        .filter(|ip| ip.to_ipv4_mapped().is_none());
    if let Some(ip) = network {
        return Ok(Visitor::from_ip(IpAddr::V6(ip)).to_string());
    }
    Visitor::parse(given).map(|v| v.to_string()).map_err(|_| {
        Failure::new(format!(
            "the `{VISITOR_PART}` part of rule `{rule}` is a visitor's address, and {} is not one \
             (an IPv4 or IPv6 address, an IPv6 /64, or `{}`); pass --raw to take it as given",
            part_shown(address),
            Visitor::LOCAL
        ))
    })
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
        match limit(&RuleSet::defaults(), name, &parts, false) {
            Ok(limit) => panic!("built {limit:?}"),
            Err(err) => err.to_string(),
        }
    }

    /// The key parts of rule `ask` for `docs` and the visitor `address`.
    fn ask_parts(address: &str, raw: bool) -> Result<Vec<String>, String> {
        let parts = ["docs".to_owned(), address.to_owned()];
        limit(&RuleSet::defaults(), "ask", &parts, raw)
            .map(|(_, parts)| parts)
            .map_err(|e| e.to_string())
    }

    #[test]
    fn a_visitor_part_is_keyed_as_the_service_keys_the_address() {
        for (given, stored) in [
            ("203.0.113.9", "203.0.113.9"),
            ("2001:db8:0:1::9", "2001:db8:0:1::/64"),
            ("2001:0DB8:0000:0001:ffff::1", "2001:db8:0:1::/64"),
            ("2001:db8:0:1::/64", "2001:db8:0:1::/64"),
            ("2001:db8:0:1:9::/64", "2001:db8:0:1::/64"),
            ("::ffff:203.0.113.9", "203.0.113.9"),
            ("local", "local"),
        ] {
            assert_eq!(
                ask_parts(given, false),
                Ok(vec!["docs".into(), stored.into()]),
                "{given}"
            );
        }
        let rule = RuleSet::defaults();
        let rule = rule.get("ask").unwrap_or_else(|e| panic!("{e}"));
        let key = rule
            .limit(&["docs", "2001:db8:0:1::/64"])
            .map(|l| l.key().to_owned());
        let parts = ask_parts("2001:db8:0:1::7", false).unwrap_or_default();
        assert_eq!(
            rule.limit(&parts).map(|l| l.key().to_owned()).ok(),
            key.ok()
        );
    }

    #[test]
    fn a_visitor_part_that_is_not_an_address_is_an_error_unless_raw() {
        for bad in [
            "",
            "nope",
            "1.2.3",
            "203.0.113.9/32",
            "2001:db8::/48",
            "::ffff:1.2.3.4/64",
        ] {
            let err = ask_parts(bad, false).err().unwrap_or_default();
            assert!(
                err.starts_with("the `visitor` part of rule `ask` is a visitor's address, and "),
                "{bad:?}: {err}"
            );
            assert!(err.ends_with("pass --raw to take it as given"), "{err}");
        }
        assert_eq!(
            ask_parts("nope", true),
            Ok(vec!["docs".into(), "nope".into()])
        );
        assert_eq!(
            ask_parts("2001:db8:0:1::9", true),
            Ok(vec!["docs".into(), "2001:db8:0:1::9".into()])
        );
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
