//! `burst`: V visitors fired at once at one site through several demos on
//! one private store, R runs on fresh sites; each must serve exactly
//! `min(V, ask-site)` and store exactly as many on `ask-site`.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use clap::{ArgAction, Args};
use tokio::net::TcpStream;
use tokio::sync::watch;
use tollgate::{Limit, Rule, RuleSet};

use crate::Common;
use crate::children::{Demo, LogDir, start_demo, start_spinner, tail};
use crate::http::{self, Reply};
use crate::store::{Kind, Store};
use crate::table::{Table, ms};

/// Warm-up asks per demo, each on a site of its own, so that every
/// connection (to every node of a cluster) is made before the runs.
const WARM_ASKS: usize = 8;

#[derive(Debug, Args)]
pub(crate) struct Options {
    /// The store the demos count in.
    #[arg(long, value_enum, default_value = "redis")]
    store: Kind,
    /// Distinct visitors fired at once per run.
    #[arg(long, default_value_t = 600)]
    visitors: usize,
    /// Runs, each on a fresh site.
    #[arg(long, default_value_t = 5)]
    runs: usize,
    /// Demo processes; the visitors are spread across them.
    #[arg(long, default_value_t = 3)]
    demos: usize,
    /// Whether a process keeps the cores busy during the runs (`--busy false` not to).
    #[arg(long, default_value_t = true, action = ArgAction::Set)]
    busy: bool,
    /// Spinning threads of the busy process.
    #[arg(long, default_value_t = 2)]
    busy_threads: usize,
    /// A rules file for the demos instead of the shipped defaults (e.g. with
    /// `ask-tokens` raised, to see `ask-site` alone).
    #[arg(long, value_name = "FILE")]
    rules: Option<PathBuf>,
    #[command(flatten)]
    common: Common,
}

/// The rules a run reads back: `ask-site` and `ask-tokens`.
struct Rules {
    site: Rule,
    tokens: Rule,
}

/// What one run saw.
struct Outcome {
    site: String,
    served: usize,
    limited: BTreeMap<String, usize>,
    unavailable: usize,
    other: usize,
    stored_site: Result<u64, String>,
    stored_tokens: Result<u64, String>,
    tokens_used: Option<u64>,
    last_answer: Duration,
    window_changed: bool,
}

