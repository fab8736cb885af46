//! Redis replies into JSON, as Upstash writes them, straight into the
//! response body.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use redis::{ServerError, Value};

/// How strings are written: as text, or base64 (`Upstash-Encoding: base64`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Encoding {
    /// Strings as JSON strings (bytes that are not UTF-8 are replaced).
    Plain,
    /// Every string base64-encoded, except a top-level `OK` status.
    Base64,
}

/// Writes one command's outcome: `{"result": …}`, or `{"error": text}` for
/// an error reply.
pub(crate) fn entry(out: &mut Vec<u8>, value: &Value, encoding: Encoding) {
    match value {
        Value::ServerError(error) => error_entry(out, &error_text(error)),
        value => result_entry(out, value, encoding),
    }
}

/// Writes `{"result": …}` for a top-level reply. `@upstash/redis` leaves a
/// top-level `"OK"` as it is and base64-decodes every other string, nested
/// ones included.
pub(crate) fn result_entry(out: &mut Vec<u8>, value: &Value, encoding: Encoding) {
    out.extend_from_slice(b"{\"result\":");
    match value {
        Value::Okay => out.extend_from_slice(b"\"OK\""),
        Value::SimpleString(s) if s == "OK" => out.extend_from_slice(b"\"OK\""),
        value => nested(out, value, encoding),
    }
    out.push(b'}');
}

/// Writes `{"error": text}`.
pub(crate) fn error_entry(out: &mut Vec<u8>, text: &str) {
    out.extend_from_slice(b"{\"error\":");
    escaped(out, text);
    out.push(b'}');
}

/// An error reply's text as Redis sent it, e.g. `ERR unknown command 'x'`.
pub(crate) fn error_text(error: &ServerError) -> String {
    match error.details() {
        Some(detail) => format!("{} {detail}", error.code()),
        None => error.code().to_owned(),
    }
}

fn nested(out: &mut Vec<u8>, value: &Value, encoding: Encoding) {
    match value {
        Value::Nil => out.extend_from_slice(b"null"),
        Value::Int(n) => integer(out, *n),
        Value::BulkString(bytes) => string(out, bytes, encoding),
        Value::SimpleString(s) => string(out, s.as_bytes(), encoding),
        Value::Okay => string(out, b"OK", encoding),
        Value::Array(items) | Value::Set(items) => array(out, items, encoding),
        Value::Push { data, .. } => array(out, data, encoding),
        Value::Map(pairs) => {
            out.push(b'[');
            for (i, (k, v)) in pairs.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                nested(out, k, encoding);
                out.push(b',');
                nested(out, v, encoding);
            }
            out.push(b']');
        }
        Value::Attribute { data, .. } => nested(out, data, encoding),
        Value::Double(d) => match serde_json::Number::from_f64(*d) {
            Some(n) => out.extend_from_slice(n.to_string().as_bytes()),
            None => string(out, d.to_string().as_bytes(), encoding),
        },
        Value::Boolean(b) => integer(out, i64::from(*b)),
        Value::VerbatimString { text, .. } => string(out, text.as_bytes(), encoding),
        Value::BigNumber(digits) => string(out, digits, encoding),
        Value::ServerError(error) => error_entry(out, &error_text(error)),
        // RESP3 shapes added later; the proxy speaks RESP2, which has none.
        _ => out.extend_from_slice(b"null"),
    }
}

fn array(out: &mut Vec<u8>, items: &[Value], encoding: Encoding) {
    out.push(b'[');
    for (i, item) in items.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        nested(out, item, encoding);
    }
    out.push(b']');
}

fn string(out: &mut Vec<u8>, bytes: &[u8], encoding: Encoding) {
    match encoding {
        Encoding::Plain => escaped(out, &String::from_utf8_lossy(bytes)),
        Encoding::Base64 => {
            // Base64 needs no escaping.
            out.push(b'"');
            out.extend_from_slice(STANDARD.encode(bytes).as_bytes());
            out.push(b'"');
        }
    }
}

/// Writes `n` in decimal.
fn integer(out: &mut Vec<u8>, n: i64) {
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut rest = n.unsigned_abs();
    loop {
        at -= 1;
        // A single decimal digit: the cast cannot truncate.
        digits[at] = b'0' + (rest % 10) as u8;
        rest /= 10;
        if rest == 0 {
            break;
        }
    }
    if n < 0 {
        out.push(b'-');
    }
    out.extend_from_slice(&digits[at..]);
}

