//! Two of the sides: tollgate through its `Limiter`, and the raw ceiling
//! with the `redis` crate alone, sending the same scripts (the third, the
//! seed, is in `seed.rs`).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tollgate::redis::scripts;
use tollgate::{Algorithm, CheckId, Deadline, Limit, Limiter, Rule, Window};

use crate::args::Mode;
use crate::load::{Outcome, Side};

/// Counters never fill during a run (and stay exact in Lua's doubles).
pub(crate) const MAX: u64 = 1_000_000_000_000;

/// The rules of a check: `bench-0` … `bench-{n-1}`, keyed by a principal,
/// windows of a minute, an hour and a day in turn.
pub(crate) fn rules(limits: u16) -> Vec<Rule> {
    shaped_rules("bench", limits, Algorithm::Fixed)
}

/// [`rules`] named `{name}-0` … `{name}-{n-1}` and counted as `algorithm`.
/// A GCRA rule's burst is its max: one unit every µs (`⌈W / MAX⌉`), a
/// bucket of `MAX` µs (11.6 days) that a run never fills, as it never fills
/// a window's counter.
pub(crate) fn shaped_rules(name: &str, limits: u16, algorithm: Algorithm) -> Vec<Rule> {
    let windows = [Window::MINUTE, Window::HOUR, Window::DAY];
    (0..usize::from(limits))
        .filter_map(|i| {
            Rule::new(&format!("{name}-{i}"), MAX, windows[i % windows.len()])
                .and_then(|r| r.with_key(&["principal"]))
                .map(|r| r.with_algorithm(algorithm))
                .and_then(|r| match algorithm {
                    Algorithm::Gcra => r.with_burst(MAX),
                    _ => Ok(r),
                })
                .ok()
        })
        .collect()
}

/// The attack workload's rules: the seed's Ask AI check, `ask` at 15 a
/// day per visitor, the others too roomy to fill in a run.
pub(crate) fn attack_rules() -> Vec<Rule> {
    let rule = |name: &str, max: u64, window: Window, key: &[&str]| {
        Rule::new(name, max, window)
            .and_then(|r| r.with_key(key))
            .ok()
    };
    [
        rule("ask-burst", MAX, Window::MINUTE, &["visitor"]),
        rule("ask", 15, Window::DAY, &["project", "visitor"]),
        rule("ask-site", MAX, Window::DAY, &["project"]),
        rule("ask-all", MAX, Window::DAY, &[]),
    ]
    .into_iter()
    .flatten()
    .collect()
}

/// What a check is made of: the principal of the load generator maps to
/// the key parts of every rule.
#[derive(Clone, Debug)]
pub(crate) struct Workload {
    pub(crate) rules: Arc<[Rule]>,
    pub(crate) mode: Mode,
    pub(crate) cost: u64,
    /// `Some(share)`: the attack workload, `share` of the checks from the
    /// 100 attackers (principals `0..100`), the rest from new visitors.
    pub(crate) attack: Option<f64>,
    /// The next new visitor of the attack workload.
    pub(crate) fresh: Arc<AtomicU64>,
    /// This run's name for its new visitors (a random id), so that a run
    /// against a server that kept an earlier run's counters meets new
    /// visitors still, not visitors over their limits.
    pub(crate) run: Arc<str>,
}

/// The attackers of the attack workload.
pub(crate) const ATTACKERS: u64 = 100;

impl Workload {
    /// Who one check of the load generator's `principal` is for: the
    /// principal itself, or in the attack workload an attacker or a new
    /// visitor.
    pub(crate) fn who(&self, principal: u64) -> String {
        match self.attack {
            None => principal.to_string(),
            Some(share) => {
                // The load generator's principal doubles as a die: attackers
                // below the share, a new visitor above it.
                let roll = (principal % 1_000) as f64 / 1_000.0;
                if roll < share {
                    format!("attacker-{}", principal % ATTACKERS)
                } else {
                    let n = self.fresh.fetch_add(1, Ordering::Relaxed);
                    format!("visitor-{}-{n}", self.run)
                }
            }
        }
    }

    /// The limits of one check for `who`, each of the workload's cost (as an
    /// application builds them per request; the raw and seed sides take
    /// their keys from them too).
    pub(crate) fn limits(&self, who: &str) -> Result<Vec<Limit>, tollgate::Error> {
        let site = "docs";
        self.rules
            .iter()
            .enumerate()
            .map(|(i, rule)| {
                let limit = match (self.attack, i) {
                    (None, _) => rule.limit(&[who]),
                    (Some(_), 0) => rule.limit(&[who]),
                    (Some(_), 1) => rule.limit(&[site, who]),
                    (Some(_), 2) => rule.limit(&[site]),
                    (Some(_), _) => rule.limit::<&str>(&[]),
                };
                limit.and_then(|l| l.with_cost(self.cost))
            })
            .collect()
    }
}

/// tollgate: builds the check's limits from the principal and runs it.
#[derive(Clone)]
pub(crate) struct Tollgate {
    pub(crate) limiter: Limiter,
    pub(crate) work: Workload,
}

