//! Peer benchmark: `runlimit-postgres` (crates.io) on the Postgres server
//! that tollgate's throughput example measures, with the same load: 50
//! callers in a closed loop, 10,000 principals picked by the same xorshift
//! sequence, the same four limits (a minute, an hour, a day and a week per
//! principal, each with a maximum no check reaches), a pool of 16
//! connections (tollgate's default pool size).
//!
//! A check of `n` limits is one `PostgresLimiter::check_all` over `n`
//! `Check`s (runlimit's all-or-nothing batch; for one limit too, which is
//! what `PostgresLimiter::check` does inside). Every subject key is derived
//! per check with runlimit's `KeyHasher` (HMAC-SHA-256), as an application
//! must, just as tollgate's side builds its limits and keys per check.
//!
//! ```text
//! TOLLGATE_BENCH_POSTGRES_URL=postgres://postgres@127.0.0.1:PORT/postgres \
//!     peer-runlimit [seconds] [rounds]
//! ```
//!
//! Prints rows in the throughput example's table format. The pool is
//! sqlx's default but for its size (it pings each connection it hands out:
//! `PEER_NO_PING=1` turns that off). With
//! `PEER_PROBE=N` it instead runs N sequential checks of 1 and of 4
//! limits, each batch preceded by a marker statement, so that a server
//! logging every statement shows what one check sends.

use std::sync::Arc;
use std::time::{Duration, Instant};

use runlimit_core::{Check, FixedWindowPolicy, KeyHasher, PolicyId, ScopeId};
use runlimit_postgres::PostgresLimiter;
use sqlx::postgres::PgPoolOptions;

const CALLERS: usize = 50;
const PRINCIPALS: u64 = 10_000;
const BIG: u64 = 1_000_000_000_000;
const POOL_SIZE: u32 = 16;
const URL_VAR: &str = "TOLLGATE_BENCH_POSTGRES_URL";
/// A fixed secret: the benchmark stores nothing worth protecting.
const SECRET: &[u8] = b"peer-runlimit benchmark secret, 32+ bytes long";

type Failure = Box<dyn std::error::Error + Send + Sync>;

struct Setup {
    limiter: PostgresLimiter,
    hasher: KeyHasher,
    policies: Vec<FixedWindowPolicy>,
}

#[tokio::main]
async fn main() -> Result<(), Failure> {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().map_or(Ok(3.0), |s| s.parse())?;
    let rounds: usize = args.next().map_or(Ok(3), |s| s.parse())?;
    let url = std::env::var(URL_VAR).map_err(|_| format!("set {URL_VAR} to the server's URL"))?;
    // sqlx's default pool pings (a Sync message, one round trip) every
    // connection it hands out; `PEER_NO_PING=1` turns that off.
    let ping = std::env::var_os("PEER_NO_PING").is_none();
    let pool = PgPoolOptions::new()
        .max_connections(POOL_SIZE)
        .min_connections(POOL_SIZE)
        .test_before_acquire(ping)
        .connect(&url)
        .await?;
    let limiter = PostgresLimiter::new(pool.clone());
    limiter.migrate().await?;
    let setup = Arc::new(Setup {
        limiter,
        hasher: KeyHasher::new(SECRET)?,
        policies: policies()?,
    });
    if let Ok(n) = std::env::var("PEER_PROBE") {
        return probe(&setup, &pool, n.parse()?).await;
    }
    let length = Duration::from_secs_f64(seconds);
    let mut figures = [Vec::new(), Vec::new()];
    for _ in 0..rounds {
        for (i, limits) in [1, 4].into_iter().enumerate() {
            figures[i].push(go(&setup, limits, length).await);
        }
    }
    let path = if ping { "Runlimit" } else { "RunlimitNoPing" };
    for (i, limits) in [1, 4].into_iter().enumerate() {
        report(limits, path, &mut figures[i]);
    }
    Ok(())
}