/// Writes `text` as a JSON string, escaped as serde_json escapes it:
/// quotes, backslashes and control characters, everything else as its
/// UTF-8 bytes.
fn escaped(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let short: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            b'\n' => b"\\n",
            b'\r' => b"\\r",
            b'\t' => b"\\t",
            0x08 => b"\\b",
            0x0c => b"\\f",
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if short.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(short);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::{Value as Json, json};

    fn written(write: impl FnOnce(&mut Vec<u8>)) -> Json {
        let mut out = Vec::new();
        write(&mut out);
        serde_json::from_slice(&out)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&out)))
    }

    fn result(value: Value, encoding: Encoding) -> Json {
        written(|out| result_entry(out, &value, encoding))["result"].clone()
    }

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
        assert_eq!(result(Value::Array(vec![]), Encoding::Plain), json!([]));
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

    /// Over RESP3 (`?protocol=resp3`) Redis answers in shapes RESP2 lacks:
    /// each is written as the RESP2 reply of the same command is.
    #[test]
    fn resp3_replies_map_as_their_resp2_forms() {
        let map = Value::Map(vec![
            (Value::BulkString(b"a".to_vec()), Value::Int(1)),
            (Value::BulkString(b"b".to_vec()), Value::Nil),
        ]);
        assert_eq!(result(map, Encoding::Plain), json!(["a", 1, "b", null]));
        let one = Value::Map(vec![(Value::SimpleString("k".into()), Value::Int(2))]);
        assert_eq!(result(one, Encoding::Plain), json!(["k", 2]));
        assert_eq!(result(Value::Map(vec![]), Encoding::Plain), json!([]));
        let push = Value::Push {
            kind: redis::PushKind::Message,
            data: vec![Value::BulkString(b"m".to_vec()), Value::Int(3)],
        };
        assert_eq!(result(push, Encoding::Plain), json!(["m", 3]));
        let attribute = Value::Attribute {
            data: Box::new(Value::Int(4)),
            attributes: vec![(Value::SimpleString("ttl".into()), Value::Int(9))],
        };
        assert_eq!(result(attribute, Encoding::Plain), json!(4));
        assert_eq!(result(Value::Double(1.5), Encoding::Plain), json!(1.5));
        assert_eq!(
            result(Value::Double(f64::INFINITY), Encoding::Plain),
            json!("inf")
        );
        assert_eq!(result(Value::Boolean(true), Encoding::Plain), json!(1));
        assert_eq!(result(Value::Boolean(false), Encoding::Plain), json!(0));
        let verbatim = Value::VerbatimString {
            format: redis::VerbatimFormat::Text,
            text: "hi".into(),
        };
        assert_eq!(result(verbatim, Encoding::Base64), json!("aGk="));
        let big = Value::BigNumber(b"123456789012345678901234567890".to_vec());
        assert_eq!(
            result(big, Encoding::Plain),
            json!("123456789012345678901234567890")
        );
    }

    #[test]
    fn integers_are_written_in_full() {
        for n in [0, 7, -7, 10, 1_781_524_830_020, i64::MAX, i64::MIN] {
            assert_eq!(result(Value::Int(n), Encoding::Plain), json!(n), "{n}");
        }
    }

    #[test]
    fn strings_are_escaped_byte_for_byte_as_serde_json_escapes_them() {
        let nasty = "a\"b\\c\nd\r\te\u{0}\u{8}\u{c}\u{1f}\u{7f}é😀\u{2028}:%";
        let mut out = Vec::new();
        escaped(&mut out, nasty);
        assert_eq!(
            String::from_utf8_lossy(&out),
            serde_json::to_string(nasty).unwrap_or_default()
        );
        let text = result(Value::BulkString(b"\xff\"x".to_vec()), Encoding::Plain);
        assert_eq!(text, json!("\u{fffd}\"x"));
    }

    #[test]
    fn errors_are_entries_of_their_own_at_any_depth() {
        let error = || match redis::parse_redis_value(b"-ERR no\r\n") {
            Ok(error @ Value::ServerError(_)) => error,
            other => panic!("{other:?}"),
        };
        assert_eq!(
            written(|out| entry(out, &error(), Encoding::Plain)),
            json!({"error": "ERR no"})
        );
        assert_eq!(
            result(Value::Array(vec![error(), Value::Int(1)]), Encoding::Plain),
            json!([{"error": "ERR no"}, 1])
        );
    }
}
