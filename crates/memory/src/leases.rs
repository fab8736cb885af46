//! Sets of leases: a concurrency limit's counter, each lease an id and the
//! time it ends; the set lives until its last lease ends.

use std::time::Duration;

use tollgate_core::{CheckId, Leases};

use crate::map::Map;
use crate::{Entry, Value};

/// The leases of one set: ids and when each ends, on the store's clock.
pub(crate) type Set = Vec<(CheckId, Duration)>;

/// What a call found of a set: the leases held, and how many it removed
/// as expired.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Found {
    pub(crate) held: u64,
    pub(crate) reclaimed: u64,
}

/// The live set at `key`, its expired leases removed (`None`: no set).
fn live<'a>(map: &'a mut Map<Entry>, key: &str, now: Duration) -> (Option<&'a mut Set>, u64) {
    let Some(entry) = map.get_mut(key) else {
        return (None, 0);
    };
    let Value::Leases(set) = &mut entry.value else {
        return (None, 0);
    };
    let before = set.len();
    set.retain(|&(_, ends)| ends > now);
    let reclaimed = (before - set.len()) as u64;
    if set.is_empty() {
        return (None, reclaimed);
    }
    (Some(set), reclaimed)
}

/// The leases held at `key` now, expired ones removed.
pub(crate) fn held(map: &mut Map<Entry>, key: &str, now: Duration) -> Found {
    let (set, reclaimed) = live(map, key, now);
    let held = set.map_or(0, |set| set.len() as u64);
    if held == 0 {
        map.remove(key);
    }
    Found { held, reclaimed }
}

/// Takes the lease `id` at `key` for `ttl` (held already: as it is); the
/// leases held after.
pub(crate) fn take(
    map: &mut Map<Entry>,
    key: &str,
    id: CheckId,
    ttl: Duration,
    now: Duration,
) -> u64 {
    let ends = now.saturating_add(ttl);
    let (set, _) = live(map, key, now);
    let held = match set {
        Some(set) => {
            if !set.iter().any(|&(held, _)| held == id) {
                set.push((id, ends));
            }
            set.len() as u64
        }
        None => {
            let fresh = || Entry {
                value: Value::Leases(vec![(id, ends)]),
                expires_at: ends,
            };
            let (entry, _) = map.get_or_insert_with(key, fresh);
            *entry = fresh();
            return 1;
        }
    };
    extend(map, key);
    held
}

/// Ends the lease `id` at `key`; whether it was held.
pub(crate) fn end(map: &mut Map<Entry>, key: &str, id: CheckId, now: Duration) -> bool {
    let (set, _) = live(map, key, now);
    let Some(set) = set else {
        map.remove(key);
        return false;
    };
    let before = set.len();
    set.retain(|&(held, _)| held != id);
    let ended = set.len() < before;
    if set.is_empty() {
        map.remove(key);
    } else {
        extend(map, key);
    }
    ended
}

/// Renews the lease `id` at `key` to end `lifetime` from now; whether it
/// was held.
pub(crate) fn renew(
    map: &mut Map<Entry>,
    key: &str,
    id: CheckId,
    lifetime: Duration,
    now: Duration,
) -> bool {
    let (set, _) = live(map, key, now);
    let Some(set) = set else {
        map.remove(key);
        return false;
    };
    let Some(lease) = set.iter_mut().find(|(held, _)| *held == id) else {
        return false;
    };
    lease.1 = now.saturating_add(lifetime);
    extend(map, key);
    true
}

/// The leases held at `key`, without changing the set.
pub(crate) fn status(map: &mut Map<Entry>, key: &str, now: Duration) -> Leases {
    let Some(Entry {
        value: Value::Leases(set),
        ..
    }) = map.get_mut(key)
    else {
        return Leases::default();
    };
    let live = set.iter().filter(|&&(_, ends)| ends > now);
    let first = live.clone().map(|&(_, ends)| ends).min();
    Leases {
        held: live.count() as u64,
        first_ends: first.map_or(Duration::ZERO, |ends| ceil_ms(ends.saturating_sub(now))),
    }
}

/// The ids of the leases held at `key`, in the order taken.
pub(crate) fn ids(map: &mut Map<Entry>, key: &str, now: Duration) -> Vec<CheckId> {
    match map.get_mut(key) {
        Some(Entry {
            value: Value::Leases(set),
            ..
        }) => set
            .iter()
            .filter(|&&(_, ends)| ends > now)
            .map(|&(id, _)| id)
            .collect(),
        _ => Vec::new(),
    }
}

/// How long until the first lease at `key` ends (zero when none is held).
pub(crate) fn first_ends(map: &mut Map<Entry>, key: &str, now: Duration) -> Duration {
    status(map, key, now).first_ends
}

/// The set at `key` lives until its last lease ends.
fn extend(map: &mut Map<Entry>, key: &str) {
    if let Some(entry) = map.get_mut(key)
        && let Value::Leases(set) = &entry.value
    {
        entry.expires_at = set.iter().map(|&(_, ends)| ends).max().unwrap_or_default();
    }
}

/// `time` rounded up to whole ms.
fn ceil_ms(time: Duration) -> Duration {
    let ms = time.as_nanos().div_ceil(1_000_000);
    Duration::from_millis(u64::try_from(ms).unwrap_or(u64::MAX))
}
