//! The official clients, `@upstash/redis` and `@upstash/ratelimit` 2.x (the
//! versions of the peer benchmark), against the proxy and a private
//! redis-server. Needs `node` and `npm` and the npm registry (the install is
//! cached under the target directory); without them this test FAILS, on
//! purpose. The only way to leave it out is on the command line:
//! `cargo test --workspace --exclude tollgate-rest-proxy`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use serde_json::{Value, json};
use tollgate_rest_proxy::{Options, serve};
use tollgate_test_support::redis_server::RedisServer;
use tollgate_test_support::unique;

const PACKAGE_JSON: &str = include_str!("node/package.json");
const CHECK_JS: &str = include_str!("node/check.js");

const INSTALL_HINT: &str = "install Node.js and npm (apt-get install nodejs npm), or leave this \
     crate out on the command line: cargo test --workspace --exclude tollgate-rest-proxy";

/// Fails the test unless `program --version` runs.
fn require(program: &str) {
    match Command::new(program).arg("--version").output() {
        Ok(output) if output.status.success() => {}
        Ok(output) => panic!(
            "`{program} --version` failed ({}): {}; {INSTALL_HINT}",
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ),
        Err(e) => panic!("`{program}` is missing ({e}); {INSTALL_HINT}"),
    }
}

/// The version pinned in package.json for `package`.
fn pinned(package: &str) -> String {
    let manifest: Value = serde_json::from_str(PACKAGE_JSON).expect("package.json is JSON");
    manifest["dependencies"][package]
        .as_str()
        .unwrap_or_else(|| panic!("package.json pins no {package}"))
        .to_owned()
}

/// Whether `dir` holds the pinned version of `package`.
fn installed(dir: &Path, package: &str) -> bool {
    let manifest = dir.join("node_modules").join(package).join("package.json");
    std::fs::read_to_string(manifest)
        .ok()
        .and_then(|text| serde_json::from_str::<Value>(&text).ok())
        .is_some_and(|m| m["version"].as_str() == Some(pinned(package).as_str()))
}

