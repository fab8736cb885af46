//! The keys and arguments of every script call, in the order the scripts
//! read them: one definition for every transport (TCP, Cluster, REST),
//! each writing its own wire format through [`Call`].

use std::fmt::Write as _;
use std::time::Duration;

use tollgate_core::{Counter, MARK_DONE, Prior};

use crate::record::{Record, millis};

/// A script call being written: its keys first, then its arguments.
pub(crate) trait Call {
    /// Appends a key (the next `KEYS[i]`).
    fn key(&mut self, key: &str);
    /// Appends a number argument, as its decimal text.
    fn number(&mut self, value: u64);
    /// Appends a text argument.
    fn text(&mut self, value: &str);
}

/// The size of a call, for reserving room before writing it: its keys, its
/// arguments after the keys, and the bytes of its keys and text arguments.
/// A size hint only: a call outgrowing it grows (so no test can tell a
/// wrong hint from a right one, and mutation testing skips the functions
/// that make one).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Size {
    pub(crate) keys: usize,
    pub(crate) args: usize,
    pub(crate) text: usize,
}

/// What a call of [`CHECK`](crate::scripts::CHECK), the script of every
/// counter operation, does: its op, and the arguments each counter takes,
/// each followed by `@floor` for a counter with a floor (none for a floor
/// of 0: the same bytes as before floors), then, for a count or a
/// reservation, `~part/whole[=count]` for a counter with a prior (none
/// without: the same bytes as before priors), and `#id` for a set of
/// leases (the call's id, its lease's).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counters {
    /// `c`, count: `lifetime:cost` per counter (lifetime in ms).
    Count,
    /// `r`, reserve: `lifetime:cost:max` per counter.
    Reserve,
    /// `f`, refund: `cost` per counter.
    Refund,
    /// `g`, give back a reservation (Redis Cluster): `cost` per counter.
    #[cfg_attr(not(feature = "tcp"), allow(dead_code))]
    GiveBack,
}

impl Counters {
    /// Whether the op reads its counters' priors (a count, a reservation)
    /// or ignores them (a refund, a give-back).
    pub(crate) fn reads_priors(self) -> bool {
        matches!(self, Counters::Count | Counters::Reserve)
    }

    /// The op, as the script reads it.
    fn code(self) -> &'static str {
        match self {
            Counters::Count => "c",
            Counters::Reserve => "r",
            Counters::Refund => "f",
            Counters::GiveBack => "g",
        }
    }
}

/// One call in a script call of [`CHECK`](crate::scripts::CHECK): `op` on
/// `counters`, recorded as `record`, with the deadline `cutoff` (wall-clock
/// ms, as `Deadline::cutoff_unix_millis` gives), its counters' priors read
/// as `priors` say.
#[derive(Clone, Debug)]
pub(crate) struct Part<'a, I> {
    pub(crate) op: Counters,
    pub(crate) counters: I,
    pub(crate) record: &'a Record,
    pub(crate) cutoff: u64,
    pub(crate) priors: Priors<'a>,
}

/// Where the script finds the count of each prior ([`Counter::prior`]) of
/// a count's or reservation's counters (a refund or give-back sends none).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Priors<'a> {
    /// Every prior read by the script, from its key (sent after the
    /// call's counters' keys, in counter order): one server, where the
    /// whole call is one script.
    Keyed,
    /// Per counter with a prior, in order: its count read before the call
    /// (sent in its argument), or `None`, read by the script as
    /// [`Keyed`](Priors::Keyed) (Redis Cluster: a prior read beforehand
    /// when its key is in another hash slot than its counter's).
    #[cfg_attr(not(feature = "tcp"), allow(dead_code))]
    Read(&'a [Option<u64>]),
}

impl Priors<'_> {
    /// The count of the `j`-th prior of the call read beforehand, if it was.
    fn read(self, j: usize) -> Option<u64> {
        match self {
            Priors::Keyed => None,
            Priors::Read(counts) => counts.get(j).copied().flatten(),
        }
    }
}

