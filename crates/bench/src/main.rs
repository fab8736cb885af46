//! `tollgate-bench`: closed-loop load against a tollgate store and, for
//! Redis, against the raw ceiling (the same scripts without tollgate) and
//! the seed (the cheapest hand-written calls) of the same work in the same run.
//! With `--accuracy`, fixed windows against sliding windows and GCRA
//! instead: how much each admits in any span of its window, and what each
//! costs.

mod accuracy;
mod args;
mod calls;
mod chart;
mod load;
mod report;
mod seed;
mod server;
mod shapes;
mod sides;

use std::error::Error;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use clap::Parser;
use tollgate::Limiter;

use args::{Args, Flavor, Mode};
use load::{Keys, Side};
use report::{Report, Round};
use seed::Seed;
use sides::{Raw, Tollgate, Workload};

fn main() -> ExitCode {
    let args = Args::parse();
    let runtime = match args.runtime {
        Flavor::Multi => tokio::runtime::Builder::new_multi_thread()
            .enable_all()
            .build(),
        Flavor::Current => tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build(),
    };
    let result = runtime
        .map_err(Into::into)
        .and_then(|rt| rt.block_on(run(args)));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("tollgate-bench: {err}");
            ExitCode::FAILURE
        }
    }
}

async fn run(args: Args) -> Result<(), Box<dyn Error>> {
    if args.accuracy {
        return sliding(&args).await;
    }
    let work = workload(&args, args.limits);
    let keys = Keys {
        count: args.keys(),
        hot: args.hot,
    };
    let tollgate = tollgate_side(&args, work.clone())?;
    let raw = raw_side(&args, work.clone()).await?;
    let seed = seed_side(&args, work).await?;
    let duration = Duration::from_secs_f64(args.duration.max(0.0));
    let warmup = Duration::from_secs_f64(args.warmup.max(0.0));

    if !warmup.is_zero() {
        load::run(&tollgate, args.concurrency, warmup, keys).await;
        if let Some(raw) = &raw {
            load::run(raw, args.concurrency, warmup, keys).await;
        }
        if let Some(seed) = &seed {
            load::run(seed, args.concurrency, warmup, keys).await;
        }
    }
    let server = if raw.is_some() || seed.is_some() {
        server::Process::find(&args.store).await
    } else {
        None
    };
    let run = Run {
        server: server.as_ref(),
        concurrency: args.concurrency,
        duration,
        keys,
    };
    let mut rounds = Vec::new();
    for _ in 0..args.rounds.max(1) {
        rounds.push(run.round("tollgate", &tollgate).await);
        if let Some(raw) = &raw {
            rounds.push(run.round("raw", raw).await);
        }
        if let Some(seed) = &seed {
            rounds.push(run.round("seed", seed).await);
        }
    }
    let report = Report::new(
        scheme(&args.store).to_owned(),
        setup(&args, raw.is_some(), seed.is_some()).await,
        rounds,
    );
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", report.table());
    }
    if let Some(path) = &args.chart {
        sweep(&args, path, keys, duration).await?;
    }
    Ok(())
}

/// `--accuracy`: fixed windows against sliding windows and GCRA on one
/// store, how much each admits (in simulated time), then what each costs
/// (checks/s).
async fn sliding(args: &Args) -> Result<(), Box<dyn Error>> {
    let store = tollgate::open_store(&args.store)?;
    let accuracy = accuracy::measure(&store).await?;
    if !args.json {
        println!("store: {}\n\n{}", scheme(&args.store), accuracy.table());
    }
    let plan = shapes::Plan {
        concurrency: args.concurrency,
        duration: Duration::from_secs_f64(args.duration.max(0.0)),
        warmup: Duration::from_secs_f64(args.warmup.max(0.0)),
        rounds: args.rounds,
        keys: Keys {
            count: args.keys(),
            hot: args.hot,
        },
        cost: args.cost,
    };
    let server = if scheme(&args.store).starts_with("redis") {
        server::Process::find(&args.store).await
    } else {
        None
    };
    let throughput = shapes::measure(&store, &plan, server.as_ref()).await;
    if args.json {
        let report = serde_json::json!({
            "store": scheme(&args.store),
            "setup": sliding_setup(args).await,
            "accuracy": accuracy,
            "throughput": throughput,
        });
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", throughput.table());
    }
    Ok(())
}

/// The setup of an `--accuracy` run's checks/s.
async fn sliding_setup(args: &Args) -> serde_json::Value {
    let redis = scheme(&args.store).starts_with("redis");
    serde_json::json!({
        "concurrency": args.concurrency,
        "keys": args.keys(),
        "hot": args.hot,
        "mode": Mode::Reserve,
        "cost": args.cost,
        "duration_s": args.duration,
        "warmup_s": args.warmup,
        "rounds": args.rounds,
        "runtime": args.runtime,
        "redis_version": if redis { server::info(&args.store, "redis_version").await } else { None },
    })
}

/// How every measured round runs.
struct Run<'a> {
    /// The local redis-server, whose CPU time each round reads.
    server: Option<&'a server::Process>,
    concurrency: usize,
    duration: Duration,
    keys: Keys,
}

