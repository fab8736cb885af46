//! Checks per second at 50 concurrent callers over 10,000 principals, on a
//! private Postgres server (fsync on, synchronous_commit on) on a free
//! port: tollgate (a `Limiter` over a `PostgresStore`) against the raw
//! ceiling (the same statement over a pool of the same size, no tollgate
//! code), and the all-or-nothing reservation as one statement against one
//! pipelined transaction. Runs alternate A B A B.
//!
//! ```text
//! cargo run --release -p tollgate-postgres --example throughput -- [seconds] [rounds]
//! ```
//!
//! With `TOLLGATE_BENCH_POSTGRES_URL` set, it measures against that server
//! instead of starting its own (`bench/peer-runlimit/run.sh` does so, to put
//! tollgate and a peer on one server); the schema `bench` is created there.
//! With `TOLLGATE_BENCH_PROBE=N` it instead runs N sequential checks of 1
//! and 4 limits, counted and reserved, each batch after a marker statement,
//! so that a server logging every statement shows what one check sends.
//! With `TOLLGATE_BENCH_ONLY=<limits>-<op>-<path>` (e.g.
//! `4-Reserve-Tollgate`) it runs that row of the table alone.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tollgate_core::{
    CheckId, Limit, Limiter, ManualClock, Mode, Policy, RetryPolicy, Rule, Window,
};
use tollgate_postgres::{DEFAULT_POOL_SIZE, PostgresOptions, PostgresStore};
use tollgate_test_support::postgres_server::PostgresServer;

const CALLERS: usize = 50;
const PRINCIPALS: u64 = 10_000;
const BIG: u64 = 1_000_000_000_000;
const NOW: Duration = Duration::from_secs(1_700_000_030);
/// Raw calls made, which decide the ones that purge expired call records.
static RAW_CALLS: AtomicU64 = AtomicU64::new(0);
/// A server to measure against instead of a private one started here.
const URL_VAR: &str = "TOLLGATE_BENCH_POSTGRES_URL";

#[derive(Clone, Copy, Debug, PartialEq)]
enum Path {
    /// `Limiter::check` over the store.
    Tollgate,
    /// The store's statement, straight over a pool.
    Raw,
    /// The reservation as one pipelined transaction: BEGIN; lock; decide and write; COMMIT.
    RawTransaction,
}

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(3, |s| s.parse().expect("seconds"));
    let rounds: usize = args.next().map_or(3, |s| s.parse().expect("rounds"));
    let length = Duration::from_secs(seconds);
    let (server, url) = match std::env::var(URL_VAR) {
        Ok(url) => (None, url),
        Err(_) => {
            let server = tokio::task::spawn_blocking(PostgresServer::start)
                .await
                .unwrap();
            let url = server.url();
            (Some(server), url)
        }
    };
    let schema = "bench";
    let store = PostgresStore::open_with(&url, PostgresOptions::default().schema(schema))
        .await
        .unwrap();
    let generous = RetryPolicy {
        retries: 0,
        delay: Duration::ZERO,
        timeout: Duration::from_secs(5),
    };
    let limiter = Limiter::builder(store)
        .clock(ManualClock::new(NOW))
        .retry(generous)
        .build();
    let pool = raw_pool(&url);
    let rules = rules();
    if let Ok(n) = std::env::var("TOLLGATE_BENCH_PROBE") {
        probe(&limiter, &pool, &rules, n.parse().expect("probe count")).await;
        return;
    }
    println!(
        "{CALLERS} callers, {PRINCIPALS} principals, pool of {DEFAULT_POOL_SIZE}, \
         {rounds} rounds x {seconds} s, alternating"
    );
    println!("| limits | op | path | checks/s per round | median | p50 | p99 |");
    println!("|---|---|---|---|---|---|---|");
    let cases = [
        (1, Mode::Count, [Path::Tollgate, Path::Raw]),
        (4, Mode::Count, [Path::Tollgate, Path::Raw]),
        (1, Mode::Reserve, [Path::Tollgate, Path::Raw]),
        (4, Mode::Reserve, [Path::Tollgate, Path::Raw]),
        (4, Mode::Reserve, [Path::Raw, Path::RawTransaction]),
    ];
    // `TOLLGATE_BENCH_ONLY=4-Reserve-Tollgate` runs that one row alone.
    let only = std::env::var("TOLLGATE_BENCH_ONLY").ok();
    let selected = |limits: usize, mode: Mode, path: Path| {
        only.as_ref()
            .is_none_or(|only| *only == format!("{limits}-{mode:?}-{path:?}"))
    };
    for (limits, mode, paths) in cases {
        let mut figures = [Vec::new(), Vec::new()];
        for _ in 0..rounds {
            for (i, path) in paths.iter().enumerate() {
                if !selected(limits, mode, *path) {
                    continue;
                }
                let run = Run {
                    limiter: limiter.clone(),
                    pool: pool.clone(),
                    rules: Arc::clone(&rules),
                    schema,
                    limits,
                    mode,
                    path: *path,
                };
                figures[i].push(run.go(length).await);
            }
        }
        for (i, path) in paths.iter().enumerate() {
            if selected(limits, mode, *path) {
                report(limits, mode, *path, &mut figures[i]);
            }
        }
    }
    drop(server);
}

