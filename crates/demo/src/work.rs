//! [`Work`]: the domain work each route has done since start.

use std::sync::atomic::{AtomicU64, Ordering};

use serde_json::{Value, json};

/// Counts of domain work done per route, so a caller can see that refused
/// calls did none.
#[derive(Debug, Default)]
pub struct Work {
    ask: AtomicU64,
    tokens: AtomicU64,
    runs: AtomicU64,
    webhooks: AtomicU64,
}

impl Work {
    /// Records one answered question that used `tokens`; the new total of questions.
    pub fn ask(&self, tokens: u64) -> u64 {
        self.tokens.fetch_add(tokens, Ordering::SeqCst);
        self.ask.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Records one started docs run; the new total.
    pub fn run(&self) -> u64 {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// Records one processed webhook delivery; the new total.
    pub fn webhook(&self) -> u64 {
        self.webhooks.fetch_add(1, Ordering::SeqCst) + 1
    }

    /// `{"ask":N,"tokens":N,"runs":N,"webhooks":N}`.
    pub fn to_json(&self) -> Value {
        json!({
            "ask": self.ask.load(Ordering::SeqCst),
            "tokens": self.tokens.load(Ordering::SeqCst),
            "runs": self.runs.load(Ordering::SeqCst),
            "webhooks": self.webhooks.load(Ordering::SeqCst),
        })
    }
}
