//! Metrics, through the `metrics` facade: the application picks the exporter.
//!
//! | metric | kind | labels |
//! |---|---|---|
//! | `tollgate_checks_total` | counter | `rule`; `algorithm`: the rule's shape, `fixed`, `sliding`, `gcra` or `concurrency` ([`Algorithm::as_str`](crate::Algorithm::as_str)); `outcome`: see below |
//! | `tollgate_store_call_seconds` | histogram | `store`, `op`: `count`, `reserve`, `refund`, `get`, `delete`, `claim`, `finish`, `release`, `renew-lease`, `end-lease`, `leases` |
//! | `tollgate_leases_total` | counter | `rule`; `event`: `acquired`, `refused` (none free), `released`, `renewed`, `reclaimed` (found expired by an acquire: its holder never released it) |
//! | `tollgate_store_errors_total` | counter | `store`, `kind`: `connection`, `timeout`, `busy`, `invalid-reply`, `backend` |
//! | `tollgate_cache_entries` | gauge | |
//! | `tollgate_breaker_open` | gauge | `store`: 1 while its breaker is open, else 0 |
//! | `tollgate_breaker_transitions_total` | counter | `store`, `to`: `open`, `closed` |
//! | `tollgate_breaker_answered_total` | counter | `store`, `outcome`: `degraded`, `unavailable`: checks answered without the store while its breaker was open |
//!
//! A check counts one outcome for each of its rules:
//!
//! | outcome | the rule's part in the check |
//! |---|---|
//! | `allowed` | the check was allowed |
//! | `limited` | this rule was over: it refused the call (the store answered) |
//! | `answered-locally` | this rule was over, and the local cache of full counters refused the call without a store round trip |
//! | `not-spent` | another rule refused a reservation: this one had room, and nothing was spent on it |
//! | `counted` | another rule refused a count: this one had room, and its cost was counted all the same |
//! | `shadow-limited` | a shadow rule that would have refused the call (it never refuses) |
//! | `degraded` | the store failed and the fail-open policy allowed the call |
//! | `unavailable` | the store failed and the fail-closed policy refused the call |
//!
//! So `limited` + `answered-locally` of a rule is how many calls that rule
//! refused, whatever else the calls were checked against.
//!
//! With no recorder installed every call is a no-op.

use std::time::Duration;

use std::fmt;
use std::hash::{Hash, Hasher};
use std::sync::{Arc, OnceLock};

use crate::{Limit, Rule, StoreError, Verdict};

/// Checks by rule, algorithm and outcome.
pub const CHECKS: &str = "tollgate_checks_total";
/// Store call latency, in seconds, by store and operation.
pub const STORE_CALL_SECONDS: &str = "tollgate_store_call_seconds";
/// Failed store calls (each attempt), by store and kind.
pub const STORE_ERRORS: &str = "tollgate_store_errors_total";
/// Entries held by the local cache of full counters.
pub const CACHE_ENTRIES: &str = "tollgate_cache_entries";
/// Whether a store's breaker is open (1) or closed (0).
pub const BREAKER_OPEN: &str = "tollgate_breaker_open";
/// A store's breaker opening or closing, by the state it went to.
pub const BREAKER_TRANSITIONS: &str = "tollgate_breaker_transitions_total";
/// Checks answered by their policy without the store, its breaker open.
pub const BREAKER_ANSWERED: &str = "tollgate_breaker_answered_total";
/// Leases of concurrency rules, by rule and event.
pub const LEASES: &str = "tollgate_leases_total";

/// What happened to leases of a concurrency rule ([`LEASES`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum LeaseEvent {
    Acquired,
    Refused,
    Released,
    Renewed,
    Reclaimed,
}

impl LeaseEvent {
    fn as_str(self) -> &'static str {
        match self {
            LeaseEvent::Acquired => "acquired",
            LeaseEvent::Refused => "refused",
            LeaseEvent::Released => "released",
            LeaseEvent::Renewed => "renewed",
            LeaseEvent::Reclaimed => "reclaimed",
        }
    }
}

/// Counts `n` leases of `rule` that `event` happened to.
pub(crate) fn lease(rule: &Rule, event: LeaseEvent, n: u64) {
    if n == 0 {
        return;
    }
    let name = metrics::SharedString::from(Arc::clone(rule.shared_name()));
    metrics::counter!(LEASES, "rule" => name, "event" => event.as_str()).increment(n);
}

