//! The `tollgate-demo` binary never prints a secret: a password, a token or
//! a URL's user information planted in its store URL (given by `--store` or
//! by `TOLLGATE_STORE`, the Upstash token by `UPSTASH_REDIS_REST_TOKEN`)
//! appears nowhere in what it writes (its logs at DEBUG, its startup error,
//! its usage errors), whether the store URL is refused at start, or the
//! demo starts and the store then fails each request (down, a wrong
//! password, a refused token), or the command line is refused (a store URL
//! or a secret given without `--store`).
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/demo_binary.rs"]
mod demo_binary;

use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::TcpListener;
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::secrets::giveaways;

/// Planted in every URL and token; more than 16 characters, so that even
/// written where a scheme goes (`SECRET://…`) it is not read as one.
const SECRET: &str = "Pl4ntedDem0Secret9";

/// Planted as passwords too: secrets holding the characters that may end a
/// URL's authority (`/`, `?`, `#`), an `@`, a `+` and a `%2F` escape, as
/// base64 keys and generated passwords do. No part of one (see
/// [`giveaways`]) is printed either.
const ODD_SECRETS: &[&str] = &[
    "Sl4sh/Dm0q#Vb2n?Tj5w@Mz8c+Rd3x%2FKp7y",
    "H4shx#Dm0q?Vb2n/Tj5w+Mz8c",
];

/// The first part of a planted secret (see [`giveaways`]) that `text`
/// shows, in any case.
fn shown_part(text: &str) -> Option<String> {
    let text = text.to_lowercase();
    std::iter::once(SECRET)
        .chain(ODD_SECRETS.iter().copied())
        .flat_map(giveaways)
        .find(|part| text.contains(part.as_str()))
}

/// Everything one run of the demo wrote, and how it ended.
#[derive(Debug)]
struct Run {
    /// Whether it started serving (then it was stopped by the test).
    served: bool,
    /// Its exit code, when it exited by itself.
    code: Option<i32>,
    /// Standard output and standard error, interleaved by line.
    output: String,
}

/// Appends each line of `stream` to `into`.
fn collect(stream: impl tokio::io::AsyncRead + Unpin + Send + 'static, into: Arc<Mutex<String>>) {
    tokio::spawn(async move {
        let mut lines = BufReader::new(stream).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let mut text = into.lock().unwrap();
            text.push_str(&line);
            text.push('\n');
        }
    });
}

/// Runs the demo with `--store store` (or `TOLLGATE_STORE`) and `env`; when
/// it starts serving, asks it for every route a store failure shows in
/// (health, an ask, a docs run), then stops it.
async fn run(store: &str, by_env: bool, env: &[(&str, &str)]) -> Run {
    // None of the demo's variables (the Upstash ones included) but `env`.
    let mut command = demo_binary::command();
    command
        .args(["--listen", "127.0.0.1:0"])
        .env("RUST_LOG", "debug")
        .envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    if by_env {
        command.env("TOLLGATE_STORE", store);
    } else {
        command.args(["--store", store]);
    }
    let mut child = command.spawn().unwrap();
    let output = Arc::new(Mutex::new(String::new()));
    collect(child.stdout.take().unwrap(), Arc::clone(&output));
    collect(child.stderr.take().unwrap(), Arc::clone(&output));

    let started = Instant::now();
    let base = loop {
        if let Some(base) = listening(&output.lock().unwrap()) {
            break Some(base);
        }
        if child.try_wait().unwrap().is_some() {
            break None;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "{store}: neither served nor exited in 20 s: {}",
            output.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    let served = base.is_some();
    if let Some(base) = base {
        let client = reqwest::Client::new();
        for (method, path) in [
            ("GET", "/healthz"),
            ("POST", "/sites/docs/ask"),
            ("POST", "/orgs/acme/runs"),
            ("GET", "/stats"),
        ] {
            let request = client
                .request(method.parse().unwrap(), format!("{base}{path}"))
                .timeout(Duration::from_secs(10));
            let answer = request.send().await.unwrap();
            let status = answer.status();
            let body = answer.text().await.unwrap_or_default();
            assert_eq!(shown_part(&body), None, "{store}: {path}: {body}");
            output
                .lock()
                .unwrap()
                .push_str(&format!("(test) {method} {path}: {status}\n"));
        }
        // The request lines are logged once each answer is sent.
        tokio::time::sleep(Duration::from_millis(300)).await;
        child.kill().await.unwrap();
    }
    let code = child.wait().await.unwrap().code();
    // The readers end with the streams.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let output = output.lock().unwrap().clone();
    Run {
        served,
        code: if served { None } else { code },
        output,
    }
}

/// `http://ADDR` from the demo's "listening on http://ADDR" line.
fn listening(output: &str) -> Option<String> {
    let rest = output.split("listening on ").nth(1)?;
    let base = rest.split_whitespace().next()?;
    base.starts_with("http://").then(|| base.to_owned())
}

/// A loopback port nothing listens on.
fn closed_port() -> u16 {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// An HTTP endpoint refusing every token as Upstash does (401 and an
/// `{"error"}` body); its address.
async fn refusing_endpoint() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let mut request = Vec::new();
                let mut buf = [0; 4096];
                // The head, then as much body as it declares.
                loop {
                    let Ok(n) = stream.read(&mut buf).await else {
                        return;
                    };
                    if n == 0 {
                        return;
                    }
                    request.extend_from_slice(&buf[..n]);
                    let text = String::from_utf8_lossy(&request).to_lowercase();
                    if let Some(end) = text.find("\r\n\r\n") {
                        let length = text
                            .lines()
                            .find_map(|l| l.strip_prefix("content-length:"))
                            .and_then(|v| v.trim().parse::<usize>().ok())
                            .unwrap_or(0);
                        if request.len() >= end + 4 + length {
                            break;
                        }
                    }
                }
                let body = r#"{"error":"WRONGPASS invalid or missing auth token"}"#;
                let answer = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\n\
                     content-length: {}\r\nconnection: close\r\n\r\n{body}",
                    body.len()
                );
                let _ = stream.write_all(answer.as_bytes()).await;
            });
        }
    });
    addr.to_string()
}

