//! Reading Redis replies into counts, without trusting their shape.

use redis::Value;
use tollgate_core::{Claim, Reservation, StoreError};

use crate::failure;

fn invalid(what: &str, value: &Value) -> StoreError {
    StoreError::InvalidReply(format!("expected {what}, got {}", kind(value)))
}

/// The type of a reply, for messages (never its content, which may be a key).
fn kind(value: &Value) -> &'static str {
    match value {
        Value::Nil => "nil",
        Value::Int(_) => "an integer",
        Value::BulkString(_) => "a bulk string",
        Value::SimpleString(_) => "a simple string",
        Value::Okay => "OK",
        Value::Array(_) => "an array",
        Value::ServerError(_) => "an error",
        _ => "another type",
    }
}

/// Whether a write script answered that the call's deadline had passed (so
/// it applied nothing).
pub(crate) fn is_deadline(value: &Value) -> bool {
    matches!(value, Value::SimpleString(s) if s == "DEADLINE")
}

/// A count: a non-negative integer, or the error reply it is.
fn count(value: Value) -> Result<u64, StoreError> {
    match value {
        Value::Int(n) => {
            u64::try_from(n).map_err(|_| StoreError::InvalidReply("negative count".into()))
        }
        Value::ServerError(err) => Err(failure::from_server(err)),
        other => Err(invalid("an integer", &other)),
    }
}

/// A stored count read by `MGET`: nil is 0, else decimal digits.
fn stored(value: Value) -> Result<u64, StoreError> {
    match value {
        Value::Nil => Ok(0),
        Value::BulkString(bytes) => std::str::from_utf8(&bytes)
            .ok()
            .and_then(|text| text.parse().ok())
            .ok_or_else(|| StoreError::InvalidReply("a stored count is not a number".into())),
        Value::Int(n) => {
            u64::try_from(n).map_err(|_| StoreError::InvalidReply("negative count".into()))
        }
        other => Err(invalid("a count or nil", &other)),
    }
}

fn array(value: Value, len: usize, what: &str) -> Result<Vec<Value>, StoreError> {
    match value {
        Value::Array(items) if items.len() == len => Ok(items),
        Value::Array(items) => Err(StoreError::InvalidReply(format!(
            "expected {len} {what}, got {}",
            items.len()
        ))),
        Value::ServerError(err) => Err(failure::from_server(err)),
        other => Err(invalid("an array", &other)),
    }
}

/// The reply of the count or refund script: one count per counter.
pub(crate) fn counts(value: Value, n: usize) -> Result<Vec<u64>, StoreError> {
    array(value, n, "counts")?.into_iter().map(count).collect()
}

/// The reply of the reserve script: `[applied, count, ...]`.
pub(crate) fn reservation(value: Value, n: usize) -> Result<Reservation, StoreError> {
    let mut items = array(value, n + 1, "script results")?.into_iter();
    let applied = flag(items.next().unwrap_or(Value::Nil))?;
    let counts = items.map(count).collect::<Result<Vec<u64>, StoreError>>()?;
    Ok(Reservation { applied, counts })
}

/// The reply to `MGET`.
pub(crate) fn stored_counts(value: Value, n: usize) -> Result<Vec<u64>, StoreError> {
    array(value, n, "values")?.into_iter().map(stored).collect()
}

/// A script's 0 or 1.
pub(crate) fn flag(value: Value) -> Result<bool, StoreError> {
    match count(value)? {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(StoreError::InvalidReply("expected 0 or 1".into())),
    }
}

/// The reply of the claim script: 1 acquired, 0 held.
pub(crate) fn claim(value: Value) -> Result<Claim, StoreError> {
    Ok(if flag(value)? {
        Claim::Acquired
    } else {
        Claim::Held
    })
}

