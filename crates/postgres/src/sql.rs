//! The statements of the store: one per call, each ending with the
//! schema's `tollgate_guard`, evaluated after every write of the statement,
//! so that a statement finishing past its deadline rolls back whole.
//!
//! Every statement reads "now" as `statement_timestamp()` (one value for the
//! whole statement) for lifetimes, and `clock_timestamp()` (the moment of
//! evaluation) for the deadline. Rows are locked in key order, so two calls
//! on the same counters never wait on each other in a cycle. `{s}` is the
//! quoted schema name.
//!
//! The counter statements (`count`, `reserve`, `refund`) are idempotent by
//! the call's [`CheckId`](tollgate_core::CheckId): `earlier` looks the id up
//! in `calls`, and when an earlier attempt recorded it, the statement
//! writes nothing and answers the recorded counts (and, for a reservation,
//! whether it applied). Otherwise it writes, then inserts the record with
//! what it answers: one statement, so one transaction. The id is the
//! record's primary key and the insert has no `ON CONFLICT`: of two
//! attempts of one call running at once on two connections (the first
//! still waiting on a row lock when its retry arrives), the second to
//! insert waits for the first's transaction and fails with a unique
//! violation when it commits, rolling back whatever it wrote (the guard's
//! count of written rows would catch an insert that did nothing); the
//! store runs it again, and it then finds the record. Every record lives
//! the check's budget plus the skew margin (the lifetime parameter). Each
//! counter statement has a purging variant, with a `purged` CTE deleting up
//! to [`PURGE_BATCH`] expired records, which one counter call in 32 of a
//! store runs instead.
//!
//! A batch where some counter has a
//! [`prior`](tollgate_core::Counter::prior) runs a variant of its count or
//! reservation with a `priors` CTE ([`COUNT_PRIORS`], [`RESERVE_PRIORS`])
//! that reads each prior's count in the same statement, from its snapshot,
//! without locking or writing it; the reservation decides on it, and both
//! answer and record the priors' counts after the counters'. A batch
//! without priors runs the statement it ran before priors existed: the
//! templates' `{priors}`, `{decision}` and `{answer_priors}` are filled in
//! only for the variants.

/// Deletes up to `{limit}` expired call records, oldest first, skipping
/// those another statement holds; by their row address, found through the
/// expiry index.
const PURGE: &str = r"
    DELETE FROM {s}.calls
    WHERE ctid = ANY (ARRAY(
        SELECT ctid FROM {s}.calls WHERE expires_at < statement_timestamp()
        ORDER BY expires_at LIMIT {limit} FOR UPDATE SKIP LOCKED))
    RETURNING 1";

/// The expired call records the purging variant of a counter statement
/// deletes. A constant, not a parameter: with a parameter, the server may
/// plan the statement for a limit of 0 and then keep planning it at every
/// call (measured: half the throughput on some connections).
pub(crate) const PURGE_BATCH: u32 = 64;

