//! The definition of a correct tollgate store.
//!
//! Every [`CounterStore`](tollgate_core::CounterStore) runs this suite through
//! one macro, which stamps out one `#[tokio::test]` per check, so no store can
//! skip one and the first failure hides nothing:
//!
//! ```text
//! struct MyHarness { /* storage shared by the clients */ }
//! impl tollgate_conformance::Harness for MyHarness { /* start, open */ }
//! tollgate_conformance::conformance_tests!(MyHarness);
//! ```
//!
//! The test crate needs `tokio` with the `macros` and `rt-multi-thread`
//! features. Every check uses keys no other check, run or process uses, so a
//! shared server needs no wiping.

pub mod checks;
mod harness;
mod support;

pub use harness::{Expiry, Harness};
pub use support::unique;

/// Stamps out one `#[tokio::test]` per conformance check for a [`Harness`] type.
#[macro_export]
macro_rules! conformance_tests {
    ($harness:ty) => {
        $crate::conformance_tests!(@checks $harness;
            window_math_properties,
            golden_key_vectors,
            increment_counts_each_counter_of_a_batch,
            remaining_is_max_minus_count,
            principals_never_share_a_counter,
            counts_survive_a_restart,
            racing_callers_allow_exactly_max,
            racing_reservations_allow_exactly_max,
            refused_reservation_changes_no_counter,
            every_counter_expires_within_two_windows,
            delivery_is_first_exactly_once,
            released_delivery_is_first_again,
            remaining_reads_without_spending,
            reset_clears_the_current_window,
            next_window_starts_fresh,
            limited_names_the_longest_wait,
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
