//! Redis replies into JSON, as Upstash writes them.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use redis::{ServerError, Value};
use serde_json::{Value as Json, json};

/// How strings are written: as text, or base64 (`Upstash-Encoding: base64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Strings as JSON strings (bytes that are not UTF-8 are replaced).
    Plain,
    /// Every string base64-encoded, except a top-level `OK` status.
    Base64,
}

/// One command's outcome: `{"result": …}`, or `{"error": text}` for an error reply.
pub(crate) fn entry(value: Value, encoding: Encoding) -> Json {
    match value {
        Value::ServerError(error) => json!({ "error": error_text(&error) }),
        value => json!({ "result": result(value, encoding) }),
    }
}

/// The JSON for a top-level reply. `@upstash/redis` leaves a top-level `"OK"`
/// as it is and base64-decodes every other string, nested ones included.
pub(crate) fn result(value: Value, encoding: Encoding) -> Json {
    match value {
        Value::Okay => Json::from("OK"),
        Value::SimpleString(s) if s == "OK" => Json::from("OK"),
        value => nested(value, encoding),
    }
}

/// An error reply's text as Redis sent it, e.g. `ERR unknown command 'x'`.
pub(crate) fn error_text(error: &ServerError) -> String {
    match error.details() {
        Some(detail) => format!("{} {detail}", error.code()),
        None => error.code().to_owned(),
    }
}

fn nested(value: Value, encoding: Encoding) -> Json {
    match value {
        Value::Nil => Json::Null,
        Value::Int(n) => Json::from(n),
        Value::BulkString(bytes) => string(&bytes, encoding),
        Value::SimpleString(s) => string(s.as_bytes(), encoding),
        Value::Okay => string(b"OK", encoding),
        Value::Array(items) | Value::Set(items) => array(items, encoding),
        Value::Push { data, .. } => array(data, encoding),
        Value::Map(pairs) => Json::Array(
            pairs
                .into_iter()
                .flat_map(|(k, v)| [nested(k, encoding), nested(v, encoding)])
                .collect(),
        ),
        Value::Attribute { data, .. } => nested(*data, encoding),
        Value::Double(d) => serde_json::Number::from_f64(d)
            .map_or_else(|| string(d.to_string().as_bytes(), encoding), Json::Number),
        Value::Boolean(b) => Json::from(i64::from(b)),
        Value::VerbatimString { text, .. } => string(text.as_bytes(), encoding),
        Value::BigNumber(digits) => string(&digits, encoding),
        Value::ServerError(error) => json!({ "error": error_text(&error) }),
        // RESP3 shapes added later; the proxy speaks RESP2, which has none.
        _ => Json::Null,
    }
}

fn array(items: Vec<Value>, encoding: Encoding) -> Json {
    Json::Array(items.into_iter().map(|v| nested(v, encoding)).collect())
}

fn string(bytes: &[u8], encoding: Encoding) -> Json {
    match encoding {
        Encoding::Plain => Json::from(String::from_utf8_lossy(bytes).into_owned()),
        Encoding::Base64 => Json::from(STANDARD.encode(bytes)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn plain_replies_map_as_upstash_does() {
        let reply = Value::Array(vec![
            Value::BulkString(b"v".to_vec()),
            Value::Int(3),
            Value::Nil,
            Value::Array(vec![Value::SimpleString("PONG".into())]),
        ]);
        assert_eq!(
            result(reply, Encoding::Plain),
            json!(["v", 3, null, ["PONG"]])
        );
        assert_eq!(result(Value::Okay, Encoding::Plain), json!("OK"));
    }

    #[test]
    fn base64_encodes_every_string_but_a_top_level_ok() {
        assert_eq!(result(Value::Okay, Encoding::Base64), json!("OK"));
        assert_eq!(
            result(Value::SimpleString("OK".into()), Encoding::Base64),
            json!("OK")
        );
        assert_eq!(
            result(Value::BulkString(b"hi".to_vec()), Encoding::Base64),
            json!("aGk=")
        );
        let nested = Value::Array(vec![
            Value::Okay,
            Value::Array(vec![Value::BulkString(b"hi".to_vec()), Value::Int(1)]),
        ]);
        assert_eq!(
            result(nested, Encoding::Base64),
            json!(["T0s=", ["aGk=", 1]])
        );
    }
}