/// The priors of a call's `counters` that `op` sends, in counter order:
/// each with its count read beforehand, if it was.
fn priors<'a, 'c, I>(
    op: Counters,
    counters: I,
    read: Priors<'a>,
) -> impl Iterator<Item = (&'c Prior, Option<u64>)> + use<'a, 'c, I>
where
    I: Iterator<Item = &'c Counter>,
{
    let sent = op.reads_priors();
    counters
        .filter_map(move |c| c.prior.as_ref().filter(|_| sent))
        .enumerate()
        .map(move |(j, prior)| (prior, read.read(j)))
}

/// The size of a script call of `parts`.
pub(crate) fn size<'a, I>(parts: &[Part<'_, I>]) -> Size
where
    I: Iterator<Item = &'a Counter> + Clone,
{
    let hashes = hashes(parts);
    let mut size = Size {
        keys: hashes.len(),
        args: 1 + 2 * hashes.len(),
        text: hashes.iter().map(|r| r.key.len()).sum(),
    };
    for part in parts {
        let (n, text) = (part.counters.clone()).fold((0, 0), |(n, t), c| {
            // About 17 more for a floor (a time in µs), 33 for a lease id.
            let floor = if c.floor > 0 { 17 } else { 0 };
            let lease = if c.lease { 33 } else { 0 };
            (n + 1, t + c.key.len() + floor + lease)
        });
        let id = usize::from(part.record.is_kept());
        size.keys += n;
        size.args += 2 + id + n;
        // A head, and about 30 digits per counter's argument.
        size.text += text + id * part.record.id.len() + 8 + 30 * n;
        for (prior, read) in priors(part.op, part.counters.clone(), part.priors) {
            // `~part/whole`, or `=count` instead of a key.
            size.text += 18;
            if read.is_none() {
                size.keys += 1;
                size.text += prior.key.len();
            }
        }
    }
    size
}

/// Writes one script call of `parts` (one part: a call alone; several: a
/// batch): every call's counters and the priors it has the script read,
/// then the hashes of records they use, as keys; then the number of
/// hashes; per hash how long it is kept and the ids of the calls it
/// records; then each call's head (`<op><counters>.<hash>`), cutoff and
/// one argument per counter.
pub(crate) fn write<'a, I>(call: &mut impl Call, parts: &[Part<'_, I>])
where
    I: Iterator<Item = &'a Counter> + Clone,
{
    for part in parts {
        for counter in part.counters.clone() {
            call.key(&counter.key);
        }
        for (prior, read) in priors(part.op, part.counters.clone(), part.priors) {
            if read.is_none() {
                call.key(&prior.key);
            }
        }
    }
    let hashes = hashes(parts);
    for record in &hashes {
        call.key(&record.key);
    }
    call.number(hashes.len() as u64);
    let in_hash = |part: &&Part<'_, I>, record: &Record| {
        part.record.is_kept() && part.record.key == record.key
    };
    for record in &hashes {
        call.number(record.keep_ms());
        call.number(parts.iter().filter(|p| in_hash(p, record)).count() as u64);
        for part in parts.iter().filter(|p| in_hash(p, record)) {
            call.text(&part.record.id);
        }
    }
    // One buffer for every composed argument.
    let mut text = String::with_capacity(64);
    for part in parts {
        let hash = hashes
            .iter()
            .position(|r| in_hash(&part, r))
            .map_or(0, |i| i + 1);
        text.clear();
        let n = part.counters.clone().count();
        // Writing to a String cannot fail.
        let _ = write!(text, "{}{n}.{hash}", part.op.code());
        call.text(&text);
        call.number(part.cutoff);
        let mut priors = priors(part.op, part.counters.clone(), part.priors);
        for counter in part.counters.clone() {
            text.clear();
            let _ = match part.op {
                Counters::Count => write!(text, "{}:{}", millis(counter.ttl), counter.cost),
                Counters::Reserve => write!(
                    text,
                    "{}:{}:{}",
                    millis(counter.ttl),
                    counter.cost,
                    counter.max
                ),
                Counters::Refund | Counters::GiveBack => write!(text, "{}", counter.cost),
            };
            if counter.floor > 0 {
                let _ = write!(text, "@{}", counter.floor);
            }
            if counter.prior.is_some()
                && let Some((prior, read)) = priors.next()
            {
                let _ = write!(text, "~{}/{}", prior.part, prior.whole);
                if let Some(count) = read {
                    let _ = write!(text, "={count}");
                }
            }
            if counter.lease {
                let _ = write!(text, "#{}", part.record.id);
            }
            call.text(&text);
        }
    }
}

/// The hashes of records `parts` use, each once, in order.
fn hashes<'r, I>(parts: &[Part<'r, I>]) -> Vec<&'r Record> {
    let mut hashes: Vec<&Record> = Vec::new();
    for part in parts {
        if part.record.is_kept() && !hashes.iter().any(|r| r.key == part.record.key) {
            hashes.push(part.record);
        }
    }
    hashes
}

