#![doc = include_str!("../README.md")]

mod app;
pub mod grpc;
mod metrics;
mod options;
mod run;
pub mod signature;
mod work;

pub use app::{
    ASK_BODY_TIMEOUT, ASK_ENVELOPE, BAD_SIGNATURE, DELIVERY_HEADER, DELIVERY_PREFIX, MAX_ASK_BODY,
    MAX_NAME_LEN, MAX_WEBHOOK_BODY, Services, Settings, WEBHOOK_BODY_TIMEOUT, app, app_with,
    estimate_body_tokens, estimate_tokens, is_valid_name, max_ask_body, services_with,
};
pub use metrics::{metrics_router, prometheus};
pub use options::Options;
pub use run::{StartError, run};
pub use tollgate::axum::serve::{
    DEFAULT_HEADER_TIMEOUT, DEFAULT_MAX_CONNECTIONS, Limits, serve, serve_with,
};
pub use work::Work;
