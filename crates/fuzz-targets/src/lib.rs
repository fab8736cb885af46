#![doc = include_str!("../README.md")]

mod address;
mod key_parts;
mod network;
mod rules;
mod visitor;
mod visitor_source;
mod window;

pub use key_parts::{key_parts, rule_with_parts};
pub use network::network;
pub use rules::rules;
pub use visitor::visitor;
pub use visitor_source::{cloudflare, visitor_source};
pub use window::window;
