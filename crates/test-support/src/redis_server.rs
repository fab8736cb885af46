//! [`RedisServer`]: a private `redis-server` for tests, on a free loopback port.
//!
//! Each server runs in its own temporary directory and is killed by its
//! process id when dropped. Nothing here uses port 6379 or any server that
//! happens to be listening. To run the tests against an existing server
//! instead, set [`URL_VAR`] (`TOLLGATE_TEST_REDIS_URL`) to its URL; tests
//! that stop, restart or freeze the server then fail, since they need a
//! private one.
//!
//! ```no_run
//! use tollgate_test_support::redis_server::RedisServer;
//! let mut server = RedisServer::start();
//! let url = server.url(); // redis://127.0.0.1:<port>
//! server.stop(); // SIGKILL; the port and directory are kept
//! server.restart(); // the same port, directory and options
//! # let _ = url;
//! ```

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The environment variable naming an existing server to test against.
pub const URL_VAR: &str = "TOLLGATE_TEST_REDIS_URL";

/// How long a server may take to answer `PING` after it is started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// How a private server is configured.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedisServerOptions {
    /// `appendonly yes` and `appendfsync always`: every write is on disk
    /// before it is answered. Otherwise `appendonly no` (and never `save`).
    pub durable: bool,
    /// More `redis-server` arguments, e.g. `["--maxmemory", "1mb"]`.
    pub args: Vec<String>,
}

impl RedisServerOptions {
    /// Options for a server whose counts survive a crash: `appendonly yes`,
    /// `appendfsync always`.
    pub fn durable() -> RedisServerOptions {
        RedisServerOptions {
            durable: true,
            args: Vec::new(),
        }
    }

    /// Adds `redis-server` arguments.
    pub fn args<I, S>(mut self, args: I) -> RedisServerOptions
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        self.args.extend(args.into_iter().map(Into::into));
        self
    }
}

/// A Redis server for one test: private (started here), or the existing one
/// named by [`URL_VAR`].
#[derive(Debug)]
pub struct RedisServer {
    target: Target,
}

#[derive(Debug)]
enum Target {
    Private(Private),
    External(String),
}

#[derive(Debug)]
struct Private {
    child: Option<Child>,
    port: u16,
    options: RedisServerOptions,
    // Declared last: dropped after the server is killed.
    dir: TempDir,
}

impl RedisServer {
    /// Starts a private server with default options (no persistence), or
    /// uses the server named by [`URL_VAR`].
    ///
    /// # Panics
    ///
    /// When `redis-server` is not on `PATH` or does not start: a test that
    /// needs Redis fails, it is never skipped.
    pub fn start() -> RedisServer {
        RedisServer::start_with(RedisServerOptions::default())
    }

    /// Starts a private server with `options`, or uses the server named by
    /// [`URL_VAR`] (whose own configuration then applies).
    ///
    /// # Panics
    ///
    /// As [`start`](RedisServer::start).
    pub fn start_with(options: RedisServerOptions) -> RedisServer {
        if let Some(url) = std::env::var(URL_VAR).ok().filter(|u| !u.trim().is_empty()) {
            return RedisServer {
                target: Target::External(url.trim().to_owned()),
            };
        }
        let dir = tempfile::Builder::new()
            .prefix("tollgate-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a directory for redis-server: {e}"));
        let mut last_error = String::new();
        // A free port can be taken by someone else before the server binds it.
        for _ in 0..5 {
            let port = free_port();
            match launch(dir.path(), port, &options) {
                Ok(child) => {
                    return RedisServer {
                        target: Target::Private(Private {
                            child: Some(child),
                            port,
                            options,
                            dir,
                        }),
                    };
                }
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    /// The server's URL, `redis://127.0.0.1:<port>` for a private one.
    pub fn url(&self) -> String {
        match &self.target {
            Target::Private(p) => format!("redis://127.0.0.1:{}", p.port),
            Target::External(url) => url.clone(),
        }
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        match &self.target {
            Target::Private(p) => p.port,
            Target::External(url) => external_port(url),
        }
    }

    /// Whether this is a private server, which the test may stop and freeze.
    pub fn is_private(&self) -> bool {
        matches!(self.target, Target::Private(_))
    }

    /// Fails the test unless the server is private: for tests that change
    /// the whole server (its role, its statistics), which a shared one must
    /// not see. `what` says what the test does, e.g. "reset its statistics".
    ///
    /// # Panics
    ///
    /// When the server is the one named by [`URL_VAR`].
    pub fn require_private(&self, what: &str) {
        if !self.is_private() {
            panic!("{}", needs_private(what));
        }
    }

    /// The private server's directory (its log is `redis.log`, its
    /// append-only files under `appendonlydir`).
    pub fn dir(&self) -> Option<&Path> {
        match &self.target {
            Target::Private(p) => Some(p.dir.path()),
            Target::External(_) => None,
        }
    }

    /// The private server's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        match &self.target {
            Target::Private(p) => p.child.as_ref().map(Child::id),
            Target::External(_) => None,
        }
    }

