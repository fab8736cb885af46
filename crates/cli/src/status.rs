//! `tollgate status`: where one limit stands now, spending nothing.

use serde_json::json;

use crate::args::LimitArgs;
use crate::check::burst;
use crate::failure::Failure;
use crate::limit::{Target, part_shown};
use crate::{table, time};

/// Reads the limit's counter; a table or JSON.
pub(crate) async fn run(args: &LimitArgs) -> Result<String, Failure> {
    let target = Target::open(args)?;
    let usage = target
        .limiter
        .remaining(std::slice::from_ref(&target.limit))
        .await
        .map_err(|e| Failure::with(format_args!("cannot read {}", target.store), &e))?;
    let Some(usage) = usage.first() else {
        return Err(Failure::new("the store answered no count"));
    };
    let rule = target.limit.rule();
    // remaining = max - count, both at most 2^53. For a sliding window the
    // count is the estimate, and `reset` when over is when a call fits again.
    // A GCRA bucket's remaining is what one call may spend now, out of its
    // burst: its count is what was spent and has not come back yet, and
    // `reset` is when the bucket is full again (when over, when a call fits).
    let burst = burst(rule);
    let count = i128::from(burst.unwrap_or(usage.max())) - i128::from(usage.remaining());
    let names = rule.key_parts();
    if args.json {
        let key: serde_json::Map<String, serde_json::Value> = names
            .iter()
            .zip(&target.parts)
            .map(|(name, part)| (name.to_string(), json!(part)))
            .collect();
        let mut report = json!({
            "store": target.store,
            "rule": rule.name(),
            "key": key,
            "count": count,
            "remaining": usage.remaining(),
            "max": usage.max(),
            "unit": usage.unit().as_str(),
            "window": usage.window().to_string(),
            "window_secs": usage.window().secs(),
            "algorithm": usage.algorithm().as_str(),
            "reset": time::rfc3339(usage.reset()),
            "reset_unix": usage.reset(),
            "reset_in_secs": usage.retry_after(),
            "over": usage.is_over() || usage.is_shadow_over(),
            "public": rule.is_public(),
            "shadow": rule.is_shadow(),
        });
        if let (Some(burst), Some(fields)) = (burst, report.as_object_mut()) {
            fields.insert("burst".into(), burst.into());
        }
        return Ok(format!("{report:#}\n"));
    }
    let key: Vec<String> = names
        .iter()
        .zip(&target.parts)
        .map(|(name, part)| format!("{name}={}", part_shown(part)))
        .collect();
    let mut flags = Vec::new();
    if !rule.is_public() {
        flags.push("not public");
    }
    if rule.is_shadow() {
        flags.push("shadow");
    }
    let over = match (usage.is_over(), usage.is_shadow_over()) {
        (true, _) => "yes: the next call is refused",
        (_, true) => "yes (a shadow rule: reported, never refusing)",
        _ => "no",
    };
    let leases = usage.algorithm() == tollgate::Algorithm::Concurrency;
    // A full GCRA bucket has nothing to get back: no time to wait for.
    let reset = if burst.is_some() && count <= 0 && !usage.is_over() {
        "now (the bucket is full)".to_owned()
    } else if leases && count <= 0 {
        "now (no lease held)".to_owned()
    } else if leases {
        format!(
            "when the first lease held ends: {} (in {} s)",
            time::rfc3339(usage.reset()),
            usage.retry_after()
        )
    } else {
        format!(
            "{} (in {} s)",
            time::rfc3339(usage.reset()),
            usage.retry_after()
        )
    };
    let mut rows = vec![
        ("store", target.store.clone()),
        ("rule", rule.name().to_owned()),
        (
            "key",
            if key.is_empty() {
                "-".into()
            } else {
                key.join(", ")
            },
        ),
        (if leases { "held" } else { "count" }, count.to_string()),
        ("remaining", usage.remaining().to_string()),
        ("max", usage.max().to_string()),
    ];
    if let Some(burst) = burst {
        rows.push(("burst", burst.to_string()));
    }
    rows.extend([
        ("unit", usage.unit().to_string()),
        (
            if leases { "lease" } else { "window" },
            usage.window().to_string(),
        ),
        ("algorithm", usage.algorithm().to_string()),
        ("reset", reset),
        ("over", over.to_owned()),
    ]);
    if !flags.is_empty() {
        rows.push(("flags", flags.join(", ")));
    }
    Ok(table::pairs(&rows))
}
