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
mod url;

pub use error::Error;
pub use options::{DEFAULT_POOL_SIZE, DEFAULT_SCHEMA, PostgresOptions};
pub use schema::SCHEMA_VERSION;
pub use store::PostgresStore;
