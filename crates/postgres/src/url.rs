//! Reading a `postgres://` URL into the driver's configuration and the TLS
//! it asks for, and a description of it that never holds the password.

use std::fmt;
use std::path::PathBuf;
use std::str::FromStr;

use percent_encoding::percent_decode_str;
use tokio_postgres::config::{Host, SslMode};

use crate::Error;
use crate::tls::{self, Mode, Roots};

/// Where a store connects, as the driver's configuration, the TLS it asks
/// for, and a password-free description for `Debug` output and logs.
#[derive(Clone)]
pub(crate) struct Target {
    pub(crate) config: tokio_postgres::Config,
    /// The `sslmode` asked for (`prefer` unless the URL says otherwise).
    pub(crate) mode: Mode,
    /// The rustls configuration of that mode, its roots read.
    pub(crate) tls: rustls::ClientConfig,
    description: String,
}

impl Target {
    /// Reads `url`: `postgres://` or `postgresql://`, with the parameters
    /// Postgres clients accept (`?sslmode=verify-full&connect_timeout=5`,
    /// ...). `sslmode` and `sslrootcert` are read here, as libpq reads them;
    /// the driver reads the rest. A root file is read now: one that cannot
    /// be read, or holds no certificate, is an invalid URL.
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
        let (normalized, params) = take_tls_params(&format!("postgres{rest}"))?;
        let mut config = tokio_postgres::Config::from_str(&normalized)
            .map_err(|e| Error::InvalidUrl(e.to_string()))?;
        if config.get_hosts().is_empty() {
            return Err(Error::InvalidUrl("the URL names no host".into()));
        }
        if config.get_user().is_none() {
            return Err(Error::InvalidUrl("the URL names no user".into()));
        }
        let (mode, roots) = params.resolve()?;
        // As libpq: a Unix socket is never encrypted, whatever the mode.
        let only_sockets = config
            .get_hosts()
            .iter()
            .all(|host| !matches!(host, Host::Tcp(_)));
        let tls = if only_sockets {
            config.ssl_mode(SslMode::Disable);
            tls::client_config(Mode::Disable, None)
        } else {
            config.ssl_mode(mode.driver());
            tls::client_config(mode, roots.as_ref())
        }
        .map_err(Error::InvalidUrl)?;
        if config.get_application_name().is_none() {
            config.application_name("tollgate");
        }
        let description = describe(&config, mode, roots.as_ref());
        Ok(Target {
            config,
            mode,
            tls,
            description,
        })
    }
}

/// The TLS parameters of a URL, as written.
#[derive(Default)]
struct TlsParams {
    sslmode: Option<String>,
    sslrootcert: Option<String>,
}

impl TlsParams {
    /// The mode, and the roots a checking mode uses (`None`: the system's,
    /// unless the mode checks nothing). As libpq: `sslrootcert=system` makes
    /// `verify-full` the default and refuses any weaker mode.
    fn resolve(self) -> Result<(Mode, Option<Roots>), Error> {
        let roots = match self.sslrootcert.as_deref() {
            None | Some("") => None,
            Some("system") => Some(Roots::System),
            Some(path) => Some(Roots::File(PathBuf::from(path))),
        };
        let mode = match (self.sslmode.as_deref(), &roots) {
            (Some(mode), _) => Mode::parse(mode).map_err(Error::InvalidUrl)?,
            (None, Some(Roots::System)) => Mode::VerifyFull,
            (None, _) => Mode::Prefer,
        };
        if roots == Some(Roots::System) && mode != Mode::VerifyFull {
            return Err(Error::InvalidUrl(format!(
                "sslrootcert=system needs sslmode=verify-full (not {})",
                mode.as_str()
            )));
        }
        Ok((mode, roots))
    }
}

/// `url` without its `sslmode` and `sslrootcert` parameters (the driver
/// refuses `verify-ca`, `verify-full` and `sslrootcert`), and their values,
/// decoded. The parameters are found as the driver finds them: after the
/// first `?` that follows the first `@`.
fn take_tls_params(url: &str) -> Result<(String, TlsParams), Error> {
    let after_user = url.find('@').map_or(0, |at| at + 1);
    let Some(question) = url[after_user..].find('?').map(|q| after_user + q) else {
        return Ok((url.to_owned(), TlsParams::default()));
    };
    let mut params = TlsParams::default();
    let mut kept = Vec::new();
    for param in url[question + 1..].split('&') {
        let (key, value) = param.split_once('=').unwrap_or((param, ""));
        let slot = match decode(key).as_deref() {
            Ok("sslmode") => &mut params.sslmode,
            Ok("sslrootcert") => &mut params.sslrootcert,
            _ => {
                kept.push(param);
                continue;
            }
        };
        let value = decode(value).map_err(|()| {
            Error::InvalidUrl(format!("the value of {} is not UTF-8", decode_lossy(key)))
        })?;
        *slot = Some(value);
    }
    let mut rest = url[..question].to_owned();
    if !kept.is_empty() {
        rest.push('?');
        rest.push_str(&kept.join("&"));
    }
    Ok((rest, params))
}

fn decode(text: &str) -> Result<String, ()> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ())
}

fn decode_lossy(text: &str) -> String {
    percent_decode_str(text).decode_utf8_lossy().into_owned()
}

impl fmt::Debug for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.description)
    }
}

