//! [`Options`]: the command line (and environment) of `tollgate-demo`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use tollgate::axum::{Network, Trust, VisitorSource};

/// A small service guarded by tollgate's default rules.
#[derive(Clone, Debug, Parser)]
#[command(name = "tollgate-demo", version, about, long_about = None)]
pub struct Options {
    /// Address to listen on.
    #[arg(long, env = "TOLLGATE_LISTEN", default_value = "127.0.0.1:3000")]
    pub listen: SocketAddr,

    /// Where counters live: sqlite:PATH, redis://HOST:PORT or rediss://HOST:PORT.
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

    /// Which client address to believe: the socket peer, Cloudflare's
    /// cf-connecting-ip header, or X-Forwarded-For past --trusted-proxy networks.
    #[arg(
        long,
        env = "TOLLGATE_TRUST",
        default_value = "peer",
        value_parser = ["peer", "cf-connecting-ip", "x-forwarded-for"]
    )]
    pub trust: String,

    /// A proxy network whose X-Forwarded-For entries are believed (repeatable,
    /// or comma-separated in the environment), e.g. 10.0.0.0/8.
    #[arg(
        long = "trusted-proxy",
        env = "TOLLGATE_TRUSTED_PROXIES",
        value_name = "CIDR",
        value_delimiter = ','
    )]
    pub trusted_proxies: Vec<Network>,

    /// Development mode: a request with no client address is the `local` visitor.
    #[arg(long, env = "TOLLGATE_DEV")]
    pub dev: bool,
}

impl Options {
    /// The visitor source these options describe.
    ///
    /// # Errors
    ///
    /// An unknown trust setting (the parser already refuses one).
    pub fn visitors(&self) -> Result<VisitorSource, tollgate::axum::Error> {
        let trust = match self.trust.parse()? {
            Trust::XForwardedFor(_) => Trust::XForwardedFor(self.trusted_proxies.clone()),
            other => other,
        };
        Ok(VisitorSource::new(trust).development(self.dev))
    }
}
