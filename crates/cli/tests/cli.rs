//! Runs the built `tollgate` binary against rules files, a SQLite file and
//! private redis-servers (never the machine's own, on 6379).

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::io::Write as _;
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use serde_json::Value;
use tollgate::{Limiter, RuleSet, Visitor};
use tollgate_test_support::redis_server::{RedisServer, RedisServerOptions};
use tollgate_test_support::secrets::giveaways;
use tollgate_test_support::unique;

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    took: Duration,
}

impl Run {
    /// Asserts a failure printed as exactly one `tollgate: error: …` line
    /// (no panic, no backtrace) with `code`; that line.
    fn error_line(&self, code: i32) -> &str {
        assert_eq!(self.code, code, "{self:#?}");
        assert_eq!(self.stderr.lines().count(), 1, "{self:#?}");
        assert!(self.stderr.starts_with("tollgate: error: "), "{self:#?}");
        assert!(!self.stderr.contains("panicked"), "{self:#?}");
        self.stderr.trim_end()
    }

    fn ok(&self) -> &str {
        assert_eq!(self.code, 0, "{self:#?}");
        &self.stdout
    }

    fn json(&self) -> Value {
        serde_json::from_str(self.ok()).unwrap_or_else(|e| panic!("{e}: {self:#?}"))
    }

    fn all(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// Runs `tollgate ARGS` with stdin from `input` (a pipe, never a terminal).
fn tollgate_with(args: &[&str], input: &[u8], env: &[(&str, &str)]) -> Run {
    let start = Instant::now();
    let mut child = Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(args)
        .env_remove("TOLLGATE_STORE")
        .env_remove("TOLLGATE_RULES")
        .envs(env.iter().copied())
        .env("RUST_BACKTRACE", "1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    // The binary may exit without reading: a broken pipe is fine.
    let _ = stdin.write_all(input);
    drop(stdin);
    let out = child.wait_with_output().unwrap();
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8(out.stdout).unwrap(),
        stderr: String::from_utf8(out.stderr).unwrap(),
        took: start.elapsed(),
    }
}

fn tollgate(args: &[&str]) -> Run {
    tollgate_with(args, b"", &[])
}

fn block_on<F: std::future::Future>(future: F) -> F::Output {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(future)
}

/// Counts `calls` calls of rule `rule` for `parts` through the library.
fn count(url: &str, rules: &RuleSet, rule: &str, parts: &[&str], calls: usize) {
    block_on(async {
        let limiter = Limiter::new(tollgate::open_store(url).unwrap());
        let limit = rules.get(rule).unwrap().limit(parts).unwrap();
        for _ in 0..calls {
            limiter.count(std::slice::from_ref(&limit)).await.unwrap();
        }
    });
}

/// What the library reads for rule `rule` and `parts`: the remaining budget.
fn remaining(url: &str, rules: &RuleSet, rule: &str, parts: &[&str]) -> i64 {
    block_on(async {
        let limiter = Limiter::builder(tollgate::open_store(url).unwrap())
            .cache(0)
            .build();
        let limit = rules.get(rule).unwrap().limit(parts).unwrap();
        limiter.remaining(&[limit]).await.unwrap()[0].remaining()
    })
}

fn now_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn shipped_rules() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../core/rules.toml")
}

/// A rules file holding `text`, in `dir`.
fn rules_file(dir: &Path, text: &str) -> String {
    let path = dir.join("rules.toml");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

fn sqlite_url(dir: &Path) -> String {
    format!("sqlite:{}", dir.join("counters.sqlite3").display())
}

// ----- rules check -----

#[test]
fn rules_check_lists_every_shipped_rule_with_its_shape() {
    let path = shipped_rules();
    let path = path.to_str().unwrap();
    let run = tollgate(&["rules", "check", path]);
    let table = run.ok();
    let ask = table.lines().find(|l| l.starts_with("ask ")).unwrap();
    let cells: Vec<&str> = ask
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        [
            "ask",
            "15",
            "1d",
            "fixed",
            "project, visitor",
            "calls",
            "yes",
            "no"
        ]
    );
    let tokens = table
        .lines()
        .find(|l| l.starts_with("ask-tokens "))
        .unwrap();
    let cells: Vec<&str> = tokens
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells,
        [
            "ask-tokens",
            "200000",
            "1d",
            "fixed",
            "project",
            "tokens",
            "no",
            "no"
        ]
    );
    assert!(table.ends_with("valid, 12 rules\n"), "{table}");
    let header = table.lines().next().unwrap();
    assert_eq!(
        header.split_whitespace().collect::<Vec<_>>(),
        [
            "rule",
            "max",
            "window",
            "algorithm",
            "key",
            "unit",
            "public",
            "shadow"
        ]
    );
    // The shipped defaults are the seed's fixed windows, and two in-flight
    // limits of the ask route.
    let rows = table.lines().skip(1).take_while(|l| !l.is_empty());
    for row in rows {
        let shape = if row.starts_with("ask-inflight") {
            "concurrency"
        } else {
            "fixed"
        };
        assert_eq!(
            row.split("  ")
                .filter(|c| !c.is_empty())
                .nth(3)
                .map(str::trim),
            Some(shape),
            "{row}"
        );
    }

    let json = tollgate(&["rules", "check", "--json", path]).json();
    let rules = json["rules"].as_array().unwrap();
    assert_eq!(rules.len(), 12);
    let ask = rules.iter().find(|r| r["name"] == "ask").unwrap();
    assert_eq!(
        *ask,
        serde_json::json!({
            "name": "ask", "max": 15, "window": "1d", "window_secs": 86400, "algorithm": "fixed",
            "key": ["project", "visitor"], "unit": "calls", "public": true, "shadow": false,
        })
    );
    let github = rules.iter().find(|r| r["name"] == "github").unwrap();
    assert_eq!(github["window_secs"], 3600);
    let site = rules.iter().find(|r| r["name"] == "ask-site").unwrap();
    assert_eq!(site["public"], false);
    assert!(
        rules
            .iter()
            .all(|r| r["algorithm"] == "fixed" || r["concurrency"].is_u64()),
        "{json:#}"
    );
}

