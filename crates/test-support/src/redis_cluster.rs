//! [`RedisCluster`]: a private Redis Cluster for tests, 3 primaries and 3
//! replicas on free loopback ports.
//!
//! Each node is a [`RedisServer`] started with `--cluster-enabled yes`,
//! `--cluster-config-file nodes-<port>.conf`, `--cluster-node-timeout 1000`
//! (so a killed primary's replica takes over in about two seconds),
//! `--appendonly no --save ''`, bound to 127.0.0.1 in its own temporary
//! directory, and used only once the process answering on its port is
//! proved to be the child started for it (see
//! [`redis_server`](crate::redis_server)). A node also needs its cluster
//! bus port, its port + 10000, so ports are picked below 55536 with both
//! free. Then `redis-cli --cluster create … --cluster-replicas 1
//! --cluster-yes` joins them, and [`start`](RedisCluster::start) returns
//! once every node reports `cluster_state:ok` with all 16384 slots served,
//! knows all six nodes, and every replica is in sync with its primary.
//!
//! It never uses an existing server or cluster, and it FAILS (panics, saying
//! why) when `redis-server` or `redis-cli` is missing: a test that needs a
//! cluster is never skipped. Nodes are killed by process id when the
//! cluster is dropped; a watchdog process also kills them (and removes
//! their directories) once the test process has exited, which is what ends
//! the [`shared`](RedisCluster::shared) cluster of a test binary.
//!
//! ```no_run
//! use tollgate_test_support::redis_cluster::RedisCluster;
//! let cluster = RedisCluster::shared(); // one per test binary
//! let url = cluster.url(); // redis-cluster://127.0.0.1:<p1>,…
//! # let _ = url;
//! ```

use std::collections::BTreeSet;
use std::net::{Ipv4Addr, TcpListener};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use crate::redis_server::{RedisServer, RedisServerOptions};

/// Primaries of a test cluster.
pub const PRIMARIES: usize = 3;

/// Nodes of a test cluster: each primary has one replica.
pub const NODES: usize = 2 * PRIMARIES;

/// Hash slots of a Redis Cluster.
pub const SLOTS: u16 = 16384;

/// `--cluster-node-timeout` of every node, in ms.
pub const NODE_TIMEOUT_MS: u64 = 1000;

/// Keys per `MIGRATE` in [`RedisCluster::move_slot`]: `redis-cli
/// --cluster reshard`'s default `--cluster-pipeline`.
pub const MIGRATE_BATCH: usize = 10;

/// How long the cluster may take to be formed, or to heal after a failover.
const HEALTHY_TIMEOUT: Duration = Duration::from_secs(30);

/// One node of a cluster, as `CLUSTER NODES` describes it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Node {
    /// Its node id.
    pub id: String,
    /// Its port on 127.0.0.1.
    pub port: u16,
    /// Whether it is a primary (`master`), else a replica.
    pub primary: bool,
    /// Whether other nodes flag it as failed (`fail` or `fail?`).
    pub failed: bool,
    /// The id of its primary, for a replica.
    pub primary_id: Option<String>,
    /// The slot ranges it serves, inclusive (a primary's).
    pub slots: Vec<(u16, u16)>,
}

/// A private Redis Cluster of [`NODES`] nodes. Killed nodes stay killed.
#[derive(Debug)]
pub struct RedisCluster {
    servers: Vec<RedisServer>,
    watchdog: Option<Child>,
}

