//! `tollgate rules check FILE`: validates a rules file and lists its rules,
//! each with its shape (`fixed` or `sliding`).

use serde_json::json;
use tollgate::Rule;

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
    let rows: Vec<Vec<String>> = rules
        .iter()
        .map(|rule| {
            vec![
                rule.name().to_owned(),
                rule.max().to_string(),
                rule.window().to_string(),
                rule.algorithm().to_string(),
                key_names(rule),
                rule.unit().to_string(),
                yes_no(rule.is_public()),
                yes_no(rule.is_shadow()),
            ]
        })
        .collect();
    let header = [
        "rule",
        "max",
        "window",
        "algorithm",
        "key",
        "unit",
        "public",
        "shadow",
    ];
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
/// (`algorithm`: `fixed` or `sliding`), key parts, unit and flags.
pub(crate) fn rule_json(rule: &Rule) -> serde_json::Value {
    json!({
        "name": rule.name(),
        "max": rule.max(),
        "window": rule.window().to_string(),
        "window_secs": rule.window().secs(),
        "algorithm": rule.algorithm().as_str(),
        "key": rule.key_parts().iter().map(|p| &**p).collect::<Vec<&str>>(),
        "unit": rule.unit().as_str(),
        "public": rule.is_public(),
        "shadow": rule.is_shadow(),
    })
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