/// How a check ended, for one of its rules.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(usize)]
pub(crate) enum Outcome {
    Allowed,
    Limited,
    ShadowLimited,
    Degraded,
    Unavailable,
    AnsweredLocally,
    /// Another rule refused a reservation; this one spent nothing.
    NotSpent,
    /// Another rule refused a count; this one was counted.
    Counted,
}

impl Outcome {
    const ALL: [Outcome; 8] = [
        Outcome::Allowed,
        Outcome::Limited,
        Outcome::ShadowLimited,
        Outcome::Degraded,
        Outcome::Unavailable,
        Outcome::AnsweredLocally,
        Outcome::NotSpent,
        Outcome::Counted,
    ];

    fn as_str(self) -> &'static str {
        match self {
            Outcome::Allowed => "allowed",
            Outcome::Limited => "limited",
            Outcome::ShadowLimited => "shadow-limited",
            Outcome::Degraded => "degraded",
            Outcome::Unavailable => "unavailable",
            Outcome::AnsweredLocally => "answered-locally",
            Outcome::NotSpent => "not-spent",
            Outcome::Counted => "counted",
        }
    }
}

/// Counts a check's outcome once per rule of the check (the module's
/// table): of a refused check, only the rules that were over count as
/// refusing it; a shadow rule that would have refused counts as
/// `shadow-limited`. Whether one did.
pub(crate) fn check(verdict: &Verdict, local: bool) -> bool {
    let allowed = verdict.is_allowed();
    let mut shadow_limited = false;
    for usage in verdict.usage() {
        let outcome = if usage.is_shadow_over() {
            shadow_limited = true;
            Outcome::ShadowLimited
        } else if allowed {
            Outcome::Allowed
        } else if usage.is_over() && local {
            Outcome::AnsweredLocally
        } else if usage.is_over() {
            Outcome::Limited
        } else if verdict.has_spent() {
            // Only a count spends when refused.
            Outcome::Counted
        } else {
            Outcome::NotSpent
        };
        usage.metrics().count(usage.rule(), outcome);
    }
    shadow_limited
}

/// Counts a failed check (`degraded` or `unavailable`) once per rule.
pub(crate) fn failed(limits: &[Limit], outcome: Outcome) {
    for limit in limits {
        let rule = limit.rule();
        rule.metrics().count(rule, outcome);
    }
}

/// A rule's check counters, one per outcome, labelled with the rule's
/// name and algorithm, registered with the metrics recorder the first time
/// the rule is checked (so: install the recorder before the first check).
/// Clones of a rule share them (a copy given another algorithm gets its
/// own: [`Rule::with_algorithm`]); they take no part in a rule's equality.
#[derive(Clone, Default)]
pub(crate) struct RuleMetrics(Arc<OnceLock<[metrics::Counter; Outcome::ALL.len()]>>);

impl RuleMetrics {
    fn count(&self, rule: &Rule, outcome: Outcome) {
        let counters = self.0.get_or_init(|| {
            let name = metrics::SharedString::from(Arc::clone(rule.shared_name()));
            Outcome::ALL.map(|outcome| {
                metrics::counter!(
                    CHECKS,
                    "rule" => name.clone(),
                    "algorithm" => rule.algorithm().as_str(),
                    "outcome" => outcome.as_str()
                )
            })
        });
        counters[outcome as usize].increment(1);
    }
}

impl PartialEq for RuleMetrics {
    fn eq(&self, _: &RuleMetrics) -> bool {
        true
    }
}

impl Eq for RuleMetrics {}

impl Hash for RuleMetrics {
    fn hash<H: Hasher>(&self, _: &mut H) {}
}

impl fmt::Debug for RuleMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("RuleMetrics")
    }
}

