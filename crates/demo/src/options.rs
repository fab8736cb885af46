//! [`Options`]: the command line (and environment) of `tollgate-demo`.

use std::fmt;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Parser;
use clap::builder::RangedU64ValueParser;
use tollgate::axum::{Network, Trust, VisitorSource};
use tollgate::url::shown;

use crate::signature::WebhookSecret;
use crate::{DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, Limits};

/// A small service guarded by tollgate's default rules.
///
/// Its `Debug` shows the store URL as [`tollgate::url::shown`] does (scheme
/// and host, never a password) and no webhook secret.
#[derive(Clone, Parser)]
#[command(name = "tollgate-demo", version, about, long_about = None)]
pub struct Options {
    /// Address to listen on.
    #[arg(long, env = "TOLLGATE_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// Where counters live: sqlite:PATH, redis://HOST:PORT, rediss://HOST:PORT
    /// redis-cluster://HOST:PORT,HOST:PORT or postgres://USER@HOST/DB.
    #[arg(
        long,
        env = "TOLLGATE_STORE",
        default_value = "sqlite:tollgate-demo.sqlite3",
        hide_env_values = true
    )]
    pub store: String,

    /// A TOML rules file replacing the shipped defaults.
    #[arg(long, env = "TOLLGATE_RULES", value_name = "FILE")]
    pub rules: Option<PathBuf>,

    /// Which client address to believe: the socket peer; the cf-connecting-ip
    /// header from a peer in Cloudflare's networks (or in the --trusted-proxy
    /// networks, when given); or X-Forwarded-For past --trusted-proxy networks.
    #[arg(
        long,
        env = "TOLLGATE_TRUST",
        default_value = "peer",
        value_parser = ["peer", "cf-connecting-ip", "x-forwarded-for"]
    )]
    pub trust: String,

    /// A proxy network whose X-Forwarded-For entries or cf-connecting-ip
    /// header are believed (repeatable, or comma-separated in the environment),
    /// e.g. 10.0.0.0/8. With --trust cf-connecting-ip these networks replace
    /// Cloudflare's published ones.
    #[arg(
        long = "trusted-proxy",
        env = "TOLLGATE_TRUSTED_PROXIES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<Network>,

    /// Seconds a connection has to send a request head (from its start or its
    /// previous response) before it is closed; slow clients cannot hold it.
    #[arg(
        long,
        env = "TOLLGATE_HEADER_TIMEOUT",
        value_name = "SECS",
        default_value_t = DEFAULT_HEADER_TIMEOUT.as_secs(),
        value_parser = clap::value_parser!(u64).range(1..=3_600)
    )]
    pub header_timeout: u64,

    /// Where to serve `GET /metrics` (Prometheus text), e.g. 127.0.0.1:9300:
    /// an operator's address, apart from the public one, since the metrics
    /// show budgets that responses keep hidden. Not served when unset.
    #[arg(long, env = "TOLLGATE_METRICS_LISTEN", value_name = "ADDR")]
    pub metrics_listen: Option<SocketAddr>,

    /// Where to serve the gRPC `tollgate.demo.v1.Ask` service (over
    /// HTTP/2 without TLS), e.g. 127.0.0.1:50051: the ask route's rules,
    /// visitor identity and store. Not served when unset.
    #[arg(long, env = "TOLLGATE_GRPC_LISTEN", value_name = "ADDR")]
    pub grpc_listen: Option<SocketAddr>,

    /// Open connections at most; past it, new connections wait to be accepted.
    #[arg(
        long,
        env = "TOLLGATE_MAX_CONNECTIONS",
        value_name = "N",
        default_value_t = DEFAULT_MAX_CONNECTIONS,
        value_parser = RangedU64ValueParser::<usize>::new().range(1..)
    )]
    pub max_connections: usize,

    /// Development mode: a request with no client address is the `local` visitor.
    #[arg(long, env = "TOLLGATE_DEV")]
    pub dev: bool,

    /// The GitHub webhook's secret: POST /webhooks/github then accepts only
    /// deliveries whose X-Hub-Signature-256 is the HMAC-SHA256 of the body
    /// with it (others are 401 and leave no mark). Without it deliveries are
    /// unverified. Prefer the environment: a flag shows in the process list.
    #[arg(
        long,
        env = "GITHUB_WEBHOOK_SECRET",
        value_name = "SECRET",
        hide_env_values = true,
        value_parser = parse_secret
    )]
    pub github_secret: Option<WebhookSecret>,

    /// Milliseconds the fake AI provider takes to answer an ask: the time
    /// an ask holds its in-flight leases (`ask-inflight`).
    #[arg(
        long,
        env = "TOLLGATE_PROVIDER_DELAY_MS",
        value_name = "MS",
        default_value_t = 0,
        value_parser = clap::value_parser!(u64).range(0..=600_000)
    )]
    pub provider_delay_ms: u64,
}

