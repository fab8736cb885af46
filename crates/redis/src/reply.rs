//! A server's reply, as every transport hands it over ([`Reply`]), and what
//! it means for each operation: the one place that reads replies, without
//! trusting their shape.

use std::time::Duration;

use tollgate_core::{Claim, Counter, Leases, MAX_COUNT, Reservation, StoreError};

use crate::failure;

/// A reply in the terms every transport shares. RESP (TCP, Cluster) and
/// REST's JSON both become one of these.
#[derive(Clone, Debug, PartialEq)]
pub(crate) enum Reply {
    /// Nil (`null` over REST).
    Nil,
    /// An integer.
    Int(i64),
    /// A number that is not an integer (a RESP3 double, a JSON float or a
    /// JSON integer too large for `i64`).
    Double(f64),
    /// A string: a bulk string, a status reply (`OK`) or, over REST, which
    /// renders both as JSON strings, either.
    Text(Vec<u8>),
    /// An array.
    Array(Vec<Reply>),
    /// An error reply: `CODE message`.
    Error(String),
    /// Anything else (a map, a boolean, ...), named by its type.
    Other(&'static str),
}

impl Reply {
    /// The type of a reply, for messages (never its content, which may be a key).
    fn kind(&self) -> &'static str {
        match self {
            Reply::Nil => "nil",
            Reply::Int(_) => "an integer",
            Reply::Double(_) => "a number",
            Reply::Text(_) => "a string",
            Reply::Array(_) => "an array",
            Reply::Error(_) => "an error",
            Reply::Other(kind) => kind,
        }
    }
}

fn invalid(what: &str, reply: &Reply) -> StoreError {
    StoreError::InvalidReply(format!("expected {what}, got {}", reply.kind()))
}

/// What a write script answered: its value, or a timeout when it said that
/// the call's deadline had passed (so it applied nothing: the status reply
/// `DEADLINE`, a string; no script returns a string otherwise), or the
/// error reply it is.
pub(crate) fn script_result(reply: Reply, took: Duration) -> Result<Reply, StoreError> {
    match reply {
        Reply::Text(text) if text == b"DEADLINE" => Err(StoreError::Timeout(took)),
        Reply::Error(text) => Err(failure::from_server(&text)),
        reply => Ok(reply),
    }
}

/// A count: an integer in `0..=MAX_COUNT`, or the error reply it is.
fn count(reply: &Reply) -> Result<u64, StoreError> {
    match reply {
        Reply::Int(n) if *n < 0 => Err(StoreError::InvalidReply("a negative count".into())),
        Reply::Int(n) => match u64::try_from(*n) {
            Ok(count) if count <= MAX_COUNT => Ok(count),
            _ => Err(StoreError::InvalidReply("a count over 2^53".into())),
        },
        Reply::Double(_) => Err(StoreError::InvalidReply(
            "a count that is not an integer".into(),
        )),
        Reply::Error(text) => Err(failure::from_server(text)),
        other => Err(invalid("an integer", other)),
    }
}

/// A stored count read by `MGET`: nil is 0, else the digits of a count.
fn stored(reply: &Reply) -> Result<u64, StoreError> {
    match reply {
        Reply::Nil => Ok(0),
        Reply::Text(text) => {
            let digits = !text.is_empty() && text.iter().all(u8::is_ascii_digit);
            let count = std::str::from_utf8(text).ok().and_then(|t| t.parse().ok());
            match count {
                Some(count) if digits && count <= MAX_COUNT => Ok(count),
                _ => Err(StoreError::InvalidReply(
                    "a stored count is not a number up to 2^53".into(),
                )),
            }
        }
        Reply::Int(_) | Reply::Double(_) | Reply::Error(_) => count(reply),
        other => Err(invalid("a count or nil", other)),
    }
}

fn array(reply: Reply, len: usize, what: &str) -> Result<Vec<Reply>, StoreError> {
    match reply {
        Reply::Array(items) if items.len() == len => Ok(items),
        Reply::Array(items) => Err(StoreError::InvalidReply(format!(
            "expected {len} {what}, got {}",
            items.len()
        ))),
        Reply::Error(text) => Err(failure::from_server(&text)),
        other => Err(invalid("an array", &other)),
    }
}

