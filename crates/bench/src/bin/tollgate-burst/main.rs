//! `tollgate-burst`: the experiments of issue 23's "Done when", against the
//! release demo binary (`cargo build --release -p tollgate-demo` first).
//!
//! - `burst`: a private store (redis-server, a 3-master cluster, or the
//!   REST proxy before a redis-server), three demos on it, a process
//!   keeping both cores busy; V visitors (default 600) fired at once at one
//!   site, R runs (default 5) on fresh sites. Each run must serve exactly
//!   `min(V, ask-site)` and store exactly as many on `ask-site`.
//! - `outage`: one demo on a private redis-server, 100 asks/s and 100
//!   runs/s; the server killed (or frozen) for 10 s. Latencies per phase,
//!   the first 200 after the server answers PING, and whether a call
//!   answered 503 stored a count.
//!
//! `cargo run --release -p tollgate-bench --bin tollgate-burst -- burst
//! [--store redis|cluster|rest]` or `… -- outage [--freeze]`. Exits non-zero
//! when a run fails the criterion. Logs of the demos go to a
//! temporary directory, kept (and named) when a run fails, or to `--logs`.

mod burst;
mod children;
mod http;
mod outage;
mod store;
mod table;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Args, Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "tollgate-burst",
    about = "Issue 23's experiments against the release demo"
)]
struct Cli {
    #[command(subcommand)]
    mode: Mode,
}

#[derive(Debug, Subcommand)]
enum Mode {
    /// V visitors at once at one site through several demos, R runs.
    Burst(burst::Options),
    /// Steady asks and runs while redis-server is killed (or frozen) for a while.
    Outage(outage::Options),
    /// Keeps N threads spinning until the parent process is gone (the busy process).
    #[command(hide = true)]
    Spin {
        /// Threads.
        threads: usize,
    },
}

/// What every experiment takes.
#[derive(Clone, Debug, Args)]
pub(crate) struct Common {
    /// The demo binary (build it with `cargo build --release -p tollgate-demo`).
    #[arg(long, default_value = "target/release/tollgate-demo")]
    pub(crate) demo: PathBuf,
    /// The REST proxy binary, for `--store rest`.
    #[arg(long, default_value = "target/release/tollgate-rest-proxy")]
    pub(crate) proxy: PathBuf,
    /// `RUST_LOG` of the demos, e.g. `info,tollgate_core=debug,tollgate_redis=debug`
    /// (unset: the demo's default, info).
    #[arg(long, value_name = "FILTER")]
    pub(crate) rust_log: Option<String>,
    /// A directory for the demos' and servers' logs (kept); otherwise a
    /// temporary one, kept only when a run fails.
    #[arg(long, value_name = "DIR")]
    pub(crate) logs: Option<PathBuf>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let passed = match cli.mode {
        Mode::Spin { threads } => children::spin(threads),
        Mode::Burst(options) => runtime().block_on(burst::run(options)),
        Mode::Outage(options) => runtime().block_on(outage::run(options)),
    };
    if passed {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap_or_else(|e| panic!("cannot start the tokio runtime: {e}"))
}