#[test]
fn rules_check_shows_each_rules_shape() {
    let dir = tempfile::tempdir().unwrap();
    let file = rules_file(
        dir.path(),
        "[ask]\nmax = 10\nwindow = \"10s\"\nalgorithm = \"sliding\"\nkey = [\"visitor\"]\n\n\
         [docs-run]\nmax = 10\nwindow = \"1d\"\nalgorithm = \"fixed\"\nkey = [\"org\"]\n\n\
         [github]\nmax = 60\nwindow = \"1h\"\n",
    );
    let table = tollgate(&["rules", "check", &file]).ok().to_owned();
    let cells = |name: &str| -> Vec<String> {
        let row = table
            .lines()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {table}"));
        row.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        cells("ask"),
        [
            "ask", "10", "10s", "sliding", "visitor", "calls", "yes", "no"
        ]
    );
    assert_eq!(cells("docs-run")[3], "fixed");
    assert_eq!(cells("github")[3], "fixed", "fixed when left out");
    assert!(table.ends_with("valid, 3 rules\n"), "{table}");

    let json = tollgate(&["rules", "check", "--json", &file]).json();
    let shapes: Vec<(&str, &str)> = json["rules"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap(),
                r["algorithm"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        shapes,
        [
            ("ask", "sliding"),
            ("docs-run", "fixed"),
            ("github", "fixed")
        ]
    );
}

#[test]
fn rules_check_shows_a_concurrency_rules_lease() {
    let dir = tempfile::tempdir().unwrap();
    let file = rules_file(
        dir.path(),
        "[ask-inflight]\nconcurrency = 2\nlease = \"5s\"\nkey = [\"visitor\"]\n",
    );
    let table = tollgate(&["rules", "check", &file]).ok().to_owned();
    let row = table.lines().nth(1).unwrap();
    let cells: Vec<&str> = row
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    assert_eq!(
        cells[..4],
        ["ask-inflight", "2", "5s", "concurrency"],
        "{table}"
    );
    let json = tollgate(&["rules", "check", "--json", &file]).json();
    let rule = &json["rules"][0];
    assert_eq!(
        (
            &rule["concurrency"],
            &rule["lease_secs"],
            &rule["algorithm"]
        ),
        (
            &serde_json::json!(2),
            &serde_json::json!(5),
            &serde_json::json!("concurrency")
        )
    );
}

#[test]
fn rules_check_shows_a_gcra_rules_burst() {
    let dir = tempfile::tempdir().unwrap();
    let file = rules_file(
        dir.path(),
        "[ask-burst]\nmax = 20\nwindow = \"1m\"\nalgorithm = \"gcra\"\nburst = 5\nkey = [\"visitor\"]\n\n\
         [ask]\nmax = 10\nwindow = \"10s\"\nalgorithm = \"sliding\"\nkey = [\"visitor\"]\n\n\
         [steady]\nmax = 3\nwindow = 1\nalgorithm = \"gcra\"\n\n\
         [github]\nmax = 60\nwindow = \"1h\"\nkey = [\"org\"]\n",
    );
    let table = tollgate(&["rules", "check", &file]).ok().to_owned();
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines[0].split_whitespace().collect::<Vec<_>>(),
        [
            "rule",
            "max",
            "window",
            "algorithm",
            "burst",
            "key",
            "unit",
            "public",
            "shadow"
        ]
    );
    let cells = |name: &str| -> Vec<String> {
        let row = lines
            .iter()
            .find(|l| l.starts_with(&format!("{name} ")))
            .unwrap_or_else(|| panic!("no {name} in {table}"));
        row.split("  ")
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(str::to_owned)
            .collect()
    };
    assert_eq!(
        cells("ask-burst"),
        [
            "ask-burst",
            "20",
            "1m",
            "gcra",
            "5",
            "visitor",
            "calls",
            "yes",
            "no"
        ]
    );
    assert_eq!(
        cells("steady")[3..6],
        ["gcra", "1", "-"],
        "a burst of 1 unless set"
    );
    assert_eq!(
        cells("ask"),
        [
            "ask", "10", "10s", "sliding", "-", "visitor", "calls", "yes", "no"
        ]
    );
    assert_eq!(cells("github")[3..5], ["fixed", "-"]);
    assert!(table.ends_with("valid, 4 rules\n"), "{table}");

    // In JSON only a GCRA rule has a burst.
    let json = tollgate(&["rules", "check", "--json", &file]).json();
    let rules = json["rules"].as_array().unwrap();
    let rule = |name: &str| rules.iter().find(|r| r["name"] == name).unwrap();
    assert_eq!(
        *rule("ask-burst"),
        serde_json::json!({
            "name": "ask-burst", "max": 20, "window": "1m", "window_secs": 60,
            "algorithm": "gcra", "burst": 5, "key": ["visitor"], "unit": "calls",
            "public": true, "shadow": false,
        })
    );
    assert_eq!(rule("steady")["burst"], 1);
    for name in ["ask", "github"] {
        assert!(rule(name).get("burst").is_none(), "{json:#}");
    }
}

#[test]
fn rules_check_refuses_a_burst_out_of_place_or_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let ok = "[ok]\nmax = 1\nwindow = 1\n\n";
    let cases = [
        (
            "max = 20\nwindow = \"1m\"\nburst = 5\n",
            "burst applies to algorithm = \"gcra\" only",
        ),
        (
            "max = 20\nwindow = \"1m\"\nalgorithm = \"sliding\"\nburst = 5\n",
            "burst applies to algorithm = \"gcra\" only",
        ),
        (
            "max = 20\nwindow = \"1m\"\nalgorithm = \"gcra\"\nburst = 0\n",
            "burst must be 1 to max (20)",
        ),
        (
            "max = 20\nwindow = \"1m\"\nalgorithm = \"gcra\"\nburst = 21\n",
            "burst must be 1 to max (20)",
        ),
    ];
    for (body, reason) in cases {
        let file = rules_file(dir.path(), &format!("{ok}[ask-burst]\n{body}"));
        for json in [&[][..], &["--json"]] {
            let run = tollgate(&[&["rules", "check"][..], json, &[&file]].concat());
            assert_eq!(
                run.error_line(1),
                format!("tollgate: error: {file}:5:2: invalid rule `ask-burst`: {reason}"),
                "{body}"
            );
            assert_eq!(run.stdout, "");
        }
    }
}