fn rules() -> Arc<Vec<Rule>> {
    let rule = |name, window| {
        Rule::new(name, BIG, window)
            .and_then(|rule| rule.with_key(&["principal"]))
            .unwrap()
    };
    Arc::new(vec![
        rule("minute", Window::MINUTE),
        rule("hour", Window::HOUR),
        rule("day", Window::DAY),
        rule("week", Window::from_secs(7 * 86_400).unwrap()),
    ])
}

/// `n` sequential checks on one principal per case, after a first check
/// that creates the rows, each batch after a marker statement.
async fn probe(limiter: &Limiter, pool: &Pool, rules: &[Rule], n: usize) {
    let client = pool.get().await.unwrap();
    for limits in [1, 4] {
        for mode in [Mode::Count, Mode::Reserve] {
            let limits: Vec<Limit> = rules[..limits]
                .iter()
                .map(|rule| rule.limit(&["probe"]).unwrap())
                .collect();
            let check = || limiter.check(&limits, mode, Policy::FailClosed);
            assert!(check().await.unwrap().is_allowed());
            let marker = format!("SELECT 'probe {} limits {mode:?} x {n}'", limits.len());
            client.batch_execute(&marker).await.unwrap();
            for _ in 0..n {
                assert!(check().await.unwrap().is_allowed());
            }
        }
    }
    client.batch_execute("SELECT 'probe end'").await.unwrap();
}

fn raw_pool(url: &str) -> Pool {
    let config: tokio_postgres::Config = url.parse().unwrap();
    let manager = Manager::from_config(
        config,
        NoTls,
        ManagerConfig {
            recycling_method: RecyclingMethod::Fast,
        },
    );
    Pool::builder(manager)
        .max_size(DEFAULT_POOL_SIZE)
        .build()
        .unwrap()
}

struct Run {
    limiter: Limiter,
    pool: Pool,
    rules: Arc<Vec<Rule>>,
    schema: &'static str,
    limits: usize,
    mode: Mode,
    path: Path,
}

/// Checks per second and the latencies of one run.
struct Figures {
    rate: f64,
    latencies: Vec<Duration>,
}

impl Run {
    async fn go(self, length: Duration) -> Figures {
        let run = Arc::new(self);
        let start = Instant::now();
        let callers: Vec<_> = (0..CALLERS)
            .map(|caller| {
                let run = Arc::clone(&run);
                tokio::spawn(async move {
                    let mut seed = 0x9e37_79b9_7f4a_7c15_u64 ^ (caller as u64 + 1);
                    let mut latencies = Vec::new();
                    while start.elapsed() < length {
                        seed ^= seed << 13;
                        seed ^= seed >> 7;
                        seed ^= seed << 17;
                        let principal = (seed % PRINCIPALS).to_string();
                        let began = Instant::now();
                        run.check(&principal).await;
                        latencies.push(began.elapsed());
                    }
                    latencies
                })
            })
            .collect();
        let mut latencies = Vec::new();
        for caller in callers {
            latencies.extend(caller.await.unwrap());
        }
        let rate = latencies.len() as f64 / start.elapsed().as_secs_f64();
        Figures { rate, latencies }
    }