impl RedisCluster {
    /// Starts a cluster of 3 primaries and 3 replicas and waits until it
    /// serves every slot.
    ///
    /// # Panics
    ///
    /// When `redis-server` or `redis-cli` is not on `PATH`, or the cluster
    /// does not form: a test that needs a cluster fails, never skips.
    pub fn start() -> RedisCluster {
        require_redis_cli();
        let mut servers = Vec::with_capacity(NODES);
        let mut taken = BTreeSet::new();
        let mut last_error = String::new();
        let mut attempts = 0;
        while servers.len() < NODES {
            attempts += 1;
            assert!(
                attempts <= 10 * NODES,
                "cannot start {NODES} cluster nodes: {last_error}"
            );
            let port = free_pair(&taken);
            taken.insert(port);
            let options = RedisServerOptions::default().args([
                "--cluster-enabled".to_owned(),
                "yes".to_owned(),
                "--cluster-config-file".to_owned(),
                format!("nodes-{port}.conf"),
                "--cluster-node-timeout".to_owned(),
                NODE_TIMEOUT_MS.to_string(),
            ]);
            match RedisServer::start_on(port, options) {
                Ok(server) => servers.push(server),
                Err(error) => last_error = error,
            }
        }
        let mut cluster = RedisCluster {
            servers,
            watchdog: None,
        };
        cluster.watchdog = Some(cluster.spawn_watchdog());
        let mut create = vec!["--cluster".to_owned(), "create".to_owned()];
        create.extend(cluster.ports().iter().map(|p| format!("127.0.0.1:{p}")));
        create.extend(["--cluster-replicas", "1", "--cluster-yes"].map(str::to_owned));
        let args: Vec<&str> = create.iter().map(String::as_str).collect();
        let output = redis_cli(&args);
        assert!(
            output
                .as_ref()
                .is_ok_and(|text| text.contains("All 16384 slots covered")),
            "redis-cli --cluster create failed: {output:?}"
        );
        cluster.wait_healthy();
        cluster
    }

