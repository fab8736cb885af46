//! `--accuracy`, second part: what a sliding window and GCRA cost, as
//! checks/s of fixed windows, sliding windows and GCRA at 1 and 4 limits
//! (reserve) on one store, the shapes alternating (A B C C B A), with the
//! store calls of each check.

use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;
use tollgate::{Algorithm, CheckId, Hooked, Limiter, Store};

use crate::args::Mode;
use crate::calls::Calls;
use crate::load::{self, Keys};
use crate::report::{Spread, median};
use crate::server::{self, Process};
use crate::sides::{self, Tollgate, Workload};

/// The limits per check compared.
const LIMITS: [u16; 2] = [1, 4];
/// The shapes compared, in the order of even turns (odd turns run them
/// backwards); each is compared with the first.
const SHAPES: [Algorithm; 3] = [Algorithm::Fixed, Algorithm::Sliding, Algorithm::Gcra];

/// How the rounds run.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Plan {
    pub(crate) concurrency: usize,
    pub(crate) duration: Duration,
    pub(crate) warmup: Duration,
    pub(crate) rounds: u32,
    pub(crate) keys: Keys,
    pub(crate) cost: u64,
}

/// One measured round of one shape.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Round {
    pub(crate) limits: u16,
    pub(crate) shape: Algorithm,
    /// The turn, from 0, in which a round of each shape ran.
    pub(crate) turn: u32,
    /// Successful checks per second.
    pub(crate) checks_per_sec: f64,
    /// 99th percentile latency, in milliseconds.
    pub(crate) p99_ms: f64,
    /// Failed checks.
    pub(crate) errors: u64,
    /// Store calls per check (reservations and reads, retries included):
    /// its round trips.
    pub(crate) calls_per_check: Option<f64>,
    /// Of those, reads of a sliding limit's previous counter.
    pub(crate) reads_per_check: Option<f64>,
    /// CPU time redis-server spent per check, in microseconds (a server
    /// on this machine only; 10 ms ticks).
    pub(crate) server_cpu_us_per_check: Option<f64>,
    /// CPU time this process (load generator and client) spent per check,
    /// in microseconds.
    pub(crate) client_cpu_us_per_check: Option<f64>,
}

/// A shape's checks/s over fixed windows', at one number of limits.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Ratio {
    pub(crate) limits: u16,
    /// The shape over fixed windows.
    pub(crate) shape: Algorithm,
    /// Median over median.
    pub(crate) checks_per_sec: Option<f64>,
    /// Each round of the shape over the fixed round of its turn.
    pub(crate) paired: Option<Spread>,
}

/// Every round and the ratios.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Throughput {
    pub(crate) rounds: Vec<Round>,
    pub(crate) ratios: Vec<Ratio>,
    /// The plan, for the table's heading.
    #[serde(skip)]
    plan: Option<Plan>,
}

/// One shape's side: a limiter over `store` counting its calls.
struct Shaped {
    shape: Algorithm,
    side: Tollgate,
    calls: Arc<Calls>,
}

impl Shaped {
    fn new(store: &Arc<dyn Store>, shape: Algorithm, limits: u16, cost: u64) -> Shaped {
        let calls = Arc::new(Calls::default());
        let store = Hooked::around(Arc::clone(store), Arc::clone(&calls));
        let work = Workload {
            rules: sides::shaped_rules(&format!("bench-{shape}"), limits, shape).into(),
            mode: Mode::Reserve,
            cost,
            attack: None,
            fresh: Arc::default(),
            run: CheckId::new().to_string().into(),
        };
        Shaped {
            shape,
            side: Tollgate {
                limiter: Limiter::new(store),
                work,
            },
            calls,
        }
    }

