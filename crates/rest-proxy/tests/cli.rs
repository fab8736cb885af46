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
    // The URL is named by its scheme and host only (tollgate::url::shown).
    assert_one_line_failure(&output, "invalid Redis URL redis://[::1:");
    assert!(!String::from_utf8_lossy(&output.stderr).contains("hunter2"));
    let output = run(
        &[
            "--redis",
            "redis://planted-user:hunter2@h:99999/0",
            "--print-acl",
            "px",
        ],
        None,
    );
    assert_one_line_failure(&output, "invalid Redis URL redis://h:99999:");
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !stderr.contains("hunter2") && !stderr.contains("planted-user"),
        "{stderr}"
    );
}

#[tokio::test]
async fn the_start_up_line_names_redis_by_scheme_and_host_only() {
    // Nothing listens there: the proxy starts anyway, and connects on the
    // first request.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let redis = format!("redis://planted-user:hunter2@127.0.0.1:{port}/0");
    // On two threads, where the default is one: it starts the same.
    let mut child = tokio::process::Command::new(BIN)
        .args([
            "--listen",
            "127.0.0.1:0",
            "--redis",
            &redis,
            "--threads",
            "2",
        ])
        .env("TOLLGATE_PROXY_TOKEN", "some-token")
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("start tollgate-rest-proxy");
    let stdout = child.stdout.take().expect("stdout");
    let first = tokio::time::timeout(
        Duration::from_secs(10),
        BufReader::new(stdout).lines().next_line(),
    )
    .await
    .expect("a line within 10 s")
    .expect("read stdout")
    .unwrap_or_default();
    let logs = stop(&mut child).await;
    assert!(first.starts_with("listening on "), "{first:?}\n{logs}");
    let line = logs
        .lines()
        .find(|line| line.contains("proxying"))
        .unwrap_or_else(|| panic!("no start-up line:\n{logs}"));
    // Neither the password nor the user (which the next line names, as
    // the user callers' commands run as).
    assert!(
        line.ends_with(&format!("proxying redis=redis://127.0.0.1:{port}")),
        "{line}"
    );
    assert!(!logs.contains("hunter2"), "{logs}");
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
        "--create-user",
        "--allow-unrestricted-user",
        "--print-acl",
        "--max-commands",
        "--header-timeout-ms",
        "--body-timeout-ms",
        "--max-connections",
        "--threads",
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
    let output = run(&["--threads", "0"], Some("t"));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        !output.status.success() && stderr.contains("--threads"),
        "{stderr}"
    );
}

#[tokio::test]
async fn it_prints_its_real_address_serves_and_never_logs_the_token() {
    let mut server = RedisServer::start();
    let token = format!("tok-{}", unique());
    let wrong = format!("wrong-{}", unique());
    let mut child = tokio::process::Command::new(BIN)
        .args(["--listen", "127.0.0.1:0", "--redis", &server.url()])
        .args(["--create-user", "tollgate-proxy"])
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

    let logs = stop(&mut child).await;
    assert!(
        logs.contains("connected to redis"),
        "no logs to check:\n{logs}"
    );
    assert!(
        logs.contains("a token holder can run")
            && logs.contains("as Redis user \"tollgate-proxy\""),
        "the start-up does not say what a token holder can do:\n{logs}"
    );
    // A restricted user on loopback: said as information, no warning.
    let said = logs
        .lines()
        .find(|line| line.contains("a token holder can run"))
        .unwrap_or_default();
    assert!(said.contains("INFO") && !said.contains("WARN"), "{said}");
    assert!(!logs.contains("beyond loopback"), "{logs}");
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

#[test]
fn it_will_not_serve_as_an_unrestricted_redis_user() {
    let server = RedisServer::start();
    let output = run(
        &["--listen", "127.0.0.1:0", "--redis", &server.url()],
        Some("some-token"),
    );
    assert_one_line_failure(&output, "\"default\" can run FLUSHALL");
}

#[test]
fn print_acl_prints_one_setuser_line_for_the_server() {
    let server = RedisServer::start();
    let output = run(&["--redis", &server.url(), "--print-acl", "px"], None);
    assert!(output.status.success(), "{output:?}");
    let line = String::from_utf8_lossy(&output.stdout);
    assert!(
        line.starts_with(
            "ACL SETUSER px on resetkeys ~* resetchannels clearselectors -@all +append "
        ) && line.trim_end().lines().count() == 1,
        "{line}"
    );
    let output = run(
        &["--redis", &server.url(), "--print-acl", "two words"],
        None,
    );
    assert_one_line_failure(&output, "invalid Redis user name");
}

/// Kills the proxy `child`; what it wrote on stderr.
async fn stop(child: &mut tokio::process::Child) -> String {
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
    logs
}