    /// The cluster shared by every test of this test binary, started on
    /// first use. Each test must use keys of its own; tests that kill nodes
    /// or move slots start their own with [`start`](RedisCluster::start).
    ///
    /// # Panics
    ///
    /// As [`start`](RedisCluster::start).
    pub fn shared() -> &'static RedisCluster {
        static SHARED: OnceLock<RedisCluster> = OnceLock::new();
        SHARED.get_or_init(RedisCluster::start)
    }

    /// `redis-cluster://127.0.0.1:<port>,…` with every node as a seed.
    pub fn url(&self) -> String {
        let seeds: Vec<String> = self
            .ports()
            .iter()
            .map(|port| format!("127.0.0.1:{port}"))
            .collect();
        format!("redis-cluster://{}", seeds.join(","))
    }

    /// `redis://127.0.0.1:<port>` of every node, for a raw cluster client.
    pub fn seeds(&self) -> Vec<String> {
        self.ports()
            .iter()
            .map(|port| format!("redis://127.0.0.1:{port}"))
            .collect()
    }

    /// The ports of every node started, killed ones included.
    pub fn ports(&self) -> Vec<u16> {
        self.servers.iter().map(RedisServer::port).collect()
    }

    /// The process ids of the nodes still running.
    pub fn pids(&self) -> Vec<u32> {
        self.servers.iter().filter_map(RedisServer::pid).collect()
    }

    /// The process id of the node on `port`, while it runs.
    pub fn pid(&self, port: u16) -> Option<u32> {
        self.server(port).and_then(RedisServer::pid)
    }

    /// The ports of the nodes still running.
    pub fn live_ports(&self) -> Vec<u16> {
        self.servers
            .iter()
            .filter(|s| s.pid().is_some())
            .map(RedisServer::port)
            .collect()
    }

    /// Kills the node on `port` (SIGKILL, as a crash would).
    ///
    /// # Panics
    ///
    /// When no node of this cluster has that port.
    pub fn kill(&mut self, port: u16) {
        let server = self
            .servers
            .iter_mut()
            .find(|s| s.port() == port)
            .unwrap_or_else(|| panic!("no cluster node on port {port}"));
        server.stop();
    }

    /// The nodes as a running node sees them (`CLUSTER NODES`).
    ///
    /// # Panics
    ///
    /// When no running node answers.
    pub fn nodes(&self) -> Vec<Node> {
        let mut last_error = String::new();
        for port in self.live_ports() {
            match self.cli(port, &["CLUSTER", "NODES"]) {
                Ok(text) => return parse_nodes(&text),
                Err(error) => last_error = error,
            }
        }
        panic!("no cluster node answers CLUSTER NODES: {last_error}");
    }

    /// The port of the primary that serves `slot` now.
    ///
    /// # Panics
    ///
    /// When no running primary serves it.
    pub fn primary_of(&self, slot: u16) -> u16 {
        self.nodes()
            .into_iter()
            .find(|n| {
                n.primary && !n.failed && n.slots.iter().any(|&(a, b)| a <= slot && slot <= b)
            })
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("no primary serves slot {slot}"))
    }

    /// The port of the replica of the primary on `port`.
    ///
    /// # Panics
    ///
    /// When it has none.
    pub fn replica_of(&self, port: u16) -> u16 {
        let nodes = self.nodes();
        let id = nodes
            .iter()
            .find(|n| n.port == port)
            .map(|n| n.id.clone())
            .unwrap_or_else(|| panic!("no node on port {port}"));
        nodes
            .iter()
            .find(|n| n.primary_id.as_deref() == Some(id.as_str()))
            .map(|n| n.port)
            .unwrap_or_else(|| panic!("the primary on port {port} has no replica"))
    }

    /// The node id of the node on `port`.
    ///
    /// # Panics
    ///
    /// When it does not answer.
    pub fn node_id(&self, port: u16) -> String {
        self.cli(port, &["CLUSTER", "MYID"])
            .map(|id| id.trim().to_owned())
            .unwrap_or_else(|e| panic!("CLUSTER MYID on port {port}: {e}"))
    }

    /// Runs `redis-cli -h 127.0.0.1 -p <port> <args>`; its output, or why it failed.
    pub fn cli(&self, port: u16, args: &[&str]) -> Result<String, String> {
        let port = port.to_string();
        let mut all = vec!["-h", "127.0.0.1", "-p", port.as_str()];
        all.extend_from_slice(args);
        redis_cli(&all)
    }

    /// Moves `slot` to the primary on `to` the way `redis-cli --cluster
    /// reshard` does: `IMPORTING` on the target, `MIGRATING` on the source,
    /// then `MIGRATE … KEYS` of [`MIGRATE_BATCH`] keys at a time (its
    /// default `--cluster-pipeline`) with `pause` between batches (so that
    /// calls run while the slot is half moved and see `ASK`, or `TRYAGAIN`
    /// for a multi-key call whose keys are split), then `SETSLOT … NODE` on
    /// every primary. Returns the keys moved.
    ///
    /// # Panics
    ///
    /// When a step fails.
    pub fn move_slot(&self, slot: u16, to: u16, pause: Duration) -> usize {
        let from = self.primary_of(slot);
        assert_ne!(from, to, "slot {slot} is already on port {to}");
        let (from_id, to_id) = (self.node_id(from), self.node_id(to));
        let slot_text = slot.to_string();
        let batch_text = MIGRATE_BATCH.to_string();
        let step = |port: u16, args: &[&str]| {
            let out = self.cli(port, args);
            assert!(
                out.as_ref()
                    .is_ok_and(|o| !o.starts_with("ERR") && !o.contains("(error)")),
                "{args:?} on port {port}: {out:?}"
            );
            out.unwrap_or_default()
        };
        step(
            to,
            &["CLUSTER", "SETSLOT", &slot_text, "IMPORTING", &from_id],
        );
        step(
            from,
            &["CLUSTER", "SETSLOT", &slot_text, "MIGRATING", &to_id],
        );
        let to_text = to.to_string();
        let mut moved = 0;
        loop {
            let listed = step(from, &["CLUSTER", "GETKEYSINSLOT", &slot_text, &batch_text]);
            let keys: Vec<&str> = listed
                .lines()
                .map(str::trim)
                .filter(|k| !k.is_empty())
                .collect();
            if keys.is_empty() {
                break;
            }
            let mut migrate = vec!["MIGRATE", "127.0.0.1", &to_text, "", "0", "5000", "KEYS"];
            migrate.extend(&keys);
            step(from, &migrate);
            moved += keys.len();
            std::thread::sleep(pause);
        }
        for port in std::iter::once(to).chain(std::iter::once(from)).chain(
            self.primaries()
                .into_iter()
                .filter(|&p| p != to && p != from),
        ) {
            step(port, &["CLUSTER", "SETSLOT", &slot_text, "NODE", &to_id]);
        }
        moved
    }

    /// The ports of the running primaries.
    pub fn primaries(&self) -> Vec<u16> {
        let live = self.live_ports();
        self.nodes()
            .into_iter()
            .filter(|n| n.primary && !n.failed && live.contains(&n.port))
            .map(|n| n.port)
            .collect()
    }

    /// Waits until every running node reports `cluster_state:ok` with all
    /// slots served and every running replica is in sync with its primary.
    ///
    /// # Panics
    ///
    /// When that takes more than 30 s.
    pub fn wait_healthy(&self) {
        let started = Instant::now();
        loop {
            match self.health() {
                Ok(()) => return,
                Err(why) if started.elapsed() > HEALTHY_TIMEOUT => {
                    panic!("the cluster is not healthy after {HEALTHY_TIMEOUT:?}: {why}")
                }
                Err(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    fn health(&self) -> Result<(), String> {
        for port in self.live_ports() {
            let info = self.cli(port, &["CLUSTER", "INFO"])?;
            for want in ["cluster_state:ok", "cluster_slots_ok:16384"] {
                if !info.lines().any(|l| l.trim() == want) {
                    return Err(format!("port {port}: no {want}"));
                }
            }
            let replication = self.cli(port, &["INFO", "replication"])?;
            if replication.contains("role:slave") && !replication.contains("master_link_status:up")
            {
                return Err(format!("port {port}: replica not in sync"));
            }
        }
        let nodes = self.nodes();
        let live = self.live_ports();
        let serving: u32 = nodes
            .iter()
            .filter(|n| n.primary && !n.failed && live.contains(&n.port))
            .flat_map(|n| n.slots.iter())
            .map(|&(a, b)| u32::from(b - a) + 1)
            .sum();
        if serving != u32::from(SLOTS) {
            return Err(format!("running primaries serve {serving} slots"));
        }
        Ok(())
    }

    fn server(&self, port: u16) -> Option<&RedisServer> {
        self.servers.iter().find(|s| s.port() == port)
    }

    /// A shell that waits for this process to exit, then kills the nodes
    /// and removes their directories.
    fn spawn_watchdog(&self) -> Child {
        let pids: Vec<String> = self.pids().iter().map(u32::to_string).collect();
        let dirs: Vec<String> = self
            .servers
            .iter()
            .filter_map(|s| s.dir().map(|d| format!("'{}'", d.display())))
            .collect();
        let script = format!(
            "while kill -0 {parent} 2>/dev/null; do sleep 1; done; kill -9 {pids} 2>/dev/null; rm -rf {dirs}",
            parent = std::process::id(),
            pids = pids.join(" "),
            dirs = dirs.join(" "),
        );
        Command::new("sh")
            .args(["-c", &script])
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot start the cluster's watchdog: {e}"))
    }
}

impl Drop for RedisCluster {
    fn drop(&mut self) {
        // The servers kill their processes when dropped; the watchdog too.
        if let Some(mut watchdog) = self.watchdog.take() {
            let _ = watchdog.kill();
            let _ = watchdog.wait();
        }
    }
}

/// Fails the test when `redis-cli` cannot be run.
fn require_redis_cli() {
    match Command::new("redis-cli").arg("--version").output() {
        Ok(out) if out.status.success() => {}
        Ok(out) => panic!("redis-cli --version failed: {}", out.status),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
            "redis-cli not found on PATH; a Redis Cluster test needs redis-server and \
             redis-cli (apt-get install redis-server)"
        ),
        Err(e) => panic!("cannot run redis-cli: {e}"),
    }
}

/// Runs `redis-cli <args>`: its standard output, or why it failed.
fn redis_cli(args: &[&str]) -> Result<String, String> {
    let out = Command::new("redis-cli")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("cannot run redis-cli: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    if out.status.success() {
        Ok(text)
    } else {
        Err(format!(
            "redis-cli {args:?} failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        ))
    }
}

/// A port below 55536 that is free on loopback, with its cluster bus port
/// (+10000) free too, and not in `taken`. Only a guess: the node started
/// on it proves it is the one answering.
fn free_pair(taken: &BTreeSet<u16>) -> u16 {
    let seed = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.subsec_nanos())
        ^ std::process::id().rotate_left(16);
    let span: u16 = 55_536 - 20_000;
    for i in 0..u32::from(span) {
        let offset = (seed.wrapping_add(i.wrapping_mul(7919))) % u32::from(span);
        let Ok(port) = u16::try_from(20_000 + offset) else {
            continue;
        };
        if port == 6379 || taken.contains(&port) || taken.contains(&(port + 10_000)) {
            continue;
        }
        let bus = port + 10_000;
        if bus == 16379 || taken.iter().any(|&t| t + 10_000 == port) {
            continue;
        }
        if TcpListener::bind((Ipv4Addr::LOCALHOST, port)).is_ok()
            && TcpListener::bind((Ipv4Addr::LOCALHOST, bus)).is_ok()
        {
            return port;
        }
    }
    panic!("no free loopback port pair for a cluster node");
}

/// Reads `CLUSTER NODES`.
fn parse_nodes(text: &str) -> Vec<Node> {
    text.lines()
        .filter_map(|line| {
            let fields: Vec<&str> = line.split_whitespace().collect();
            if fields.len() < 8 {
                return None;
            }
            let address = fields[1].split('@').next()?;
            let port = address.rsplit_once(':')?.1.parse().ok()?;
            let flags: Vec<&str> = fields[2].split(',').collect();
            let slots = fields[8..]
                .iter()
                .filter(|s| !s.starts_with('['))
                .filter_map(|s| match s.split_once('-') {
                    Some((a, b)) => Some((a.parse().ok()?, b.parse().ok()?)),
                    None => s.parse().ok().map(|n| (n, n)),
                })
                .collect();
            Some(Node {
                id: fields[0].to_owned(),
                port,
                primary: flags.contains(&"master"),
                failed: flags.contains(&"fail") || flags.contains(&"fail?"),
                primary_id: (fields[3] != "-").then(|| fields[3].to_owned()),
                slots,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_cluster_nodes() {
        let text = "\
07c3 127.0.0.1:30004@40004 slave e7d1 0 1426238317239 4 connected
e7d1 127.0.0.1:30001@40001,host myself,master - 0 0 1 connected 0-5460 6000 [5461->-292f]
292f 127.0.0.1:30002@40002 master,fail - 1426238316232 1426238313124 2 disconnected
";
        let nodes = parse_nodes(text);
        assert_eq!(nodes.len(), 3);
        assert_eq!(nodes[0].port, 30004);
        assert!(!nodes[0].primary);
        assert_eq!(nodes[0].primary_id.as_deref(), Some("e7d1"));
        assert!(nodes[1].primary && !nodes[1].failed);
        assert_eq!(nodes[1].slots, [(0, 5460), (6000, 6000)]);
        assert!(nodes[2].failed && nodes[2].slots.is_empty());
    }

    #[test]
    fn port_pairs_leave_room_for_the_bus() {
        let mut taken = BTreeSet::new();
        for _ in 0..3 {
            let port = free_pair(&taken);
            assert!((20_000..55_536).contains(&port));
            taken.insert(port);
        }
        assert_eq!(taken.len(), 3);
    }
}
