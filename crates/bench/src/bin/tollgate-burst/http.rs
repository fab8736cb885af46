//! One HTTP/1.1 exchange per connection over plain TCP (`Connection:
//! close`): a connection can be opened first and the request sent later, so
//! that hundreds of requests leave at the same moment.

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
use tokio::net::TcpStream;

/// The longest wait for a whole answer.
pub(crate) const ANSWER_TIMEOUT: Duration = Duration::from_secs(30);

/// An answer: its status and body.
#[derive(Clone, Debug)]
pub(crate) struct Reply {
    pub(crate) status: u16,
    pub(crate) body: String,
}

impl Reply {
    /// The `limit` named by a 429 problem body (`"limit":"ask-site"`).
    pub(crate) fn limit(&self) -> Option<&str> {
        let (_, rest) = self.body.split_once("\"limit\":\"")?;
        rest.split_once('"').map(|(name, _)| name)
    }
}

/// The bytes of a request without a body; `visitor` goes in
/// `cf-connecting-ip`, which the demos believe from loopback peers.
pub(crate) fn request(
    method: &str,
    addr: SocketAddr,
    path: &str,
    visitor: Option<&str>,
) -> Vec<u8> {
    let mut text = format!("{method} {path} HTTP/1.1\r\nhost: {addr}\r\n");
    if let Some(visitor) = visitor {
        text.push_str(&format!("cf-connecting-ip: {visitor}\r\n"));
    }
    text.push_str("content-length: 0\r\nconnection: close\r\n\r\n");
    text.into_bytes()
}

/// Sends `request` on `stream` and reads the answer to its end, within
/// [`ANSWER_TIMEOUT`]; `None` when it fails, times out, or is no HTTP answer.
pub(crate) async fn exchange(mut stream: TcpStream, request: &[u8]) -> Option<Reply> {
    let io = async {
        stream.write_all(request).await.ok()?;
        let mut raw = Vec::new();
        stream.read_to_end(&mut raw).await.ok()?;
        parse(&raw)
    };
    tokio::time::timeout(ANSWER_TIMEOUT, io)
        .await
        .ok()
        .flatten()
}

/// Connects to `addr`, sends `request`, reads the answer: the answer (or
/// `None`) and the time it took, connecting included.
pub(crate) async fn call(addr: SocketAddr, request: &[u8]) -> (Option<Reply>, Duration) {
    let started = Instant::now();
    let reply = match TcpStream::connect(addr).await {
        Ok(stream) => exchange(stream, request).await,
        Err(_) => None,
    };
    (reply, started.elapsed())
}

/// `GET path` on `addr`.
pub(crate) async fn get(addr: SocketAddr, path: &str) -> Option<Reply> {
    call(addr, &request("GET", addr, path, None)).await.0
}

/// The status and the body (after the head) of a raw answer.
fn parse(raw: &[u8]) -> Option<Reply> {
    let text = String::from_utf8_lossy(raw);
    let (head, body) = text.split_once("\r\n\r\n")?;
    let status = head.strip_prefix("HTTP/1.1 ")?.get(..3)?.parse().ok()?;
    Some(Reply {
        status,
        body: body.to_owned(),
    })
}
