//! A server's error reply, as the core's [`StoreError`]: one reading for
//! every transport.
//!
//! | the error reply's code | [`StoreError`] | transient |
//! |---|---|---|
//! | `LOADING`, `BUSY`, `TRYAGAIN`, `READONLY`, `MASTERDOWN`, `CLUSTERDOWN`, `NOREPLICAS`, and a `MOVED` or `ASK` left after the one redirect a cluster store follows | `Busy` | yes |
//! | anything else (`WRONGTYPE`, `NOPERM`, `OOM`, `NOSCRIPT` twice, ...) | `Backend` | no |
//!
//! A write script's `DEADLINE` reply is not an error reply: it is read in
//! [`reply`](crate::reply) as [`StoreError::Timeout`]. Failures to reach a
//! server, or to read what it sent, are each transport's (`tcp::failure`,
//! `upstash::failure`).

use tollgate_core::StoreError;

/// Error reply codes that a later attempt may get past. `MOVED` and `ASK`
/// reach a caller only from Redis Cluster, when a slot moved again while
/// its redirect was followed: the client refreshes its slot map, so the
/// next attempt finds the slot. `NOREPLICAS`: a primary with
/// `min-replicas-to-write` refuses writes while too few replicas are in sync.
pub(crate) const BUSY_CODES: [&str; 9] = [
    "LOADING",
    "BUSY",
    "TRYAGAIN",
    "READONLY",
    "MASTERDOWN",
    "CLUSTERDOWN",
    "MOVED",
    "ASK",
    "NOREPLICAS",
];

/// The longest piece of a server's error text kept in a message.
const MAX_TEXT: usize = 200;

/// A server's error reply, kept (clipped) as the source of a [`StoreError`].
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct ServerError(String);

/// Whether an error reply says the server does not have the script.
pub(crate) fn is_noscript(text: &str) -> bool {
    text.starts_with("NOSCRIPT")
}

/// Whether a call failed with `TRYAGAIN`: Redis Cluster refused it
/// unapplied, because some of its keys are on a node its slot is
/// migrating to and others are not.
#[cfg(feature = "tcp")]
pub(crate) fn is_try_again(err: &StoreError) -> bool {
    matches!(err, StoreError::Busy(source) if source.to_string().starts_with("TRYAGAIN"))
}

/// Whether an error reply's code is one a later attempt may get past.
pub(crate) fn is_busy(code: &str) -> bool {
    BUSY_CODES.contains(&code)
}

/// An error reply (`CODE message`).
pub(crate) fn from_server(text: &str) -> StoreError {
    let code = text.split_whitespace().next().unwrap_or("");
    let error = Box::new(ServerError(clipped(text)));
    if is_busy(code) {
        StoreError::Busy(error)
    } else {
        StoreError::Backend(error)
    }
}

/// `text` cut to [`MAX_TEXT`] characters, marked when cut.
pub(crate) fn clipped(text: &str) -> String {
    match text.char_indices().nth(MAX_TEXT) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn passing_refusals_are_busy_and_others_permanent() {
        for code in BUSY_CODES {
            let err = from_server(&format!("{code} try again later"));
            assert_eq!(err.kind(), "busy", "{code}");
        }
        for text in [
            "WRONGTYPE no",
            "ERR counter is not an integer",
            "NOPERM x",
            "OOM full",
            "NOSCRIPT no script",
            "",
        ] {
            let err = from_server(text);
            assert_eq!(err.kind(), "backend", "{text}");
            assert!(!err.is_transient());
        }
        assert!(is_noscript("NOSCRIPT No matching script. Please use EVAL."));
        assert!(!is_noscript("ERR NOSCRIPT"));
    }

    /// Only Cluster's `TRYAGAIN` refusal (a call refused unapplied) lets a
    /// call be sent again without its record: any other failure, which may
    /// have been applied, is not resent (it would count twice).
    #[cfg(feature = "tcp")]
    #[test]
    fn only_a_try_again_refusal_is_taken_for_one() {
        let try_again = "TRYAGAIN Multiple keys request during rehashing of slot";
        assert!(is_try_again(&from_server(try_again)));
        for err in [
            from_server("BUSY Redis is busy running a script"),
            from_server("LOADING Redis is loading the dataset in memory"),
            StoreError::Connection(try_again.into()),
            StoreError::Timeout(std::time::Duration::from_millis(5)),
        ] {
            assert!(!is_try_again(&err), "{err:?}");
        }
    }

    #[test]
    fn an_error_text_is_kept_up_to_200_characters() {
        let source = |err: &StoreError| {
            std::error::Error::source(err)
                .map(ToString::to_string)
                .unwrap_or_default()
        };
        let short = "ERR é".repeat(40);
        assert_eq!(
            source(&from_server(&short)),
            short,
            "200 characters kept whole"
        );
        let long = format!("{short}and more");
        assert_eq!(source(&from_server(&long)), format!("{short}…"));
    }
}