#[test]
fn rules_check_places_an_unknown_algorithm_at_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[a]\nmax = 1\nwindow = 1\n\n[b]\nmax = 2\nwindow = 1\nalgorithm = \"leaky\"\n";
    let file = rules_file(dir.path(), text);
    let line = tollgate(&["rules", "check", &file])
        .error_line(1)
        .to_owned();
    assert!(
        line.starts_with(&format!("tollgate: error: {file}:5:2: ")),
        "{line}"
    );
    assert!(line.contains("leaky"), "{line}");
}

#[test]
fn rules_check_shows_shadow_rules() {
    let dir = tempfile::tempdir().unwrap();
    let file = rules_file(
        dir.path(),
        "[dark]\nmax = 3\nwindow = 90\nkey = [\"org\"]\nshadow = true\n",
    );
    let json = tollgate(&["rules", "check", "--json", &file]).json();
    assert_eq!(json["rules"][0]["shadow"], true);
    assert_eq!(json["rules"][0]["window"], "90s");
    assert_eq!(json["rules"][0]["window_secs"], 90);
}

#[test]
fn rules_check_places_a_syntax_error_at_its_line_and_column() {
    let dir = tempfile::tempdir().unwrap();
    let file = rules_file(dir.path(), "[a]\nmax = 1\nwindow = = 1\n");
    let run = tollgate(&["rules", "check", &file]);
    let line = run.error_line(1);
    assert!(
        line.starts_with(&format!("tollgate: error: {file}:3:10: invalid TOML: ")),
        "{line}"
    );
    let file = rules_file(
        dir.path(),
        "[ask]\nmax = 15\nwindow = \"1d\"\nkey = [\"project\", \"visitor\"\n",
    );
    let line = tollgate(&["rules", "check", "--json", &file])
        .error_line(1)
        .to_owned();
    assert!(
        line.contains(&format!("{file}:4:28: invalid TOML: unclosed array")),
        "{line}"
    );
}

#[test]
fn rules_check_places_max_zero_at_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[ok]\nmax = 1\nwindow = 1\n\n# the Ask AI limit\n[ask]\nmax = 0\nwindow = \"1d\"\n";
    let file = rules_file(dir.path(), text);
    let run = tollgate(&["rules", "check", &file]);
    assert_eq!(
        run.error_line(1),
        format!("tollgate: error: {file}:6:2: invalid rule `ask`: max must be at least 1")
    );
    assert_eq!(run.stdout, "");
}

#[test]
fn rules_check_places_an_unknown_field_at_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[a]\nmax = 1\nwindow = 1\n\n[b]\nmax = 2\nwindow = 1\n  maximum = 3\n";
    let file = rules_file(dir.path(), text);
    let line = tollgate(&["rules", "check", &file])
        .error_line(1)
        .to_owned();
    assert!(
        line.starts_with(&format!(
            "tollgate: error: {file}:8:3: invalid rules file: unknown field `maximum`"
        )),
        "{line}"
    );
}

#[test]
fn rules_check_places_a_wrong_type_at_its_table() {
    let dir = tempfile::tempdir().unwrap();
    let text = "[a]\nmax = 1\nwindow = 1\n\n[b]\nmax = 2\nwindow = 1\npublic = \"no\"\n";
    let file = rules_file(dir.path(), text);
    let line = tollgate(&["rules", "check", &file])
        .error_line(1)
        .to_owned();
    assert!(
        line.starts_with(&format!("tollgate: error: {file}:5:2: ")),
        "{line}"
    );
}

#[test]
fn rules_check_of_a_missing_file_is_one_line() {
    let run = tollgate(&["rules", "check", "/nonexistent/rules.toml"]);
    assert!(
        run.error_line(1)
            .contains("cannot read /nonexistent/rules.toml")
    );
}

// ----- status and reset on SQLite -----

#[test]
fn status_shows_calls_counted_through_the_library_and_spends_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let rules = RuleSet::defaults();
    count(&url, &rules, "ask", &["docs", "203.0.113.9"], 3);

    let args = [
        "status",
        "--store",
        &url,
        "--json",
        "ask",
        "docs",
        "203.0.113.9",
    ];
    let before = now_secs();
    let json = tollgate(&args).json();
    assert_eq!(json["count"], 3, "{json:#}");
    assert_eq!(json["remaining"], 12);
    assert_eq!(json["max"], 15);
    assert_eq!(json["unit"], "calls");
    assert_eq!(json["window"], "1d");
    assert_eq!(json["over"], false);
    assert_eq!(
        json["key"],
        serde_json::json!({"project": "docs", "visitor": "203.0.113.9"})
    );
    let reset = json["reset_unix"].as_u64().unwrap();
    assert_eq!(reset % 86_400, 0, "a day window resets at UTC midnight");
    assert!(reset > before && reset <= before + 86_400 + 1, "{reset}");
    let wait = json["reset_in_secs"].as_u64().unwrap();
    assert!(
        wait.abs_diff(reset - before) <= 2,
        "{wait} vs {}",
        reset - before
    );
    let stamp = json["reset"].as_str().unwrap();
    assert!(
        stamp.ends_with("T00:00:00Z") && stamp.len() == 20,
        "{stamp}"
    );

    // Reading twice spends nothing, through the binary or the library.
    assert_eq!(tollgate(&args).json()["count"], 3);
    assert_eq!(remaining(&url, &rules, "ask", &["docs", "203.0.113.9"]), 12);

    let table = tollgate(&["status", "--store", &url, "ask", "docs", "203.0.113.9"]);
    let table = table.ok();
    assert!(table.contains("\ncount      3\n"), "{table}");
    assert!(table.contains("\nremaining  12\n"), "{table}");
    assert!(
        table.contains(&format!("\nreset      {stamp} (in ")),
        "{table}"
    );
    assert!(
        table.contains("key        project=docs, visitor=203.0.113.9\n"),
        "{table}"
    );

    // Another visitor has its own counter.
    let other = [
        "status",
        "--store",
        &url,
        "--json",
        "ask",
        "docs",
        "198.51.100.7",
    ];
    assert_eq!(tollgate(&other).json()["count"], 0);
}

