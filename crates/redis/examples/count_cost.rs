//! A throwaway measurement (no assertion): what moving `count` from
//! `MULTI`/`EXEC` to the deadline-checked script costs.
//!
//! Against a private `redis-server` on a free port, 50 tasks share one
//! multiplexed connection and check 4 counters each, for 3 s per run:
//!
//! - A: `MULTI`, `INCRBY` + `PEXPIRE` per counter, `EXEC` (the old `count`),
//! - B: one `EVALSHA` of `COUNT_SCRIPT` with the same work (the new `count`),
//! - C: `RedisStore::count`, which sends B.
//!
//! Runs alternate A B C, 3 rounds. `cargo run --release -p tollgate-redis --example count_cost`

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use tollgate_core::{Counter, CounterStore, Deadline};
use tollgate_redis::RedisStore;
use tollgate_redis::scripts::COUNT as COUNT_SCRIPT;
use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};

const TASKS: usize = 50;
const COUNTERS: usize = 4;
const RUN: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
const TTL_MS: u64 = 86_400_000;

#[derive(Clone, Copy, Debug)]
enum Form {
    MultiExec,
    Script,
    Store,
}

fn keys(task: usize) -> Vec<String> {
    (0..COUNTERS)
        .map(|i| format!("limit:bench{i}:task{task}:20421"))
        .collect()
}

async fn check(
    form: Form,
    conn: &mut MultiplexedConnection,
    store: &RedisStore,
    keys: &[String],
    counters: &[Counter],
    sha: &str,
) {
    match form {
        Form::MultiExec => {
            let mut pipe = redis::pipe();
            pipe.atomic();
            for key in keys {
                pipe.cmd("INCRBY").arg(key).arg(1);
                pipe.cmd("PEXPIRE").arg(key).arg(TTL_MS);
            }
            let _: Vec<redis::Value> = pipe.query_async(conn).await.unwrap();
        }
        Form::Script => {
            let cutoff = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
                + 70;
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(sha).arg(keys.len());
            for key in keys {
                cmd.arg(key);
            }
            cmd.arg(cutoff);
            for _ in keys {
                cmd.arg(TTL_MS).arg(1);
            }
            let _: redis::Value = cmd.query_async(conn).await.unwrap();
        }
        Form::Store => {
            store
                .count(counters, Deadline::after(Duration::from_secs(10)))
                .await
                .unwrap();
        }
    }
}

async fn run(form: Form, conn: &MultiplexedConnection, store: &RedisStore, sha: &str) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (mut conn, store, sha) = (conn.clone(), store.clone(), sha.to_owned());
            let (done, stop) = (Arc::clone(&done), Arc::clone(&stop));
            tokio::spawn(async move {
                let keys = keys(task);
                let counters: Vec<Counter> = keys
                    .iter()
                    .map(|key| Counter {
                        key: key.clone(),
                        ttl: Duration::from_millis(TTL_MS),
                        cost: 1,
                        max: 1 << 40,
                    })
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    check(form, &mut conn, &store, &keys, &counters, &sha).await;
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    let started = Instant::now();
    tokio::time::sleep(RUN).await;
    let n = done.load(Ordering::Relaxed);
    let took = started.elapsed();
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.await.unwrap();
    }
    n as f64 / took.as_secs_f64()
}

#[tokio::main(flavor = "multi_thread", worker_threads = 2)]
async fn main() {
    let options = RedisServerOptions::default().args(["--loglevel", "warning", "--hz", "10"]);
    let server = tokio::task::spawn_blocking(move || RedisServer::start_with(options))
        .await
        .unwrap();
    let client = redis::Client::open(server.url()).unwrap();
    let conn = client.get_multiplexed_async_connection().await.unwrap();
    let store = RedisStore::open(&server.url()).unwrap();
    let script = redis::Script::new(COUNT_SCRIPT);
    script.load_async(&mut conn.clone()).await.unwrap();
    let sha = script.get_hash().to_owned();
    // Warm up every path (connections, script cache).
    let warm = keys(TASKS);
    let counters: Vec<Counter> = warm
        .iter()
        .map(|key| Counter {
            key: key.clone(),
            ttl: Duration::from_millis(TTL_MS),
            cost: 1,
            max: 1 << 40,
        })
        .collect();
    for form in [Form::MultiExec, Form::Script, Form::Store] {
        check(form, &mut conn.clone(), &store, &warm, &counters, &sha).await;
    }
    let mut results: Vec<(Form, Vec<f64>)> = vec![
        (Form::MultiExec, Vec::new()),
        (Form::Script, Vec::new()),
        (Form::Store, Vec::new()),
    ];
    for round in 0..ROUNDS {
        for (form, runs) in &mut results {
            let rate = run(*form, &conn, &store, &sha).await;
            println!("round {round} {form:?}: {rate:.0} checks/s");
            runs.push(rate);
        }
    }
    for (form, runs) in &results {
        let (min, max) = runs
            .iter()
            .fold((f64::MAX, 0_f64), |(lo, hi), &r| (lo.min(r), hi.max(r)));
        let mean = runs.iter().sum::<f64>() / runs.len() as f64;
        println!(
            "{form:?}: mean {mean:.0}, min {min:.0}, max {max:.0} checks/s ({TASKS} tasks x {COUNTERS} counters)"
        );
    }
}
