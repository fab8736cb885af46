//! The command line of `tollgate`.

use std::fmt;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand};
use tollgate::url::shown;

/// The tollgate operator CLI: check a rules file, read and reset counters,
/// diagnose a store.
#[derive(Debug, Parser)]
#[command(name = "tollgate", version, about, long_about = None)]
pub(crate) struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub(crate) command: Command,
}

/// The subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Rules files.
    #[command(subcommand)]
    Rules(RulesCommand),
    /// Shows where one limit stands now, spending nothing.
    Status(LimitArgs),
    /// Clears one limit's counter for the current window.
    Reset(ResetArgs),
    /// Checks that a store answers, how fast, and (on Redis) how it is configured.
    Doctor(DoctorArgs),
}

/// The `rules` subcommands.
#[derive(Debug, Subcommand)]
pub(crate) enum RulesCommand {
    /// Validates a rules file and lists its rules, each with its shape (fixed or
    /// sliding); exit 1 on an invalid file.
    Check(CheckArgs),
}

/// Arguments of `rules check`.
#[derive(Debug, Args)]
pub(crate) struct CheckArgs {
    /// The TOML rules file.
    #[arg(value_name = "FILE")]
    pub(crate) file: PathBuf,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
}

/// Where counters live. Its `Debug` shows the URL as [`shown`] does:
/// never a password.
#[derive(Args)]
pub(crate) struct StoreArgs {
    /// The store URL: redis://HOST:PORT/DB (redis://:PASSWORD@HOST with a
    /// password), rediss://…, unix:///SOCKET, valkey://…, sqlite:PATH, or
    /// memory (a test double). Passwords are never printed.
    #[arg(
        long,
        env = "TOLLGATE_STORE",
        value_name = "URL",
        hide_env_values = true
    )]
    pub(crate) store: String,
}

impl fmt::Debug for StoreArgs {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoreArgs")
            .field("store", &shown(&self.store))
            .finish()
    }
}

/// The store, the rules and one limit: a rule and its key parts.
#[derive(Debug, Args)]
pub(crate) struct LimitArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// A TOML rules file; the shipped defaults when left out.
    #[arg(long, env = "TOLLGATE_RULES", value_name = "FILE")]
    pub(crate) rules: Option<PathBuf>,
    /// Print JSON instead of a table.
    #[arg(long)]
    pub(crate) json: bool,
    /// Take every key part exactly as given: no part is read as a visitor's
    /// address (for a rule whose `visitor` part holds something else).
    #[arg(long)]
    pub(crate) raw: bool,
    /// The rule's name, e.g. `ask`.
    #[arg(value_name = "RULE")]
    pub(crate) rule: String,
    /// The key parts, in the rule's order, e.g. `docs 203.0.113.9` (after
    /// `--` when one starts with `-`).
    ///
    /// A part the rule names `visitor` (as `ask` and `ask-burst` do) is a
    /// visitor's address, keyed as the service keys it: an IPv4 address as
    /// it is, an IPv6 address as its /64 (`2001:db8:0:1::9`, any other
    /// spelling of an address of that /64, and `2001:db8:0:1::/64` all mean
    /// `2001:db8:0:1::/64`), an IPv4-mapped IPv6 address as its IPv4
    /// address, and `local` as development mode's visitor. Anything else
    /// there is an error, unless `--raw` is given.
    #[arg(value_name = "PART")]
    pub(crate) parts: Vec<String>,
}

/// Arguments of `reset`.
#[derive(Debug, Args)]
pub(crate) struct ResetArgs {
    #[command(flatten)]
    pub(crate) limit: LimitArgs,
    /// Reset without asking (needed when stdin is not a terminal).
    #[arg(long, short = 'y')]
    pub(crate) yes: bool,
}

/// Arguments of `doctor`.
#[derive(Debug, Args)]
pub(crate) struct DoctorArgs {
    #[command(flatten)]
    pub(crate) store: StoreArgs,
    /// How many calls measure the round trip.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..=10_000))]
    pub(crate) calls: u32,
}

#[cfg(test)]
mod tests {
    use clap::Parser as _;

    use super::*;

    #[test]
    fn the_debug_output_of_the_command_line_shows_no_password() {
        for store in ["redis://:hunter2@cache:6379/0", "hunter2@cache:6379"] {
            let cli = Cli::try_parse_from(["tollgate", "doctor", "--store", store])
                .unwrap_or_else(|e| panic!("{e}"));
            let text = format!("{cli:?} {cli:#?}");
            assert!(!text.contains("hunter2"), "{text}");
            assert!(text.contains("StoreArgs"), "{text}");
        }
    }
}