#[test]
fn status_reads_rules_from_a_file() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let text = "[uploads]\nmax = 5\nwindow = \"1h\"\nkey = [\"org\"]\nunit = \"bytes\"\n";
    let file = rules_file(dir.path(), text);
    let rules = RuleSet::from_toml(text).unwrap();
    count(&url, &rules, "uploads", &["acme"], 2);
    let json = tollgate(&[
        "status", "--store", &url, "--rules", &file, "--json", "uploads", "acme",
    ])
    .json();
    assert_eq!(
        (json["count"].as_i64(), json["remaining"].as_i64()),
        (Some(2), Some(3))
    );
    assert_eq!(
        (json["unit"].as_str(), json["window_secs"].as_u64()),
        (Some("bytes"), Some(3600))
    );
    assert_eq!(json["reset_unix"].as_u64().unwrap() % 3_600, 0);
    // The defaults do not hold that rule.
    let run = tollgate(&["status", "--store", &url, "uploads", "acme"]);
    assert!(run.error_line(1).contains("unknown rule `uploads`"));
}

#[test]
fn status_names_a_sliding_windows_shape() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let text = "[ask]\nmax = 5\nwindow = \"1d\"\nalgorithm = \"sliding\"\nkey = [\"org\"]\n";
    let file = rules_file(dir.path(), text);
    let rules = RuleSet::from_toml(text).unwrap();
    count(&url, &rules, "ask", &["acme"], 2);
    let args = ["status", "--store", &url, "--rules", &file];
    let json = tollgate(&[&args[..], &["--json", "ask", "acme"]].concat()).json();
    assert_eq!(json["algorithm"], "sliding", "{json:#}");
    // Nothing in the previous day: the estimate is today's count.
    assert_eq!(
        (json["count"].as_i64(), json["remaining"].as_i64()),
        (Some(2), Some(3))
    );
    let table = tollgate(&[&args[..], &["ask", "acme"]].concat());
    assert!(table.ok().contains("\nalgorithm  sliding\n"), "{table:#?}");
    // The shipped defaults are fixed windows.
    let json = tollgate(&["status", "--store", &url, "--json", "github", "acme"]).json();
    assert_eq!(json["algorithm"], "fixed");
}

#[test]
fn status_shows_a_gcra_bucket_and_reset_refills_it() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    // 20 an hour, 5 at once: one unit back every 180 s.
    let text = "[ask-burst]\nmax = 20\nwindow = \"1h\"\nalgorithm = \"gcra\"\nburst = 5\nkey = [\"org\"]\n";
    let file = rules_file(dir.path(), text);
    let rules = RuleSet::from_toml(text).unwrap();
    let args = ["status", "--store", &url, "--rules", &file];
    let status = |table: bool| {
        let extra: &[&str] = if table {
            &["ask-burst", "acme"]
        } else {
            &["--json", "ask-burst", "acme"]
        };
        tollgate(&[&args[..], extra].concat())
    };

    // A quiet bucket is full: its whole burst at once.
    let json = status(false).json();
    assert_eq!(json["algorithm"], "gcra", "{json:#}");
    assert_eq!(
        (json["count"].as_i64(), json["remaining"].as_i64()),
        (Some(0), Some(5))
    );
    assert_eq!(
        (json["burst"].as_u64(), json["max"].as_u64()),
        (Some(5), Some(20))
    );
    assert_eq!(json["over"], false);
    let table = status(true);
    assert!(
        table
            .ok()
            .contains("\nreset      now (the bucket is full)\nover       no\n"),
        "{table:#?}"
    );

    // Two spent: 3 left at once, full again in 2 × 180 s.
    count(&url, &rules, "ask-burst", &["acme"], 2);
    let before = now_secs();
    let json = status(false).json();
    assert_eq!(
        (json["count"].as_i64(), json["remaining"].as_i64()),
        (Some(2), Some(3)),
        "{json:#}"
    );
    let full_in = json["reset_in_secs"].as_u64().unwrap();
    assert!((356..=361).contains(&full_in), "{json:#}");
    let reset = json["reset_unix"].as_u64().unwrap();
    assert!(reset.abs_diff(before + 360) <= 2, "{reset} vs {before}");
    let table = status(true);
    let table = table.ok();
    for row in [
        "\ncount      2\n",
        "\nremaining  3\n",
        "\nmax        20\n",
        "\nburst      5\n",
        "\nwindow     1h\n",
        "\nalgorithm  gcra\n",
        &format!("\nreset      {} (in ", json["reset"].as_str().unwrap()),
        "\nover       no\n",
    ] {
        assert!(table.contains(row), "{row:?} in {table}");
    }

    // The whole burst spent: over until one unit is back, in 180 s.
    count(&url, &rules, "ask-burst", &["acme"], 3);
    let json = status(false).json();
    assert_eq!(
        (json["count"].as_i64(), json["remaining"].as_i64()),
        (Some(5), Some(0)),
        "{json:#}"
    );
    assert_eq!(json["over"], true);
    let wait = json["reset_in_secs"].as_u64().unwrap();
    assert!((177..=180).contains(&wait), "{json:#}");
    assert!(
        status(true)
            .ok()
            .contains("\nover       yes: the next call is refused\n")
    );

    // A reset empties the bucket's counter: the whole burst again.
    let reset = [
        "reset",
        "--store",
        &url,
        "--rules",
        &file,
        "--yes",
        "ask-burst",
        "acme",
    ];
    assert_eq!(
        tollgate(&reset).ok(),
        "reset `ask-burst` for acme: the bucket's counter was cleared (its whole burst is \
         available again)\nrunning instances may keep refusing it for up to 2 s: the age of \
         their caches of full counters (the default; an application may set its own)\n"
    );
    assert_eq!(remaining(&url, &rules, "ask-burst", &["acme"]), 5);
    assert_eq!(
        tollgate(&reset).ok(),
        "reset `ask-burst` for acme: no counter existed (the bucket was full)\n"
    );
}

#[test]
fn a_wrong_number_of_key_parts_names_the_rules_parts() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    for args in [
        &["status", "--store", &url, "ask", "docs"][..],
        &["reset", "--store", &url, "--yes", "ask", "docs"],
    ] {
        assert_eq!(
            tollgate(args).error_line(1),
            "tollgate: error: rule `ask` takes 2 key parts (project, visitor), 1 given",
            "{args:?}"
        );
    }
    let run = tollgate(&["status", "--store", &url, "ask-all", "x"]);
    assert_eq!(
        run.error_line(1),
        "tollgate: error: rule `ask-all` takes no key parts, 1 given"
    );
}

