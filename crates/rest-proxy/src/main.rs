//! `tollgate-rest-proxy`: an Upstash-compatible REST endpoint in front of a
//! plain redis-server, for local development and CI.

use std::io::{IsTerminal as _, Write as _};
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tollgate_rest_proxy::{DEFAULT_MAX_BODY, Options, redacted_url};
use tracing_subscriber::EnvFilter;

/// An Upstash-compatible REST proxy in front of a plain Redis, for local
/// development and CI (not a production server).
#[derive(Debug, Parser)]
#[command(name = "tollgate-rest-proxy", version)]
struct Cli {
    /// The address to listen on (port 0 picks a free one; the real address is printed).
    #[arg(long, default_value = "127.0.0.1:8079")]
    listen: String,
    /// The Redis to send commands to.
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The token callers must present (`Authorization: Bearer TOKEN` or `?_token=`).
    #[arg(long, env = "TOLLGATE_PROXY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// The largest request body, in bytes; larger ones get a 413.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY)]
    max_body: usize,
    /// The bound on one Redis call, connecting included, in milliseconds.
    #[arg(long, default_value_t = 1000)]
    redis_timeout_ms: u64,
}

#[tokio::main]
async fn main() -> ExitCode {
    let cli = Cli::parse();
    let Some(token) = cli.token.filter(|t| !t.is_empty()) else {
        eprintln!("tollgate-rest-proxy: no token: pass --token TOKEN or set TOLLGATE_PROXY_TOKEN");
        return ExitCode::from(2);
    };
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let options = Options::new(cli.redis.clone(), token)
        .max_body(cli.max_body)
        .redis_timeout(Duration::from_millis(cli.redis_timeout_ms));
    let app = match tollgate_rest_proxy::router(options) {
        Ok(app) => app,
        Err(e) => return fail(&e),
    };
    let listener = match tokio::net::TcpListener::bind(&cli.listen).await {
        Ok(listener) => listener,
        Err(e) => return fail(&format!("cannot listen on {}: {e}", cli.listen)),
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => return fail(&e),
    };
    tracing::info!(redis = %redacted_url(&cli.redis), "proxying");
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await
    {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("tollgate-rest-proxy: {error}");
    ExitCode::FAILURE
}