/// The reply of [`CHECK`](crate::scripts::CHECK) to a batch of `n` calls:
/// one reply per call, each still to be read by
/// [`script_result`], then [`counts`] or [`reservation`].
pub(crate) fn calls(reply: Reply, n: usize) -> Result<Vec<Reply>, StoreError> {
    array(reply, n, "replies")
}

/// How many numbers a count or a reservation of `counters` answers: one
/// per counter, then one per counter with a [`prior`](Counter::prior) (its
/// count), then two per [`lease`](Counter::lease) counter, in counter
/// order. A refund or give-back answers one per counter.
pub(crate) fn answered<'a>(counters: impl IntoIterator<Item = &'a Counter>) -> usize {
    counters.into_iter().fold(0, |n, c| {
        n + 1 + usize::from(c.prior.is_some()) + 2 * usize::from(c.lease)
    })
}

/// The reply to one count, refund or give-back call: `n` counts (a
/// count's: one per counter, then its priors', as [`answered`] says; a
/// refund's or give-back's: one per counter).
pub(crate) fn counts(reply: Reply, n: usize) -> Result<Vec<u64>, StoreError> {
    array(reply, n, "counts")?.iter().map(count).collect()
}

/// The reply to one reservation: `[applied, count, ...]`, with `n` counts
/// (one per counter, then its priors', as [`answered`] says).
pub(crate) fn reservation(reply: Reply, n: usize) -> Result<Reservation, StoreError> {
    let items = array(reply, n + 1, "script results")?;
    let applied = flag(&items[0])?;
    let counts = items[1..].iter().map(count).collect::<Result<_, _>>()?;
    Ok(Reservation { applied, counts })
}

/// The reply to `MGET`.
pub(crate) fn stored_counts(reply: Reply, n: usize) -> Result<Vec<u64>, StoreError> {
    array(reply, n, "values")?.iter().map(stored).collect()
}

/// The reply to `MGET` of priors read before a call (Redis Cluster, for
/// priors in another hash slot than their counters): nil is 0, else a
/// count as the script reads one (`0`, or up to 16 digits without a
/// leading zero, at most 2^53). Any other text is the error the script
/// answers for a counter or prior that holds it (the server's error: the
/// call is refused as a script refuses it), not an invalid reply. (`MGET`
/// answers nil, read as 0, for a key of another type than a string.)
#[cfg(feature = "tcp")]
pub(crate) fn prior_counts(reply: Reply, n: usize) -> Result<Vec<u64>, StoreError> {
    array(reply, n, "values")?
        .iter()
        .map(|value| match value {
            Reply::Text(text) if text.as_slice() == b"0" => Ok(0),
            Reply::Text(text) => {
                let digits = text.len() <= 16
                    && text.first().is_some_and(|&b| b != b'0')
                    && text.iter().all(u8::is_ascii_digit);
                let count = std::str::from_utf8(text).ok().and_then(|t| t.parse().ok());
                match count {
                    Some(count) if digits && count <= MAX_COUNT => Ok(count),
                    Some(_) if digits => Err(failure::from_server("ERR counter is over 2^53")),
                    _ => Err(failure::from_server("ERR counter is not an integer")),
                }
            }
            value => stored(value),
        })
        .collect()
}

/// A script's 0 or 1.
pub(crate) fn flag(reply: &Reply) -> Result<bool, StoreError> {
    match count(reply)? {
        1 => Ok(true),
        0 => Ok(false),
        _ => Err(StoreError::InvalidReply("expected 0 or 1".into())),
    }
}

/// The reply of the claim script: 1 acquired, 0 held.
pub(crate) fn claim(reply: &Reply) -> Result<Claim, StoreError> {
    Ok(if flag(reply)? {
        Claim::Acquired
    } else {
        Claim::Held
    })
}