#[test]
fn reset_with_yes_clears_the_counter_and_says_whether_one_existed() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let rules = RuleSet::defaults();
    count(&url, &rules, "ask", &["docs", "203.0.113.9"], 4);
    count(&url, &rules, "ask", &["docs", "198.51.100.7"], 1);

    let args = [
        "reset",
        "--store",
        &url,
        "--yes",
        "ask",
        "docs",
        "203.0.113.9",
    ];
    let run = tollgate(&args);
    assert_eq!(
        run.ok(),
        "reset `ask` for docs / 203.0.113.9: the current window's counter was cleared\n\
         running instances may keep refusing it for up to 2 s: the age of their caches of \
         full counters (the default; an application may set its own)\n"
    );
    assert_eq!(remaining(&url, &rules, "ask", &["docs", "203.0.113.9"]), 15);
    assert_eq!(
        remaining(&url, &rules, "ask", &["docs", "198.51.100.7"]),
        14,
        "untouched"
    );
    let run = tollgate(&args);
    assert_eq!(
        run.ok(),
        "reset `ask` for docs / 203.0.113.9: no counter existed in the current window\n"
    );
    let json = tollgate(&[
        "reset",
        "--store",
        &url,
        "-y",
        "--json",
        "ask",
        "docs",
        "198.51.100.7",
    ])
    .json();
    assert_eq!(json["existed"], true);
    assert_eq!(json["key"], serde_json::json!(["docs", "198.51.100.7"]));
    assert_eq!(json["others_may_refuse_for_secs"], 2.0, "{json:#}");
}

/// The key part a service keys the visitor at `address` by, as the axum
/// guard and the demo derive it (`Visitor::from_ip` of the peer address).
fn visitor(address: &str) -> String {
    Visitor::from_ip(address.parse().unwrap()).to_string()
}

#[test]
fn status_and_reset_key_a_visitor_address_as_the_service_does() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let rules = RuleSet::defaults();
    // What the demo writes for three visitors: two /64s and an IPv4 address.
    let ours = visitor("2001:db8:0:1::9");
    assert_eq!(ours, "2001:db8:0:1::/64");
    let neighbour = visitor("2001:db8:0:2::9");
    count(&url, &rules, "ask", &["docs", &ours], 4);
    count(&url, &rules, "ask", &["docs", &neighbour], 1);
    count(&url, &rules, "ask", &["docs", "203.0.113.9"], 2);

    // Any address of the /64, in any spelling, or the /64 itself.
    for given in [
        "2001:db8:0:1::9",
        "2001:DB8:0:1:ffff::1",
        "2001:db8:0:1::/64",
    ] {
        let json = tollgate(&["status", "--store", &url, "--json", "ask", "docs", given]).json();
        assert_eq!(json["count"], 4, "{given}: {json:#}");
        assert_eq!(json["key"]["visitor"], ours.as_str());
    }
    let json = tollgate(&[
        "status",
        "--store",
        &url,
        "--json",
        "ask",
        "docs",
        "203.0.113.9",
    ]);
    assert_eq!(json.json()["count"], 2, "IPv4 as it is");
    let json = tollgate(&[
        "status",
        "--store",
        &url,
        "--json",
        "ask-burst",
        "::ffff:203.0.113.9",
    ]);
    assert_eq!(
        json.json()["key"]["visitor"],
        "203.0.113.9",
        "IPv4-mapped is IPv4"
    );

    let run = tollgate(&[
        "reset",
        "--store",
        &url,
        "--yes",
        "ask",
        "docs",
        "2001:db8:0:1:aaaa::5",
    ]);
    assert!(
        run.ok().starts_with(
            "reset `ask` for docs / \"2001:db8:0:1::/64\": the current window's counter was cleared\n"
        ),
        "{run:#?}"
    );
    assert_eq!(
        remaining(&url, &rules, "ask", &["docs", &ours]),
        15,
        "cleared"
    );
    assert_eq!(
        remaining(&url, &rules, "ask", &["docs", &neighbour]),
        14,
        "another /64"
    );
    assert_eq!(remaining(&url, &rules, "ask", &["docs", "203.0.113.9"]), 13);

    // Not an address: an error naming the part, never a key of its own.
    for bad in [
        "2001:db8:0:1::9:80:1:2:3",
        "203.0.113",
        "visitor-7",
        "2001:db8::/48",
    ] {
        for command in [&["status"][..], &["reset", "--yes"]] {
            let run = tollgate(&[command, &["--store", &url, "ask", "docs", bad]].concat());
            let line = run.error_line(1);
            assert!(
                line.starts_with(&format!(
                    "tollgate: error: the `visitor` part of rule `ask` is a visitor's address, and {bad} is not one"
                )) || line.contains(&format!("and \"{bad}\" is not one")),
                "{line}"
            );
        }
    }
    // --raw takes the part as given: the demo never writes such a key.
    let raw = [
        "status",
        "--store",
        &url,
        "--json",
        "--raw",
        "ask",
        "docs",
        "2001:db8:0:1::9",
    ];
    assert_eq!(tollgate(&raw).json()["count"], 0);
    assert!(tollgate(&["status", "--help"]).ok().contains("--raw"));
}

#[test]
fn reset_without_yes_and_no_terminal_refuses_and_reads_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let url = sqlite_url(dir.path());
    let rules = RuleSet::defaults();
    count(&url, &rules, "ask", &["docs", "203.0.113.9"], 2);
    // A "y" on a pipe is not a confirmation.
    let run = tollgate_with(
        &["reset", "--store", &url, "ask", "docs", "203.0.113.9"],
        b"y\n",
        &[],
    );
    assert_eq!(
        run.error_line(1),
        "tollgate: error: refusing to reset `ask` for docs / 203.0.113.9 without confirmation: \
         stdin is not a terminal (pass --yes)"
    );
    assert_eq!(run.stdout, "");
    assert_eq!(remaining(&url, &rules, "ask", &["docs", "203.0.113.9"]), 13);
}

// ----- Redis -----