/// A folder with the pinned clients installed (once; later runs reuse it)
/// and the check script written.
fn node_project() -> PathBuf {
    require("node");
    require("npm");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join("rest-proxy-interop");
    std::fs::create_dir_all(&dir).expect("create the node project folder");
    std::fs::write(dir.join("package.json"), PACKAGE_JSON).expect("write package.json");
    let packages = ["@upstash/redis", "@upstash/ratelimit"];
    if !packages.iter().all(|p| installed(&dir, p)) {
        let output = Command::new("npm")
            .args(["install", "--no-audit", "--no-fund"])
            .current_dir(&dir)
            .output()
            .unwrap_or_else(|e| panic!("cannot run npm install ({e}); {INSTALL_HINT}"));
        assert!(
            output.status.success(),
            "npm install of {packages:?} failed ({}); it needs the npm registry.\n{}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        for package in packages {
            assert!(
                installed(&dir, package),
                "npm install did not install {package} {}",
                pinned(package)
            );
        }
    }
    std::fs::write(dir.join("check.js"), CHECK_JS).expect("write check.js");
    dir
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_official_upstash_clients_work_through_the_proxy() {
    let dir = node_project();
    let server = RedisServer::start();
    let token = format!("tok-{}", unique());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = listener.local_addr().expect("local address");
    let proxy = tokio::spawn(serve(
        listener,
        Options::new(server.url(), token.clone()).create_user("tollgate-proxy"),
    ));

    let prefix = unique();
    let mut node = tokio::process::Command::new("node");
    node.arg("check.js")
        .current_dir(&dir)
        .env("UPSTASH_REDIS_REST_URL", format!("http://{addr}"))
        .env("UPSTASH_REDIS_REST_TOKEN", &token)
        .env("KEY_PREFIX", &prefix)
        .kill_on_drop(true);
    let output = tokio::time::timeout(Duration::from_secs(60), node.output())
        .await
        .expect("node check.js finished within 60 s")
        .expect("run node");
    assert!(!proxy.is_finished(), "the proxy stopped: {:?}", proxy.await);
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    let line = stdout.lines().last().unwrap_or_default();
    let out: Value = serde_json::from_str(line)
        .unwrap_or_else(|e| panic!("check.js printed no JSON line ({e}):\n{stdout}\n{stderr}"));
    assert!(
        out.get("fatal").is_none(),
        "check.js failed: {}\n{stderr}",
        out["fatal"]
    );
    assert!(
        output.status.success(),
        "node exited with {}: {stderr}",
        output.status
    );

    // Every field is checked, so the first mismatch does not hide the others.
    let mut failures = Vec::new();
    let mut check = |name: &str, expected: Value, what: &str| {
        if out[name] != expected {
            failures.push(format!(
                "{name} ({what}): expected {expected}, got {}",
                out[name]
            ));
        }
    };
    check("set", json!("OK"), "SET");
    check(
        "get",
        json!("héllo wörld ✓"),
        "GET, base64 decoded by the client",
    );
    check("getPlain", json!("héllo wörld ✓"), "GET without base64");
    check("incr", json!([1, 2]), "INCR");
    check("json", json!({"a": 1, "b": [1, 2]}), "a JSON value");
    check(
        "pipeline",
        json!(["OK", 1, "v", 2, ["a", "b"]]),
        "redis.pipeline()",
    );
    check("multi", json!([1, 5, 5]), "redis.multi()");
    check("eval", json!([format!("{prefix}:e"), "arg", 7]), "EVAL");
    check(
        "evalshaFresh",
        json!("NOSCRIPT"),
        "EVALSHA of a fresh script",
    );
    check(
        "evalFallback",
        json!(format!("fresh {prefix}")),
        "EVAL after NOSCRIPT",
    );
    check(
        "evalshaAfterEval",
        json!(format!("fresh {prefix}")),
        "EVALSHA after EVAL",
    );
    check(
        "scriptLoadSha",
        json!({"value": true}),
        "SCRIPT LOAD answers the original sha",
    );
    check(
        "evalshaLocking",
        json!({"value": 1}),
        "EVALSHA of an allow-key-locking script",
    );
    let mut verdicts: Vec<Value> = (0..10).map(|i| json!([true, 9 - i])).collect();
    verdicts.push(json!([false, 0]));
    check(
        "ratelimit",
        json!({ "value": verdicts }),
        "Ratelimit.fixedWindow(10, \"10 s\"): ten allowed, the eleventh refused",
    );
    let mut successes: Vec<bool> = vec![true; 10];
    successes.push(false);
    for (name, what) in [
        ("slidingWindow", "Ratelimit.slidingWindow(10, \"10 s\")"),
        ("tokenBucket", "Ratelimit.tokenBucket(1, \"10 s\", 10)"),
        (
            "multiRegion",
            "MultiRegionRatelimit.fixedWindow(10, \"10 s\"), one region",
        ),
    ] {
        check(name, json!({ "value": successes }), what);
    }
    check(
        "survived",
        json!("héllo wörld ✓"),
        "the data after FLUSHALL was refused",
    );
    let wrong = &out["wrongToken"];
    if !wrong.as_str().is_some_and(|e| e.contains("WRONGPASS")) {
        failures.push(format!(
            "wrongToken: the client must throw WRONGPASS, got {wrong}"
        ));
    }
    for (name, needle) in [
        (
            "flushall",
            "FLUSHALL is not on tollgate-rest-proxy's allow-list",
        ),
        ("evalFlushall", "can't run this command"),
    ] {
        if !out[name]["error"]
            .as_str()
            .is_some_and(|e| e.contains(needle))
        {
            failures.push(format!(
                "{name}: expected an error with {needle:?}, got {}",
                out[name]
            ));
        }
    }
    assert!(
        failures.is_empty(),
        "the official clients through the proxy:\n{}",
        failures.join("\n")
    );
}
