//! Commands as callers send them: JSON arrays, or URL paths, into Redis
//! commands. A [`Command`] holds its arguments in one [`redis::Cmd`] (one
//! buffer, whatever the number of arguments), which is what is sent.

use std::fmt;

use percent_encoding::percent_decode_str;
use redis::{Arg, Cmd};
use serde_json::Value as Json;

/// One Redis command: its name and arguments, as bytes.
#[derive(Clone)]
pub(crate) struct Command {
    cmd: Cmd,
}

/// Why a request does not hold a command: the text for its 400.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("ERR {0}")]
pub(crate) struct ShapeError(&'static str);

/// The 400 for a command that is not a JSON array of strings and numbers.
pub(crate) const NOT_A_COMMAND: ShapeError =
    ShapeError("a command is a JSON array of strings and numbers");

/// The 400 for a command argument that is neither a string nor a number.
pub(crate) const NOT_AN_ARGUMENT: ShapeError =
    ShapeError("command arguments must be JSON strings or numbers");

impl Command {
    /// A command from its arguments, the first being its name.
    pub(crate) fn new(cmd: Cmd) -> Result<Command, ShapeError> {
        if cmd.args_iter().len() == 0 {
            return Err(ShapeError("empty command"));
        }
        Ok(Command { cmd })
    }

    /// A command from a JSON array of strings and numbers.
    pub(crate) fn from_json(value: &Json) -> Result<Command, ShapeError> {
        let Json::Array(items) = value else {
            return Err(NOT_A_COMMAND);
        };
        let mut cmd = Cmd::new();
        for item in items {
            match item {
                Json::String(s) => cmd.arg(s.as_bytes()),
                Json::Number(n) => cmd.arg(n.to_string().as_bytes()),
                _ => return Err(NOT_AN_ARGUMENT),
            };
        }
        Command::new(cmd)
    }

    /// The commands of a pipeline or transaction: a JSON array of commands.
    pub(crate) fn list_from_json(value: &Json) -> Result<Vec<Command>, ShapeError> {
        let Json::Array(items) = value else {
            return Err(ShapeError("a pipeline is a JSON array of commands"));
        };
        if items.is_empty() {
            return Err(ShapeError("empty pipeline"));
        }
        items.iter().map(Command::from_json).collect()
    }

    /// A command from a URL path (`/set/key/value`, each segment
    /// percent-decoded), then a non-empty body as the next argument, then
    /// the query's pairs but `_token` (`POST /set/key?EX=10` with body `v` is
    /// `SET key v EX 10`), as Upstash documents it.
    pub(crate) fn from_path(
        path: &str,
        query: Option<&str>,
        body: &[u8],
    ) -> Result<Command, ShapeError> {
        let path = path.strip_prefix('/').unwrap_or(path);
        let mut cmd = Cmd::new();
        if !path.is_empty() {
            for segment in path.split('/') {
                cmd.arg(decode(segment).as_slice());
            }
        }
        if !body.is_empty() {
            cmd.arg(body);
        }
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key == "_token" {
                continue;
            }
            cmd.arg(decode(key).as_slice());
            if !value.is_empty() {
                cmd.arg(decode(value).as_slice());
            }
        }
        Command::new(cmd)
    }

    /// Whether the command's name is `name` (an upper-case name; the
    /// command's in any case).
    pub(crate) fn is(&self, name: &str) -> bool {
        self.arg(0)
            .is_some_and(|own| own.eq_ignore_ascii_case(name.as_bytes()))
    }

    /// The command's name in upper case (lossy for non-UTF-8 names), for
    /// error texts and logs.
    pub(crate) fn name(&self) -> String {
        self.arg(0)
            .map(|name| String::from_utf8_lossy(name).to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// Argument `index`: 0 is the name, 1 the first argument after it.
    pub(crate) fn arg(&self, index: usize) -> Option<&[u8]> {
        self.all().nth(index)
    }

    /// How many arguments the command has, its name included.
    pub(crate) fn len(&self) -> usize {
        self.cmd.args_iter().len()
    }

    /// The arguments after the name.
    pub(crate) fn args(&self) -> impl Iterator<Item = &[u8]> {
        self.all().skip(1)
    }

    /// Whether this command runs a script (`EVAL`, `EVALSHA` and their
    /// read-only forms).
    pub(crate) fn is_script(&self) -> bool {
        ["EVAL", "EVAL_RO", "EVALSHA", "EVALSHA_RO"]
            .iter()
            .any(|name| self.is(name))
    }

    /// A copy with argument `index` (0 is the name) replaced by `value`.
    pub(crate) fn with_arg(&self, index: usize, value: &[u8]) -> Command {
        let mut cmd = Cmd::new();
        for (i, arg) in self.all().enumerate() {
            cmd.arg(if i == index { value } else { arg });
        }
        Command { cmd }
    }

    /// The command for the redis client.
    pub(crate) fn cmd(&self) -> &Cmd {
        &self.cmd
    }

    fn all(&self) -> impl Iterator<Item = &[u8]> {
        // The proxy never adds a cursor argument.
        self.cmd.args_iter().filter_map(|arg| match arg {
            Arg::Simple(bytes) => Some(bytes),
            _ => None,
        })
    }
}

impl fmt::Debug for Command {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.all().map(String::from_utf8_lossy))
            .finish()
    }
}