    /// Kills the server (SIGKILL, as a crash would), keeping its port and
    /// directory for [`restart`](RedisServer::restart). Does nothing if it
    /// is already stopped.
    ///
    /// # Panics
    ///
    /// When the server is not private.
    pub fn stop(&mut self) {
        let private = self.private("stop");
        if let Some(mut child) = private.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server if it runs, then starts it again on the same port,
    /// in the same directory, with the same options; returns once it answers.
    ///
    /// # Panics
    ///
    /// When the server is not private or does not start again.
    pub fn restart(&mut self) {
        self.stop();
        let private = self.private("restart");
        match launch(private.dir.path(), private.port, &private.options) {
            Ok(child) => private.child = Some(child),
            Err(error) => panic!(
                "redis-server did not restart on port {}: {error}",
                private.port
            ),
        }
    }

    /// Suspends the server (SIGSTOP): connections stay open, nothing is
    /// answered. Resume it with [`thaw`](RedisServer::thaw).
    ///
    /// # Panics
    ///
    /// When the server is not private or not running.
    pub fn freeze(&mut self) {
        self.signal("freeze", "-STOP");
    }

    /// Resumes a frozen server (SIGCONT).
    ///
    /// # Panics
    ///
    /// When the server is not private or not running.
    pub fn thaw(&mut self) {
        self.signal("thaw", "-CONT");
    }

    fn signal(&mut self, what: &str, signal: &str) {
        let pid = match self.private(what).child.as_ref() {
            Some(child) => child.id().to_string(),
            None => panic!("cannot {what} a stopped redis-server"),
        };
        let status = Command::new("kill")
            .args([signal, pid.as_str()])
            .status()
            .unwrap_or_else(|e| panic!("cannot run kill {signal} {pid}: {e}"));
        assert!(status.success(), "kill {signal} {pid} failed: {status}");
    }

    fn private(&mut self, what: &str) -> &mut Private {
        match &mut self.target {
            Target::Private(p) => p,
            Target::External(_) => panic!("{}", needs_private(what)),
        }
    }
}

impl Drop for RedisServer {
    fn drop(&mut self) {
        if let Target::Private(p) = &mut self.target
            && let Some(mut child) = p.child.take()
        {
            // SIGKILL ends a frozen server too.
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

fn needs_private(what: &str) -> String {
    format!(
        "this test needs to {what} its Redis server, so it needs a private one: \
         unset {URL_VAR} and put redis-server on PATH"
    )
}

/// A loopback port nothing listens on right now.
fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .and_then(|listener| listener.local_addr())
        .map(|addr| addr.port())
        .unwrap_or_else(|e| panic!("cannot find a free loopback port: {e}"))
}

/// Starts `redis-server` on `port` in `dir` and waits until it answers.
fn launch(dir: &Path, port: u16, options: &RedisServerOptions) -> Result<Child, String> {
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .args(["--save", "", "--daemonize", "no", "--logfile", "redis.log"])
        .args(["--appendonly", if options.durable { "yes" } else { "no" }]);
    if options.durable {
        command.args(["--appendfsync", "always"]);
    }
    command
        .args(&options.args)
        .arg("--dir")
        .arg(dir)
        .current_dir(dir)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = match command.spawn() {
        Ok(child) => child,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "redis-server not found on PATH; install it (apt-get install redis-server) \
             or set {URL_VAR}"
        ),
        Err(e) => panic!("cannot start redis-server: {e}"),
    };
    let started = Instant::now();
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited ({status}); its log:\n{}", log_tail(dir)));
        }
        if ping(port) {
            return Ok(child);
        }
        if started.elapsed() > READY_TIMEOUT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(format!(
                "it did not answer PING within {READY_TIMEOUT:?}; its log:\n{}",
                log_tail(dir)
            ));
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Whether a server on `port` answers `PING` with `PONG` (not `LOADING`).
fn ping(port: u16) -> bool {
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let Ok(mut stream) = TcpStream::connect_timeout(&addr, Duration::from_millis(100)) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_millis(500)));
    if stream.write_all(b"PING\r\n").is_err() {
        return false;
    }
    let mut reply = [0_u8; 7];
    stream.read_exact(&mut reply).is_ok() && reply == *b"+PONG\r\n"
}

fn log_tail(dir: &Path) -> String {
    let log = std::fs::read_to_string(dir.join("redis.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// The port of a `redis://[user:pass@]host[:port][/db]` URL (6379 if none).
fn external_port(url: &str) -> u16 {
    let rest = url.split_once("://").map_or(url, |(_, rest)| rest);
    let authority = rest.split('/').next().unwrap_or(rest);
    let host_port = authority.rsplit_once('@').map_or(authority, |(_, hp)| hp);
    match host_port.rsplit_once(':') {
        Some((host, port)) if !host.ends_with(':') => port.parse().unwrap_or(6379),
        _ => 6379,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_the_port_of_an_external_url() {
        assert_eq!(external_port("redis://127.0.0.1:6390"), 6390);
        assert_eq!(external_port("redis://:secret@localhost:7000/2"), 7000);
        assert_eq!(external_port("redis://localhost"), 6379);
        assert_eq!(external_port("redis://[::1]:6391/0"), 6391);
    }
}
