//! An ask's body is read only after the limits admitted the call, within
//! the bound the token rule and one question's cap give; the project (and a
//! docs run's org) is checked before anything. Over real HTTP on loopback,
//! with raw sockets where the test must control what the client has sent.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/ask_counts.rs"]
mod ask_counts;
#[path = "support/calls.rs"]
mod calls;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tollgate::axum::{Trust, VisitorSource};
use tollgate::memory::MemoryStore;
use tollgate::observe::Op;
use tollgate::{Hooked, Limiter, ManualClock, RuleSet};
use tollgate_demo::{
    MAX_ASK_BODY, app, estimate_body_tokens, estimate_tokens, max_ask_body, serve,
};

use ask_counts::ask_counts;
use calls::Calls;

/// 2026-06-15T12:00:00Z: no window rolls over during a test.
const NOON: u64 = 20_619 * 86_400 + 43_200;

/// The visitor every request of these tests is: the loopback peer.
const VISITOR: &str = "127.0.0.1";

/// A guard against a hung server, never a timing assertion: every
/// expected answer comes long before it.
const HANG: Duration = Duration::from_secs(60);

/// The largest ask body with the shipped rules: one question's cap, 32 KiB,
/// well under the 797,967 bytes the 200,000 tokens a day alone would allow.
const BOUND: u64 = 32 * 1024;

/// The tokens an ask of [`BOUND`] bytes reserves before its body is read:
/// `ceil((32,768 - 15) / 4) + 512`, about 4% of the day's 200,000.
const BOUND_TOKENS: u64 = 8_701;

/// The demo over a memory store whose calls are recorded, with the default
/// rules, the peer as the visitor and a clock stopped at noon.
struct Demo {
    addr: SocketAddr,
    calls: Arc<Calls>,
    /// Reads the same counters as the demo, without being recorded.
    reader: Limiter,
}

impl Demo {
    async fn start() -> Demo {
        Demo::start_with(&RuleSet::defaults()).await
    }

    async fn start_with(rules: &RuleSet) -> Demo {
        let memory = MemoryStore::new();
        let calls = Arc::new(Calls::default());
        let store = Arc::new(Hooked::around(memory.clone(), calls.clone()));
        let clock = ManualClock::new(Duration::from_secs(NOON));
        let limiter = Limiter::builder(store.clone()).clock(clock.clone()).build();
        let router = app(limiter, store, rules, VisitorSource::new(Trust::Peer)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(serve(listener, router, std::future::pending()));
        let reader = Limiter::builder(memory).clock(clock).build();
        Demo {
            addr,
            calls,
            reader,
        }
    }

    /// What `project`'s five ask counters hold now, in the order `ask-burst`,
    /// `ask`, `ask-site`, `ask-all`, `ask-tokens`.
    async fn counts(&self, project: &str) -> [u64; 5] {
        ask_counts(&self.reader, project, VISITOR).await
    }

    /// How many docs runs `org` has spent today (`docs-run`).
    async fn runs(&self, org: &str) -> u64 {
        let limit = RuleSet::defaults()
            .get("docs-run")
            .unwrap()
            .limit(&[org])
            .unwrap();
        let usage = self.reader.remaining(&[limit]).await.unwrap();
        usage[0]
            .max()
            .checked_add_signed(-usage[0].remaining())
            .unwrap()
    }

    /// Sends `head` (a request head without its blank line) and `body`,
    /// then reads until the server closes the connection.
    async fn send(&self, head: &str, body: &[u8]) -> Answer {
        // One write: what the client sends is all in before the server
        // answers, so that closing leaves nothing unread (which would reset
        // the connection and could lose the answer).
        let mut request = format!("{head}\r\n\r\n").into_bytes();
        request.extend_from_slice(body);
        let mut stream = TcpStream::connect(self.addr).await.unwrap();
        stream.write_all(&request).await.unwrap();
        Answer::read(&mut stream).await
    }

    /// Asks on `project` with a JSON `body` (a whole, honest request).
    async fn ask(&self, project: &str, body: &str) -> Answer {
        let head = format!(
            "POST /sites/{project}/ask HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\
             Content-Type: application/json\r\nContent-Length: {}",
            body.len()
        );
        self.send(&head, body.as_bytes()).await
    }
}

/// A response, read to the connection's end.
struct Answer(String);

impl Answer {
    async fn read(stream: &mut TcpStream) -> Answer {
        let mut seen = Vec::new();
        let read = async {
            let mut buf = [0u8; 4096];
            loop {
                match stream.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => seen.extend_from_slice(&buf[..n]),
                }
            }
        };
        tokio::time::timeout(HANG, read)
            .await
            .expect("the server neither answered nor closed the connection");
        Answer(String::from_utf8_lossy(&seen).into_owned())
    }

