//! `tollgate-rest-proxy`: an Upstash-compatible REST endpoint in front of a
//! plain redis-server, for local development and CI.

use std::io::{IsTerminal as _, Write as _};
use std::net::SocketAddr;
use std::process::ExitCode;
use std::time::Duration;

use clap::Parser;
use tollgate::url::shown;
use tollgate_rest_proxy::{
    DEFAULT_MAX_BODY, DEFAULT_MAX_COMMANDS, DEFAULT_MAX_CONNECTIONS, Error, Options, Proxy,
};
use tracing_subscriber::EnvFilter;

/// An Upstash-compatible REST proxy in front of a plain Redis, for local
/// development and CI (not a production server).
#[derive(Debug, Parser)]
#[command(name = "tollgate-rest-proxy", version)]
struct Cli {
    /// The address to listen on (port 0 picks a free one; the real address
    /// is printed). Loopback unless told otherwise.
    #[arg(long, default_value = "127.0.0.1:8079")]
    listen: SocketAddr,
    /// The Redis to send commands to, as a user restricted to the
    /// allow-list (or an administrator, with --create-user).
    #[arg(long, default_value = "redis://127.0.0.1:6379")]
    redis: String,
    /// The token callers must present (`Authorization: Bearer TOKEN` or `?_token=`).
    #[arg(long, env = "TOLLGATE_PROXY_TOKEN", hide_env_values = true)]
    token: Option<String>,
    /// Create (or update) Redis user NAME through --redis's user, restricted
    /// to the allow-list, with a password only this process knows, and run
    /// callers' commands as it.
    #[arg(long, value_name = "NAME")]
    create_user: Option<String>,
    /// Serve even when --redis's user may run commands outside the
    /// allow-list (scripts sent through the proxy can then run them too).
    #[arg(long, conflicts_with = "create_user")]
    allow_unrestricted_user: bool,
    /// Print the `ACL SETUSER NAME …` line for --redis's server (append
    /// `>PASSWORD`; pipe it to redis-cli) and exit.
    #[arg(long, value_name = "NAME")]
    print_acl: Option<String>,
    /// The largest request body, in bytes; larger ones get a 413.
    #[arg(long, default_value_t = DEFAULT_MAX_BODY)]
    max_body: usize,
    /// The most commands in one pipeline or transaction; more get a 413.
    #[arg(long, default_value_t = DEFAULT_MAX_COMMANDS)]
    max_commands: usize,
    /// The bound on one Redis call, connecting included, in milliseconds; a
    /// script still running then is killed when Redis lets it be.
    #[arg(long, default_value_t = 1000)]
    redis_timeout_ms: u64,
    /// How long a client has to send a request head, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    header_timeout_ms: u64,
    /// How long a client has to send a request body once its head is in, in milliseconds.
    #[arg(long, default_value_t = 10_000)]
    body_timeout_ms: u64,
    /// The most connections open at once.
    #[arg(long, default_value_t = DEFAULT_MAX_CONNECTIONS)]
    max_connections: usize,
    /// Threads serving requests. One serves tens of thousands of requests
    /// a second, each costing less than on several threads (no hand-offs
    /// between them), and leaves the other cores to Redis and the callers.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..))]
    threads: u16,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match cli.threads {
        1 => tokio::runtime::Builder::new_current_thread(),
        threads => {
            let mut builder = tokio::runtime::Builder::new_multi_thread();
            builder.worker_threads(usize::from(threads));
            builder
        }
    }
    .enable_all()
    .build();
    match runtime {
        Ok(runtime) => runtime.block_on(run(cli)),
        Err(e) => fail(&format!("cannot start the runtime: {e}")),
    }
}

async fn run(cli: Cli) -> ExitCode {
    if let Some(name) = &cli.print_acl {
        return match tollgate_rest_proxy::acl_setuser_line(&cli.redis, name).await {
            Ok(line) => {
                println!("{line}");
                ExitCode::SUCCESS
            }
            Err(e) => fail(&e),
        };
    }
    let Some(token) = cli.token.clone().filter(|t| !t.is_empty()) else {
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
    let proxy = match Proxy::new(options(&cli, token)) {
        Ok(proxy) => proxy,
        Err(e) => return fail(&e),
    };
    match proxy.connect().await {
        Ok(()) => {}
        Err(Error::Unavailable(why)) => {
            tracing::warn!(%why, "redis is not answering yet; the proxy connects on the first request");
        }
        Err(e) => return fail(&e),
    }
    let listener = match tokio::net::TcpListener::bind(cli.listen).await {
        Ok(listener) => listener,
        Err(e) => return fail(&format!("cannot listen on {}: {e}", cli.listen)),
    };
    let addr = match listener.local_addr() {
        Ok(addr) => addr,
        Err(e) => return fail(&e),
    };
    tracing::info!(redis = %shown(&cli.redis), "proxying");
    if proxy.is_restricted() {
        tracing::info!("{}", proxy.describe());
    } else {
        tracing::warn!("{}", proxy.describe());
    }
    if !addr.ip().is_loopback() {
        tracing::warn!(%addr, "listening beyond loopback: anyone who reaches this address with the token can run those commands, over plain HTTP");
    }
    println!("listening on http://{addr}");
    let _ = std::io::stdout().flush();
    let shutdown = async {
        let _ = tokio::signal::ctrl_c().await;
    };
    match proxy.serve(listener, shutdown).await {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => fail(&e),
    }
}

fn options(cli: &Cli, token: String) -> Options {
    let options = Options::new(cli.redis.clone(), token)
        .max_body(cli.max_body)
        .max_commands(cli.max_commands)
        .redis_timeout(Duration::from_millis(cli.redis_timeout_ms))
        .header_timeout(Duration::from_millis(cli.header_timeout_ms))
        .body_timeout(Duration::from_millis(cli.body_timeout_ms))
        .max_connections(cli.max_connections);
    match (&cli.create_user, cli.allow_unrestricted_user) {
        (Some(name), _) => options.create_user(name),
        (None, true) => options.allow_unrestricted_user(),
        (None, false) => options,
    }
}

fn fail(error: &dyn std::fmt::Display) -> ExitCode {
    eprintln!("tollgate-rest-proxy: {error}");
    ExitCode::FAILURE
}
