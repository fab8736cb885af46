//! Test doubles around any store (the `test-util` feature): [`Hooked`],
//! which runs a test's [`Hook`] around every call, and [`Faulty`], a hook
//! that fails on demand and counts calls.

mod faulty;
mod hooked;

pub use faulty::{Fault, Faults, Faulty};
pub use hooked::{Hook, Hooked};