/// Sets the password of the server on `port` (an inline command).
async fn require_password(port: u16, password: &str) {
    let mut stream = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .unwrap();
    let command = format!("CONFIG SET requirepass {password}\r\n");
    stream.write_all(command.as_bytes()).await.unwrap();
    let mut answer = [0; 5];
    stream.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"+OK\r\n");
}

/// Fails when the run wrote any part of a planted secret (in any case).
fn assert_hidden(store: &str, run: &Run) {
    assert_eq!(
        shown_part(&run.output),
        None,
        "{store}: the demo printed a secret: {run:#?}"
    );
    assert!(!run.output.contains("panicked"), "{store}: {run:#?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_url_refused_at_start_is_never_echoed() {
    let port = closed_port();
    let token = [("UPSTASH_REDIS_REST_TOKEN", SECRET)];
    let refused = [
        // Not URLs: a secret pasted in a URL's place.
        SECRET.to_owned(),
        format!("{SECRET}@127.0.0.1:{port}"),
        format!("default:{SECRET}@127.0.0.1:{port}"),
        format!("{SECRET}://127.0.0.1:{port}"),
        // Unknown, malformed or refused URLs holding it.
        format!("mysql://user:{SECRET}@127.0.0.1/x"),
        format!("memory:{SECRET}"),
        format!("redis://:{SECRET}@127.0.0.1:99999"),
        format!("redis://:{SECRET}@127.0.0.1:{port}/x"),
        format!("rediss://:{SECRET}@127.0.0.1:99999"),
        format!("redis-cluster://:{SECRET}@127.0.0.1:99999"),
        format!("redis-cluster://:{SECRET}@127.0.0.1:{port}/x"),
        format!("postgres://user:{SECRET}@127.0.0.1:99999/db"),
        format!("postgres://user:{SECRET}@127.0.0.1:{port}/db?sslmode=bogus"),
        format!("upstash+https://user:{SECRET}@127.0.0.1:{port}"),
        format!("upstash+http://127.0.0.1:{port}?_token={SECRET}"),
        format!("upstash+http://127.0.0.1:{port}/{SECRET}"),
        // The token would travel in clear text: refused, and not shown.
        format!("upstash+http://203.0.113.9:{port}"),
    ];
    let mut refused = refused.to_vec();
    for odd in ODD_SECRETS {
        refused.extend([
            (*odd).to_owned(),
            format!("{odd}@127.0.0.1:{port}"),
            format!("mysql://user:{odd}@127.0.0.1/x"),
            // The driver would read part of the password as the host.
            format!("redis://:{odd}@127.0.0.1:{port}"),
            format!("redis://{odd}@127.0.0.1:{port}/0"),
            format!("redis-cluster://:{odd}@127.0.0.1:{port}"),
            format!("postgres://user:{odd}@127.0.0.1:99999/db"),
            format!("upstash+https://user:{odd}@127.0.0.1:{port}"),
        ]);
    }
    let mut not_a_url = 0;
    for store in &refused {
        for by_env in [false, true] {
            let run = run(store, by_env, &token).await;
            assert_eq!(run.code, Some(1), "{store}: {run:#?}");
            assert!(run.output.contains("invalid --store"), "{store}: {run:#?}");
            assert_hidden(store, &run);
            not_a_url += usize::from(run.output.contains("not a URL"));
        }
    }
    assert_eq!(not_a_url, 2 * (4 + 2 * ODD_SECRETS.len()));
    // The Upstash token in the environment, and a URL there the store refuses.
    for url in [
        format!("http://203.0.113.9:{port}"),
        format!("http://user:{SECRET}@127.0.0.1:{port}"),
    ] {
        let env = [("UPSTASH_REDIS_REST_URL", url.as_str()), token[0]];
        let run = run("upstash", false, &env).await;
        assert_eq!(run.code, Some(1), "{url}: {run:#?}");
        assert_hidden(&url, &run);
    }
    let run = run(
        "upstash+http://203.0.113.9:1",
        false,
        &[("UPSTASH_REDIS_REST_TOKEN", SECRET)],
    )
    .await;
    assert!(
        run.output
            .contains("the token would travel in clear text to 203.0.113.9:1"),
        "{run:#?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_store_failing_every_request_never_shows_the_secret() {
    let port = closed_port();
    // A private server whose password is not the one planted.
    let redis = RedisServer::start();
    redis.require_private("a server with its own password");
    require_password(redis.port(), "another-password").await;
    let refusing = refusing_endpoint().await;
    let token = ("UPSTASH_REDIS_REST_TOKEN", SECRET);
    let cases: Vec<(String, Vec<(&str, String)>)> = vec![
        (format!("redis://:{SECRET}@127.0.0.1:{port}"), vec![]),
        (format!("redis://{SECRET}@127.0.0.1:{port}/0"), vec![]),
        (
            format!("redis://default:{SECRET}@127.0.0.1:{}", redis.port()),
            vec![],
        ),
        (format!("rediss://:{SECRET}@127.0.0.1:{port}"), vec![]),
        (
            format!("redis-cluster://:{SECRET}@127.0.0.1:{port}"),
            vec![],
        ),
        (
            format!("postgres://user:{SECRET}@127.0.0.1:{port}/db"),
            vec![],
        ),
        (
            format!("postgres://user@127.0.0.1:{port}/db?password={SECRET}"),
            vec![],
        ),
        // A password holding `/`, `?` and `#`, which the driver takes.
        (
            format!("postgres://user:{}@127.0.0.1:{port}/db", ODD_SECRETS[1]),
            vec![],
        ),
        (
            format!("upstash+http://127.0.0.1:{port}"),
            vec![(token.0, token.1.to_owned())],
        ),
        (
            format!("upstash+http://{refusing}"),
            vec![(token.0, token.1.to_owned())],
        ),
        (
            "upstash".to_owned(),
            vec![
                (token.0, token.1.to_owned()),
                ("UPSTASH_REDIS_REST_URL", format!("http://{refusing}")),
            ],
        ),
    ];
    for (store, env) in &cases {
        let env: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
        for by_env in [false, true] {
            let run = run(store, by_env, &env).await;
            println!("{store} (by env: {by_env}):\n{}", run.output);
            assert_hidden(store, &run);
            if store.starts_with("rediss:") && run.output.contains("not compiled in") {
                // The demo alone builds no TLS to Redis (a workspace build does).
                continue;
            }
            assert!(run.served, "{store}: {run:#?}");
            // The start-up line names the store as tollgate::url::shown does.
            let named = format!("store={}", tollgate::url::shown(store));
            assert!(
                named.contains("127.0.0.1:") || named == "store=upstash",
                "{named}"
            );
            assert!(run.output.contains(&named), "{store}: {run:#?}");
            // The store failed the ask (fail-closed), and the test saw it.
            assert!(
                run.output
                    .contains("(test) POST /sites/docs/ask: 503 Service Unavailable"),
                "{store}: {run:#?}"
            );
            assert_hidden(store, &run);
        }
    }
}

/// The demo's options, as an embedding program may log them: their `Debug`
/// shows the store URL by its scheme and host only, and nothing of a text
/// given in its place that is not a URL.
#[test]
fn the_options_debug_output_hides_the_store_password() {
    use clap::Parser as _;

    for (store, shown) in [
        (
            format!("redis://user:{SECRET}@127.0.0.1:1/0?password={SECRET}"),
            "\"redis://127.0.0.1:1\"".to_owned(),
        ),
        (SECRET.to_owned(), format!("{:?}", tollgate::url::NOT_A_URL)),
        (
            format!("redis://:{}@127.0.0.1:1/0", ODD_SECRETS[0]),
            "\"redis://127.0.0.1:1\"".to_owned(),
        ),
        (
            format!("postgres://user:{}@127.0.0.1:1/db", ODD_SECRETS[1]),
            "\"postgres://127.0.0.1:1\"".to_owned(),
        ),
        (
            format!("rediss://user:{}@127.0.0.1:1", ODD_SECRETS[1]),
            "\"rediss://127.0.0.1:1\"".to_owned(),
        ),
    ] {
        let options = tollgate_demo::Options::try_parse_from(["tollgate-demo", "--store", &store])
            .unwrap_or_else(|e| panic!("{e}"));
        let text = format!("{options:?} {options:#?}");
        assert_eq!(shown_part(&text), None, "{text}");
        assert!(!text.contains("user"), "{text}");
        assert!(text.contains(&format!("store: {shown}")), "{text}");
    }
}

/// Runs the demo with `args` until the parser refuses them; its exit code,
/// standard output and standard error.
async fn refused(args: &[&str]) -> (Option<i32>, String, String) {
    let output = demo_binary::command()
        .args(args)
        .args(["--listen", "127.0.0.1:0"])
        .stdin(Stdio::null())
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .unwrap_or_else(|_| panic!("{args:?}: the demo is still running after 20 s"))
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn the_parser_never_echoes_a_secret_given_in_the_wrong_place() {
    let port = closed_port();
    let url = format!("redis://:{SECRET}@127.0.0.1:{port}");
    let at_host = format!("{SECRET}@127.0.0.1:{port}");
    let stray_url = format!("unexpected argument 'redis://***@127.0.0.1:{port}' found");
    let stray = "unexpected argument '***' found";
    let mistyped = "unexpected argument '--bogus-flag' found";
    let odd_url = format!("redis://:{}@127.0.0.1:{port}/0", ODD_SECRETS[0]);
    let odd_stray_url = format!("unexpected argument 'redis://***@127.0.0.1:{port}/0' found");
    let cases: [(&[&str], &str); 10] = [
        // A forgotten --store: the parser names the stray argument.
        (&[SECRET], stray),
        (&[&at_host], stray),
        (&[&url], &stray_url),
        (&[ODD_SECRETS[0]], stray),
        (&[&odd_url], &odd_stray_url),
        (&["--store", &odd_url, "--bogus-flag"], mistyped),
        (&["--store", &url, SECRET], stray),
        // A mistyped flag is named, the store given with it is not.
        (&["--store", &url, "--bogus-flag"], mistyped),
        (&["--store", SECRET, "--bogus-flag"], mistyped),
        (&["--github-secret", SECRET, "--bogus-flag"], mistyped),
    ];
    for (args, expected) in cases {
        let (code, stdout, stderr) = refused(args).await;
        assert_eq!(code, Some(2), "{args:?}: {stderr}");
        assert!(stdout.is_empty(), "{args:?}: {stdout}");
        assert_eq!(
            shown_part(&stderr),
            None,
            "{args:?}: the parser printed a secret: {stderr}"
        );
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
        assert!(
            stderr.contains("Usage: tollgate-demo"),
            "{args:?}: {stderr}"
        );
    }
    // Help still goes to standard output, and succeeds.
    let output = demo_binary::command().arg("--help").output().await.unwrap();
    assert_eq!(output.status.code(), Some(0));
    assert!(String::from_utf8_lossy(&output.stdout).contains("--store"));
}
