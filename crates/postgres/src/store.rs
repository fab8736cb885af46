//! [`PostgresStore`]: the handle, and the [`CounterStore`] and
//! [`MarkStore`] calls.

use std::fmt;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use tokio_postgres::Row;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
use tollgate_core::{
    CheckId, Claim, Counter, CounterStore, Deadline, Leases, MARK_DONE, MAX_COUNT, MarkStore,
    Named, Reservation, StoreError, Window, async_trait,
};

use crate::shared::Shared;
use crate::sql::Counters;
use crate::{Error, PostgresOptions, error, sweep};

/// A [`CounterStore`] and [`MarkStore`] in PostgreSQL: one statement per
/// call, row locks for atomicity, the call's deadline checked by the
/// server's clock.
///
/// Cheap to clone: clones share one connection pool. Several stores, in one
/// process or several, may use the same schema; each check is atomic
/// across all of them. Dropping the last clone stops the background sweep
/// and closes the pool's connections.
///
/// ```no_run
/// # async fn demo() -> Result<(), Box<dyn std::error::Error>> {
/// use tollgate_core::{Limiter, RuleSet};
/// use tollgate_postgres::PostgresStore;
///
/// let store = PostgresStore::open("postgres://app@db.internal/app").await?;
/// let limiter = Limiter::new(store);
/// let ask = RuleSet::defaults().get("ask")?.limit(&["docs", "203.0.113.9"])?;
/// let verdict = limiter.count(&[ask]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    shared: Arc<Shared>,
}

impl PostgresStore {
    /// Connects to `url` (`postgres://` or `postgresql://`) with the default
    /// [`PostgresOptions`] and checks the schema `tollgate`, creating it on
    /// first use.
    ///
    /// # Errors
    ///
    /// An [`Error`] when the URL is invalid, the server cannot be reached
    /// or refuses the login, or the schema belongs to another version or
    /// application.
    pub async fn open(url: &str) -> Result<PostgresStore, Error> {
        PostgresStore::open_with(url, PostgresOptions::default()).await
    }

    /// Connects to `url` with `options` and checks (or creates) the schema.
    ///
    /// # Errors
    ///
    /// As [`PostgresStore::open`], and [`Error::InvalidSchema`] or
    /// [`Error::InvalidOption`] for invalid options.
    pub async fn open_with(url: &str, options: PostgresOptions) -> Result<PostgresStore, Error> {
        let shared = Arc::new(Shared::new(url, options)?);
        shared.prepare().await?;
        Ok(PostgresStore { shared })
    }

    /// Checks `url` and `options` now and returns a store that connects and
    /// checks (or creates) the schema on its first call, for callers that
    /// cannot wait at startup (a synchronous constructor, outside a
    /// runtime). A failure of that first preparation is the call's
    /// [`StoreError::Connection`] (transient; the next call tries again), or
    /// [`StoreError::Backend`] when the schema is refused.
    ///
    /// # Errors
    ///
    /// An [`Error`] when the URL or an option is invalid.
    pub fn connect_lazy(url: &str, options: PostgresOptions) -> Result<PostgresStore, Error> {
        Ok(PostgresStore {
            shared: Arc::new(Shared::new(url, options)?),
        })
    }

    /// The schema holding the store's tables.
    pub fn schema(&self) -> &str {
        &self.shared.options.schema
    }

    /// Removes at most the sweep's batch of expired counters and marks
    /// now (the background sweep does this every interval); how many.
    ///
    /// The store sets no time limit on it: it waits for a connection and
    /// for the server as long as it is awaited. Bound it with a timeout of
    /// your own; a sweep dropped before its reply closes its connection.
    ///
    /// # Errors
    ///
    /// A [`StoreError`] when the server fails.
    pub async fn sweep(&self) -> Result<u64, StoreError> {
        self.shared.ensure_ready().await?;
        let shared = &self.shared;
        sweep::sweep(
            &shared.pool,
            &shared.sql.sweep,
            shared.options.sweep_batch,
            None,
        )
        .await
    }

