//! The checks. Each is `pub async fn name<H: Harness>(harness: &H)` and panics
//! (fails its test) when the store breaks the contract. Every check starts
//! its clock at [`FIXED_NOW`](crate::FIXED_NOW) and uses keys of its own.
//!
//! [`conformance_tests!`](crate::conformance_tests) lists every check here;
//! a test of this crate fails if a check is missing from that list.

mod cache;
mod concurrency;
mod costs;
mod counting;
mod dedup;
mod durability;
mod floors;
mod keys;
mod leases;
mod lifetimes;
mod lost;
mod marks;
mod oracle;
mod priors;
mod refunds;
mod reserve;
mod retries;
mod windows;

pub use cache::cached_and_uncached_limiters_agree;
pub use concurrency::racing_callers_allow_exactly_max;
pub use costs::{
    a_cost_above_max_is_refused_and_counted_over,
    a_reservation_that_cannot_fit_one_cost_changes_nothing, costs_near_the_bounds_never_wrap,
    racing_mixed_costs_never_exceed_max,
};
pub use counting::{
    increment_counts_each_counter_of_a_batch, remaining_reads_without_spending,
    reset_clears_the_current_window,
};
pub use dedup::{
    a_crashed_delivery_is_begun_again_after_its_lease, a_dropped_delivery_is_released,
    delivery_is_first_exactly_once, released_delivery_is_first_again,
};
pub use durability::counts_survive_a_restart;
pub use floors::{
    a_floor_raises_the_count_before_the_cost, a_floored_counter_lives_its_ttl_from_every_write,
};
pub use keys::{golden_key_vectors, principals_never_share_a_counter};
pub use leases::{
    a_crashed_holders_lease_is_free_at_its_expiry,
    a_refused_acquire_spends_no_rate_budget_and_vice_versa,
    acquires_racing_the_end_of_a_sets_last_lease_never_fail,
    racing_acquirers_never_hold_more_than_the_concurrency, releases_are_idempotent_and_by_id,
    renewing_a_lease_keeps_it,
};
pub use lifetimes::{
    a_mark_lease_ends_at_its_ttl, counters_expire_ttl_after_their_latest_increment,
    every_counter_lives_until_its_window_ends_within_two_windows,
    sliding_and_gcra_counters_live_as_long_as_they_count,
};
pub use lost::{
    a_lost_reply_of_a_delivery_claim_is_recognised, a_lost_reply_of_a_lease_is_recognised,
    a_lost_reply_of_a_refused_reservation_changes_nothing, a_reply_lost_on_the_wire_is_one_call,
};
pub use marks::marks_belong_to_their_token;
pub use oracle::{
    racing_callers_fill_a_sliding_window_exactly, racing_callers_take_exactly_a_gcra_burst,
    windows_match_the_model,
};
pub use priors::{
    a_prior_is_weighed_exactly_at_the_bounds, a_prior_lowers_the_max_by_its_weighed_count,
    a_retry_answers_the_prior_it_read,
    a_sliding_window_weighs_its_previous_window_by_the_time_left,
};
pub use refunds::{
    a_refund_after_the_window_rolled_over_changes_nothing,
    refunding_an_absent_counter_keeps_it_absent, refunds_floor_at_zero,
    settle_refunds_or_counts_the_difference,
};
pub use reserve::{racing_reservations_allow_exactly_max, refused_reservation_changes_no_counter};
pub use retries::{
    a_reply_lost_after_the_write_is_recognised_on_retry,
    a_retried_count_applies_once_and_answers_what_it_applied, a_retried_refund_gives_back_once,
    a_retried_reservation_answers_as_its_first_attempt,
};
pub use windows::{
    limited_names_the_longest_wait, next_window_starts_fresh, remaining_is_max_minus_count,
};

#[cfg(test)]
mod tests {
    /// Every `pub async fn` check of this module is stamped out by the
    /// macro, and the macro stamps out nothing else.
    #[test]
    fn the_macro_lists_every_check() {
        let sources = [
            include_str!("cache.rs"),
            include_str!("concurrency.rs"),
            include_str!("costs.rs"),
            include_str!("counting.rs"),
            include_str!("dedup.rs"),
            include_str!("durability.rs"),
            include_str!("floors.rs"),
            include_str!("keys.rs"),
            include_str!("leases.rs"),
            include_str!("lifetimes.rs"),
            include_str!("lost.rs"),
            include_str!("marks.rs"),
            include_str!("oracle.rs"),
            include_str!("priors.rs"),
            include_str!("refunds.rs"),
            include_str!("reserve.rs"),
            include_str!("retries.rs"),
            include_str!("windows.rs"),
        ];
        let lib = include_str!("../lib.rs");
        // Both macros' lists: the store checks and the lease checks.
        let listed: String = lib
            .split("@checks $harness;")
            .skip(1)
            .filter_map(|rest| rest.split(");").next())
            .filter(|list| !list.contains('$'))
            .collect::<Vec<_>>()
            .join(",");
        let listed = listed.as_str();
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
        assert!(found >= 28);
    }
}
