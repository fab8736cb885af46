//! `tollgate reset`: clears one limit's counter for the current window (a
//! GCRA limit's: its bucket's).

use std::io::{BufRead as _, IsTerminal as _, Write as _};
use std::time::Duration;

use serde_json::json;
use tollgate::Limiter;

use crate::args::ResetArgs;
use crate::failure::Failure;
use crate::limit::{Target, parts_shown};

/// How long other instances may keep refusing a counter reset here: the
/// age of their caches of full counters, by default. (This process cannot
/// see another's setting; an application that sets its own age says so.)
const OTHERS_MAY_REFUSE: Duration = Limiter::DEFAULT_CACHE_AGE;

/// Asks (unless `--yes`), then resets; whether a counter existed, and how
/// long running instances may keep refusing the limit.
pub(crate) async fn run(args: &ResetArgs) -> Result<String, Failure> {
    let target = Target::open(&args.limit)?;
    let name = target.limit.rule().name();
    let what = match target.parts.as_slice() {
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
            "key": target.parts,
            "existed": existed,
            "others_may_refuse_for_secs": OTHERS_MAY_REFUSE.as_secs_f64(),
        });
        return Ok(format!("{report:#}\n"));
    }
    let sliding = target.limit.rule().algorithm() == tollgate::Algorithm::Sliding;
    let previous = if sliding {
        "the previous window's counter was cleared too (a sliding window); running instances \
         that kept its count may count it until the current window ends\n"
    } else {
        ""
    };
    // A GCRA limit has one counter, its bucket's, and no windows.
    let gcra = target.limit.rule().algorithm() == tollgate::Algorithm::Gcra;
    let (cleared, none) = if gcra {
        (
            "the bucket's counter was cleared (its whole burst is available again)",
            "no counter existed (the bucket was full)",
        )
    } else {
        (
            "the current window's counter was cleared",
            "no counter existed in the current window",
        )
    };
    Ok(if existed {
        format!(
            "reset {what}: {cleared}\n{previous}\
             running instances may keep refusing it for up to {}: the age of their caches \
             of full counters (the default; an application may set its own)\n",
            shown(OTHERS_MAY_REFUSE)
        )
    } else {
        format!("reset {what}: {none}\n{previous}")
    })
}

/// `2 s`, or `500 ms` below a second.
fn shown(age: Duration) -> String {
    if age.subsec_millis() == 0 {
        format!("{} s", age.as_secs())
    } else {
        format!("{} ms", age.as_millis())
    }
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
