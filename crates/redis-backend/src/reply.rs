//! Reading Redis replies into counts, without trusting their shape.

use std::time::Duration;

use redis::Value;
use tollgate_core::{Expiry, Reservation, StoreError};

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

/// A stored count read by `GET`/`MGET`: nil is 0, else decimal digits.
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

/// The replies to `MULTI`, `n` × (`INCR`, `PEXPIRE`), `EXEC`: the new counts.
pub(crate) fn increments(replies: Vec<Value>, n: usize) -> Result<Vec<u64>, StoreError> {
    let expected = 2 * n + 2;
    if replies.len() != expected {
        return Err(StoreError::InvalidReply(format!(
            "expected {expected} replies, got {}",
            replies.len()
        )));
    }
    let mut replies = replies;
    let exec = replies.pop().unwrap_or(Value::Nil);
    // A command refused while queued (LOADING, OOM, ...) aborts the
    // transaction; its own error says why better than EXECABORT does.
    if let Some(Value::ServerError(err)) = replies
        .into_iter()
        .find(|v| matches!(v, Value::ServerError(_)))
    {
        return Err(failure::from_server(err));
    }
    let results = array(exec, 2 * n, "transaction results")?;
    let mut counts = Vec::with_capacity(n);
    let mut results = results.into_iter();
    while let (Some(incr), Some(pexpire)) = (results.next(), results.next()) {
        let value = count(incr)?;
        match pexpire {
            Value::Int(1) => {}
            Value::ServerError(err) => return Err(failure::from_server(err)),
            other => return Err(invalid("1 from PEXPIRE", &other)),
        }
        if value == 0 {
            return Err(StoreError::InvalidReply(
                "an incremented counter reads 0".into(),
            ));
        }
        counts.push(value);
    }
    Ok(counts)
}

/// The reply of the reserve script: `[applied, count, ...]`.
pub(crate) fn reservation(value: Value, n: usize) -> Result<Reservation, StoreError> {
    let mut items = array(value, n + 1, "script results")?.into_iter();
    let applied = match items.next().map(count).transpose()? {
        Some(1) => true,
        Some(0) => false,
        _ => {
            return Err(StoreError::InvalidReply(
                "expected 0 or 1 for applied".into(),
            ));
        }
    };
    let counts = items.map(count).collect::<Result<Vec<u64>, StoreError>>()?;
    Ok(Reservation { applied, counts })
}

/// The reply to `MGET`.
pub(crate) fn counts(value: Value, n: usize) -> Result<Vec<u64>, StoreError> {
    array(value, n, "values")?.into_iter().map(stored).collect()
}

/// The reply to `SET key 1 NX PX ms`: whether it was stored.
pub(crate) fn stored_if_absent(value: Value) -> Result<bool, StoreError> {
    match value {
        Value::Okay => Ok(true),
        Value::SimpleString(s) if s == "OK" => Ok(true),
        Value::Nil => Ok(false),
        other => Err(invalid("OK or nil", &other)),
    }
}

/// The reply to `DEL key`: whether it existed.
pub(crate) fn deleted(value: Value) -> Result<bool, StoreError> {
    count(value).map(|n| n > 0)
}

/// The reply to `PTTL key`.
pub(crate) fn expiry(value: Value) -> Result<Expiry, StoreError> {
    match value {
        Value::Int(-2) => Ok(Expiry::Absent),
        Value::Int(-1) => Ok(Expiry::Never),
        Value::Int(ms) if ms >= 0 => Ok(Expiry::In(Duration::from_millis(ms.unsigned_abs()))),
        other => Err(invalid("a PTTL", &other)),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    fn error(text: &str) -> Value {
        redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap()
    }

    fn queued(n: usize) -> Vec<Value> {
        let mut replies = vec![Value::Okay];
        replies.extend((0..2 * n).map(|_| Value::SimpleString("QUEUED".into())));
        replies
    }

    #[test]
    fn reads_the_counts_of_a_transaction() {
        let mut replies = queued(2);
        replies.push(Value::Array(vec![
            Value::Int(3),
            Value::Int(1),
            Value::Int(1),
            Value::Int(1),
        ]));
        assert_eq!(increments(replies, 2).unwrap(), vec![3, 1]);
    }

    #[test]
    fn refuses_transactions_of_the_wrong_shape() {
        let mut short = queued(2);
        short.push(Value::Array(vec![Value::Int(3), Value::Int(1)]));
        assert_eq!(increments(short, 2).unwrap_err().kind(), "invalid-reply");
        assert_eq!(
            increments(vec![Value::Okay], 2).unwrap_err().kind(),
            "invalid-reply"
        );
        let mut text = queued(1);
        text.push(Value::Array(vec![
            Value::BulkString(b"x".to_vec()),
            Value::Int(1),
        ]));
        assert_eq!(increments(text, 1).unwrap_err().kind(), "invalid-reply");
        let mut negative = queued(1);
        negative.push(Value::Array(vec![Value::Int(-4), Value::Int(1)]));
        assert_eq!(increments(negative, 1).unwrap_err().kind(), "invalid-reply");
        let mut nil = queued(1);
        nil.push(Value::Nil);
        assert_eq!(increments(nil, 1).unwrap_err().kind(), "invalid-reply");
    }

    #[test]
    fn a_loading_server_is_busy_and_a_wrong_type_is_a_backend_failure() {
        let mut loading = queued(1);
        loading[1] = error("LOADING Redis is loading the dataset in memory");
        loading.push(error(
            "EXECABORT Transaction discarded because of previous errors.",
        ));
        assert_eq!(increments(loading, 1).unwrap_err().kind(), "busy");
        let mut wrong = queued(1);
        wrong.push(Value::Array(vec![
            error("WRONGTYPE Operation against a key holding the wrong kind of value"),
            Value::Int(1),
        ]));
        let err = increments(wrong, 1).unwrap_err();
        assert_eq!(err.kind(), "backend");
        assert!(!err.is_transient());
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
        assert_eq!(counts(mget, 2).unwrap(), vec![0, 12]);
        let junk = Value::Array(vec![Value::BulkString(b"twelve".to_vec())]);
        assert_eq!(counts(junk, 1).unwrap_err().kind(), "invalid-reply");
        assert!(stored_if_absent(Value::Okay).unwrap());
        assert!(!stored_if_absent(Value::Nil).unwrap());
        assert!(stored_if_absent(Value::Int(1)).is_err());
        assert!(deleted(Value::Int(1)).unwrap());
        assert!(!deleted(Value::Int(0)).unwrap());
        assert_eq!(expiry(Value::Int(-2)).unwrap(), Expiry::Absent);
        assert_eq!(expiry(Value::Int(-1)).unwrap(), Expiry::Never);
        assert_eq!(
            expiry(Value::Int(1500)).unwrap(),
            Expiry::In(Duration::from_millis(1500))
        );
        assert!(expiry(Value::Int(-3)).is_err());
    }
}