/// A store operation, as the `op` label of [`STORE_CALL_SECONDS`] names it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[repr(usize)]
#[non_exhaustive]
pub enum Op {
    /// [`CounterStore::count`](crate::CounterStore::count).
    Count,
    /// [`CounterStore::reserve`](crate::CounterStore::reserve).
    Reserve,
    /// [`CounterStore::refund`](crate::CounterStore::refund).
    Refund,
    /// [`CounterStore::get`](crate::CounterStore::get).
    Get,
    /// [`CounterStore::delete`](crate::CounterStore::delete).
    Delete,
    /// [`MarkStore::claim`](crate::MarkStore::claim).
    Claim,
    /// [`MarkStore::finish`](crate::MarkStore::finish).
    Finish,
    /// [`MarkStore::release`](crate::MarkStore::release).
    Release,
    /// [`CounterStore::renew_lease`](crate::CounterStore::renew_lease).
    RenewLease,
    /// [`CounterStore::end_lease`](crate::CounterStore::end_lease).
    EndLease,
    /// [`CounterStore::leases`](crate::CounterStore::leases).
    Leases,
}

impl Op {
    /// Every operation, in order.
    pub const ALL: [Op; 11] = [
        Op::Count,
        Op::Reserve,
        Op::Refund,
        Op::Get,
        Op::Delete,
        Op::Claim,
        Op::Finish,
        Op::Release,
        Op::RenewLease,
        Op::EndLease,
        Op::Leases,
    ];

    /// The operation's name: `count`, `reserve`, ….
    pub fn as_str(self) -> &'static str {
        match self {
            Op::Count => "count",
            Op::Reserve => "reserve",
            Op::Refund => "refund",
            Op::Get => "get",
            Op::Delete => "delete",
            Op::Claim => "claim",
            Op::Finish => "finish",
            Op::Release => "release",
            Op::RenewLease => "renew-lease",
            Op::EndLease => "end-lease",
            Op::Leases => "leases",
        }
    }
}

/// The kinds of store errors, as [`StoreError::kind`] names them.
const ERROR_KINDS: [&str; 5] = ["connection", "timeout", "busy", "invalid-reply", "backend"];

/// One store's call metrics: a latency histogram per operation and an error
/// counter per kind, registered with the metrics recorder on the first call
/// (so, as for the rules' counters: install the recorder before the first
/// check).
pub(crate) struct StoreCalls {
    store: &'static str,
    handles: OnceLock<Handles>,
}

struct Handles {
    latency: [metrics::Histogram; Op::ALL.len()],
    errors: [metrics::Counter; 5],
}

impl StoreCalls {
    /// The metrics of calls to the store named `store`.
    pub(crate) fn new(store: &'static str) -> StoreCalls {
        StoreCalls {
            store,
            handles: OnceLock::new(),
        }
    }

    /// The store's name.
    pub(crate) fn store(&self) -> &'static str {
        self.store
    }

    /// Records one attempt of `op`.
    pub(crate) fn record(&self, op: Op, took: Duration, result: Result<(), &StoreError>) {
        let store = self.store;
        let handles = self.handles.get_or_init(|| Handles {
            latency: Op::ALL.map(
                |op| metrics::histogram!(STORE_CALL_SECONDS, "store" => store, "op" => op.as_str()),
            ),
            errors: ERROR_KINDS
                .map(|kind| metrics::counter!(STORE_ERRORS, "store" => store, "kind" => kind)),
        });
        handles.latency[op as usize].record(took);
        if let Err(err) = result
            && let Some(i) = ERROR_KINDS.iter().position(|&kind| kind == err.kind())
        {
            handles.errors[i].increment(1);
        }
    }
}

impl fmt::Debug for StoreCalls {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreCalls")
            .field("store", &self.store)
            .finish_non_exhaustive()
    }
}

/// Sets the number of entries the local cache holds.
pub(crate) fn cache_entries(entries: usize) {
    metrics::gauge!(CACHE_ENTRIES).set(entries as f64);
}

/// One store's breaker metrics.
pub(crate) struct BreakerMetrics {
    store: &'static str,
}

impl BreakerMetrics {
    pub(crate) fn new(store: &'static str) -> BreakerMetrics {
        BreakerMetrics { store }
    }