#[test]
fn status_and_reset_on_a_private_redis() {
    let server = RedisServer::start();
    let url = server.url();
    let rules = RuleSet::defaults();
    let org = unique();
    count(&url, &rules, "github", &[&org], 5);
    let json = tollgate(&["status", "--store", &url, "--json", "github", &org]).json();
    assert_eq!(
        (json["count"].as_i64(), json["remaining"].as_i64()),
        (Some(5), Some(55))
    );
    assert_eq!(json["store"], url.as_str());
    assert_eq!(json["reset_unix"].as_u64().unwrap() % 3_600, 0);
    let run = tollgate(&["reset", "--store", &url, "--yes", "github", &org]);
    assert!(run.ok().contains("counter was cleared"), "{run:#?}");
    assert_eq!(remaining(&url, &rules, "github", &[&org]), 60);
    let json = tollgate(&["status", "--store", &url, "--json", "github", &org]).json();
    assert_eq!(json["count"], 0);
}

fn doctor(url: &str) -> Run {
    tollgate(&["doctor", "--store", url])
}

fn warnings(report: &str) -> Vec<&str> {
    report
        .lines()
        .filter(|l| l.starts_with("warning: "))
        .collect()
}

#[test]
fn doctor_on_a_durable_primary_without_eviction_is_healthy_with_no_warning() {
    let server = RedisServer::start_with(RedisServerOptions::durable());
    let run = doctor(&server.url());
    let report = run.ok();
    assert_eq!(warnings(report), Vec::<&str>::new(), "{report}");
    assert!(
        report.contains(&format!("store      {}\n", server.url())),
        "{report}"
    );
    assert!(report.contains("\nreachable  yes (first call "), "{report}");
    assert!(
        report.contains("\nwritable   yes (a reservation and a delete of a throwaway counter, "),
        "{report}"
    );
    // Its throwaway counter is deleted (or, its second over, about to expire).
    block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg("*")
            .query_async(&mut conn)
            .await
            .unwrap();
        // (Other keys, the stores' records of check ids, have lifetimes of their own.)
        for key in keys.iter().filter(|k| k.contains("tollgate-doctor")) {
            let ttl: i64 = redis::cmd("PTTL")
                .arg(key)
                .query_async(&mut conn)
                .await
                .unwrap();
            assert!((0..=1_000).contains(&ttl), "{key}: {ttl} ms");
        }
    });
    assert!(report.contains("\nlatency    20 calls: min "), "{report}");
    assert!(
        report.contains("role master, appendonly yes, maxmemory-policy noeviction"),
        "{report}"
    );
    assert!(report.ends_with("healthy\n"), "{report}");
}

#[test]
fn doctor_warns_when_appendonly_is_off() {
    let server =
        RedisServer::start_with(RedisServerOptions::default().args(["--appendonly", "no"]));
    let run = doctor(&server.url());
    let report = run.ok();
    let found = warnings(report);
    assert_eq!(found.len(), 1, "{report}");
    assert!(
        found[0].starts_with("warning: appendonly is off"),
        "{report}"
    );
    assert!(report.ends_with("healthy, with 1 warning\n"), "{report}");
}

#[test]
fn doctor_warns_when_the_eviction_policy_could_drop_live_counters() {
    for policy in ["allkeys-lru", "volatile-ttl"] {
        let options = RedisServerOptions::durable().args(["--maxmemory-policy", policy]);
        let server = RedisServer::start_with(options);
        let run = doctor(&server.url());
        let report = run.ok();
        let found = warnings(report);
        assert_eq!(found.len(), 1, "{report}");
        assert!(
            found[0].starts_with(&format!("warning: maxmemory-policy is {policy}: ")),
            "{report}"
        );
    }
}

/// The line of a doctor that found the store refusing a check's write.
fn refuses_writes(run: &Run) -> &str {
    let line = run.error_line(1);
    let refusal = " answers but refuses the write every check makes, so every check would fail: ";
    assert!(line.contains(refusal), "{line}");
    assert!(run.stdout.is_empty(), "{run:#?}");
    line
}

#[test]
fn doctor_fails_on_a_read_only_replica() {
    let primary = RedisServer::start_with(RedisServerOptions::durable());
    let port = primary.port().to_string();
    let options = RedisServerOptions::durable().args(["--replicaof", "127.0.0.1", port.as_str()]);
    let replica = RedisServer::start_with(options);
    let run = doctor(&replica.url());
    let line = refuses_writes(&run);
    assert!(line.contains("READONLY"), "{line}");
    assert!(line.ends_with("the server is a replica (role:slave), which refuses writes: point the store at the primary"), "{line}");
}

#[test]
fn doctor_fails_on_a_replica_whose_primary_is_gone() {
    let nobody = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let nobody = nobody.to_string();
    let options = RedisServerOptions::durable().args([
        "--replicaof",
        "127.0.0.1",
        nobody.as_str(),
        "--replica-read-only",
        "yes",
    ]);
    let replica = RedisServer::start_with(options);
    let line = refuses_writes(&doctor(&replica.url())).to_owned();
    assert!(
        line.contains("READONLY") && line.contains("replica (role:slave)"),
        "{line}"
    );
}

#[test]
fn doctor_passes_a_writable_replica_with_a_warning() {
    let primary = RedisServer::start_with(RedisServerOptions::durable());
    let port = primary.port().to_string();
    let options = RedisServerOptions::durable().args([
        "--replicaof",
        "127.0.0.1",
        port.as_str(),
        "--replica-read-only",
        "no",
    ]);
    let replica = RedisServer::start_with(options);
    let run = doctor(&replica.url());
    let report = run.ok();
    let found = warnings(report);
    assert_eq!(found.len(), 1, "{report}");
    assert!(
        found[0].contains("replica (role:slave) that takes writes"),
        "{report}"
    );
}

