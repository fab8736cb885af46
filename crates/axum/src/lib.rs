#![doc = include_str!("../README.md")]

mod check;
pub mod cloudflare;
mod error;
mod extract;
pub mod fields;
#[cfg(feature = "tonic")]
pub mod grpc;
mod guard;
mod held;
mod network;
pub mod problem;
mod rejection;
pub mod serve;
mod service;
mod source;
mod trust;

pub use check::check;
pub use error::{AddressSource, Error};
pub use extract::ClientVisitor;
pub use guard::{Call, Guard, KeyPart};
pub use held::hold_leases;
pub use network::Network;
pub use problem::Problem;
pub use rejection::{Rejection, UNAVAILABLE_RETRY_AFTER};
pub use service::Guarded;
pub use source::VisitorSource;
pub use trust::Trust;
