//! Reading Upstash replies into counts, without trusting their shape.
//!
//! A reply is a JSON object: `{"result": value}` (HTTP 200) or
//! `{"error": text}` (HTTP 400, or inside a 200). Integers are JSON
//! numbers, nil is `null`, strings are plain JSON strings (this store never
//! asks for base64), arrays nest.

use serde_json::{Map, Value};
use tollgate_core::{Claim, MAX_COUNT, Reservation, StoreError};

use crate::failure;

/// What an endpoint answered to one command.
#[derive(Debug)]
pub(crate) enum Answer {
    /// `{"result": value}`.
    Result(Value),
    /// `{"error": text}`.
    Error(String),
}

fn invalid(what: &str, value: &Value) -> StoreError {
    StoreError::InvalidReply(format!("expected {what}, got {}", kind(value)))
}

/// The type of a value, for messages (never its content, which may be a key).
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The error text of `{"error": text}`, the object's only field.
fn error_text(map: &Map<String, Value>) -> Option<&str> {
    match (map.len(), map.get("error")) {
        (1, Some(Value::String(text))) => Some(text),
        _ => None,
    }
}

/// Reads the body of an HTTP 200 or 400 answer to one command.
pub(crate) fn answer(status: u16, body: &[u8]) -> Result<Answer, StoreError> {
    let value: Value = serde_json::from_slice(body).map_err(|err| {
        StoreError::InvalidReply(if err.is_eof() {
            "the reply is cut short".into()
        } else {
            "the reply is not JSON".into()
        })
    })?;
    let Value::Object(mut map) = value else {
        return Err(invalid("a JSON object", &value));
    };
    if let Some(text) = error_text(&map) {
        return Ok(Answer::Error(text.to_owned()));
    }
    match (status, map.len(), map.remove("result")) {
        (200, 1, Some(result)) => Ok(Answer::Result(result)),
        _ => Err(StoreError::InvalidReply(format!(
            "expected {{\"result\"}} or {{\"error\"}} with HTTP {status}"
        ))),
    }
}

/// Whether a write script answered that the call's deadline had passed (so
/// it applied nothing): the status reply `DEADLINE`, which REST renders as
/// a string. No script returns a string otherwise.
pub(crate) fn is_deadline(value: &Value) -> bool {
    matches!(value, Value::String(s) if s == "DEADLINE")
}

/// A count: an integer in `0..=MAX_COUNT`, or the error entry it is.
fn count(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Number(n) => match n.as_u64() {
            Some(count) if count <= MAX_COUNT => Ok(count),
            Some(_) => Err(StoreError::InvalidReply("a count over 2^53".into())),
            None if n.is_i64() => Err(StoreError::InvalidReply("a negative count".into())),
            None => Err(StoreError::InvalidReply(
                "a count that is not an integer".into(),
            )),
        },
        Value::Object(map) => {
            Err(error_text(map).map_or_else(|| invalid("an integer", value), failure::from_server))
        }
        other => Err(invalid("an integer", other)),
    }
}

/// A stored count read by `MGET`: `null` is 0, else the digits of a count.
fn stored(value: &Value) -> Result<u64, StoreError> {
    match value {
        Value::Null => Ok(0),
        Value::String(text) => {
            let digits = !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit());
            match text.parse::<u64>() {
                Ok(count) if digits && count <= MAX_COUNT => Ok(count),
                _ => Err(StoreError::InvalidReply(
                    "a stored count is not a number up to 2^53".into(),
                )),
            }
        }
        Value::Number(_) | Value::Object(_) => count(value),
        other => Err(invalid("a count or null", other)),
    }
}

fn array(value: Value, len: usize, what: &str) -> Result<Vec<Value>, StoreError> {
    match value {
        Value::Array(items) if items.len() == len => Ok(items),
        Value::Array(items) => Err(StoreError::InvalidReply(format!(
            "expected {len} {what}, got {}",
            items.len()
        ))),
        other => Err(invalid("an array", &other)),
    }
}

/// The reply of the count or refund script: one count per counter.
pub(crate) fn counts(value: Value, n: usize) -> Result<Vec<u64>, StoreError> {
    array(value, n, "counts")?.iter().map(count).collect()
}

/// The reply of the reserve script: `[applied, count, ...]`.
pub(crate) fn reservation(value: Value, n: usize) -> Result<Reservation, StoreError> {
    let items = array(value, n + 1, "script results")?;
    let applied = flag(&items[0])?;
    let counts = items[1..].iter().map(count).collect::<Result<_, _>>()?;
    Ok(Reservation { applied, counts })
}

/// The reply to `MGET`.
pub(crate) fn stored_counts(value: Value, n: usize) -> Result<Vec<u64>, StoreError> {
    array(value, n, "values")?.iter().map(stored).collect()
}

/// A script's 0 or 1.
pub(crate) fn flag(value: &Value) -> Result<bool, StoreError> {
    match count(value)? {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(StoreError::InvalidReply("expected 0 or 1".into())),
    }
}

/// The reply of the claim script: 1 acquired, 0 held.
pub(crate) fn claim(value: &Value) -> Result<Claim, StoreError> {
    Ok(if flag(value)? {
        Claim::Acquired
    } else {
        Claim::Held
    })
}

