//! Commands as callers send them: JSON arrays, or URL paths, into Redis arguments.

use percent_encoding::percent_decode_str;
use serde_json::Value as Json;

/// One Redis command: its name and arguments, as bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Command {
    args: Vec<Vec<u8>>,
}

/// Why a request does not hold a command: the text for its 400.
#[derive(Debug, PartialEq, Eq, thiserror::Error)]
#[error("ERR {0}")]
pub(crate) struct ShapeError(&'static str);

impl Command {
    /// A command from its arguments, the first being its name.
    pub(crate) fn new(args: Vec<Vec<u8>>) -> Result<Command, ShapeError> {
        match args.first() {
            None => Err(ShapeError("empty command")),
            Some(_) => Ok(Command { args }),
        }
    }

    /// A command from a JSON array of strings and numbers.
    pub(crate) fn from_json(value: &Json) -> Result<Command, ShapeError> {
        let Json::Array(items) = value else {
            return Err(ShapeError(
                "a command is a JSON array of strings and numbers",
            ));
        };
        let args = items
            .iter()
            .map(|item| match item {
                Json::String(s) => Ok(s.as_bytes().to_vec()),
                Json::Number(n) => Ok(n.to_string().into_bytes()),
                _ => Err(ShapeError(
                    "command arguments must be JSON strings or numbers",
                )),
            })
            .collect::<Result<Vec<_>, _>>()?;
        Command::new(args)
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
        let mut args: Vec<Vec<u8>> = if path.is_empty() {
            Vec::new()
        } else {
            path.split('/').map(decode).collect()
        };
        if !body.is_empty() {
            args.push(body.to_vec());
        }
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (key, value) = pair.split_once('=').unwrap_or((pair, ""));
            if key == "_token" {
                continue;
            }
            args.push(decode(key));
            if !value.is_empty() {
                args.push(decode(value));
            }
        }
        Command::new(args)
    }

    /// The command's name in upper case (lossy for non-UTF-8 names).
    pub(crate) fn name(&self) -> String {
        self.args
            .first()
            .map(|name| String::from_utf8_lossy(name).to_ascii_uppercase())
            .unwrap_or_default()
    }

    /// The arguments after the name.
    pub(crate) fn args(&self) -> &[Vec<u8>] {
        self.args.get(1..).unwrap_or(&[])
    }

    /// Whether this command runs a script (`EVAL`, `EVALSHA` and their
    /// read-only forms).
    pub(crate) fn is_script(&self) -> bool {
        matches!(
            self.name().as_str(),
            "EVAL" | "EVAL_RO" | "EVALSHA" | "EVALSHA_RO"
        )
    }

    /// A copy with argument `index` (0 is the name) replaced by `value`.
    pub(crate) fn with_arg(&self, index: usize, value: &[u8]) -> Command {
        let mut args = self.args.clone();
        if let Some(slot) = args.get_mut(index) {
            *slot = value.to_vec();
        }
        Command { args }
    }

    /// The command for the redis client.
    pub(crate) fn to_cmd(&self) -> redis::Cmd {
        let mut cmd = redis::Cmd::new();
        for arg in &self.args {
            cmd.arg(arg.as_slice());
        }
        cmd
    }
}

fn decode(segment: &str) -> Vec<u8> {
    percent_decode_str(segment).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn args(command: &Command) -> Vec<String> {
        command
            .args
            .iter()
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
}
