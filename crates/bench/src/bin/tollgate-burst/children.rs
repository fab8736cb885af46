//! The processes this tool starts: demos, the REST proxy, the busy process.
//! Each is held by a [`Guard`] that kills it by its process id when dropped,
//! on every path (a panic included).

use std::fs::File;
use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

use crate::Common;
use crate::http;

/// How long a demo may take to answer `/healthz` once started.
const READY_TIMEOUT: Duration = Duration::from_secs(15);

/// A child process, killed (SIGKILL) and reaped when dropped.
#[derive(Debug)]
pub(crate) struct Guard {
    name: String,
    child: Child,
}

impl Guard {
    /// Starts `command`, named `name` in messages.
    ///
    /// # Panics
    ///
    /// When it cannot be started.
    pub(crate) fn spawn(name: &str, mut command: Command) -> Guard {
        let child = command
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start {name} ({command:?}): {e}"));
        Guard {
            name: name.to_owned(),
            child,
        }
    }

    /// Its exit status, once it has exited.
    pub(crate) fn exited(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Its standard output, when piped.
    pub(crate) fn stdout(&mut self) -> Option<std::process::ChildStdout> {
        self.child.stdout.take()
    }

    /// Its name.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }
}

impl Drop for Guard {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Where the logs of the children go: a directory given by the user
/// (kept), or a temporary one (removed unless [`keep`](LogDir::keep) is called).
#[derive(Debug)]
pub(crate) enum LogDir {
    Given(PathBuf),
    Temporary(TempDir),
}

impl LogDir {
    /// `given`, created if needed, or a new temporary directory.
    ///
    /// # Panics
    ///
    /// When the directory cannot be created.
    pub(crate) fn new(given: Option<&Path>) -> LogDir {
        match given {
            Some(dir) => {
                std::fs::create_dir_all(dir)
                    .unwrap_or_else(|e| panic!("cannot create {}: {e}", dir.display()));
                LogDir::Given(dir.to_owned())
            }
            None => LogDir::Temporary(
                tempfile::Builder::new()
                    .prefix("tollgate-burst-")
                    .tempdir()
                    .unwrap_or_else(|e| panic!("cannot create a log directory: {e}")),
            ),
        }
    }

    /// The directory.
    pub(crate) fn path(&self) -> &Path {
        match self {
            LogDir::Given(dir) => dir,
            LogDir::Temporary(dir) => dir.path(),
        }
    }

    /// Keeps the directory after this process ends; its path.
    pub(crate) fn keep(self) -> PathBuf {
        match self {
            LogDir::Given(dir) => dir,
            LogDir::Temporary(dir) => dir.keep(),
        }
    }

    /// A new log file `name` in the directory.
    ///
    /// # Panics
    ///
    /// When it cannot be created.
    pub(crate) fn file(&self, name: &str) -> (PathBuf, File) {
        let path = self.path().join(name);
        let file =
            File::create(&path).unwrap_or_else(|e| panic!("cannot create {}: {e}", path.display()));
        (path, file)
    }
}

/// A loopback port nothing listens on right now.
pub(crate) fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|e| panic!("cannot find a free loopback port: {e}"))
}

/// A running demo process.
#[derive(Debug)]
pub(crate) struct Demo {
    pub(crate) addr: SocketAddr,
    pub(crate) log: PathBuf,
    _child: Guard,
}

/// What a demo is given to reach the store: its `--store` and environment.
#[derive(Clone, Debug)]
pub(crate) struct Target {
    pub(crate) url: String,
    pub(crate) env: Vec<(String, String)>,
}

