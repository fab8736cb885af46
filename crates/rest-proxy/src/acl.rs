//! The Redis user callers' commands run as. Redis applies a user's ACL
//! inside scripts too, so a user whose commands are the allow-list is what
//! stops `EVAL "redis.call('FLUSHALL')"`. The proxy either connects as a
//! user the operator made (and checks that it is restricted), creates one
//! through an administrator's connection, or is told to accept any user.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, Ordering};

use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Client, ConnectionInfo, ErrorKind, RedisError, Value};

use crate::allow;
use crate::failure::LinkError;

/// Commands outside the allow-list, queued inside `MULTI` and then
/// discarded, so that none of them runs: Redis checks a user's permissions
/// when it queues a command, so a user who may run one of these gets
/// `QUEUED`. Anything else (`NOPERM`, an unknown command on an older
/// server, `DEBUG` disabled) counts as refused. Commands Redis will not
/// queue at all (`SAVE`, `SHUTDOWN`) cannot be probed this way: a user
/// refused every probe is taken to be refused those too.
const PROBES: &[&[&str]] = &[
    &["FLUSHALL"],
    &["FLUSHDB"],
    &["CONFIG", "SET", "appendonly", "no"],
    &["CONFIG", "GET", "maxmemory"],
    &["SWAPDB", "0", "1"],
    &["SELECT", "1"],
    &["MOVE", "tollgate-rest-proxy-probe", "1"],
    &[
        "COPY",
        "tollgate-rest-proxy-probe",
        "tollgate-rest-proxy-probe",
        "DB",
        "1",
    ],
    &["REPLICAOF", "NO", "ONE"],
    &["ACL", "SETUSER", "tollgate-rest-proxy-probe"],
    &["KEYS", "*"],
    &["FUNCTION", "LOAD", "#!lua name=tollgate_rest_proxy_probe\n"],
    &["SCRIPT", "FLUSH"],
    &["MODULE", "LIST"],
    &["BGSAVE"],
    &["BGREWRITEAOF"],
    &["CLIENT", "KILL", "ID", "0"],
    &[
        "MIGRATE",
        "127.0.0.1",
        "1",
        "tollgate-rest-proxy-probe",
        "0",
        "1",
    ],
    &["PUBLISH", "tollgate-rest-proxy-probe", "x"],
    &["DEBUG", "SLEEP", "0"],
];

/// How the proxy's Redis user is chosen.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) enum Access {
    /// Connect as the URL says; serve only if that user cannot run the probes.
    #[default]
    Checked,
    /// Create (or update) this user through the URL's (administrator's)
    /// connection, with a password only this process knows, and run as it.
    Create(String),
    /// Connect as the URL says, whatever that user may run.
    Unrestricted,
}

/// Connects as the proxy's Redis user.
pub(crate) struct Users {
    /// Connects as the user callers' commands run as.
    client: Client,
    /// The administrator's connection and the user to create, in `Create` mode.
    create: Option<(Client, String, String)>,
    check: bool,
    /// Set once a connection was found restricted.
    verified: AtomicBool,
    /// The user's name, as Redis knows it.
    name: String,
}

impl Users {
    /// The users for `info` under `access`.
    pub(crate) fn new(info: ConnectionInfo, access: &Access) -> Result<Users, RedisError> {
        let settings = info.redis_settings().clone().set_skip_set_lib_name();
        let info = info.set_redis_settings(settings.clone());
        let (client, create) = match access {
            Access::Create(name) => {
                let password = password()?;
                let user = info.clone().set_redis_settings(
                    settings.clone().set_username(name).set_password(&password),
                );
                let admin = Client::open(info)?;
                (Client::open(user)?, Some((admin, name.clone(), password)))
            }
            _ => (Client::open(info)?, None),
        };
        let name = client
            .get_connection_info()
            .redis_settings()
            .username()
            .unwrap_or("default")
            .to_owned();
        Ok(Users {
            client,
            create,
            check: *access != Access::Unrestricted,
            verified: AtomicBool::new(false),
            name,
        })
    }

    /// Checks the user again on the next connection (after a lost one:
    /// Redis may have restarted with other ACLs).
    pub(crate) fn recheck(&self) {
        self.verified.store(false, Ordering::Relaxed);
    }