/// The reply of the leases script: `{held, ms until the first ends}`.
pub(crate) fn leases(reply: &Reply) -> Result<Leases, StoreError> {
    let items = array(reply.clone(), 2, "numbers")?;
    Ok(Leases {
        held: count(&items[0])?,
        first_ends: Duration::from_millis(count(&items[1])?),
    })
}

/// The reply of the delete script (`DEL`'s): whether the key existed.
pub(crate) fn deleted(reply: &Reply) -> Result<bool, StoreError> {
    count(reply).map(|n| n > 0)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    fn int(n: i64) -> Reply {
        Reply::Int(n)
    }

    fn text(s: &str) -> Reply {
        Reply::Text(s.as_bytes().to_vec())
    }

    fn array(items: &[Reply]) -> Reply {
        Reply::Array(items.to_vec())
    }

    #[test]
    fn an_unexpected_reply_is_named_by_its_type_never_by_its_content() {
        let secret = "limit:ask:203.0.113.9:20421";
        let cases = [
            (Reply::Nil, "nil"),
            (int(7), "an integer"),
            (Reply::Double(1.5), "a number"),
            (text(secret), "a string"),
            (array(&[text(secret)]), "an array"),
            (Reply::Error(format!("ERR {secret}")), "an error"),
            (Reply::Other("a map"), "a map"),
        ];
        for (reply, named) in cases {
            let message = invalid("a count", &reply).to_string();
            assert!(
                message.ends_with(&format!("expected a count, got {named}")),
                "{message}"
            );
            assert!(!message.contains(secret), "{message}");
        }
    }

    #[test]
    fn a_bad_count_says_what_is_wrong_with_it_never_what_it_holds() {
        let message = |reply: Reply| count(&reply).unwrap_err().to_string();
        assert!(message(int(-4)).contains("a negative count"));
        assert!(message(Reply::Double(1.5)).contains("not an integer"));
        assert!(message(int(MAX_COUNT as i64 + 1)).contains("over 2^53"));
        let secret = "limit:ask:203.0.113.9:20421";
        let text = message(text(secret));
        assert!(
            text.ends_with("expected an integer, got a string"),
            "{text}"
        );
    }

    #[test]
    fn counts_are_exact_integers_up_to_2_pow_53() {
        let max = MAX_COUNT as i64;
        assert_eq!(
            counts(array(&[int(0), int(3), int(max)]), 3).unwrap(),
            vec![0, 3, MAX_COUNT]
        );
        for (reply, n) in [
            (array(&[int(3)]), 2),
            (array(&[int(3), int(1), int(1)]), 2),
            (array(&[text("3")]), 1),
            (array(&[int(-4)]), 1),
            (array(&[Reply::Double(1.5)]), 1),
            (array(&[int(max + 1)]), 1),
            (array(&[Reply::Nil]), 1),
            (array(&[array(&[int(1)])]), 1),
            (int(3), 1),
            (text("DEADLINE"), 1),
            (Reply::Nil, 1),
        ] {
            assert_eq!(
                counts(reply.clone(), n).unwrap_err().kind(),
                "invalid-reply",
                "{reply:?}"
            );
        }
        let loading = array(&[Reply::Error("LOADING Redis is loading".into())]);
        assert_eq!(counts(loading, 1).unwrap_err().kind(), "busy");
        let wrong = Reply::Error("WRONGTYPE Operation against a key".into());
        let err = counts(wrong, 1).unwrap_err();
        assert_eq!(err.kind(), "backend");
        assert!(!err.is_transient());
    }

    #[test]
    fn reads_reservations() {
        assert_eq!(
            reservation(array(&[int(1), int(2), int(5)]), 2).unwrap(),
            Reservation {
                applied: true,
                counts: vec![2, 5]
            }
        );
        assert_eq!(
            reservation(array(&[int(0), int(2)]), 1).unwrap(),
            Reservation {
                applied: false,
                counts: vec![2]
            }
        );
        for reply in [
            array(&[int(7), int(2)]),
            array(&[int(1)]),
            array(&[int(1), int(2), int(3)]),
            int(1),
            array(&[Reply::Other("a boolean"), int(2)]),
        ] {
            assert_eq!(
                reservation(reply.clone(), 1).unwrap_err().kind(),
                "invalid-reply",
                "{reply:?}"
            );
        }
    }

    #[test]
    fn a_count_or_reservation_answers_one_count_more_per_prior() {
        let counter = |prior: bool| Counter {
            key: "k".into(),
            ttl: Duration::from_secs(1),
            cost: 1,
            max: 5,
            floor: 0,
            prior: prior.then(|| tollgate_core::Prior {
                key: "p".into(),
                part: 1,
                whole: 2,
            }),
            lease: false,
        };
        assert_eq!(answered(&[]), 0);
        assert_eq!(answered(&[counter(false), counter(false)]), 2);
        assert_eq!(answered(&[counter(true), counter(false), counter(true)]), 5);
    }

    #[cfg(feature = "tcp")]
    #[test]
    fn priors_read_first_are_counts_as_the_script_reads_them() {
        let values = [Reply::Nil, text("0"), text("12"), text("9007199254740992")];
        assert_eq!(
            prior_counts(array(&values), 4).unwrap(),
            vec![0, 0, 12, MAX_COUNT]
        );
        for (value, message) in [
            ("twelve", "not an integer"),
            ("012", "not an integer"),
            ("", "not an integer"),
            ("-1", "not an integer"),
            ("12345678901234567", "not an integer"),
            ("9007199254740993", "over 2^53"),
        ] {
            let err = prior_counts(array(&[text(value)]), 1).unwrap_err();
            assert_eq!(err.kind(), "backend", "{value:?}");
            let source = std::error::Error::source(&err).map(ToString::to_string);
            assert!(
                source.is_some_and(|text| text.contains(message)),
                "{value:?}: {err:?}"
            );
        }
        let short = prior_counts(array(&[Reply::Nil]), 2).unwrap_err();
        assert_eq!(short.kind(), "invalid-reply");
    }

    #[test]
    fn reads_stored_counts_and_flags() {
        assert_eq!(
            stored_counts(array(&[Reply::Nil, text("12"), text("0")]), 3).unwrap(),
            vec![0, 12, 0]
        );
        assert_eq!(
            stored_counts(array(&[text("9007199254740992")]), 1).unwrap(),
            vec![MAX_COUNT]
        );
        for value in ["twelve", "+12", "-1", "", "9007199254740993", "1.0", " 3"] {
            assert_eq!(
                stored_counts(array(&[text(value)]), 1).unwrap_err().kind(),
                "invalid-reply",
                "{value:?}"
            );
        }
        let binary = array(&[Reply::Text(vec![0xff, b'1'])]);
        assert_eq!(
            stored_counts(binary, 1).unwrap_err().kind(),
            "invalid-reply"
        );
        assert_eq!(claim(&int(1)).unwrap(), Claim::Acquired);
        assert_eq!(claim(&int(0)).unwrap(), Claim::Held);
        assert!(claim(&int(2)).is_err());
        assert!(claim(&text("OK")).is_err());
        assert!(flag(&int(1)).unwrap());
        assert!(!flag(&int(0)).unwrap());
        assert!(deleted(&int(1)).unwrap());
        assert!(!deleted(&int(0)).unwrap());
        assert!(deleted(&text("1")).is_err());
    }

    #[test]
    fn a_deadline_reply_is_a_timeout_and_told_apart_from_every_result() {
        let took = Duration::from_millis(3);
        let timeout = script_result(text("DEADLINE"), took).unwrap_err();
        assert!(matches!(timeout, StoreError::Timeout(d) if d == took));
        for reply in [
            text("OK"),
            text("DEADLINES"),
            array(&[text("DEADLINE")]),
            int(1),
        ] {
            assert_eq!(script_result(reply.clone(), took).unwrap(), reply);
        }
        let busy = script_result(Reply::Error("BUSY script".into()), took);
        assert_eq!(busy.unwrap_err().kind(), "busy");
    }
}
