//! The suite can fail: each check is run against the memory store broken in
//! one way, and must panic. A flawless wrapper (the control) passes the
//! whole suite, so each panic comes from the flaw.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod flawed;

use std::marker::PhantomData;

use flawed::{Flaw, Flawed};
use tollgate_conformance::{Expiry, Harness};
use tollgate_core::ManualClock;
use tollgate_memory::MemoryStore;

/// A type naming one [`Flaw`].
trait Pick: Send + Sync + 'static {
    const FLAW: Flaw;
}

macro_rules! picks {
    ($($flaw:ident),* $(,)?) => {$(
        struct $flaw;
        impl Pick for $flaw {
            const FLAW: Flaw = Flaw::$flaw;
        }
    )*};
}

picks!(
    CostIsOne,
    CountWraps,
    RefundWraps,
    RefundCreates,
    RefundRenewsTtl,
    TtlSixty,
    TtlDoubled,
    TtlHalved,
    GetReadsZero,
    FloorIgnored,
    PriorIgnored,
    PriorWeighedByElapsed,
    LeaseIgnoresMax,
    LeaseNeverExpires,
    RenewNever,
    EndsAnyLease,
    RefusedTakesLease,
    RefusedSpendsRate,
    ReservePartial,
    ReserveIgnoresMax,
    MergesWindows,
    ClaimHeldForOwnToken,
    ClaimOverwrites,
    LeaseNeverEnds,
    FinishOverwrites,
    ReleaseDeletesOthers,
    ReleaseNever,
    IdIgnored,
);

/// No flaw: the control.
struct Sound;
impl Pick for Sound {
    const FLAW: Flaw = Flaw::None;
}

/// A flawed store expiring by a clock the suite moves.
struct Clocked<F> {
    store: Flawed,
    clock: ManualClock,
    flaw: PhantomData<F>,
}

impl<F: Pick> Harness for Clocked<F> {
    type Store = Flawed;

    async fn start() -> Self {
        let clock = ManualClock::starting_now();
        let inner = MemoryStore::with_clock(clock.clone());
        Clocked {
            store: Flawed::new(inner, F::FLAW),
            clock,
            flaw: PhantomData,
        }
    }

    async fn open(&self) -> Flawed {
        self.store.clone()
    }

    async fn expiry(&self, key: &str) -> Expiry {
        self.store
            .inner
            .expiry(key)
            .map_or(Expiry::Absent, Expiry::In)
    }

    fn store_clock(&self) -> Option<ManualClock> {
        Some(self.clock.clone())
    }

    fn keeps_counterexamples(&self) -> bool {
        false
    }
}

/// A flawed store expiring by the system clock, which the suite cannot
/// move: the suite's path for servers keeping their own time.
struct Unclocked<F> {
    store: Flawed,
    flaw: PhantomData<F>,
}

impl<F: Pick> Harness for Unclocked<F> {
    type Store = Flawed;

    async fn start() -> Self {
        Unclocked {
            store: Flawed::new(MemoryStore::new(), F::FLAW),
            flaw: PhantomData,
        }
    }

    async fn open(&self) -> Flawed {
        self.store.clone()
    }

    async fn expiry(&self, key: &str) -> Expiry {
        self.store
            .inner
            .expiry(key)
            .map_or(Expiry::Absent, Expiry::In)
    }

    fn keeps_counterexamples(&self) -> bool {
        false
    }
}

/// `caught!(test: Harness => check)`: a test that `check` panics on `Harness`.
macro_rules! caught {
    ($($test:ident: $harness:ty => $check:ident;)*) => {$(
        #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
        async fn $test() {
            let run = tokio::spawn(async {
                let harness = <$harness as Harness>::start().await;
                tollgate_conformance::checks::$check(&harness).await;
            });
            match run.await {
                Ok(()) => panic!(
                    "{} passed on a store with flaw {:?}",
                    stringify!($check),
                    <$harness as Harness>::start().await.store.flaw
                ),
                Err(err) => assert!(err.is_panic(), "the check was cancelled, not failed: {err}"),
            }
        }
    )*};
}