/// A webhook secret from the command line or the environment; the error
/// never repeats the value.
fn parse_secret(value: &str) -> Result<WebhookSecret, &'static str> {
    WebhookSecret::new(value.as_bytes()).ok_or("the secret is empty")
}

impl fmt::Debug for Options {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Every field, so that a new one is not left out by mistake.
        let Options {
            listen,
            store,
            rules,
            trust,
            trusted_proxies,
            header_timeout,
            metrics_listen,
            grpc_listen,
            max_connections,
            dev,
            github_secret,
            provider_delay_ms,
        } = self;
        f.debug_struct("Options")
            .field("listen", listen)
            .field("store", &shown(store))
            .field("rules", rules)
            .field("trust", trust)
            .field("trusted_proxies", trusted_proxies)
            .field("header_timeout", header_timeout)
            .field("metrics_listen", metrics_listen)
            .field("grpc_listen", grpc_listen)
            .field("max_connections", max_connections)
            .field("dev", dev)
            .field("github_secret", github_secret)
            .field("provider_delay_ms", provider_delay_ms)
            .finish()
    }
}

impl Options {
    /// The connection limits these options describe.
    pub fn limits(&self) -> Limits {
        Limits {
            header_timeout: Duration::from_secs(self.header_timeout),
            max_connections: self.max_connections,
        }
    }

    /// The visitor source these options describe: `--trusted-proxy` networks
    /// are the proxies of `x-forwarded-for`, and replace Cloudflare's
    /// networks for `cf-connecting-ip`.
    ///
    /// # Errors
    ///
    /// An unknown trust setting (the parser already refuses one).
    pub fn visitors(&self) -> Result<VisitorSource, tollgate::axum::Error> {
        let proxies = self.trusted_proxies.clone();
        let trust = match self.trust.parse()? {
            Trust::XForwardedFor(_) => Trust::XForwardedFor(proxies),
            Trust::CfConnectingIp(_) if !proxies.is_empty() => Trust::CfConnectingIp(proxies),
            other => other,
        };
        Ok(VisitorSource::new(trust).development(self.dev))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn trust(args: &[&str]) -> Trust {
        let options = Options::try_parse_from(["tollgate-demo"].iter().chain(args))
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        let visitors = options
            .visitors()
            .unwrap_or_else(|e| panic!("{args:?}: {e}"));
        visitors.trust().clone()
    }

    fn nets(list: &[&str]) -> Vec<Network> {
        list.iter()
            .map(|n| n.parse().unwrap_or_else(|e| panic!("{n}: {e}")))
            .collect()
    }

    #[test]
    fn the_webhook_secret_is_never_in_debug_output() {
        let options =
            Options::try_parse_from(["tollgate-demo", "--github-secret", "hunter2-planted"])
                .unwrap_or_else(|e| panic!("{e}"));
        assert!(options.github_secret.is_some());
        let shown = format!("{options:?} {options:#?}");
        assert!(!shown.contains("hunter2"), "{shown}");
        assert!(shown.contains("WebhookSecret(<redacted>)"), "{shown}");
    }

    #[test]
    fn trusted_proxies_replace_cloudflare_networks() {
        assert_eq!(trust(&["--trust", "cf-connecting-ip"]), Trust::cloudflare());
        assert_eq!(
            trust(&[
                "--trust",
                "cf-connecting-ip",
                "--trusted-proxy",
                "127.0.0.0/8",
                "--trusted-proxy",
                "::1/128",
            ]),
            Trust::CfConnectingIp(nets(&["127.0.0.0/8", "::1/128"]))
        );
        assert_eq!(
            trust(&[
                "--trust",
                "x-forwarded-for",
                "--trusted-proxy",
                "10.0.0.0/8"
            ]),
            Trust::XForwardedFor(nets(&["10.0.0.0/8"]))
        );
        assert_eq!(trust(&["--trusted-proxy", "10.0.0.0/8"]), Trust::Peer);
    }
}