    /// Whether the user is checked (it is, unless the proxy was told to
    /// accept any user).
    pub(crate) fn is_checked(&self) -> bool {
        self.check
    }

    /// The name of the Redis user callers' commands run as.
    pub(crate) fn name(&self) -> &str {
        &self.name
    }

    /// A new connection as the proxy's user: the user is created first when
    /// the proxy creates it and it does not exist (yet, or any more after a
    /// restart of Redis), and checked the first time.
    pub(crate) async fn connect(
        &self,
        config: &AsyncConnectionConfig,
    ) -> Result<MultiplexedConnection, LinkError> {
        let connected = self
            .client
            .get_multiplexed_async_connection_with_config(config)
            .await;
        let mut conn = match (connected, &self.create) {
            (Err(e), Some(create)) if is_wrong_password(&e) => {
                self.create_user(create, config).await?;
                self.client
                    .get_multiplexed_async_connection_with_config(config)
                    .await?
            }
            (connected, _) => connected?,
        };
        if self.check && !self.verified.load(Ordering::Relaxed) {
            self.verify(&mut conn).await?;
            self.verified.store(true, Ordering::Relaxed);
        }
        Ok(conn)
    }

    /// `ACL SETUSER` of the proxy's user, with the allow-list's commands
    /// that this server knows (older servers lack some).
    async fn create_user(
        &self,
        (admin, name, password): &(Client, String, String),
        config: &AsyncConnectionConfig,
    ) -> Result<(), LinkError> {
        let mut conn = admin
            .get_multiplexed_async_connection_with_config(config)
            .await?;
        let rules = rules(&mut conn).await?;
        let mut setuser = redis::cmd("ACL");
        setuser
            .arg("SETUSER")
            .arg(name)
            .arg(format!(">{password}"))
            .arg(rules);
        match conn.send_packed_command(&setuser).await? {
            Value::ServerError(e) => Err(LinkError::Setup(format!(
                "ACL SETUSER {name} failed: {}",
                crate::reply::error_text(&e)
            ))),
            _ => {
                tracing::info!(user = %name, "created the proxy's Redis user");
                Ok(())
            }
        }
    }

    /// Fails when Redis would queue any probe for this user. The
    /// probes are queued in a transaction that is discarded: none runs,
    /// whatever the user may do. (`SHUTDOWN` cannot be queued: a user
    /// restricted from all of these is taken to be restricted from it.)
    async fn verify(&self, conn: &mut MultiplexedConnection) -> Result<(), LinkError> {
        let reply = |value: Value| match value {
            Value::ServerError(e) => crate::reply::error_text(&e),
            other => format!("{other:?}"),
        };
        let multi = conn.send_packed_command(&redis::cmd("MULTI")).await?;
        if multi != Value::Okay {
            return Err(LinkError::Setup(format!(
                "the proxy's Redis user {:?} must be allowed MULTI, EXEC and DISCARD \
                 (tollgate-rest-proxy --print-acl): MULTI answered {}",
                self.name,
                reply(multi)
            )));
        }
        let mut allowed = None;
        let mut unread = None;
        for probe in PROBES {
            let mut cmd = redis::Cmd::new();
            for arg in *probe {
                cmd.arg(*arg);
            }
            let answer = conn.send_packed_command(&cmd).await?;
            match queued(&answer) {
                Some(true) if allowed.is_none() => {
                    allowed = Some(probe.get(..2).unwrap_or(probe).join(" "));
                }
                None if unread.is_none() => unread = Some(reply(answer)),
                _ => {}
            }
        }
        let discard = conn.send_packed_command(&redis::cmd("DISCARD")).await?;
        if discard != Value::Okay {
            return Err(LinkError::Setup(format!(
                "DISCARD answered {}",
                reply(discard)
            )));
        }
        match (allowed, unread) {
            (Some(probe), _) => Err(LinkError::Unrestricted {
                user: self.name.clone(),
                probe,
            }),
            (None, Some(answer)) => Err(LinkError::Setup(format!(
                "could not check the proxy's Redis user {:?}: a probe was answered {answer}",
                self.name
            ))),
            (None, None) => Ok(()),
        }
    }
}