    /// The store's name.
    pub(crate) fn store(&self) -> &'static str {
        self.store
    }

    /// The gauge reads 0 (closed) from the breaker's start.
    pub(crate) fn closed_at_start(&self) {
        metrics::gauge!(BREAKER_OPEN, "store" => self.store).set(0.0);
    }

    pub(crate) fn opened(&self) {
        let store = self.store;
        metrics::gauge!(BREAKER_OPEN, "store" => store).set(1.0);
        metrics::counter!(BREAKER_TRANSITIONS, "store" => store, "to" => "open").increment(1);
    }

    pub(crate) fn closed(&self) {
        let store = self.store;
        metrics::gauge!(BREAKER_OPEN, "store" => store).set(0.0);
        metrics::counter!(BREAKER_TRANSITIONS, "store" => store, "to" => "closed").increment(1);
    }

    /// A check answered without the store: allowed degraded (fail-open)
    /// or refused as unavailable.
    pub(crate) fn skipped(&self, fail_open: bool) {
        let outcome = if fail_open { "degraded" } else { "unavailable" };
        metrics::counter!(BREAKER_ANSWERED, "store" => self.store, "outcome" => outcome)
            .increment(1);
    }
}

impl fmt::Debug for BreakerMetrics {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BreakerMetrics")
            .field("store", &self.store)
            .finish()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;
    use crate::{Algorithm, Usage, Window};

    /// The [`CHECKS`] counters above 0 after `run`, as `labels → count`.
    fn counted(run: impl FnOnce()) -> BTreeMap<String, u64> {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, run);
        let mut found = BTreeMap::new();
        for (key, _, _, value) in snapshotter.snapshot().into_vec() {
            let key = key.key();
            if let (CHECKS, DebugValue::Counter(n)) = (key.name(), value)
                && n > 0
            {
                let labels: Vec<String> = key
                    .labels()
                    .map(|l| format!("{}={}", l.key(), l.value()))
                    .collect();
                found.insert(labels.join(","), n);
            }
        }
        found
    }

    /// A verdict of one usage of `rule` at `count`, over or not.
    fn verdict(rule: &Rule, count: u64, over: bool) -> Verdict {
        let limit = rule.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"));
        let usage = Usage::new(&limit, String::new(), count, 0, over);
        Verdict::new(Arc::from([usage]), true)
    }

    fn rule(name: &str, algorithm: Algorithm) -> Rule {
        Rule::new(name, 2, Window::MINUTE)
            .unwrap_or_else(|e| panic!("{e}"))
            .with_algorithm(algorithm)
    }

    #[test]
    fn checks_are_labelled_with_the_rules_algorithm() {
        let fixed = rule("f", Algorithm::Fixed);
        let sliding = rule("s", Algorithm::Sliding);
        let found = counted(|| {
            check(&verdict(&fixed, 1, false), false);
            check(&verdict(&sliding, 1, false), false);
            check(&verdict(&sliding, 3, true), false);
            check(&verdict(&fixed, 3, true), true);
            failed(
                &[sliding.limit::<&str>(&[]).unwrap_or_else(|e| panic!("{e}"))],
                Outcome::Unavailable,
            );
        });
        let expected: BTreeMap<String, u64> = [
            ("rule=f,algorithm=fixed,outcome=allowed", 1),
            ("rule=s,algorithm=sliding,outcome=allowed", 1),
            ("rule=s,algorithm=sliding,outcome=limited", 1),
            ("rule=f,algorithm=fixed,outcome=answered-locally", 1),
            ("rule=s,algorithm=sliding,outcome=unavailable", 1),
        ]
        .into_iter()
        .map(|(k, n)| (k.to_owned(), n))
        .collect();
        assert_eq!(found, expected);
    }

    #[test]
    fn a_checked_rule_given_another_algorithm_counts_under_its_own_label() {
        let fixed = rule("r", Algorithm::Fixed);
        let found = counted(|| {
            check(&verdict(&fixed, 1, false), false);
            // A copy: counted apart from `fixed`.
            let sliding = fixed.clone().with_algorithm(Algorithm::Sliding);
            check(&verdict(&sliding, 1, false), false);
            check(&verdict(&sliding, 1, false), false);
            check(&verdict(&fixed, 1, false), false);
        });
        let expected: BTreeMap<String, u64> = [
            ("rule=r,algorithm=fixed,outcome=allowed".to_owned(), 2),
            ("rule=r,algorithm=sliding,outcome=allowed".to_owned(), 2),
        ]
        .into();
        assert_eq!(found, expected);
    }
}
