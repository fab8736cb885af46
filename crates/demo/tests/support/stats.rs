//! The demo's `/stats`, read over HTTP.
#![allow(clippy::unwrap_used)]

use reqwest::Client;
use serde_json::Value;

/// The JSON of `GET {base}/stats` (`base` as `http://127.0.0.1:<port>`).
pub(crate) async fn stats(client: &Client, base: &str) -> Value {
    client
        .get(format!("{base}/stats"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}
