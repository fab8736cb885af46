#![doc = include_str!("../README.md")]

mod body;
mod check;
pub mod cloudflare;
mod error;
pub mod fields;
#[cfg(feature = "tonic")]
pub mod grpc;
mod guard;
mod key;
mod network;
pub mod problem;
mod rejection;
mod service;
mod source;
mod trust;

pub use body::{BoxError, GuardBody, HoldLeases, HoldLeasesLayer, hold_leases};
pub use check::check;
pub use error::{AddressSource, Error};
pub use guard::{Call, Guard};
pub use key::{Key, KeyPart, Unkeyed};
pub use network::Network;
pub use problem::Problem;
pub use rejection::{Rejection, UNAVAILABLE_RETRY_AFTER};
pub use service::Guarded;
pub use source::{PeerAddr, VisitorSource};
pub use trust::Trust;