    async fn check(&self, principal: &str) {
        let limits: Vec<Limit> = self.rules[..self.limits]
            .iter()
            .map(|rule| rule.limit(&[principal]).unwrap())
            .collect();
        if self.path == Path::Tollgate {
            let verdict = self
                .limiter
                .check(&limits, self.mode, Policy::FailClosed)
                .await
                .unwrap();
            assert!(verdict.is_allowed());
            return;
        }
        let now = NOW.as_secs();
        let counters: Vec<_> = limits.iter().map(|l| l.counter(now)).collect();
        let keys: Vec<&[u8]> = counters.iter().map(|c| c.key.as_bytes()).collect();
        let costs: Vec<i64> = counters.iter().map(|c| c.cost as i64).collect();
        let ttls: Vec<i64> = counters.iter().map(|c| c.ttl.as_micros() as i64).collect();
        let rooms: Vec<i64> = counters.iter().map(|c| (c.max - c.cost) as i64).collect();
        let cutoff = SystemTime::now() + Duration::from_secs(5);
        // The call's id and its record's lifetime, and the purging
        // statement for one call in 32, as the store sends them.
        let id = CheckId::new().to_string();
        let lifetime: i64 = 5_020_000;
        let purging = RAW_CALLS.fetch_add(1, Ordering::Relaxed) % 32 == 31;
        let client = self.pool.get().await.unwrap();
        let op = match (self.mode == Mode::Count, purging) {
            (true, false) => "count",
            (true, true) => "count-purging",
            (false, false) => "reserve",
            (false, true) => "reserve-purging",
        };
        let sql = tollgate_postgres::statement(op, self.schema).unwrap();
        let statement = client.prepare_cached(&sql).await.unwrap();
        match (self.mode, self.path) {
            (Mode::Count, _) => {
                let rows = client
                    .query(&statement, &[&keys, &costs, &ttls, &cutoff, &id, &lifetime])
                    .await
                    .unwrap();
                assert_eq!(rows.len(), keys.len());
            }
            (_, Path::Raw) => {
                let rows = client
                    .query(
                        &statement,
                        &[&keys, &costs, &ttls, &rooms, &cutoff, &id, &lifetime],
                    )
                    .await
                    .unwrap();
                assert_eq!(rows.len(), keys.len());
            }
            _ => {
                // BEGIN; lock the existing rows in key order; the same
                // decide-and-write statement without its own lock; COMMIT:
                // four messages sent at once, one round trip.
                let lock = format!(
                    "SELECT key FROM \"{}\".counters WHERE key = ANY ($1::bytea[]) \
                     ORDER BY key FOR UPDATE",
                    self.schema
                );
                let lock = client.prepare_cached(&lock).await.unwrap();
                let unlocked = sql.replace("ORDER BY c.key FOR UPDATE", "ORDER BY c.key");
                let write = client.prepare_cached(&unlocked).await.unwrap();
                let lock_params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&keys];
                let write_params: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
                    [&keys, &costs, &ttls, &rooms, &cutoff, &id, &lifetime];
                let (begin, locked, rows, commit) = tokio::join!(
                    client.batch_execute("BEGIN"),
                    client.query(&lock, &lock_params),
                    client.query(&write, &write_params),
                    client.batch_execute("COMMIT"),
                );
                begin.unwrap();
                locked.unwrap();
                assert_eq!(rows.unwrap().len(), keys.len());
                commit.unwrap();
            }
        }
    }
}

fn report(limits: usize, mode: Mode, path: Path, figures: &mut [Figures]) {
    let mut rates: Vec<f64> = figures.iter().map(|f| f.rate).collect();
    let shown: Vec<String> = rates.iter().map(|r| format!("{r:.0}")).collect();
    rates.sort_by(f64::total_cmp);
    let median = rates[rates.len() / 2];
    let mut latencies: Vec<Duration> = figures
        .iter_mut()
        .flat_map(|f| std::mem::take(&mut f.latencies))
        .collect();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "| {limits} | {mode:?} | {path:?} | {} | {median:.0} | {:.2?} | {:.2?} |",
        shown.join(" / "),
        at(0.5),
        at(0.99),
    );
}
