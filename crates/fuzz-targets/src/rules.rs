//! The `rules` target: [`RuleSet::from_toml`], a rules file.

use tollgate_core::{MAX_MAX, MAX_NAME_LEN, Rule, RuleSet, Window};

/// Parses `data` as a rules file; panics when an accepted set breaks a
/// property: every rule has a valid name, `1 <= max <= MAX_MAX` and a window
/// of 1 second to 366 days, is found by its name, and could be built by
/// [`Rule::new`]; the set counts its rules right.
pub fn rules(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let Ok(set) = RuleSet::from_toml(text) else {
        return;
    };
    let mut count = 0;
    for rule in set.iter() {
        count += 1;
        let (name, max, window) = (rule.name(), rule.max(), rule.window());
        assert!(
            (1..=MAX_MAX).contains(&max),
            "{text:?}: rule {name} has max {max}"
        );
        let secs = window.secs();
        assert!(
            (1..=Window::MAX_SECS).contains(&secs),
            "{text:?}: rule {name} has a window of {secs} s"
        );
        assert!(
            (1..=MAX_NAME_LEN).contains(&name.len())
                && name
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.')),
            "{text:?}: rule name {name:?}"
        );
        assert_eq!(set.get(name).ok(), Some(rule), "{text:?}: {name} not found");
        assert_eq!(
            Rule::new(name, max, window).ok().as_ref(),
            Some(rule),
            "{text:?}"
        );
        assert_eq!(window.to_string().parse::<Window>().ok(), Some(window));
    }
    assert_eq!(count, set.len(), "{text:?}: len");
    assert_eq!(set.is_empty(), count == 0, "{text:?}: is_empty");
}
