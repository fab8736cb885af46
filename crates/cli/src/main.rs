#![doc = include_str!("../README.md")]

mod args;
mod check;
mod doctor;
mod failure;
mod limit;
mod reset;
mod rules_file;
mod server_info;
mod status;
mod table;
mod time;

use std::io::Write as _;
use std::process::ExitCode;

use clap::Parser as _;
use clap::error::{ContextKind, ContextValue, ErrorKind};
use tollgate::url::Redactor;

use crate::args::{Cli, Command, RulesCommand};
use crate::failure::Failure;

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(err) => return usage(&err),
    };
    let redactor = match &cli.command {
        Command::Status(args) => Redactor::for_url(&args.store.store),
        Command::Reset(args) => Redactor::for_url(&args.limit.store.store),
        Command::Doctor(args) => Redactor::for_url(&args.store.store),
        Command::Rules(_) => Redactor::default(),
    };
    match run(&cli.command) {
        Ok(report) => {
            let mut stdout = std::io::stdout().lock();
            // A closed stdout (`| head`) is not an error worth a message.
            let _ = stdout.write_all(redactor.clean(&report).as_bytes());
            let _ = stdout.flush();
            ExitCode::SUCCESS
        }
        Err(err) => {
            eprintln!("tollgate: error: {}", redactor.clean(&err.to_string()));
            ExitCode::FAILURE
        }
    }
}

/// Runs one command; what it prints on success.
fn run(command: &Command) -> Result<String, Failure> {
    if let Command::Rules(RulesCommand::Check(args)) = command {
        return check::run(args);
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .map_err(|e| Failure::with("cannot start the async runtime", &e))?;
    runtime.block_on(async {
        match command {
            Command::Status(args) => status::run(args).await,
            Command::Reset(args) => reset::run(args).await,
            Command::Doctor(args) => doctor::run(args).await,
            Command::Rules(RulesCommand::Check(args)) => check::run(args),
        }
    })
}

/// A redactor for a usage error: a stray argument after a subcommand (a
/// store URL, or a secret, given without `--store`) is cleaned as a store
/// URL is, so one that is not a URL is not shown at all. (A mistyped
/// subcommand or flag is shown: see [`Redactor::for_argument`].)
fn stray(err: &clap::Error) -> Redactor {
    match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => Redactor::for_argument(arg),
        _ => Redactor::default(),
    }
}

/// Help and version go to stdout (exit 0); a usage error is one line
/// (exit 2), with no value that was given repeated past a URL's host.
fn usage(err: &clap::Error) -> ExitCode {
    match err.kind() {
        ErrorKind::DisplayHelp
        | ErrorKind::DisplayVersion
        | ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand => {
            let _ = err.print();
            if err.kind() == ErrorKind::DisplayHelpOnMissingArgumentOrSubcommand {
                ExitCode::from(2)
            } else {
                ExitCode::SUCCESS
            }
        }
        _ => {
            // The first paragraph: the message and what it lists (the
            // missing arguments), without the tips and the usage.
            let text = err.render().to_string();
            let lines: Vec<&str> = text
                .lines()
                .take_while(|line| !line.trim().is_empty())
                .map(str::trim)
                .collect();
            let message = lines.join(" ");
            let message = message.strip_prefix("error: ").unwrap_or(&message);
            eprintln!(
                "tollgate: error: {} (see --help)",
                stray(err).clean(message)
            );
            ExitCode::from(2)
        }
    }
}
