//! REST answers, as a [`Reply`].
//!
//! An answer is a JSON object: `{"result": value}` (HTTP 200) or
//! `{"error": text}` (HTTP 400, or inside a 200). Integers are JSON
//! numbers, nil is `null`, strings are plain JSON strings (this store never
//! asks for base64; REST renders a status reply such as `OK` as a string
//! too), arrays nest, and an error inside an array is `{"error": text}`.

use serde_json::{Map, Value};
use tollgate_core::StoreError;

use crate::reply::Reply;

/// The text of `{"error": text}`, the object's only field.
fn error_text(map: &Map<String, Value>) -> Option<&str> {
    match (map.len(), map.get("error")) {
        (1, Some(Value::String(text))) => Some(text),
        _ => None,
    }
}

/// The body of an HTTP 200 or 400 answer to one command: its result, or
/// the error reply it holds.
pub(crate) fn read(status: u16, body: &[u8]) -> Result<Reply, StoreError> {
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        StoreError::InvalidReply(if err.is_eof() {
            "the reply is cut short".into()
        } else {
            "the reply is not JSON".into()
        })
    })?;
    let Value::Object(mut map) = value else {
        return Err(StoreError::InvalidReply(
            "expected a JSON object, got another value".into(),
        ));
    };
    if let Some(text) = error_text(&map) {
        return Ok(Reply::Error(text.to_owned()));
    }
    match (status, map.len(), map.remove("result")) {
        (200, 1, Some(result)) => Ok(reply(result)),
        _ => Err(StoreError::InvalidReply(format!(
            "expected {{\"result\"}} or {{\"error\"}} with HTTP {status}"
        ))),
    }
}

/// A JSON value as a reply.
fn reply(value: Value) -> Reply {
    match value {
        Value::Null => Reply::Nil,
        Value::Number(n) => match n.as_i64() {
            Some(n) => Reply::Int(n),
            None => Reply::Double(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(text) => Reply::Text(text.into_bytes()),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply).collect()),
        Value::Object(map) => match error_text(&map) {
            Some(text) => Reply::Error(text.to_owned()),
            None => Reply::Other("an object"),
        },
        Value::Bool(_) => Reply::Other("a boolean"),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn refused(body: &str) -> &'static str {
        read(200, body.as_bytes()).unwrap_err().kind()
    }

    #[test]
    fn reads_results_and_errors_and_refuses_other_bodies() {
        assert_eq!(
            read(200, br#"{"result":[1,2]}"#).unwrap(),
            Reply::Array(vec![Reply::Int(1), Reply::Int(2)])
        );
        assert_eq!(read(200, br#"{"result":null}"#).unwrap(), Reply::Nil);
        let error = read(400, br#"{"error":"NOSCRIPT No matching script"}"#).unwrap();
        assert!(matches!(error, Reply::Error(t) if t.starts_with("NOSCRIPT")));
        let error = read(200, br#"{"error":"ERR x"}"#).unwrap();
        assert_eq!(error, Reply::Error("ERR x".into()));
        for body in [
            "",
            r#"{"result":[1,"#,
            "not json",
            "<html>",
            "[]",
            r#"[{"result":1}]"#,
            "{}",
            r#"{"result":1,"error":"x"}"#,
            r#"{"error":7}"#,
            r#"{"value":1}"#,
        ] {
            assert_eq!(refused(body), "invalid-reply", "{body:?}");
        }
        assert!(read(400, br#"{"result":1}"#).is_err(), "a result with 400");
    }

    #[test]
    fn every_json_value_has_its_reply() {
        let result = |json: &str| read(200, format!(r#"{{"result":{json}}}"#).as_bytes()).unwrap();
        assert_eq!(result("-7"), Reply::Int(-7));
        assert_eq!(result("1.5"), Reply::Double(1.5));
        assert!(matches!(result("18446744073709551615"), Reply::Double(_)));
        assert_eq!(result(r#""DEADLINE""#), Reply::Text(b"DEADLINE".to_vec()));
        assert_eq!(result("true"), Reply::Other("a boolean"));
        assert_eq!(result(r#"{"k":1}"#), Reply::Other("an object"));
        assert_eq!(
            result(r#"[{"error":"LOADING later"},null]"#),
            Reply::Array(vec![Reply::Error("LOADING later".into()), Reply::Nil])
        );
    }
}
