//! The keys and arguments of every script call, in the order the scripts
//! read them: one definition for every transport (TCP, Cluster, REST),
//! each writing its own wire format through [`Call`].

use std::time::Duration;

use tollgate_core::{Counter, MARK_DONE};

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

impl std::ops::Add for Size {
    type Output = Size;

    fn add(self, other: Size) -> Size {
        Size {
            keys: self.keys + other.keys,
            args: self.args + other.args,
            text: self.text + other.text,
        }
    }
}

/// A call of [`CHECK`](crate::scripts::CHECK), the script of every counter
/// operation: its counters and its record (if it has one) among the keys;
/// among the arguments its op, its number of counters, its deadline, its
/// record's lifetime (0: no record), then the same arguments for each
/// counter. Calls batched into one script call write all their keys, then
/// all their arguments.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Counters {
    /// `c`, count: lifetime in ms and cost per counter.
    Count,
    /// `r`, reserve: lifetime in ms, cost and max per counter.
    Reserve,
    /// `f`, refund: cost per counter.
    Refund,
    /// `g`, give back a reservation (Redis Cluster): cost per counter.
    GiveBack,
}

impl Counters {
    /// The arguments each counter takes.
    pub(crate) fn per_counter(self) -> usize {
        match self {
            Counters::Count => 2,
            Counters::Reserve => 3,
            Counters::Refund | Counters::GiveBack => 1,
        }
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

    /// The size of a call on `counters` recorded as `record`.
    pub(crate) fn size<'a>(
        self,
        counters: impl Iterator<Item = &'a Counter>,
        record: &Record,
    ) -> Size {
        let (n, text) = counters.fold((0, 0), |(n, text), c| (n + 1, text + c.key.len()));
        Size {
            keys: n + usize::from(!record.key.is_empty()),
            args: 4 + n * self.per_counter(),
            text: text + record.key.len() + 1,
        }
    }

    /// Writes a call (a batch of one) on `counters` with the deadline
    /// `cutoff` (wall-clock ms, as `Deadline::cutoff_unix_millis` gives),
    /// recorded as `record`: its keys, then its arguments.
    pub(crate) fn write<'a, I>(
        self,
        call: &mut impl Call,
        counters: I,
        cutoff: u64,
        record: &Record,
    ) where
        I: IntoIterator<Item = &'a Counter>,
        I::IntoIter: Clone,
    {
        let counters = counters.into_iter();
        self.write_keys(call, counters.clone(), record);
        self.write_args(call, counters, cutoff, record);
    }

    /// Writes the keys of a call: its counters, then its record.
    pub(crate) fn write_keys<'a>(
        self,
        call: &mut impl Call,
        counters: impl IntoIterator<Item = &'a Counter>,
        record: &Record,
    ) {
        for counter in counters {
            call.key(&counter.key);
        }
        if !record.key.is_empty() {
            call.key(&record.key);
        }
    }

    /// Writes the arguments of a call, after the keys of every call of its
    /// batch.
    pub(crate) fn write_args<'a, I>(
        self,
        call: &mut impl Call,
        counters: I,
        cutoff: u64,
        record: &Record,
    ) where
        I: IntoIterator<Item = &'a Counter>,
        I::IntoIter: Clone,
    {
        let counters = counters.into_iter();
        call.text(self.code());
        call.number(counters.clone().count() as u64);
        call.number(cutoff);
        call.number(record.lifetime_ms);
        for counter in counters {
            match self {
                Counters::Count => {
                    call.number(millis(counter.ttl));
                    call.number(counter.cost);
                }
                Counters::Reserve => {
                    call.number(millis(counter.ttl));
                    call.number(counter.cost);
                    call.number(counter.max);
                }
                Counters::Refund | Counters::GiveBack => call.number(counter.cost),
            }
        }
    }
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
}

impl Single<'_> {
    /// The arguments after the deadline.
    pub(crate) fn args(&self) -> usize {
        match self {
            Single::Delete => 0,
            Single::Claim { .. } => 2,
            Single::Finish { .. } => 3,
            Single::Release { .. } => 1,
        }
    }

    /// The bytes of the text arguments, for sizing a buffer.
    pub(crate) fn text_bytes(&self) -> usize {
        match self {
            Single::Delete => 0,
            Single::Claim { token, .. } | Single::Release { token } => token.len(),
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
            Single::Delete => {}
            Single::Claim { token, ttl } => {
                call.text(token);
                call.number(millis(ttl));
            }
            Single::Finish { token, ttl } => {
                call.text(token);
                call.number(millis(ttl));
                call.text(MARK_DONE);
            }
            Single::Release { token } => call.text(token),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A call written as text: `k:` for keys, `n:` for numbers, `t:` for text.
    #[derive(Default)]
    struct Written(Vec<String>);

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

    fn counter(key: &str, ttl_ms: u64, cost: u64, max: u64) -> Counter {
        Counter {
            key: key.into(),
            ttl: Duration::from_millis(ttl_ms),
            cost,
            max,
        }
    }

    #[test]
    fn counter_calls_take_keys_and_record_then_op_size_deadline_record_lifetime_and_each_counters_arguments()
     {
        let counters = [counter("a", 60_000, 2, 10), counter("b", 1_000, 3, 20)];
        let record = Record {
            key: "r".into(),
            lifetime_ms: 720,
        };
        let written = |script: Counters| {
            let mut call = Written::default();
            script.write(&mut call, &counters, 99, &record);
            assert_eq!(call.0.len(), 7 + 2 * script.per_counter());
            let size = script.size(counters.iter(), &record);
            assert_eq!(size.keys + size.args, call.0.len());
            call.0.join(" ")
        };
        assert_eq!(
            written(Counters::Count),
            "k:a k:b k:r t:c n:2 n:99 n:720 n:60000 n:2 n:1000 n:3"
        );
        assert_eq!(
            written(Counters::Reserve),
            "k:a k:b k:r t:r n:2 n:99 n:720 n:60000 n:2 n:10 n:1000 n:3 n:20"
        );
        assert_eq!(
            written(Counters::Refund),
            "k:a k:b k:r t:f n:2 n:99 n:720 n:2 n:3"
        );
        assert_eq!(
            written(Counters::GiveBack),
            "k:a k:b k:r t:g n:2 n:99 n:720 n:2 n:3"
        );
        let mut unrecorded = Written::default();
        let none = Record {
            key: String::new(),
            lifetime_ms: 0,
        };
        Counters::Count.write(&mut unrecorded, &counters[..1], 5, &none);
        assert_eq!(unrecorded.0.join(" "), "k:a t:c n:1 n:5 n:0 n:60000 n:2");
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