/// `count`: $1 keys, $2 costs (at most `MAX_COUNT`), $3 lifetimes in µs,
/// $4 the deadline, $5 the call's id (32 hex digits), $6 the record's
/// lifetime in µs. Adds each cost to
/// a live counter (keeping its lifetime), or writes it in a new or expired
/// one; records the new counts. Returns (ord, count): the new counts, or
/// those recorded by an earlier attempt. For a batch whose counters all
/// have a floor of 0; [`COUNT_FLOORED`] counts the others. With priors
/// ([`COUNT_PRIORS`]), it also returns each prior's count after them.
const COUNT: &str = r"
WITH earlier AS (
    SELECT applied, counts FROM {s}.calls WHERE id = $5::text::uuid
), input AS (
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[])
        WITH ORDINALITY AS i (key, cost, ttl_us, ord)
    WHERE NOT EXISTS (SELECT FROM earlier)
{priors}), written AS (
    INSERT INTO {s}.counters AS c (key, value, expires_at)
    SELECT key, cost, statement_timestamp() + ttl_us * interval '1 microsecond'
    FROM input WHERE clock_timestamp() <= $4::timestamptz
    ORDER BY key
    ON CONFLICT (key) DO UPDATE SET
        value = CASE WHEN c.expires_at > statement_timestamp()
            THEN least(c.value + excluded.value, 9007199254740992) ELSE excluded.value END,
        expires_at = CASE WHEN c.expires_at > statement_timestamp()
            THEN c.expires_at ELSE excluded.expires_at END
    WHERE clock_timestamp() <= $4::timestamptz
    RETURNING c.key, c.value
), answer AS (
    SELECT i.ord, w.value FROM input i JOIN written w ON w.key = i.key
{answer_priors}), recorded AS (
    INSERT INTO {s}.calls (id, expires_at, applied, counts)
    SELECT $5::text::uuid, statement_timestamp() + $6::bigint * interval '1 microsecond', true,
        (SELECT coalesce(array_agg(value ORDER BY ord), '{}') FROM answer)
    WHERE NOT EXISTS (SELECT FROM earlier)
    RETURNING 1
{purge}), checked AS (
    SELECT {s}.tollgate_guard($4::timestamptz,
        (SELECT count(*) FROM written) + (SELECT count(*) FROM recorded),
        (SELECT count(*) FROM input) + (NOT EXISTS (SELECT FROM earlier))::int) AS ok
)
SELECT a.ord, a.value FROM checked, answer a WHERE checked.ok
UNION ALL
SELECT r.ord, r.value
FROM checked, earlier e, unnest(e.counts) WITH ORDINALITY AS r (value, ord)
WHERE checked.ok
ORDER BY 1";

/// `count` of a batch with a floor on some counter: the parameters of
/// [`COUNT`], then $7 the floors. Raises each live count to its counter's
/// floor before adding the cost (a new or expired counter starts at its
/// floor plus the cost), and gives a counter with a floor its lifetime
/// afresh: its ttl past the time it now holds (`ttl` + `count − floor` µs,
/// rounded up to whole ms, as `Counter::lifetime_at`); one without keeps
/// its lifetime, as in [`COUNT`]. The conflict arm sees only the proposed
/// row, so it finds the cost and floor of its key in `input`: a lookup
/// [`COUNT`] spares every batch without a floor.
const COUNT_FLOORED: &str = r"
WITH earlier AS (
    SELECT applied, counts FROM {s}.calls WHERE id = $5::text::uuid
), input AS (
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $7::bigint[])
        WITH ORDINALITY AS i (key, cost, ttl_us, floor, ord)
    WHERE NOT EXISTS (SELECT FROM earlier)
{priors}), written AS (
    INSERT INTO {s}.counters AS c (key, value, expires_at)
    SELECT key, n.value, statement_timestamp() + (ttl_us + CASE WHEN floor > 0
            THEN (n.value - floor + 999) / 1000 * 1000 ELSE 0 END) * interval '1 microsecond'
    FROM input, LATERAL (SELECT least(floor + cost, 9007199254740992) AS value) n
    WHERE clock_timestamp() <= $4::timestamptz
    ORDER BY key
    ON CONFLICT (key) DO UPDATE SET (value, expires_at) = (
        SELECT n.value, CASE
                WHEN c.expires_at <= statement_timestamp() THEN excluded.expires_at
                WHEN i.floor = 0 THEN c.expires_at
                ELSE statement_timestamp() + (i.ttl_us + (n.value - i.floor + 999) / 1000 * 1000)
                    * interval '1 microsecond' END
        FROM input i, LATERAL (SELECT CASE WHEN c.expires_at > statement_timestamp()
                THEN least(greatest(c.value, i.floor) + i.cost, 9007199254740992)
                ELSE excluded.value END AS value) n
        WHERE i.key = excluded.key)
    WHERE clock_timestamp() <= $4::timestamptz
    RETURNING c.key, c.value
), answer AS (
    SELECT i.ord, w.value FROM input i JOIN written w ON w.key = i.key
{answer_priors}), recorded AS (
    INSERT INTO {s}.calls (id, expires_at, applied, counts)
    SELECT $5::text::uuid, statement_timestamp() + $6::bigint * interval '1 microsecond', true,
        (SELECT coalesce(array_agg(value ORDER BY ord), '{}') FROM answer)
    WHERE NOT EXISTS (SELECT FROM earlier)
    RETURNING 1
{purge}), checked AS (
    SELECT {s}.tollgate_guard($4::timestamptz,
        (SELECT count(*) FROM written) + (SELECT count(*) FROM recorded),
        (SELECT count(*) FROM input) + (NOT EXISTS (SELECT FROM earlier))::int) AS ok
)
SELECT a.ord, a.value FROM checked, answer a WHERE checked.ok
UNION ALL
SELECT r.ord, r.value
FROM checked, earlier e, unnest(e.counts) WITH ORDINALITY AS r (value, ord)
WHERE checked.ok
ORDER BY 1";

