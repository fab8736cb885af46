//! Command-line options.

use clap::{Parser, ValueEnum};

/// Closed-loop load benchmark of a tollgate store against its raw ceiling.
#[derive(Clone, Debug, Parser)]
#[command(version, about)]
pub(crate) struct Args {
    /// The store: redis://HOST:PORT, upstash+http://HOST:PORT (token in
    /// UPSTASH_REDIS_REST_TOKEN), sqlite:PATH or memory.
    #[arg(long)]
    pub(crate) store: String,
    /// Checks in flight at once.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Limits counted per check.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) limits: u16,
    /// Distinct principals, picked uniformly [default: 10000, or 300 with
    /// --accuracy].
    #[arg(long)]
    pub(crate) keys: Option<u64>,
    /// Send 90% of the checks to one principal (a hot key).
    #[arg(long)]
    pub(crate) hot: bool,
    /// Seconds measured per round.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
    /// Seconds of warm-up before the first round (not measured).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) warmup: f64,
    /// Rounds per side; the sides alternate A B C A B C.
    #[arg(long, default_value_t = 5)]
    pub(crate) rounds: u32,
    /// How each check spends budget.
    #[arg(long, value_enum, default_value_t = Mode::Count)]
    pub(crate) mode: Mode,
    /// Units each check spends on each limit.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u64).range(1..=1_000_000))]
    pub(crate) cost: u64,
    /// The attack workload: the seed's 4-limit Ask AI check, reserved, with
    /// this share of the checks (default 0.9) from visitors already over
    /// their daily `ask` limit and the rest from new visitors.
    #[arg(long, num_args = 0..=1, default_missing_value = "0.9", value_parser = share)]
    pub(crate) attack: Option<f64>,
    /// The tokio runtime both sides run on.
    #[arg(long, value_enum, default_value_t = Flavor::Multi)]
    pub(crate) runtime: Flavor,
    /// Skip the raw ceiling (Redis only).
    #[arg(long)]
    pub(crate) no_raw: bool,
    /// Skip the seed, the hand-written true ceiling (Redis only).
    #[arg(long)]
    pub(crate) no_seed: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also sweep concurrency for 1 and 4 limits and draw latency against
    /// concurrency into this SVG file.
    #[arg(long)]
    pub(crate) chart: Option<std::path::PathBuf>,
    /// Fixed windows against sliding windows and GCRA (bursts of 10 and
    /// 100) instead of the load comparison: how much each admits in any
    /// span of its window, for adversarial and uniform schedules replayed
    /// in simulated time on the store; then each shape's checks/s at 1 and
    /// 4 limits (reserve), rounds alternating.
    #[arg(long, conflicts_with_all = ["attack", "chart", "limits", "mode"])]
    pub(crate) accuracy: bool,
}

impl Args {
    /// Distinct principals: `--keys`, or 10,000 (300 with `--accuracy`, a
    /// key set whose sliding limits' previous counts a limiter keeps).
    pub(crate) fn keys(&self) -> u64 {
        let default = if self.accuracy { 300 } else { 10_000 };
        self.keys.unwrap_or(default)
    }
}

/// A share between 0 and 1.
fn share(text: &str) -> Result<f64, String> {
    match text.parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("`{text}` is not a share between 0 and 1")),
    }
}

/// How a check spends budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// Always add the cost (the count script on Redis).
    Count,
    /// All-or-nothing (the reserve script on Redis).
    Reserve,
    /// Reserve, then settle the first limit at half the cost (a refund:
    /// two round trips), as an AI route settles its token budget.
    Settle,
}

/// The tokio runtime flavour.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Flavor {
    /// Multi-thread, one worker per core.
    Multi,
    /// Current-thread.
    Current,
}
