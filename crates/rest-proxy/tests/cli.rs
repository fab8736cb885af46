//! The `tollgate-rest-proxy` binary: its arguments, its start-up line, its
//! refusals, and logs that never show the token.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncBufReadExt, AsyncReadExt, BufReader};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::unique;

const BIN: &str = env!("CARGO_BIN_EXE_tollgate-rest-proxy");

/// Runs the binary to its exit; one that is still running after 10 s (it
/// started serving when it should have refused) is killed and fails the test.
fn run(args: &[&str], token_env: Option<&str>) -> Output {
    let mut command = Command::new(BIN);
    command
        .args(args)
        .env_remove("TOLLGATE_PROXY_TOKEN")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if let Some(token) = token_env {
        command.env("TOLLGATE_PROXY_TOKEN", token);
    }
    let mut child = command.spawn().expect("run tollgate-rest-proxy");
    let started = Instant::now();
    while child.try_wait().expect("poll the child").is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            let output = child.wait_with_output().expect("collect the output");
            panic!(
                "tollgate-rest-proxy {args:?} is still running after 10 s; stdout: {:?}",
                String::from_utf8_lossy(&output.stdout)
            );
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().expect("collect the output")
}

fn assert_one_line_failure(output: &Output, needle: &str) {
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(!output.status.success(), "it started: {stderr}");
    assert_eq!(
        stderr.trim_end().lines().count(),
        1,
        "not one line: {stderr:?}"
    );
    assert!(
        stderr.contains(needle),
        "{stderr:?} does not mention {needle:?}"
    );
    assert!(
        output.stdout.is_empty(),
        "stdout: {:?}",
        String::from_utf8_lossy(&output.stdout)
    );
}

#[test]
fn without_a_token_it_exits_non_zero_with_one_line() {
    let output = run(&["--listen", "127.0.0.1:0"], None);
    assert_one_line_failure(&output, "TOLLGATE_PROXY_TOKEN");
    let output = run(&["--listen", "127.0.0.1:0", "--token", ""], None);
    assert_one_line_failure(&output, "--token");
    let output = run(&["--listen", "127.0.0.1:0"], Some(""));
    assert_one_line_failure(&output, "no token");
}

#[test]
fn a_bad_redis_url_is_one_line_without_its_password() {
    let output = run(
        &[
            "--listen",
            "127.0.0.1:0",
            "--redis",
            "redis://:hunter2@[::1",
        ],
        Some("t"),
    );
    assert_one_line_failure(&output, "invalid Redis URL");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("hunter2"));
}

#[test]
fn help_lists_the_options_and_hides_the_token_value() {
    let output = run(&["--help"], Some("sekrit-from-env"));
    assert!(output.status.success(), "{output:?}");
    let help = String::from_utf8_lossy(&output.stdout);
    for option in [
        "--listen",
        "--redis",
        "--token",
        "--max-body",
        "--redis-timeout-ms",
        "TOLLGATE_PROXY_TOKEN",
    ] {
        assert!(
            help.contains(option),
            "--help does not mention {option}:\n{help}"
        );
    }
    assert!(
        !help.contains("sekrit-from-env"),
        "--help shows the token:\n{help}"
    );
    assert!(run(&["--version"], None).status.success());
}

#[tokio::test]
async fn it_prints_its_real_address_serves_and_never_logs_the_token() {
    let mut server = RedisServer::start();
    let token = format!("tok-{}", unique());
    let wrong = format!("wrong-{}", unique());
    let mut child = tokio::process::Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--redis", &server.url()])
        .env("TOLLGATE_PROXY_TOKEN", &token)
        .env("RUST_LOG", "trace")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start tollgate-rest-proxy");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = BufReader::new(stdout).lines();
    let first = tokio::time::timeout(Duration::from_secs(10), lines.next_line())
        .await
        .expect("a line within 10 s")
        .expect("read stdout")
        .expect("a first line");
    let base = first
        .strip_prefix("listening on ")
        .unwrap_or_else(|| panic!("unexpected first line {first:?}"))
        .to_owned();
    assert!(
        base.starts_with("http://127.0.0.1:") && !base.ends_with(":0"),
        "{base}"
    );

    let http = reqwest::Client::new();
    let post = |token: &str, url: String| {
        http.post(url)
            .bearer_auth(token)
            .json(&json!(["incr", "n"]))
    };
    let response = post(&token, format!("{base}/"))
        .send()
        .await
        .expect("answered");
    assert_eq!(
        response.json::<Value>().await.expect("JSON"),
        json!({"result": 1})
    );
    let response = post(&wrong, format!("{base}/"))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 401);
    let url = format!("{base}/incr/n?_token={token}");
    let response = http.get(url).send().await.expect("answered");
    assert_eq!(
        response.json::<Value>().await.expect("JSON"),
        json!({"result": 2})
    );
    let url = format!("{base}/incr/n?_token={wrong}");
    assert_eq!(http.get(url).send().await.expect("answered").status(), 401);
    server.stop();
    let response = post(&token, format!("{base}/"))
        .send()
        .await
        .expect("answered");
    assert_eq!(response.status(), 500);

    child.start_kill().expect("kill the proxy");
    let _ = child.wait().await;
    let mut logs = String::new();
    child
        .stderr
        .take()
        .expect("stderr")
        .read_to_string(&mut logs)
        .await
        .expect("read stderr");
    assert!(
        logs.contains("connected to redis"),
        "no logs to check:\n{logs}"
    );
    assert!(
        logs.contains("redis call failed"),
        "the failure is not logged:\n{logs}"
    );
    assert!(!logs.contains(&token), "the token is in the logs:\n{logs}");
    assert!(
        !logs.contains(&wrong),
        "a wrong token is in the logs:\n{logs}"
    );
}