    fn status(&self) -> u16 {
        self.0
            .strip_prefix("HTTP/1.1 ")
            .and_then(|rest| rest.get(..3))
            .and_then(|code| code.parse().ok())
            .unwrap_or_else(|| panic!("no status line: {:?}", self.0))
    }

    fn json(&self) -> Value {
        let (_, body) = self
            .0
            .split_once("\r\n\r\n")
            .unwrap_or_else(|| panic!("no body: {:?}", self.0));
        serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {:?}", self.0))
    }

    fn is_problem(&self) -> bool {
        self.0
            .to_ascii_lowercase()
            .contains("content-type: application/problem+json")
    }
}

fn question(bytes: usize) -> String {
    json!({ "question": "q".repeat(bytes) }).to_string()
}

/// The head of an ask declaring a body of `length` bytes, which the tests
/// then never send.
fn declaring(length: u64, extra: &str) -> String {
    format!(
        "POST /sites/docs/ask HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n\
         Content-Length: {length}{extra}"
    )
}

#[tokio::test]
async fn a_refused_caller_gets_its_429_without_sending_any_of_its_body() {
    let demo = Demo::start().await;
    for i in 0..15 {
        assert_eq!(demo.ask("docs", "").await.status(), 200, "ask {}", i + 1);
    }
    let spent = demo.counts("docs").await;
    assert_eq!(spent, [15, 15, 15, 15, 15 * 64]);

    // The bound declared, none of it sent: the answer comes all the same,
    // so the server waited for none of the body.
    let answer = demo.send(&declaring(BOUND, ""), b"").await;
    assert_eq!(answer.status(), 429, "{}", answer.0);
    assert_eq!(answer.json()["limit"], "ask");

    // A few bytes of it sent, the rest withheld: the same.
    let answer = demo
        .send(&declaring(BOUND, ""), b"{\"question\":\"qq")
        .await;
    assert_eq!(answer.status(), 429, "{}", answer.0);

    // A client that waits for `100 Continue` before its body never gets it:
    // the 429 is the first and only answer, and the body is never sent.
    let answer = demo
        .send(&declaring(BOUND, "\r\nExpect: 100-continue"), b"")
        .await;
    assert!(answer.0.starts_with("HTTP/1.1 429"), "{}", answer.0);
    assert!(!answer.0.contains("100 Continue"), "{}", answer.0);

    assert_eq!(
        demo.counts("docs").await,
        spent,
        "refused asks spent nothing"
    );
}

#[test]
fn the_bound_is_the_smaller_of_the_budgets_and_one_questions_cap() {
    assert_eq!(MAX_ASK_BODY, BOUND);
    // The shipped 200,000 tokens a day: the cap binds.
    assert_eq!(max_ask_body(200_000), BOUND);
    assert_eq!(estimate_body_tokens(BOUND), BOUND_TOKENS);
    // The cap binds from the budget whose largest useful body reaches it.
    assert_eq!(max_ask_body(BOUND_TOKENS), BOUND);
    assert_eq!(max_ask_body(BOUND_TOKENS - 1), BOUND - 1);
    assert_eq!(max_ask_body(u64::MAX), BOUND);
    // Below it, the budget does: the longest body whose estimate fits.
    assert_eq!(max_ask_body(4_000), 13_967);
    assert_eq!(estimate_body_tokens(13_967), 4_000);
    assert_eq!(estimate_body_tokens(13_968), 4_001);
    assert_eq!(max_ask_body(512), 15);
    assert_eq!(max_ask_body(511), 0);
}