/// `reserve`: $1 keys, $2 costs (at most `MAX_COUNT`), $3 lifetimes in µs,
/// $4 room (the largest count each cost fits on, -1 when it never fits),
/// $5 the deadline, $6 the call's id, $7 the record's lifetime in µs, $8
/// floors (0: none). Locks the existing counters, decides on each count
/// raised to its floor, then writes every counter or none: a new or
/// expired one starts at its floor plus the cost, a live one gets the cost
/// on its raised count and keeps its lifetime, unless it has a floor (then
/// it gets one afresh, as in [`COUNT_FLOORED`]). A counter absent when
/// locked but created concurrently
/// before the insert makes the guard raise a serialization failure (the
/// statement rolls back whole and is tried again). The inserts run before
/// the updates: a concurrent insert of the same key then finds the locked
/// row only locked, not updated by an open transaction, and does not wait
/// for it (which, while this statement waited for its own insert, would be
/// a deadlock). Records the decision and the counts answered, a refusal
/// too. Returns (ord, count, applied): the reservation's, or those recorded
/// by an earlier attempt. With priors ([`RESERVE_PRIORS`]), it decides on
/// each counter's room less its prior's weighed count
/// ([`DECISION_PRIORS`]), and returns each prior's count after the counts.
const RESERVE: &str = r"
WITH earlier AS (
    SELECT applied, counts FROM {s}.calls WHERE id = $6::text::uuid
), input AS (
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $3::bigint[], $4::bigint[], $8::bigint[])
        WITH ORDINALITY AS i (key, cost, ttl_us, room, floor, ord)
    WHERE NOT EXISTS (SELECT FROM earlier)
), locked AS (
    SELECT c.key, c.value, c.expires_at > statement_timestamp() AS live
    FROM {s}.counters c WHERE c.key = ANY ($1::bytea[]) AND NOT EXISTS (SELECT FROM earlier)
    ORDER BY c.key FOR UPDATE
{priors}), current AS (
    SELECT i.ord, i.key, i.room, i.floor, l.key IS NOT NULL AS present, v.value, a.after,
        statement_timestamp() + (i.ttl_us + CASE WHEN i.floor > 0
            THEN (a.after - i.floor + 999) / 1000 * 1000 ELSE 0 END)
            * interval '1 microsecond' AS expires_at
    FROM input i LEFT JOIN locked l ON l.key = i.key,
        LATERAL (SELECT CASE WHEN l.live THEN l.value ELSE 0 END AS value) v,
        LATERAL (SELECT least(greatest(v.value, i.floor) + i.cost, 9007199254740992) AS after) a
), decision AS (
{decision}), inserted AS (
    INSERT INTO {s}.counters (key, value, expires_at)
    SELECT key, after, expires_at
    FROM current
    WHERE NOT present AND (SELECT fits FROM decision) AND clock_timestamp() <= $5::timestamptz
    ORDER BY key
    ON CONFLICT (key) DO NOTHING
    RETURNING key, value
), updated AS (
    UPDATE {s}.counters c SET
        value = cur.after,
        expires_at = CASE WHEN c.expires_at > statement_timestamp() AND cur.floor = 0
            THEN c.expires_at ELSE cur.expires_at END
    FROM current cur
    WHERE c.key = cur.key AND cur.present AND (SELECT fits FROM decision)
        AND clock_timestamp() <= $5::timestamptz
        -- After every insert: see the note above.
        AND (SELECT count(*) FROM inserted) >= 0
    RETURNING c.key, c.value
), answer AS (
    SELECT cur.ord, coalesce(u.value, n.value, cur.value) AS value, d.fits
    FROM decision d, current cur
        LEFT JOIN updated u ON u.key = cur.key
        LEFT JOIN inserted n ON n.key = cur.key
{answer_priors}), recorded AS (
    INSERT INTO {s}.calls (id, expires_at, applied, counts)
    SELECT $6::text::uuid, statement_timestamp() + $7::bigint * interval '1 microsecond', d.fits,
        (SELECT coalesce(array_agg(value ORDER BY ord), '{}') FROM answer)
    FROM decision d
    WHERE NOT EXISTS (SELECT FROM earlier)
    RETURNING 1
{purge}), checked AS (
    SELECT {s}.tollgate_guard($5::timestamptz,
        (SELECT count(*) FROM updated) + (SELECT count(*) FROM inserted)
            + (SELECT count(*) FROM recorded),
        CASE WHEN (SELECT fits FROM decision) THEN (SELECT count(*) FROM input) ELSE 0 END
            + (NOT EXISTS (SELECT FROM earlier))::int) AS ok
)
SELECT a.ord, a.value, a.fits FROM checked, answer a WHERE checked.ok
UNION ALL
SELECT r.ord, r.value, e.applied
FROM checked, earlier e, unnest(e.counts) WITH ORDINALITY AS r (value, ord)
WHERE checked.ok
ORDER BY 1";

