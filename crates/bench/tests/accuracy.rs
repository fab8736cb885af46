//! A smoke run of `--accuracy` against a private Redis: the replays in
//! simulated time are deterministic, so the shapes' accuracy is checked
//! (the checks/s beside it are only shown to run): fixed and sliding
//! windows, and GCRA at bursts of 10 and 100.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Command;

use tollgate_test_support::redis_server::RedisServer;

/// The `most / max` of `schedule` against `shape` in the table.
fn ratio(table: &str, schedule: &str, shape: &str) -> f64 {
    let row = table
        .lines()
        .find(|line| {
            let mut words = line.split_whitespace();
            words.next() == Some(schedule) && words.next() == Some(shape)
        })
        .unwrap_or_else(|| panic!("no {schedule} {shape} row:\n{table}"));
    // schedule, shape, tried, admitted, refused locally, most, most / max,
    // worst span from (+N s).
    let words: Vec<&str> = row.split_whitespace().collect();
    assert_eq!(words.len(), 9, "{row}");
    words[6].parse().unwrap_or_else(|_| panic!("{row}"))
}

#[test]
fn accuracy_run_replays_each_shape_and_compares_their_checks_per_second() {
    let server = RedisServer::start();
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args(["--store", &server.url(), "--accuracy"])
        .args(["--duration", "0.2", "--warmup", "0", "--rounds", "1"])
        .args(["--concurrency", "4", "--keys", "50"])
        .output()
        .expect("run tollgate-bench");
    let table = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{table}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(table.contains("schedule "), "{table}");
    for schedule in [
        "adversarial",
        "adversarial-kept-up",
        "uniform",
        "uniform-mid-window",
    ] {
        for shape in ["fixed", "sliding"] {
            let ratio = ratio(&table, schedule, shape);
            assert!((0.5..=2.0).contains(&ratio), "{schedule} {shape}: {table}");
        }
        // A burst of 10 admits a tenth of the budget at once: the
        // adversary's burst is cut to it.
        for shape in ["gcra-b10", "gcra-b100"] {
            let ratio = ratio(&table, schedule, shape);
            assert!((0.1..=2.0).contains(&ratio), "{schedule} {shape}: {table}");
        }
    }
    // A full budget at a window's end and another at the next one's start.
    assert!(ratio(&table, "adversarial", "fixed") > 1.5, "{table}");
    for shape in ["sliding", "gcra-b10", "gcra-b100"] {
        let ratio = ratio(&table, "adversarial", shape);
        assert!(ratio <= 1.2, "adversarial {shape}: {table}");
    }
    for limits in [1, 4] {
        for shape in ["sliding", "gcra"] {
            let line = format!("{shape} / fixed, {limits} limit(s): checks/s ");
            assert!(table.contains(&line), "{table}");
        }
    }
}

#[test]
fn accuracy_mode_refuses_the_options_of_the_load_comparison() {
    let out = Command::new(env!("CARGO_BIN_EXE_tollgate-bench"))
        .args(["--store", "memory", "--accuracy", "--limits", "2"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--limits"));
}
