//! Running commands on Redis: single ones, pipelines and transactions, with
//! scripts rewritten so that stock Redis runs `allow-key-locking` ones.

use std::borrow::Cow;
use std::sync::Arc;

use redis::{Pipeline, ServerErrorKind, Value};

use crate::allow;
use crate::command::Command;
use crate::failure::LinkError;
use crate::link::Link;
use crate::reply::error_text;
use crate::script::Scripts;

/// One command's outcome.
#[derive(Debug)]
pub(crate) enum Reply {
    /// Redis answered (an error reply included).
    Value(Value),
    /// The proxy refused to send it; the text says why.
    Refused(String),
}

/// A transaction's outcome.
#[derive(Debug)]
pub(crate) enum Transaction {
    /// EXEC ran: one reply per command.
    Committed(Vec<Value>),
    /// Nothing ran; the text is the first error.
    Aborted(String),
}

/// Runs commands on one Redis, remembering the scripts it rewrote.
pub(crate) struct Runner {
    link: Arc<Link>,
    scripts: Scripts,
}

/// What to send for a command.
struct Prepared<'a> {
    send: Cow<'a, Command>,
    /// Sent when `send` is answered NOSCRIPT: the stripped script by EVAL.
    on_noscript: Option<Command>,
    /// The reply to give instead of a successful one: the original's sha
    /// for SCRIPT LOAD of a rewritten script.
    sha_reply: Option<String>,
}

impl Prepared<'_> {
    fn finish(&self, reply: Value) -> Value {
        match (&self.sha_reply, reply) {
            (_, reply @ Value::ServerError(_)) => reply,
            (Some(sha), _) => Value::BulkString(sha.clone().into_bytes()),
            (None, reply) => reply,
        }
    }
}

/// The commands whose script the proxy may rewrite.
enum ScriptCall {
    /// `EVAL` or `EVAL_RO`: the script is argument 1.
    Eval,
    /// `SCRIPT LOAD`: the script is argument 2.
    Load,
    /// `EVALSHA` or `EVALSHA_RO`, sent as `eval` when run by text.
    Sha { eval: &'static str },
}

impl ScriptCall {
    /// What `command` is, when it runs or loads a script.
    fn of(command: &Command) -> Option<ScriptCall> {
        if command.is("EVAL") || command.is("EVAL_RO") {
            Some(ScriptCall::Eval)
        } else if command.is("EVALSHA") {
            Some(ScriptCall::Sha { eval: "EVAL" })
        } else if command.is("EVALSHA_RO") {
            Some(ScriptCall::Sha { eval: "EVAL_RO" })
        } else if command.is("SCRIPT")
            && command.len() == 3
            && command
                .arg(1)
                .is_some_and(|sub| sub.eq_ignore_ascii_case(b"LOAD"))
        {
            Some(ScriptCall::Load)
        } else {
            None
        }
    }
}

impl Runner {
    /// A runner over `link`.
    pub(crate) fn new(link: Arc<Link>) -> Runner {
        Runner {
            link,
            scripts: Scripts::default(),
        }
    }

    /// The link to Redis.
    pub(crate) fn link(&self) -> &Link {
        &self.link
    }

    /// Runs one command on the shared connection.
    pub(crate) async fn single(&self, command: &Command) -> Result<Reply, LinkError> {
        if let Some(why) = allow::refusal(command) {
            return Ok(Reply::Refused(why));
        }
        let prepared = self.prepare(command, false);
        let reply = async {
            let reply = self.link.command(prepared.send.cmd()).await?;
            Ok(match (&reply, &prepared.on_noscript) {
                (Value::ServerError(e), Some(eval))
                    if e.kind() == Some(ServerErrorKind::NoScript) =>
                {
                    self.link.command(eval.cmd()).await?
                }
                _ => reply,
            })
        };
        let reply = self.watch(std::slice::from_ref(command), reply.await)?;
        Ok(Reply::Value(prepared.finish(reply)))
    }

    /// Passes `outcome` on; when it timed out and `commands` hold a script,
    /// that script may still be running: the link tries to kill it, in the
    /// background.
    fn watch<T>(
        &self,
        commands: &[Command],
        outcome: Result<T, LinkError>,
    ) -> Result<T, LinkError> {
        if outcome.as_ref().is_err_and(LinkError::is_timeout)
            && commands.iter().any(Command::is_script)
        {
            let link = Arc::clone(&self.link);
            tokio::spawn(async move { link.kill_script().await });
        }
        outcome
    }

