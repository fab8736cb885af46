//! Command-line options.

use clap::{Parser, ValueEnum};

/// Closed-loop load benchmark of a tollgate store against its raw ceiling.
#[derive(Clone, Debug, Parser)]
#[command(version, about)]
pub(crate) struct Args {
    /// The store: redis://HOST:PORT, sqlite:PATH or memory.
    #[arg(long)]
    pub(crate) store: String,
    /// Checks in flight at once.
    #[arg(long, default_value_t = 50)]
    pub(crate) concurrency: usize,
    /// Limits counted per check.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=64))]
    pub(crate) limits: u16,
    /// Distinct principals, picked uniformly.
    #[arg(long, default_value_t = 10_000)]
    pub(crate) keys: u64,
    /// Send 90% of the checks to one principal (a hot key).
    #[arg(long)]
    pub(crate) hot: bool,
    /// Seconds measured per round.
    #[arg(long, default_value_t = 5.0)]
    pub(crate) duration: f64,
    /// Seconds of warm-up before the first round (not measured).
    #[arg(long, default_value_t = 1.0)]
    pub(crate) warmup: f64,
    /// Rounds per side; the sides alternate A B A B.
    #[arg(long, default_value_t = 2)]
    pub(crate) rounds: u32,
    /// How each check spends budget.
    #[arg(long, value_enum, default_value_t = Mode::Count)]
    pub(crate) mode: Mode,
    /// The tokio runtime both sides run on.
    #[arg(long, value_enum, default_value_t = Flavor::Multi)]
    pub(crate) runtime: Flavor,
    /// Skip the raw ceiling (Redis only).
    #[arg(long)]
    pub(crate) no_raw: bool,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Also sweep concurrency for 1 and 4 limits and draw latency against
    /// concurrency into this SVG file.
    #[arg(long)]
    pub(crate) chart: Option<std::path::PathBuf>,
}

/// How a check spends budget.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum Mode {
    /// Always increment (MULTI/EXEC on Redis).
    Count,
    /// All-or-nothing (a script on Redis).
    Reserve,
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