fn policies() -> Result<Vec<FixedWindowPolicy>, Failure> {
    [
        ("minute", 60),
        ("hour", 3_600),
        ("day", 86_400),
        ("week", 7 * 86_400),
    ]
    .into_iter()
    .map(|(name, seconds)| {
        Ok(FixedWindowPolicy::new(
            PolicyId::new(name)?,
            ScopeId::new("principal")?,
            BIG,
            Duration::from_secs(seconds),
        )?)
    })
    .collect()
}

/// One check of the first `limits` policies for `principal`: allowed
/// (true), denied (false) or an error.
async fn check(setup: &Setup, limits: usize, principal: &str) -> Result<bool, Failure> {
    let checks: Vec<Check<'_>> = setup.policies[..limits]
        .iter()
        .map(|policy| Check::new(policy, setup.hasher.hash_for(policy, principal)))
        .collect();
    let decision = setup.limiter.check_all(&checks).await?;
    Ok(decision.permits_request() && !decision.would_deny())
}

/// Checks per second, latencies and failures of one run.
struct Figures {
    rate: f64,
    latencies: Vec<Duration>,
    failures: usize,
}

async fn go(setup: &Arc<Setup>, limits: usize, length: Duration) -> Figures {
    let start = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let setup = Arc::clone(setup);
            tokio::spawn(async move {
                let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (caller as u64 + 1);
                let mut latencies = Vec::new();
                let mut failures = 0;
                while start.elapsed() < length {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let principal = (seed % PRINCIPALS).to_string();
                    let began = Instant::now();
                    match check(&setup, limits, &principal).await {
                        Ok(true) => latencies.push(began.elapsed()),
                        Ok(false) => failures += 1,
                        Err(error) => {
                            if failures == 0 {
                                eprintln!("peer-runlimit: {error}");
                            }
                            failures += 1;
                        }
                    }
                }
                (latencies, failures)
            })
        })
        .collect();
    let mut latencies = Vec::new();
    let mut failures = 0;
    for caller in callers {
        match caller.await {
            Ok((l, f)) => {
                latencies.extend(l);
                failures += f;
            }
            Err(error) => {
                eprintln!("peer-runlimit: a caller failed: {error}");
                failures += 1;
            }
        }
    }
    let rate = latencies.len() as f64 / start.elapsed().as_secs_f64();
    Figures {
        rate,
        latencies,
        failures,
    }
}

fn report(limits: usize, path: &str, figures: &mut [Figures]) {
    let mut rates: Vec<f64> = figures.iter().map(|f| f.rate).collect();
    let shown: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let failures: usize = figures.iter().map(|f| f.failures).sum();
    let mut latencies: Vec<Duration> = figures
        .iter_mut()
        .flat_map(|f| std::mem::take(&mut f.latencies))
        .collect();
    latencies.sort();
    let at = |q: f64| {
        latencies
            .get(((latencies.len().max(1) - 1) as f64 * q) as usize)
            .copied()
            .unwrap_or_default()
    };
    println!(
        "| {limits} | CheckAll | {path} | {} | {median:.0} | {:.2?} | {:.2?} |",
        shown.join(" / "),
        at(0.5),
        at(0.99),
    );
    if failures > 0 {
        println!("peer-runlimit: {failures} checks failed or were denied ({limits} limits)");
    }
}

/// `n` sequential checks of 1 and of 4 limits on one principal, after a
/// first check that creates the rows (so the probe sees steady state),
/// each batch after a marker statement in the server's log.
async fn probe(setup: &Setup, pool: &sqlx::PgPool, n: usize) -> Result<(), Failure> {
    for limits in [1, 4] {
        check(setup, limits, "probe").await?;
        let marker = format!("SELECT 'probe {limits} limits x {n}'");
        sqlx::query(&marker).execute(pool).await?;
        for _ in 0..n {
            if !check(setup, limits, "probe").await? {
                return Err("a probe check was denied".into());
            }
        }
    }
    sqlx::query("SELECT 'probe end'").execute(pool).await?;
    Ok(())
}