    /// One measured round, with the store calls made during it and the
    /// CPU time of `server` and this process.
    async fn round(&self, limits: u16, turn: u32, plan: &Plan, server: Option<&Process>) -> Round {
        let client = server::client();
        let cpu = (server.map(Process::cpu_ticks), Some(client.cpu_ticks()));
        let before = self.calls.tally();
        let sample = load::run(&self.side, plan.concurrency, plan.duration, plan.keys).await;
        let calls = self.calls.tally().since(before);
        let ticks = (
            server::since(server, cpu.0),
            server::since(Some(&client), cpu.1),
        );
        let checks = sample.checks + sample.errors;
        let per_check = |n: u64| (checks > 0).then(|| n as f64 / checks as f64);
        let us = |ticks: Option<u64>| ticks.and_then(|t| per_check(t * 10_000));
        Round {
            limits,
            shape: self.shape,
            turn,
            checks_per_sec: sample.rate(),
            p99_ms: sample.millis(0.99),
            errors: sample.errors,
            calls_per_check: per_check(calls.total()),
            reads_per_check: per_check(calls.get),
            server_cpu_us_per_check: us(ticks.0),
            client_cpu_us_per_check: us(ticks.1),
        }
    }
}

/// For 1 and then 4 limits: a fresh limiter per shape, warmed up, then
/// `plan.rounds` rounds of each, fixed, sliding and GCRA alternating A B C C
/// B A; with the CPU time of `server`, a redis-server on this machine, when
/// known.
pub(crate) async fn measure(
    store: &Arc<dyn Store>,
    plan: &Plan,
    server: Option<&Process>,
) -> Throughput {
    let mut rounds = Vec::new();
    for limits in LIMITS {
        let sides: Vec<Shaped> = SHAPES
            .iter()
            .map(|&shape| Shaped::new(store, shape, limits, plan.cost))
            .collect();
        if !plan.warmup.is_zero() {
            for side in &sides {
                load::run(&side.side, plan.concurrency, plan.warmup, plan.keys).await;
            }
        }
        for turn in 0..plan.rounds.max(1) {
            // Fixed first in even turns, GCRA first in odd ones (A B C C B
            // A …), so that a trend in the machine's load favours none.
            let order: Vec<&Shaped> = match turn % 2 {
                0 => sides.iter().collect(),
                _ => sides.iter().rev().collect(),
            };
            for side in order {
                rounds.push(side.round(limits, turn, plan, server).await);
            }
        }
        eprintln!("accuracy: checks/s at {limits} limit(s) done");
    }
    let ratios = LIMITS
        .iter()
        .flat_map(|&l| SHAPES[1..].iter().map(move |&shape| (l, shape)))
        .map(|(l, shape)| ratio(&rounds, l, shape))
        .collect();
    Throughput {
        rounds,
        ratios,
        plan: Some(*plan),
    }
}

/// `shape` over fixed at `limits`, from `rounds` in the order run.
fn ratio(rounds: &[Round], limits: u16, shape: Algorithm) -> Ratio {
    let rates = |shape: Algorithm| {
        rounds
            .iter()
            .filter(|r| r.limits == limits && r.shape == shape)
            .map(|r| r.checks_per_sec)
            .collect::<Vec<_>>()
    };
    let fixed = median(rates(Algorithm::Fixed)).filter(|f| *f > 0.0);
    let other = median(rates(shape));
    let of = |shape: Algorithm, turn: u32| {
        rounds
            .iter()
            .find(|r| r.limits == limits && r.shape == shape && r.turn == turn)
            .map(|r| r.checks_per_sec)
    };
    let pairs = rounds
        .iter()
        .filter(|r| r.limits == limits && r.shape == shape)
        .filter_map(|r| {
            let fixed = of(Algorithm::Fixed, r.turn).filter(|f| *f > 0.0)?;
            Some(r.checks_per_sec / fixed)
        })
        .collect();
    Ratio {
        limits,
        shape,
        checks_per_sec: other.zip(fixed).map(|(s, f)| s / f),
        paired: Spread::of(pairs),
    }
}

