//! [`Failure`]: why a command failed, as the one line `tollgate` prints.

use std::error::Error;
use std::fmt;

/// A failed command: a message with its cause chain already joined by `: `.
#[derive(Debug)]
pub(crate) struct Failure(String);

impl Failure {
    /// A failure saying `message`.
    pub(crate) fn new(message: impl Into<String>) -> Failure {
        Failure(message.into())
    }

    /// A failure saying `context`, then `err` and each of its causes.
    pub(crate) fn with(context: impl fmt::Display, err: &(dyn Error + 'static)) -> Failure {
        Failure(format!("{context}: {}", chain(err)))
    }
}

impl fmt::Display for Failure {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// `err` and each of its sources, joined by `: `, on one line (a cause that
/// repeats its parent's text is left out).
pub(crate) fn chain(err: &(dyn Error + 'static)) -> String {
    let mut text = err.to_string();
    let mut last = text.clone();
    let mut source = err.source();
    while let Some(cause) = source {
        let next = cause.to_string();
        if !last.ends_with(&next) {
            text.push_str(": ");
            text.push_str(&next);
        }
        last = next;
        source = cause.source();
    }
    one_line(&text)
}

/// `text` with each line break (and the indentation after it) made `; `.
pub(crate) fn one_line(text: &str) -> String {
    let lines: Vec<&str> = text
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty())
        .collect();
    lines.join("; ")
}

impl From<tollgate::Error> for Failure {
    fn from(err: tollgate::Error) -> Failure {
        Failure(chain(&err))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_joined_on_one_line() {
        let err = tollgate::Error::Unavailable(tollgate::StoreError::Connection(
            "refused\n  twice".into(),
        ));
        assert_eq!(
            chain(&err),
            "rate limit store unavailable: store connection failed: refused; twice"
        );
    }
}
