//! `tollgate rules check FILE`: validates a rules file and lists its rules,
//! each with its shape (`fixed`, `sliding`, `gcra` or `concurrency`) and,
//! for GCRA, its burst. A concurrency rule's max is how many leases its key
//! may hold at once, its window a lease's lifetime.

use serde_json::json;
use tollgate::{Algorithm, Rule};

use crate::args::CheckArgs;
use crate::failure::Failure;
use crate::{rules_file, table};

/// Checks the file; the rules as a table or JSON.
pub(crate) fn run(args: &CheckArgs) -> Result<String, Failure> {
    let rules = rules_file::load(&args.file)?;
    let file = args.file.display().to_string();
    if args.json {
        let rules: Vec<_> = rules.iter().map(rule_json).collect();
        let report = json!({ "file": file, "valid": true, "rules": rules });
        return Ok(format!("{report:#}\n"));
    }
    // A `burst` column only when a rule has one: a file of fixed and
    // sliding windows is listed as it always was.
    let bursts = rules.iter().any(|rule| burst(rule).is_some());
    let rows: Vec<Vec<String>> = rules
        .iter()
        .map(|rule| {
            let mut row = vec![
                rule.name().to_owned(),
                rule.max().to_string(),
                rule.window().to_string(),
                rule.algorithm().to_string(),
            ];
            if bursts {
                row.push(burst(rule).map_or_else(|| "-".to_owned(), |b| b.to_string()));
            }
            row.extend([
                key_names(rule),
                rule.unit().to_string(),
                yes_no(rule.is_public()),
                yes_no(rule.is_shadow()),
            ]);
            row
        })
        .collect();
    let mut header = vec!["rule", "max", "window", "algorithm"];
    if bursts {
        header.push("burst");
    }
    header.extend(["key", "unit", "public", "shadow"]);
    let count = match rules.len() {
        1 => "1 rule".to_owned(),
        n => format!("{n} rules"),
    };
    Ok(format!(
        "{}\n{file}: valid, {count}\n",
        table::columns(&header, &rows)
    ))
}

/// A rule as JSON: its name, max, window (as written and in seconds), shape
/// (`algorithm`: `fixed`, `sliding`, `gcra` or `concurrency`), for a GCRA
/// rule its `burst` and for a concurrency rule its `concurrency` and
/// `lease_secs` (no such keys for the other shapes), key parts, unit and
/// flags.
pub(crate) fn rule_json(rule: &Rule) -> serde_json::Value {
    let mut out = json!({
        "name": rule.name(),
        "max": rule.max(),
        "window": rule.window().to_string(),
        "window_secs": rule.window().secs(),
        "algorithm": rule.algorithm().as_str(),
        "key": rule.key_parts().iter().map(|p| &**p).collect::<Vec<&str>>(),
        "unit": rule.unit().as_str(),
        "public": rule.is_public(),
        "shadow": rule.is_shadow(),
    });
    if let (Some(burst), Some(fields)) = (burst(rule), out.as_object_mut()) {
        fields.insert("burst".into(), burst.into());
    }
    if let (Some(lease), Some(fields)) = (rule.lease(), out.as_object_mut()) {
        fields.insert("concurrency".into(), rule.max().into());
        fields.insert("lease_secs".into(), lease.as_secs().into());
    }
    out
}

/// A GCRA rule's burst: how many units one call may spend at once after a
/// quiet spell; `None` for the other shapes, which have none.
pub(crate) fn burst(rule: &Rule) -> Option<u64> {
    (rule.algorithm() == Algorithm::Gcra).then(|| rule.burst())
}

/// The key part names, comma-separated, or `-` for none.
fn key_names(rule: &Rule) -> String {
    if rule.key_parts().is_empty() {
        "-".to_owned()
    } else {
        rule.key_parts().join(", ")
    }
}

fn yes_no(flag: bool) -> String {
    if flag { "yes" } else { "no" }.to_owned()
}