/// `refund`: $1 keys, $2 costs (at most `MAX_COUNT`), $3 the deadline, $4
/// the call's id, $5 the record's lifetime in µs, $6 floors (0: none).
/// Subtracts from live counters, never below 0 nor the counter's floor,
/// keeping their lifetime; an absent or expired counter is not written.
/// Records the counts. Returns (ord, count): the refund's, or those
/// recorded by an earlier attempt.
const REFUND: &str = r"
WITH earlier AS (
    SELECT applied, counts FROM {s}.calls WHERE id = $4::text::uuid
), input AS (
    SELECT * FROM unnest($1::bytea[], $2::bigint[], $6::bigint[])
        WITH ORDINALITY AS i (key, cost, floor, ord)
    WHERE NOT EXISTS (SELECT FROM earlier)
), locked AS (
    SELECT c.key FROM {s}.counters c
    WHERE c.key = ANY ($1::bytea[]) AND NOT EXISTS (SELECT FROM earlier)
    ORDER BY c.key FOR UPDATE
), updated AS (
    UPDATE {s}.counters c SET value = greatest(c.value - i.cost, i.floor, 0)
    FROM input i JOIN locked l ON l.key = i.key
    WHERE c.key = i.key AND c.expires_at > statement_timestamp()
        AND clock_timestamp() <= $3::timestamptz
    RETURNING c.key, c.value
), answer AS (
    SELECT i.ord, coalesce(u.value, 0) AS value FROM input i LEFT JOIN updated u ON u.key = i.key
), recorded AS (
    INSERT INTO {s}.calls (id, expires_at, applied, counts)
    SELECT $4::text::uuid, statement_timestamp() + $5::bigint * interval '1 microsecond', true,
        (SELECT coalesce(array_agg(value ORDER BY ord), '{}') FROM answer)
    WHERE NOT EXISTS (SELECT FROM earlier)
    RETURNING 1
{purge}), checked AS (
    SELECT {s}.tollgate_guard($3::timestamptz,
        (SELECT count(*) FROM updated) + (SELECT count(*) FROM recorded),
        (SELECT count(*) FROM updated) + (NOT EXISTS (SELECT FROM earlier))::int) AS ok
)
SELECT a.ord, a.value FROM checked, answer a WHERE checked.ok
UNION ALL
SELECT r.ord, r.value
FROM checked, earlier e, unnest(e.counts) WITH ORDINALITY AS r (value, ord)
WHERE checked.ok
ORDER BY 1";