    /// What a counter call records its id by: the id as 32 hex digits and
    /// the record's lifetime in µs (the check's budget and the skew margin:
    /// past it no attempt of the call is applied); and whether the call is
    /// the one in [`PURGE_EVERY`] of this store (and its clones) that runs
    /// the statement's purging variant.
    fn record(&self, id: CheckId, deadline: Deadline) -> (String, i64, bool) {
        let calls = self.shared.counter_calls.fetch_add(1, Ordering::Relaxed);
        let lifetime = deadline
            .check_budget()
            .saturating_add(Deadline::SKEW_MARGIN);
        (
            id.to_string(),
            micros(lifetime),
            calls % PURGE_EVERY == PURGE_EVERY - 1,
        )
    }

    /// The counter statements a call runs: their purging variants when
    /// [`record`](PostgresStore::record) says so.
    fn counters(&self, purge: bool) -> &Counters {
        if purge {
            &self.shared.sql.purging
        } else {
            &self.shared.sql.counters
        }
    }

    /// Runs a counter statement, again while it fails only because it
    /// raced another call and applied nothing: a counter created
    /// concurrently (a serialization failure from the guard), or another
    /// attempt of the same call that recorded it first (a unique violation
    /// on the record's id; run again, the statement finds that record).
    async fn write(
        &self,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
        deadline: Deadline,
        started: Instant,
    ) -> Result<Vec<Row>, StoreError> {
        loop {
            match self.shared.query(sql, params, deadline, started).await? {
                Ok(rows) => return Ok(rows),
                Err(err) if raced(&err) && !deadline.has_passed() => {
                    tracing::trace!("tollgate-postgres: a counter call raced another; again");
                }
                Err(err) => return Err(error::from_pg(err, started)),
            }
        }
    }

    /// The rows of a reservation without a lease counter: its statement,
    /// with priors or without.
    async fn reserve_counts(
        &self,
        counters: &[Counter],
        priors: &Priors<'_>,
        id: CheckId,
        deadline: Deadline,
        started: Instant,
    ) -> Result<Vec<Row>, StoreError> {
        let (keys, costs, ttls) = columns(counters);
        let rooms: Vec<i64> = counters.iter().map(room).collect();
        let floors = floors(counters);
        let cutoff = cutoff(deadline);
        let (id, lifetime, purge) = self.record(id, deadline);
        let sql = self.counters(purge);
        let params: [&(dyn ToSql + Sync); 8] = [
            &keys, &costs, &ttls, &rooms, &cutoff, &id, &lifetime, &floors,
        ];
        if priors.is_empty() {
            self.write(&sql.reserve, &params, deadline, started).await
        } else {
            let params: Vec<&(dyn ToSql + Sync)> =
                params.into_iter().chain(priors.params()).collect();
            self.write(&sql.reserve_priors, &params, deadline, started)
                .await
        }
    }

    /// The rows of a count (`reserving` false) or reservation of a batch
    /// with a lease counter: one statement ([`LEASED`](crate::sql)),
    /// answering (ordinal, count, applied).
    async fn leased(
        &self,
        reserving: bool,
        counters: &[Counter],
        priors: &Priors<'_>,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<Row>, StoreError> {
        let started = Instant::now();
        let (keys, costs, ttls) = columns(counters);
        let rooms: Vec<i64> = counters.iter().map(room).collect();
        let floors = floors(counters);
        let leases: Vec<bool> = counters.iter().map(|c| c.lease).collect();
        let cutoff = cutoff(deadline);
        let (id, lifetime, purge) = self.record(id, deadline);
        let params: [&(dyn ToSql + Sync); 15] = [
            &reserving,
            &keys,
            &costs,
            &ttls,
            &rooms,
            &floors,
            &leases,
            &priors.keys,
            &priors.at,
            &priors.parts,
            &priors.wholes,
            &cutoff,
            &id,
            &lifetime,
            &purge,
        ];
        self.write(&self.shared.sql.leased, &params, deadline, started)
            .await
    }

