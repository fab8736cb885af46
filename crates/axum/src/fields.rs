//! The `RateLimit-Policy` and `RateLimit` header fields of
//! draft-ietf-httpapi-ratelimit-headers, in structured-field form.
//!
//! ```
//! # async fn demo(limiter: tollgate_core::Limiter, limit: tollgate_core::Limit) -> Result<(), tollgate_core::Error> {
//! let verdict = limiter.count(&[limit]).await?;
//! let mut headers = http::HeaderMap::new();
//! tollgate_axum::fields::insert(&verdict, &mut headers);
//! // RateLimit-Policy: "ask";q=15;w=86400
//! // RateLimit: "ask";r=14;t=3600
//! # Ok(()) }
//! ```

use std::fmt::Write as _;

use http::{HeaderMap, HeaderName, HeaderValue};
use tollgate_core::{Usage, Verdict};

/// `RateLimit-Policy`: the quota and window of each limit.
pub const RATELIMIT_POLICY: HeaderName = HeaderName::from_static("ratelimit-policy");

/// `RateLimit`: what is left of each limit and when it resets.
pub const RATELIMIT: HeaderName = HeaderName::from_static("ratelimit");

/// The `RateLimit-Policy` value: one `"name";q=MAX;w=WINDOW_SECS` per public
/// limit (with `;qu="UNIT"` when the limit counts a quota unit the draft
/// defines, such as `content-bytes`), comma-separated; `None` when no limit
/// is public.
pub fn policy(usage: &[Usage]) -> Option<HeaderValue> {
    list(usage, |out, u| {
        let _ = write!(out, ";q={};w={}", u.max(), u.window().secs());
        if let Some(unit) = u.unit().quota_unit() {
            let _ = write!(out, ";qu=\"{unit}\"");
        }
    })
}

/// The `RateLimit` value: one `"name";r=REMAINING;t=RESET_SECS` per public
/// limit, comma-separated, remaining never below 0; `None` when no limit is
/// public. A rule that is not public
/// ([`Rule::with_public`](tollgate_core::Rule::with_public)) never shows its
/// budget here.
pub fn rate_limit(usage: &[Usage]) -> Option<HeaderValue> {
    list(usage, |out, u| {
        let _ = write!(out, ";r={};t={}", u.remaining().max(0), u.retry_after());
    })
}

/// Inserts both fields for `verdict`; nothing when it is degraded or has no limits.
pub fn insert(verdict: &Verdict, headers: &mut HeaderMap) {
    if verdict.is_degraded() {
        return;
    }
    if let (Some(policy), Some(rate_limit)) = (policy(verdict.usage()), rate_limit(verdict.usage()))
    {
        headers.insert(RATELIMIT_POLICY, policy);
        headers.insert(RATELIMIT, rate_limit);
    }
}

fn list(usage: &[Usage], params: impl Fn(&mut String, &Usage)) -> Option<HeaderValue> {
    let mut out = String::new();
    for u in usage.iter().filter(|u| u.is_public()) {
        if !out.is_empty() {
            out.push_str(", ");
        }
        string_item(&mut out, u.name());
        params(&mut out, u);
    }
    if out.is_empty() {
        return None;
    }
    HeaderValue::from_str(&out).ok()
}

/// Writes `text` as a structured-field string: quoted, `"` and `\` escaped,
/// anything outside printable ASCII dropped (rule names never hold any).
fn string_item(out: &mut String, text: &str) {
    out.push('"');
    for c in text.chars().filter(|c| (' '..='~').contains(c)) {
        if matches!(c, '"' | '\\') {
            out.push('\\');
        }
        out.push(c);
    }
    out.push('"');
}
