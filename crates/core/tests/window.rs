//! Window math, as properties: pure functions of the time, no store.

use proptest::prelude::*;
use proptest::test_runner::FileFailurePersistence;
use tollgate_core::Window;

proptest! {
    // A counterexample found is saved beside this file
    // (`window.proptest-regressions`): commit it, so every run replays it.
    #![proptest_config(ProptestConfig {
        cases: 2_048,
        failure_persistence: Some(Box::new(FileFailurePersistence::WithSource("proptest-regressions"))),
        ..ProptestConfig::default()
    })]

    /// The index is monotone in time, every instant of `[k·w, (k+1)·w)` maps
    /// to `k`, and `0 < retry_after ≤ w` lands on the next window.
    #[test]
    fn window_math_properties(secs in 1..=Window::MAX_SECS, t in 0..(1u64 << 42), dt in 0..(1u64 << 20)) {
        let w = Window::from_secs(secs).map_err(|e| TestCaseError::fail(e.to_string()))?;
        let k = w.index(t);
        prop_assert!(w.start(k) <= t && t < w.end(k));
        prop_assert_eq!(w.index(w.start(k)), k);
        prop_assert_eq!(w.index(w.end(k) - 1), k);
        prop_assert_eq!(w.index(w.end(k)), k + 1);
        prop_assert!(w.index(t) <= w.index(t + dt), "index must be monotone");
        let wait = w.retry_after(t);
        prop_assert!(0 < wait && wait <= secs);
        prop_assert_eq!(t + wait, w.end(k));
        prop_assert_eq!(w.index(t + wait), k + 1);
        prop_assert_eq!(w.reset(t), w.end(k));
    }
}

/// A window in a rules file is digits and at most one unit letter: a sign
/// is not part of it, though Rust's own integer parser would take a `+`.
#[test]
fn a_window_is_digits_and_a_unit_never_a_sign() {
    for bad in ["+5m", "+90", "+1d", "-0", "+"] {
        assert!(bad.parse::<Window>().is_err(), "{bad:?} should be rejected");
    }
    assert_eq!("5m".parse::<Window>().ok().map(Window::secs), Some(300));
}

/// A window of the wrong type in a rules file is refused with a message
/// saying what a window is written as.
#[test]
fn a_window_of_the_wrong_type_says_what_a_window_is() {
    let err = tollgate_core::RuleSet::from_toml("[ask]\nmax = 3\nwindow = true\n")
        .err()
        .map(|e| e.to_string())
        .unwrap_or_default();
    assert!(
        err.contains("whole seconds or a string such as \"30s\""),
        "{err}"
    );
}
