//! `outage`: one demo on a private redis-server, a steady rate of asks
//! (fail-closed) and of docs runs (fail-open) while the server is killed
//! and restarted (or frozen and thawed); latencies per phase, route and
//! status, the first 200 after the server answers PING again, and whether
//! a call answered 503 stored a count.

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::{ArgAction, Args};
use tollgate::{Limit, RuleSet};
use tollgate_test_support::redis_server::RedisServerOptions;

use crate::Common;
use crate::burst::{now_secs, tag};
use crate::children::Target;
use crate::children::{LogDir, start_demo, start_spinner};
use crate::http;
use crate::store::{ping, private_redis, read};
use crate::table::{Table, ms, percentile, signed_ms};

/// The demo's rules here: the shipped ones, with budgets no run reaches
/// (the visitors are all distinct, so `ask-burst` and `ask` stay as shipped).
const RULES: &str = r#"
[docs-run]
max = 100000000
window = "1d"
key = ["org"]

[ask-burst]
max = 20
window = "1m"
key = ["visitor"]

[ask]
max = 15
window = "1d"
key = ["project", "visitor"]

[ask-site]
max = 100000000
window = "1d"
key = ["project"]
public = false

[ask-all]
max = 100000000
window = "1d"
key = []
public = false

[ask-tokens]
max = 100000000000
window = "1d"
key = ["project"]
unit = "tokens"
public = false
"#;

/// The latency bound of the criterion, during the outage past its first second.
const FAST: Duration = Duration::from_millis(5);

/// How soon after PING the first ask must be served.
const RECOVERY: Duration = Duration::from_secs(1);

#[derive(Debug, Args)]
pub(crate) struct Options {
    /// Seconds of load.
    #[arg(long, default_value_t = 20)]
    secs: u64,
    /// Seconds into the load when the server is killed (or frozen).
    #[arg(long, default_value_t = 5)]
    fail_at: u64,
    /// Seconds the server stays down before it is restarted (or thawed).
    #[arg(long, default_value_t = 10)]
    down: u64,
    /// Asks per second, and as many docs runs per second.
    #[arg(long, default_value_t = 100)]
    rate: u32,
    /// Freeze the server (SIGSTOP, then SIGCONT) instead of killing it.
    #[arg(long)]
    freeze: bool,
    /// Whether a process keeps the cores busy meanwhile.
    #[arg(long, default_value_t = false, action = ArgAction::Set)]
    busy: bool,
    /// Spinning threads of the busy process.
    #[arg(long, default_value_t = 2)]
    busy_threads: usize,
    #[command(flatten)]
    common: Common,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Route {
    Ask,
    Runs,
}

impl fmt::Display for Route {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Route::Ask => "ask",
            Route::Runs => "runs",
        })
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum Phase {
    Before,
    FirstSecond,
    Down,
    After,
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Phase::Before => "before",
            Phase::FirstSecond => "outage, 1st s",
            Phase::Down => "outage, after 1st s",
            Phase::After => "after resume",
        })
    }
}

/// One call: its route, when it was sent (since the load began), how long
/// it took, and its status (0: no answer).
struct Event {
    route: Route,
    sent: Duration,
    took: Duration,
    status: u16,
}

/// Since the load began: when the fault began (its signal sent), when the
/// server was resumed (restarted or thawed), and when it answered PING again.
struct Fault {
    failed: Duration,
    resumed: Duration,
    pinged: Duration,
}

