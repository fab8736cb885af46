//! The core's own cost per check: building the limits of a check from its key
//! parts and computing each counter's key, window and lifetime.
//!
//! `cargo bench -p tollgate-core`

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use tollgate_core::{Limit, RuleSet};

fn limits(rules: &RuleSet, project: &str, visitor: &str) -> Vec<Limit> {
    let rule = |name: &str| rules.get(name).cloned();
    let (Ok(burst), Ok(ask), Ok(site), Ok(all)) = (
        rule("ask-burst"),
        rule("ask"),
        rule("ask-site"),
        rule("ask-all"),
    ) else {
        return Vec::new();
    };
    [
        burst.limit(&[visitor]),
        ask.limit(&[project, visitor]),
        site.limit(&[project]),
        all.limit::<&str>(&[]),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn keys(c: &mut Criterion) {
    let rules = RuleSet::defaults();
    let visitors: Vec<String> = (0..1_024)
        .map(|i| format!("203.0.{}.{}", i / 256, i % 256))
        .collect();
    let now = 1_764_374_400u64;
    let mut i = 0;
    c.bench_function("check_setup_4_limits", |b| {
        b.iter(|| {
            i = (i + 1) % visitors.len();
            let limits = limits(&rules, "docs", &visitors[i]);
            let keys: Vec<(String, u64)> = limits
                .iter()
                .map(|l| {
                    let w = l.rule().window();
                    (l.counter_key(w.index(now)), w.retry_after(now))
                })
                .collect();
            black_box(keys)
        })
    });
    c.bench_function("window_math", |b| {
        let w = tollgate_core::Window::DAY;
        b.iter(|| {
            let t = black_box(now);
            black_box((w.index(t), w.reset(t), w.retry_after(t)))
        })
    });
}

criterion_group!(benches, keys);
criterion_main!(benches);
