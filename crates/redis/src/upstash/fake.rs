//! The store's logic above the HTTP seam, against a [`Post`] that answers
//! from a script of canned responses and records every request.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_core::{
    CheckId, Claim, Counter, CounterStore, Deadline, MAX_COUNT, MarkStore, StoreError, async_trait,
};

use super::UpstashStore;
use super::http::{Post, Response};
use crate::scripts::SCRIPTS;

#[derive(Clone, Default)]
struct Fake {
    answers: Arc<Mutex<VecDeque<(u16, String)>>>,
    requests: Arc<Mutex<Vec<Value>>>,
}

#[async_trait]
impl Post for Fake {
    async fn post(&self, body: Vec<u8>, _deadline: Deadline) -> Result<Response, StoreError> {
        let body: Value = serde_json::from_slice(&body).expect("a request body is JSON");
        self.requests.lock().unwrap().push(body);
        let (status, body) = self
            .answers
            .lock()
            .unwrap()
            .pop_front()
            .unwrap_or((500, String::new()));
        Ok(Response {
            status,
            body: Some(body.into_bytes()),
        })
    }
}

fn store(answers: &[(u16, &str)]) -> (UpstashStore, Fake) {
    let fake = Fake::default();
    fake.answers
        .lock()
        .unwrap()
        .extend(answers.iter().map(|(s, b)| (*s, (*b).to_owned())));
    let store = UpstashStore::with_http(Box::new(fake.clone()), "h:1".into());
    (store, fake)
}

fn requests(fake: &Fake) -> Vec<Value> {
    fake.requests.lock().unwrap().clone()
}

fn counter(key: &str, cost: u64, max: u64) -> Counter {
    Counter {
        key: key.into(),
        ttl: Duration::from_secs(60),
        cost,
        max,
        floor: 0,
        prior: None,
        lease: false,
    }
}

fn deadline() -> Deadline {
    Deadline::after(Duration::from_secs(1))
}

