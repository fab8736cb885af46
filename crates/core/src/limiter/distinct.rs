//! The limits of one check name each counter once: the duplicate-key check,
//! and the merge fail-open checks use instead of refusing.

use crate::store::MAX_COUNT;
use crate::{Error, Limit};

/// [`Error::DuplicateKey`] when two of `limits` share a key.
pub(super) fn check(limits: &[Limit]) -> Result<(), Error> {
    for (i, a) in limits.iter().enumerate() {
        if limits[i + 1..].iter().any(|b| a.stored() == b.stored()) {
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
        match merged.iter_mut().find(|m| m.stored() == limit.stored()) {
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
