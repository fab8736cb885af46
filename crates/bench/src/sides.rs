//! The two sides: tollgate through its `Limiter`, and the raw ceiling with
//! the `redis` crate alone, sending the same scripts.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{SystemTime, UNIX_EPOCH};

use tollgate::redis::scripts;
use tollgate::{CheckId, Deadline, Limit, Limiter, Rule, Window};

use crate::args::Mode;
use crate::load::{Outcome, Side};

/// Counters never fill during a run (and stay exact in Lua's doubles).
pub(crate) const MAX: u64 = 1_000_000_000_000;

/// The rules of a check: `bench-0` … `bench-{n-1}`, keyed by a principal,
/// windows of a minute, an hour and a day in turn.
pub(crate) fn rules(limits: u16) -> Vec<Rule> {
    let windows = [Window::MINUTE, Window::HOUR, Window::DAY];
    (0..usize::from(limits))
        .filter_map(|i| {
            Rule::new(&format!("bench-{i}"), MAX, windows[i % windows.len()])
                .and_then(|r| r.with_key(&["principal"]))
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
}

/// The attackers of the attack workload.
pub(crate) const ATTACKERS: u64 = 100;

impl Workload {
    /// Who one check of the load generator's `principal` is for: the
    /// principal itself, or in the attack workload an attacker or a new
    /// visitor.
    fn who(&self, principal: u64) -> String {
        match self.attack {
            None => principal.to_string(),
            Some(share) => {
                // The load generator's principal doubles as a die: attackers
                // below the share, a new visitor above it.
                let roll = (principal % 1_000) as f64 / 1_000.0;
                if roll < share {
                    format!("attacker-{}", principal % ATTACKERS)
                } else {
                    format!("visitor-{}", self.fresh.fetch_add(1, Ordering::Relaxed))
                }
            }
        }
    }

    /// The limits of one check for `who`, each of the workload's cost (as an
    /// application builds them per request; the raw side takes its keys
    /// from them too).
    fn limits(&self, who: &str) -> Result<Vec<Limit>, tollgate::Error> {
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

/// The raw ceiling: the same keys and the same scripts, with the `redis`
/// crate alone over one multiplexed connection.
#[derive(Clone)]
pub(crate) struct Raw {
    pub(crate) connection: redis::aio::MultiplexedConnection,
    pub(crate) work: Workload,
    pub(crate) count: Arc<redis::Script>,
    pub(crate) reserve: Arc<redis::Script>,
    pub(crate) refund: Arc<redis::Script>,
}

impl Raw {
    /// The scripts, ready to send.
    pub(crate) fn scripts() -> [Arc<redis::Script>; 3] {
        [scripts::COUNT, scripts::RESERVE, scripts::REFUND].map(|s| Arc::new(redis::Script::new(s)))
    }
}

impl Side for Raw {
    async fn check(&self, principal: u64) -> Outcome {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        // The same deadline check as a store call, with a cutoff so far off
        // (10 s) that a loaded machine never turns it into an error: the
        // raw side has no retries to fall back on.
        let cutoff = Deadline::after(std::time::Duration::from_secs(10)).cutoff_unix_millis();
        let Ok(limits) = self.work.limits(&self.work.who(principal)) else {
            return Outcome::Error;
        };
        let keys: Vec<String> = limits
            .iter()
            .map(|l| l.counter_key(l.rule().window().index(now)))
            .collect();
        let cost = self.work.cost;
        let mut connection = self.connection.clone();
        let ttls = self.work.rules.iter().map(|r| r.window().secs() * 1_000);
        match self.work.mode {
            Mode::Count => {
                let mut call = self.count.prepare_invoke();
                call.arg(cutoff);
                for (key, ttl) in keys.iter().zip(ttls) {
                    call.key(key).arg(ttl).arg(cost);
                }
                call.key(record()).arg(RECORD_MS);
                let reply: redis::RedisResult<Vec<i64>> = call.invoke_async(&mut connection).await;
                match reply {
                    Ok(counts)
                        if counts
                            .iter()
                            .zip(self.work.rules.iter())
                            .all(|(&c, r)| c as u64 <= r.max()) =>
                    {
                        Outcome::Allowed
                    }
                    Ok(_) => Outcome::Refused,
                    Err(_) => Outcome::Error,
                }
            }
            Mode::Reserve | Mode::Settle => {
                let mut call = self.reserve.prepare_invoke();
                call.arg(cutoff);
                for ((key, ttl), rule) in keys.iter().zip(ttls).zip(self.work.rules.iter()) {
                    call.key(key).arg(ttl).arg(cost).arg(rule.max());
                }
                call.key(record()).arg(RECORD_MS);
                let reply: redis::RedisResult<Vec<i64>> = call.invoke_async(&mut connection).await;
                match reply {
                    Ok(r) if r.first() == Some(&1) => {}
                    Ok(_) => return Outcome::Refused,
                    Err(_) => return Outcome::Error,
                }
                if self.work.mode == Mode::Settle {
                    let mut call = self.refund.prepare_invoke();
                    call.arg(cutoff);
                    if let Some(key) = keys.first() {
                        call.key(key).arg(cost - cost.div_ceil(2));
                    }
                    call.key(record()).arg(RECORD_MS);
                    let reply: redis::RedisResult<Vec<i64>> =
                        call.invoke_async(&mut connection).await;
                    if reply.is_err() {
                        return Outcome::Error;
                    }
                }
                Outcome::Allowed
            }
        }
    }
}

/// The record of a raw call, as a store names it (`RECORD_PREFIX`, then
/// the call's id): the scripts record every call they apply.
fn record() -> String {
    format!("{}{}", tollgate::redis::RECORD_PREFIX, CheckId::new())
}

/// How long a raw call's record is kept: as a store under the default
/// retry policy keeps it (twice its 350 ms budget and four 20 ms skew margins).
const RECORD_MS: u64 = 780;
