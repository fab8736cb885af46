//! The definition of a correct tollgate store.
//!
//! Every [`CounterStore`](tollgate_core::CounterStore) runs this suite through
//! one macro, which stamps out one `#[tokio::test]` per check, so no store can
//! skip one and the first failure hides nothing:
//!
//! ```text
//! struct MyHarness { /* storage shared by the clients */ }
//! impl tollgate_conformance::Harness for MyHarness { /* start, open, expiry */ }
//! tollgate_conformance::conformance_tests!(MyHarness);
//! ```
//!
//! The test crate needs `tokio` with the `macros` and `rt-multi-thread`
//! features. Every check uses keys no other check, run or process uses, so a
//! shared server needs no wiping, and starts its clock at [`FIXED_NOW`]
//! (2026-06-15T12:00:30Z), so no check depends on the time of day it runs
//! at. The suite holds store checks only: pure window math is tested in
//! `tollgate-core`, failure policies with the memory store.
//!
//! Every check is shown to fail: `tests/broken` runs each against the
//! memory store broken in one way (costs ignored, refunds below zero, a
//! fixed 60 s lifetime, partial reservations, marks taken from their
//! owner, ...) and asserts that it panics.

pub mod checks;
mod harness;
mod support;

pub use harness::{Expiry, Harness};
pub use support::{FIXED_NOW, unique};

/// Stamps out one `#[tokio::test]` per lease check (the
/// [`CounterStore`](tollgate_core::CounterStore) lease calls and lease
/// counters) for a [`Harness`] type, for a store that keeps leases.
#[macro_export]
macro_rules! lease_conformance_tests {
    ($harness:ty) => {
        $crate::conformance_tests!(@checks $harness;
            racing_acquirers_never_hold_more_than_the_concurrency,
            a_crashed_holders_lease_is_free_at_its_expiry,
            renewing_a_lease_keeps_it,
            releases_are_idempotent_and_by_id,
            a_refused_acquire_spends_no_rate_budget_and_vice_versa,
            acquires_racing_the_end_of_a_sets_last_lease_never_fail,
            a_lost_reply_of_a_lease_is_recognised,
        );
    };
}

/// Stamps out one `#[tokio::test]` per conformance check for a [`Harness`] type.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:ty) => {
        $crate::conformance_tests!(@checks $harness;
            golden_key_vectors,
            increment_counts_each_counter_of_a_batch,
            remaining_is_max_minus_count,
            principals_never_share_a_counter,
            counts_survive_a_restart,
            racing_callers_allow_exactly_max,
            racing_reservations_allow_exactly_max,
            racing_mixed_costs_never_exceed_max,
            refused_reservation_changes_no_counter,
            a_reservation_that_cannot_fit_one_cost_changes_nothing,
            a_cost_above_max_is_refused_and_counted_over,
            costs_near_the_bounds_never_wrap,
            refunds_floor_at_zero,
            refunding_an_absent_counter_keeps_it_absent,
            a_refund_after_the_window_rolled_over_changes_nothing,
            settle_refunds_or_counts_the_difference,
            every_counter_lives_until_its_window_ends_within_two_windows,
            counters_expire_ttl_after_their_latest_increment,
            sliding_and_gcra_counters_live_as_long_as_they_count,
            a_mark_lease_ends_at_its_ttl,
            marks_belong_to_their_token,
            delivery_is_first_exactly_once,
            released_delivery_is_first_again,
            a_dropped_delivery_is_released,
            a_crashed_delivery_is_begun_again_after_its_lease,
            remaining_reads_without_spending,
            reset_clears_the_current_window,
            next_window_starts_fresh,
            limited_names_the_longest_wait,
            cached_and_uncached_limiters_agree,
            a_retried_count_applies_once_and_answers_what_it_applied,
            a_retried_reservation_answers_as_its_first_attempt,
            a_retried_refund_gives_back_once,
            a_reply_lost_after_the_write_is_recognised_on_retry,
            a_reply_lost_on_the_wire_is_one_call,
            a_lost_reply_of_a_refused_reservation_changes_nothing,
            a_lost_reply_of_a_delivery_claim_is_recognised,
            windows_match_the_model,
            racing_callers_fill_a_sliding_window_exactly,
            racing_callers_take_exactly_a_gcra_burst,
            a_floor_raises_the_count_before_the_cost,
            a_floored_counter_lives_its_ttl_from_every_write,
            a_prior_lowers_the_max_by_its_weighed_count,
            a_prior_is_weighed_exactly_at_the_bounds,
            a_retry_answers_the_prior_it_read,
            a_sliding_window_weighs_its_previous_window_by_the_time_left,
        );
    };
    (@checks $harness:ty; $($check:ident),* $(,)?) => {
        $(
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $check() {
                let harness = <$harness as $crate::Harness>::start().await;
                $crate::checks::$check(&harness).await;
            }
        )*
    };
}
