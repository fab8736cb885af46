//! A loopback TCP relay in front of a real server, for faults on the wire:
//! it counts round trips (a Redis command, an HTTP/1.1 request, a Postgres
//! exchange: each run of client bytes that follows a reply, or opens a
//! connection, is one, since requests on a connection take turns with
//! their replies), holds replies back, loses the reply to a request the
//! server applied (the connection closes instead: "applied, reply lost"),
//! garbles a reply, and turns its open connections into black holes (a
//! dead host, a partition). Whatever the protocol: it reads bytes, not
//! commands.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A relay from a loopback port of its own to `127.0.0.1:<target>`.
pub struct Relay {
    port: u16,
    shared: Arc<Shared>,
    accept: JoinHandle<()>,
}

#[derive(Default)]
struct Shared {
    /// Requests sent after a reply (or first): round trips.
    turns: AtomicU64,
    /// Connections accepted so far.
    accepted: AtomicU64,
    /// Connections numbered below this forward nothing any more.
    silent_below: AtomicU64,
    /// How long each reply is held back, in ms.
    reply_delay_ms: AtomicU64,
    /// Whether the next reply closes its connection instead of arriving.
    break_next_reply: AtomicBool,
    /// Whether the next reply arrives with its first byte garbled.
    garble_next_reply: AtomicBool,
    /// Bytes whose request's reply is to be lost (once), if any.
    lose_reply_to: Mutex<Option<Vec<u8>>>,
    /// Replies lost so far.
    lost: AtomicU64,
}

impl Relay {
    /// Starts relaying to the server on `target`.
    ///
    /// # Panics
    ///
    /// When no loopback port can be bound.
    pub async fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0")
            .await
            .unwrap_or_else(|e| panic!("the relay cannot listen: {e}"));
        let port = listener
            .local_addr()
            .unwrap_or_else(|e| panic!("the relay has no address: {e}"))
            .port();
        let shared = Arc::new(Shared::default());
        let state = Arc::clone(&shared);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let number = state.accepted.fetch_add(1, Ordering::SeqCst);
                let awaiting = Arc::new(AtomicBool::new(false));
                let doomed = Arc::new(AtomicBool::new(false));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                let up = Pipe {
                    state: Arc::clone(&state),
                    number,
                    awaiting: Arc::clone(&awaiting),
                    doomed: Arc::clone(&doomed),
                    request: true,
                };
                let down = Pipe {
                    state: Arc::clone(&state),
                    number,
                    awaiting,
                    doomed,
                    request: false,
                };
                tokio::spawn(up.run(client_read, server_write));
                tokio::spawn(down.run(server_read, client_write));
            }
        });
        Relay {
            port,
            shared,
            accept,
        }
    }

    /// The relay's own port.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The URL to reach a Redis server through the relay.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    /// The URL to reach an HTTP server (a REST proxy) through the relay.
    pub fn http_url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Round trips so far: requests that followed a reply on their connection.
    pub fn turns(&self) -> u64 {
        self.shared.turns.load(Ordering::SeqCst)
    }

    /// Connections accepted so far.
    pub fn connections(&self) -> u64 {
        self.shared.accepted.load(Ordering::SeqCst)
    }

    /// Holds every reply back `delay` before forwarding it.
    pub fn delay_replies(&self, delay: Duration) {
        let ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX);
        self.shared.reply_delay_ms.store(ms, Ordering::SeqCst);
    }

    /// The next bytes the server sends, on whichever connection, are not
    /// forwarded: their connection is closed instead, after the server
    /// applied the request (with one request in flight, its reply).
    pub fn break_next_reply(&self) {
        self.shared.break_next_reply.store(true, Ordering::SeqCst);
    }

    /// The next bytes the server sends, on whichever connection, arrive
    /// with their first byte replaced by `X`, which no RESP reply starts
    /// with: with one request in flight, its reply corrupted on the wire
    /// (the server applied the request, the client cannot read the answer).
    pub fn garble_next_reply(&self) {
        self.shared.garble_next_reply.store(true, Ordering::SeqCst);
    }

    /// The reply to the next request holding `marker` (a key no other
    /// request carries) is lost: the request reaches the server, which
    /// applies it, and its connection is closed before the reply arrives.
    /// Once; [`lost`](Relay::lost) says whether it happened.
    pub fn lose_reply_to(&self, marker: &[u8]) {
        *lock(&self.shared.lose_reply_to) = Some(marker.to_vec());
    }

    /// Replies lost so far by [`lose_reply_to`](Relay::lose_reply_to).
    pub fn lost(&self) -> u64 {
        self.shared.lost.load(Ordering::SeqCst)
    }

    /// Every connection open now stops forwarding, without closing: what a
    /// client sees of a host that vanished. New connections work.
    pub fn silence_open_connections(&self) {
        let accepted = self.shared.accepted.load(Ordering::SeqCst);
        self.shared.silent_below.store(accepted, Ordering::SeqCst);
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

struct Pipe {
    state: Arc<Shared>,
    number: u64,
    /// Whether the last bytes on this connection were a request.
    awaiting: Arc<AtomicBool>,
    /// Whether the reply to the request on its way is to be lost.
    doomed: Arc<AtomicBool>,
    request: bool,
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The most bytes of one request kept to look for a marker in.
const KEPT: usize = 1 << 20;

impl Pipe {
    async fn run(self, mut from: OwnedReadHalf, mut to: OwnedWriteHalf) {
        let mut buf = vec![0_u8; 64 * 1024];
        // This request's bytes so far (the request side), for the marker.
        let mut turn = Vec::new();
        loop {
            let n = match from.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => n,
            };
            if self.number < self.state.silent_below.load(Ordering::SeqCst) {
                continue;
            }
            if self.request {
                if !self.awaiting.swap(true, Ordering::SeqCst) {
                    self.state.turns.fetch_add(1, Ordering::SeqCst);
                    turn.clear();
                }
                if turn.len() < KEPT {
                    turn.extend_from_slice(&buf[..n]);
                }
                let mut marker = lock(&self.state.lose_reply_to);
                let found = marker
                    .as_deref()
                    .is_some_and(|m| turn.windows(m.len().max(1)).any(|w| w == m));
                if found {
                    *marker = None;
                    self.doomed.store(true, Ordering::SeqCst);
                }
            } else {
                let doomed = self.doomed.load(Ordering::SeqCst);
                if doomed || self.state.break_next_reply.swap(false, Ordering::SeqCst) {
                    if doomed {
                        self.state.lost.fetch_add(1, Ordering::SeqCst);
                    }
                    // Dropping both halves closes the client's connection.
                    return;
                }
                if self.state.garble_next_reply.swap(false, Ordering::SeqCst) {
                    buf[0] = b'X';
                }
                let delay = self.state.reply_delay_ms.load(Ordering::SeqCst);
                if delay > 0 {
                    tokio::time::sleep(Duration::from_millis(delay)).await;
                }
                self.awaiting.store(false, Ordering::SeqCst);
            }
            if to.write_all(&buf[..n]).await.is_err() {
                return;
            }
        }
    }
}
