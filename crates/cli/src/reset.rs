//! `tollgate reset`: clears one limit's counter for the current window.

use std::io::{BufRead as _, IsTerminal as _, Write as _};

use serde_json::json;

use crate::args::ResetArgs;
use crate::failure::Failure;
use crate::limit::{Target, parts_shown};

/// Asks (unless `--yes`), then resets; whether a counter existed.
pub(crate) async fn run(args: &ResetArgs) -> Result<String, Failure> {
    let target = Target::open(&args.limit)?;
    let name = target.limit.rule().name();
    let what = match args.limit.parts.as_slice() {
        [] => format!("`{name}`"),
        parts => format!("`{name}` for {}", parts_shown(parts)),
    };
    if !args.yes {
        confirm(&what)?;
    }
    let existed = target
        .limiter
        .reset(&target.limit)
        .await
        .map_err(|e| Failure::with(format_args!("cannot reset {what}"), &e))?;
    if args.limit.json {
        let report = json!({
            "store": target.store,
            "rule": name,
            "key": args.limit.parts,
            "existed": existed,
        });
        return Ok(format!("{report:#}\n"));
    }
    Ok(if existed {
        format!("reset {what}: the current window's counter was cleared\n")
    } else {
        format!("reset {what}: no counter existed in the current window\n")
    })
}

/// Asks on the terminal; an error unless the answer is yes, or when stdin
/// is not a terminal (nothing is read from a pipe).
fn confirm(what: &str) -> Result<(), Failure> {
    let stdin = std::io::stdin();
    if !stdin.is_terminal() {
        return Err(Failure::new(format!(
            "refusing to reset {what} without confirmation: stdin is not a terminal (pass --yes)"
        )));
    }
    let mut stderr = std::io::stderr();
    // A prompt that cannot be shown still waits for the answer below.
    let _ = write!(stderr, "reset {what} in the current window? [y/N] ");
    let _ = stderr.flush();
    let mut answer = String::new();
    stdin
        .lock()
        .read_line(&mut answer)
        .map_err(|e| Failure::with("cannot read the answer", &e))?;
    match answer.trim().to_ascii_lowercase().as_str() {
        "y" | "yes" => Ok(()),
        _ => Err(Failure::new(format!("not confirmed: {what} was not reset"))),
    }
}
