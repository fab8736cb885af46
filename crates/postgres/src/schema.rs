//! The versioned schema: checked, or created on first open, under an
//! advisory lock so that several instances starting at once agree.

use tokio_postgres::Client;

use crate::Error;

/// The schema version this crate reads and writes, kept in the one row of
/// the schema's `tollgate_schema` table.
pub const SCHEMA_VERSION: i32 = 1;

/// What recent counter calls applied, by id, so that a retried attempt is
/// answered instead of applied again (see `sql.rs`): created with a fresh
/// schema, and in a schema of this version that lacks it (one created
/// before it), without a new version: a store that does not know the table
/// ignores it.
const CREATE_CALLS: &str = r#"
CREATE TABLE {s}.calls (
    id uuid PRIMARY KEY,
    expires_at timestamptz NOT NULL,
    applied boolean NOT NULL,
    counts bigint[] NOT NULL
);
CREATE INDEX calls_by_expiry ON {s}.calls (expires_at);
"#;

/// The sets of leases of concurrency limits, and the functions that call
/// on them (see `sql.rs`): created with a fresh schema, and in a schema of
/// this version that lacks them (one created before leases), without a new
/// version, as [`CREATE_CALLS`].
///
/// A set is a row of `counters` under its key (its `value` the leases held
/// at its last call, its `expires_at` the end of its last lease: the set's
/// lifetime, and the row every call on the set locks) and one row of
/// `leases` per lease, by the id of the call that took it (its
/// `CheckId`, as a uuid). A set's leases go with its row (`ON DELETE
/// CASCADE`: a deleted or swept set leaves none behind).
const CREATE_LEASES: &str = r#"
CREATE TABLE {s}.leases (
    key bytea NOT NULL REFERENCES {s}.counters (key) ON DELETE CASCADE,
    id uuid NOT NULL,
    ends_at timestamptz NOT NULL,
    PRIMARY KEY (key, id)
);
-- The set at `k` after a call that changed it, its row locked: its row
-- holds its leases' count and lives until its last lease ends, or goes
-- when it holds none. Answers the µs until its first lease ends (0: none).
CREATE FUNCTION {s}.tollgate_lease_set(k bytea, now_ timestamptz)
RETURNS bigint LANGUAGE plpgsql VOLATILE AS $set$
DECLARE
    held bigint;
    first timestamptz;
    last timestamptz;
BEGIN
    SELECT count(*), min(l.ends_at), max(l.ends_at) INTO held, first, last
    FROM {s}.leases l WHERE l.key = k;
    IF held = 0 THEN
        DELETE FROM {s}.counters c WHERE c.key = k;
        RETURN 0;
    END IF;
    UPDATE {s}.counters c SET value = held, expires_at = last WHERE c.key = k;
    RETURN greatest((extract(epoch FROM first - now_) * 1000000)::bigint, 0);
END
$set$;
-- A count or reservation of a batch with a lease counter (see `sql.rs`).
CREATE FUNCTION {s}.tollgate_leased(reserving boolean, keys bytea[], costs bigint[],
    ttls bigint[], rooms bigint[], floors bigint[], leased boolean[], pkeys bytea[],
    pat bigint[], pparts bigint[], pwholes bigint[], cutoff timestamptz, call_id uuid,
    record_us bigint, purge boolean)
RETURNS TABLE (ord bigint, value bigint, applied boolean)
LANGUAGE plpgsql VOLATILE AS $leased$
DECLARE
    now_ timestamptz := statement_timestamp();
    n int := coalesce(cardinality(keys), 0);
    e record;
    vals bigint[] := array_fill(0::bigint, ARRAY[n]);
    reclaimed bigint[] := array_fill(0::bigint, ARRAY[n]);
    pv bigint[];
    tail bigint[] := '{}';
    fits boolean := true;
    answer bigint[];
    i int;
    k bytea;
    cnt bigint;
    w bigint;
    live boolean;
    after bigint;
