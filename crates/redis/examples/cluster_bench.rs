//! A measurement (no assertion): the Redis Cluster store against the
//! single-node store, in the same run.
//!
//! A private `redis-server` and a private cluster (3 primaries, 3
//! replicas, all on this machine); 50 checks in flight through a
//! `Limiter`, each for one of 10,000 principals picked at random, for 2 s
//! per scenario; scenarios alternate, 3 rounds:
//!
//! - `count` and `reserve` of 1 and 4 limits, on each store,
//! - on the cluster, `reserve` of 4 limits whose keys carry the principal
//!   as a `{hash tag}` (one slot: one script call, no give-back possible)
//!   against the same without tags (up to 4 slots: 4 calls at once).
//!
//! Each scenario reports checks/s and the CPU time (utime + stime, from
//! `/proc/<pid>/stat`) that every `redis-server` of the store spent per
//! check, summed over nodes (replicas included: they apply every write
//! too). On a machine with few cores throughput cannot scale with nodes;
//! CPU per check is the honest figure.
//!
//! `cargo run --release -p tollgate-redis --example cluster_bench`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use tollgate_core::{Limit, Limiter, MAX_MAX, Rule, Window};
use tollgate_redis::{RedisClusterStore, RedisStore};
use tollgate_test_support::redis_cluster::RedisCluster;
use tollgate_test_support::redis_server::RedisServer;

const IN_FLIGHT: usize = 50;
const PRINCIPALS: usize = 10_000;
const RUN: Duration = Duration::from_secs(2);
const ROUNDS: usize = 3;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Op {
    Count,
    Reserve,
}

struct Scenario {
    name: String,
    limiter: Arc<Limiter>,
    pids: Vec<u32>,
    /// The primaries among `pids` (all of them for one server).
    primaries: Vec<u32>,
    op: Op,
    /// Per principal, the limits of one check.
    checks: Arc<Vec<Vec<Limit>>>,
}

/// Per principal, `n` limits; with `tagged`, the principal is a hash tag.
fn checks(n: usize, tagged: bool) -> Arc<Vec<Vec<Limit>>> {
    let rules: Vec<Rule> = (0..n)
        .map(|i| {
            Rule::new(&format!("bench{i}"), MAX_MAX, Window::DAY)
                .and_then(|r| r.with_key(&["id"]))
                .unwrap()
        })
        .collect();
    let run = std::process::id();
    Arc::new(
        (0..PRINCIPALS)
            .map(|p| {
                let id = if tagged {
                    format!("{{r{run}p{p}}}")
                } else {
                    format!("r{run}p{p}")
                };
                rules
                    .iter()
                    .map(|r| r.limit(&[id.as_str()]).unwrap())
                    .collect()
            })
            .collect(),
    )
}