impl Throughput {
    /// The rounds as a table, then the ratios.
    pub(crate) fn table(&self) -> String {
        let mut out = String::new();
        if let Some(plan) = &self.plan {
            out.push_str(&format!(
                "checks/s: reserve, cost {}, {} in flight, {} keys, {} s per round, {} turn(s) of a round per shape (A B C C B A), rules of 1 min, 1 h, 1 d windows in turn (GCRA: one unit per µs, burst {})\n",
                plan.cost,
                plan.concurrency,
                plan.keys.count,
                plan.duration.as_secs_f64(),
                plan.rounds.max(1),
                sides::MAX
            ));
        }
        out.push_str(
            "limits  shape      checks/s    p99 ms   errors  store calls/check  reads/check  server µs/check  client µs/check\n",
        );
        let per = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.4}"));
        let us = |v: Option<f64>| v.map_or_else(|| "-".to_owned(), |v| format!("{v:.2}"));
        for r in &self.rounds {
            out.push_str(&format!(
                "{:>6}  {:<8} {:>10.0} {:>9.3} {:>8} {:>18} {:>12} {:>16} {:>16}\n",
                r.limits,
                r.shape.as_str(),
                r.checks_per_sec,
                r.p99_ms,
                r.errors,
                per(r.calls_per_check),
                per(r.reads_per_check),
                us(r.server_cpu_us_per_check),
                us(r.client_cpu_us_per_check)
            ));
        }
        for ratio in &self.ratios {
            let median = ratio
                .checks_per_sec
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.3}"));
            out.push_str(&format!(
                "{} / fixed, {} limit(s): checks/s {median} (median over median)",
                ratio.shape.as_str(),
                ratio.limits
            ));
            if let Some(p) = ratio.paired {
                out.push_str(&format!(
                    "; turn by turn: median {:.3}, spread {:.3} to {:.3}",
                    p.median, p.min, p.max
                ));
            }
            out.push('\n');
        }
        out.push_str(
            "note: a read is a separate `get` of a sliding limit's previous window's counter. None is sent\n\
             now: until the limiter keeps that count (once the window ended more than 6 s before: 5 s or\n\
             its check budget if longer, and 1 s), the check sends it to the store as a prior, read in the\n\
             same script, statement or transaction (Redis Cluster reads a prior in another slot first,\n\
             inside the store's call: a second round trip, not counted here).\n\
             GCRA keeps one counter per limit (its arrival time) and reads nothing.\n",
        );
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(limits: u16, shape: Algorithm, turn: u32, checks_per_sec: f64) -> Round {
        Round {
            limits,
            shape,
            turn,
            checks_per_sec,
            p99_ms: 1.0,
            errors: 0,
            calls_per_check: Some(1.0),
            reads_per_check: Some(0.0),
            server_cpu_us_per_check: None,
            client_cpu_us_per_check: None,
        }
    }

    #[test]
    fn each_round_is_paired_with_the_fixed_round_of_its_turn() {
        let rounds = [
            round(1, Algorithm::Fixed, 0, 1_000.0),
            round(1, Algorithm::Sliding, 0, 900.0),
            round(1, Algorithm::Gcra, 0, 1_100.0),
            round(1, Algorithm::Gcra, 1, 1_200.0),
            round(1, Algorithm::Sliding, 1, 1_000.0),
            round(1, Algorithm::Fixed, 1, 2_000.0),
            round(4, Algorithm::Fixed, 0, 500.0),
            round(4, Algorithm::Sliding, 0, 500.0),
            round(4, Algorithm::Gcra, 0, 250.0),
        ];
        let one = ratio(&rounds, 1, Algorithm::Sliding);
        // Medians 1,500 and 950; pairs 0.9 and 0.5.
        assert_eq!(one.checks_per_sec, Some(950.0 / 1_500.0));
        let paired = one.paired.map(|p| (p.median, p.min, p.max));
        assert_eq!(paired, Some((0.7, 0.5, 0.9)));
        let gcra = ratio(&rounds, 1, Algorithm::Gcra);
        // Medians 1,500 and 1,150; pairs 1.1 and 0.6.
        assert_eq!(gcra.checks_per_sec, Some(1_150.0 / 1_500.0));
        let paired = gcra.paired.map(|p| (p.min, p.max));
        assert_eq!(paired, Some((0.6, 1.1)));
        assert_eq!(
            ratio(&rounds, 4, Algorithm::Sliding).checks_per_sec,
            Some(1.0)
        );
        assert_eq!(ratio(&rounds, 4, Algorithm::Gcra).checks_per_sec, Some(0.5));
        let table = Throughput {
            rounds: rounds.to_vec(),
            ratios: vec![one, gcra],
            plan: None,
        }
        .table();
        assert!(
            table.contains(
                "sliding / fixed, 1 limit(s): checks/s 0.633 (median over median); turn by turn: median 0.700, spread 0.500 to 0.900\n"
            ),
            "{table}"
        );
        assert!(
            table.contains("gcra / fixed, 1 limit(s): checks/s 0.767 (median over median)"),
            "{table}"
        );
    }
}
