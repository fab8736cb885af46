//! [`Problem`]: an RFC 9457 `application/problem+json` response.

use http::{HeaderValue, StatusCode, header};
use serde_json::{Map, Value};

/// The problem type of a call refused by a rate limit (429).
pub const RATE_LIMITED: &str = "tag:tollgate,2025:rate-limited";
/// The problem type of a call refused because limits could not be checked (503).
pub const UNAVAILABLE: &str = "tag:tollgate,2025:unavailable";
/// The problem type of a request whose client address or key values cannot be used (400).
pub const BAD_REQUEST: &str = "tag:tollgate,2025:bad-request";
/// The problem type of a guard that cannot check a call (500).
pub const INTERNAL: &str = "tag:tollgate,2025:internal";

/// The media type of a problem body.
pub const PROBLEM_JSON: &str = "application/problem+json";

/// An RFC 9457 problem: `type`, `title`, `status`, `detail` and extension members.
///
/// ```
/// use http::StatusCode;
/// use tollgate_tower::Problem;
/// let problem = Problem::new(StatusCode::BAD_REQUEST, "tag:example,2025:no-delivery", "Bad Request")
///     .detail("missing X-GitHub-Delivery header");
/// assert_eq!(problem.body()["status"], 400);
/// ```
///
/// Members are written in the order given, `type` first.
#[derive(Clone, Debug, PartialEq)]
pub struct Problem {
    status: StatusCode,
    members: Vec<(String, Value)>,
    retry_after: Option<u64>,
}

impl Problem {
    /// A problem of type `kind` (a URI) with a short `title`.
    pub fn new(status: StatusCode, kind: &str, title: &str) -> Problem {
        Problem {
            status,
            members: vec![
                ("type".into(), kind.into()),
                ("title".into(), title.into()),
                ("status".into(), status.as_u16().into()),
            ],
            retry_after: None,
        }
    }

    /// Sets the `detail`: what went wrong with this call, for a person.
    pub fn detail(self, detail: impl Into<String>) -> Problem {
        self.member("detail", detail.into())
    }

    /// Adds an extension member (or replaces the member of that name).
    pub fn member(mut self, name: &str, value: impl Into<Value>) -> Problem {
        let value = value.into();
        match self.members.iter_mut().find(|(n, _)| n == name) {
            Some((_, old)) => *old = value,
            None => self.members.push((name.into(), value)),
        }
        self
    }

    /// Sets the `Retry-After` header, in whole seconds.
    pub fn retry_after(mut self, secs: u64) -> Problem {
        self.retry_after = Some(secs);
        self
    }

    /// The status code.
    pub fn status(&self) -> StatusCode {
        self.status
    }

    /// The JSON body, as a map.
    pub fn body(&self) -> Map<String, Value> {
        self.members.iter().cloned().collect()
    }

    /// The JSON body, as text, members in order.
    pub fn to_json(&self) -> String {
        let mut out = String::from("{");
        for (i, (name, value)) in self.members.iter().enumerate() {
            if i > 0 {
                out.push(',');
            }
            out.push_str(&Value::from(name.as_str()).to_string());
            out.push(':');
            out.push_str(&value.to_string());
        }
        out.push('}');
        out
    }
}

impl Problem {
    /// The response: the status, `content-type: application/problem+json`,
    /// `Retry-After` when set, and the JSON body.
    pub fn into_http(self) -> http::Response<String> {
        let mut response = http::Response::new(self.to_json());
        *response.status_mut() = self.status;
        let headers = response.headers_mut();
        headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if let Some(secs) = self.retry_after {
            headers.insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        response
    }
}

#[cfg(feature = "axum")]
impl axum::response::IntoResponse for Problem {
    fn into_response(self) -> axum::response::Response {
        self.into_http().into_response()
    }
}