    /// Ends (`lifetime` None) or renews the lease `id` at `key`; whether
    /// it was held.
    async fn lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Option<Duration>,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let started = Instant::now();
        let (key, id, cutoff) = (key.as_bytes(), id.to_string(), cutoff(deadline));
        let lifetime = lifetime.map(micros);
        let sql = &self.shared.sql.lease;
        let rows = self
            .write(sql, &[&key, &id, &lifetime, &cutoff], deadline, started)
            .await?;
        one(&rows)?.try_get(0).map_err(bad_row)
    }

    /// Runs a statement returning rows; its own failure mapped as the others.
    async fn rows(
        &self,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
        deadline: Deadline,
        started: Instant,
    ) -> Result<Vec<Row>, StoreError> {
        self.shared
            .query(sql, params, deadline, started)
            .await?
            .map_err(|e| error::from_pg(e, started))
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("target", &self.shared.target)
            .field("schema", &self.shared.options.schema)
            .field("pool_size", &self.shared.options.pool_size)
            .finish()
    }
}

impl Named for PostgresStore {
    fn name(&self) -> &'static str {
        "postgres"
    }
}

#[async_trait]
impl CounterStore for PostgresStore {
    async fn count(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let started = Instant::now();
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let priors = Priors::of(counters)?;
        if leased(counters)? {
            let rows = self.leased(false, counters, &priors, id, deadline).await?;
            return counts(&rows, reply_len(counters, &priors));
        }
        let (keys, costs, ttls) = columns(counters);
        let cutoff = cutoff(deadline);
        let (id, lifetime, purge) = self.record(id, deadline);
        let sql = self.counters(purge);
        let floors = counters
            .iter()
            .any(|c| c.floor > 0)
            .then(|| floors(counters));
        let params: [&(dyn ToSql + Sync); 6] = [&keys, &costs, &ttls, &cutoff, &id, &lifetime];
        let rows = match (&floors, priors.is_empty()) {
            (None, true) => self.write(&sql.count, &params, deadline, started).await?,
            (Some(floors), true) => {
                let params: [&(dyn ToSql + Sync); 7] =
                    [&keys, &costs, &ttls, &cutoff, &id, &lifetime, floors];
                self.write(&sql.count_floored, &params, deadline, started)
                    .await?
            }
            (floors, false) => {
                // The floors of a floored batch, then the priors' keys.
                let (sql, floors) = match floors {
                    None => (&sql.count_priors, None),
                    Some(floors) => (&sql.count_floored_priors, Some(floors)),
                };
                let floors = floors.map(|f| f as &(dyn ToSql + Sync));
                let keys: &(dyn ToSql + Sync) = &priors.keys;
                let params: Vec<&(dyn ToSql + Sync)> =
                    params.into_iter().chain(floors).chain([keys]).collect();
                self.write(sql, &params, deadline, started).await?
            }
        };
        counts(&rows, counters.len() + priors.len())
    }

