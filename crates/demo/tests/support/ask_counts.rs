//! What the five counters of an ask hold, read (not spent) through a
//! limiter over the demo's store, under the default rules.
#![allow(clippy::unwrap_used)]

use tollgate::{Limiter, RuleSet};

/// What the five ask counters of `visitor` on `project` hold now, in the
/// order `ask-burst`, `ask`, `ask-site`, `ask-all`, `ask-tokens`.
pub(crate) async fn ask_counts(reader: &Limiter, project: &str, visitor: &str) -> [u64; 5] {
    let rules = RuleSet::defaults();
    let limits = [
        rules.get("ask-burst").unwrap().limit(&[visitor]).unwrap(),
        rules
            .get("ask")
            .unwrap()
            .limit(&[project, visitor])
            .unwrap(),
        rules.get("ask-site").unwrap().limit(&[project]).unwrap(),
        rules.get("ask-all").unwrap().limit::<&str>(&[]).unwrap(),
        rules.get("ask-tokens").unwrap().limit(&[project]).unwrap(),
    ];
    let usage = reader.remaining(&limits).await.unwrap();
    let count = |i: usize| {
        usage[i]
            .max()
            .checked_add_signed(-usage[i].remaining())
            .unwrap()
    };
    [count(0), count(1), count(2), count(3), count(4)]
}