/// `get`: $1 keys. Returns (ord, count or null).
const GET: &str = r"
SELECT i.ord, c.value
FROM unnest($1::bytea[]) WITH ORDINALITY AS i (key, ord)
    LEFT JOIN {s}.counters c ON c.key = i.key AND c.expires_at > statement_timestamp()
ORDER BY i.ord";

/// `delete`: $1 key, $2 the deadline. Returns whether a live counter was removed.
const DELETE: &str = r"
WITH deleted AS (
    DELETE FROM {s}.counters WHERE key = $1::bytea AND clock_timestamp() <= $2::timestamptz
    RETURNING expires_at > statement_timestamp() AS live
), checked AS (
    SELECT {s}.tollgate_guard($2::timestamptz,
        (SELECT count(*) FROM deleted), (SELECT count(*) FROM deleted)) AS ok
)
SELECT coalesce((SELECT bool_or(live) FROM deleted), false) FROM checked WHERE checked.ok";

/// `claim`: $1 key, $2 token, $3 lifetime in µs, $4 the deadline. Stores
/// the mark unless a live mark of another token holds the key (a live mark
/// of the same token is kept as it is). Returns 1 when the key holds the
/// token, else 0.
const CLAIM: &str = r"
WITH claimed AS (
    INSERT INTO {s}.marks AS m (key, token, expires_at)
    SELECT $1::bytea, $2::bytea, statement_timestamp() + $3::bigint * interval '1 microsecond'
    WHERE clock_timestamp() <= $4::timestamptz
    ON CONFLICT (key) DO UPDATE SET
        token = excluded.token,
        expires_at = CASE WHEN m.expires_at > statement_timestamp()
            THEN m.expires_at ELSE excluded.expires_at END
    WHERE (m.expires_at <= statement_timestamp() OR m.token = excluded.token)
        AND clock_timestamp() <= $4::timestamptz
    RETURNING 1
), checked AS (
    SELECT {s}.tollgate_guard($4::timestamptz,
        (SELECT count(*) FROM claimed), (SELECT count(*) FROM claimed)) AS ok
)
SELECT (SELECT count(*) FROM claimed) FROM checked WHERE checked.ok";

/// `finish`: $1 key, $2 token, $3 lifetime in µs, $4 the deadline, $5 the
/// done value. Sets the mark to done when it holds the token, nothing (or
/// an expired mark) or done already. Returns 1 when it did, else 0.
const FINISH: &str = r"
WITH finished AS (
    INSERT INTO {s}.marks AS m (key, token, expires_at)
    SELECT $1::bytea, $5::bytea, statement_timestamp() + $3::bigint * interval '1 microsecond'
    WHERE clock_timestamp() <= $4::timestamptz
    ON CONFLICT (key) DO UPDATE SET token = excluded.token, expires_at = excluded.expires_at
    WHERE (m.expires_at <= statement_timestamp() OR m.token = $2::bytea OR m.token = excluded.token)
        AND clock_timestamp() <= $4::timestamptz
    RETURNING 1
), checked AS (
    SELECT {s}.tollgate_guard($4::timestamptz,
        (SELECT count(*) FROM finished), (SELECT count(*) FROM finished)) AS ok
)
SELECT (SELECT count(*) FROM finished) FROM checked WHERE checked.ok";

/// `release`: $1 key, $2 token, $3 the deadline. Removes a live mark
/// holding the token. Returns 1 when it did, else 0.
const RELEASE: &str = r"
WITH released AS (
    DELETE FROM {s}.marks
    WHERE key = $1::bytea AND token = $2::bytea AND expires_at > statement_timestamp()
        AND clock_timestamp() <= $3::timestamptz
    RETURNING 1
), checked AS (
    SELECT {s}.tollgate_guard($3::timestamptz,
        (SELECT count(*) FROM released), (SELECT count(*) FROM released)) AS ok
)
SELECT (SELECT count(*) FROM released) FROM checked WHERE checked.ok";

