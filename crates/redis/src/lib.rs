#![doc = include_str!("../README.md")]
#![cfg_attr(docsrs, feature(doc_cfg))]

#[cfg(not(any(feature = "tcp", feature = "upstash")))]
compile_error!("tollgate-redis needs a transport: enable its `tcp` or `upstash` feature");

mod batch;
mod call;
mod failure;
mod ops;
mod record;
mod reply;
pub mod scripts;
mod transport;

#[cfg(feature = "tcp")]
mod cluster;
#[cfg(feature = "tcp")]
mod error;
#[cfg(feature = "tcp")]
mod tcp;
#[cfg(feature = "upstash")]
#[cfg_attr(docsrs, doc(cfg(feature = "upstash")))]
pub mod upstash;

#[cfg(feature = "tcp")]
pub use cluster::RedisClusterStore;
#[cfg(feature = "tcp")]
pub use error::Error;
#[cfg(feature = "tcp")]
pub use tcp::RedisStore;
#[cfg(feature = "upstash")]
pub use upstash::UpstashStore;

pub use record::RECORD_PREFIX;