BEGIN
    SELECT c.applied, c.counts INTO e FROM {s}.calls c WHERE c.id = call_id;
    IF FOUND THEN
        RETURN QUERY SELECT u.o, u.v, e.applied
            FROM unnest(e.counts) WITH ORDINALITY AS u (v, o) ORDER BY u.o;
        RETURN;
    END IF;
    IF clock_timestamp() > cutoff THEN
        RAISE EXCEPTION 'tollgate: the call''s deadline passed; nothing was applied'
            USING ERRCODE = 'TG001';
    END IF;
    -- Every counter's row, locked one after the other in key order (as
    -- every statement locks): an absent one is written first as an
    -- expired row of 0 (which every statement takes as absent). A row
    -- another call deletes between the insert and the lock (a set whose
    -- last lease it ended, a swept counter) is written again.
    FOR k IN SELECT u.key FROM unnest(keys) AS u (key) ORDER BY u.key LOOP
        LOOP
            INSERT INTO {s}.counters AS c (key, value, expires_at)
            VALUES (k, 0, '-infinity') ON CONFLICT (key) DO NOTHING;
            PERFORM 1 FROM {s}.counters c WHERE c.key = k FOR UPDATE;
            EXIT WHEN FOUND;
        END LOOP;
    END LOOP;
    -- Now is when the locks are held, not when the statement began: a
    -- call that waited for another's locks reads the leases it took
    -- against a later time than theirs, never an earlier one (a lease
    -- never ends more than its lifetime after this call's now).
    now_ := clock_timestamp();
    FOR i IN 1..n LOOP
        IF leased[i] THEN
            DELETE FROM {s}.leases l WHERE l.key = keys[i] AND l.ends_at <= now_;
            GET DIAGNOSTICS cnt = ROW_COUNT;
            reclaimed[i] := cnt;
            SELECT count(*) INTO cnt FROM {s}.leases l WHERE l.key = keys[i];
            vals[i] := cnt;
        ELSE
            SELECT CASE WHEN c.expires_at > now_ THEN c.value ELSE 0 END INTO w
            FROM {s}.counters c WHERE c.key = keys[i];
            vals[i] := coalesce(w, 0);
        END IF;
    END LOOP;
    pv := ARRAY(SELECT coalesce(c.value, 0)
        FROM unnest(pkeys) WITH ORDINALITY AS p (key, o)
            LEFT JOIN {s}.counters c ON c.key = p.key AND c.expires_at > now_
        ORDER BY p.o);
    IF reserving THEN
        FOR i IN 1..n LOOP
            w := NULL;
            SELECT (pv[p.o::int] / p.whole) * p.part + ((pv[p.o::int] % p.whole) * p.part) / p.whole
            INTO w
            FROM unnest(pat, pparts, pwholes) WITH ORDINALITY AS p (at, part, whole, o)
            WHERE p.at = i;
            IF NOT (greatest(vals[i], floors[i]) <= rooms[i] - coalesce(w, 0)
                    OR least(greatest(vals[i], floors[i]) + costs[i], 9007199254740992) = 0)
            THEN
                fits := false;
            END IF;
        END LOOP;
    END IF;
    IF fits THEN
        FOR i IN 1..n LOOP
            IF leased[i] THEN
                INSERT INTO {s}.leases (key, id, ends_at)
                VALUES (keys[i], call_id, now_ + ttls[i] * interval '1 microsecond')
                ON CONFLICT DO NOTHING;
                SELECT count(*) INTO cnt FROM {s}.leases l WHERE l.key = keys[i];
                vals[i] := cnt;
            ELSE
                SELECT c.expires_at > now_ INTO live FROM {s}.counters c WHERE c.key = keys[i];
                after := least(greatest(vals[i], floors[i]) + costs[i], 9007199254740992);
                UPDATE {s}.counters c SET value = after,
                    expires_at = CASE WHEN live AND floors[i] = 0 THEN c.expires_at
                        ELSE now_ + (ttls[i] + CASE WHEN floors[i] > 0
                            THEN (after - floors[i] + 999) / 1000 * 1000 ELSE 0 END)
                            * interval '1 microsecond' END
                WHERE c.key = keys[i];
                vals[i] := after;
            END IF;
        END LOOP;
    END IF;
    FOR i IN 1..n LOOP
        IF leased[i] THEN
            w := {s}.tollgate_lease_set(keys[i], now_);
            tail := tail || ARRAY[(w + 999) / 1000, reclaimed[i]];
        END IF;
    END LOOP;
    -- The rows of a refused call's absent counters go again.
    DELETE FROM {s}.counters c WHERE c.key = ANY (keys) AND c.expires_at = '-infinity';
    answer := vals || pv || tail;
    INSERT INTO {s}.calls (id, expires_at, applied, counts)
    VALUES (call_id, now_ + record_us * interval '1 microsecond', fits, answer);
    IF purge THEN
        -- As the other counter statements' purging variants (`sql.rs`).
        DELETE FROM {s}.calls c
        WHERE c.ctid = ANY (ARRAY(
            SELECT m.ctid FROM {s}.calls m WHERE m.expires_at < now_
            ORDER BY m.expires_at LIMIT {limit} FOR UPDATE SKIP LOCKED));
    END IF;
    IF clock_timestamp() > cutoff THEN
        RAISE EXCEPTION 'tollgate: the call''s deadline passed; nothing was applied'
            USING ERRCODE = 'TG001';
    END IF;
    RETURN QUERY SELECT u.o, u.v, fits
        FROM unnest(answer) WITH ORDINALITY AS u (v, o) ORDER BY u.o;
END
$leased$;
-- Ends (`lifetime_us` null) or renews the lease `lease` of the set at `k`;
-- whether it was held. Expired leases of the set go first.
CREATE FUNCTION {s}.tollgate_lease(k bytea, lease uuid, lifetime_us bigint,
    cutoff timestamptz)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $lease$
DECLARE
    now_ timestamptz := statement_timestamp();
    held boolean;
BEGIN
    IF clock_timestamp() > cutoff THEN
        RAISE EXCEPTION 'tollgate: the call''s deadline passed; nothing was applied'
            USING ERRCODE = 'TG001';
    END IF;
    PERFORM 1 FROM {s}.counters c WHERE c.key = k FOR UPDATE;
    IF NOT FOUND THEN
        RETURN false;
    END IF;
    -- Now is when the lock is held (see `tollgate_leased`).
    now_ := clock_timestamp();
    DELETE FROM {s}.leases l WHERE l.key = k AND l.ends_at <= now_;
    IF lifetime_us IS NULL THEN
        DELETE FROM {s}.leases l WHERE l.key = k AND l.id = lease;
    ELSE
        UPDATE {s}.leases l SET ends_at = now_ + lifetime_us * interval '1 microsecond'
        WHERE l.key = k AND l.id = lease;
    END IF;
    held := FOUND;
    PERFORM {s}.tollgate_lease_set(k, now_);
    IF clock_timestamp() > cutoff THEN
        RAISE EXCEPTION 'tollgate: the call''s deadline passed; nothing was applied'
            USING ERRCODE = 'TG001';
    END IF;
    RETURN held;
END
$lease$;
"#;

/// [`CREATE_LEASES`] on the schema `quoted`.
fn create_leases(quoted: &str) -> String {
    CREATE_LEASES
        .replace("{limit}", &crate::sql::PURGE_BATCH.to_string())
        .replace("{s}", quoted)
}

/// The tables, index and guard function of a fresh schema; `{s}` is the
/// quoted schema name.
const CREATE: &str = r#"
CREATE TABLE {s}.counters (
    key bytea PRIMARY KEY,
    value bigint NOT NULL CHECK (value BETWEEN 0 AND 9007199254740992),
    expires_at timestamptz NOT NULL
);
CREATE INDEX counters_by_expiry ON {s}.counters (expires_at);
CREATE TABLE {s}.marks (
    key bytea PRIMARY KEY,
    token bytea NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX marks_by_expiry ON {s}.marks (expires_at);
-- Ends every write statement, after its writes: raises (rolling back the
-- whole statement) when the call's deadline has passed by the server's
-- clock, or when fewer rows were written than the statement decided to
-- write (a counter created concurrently), which the store retries.
CREATE FUNCTION {s}.tollgate_guard(cutoff timestamptz, written bigint, wanted bigint)
RETURNS boolean LANGUAGE plpgsql VOLATILE AS $guard$
BEGIN
    IF clock_timestamp() > cutoff THEN
        RAISE EXCEPTION 'tollgate: the call''s deadline passed; nothing was applied'
            USING ERRCODE = 'TG001';
    END IF;
    IF written <> wanted THEN
        RAISE EXCEPTION 'tollgate: a counter was created concurrently; nothing was applied'
            USING ERRCODE = '40001';
    END IF;
    RETURN true;
END
$guard$;
COMMENT ON SCHEMA {s} IS 'tollgate counter store';
"#;

/// Checks the schema `name` (quoted: `quoted`), creating it when it holds
/// no store yet, and its `calls` table and leases when missing. One transaction, serialized with every other instance
/// preparing the same schema by an advisory lock.
pub(crate) async fn prepare(client: &mut Client, name: &str, quoted: &str) -> Result<(), Error> {
    let failed = |source: tokio_postgres::Error| Error::Schema {
        schema: name.to_owned(),
        source: Box::new(source),
    };
    let tx = client.transaction().await.map_err(failed)?;
    tx.execute(
        "SELECT pg_advisory_xact_lock(hashtextextended('tollgate-schema:' || $1::text, 0))",
        &[&name],
    )
    .await
    .map_err(failed)?;
    let table = |table: &str| format!("{quoted}.{table}");
    let found = tx
        .query_one(
            "SELECT to_regnamespace($1) IS NOT NULL, to_regclass($2) IS NOT NULL, \
                    to_regclass($3) IS NOT NULL, to_regclass($4) IS NOT NULL, \
                    to_regclass($5) IS NOT NULL, to_regclass($6) IS NOT NULL",
            &[
                &quoted,
                &table("tollgate_schema"),
                &table("counters"),
                &table("marks"),
                &table("calls"),
                &table("leases"),
            ],
        )
        .await
        .map_err(failed)?;
    let flag = |i: usize| found.try_get::<_, bool>(i).map_err(failed);
    let (schema, version_table, counters, marks) = (flag(0)?, flag(1)?, flag(2)?, flag(3)?);
    let (calls, leases) = (flag(4)?, flag(5)?);
    let version: Option<i32> = if version_table {
        let row = tx
            .query_opt(
                &format!("SELECT version FROM {quoted}.tollgate_schema"),
                &[],
            )
            .await
            .map_err(failed)?;
        row.map(|row| row.try_get(0)).transpose().map_err(failed)?
    } else {
        None
    };
    match version {
        Some(SCHEMA_VERSION) if counters && marks => {
            if !calls {
                tx.batch_execute(&CREATE_CALLS.replace("{s}", quoted))
                    .await
                    .map_err(failed)?;
            }
            if !leases {
                tx.batch_execute(&create_leases(quoted))
                    .await
                    .map_err(failed)?;
            }
        }
        Some(SCHEMA_VERSION) => {
            return Err(Error::IncompleteSchema {
                schema: name.to_owned(),
                table: if counters { "marks" } else { "counters" }.to_owned(),
            });
        }
        Some(found) => {
            return Err(Error::UnknownSchemaVersion {
                schema: name.to_owned(),
                found,
                supported: SCHEMA_VERSION,
            });
        }
        None if !counters && !marks => {
            if !schema {
                tx.batch_execute(&format!("CREATE SCHEMA {quoted}"))
                    .await
                    .map_err(failed)?;
            }
            let create = format!(
                "CREATE TABLE IF NOT EXISTS {quoted}.tollgate_schema (\
                     singleton boolean PRIMARY KEY DEFAULT true CHECK (singleton), \
                     version integer NOT NULL);\
                 {}{}{}",
                CREATE.replace("{s}", quoted),
                CREATE_CALLS.replace("{s}", quoted),
                create_leases(quoted)
            );
            tx.batch_execute(&create).await.map_err(failed)?;
            tx.execute(
                &format!("INSERT INTO {quoted}.tollgate_schema (version) VALUES ($1)"),
                &[&SCHEMA_VERSION],
            )
            .await
            .map_err(failed)?;
        }
        None => {
            let table = if counters { "counters" } else { "marks" };
            return Err(Error::ForeignSchema {
                schema: name.to_owned(),
                table: table.to_owned(),
            });
        }
    }
    tx.commit().await.map_err(failed)
}