/// The sweep: $1 the most rows to remove from each table. Skips rows
/// another call holds, and checks the expiry again on the row it deletes
/// (a counter replaced since is live again). Returns (counters, marks,
/// call records).
const SWEEP: &str = r"
WITH counters AS (
    DELETE FROM {s}.counters c
    WHERE c.key IN (SELECT key FROM {s}.counters WHERE expires_at <= clock_timestamp()
                    LIMIT $1::bigint FOR UPDATE SKIP LOCKED)
        AND c.expires_at <= clock_timestamp()
    RETURNING 1
), marks AS (
    DELETE FROM {s}.marks m
    WHERE m.key IN (SELECT key FROM {s}.marks WHERE expires_at <= clock_timestamp()
                    LIMIT $1::bigint FOR UPDATE SKIP LOCKED)
        AND m.expires_at <= clock_timestamp()
    RETURNING 1
), calls AS ({purge_sweep}
)
SELECT (SELECT count(*) FROM counters), (SELECT count(*) FROM marks),
    (SELECT count(*) FROM calls)";

/// The priors of a count (the plain or floored statement's `{priors}`):
/// `{keys}` their keys, in the order of their counters. Each one's count,
/// 0 when absent or expired, read from the statement's snapshot (under
/// READ COMMITTED, the counts committed when the statement began): never
/// locked nor written, its lifetime left alone. The prior of the `n`th
/// counter that has one answers at ordinal `cardinality($1) + n`, after
/// every count.
///
/// The keys are unnested through a sub-select, `(SELECT {keys})`, so that
/// the server estimates their number alike whether it plans the statement
/// for the call's values (a custom plan) or for any (the generic plan):
/// the default of 10, not the call's 1. Otherwise the prior probes would
/// make the generic plan look far costlier than a custom plan of a small
/// batch, and the server would plan the statement anew at every call
/// (measured: a reservation of one counter with a prior at a third of the
/// throughput, each call planned in about 3 ms); as it is, the server
/// chooses between the two as it does for the statement without priors.
const COUNT_PRIORS: &str = r"), priors AS (
    SELECT p.n, coalesce(c.value, 0) AS value
    FROM unnest((SELECT {keys}::bytea[])) WITH ORDINALITY AS p (key, n)
        LEFT JOIN {s}.counters c ON c.key = p.key AND c.expires_at > statement_timestamp()
    WHERE NOT EXISTS (SELECT FROM earlier)
";

/// The priors of a reservation (its `{priors}`), read as a count's
/// ([`COUNT_PRIORS`]): $9 their keys, $10 the ordinal of each one's
/// counter, $11 and $12 the part and whole each one's count is weighed
/// by (`whole` in 1..=`Window::MAX_SECS` and `part <= whole`, checked by
/// the store): `floor(count × part / whole)` exact in bigint, as
/// `(count / whole) × part + (count % whole) × part / whole`, whose terms
/// stay below 2^53 and 2^50 for counts up to 2^53. The keys go through a
/// sub-select as in [`COUNT_PRIORS`] (a multi-array `unnest` is estimated
/// at its longest array's length).
const RESERVE_PRIORS: &str = r"), priors AS (
    SELECT p.n, p.at, v.value,
        (v.value / p.whole) * p.part + ((v.value % p.whole) * p.part) / p.whole AS weighed
    FROM unnest((SELECT $9::bytea[]), $10::bigint[], $11::bigint[], $12::bigint[])
            WITH ORDINALITY AS p (key, at, part, whole, n)
        LEFT JOIN {s}.counters c ON c.key = p.key AND c.expires_at > statement_timestamp(),
        LATERAL (SELECT coalesce(c.value, 0) AS value) v
    WHERE NOT EXISTS (SELECT FROM earlier)
";

/// A reservation's `{decision}` without priors: every raised count within
/// its room.
const DECISION: &str = r"    SELECT coalesce(bool_and(greatest(value, floor) <= room), true) AS fits FROM current
";

