//! `tollgate-demo`: a small service guarded by tollgate's default rules.

use std::error::Error as _;
use std::io::IsTerminal as _;
use std::process::ExitCode;

use clap::Parser;
use clap::error::{ContextKind, ContextValue};
use tollgate::url::Redactor;
use tollgate_demo::{Options, run};
use tracing_subscriber::EnvFilter;

#[tokio::main]
async fn main() -> ExitCode {
    let options = match Options::try_parse() {
        Ok(options) => options,
        Err(err) => return usage(&err),
    };
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::stdout().is_terminal())
        .init();
    match run(options, shutdown()).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            let mut message = format!("tollgate-demo: error: {err}");
            let mut source = err.source();
            while let Some(cause) = source {
                message.push_str(&format!(": {cause}"));
                source = cause.source();
            }
            eprintln!("{message}");
            ExitCode::FAILURE
        }
    }
}

/// Help and version go to stdout (exit 0); a usage error to stderr (exit
/// 2) as the parser renders it, but with a stray argument (a store URL, or
/// a secret, given without `--store`) cleaned as a store URL is, so that
/// one that is not a URL is not shown at all (a mistyped flag is shown).
fn usage(err: &clap::Error) -> ExitCode {
    if !err.use_stderr() {
        let _ = err.print();
        return ExitCode::from(u8::try_from(err.exit_code()).unwrap_or(2));
    }
    let redactor = match err.get(ContextKind::InvalidArg) {
        Some(ContextValue::String(arg)) => Redactor::for_argument(arg),
        _ => Redactor::default(),
    };
    eprint!("{}", redactor.clean(&err.render().to_string()));
    ExitCode::from(2)
}

/// Completes on Ctrl-C or SIGTERM.
async fn shutdown() {
    let ctrl_c = async {
        if tokio::signal::ctrl_c().await.is_err() {
            std::future::pending::<()>().await;
        }
    };
    #[cfg(unix)]
    let terminate = async {
        use tokio::signal::unix::{SignalKind, signal};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                term.recv().await;
            }
            Err(_) => std::future::pending::<()>().await,
        }
    };
    #[cfg(not(unix))]
    let terminate = std::future::pending::<()>();
    tokio::select! {
        () = ctrl_c => {}
        () = terminate => {}
    }
    tracing::info!("shutting down");
}
