//! The `tollgate-demo` binary run as a process for a test: started with
//! arguments and none of the demo's environment variables, served on a free
//! loopback port, its standard output read line by line.
//!
//! Included by each test binary that runs it with
//! `#[path = "support/demo_binary.rs"] mod demo_binary;`; not every binary
//! uses every item.
#![allow(dead_code, clippy::unwrap_used, clippy::expect_used)]

use std::process::Stdio;
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, ChildStdout, Command};

/// The binary Cargo built for these tests.
pub(crate) const BIN: &str = env!("CARGO_BIN_EXE_tollgate-demo");

/// The binary's command, with none of the demo's environment variables
/// (so that the machine's settings never leak into a test), logging at
/// `info` without colours, killed when dropped.
pub(crate) fn command() -> Command {
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
        "TOLLGATE_METRICS_LISTEN",
        "TOLLGATE_GRPC_LISTEN",
        "GITHUB_WEBHOOK_SECRET",
        "UPSTASH_REDIS_REST_URL",
        "UPSTASH_REDIS_REST_TOKEN",
    ] {
        command.env_remove(var);
    }
    command
        .env("RUST_LOG", "info")
        .env("NO_COLOR", "1")
        .kill_on_drop(true);
    command
}

/// The standard output of a running demo, line by line.
pub(crate) type Lines = tokio::io::Lines<BufReader<ChildStdout>>;

/// The next line the demo writes (at most 20 s away).
pub(crate) async fn next_line(lines: &mut Lines) -> String {
    tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("the demo wrote nothing for 20 s")
        .unwrap()
        .expect("the demo closed its output")
}

/// A demo serving on a free loopback port.
pub(crate) struct Running {
    /// `http://127.0.0.1:<port>`.
    pub(crate) base: String,
    /// Its standard output up to and including the `listening on` line.
    pub(crate) before: Vec<String>,
    /// Its standard output after the `listening on` line.
    pub(crate) lines: Lines,
    /// The process (killed when dropped).
    pub(crate) child: Child,
}

impl Running {
    /// Starts the binary with `args` and `--listen 127.0.0.1:0`, and waits
    /// until it says where it listens.
    pub(crate) async fn start(args: &[&str]) -> Running {
        let mut command = command();
        command
            .args(args)
            .args(["--listen", "127.0.0.1:0"])
            .stderr(Stdio::inherit());
        Running::spawn(command).await
    }

    /// Spawns `command` (the binary's [`command`] with a `--listen` on a
    /// free port, and whatever else the test sets: arguments, variables,
    /// its standard error) with its standard output piped, and waits until
    /// it says where it listens.
    pub(crate) async fn spawn(mut command: Command) -> Running {
        let mut child = command.stdout(Stdio::piped()).spawn().unwrap();
        let mut lines = BufReader::new(child.stdout.take().unwrap()).lines();
        let mut before = Vec::new();
        loop {
            let line = next_line(&mut lines).await;
            let listening = line.contains("listening on ");
            before.push(line);
            if listening {
                break;
            }
        }
        let listening = before.last().unwrap();
        let base = listening
            .split("listening on ")
            .nth(1)
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no address in {listening:?}"))
            .to_owned();
        Running {
            base,
            before,
            lines,
            child,
        }
    }

    /// `http://ADDR` of the gRPC service, as the demo said before it
    /// listened (started with `--grpc-listen`).
    pub(crate) fn grpc(&self) -> String {
        self.before
            .iter()
            .find_map(|line| line.split("gRPC tollgate.demo.v1.Ask on ").nth(1))
            .and_then(|rest| rest.split_whitespace().next())
            .unwrap_or_else(|| panic!("no gRPC address in {:?}", self.before))
            .to_owned()
    }

    /// The `Retry-After` (whole seconds) of a POST to `path`, which the
    /// demo must refuse with 429.
    pub(crate) async fn retry_after(&self, path: &str) -> u64 {
        let response = reqwest::Client::new()
            .post(self.url(path))
            .send()
            .await
            .unwrap();
        assert_eq!(response.status(), reqwest::StatusCode::TOO_MANY_REQUESTS);
        response.headers()["retry-after"]
            .to_str()
            .unwrap()
            .parse()
            .unwrap()
    }

    /// The URL of `path` on the demo.
    pub(crate) fn url(&self, path: &str) -> String {
        format!("{}{path}", self.base)
    }
}
