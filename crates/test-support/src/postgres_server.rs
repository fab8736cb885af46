//! [`PostgresServer`]: a private PostgreSQL server for tests, on a free
//! loopback port, in a temporary directory.
//!
//! It runs Debian's server binaries (`/usr/lib/postgresql/<version>/bin`,
//! the newest version found, or the directory named by [`BIN_VAR`]); when
//! they are missing, starting a server fails the test with a message saying
//! `apt-get install postgresql`. It never uses a server that happens to be
//! running (nor port 5432). When the tests run as root, the server runs as
//! the `postgres` user (initdb refuses root).
//!
//! [`freeze`](PostgresServer::freeze) stops the postmaster and every
//! process it started (each of them leads a process group of its own, so
//! signalling the postmaster's group alone would miss them). A small reaper
//! process kills the server and removes its directory when the test process
//! ends, however it ends, so a server shared through a `static`
//! ([`PostgresServer::shared`]) never outlives its tests.
//!
//! A freshly initialised cluster is kept as a template in the temporary
//! directory (`tollgate-postgres-template-<version>-<uid>`), made once per
//! machine, and copied for each server: a copy takes a fraction of `initdb`.
//!
//! ```no_run
//! use tollgate_test_support::postgres_server::PostgresServer;
//! let mut server = PostgresServer::start();
//! let url = server.url(); // postgres://postgres@127.0.0.1:<port>/postgres
//! server.stop_immediate(); // as a crash would; the data directory is kept
//! server.restart(); // the same port, directory and options
//! # let _ = url;
//! ```
//!
//! With [`PostgresServerOptions::tls`] the server serves TLS with a
//! certificate made for it, and refuses plain TCP connections:
//!
//! ```no_run
//! use tollgate_test_support::postgres_server::{PostgresServer, PostgresServerOptions};
//! let server = PostgresServer::start_with(PostgresServerOptions::default().tls(true));
//! let ca = server.ca_file().unwrap();
//! let url = format!("{}?sslmode=verify-full&sslrootcert={}", server.url(), ca.display());
//! let own = server.socket_url(); // plain, through the Unix socket
//! # let _ = (url, own);
//! ```

mod tls;

pub use tls::Certificates;

use std::fs;
use std::io::Write;
use std::net::{Ipv4Addr, TcpListener};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The environment variable naming a directory of PostgreSQL server
/// binaries (`initdb`, `postgres`, `pg_isready`) to use instead of Debian's.
pub const BIN_VAR: &str = "TOLLGATE_TEST_PG_BIN";

/// How long a server may take to accept connections after it is started.
const READY_TIMEOUT: Duration = Duration::from_secs(20);
/// How long an immediate stop may take before the group is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(10);

/// How a private server is configured.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct PostgresServerOptions {
    /// `fsync` (true by default): a committed transaction is on disk, so
    /// it survives an immediate stop or a crash.
    pub fsync: bool,
    /// `max_connections` (200 by default).
    pub max_connections: u32,
    /// More `-c name=value` settings, e.g. `["deadlock_timeout=100ms"]`.
    pub settings: Vec<String>,
    /// TLS only over TCP (false by default): `ssl = on` with a certificate
    /// for `localhost` and `127.0.0.1` signed by a CA made for the server
    /// ([`PostgresServer::ca_file`]), and a `pg_hba.conf` accepting TCP
    /// connections over TLS only (`hostssl`), so that the server refuses a
    /// plain one. The Unix socket stays plain
    /// ([`PostgresServer::socket_url`]). Every role logs in without a
    /// password, except [`SCRAM_ROLE`], which (once a test creates it)
    /// logs in with its password by SCRAM-SHA-256.
    pub tls: bool,
    /// More `pg_hba.conf` lines for a TLS-only server, read before its own
    /// (e.g. `hostnossl all app 127.0.0.1/32 password`, to let a role in
    /// over plain TCP too); none by default. Ignored without
    /// [`tls`](PostgresServerOptions::tls).
    pub hba: Vec<String>,
}