/// The reply of the delete script (`DEL`'s): whether the key existed.
pub(crate) fn deleted(value: &Value) -> Result<bool, StoreError> {
    count(value).map(|n| n > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde_json::json;

    use super::*;

    fn result(body: &str) -> Value {
        match answer(200, body.as_bytes()).unwrap() {
            Answer::Result(value) => value,
            Answer::Error(text) => panic!("an error: {text}"),
        }
    }

    fn refused(body: &str) -> &'static str {
        answer(200, body.as_bytes()).unwrap_err().kind()
    }

    #[test]
    fn reads_results_and_errors_and_refuses_other_bodies() {
        assert_eq!(result(r#"{"result":[1,2]}"#), json!([1, 2]));
        assert_eq!(result(r#"{"result":null}"#), Value::Null);
        let error = answer(400, br#"{"error":"NOSCRIPT No matching script"}"#).unwrap();
        assert!(matches!(error, Answer::Error(t) if t.starts_with("NOSCRIPT")));
        let error = answer(200, br#"{"error":"ERR x"}"#).unwrap();
        assert!(matches!(error, Answer::Error(t) if t == "ERR x"));
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
        assert!(
            answer(400, br#"{"result":1}"#).is_err(),
            "a result with 400"
        );
    }

    #[test]
    fn a_bad_count_says_what_is_wrong_with_it_never_what_it_holds() {
        let secret = "limit:ask:203.0.113.9:20421";
        let message = |value: Value| count(&value).unwrap_err().to_string();
        assert!(message(json!(-4)).contains("a negative count"));
        assert!(message(json!(1.5)).contains("not an integer"));
        assert!(message(json!(MAX_COUNT + 1)).contains("over 2^53"));
        let cases = [
            (Value::Null, "null"),
            (json!(true), "a boolean"),
            (json!(secret), "a string"),
            (json!([secret]), "an array"),
            (json!({ "key": secret }), "an object"),
        ];
        for (value, named) in cases {
            let text = message(value);
            assert!(
                text.ends_with(&format!("expected an integer, got {named}")),
                "{text}"
            );
            assert!(!text.contains(secret), "{text}");
        }
    }

    #[test]
    fn counts_are_exact_integers_up_to_2_pow_53() {
        assert_eq!(
            counts(json!([0, 3, MAX_COUNT]), 3).unwrap(),
            vec![0, 3, MAX_COUNT]
        );
        for (value, n) in [
            (json!([3]), 2),
            (json!([3, 1, 1]), 2),
            (json!(["3"]), 1),
            (json!([-4]), 1),
            (json!([1.5]), 1),
            (json!([MAX_COUNT + 1]), 1),
            (json!([u64::MAX]), 1),
            (json!([null]), 1),
            (json!([[1]]), 1),
            (json!(3), 1),
            (json!("DEADLINE"), 1),
            (Value::Null, 1),
        ] {
            assert_eq!(
                counts(value.clone(), n).unwrap_err().kind(),
                "invalid-reply",
                "{value}"
            );
        }
        let loading = json!([{"error": "LOADING Redis is loading"}]);
        assert_eq!(counts(loading, 1).unwrap_err().kind(), "busy");
        let wrong = json!([{"error": "WRONGTYPE Operation against a key"}]);
        assert_eq!(counts(wrong, 1).unwrap_err().kind(), "backend");
    }

    #[test]
    fn reads_reservations() {
        assert_eq!(
            reservation(json!([1, 2, 5]), 2).unwrap(),
            Reservation {
                applied: true,
                counts: vec![2, 5]
            }
        );
        assert_eq!(
            reservation(json!([0, 2]), 1).unwrap(),
            Reservation {
                applied: false,
                counts: vec![2]
            }
        );
        for value in [
            json!([7, 2]),
            json!([1]),
            json!([1, 2, 3]),
            json!(1),
            json!([true, 2]),
        ] {
            assert_eq!(
                reservation(value.clone(), 1).unwrap_err().kind(),
                "invalid-reply",
                "{value}"
            );
        }
    }

    #[test]
    fn reads_stored_counts_and_flags() {
        assert_eq!(
            stored_counts(json!([null, "12", "0"]), 3).unwrap(),
            vec![0, 12, 0]
        );
        assert_eq!(
            stored_counts(json!(["9007199254740992"]), 1).unwrap(),
            vec![MAX_COUNT]
        );
        for value in [
            json!(["twelve"]),
            json!(["+12"]),
            json!(["-1"]),
            json!([""]),
            json!(["9007199254740993"]),
            json!(["1.0"]),
            json!([true]),
            json!([null]),
        ] {
            let n = 1 + usize::from(value == json!([null]));
            assert_eq!(
                stored_counts(value.clone(), n).unwrap_err().kind(),
                "invalid-reply",
                "{value}"
            );
        }
        assert_eq!(claim(&json!(1)).unwrap(), Claim::Acquired);
        assert_eq!(claim(&json!(0)).unwrap(), Claim::Held);
        assert!(claim(&json!(2)).is_err());
        assert!(claim(&json!("OK")).is_err());
        assert!(flag(&json!(1)).unwrap());
        assert!(!flag(&json!(0)).unwrap());
        assert!(deleted(&json!(1)).unwrap());
        assert!(!deleted(&json!(0)).unwrap());
        assert!(deleted(&json!("1")).is_err());
    }

    #[test]
    fn a_deadline_reply_is_told_apart_from_every_result() {
        assert!(is_deadline(&json!("DEADLINE")));
        assert!(!is_deadline(&json!("OK")));
        assert!(!is_deadline(&json!(["DEADLINE"])));
        assert!(!is_deadline(&json!(1)));
    }
}
