//! The `window` target: [`Window`]'s `FromStr`.

use tollgate_core::Window;

/// Parses `data` as a window; panics when a property breaks: text is
/// accepted exactly when it is decimal digits with an optional unit `s`,
/// `m`, `h` or `d` worth 1 second to 366 days, with that many seconds, and a
/// window re-parses from its display and from its seconds.
pub fn window(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let parsed = text.parse::<Window>();
    let secs = parsed.as_ref().ok().map(|w| w.secs());
    assert_eq!(secs, expected_secs(text), "{text:?}: {parsed:?}");
    let Ok(window) = parsed else {
        return;
    };
    assert_eq!(window.duration().as_secs(), window.secs());
    let shown = window.to_string();
    assert_eq!(
        shown.parse::<Window>().ok(),
        Some(window),
        "{text:?} shown as {shown:?}"
    );
    let plain = window.secs().to_string();
    assert_eq!(
        plain.parse::<Window>().ok(),
        Some(window),
        "{text:?} as {plain:?}"
    );
    assert_eq!(
        Window::from_secs(window.secs()).ok(),
        Some(window),
        "{text:?}"
    );
}

/// The seconds `text` stands for, when it is a valid window.
fn expected_secs(text: &str) -> Option<u64> {
    let (digits, scale) = match text.as_bytes().last() {
        Some(b's') => (&text[..text.len() - 1], 1),
        Some(b'm') => (&text[..text.len() - 1], 60),
        Some(b'h') => (&text[..text.len() - 1], 3_600),
        Some(b'd') => (&text[..text.len() - 1], 86_400),
        _ => (text, 1),
    };
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let significant = digits.trim_start_matches('0');
    if significant.len() > 12 {
        return None;
    }
    let secs = significant.parse::<u64>().unwrap_or(0) * scale;
    (1..=Window::MAX_SECS).contains(&secs).then_some(secs)
}
