//! Reading a `postgres://` URL into the driver's configuration, and a
//! description of it that never holds the password.

use std::fmt;
use std::str::FromStr;

use tokio_postgres::config::Host;

use crate::Error;

/// Where a store connects, as the driver's configuration and as a
/// password-free description for `Debug` output and logs.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) config: tokio_postgres::Config,
    description: String,
}

impl Target {
    /// Reads `url`: `postgres://` or `postgresql://`, with the parameters
    /// Postgres clients accept (`?sslmode=disable&connect_timeout=5`, ...).
    pub(crate) fn parse(url: &str) -> Result<Target, Error> {
        let scheme = url.split_once("://").map(|(scheme, _)| scheme);
        if !matches!(scheme, Some(s) if s.eq_ignore_ascii_case("postgres") || s.eq_ignore_ascii_case("postgresql"))
        {
            return Err(Error::InvalidUrl(
                "expected a postgres:// or postgresql:// URL".into(),
            ));
        }
        // The driver matches the scheme in lowercase only.
        let (_, rest) = url.split_at(url.find("://").unwrap_or(0));
        let normalized = format!("postgres{rest}");
        let mut config = tokio_postgres::Config::from_str(&normalized)
            .map_err(|e| Error::InvalidUrl(e.to_string()))?;
        if config.get_hosts().is_empty() {
            return Err(Error::InvalidUrl("the URL names no host".into()));
        }
        if config.get_user().is_none() {
            return Err(Error::InvalidUrl("the URL names no user".into()));
        }
        if config.get_ssl_mode() == tokio_postgres::config::SslMode::Require {
            return Err(Error::InvalidUrl(
                "sslmode=require: this store connects without TLS (use a local socket, \
                 a private network or a TLS proxy)"
                    .into(),
            ));
        }
        if config.get_application_name().is_none() {
            config.application_name("tollgate");
        }
        let description = describe(&config);
        Ok(Target {
            config,
            description,
        })
    }
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

/// `postgres://user@host:port/db`, without the password.
fn describe(config: &tokio_postgres::Config) -> String {
    let ports = config.get_ports();
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .enumerate()
        .map(|(i, host)| {
            let host = match host {
                Host::Tcp(name) => name.clone(),
                Host::Unix(path) => path.display().to_string(),
            };
            match ports.get(i).or(ports.first()) {
                Some(port) => format!("{host}:{port}"),
                None => host,
            }
        })
        .collect();
    format!(
        "postgres://{}@{}/{}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_schemes_are_read_and_the_password_never_shown() {
        for url in [
            "postgres://app:s3cret-pw@db.internal:6543/limits",
            "postgresql://app:s3cret-pw@db.internal:6543/limits",
            "POSTGRES://app:s3cret-pw@db.internal:6543/limits",
        ] {
            let target = Target::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
            let shown = format!("{target:?}");
            assert_eq!(shown, "postgres://app@db.internal:6543/limits");
            assert_eq!(target.config.get_password(), Some(&b"s3cret-pw"[..]));
        }
    }

    #[test]
    fn other_urls_are_refused_without_echoing_them() {
        for url in [
            "redis://app:s3cret-pw@db:6379",
            "host=db user=app password=s3cret-pw",
            "postgres://app:s3cret-pw@db:notaport/limits",
            "postgres://app:s3cret-pw@db/limits?sslmode=require",
            "postgres://app:s3cret-pw@db/limits?nosuchoption=1",
            "postgres:///limits",
        ] {
            match Target::parse(url) {
                Err(err @ Error::InvalidUrl(_)) => {
                    let shown = format!("{err} {err:?}");
                    assert!(!shown.contains("s3cret"), "{shown}");
                }
                other => panic!("{url}: {other:?}"),
            }
        }
    }
}
