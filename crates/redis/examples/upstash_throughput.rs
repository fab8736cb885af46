//! Throughput of checks through `Limiter::new(UpstashStore)` against an
//! Upstash-compatible endpoint, next to a raw HTTP ceiling: the same JSON
//! requests (`EVALSHA` of the same scripts with the same arguments) sent
//! with a reqwest client and read with serde_json, no tollgate code.
//!
//! 50 concurrent tasks, 10,000 principals, 1 and 4 limits per check, count
//! and reserve; tollgate (A) and the ceiling (B) alternate A B A B, 3 rounds
//! of 3 s each. Against `UPSTASH_REDIS_REST_URL` / `UPSTASH_REDIS_REST_TOKEN`
//! when set, otherwise an in-process `tollgate-rest-proxy` over a private
//! `redis-server`.
//!
//! ```sh
//! cargo run --release -p tollgate-redis --example upstash_throughput
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tollgate_core::{Limit, Limiter, Rule, Window};
use tollgate_redis::upstash::{TOKEN_VAR, URL_VAR, UpstashStore};
use tollgate_test_support::redis_server::RedisServer;

const TASKS: usize = 50;
const PRINCIPALS: usize = 10_000;
const ROUNDS: usize = 3;
const ROUND: Duration = Duration::from_secs(3);
/// No check is ever refused: every call spends.
const MAX: u64 = 1_000_000_000;

#[derive(Clone, Copy, PartialEq)]
enum Op {
    Count,
    Reserve,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::Count => "count",
            Op::Reserve => "reserve",
        }
    }
}

struct Run {
    calls: u64,
    errors: u64,
    latencies: Vec<Duration>,
    took: Duration,
}

/// The endpoint: from the environment, or a proxy started here (kept alive
/// by the returned guard).
fn endpoint() -> (
    String,
    String,
    Option<(RedisServer, std::thread::JoinHandle<()>)>,
) {
    if let (Ok(url), Ok(token)) = (std::env::var(URL_VAR), std::env::var(TOKEN_VAR)) {
        return (url, token, None);
    }
    let server = RedisServer::start();
    let token = "bench-token".to_owned();
    let (tx, rx) = std::sync::mpsc::channel();
    let options = tollgate_rest_proxy::Options::new(server.url(), token.clone())
        .create_user("tollgate-proxy");
    let thread = std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .enable_all()
            .build()
            .unwrap();
        runtime.block_on(async move {
            let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
            tx.send(listener.local_addr().unwrap().port()).unwrap();
            tollgate_rest_proxy::serve(listener, options).await.unwrap();
        });
    });
    let port = rx.recv().unwrap();
    (
        format!("http://127.0.0.1:{port}"),
        token,
        Some((server, thread)),
    )
}

fn rules(n: usize) -> Vec<Rule> {
    (0..n)
        .map(|i| {
            Rule::new(&format!("bench{i}"), MAX, Window::DAY)
                .and_then(|r| r.with_key(&["principal"]))
                .unwrap()
        })
        .collect()
}

fn principal(task: usize, call: u64) -> String {
    format!(
        "p{}",
        (task as u64 * 7_919 + call * 104_729) % PRINCIPALS as u64
    )
}

async fn measure<F, Fut>(call: F) -> Run
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: std::future::Future<Output = bool> + Send,
{
    let call = Arc::new(call);
    let stop = Arc::new(AtomicBool::new(false));
    let started = Instant::now();
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let call = Arc::clone(&call);
            let stop = Arc::clone(&stop);
            tokio::spawn(async move {
                let (mut n, mut errors, mut latencies) = (0_u64, 0_u64, Vec::new());
                while !stop.load(Ordering::Relaxed) {
                    let at = Instant::now();
                    if !call(task, n).await {
                        errors += 1;
                    }
                    latencies.push(at.elapsed());
                    n += 1;
                }
                (n, errors, latencies)
            })
        })
        .collect();
    tokio::time::sleep(ROUND).await;
    stop.store(true, Ordering::Relaxed);
    let mut run = Run {
        calls: 0,
        errors: 0,
        latencies: Vec::new(),
        took: Duration::ZERO,
    };
    for task in tasks {
        let (n, errors, latencies) = task.await.unwrap();
        run.calls += n;
        run.errors += errors;
        run.latencies.extend(latencies);
    }
    run.took = started.elapsed();
    run
}

/// Side A: a check through the limiter.
async fn tollgate(limiter: Arc<Limiter>, rules: Arc<Vec<Rule>>, op: Op) -> Run {
    measure(move |task, n| {
        let limiter = Arc::clone(&limiter);
        let rules = Arc::clone(&rules);
        async move {
            let who = principal(task, n);
            let limits: Vec<Limit> = rules
                .iter()
                .map(|r| r.limit(&[who.as_str()]).unwrap())
                .collect();
            let verdict = match op {
                Op::Count => limiter.count(&limits).await,
                Op::Reserve => limiter.reserve(&limits).await,
            };
            verdict.is_ok_and(|v| v.is_allowed())
        }
    })
    .await
}

