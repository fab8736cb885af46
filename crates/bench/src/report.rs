//! The report: a table for people, JSON for tools.

use serde::Serialize;

use crate::load::Sample;

/// One measured round of one side.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Round {
    /// `tollgate` or `raw`.
    pub(crate) side: &'static str,
    /// Successful checks per second.
    pub(crate) checks_per_sec: f64,
    /// Latency quantiles, in milliseconds.
    pub(crate) p50_ms: f64,
    /// 99th percentile.
    pub(crate) p99_ms: f64,
    /// 99.9th percentile.
    pub(crate) p999_ms: f64,
    /// Failed checks.
    pub(crate) errors: u64,
    /// Checks refused (by the store or locally).
    pub(crate) refused: u64,
    /// Store round trips per refused check: 1 for a refusal the store
    /// answered, 0 for one the limiter answered locally.
    pub(crate) round_trips_per_refused: Option<f64>,
    /// CPU time redis-server spent per check during the round, in
    /// microseconds (user + system, from `/proc/PID/stat`; a server on
    /// this machine only).
    pub(crate) server_cpu_us_per_check: Option<f64>,
}

impl Round {
    /// `server_ticks`: the server's CPU time during the round, in clock
    /// ticks of 10 ms, when known.
    pub(crate) fn new(side: &'static str, sample: &Sample, server_ticks: Option<u64>) -> Round {
        Round {
            server_cpu_us_per_check: server_ticks
                .filter(|_| sample.checks > 0)
                .map(|ticks| ticks as f64 * 10_000.0 / sample.checks as f64),
            side,
            checks_per_sec: sample.rate(),
            p50_ms: sample.millis(0.5),
            p99_ms: sample.millis(0.99),
            p999_ms: sample.millis(0.999),
            errors: sample.errors,
            refused: sample.refused,
            round_trips_per_refused: (sample.refused > 0)
                .then(|| (sample.refused - sample.local) as f64 / sample.refused as f64),
        }
    }
}

/// The whole run.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Report {
    /// The store URL's scheme (no host or password).
    pub(crate) store: String,
    /// How the run was set up.
    pub(crate) setup: serde_json::Value,
    /// Every round, in the order run.
    pub(crate) rounds: Vec<Round>,
    /// Median tollgate checks/s over median raw checks/s.
    pub(crate) ratio_checks_per_sec: Option<f64>,
    /// Each round's tollgate checks/s over the raw round that followed it:
    /// median, lowest and highest.
    pub(crate) paired_ratio: Option<Spread>,
    /// Median tollgate p99 over median raw p99 (lower is better).
    pub(crate) ratio_p99: Option<f64>,
}

/// The median of some values and their range.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    fn of(values: Vec<f64>) -> Option<Spread> {
        let min = values.iter().copied().reduce(f64::min)?;
        let max = values.iter().copied().reduce(f64::max)?;
        Some(Spread {
            median: median(values)?,
            min,
            max,
        })
    }
}

fn median(mut values: Vec<f64>) -> Option<f64> {
    values.sort_by(f64::total_cmp);
    let n = values.len();
    match n {
        0 => None,
        _ if n % 2 == 1 => Some(values[n / 2]),
        _ => Some((values[n / 2 - 1] + values[n / 2]) / 2.0),
    }
}

impl Report {
    fn side(&self, side: &str, field: fn(&Round) -> f64) -> Option<f64> {
        median(
            self.rounds
                .iter()
                .filter(|r| r.side == side)
                .map(field)
                .collect(),
        )
    }

    /// Fills the ratios from the rounds.
    pub(crate) fn finish(mut self) -> Report {
        let rate = |r: &Round| r.checks_per_sec;
        let p99 = |r: &Round| r.p99_ms;
        self.ratio_checks_per_sec = self
            .side("tollgate", rate)
            .zip(self.side("raw", rate))
            .map(|(a, b)| a / b);
        self.ratio_p99 = self
            .side("tollgate", p99)
            .zip(self.side("raw", p99))
            .map(|(a, b)| a / b);
        let pairs = self
            .rounds
            .windows(2)
            .filter(|w| w[0].side == "tollgate" && w[1].side == "raw")
            .map(|w| w[0].checks_per_sec / w[1].checks_per_sec.max(1e-9))
            .collect();
        self.paired_ratio = Spread::of(pairs);
        self
    }

    /// The report as a table.
    pub(crate) fn table(&self) -> String {
        let mut out = format!("store: {}\nsetup: {}\n\n", self.store, self.setup);
        out.push_str(
            "side        checks/s    p50 ms    p99 ms  p99.9 ms   errors    refused  trips/refused  server µs/check\n",
        );
        for r in &self.rounds {
            let trips = r
                .round_trips_per_refused
                .map_or_else(|| "-".to_owned(), |t| format!("{t:.3}"));
            let cpu = r
                .server_cpu_us_per_check
                .map_or_else(|| "-".to_owned(), |t| format!("{t:.2}"));
            out.push_str(&format!(
                "{:<9} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>10} {:>14} {:>16}\n",
                r.side,
                r.checks_per_sec,
                r.p50_ms,
                r.p99_ms,
                r.p999_ms,
                r.errors,
                r.refused,
                trips,
                cpu
            ));
        }
        for side in ["tollgate", "raw"] {
            if let (Some(rate), Some(p99)) = (
                self.side(side, |r| r.checks_per_sec),
                self.side(side, |r| r.p99_ms),
            ) {
                out.push_str(&format!(
                    "median {side:<9} {rate:>10.0} checks/s, p99 {p99:.3} ms\n"
                ));
            }
        }
        match (self.ratio_checks_per_sec, self.ratio_p99) {
            (Some(rate), Some(p99)) => out.push_str(&format!(
                "tollgate / raw: checks/s {rate:.3}, p99 {p99:.3}\n"
            )),
            _ => out.push_str("tollgate / raw: no raw ceiling for this store\n"),
        }
        if let Some(pairs) = self.paired_ratio {
            out.push_str(&format!(
                "tollgate / raw, round by round: median {:.3}, spread {:.3} to {:.3}\n",
                pairs.median, pairs.min, pairs.max
            ));
        }
        for side in ["tollgate", "raw"] {
            let cpu = median(
                self.rounds
                    .iter()
                    .filter(|r| r.side == side)
                    .filter_map(|r| r.server_cpu_us_per_check)
                    .collect(),
            );
            if let Some(cpu) = cpu {
                out.push_str(&format!(
                    "median server CPU per check, {side}: {cpu:.2} µs\n"
                ));
            }
        }
        out
    }
}