/// Runs the experiment; whether it met the criterion.
pub(crate) async fn run(options: Options) -> bool {
    assert!(
        options.fail_at + options.down < options.secs && options.rate > 0,
        "the outage must end before the load does (--fail-at + --down < --secs)"
    );
    let rules = RuleSet::from_toml(RULES).unwrap_or_else(|e| panic!("invalid rules: {e}"));
    let logs = LogDir::new(options.common.logs.as_deref());
    let (rules_path, _) = logs.file("rules.toml");
    std::fs::write(&rules_path, RULES)
        .unwrap_or_else(|e| panic!("cannot write {}: {e}", rules_path.display()));
    // Durable, so that the counts stored before the kill are still there to compare.
    let redis = private_redis(RedisServerOptions::durable());
    let url = redis.url();
    let target = Target {
        url: url.clone(),
        env: Vec::new(),
    };
    let demo = start_demo(&options.common, "demo", &target, Some(&rules_path), &logs).await;
    let tag = tag();
    let (site, org) = (format!("outage-{tag}"), format!("outage-{tag}"));
    warm_up(demo.addr, &tag).await;
    let _busy = options.busy.then(|| start_spinner(options.busy_threads));
    let index = rules
        .get("ask-site")
        .map(|r| r.window().index(now_secs()))
        .unwrap_or_else(|e| panic!("{e}"));
    println!(
        "outage: one demo on a private redis-server ({url}, appendonly, appendfsync always), \
         {} asks/s on one site and {} runs/s on one org for {} s; at {} s the server is {} \
         for {} s, then {}",
        options.rate,
        options.rate,
        options.secs,
        options.fail_at,
        if options.freeze {
            "frozen (SIGSTOP)"
        } else {
            "killed (SIGKILL)"
        },
        options.down,
        if options.freeze {
            "thawed (SIGCONT)"
        } else {
            "restarted on the same port and data directory (counts survive)"
        },
    );
    let started = Instant::now();
    let fault = {
        let (fail_at, down, freeze) = (
            Duration::from_secs(options.fail_at),
            Duration::from_secs(options.down),
            options.freeze,
        );
        let url = url.clone();
        let mut redis = redis;
        tokio::task::spawn_blocking(move || {
            sleep_until(started + fail_at);
            if freeze {
                redis.freeze();
            } else {
                redis.stop();
            }
            // Once the signal is sent: calls before it may still be answered.
            let failed = started.elapsed();
            sleep_until(started + fail_at + down);
            // Before the server is back: no call after it finds it down.
            let resumed = started.elapsed();
            if freeze {
                redis.thaw();
            } else {
                redis.restart();
            }
            let resuming = Instant::now();
            while !ping(&url) {
                assert!(
                    resuming.elapsed() < Duration::from_secs(10),
                    "redis-server does not answer PING 10 s after it was resumed"
                );
                std::thread::sleep(Duration::from_millis(1));
            }
            let fault = Fault {
                failed,
                resumed,
                pinged: started.elapsed(),
            };
            (redis, fault)
        })
    };
    let events = load(demo.addr, &site, &org, options.rate, options.secs, started).await;
    let (_redis, fault) = fault
        .await
        .unwrap_or_else(|e| panic!("killing or restarting redis-server failed: {e}"));
    tokio::time::sleep(Duration::from_secs(1)).await;
    let key = |rule: &str, part: &str| {
        let rule = rules.get(rule).unwrap_or_else(|e| panic!("{e}")).clone();
        Limit::new(rule, &[part])
            .unwrap_or_else(|e| panic!("no key for {part}: {e}"))
            .counter_key(index)
    };
    let stored_site = read(std::slice::from_ref(&url), &key("ask-site", &site));
    let stored_runs = read(std::slice::from_ref(&url), &key("docs-run", &org));
    let same_day = rules
        .get("ask-site")
        .is_ok_and(|r| r.window().index(now_secs()) == index);
    if !same_day {
        println!("the UTC day changed during the run: its counts are split over two windows");
    }
    let passed = report(&events, &fault, stored_site, stored_runs) && same_day;
    if !passed || matches!(logs, LogDir::Given(_)) {
        println!(
            "log of the demo: {}",
            logs.keep().join("demo.log").display()
        );
    }
    passed
}

/// `rate` asks (distinct visitors) and `rate` docs runs a second for `secs`
/// seconds, each sent on time whatever the earlier ones do.
async fn load(
    addr: SocketAddr,
    site: &str,
    org: &str,
    rate: u32,
    secs: u64,
    started: Instant,
) -> Vec<Event> {
    let period = Duration::from_secs(1) / rate;
    let mut ticker = tokio::time::interval_at(tokio::time::Instant::from_std(started), period);
    let total = u64::from(rate) * secs;
    let mut tasks = Vec::new();
    let ask_path = format!("/sites/{site}/ask");
    let runs_path = format!("/orgs/{org}/runs");
    for i in 0..total {
        ticker.tick().await;
        let visitor = format!("10.{}.{}.{}", (i >> 16) & 255, (i >> 8) & 255, i & 255);
        let calls = [
            (
                Route::Ask,
                http::request("POST", addr, &ask_path, Some(&visitor)),
            ),
            (Route::Runs, http::request("POST", addr, &runs_path, None)),
        ];
        for (route, request) in calls {
            tasks.push(tokio::spawn(async move {
                let sent = started.elapsed();
                let (reply, took) = http::call(addr, &request).await;
                Event {
                    route,
                    sent,
                    took,
                    status: reply.map_or(0, |r| r.status),
                }
            }));
        }
    }
    let mut events = Vec::with_capacity(tasks.len());
    for task in tasks {
        if let Ok(event) = task.await {
            events.push(event);
        }
    }
    events
}

