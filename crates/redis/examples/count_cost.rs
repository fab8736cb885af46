//! A throwaway measurement (no assertion): what moving `count` from
//! `MULTI`/`EXEC` to the deadline-checked script costs.
//!
//! Against a private `redis-server` on a free port, 50 tasks share one
//! multiplexed connection and check 4 counters each, for 3 s per run:
//!
//! - A: `MULTI`, `INCRBY` + `PEXPIRE` per counter, `EXEC` (the old `count`),
//! - B: one `EVALSHA` of `COUNT_SCRIPT` with the same work (the new `count`),
//! - C: `RedisStore::count`, which sends B,
//! - D: B without the call's record ([`UNRECORDED_COUNT`], the script before
//!   check ids): what a check's id costs the server.
//!
//! Runs alternate A B C D, 3 rounds (`-- ROUNDS` for more). `cargo run
//! --release -p tollgate-redis --example count_cost`; with `-- reserve
//! [ROUNDS]`, the same for reservations (a max far above the counts): B
//! `RESERVE`, C `RedisStore::reserve`, D `RESERVE` without its record; no A.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use redis::aio::MultiplexedConnection;
use tollgate_core::{CheckId, Counter, CounterStore, Deadline};
use tollgate_redis::RedisStore;
use tollgate_redis::scripts::{COUNT as COUNT_SCRIPT, RESERVE as RESERVE_SCRIPT};
use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};

const TASKS: usize = 50;
const COUNTERS: usize = 4;
const RUN: Duration = Duration::from_secs(3);
const ROUNDS: usize = 3;
const MAX: u64 = 1 << 40;
const TTL_MS: u64 = 86_400_000;

/// What the counter scripts did before calls were recorded by id: the
/// same deadline check and validation, no `GET` and `SET` of a record.
macro_rules! unrecorded {
    ($body:literal) => {
        concat!(
            r"
local clock = redis.call('TIME')
if tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000) > tonumber(ARGV[1]) then
  return redis.status_reply('DEADLINE')
end
local n = #KEYS
local counts = {}
for i = 1, n do
  local value = redis.call('GET', KEYS[i])
  if not value or value == '0' then
    counts[i] = 0
  elseif #value > 16 or not string.find(value, '^[1-9]%d*$') then
    return redis.error_reply('ERR counter is not an integer')
  else
    if #value == 16 then
      local head = tonumber(string.sub(value, 1, 15))
      if head > 900719925474099
          or (head == 900719925474099 and string.byte(value, 16) > 50) then
        return redis.error_reply('ERR counter is over 2^53')
      end
    end
    counts[i] = tonumber(value)
  end
end
",
            $body
        )
    };
}

/// [`COUNT_SCRIPT`] before records.
const UNRECORDED_COUNT: &str = unrecorded!(
    r"
for i = 1, n do
  counts[i] = math.min(counts[i] + tonumber(ARGV[2 * i + 1]), 9007199254740992)
  redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'PX', ARGV[2 * i])
end
return counts
"
);

/// [`RESERVE_SCRIPT`] before records.
const UNRECORDED_RESERVE: &str = unrecorded!(
    r"
local fits = 1
for i = 1, n do
  if counts[i] + tonumber(ARGV[3 * i]) > tonumber(ARGV[3 * i + 1]) then
    fits = 0
  end
end
if fits == 1 then
  for i = 1, n do
    counts[i] = counts[i] + tonumber(ARGV[3 * i])
    redis.call('SET', KEYS[i], string.format('%.0f', counts[i]), 'PX', ARGV[3 * i - 1])
  end
end
local reply = {fits}
for i = 1, n do
  reply[i + 1] = counts[i]
end
return reply
"
);

#[derive(Clone, Copy, Debug)]
enum Form {
    MultiExec,
    Script,
    Store,
    Unrecorded,
}

/// The SHA-1 of each script form, and whether they reserve.
struct Shas {
    recorded: String,
    unrecorded: String,
    reserve: bool,
}