/// Runs the experiment; whether every run met the criterion.
pub(crate) async fn run(options: Options) -> bool {
    let set = match &options.rules {
        Some(path) => std::fs::read_to_string(path)
            .map_err(|e| e.to_string())
            .and_then(|text| RuleSet::from_toml(&text).map_err(|e| e.to_string()))
            .unwrap_or_else(|e| panic!("invalid rules file {}: {e}", path.display())),
        None => RuleSet::defaults(),
    };
    let rule = |name: &str| {
        set.get(name)
            .unwrap_or_else(|e| panic!("the rules lack {name}: {e}"))
            .clone()
    };
    let rules = Rules {
        site: rule("ask-site"),
        tokens: rule("ask-tokens"),
    };
    let expected = options.visitors.min(to_usize(rules.site.max()));
    let warm = options.demos * WARM_ASKS;
    assert!(
        options.runs * expected + warm <= to_usize(rule("ask-all").max()),
        "{} runs of {expected} served and {warm} warm-up asks would pass `ask-all` \
         ({} a day, over all sites of one store): fewer --runs",
        options.runs,
        rule("ask-all").max()
    );
    assert!(
        options.visitors <= 65_536 && options.runs <= 250 && options.demos <= 30,
        "at most 65,536 visitors, 250 runs and 30 demos (visitor addresses are 10.run.x.y)"
    );
    let logs = LogDir::new(options.common.logs.as_deref());
    let store = Store::start(options.store, &options.common.proxy, &logs);
    let mut demos = Vec::with_capacity(options.demos);
    for d in 0..options.demos {
        let name = format!("demo-{d}");
        demos.push(
            start_demo(
                &options.common,
                &name,
                &store.target,
                options.rules.as_deref(),
                &logs,
            )
            .await,
        );
    }
    let tag = tag();
    warm_up(&demos, &tag).await;
    let _busy = options.busy.then(|| start_spinner(options.busy_threads));
    tokio::time::sleep(Duration::from_secs(1)).await;
    println!(
        "burst: store {:?} ({}), {} demos, {} visitors at once per run, rules {}: \
         ask-site = {}, ask-tokens = {}; busy process: {}",
        options.store,
        store.target.url,
        demos.len(),
        options.visitors,
        options
            .rules
            .as_ref()
            .map_or_else(|| "shipped".to_owned(), |p| p.display().to_string()),
        rules.site.max(),
        rules.tokens.max(),
        if options.busy {
            format!("{} spinning threads", options.busy_threads)
        } else {
            "none".to_owned()
        },
    );
    let mut table = Table::new(&[
        "run",
        "200",
        "429",
        "429 by limit",
        "503",
        "other",
        "ask-site stored",
        "tokens stored/used",
        "last ms",
        "stored==200",
        "200==min(V,max)",
        "ok",
    ]);
    let mut passed = 0;
    for r in 0..options.runs {
        let outcome = one_run(&demos, &store, &rules, &tag, r, options.visitors).await;
        let stored_ok = outcome.stored_site == Ok(to_u64(outcome.served));
        let served_ok = outcome.served == expected;
        let ok = stored_ok && served_ok && !outcome.window_changed;
        passed += usize::from(ok);
        eprintln!(
            "run {} on {}: {} served, {} answered",
            r + 1,
            outcome.site,
            outcome.served,
            outcome.served + outcome.limited.values().sum::<usize>() + outcome.unavailable
        );
        table.row(vec![
            (r + 1).to_string(),
            outcome.served.to_string(),
            outcome.limited.values().sum::<usize>().to_string(),
            by_limit(&outcome.limited),
            outcome.unavailable.to_string(),
            outcome.other.to_string(),
            shown(&outcome.stored_site),
            format!(
                "{}/{}",
                shown(&outcome.stored_tokens),
                outcome
                    .tokens_used
                    .map_or_else(|| "?".to_owned(), |t| t.to_string())
            ),
            ms(outcome.last_answer),
            yes(stored_ok),
            yes(served_ok),
            if outcome.window_changed {
                "no (the day changed)".to_owned()
            } else {
                yes(ok)
            },
        ]);
    }
    print!("{}", table.render());
    println!(
        "{passed} of {} runs served exactly min(V, ask-site) = {expected} with ask-site stored == 200s",
        options.runs
    );
    let all = passed == options.runs;
    report_logs(logs, all);
    all
}