/// The role that a TLS-only server ([`PostgresServerOptions::tls`]) asks
/// for a password (SCRAM-SHA-256); the tests create it.
pub const SCRAM_ROLE: &str = "tollgate_scram";

impl Default for PostgresServerOptions {
    fn default() -> PostgresServerOptions {
        PostgresServerOptions {
            fsync: true,
            max_connections: 200,
            settings: Vec::new(),
            tls: false,
            hba: Vec::new(),
        }
    }
}

impl PostgresServerOptions {
    /// Sets `max_connections`.
    pub fn max_connections(mut self, max: u32) -> PostgresServerOptions {
        self.max_connections = max;
        self
    }

    /// Sets `fsync`.
    pub fn fsync(mut self, on: bool) -> PostgresServerOptions {
        self.fsync = on;
        self
    }

    /// Adds a `name=value` server setting.
    pub fn setting(mut self, setting: impl Into<String>) -> PostgresServerOptions {
        self.settings.push(setting.into());
        self
    }

    /// Sets [`tls`](PostgresServerOptions::tls): TLS only over TCP.
    pub fn tls(mut self, on: bool) -> PostgresServerOptions {
        self.tls = on;
        self
    }

    /// Adds a line to a TLS-only server's `pg_hba.conf`
    /// ([`hba`](PostgresServerOptions::hba)), before its own and after
    /// the lines added before it.
    pub fn hba(mut self, line: impl Into<String>) -> PostgresServerOptions {
        self.hba.push(line.into());
        self
    }
}

/// A private PostgreSQL server for tests. Stopped (and its directory
/// removed) when dropped.
#[derive(Debug)]
pub struct PostgresServer {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
    options: PostgresServerOptions,
    owner: Option<(u32, u32)>,
    certificates: Option<Certificates>,
    child: Option<Child>,
    reaper: Option<Child>,
}

impl PostgresServer {
    /// Starts a private server with default options (fsync on).
    ///
    /// # Panics
    ///
    /// When the server binaries are missing (the message says how to
    /// install them) or the server does not start: a test that needs
    /// Postgres fails, it is never skipped.
    pub fn start() -> PostgresServer {
        PostgresServer::start_with(PostgresServerOptions::default())
    }

    /// Starts a private server with `options`.
    ///
    /// # Panics
    ///
    /// As [`start`](PostgresServer::start).
    pub fn start_with(options: PostgresServerOptions) -> PostgresServer {
        let bin = bin_dir();
        let owner = server_owner();
        let dir = tempfile::Builder::new()
            .prefix("tollgate-postgres-")
            .tempdir()
            .unwrap_or_else(|e| panic!("cannot create a directory for postgres: {e}"))
            .keep();
        if let Some((uid, gid)) = owner {
            chown(&dir, uid, gid);
        }
        let certificates = options.tls.then(|| tls_files(&dir, owner, &options.hba));
        let mut server = PostgresServer {
            reaper: Some(reaper(&dir)),
            bin,
            dir,
            port: 0,
            options,
            owner,
            certificates,
            child: None,
        };
        server.copy_template();
        let mut last_error = String::new();
        // A free port can be taken by someone else before the server binds it.
        for _ in 0..5 {
            server.port = free_port();
            match server.launch() {
                Ok(()) => return server,
                Err(error) => last_error = error,
            }
        }
        panic!("postgres did not start: {last_error}");
    }

