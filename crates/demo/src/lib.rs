#![doc = include_str!("../README.md")]

mod app;
mod metrics;
mod options;
mod run;
mod server;
mod work;

pub use app::{DELIVERY_HEADER, DELIVERY_PREFIX, app, estimate_tokens};
pub use metrics::{metrics_router, prometheus};
pub use options::Options;
pub use run::{StartError, run};
pub use server::{DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, Limits, serve, serve_with};
pub use work::Work;
