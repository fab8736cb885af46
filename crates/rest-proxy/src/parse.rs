//! Request bodies into commands, in one pass: each JSON string or number is
//! appended to its command's buffer as it is read, with no JSON tree in
//! between. A body that does not parse so is read again the slow way
//! ([`serde_json::Value`], then [`Command::from_json`]), which says exactly
//! what is wrong with it.

use std::fmt;

use redis::Cmd;
use serde::Deserializer;
use serde::de::{DeserializeSeed, SeqAccess, Visitor};
use serde_json::Value as Json;

use crate::command::{Command, NOT_A_COMMAND, NOT_AN_ARGUMENT, ShapeError};

/// Why a body holds no command: the text of its 400.
#[derive(Debug)]
pub(crate) enum BodyError {
    /// It is not JSON.
    Json(serde_json::Error),
    /// It is JSON of another shape.
    Shape(ShapeError),
}

impl fmt::Display for BodyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BodyError::Json(e) => write!(f, "ERR invalid JSON body: {e}"),
            BodyError::Shape(e) => write!(f, "{e}"),
        }
    }
}

/// The command of a `POST /` body: a JSON array of strings and numbers.
pub(crate) fn command(body: &[u8]) -> Result<Command, BodyError> {
    match fast(body, OneCommand { room: body.len() }).and_then(|cmd| Command::new(cmd).ok()) {
        Some(command) => Ok(command),
        None => slow(body, Command::from_json),
    }
}

/// The commands of a `/pipeline` or `/multi-exec` body: a non-empty JSON
/// array of commands.
pub(crate) fn list(body: &[u8]) -> Result<Vec<Command>, BodyError> {
    let fast = fast(body, CommandList)
        .filter(|cmds| !cmds.is_empty())
        .and_then(|cmds| cmds.into_iter().map(|c| Command::new(c).ok()).collect());
    match fast {
        Some(commands) => Ok(commands),
        None => slow(body, Command::list_from_json),
    }
}

/// What `seed` reads from the whole of `body`, if it reads it.
fn fast<'de, S: DeserializeSeed<'de>>(body: &'de [u8], seed: S) -> Option<S::Value> {
    let mut json = serde_json::Deserializer::from_slice(body);
    let value = seed.deserialize(&mut json).ok()?;
    json.end().ok()?;
    Some(value)
}

/// The body read as a JSON tree, then given its shape by `shape`.
fn slow<T>(body: &[u8], shape: fn(&Json) -> Result<T, ShapeError>) -> Result<T, BodyError> {
    let json = serde_json::from_slice(body).map_err(BodyError::Json)?;
    shape(&json).map_err(BodyError::Shape)
}

/// Reads one command: an array of strings and numbers, into a buffer of
/// `room` bytes to start with (the body's length holds every string of a
/// single command: escapes only lengthen them).
struct OneCommand {
    room: usize,
}

/// The arguments room is made for in a command's buffer at first.
const ARGS: usize = 16;

/// Reads a pipeline's commands: an array of commands.
struct CommandList;

impl<'de> DeserializeSeed<'de> for CommandList {
    type Value = Vec<Cmd>;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Vec<Cmd>, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> DeserializeSeed<'de> for OneCommand {
    type Value = Cmd;

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<Cmd, D::Error> {
        deserializer.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for OneCommand {
    type Value = Cmd;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{NOT_A_COMMAND}")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Cmd, A::Error> {
        let mut cmd = Cmd::with_capacity(ARGS, self.room);
        while items.next_element_seed(Append(&mut cmd))?.is_some() {}
        Ok(cmd)
    }
}

impl<'de> Visitor<'de> for CommandList {
    type Value = Vec<Cmd>;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "a pipeline is a JSON array of commands")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut items: A) -> Result<Vec<Cmd>, A::Error> {
        let mut cmds = Vec::new();
        while let Some(cmd) = items.next_element_seed(OneCommand { room: 0 })? {
            cmds.push(cmd);
        }
        Ok(cmds)
    }
}

/// Appends one argument, a JSON string or number, to a command.
struct Append<'a>(&'a mut Cmd);