/// Whether Redis queued a probe (`Some(true)`), refused it (`Some(false)`),
/// or answered without judging it (`None`): busy with a script, or loading
/// its data, it says nothing of what the user may run.
fn queued(answer: &Value) -> Option<bool> {
    match answer {
        Value::SimpleString(s) if s == "QUEUED" => Some(true),
        Value::ServerError(e) if matches!(e.code(), "BUSY" | "LOADING") => None,
        _ => Some(false),
    }
}

/// The `ACL SETUSER` rules for the proxy's user on the server of `conn`:
/// the allow-list's commands this server knows (older servers lack some).
async fn rules(conn: &mut MultiplexedConnection) -> Result<Vec<String>, LinkError> {
    let bases: Vec<&str> = allow::COMMANDS
        .iter()
        .map(|c| c.split('|').next().unwrap_or(c))
        .collect();
    let mut info = redis::cmd("COMMAND");
    info.arg("INFO").arg(&bases);
    let known: HashSet<&str> = match conn.send_packed_command(&info).await? {
        Value::Array(entries) if entries.len() == bases.len() => bases
            .iter()
            .zip(entries)
            .filter(|(_, entry)| *entry != Value::Nil)
            .map(|(base, _)| *base)
            .collect(),
        Value::ServerError(e) => {
            return Err(LinkError::Setup(format!(
                "COMMAND INFO failed: {}",
                crate::reply::error_text(&e)
            )));
        }
        _ => {
            return Err(LinkError::Setup(
                "unexpected reply to COMMAND INFO".to_owned(),
            ));
        }
    };
    // The proxy's own commands are as old as ACLs.
    Ok(allow::acl_rules(|base| {
        known.contains(base) || !bases.contains(&base)
    }))
}

/// `ACL SETUSER <name> <rules>` for the server at `info`, without a
/// password, as one line for `redis-cli`.
pub(crate) async fn setuser_line(
    info: ConnectionInfo,
    name: &str,
    config: &AsyncConnectionConfig,
) -> Result<String, LinkError> {
    let settings = info.redis_settings().clone().set_skip_set_lib_name();
    let client = Client::open(info.set_redis_settings(settings))?;
    let mut conn = client
        .get_multiplexed_async_connection_with_config(config)
        .await?;
    let rules = rules(&mut conn).await?;
    Ok(format!("ACL SETUSER {name} {}", rules.join(" ")))
}

/// Whether connecting failed for the user's name or password (RESP2 says
/// so as an authentication failure, RESP3 as a `WRONGPASS` error reply).
fn is_wrong_password(error: &RedisError) -> bool {
    error.kind() == ErrorKind::AuthenticationFailed || error.code() == Some("WRONGPASS")
}

/// Whether `name` is a user name the proxy creates or prints: 1 to 64 ASCII
/// letters, digits, `-`, `_` and `.`, so that it is one word on a
/// `redis-cli` line.
pub(crate) fn valid_name(name: &str) -> bool {
    (1..=64).contains(&name.len())
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// 128 random bits in hex: a password only this process knows.
fn password() -> Result<String, RedisError> {
    let mut bytes = [0u8; 16];
    getrandom::fill(&mut bytes).map_err(|e| {
        RedisError::from((
            ErrorKind::Client,
            "no system entropy for the Redis user's password",
            e.to_string(),
        ))
    })?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use super::*;

    #[test]
    fn a_busy_or_loading_server_judges_no_probe() {
        // An error reply as Redis sends it.
        let error =
            |text: &str| redis::parse_redis_value(format!("-{text}\r\n").as_bytes()).unwrap();
        assert_eq!(queued(&Value::SimpleString("QUEUED".into())), Some(true));
        assert_eq!(queued(&error("NOPERM no permissions")), Some(false));
        assert_eq!(queued(&error("ERR unknown command 'x'")), Some(false));
        assert_eq!(queued(&error("BUSY Redis is busy running a script")), None);
        assert_eq!(queued(&error("LOADING Redis is loading the dataset")), None);
    }

    #[test]
    fn the_users_password_is_128_random_bits_in_hex() {
        let (one, two) = (password().unwrap(), password().unwrap());
        for p in [&one, &two] {
            assert_eq!(p.len(), 32, "{p}");
            assert!(p.bytes().all(|b| b.is_ascii_hexdigit()), "{p}");
        }
        assert_ne!(one, two, "the same password twice");
    }
}