    /// Runs a pipeline on the shared connection: one reply per command, in order.
    pub(crate) async fn pipeline(&self, commands: &[Command]) -> Result<Vec<Reply>, LinkError> {
        let mut pipe = Pipeline::new();
        let mut prepared = Vec::with_capacity(commands.len());
        for command in commands {
            let p = allow::refusal(command)
                .is_none()
                .then(|| self.prepare(command, true));
            if let Some(p) = &p {
                pipe.add_command(p.send.cmd().clone());
            }
            prepared.push(p);
        }
        let sent = prepared.iter().flatten().count();
        let mut replies = if sent == 0 {
            Vec::new().into_iter()
        } else {
            self.watch(commands, self.link.pipeline(&pipe, sent).await)?
                .into_iter()
        };
        Ok(commands
            .iter()
            .zip(prepared)
            .map(|(command, p)| match p {
                None => Reply::Refused(allow::refusal(command).unwrap_or_default()),
                Some(p) => Reply::Value(p.finish(replies.next().unwrap_or(Value::Nil))),
            })
            .collect())
    }

    /// Runs the commands as one MULTI … EXEC on a dedicated connection.
    pub(crate) async fn transaction(&self, commands: &[Command]) -> Result<Transaction, LinkError> {
        if let Some(why) = commands.iter().find_map(allow::refusal) {
            return Ok(Transaction::Aborted(why));
        }
        let prepared: Vec<Prepared<'_>> = commands.iter().map(|c| self.prepare(c, true)).collect();
        let mut pipe = Pipeline::new();
        for p in &prepared {
            pipe.add_command(p.send.cmd().clone());
        }
        pipe.cmd("EXEC");
        let replies = self.watch(
            commands,
            self.link.transaction(&pipe, prepared.len() + 1).await,
        )?;
        match replies.first() {
            Some(Value::Okay) => {}
            Some(Value::ServerError(e)) => return Ok(Transaction::Aborted(error_text(e))),
            _ => {
                return Ok(Transaction::Aborted(
                    "ERR unexpected reply to MULTI".to_owned(),
                ));
            }
        }
        let queued = replies.get(1..=prepared.len()).unwrap_or(&[]);
        if let Some(Value::ServerError(e)) =
            queued.iter().find(|r| matches!(r, Value::ServerError(_)))
        {
            return Ok(Transaction::Aborted(error_text(e)));
        }
        Ok(match replies.into_iter().nth(prepared.len() + 1) {
            Some(Value::Array(values)) if values.len() == prepared.len() => Transaction::Committed(
                prepared
                    .iter()
                    .zip(values)
                    .map(|(p, v)| p.finish(v))
                    .collect(),
            ),
            Some(Value::ServerError(e)) => Transaction::Aborted(error_text(&e)),
            _ => Transaction::Aborted("ERR unexpected reply to EXEC".to_owned()),
        })
    }

    /// The command to send for `command`: scripts without `allow-key-locking`,
    /// EVALSHA of a rewritten script's original sha by its stripped sha (or,
    /// `batched` in a pipeline or transaction, where a NOSCRIPT cannot be
    /// retried in place, by EVAL of the stripped text).
    fn prepare<'a>(&self, command: &'a Command, batched: bool) -> Prepared<'a> {
        let mut prepared = Prepared {
            send: Cow::Borrowed(command),
            on_noscript: None,
            sha_reply: None,
        };
        match ScriptCall::of(command) {
            Some(ScriptCall::Eval) => {
                if let Some(stripped) = command.arg(1).and_then(|s| self.scripts.learn(s)) {
                    prepared.send = Cow::Owned(command.with_arg(1, &stripped.text));
                }
            }
            Some(ScriptCall::Load) => {
                if let Some(script) = command.arg(2)
                    && let Some(stripped) = self.scripts.learn(script)
                {
                    prepared.send = Cow::Owned(command.with_arg(2, &stripped.text));
                    prepared.sha_reply = Some(crate::script::sha1_hex(script));
                }
            }
            Some(ScriptCall::Sha { eval }) => {
                if let Some(stripped) = command.arg(1).and_then(|sha| self.scripts.lookup(sha)) {
                    let by_text = command
                        .with_arg(0, eval.as_bytes())
                        .with_arg(1, &stripped.text);
                    if batched {
                        prepared.send = Cow::Owned(by_text);
                    } else {
                        prepared.send = Cow::Owned(command.with_arg(1, stripped.sha.as_bytes()));
                        prepared.on_noscript = Some(by_text);
                    }
                }
            }
            None => {}
        }
        prepared
    }
}
