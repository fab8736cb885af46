#![doc = include_str!("../README.md")]

mod error;
mod failure;
mod link;
mod options;
mod reply;
mod script;
mod store;

pub use error::Error;
pub use options::RedisOptions;
pub use script::RESERVE as RESERVE_SCRIPT;
pub use store::RedisStore;