caught! {
    cost_is_one_fails_mixed_costs: Clocked<CostIsOne> => racing_mixed_costs_never_exceed_max;
    cost_is_one_fails_cost_above_max: Clocked<CostIsOne> => a_cost_above_max_is_refused_and_counted_over;
    cost_is_one_fails_refunds_floor: Clocked<CostIsOne> => refunds_floor_at_zero;
    cost_is_one_fails_settle: Clocked<CostIsOne> => settle_refunds_or_counts_the_difference;
    cost_is_one_fails_bounds: Clocked<CostIsOne> => costs_near_the_bounds_never_wrap;
    count_wraps_fails_bounds: Clocked<CountWraps> => costs_near_the_bounds_never_wrap;
    refund_wraps_fails_refunds_floor: Clocked<RefundWraps> => refunds_floor_at_zero;
    refund_wraps_fails_bounds: Clocked<RefundWraps> => costs_near_the_bounds_never_wrap;
    refund_creates_fails_absent_refund: Clocked<RefundCreates> => refunding_an_absent_counter_keeps_it_absent;
    refund_creates_fails_absent_refund_unclocked: Unclocked<RefundCreates> => refunding_an_absent_counter_keeps_it_absent;
    refund_renews_ttl_fails_latest_increment: Clocked<RefundRenewsTtl> => counters_expire_ttl_after_their_latest_increment;
    refund_renews_ttl_fails_latest_increment_unclocked: Unclocked<RefundRenewsTtl> => counters_expire_ttl_after_their_latest_increment;
    ttl_sixty_fails_lifetimes: Clocked<TtlSixty> => every_counter_lives_until_its_window_ends_within_two_windows;
    ttl_sixty_fails_lifetimes_unclocked: Unclocked<TtlSixty> => every_counter_lives_until_its_window_ends_within_two_windows;
    ttl_sixty_fails_latest_increment: Clocked<TtlSixty> => counters_expire_ttl_after_their_latest_increment;
    ttl_doubled_fails_lifetimes: Clocked<TtlDoubled> => every_counter_lives_until_its_window_ends_within_two_windows;
    ttl_doubled_fails_lifetimes_unclocked: Unclocked<TtlDoubled> => every_counter_lives_until_its_window_ends_within_two_windows;
    ttl_doubled_fails_latest_increment: Clocked<TtlDoubled> => counters_expire_ttl_after_their_latest_increment;
    reserve_partial_fails_one_cost: Clocked<ReservePartial> => a_reservation_that_cannot_fit_one_cost_changes_nothing;
    reserve_partial_fails_mixed_costs: Clocked<ReservePartial> => racing_mixed_costs_never_exceed_max;
    reserve_partial_fails_refused_reservation: Clocked<ReservePartial> => refused_reservation_changes_no_counter;
    reserve_ignores_max_fails_one_cost: Clocked<ReserveIgnoresMax> => a_reservation_that_cannot_fit_one_cost_changes_nothing;
    reserve_ignores_max_fails_cost_above_max: Clocked<ReserveIgnoresMax> => a_cost_above_max_is_refused_and_counted_over;
    reserve_ignores_max_fails_bounds: Clocked<ReserveIgnoresMax> => costs_near_the_bounds_never_wrap;
    reserve_ignores_max_fails_mixed_costs: Clocked<ReserveIgnoresMax> => racing_mixed_costs_never_exceed_max;
    reserve_ignores_max_fails_racing_reservations: Clocked<ReserveIgnoresMax> => racing_reservations_allow_exactly_max;
    merges_windows_fails_rollover_refund: Clocked<MergesWindows> => a_refund_after_the_window_rolled_over_changes_nothing;
    merges_windows_fails_next_window: Clocked<MergesWindows> => next_window_starts_fresh;
    claim_held_for_own_token_fails_marks: Clocked<ClaimHeldForOwnToken> => marks_belong_to_their_token;
    claim_overwrites_fails_marks: Clocked<ClaimOverwrites> => marks_belong_to_their_token;
    claim_overwrites_fails_first_delivery: Clocked<ClaimOverwrites> => delivery_is_first_exactly_once;
    lease_never_ends_fails_mark_lease: Clocked<LeaseNeverEnds> => a_mark_lease_ends_at_its_ttl;
    lease_never_ends_fails_mark_lease_unclocked: Unclocked<LeaseNeverEnds> => a_mark_lease_ends_at_its_ttl;
    lease_never_ends_fails_crashed_delivery: Clocked<LeaseNeverEnds> => a_crashed_delivery_is_begun_again_after_its_lease;
    lease_never_ends_fails_crashed_delivery_unclocked: Unclocked<LeaseNeverEnds> => a_crashed_delivery_is_begun_again_after_its_lease;
    finish_overwrites_fails_marks: Clocked<FinishOverwrites> => marks_belong_to_their_token;
    release_deletes_others_fails_marks: Clocked<ReleaseDeletesOthers> => marks_belong_to_their_token;
    release_never_fails_dropped_delivery: Clocked<ReleaseNever> => a_dropped_delivery_is_released;
    release_never_fails_released_delivery: Clocked<ReleaseNever> => released_delivery_is_first_again;
    release_never_fails_marks: Clocked<ReleaseNever> => marks_belong_to_their_token;
    id_ignored_fails_retried_count: Clocked<IdIgnored> => a_retried_count_applies_once_and_answers_what_it_applied;
    id_ignored_fails_retried_reservation: Clocked<IdIgnored> => a_retried_reservation_answers_as_its_first_attempt;
    id_ignored_fails_retried_refund: Clocked<IdIgnored> => a_retried_refund_gives_back_once;
    id_ignored_fails_lost_reply: Clocked<IdIgnored> => a_reply_lost_after_the_write_is_recognised_on_retry;
    id_ignored_fails_lost_reply_one_call: Clocked<IdIgnored> => a_reply_lost_on_the_wire_is_one_call;
    id_ignored_fails_lost_lease: Clocked<IdIgnored> => a_lost_reply_of_a_lease_is_recognised;
    claim_held_for_own_token_fails_lost_claim: Clocked<ClaimHeldForOwnToken> => a_lost_reply_of_a_delivery_claim_is_recognised;
    refused_spends_rate_fails_lost_refusal: Clocked<RefusedSpendsRate> => a_lost_reply_of_a_refused_reservation_changes_nothing;
    get_reads_zero_fails_model: Clocked<GetReadsZero> => windows_match_the_model;
    lease_ignores_max_fails_race: Clocked<LeaseIgnoresMax> => racing_acquirers_never_hold_more_than_the_concurrency;
    lease_ignores_max_fails_release: Clocked<LeaseIgnoresMax> => releases_are_idempotent_and_by_id;
    lease_never_expires_fails_crash: Clocked<LeaseNeverExpires> => a_crashed_holders_lease_is_free_at_its_expiry;
    lease_never_expires_fails_crash_unclocked: Unclocked<LeaseNeverExpires> => a_crashed_holders_lease_is_free_at_its_expiry;
    renew_never_fails_renew: Clocked<RenewNever> => renewing_a_lease_keeps_it;
    ends_any_lease_fails_release: Clocked<EndsAnyLease> => releases_are_idempotent_and_by_id;
    refused_takes_lease_fails_vice_versa: Clocked<RefusedTakesLease> => a_refused_acquire_spends_no_rate_budget_and_vice_versa;
    refused_spends_rate_fails_vice_versa: Clocked<RefusedSpendsRate> => a_refused_acquire_spends_no_rate_budget_and_vice_versa;
    prior_ignored_fails_priors: Clocked<PriorIgnored> => a_prior_lowers_the_max_by_its_weighed_count;
    prior_ignored_fails_bounds: Clocked<PriorIgnored> => a_prior_is_weighed_exactly_at_the_bounds;
    prior_ignored_fails_retry: Clocked<PriorIgnored> => a_retry_answers_the_prior_it_read;
    prior_ignored_fails_model: Clocked<PriorIgnored> => windows_match_the_model;
    prior_ignored_fails_racing_sliding: Clocked<PriorIgnored> => racing_callers_fill_a_sliding_window_exactly;
    prior_weighed_by_elapsed_fails_priors: Clocked<PriorWeighedByElapsed> => a_prior_lowers_the_max_by_its_weighed_count;
    prior_weighed_by_elapsed_fails_bounds: Clocked<PriorWeighedByElapsed> => a_prior_is_weighed_exactly_at_the_bounds;
    prior_weighed_by_elapsed_fails_time_left: Clocked<PriorWeighedByElapsed> => a_sliding_window_weighs_its_previous_window_by_the_time_left;
    prior_ignored_fails_time_left: Clocked<PriorIgnored> => a_sliding_window_weighs_its_previous_window_by_the_time_left;
    ttl_halved_fails_model: Clocked<TtlHalved> => windows_match_the_model;
    merges_windows_fails_model: Clocked<MergesWindows> => windows_match_the_model;
    cost_is_one_fails_model: Clocked<CostIsOne> => windows_match_the_model;
    reserve_ignores_max_fails_model: Clocked<ReserveIgnoresMax> => windows_match_the_model;
    reserve_ignores_max_fails_racing_sliding: Clocked<ReserveIgnoresMax> => racing_callers_fill_a_sliding_window_exactly;
    reserve_partial_fails_model: Clocked<ReservePartial> => windows_match_the_model;
    floor_ignored_fails_floors: Clocked<FloorIgnored> => a_floor_raises_the_count_before_the_cost;
    floor_ignored_fails_model: Clocked<FloorIgnored> => windows_match_the_model;
    floor_ignored_fails_racing_gcra: Clocked<FloorIgnored> => racing_callers_take_exactly_a_gcra_burst;
    reserve_ignores_max_fails_racing_gcra: Clocked<ReserveIgnoresMax> => racing_callers_take_exactly_a_gcra_burst;
    ttl_halved_fails_floored_lifetime: Clocked<TtlHalved> => a_floored_counter_lives_its_ttl_from_every_write;
    ttl_halved_fails_shaped_lifetimes: Clocked<TtlHalved> => sliding_and_gcra_counters_live_as_long_as_they_count;
    ttl_sixty_fails_shaped_lifetimes: Clocked<TtlSixty> => sliding_and_gcra_counters_live_as_long_as_they_count;
}