#[tokio::test]
async fn a_declared_length_over_the_bound_is_413_and_a_chunked_body_411_before_any_limit() {
    let demo = Demo::start().await;
    // One byte over one question's cap; the largest body the day's budget
    // alone would fit (a reservation of all 200,000 tokens); far over.
    for length in [BOUND + 1, 797_967, 1 << 40] {
        let answer = demo.send(&declaring(length, ""), b"").await;
        assert_eq!(answer.status(), 413, "{length}: {}", answer.0);
        assert!(answer.is_problem(), "{}", answer.0);
        assert_eq!(
            answer.json()["detail"],
            format!("the body is over {BOUND} bytes")
        );
    }
    let chunked = demo
        .send(
            "POST /sites/docs/ask HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked",
            b"5\r\n{\"que\r\n",
        )
        .await;
    assert_eq!(chunked.status(), 411, "{}", chunked.0);
    assert!(chunked.is_problem(), "{}", chunked.0);
    assert_eq!(demo.calls.take(), [], "no store call for a refused length");
    assert_eq!(demo.counts("docs").await, [0; 5]);

    // The bound itself is admitted, reserving a small part of the day, and
    // settled with the tokens used.
    let body = question(usize::try_from(BOUND).unwrap() - 15);
    assert_eq!(body.len() as u64, BOUND);
    assert_eq!(estimate_tokens(&"q".repeat(body.len() - 15)), BOUND_TOKENS);
    let answer = demo.ask("docs", &body).await;
    assert_eq!(answer.status(), 200, "{}", answer.0);
    let used = answer.json()["tokens"].as_u64().unwrap();
    assert_eq!(used, 32_753_u64.div_ceil(4) + 64 + 32_753 % 256);
    // One reservation, then the settle giving back what was unused, then
    // the two leases (`ask-inflight`, `ask-inflight-site`) ended once the
    // answer was sent.
    assert_eq!(
        demo.calls.take_once_ended(2).await,
        [Op::Reserve, Op::Refund, Op::EndLease, Op::EndLease]
    );
    assert_eq!(demo.counts("docs").await, [1, 1, 1, 1, used]);
}

