//! Slow clients cannot hold the demo: a half-sent request head is closed
//! after the header timeout, and connections past the cap wait to be accepted.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/ask_counts.rs"]
mod ask_counts;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use clap::Parser;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tollgate::axum::{Trust, VisitorSource};
use tollgate::memory::MemoryStore;
use tollgate::{Limiter, RuleSet};
use tollgate_demo::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, Limits, Options, app, serve_with,
};

use ask_counts::ask_counts;

/// Reads until the server closes the connection; what it sent.
async fn read_to_close(stream: &mut TcpStream) -> Vec<u8> {
    let mut seen = Vec::new();
    let mut buf = [0u8; 1024];
    loop {
        match stream.read(&mut buf).await {
            Ok(0) | Err(_) => return seen,
            Ok(n) => seen.extend_from_slice(&buf[..n]),
        }
    }
}

/// The demo served in-process on a free loopback port within `limits`.
struct Server {
    addr: SocketAddr,
    stop: oneshot::Sender<()>,
    task: JoinHandle<std::io::Result<()>>,
}

impl Server {
    async fn start(limits: Limits) -> Server {
        let store = MemoryStore::new();
        let router = app(
            Limiter::new(store.clone()),
            store,
            &RuleSet::defaults(),
            VisitorSource::new(Trust::Peer),
        )
        .unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = oneshot::channel::<()>();
        let task = tokio::spawn(serve_with(listener, router, limits, async {
            let _ = stopped.await;
        }));
        Server { addr, stop, task }
    }

    async fn stop(self) {
        let _ = self.stop.send(());
        self.task.await.unwrap().unwrap();
    }
}

const HALF_A_HEAD: &[u8] = b"POST /sites/docs/ask HTTP/1.1\r\nHost: x\r\n";

#[tokio::test]
async fn half_a_request_head_is_closed_after_the_header_timeout() {
    let server = Server::start(Limits {
        header_timeout: Duration::from_secs(1),
        ..Limits::default()
    })
    .await;
    let mut stream = TcpStream::connect(server.addr).await.unwrap();
    stream.write_all(HALF_A_HEAD).await.unwrap();
    let started = Instant::now();
    let closed = tokio::time::timeout(Duration::from_secs(5), read_to_close(&mut stream)).await;
    assert!(
        closed.is_ok(),
        "a half-sent head still held the connection after {:?}",
        started.elapsed()
    );
    // Not before the timeout: the bound is the timeout, not an instant close.
    assert!(
        started.elapsed() >= Duration::from_millis(900),
        "{:?}",
        started.elapsed()
    );
    server.stop().await;
}

#[tokio::test]
async fn the_default_header_timeout_is_at_most_ten_seconds() {
    assert!(DEFAULT_HEADER_TIMEOUT <= Duration::from_secs(10));
    assert!(DEFAULT_HEADER_TIMEOUT > Duration::ZERO);
    assert_eq!(Limits::default().header_timeout, DEFAULT_HEADER_TIMEOUT);
    assert_eq!(Limits::default().max_connections, DEFAULT_MAX_CONNECTIONS);
    let options = Options::try_parse_from(["tollgate-demo"]).unwrap();
    assert_eq!(options.limits(), Limits::default());
    let options = Options::try_parse_from([
        "tollgate-demo",
        "--header-timeout",
        "3",
        "--max-connections",
        "8",
    ])
    .unwrap();
    assert_eq!(
        options.limits(),
        Limits {
            header_timeout: Duration::from_secs(3),
            max_connections: 8,
        }
    );
    for bad in [["--header-timeout", "0"], ["--max-connections", "0"]] {
        assert!(
            Options::try_parse_from(["tollgate-demo"].iter().chain(&bad)).is_err(),
            "{bad:?}"
        );
    }
}

#[tokio::test]
async fn past_the_connection_cap_a_client_waits_and_is_then_served() {
    let server = Server::start(Limits {
        header_timeout: Duration::from_secs(30),
        max_connections: 1,
    })
    .await;
    // The one slot: a client that stops half-way through its head.
    let mut slow = TcpStream::connect(server.addr).await.unwrap();
    slow.write_all(HALF_A_HEAD).await.unwrap();

    let mut waiting = TcpStream::connect(server.addr).await.unwrap();
    waiting
        .write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut first = [0u8; 1];
    let early = tokio::time::timeout(Duration::from_millis(300), waiting.read(&mut first)).await;
    assert!(
        early.is_err(),
        "a second connection was served past the cap of 1"
    );

    // The slot frees when the slow client leaves; the waiting one is served.
    drop(slow);
    let reply = tokio::time::timeout(Duration::from_secs(5), read_to_close(&mut waiting))
        .await
        .unwrap();
    let reply = String::from_utf8_lossy(&reply);
    assert!(reply.starts_with("HTTP/1.1 200"), "{reply}");
    assert!(reply.ends_with("ok"), "{reply}");
    server.stop().await;
}

/// A client that sends a whole head and then withholds its body does not
/// hold its connection past the body timeout (the review's slot-holding
/// case); the tokens its admission reserved are given back, the call it
/// was admitted for stays spent (else withholding a body would hold a
/// site's token budget again and again for free).
#[tokio::test]
async fn a_withheld_ask_body_is_answered_408_within_the_body_timeout_and_its_tokens_refunded() {
    let memory = MemoryStore::new();
    let clock = tollgate::ManualClock::new(Duration::from_secs(20_619 * 86_400 + 43_200));
    let limiter = Limiter::builder(memory.clone())
        .clock(clock.clone())
        .build();
    let router = app(
        limiter,
        memory.clone(),
        &RuleSet::defaults(),
        VisitorSource::new(Trust::Peer),
    )
    .unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(tollgate_demo::serve(
        listener,
        router,
        std::future::pending(),
    ));
    let mut socket = TcpStream::connect(addr).await.unwrap();
    // The largest body an ask may declare: one question's cap.
    let head = format!(
        "POST /sites/docs/ask HTTP/1.1\r\nHost: x\r\nContent-Length: {}\r\n\r\n{{\"q",
        tollgate_demo::MAX_ASK_BODY
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    let started = Instant::now();
    let mut answer = vec![0; 4096];
    let read = tokio::time::timeout(Duration::from_secs(20), socket.read(&mut answer))
        .await
        .expect("the server still holds a withheld body after 20 s")
        .unwrap();
    let text = String::from_utf8_lossy(&answer[..read]);
    assert!(text.starts_with("HTTP/1.1 408"), "{text}");
    assert!(
        started.elapsed() >= tollgate_demo::ASK_BODY_TIMEOUT - Duration::from_secs(1),
        "{:?}",
        started.elapsed()
    );
    // Admitted (reserving 8,701 tokens and one call on each limit), then
    // the tokens given back; the four call counters keep the call.
    let reader = Limiter::builder(memory).clock(clock).build();
    assert_eq!(
        ask_counts(&reader, "docs", "127.0.0.1").await,
        [1, 1, 1, 1, 0],
        "the withheld ask kept its tokens, or got its call back"
    );
}