    /// One private server for the whole test binary, started on first use,
    /// for tests of behaviour rather than durability: `fsync` is off, so a
    /// commit does not wait for the disk (tests that stop the server start
    /// their own, with `fsync` on). Tests sharing it keep apart by unique
    /// keys, schemas or databases. It is stopped when the process ends.
    ///
    /// # Panics
    ///
    /// As [`start`](PostgresServer::start).
    pub fn shared() -> &'static PostgresServer {
        static SHARED: OnceLock<PostgresServer> = OnceLock::new();
        SHARED.get_or_init(|| {
            PostgresServer::start_with(PostgresServerOptions::default().fsync(false))
        })
    }

    /// The URL of the `postgres` database as the `postgres` superuser,
    /// `postgres://postgres@127.0.0.1:<port>/postgres`.
    pub fn url(&self) -> String {
        self.url_for("postgres")
    }

    /// The URL of `database` as the `postgres` superuser.
    pub fn url_for(&self, database: &str) -> String {
        format!("postgres://postgres@127.0.0.1:{}/{database}", self.port)
    }

    /// The URL of the `postgres` database as the `postgres` superuser
    /// through the server's Unix socket: never encrypted, and accepted by a
    /// TLS-only server too (for a test's own client).
    pub fn socket_url(&self) -> String {
        let dir: String = self
            .dir
            .to_string_lossy()
            .bytes()
            .map(|b| match b {
                b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => {
                    char::from(b).to_string()
                }
                _ => format!("%{b:02X}"),
            })
            .collect();
        format!("postgres://postgres@{dir}:{}/postgres", self.port)
    }

    /// The CA certificate (PEM) that signed a TLS-only server's certificate
    /// ([`PostgresServerOptions::tls`]), for `sslrootcert=`; `None` for a
    /// server without TLS.
    pub fn ca_file(&self) -> Option<&Path> {
        self.certificates.as_ref().map(|c| c.ca.as_path())
    }

    /// The certificates of a TLS-only server; `None` for a server without TLS.
    pub fn certificates(&self) -> Option<&Certificates> {
        self.certificates.as_ref()
    }

    /// The server's port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The server's directory: the data directory `data`, the socket and
    /// the log `postgres.log`.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The postmaster's process id, while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    /// The last lines of the server's log.
    pub fn log_tail(&self) -> String {
        log_tail(&self.dir)
    }

    /// Runs `sql` with `psql` on the `postgres` database and returns its
    /// unaligned output, e.g. `server.psql("CREATE DATABASE t1")`.
    ///
    /// # Panics
    ///
    /// When `psql` fails.
    pub fn psql(&self, sql: &str) -> String {
        // A TLS-only server is asked through its (plain) Unix socket.
        let host = if self.certificates.is_some() {
            self.dir.as_os_str().to_owned()
        } else {
            "127.0.0.1".into()
        };
        let out = Command::new(self.bin.join("psql"))
            .args(["-X", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(host)
            .args([
                "-p",
                &self.port.to_string(),
                "-U",
                "postgres",
                "-d",
                "postgres",
            ])
            .args(["-c", sql])
            .output()
            .unwrap_or_else(|e| panic!("cannot run psql: {e}"));
        assert!(
            out.status.success(),
            "psql -c {sql:?} failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).trim().to_owned()
    }

    /// Stops the server as a crash would (immediate shutdown, SIGQUIT to
    /// the postmaster: no checkpoint; the next start replays the log). The
    /// port and directory are kept for [`restart`](PostgresServer::restart).
    /// Does nothing if it is already stopped.
    pub fn stop_immediate(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let pid = child.id();
        let backends = children(pid);
        for backend in &backends {
            signal(*backend, "-CONT");
        }
        signal(pid, "-CONT");
        signal(pid, "-QUIT");
        let started = Instant::now();
        loop {
            match child.try_wait() {
                Ok(Some(_)) => break,
                Ok(None) if started.elapsed() < STOP_TIMEOUT => {
                    std::thread::sleep(Duration::from_millis(10));
                }
                _ => {
                    signal(pid, "-KILL");
                    let _ = child.wait();
                    break;
                }
            }
        }
        // Backends left behind by a postmaster that died first.
        for backend in backends {
            signal(backend, "-KILL");
        }
        self.tell_reaper(0);
    }

    /// Stops the server if it runs, then starts it again on the same port,
    /// in the same directory, with the same options; returns once it
    /// accepts connections.
    ///
    /// # Panics
    ///
    /// When the server does not start again.
    pub fn restart(&mut self) {
        self.stop_immediate();
        if let Err(error) = self.launch() {
            panic!("postgres did not restart on port {}: {error}", self.port);
        }
    }

    /// Suspends the postmaster and every process it started (SIGSTOP to
    /// the postmaster first, so that it starts no other, then to each of
    /// its children: every postmaster child is a process group of its
    /// own): connections stay open, nothing is answered. Resume with
    /// [`thaw`](PostgresServer::thaw).
    ///
    /// # Panics
    ///
    /// When the server is not running.
    pub fn freeze(&mut self) {
        let pid = self.running("freeze");
        signal(pid, "-STOP");
        for child in children(pid) {
            signal(child, "-STOP");
        }
    }

    /// Resumes a frozen server (SIGCONT to the postmaster's children, then
    /// to the postmaster).
    ///
    /// # Panics
    ///
    /// When the server is not running.
    pub fn thaw(&mut self) {
        let pid = self.running("thaw");
        for child in children(pid) {
            signal(child, "-CONT");
        }
        signal(pid, "-CONT");
    }

    fn running(&self, what: &str) -> u32 {
        match &self.child {
            Some(child) => child.id(),
            None => panic!("cannot {what} a stopped postgres"),
        }
    }

    fn data(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// Copies the machine's template cluster into this server's directory.
    fn copy_template(&self) {
        let template = template(&self.bin, self.owner);
        let status = Command::new("cp")
            .arg("-a")
            .arg(&template)
            .arg(self.data())
            .status()
            .unwrap_or_else(|e| panic!("cannot run cp: {e}"));
        assert!(
            status.success(),
            "cannot copy the template cluster: {status}"
        );
    }

    /// Starts `postgres` on `self.port` and waits until it accepts connections.
    fn launch(&mut self) -> Result<(), String> {
        let log = fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("postgres.log"))
            .map_err(|e| format!("cannot open the log: {e}"))?;
        let log_err = log.try_clone().map_err(|e| e.to_string())?;
        let o = &self.options;
        let mut command = Command::new(self.bin.join("postgres"));
        command
            .arg("-D")
            .arg(self.data())
            .args(["-p", &self.port.to_string()])
            .arg("-k")
            .arg(&self.dir)
            .args(["-c", "listen_addresses=127.0.0.1"])
            .args([
                "-c",
                &format!("fsync={}", if o.fsync { "on" } else { "off" }),
            ])
            .args(["-c", &format!("max_connections={}", o.max_connections)])
            .args(["-c", "shared_buffers=32MB", "-c", "logging_collector=off"]);
        if let Some(tls) = &self.certificates {
            command
                .args(["-c", "ssl=on"])
                .arg("-c")
                .arg(setting("ssl_cert_file", &tls.cert))
                .arg("-c")
                .arg(setting("ssl_key_file", &tls.key))
                .arg("-c")
                .arg(setting("ssl_ca_file", &tls.ca))
                .arg("-c")
                .arg(setting("hba_file", &self.dir.join("pg_hba_tls.conf")));
        }
        for setting in &o.settings {
            command.args(["-c", setting]);
        }
        command
            .current_dir(&self.dir)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .process_group(0);
        if let Some((uid, gid)) = self.owner {
            command.uid(uid).gid(gid);
        }
        let mut child = command
            .spawn()
            .map_err(|e| format!("cannot start postgres: {e}"))?;
        self.tell_reaper(child.id());
        let started = Instant::now();
        loop {
            if let Ok(Some(status)) = child.try_wait() {
                self.tell_reaper(0);
                return Err(format!(
                    "it exited ({status}); its log:\n{}",
                    self.log_tail()
                ));
            }
            if is_ready(&self.bin, self.port) {
                self.child = Some(child);
                return Ok(());
            }
            if started.elapsed() > READY_TIMEOUT {
                signal(child.id(), "-KILL");
                let _ = child.wait();
                self.tell_reaper(0);
                return Err(format!(
                    "it did not accept connections within {READY_TIMEOUT:?}; its log:\n{}",
                    self.log_tail()
                ));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Tells the reaper which postmaster to kill if the test process ends
    /// (0: none).
    fn tell_reaper(&mut self, group: u32) {
        if let Some(stdin) = self.reaper.as_mut().and_then(|r| r.stdin.as_mut()) {
            let _ = writeln!(stdin, "{group}");
            let _ = stdin.flush();
        }
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        // Thaws a frozen server first: a stopped process ignores SIGQUIT.
        self.stop_immediate();
        // Closing the pipe lets the reaper remove the directory.
        if let Some(mut reaper) = self.reaper.take() {
            drop(reaper.stdin.take());
            let _ = reaper.wait();
        }
    }
}

/// `name=path` for `-c`.
fn setting(name: &str, path: &Path) -> std::ffi::OsString {
    let mut setting = std::ffi::OsString::from(format!("{name}="));
    setting.push(path);
    setting
}

/// Makes a TLS-only server's certificates (in `dir/tls`) and its
/// `pg_hba.conf` (`dir/pg_hba_tls.conf`): plain on the Unix socket, TLS
/// only over TCP, after the `extra` lines; the key is the server user's,
/// readable by it alone (the server refuses it otherwise).
fn tls_files(dir: &Path, owner: Option<(u32, u32)>, extra: &[String]) -> Certificates {
    let certificates = Certificates::make(&dir.join("tls"), &["localhost", "127.0.0.1"]);
    let hba = dir.join("pg_hba_tls.conf");
    let mut rules: String = extra.iter().map(|line| format!("{line}\n")).collect();
    rules += &format!(
        "local all all trust\n\
         hostssl all {SCRAM_ROLE} 127.0.0.1/32 scram-sha-256\n\
         hostssl all {SCRAM_ROLE} ::1/128 scram-sha-256\n\
         hostssl all all 127.0.0.1/32 trust\n\
         hostssl all all ::1/128 trust\n"
    );
    fs::write(&hba, rules).unwrap_or_else(|e| panic!("cannot write {}: {e}", hba.display()));
    let private = fs::Permissions::from_mode(0o600);
    fs::set_permissions(&certificates.key, private)
        .unwrap_or_else(|e| panic!("cannot protect the server's key: {e}"));
    if let Some((uid, gid)) = owner {
        for path in [
            dir.join("tls"),
            certificates.ca.clone(),
            certificates.cert.clone(),
            certificates.key.clone(),
            hba,
        ] {
            chown(&path, uid, gid);
        }
    }
    certificates
}

/// The directory of the server binaries: [`BIN_VAR`], or the newest
/// `/usr/lib/postgresql/<version>/bin` holding `postgres` and `initdb`.
fn bin_dir() -> PathBuf {
    if let Some(dir) = std::env::var_os(BIN_VAR).filter(|d| !d.is_empty()) {
        return PathBuf::from(dir);
    }
    let mut versions: Vec<(u32, PathBuf)> = fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let version = entry.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = entry.path().join("bin");
            (bin.join("postgres").is_file() && bin.join("initdb").is_file())
                .then_some((version, bin))
        })
        .collect();
    versions.sort();
    match versions.pop() {
        Some((_, bin)) => bin,
        None => panic!(
            "PostgreSQL server binaries not found (no /usr/lib/postgresql/<version>/bin/postgres \
             and initdb); install them: apt-get install postgresql (or set {BIN_VAR} to a \
             directory holding postgres, initdb, pg_isready and psql)"
        ),
    }
}

/// The `postgres` user's uid and gid when this process is root (initdb and
/// postgres refuse to run as root); `None` otherwise.
fn server_owner() -> Option<(u32, u32)> {
    let id = |flag: &str, user: &str| -> Option<u32> {
        let out = Command::new("id").args([flag, user]).output().ok()?;
        String::from_utf8_lossy(&out.stdout).trim().parse().ok()
    };
    let me = Command::new("id").arg("-u").output().ok().and_then(|out| {
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse::<u32>()
            .ok()
    });
    if me != Some(0) {
        return None;
    }
    match (id("-u", "postgres"), id("-g", "postgres")) {
        (Some(uid), Some(gid)) => Some((uid, gid)),
        _ => panic!(
            "running as root, and there is no `postgres` user to run the server as \
             (initdb refuses root); install the server package: apt-get install postgresql"
        ),
    }
}

fn chown(path: &Path, uid: u32, gid: u32) {
    std::os::unix::fs::chown(path, Some(uid), Some(gid))
        .unwrap_or_else(|e| panic!("cannot give {} to the postgres user: {e}", path.display()));
}

/// The machine's template cluster for `bin`, made by `initdb` on first use.
fn template(bin: &Path, owner: Option<(u32, u32)>) -> PathBuf {
    static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();
    TEMPLATE
        .get_or_init(|| {
            let version = bin
                .parent()
                .and_then(Path::file_name)
                .map_or_else(|| "x".into(), |v| v.to_string_lossy().into_owned());
            let uid = owner.map_or_else(|| "self".to_owned(), |(uid, _)| uid.to_string());
            let path =
                std::env::temp_dir().join(format!("tollgate-postgres-template-{version}-{uid}"));
            if path.join("PG_VERSION").is_file() {
                return path;
            }
            let scratch = tempfile::Builder::new()
                .prefix("tollgate-postgres-initdb-")
                .tempdir()
                .unwrap_or_else(|e| panic!("cannot create a directory for initdb: {e}"));
            if let Some((uid, gid)) = owner {
                chown(scratch.path(), uid, gid);
            }
            let data = scratch.path().join("data");
            let mut command = Command::new(bin.join("initdb"));
            command
                .arg("-D")
                .arg(&data)
                .args(["-A", "trust", "-U", "postgres", "-E", "UTF8", "--locale=C"])
                .args(["--no-sync", "--no-instructions"]);
            if let Some((uid, gid)) = owner {
                command.uid(uid).gid(gid);
            }
            let out = command
                .output()
                .unwrap_or_else(|e| panic!("cannot run initdb: {e}"));
            assert!(
                out.status.success(),
                "initdb failed: {}{}",
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            );
            // Another process may have made it meanwhile: either copy is good.
            if fs::rename(&data, &path).is_err() && !path.join("PG_VERSION").is_file() {
                panic!("cannot keep the template cluster at {}", path.display());
            }
            path
        })
        .clone()
}

/// A process that kills the last postmaster written to its stdin (0:
/// none) and its children, and removes `dir`, once its stdin closes: when
/// the server is dropped, or when the test process ends in any way.
fn reaper(dir: &Path) -> Child {
    let script = r#"pid=0
while read -r next; do pid=$next; done
if [ "$pid" -gt 0 ] 2>/dev/null; then
    children=$(ps -o pid= --ppid "$pid")
    kill -KILL "$pid" 2>/dev/null
    for child in $children; do kill -CONT "$child"; kill -KILL "$child"; done 2>/dev/null
fi
rm -rf -- "$1""#;
    Command::new("sh")
        .args(["-c", script, "tollgate-postgres-reaper"])
        .arg(dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start sh: {e}"))
}

/// Whether a server on `port` accepts connections (`pg_isready`).
fn is_ready(bin: &Path, port: u16) -> bool {
    Command::new(bin.join("pg_isready"))
        .args(["-q", "-h", "127.0.0.1", "-p", &port.to_string(), "-t", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn signal(pid: u32, signal: &str) {
    let _ = Command::new("kill")
        .args([signal, &pid.to_string()])
        .stderr(Stdio::null())
        .status();
}

/// The processes whose parent is `pid`, from `/proc`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(entries) = fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .flatten()
        .filter_map(|entry| {
            let child: u32 = entry.file_name().to_str()?.parse().ok()?;
            let stat = fs::read_to_string(entry.path().join("stat")).ok()?;
            // `pid (comm) state ppid ...`; comm may hold spaces and parentheses.
            let after = &stat[stat.rfind(')')? + 1..];
            let parent: u32 = after.split_whitespace().nth(1)?.parse().ok()?;
            (parent == pid).then_some(child)
        })
        .collect()
}

/// A loopback port nothing listens on right now (never 5432).
fn free_port() -> u16 {
    loop {
        let port = TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
            .and_then(|listener| listener.local_addr())
            .map(|addr| addr.port())
            .unwrap_or_else(|e| panic!("cannot find a free loopback port: {e}"));
        if port != 5432 && port != 6379 {
            return port;
        }
    }
}

fn log_tail(dir: &Path) -> String {
    let log = fs::read_to_string(dir.join("postgres.log")).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