#[test]
fn doctor_fails_on_a_full_server_without_eviction() {
    let options = RedisServerOptions::durable().args(["--maxmemory-policy", "noeviction"]);
    let server = RedisServer::start_with(options);
    server.require_private("fill its memory");
    block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let info: String = redis::cmd("INFO")
            .arg("memory")
            .query_async(&mut conn)
            .await
            .unwrap();
        let used: u64 = info
            .lines()
            .find_map(|l| l.strip_prefix("used_memory:"))
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(used + 256 * 1024)
            .query_async(&mut conn)
            .await
            .unwrap();
        // Fill it: 16 KiB values until the server refuses one.
        let value = "x".repeat(16 * 1024);
        let full = async {
            for i in 0..1_000 {
                let set: Result<(), _> = redis::cmd("SET")
                    .arg(format!("filler:{i}"))
                    .arg(&value)
                    .query_async(&mut conn)
                    .await;
                if let Err(err) = set {
                    return err.to_string();
                }
            }
            panic!("a server of 256 KiB more took 16 MiB");
        };
        assert!(full.await.contains("OOM"));
    });
    let run = doctor(&server.url());
    let line = refuses_writes(&run);
    assert!(line.contains("OOM"), "{line}");
    assert!(
        line.contains("; the server is full (used_memory "),
        "{line}"
    );
    assert!(
        line.ends_with("maxmemory-policy noeviction): raise maxmemory or free memory"),
        "{line}"
    );
}

#[test]
fn doctor_on_a_dead_port_fails_in_one_line_within_two_seconds() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let url = format!("redis://:dead-secret@127.0.0.1:{port}");
    let run = doctor(&url);
    let line = run.error_line(1);
    assert!(
        line.starts_with(&format!(
            "tollgate: error: cannot reach the store redis://127.0.0.1:{port}: "
        )),
        "{line}"
    );
    assert!(!run.all().contains("dead-secret"), "{run:#?}");
    assert!(run.took < Duration::from_secs(2), "{run:#?}");
}

#[test]
fn doctor_on_a_port_that_never_answers_fails_within_two_seconds() {
    // The kernel accepts connections on a listening socket; nothing answers.
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let run = doctor(&format!("redis://127.0.0.1:{port}"));
    run.error_line(1);
    assert!(run.took < Duration::from_secs(2), "{run:#?}");
    drop(listener);
}

#[test]
fn no_password_is_printed_by_any_command() {
    let server = RedisServer::start();
    let secret = "s3cret-pw-0451";
    block_on(async {
        let client = redis::Client::open(server.url()).unwrap();
        let mut conn = client.get_multiplexed_async_connection().await.unwrap();
        let () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("requirepass")
            .arg(secret)
            .query_async(&mut conn)
            .await
            .unwrap();
    });
    let port = server.port();
    let url = format!("redis://:{secret}@127.0.0.1:{port}/0");
    let shown = format!("redis://127.0.0.1:{port}");
    let rules = RuleSet::defaults();
    count(&url, &rules, "publish", &["acme"], 1);

    let mut runs = vec![
        tollgate(&["status", "--store", &url, "publish", "acme"]),
        tollgate(&["status", "--store", &url, "--json", "publish", "acme"]),
        tollgate(&["reset", "--store", &url, "--yes", "publish", "acme"]),
        tollgate(&["reset", "--store", &url, "publish", "acme"]),
        doctor(&url),
        tollgate_with(&["status", "--help"], b"", &[("TOLLGATE_STORE", &url)]),
        tollgate_with(&["doctor"], b"", &[("TOLLGATE_STORE", &url)]),
        tollgate(&["status", "--store", &url, "--bogus", &url]),
        tollgate(&["status", "--store", &url, "publish", "acme", "extra"]),
    ];
    assert!(runs[0].ok().contains(&format!("store      {shown}\n")));
    assert_eq!(runs[1].json()["count"], 1);
    assert!(runs[4].ok().contains(&format!("store      {shown}\n")));
    assert!(
        runs[6].ok().contains(&format!("store      {shown}\n")),
        "env store"
    );
    // Wrong passwords, and a password the store refuses, are not shown either.
    for bad in ["wrong-pw-7731", "wr%6Fng-pw-7731"] {
        let url = format!("redis://:{bad}@127.0.0.1:{port}");
        let run = doctor(&url);
        run.error_line(1);
        assert!(!run.all().contains("wrong-pw-7731"), "{run:#?}");
        assert!(!run.all().contains(bad), "{run:#?}");
        runs.push(run);
    }
    for run in &runs {
        assert!(!run.all().contains(secret), "{run:#?}");
    }
}

#[test]
fn a_store_url_given_in_the_wrong_place_is_not_echoed_with_its_password() {
    // A forgotten --store: clap names the stray argument, which is the URL.
    let run = tollgate(&["doctor", "redis://:stray-pw-2201@127.0.0.1:1/0"]);
    let line = run.error_line(2);
    assert!(line.contains("redis://***@127.0.0.1:1"), "{line}");
    assert!(!run.all().contains("stray-pw-2201"), "{run:#?}");
}

// ----- help and usage -----

#[test]
fn every_subcommand_has_help() {
    for args in [
        &["--help"][..],
        &["rules", "--help"],
        &["rules", "check", "--help"],
        &["status", "--help"],
        &["reset", "--help"],
        &["doctor", "--help"],
    ] {
        let run = tollgate(args);
        assert!(run.ok().contains("Usage: tollgate"), "{args:?}: {run:#?}");
    }
    assert!(tollgate(&["reset", "--help"]).stdout.contains("--yes"));
}

#[test]
fn usage_errors_are_one_line() {
    let run = tollgate(&["status", "--store", "memory"]);
    assert!(run.error_line(2).contains("<RULE>"), "{run:#?}");
    let run = tollgate(&["frobnicate"]);
    run.error_line(2);
    let run = tollgate(&["status", "--store", "nope://x", "ask-all"]);
    assert!(
        run.error_line(1)
            .contains("unknown store URL scheme `nope`")
    );
}

/// Secrets holding the characters that may end a URL's authority (`/`,
/// `?`, `#`), an `@`, a `+` and a `%2F` escape, each starting with a
/// different one, as base64 keys and generated passwords do. (The first
/// run of letters and digits of each is longer than 4: see [`giveaways`].)
const ODD_SECRETS: &[&str] = &[
    "Sl4sh/Cl1q#Vb2n?Tj5w+Mz8c%2FRd3x",
    "H4shx#Cl1q?Vb2n/Tj5w@Mz8c",
    "Qm4rk?Cl1q/Vb2n#Tj5w&Mz8c=Rd3x",
    "Att4t@Cl1q/Vb2n#Tj5w?Mz8c+Rd3x",
    "Pl5sx+Cl1q%2FVb2n%23Tj5w%40Mz8c",
];