/// Prints the tables and the criteria; whether every criterion held.
fn report(
    events: &[Event],
    fault: &Fault,
    stored_site: Result<u64, String>,
    stored_runs: Result<u64, String>,
) -> bool {
    let phase = |sent: Duration| {
        if sent < fault.failed {
            Phase::Before
        } else if sent < fault.failed + Duration::from_secs(1) {
            Phase::FirstSecond
        } else if sent < fault.resumed {
            Phase::Down
        } else {
            Phase::After
        }
    };
    let mut groups: BTreeMap<(Phase, Route, u16), Vec<Duration>> = BTreeMap::new();
    for event in events {
        groups
            .entry((phase(event.sent), event.route, event.status))
            .or_default()
            .push(event.took);
    }
    let mut table = Table::new(&[
        "phase", "route", "status", "n", "p50 ms", "p99 ms", "max ms",
    ]);
    for ((phase, route, status), took) in &mut groups {
        took.sort_unstable();
        let cell = |p: f64| percentile(took, p).map_or_else(|| "-".to_owned(), ms);
        table.row(vec![
            phase.to_string(),
            route.to_string(),
            if *status == 0 {
                "none".to_owned()
            } else {
                status.to_string()
            },
            took.len().to_string(),
            cell(50.0),
            cell(99.0),
            cell(100.0),
        ]);
    }
    println!(
        "fault at {} s, server resumed at {} s, PING answered at {} s (since the load began)",
        secs(fault.failed),
        secs(fault.resumed),
        secs(fault.pinged)
    );
    print!("{}", table.render());

    let down = |route: Route, status: u16| {
        let mut all: Vec<Duration> = Vec::new();
        let mut other = 0;
        for event in events
            .iter()
            .filter(|e| e.route == route && phase(e.sent) == Phase::Down)
        {
            if event.status == status {
                all.push(event.took);
            } else {
                other += 1;
            }
        }
        all.sort_unstable();
        (all.len(), other, percentile(&all, 99.0))
    };
    let fast = |route: Route, status: u16| {
        let (n, other, p99) = down(route, status);
        let ok = n > 0 && other == 0 && p99.is_some_and(|p| p <= FAST);
        let line = format!(
            "outage past its 1st s, {route}: {n} answered {status}, {other} otherwise, p99 {} ms \
             (criterion: all {status}, p99 <= {} ms): {}",
            p99.map_or_else(|| "-".to_owned(), ms),
            ms(FAST),
            verdict(ok)
        );
        (ok, line)
    };
    let (asks_fast, asks_line) = fast(Route::Ask, 503);
    let (runs_fast, runs_line) = fast(Route::Runs, 202);
    println!("{asks_line}\n{runs_line}");

    let first = events
        .iter()
        .filter(|e| e.route == Route::Ask && e.status == 200)
        .map(|e| e.sent + e.took)
        .filter(|&done| done >= fault.resumed)
        .min();
    let recovered = first.is_some_and(|at| at <= fault.pinged + RECOVERY);
    println!(
        "first ask served after the server resumed: {} ms after it answered PING (criterion: <= {} ms): {}",
        first.map_or_else(|| "never".to_owned(), |at| signed_ms(fault.pinged, at)),
        ms(RECOVERY),
        verdict(recovered)
    );

    let served = events
        .iter()
        .filter(|e| e.route == Route::Ask && e.status == 200)
        .count();
    let unavailable = events
        .iter()
        .filter(|e| e.route == Route::Ask && e.status == 503)
        .count();
    let spent = stored_site == Ok(u64::try_from(served).unwrap_or(u64::MAX));
    println!(
        "asks: {served} answered 200, {unavailable} answered 503; ask-site stored {} \
         (criterion: == the 200s, no count for a 503): {}",
        shown(&stored_site),
        verdict(spent)
    );
    let accepted = events
        .iter()
        .filter(|e| e.route == Route::Runs && e.status == 202)
        .count();
    println!(
        "runs (fail-open, for information): {accepted} answered 202; docs-run stored {}",
        shown(&stored_runs)
    );
    asks_fast && runs_fast && recovered && spent
}

/// One ask and one docs run on keys of their own, so that connecting is
/// not inside a measured call.
///
/// # Panics
///
/// When either is refused: the demo cannot reach its store.
async fn warm_up(addr: SocketAddr, tag: &str) {
    for (path, expected) in [
        (format!("/sites/warm-{tag}/ask"), 200),
        (format!("/orgs/warm-{tag}/runs"), 202),
    ] {
        let request = http::request("POST", addr, &path, Some("198.18.0.1"));
        let status = http::call(addr, &request).await.0.map(|r| r.status);
        assert!(
            status == Some(expected),
            "warm-up {path} answered {status:?}"
        );
    }
}

fn sleep_until(at: Instant) {
    std::thread::sleep(at.saturating_duration_since(Instant::now()));
}

fn secs(d: Duration) -> String {
    format!("{:.3}", d.as_secs_f64())
}

fn shown(value: &Result<u64, String>) -> String {
    match value {
        Ok(n) => n.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

fn verdict(ok: bool) -> &'static str {
    if ok { "ok" } else { "FAILED" }
}
