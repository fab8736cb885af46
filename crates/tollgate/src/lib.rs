#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod open;
pub mod url;

pub use open::{OpenError, open_store};
pub use tollgate_core::*;

/// The guard for any tower service of HTTP requests, visitor identity and
/// standard 429/503 (or gRPC) refusals (`tollgate-tower`).
#[cfg(feature = "tower")]
#[cfg_attr(docsrs, doc(cfg(feature = "tower")))]
pub use tollgate_tower as tower;

/// The same for axum, as axum types, with a visitor extractor and a server
/// (`tollgate-axum`).
#[cfg(feature = "axum")]
#[cfg_attr(docsrs, doc(cfg(feature = "axum")))]
pub use tollgate_axum as axum;

/// The in-memory store: a **test double**, counters vanish with the process (`tollgate-memory`).
#[cfg(feature = "test-util")]
#[cfg_attr(docsrs, doc(cfg(feature = "test-util")))]
pub use tollgate_memory as memory;

/// The production store, on Redis (`tollgate-redis`).
#[cfg(feature = "redis")]
#[cfg_attr(docsrs, doc(cfg(feature = "redis")))]
pub use tollgate_redis as redis;

/// A store in PostgreSQL, for services that already run one (`tollgate-postgres`).
#[cfg(feature = "postgres")]
#[cfg_attr(docsrs, doc(cfg(feature = "postgres")))]
pub use tollgate_postgres as postgres;

/// The store over Upstash's REST API, for serverless code (`tollgate-redis`).
#[cfg(feature = "upstash")]
#[cfg_attr(docsrs, doc(cfg(feature = "upstash")))]
pub use tollgate_redis::upstash;

/// A durable store in one SQLite file, for one machine (`tollgate-sqlite`).
#[cfg(feature = "sqlite")]
#[cfg_attr(docsrs, doc(cfg(feature = "sqlite")))]
pub use tollgate_sqlite as sqlite;

/// The README's examples of mounting the guard, compiled (not run) as
/// doctests when the features they use are on (as in the workspace's tests).
#[cfg(all(doctest, feature = "axum"))]
#[doc = include_str!("../../../README.md")]
pub struct ReadmeDoctests;
