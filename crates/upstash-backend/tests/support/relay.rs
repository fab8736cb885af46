//! A loopback TCP relay in front of a server that counts HTTP requests:
//! each run of client bytes that follows a response (or opens a
//! connection) is one request, since HTTP/1.1 requests on a connection
//! take turns with their responses.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// A relay from a loopback port of its own to `127.0.0.1:<target>`.
pub struct Relay {
    port: u16,
    requests: Arc<AtomicU64>,
    accept: JoinHandle<()>,
}

impl Relay {
    /// Starts relaying to the server on `target`.
    pub async fn start(target: u16) -> Relay {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let requests = Arc::new(AtomicU64::new(0));
        let counted = Arc::clone(&requests);
        let accept = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let Ok(server) = TcpStream::connect(("127.0.0.1", target)).await else {
                    continue;
                };
                let awaiting = Arc::new(AtomicBool::new(false));
                let (client_read, client_write) = client.into_split();
                let (server_read, server_write) = server.into_split();
                tokio::spawn(pipe(
                    client_read,
                    server_write,
                    Arc::clone(&awaiting),
                    Some(Arc::clone(&counted)),
                ));
                tokio::spawn(pipe(server_read, client_write, awaiting, None));
            }
        });
        Relay {
            port,
            requests,
            accept,
        }
    }

    /// `http://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// HTTP requests relayed so far.
    pub fn requests(&self) -> u64 {
        self.requests.load(Ordering::SeqCst)
    }
}

impl Drop for Relay {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

/// Copies `from` to `to`; on the request side (`counted` given), counts a
/// request at the first bytes after a response.
async fn pipe(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    awaiting: Arc<AtomicBool>,
    counted: Option<Arc<AtomicU64>>,
) {
    let mut buf = vec![0_u8; 64 * 1024];
    loop {
        let n = match from.read(&mut buf).await {
            Ok(0) | Err(_) => return,
            Ok(n) => n,
        };
        match &counted {
            Some(requests) => {
                if !awaiting.swap(true, Ordering::SeqCst) {
                    requests.fetch_add(1, Ordering::SeqCst);
                }
            }
            None => awaiting.store(false, Ordering::SeqCst),
        }
        if to.write_all(&buf[..n]).await.is_err() {
            return;
        }
    }
}