/// Starts the demo binary on `target`, believing `cf-connecting-ip` from
/// loopback peers (so that each request names its own visitor), with
/// `rules` if given; returns once it answers `GET /healthz`.
///
/// # Panics
///
/// When the binary is missing or the demo does not start.
pub(crate) async fn start_demo(
    common: &Common,
    name: &str,
    target: &Target,
    rules: Option<&Path>,
    logs: &LogDir,
) -> Demo {
    assert!(
        common.demo.is_file(),
        "no demo binary at {}: build it with `cargo build --release -p tollgate-demo` \
         (or pass --demo)",
        common.demo.display()
    );
    let mut last = String::new();
    // A free port may be taken by someone else before the demo binds it.
    for _ in 0..5 {
        let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, free_port()));
        let (log, file) = logs.file(&format!("{name}.log"));
        let err = file
            .try_clone()
            .unwrap_or_else(|e| panic!("cannot open {}: {e}", log.display()));
        let mut command = Command::new(&common.demo);
        command
            .arg("--listen")
            .arg(addr.to_string())
            .args(["--store", &target.url])
            .args([
                "--trust",
                "cf-connecting-ip",
                "--trusted-proxy",
                "127.0.0.0/8",
            ])
            .envs(target.env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(file)
            .stderr(err);
        if let Some(rules) = rules {
            command.arg("--rules").arg(rules);
        }
        match &common.rust_log {
            Some(filter) => command.env("RUST_LOG", filter),
            None => command.env_remove("RUST_LOG"),
        };
        let mut child = Guard::spawn(name, command);
        let started = Instant::now();
        loop {
            if let Some(status) = child.exited() {
                last = format!("{name} exited ({status}); its log:\n{}", tail(&log));
                break;
            }
            if http::get(addr, "/healthz")
                .await
                .is_some_and(|reply| reply.status == 200)
            {
                return Demo {
                    addr,
                    log,
                    _child: child,
                };
            }
            assert!(
                started.elapsed() < READY_TIMEOUT,
                "{name} did not answer /healthz within {READY_TIMEOUT:?}; its log:\n{}",
                tail(&log)
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    panic!("the demo did not start: {last}");
}

/// Starts the REST proxy binary before the Redis at `redis_url` on a port
/// of its choosing; its address (`host:port`) once it says it listens.
///
/// # Panics
///
/// When the binary is missing or the proxy does not start.
pub(crate) fn start_proxy(
    binary: &Path,
    redis_url: &str,
    token: &str,
    logs: &LogDir,
) -> (Guard, String) {
    assert!(
        binary.is_file(),
        "no REST proxy binary at {}: build it with `cargo build --release -p \
         tollgate-rest-proxy` (or pass --proxy)",
        binary.display()
    );
    let (log, file) = logs.file("rest-proxy.log");
    let mut command = Command::new(binary);
    command
        .args([
            "--listen",
            "127.0.0.1:0",
            "--redis",
            redis_url,
            "--token",
            token,
            "--create-user",
            "tollgate-proxy",
        ])
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(file);
    let mut child = Guard::spawn("tollgate-rest-proxy", command);
    let mut line = String::new();
    if let Some(stdout) = child.stdout() {
        let _ = BufReader::new(stdout).read_line(&mut line);
    }
    match line.trim().strip_prefix("listening on http://") {
        Some(addr) => {
            let addr = addr.to_owned();
            (child, addr)
        }
        None => panic!(
            "{} did not say where it listens ({line:?}); its log:\n{}",
            child.name(),
            tail(&log)
        ),
    }
}

/// Starts this binary's hidden `spin` mode: `threads` threads spinning
/// until this process is gone.
///
/// # Panics
///
/// When it cannot be started.
pub(crate) fn start_spinner(threads: usize) -> Guard {
    let exe = std::env::current_exe()
        .unwrap_or_else(|e| panic!("cannot find this binary to start the busy process: {e}"));
    let mut command = Command::new(exe);
    command
        .args(["spin", &threads.to_string()])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::inherit());
    Guard::spawn("busy process", command)
}

/// The busy process: `threads` threads spinning; returns (and the process
/// exits) once its parent is gone, so a killed tool leaves nothing spinning.
pub(crate) fn spin(threads: usize) -> bool {
    let parent = std::os::unix::process::parent_id();
    for _ in 0..threads {
        std::thread::spawn(|| {
            let mut n = 0_u64;
            loop {
                n = std::hint::black_box(n.wrapping_add(1));
            }
        });
    }
    while std::os::unix::process::parent_id() == parent {
        std::thread::sleep(Duration::from_millis(200));
    }
    true
}

/// The last 30 lines of the log at `path`.
pub(crate) fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