impl Side for Tollgate {
    async fn check(&self, principal: u64) -> Outcome {
        let Ok(limits) = self.work.limits(&self.work.who(principal)) else {
            return Outcome::Error;
        };
        let verdict = match self.work.mode {
            Mode::Count => self.limiter.count(&limits).await,
            Mode::Reserve | Mode::Settle => self.limiter.reserve(&limits).await,
        };
        let Ok(verdict) = verdict else {
            return Outcome::Error;
        };
        if !verdict.is_allowed() {
            return if verdict.is_local() {
                Outcome::RefusedLocally
            } else {
                Outcome::Refused
            };
        }
        if self.work.mode == Mode::Settle {
            // As an AI route settles its token budget: one rule, one refund.
            let used = self.work.cost.div_ceil(2);
            let Some(first) = self.work.rules.first() else {
                return Outcome::Error;
            };
            if self
                .limiter
                .settle(&verdict, first.name(), used)
                .await
                .is_err()
            {
                return Outcome::Error;
            }
        }
        Outcome::Allowed
    }
}

/// The raw ceiling: the same keys and the same script, with the `redis`
/// crate alone over one multiplexed connection, one script call per check.
#[derive(Clone)]
pub(crate) struct Raw {
    pub(crate) connection: redis::aio::MultiplexedConnection,
    pub(crate) work: Workload,
    pub(crate) check: Arc<redis::Script>,
}

impl Raw {
    /// The script, ready to send.
    pub(crate) fn script() -> Arc<redis::Script> {
        Arc::new(redis::Script::new(scripts::CHECK))
    }

    /// One call of the script: `op` on `keys`, recorded, counter `i`'s
    /// argument written by `each(i)`; the call's own reply.
    async fn call(
        &self,
        op: &str,
        keys: &[String],
        each: impl Fn(usize) -> String,
    ) -> Option<Vec<i64>> {
        // The same deadline check as a store call, with a cutoff so far off
        // (10 s) that a loaded machine never turns it into an error: the
        // raw side has no retries to fall back on.
        let deadline = Deadline::after(std::time::Duration::from_secs(10));
        let mut call = self.check.prepare_invoke();
        for key in keys {
            call.key(key);
        }
        // The call's record: its id's field in the hash of its deadline's
        // 100 ms, kept as a store under the default policy keeps it.
        call.key(format!(
            "{}{RECORD_MS}.{}",
            tollgate::redis::RECORD_PREFIX,
            deadline.unix_millis() / 100
        ));
        // One hash, how long it is kept, and this call's id in it.
        call.arg(1)
            .arg(2 * RECORD_MS + 100)
            .arg(1)
            .arg(CheckId::new().to_string());
        call.arg(format!("{op}{}.1", keys.len()))
            .arg(deadline.cutoff_unix_millis());
        for i in 0..keys.len() {
            call.arg(each(i));
        }
        let mut connection = self.connection.clone();
        let replies: redis::RedisResult<Vec<Vec<i64>>> = call.invoke_async(&mut connection).await;
        let mut replies = replies.ok()?;
        replies.pop().filter(|_| replies.is_empty())
    }
}

impl Side for Raw {
    async fn check(&self, principal: u64) -> Outcome {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let Ok(limits) = self.work.limits(&self.work.who(principal)) else {
            return Outcome::Error;
        };
        let keys: Vec<String> = limits
            .iter()
            .map(|l| l.counter_key(l.rule().window().index(now)))
            .collect();
        let cost = self.work.cost;
        let rules = &self.work.rules;
        let ttl = |i: usize| rules.get(i).map_or(0, |r| r.window().secs() * 1_000);
        let max = |i: usize| rules.get(i).map_or(0, Rule::max);
        match self.work.mode {
            Mode::Count => {
                let reply = self
                    .call("c", &keys, |i| format!("{}:{cost}", ttl(i)))
                    .await;
                match reply {
                    Some(counts) if counts.iter().enumerate().all(|(i, &c)| c as u64 <= max(i)) => {
                        Outcome::Allowed
                    }
                    Some(_) => Outcome::Refused,
                    None => Outcome::Error,
                }
            }
            Mode::Reserve | Mode::Settle => {
                let reply = self
                    .call("r", &keys, |i| format!("{}:{cost}:{}", ttl(i), max(i)))
                    .await;
                match reply {
                    Some(r) if r.first() == Some(&1) => {}
                    Some(_) => return Outcome::Refused,
                    None => return Outcome::Error,
                }
                let back = cost - cost.div_ceil(2);
                if self.work.mode == Mode::Settle && back > 0 {
                    // As the limiter settles: nothing to send for nothing back.
                    let first = &keys[..keys.len().min(1)];
                    let reply = self.call("f", first, |_| back.to_string()).await;
                    if reply.is_none() {
                        return Outcome::Error;
                    }
                }
                Outcome::Allowed
            }
        }
    }
}

/// A raw call's record lifetime: as a store's under the default retry
/// policy (twice its 350 ms budget and four 20 ms skew margins). Its hash
/// is kept twice this and 100 ms, as a store keeps it.
const RECORD_MS: u64 = 780;