/// A script over one key (a counter to delete, a webhook mark): the key,
/// the deadline (`ARGV[1]`), then the script's own arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Single<'a> {
    /// [`DELETE`](crate::scripts::DELETE).
    Delete,
    /// [`CLAIM`](crate::scripts::CLAIM): the caller's token and the lease.
    Claim {
        /// The caller's token.
        token: &'a str,
        /// How long the lease lasts.
        ttl: Duration,
    },
    /// [`FINISH`](crate::scripts::FINISH): the caller's token, the mark's lifetime
    /// and the done value.
    Finish {
        /// The caller's token.
        token: &'a str,
        /// How long the done mark lasts.
        ttl: Duration,
    },
    /// [`RELEASE`](crate::scripts::RELEASE): the caller's token.
    Release {
        /// The caller's token.
        token: &'a str,
    },
    /// [`END_LEASE`](crate::scripts::END_LEASE): the lease's id.
    EndLease {
        /// The lease's id (32 hex digits).
        id: &'a str,
    },
    /// [`RENEW_LEASE`](crate::scripts::RENEW_LEASE): the lease's id and its new lifetime.
    RenewLease {
        /// The lease's id (32 hex digits).
        id: &'a str,
        /// How long the lease lasts from now.
        lifetime: Duration,
    },
    /// [`LEASES`](crate::scripts::LEASES): nothing more.
    Leases,
}

impl Single<'_> {
    /// The arguments after the deadline.
    pub(crate) fn args(&self) -> usize {
        match self {
            Single::Delete | Single::Leases => 0,
            Single::Claim { .. } | Single::RenewLease { .. } => 2,
            Single::Finish { .. } => 3,
            Single::Release { .. } | Single::EndLease { .. } => 1,
        }
    }

    /// The bytes of the text arguments, for sizing a buffer.
    pub(crate) fn text_bytes(&self) -> usize {
        match self {
            Single::Delete | Single::Leases => 0,
            Single::Claim { token, .. } | Single::Release { token } => token.len(),
            Single::EndLease { id } | Single::RenewLease { id, .. } => id.len(),
            Single::Finish { token, .. } => token.len() + MARK_DONE.len(),
        }
    }

    /// The size of a call on `key`.
    pub(crate) fn size(&self, key: &str) -> Size {
        Size {
            keys: 1,
            args: 1 + self.args(),
            text: key.len() + self.text_bytes(),
        }
    }

    /// Writes a call on `key` with the deadline `cutoff` (wall-clock ms).
    pub(crate) fn write(&self, call: &mut impl Call, key: &str, cutoff: u64) {
        call.key(key);
        call.number(cutoff);
        match *self {
            Single::Delete | Single::Leases => {}
            Single::Claim { token, ttl } => {
                call.text(token);
                call.number(millis(ttl));
            }
            Single::Finish { token, ttl } => {
                call.text(token);
                call.number(millis(ttl));
                call.text(MARK_DONE);
            }
            Single::Release { token } | Single::EndLease { id: token } => call.text(token),
            Single::RenewLease { id, lifetime } => {
                call.text(id);
                call.number(millis(lifetime));
            }
        }
    }
}

/// A call written as text, for tests: `k:` for keys, `n:` for numbers,
/// `t:` for text.
#[cfg(test)]
#[derive(Default)]
pub(crate) struct Written(pub(crate) Vec<String>);

