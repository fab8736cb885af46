//! A smoke run of the benchmark binary: a second against the memory store,
//! and a second against a private Redis with its raw ceiling. Benchmarks
//! themselves are not run in CI.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use tollgate_test_support::redis_server::RedisServer;

fn bench(args: &[&str]) -> serde_json::Value {
    bench_after("0.1", args)
}

/// A smoke run after `warmup` seconds of warm-up.
fn bench_after(warmup: &str, args: &[&str]) -> serde_json::Value {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args([
            "--duration",
            "0.5",
            "--warmup",
            warmup,
            "--rounds",
            "1",
            "--concurrency",
            "8",
            "--json",
        ])
        .args(args)
        .output()
        .expect("run tollgate-bench");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON report")
}

fn rate(report: &serde_json::Value, side: &str) -> f64 {
    let rounds = report["rounds"].as_array().expect("rounds");
    let round = rounds
        .iter()
        .find(|r| r["side"] == side)
        .expect("a round of this side");
    // A smoke, not a benchmark: on a loaded machine a few checks may miss
    // their 350 ms budget and fail (as designed); most must succeed.
    let rate = round["checks_per_sec"].as_f64().expect("checks_per_sec");
    let errors = round["errors"].as_f64().expect("errors");
    let checks = rate * 0.5;
    assert!(
        errors <= checks / 20.0,
        "{errors} errors for about {checks} checks: {report}"
    );
    rate
}

#[test]
fn memory_store_smoke_run_reports_checks() {
    let report = bench(&["--store", "memory", "--limits", "4", "--mode", "reserve"]);
    assert!(rate(&report, "tollgate") > 0.0, "{report}");
    assert!(
        report["ratio_checks_per_sec"].is_null(),
        "no raw ceiling for memory"
    );
}

#[test]
fn redis_smoke_run_compares_with_the_raw_and_seed_ceilings() {
    let server = RedisServer::start();
    for mode in ["count", "reserve"] {
        let report = bench(&["--store", &server.url(), "--limits", "4", "--mode", mode]);
        for side in ["tollgate", "raw", "seed"] {
            assert!(rate(&report, side) > 0.0, "{side}: {report}");
        }
        for ratio in ["ratio_checks_per_sec", "ratio_seed_checks_per_sec"] {
            assert!(report[ratio].as_f64().is_some(), "{ratio}: {report}");
        }
    }
}

#[test]
fn redis_attack_and_settle_runs_report_refusals_and_refunds() {
    let server = RedisServer::start();
    // Long enough for each of the 100 attackers to pass its 15 a day.
    let report = bench_after("2", &["--store", &server.url(), "--attack"]);
    let round = |side: &str| {
        report["rounds"]
            .as_array()
            .and_then(|rounds| rounds.iter().find(|r| r["side"] == side))
            .cloned()
            .unwrap_or_else(|| panic!("no {side} round: {report}"))
    };
    let (tollgate, raw) = (round("tollgate"), round("raw"));
    assert!(tollgate["refused"].as_u64() > Some(0), "{report}");
    let trips = tollgate["round_trips_per_refused"].as_f64().unwrap();
    assert!(trips < 0.05, "refusals went to the store: {report}");
    assert_eq!(
        raw["round_trips_per_refused"].as_f64(),
        Some(1.0),
        "{report}"
    );
    let settle = bench(&[
        "--store",
        &server.url(),
        "--limits",
        "4",
        "--mode",
        "settle",
        "--cost",
        "8",
    ]);
    for side in ["tollgate", "raw", "seed"] {
        assert!(rate(&settle, side) > 0.0, "{side}: {settle}");
    }
}

#[test]
fn sqlite_smoke_run_reports_checks() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("bench.sqlite3").display());
    let report = bench(&["--store", &store, "--limits", "2"]);
    assert!(rate(&report, "tollgate") > 0.0, "{report}");
}

#[test]
fn unknown_store_fails_with_a_message() {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args(["--store", "carrier-pigeon://x", "--duration", "0.1"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("scheme"));
}