/// Renewing a counter's lifetime on every increment is allowed.
struct RenewsTtlOnIncrement;
impl Pick for RenewsTtlOnIncrement {
    const FLAW: Flaw = Flaw::RenewsTtlOnIncrement;
}

/// The controls: the wrapper without a flaw passes the whole suite, on a
/// moved clock and on the system clock, and so does a store renewing
/// lifetimes on every increment (the contract allows both).
mod sound {
    use super::*;

    tollgate_conformance::conformance_tests!(Clocked<Sound>);

    tollgate_conformance::lease_conformance_tests!(Clocked<Sound>);

    mod unclocked {
        use super::*;

        tollgate_conformance::conformance_tests!(Unclocked<Sound>);

        tollgate_conformance::lease_conformance_tests!(Unclocked<Sound>);
    }

    mod renewing {
        use super::*;

        tollgate_conformance::conformance_tests!(Clocked<RenewsTtlOnIncrement>);

        tollgate_conformance::lease_conformance_tests!(Clocked<RenewsTtlOnIncrement>);
    }

    mod renewing_unclocked {
        use super::*;

        tollgate_conformance::conformance_tests!(Unclocked<RenewsTtlOnIncrement>);

        tollgate_conformance::lease_conformance_tests!(Unclocked<RenewsTtlOnIncrement>);
    }
}
