//! Checks per second at 50 concurrent callers, 4 limits per check.
//!
//! ```text
//! cargo run --release -p tollgate-sqlite --example throughput -- [seconds] [process|power-loss]
//! ```
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::{Duration, Instant};

use tollgate_core::{Limiter, Mode, Policy, Rule, Window};
use tollgate_sqlite::{Durability, SqliteOptions, SqliteStore};

const CALLERS: usize = 50;

#[tokio::main]
async fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: u64 = args.next().map_or(5, |s| s.parse().expect("seconds"));
    let durability = match args.next().as_deref() {
        None | Some("process") => Durability::Process,
        Some("power-loss") => Durability::PowerLoss,
        Some(other) => panic!("unknown durability {other}"),
    };
    let dir = tempfile::tempdir().unwrap();
    println!("{CALLERS} callers, 4 limits per check, {durability:?}, {seconds} s per mode");
    for mode in [Mode::Count, Mode::Reserve] {
        let path = dir.path().join(format!("{mode:?}.sqlite"));
        let options = SqliteOptions::default().durability(durability);
        let limiter = Limiter::new(SqliteStore::open_with(&path, options).unwrap());
        run(&limiter, mode, Duration::from_secs(seconds)).await;
    }
}

/// Runs every caller until `length` has passed and prints the figures.
async fn run(limiter: &Limiter, mode: Mode, length: Duration) {
    let big = 1_000_000_000_000;
    let rule = |name, window, parts: &[&str]| {
        Rule::new(name, big, window)
            .and_then(|rule| rule.with_key(parts))
            .unwrap()
    };
    let burst = rule("ask-burst", Window::MINUTE, &["visitor"]);
    let ask = rule("ask", Window::DAY, &["project", "visitor"]);
    let site = rule("ask-site", Window::DAY, &["project"]);
    let all = rule("ask-all", Window::DAY, &[]);
    let start = Instant::now();
    let callers: Vec<_> = (0..CALLERS)
        .map(|caller| {
            let visitor = format!("203.0.113.{caller}");
            let limits = [
                burst.limit(&[visitor.as_str()]).unwrap(),
                ask.limit(&["docs", visitor.as_str()]).unwrap(),
                site.limit(&["docs"]).unwrap(),
                all.limit::<&str>(&[]).unwrap(),
            ];
            let limiter = limiter.clone();
            tokio::spawn(async move {
                let (mut latencies, mut failures) = (Vec::new(), 0u64);
                while start.elapsed() < length {
                    let began = Instant::now();
                    match limiter.check(&limits, mode, Policy::FailClosed).await {
                        Ok(verdict) => assert!(verdict.is_allowed()),
                        Err(_) => failures += 1,
                    }
                    latencies.push(began.elapsed());
                }
                (latencies, failures)
            })
        })
        .collect();
    let (mut latencies, mut failures) = (Vec::new(), 0);
    for caller in callers {
        let (l, f) = caller.await.unwrap();
        latencies.extend(l);
        failures += f;
    }
    let elapsed = start.elapsed().as_secs_f64();
    latencies.sort();
    let at = |q: f64| latencies[((latencies.len() - 1) as f64 * q) as usize];
    println!(
        "{mode:?}: {} checks in {elapsed:.1} s = {:.0} checks/s; latency p50 {:?}, p99 {:?}, max {:?}; {failures} failed",
        latencies.len(),
        latencies.len() as f64 / elapsed,
        at(0.5),
        at(0.99),
        at(1.0),
    );
}
