#![doc = include_str!("../README.md")]

mod address;
mod key_parts;
mod network;
mod proxy_request;
mod rules;
mod upstash_reply;
mod visitor;
mod visitor_source;
mod webhook_signature;
mod window;

pub use key_parts::{key_parts, rule_with_parts};
pub use network::network;
pub use proxy_request::proxy_request;
pub use rules::rules;
pub use upstash_reply::upstash_reply;
pub use visitor::visitor;
pub use visitor_source::{cloudflare, visitor_source};
pub use webhook_signature::webhook_signature;
pub use window::window;