#[tokio::test]
async fn a_withheld_body_at_the_bound_holds_a_small_part_of_the_days_tokens() {
    let demo = Demo::start().await;
    // The largest body declared, then withheld: admitted, it reserves its
    // estimate while the demo waits for the body.
    let mut held = TcpStream::connect(demo.addr).await.unwrap();
    held.write_all(format!("{}\r\n\r\n", declaring(BOUND, "")).as_bytes())
        .await
        .unwrap();
    let admitted = async {
        while demo.counts("docs").await[4] == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(HANG, admitted)
        .await
        .expect("the withheld ask was never admitted");
    assert_eq!(demo.counts("docs").await, [1, 1, 1, 1, BOUND_TOKENS]);

    // Meanwhile the rest of the day is there for other questions: as large
    // a question still fits, and is answered.
    let answer = demo
        .ask("docs", &question(usize::try_from(BOUND).unwrap() - 15))
        .await;
    assert_eq!(answer.status(), 200, "{}", answer.0);
    let used = answer.json()["tokens"].as_u64().unwrap();
    assert_eq!(demo.counts("docs").await, [2, 2, 2, 2, BOUND_TOKENS + used]);

    // The held body cut short: its reservation is given back.
    held.shutdown().await.unwrap();
    let answer = Answer::read(&mut held).await;
    assert_eq!(answer.status(), 400, "{}", answer.0);
    assert_eq!(demo.counts("docs").await, [2, 2, 2, 2, used]);
}

#[tokio::test]
async fn an_invalid_project_is_400_and_touches_no_counter() {
    let demo = Demo::start().await;
    let long = "a".repeat(65);
    for project in [
        "Docs",
        "dOcs",
        long.as_str(),
        "-docs",
        ".docs",
        "%2e%2e",
        ".",
        "do%20cs",
        "d%C3%A9",
        "a:b",
        "a%3Ab",
        "a%2Fb",
        "%FF",
        "%00",
        "docs%0A",
    ] {
        // An oversized body too: the project is refused first.
        let head = format!(
            "POST /sites/{project}/ask HTTP/1.1\r\nHost: x\r\nContent-Length: {}",
            1u64 << 40
        );
        let answer = demo.send(&head, b"").await;
        assert_eq!(answer.status(), 400, "{project}: {}", answer.0);
        assert!(answer.is_problem(), "{project}: {}", answer.0);
        assert!(
            answer.json()["detail"]
                .as_str()
                .unwrap()
                .starts_with("the project must be 1 to 64"),
            "{project}: {}",
            answer.0
        );
    }
    assert_eq!(
        demo.calls.take(),
        [],
        "an invalid project made a store call"
    );

    // The edges of the rule are sites.
    let longest = "a".repeat(64);
    for project in [longest.as_str(), "docs.example_1-2", "0", "do%63s"] {
        let answer = demo.ask(project, "").await;
        assert_eq!(answer.status(), 200, "{project}: {}", answer.0);
    }
    // `do%63s` is `docs`, percent-decoded.
    assert_eq!(demo.counts("docs").await, [4, 1, 1, 4, 64]);
}

#[tokio::test]
async fn an_invalid_org_is_400_before_the_docs_run_guard_counts_anything() {
    let demo = Demo::start().await;
    let long = "a".repeat(65);
    for org in [
        "Acme",
        "aCme",
        long.as_str(),
        "-acme",
        ".acme",
        "%2e%2e",
        ".",
        "ac%20me",
        "%C3%A9",
        "a:b",
        "a%3Ab",
        "a%2Fb",
        "%FF",
        "%00",
        "acme%0A",
    ] {
        let head = format!(
            "POST /orgs/{org}/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0"
        );
        let answer = demo.send(&head, b"").await;
        assert_eq!(answer.status(), 400, "{org}: {}", answer.0);
        // Refused before the route's guard: `docs-run` was not counted.
        assert_eq!(demo.calls.take(), [], "{org}: a store call");
        assert!(answer.is_problem(), "{org}: {}", answer.0);
        assert!(
            answer.json()["detail"]
                .as_str()
                .unwrap()
                .starts_with("the org must be 1 to 64"),
            "{org}: {}",
            answer.0
        );
    }

    // The edges of the rule are orgs, each run counted once on `docs-run`.
    let longest = "a".repeat(64);
    for org in [longest.as_str(), "acme.example_1-2", "0", "ac%6De"] {
        let head = format!(
            "POST /orgs/{org}/runs HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: 0"
        );
        let answer = demo.send(&head, b"").await;
        assert_eq!(answer.status(), 202, "{org}: {}", answer.0);
    }
    assert_eq!(demo.calls.take(), [Op::Count; 4]);
    // `ac%6De` is `acme`, percent-decoded.
    assert_eq!(demo.runs("acme").await, 1);
    assert_eq!(demo.runs(&longest).await, 1);
}

#[tokio::test]
async fn a_body_unusable_after_admission_gives_back_its_tokens_and_keeps_its_calls() {
    let demo = Demo::start().await;
    for bad in ["{", "[]", r#"{"question": 5}"#, r#"{"q": "x"}"#] {
        let answer = demo.ask("docs", bad).await;
        assert_eq!(answer.status(), 400, "{bad}: {}", answer.0);
        assert!(answer.is_problem(), "{}", answer.0);
    }
    // Cut short: 100 bytes declared, 10 sent, then the client's end closed.
    let mut stream = TcpStream::connect(demo.addr).await.unwrap();
    stream
        .write_all(format!("{}\r\n\r\n{{\"question", declaring(100, "")).as_bytes())
        .await
        .unwrap();
    stream.shutdown().await.unwrap();
    let answer = Answer::read(&mut stream).await;
    assert_eq!(answer.status(), 400, "{}", answer.0);

    assert_eq!(
        demo.counts("docs").await,
        [5, 5, 5, 5, 0],
        "the tokens given back, the calls spent"
    );
    // Each of the five was admitted, then only its `ask-tokens` reservation
    // refunded: one refund apiece.
    let calls = demo.calls.take();
    let refunds = calls.iter().filter(|op| **op == Op::Refund).count();
    assert!(calls.contains(&Op::Reserve), "{calls:?}");
    assert_eq!(refunds, 5, "one refund per unusable body: {calls:?}");

    // A good question still works end to end and settles what it used.
    let answer = demo.ask("docs", &question(100)).await;
    assert_eq!(answer.status(), 200, "{}", answer.0);
    let used = answer.json()["tokens"].as_u64().unwrap();
    assert_eq!(used, 25 + 64 + 100);
    assert_eq!(demo.counts("docs").await, [6, 6, 6, 6, used]);
}

#[tokio::test]
async fn a_small_token_budget_bounds_the_body_below_one_questions_cap() {
    let text = tollgate::DEFAULT_RULES_TOML.replace("max = 200000", "max = 4000");
    let demo = Demo::start_with(&RuleSet::from_toml(&text).unwrap()).await;
    // 4,000 tokens a window: the longest body whose estimate fits is
    // (4,000 - 512) × 4 + 15 = 13,967 bytes, under the 32 KiB cap.
    let bound = max_ask_body(4_000);
    assert_eq!(bound, 13_967);
    assert!(bound < MAX_ASK_BODY);

    // One byte more could never fit: 413, no store call.
    let answer = demo.send(&declaring(bound + 1, ""), b"").await;
    assert_eq!(answer.status(), 413, "{}", answer.0);
    assert_eq!(answer.json()["detail"], "the body is over 13967 bytes");
    assert_eq!(demo.calls.take(), [], "no store call for a refused length");

    // The bound itself fits a fresh window's budget exactly, and is settled.
    let body = question(usize::try_from(bound).unwrap() - 15);
    assert_eq!(body.len() as u64, bound);
    assert_eq!(estimate_body_tokens(bound), 4_000);
    let answer = demo.ask("docs", &body).await;
    assert_eq!(answer.status(), 200, "{}", answer.0);
    let used = answer.json()["tokens"].as_u64().unwrap();
    assert_eq!(used, 13_952 / 4 + 64 + 13_952 % 256);
    assert_eq!(demo.counts("docs").await, [1, 1, 1, 1, used]);
}

#[tokio::test]
async fn a_token_budget_below_an_empty_questions_estimate_fits_no_ask() {
    let text = tollgate::DEFAULT_RULES_TOML.replace("max = 200000", "max = 500");
    let demo = Demo::start_with(&RuleSet::from_toml(&text).unwrap()).await;
    // The budget, not the cap, bounds the body: not even `{}` fits.
    assert_eq!(max_ask_body(500), 0);
    // No body is small enough...
    let answer = demo.ask("docs", "{}").await;
    assert_eq!(answer.status(), 413, "{}", answer.0);
    assert_eq!(answer.json()["detail"], "the body is over 0 bytes");
    assert_eq!(demo.calls.take(), [], "no store call for a refused length");
    // ...and an empty question's 512 tokens never fit: no wait helps.
    let answer = demo.ask("docs", "").await;
    assert_eq!(answer.status(), 429, "{}", answer.0);
    assert!(
        !answer.0.to_ascii_lowercase().contains("retry-after"),
        "{}",
        answer.0
    );
    let problem = answer.json();
    assert_eq!(problem["limit"], "ask-tokens");
    assert_eq!(problem["never_fits"], true, "{problem}");
    assert_eq!(
        problem["detail"],
        "a cost of 512 tokens never fits rate limit `ask-tokens`: 500 tokens per 1d"
    );
    assert_eq!(demo.counts("docs").await, [0; 5]);
}