/// utime + stime of `pid`, in clock ticks.
fn cpu_ticks(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    // Fields after the command name (which is in parentheses).
    let rest = &stat[stat.rfind(')').unwrap() + 2..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // utime and stime are fields 14 and 15 of stat, 12 and 13 after the name.
    fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap()
}

fn ticks_per_second() -> f64 {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output();
    out.ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(100.0)
}

/// Checks done, failed, server CPU ticks (all, primaries), over one run.
async fn run(scenario: &Scenario) -> (u64, u64, u64, u64) {
    let stop = Arc::new(AtomicBool::new(false));
    let done = Arc::new(AtomicU64::new(0));
    let failed = Arc::new(AtomicU64::new(0));
    let before: u64 = scenario.pids.iter().map(|&p| cpu_ticks(p)).sum();
    let primaries_before: u64 = scenario.primaries.iter().map(|&p| cpu_ticks(p)).sum();
    let tasks: Vec<_> = (0..IN_FLIGHT)
        .map(|task| {
            let (stop, done, failed) = (stop.clone(), done.clone(), failed.clone());
            let limiter = scenario.limiter.clone();
            let checks = scenario.checks.clone();
            let op = scenario.op;
            tokio::spawn(async move {
                let mut seed = 0x9E37_79B9_7F4A_7C15_u64 ^ (task as u64 + 1);
                while !stop.load(Ordering::Relaxed) {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let limits = &checks[(seed % PRINCIPALS as u64) as usize];
                    let ok = match op {
                        Op::Count => limiter.count(limits).await.is_ok(),
                        Op::Reserve => limiter.reserve(limits).await.is_ok_and(|v| v.is_allowed()),
                    };
                    if ok {
                        done.fetch_add(1, Ordering::Relaxed);
                    } else {
                        failed.fetch_add(1, Ordering::Relaxed);
                    }
                }
            })
        })
        .collect();
    tokio::time::sleep(RUN).await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    let after: u64 = scenario.pids.iter().map(|&p| cpu_ticks(p)).sum();
    let primaries_after: u64 = scenario.primaries.iter().map(|&p| cpu_ticks(p)).sum();
    (
        done.load(Ordering::Relaxed),
        failed.load(Ordering::Relaxed),
        after - before,
        primaries_after - primaries_before,
    )
}

#[tokio::main]
async fn main() {
    let server = RedisServer::start();
    let cluster = tokio::task::spawn_blocking(RedisCluster::start)
        .await
        .unwrap();
    let single = Arc::new(Limiter::new(RedisStore::open(&server.url()).unwrap()));
    let clustered = Arc::new(Limiter::new(
        RedisClusterStore::open(&cluster.url()).unwrap(),
    ));
    let single_pids = vec![server.pid().unwrap()];
    let cluster_pids = cluster.pids();
    let primary_pids: Vec<u32> = cluster
        .primaries()
        .into_iter()
        .filter_map(|port| cluster.pid(port))
        .collect();
    let mut scenarios = Vec::new();
    for (store, limiter, pids, primaries) in [
        ("single", &single, &single_pids, &single_pids),
        ("cluster", &clustered, &cluster_pids, &primary_pids),
    ] {
        for n in [1, 4] {
            for op in [Op::Count, Op::Reserve] {
                scenarios.push(Scenario {
                    name: format!("{store} {op:?} x{n}").to_lowercase(),
                    limiter: limiter.clone(),
                    pids: pids.clone(),
                    primaries: primaries.clone(),
                    op,
                    checks: checks(n, false),
                });
            }
        }
    }
    scenarios.push(Scenario {
        name: "cluster reserve x4 tagged (one slot)".into(),
        limiter: clustered.clone(),
        pids: cluster_pids.clone(),
        primaries: primary_pids.clone(),
        op: Op::Reserve,
        checks: checks(4, true),
    });
    // Warm up: connect, load scripts.
    for scenario in &scenarios {
        let limits = &scenario.checks[0];
        let _ = scenario.limiter.count(limits).await;
        let _ = scenario.limiter.reserve(limits).await;
    }
    let hz = ticks_per_second();
    let mut totals = vec![(0_u64, 0_u64, 0_u64, 0_u64); scenarios.len()];
    for round in 0..ROUNDS {
        for (scenario, total) in scenarios.iter().zip(&mut totals) {
            let (done, failed, ticks, primary_ticks) = run(scenario).await;
            let per_check_us = ticks as f64 / hz * 1e6 / done.max(1) as f64;
            println!(
                "round {round} {:40} {:>8.0} checks/s  {:>6.1} µs server CPU/check  ({failed} failed)",
                scenario.name,
                done as f64 / RUN.as_secs_f64(),
                per_check_us
            );
            total.0 += done;
            total.1 += failed;
            total.2 += ticks;
            total.3 += primary_ticks;
        }
    }
    println!(
        "\nmean over {ROUNDS} rounds of {RUN:?}, {IN_FLIGHT} in flight, {PRINCIPALS} principals:"
    );
    println!(
        "| scenario | checks/s | server CPU per check, all nodes (µs) | of which primaries (µs) | failed |"
    );
    println!("|---|---|---|---|---|");
    let per = |ticks: u64, done: u64| ticks as f64 / hz * 1e6 / done.max(1) as f64;
    for (scenario, &(done, failed, ticks, primary_ticks)) in scenarios.iter().zip(&totals) {
        println!(
            "| {} | {:.0} | {:.1} | {:.1} | {failed} |",
            scenario.name,
            done as f64 / (RUN.as_secs_f64() * ROUNDS as f64),
            per(ticks, done),
            per(primary_ticks, done),
        );
    }
}