impl Shas {
    /// The arguments of one counter after its key.
    fn counter_args(&self, cmd: &mut redis::Cmd) {
        cmd.arg(TTL_MS).arg(1);
        if self.reserve {
            cmd.arg(MAX);
        }
    }
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
    shas: &Shas,
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
            cmd.arg(&shas.recorded).arg(keys.len() + 1);
            for key in keys {
                cmd.arg(key);
            }
            cmd.arg(format!(
                "{}{}",
                tollgate_redis::RECORD_PREFIX,
                CheckId::new()
            ));
            cmd.arg(cutoff);
            for _ in keys {
                shas.counter_args(&mut cmd);
            }
            cmd.arg(780);
            let _: redis::Value = cmd.query_async(conn).await.unwrap();
        }
        Form::Unrecorded => {
            let cutoff = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .unwrap()
                .as_millis() as u64
                + 70;
            let mut cmd = redis::cmd("EVALSHA");
            cmd.arg(&shas.unrecorded).arg(keys.len());
            for key in keys {
                cmd.arg(key);
            }
            cmd.arg(cutoff);
            for _ in keys {
                shas.counter_args(&mut cmd);
            }
            let _: redis::Value = cmd.query_async(conn).await.unwrap();
        }
        Form::Store => {
            let deadline = Deadline::after(Duration::from_secs(10));
            if shas.reserve {
                let reservation = store.reserve(counters, CheckId::new(), deadline);
                assert!(reservation.await.unwrap().applied);
            } else {
                store
                    .count(counters, CheckId::new(), deadline)
                    .await
                    .unwrap();
            }
        }
    }
}

async fn run(
    form: Form,
    conn: &MultiplexedConnection,
    store: &RedisStore,
    shas: &Arc<Shas>,
) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..TASKS)
        .map(|task| {
            let (mut conn, store, shas) = (conn.clone(), store.clone(), Arc::clone(shas));
            let (done, stop) = (Arc::clone(&done), Arc::clone(&stop));
            tokio::spawn(async move {
                let keys = keys(task);
                let counters: Vec<Counter> = keys
                    .iter()
                    .map(|key| Counter {
                        key: key.clone(),
                        ttl: Duration::from_millis(TTL_MS),
                        cost: 1,
                        max: MAX,
                    })
                    .collect();
                while !stop.load(Ordering::Relaxed) {
                    check(form, &mut conn, &store, &keys, &counters, &shas).await;
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
    let args: Vec<String> = std::env::args().skip(1).collect();
    let reserve = args.iter().any(|a| a == "reserve");
    let rounds = args
        .iter()
        .find_map(|a| a.parse::<usize>().ok())
        .unwrap_or(ROUNDS);
    let codes = if reserve {
        [RESERVE_SCRIPT, UNRECORDED_RESERVE]
    } else {
        [COUNT_SCRIPT, UNRECORDED_COUNT]
    };
    let mut shas = Vec::new();
    for code in codes {
        let script = redis::Script::new(code);
        script.load_async(&mut conn.clone()).await.unwrap();
        shas.push(script.get_hash().to_owned());
    }
    let shas = Arc::new(Shas {
        recorded: shas[0].clone(),
        unrecorded: shas[1].clone(),
        reserve,
    });
    // Warm up every path (connections, script cache).
    let warm = keys(TASKS);
    let counters: Vec<Counter> = warm
        .iter()
        .map(|key| Counter {
            key: key.clone(),
            ttl: Duration::from_millis(TTL_MS),
            cost: 1,
            max: MAX,
        })
        .collect();
    let forms: &[Form] = if reserve {
        &[Form::Script, Form::Store, Form::Unrecorded]
    } else {
        &[Form::MultiExec, Form::Script, Form::Store, Form::Unrecorded]
    };
    for &form in forms {
        check(form, &mut conn.clone(), &store, &warm, &counters, &shas).await;
    }
    let mut results: Vec<(Form, Vec<f64>)> = forms.iter().map(|&form| (form, Vec::new())).collect();
    for round in 0..rounds {
        for (form, runs) in &mut results {
            let rate = run(*form, &conn, &store, &shas).await;
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