#[cfg(test)]
impl Call for Written {
    fn key(&mut self, key: &str) {
        self.0.push(format!("k:{key}"));
    }
    fn number(&mut self, value: u64) {
        self.0.push(format!("n:{value}"));
    }
    fn text(&mut self, value: &str) {
        self.0.push(format!("t:{value}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_set_of_leases_takes_the_calls_id_after_a_hash_sign() {
        let lease = Counter {
            lease: true,
            ..counter("l", 2_000, 1, 5)
        };
        let counters = [counter("k", 1_000, 1, 5), lease];
        let record = Record {
            key: "h".into(),
            id: format!("{:032x}", 0xabu8),
            lifetime_ms: 720,
        };
        let written = |op: Counters| one_call(op, &counters, &record);
        let id = &record.id;
        assert!(written(Counters::Reserve).ends_with(&format!("t:1000:1:5 t:2000:1:5#{id}")));
        assert!(written(Counters::Count).ends_with(&format!("t:1000:1 t:2000:1#{id}")));
        assert!(written(Counters::GiveBack).ends_with(&format!("t:1 t:1#{id}")));
    }

    /// One call of `op` on `counters`, recorded as `record`, with the
    /// cutoff 99, as written; its size hint checked.
    fn one_call(op: Counters, counters: &[Counter], record: &Record) -> String {
        let mut call = Written::default();
        let parts = [Part {
            op,
            counters: counters.iter(),
            record,
            cutoff: 99,
            priors: Priors::Keyed,
        }];
        write(&mut call, &parts);
        let size = size(&parts);
        assert_eq!(size.keys + size.args, call.0.len());
        call.0.join(" ")
    }

    fn counter(key: &str, ttl_ms: u64, cost: u64, max: u64) -> Counter {
        Counter {
            key: key.into(),
            ttl: Duration::from_millis(ttl_ms),
            cost,
            max,
            floor: 0,
            prior: None,
            lease: false,
        }
    }

    #[test]
    fn a_call_takes_its_counters_then_its_hash_its_id_and_its_head_deadline_and_arguments() {
        let counters = [counter("a", 60_000, 2, 10), counter("b", 1_000, 3, 20)];
        let record = Record {
            key: "h".into(),
            id: "i".into(),
            lifetime_ms: 720,
        };
        let written = |op: Counters| one_call(op, &counters, &record);
        assert_eq!(
            written(Counters::Count),
            "k:a k:b k:h n:1 n:1540 n:1 t:i t:c2.1 n:99 t:60000:2 t:1000:3"
        );
        assert_eq!(
            written(Counters::Reserve),
            "k:a k:b k:h n:1 n:1540 n:1 t:i t:r2.1 n:99 t:60000:2:10 t:1000:3:20"
        );
        assert_eq!(
            written(Counters::Refund),
            "k:a k:b k:h n:1 n:1540 n:1 t:i t:f2.1 n:99 t:2 t:3"
        );
        assert_eq!(
            written(Counters::GiveBack),
            "k:a k:b k:h n:1 n:1540 n:1 t:i t:g2.1 n:99 t:2 t:3"
        );
    }

    // `Record::none` is Cluster's (the tcp feature's).
    #[cfg(feature = "tcp")]
    #[test]
    fn a_floor_follows_a_counters_argument_after_an_at_sign_and_only_when_there_is_one() {
        let floored = Counter {
            floor: 1_781_524_989_000_000,
            prior: None,
            lease: false,
            ..counter("a", 60_000, 3, 3_000_000)
        };
        let counters = [floored, counter("b", 1_000, 3, 20)];
        let record = Record::none(tollgate_core::CheckId::from_u128(7));
        let written = |op: Counters| one_call(op, &counters, &record);
        assert_eq!(
            written(Counters::Count),
            "k:a k:b n:0 t:c2.0 n:99 t:60000:3@1781524989000000 t:1000:3"
        );
        assert_eq!(
            written(Counters::Reserve),
            "k:a k:b n:0 t:r2.0 n:99 t:60000:3:3000000@1781524989000000 t:1000:3:20"
        );
        assert_eq!(
            written(Counters::Refund),
            "k:a k:b n:0 t:f2.0 n:99 t:3@1781524989000000 t:3"
        );
        assert_eq!(
            written(Counters::GiveBack),
            "k:a k:b n:0 t:g2.0 n:99 t:3@1781524989000000 t:3"
        );
    }

    #[test]
    fn a_batch_names_each_hash_once_and_each_call_its_own() {
        let counters = [counter("a", 60_000, 2, 10), counter("b", 1_000, 3, 20)];
        let record = |key: &str, id: &str| Record {
            key: key.into(),
            id: id.into(),
            lifetime_ms: 780,
        };
        let (first, second, third) = (record("h1", "x"), record("h2", "y"), record("h1", "z"));
        let none = record("", "");
        let part = |op, i: usize, record| Part {
            op,
            counters: counters[i..=i].iter(),
            record,
            cutoff: 5,
            priors: Priors::Keyed,
        };
        let parts = [
            part(Counters::Count, 0, &first),
            part(Counters::Reserve, 1, &second),
            part(Counters::Count, 1, &none),
            part(Counters::Refund, 0, &third),
        ];
        let mut call = Written::default();
        write(&mut call, &parts);
        assert_eq!(
            call.0.join(" "),
            "k:a k:b k:b k:a k:h1 k:h2 n:2 n:1660 n:2 t:x t:z n:1660 n:1 t:y \
             t:c1.1 n:5 t:60000:2 \
             t:r1.2 n:5 t:1000:3:20 \
             t:c1.0 n:5 t:1000:3 \
             t:f1.1 n:5 t:2"
        );
        let size = size(&parts);
        assert_eq!(size.keys + size.args, call.0.len());
    }

    fn with_prior(counter: Counter, key: &str, part: u64, whole: u64) -> Counter {
        Counter {
            prior: Some(Prior {
                key: key.into(),
                part,
                whole,
            }),
            ..counter
        }
    }

    #[test]
    fn a_prior_follows_a_counters_argument_its_key_after_the_calls_counters() {
        let floored = Counter {
            floor: 1_000,
            ..counter("c", 1_000, 1, 5_000)
        };
        let counters = [
            with_prior(counter("a", 60_000, 2, 10), "pa", 17, 60),
            counter("b", 1_000, 3, 20),
            with_prior(floored, "pc", 1, 2),
        ];
        let record = Record {
            key: "h".into(),
            id: "i".into(),
            lifetime_ms: 720,
        };
        let written = |op: Counters, priors: Priors<'_>| {
            let mut call = Written::default();
            let parts = [
                Part {
                    op,
                    counters: counters.iter(),
                    record: &record,
                    cutoff: 99,
                    priors,
                },
                // A second call, without priors: its keys after the first's.
                Part {
                    op,
                    counters: counters[1..2].iter(),
                    record: &record,
                    cutoff: 99,
                    priors,
                },
            ];
            write(&mut call, &parts);
            let size = size(&parts);
            assert_eq!(size.keys + size.args, call.0.len());
            call.0.join(" ")
        };
        let head = "n:1 n:1540 n:2 t:i t:i";
        assert_eq!(
            written(Counters::Reserve, Priors::Keyed),
            format!(
                "k:a k:b k:c k:pa k:pc k:b k:h {head} \
                 t:r3.1 n:99 t:60000:2:10~17/60 t:1000:3:20 t:1000:1:5000@1000~1/2 \
                 t:r1.1 n:99 t:1000:3:20"
            )
        );
        // Read beforehand: the count in the argument, and no key.
        let read = [Some(42), None];
        assert_eq!(
            written(Counters::Count, Priors::Read(&read)),
            format!(
                "k:a k:b k:c k:pc k:b k:h {head} \
                 t:c3.1 n:99 t:60000:2~17/60=42 t:1000:3 t:1000:1@1000~1/2 \
                 t:c1.1 n:99 t:1000:3"
            )
        );
        // A refund or a give-back sends no prior.
        for (op, code) in [(Counters::Refund, "f"), (Counters::GiveBack, "g")] {
            assert_eq!(
                written(op, Priors::Keyed),
                format!(
                    "k:a k:b k:c k:b k:h {head} \
                     t:{code}3.1 n:99 t:2 t:3 t:1@1000 t:{code}1.1 n:99 t:3"
                )
            );
        }
    }

    #[test]
    fn single_key_scripts_take_the_key_the_deadline_then_their_own() {
        let ttl = Duration::from_secs(30);
        let cases = [
            (Single::Delete, "k:m n:7"),
            (Single::Claim { token: "tok", ttl }, "k:m n:7 t:tok n:30000"),
            (
                Single::Finish { token: "tok", ttl },
                "k:m n:7 t:tok n:30000 t:done",
            ),
            (Single::Release { token: "tok" }, "k:m n:7 t:tok"),
        ];
        for (script, expected) in cases {
            let mut call = Written::default();
            script.write(&mut call, "m", 7);
            assert_eq!(call.0.join(" "), expected, "{script:?}");
            assert_eq!(call.0.len(), 2 + script.args(), "{script:?}");
        }
        assert_eq!(Single::Finish { token: "tok", ttl }.text_bytes(), 7);
    }

    #[test]
    fn lifetimes_are_whole_milliseconds_at_least_one() {
        assert_eq!(millis(Duration::from_secs(60)), 60_000);
        assert_eq!(millis(Duration::ZERO), 1);
        assert_eq!(millis(Duration::from_micros(1_999)), 1);
        assert_eq!(millis(Duration::MAX), u64::MAX);
    }
}