/// A reservation's `{decision}` with priors: a counter with one fits when
/// its raised count is within its room less the prior's weighed count,
/// `g <= (max − cost) − w`, which is `g + cost <= max − w`; or when
/// `g + cost` is 0, which fits any max, even one the weight brings below
/// 0 ([`Counter::fits_after`](tollgate_core::Counter::fits_after)
/// saturates). No overflow: the room is at least -1 and `w` at most 2^53.
const DECISION_PRIORS: &str = r"    SELECT coalesce(bool_and(greatest(cur.value, cur.floor) <= cur.room - coalesce(p.weighed, 0)
            OR cur.after = 0), true) AS fits
    FROM current cur LEFT JOIN priors p ON p.at = cur.ord
";

/// The priors' counts a count answers (its `{answer_priors}`), after
/// every counter's: recorded with them, so that a retry answers them too.
const COUNT_ANSWER_PRIORS: &str = r"    UNION ALL
    SELECT cardinality($1::bytea[]) + p.n, p.value FROM priors p
";

/// The priors' counts a reservation answers, after every counter's.
const RESERVE_ANSWER_PRIORS: &str = r"    UNION ALL
    SELECT cardinality($1::bytea[]) + p.n, p.value, d.fits FROM decision d, priors p
";

/// `count` or `reserve` of a batch with a [`lease`](tollgate_core::Counter::lease)
/// counter: one call of the schema's `tollgate_leased` function (see
/// `schema.rs`), so one statement and one transaction, on the server's
/// clock: now is `clock_timestamp()` once the batch's rows are locked (not
/// `statement_timestamp()`, earlier than the leases a call that held the
/// locks meanwhile took). $1 whether it reserves, $2 keys, $3
/// costs, $4 lifetimes in µs, $5 rooms (as [`RESERVE`]'s), $6 floors, $7
/// which counters are lease counters, $8 to $11 the priors (keys, the
/// ordinal of each one's counter, part and whole, as [`RESERVE_PRIORS`]),
/// $12 the deadline, $13 the call's id, $14 the record's lifetime in µs,
/// $15 whether it also purges up to [`PURGE_BATCH`] expired call records.
///
/// The function answers an earlier attempt's record when it finds one;
/// otherwise it writes every counter's row it lacks (expired, so absent to
/// every other statement) and locks them all in key order (`FOR UPDATE`):
/// the row of a set of leases is its lock, so two calls on one set run one
/// after the other, and a set never holds more leases than its max. It
/// then removes each set's expired leases, decides (a lease counter fits
/// when its live leases plus 1 are within its max), and when it applies,
/// adds each cost and takes each set's lease `$13` (kept as it is when the
/// set holds it). Each set's row then holds its count and lives until its
/// last lease ends (or goes, with no lease left). It records and returns
/// (ord, count, applied): the counts, the priors' counts, then per lease
/// counter the ms until the set's first lease ends (rounded up; 0: none)
/// and how many expired leases it removed. Like the guard, it raises
/// `TG001` (rolling back the statement) when it ends past the deadline.
/// Calls without a lease counter run the statements above, unchanged.
const LEASED: &str = r"
SELECT ord, value, applied FROM {s}.tollgate_leased($1::boolean, $2::bytea[], $3::bigint[],
    $4::bigint[], $5::bigint[], $6::bigint[], $7::boolean[], $8::bytea[], $9::bigint[],
    $10::bigint[], $11::bigint[], $12::timestamptz, $13::text::uuid, $14::bigint,
    $15::boolean)";

/// `end_lease` ($3 null) and `renew_lease` ($3 the new lifetime in µs): $1
/// the set's key, $2 the lease's id, $4 the deadline. Locks the set's row,
/// removes its expired leases, then the lease (or renews it), and keeps
/// the row's count and lifetime. Returns whether the lease was held.
const LEASE: &str = r"
SELECT {s}.tollgate_lease($1::bytea, $2::text::uuid, $3::bigint, $4::timestamptz)";

