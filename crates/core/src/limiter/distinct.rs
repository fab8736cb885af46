//! The limits of one check name each counter once: the duplicate-key check,
//! and the merge fail-open checks use instead of refusing.

use crate::key::KEY_PREFIX;
use crate::store::MAX_COUNT;
use crate::{Error, Limit};

/// [`Error::DuplicateKey`] when two of `limits` share a key.
pub(super) fn check(limits: &[Limit]) -> Result<(), Error> {
    for (i, a) in limits.iter().enumerate() {
        if limits[i + 1..]
            .iter()
            .any(|b| same_key(a.stored(), b.stored()))
        {
            // Not logged here: the caller gets the typed error, and keys may
            // come from requests (a log line per call would be theirs to write).
            return Err(Error::DuplicateKey(a.rule().name().to_owned()));
        }
    }
    Ok(())
}

/// The limits with each key once, its cost the sum of the costs given for it.
pub(super) fn merge(limits: &[Limit]) -> Vec<Limit> {
    let mut merged: Vec<Limit> = Vec::with_capacity(limits.len());
    for limit in limits {
        match merged
            .iter_mut()
            .find(|m| same_key(m.stored(), limit.stored()))
        {
            Some(first) => {
                let cost = first.cost().saturating_add(limit.cost()).min(MAX_COUNT);
                if let Ok(summed) = first.clone().with_cost(cost) {
                    *first = summed;
                }
            }
            None => merged.push(limit.clone()),
        }
    }
    merged
}

/// Whether two stored keys are the same. The keys of one check mostly
/// differ in length, in the rule name that follows the prefix, or in the
/// end of the last part: those are compared as two words before the whole.
fn same_key(a: &str, b: &str) -> bool {
    let (a, b) = (a.as_bytes(), b.as_bytes());
    a.len() == b.len()
        && a.get(KEY_PREFIX.len()..).and_then(<[u8]>::first_chunk::<8>)
            == b.get(KEY_PREFIX.len()..).and_then(<[u8]>::first_chunk::<8>)
        && a.last_chunk::<8>() == b.last_chunk::<8>()
        && a == b
}

#[cfg(test)]
mod tests {
    use super::same_key;

    #[test]
    fn keys_are_the_same_only_when_every_byte_is() {
        for key in [
            "limit:ask-tokens:docs:203.0.113.9:",
            "limit:a:",
            "limit:ab:c:",
        ] {
            assert!(same_key(key, key), "{key}");
            assert!(!same_key(key, &key[..key.len() - 1]), "{key}");
            for at in 0..key.len() {
                let mut other = key.to_owned().into_bytes();
                other[at] = b'#';
                let other = String::from_utf8(other).unwrap_or_default();
                assert!(!same_key(key, &other), "{key} / {other}");
            }
        }
    }
}
