//! The redis-server process, when it runs on this machine, and this
//! process: their CPU time, so that a report shows whether both sides ask
//! the server and the client for the same work.

use std::path::PathBuf;

/// A process's `/proc` entry: a local redis-server's, or this one's.
pub(crate) struct Process {
    stat: PathBuf,
}

impl Process {
    /// The server behind `url`, by the `process_id` of `INFO server`, when
    /// its `/proc/PID/stat` can be read here (a server on another machine
    /// or in a container cannot).
    pub(crate) async fn find(url: &str) -> Option<Process> {
        let pid: u32 = info(url, "process_id").await?.parse().ok()?;
        let server = Process {
            stat: PathBuf::from(format!("/proc/{pid}/stat")),
        };
        // The same number may be another process here (a server in a
        // container or on another host): only a redis-server is read.
        let stat = std::fs::read_to_string(&server.stat).ok()?;
        let (_, name) = stat.split_once('(')?;
        let name = name.rsplit_once(')')?.0;
        (name.starts_with("redis-server") && server.cpu_ticks().is_some()).then_some(server)
    }

    /// User plus system CPU time so far, in clock ticks (10 ms: Linux
    /// reports `/proc` times in USER_HZ, which is 100).
    pub(crate) fn cpu_ticks(&self) -> Option<u64> {
        let stat = std::fs::read_to_string(&self.stat).ok()?;
        // Fields after the command name, which is in parentheses and may hold spaces.
        let fields: Vec<&str> = stat.rsplit_once(')')?.1.split_whitespace().collect();
        // utime and stime are fields 14 and 15 of the line, 12 and 13 after the name.
        let utime: u64 = fields.get(11)?.parse().ok()?;
        let stime: u64 = fields.get(12)?.parse().ok()?;
        Some(utime + stime)
    }
}

/// The field `name` of the server's `INFO server`.
pub(crate) async fn info(url: &str, name: &str) -> Option<String> {
    let client = redis::Client::open(url).ok()?;
    let mut connection = client.get_multiplexed_async_connection().await.ok()?;
    let info: String = redis::cmd("INFO")
        .arg("server")
        .query_async(&mut connection)
        .await
        .ok()?;
    tollgate_test_support::redis_info::field(&info, name).map(str::to_owned)
}

/// A process's CPU ticks since `before` (from [`Process::cpu_ticks`]).
pub(crate) fn since(process: Option<&Process>, before: Option<Option<u64>>) -> Option<u64> {
    let now = process?.cpu_ticks()?;
    Some(now.saturating_sub(before.flatten()?))
}

/// This process: the client side of every check, whose CPU time a round
/// reads as it reads the server's.
pub(crate) fn client() -> Process {
    Process {
        stat: PathBuf::from("/proc/self/stat"),
    }
}
