//! The report: a table for people, JSON for tools.

use serde::Serialize;

use crate::load::Sample;

/// One measured round of one side.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct Round {
    /// `tollgate`, `raw` or `seed`.
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
    /// CPU time this process (the load generator and the side's client)
    /// spent per check during the round, in microseconds (user + system,
    /// from `/proc/self/stat`, in 10 ms ticks).
    pub(crate) client_cpu_us_per_check: Option<f64>,
}

impl Round {
    /// `server_ticks` and `client_ticks`: the server's and this process's
    /// CPU time during the round, in clock ticks of 10 ms, when known.
    pub(crate) fn new(
        side: &'static str,
        sample: &Sample,
        server_ticks: Option<u64>,
        client_ticks: Option<u64>,
    ) -> Round {
        let per_check = |ticks: Option<u64>| {
            ticks
                .filter(|_| sample.checks > 0)
                .map(|ticks| ticks as f64 * 10_000.0 / sample.checks as f64)
        };
        Round {
            server_cpu_us_per_check: per_check(server_ticks),
            client_cpu_us_per_check: per_check(client_ticks),
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
    /// Median tollgate checks/s over median seed checks/s.
    pub(crate) ratio_seed_checks_per_sec: Option<f64>,
    /// Each round's tollgate checks/s over the seed round of the same
    /// turn (A B C): median, lowest and highest.
    pub(crate) paired_ratio_seed: Option<Spread>,
    /// Median tollgate p99 over median seed p99 (lower is better).
    pub(crate) ratio_seed_p99: Option<f64>,
}

/// The sides, in the order they run.
const SIDES: [&str; 3] = ["tollgate", "raw", "seed"];

/// The median of some values and their range.
#[derive(Clone, Copy, Debug, Serialize)]
pub(crate) struct Spread {
    pub(crate) median: f64,
    pub(crate) min: f64,
    pub(crate) max: f64,
}

impl Spread {
    /// The median and range of `values`; none of none.
    pub(crate) fn of(values: Vec<f64>) -> Option<Spread> {
        let min = values.iter().copied().reduce(f64::min)?;
        let max = values.iter().copied().reduce(f64::max)?;
        Some(Spread {
            median: median(values)?,
            min,
            max,
        })
    }
}

/// The median of `values`; none of none.
pub(crate) fn median(mut values: Vec<f64>) -> Option<f64> {
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

    /// Median tollgate `field` over median `other` `field`; none over 0 (a
    /// ceiling whose every check failed).
    fn ratio(&self, other: &str, field: fn(&Round) -> f64) -> Option<f64> {
        self.side("tollgate", field)
            .zip(self.side(other, field).filter(|b| *b > 0.0))
            .map(|(a, b)| a / b)
    }

    /// Each tollgate round's checks/s over that of the first `other` round
    /// after it and before the next tollgate round (its turn).
    fn paired(&self, other: &str) -> Option<Spread> {
        let mut tollgate = None;
        let mut pairs = Vec::new();
        for r in &self.rounds {
            if r.side == "tollgate" {
                tollgate = Some(r.checks_per_sec);
            } else if r.side == other
                && let Some(rate) = tollgate.take()
                && r.checks_per_sec > 0.0
            {
                pairs.push(rate / r.checks_per_sec);
            }
        }
        Spread::of(pairs)
    }

    /// The report of `rounds` on `store` set up as `setup`, its ratios
    /// filled.
    pub(crate) fn new(store: String, setup: serde_json::Value, rounds: Vec<Round>) -> Report {
        Report {
            store,
            setup,
            rounds,
            ratio_checks_per_sec: None,
            paired_ratio: None,
            ratio_p99: None,
            ratio_seed_checks_per_sec: None,
            paired_ratio_seed: None,
            ratio_seed_p99: None,
        }
        .finish()
    }

    /// Fills the ratios from the rounds.
    fn finish(mut self) -> Report {
        let rate = |r: &Round| r.checks_per_sec;
        let p99 = |r: &Round| r.p99_ms;
        self.ratio_checks_per_sec = self.ratio("raw", rate);
        self.ratio_p99 = self.ratio("raw", p99);
        self.paired_ratio = self.paired("raw");
        self.ratio_seed_checks_per_sec = self.ratio("seed", rate);
        self.ratio_seed_p99 = self.ratio("seed", p99);
        self.paired_ratio_seed = self.paired("seed");
        self
    }

    /// The report as a table.
    pub(crate) fn table(&self) -> String {
        let mut out = format!("store: {}\nsetup: {}\n\n", self.store, self.setup);
        out.push_str(
            "side        checks/s    p50 ms    p99 ms  p99.9 ms   errors    refused  trips/refused  server µs/check  client µs/check\n",
        );
        for r in &self.rounds {
            let trips = r
                .round_trips_per_refused
                .map_or_else(|| "-".to_owned(), |t| format!("{t:.3}"));
            let us = |t: Option<f64>| t.map_or_else(|| "-".to_owned(), |t| format!("{t:.2}"));
            let (cpu, client) = (us(r.server_cpu_us_per_check), us(r.client_cpu_us_per_check));
            out.push_str(&format!(
                "{:<9} {:>10.0} {:>9.3} {:>9.3} {:>9.3} {:>8} {:>10} {:>14} {:>16} {:>16}\n",
                r.side,
                r.checks_per_sec,
                r.p50_ms,
                r.p99_ms,
                r.p999_ms,
                r.errors,
                r.refused,
                trips,
                cpu,
                client
            ));
        }
        for side in SIDES {
            if let (Some(rate), Some(p99)) = (
                self.side(side, |r| r.checks_per_sec),
                self.side(side, |r| r.p99_ms),
            ) {
                out.push_str(&format!(
                    "median {side:<9} {rate:>10.0} checks/s, p99 {p99:.3} ms\n"
                ));
            }
        }
        let ceilings = [
            (
                "raw",
                self.ratio_checks_per_sec,
                self.ratio_p99,
                self.paired_ratio,
            ),
            (
                "seed",
                self.ratio_seed_checks_per_sec,
                self.ratio_seed_p99,
                self.paired_ratio_seed,
            ),
        ];
        for (side, rate, p99, pairs) in ceilings {
            match (rate, p99) {
                (Some(rate), Some(p99)) => out.push_str(&format!(
                    "tollgate / {side}: checks/s {rate:.3}, p99 {p99:.3}\n"
                )),
                _ => out.push_str(&format!(
                    "tollgate / {side}: no {side} ceiling in this run\n"
                )),
            }
            if let Some(pairs) = pairs {
                out.push_str(&format!(
                    "tollgate / {side}, round by round: median {:.3}, spread {:.3} to {:.3}\n",
                    pairs.median, pairs.min, pairs.max
                ));
            }
        }
        for (whose, of) in [
            (
                "server",
                (|r| r.server_cpu_us_per_check) as fn(&Round) -> Option<f64>,
            ),
            ("client", |r| r.client_cpu_us_per_check),
        ] {
            for side in SIDES {
                let cpu = median(
                    self.rounds
                        .iter()
                        .filter(|r| r.side == side)
                        .filter_map(of)
                        .collect(),
                );
                if let Some(cpu) = cpu {
                    out.push_str(&format!(
                        "median {whose} CPU per check, {side}: {cpu:.2} µs\n"
                    ));
                }
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round(side: &'static str, checks_per_sec: f64, cpu: f64) -> Round {
        Round {
            side,
            checks_per_sec,
            p50_ms: 1.0,
            p99_ms: checks_per_sec / 1_000.0,
            p999_ms: 10.0,
            errors: 0,
            refused: 0,
            round_trips_per_refused: None,
            server_cpu_us_per_check: Some(cpu),
            client_cpu_us_per_check: Some(cpu / 2.0),
        }
    }

    fn report(rounds: Vec<Round>) -> Report {
        Report::new("redis".to_owned(), serde_json::Value::Null, rounds)
    }

    #[test]
    fn seed_ratio_pairs_each_tollgate_round_with_the_seed_round_of_its_turn() {
        let report = report(vec![
            round("tollgate", 1_000.0, 30.0),
            round("raw", 2_000.0, 20.0),
            round("seed", 4_000.0, 10.0),
            round("tollgate", 1_500.0, 31.0),
            round("raw", 2_000.0, 21.0),
            round("seed", 2_000.0, 11.0),
        ]);
        // Medians: tollgate 1,250, raw 2,000, seed 3,000.
        assert_eq!(report.ratio_checks_per_sec, Some(0.625));
        assert_eq!(report.ratio_seed_checks_per_sec, Some(1_250.0 / 3_000.0));
        assert_eq!(report.ratio_seed_p99, Some(1.25 / 3.0));
        // Round by round: 1,000 / 4,000 and 1,500 / 2,000.
        let seed = report.paired_ratio_seed.map(|s| (s.median, s.min, s.max));
        assert_eq!(seed, Some((0.5, 0.25, 0.75)));
        let raw = report.paired_ratio.map(|s| (s.median, s.min, s.max));
        assert_eq!(raw, Some((0.625, 0.5, 0.75)));

        let table = report.table();
        assert!(
            table.contains("tollgate / seed: checks/s 0.417, p99 0.417\n"),
            "{table}"
        );
        assert!(
            table
                .contains("tollgate / seed, round by round: median 0.500, spread 0.250 to 0.750\n"),
            "{table}"
        );
        assert!(
            table.contains("tollgate / raw: checks/s 0.625, p99 0.625\n"),
            "{table}"
        );
        for (side, cpu) in [("tollgate", "30.50"), ("raw", "20.50"), ("seed", "10.50")] {
            let line = format!("median server CPU per check, {side}: {cpu} µs\n");
            assert!(table.contains(&line), "{table}");
        }
        for (side, cpu) in [("tollgate", "15.25"), ("raw", "10.25"), ("seed", "5.25")] {
            let line = format!("median client CPU per check, {side}: {cpu} µs\n");
            assert!(table.contains(&line), "{table}");
        }
        let json = serde_json::to_value(&report).map_err(|e| e.to_string());
        assert_eq!(
            json.map(|j| j["paired_ratio_seed"]["median"].as_f64()),
            Ok(Some(0.5))
        );
    }

    #[test]
    fn without_a_seed_the_table_says_so() {
        let report = report(vec![
            round("tollgate", 1_000.0, 30.0),
            round("raw", 2_000.0, 20.0),
        ]);
        assert_eq!(report.ratio_seed_checks_per_sec, None);
        assert!(report.paired_ratio_seed.is_none());
        let table = report.table();
        assert!(
            table.contains("tollgate / seed: no seed ceiling in this run\n"),
            "{table}"
        );
        assert!(!table.contains("seed, round by round"), "{table}");
    }

    #[test]
    fn a_ceiling_whose_every_check_failed_gives_no_ratio() {
        let report = report(vec![
            round("tollgate", 1_000.0, 30.0),
            round("raw", 0.0, 20.0),
            round("seed", 2_000.0, 10.0),
        ]);
        assert_eq!(report.ratio_checks_per_sec, None);
        assert!(report.paired_ratio.is_none());
        assert_eq!(report.ratio_seed_checks_per_sec, Some(0.5));
    }
}