/// One run: every visitor connected first, then every request sent at
/// once; the answers counted; the stored counters read once the last
/// answer is in (and a second more, for any late write).
async fn one_run(
    demos: &[Demo],
    store: &Store,
    rules: &Rules,
    tag: &str,
    run: usize,
    visitors: usize,
) -> Outcome {
    let site = format!("burst-{tag}-{run}");
    let index = rules.site.window().index(now_secs());
    let used_before = tokens_used(demos).await;
    let (go, ready) = watch::channel(false);
    let mut tasks = Vec::with_capacity(visitors);
    for i in 0..visitors {
        let addr = demos[i % demos.len()].addr;
        let visitor = format!("10.{}.{}.{}", run + 1, i / 256, i % 256);
        let request = http::request("POST", addr, &format!("/sites/{site}/ask"), Some(&visitor));
        let stream = TcpStream::connect(addr).await.ok();
        let mut ready = ready.clone();
        tasks.push(tokio::spawn(async move {
            let _ = ready.wait_for(|go| *go).await;
            let started = Instant::now();
            let reply = match stream {
                Some(stream) => http::exchange(stream, &request).await,
                None => None,
            };
            (reply, started.elapsed())
        }));
    }
    // Every task parked on the signal before it is given.
    tokio::time::sleep(Duration::from_millis(200)).await;
    let _ = go.send(true);
    let mut outcome = Outcome {
        site: site.clone(),
        served: 0,
        limited: BTreeMap::new(),
        unavailable: 0,
        other: 0,
        stored_site: Err("not read".into()),
        stored_tokens: Err("not read".into()),
        tokens_used: None,
        last_answer: Duration::ZERO,
        window_changed: false,
    };
    for task in tasks {
        let (reply, took): (Option<Reply>, Duration) = task.await.unwrap_or((None, Duration::ZERO));
        outcome.last_answer = outcome.last_answer.max(took);
        match reply {
            Some(reply) if reply.status == 200 => outcome.served += 1,
            Some(reply) if reply.status == 429 => {
                let limit = reply.limit().unwrap_or("?").to_owned();
                *outcome.limited.entry(limit).or_default() += 1;
            }
            Some(reply) if reply.status == 503 => outcome.unavailable += 1,
            _ => outcome.other += 1,
        }
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    outcome.window_changed = rules.site.window().index(now_secs()) != index;
    outcome.stored_site = store.read(&counter_key(&rules.site, &site, index));
    outcome.stored_tokens = store.read(&counter_key(&rules.tokens, &site, index));
    outcome.tokens_used = match (used_before, tokens_used(demos).await) {
        (Some(before), Some(after)) => Some(after.saturating_sub(before)),
        _ => None,
    };
    outcome
}

/// One ask per demo on each of [`WARM_ASKS`] sites of its own.
///
/// # Panics
///
/// When one is not served: the demo cannot reach its store.
async fn warm_up(demos: &[Demo], tag: &str) {
    for (d, demo) in demos.iter().enumerate() {
        for k in 0..WARM_ASKS {
            let path = format!("/sites/warm-{tag}-{d}-{k}/ask");
            let visitor = format!("198.18.{d}.{k}");
            let request = http::request("POST", demo.addr, &path, Some(&visitor));
            let (reply, _) = http::call(demo.addr, &request).await;
            let status = reply.map(|r| r.status);
            assert!(
                status == Some(200),
                "warm-up ask on {} answered {status:?}; its log:\n{}",
                demo.addr,
                tail(&demo.log)
            );
        }
    }
}

/// The tokens settled by every demo so far (`GET /stats`), if all answer.
async fn tokens_used(demos: &[Demo]) -> Option<u64> {
    let mut total = 0;
    for demo in demos {
        total += stat(demo.addr, "tokens").await?;
    }
    Some(total)
}

/// A number of a demo's `GET /stats`.
pub(crate) async fn stat(addr: SocketAddr, field: &str) -> Option<u64> {
    let reply = http::get(addr, "/stats").await?;
    let stats: serde_json::Value = serde_json::from_str(&reply.body).ok()?;
    stats.get(field)?.as_u64()
}

/// The counter key of `rule` for `site` in window `index`.
fn counter_key(rule: &Rule, site: &str, index: u64) -> String {
    Limit::new(rule.clone(), &[site])
        .unwrap_or_else(|e| panic!("no key for {site}: {e}"))
        .counter_key(index)
}

/// Where the logs are; kept when a run failed.
fn report_logs(logs: LogDir, passed: bool) {
    if matches!(logs, LogDir::Given(_)) || !passed {
        let dir = logs.keep();
        println!("logs of the demos and servers: {}", dir.display());
    }
}

/// A tag no other invocation uses: seconds since the epoch and this process's id.
pub(crate) fn tag() -> String {
    format!("{:x}-{}", now_secs(), std::process::id())
}

pub(crate) fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

fn by_limit(limited: &BTreeMap<String, usize>) -> String {
    if limited.is_empty() {
        return "-".to_owned();
    }
    let parts: Vec<String> = limited.iter().map(|(l, n)| format!("{l}:{n}")).collect();
    parts.join(" ")
}

fn shown(value: &Result<u64, String>) -> String {
    match value {
        Ok(n) => n.to_string(),
        Err(e) => format!("error: {e}"),
    }
}

fn yes(ok: bool) -> String {
    if ok { "yes" } else { "NO" }.to_owned()
}

fn to_usize(n: u64) -> usize {
    usize::try_from(n).unwrap_or(usize::MAX)
}

fn to_u64(n: usize) -> u64 {
    u64::try_from(n).unwrap_or(u64::MAX)
}
