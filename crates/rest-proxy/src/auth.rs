//! The bearer token: `Authorization: Bearer TOKEN`, or `?_token=TOKEN`.

use axum::http::HeaderMap;
use axum::http::header::AUTHORIZATION;
use percent_encoding::percent_decode_str;
use subtle::ConstantTimeEq;

/// The body of a 401, as Upstash words it.
pub(crate) const WRONG_TOKEN: &str = "WRONGPASS invalid or missing auth token";

/// Whether the request carries `expected`, compared in constant time (the
/// length of a wrong token may show; its bytes do not).
pub(crate) fn admits(expected: &[u8], headers: &HeaderMap, query: Option<&str>) -> bool {
    let from_header = headers
        .get(AUTHORIZATION)
        .and_then(|value| bearer(value.as_bytes()));
    match from_header {
        Some(given) => bool::from(expected.ct_eq(given)),
        None => query
            .and_then(query_token)
            .is_some_and(|given| bool::from(expected.ct_eq(&given))),
    }
}

/// The token of a `Bearer TOKEN` header value (the scheme in any case).
fn bearer(value: &[u8]) -> Option<&[u8]> {
    let (scheme, token) = value.split_at_checked(7)?;
    scheme
        .eq_ignore_ascii_case(b"bearer ")
        .then(|| token.trim_ascii())
}

/// The percent-decoded value of the query's `_token` pair.
fn query_token(query: &str) -> Option<Vec<u8>> {
    query
        .split('&')
        .find_map(|pair| pair.strip_prefix("_token="))
        .map(|value| percent_decode_str(value).collect())
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::http::HeaderValue;

    fn with_header(value: &'static str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(AUTHORIZATION, HeaderValue::from_static(value));
        headers
    }

    #[test]
    fn admits_the_bearer_token_or_the_query_token() {
        assert!(admits(b"t0k", &with_header("Bearer t0k"), None));
        assert!(admits(b"t0k", &with_header("bearer t0k"), None));
        assert!(admits(b"t+k", &HeaderMap::new(), Some("a=1&_token=t%2Bk")));
    }

    #[test]
    fn refuses_missing_wrong_and_partial_tokens() {
        assert!(!admits(b"t0k", &HeaderMap::new(), None));
        assert!(!admits(b"t0k", &with_header("Bearer t0"), None));
        assert!(!admits(b"t0k", &with_header("Bearer t0kk"), None));
        assert!(!admits(b"t0k", &with_header("Basic t0k"), None));
        assert!(!admits(b"t0k", &with_header("Bearer"), None));
        assert!(!admits(
            b"t0k",
            &with_header("Bearer x"),
            Some("_token=t0k")
        ));
        assert!(!admits(b"t0k", &HeaderMap::new(), Some("_token=")));
    }
}
