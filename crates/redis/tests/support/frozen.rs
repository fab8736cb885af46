//! [`Frozen`]: a listener that accepts connections and never answers (a
//! frozen server, a handshake that hangs), noting how long each client
//! held its connection open before closing it.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::AsyncReadExt;
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

/// A frozen server on a loopback port.
pub struct Frozen {
    port: u16,
    held: Arc<Mutex<Vec<Duration>>>,
    accept: JoinHandle<()>,
}

impl Frozen {
    /// Listens on `port` (0: a free one).
    pub async fn start(port: u16) -> Frozen {
        let listener = TcpListener::bind(("127.0.0.1", port)).await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let held = Arc::new(Mutex::new(Vec::new()));
        let noted = Arc::clone(&held);
        let accept = tokio::spawn(async move {
            // Dropped with this task when it is aborted: aborts every
            // connection's task, which closes its stream.
            let mut open = tokio::task::JoinSet::new();
            while let Ok((mut stream, _)) = listener.accept().await {
                let accepted = Instant::now();
                let noted = Arc::clone(&noted);
                // Reads (and ignores) whatever the client sends, until it closes.
                open.spawn(async move {
                    let mut buf = [0_u8; 1024];
                    while matches!(stream.read(&mut buf).await, Ok(n) if n > 0) {}
                    noted.lock().unwrap().push(accepted.elapsed());
                });
            }
        });
        Frozen { port, held, accept }
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// How long each connection the client closed so far had stayed open,
    /// in the order they were closed.
    pub fn held(&self) -> Vec<Duration> {
        self.held.lock().unwrap().clone()
    }

    /// Waits (in real time, up to `limit`) until the client has closed
    /// `n` connections; what [`held`](Frozen::held) says then.
    pub async fn closed(&self, n: usize, limit: Duration) -> Vec<Duration> {
        let until = Instant::now() + limit;
        while self.held().len() < n && Instant::now() < until {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        self.held()
    }

    /// Stops listening and drops every held connection.
    pub async fn stop(self) {
        self.accept.abort();
        let _ = self.accept.await;
    }
}
