//! The memory test double per check, next to governor's keyed limiter on the
//! same key set (the in-process reference).
//!
//! `cargo bench -p tollgate-memory`

use std::hint::black_box;
use std::num::NonZeroU32;

use criterion::{Criterion, criterion_group, criterion_main};
use governor::{Quota, RateLimiter};
use tollgate_core::{Limit, Limiter, RuleSet, SystemClock};
use tollgate_memory::MemoryStore;

const VISITORS: usize = 1_024;

fn visitors() -> Vec<String> {
    (0..VISITORS)
        .map(|i| format!("203.0.{}.{}", i / 256, i % 256))
        .collect()
}

fn ask_limits(rules: &RuleSet, visitor: &str) -> Vec<Limit> {
    let limit = |name: &str, parts: &[&str]| rules.get(name).and_then(|r| r.limit(parts));
    [
        limit("ask-burst", &[visitor]),
        limit("ask", &["docs", visitor]),
        limit("ask-site", &["docs"]),
        limit("ask-all", &[]),
    ]
    .into_iter()
    .flatten()
    .collect()
}

fn store(c: &mut Criterion) {
    let rules = RuleSet::defaults();
    let visitors = visitors();
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let limiter = Limiter::builder(MemoryStore::new())
        .clock(SystemClock)
        .build();
    let sets: Vec<Vec<Limit>> = visitors.iter().map(|v| ask_limits(&rules, v)).collect();
    let ones: Vec<Vec<Limit>> = sets.iter().map(|s| s[..1].to_vec()).collect();

    let mut group = c.benchmark_group("per_check");
    let mut i = 0;
    group.bench_function("memory_count_1_limit", |b| {
        b.to_async(&runtime).iter(|| {
            i = (i + 1) % VISITORS;
            let limits = &ones[i];
            let limiter = &limiter;
            async move { black_box(limiter.count(limits).await.is_ok()) }
        })
    });
    group.bench_function("memory_count_4_limits", |b| {
        b.to_async(&runtime).iter(|| {
            i = (i + 1) % VISITORS;
            let limits = &sets[i];
            let limiter = &limiter;
            async move { black_box(limiter.count(limits).await.is_ok()) }
        })
    });
    group.bench_function("memory_reserve_4_limits", |b| {
        b.to_async(&runtime).iter(|| {
            i = (i + 1) % VISITORS;
            let limits = &sets[i];
            let limiter = &limiter;
            async move { black_box(limiter.reserve(limits).await.is_ok()) }
        })
    });
    let quota = Quota::per_minute(NonZeroU32::MIN.saturating_add(19));
    let governor = RateLimiter::keyed(quota);
    group.bench_function("governor_keyed_1_limit", |b| {
        b.iter(|| {
            i = (i + 1) % VISITORS;
            black_box(governor.check_key(&visitors[i]).is_ok())
        })
    });
    group.finish();
}

criterion_group!(benches, store);
criterion_main!(benches);