fn decode(segment: &str) -> Vec<u8> {
    percent_decode_str(segment).collect()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use serde_json::json;

    /// The command's arguments, name included, as text.
    pub(crate) fn args(command: &Command) -> Vec<String> {
        command
            .all()
            .map(|a| String::from_utf8_lossy(a).into_owned())
            .collect()
    }

    #[test]
    fn json_strings_and_numbers_become_arguments() {
        let command = Command::from_json(&json!(["set", "k", 10, 1.5, -3])).map(|c| args(&c));
        assert_eq!(
            command,
            Ok(vec![
                "set".into(),
                "k".into(),
                "10".into(),
                "1.5".into(),
                "-3".into()
            ])
        );
    }

    #[test]
    fn json_shapes_other_than_arrays_of_scalars_are_refused() {
        assert!(Command::from_json(&json!({"set": 1})).is_err());
        assert!(Command::from_json(&json!([])).is_err());
        assert!(Command::from_json(&json!(["set", "k", true])).is_err());
        assert!(Command::from_json(&json!(["set", "k", null])).is_err());
        assert!(Command::from_json(&json!(["set", ["k"]])).is_err());
        assert!(Command::list_from_json(&json!([])).is_err());
        assert!(Command::list_from_json(&json!(["get", "k"])).is_err());
    }

    #[test]
    fn paths_are_split_then_decoded() {
        let command = Command::from_path("/set/a%2Fb/h%C3%A9", Some("_token=x&EX=10&NX"), b"")
            .map(|c| args(&c));
        assert_eq!(
            command,
            Ok(vec![
                "set".into(),
                "a/b".into(),
                "hé".into(),
                "EX".into(),
                "10".into(),
                "NX".into()
            ])
        );
        let command = Command::from_path("/set/k", Some("EX=5"), b"body").map(|c| args(&c));
        assert_eq!(
            command,
            Ok(vec![
                "set".into(),
                "k".into(),
                "body".into(),
                "EX".into(),
                "5".into()
            ])
        );
        assert!(Command::from_path("/", Some("_token=x"), b"").is_err());
    }

    #[test]
    fn arguments_are_read_and_replaced_by_index() {
        let Ok(command) = Command::from_json(&json!(["evalsha", "abc", 1, "k", ""])) else {
            panic!("a command");
        };
        assert!(command.is("EVALSHA") && command.is_script() && !command.is("EVAL"));
        assert_eq!(command.name(), "EVALSHA");
        assert_eq!(command.len(), 5);
        assert_eq!(command.arg(1), Some(b"abc".as_slice()));
        assert_eq!(command.arg(4), Some(b"".as_slice()));
        assert_eq!(command.arg(5), None);
        assert_eq!(command.args().count(), 4);
        let replaced = command.with_arg(0, b"EVAL").with_arg(1, b"return 1");
        assert_eq!(args(&replaced), ["EVAL", "return 1", "1", "k", ""]);
        assert_eq!(
            format!("{replaced:?}"),
            r#"["EVAL", "return 1", "1", "k", ""]"#
        );
    }
}
