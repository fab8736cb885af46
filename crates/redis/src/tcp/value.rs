//! What the redis crate reads, as a [`Reply`].

use redis::{RedisError, Value};

use crate::reply::Reply;

/// A reply as the redis crate read it.
pub(crate) fn reply(value: Value) -> Reply {
    match value {
        Value::Nil => Reply::Nil,
        Value::Int(n) => Reply::Int(n),
        Value::BulkString(bytes) => Reply::Text(bytes),
        Value::SimpleString(text) => Reply::Text(text.into_bytes()),
        Value::Okay => Reply::Text(b"OK".to_vec()),
        Value::Double(n) => Reply::Double(n),
        Value::Array(items) => Reply::Array(items.into_iter().map(reply).collect()),
        Value::ServerError(err) => Reply::Error(text(err.code(), err.details())),
        _ => Reply::Other("another type"),
    }
}

/// The error reply `err` is, when the server answered one (the redis crate
/// turns a top-level error reply into an error).
pub(crate) fn error_reply(err: &RedisError) -> Option<Reply> {
    let code = err.code()?;
    Some(Reply::Error(text(code, err.detail())))
}

/// `CODE detail`, as the server sent it.
fn text(code: &str, detail: Option<&str>) -> String {
    match detail {
        Some(detail) => format!("{code} {detail}"),
        None => code.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parsed(resp: &str) -> Value {
        redis::parse_redis_value(resp.as_bytes()).unwrap()
    }

    #[test]
    fn every_resp_reply_has_its_reply() {
        assert_eq!(reply(parsed("$-1\r\n")), Reply::Nil);
        assert_eq!(reply(parsed(":-7\r\n")), Reply::Int(-7));
        assert_eq!(reply(parsed("$2\r\n12\r\n")), Reply::Text(b"12".to_vec()));
        assert_eq!(
            reply(parsed("+DEADLINE\r\n")),
            Reply::Text(b"DEADLINE".to_vec())
        );
        assert_eq!(reply(parsed("+OK\r\n")), Reply::Text(b"OK".to_vec()));
        assert_eq!(reply(parsed(",1.5\r\n")), Reply::Double(1.5));
        assert_eq!(
            reply(parsed("*2\r\n:1\r\n-LOADING later\r\n")),
            Reply::Array(vec![Reply::Int(1), Reply::Error("LOADING later".into())])
        );
        assert_eq!(reply(parsed("#t\r\n")), Reply::Other("another type"));
    }

    #[test]
    fn an_error_reply_keeps_its_code_and_text_and_nothing_else_is_one() {
        let Err(err) = parsed("-NOSCRIPT No matching script\r\n").extract_error() else {
            panic!("not an error");
        };
        assert_eq!(
            error_reply(&err),
            Some(Reply::Error("NOSCRIPT No matching script".into()))
        );
        let io = RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionReset));
        assert_eq!(error_reply(&io), None);
    }
}