/// `postgres://user@host:port/db`, without the password, and the TLS
/// parameters when they are not the default.
fn describe(config: &tokio_postgres::Config, mode: Mode, roots: Option<&Roots>) -> String {
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
    let mut tls = Vec::new();
    if mode != Mode::Prefer {
        tls.push(format!("sslmode={}", mode.as_str()));
    }
    match roots {
        Some(Roots::File(path)) => tls.push(format!("sslrootcert={}", path.display())),
        Some(Roots::System) => tls.push("sslrootcert=system".to_owned()),
        None => {}
    }
    let query = if tls.is_empty() {
        String::new()
    } else {
        format!("?{}", tls.join("&"))
    };
    format!(
        "postgres://{}@{}/{}{query}",
        config.get_user().unwrap_or(""),
        hosts.join(","),
        config.get_dbname().unwrap_or("")
    )
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

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
            "postgres://app:s3cret-pw@db/limits?nosuchoption=1",
            "postgres:///limits",
            // TLS asked for in a way this store cannot honour.
            "postgres://app:s3cret-pw@db/limits?sslmode=allow",
            "postgres://app:s3cret-pw@db/limits?sslmode=Require",
            "postgres://app:s3cret-pw@db/limits?sslmode=s3cret-pw",
            "postgres://app:s3cret-pw@db/limits?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem",
            "postgres://app:s3cret-pw@db/limits?sslmode=require&sslrootcert=/nonexistent/ca.pem",
            "postgres://app:s3cret-pw@db/limits?sslrootcert=system&sslmode=require",
            "postgres://app:s3cret-pw@db/limits?sslrootcert=system&sslmode=verify-ca",
            "postgres://app:s3cret-pw@db/limits?sslmode=%ff",
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

    #[test]
    fn sslmode_is_read_here_and_the_other_parameters_by_the_driver() {
        let cases = [
            ("", Mode::Prefer, SslMode::Prefer),
            ("?sslmode=disable", Mode::Disable, SslMode::Disable),
            ("?sslmode=prefer", Mode::Prefer, SslMode::Prefer),
            ("?sslmode=require", Mode::Require, SslMode::Require),
            ("?sslmode=verify-ca", Mode::VerifyCa, SslMode::Require),
            ("?sslmode=verify-full", Mode::VerifyFull, SslMode::Require),
            ("?ssl%6Dode=require", Mode::Require, SslMode::Require),
        ];
        for (query, mode, driver) in cases {
            let url = format!("postgres://app:s3cret-pw@db:6543/limits{query}");
            // verify-* read the system's roots; a machine without any says so.
            let target = match Target::parse(&url) {
                Err(Error::InvalidUrl(e)) if e.contains("no root certificates") => continue,
                other => other.unwrap_or_else(|e| panic!("{url}: {e}")),
            };
            assert_eq!(target.mode, mode, "{url}");
            assert_eq!(target.config.get_ssl_mode(), driver, "{url}");
        }
        let url = "postgres://app:s3c%3Fret@db/limits?connect_timeout=7&sslmode=require&application_name=x";
        let target = Target::parse(url).unwrap();
        assert_eq!(target.mode, Mode::Require);
        assert_eq!(
            target.config.get_connect_timeout(),
            Some(&std::time::Duration::from_secs(7))
        );
        assert_eq!(target.config.get_application_name(), Some("x"));
        assert_eq!(target.config.get_password(), Some(&b"s3c?ret"[..]));
        assert_eq!(
            format!("{target:?}"),
            "postgres://app@db:5432/limits?sslmode=require"
        );
        // A `?` in a password written raw, last too: the parameters start
        // after the `@`.
        for password in ["pw?x", "pw?"] {
            let url = format!("postgres://app:{password}@db/limits?sslmode=disable");
            let target = Target::parse(&url).unwrap();
            assert_eq!(target.config.get_password(), Some(password.as_bytes()));
            assert_eq!(target.mode, Mode::Disable, "{url}");
        }
    }

    #[test]
    fn a_value_that_is_not_utf8_is_named_by_its_decoded_parameter() {
        for query in ["sslmode=%ff", "ssl%6Dode=%ff"] {
            match Target::parse(&format!("postgres://app@db/limits?{query}")) {
                Err(Error::InvalidUrl(e)) => {
                    assert_eq!(e, "the value of sslmode is not UTF-8", "{query}")
                }
                other => panic!("{query}: {other:?}"),
            }
        }
    }

    #[test]
    fn a_root_file_is_read_at_once_and_named_in_the_description() {
        let missing = "postgres://app:s3cret-pw@db/limits?sslmode=verify-ca&sslrootcert=%2Fno%20such%2Fca.pem";
        match Target::parse(missing) {
            Err(Error::InvalidUrl(e)) => {
                assert!(e.contains("sslrootcert=/no such/ca.pem"), "{e}");
                assert!(!e.contains("s3cret"), "{e}");
            }
            other => panic!("{other:?}"),
        }
        // disable reads no roots.
        let url = "postgres://app:s3cret-pw@db/limits?sslmode=disable&sslrootcert=/no/ca.pem";
        let target = Target::parse(url).unwrap();
        assert_eq!(
            format!("{target:?}"),
            "postgres://app@db:5432/limits?sslmode=disable&sslrootcert=/no/ca.pem"
        );
    }

    #[test]
    fn a_unix_socket_is_never_encrypted() {
        let target =
            Target::parse("postgres://app@%2Fvar%2Frun%2Fpostgresql/limits?sslmode=require")
                .unwrap();
        assert_eq!(target.mode, Mode::Require);
        assert_eq!(target.config.get_ssl_mode(), SslMode::Disable);
    }
}
