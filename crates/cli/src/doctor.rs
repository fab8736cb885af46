//! `tollgate doctor`: whether a store answers, whether it takes the write a
//! check makes, how fast, and on Redis how it is configured.

use std::time::{Duration, Instant};

use tollgate::url::shown;
use tollgate::{Limit, Limiter, Rule, Window};

use crate::args::DoctorArgs;
use crate::failure::Failure;
use crate::{server_info, table};

/// Probes the store; a report (warnings included) when it answers and takes
/// a check's write; a failure (exit 1) when every check would fail.
pub(crate) async fn run(args: &DoctorArgs) -> Result<String, Failure> {
    let url = &args.store.store;
    let store = shown(url);
    let opened = tollgate::open_store(url)
        .map_err(|e| Failure::with(format_args!("cannot open the store {store}"), &e))?;
    let limiter = crate::limit::limiter(opened);
    let probe = probe()?;
    let first = timed(&limiter, &probe)
        .await
        .map_err(|e| Failure::with(format_args!("cannot reach the store {store}"), &e))?;
    let wrote = match written(&limiter, &probe).await {
        Ok(took) => took,
        Err(err) => return Err(refused(url, &store, &err).await),
    };
    let mut times = Vec::with_capacity(args.calls as usize);
    for _ in 0..args.calls {
        let took = timed(&limiter, &probe).await.map_err(|e| {
            Failure::with(format_args!("the store {store} failed while measuring"), &e)
        })?;
        times.push(took);
    }
    times.sort();
    let mut rows = vec![
        ("store", store.clone()),
        ("reachable", format!("yes (first call {})", millis(first))),
        (
            "writable",
            format!(
                "yes (a reservation and a delete of a throwaway counter, {})",
                millis(wrote)
            ),
        ),
        (
            "latency",
            format!(
                "{} calls: min {}, median {}, max {}",
                times.len(),
                millis(times[0]),
                millis(times[times.len() / 2]),
                millis(times[times.len() - 1])
            ),
        ),
    ];
    let mut warnings = Vec::new();
    if server_info::is_redis(url) {
        match server_info::read(url).await {
            Ok(info) => {
                rows.push(("server", server_info::summary(&info)));
                warnings = server_info::warnings(&info);
            }
            Err(err) => warnings.push(format!("cannot read the server's INFO: {err}")),
        }
    } else if url.trim().eq_ignore_ascii_case("memory") {
        warnings.push(
            "the memory store is a test double: its counts vanish when this process exits"
                .to_owned(),
        );
    }
    let mut report = table::pairs(&rows);
    for warning in &warnings {
        report.push_str(&format!("warning: {warning}\n"));
    }
    report.push_str(&match warnings.len() {
        0 => "healthy\n".to_owned(),
        1 => "healthy, with 1 warning\n".to_owned(),
        n => format!("healthy, with {n} warnings\n"),
    });
    Ok(report)
}

/// A limit on a key no service uses, in a one-second window (its counter
/// lives at most a second): `remaining` reads it and writes nothing;
/// [`written`] reserves it, as a check does, and deletes it.
fn probe() -> Result<Limit, Failure> {
    let rule = Rule::new("tollgate-doctor", 1, Window::SECOND)?.with_key(&["probe"])?;
    let part = format!("{}-{}", std::process::id(), crate::time::now_secs());
    Ok(rule.limit(&[part])?)
}

/// How long the write a check makes took: a reservation of `probe` (the
/// store's script or statement), then a delete of its counter.
async fn written(limiter: &Limiter, probe: &Limit) -> Result<Duration, tollgate::Error> {
    let start = Instant::now();
    limiter.reserve(std::slice::from_ref(probe)).await?;
    // The counter lives a second at most: one left by a window that
    // turned between the two calls is gone by itself.
    limiter.reset(probe).await?;
    Ok(start.elapsed())
}

/// Why the store fails every check though it answers reads: the store's
/// error, and on Redis what `INFO` tells of it (a replica, a full server).
async fn refused(url: &str, store: &str, err: &tollgate::Error) -> Failure {
    let mut hints = Vec::new();
    if server_info::is_redis(url)
        && let Ok(info) = server_info::read(url).await
    {
        hints = server_info::refusing_writes(&info);
    }
    let mut failure = Failure::with(
        format_args!("the store {store} answers but refuses the write every check makes, so every check would fail"),
        err,
    )
    .to_string();
    for hint in hints {
        failure.push_str("; ");
        failure.push_str(&hint);
    }
    Failure::new(failure)
}

/// How long one `remaining` call on `probe` took.
async fn timed(limiter: &Limiter, probe: &Limit) -> Result<Duration, tollgate::Error> {
    let start = Instant::now();
    limiter.remaining(std::slice::from_ref(probe)).await?;
    Ok(start.elapsed())
}

fn millis(took: Duration) -> String {
    format!("{:.3} ms", took.as_secs_f64() * 1_000.0)
}
