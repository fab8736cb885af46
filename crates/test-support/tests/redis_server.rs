//! A private server is only used once the process answering on its port is
//! proved to be the one started for the test.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::{Read, Write};
use std::net::TcpStream;

use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};

/// The `process_id` that `INFO server` reports on `port`.
fn pid_on(port: u16) -> u32 {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream.write_all(b"INFO server\r\n").unwrap();
    let mut text = String::new();
    let mut buf = [0_u8; 4096];
    while !text.contains("run_id:") || !text.contains("process_id:") || !text.ends_with("\r\n") {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "INFO ended early: {text}");
        text.push_str(&String::from_utf8_lossy(&buf[..n]));
    }
    text.lines()
        .find_map(|l| l.strip_prefix("process_id:"))
        .unwrap()
        .trim()
        .parse()
        .unwrap()
}

#[test]
fn a_port_answered_by_another_server_is_refused() {
    let theirs = RedisServer::start();
    theirs.require_private("start a second server next to");
    // Ours listens on its socket only (`--port 0`: no TCP), so the port it
    // was given is answered by the other server: what a test sees when it
    // loses the race for a free port and its server exits, or when its port
    // was taken between a stop and a restart.
    let options = RedisServerOptions::default().args(["--port", "0"]);
    let ours = RedisServer::start_on(theirs.port(), options);
    let error = ours.expect_err("a server answering with another pid was accepted");
    let pid = theirs.pid().unwrap();
    assert!(
        error.contains("another redis-server") && error.contains(&format!("pid {pid}")),
        "{error}"
    );
    assert_eq!(pid_on(theirs.port()), pid, "the other server is untouched");
}

#[test]
fn a_taken_port_is_refused_and_start_finds_another() {
    let theirs = RedisServer::start();
    theirs.require_private("start a second server next to");
    let error = RedisServer::start_on(theirs.port(), RedisServerOptions::default())
        .expect_err("a second server on a taken port was accepted");
    assert!(!error.is_empty());
    let ours = RedisServer::start();
    assert_ne!(ours.port(), theirs.port());
    assert_eq!(pid_on(ours.port()), ours.pid().unwrap());
}

#[test]
fn racing_servers_each_answer_on_their_own_port() {
    let servers: Vec<RedisServer> = std::thread::scope(|scope| {
        let starts: Vec<_> = (0..8).map(|_| scope.spawn(RedisServer::start)).collect();
        starts.into_iter().map(|s| s.join().unwrap()).collect()
    });
    for server in &servers {
        if server.is_private() {
            assert_eq!(pid_on(server.port()), server.pid().unwrap());
            assert!(server.socket().unwrap().exists());
        }
    }
}
