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
//! With `TOLLGATE_BENCH_SLIDING=1` the rules are sliding windows and the
//! clock stands 2 s into a week (so into each rule's window), where the
//! limiter keeps no previous window's count: every check sends each
//! limit's prior, whose counter (1, for every principal) is written first.
//! The raw path then runs the statements with priors (and the pipelined
//! transaction row is left out).
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;
use tollgate_core::{
    Algorithm, CheckId, Limit, Limiter, ManualClock, Mode, Policy, RetryPolicy, Rule, Window,
};
use tollgate_postgres::{DEFAULT_POOL_SIZE, PostgresOptions, PostgresStore};
use tollgate_test_support::postgres_server::PostgresServer;

const CALLERS: usize = 50;
const PRINCIPALS: u64 = 10_000;
const BIG: u64 = 1_000_000_000_000;
const NOW: Duration = Duration::from_secs(1_700_000_030);
/// The clock under `TOLLGATE_BENCH_SLIDING=1`: 2 s into a week, a day, an
/// hour and a minute.
const SLIDING_NOW: Duration = Duration::from_secs(2_813 * 604_800 + 2);
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
    let sliding = std::env::var("TOLLGATE_BENCH_SLIDING").is_ok_and(|v| v == "1");
    let now = if sliding { SLIDING_NOW } else { NOW };
    let store = PostgresStore::open_with(&url, PostgresOptions::default().schema(schema))
        .await
        .unwrap();
    let generous = RetryPolicy {
        retries: 0,
        delay: Duration::ZERO,
        timeout: Duration::from_secs(5),
    };
    let limiter = Limiter::builder(store)
        .clock(ManualClock::new(now))
        .retry(generous)
        .build();
    let pool = raw_pool(&url);
    let rules = rules(sliding);
    if sliding {
        write_previous(&pool, schema, &rules, now.as_secs()).await;
    }
    if let Ok(n) = std::env::var("TOLLGATE_BENCH_PROBE") {
        probe(&limiter, &pool, &rules, n.parse().expect("probe count")).await;
        return;
    }
    println!(
        "{CALLERS} callers, {PRINCIPALS} principals, pool of {DEFAULT_POOL_SIZE}, \
         {rounds} rounds x {seconds} s, alternating{}",
        if sliding {
            ", sliding (with priors)"
        } else {
            ""
        }
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
        if sliding && paths.contains(&Path::RawTransaction) {
            continue;
        }
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
                    now: now.as_secs(),
                    sliding,
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

fn rules(sliding: bool) -> Arc<Vec<Rule>> {
    let algorithm = if sliding {
        Algorithm::Sliding
    } else {
        Algorithm::Fixed
    };
    let rule = |name, window| {
        Rule::new(name, BIG, window)
            .and_then(|rule| rule.with_key(&["principal"]))
            .map(|rule| rule.with_algorithm(algorithm))
            .unwrap()
    };
    Arc::new(vec![
        rule("minute", Window::MINUTE),
        rule("hour", Window::HOUR),
        rule("day", Window::DAY),
        rule("week", Window::from_secs(7 * 86_400).unwrap()),
    ])
}

/// Writes every principal's previous-window counter of every rule at
/// `now`: 1, living a day.
async fn write_previous(pool: &Pool, schema: &str, rules: &[Rule], now: u64) {
    let client = pool.get().await.unwrap();
    let sql = format!(
        "INSERT INTO \"{schema}\".counters (key, value, expires_at) \
         SELECT key, 1, now() + interval '1 day' FROM unnest($1::bytea[]) AS k (key) \
         ON CONFLICT (key) DO UPDATE SET value = 1, expires_at = excluded.expires_at"
    );
    for rule in rules {
        let previous = now - rule.window().secs();
        let keys: Vec<Vec<u8>> = (0..PRINCIPALS)
            .map(|p| {
                let limit = rule.limit(&[p.to_string()]).unwrap();
                limit.counter(previous).key.into_bytes()
            })
            .collect();
        client.execute(&sql, &[&keys]).await.unwrap();
    }
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
    /// The clock, in seconds.
    now: u64,
    /// Whether the rules are sliding: the raw path sends priors.
    sliding: bool,
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
        let now = self.now;
        let counters: Vec<_> = limits.iter().map(|l| l.counter(now)).collect();
        let keys: Vec<&[u8]> = counters.iter().map(|c| c.key.as_bytes()).collect();
        let costs: Vec<i64> = counters.iter().map(|c| c.cost as i64).collect();
        let ttls: Vec<i64> = counters.iter().map(|c| c.ttl.as_micros() as i64).collect();
        let rooms: Vec<i64> = counters.iter().map(|c| (c.max - c.cost) as i64).collect();
        let floors: Vec<i64> = vec![0; counters.len()];
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
        if self.sliding {
            self.raw_with_priors(&client, op, &limits).await;
            return;
        }
        let sql = statement(op, self.schema);
        let statement = client.prepare_cached(sql).await.unwrap();
        match (self.mode, self.path) {
            (Mode::Count, _) => {
                let rows = client
                    .query(&statement, &[&keys, &costs, &ttls, &cutoff, &id, &lifetime])
                    .await
                    .unwrap();
                assert_eq!(rows.len(), keys.len());
            }
            (_, Path::Raw) => {
                // Again after a serialization failure (a counter created
                // concurrently), as the store does.
                let rows = loop {
                    match client
                        .query(
                            &statement,
                            &[
                                &keys, &costs, &ttls, &rooms, &cutoff, &id, &lifetime, &floors,
                            ],
                        )
                        .await
                    {
                        Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {}
                        rows => break rows.unwrap(),
                    }
                };
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
                let write_params: [&(dyn tokio_postgres::types::ToSql + Sync); 8] = [
                    &keys, &costs, &ttls, &rooms, &cutoff, &id, &lifetime, &floors,
                ];
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

impl Run {
    /// The raw statement with priors (`op`'s variant), as the store sends
    /// it for `limits`, each weighed by the rest of its previous window.
    async fn raw_with_priors(
        &self,
        client: &deadpool_postgres::Client,
        op: &str,
        limits: &[Limit],
    ) {
        let now = self.now;
        let counters: Vec<_> = limits.iter().map(|l| l.counter(now)).collect();
        let keys: Vec<&[u8]> = counters.iter().map(|c| c.key.as_bytes()).collect();
        let costs: Vec<i64> = counters.iter().map(|c| c.cost as i64).collect();
        let ttls: Vec<i64> = counters.iter().map(|c| c.ttl.as_micros() as i64).collect();
        let rooms: Vec<i64> = counters.iter().map(|c| (c.max - c.cost) as i64).collect();
        let floors: Vec<i64> = vec![0; counters.len()];
        let previous: Vec<Vec<u8>> = limits
            .iter()
            .map(|l| l.counter(now - l.rule().window().secs()).key.into_bytes())
            .collect();
        let at: Vec<i64> = (1..=limits.len() as i64).collect();
        let wholes: Vec<i64> = limits
            .iter()
            .map(|l| l.rule().window().secs() as i64)
            .collect();
        let parts: Vec<i64> = limits
            .iter()
            .map(|l| (l.rule().window().secs() - now % l.rule().window().secs()) as i64)
            .collect();
        let cutoff = SystemTime::now() + Duration::from_secs(5);
        let id = CheckId::new().to_string();
        let lifetime: i64 = 5_020_000;
        let op = match (self.mode == Mode::Count, op.ends_with("-purging")) {
            (true, false) => "count-priors",
            (true, true) => "count-priors-purging",
            (false, false) => "reserve-priors",
            (false, true) => "reserve-priors-purging",
        };
        let sql = statement(op, self.schema);
        let statement = client.prepare_cached(sql).await.unwrap();
        let count: [&(dyn tokio_postgres::types::ToSql + Sync); 7] =
            [&keys, &costs, &ttls, &cutoff, &id, &lifetime, &previous];
        let reserve: [&(dyn tokio_postgres::types::ToSql + Sync); 12] = [
            &keys, &costs, &ttls, &rooms, &cutoff, &id, &lifetime, &floors, &previous, &at, &parts,
            &wholes,
        ];
        let params: &[&(dyn tokio_postgres::types::ToSql + Sync)] = if self.mode == Mode::Count {
            &count
        } else {
            &reserve
        };
        // Again after a serialization failure, as the store does.
        let rows = loop {
            match client.query(&statement, params).await {
                Err(e) if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) => {}
                rows => break rows.unwrap(),
            }
        };
        assert_eq!(rows.len(), 2 * keys.len());
    }
}

/// The store's statement `op` on `schema`, built once: building them all
/// at every check (as `tollgate_postgres::statement` does) would weigh on
/// the raw path's client.
fn statement(op: &str, schema: &str) -> &'static str {
    static BUILT: std::sync::Mutex<Vec<(String, &'static str)>> = std::sync::Mutex::new(Vec::new());
    let key = format!("{schema}/{op}");
    let mut built = BUILT.lock().unwrap();
    if let Some((_, sql)) = built.iter().find(|(k, _)| *k == key) {
        return sql;
    }
    let sql = tollgate_postgres::statement(op, schema).unwrap();
    let sql: &'static str = Box::leak(sql.into_boxed_str());
    built.push((key, sql));
    sql
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