/// Fails when `run` printed any part of `secret` (in any case).
fn assert_hidden(what: &str, secret: &str, run: &Run) {
    let all = run.all().to_lowercase();
    for part in giveaways(secret) {
        assert!(
            !all.contains(&part),
            "{what}: `{part}` of the secret {secret} is printed: {run:#?}"
        );
    }
}

#[test]
fn no_secret_is_printed_on_any_error_path_of_any_store_url() {
    // Planted as a password, a bare user, a query field, a token and a
    // text pasted in the URL's place; every command, from --store and from
    // TOLLGATE_STORE; stores down, malformed, unknown or not compiled in.
    // (Longer than 16 characters: a shorter text before `://` reads as a
    // scheme, and is named.) Then each of ODD_SECRETS the same way.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let mut not_a_url = 0;
    for secret in std::iter::once("Pl4ntedCl1Secret07").chain(ODD_SECRETS.iter().copied()) {
        not_a_url += no_secret_is_printed_for(secret, port);
    }
    // The runs reached the store's errors, not only the parser's.
    assert!(not_a_url >= 5 * 4 * (1 + ODD_SECRETS.len()), "{not_a_url}");
}

/// Every command on every store URL planting `secret`, and `secret` given
/// without `--store`, with `port` a loopback port nothing listens on: no
/// part of `secret` is printed. How many runs said "not a URL".
fn no_secret_is_printed_for(secret: &str, port: u16) -> usize {
    let urls = [
        secret.to_owned(),
        format!("{secret}@127.0.0.1:{port}"),
        format!("default:{secret}@127.0.0.1:{port}"),
        format!("{secret}:"),
        format!("{secret}://127.0.0.1:{port}"),
        format!("memory:{secret}"),
        format!("mysql://user:{secret}@127.0.0.1:{port}/x"),
        format!("redis://:{secret}@127.0.0.1:{port}"),
        format!("redis://{secret}@127.0.0.1:{port}/0"),
        format!("redis://:{secret}@127.0.0.1:99999"),
        format!("redis://:{secret}@127.0.0.1:{port}/x"),
        format!("unix:///tmp/tollgate-none-{port}.sock?pass={secret}"),
        format!("rediss://:{secret}@127.0.0.1:{port}"),
        format!("redis-cluster://:{secret}@127.0.0.1:{port}"),
        format!("redis-cluster://:{secret}@127.0.0.1:99999"),
        format!("postgres://user:{secret}@127.0.0.1:{port}/db"),
        format!("upstash+https://user:{secret}@127.0.0.1:{port}"),
        format!("upstash+http://127.0.0.1:{port}?_token={secret}"),
    ];
    let token = [("UPSTASH_REDIS_REST_TOKEN", secret)];
    let mut not_a_url = 0;
    for url in &urls {
        let env = [("TOLLGATE_STORE", url.as_str()), token[0]];
        let runs = [
            tollgate_with(&["status", "--store", url, "publish", "acme"], b"", &token),
            tollgate_with(&["status", "--json", "publish", "acme"], b"", &env),
            tollgate_with(
                &["reset", "--store", url, "--yes", "publish", "acme"],
                b"",
                &token,
            ),
            tollgate_with(&["doctor", "--calls", "1"], b"", &env),
            tollgate_with(&["doctor", "--store", url, "--bogus"], b"", &token),
        ];
        for run in &runs {
            assert_ne!(run.code, 0, "{url}: {run:#?}");
            assert!(!run.all().contains("panicked"), "{url}: {run:#?}");
            assert_hidden(url, secret, run);
            not_a_url += usize::from(run.all().contains("not a URL"));
        }
    }
    // A forgotten --store: the secret is a stray argument of the parser's.
    for stray in [secret.to_owned(), format!("{secret}@127.0.0.1:{port}")] {
        let run = tollgate(&["doctor", &stray]);
        assert!(
            run.error_line(2).contains("unexpected argument '***'"),
            "{run:#?}"
        );
        assert_hidden(&stray, secret, &run);
    }
    // And a store URL given without --store: named by its host alone.
    let stray = format!("redis://:{secret}@127.0.0.1:{port}/0");
    let run = tollgate(&["doctor", &stray]);
    let named = format!("unexpected argument 'redis://***@127.0.0.1:{port}/0'");
    assert!(run.error_line(2).contains(&named), "{run:#?}");
    assert_hidden(&stray, secret, &run);
    not_a_url
}

#[test]
fn doctor_names_a_store_by_its_host_when_the_password_holds_a_slash_or_hash() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    // The reviewer's URLs: the user and the start of the password were
    // printed as the store's name (`postgres://app:se`, `redis://:Ab`).
    for (url, store, secret) in [
        (
            format!("postgres://app:se/cret-pw@127.0.0.1:{port}/x"),
            format!("postgres://127.0.0.1:{port}"),
            "se/cret-pw",
        ),
        (
            format!("redis://:Ab#cd-secret@127.0.0.1:{port}"),
            format!("redis://127.0.0.1:{port}"),
            "Ab#cd-secret",
        ),
        (
            format!("redis://:Ab?cd/ef@gh-secret@127.0.0.1:{port}/0"),
            format!("redis://127.0.0.1:{port}"),
            "Ab?cd/ef@gh-secret",
        ),
    ] {
        for run in [
            doctor(&url),
            tollgate_with(
                &["doctor", "--calls", "1"],
                b"",
                &[("TOLLGATE_STORE", &url)],
            ),
        ] {
            let line = run.error_line(1);
            assert!(
                line.starts_with(&format!("tollgate: error: cannot open the store {store}: "))
                    || line.starts_with(&format!(
                        "tollgate: error: cannot reach the store {store}: "
                    )),
                "{url}: {line}"
            );
            assert!(!line.contains("app:"), "{url}: {line}");
            assert!(!line.contains("://:"), "{url}: {line}");
            let parts = secret.split(['/', '#', '?', '@']);
            for part in parts.filter(|part| part.len() >= 4) {
                assert!(!line.contains(part), "{url}: `{part}` in {line}");
            }
        }
    }
}
