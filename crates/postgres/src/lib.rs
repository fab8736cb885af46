#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod error;
mod lease;
mod options;
mod schema;
mod shared;
mod sql;
mod store;
mod sweep;
mod tls;
mod url;

pub use error::Error;
pub use options::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresOptions};
pub use schema::SCHEMA_VERSION;
pub use store::PostgresStore;

/// The text of the statement a call runs on `schema` (an unquoted schema
/// name): `count`, `reserve`, `refund`, `get`, `delete`, `claim`, `finish`,
/// `release` or `sweep`; the variants for a batch with priors,
/// `count-priors` and `reserve-priors`; or the purging variant of a
/// counter statement (`count-purging`, `reserve-purging`,
/// `refund-purging`, `count-priors-purging`, `reserve-priors-purging`),
/// which one counter call in 32 runs. For the benchmark's raw ceiling; not
/// a stable API.
#[doc(hidden)]
pub fn statement(op: &str, schema: &str) -> Option<String> {
    let s = sql::Statements::new(&format!("\"{schema}\""));
    Some(match op {
        "count" => s.counters.count,
        "reserve" => s.counters.reserve,
        "refund" => s.counters.refund,
        "count-priors" => s.counters.count_priors,
        "reserve-priors" => s.counters.reserve_priors,
        "count-purging" => s.purging.count,
        "reserve-purging" => s.purging.reserve,
        "refund-purging" => s.purging.refund,
        "count-priors-purging" => s.purging.count_priors,
        "reserve-priors-purging" => s.purging.reserve_priors,
        "get" => s.get,
        "delete" => s.delete,
        "claim" => s.claim,
        "finish" => s.finish,
        "release" => s.release,
        "sweep" => s.sweep,
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_benchmark_gets_each_statement_the_store_runs() {
        let s = sql::Statements::new("\"s\"");
        let ops = [
            ("count", s.counters.count),
            ("reserve", s.counters.reserve),
            ("refund", s.counters.refund),
            ("count-priors", s.counters.count_priors),
            ("reserve-priors", s.counters.reserve_priors),
            ("count-purging", s.purging.count),
            ("reserve-purging", s.purging.reserve),
            ("refund-purging", s.purging.refund),
            ("count-priors-purging", s.purging.count_priors),
            ("reserve-priors-purging", s.purging.reserve_priors),
            ("get", s.get),
            ("delete", s.delete),
            ("claim", s.claim),
            ("finish", s.finish),
            ("release", s.release),
            ("sweep", s.sweep),
        ];
        for (op, text) in ops {
            assert_eq!(statement(op, "s").as_deref(), Some(text.as_str()), "{op}");
        }
        assert_eq!(statement("drop", "s"), None);
    }
}