    async fn reserve(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Reservation, StoreError> {
        let started = Instant::now();
        if counters.is_empty() {
            return Ok(Reservation {
                applied: true,
                counts: Vec::new(),
            });
        }
        let priors = Priors::of(counters)?;
        let rows = if leased(counters)? {
            self.leased(true, counters, &priors, id, deadline).await?
        } else {
            self.reserve_counts(counters, &priors, id, deadline, started)
                .await?
        };
        let counts = counts(&rows, reply_len(counters, &priors))?;
        let mut applied = None;
        for row in &rows {
            let fits: bool = row.try_get(2).map_err(bad_row)?;
            if applied.is_some_and(|a| a != fits) {
                return Err(error::invalid("a reservation both applied and refused"));
            }
            applied = Some(fits);
        }
        Ok(Reservation {
            applied: applied.unwrap_or(false),
            counts,
        })
    }

    async fn refund(
        &self,
        counters: &[Counter],
        id: CheckId,
        deadline: Deadline,
    ) -> Result<Vec<u64>, StoreError> {
        let started = Instant::now();
        if counters.is_empty() {
            return Ok(Vec::new());
        }
        let (keys, mut costs, _) = columns(counters);
        // A lease counter is left as it is (a cost of 0 writes nothing new)
        // and answers its row's count: its leases at its last call.
        for (cost, counter) in costs.iter_mut().zip(counters) {
            if counter.lease {
                *cost = 0;
            }
        }
        let floors = floors(counters);
        let cutoff = cutoff(deadline);
        let (id, lifetime, purge) = self.record(id, deadline);
        let sql = &self.counters(purge).refund;
        let params: [&(dyn ToSql + Sync); 6] = [&keys, &costs, &cutoff, &id, &lifetime, &floors];
        let rows = self.write(sql, &params, deadline, started).await?;
        counts(&rows, counters.len())
    }

    async fn get(&self, keys: &[String], deadline: Deadline) -> Result<Vec<u64>, StoreError> {
        let started = Instant::now();
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let bytes: Vec<&[u8]> = keys.iter().map(|k| k.as_bytes()).collect();
        let rows = self
            .rows(&self.shared.sql.get, &[&bytes], deadline, started)
            .await?;
        counts(&rows, keys.len())
    }

    async fn delete(&self, key: &str, deadline: Deadline) -> Result<bool, StoreError> {
        let started = Instant::now();
        let (key, cutoff) = (key.as_bytes(), cutoff(deadline));
        let sql = &self.shared.sql.delete;
        let rows = self.rows(sql, &[&key, &cutoff], deadline, started).await?;
        one(&rows)?.try_get(0).map_err(bad_row)
    }

    async fn end_lease(
        &self,
        key: &str,
        id: CheckId,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        self.lease(key, id, None, deadline).await
    }

    async fn renew_lease(
        &self,
        key: &str,
        id: CheckId,
        lifetime: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        self.lease(key, id, Some(lifetime), deadline).await
    }

    async fn leases(&self, key: &str, deadline: Deadline) -> Result<Leases, StoreError> {
        let started = Instant::now();
        let key = key.as_bytes();
        let sql = &self.shared.sql.leases;
        let rows = self.rows(sql, &[&key], deadline, started).await?;
        let row = one(&rows)?;
        let held: i64 = row.try_get(0).map_err(bad_row)?;
        let first: i64 = row.try_get(1).map_err(bad_row)?;
        let (Ok(held), Ok(first)) = (u64::try_from(held), u64::try_from(first)) else {
            return Err(error::invalid(format!(
                "leases {held}, first ends in {first} µs"
            )));
        };
        Ok(Leases {
            held,
            first_ends: Duration::from_millis(first.div_ceil(1_000)),
        })
    }
}

#[async_trait]
impl MarkStore for PostgresStore {
    async fn claim(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<Claim, StoreError> {
        let started = Instant::now();
        let (key, token, ttl, cutoff) = (
            key.as_bytes(),
            token.as_bytes(),
            micros(ttl),
            cutoff(deadline),
        );
        let sql = &self.shared.sql.claim;
        let rows = self
            .rows(sql, &[&key, &token, &ttl, &cutoff], deadline, started)
            .await?;
        Ok(if flag(&rows)? {
            Claim::Acquired
        } else {
            Claim::Held
        })
    }

    async fn finish(
        &self,
        key: &str,
        token: &str,
        ttl: Duration,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let started = Instant::now();
        let (key, token, ttl, cutoff) = (
            key.as_bytes(),
            token.as_bytes(),
            micros(ttl),
            cutoff(deadline),
        );
        let done = MARK_DONE.as_bytes();
        let sql = &self.shared.sql.finish;
        let rows = self
            .rows(
                sql,
                &[&key, &token, &ttl, &cutoff, &done],
                deadline,
                started,
            )
            .await?;
        flag(&rows)
    }

    async fn release(
        &self,
        key: &str,
        token: &str,
        deadline: Deadline,
    ) -> Result<bool, StoreError> {
        let started = Instant::now();
        let (key, token, cutoff) = (key.as_bytes(), token.as_bytes(), cutoff(deadline));
        let sql = &self.shared.sql.release;
        let rows = self
            .rows(sql, &[&key, &token, &cutoff], deadline, started)
            .await?;
        flag(&rows)
    }
}

/// Counter calls of a store after which one purges expired call records,
/// up to [`PURGE_BATCH`](crate::sql::PURGE_BATCH) (twice as many as were
/// written meanwhile): so expired records never pile up, with or without
/// the background sweep, and the other calls run no purge at all. Not a
/// time budget.
const PURGE_EVERY: u64 = 32;

/// Whether a counter statement failed only because it raced another call,
/// applying nothing: the guard's serialization failure (a counter created
/// concurrently), or a unique violation on a call record's id (another
/// attempt of the same call recorded it first).
fn raced(err: &tokio_postgres::Error) -> bool {
    match err.code() {
        Some(code) if *code == SqlState::T_R_SERIALIZATION_FAILURE => true,
        // A deadlock's victim rolls back whole, having applied nothing.
        Some(code) if *code == SqlState::T_R_DEADLOCK_DETECTED => true,
        Some(code) if *code == SqlState::UNIQUE_VIOLATION => {
            err.as_db_error().and_then(|db| db.constraint()) == Some("calls_pkey")
        }
        _ => false,
    }
}

/// The longest lifetime written: 10,000 days (the core's are at most two
/// windows). Not a time budget: a clamp of any `Duration` to what
/// `statement_timestamp()` plus a lifetime can hold in a `timestamptz`.
const MAX_TTL: Duration = Duration::from_secs(10_000 * 86_400);

/// Whether the batch has a [`lease`](Counter::lease) counter; a malformed
/// call when one has a cost other than 1, a floor or a prior.
fn leased(counters: &[Counter]) -> Result<bool, StoreError> {
    let mut any = false;
    for (i, c) in counters.iter().enumerate().filter(|(_, c)| c.lease) {
        if c.cost != 1 || c.floor != 0 || c.prior.is_some() {
            return Err(StoreError::Backend(
                format!(
                    "malformed call: lease counter {} has cost {}, floor {} and {} prior; \
                     expected cost 1, floor 0 and no prior",
                    i + 1,
                    c.cost,
                    c.floor,
                    if c.prior.is_some() { "a" } else { "no" }
                )
                .into(),
            ));
        }
        any = true;
    }
    Ok(any)
}

/// The length of a count's or reservation's reply: the counts, the
/// priors' counts, and two numbers per lease counter.
fn reply_len(counters: &[Counter], priors: &Priors<'_>) -> usize {
    counters.len() + priors.len() + 2 * counters.iter().filter(|c| c.lease).count()
}

/// The keys, costs (saturated at [`MAX_COUNT`], which changes no result)
/// and lifetimes of a batch, as statement arrays.
fn columns(counters: &[Counter]) -> (Vec<&[u8]>, Vec<i64>, Vec<i64>) {
    let keys = counters.iter().map(|c| c.key.as_bytes()).collect();
    let costs = counters
        .iter()
        .map(|c| bigint(c.cost.min(MAX_COUNT)))
        .collect();
    let ttls = counters.iter().map(|c| micros(c.ttl)).collect();
    (keys, costs, ttls)
}

/// The floors of a batch, as a statement array: at most [`MAX_COUNT`] (a
/// floor above it raises every count to 2^53, as [`MAX_COUNT`] does).
fn floors(counters: &[Counter]) -> Vec<i64> {
    counters
        .iter()
        .map(|c| bigint(c.floor.min(MAX_COUNT)))
        .collect()
}

/// The largest count on which `counter`'s cost [`fits`](Counter::fits),
/// saturated at `i64::MAX` (every stored count fits below it); -1 when the
/// cost is above the max and never fits.
fn room(counter: &Counter) -> i64 {
    match counter.max.checked_sub(counter.cost) {
        Some(room) => bigint(room),
        None => -1,
    }
}

/// The priors of a batch, as statement arrays: one entry per counter that
/// has a [`prior`](Counter::prior), in counter order.
struct Priors<'a> {
    /// The prior counters' keys.
    keys: Vec<&'a [u8]>,
    /// The ordinal (from 1) of each one's counter in the batch.
    at: Vec<i64>,
    /// The part and the whole each one's count is weighed by.
    parts: Vec<i64>,
    wholes: Vec<i64>,
}

impl<'a> Priors<'a> {
    /// The priors of `counters`; a malformed call when one is out of the
    /// contract's bounds (`whole` 0 or above [`Window::MAX_SECS`], `part`
    /// above `whole`), within which the statement's weighing is exact and
    /// cannot overflow.
    fn of(counters: &'a [Counter]) -> Result<Priors<'a>, StoreError> {
        let mut priors = Priors {
            keys: Vec::new(),
            at: Vec::new(),
            parts: Vec::new(),
            wholes: Vec::new(),
        };
        for (i, counter) in counters.iter().enumerate() {
            let Some(prior) = &counter.prior else {
                continue;
            };
            let (part, whole) = (prior.part, prior.whole);
            if !(1..=Window::MAX_SECS).contains(&whole) || part > whole {
                return Err(StoreError::Backend(
                    format!(
                        "malformed call: the prior of counter {} is weighed {part}/{whole}; \
                         expected a whole of 1 to {} and a part of at most the whole",
                        i + 1,
                        Window::MAX_SECS
                    )
                    .into(),
                ));
            }
            priors.keys.push(prior.key.as_bytes());
            priors.at.push(bigint(i as u64 + 1));
            priors.parts.push(bigint(part));
            priors.wholes.push(bigint(whole));
        }
        Ok(priors)
    }

    fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    fn len(&self) -> usize {
        self.keys.len()
    }

    /// The reservation's prior parameters, $9 to $12.
    fn params(&self) -> [&(dyn ToSql + Sync); 4] {
        [&self.keys, &self.at, &self.parts, &self.wholes]
    }
}

fn bigint(n: u64) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn micros(ttl: Duration) -> i64 {
    bigint(u64::try_from(ttl.min(MAX_TTL).as_micros()).unwrap_or(u64::MAX))
}

/// The call's deadline (with the skew margin) as the server compares it.
fn cutoff(deadline: Deadline) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(deadline.cutoff_unix_millis())
}

/// The counts of `rows` (ordinal, count or null), one per counter in order.
fn counts(rows: &[Row], expected: usize) -> Result<Vec<u64>, StoreError> {
    if rows.len() != expected {
        return Err(error::invalid(format!(
            "{} rows for {expected} counters",
            rows.len()
        )));
    }
    rows.iter()
        .enumerate()
        .map(|(i, row)| {
            let ord: i64 = row.try_get(0).map_err(bad_row)?;
            if usize::try_from(ord).ok() != Some(i + 1) {
                return Err(error::invalid(format!("row {i} has ordinal {ord}")));
            }
            let count: Option<i64> = row.try_get(1).map_err(bad_row)?;
            match u64::try_from(count.unwrap_or(0)) {
                Ok(count) if count <= MAX_COUNT => Ok(count),
                _ => Err(error::invalid(format!("count {count:?} out of range"))),
            }
        })
        .collect()
}

/// The one row of a statement answering one value.
fn one(rows: &[Row]) -> Result<&Row, StoreError> {
    match rows {
        [row] => Ok(row),
        _ => Err(error::invalid(format!(
            "{} rows for one answer",
            rows.len()
        ))),
    }
}

/// The answer of a mark statement: how many marks it wrote, 0 or 1.
fn flag(rows: &[Row]) -> Result<bool, StoreError> {
    match one(rows)?.try_get::<_, i64>(0).map_err(bad_row)? {
        0 => Ok(false),
        1 => Ok(true),
        n => Err(error::invalid(format!("{n} marks written for one key"))),
    }
}

fn bad_row(err: tokio_postgres::Error) -> StoreError {
    error::invalid(err.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn counter(cost: u64, max: u64) -> Counter {
        Counter {
            key: "k".into(),
            ttl: Duration::from_secs(60),
            cost,
            max,
            floor: 0,
            prior: None,
            lease: false,
        }
    }

    #[test]
    fn room_is_exact_where_fits_decides() {
        for (cost, max) in [
            (1, 10),
            (10, 10),
            (11, 10),
            (u64::MAX, u64::MAX),
            (1, u64::MAX),
            (MAX_COUNT, MAX_COUNT),
        ] {
            let c = counter(cost, max);
            let room = room(&c);
            for count in [0, 1, 9, 10, MAX_COUNT - 1, MAX_COUNT] {
                let stored = i64::try_from(count).unwrap_or(i64::MAX);
                assert_eq!(
                    stored <= room,
                    c.fits(count),
                    "cost {cost}, max {max}, count {count}"
                );
            }
        }
    }

    #[test]
    fn lifetimes_and_costs_saturate() {
        assert_eq!(micros(Duration::from_millis(1500)), 1_500_000);
        assert_eq!(micros(Duration::MAX), micros(MAX_TTL));
        let (_, costs, _) = columns(&[counter(u64::MAX, 1)]);
        assert_eq!(costs, [MAX_COUNT as i64]);
    }
}
