//! The two sides: tollgate through its `Limiter`, and the raw ceiling with
//! the `redis` crate alone.

use std::sync::Arc;
use std::time::{SystemTime, UNIX_EPOCH};

use tollgate::{Limiter, Rule, Window};

use crate::args::Mode;
use crate::load::Side;

/// Counters never fill during a run (and stay exact in Lua's doubles).
pub(crate) const MAX: u64 = 1_000_000_000_000;

/// The rules of a check: `bench-0` … `bench-{n-1}`, windows of a minute, an
/// hour and a day in turn.
pub(crate) fn rules(limits: u16) -> Vec<Rule> {
    let windows = [Window::MINUTE, Window::HOUR, Window::DAY];
    (0..usize::from(limits))
        .filter_map(|i| Rule::new(&format!("bench-{i}"), MAX, windows[i % windows.len()]).ok())
        .collect()
}

/// tollgate: builds the check's limits from the principal and runs it.
#[derive(Clone)]
pub(crate) struct Tollgate {
    pub(crate) limiter: Limiter,
    pub(crate) rules: Arc<[Rule]>,
    pub(crate) mode: Mode,
}

impl Side for Tollgate {
    async fn check(&self, principal: u64) -> bool {
        let visitor = principal.to_string();
        let limits: Result<Vec<_>, _> = self.rules.iter().map(|r| r.limit(&[&visitor])).collect();
        let Ok(limits) = limits else { return false };
        let verdict = match self.mode {
            Mode::Count => self.limiter.count(&limits).await,
            Mode::Reserve => self.limiter.reserve(&limits).await,
        };
        verdict.is_ok_and(|v| v.is_allowed())
    }
}

/// The raw ceiling: the same keys and the same atomic work, with the
/// `redis` crate alone over one multiplexed connection.
#[derive(Clone)]
pub(crate) struct Raw {
    pub(crate) connection: redis::aio::MultiplexedConnection,
    pub(crate) rules: Arc<[Rule]>,
    pub(crate) mode: Mode,
    pub(crate) script: Arc<redis::Script>,
}

impl Side for Raw {
    async fn check(&self, principal: u64) -> bool {
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_secs());
        let mut connection = self.connection.clone();
        match self.mode {
            Mode::Count => {
                let mut pipe = redis::pipe();
                pipe.atomic();
                for rule in self.rules.iter() {
                    let w = rule.window();
                    let key = format!("limit:{}:{principal}:{}", rule.name(), w.index(now));
                    pipe.incr(&key, 1)
                        .pexpire(&key, (w.secs() * 1_000) as i64)
                        .ignore();
                }
                pipe.query_async::<Vec<i64>>(&mut connection).await.is_ok()
            }
            Mode::Reserve => {
                let mut call = self.script.prepare_invoke();
                for rule in self.rules.iter() {
                    let w = rule.window();
                    call.key(format!(
                        "limit:{}:{principal}:{}",
                        rule.name(),
                        w.index(now)
                    ));
                    call.arg(w.secs() * 1_000).arg(rule.max());
                }
                let reply: redis::RedisResult<Vec<i64>> = call.invoke_async(&mut connection).await;
                reply.is_ok_and(|r| r.first() == Some(&1))
            }
        }
    }
}
