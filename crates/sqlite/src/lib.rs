#![doc = include_str!("../README.md")]
#![forbid(unsafe_code)]

mod calls;
mod error;
mod job;
mod leases;
mod marks;
mod ops;
mod options;
mod schema;
mod store;
mod worker;

pub use error::Error;
pub use options::{Durability, SqliteOptions};
pub use schema::{APPLICATION_ID, SCHEMA_VERSION};
pub use store::SqliteStore;
