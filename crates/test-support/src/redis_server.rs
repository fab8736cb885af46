//! [`RedisServer`]: a private `redis-server` for tests, on a free loopback port.
//!
//! Each server runs in its own temporary directory and is killed by its
//! process id when dropped. Nothing here uses port 6379 or any server that
//! happens to be listening: a free port is only a guess (another test may
//! take it before the server binds it), so a server is only used once the
//! process answering on its TCP port is proved to be the one started here:
//! the server also listens on a unix socket in its own directory, and the
//! `process_id` and `run_id` that `INFO server` reports on the port must be
//! the child's and the socket's. Otherwise it is stopped and another port
//! tried. To run the tests against an existing server
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

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use tempfile::TempDir;

/// The environment variable naming an existing server to test against.
pub const URL_VAR: &str = "TOLLGATE_TEST_REDIS_URL";

/// How long a server may take to answer `PING` after it is started.
const READY_TIMEOUT: Duration = Duration::from_secs(10);

/// Limit on each read of a readiness or identity check.
const IO_TIMEOUT: Duration = Duration::from_millis(500);

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
        let mut last_error = String::new();
        // A free port can be taken by someone else before the server binds it.
        for _ in 0..10 {
            match RedisServer::start_on(free_port(), options.clone()) {
                Ok(server) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("redis-server did not start: {last_error}");
    }

    /// Starts a private server with `options` on `port` (ignoring
    /// [`URL_VAR`]); [`start_with`](RedisServer::start_with) calls it with
    /// free ports until one works.
    ///
    /// # Errors
    ///
    /// When the server does not start, or when the process answering on
    /// `port` is not the one started here (another server holds the port).
    ///
    /// # Panics
    ///
    /// When `redis-server` is not on `PATH` or no directory can be made.
    pub fn start_on(port: u16, options: RedisServerOptions) -> Result<RedisServer, String> {
        let dir = tempfile::Builder::new()
            .prefix("tollgate-redis-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a directory for redis-server: {e}"));
        let child = launch(dir.path(), port, &options)?;
        Ok(RedisServer {
            target: Target::Private(Private {
                child: Some(child),
                port,
                options,
                dir,
            }),
        })
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

    /// The private server's unix socket, in its directory: reachable by
    /// this test alone.
    pub fn socket(&self) -> Option<PathBuf> {
        self.dir().map(socket_path)
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

/// The unix socket of the server in `dir`.
fn socket_path(dir: &Path) -> PathBuf {
    dir.join("redis.sock")
}

/// Starts `redis-server` on `port` in `dir`, waits until it answers on its
/// unix socket, and checks that the server answering on `port` is this
/// child; on any failure the child is killed.
fn launch(dir: &Path, port: u16, options: &RedisServerOptions) -> Result<Child, String> {
    let socket = socket_path(dir);
    let _ = std::fs::remove_file(&socket);
    let mut command = Command::new("redis-server");
    command
        .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
        .arg("--unixsocket")
        .arg(&socket)
        .args(["--unixsocketperm", "700"])
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
    let fail = |child: &mut Child, error: String| {
        let _ = child.kill();
        let _ = child.wait();
        Err(error)
    };
    loop {
        if let Ok(Some(status)) = child.try_wait() {
            return Err(format!("it exited ({status}); its log:\n{}", log_tail(dir)));
        }
        if ping(unix(&socket).ok()) {
            break;
        }
        if started.elapsed() > READY_TIMEOUT {
            let error = format!(
                "it did not answer PING within {READY_TIMEOUT:?}; its log:\n{}",
                log_tail(dir)
            );
            return fail(&mut child, error);
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    let ours = unix(&socket).and_then(identity);
    let ours = match ours {
        Ok(ours) if ours.pid == child.id() => ours,
        Ok(other) => {
            let error = format!("its socket is answered by pid {}", other.pid);
            return fail(&mut child, error);
        }
        Err(e) => return fail(&mut child, format!("INFO on its socket failed: {e}")),
    };
    let addr = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let on_port = TcpStream::connect_timeout(&addr, IO_TIMEOUT)
        .and_then(|stream| stream.set_read_timeout(Some(IO_TIMEOUT)).map(|()| stream))
        .map_err(|e| e.to_string())
        .and_then(identity);
    match on_port {
        Ok(found) if found == ours => Ok(child),
        Ok(found) => {
            let error = format!(
                "port {port} is answered by another redis-server (pid {}), not ours (pid {})",
                found.pid, ours.pid
            );
            fail(&mut child, error)
        }
        Err(e) => fail(&mut child, format!("INFO on port {port} failed: {e}")),
    }
}

/// A connection to the unix socket at `path`, with a read timeout (a server
/// that stops answering, frozen by its test, must not hang this one).
fn unix(path: &Path) -> Result<UnixStream, String> {
    let stream = UnixStream::connect(path).map_err(|e| e.to_string())?;
    stream
        .set_read_timeout(Some(IO_TIMEOUT))
        .map_err(|e| e.to_string())?;
    Ok(stream)
}

/// Who a server is: its process and its run (a restart gets a new run id).
#[derive(Debug, PartialEq, Eq)]
struct Identity {
    pid: u32,
    run_id: String,
}

/// The `process_id` and `run_id` that `INFO server` reports on `stream`.
fn identity<S: Read + Write>(mut stream: S) -> Result<Identity, String> {
    stream
        .write_all(b"INFO server\r\n")
        .map_err(|e| e.to_string())?;
    let mut reader = BufReader::new(stream);
    let mut header = String::new();
    reader.read_line(&mut header).map_err(|e| e.to_string())?;
    let len: usize = header
        .strip_prefix('$')
        .and_then(|n| n.trim_end().parse().ok())
        .ok_or_else(|| format!("INFO answered {header:?}"))?;
    let mut body = vec![0_u8; len];
    reader.read_exact(&mut body).map_err(|e| e.to_string())?;
    let body = String::from_utf8_lossy(&body);
    let field = |name: &str| {
        crate::redis_info::field(&body, name)
            .map(str::to_owned)
            .ok_or_else(|| format!("INFO server has no {name}"))
    };
    let pid = field("process_id")?
        .parse()
        .map_err(|_| "process_id is not a number".to_owned())?;
    Ok(Identity {
        pid,
        run_id: field("run_id")?,
    })
}

/// Whether the server on `stream` answers `PING` with `PONG` (not `LOADING`).
fn ping<S: Read + Write>(stream: Option<S>) -> bool {
    let Some(mut stream) = stream else {
        return false;
    };
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
