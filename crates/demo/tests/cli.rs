//! The `tollgate-demo` binary: it serves, logs each request, and fails to
//! start with a clear message.
#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "support/demo_binary.rs"]
mod demo_binary;

use std::process::Stdio;
use std::time::Duration;

use demo_binary::{Running, command as demo, next_line};

/// Runs the binary to its end; its exit code and standard error.
async fn fails(args: &[&str]) -> (Option<i32>, String) {
    let output = demo().args(args).args(["--listen", "127.0.0.1:0"]).output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .unwrap()
        .unwrap();
    (
        output.status.code(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[tokio::test]
async fn unknown_store_url_is_a_clear_startup_error() {
    let (code, stderr) = fails(&["--store", "mysql://user:hunter2@db/x"]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("invalid --store") && stderr.contains("`mysql`"),
        "{stderr}"
    );
    assert!(!stderr.contains("hunter2"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
}

#[tokio::test]
async fn unreadable_or_invalid_rules_file_is_a_clear_startup_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.sqlite3").display());
    let missing = dir.path().join("missing.toml");
    let (code, stderr) = fails(&["--store", &store, "--rules", missing.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("cannot read the rules file"), "{stderr}");

    let invalid = dir.path().join("invalid.toml");
    std::fs::write(&invalid, "[ask]\nmax = 0\nwindow = \"1d\"\n").unwrap();
    let (code, stderr) = fails(&["--store", &store, "--rules", invalid.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("invalid rules in") && stderr.contains("max must be at least 1"),
        "{stderr}"
    );

    let partial = dir.path().join("partial.toml");
    std::fs::write(&partial, "[ask]\nmax = 3\nwindow = \"1d\"\n").unwrap();
    let (code, stderr) = fails(&["--store", &store, "--rules", partial.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(stderr.contains("unknown rule `docs-run`"), "{stderr}");

    // Every rule the demo uses, but `ask` keyed by one part instead of two.
    let text = tollgate::DEFAULT_RULES_TOML
        .replace("key = [\"project\", \"visitor\"]", "key = [\"visitor\"]");
    let arity = dir.path().join("arity.toml");
    std::fs::write(&arity, text).unwrap();
    let (code, stderr) = fails(&["--store", &store, "--rules", arity.to_str().unwrap()]).await;
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("rule `ask` takes 1 key parts, 2 given"),
        "{stderr}"
    );
}

#[tokio::test]
async fn bad_flags_are_refused_by_the_parser() {
    let (code, stderr) = fails(&["--trust", "x-real-ip"]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("x-real-ip"), "{stderr}");
    let (code, stderr) = fails(&[
        "--trust",
        "x-forwarded-for",
        "--trusted-proxy",
        "10.0.0.0/33",
    ])
    .await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("10.0.0.0/33"), "{stderr}");
}

#[tokio::test]
async fn binary_serves_and_logs_one_line_per_request() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.sqlite3").display());
    let Running {
        base,
        before,
        mut lines,
        mut child,
    } = Running::start(&["--store", &store, "--dev"]).await;
    let listening = before.last().unwrap();
    assert!(listening.contains("INFO"), "{listening}");

    let client = reqwest::Client::new();
    let health = client.get(format!("{base}/healthz")).send().await.unwrap();
    assert_eq!(health.status(), reqwest::StatusCode::OK);
    let logged = next_line(&mut lines).await;
    assert!(
        logged.contains("INFO") && logged.contains("/healthz") && logged.contains("status=200"),
        "{logged}"
    );

    // --dev: a request with no address would be `local`; over loopback the peer is known.
    let asked = client
        .post(format!("{base}/sites/docs/ask"))
        .send()
        .await
        .unwrap();
    assert_eq!(asked.status(), reqwest::StatusCode::OK);
    let logged = next_line(&mut lines).await;
    assert!(
        logged.contains("/sites/docs/ask") && logged.contains("status=200"),
        "{logged}"
    );

    child.kill().await.unwrap();
}

const SECRET: &str = "planted-cli-webhook-secret-91c2";

#[tokio::test]
async fn without_a_webhook_secret_the_demo_says_deliveries_are_unverified() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.sqlite3").display());
    let Running {
        before, mut child, ..
    } = Running::start(&["--store", &store]).await;
    let warnings: Vec<&String> = before.iter().filter(|l| l.contains("unverified")).collect();
    assert_eq!(
        warnings.len(),
        2,
        "a warning and the listening line: {before:?}"
    );
    assert!(warnings[0].contains("WARN"), "{before:?}");
    assert!(
        warnings[1].contains("webhooks=\"unverified\""),
        "{before:?}"
    );
    child.kill().await.unwrap();
}

#[tokio::test]
async fn a_webhook_secret_from_the_environment_verifies_deliveries_and_is_never_shown() {
    let dir = tempfile::tempdir().unwrap();
    let store = format!("sqlite:{}", dir.path().join("s.sqlite3").display());
    let mut command = demo();
    command
        .args(["--listen", "127.0.0.1:0", "--store", &store])
        .env("GITHUB_WEBHOOK_SECRET", SECRET)
        .stderr(Stdio::piped());
    let Running {
        base,
        before,
        mut lines,
        mut child,
    } = Running::spawn(command).await;
    assert!(
        !before.iter().any(|l| l.contains("unverified")),
        "{before:?}"
    );
    assert!(
        before.last().unwrap().contains("webhooks=\"signed\""),
        "{before:?}"
    );

    let client = reqwest::Client::new();
    let deliver = |signature: Option<String>| {
        let mut request = client
            .post(format!("{base}/webhooks/github"))
            .header("X-GitHub-Delivery", "cli-1")
            .body("{}");
        if let Some(signature) = signature {
            request = request.header("X-Hub-Signature-256", signature);
        }
        request.send()
    };
    let unsigned = deliver(None).await.unwrap();
    assert_eq!(unsigned.status(), reqwest::StatusCode::UNAUTHORIZED);
    let secret = tollgate_demo::signature::WebhookSecret::new(SECRET.as_bytes()).unwrap();
    let signed = deliver(Some(secret.sign(b"{}"))).await.unwrap();
    assert_eq!(signed.status(), reqwest::StatusCode::OK);
    let logged = format!(
        "{}\n{}",
        next_line(&mut lines).await,
        next_line(&mut lines).await
    );
    assert!(
        logged.contains("status=401") && logged.contains("status=200"),
        "{logged}"
    );

    child.kill().await.unwrap();
    let mut rest = before.join("\n");
    while let Ok(Some(line)) = lines.next_line().await {
        rest.push_str(&line);
    }
    let mut stderr = String::new();
    if let Some(mut err) = child.stderr.take() {
        use tokio::io::AsyncReadExt as _;
        err.read_to_string(&mut stderr).await.unwrap();
    }
    assert!(
        !rest.contains(SECRET) && !stderr.contains(SECRET),
        "{rest}\n{stderr}"
    );
}

#[tokio::test]
async fn help_names_the_secret_variable_but_never_its_value() {
    let output = demo()
        .arg("--help")
        .env("GITHUB_WEBHOOK_SECRET", SECRET)
        .output();
    let output = tokio::time::timeout(Duration::from_secs(20), output)
        .await
        .unwrap()
        .unwrap();
    let help = String::from_utf8_lossy(&output.stdout);
    assert!(help.contains("--github-secret <SECRET>"), "{help}");
    assert!(help.contains("GITHUB_WEBHOOK_SECRET"), "{help}");
    assert!(!help.contains(SECRET), "{help}");

    let (code, stderr) = fails(&["--github-secret", ""]).await;
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("the secret is empty"), "{stderr}");
}
