//! The `tollgate-demo` binary: it serves, logs each request, and fails to
//! start with a clear message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::Command;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate-demo");

fn demo() -> Command {
    let mut command = Command::new(BIN);
    for var in [
        "TOLLGATE_LISTEN",
        "TOLLGATE_STORE",
        "TOLLGATE_RULES",
        "TOLLGATE_TRUST",
        "TOLLGATE_TRUSTED_PROXIES",
        "TOLLGATE_DEV",
        "TOLLGATE_HEADER_TIMEOUT",
        "TOLLGATE_MAX_CONNECTIONS",
    ] {
        command.env_remove(var);
    }
    command
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    command
}

/// Runs the binary to its end; its exit code and standard error.
async fn fails(args: &[&str]) -> (Option<i32>, String) {
    let output = demo().args(args).args(["--listen", "127.0.0.1:0"]).output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .unwrap()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn unknown_store_url_is_a_clear_startup_error() {
    let (code, stderr) = fails(&["--store", "mysql://user:hunter2@db/x"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("invalid --store") && stderr.contains("`mysql`"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn unreadable_or_invalid_rules_file_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.sqlite3").display());
    let missing = dir.path().join("missing.toml");
    let (code, stderr) = fails(&["--store", &store, "--rules", missing.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot read the rules file"), "{stderr}");

    let invalid = dir.path().join("invalid.toml");
    std::fs::write(&invalid, "[ask]\nmax = 0\nwindow = \"1d\"\n").unwrap();
    let (code, stderr) = fails(&["--store", &store, "--rules", invalid.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("invalid rules in") && stderr.contains("max must be at least 1"),
        "{stderr}"
    );

    let partial = dir.path().join("partial.toml");
    std::fs::write(&partial, "[ask]\nmax = 3\nwindow = \"1d\"\n").unwrap();
    let (code, stderr) = fails(&["--store", &store, "--rules", partial.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unknown rule `docs-run`"), "{stderr}");

    // Every rule the demo uses, but `ask` keyed by one part instead of two.
    let text = tollgate::DEFAULT_RULES_TOML
        .replace("key = [\"project\", \"visitor\"]", "key = [\"visitor\"]");
    let arity = dir.path().join("arity.toml");
    std::fs::write(&arity, text).unwrap();
    let (code, stderr) = fails(&["--store", &store, "--rules", arity.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rule `ask` takes 1 key parts, 2 given"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bad_flags_are_refused_by_the_parser() {
    let (code, stderr) = fails(&["--trust", "x-real-ip"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("x-real-ip"), "{stderr}");
    let (code, stderr) = fails(&[
        "--trust",
        "x-forwarded-for",
        "--trusted-proxy",
        "10.0.0.0/33",
    ])
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("10.0.0.0/33"), "{stderr}");
}

type Lines = tokio::io::Lines<BufReader<tokio::process::ChildStdout>>;

async fn next_line(lines: &mut Lines) -> String {
    tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("the demo wrote nothing for 20 s")
        .unwrap()
        .expect("the demo closed its output")
}

#[tokio::test]
async fn binary_serves_and_logs_one_line_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.sqlite3").display());
    let mut child = demo()
        .args(["--listen", "127.0.0.1:0", "--store", &store, "--dev"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
    let listening = loop {
        let line = next_line(&mut lines).await;
        if line.contains("listening on ") {
            break line;
        }
    };
    let base = listening
        .split("listening on ")
        .nth(1)
        .and_then(|rest| rest.split_whitespace().next())
        .unwrap_or_else(|| panic!("no address in {listening:?}"))
        .to_owned();
    assert!(listening.contains("INFO"), "{listening}");

    let client = reqwest::Client::new();
    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
    let logged = next_line(&mut lines).await;
    assert!(
        logged.contains("INFO") && logged.contains("/healthz") && logged.contains("status=200"),
        "{logged}"
    );

    // --dev: a request with no address would be `local`; over loopback the peer is known.
    let asked = client
        .post(format!("{base}/sites/docs/ask"))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), reqwest::StatusCode::OK);
    let logged = next_line(&mut lines).await;
    assert!(
        logged.contains("/sites/docs/ask") && logged.contains("status=200"),
        "{logged}"
    );

    child.kill().await.unwrap();
}