/// The reply of the delete script (`DEL`'s): whether the key existed.
pub(crate) fn deleted(value: Value) -> Result<bool, StoreError> {
    count(value).map(|n| n > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn error(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    #[test]
    fn an_unexpected_reply_is_named_by_its_type_never_by_its_content() {
        let secret = "limit:ask:203.0.113.9:20421";
        let cases = [
            (Value::Nil, "nil"),
            (Value::Int(7), "an integer"),
            (Value::BulkString(secret.into()), "a bulk string"),
            (Value::SimpleString(secret.into()), "a simple string"),
            (Value::Okay, "OK"),
            (
                Value::Array(vec![Value::BulkString(secret.into())]),
                "an array",
            ),
            (error(&format!("ERR {secret}")), "an error"),
            (Value::Double(1.5), "another type"),
        ];
        for (value, named) in cases {
            let message = invalid("a count", &value).to_string();
            assert!(
                message.ends_with(&format!("expected a count, got {named}")),
                "{message}"
            );
            assert!(!message.contains(secret), "{message}");
        }
    }

    #[test]
    fn reads_script_counts_and_refuses_the_wrong_shape() {
        let value = Value::Array(vec![Value::Int(3), Value::Int(1)]);
        assert_eq!(counts(value, 2).unwrap(), vec![3, 1]);
        let short = Value::Array(vec![Value::Int(3)]);
        assert_eq!(counts(short, 2).unwrap_err().kind(), "invalid-reply");
        let text = Value::Array(vec![Value::BulkString(b"x".to_vec())]);
        assert_eq!(counts(text, 1).unwrap_err().kind(), "invalid-reply");
        let negative = Value::Array(vec![Value::Int(-4)]);
        assert_eq!(counts(negative, 1).unwrap_err().kind(), "invalid-reply");
        assert_eq!(counts(Value::Nil, 1).unwrap_err().kind(), "invalid-reply");
        let loading = Value::Array(vec![error("LOADING later")]);
        assert_eq!(counts(loading, 1).unwrap_err().kind(), "busy");
        let wrong = error("WRONGTYPE Operation against a key holding the wrong kind of value");
        let err = counts(wrong, 1).unwrap_err();
        assert_eq!(err.kind(), "backend");
        assert!(!err.is_transient());
    }

    #[test]
    fn a_deadline_reply_is_told_apart_from_every_result() {
        assert!(is_deadline(&Value::SimpleString("DEADLINE".into())));
        assert!(!is_deadline(&Value::Okay));
        assert!(!is_deadline(&Value::BulkString(b"DEADLINE".to_vec())));
        assert!(!is_deadline(&Value::Array(vec![Value::Int(1)])));
        assert_eq!(
            counts(Value::SimpleString("DEADLINE".into()), 1)
                .unwrap_err()
                .kind(),
            "invalid-reply"
        );
    }

    #[test]
    fn reads_reservations() {
        let value = Value::Array(vec![Value::Int(1), Value::Int(2), Value::Int(5)]);
        assert_eq!(
            reservation(value, 2).unwrap(),
            Reservation {
                applied: true,
                counts: vec![2, 5]
            }
        );
        let value = Value::Array(vec![Value::Int(0), Value::Int(2)]);
        assert_eq!(
            reservation(value, 1).unwrap(),
            Reservation {
                applied: false,
                counts: vec![2]
            }
        );
        let bad = Value::Array(vec![Value::Int(7), Value::Int(2)]);
        assert_eq!(reservation(bad, 1).unwrap_err().kind(), "invalid-reply");
        assert_eq!(
            reservation(Value::Int(1), 1).unwrap_err().kind(),
            "invalid-reply"
        );
    }

    #[test]
    fn reads_plain_replies() {
        let mget = Value::Array(vec![Value::Nil, Value::BulkString(b"12".to_vec())]);
        assert_eq!(stored_counts(mget, 2).unwrap(), vec![0, 12]);
        let junk = Value::Array(vec![Value::BulkString(b"twelve".to_vec())]);
        assert_eq!(stored_counts(junk, 1).unwrap_err().kind(), "invalid-reply");
        assert_eq!(claim(Value::Int(1)).unwrap(), Claim::Acquired);
        assert_eq!(claim(Value::Int(0)).unwrap(), Claim::Held);
        assert!(claim(Value::Int(2)).is_err());
        assert!(claim(Value::Okay).is_err());
        assert!(flag(Value::Int(1)).unwrap());
        assert!(!flag(Value::Int(0)).unwrap());
        assert!(deleted(Value::Int(1)).unwrap());
        assert!(!deleted(Value::Int(0)).unwrap());
    }
}