#[tokio::test]
async fn a_count_is_one_evalsha_with_the_deadline_first() {
    let (store, fake) = store(&[(200, r#"{"result":[[3,1]]}"#)]);
    let deadline = deadline();
    let id = CheckId::from_u128(7);
    let counts = store
        .count(&[counter("a", 2, 9), counter("b", 1, 9)], id, deadline)
        .await
        .unwrap();
    assert_eq!(counts, vec![3, 1]);
    let sent = requests(&fake);
    assert_eq!(sent.len(), 1);
    let cutoff = deadline.cutoff_unix_millis().to_string();
    let sha = &SCRIPTS.check.sha;
    let hash = format!("limit:#2080.{}", deadline.unix_millis() / 100);
    assert_eq!(
        sent[0],
        json!([
            "EVALSHA",
            sha,
            "3",
            "a",
            "b",
            hash,
            "1",
            "4260",
            "1",
            id.to_string(),
            "c2.1",
            cutoff,
            "60000:2",
            "60000:1"
        ])
    );
}

#[tokio::test]
async fn a_prior_is_read_by_the_script_its_key_after_the_counters_and_answered_after_them() {
    let (store, fake) = store(&[
        (200, r#"{"result":[[1,3,1,12]]}"#),
        (200, r#"{"result":[[3,1]]}"#),
    ]);
    let deadline = deadline();
    let id = CheckId::from_u128(7);
    let weighed = Counter {
        prior: Some(tollgate_core::Prior {
            key: "a0".into(),
            part: 20,
            whole: 60,
        }),
        ..counter("a", 2, 9)
    };
    let counters = [weighed, counter("b", 1, 9)];
    let reserved = store.reserve(&counters, id, deadline).await.unwrap();
    assert_eq!((reserved.applied, reserved.counts), (true, vec![3, 1, 12]));
    let sent = requests(&fake);
    let hash = format!("limit:#2080.{}", deadline.unix_millis() / 100);
    assert_eq!(
        sent[0].as_array().unwrap()[2..],
        json!([
            "4",
            "a",
            "b",
            "a0",
            hash,
            "1",
            "4260",
            "1",
            id.to_string(),
            "r2.1",
            deadline.cutoff_unix_millis().to_string(),
            "60000:2:9~20/60",
            "60000:1:9"
        ])
        .as_array()
        .unwrap()[..]
    );
    // A reply without the prior's count is no reply.
    let err = store.count(&counters, id, deadline).await.unwrap_err();
    assert_eq!(err.kind(), "invalid-reply");
}

#[tokio::test]
async fn noscript_is_answered_by_one_eval_of_the_text_in_the_same_call() {
    let (store, fake) = store(&[
        (
            400,
            r#"{"error":"NOSCRIPT No matching script. Please use EVAL."}"#,
        ),
        (200, r#"{"result":[[1,1]]}"#),
    ]);
    let reserved = store
        .reserve(&[counter("a", 1, 5)], CheckId::new(), deadline())
        .await
        .unwrap();
    assert!(reserved.applied);
    let sent = requests(&fake);
    assert_eq!(sent.len(), 2, "{sent:?}");
    assert_eq!(sent[0][0], "EVALSHA");
    assert_eq!(sent[1][0], "EVAL");
    assert_eq!(sent[1][1], crate::scripts::CHECK);
    assert_eq!(
        sent[0].as_array().unwrap()[2..],
        sent[1].as_array().unwrap()[2..]
    );
    for body in &sent {
        assert!(!body.to_string().contains("LOAD"), "never SCRIPT LOAD");
    }
}

#[tokio::test]
async fn a_second_noscript_is_an_error_not_a_loop() {
    let noscript = r#"{"error":"NOSCRIPT No matching script."}"#;
    let (store, fake) = store(&[(400, noscript), (400, noscript), (400, noscript)]);
    let err = store
        .count(&[counter("a", 1, 5)], CheckId::new(), deadline())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "backend");
    assert_eq!(requests(&fake).len(), 2);
}

#[tokio::test]
async fn a_deadline_reply_is_a_timeout_and_a_passed_deadline_sends_nothing() {
    let (store, fake) = store(&[(200, r#"{"result":["DEADLINE"]}"#)]);
    let err = store
        .count(&[counter("a", 1, 5)], CheckId::new(), deadline())
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "timeout");
    let passed = Deadline::after(Duration::ZERO);
    for err in [
        store
            .count(&[counter("a", 1, 5)], CheckId::new(), passed)
            .await
            .unwrap_err(),
        store.get(&["a".into()], passed).await.unwrap_err(),
        store.release("m", "t", passed).await.unwrap_err(),
    ] {
        assert_eq!(err.kind(), "timeout");
    }
    assert_eq!(requests(&fake).len(), 1);
}

#[tokio::test]
async fn every_operation_reads_its_reply() {
    let (store, fake) = store(&[
        (200, r#"{"result":[null,"7"]}"#),
        (200, r#"{"result":[[0]]}"#),
        (200, r#"{"result":1}"#),
        (200, r#"{"result":0}"#),
        (200, r#"{"result":1}"#),
        (200, r#"{"result":1}"#),
    ]);
    let d = deadline();
    assert_eq!(
        store.get(&["a".into(), "b".into()], d).await.unwrap(),
        vec![0, 7]
    );
    let id = CheckId::from_u128(9);
    assert_eq!(
        store.refund(&[counter("a", 3, 5)], id, d).await.unwrap(),
        vec![0]
    );
    assert!(store.delete("a", d).await.unwrap());
    let ttl = Duration::from_secs(5);
    assert_eq!(store.claim("m", "tok", ttl, d).await.unwrap(), Claim::Held);
    assert!(store.finish("m", "tok", ttl, d).await.unwrap());
    assert!(store.release("m", "tok", d).await.unwrap());
    let sent = requests(&fake);
    assert_eq!(sent[0], json!(["MGET", "a", "b"]));
    let cutoff = d.cutoff_unix_millis().to_string();
    assert_eq!(
        sent[1].as_array().unwrap()[2..],
        json!([
            "2",
            "a",
            format!("limit:#2080.{}", d.unix_millis() / 100),
            "1",
            "4260",
            "1",
            id.to_string(),
            "f1.1",
            cutoff,
            "3"
        ])
        .as_array()
        .unwrap()[..]
    );
    assert_eq!(
        sent[3].as_array().unwrap()[2..],
        json!(["1", "m", cutoff, "tok", "5000"]).as_array().unwrap()[..]
    );
    assert_eq!(
        sent[4].as_array().unwrap()[2..],
        json!(["1", "m", cutoff, "tok", "5000", "done"])
            .as_array()
            .unwrap()[..]
    );
    assert_eq!(
        sent[5].as_array().unwrap()[2..],
        json!(["1", "m", cutoff, "tok"]).as_array().unwrap()[..]
    );
    assert_eq!(tollgate_core::Named::name(&store), "upstash");
}

#[tokio::test]
async fn empty_batches_send_nothing() {
    let (store, fake) = store(&[]);
    let d = deadline();
    assert!(
        store
            .count(&[], CheckId::new(), d)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.reserve(&[], CheckId::new(), d).await.unwrap().applied);
    assert!(
        store
            .refund(&[], CheckId::new(), d)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(store.get(&[], d).await.unwrap().is_empty());
    assert!(requests(&fake).is_empty());
}

#[tokio::test]
async fn bad_answers_are_typed_errors_never_counts() {
    let cases: &[(u16, &str, &str)] = &[
        (
            200,
            r#"{"error":"WRONGTYPE Operation against a key"}"#,
            "backend",
        ),
        (200, r#"{"error":"LOADING Redis is loading"}"#, "busy"),
        (
            400,
            r#"{"error":"READONLY You can't write against a read only replica."}"#,
            "busy",
        ),
        (
            200,
            r#"{"result":["ERR counter is not an integer"]}"#,
            "invalid-reply",
        ),
        (200, r#"{"result":[[1,"#, "invalid-reply"),
        (200, r#"{"result":[[1,2]]}"#, "invalid-reply"),
        (200, r#"{"result":[1]}"#, "invalid-reply"),
        (200, r#"{"result":[[1],[2]]}"#, "invalid-reply"),
        (200, "<html>oops</html>", "invalid-reply"),
        (200, r#"{"result":[["1"]]}"#, "invalid-reply"),
        (200, r#"{"result":[[-1]]}"#, "invalid-reply"),
        (
            200,
            &format!(r#"{{"result":[[{}]]}}"#, MAX_COUNT + 1),
            "invalid-reply",
        ),
        (
            401,
            r#"{"error":"WRONGPASS invalid or missing auth token"}"#,
            "backend",
        ),
        (429, "", "busy"),
        (500, r#"{"error":"ERR redis down"}"#, "connection"),
        (404, "", "backend"),
    ];
    for (status, body, kind) in cases {
        let (store, _) = store(&[(*status, body)]);
        let err = store
            .count(&[counter("a", 1, 5)], CheckId::new(), deadline())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), *kind, "{status} {body}");
    }
}

/// Answers every request with `status` and a body over the bound.
struct Oversized(u16);

#[async_trait]
impl Post for Oversized {
    async fn post(&self, _: Vec<u8>, _: Deadline) -> Result<Response, StoreError> {
        Ok(Response {
            status: self.0,
            body: None,
        })
    }
}

#[tokio::test]
async fn a_body_over_the_bound_is_no_answer_and_a_status_says_what_it_says() {
    for (status, kind) in [
        (200, "invalid-reply"),
        (400, "invalid-reply"),
        (503, "busy"),
        (500, "connection"),
        (401, "backend"),
    ] {
        let store = UpstashStore::with_http(Box::new(Oversized(status)), "h:1".into());
        let err = store
            .count(&[counter("a", 1, 5)], CheckId::new(), deadline())
            .await
            .unwrap_err();
        assert_eq!(err.kind(), kind, "{status}");
        assert!(!err.is_transient() || status >= 500, "{status}");
    }
}
