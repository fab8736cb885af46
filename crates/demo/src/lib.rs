#![doc = include_str!("../README.md")]

mod app;
mod options;
mod run;
mod work;

pub use app::{DELIVERY_HEADER, app, estimate_tokens};
pub use options::Options;
pub use run::{StartError, run, serve};
pub use work::Work;
