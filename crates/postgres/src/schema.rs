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
/// no store yet, and its `calls` table when missing. One transaction, serialized with every other instance
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
                    to_regclass($5) IS NOT NULL",
            &[
                &quoted,
                &table("tollgate_schema"),
                &table("counters"),
                &table("marks"),
                &table("calls"),
            ],
        )
        .await
        .map_err(failed)?;
    let flag = |i: usize| found.try_get::<_, bool>(i).map_err(failed);
    let (schema, version_table, counters, marks) = (flag(0)?, flag(1)?, flag(2)?, flag(3)?);
    let calls = flag(4)?;
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
                 {}{}",
                CREATE.replace("{s}", quoted),
                CREATE_CALLS.replace("{s}", quoted)
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
