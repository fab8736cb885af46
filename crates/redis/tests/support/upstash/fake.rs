//! [`FakeServer`]: a tiny HTTP/1.1 server answering from a list of canned
//! responses, recording every request.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// One canned answer.
#[derive(Clone, Debug)]
pub enum Canned {
    /// A complete response: status and body.
    Json(u16, String),
    /// These exact bytes, then the connection closes (to cut a body short).
    Raw(Vec<u8>),
}

/// A request the fake received.
#[derive(Clone, Debug)]
pub struct Request {
    pub path: String,
    pub authorization: Option<String>,
    pub body: serde_json::Value,
}

#[derive(Default)]
struct State {
    answers: VecDeque<Canned>,
    requests: Vec<Request>,
}

/// The fake server; answers HTTP 500 once its canned answers run out.
pub struct FakeServer {
    port: u16,
    state: Arc<Mutex<State>>,
    accept: JoinHandle<()>,
}

impl FakeServer {
    pub async fn start(answers: Vec<Canned>) -> FakeServer {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        let state = Arc::new(Mutex::new(State {
            answers: answers.into(),
            requests: Vec::new(),
        }));
        let shared = Arc::clone(&state);
        let accept = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                tokio::spawn(serve(stream, Arc::clone(&shared)));
            }
        });
        FakeServer {
            port,
            state,
            accept,
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Adds answers to the list.
    pub fn answer(&self, answers: impl IntoIterator<Item = Canned>) {
        self.state.lock().unwrap().answers.extend(answers);
    }

    /// The requests received so far.
    pub fn requests(&self) -> Vec<Request> {
        self.state.lock().unwrap().requests.clone()
    }
}

impl Drop for FakeServer {
    fn drop(&mut self) {
        self.accept.abort();
    }
}

fn reason(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        401 => "Unauthorized",
        _ => "Other",
    }
}

async fn serve(mut stream: TcpStream, state: Arc<Mutex<State>>) {
    let mut buf = Vec::new();
    loop {
        // Headers.
        let end = loop {
            if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            let mut chunk = [0_u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        };
        let head = String::from_utf8_lossy(&buf[..end]).into_owned();
        let mut lines = head.split("\r\n");
        let path = lines
            .next()
            .and_then(|line| line.split(' ').nth(1))
            .unwrap_or("")
            .to_owned();
        let mut length = 0;
        let mut authorization = None;
        for line in lines {
            if let Some((name, value)) = line.split_once(':') {
                match name.trim().to_ascii_lowercase().as_str() {
                    "content-length" => length = value.trim().parse().unwrap(),
                    "authorization" => authorization = Some(value.trim().to_owned()),
                    _ => {}
                }
            }
        }
        while buf.len() < end + length {
            let mut chunk = [0_u8; 4096];
            match stream.read(&mut chunk).await {
                Ok(0) | Err(_) => return,
                Ok(n) => buf.extend_from_slice(&chunk[..n]),
            }
        }
        let body = serde_json::from_slice(&buf[end..end + length]).unwrap();
        buf.drain(..end + length);
        let answer = {
            let mut state = state.lock().unwrap();
            state.requests.push(Request {
                path,
                authorization,
                body,
            });
            state
                .answers
                .pop_front()
                .unwrap_or(Canned::Json(500, r#"{"error":"no more answers"}"#.into()))
        };
        match answer {
            Canned::Json(status, body) => {
                let response = format!(
                    "HTTP/1.1 {status} {}\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
                    reason(status),
                    body.len()
                );
                if stream.write_all(response.as_bytes()).await.is_err() {
                    return;
                }
            }
            Canned::Raw(bytes) => {
                let _ = stream.write_all(&bytes).await;
                let _ = stream.shutdown().await;
                return;
            }
        }
    }
}