impl<'de> DeserializeSeed<'de> for Append<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Append<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{NOT_AN_ARGUMENT}")
    }

    fn visit_str<E: serde::de::Error>(self, text: &str) -> Result<(), E> {
        self.0.arg(text.as_bytes());
        Ok(())
    }

    // Numbers in decimal, as a JSON tree writes them (both ways give the
    // same arguments).
    fn visit_u64<E: serde::de::Error>(self, n: u64) -> Result<(), E> {
        self.0.arg(n);
        Ok(())
    }

    fn visit_i64<E: serde::de::Error>(self, n: i64) -> Result<(), E> {
        self.0.arg(n);
        Ok(())
    }

    fn visit_f64<E: serde::de::Error>(self, n: f64) -> Result<(), E> {
        let n = serde_json::Number::from_f64(n).ok_or_else(|| E::custom(NOT_AN_ARGUMENT))?;
        self.0.arg(n.to_string().as_bytes());
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::command::tests::args;

    /// What the slow way reads from `body`, as text or the error's text.
    fn slowly(body: &str) -> Result<Vec<String>, String> {
        let json: Json = serde_json::from_str(body).map_err(|e| BodyError::Json(e).to_string())?;
        Command::from_json(&json)
            .map(|c| args(&c))
            .map_err(|e| e.to_string())
    }

    #[test]
    fn one_pass_reads_what_the_json_tree_reads() {
        for body in [
            r#"["EVALSHA","abc","2","limit:a","limit:b","1781524830020"]"#,
            r#" [ "set" , "k\"\\\n\u00e9\ud83d\ude00" , 10, -3, 1.5, 1e3, 0.1, -0.0,
                18446744073709551615, 18446744073709551616, -9223372036854775808 ] "#,
            r#"["get",""]"#,
        ] {
            let fast = fast(body.as_bytes(), OneCommand { room: 0 })
                .map(|cmd| args(&Command::new(cmd).unwrap_or_else(|e| panic!("{body}: {e}"))));
            assert_eq!(fast.ok_or_else(String::new), slowly(body), "{body}");
            let read = command(body.as_bytes()).map(|c| args(&c));
            assert_eq!(read.map_err(|e| e.to_string()), slowly(body), "{body}");
        }
    }

    #[test]
    fn bodies_the_one_pass_refuses_get_the_json_trees_error() {
        for body in [
            r#"["get""#,
            r#"{"get": "k"}"#,
            r#""get""#,
            "[]",
            r#"["set", "k", true]"#,
            r#"["set", "k", null]"#,
            r#"["set", ["k"]]"#,
            r#"["set", {"k": 1}]"#,
            r#"["set", "k"] x"#,
            r#"["set", "\ud800"]"#,
            "",
        ] {
            let error = command(body.as_bytes()).map(|c| args(&c));
            let want = slowly(body);
            assert!(want.is_err(), "{body}");
            assert_eq!(error.map_err(|e| e.to_string()), want, "{body}");
        }
    }

    #[test]
    fn lists_are_read_in_one_pass_or_refused_as_the_json_tree_refuses_them() {
        let read = list(br#"[["set","k",1],["get","k"]]"#)
            .map(|cmds| cmds.iter().map(args).collect::<Vec<_>>())
            .map_err(|e| e.to_string());
        assert_eq!(
            read,
            Ok(vec![vec!["set", "k", "1"], vec!["get", "k"]]
                .into_iter()
                .map(|c| c.into_iter().map(String::from).collect())
                .collect())
        );
        for (body, want) in [
            ("[]", "ERR empty pipeline"),
            ("{}", "ERR a pipeline is a JSON array of commands"),
            (
                r#"[["get","k"],"get"]"#,
                "ERR a command is a JSON array of strings and numbers",
            ),
            (r#"[["get","k"],[]]"#, "ERR empty command"),
            (
                r#"[["get",true]]"#,
                "ERR command arguments must be JSON strings or numbers",
            ),
        ] {
            let error = list(body.as_bytes()).map(|_| ()).map_err(|e| e.to_string());
            assert_eq!(error, Err(want.to_owned()), "{body}");
        }
        let error = list(b"[[\"get\"]").map(|_| ()).map_err(|e| e.to_string());
        assert!(error.is_err_and(|e| e.starts_with("ERR invalid JSON body: ")));
    }
}
