//! The JSON bodies of commands: `["EVALSHA", sha, numkeys, key..., arg...]`.
//!
//! Every argument is a JSON string (numbers too, as their decimal text), so
//! no server reads a count through a floating-point number.

use crate::call::{Call, Size};

/// The arguments of a script call after the script's name: `numkeys`, the
/// keys and the arguments, closed. Built once per call and shared by the
/// `EVALSHA` request and, after `NOSCRIPT`, the `EVAL` one.
#[derive(Debug)]
pub(crate) struct Tail(Vec<u8>);

impl Tail {
    /// A tail of a call about `size` large, room reserved (see [`room`]).
    pub(crate) fn new(size: Size) -> Tail {
        let mut tail = Tail(Vec::with_capacity(room(size)));
        tail.number(size.keys as u64);
        tail
    }

    /// Appends a string argument (a key, a token).
    pub(crate) fn string(&mut self, text: &str) {
        self.0.push(b',');
        string(&mut self.0, text);
    }

    /// Appends a number, as a JSON string of its digits.
    pub(crate) fn number(&mut self, n: u64) {
        self.0.extend_from_slice(b",\"");
        self.0
            .extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
        self.0.push(b'"');
    }

    fn body(&self, head: &[u8], name: &str) -> Vec<u8> {
        let mut body = Vec::with_capacity(head.len() + name.len() + self.0.len() + 8);
        body.extend_from_slice(head);
        string(&mut body, name);
        body.extend_from_slice(&self.0);
        body.push(b']');
        body
    }

    /// `["EVALSHA", sha, ...]`.
    pub(crate) fn evalsha(&self, sha: &str) -> Vec<u8> {
        self.body(b"[\"EVALSHA\",", sha)
    }

    /// `["EVAL", script, ...]`.
    pub(crate) fn eval(&self, script: &str) -> Vec<u8> {
        self.body(b"[\"EVAL\",", script)
    }
}

impl Call for Tail {
    fn key(&mut self, key: &str) {
        self.string(key);
    }

    fn number(&mut self, value: u64) {
        Tail::number(self, value);
    }

    fn text(&mut self, value: &str) {
        self.string(value);
    }
}

/// The room to reserve for a call of `size`, in bytes: a size hint only
/// (see [`Size`]; mutation testing skips this function).
fn room(size: Size) -> usize {
    (size.keys + size.args) * 24 + size.text + 32
}

/// `["MGET", key...]`.
pub(crate) fn mget(keys: &[&str]) -> Vec<u8> {
    let text = keys.iter().map(|key| key.len()).sum();
    let mut body = Vec::with_capacity(room(Size {
        keys: keys.len(),
        args: 0,
        text,
    }));
    body.extend_from_slice(b"[\"MGET\"");
    for key in keys {
        body.push(b',');
        string(&mut body, key);
    }
    body.push(b']');
    body
}

/// Appends `text` as a JSON string: quotes, backslashes and control
/// characters escaped, everything else as its UTF-8 bytes.
fn string(out: &mut Vec<u8>, text: &str) {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    out.push(b'"');
    let bytes = text.as_bytes();
    let mut start = 0;
    for (i, &byte) in bytes.iter().enumerate() {
        let escape: &[u8] = match byte {
            b'"' => b"\\\"",
            b'\\' => b"\\\\",
            // Every control character as \u00XX (\n, \r and \t too: the
            // same string to any JSON reader).
            0..=0x1f => b"",
            _ => continue,
        };
        out.extend_from_slice(&bytes[start..i]);
        if escape.is_empty() {
            out.extend_from_slice(b"\\u00");
            out.push(HEX[usize::from(byte >> 4)]);
            out.push(HEX[usize::from(byte & 0xf)]);
        } else {
            out.extend_from_slice(escape);
        }
        start = i + 1;
    }
    out.extend_from_slice(&bytes[start..]);
    out.push(b'"');
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn parsed(body: &[u8]) -> serde_json::Value {
        serde_json::from_slice(body).unwrap()
    }

    #[test]
    fn a_script_call_is_one_json_array_of_strings() {
        let mut tail = Tail::new(Size {
            keys: 2,
            args: 0,
            text: 0,
        });
        tail.string("limit:a:1");
        tail.string("limit:b:1");
        tail.number(1_781_524_830_020);
        tail.number(9_007_199_254_740_992);
        assert_eq!(
            parsed(&tail.evalsha("abc")),
            serde_json::json!([
                "EVALSHA",
                "abc",
                "2",
                "limit:a:1",
                "limit:b:1",
                "1781524830020",
                "9007199254740992"
            ])
        );
        let eval = parsed(&tail.eval("return 1"));
        assert_eq!(
            (&eval[0], &eval[1], &eval[2]),
            (&"EVAL".into(), &"return 1".into(), &"2".into())
        );
        assert_eq!(parsed(&mget(&["k"])), serde_json::json!(["MGET", "k"]));
    }

    #[test]
    fn every_string_round_trips_through_json() {
        let nasty = "a\"b\\c\nd\r\te\u{0}\u{1f}\u{7f}é😀\u{2028}:%";
        let mut tail = Tail::new(Size {
            keys: 1,
            args: 0,
            text: 0,
        });
        tail.string(nasty);
        tail.string("");
        let value = parsed(&tail.eval(crate::scripts::CHECK));
        assert_eq!(value[1], crate::scripts::CHECK);
        assert_eq!(value[3], nasty);
        assert_eq!(value[4], "");
    }
}
