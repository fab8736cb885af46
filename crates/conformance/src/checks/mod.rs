//! The checks. Each is `pub async fn name<H: Harness>(harness: &H)` and panics
//! (fails its test) when the store breaks the contract.
//!
//! [`conformance_tests!`](crate::conformance_tests) lists every check here;
//! a test of this crate fails if a check is missing from that list.

mod concurrency;
mod counting;
mod dedup;
mod durability;
mod keys;
mod math;
mod reserve;

pub use concurrency::racing_callers_allow_exactly_max;
pub use counting::{
    every_counter_expires_within_two_windows, increment_counts_each_counter_of_a_batch,
    remaining_reads_without_spending, reset_clears_the_current_window,
};
pub use dedup::{delivery_is_first_exactly_once, released_delivery_is_first_again};
pub use durability::counts_survive_a_restart;
pub use keys::{golden_key_vectors, principals_never_share_a_counter};
pub use math::{
    limited_names_the_longest_wait, next_window_starts_fresh, remaining_is_max_minus_count,
    window_math_properties,
};
pub use reserve::{racing_reservations_allow_exactly_max, refused_reservation_changes_no_counter};

#[cfg(test)]
mod tests {
    /// Every `pub async fn` check of this module is stamped out by the macro.
    #[test]
    fn the_macro_lists_every_check() {
        let sources = [
            include_str!("concurrency.rs"),
            include_str!("counting.rs"),
            include_str!("dedup.rs"),
            include_str!("durability.rs"),
            include_str!("keys.rs"),
            include_str!("math.rs"),
            include_str!("reserve.rs"),
        ];
        let lib = include_str!("../lib.rs");
        let listed = lib
            .split("@checks $harness;")
            .nth(1)
            .and_then(|rest| rest.split(");").next())
            .unwrap_or_default();
        let mut found = 0;
        for source in sources {
            for line in source.lines() {
                let Some(rest) = line.strip_prefix("pub async fn ") else {
                    continue;
                };
                let name = rest.split('<').next().unwrap_or_default();
                found += 1;
                assert!(
                    listed.split(',').any(|l| l.trim() == name),
                    "check `{name}` is missing from conformance_tests!"
                );
            }
        }
        let listed_count = listed.split(',').filter(|l| !l.trim().is_empty()).count();
        assert_eq!(
            found, listed_count,
            "the macro lists a check that does not exist"
        );
        assert!(found >= 12);
    }
}