impl Run<'_> {
    /// One measured round of `side`, named `name`, with the server's and
    /// this process's CPU time during it.
    async fn round<S: Side>(&self, name: &'static str, side: &S) -> Round {
        let client = server::client();
        let cpu = self.server.map(server::Process::cpu_ticks);
        let own = Some(client.cpu_ticks());
        let sample = load::run(side, self.concurrency, self.duration, self.keys).await;
        let ticks = server::since(self.server, cpu);
        Round::new(name, &sample, ticks, server::since(Some(&client), own))
    }
}

fn scheme(url: &str) -> &str {
    url.split(':').next().unwrap_or(url)
}

/// The checks of a run: `limits` bench rules, or the attack workload.
fn workload(args: &Args, limits: u16) -> Workload {
    let (rules, mode) = match args.attack {
        Some(_) => (sides::attack_rules(), Mode::Reserve),
        None => (sides::rules(limits), args.mode),
    };
    Workload {
        rules: rules.into(),
        mode,
        cost: args.cost,
        attack: args.attack,
        fresh: Arc::default(),
        run: tollgate::CheckId::new().to_string().into(),
    }
}

fn tollgate_side(args: &Args, work: Workload) -> Result<Tollgate, Box<dyn Error>> {
    let store = tollgate::open_store(&args.store)?;
    Ok(Tollgate {
        limiter: Limiter::new(store),
        work,
    })
}

async fn raw_side(args: &Args, work: Workload) -> Result<Option<Raw>, Box<dyn Error>> {
    if args.no_raw || !scheme(&args.store).starts_with("redis") {
        return Ok(None);
    }
    let client = redis::Client::open(args.store.as_str())?;
    Ok(Some(Raw {
        connection: client.get_multiplexed_async_connection().await?,
        work,
        check: Raw::script(),
    }))
}

/// The seed, for a Redis store unless `--no-seed`.
async fn seed_side(args: &Args, work: Workload) -> Result<Option<Seed>, Box<dyn Error>> {
    if args.no_seed || !scheme(&args.store).starts_with("redis") {
        return Ok(None);
    }
    let client = redis::Client::open(args.store.as_str())?;
    Ok(Some(Seed::open(&client, work).await?))
}

async fn setup(args: &Args, raw: bool, seed: bool) -> serde_json::Value {
    let workers = match args.runtime {
        Flavor::Multi => std::thread::available_parallelism().map_or(1, |n| n.get()),
        Flavor::Current => 1,
    };
    serde_json::json!({
        "concurrency": args.concurrency,
        "limits": args.limits,
        "keys": args.keys(),
        "hot": args.hot,
        "mode": if args.attack.is_some() { Mode::Reserve } else { args.mode },
        "cost": args.cost,
        "attack_share": args.attack,
        "duration_s": args.duration,
        "rounds": args.rounds,
        "runtime": args.runtime,
        "worker_threads": workers,
        "connections": connections(raw, seed),
        "redis_version": if raw || seed { server::info(&args.store, "redis_version").await } else { None },
    })
}

/// The connections of the sides, for the setup line.
fn connections(raw: bool, seed: bool) -> &'static str {
    match (raw, seed) {
        (true, true) => "1 multiplexed each (tollgate, raw, seed)",
        (true, false) => "1 multiplexed each (tollgate, raw)",
        (false, true) => "1 multiplexed each (tollgate, seed)",
        (false, false) => "store default",
    }
}

/// Latency against concurrency for 1 and 4 limits (tollgate, and the raw
/// ceiling for Redis), drawn into `path`.
async fn sweep(
    args: &Args,
    path: &std::path::Path,
    keys: Keys,
    duration: Duration,
) -> Result<(), Box<dyn Error>> {
    const LEVELS: [usize; 7] = [1, 2, 5, 10, 25, 50, 100];
    let mut series = Vec::new();
    for limits in [1u16, 4] {
        let work = workload(args, limits);
        let tollgate = tollgate_side(args, work.clone())?;
        let raw = raw_side(args, work).await?;
        let mut lines = vec![
            (format!("tollgate p50, {limits} limit(s)"), Vec::new()),
            (format!("tollgate p99, {limits} limit(s)"), Vec::new()),
        ];
        if raw.is_some() {
            lines.push((format!("raw p99, {limits} limit(s)"), Vec::new()));
        }
        for level in LEVELS {
            let sample = load::run(&tollgate, level, duration, keys).await;
            lines[0].1.push((level as f64, sample.millis(0.5)));
            lines[1].1.push((level as f64, sample.millis(0.99)));
            if let Some(raw) = &raw {
                let sample = load::run(raw, level, duration, keys).await;
                lines[2].1.push((level as f64, sample.millis(0.99)));
            }
            eprintln!("sweep: {limits} limit(s), {level} in flight done");
        }
        series.extend(
            lines
                .into_iter()
                .map(|(label, points)| chart::Series { label, points }),
        );
    }
    let title = format!(
        "tollgate on {}: latency against checks in flight",
        scheme(&args.store)
    );
    chart::draw(path, &title, &series)?;
    eprintln!("chart written to {}", path.display());
    Ok(())
}
