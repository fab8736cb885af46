//! Grouping a check's keys by hash slot, and putting the replies of the
//! groups back in the caller's order.

use std::collections::HashMap;
use std::sync::LazyLock;

use redis::cluster_routing::{Route, RoutingInfo, SingleNodeRoutingInfo, Slot, SlotAddr};
use tollgate_core::StoreError;

/// The keys of one batch that share a hash slot: one script call.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Group {
    /// Their slot.
    pub(crate) slot: Slot,
    /// Their positions in the caller's batch, in order.
    pub(crate) members: Vec<usize>,
    /// For a count's or a reservation's counters, the positions of their
    /// priors' counts in the caller's reply (after every counter's count,
    /// in counter order), one per member with a prior, in order; empty
    /// otherwise.
    pub(crate) priors: Vec<usize>,
    /// For a count's or a reservation's counters, the positions of their
    /// leases' two numbers in the caller's reply (after every prior's
    /// count), two per member that is a set of leases, in order; empty
    /// otherwise.
    pub(crate) leases: Vec<usize>,
}

/// `keys` grouped by slot, groups in the order of their first key. A
/// check has a handful of keys, so a linear search beats hashing.
pub(crate) fn group<'a>(keys: impl Iterator<Item = &'a str>) -> Vec<Group> {
    let mut groups: Vec<Group> = Vec::new();
    for (i, key) in keys.enumerate() {
        let slot = Slot::for_key(key);
        match groups.iter_mut().find(|g| g.slot == slot) {
            Some(group) => group.members.push(i),
            None => groups.push(Group {
                slot,
                members: vec![i],
                priors: Vec::new(),
                leases: Vec::new(),
            }),
        }
    }
    groups
}

/// Where a call on `slot` goes: the slot's primary.
pub(crate) fn route(slot: Slot) -> RoutingInfo {
    RoutingInfo::SingleNode(SingleNodeRoutingInfo::SpecificNode(Route::with_slot(
        slot,
        SlotAddr::Master,
    )))
}

/// A hash tag in `slot`: the smallest number whose decimal text hashes to
/// it, so that `{tag}` puts any key in that slot (a call's record goes with
/// the counters it records).
pub(crate) fn tag(slot: Slot) -> u32 {
    // Every slot is in the table; should one not be, the slot's own
    // search finds it.
    TAGS.get(&slot).copied().unwrap_or_else(|| {
        (0..)
            .find(|n: &u32| Slot::for_key(n.to_string()) == slot)
            .unwrap_or(0)
    })
}

/// The hash slots of a cluster.
const SLOTS: usize = 16_384;

/// Every slot's smallest number, found once (about 170,000 hashes, a few
/// ms), when the first cluster store is opened rather than in a check.
static TAGS: LazyLock<HashMap<Slot, u32>> = LazyLock::new(|| {
    let mut tags = HashMap::with_capacity(SLOTS);
    let mut n = 0u32;
    while tags.len() < SLOTS {
        tags.entry(Slot::for_key(n.to_string())).or_insert(n);
        n += 1;
    }
    tags
});

/// Finds every slot's tag now, if not done yet.
pub(crate) fn find_tags() {
    LazyLock::force(&TAGS);
}

/// Writes one group's `counts` (in the group's order) into `out` at the
/// group's positions: its members' counts, then, for a count's or a
/// reservation's reply (`tail`), its members' priors' counts and their
/// leases' numbers; a reply of another length is an invalid reply.
pub(crate) fn scatter(
    out: &mut [u64],
    group: &Group,
    counts: &[u64],
    tail: bool,
) -> Result<(), StoreError> {
    let (priors, leases): (&[usize], &[usize]) = match tail {
        true => (&group.priors, &group.leases),
        false => (&[], &[]),
    };
    let expected = group.members.len() + priors.len() + leases.len();
    if counts.len() != expected {
        return Err(StoreError::InvalidReply(format!(
            "{} counts where {expected} were expected",
            counts.len(),
        )));
    }
    let places = group.members.iter().chain(priors).chain(leases);
    for (&i, &count) in places.zip(counts) {
        if let Some(slot) = out.get_mut(i) {
            *slot = count;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn members(groups: &[Group]) -> Vec<Vec<usize>> {
        groups.iter().map(|g| g.members.clone()).collect()
    }

    #[test]
    fn keys_of_one_slot_form_one_group_in_caller_order() {
        // Redis's own example: every key with the tag {user1000} is in one slot.
        let keys = [
            "limit:a:{user1000}:1",
            "limit:b:1",
            "limit:c:{user1000}:1",
            "limit:{user1000}",
        ];
        let groups = group(keys.iter().copied());
        assert_eq!(groups[0].slot, Slot::for_key("user1000"));
        assert_eq!(groups[0].members, [0, 2, 3]);
        assert_eq!(members(&groups)[1..], [vec![1]]);
    }

    #[test]
    fn a_slots_tag_puts_a_key_in_that_slot() {
        for key in ["limit:a:1", "limit:b:{user1000}:7", "x", ""] {
            let slot = Slot::for_key(key);
            let tagged = format!("limit:#{{{}}}00ff", tag(slot));
            assert_eq!(Slot::for_key(&tagged), slot, "{key} -> {tagged}");
        }
    }

    #[test]
    fn priors_counts_go_after_every_counters_count_and_only_in_a_reply_with_them() {
        let mut groups = group(["foo", "bar", "foo:{foo}"].into_iter());
        // `foo` and `bar` have priors: their counts go to 3 and 4.
        groups[0].priors = vec![3];
        groups[1].priors = vec![4];
        let mut out = vec![0; 5];
        scatter(&mut out, &groups[0], &[7, 9, 70], true).unwrap_or_else(|e| panic!("{e}"));
        scatter(&mut out, &groups[1], &[8, 80], true).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, [7, 8, 9, 70, 80]);
        // A refund's reply: counts only.
        scatter(&mut out, &groups[1], &[1], false).unwrap_or_else(|e| panic!("{e}"));
        assert_eq!(out, [7, 1, 9, 70, 80]);
        for (counts, priors) in [(&[1][..], true), (&[1, 2][..], false)] {
            let wrong = scatter(&mut out, &groups[1], counts, priors);
            assert_eq!(wrong.map_err(|e| e.kind()), Err("invalid-reply"));
        }
    }

    #[test]
    fn counts_go_back_to_their_positions() {
        let groups = group(["foo", "bar", "foo:{foo}", "{bar}x"].into_iter());
        let mut out = vec![0; 4];
        for (group, counts) in groups.iter().zip([[7, 9], [8, 10]]) {
            scatter(&mut out, group, &counts, false).unwrap_or_else(|e| panic!("{e}"));
        }
        assert_eq!(out, [7, 8, 9, 10]);
        let short = scatter(&mut out, &groups[0], &[1], false);
        assert_eq!(short.map_err(|e| e.kind()), Err("invalid-reply"));
    }
}