/// `leases`: $1 the set's key. Reads, without locking or writing: the live
/// leases and the µs until the first ends.
const LEASES: &str = r"
SELECT count(*), coalesce((extract(epoch FROM min(l.ends_at) - statement_timestamp())
        * 1000000)::bigint, 0)
FROM {s}.leases l WHERE l.key = $1::bytea AND l.ends_at > statement_timestamp()";

/// The counter statements of one schema, all without purging or all with.
#[derive(Clone, Debug)]
pub(crate) struct Counters {
    /// The count of a batch with no floor and no prior.
    pub(crate) count: String,
    /// The count of a batch with a floor on some counter and no prior.
    pub(crate) count_floored: String,
    /// The count of a batch with a prior on some counter and no floor:
    /// [`COUNT`]'s parameters, then $7 the priors' keys.
    pub(crate) count_priors: String,
    /// The count of a batch with both: [`COUNT_FLOORED`]'s parameters,
    /// then $8 the priors' keys.
    pub(crate) count_floored_priors: String,
    /// The reservation of a batch with no prior.
    pub(crate) reserve: String,
    /// The reservation of a batch with a prior on some counter:
    /// [`RESERVE`]'s parameters, then [`RESERVE_PRIORS`]'.
    pub(crate) reserve_priors: String,
    /// The refund (which ignores priors).
    pub(crate) refund: String,
}

/// The statements of one schema.
#[derive(Clone, Debug)]
pub(crate) struct Statements {
    /// The counter statements most calls run.
    pub(crate) counters: Counters,
    /// The counter statements that also purge expired call records.
    pub(crate) purging: Counters,
    pub(crate) get: String,
    pub(crate) delete: String,
    pub(crate) claim: String,
    pub(crate) finish: String,
    pub(crate) release: String,
    pub(crate) sweep: String,
    /// A count or reservation with a lease counter ([`LEASED`]).
    pub(crate) leased: String,
    /// `end_lease` and `renew_lease` ([`LEASE`]).
    pub(crate) lease: String,
    /// `leases` ([`LEASES`]).
    pub(crate) leases: String,
}

impl Statements {
    /// The statements on the schema `quoted` (a quoted identifier).
    pub(crate) fn new(quoted: &str) -> Statements {
        let purge = PURGE.replace("{limit}", &PURGE_BATCH.to_string());
        let purged = format!("), purged AS ({purge}\n");
        // A template with its priors' parts (`{priors}`, `{decision}`,
        // `{answer_priors}`; none for a batch without priors), then the
        // purge's, then the schema.
        let on = |sql: &str, priors: [&str; 3], purging: bool| {
            let purge = if purging { purged.as_str() } else { "" };
            sql.replace("{priors}", priors[0])
                .replace("{decision}", priors[1])
                .replace("{answer_priors}", priors[2])
                .replace("{purge}", purge)
                .replace("{purge_sweep}", &PURGE.replace("{limit}", "$1::bigint"))
                .replace("{s}", quoted)
        };
        let none = ["", DECISION, ""];
        let count = [COUNT_PRIORS, "", COUNT_ANSWER_PRIORS];
        let reserve = [RESERVE_PRIORS, DECISION_PRIORS, RESERVE_ANSWER_PRIORS];
        let counters = |purging: bool| Counters {
            count: on(COUNT, none, purging),
            count_floored: on(COUNT_FLOORED, none, purging),
            count_priors: on(COUNT, count, purging).replace("{keys}", "$7"),
            count_floored_priors: on(COUNT_FLOORED, count, purging).replace("{keys}", "$8"),
            reserve: on(RESERVE, none, purging),
            reserve_priors: on(RESERVE, reserve, purging),
            refund: on(REFUND, none, purging),
        };
        Statements {
            counters: counters(false),
            purging: counters(true),
            get: on(GET, none, false),
            delete: on(DELETE, none, false),
            claim: on(CLAIM, none, false),
            finish: on(FINISH, none, false),
            release: on(RELEASE, none, false),
            sweep: on(SWEEP, none, false),
            leased: on(LEASED, none, false),
            lease: on(LEASE, none, false),
            leases: on(LEASES, none, false),
        }
    }
}
