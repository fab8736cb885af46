#![doc = include_str!("../README.md")]

mod cluster;
mod command;
mod error;
mod failure;
mod link;
mod ops;
mod options;
mod reply;
mod store;
mod tls;

/// The Lua scripts this store sends, one per write (`tollgate-redis-scripts`).
pub use tollgate_redis_scripts as scripts;

pub use cluster::RedisClusterStore;
pub use error::Error;
pub use options::RedisOptions;
pub use scripts::{
    CLAIM as CLAIM_SCRIPT, COUNT as COUNT_SCRIPT, DELETE as DELETE_SCRIPT, FINISH as FINISH_SCRIPT,
    REFUND as REFUND_SCRIPT, RELEASE as RELEASE_SCRIPT, RESERVE as RESERVE_SCRIPT,
};
pub use store::RedisStore;