/// Side B: the same request by hand.
async fn ceiling(
    client: reqwest::Client,
    url: Arc<String>,
    auth: Arc<String>,
    rules: usize,
    op: Op,
) -> Run {
    let script = tollgate_redis::scripts::CHECK;
    let sha = Arc::new(sha1_smol::Sha1::from(script).digest().to_string());
    measure(move |task, n| {
        let (client, url, auth, sha) = (
            client.clone(),
            Arc::clone(&url),
            Arc::clone(&auth),
            Arc::clone(&sha),
        );
        async move {
            let who = principal(task, n);
            let now = SystemTime::now().duration_since(UNIX_EPOCH).unwrap();
            let window = now.as_secs() / 86_400;
            let keys = (rules + 1).to_string();
            let mut command = vec!["EVALSHA".to_owned(), sha.to_string(), keys];
            for i in 0..rules {
                command.push(format!("limit:bench{i}:{who}:{window}"));
            }
            // The call's record: its id's field in the hash of its
            // deadline's 100 ms.
            let id = tollgate_core::CheckId::new();
            let deadline = now.as_millis() as u64 + 50;
            let hash = deadline / 100;
            command.push(format!("{}780.{hash}", tollgate_redis::RECORD_PREFIX));
            command.extend(["1".into(), "1660".into(), "1".into(), id.to_string()]);
            let code = if op == Op::Reserve { "r" } else { "c" };
            command.push(format!("{code}{rules}.1"));
            command.push((deadline + 20).to_string());
            for _ in 0..rules {
                command.push(if op == Op::Reserve {
                    format!("86400000:1:{MAX}")
                } else {
                    "86400000:1".into()
                });
            }
            let Ok(response) = client
                .post(url.as_str())
                .header("authorization", auth.as_str())
                .header("content-type", "application/json")
                .body(serde_json::to_vec(&command).unwrap())
                .send()
                .await
            else {
                return false;
            };
            let Ok(body) = response.bytes().await else {
                return false;
            };
            let value: serde_json::Value = serde_json::from_slice(&body).unwrap_or_default();
            value["result"][0]
                .as_array()
                .is_some_and(|a| a.len() >= rules)
        }
    })
    .await
}

fn percentile(sorted: &[Duration], p: f64) -> Duration {
    sorted[((sorted.len() as f64 * p) as usize).min(sorted.len() - 1)]
}

fn report(side: &str, rules: usize, op: Op, round: usize, mut run: Run) -> f64 {
    run.latencies.sort();
    let rate = run.calls as f64 / run.took.as_secs_f64();
    println!(
        "{side:<8} {rules} limit(s) {:<7} round {round}: {rate:>8.0} checks/s  p50 {:>6.2} ms  p99 {:>6.2} ms  errors {}",
        op.name(),
        percentile(&run.latencies, 0.50).as_secs_f64() * 1e3,
        percentile(&run.latencies, 0.99).as_secs_f64() * 1e3,
        run.errors
    );
    rate
}

#[tokio::main]
async fn main() {
    let (url, token, _guard) = endpoint();
    let store = UpstashStore::open(&url, &token).unwrap();
    let limiter = Arc::new(Limiter::new(store));
    // The raw side's client keeps connections as the store's does.
    let client = reqwest::Client::builder()
        .no_proxy()
        .pool_max_idle_per_host(64)
        .pool_idle_timeout(Duration::from_secs(30))
        .tcp_nodelay(true)
        .build()
        .unwrap();
    let url = Arc::new(url.trim().trim_start_matches("upstash+").to_owned());
    let auth = Arc::new(format!("Bearer {}", token.trim()));
    println!(
        "{TASKS} tasks, {PRINCIPALS} principals, {ROUNDS} rounds of {ROUND:?} per side, A B A B"
    );
    for n in [1, 4] {
        let rules = Arc::new(rules(n));
        for op in [Op::Count, Op::Reserve] {
            let (mut a, mut b) = (Vec::new(), Vec::new());
            for round in 0..ROUNDS {
                let run = tollgate(Arc::clone(&limiter), Arc::clone(&rules), op).await;
                a.push(report("tollgate", n, op, round, run));
                let run = ceiling(client.clone(), Arc::clone(&url), Arc::clone(&auth), n, op).await;
                b.push(report("raw-http", n, op, round, run));
            }
            let (a, b) = (median(a), median(b));
            println!(
                "== {n} limit(s) {}: tollgate {a:.0} checks/s, raw HTTP {b:.0} requests/s, ratio {:.2}",
                op.name(),
                a / b
            );
        }
    }
}

fn median(mut rates: Vec<f64>) -> f64 {
    rates.sort_by(f64::total_cmp);
    rates[rates.len() / 2]
}
