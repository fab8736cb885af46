//! Instruction counts of the client side of a tollgate check: the scenarios
//! that `tollgate-instructions` runs under callgrind.

pub mod scenario;

pub use scenario::{Scenario, Work};
