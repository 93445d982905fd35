//! The PostgreSQL saver (feature `postgres`): tokio-postgres with a small deadpool pool.
//!
//! Tables live in one schema (default `public`, configurable so tests and tenants can
//! isolate themselves). Migrations are numbered and recorded in `antler_migrations`,
//! applied under an advisory lock so that concurrent processes do not race.
//! Each `put`/`put_writes` is one atomic statement (data-modifying CTEs, the message-store
//! epoch check included), so one round trip; reads batch keys with `unnest`, and a `get_tuple` reads the checkpoint row and its
//! writes in one statement, so it costs three round trips (two without message lists) and
//! the history walk three per page of ancestors.

use async_trait::async_trait;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use deadpool_postgres::{Hook, Manager, ManagerConfig, Pool, RecyclingMethod};
use tokio_postgres::NoTls;
use tokio_postgres::error::SqlState;

use crate::engine::{
    Backend, BlobRow, BodyRead, BodyRow, BodyScan, CheckpointRow, Engine, HeadChain, IndexGuard,
    MessageRow, RowScan, ScanArg, StorageStats, TupleRows, WriteRow, impl_saver, record_keys,
    runs_of_rows, scan_sql, unreferenced,
};
use crate::error::{Error, Result};
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, TaskId, TaskPath, ThreadId,
};
use crate::mode::{ChannelMode, SnapshotFrequency, StoreConfig};

/// Schema migrations; index + 1 = the version recorded after applying it. `{s}` is the schema.
///
/// Each runs once per schema (under the migration lock, recorded in the same transaction), so
/// its tables must not exist yet: a plain `CREATE TABLE` fails on a table of that name that
/// something else created (another system's `checkpoints` in a shared schema), where `IF NOT
/// EXISTS` adopted it and failed later on a missing column, after locking it against its own
/// writers.
const MIGRATIONS: &[&str] = &[
    "CREATE TABLE {s}.antler_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
     CREATE TABLE {s}.checkpoints (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id BYTEA NOT NULL,
        parent_id BYTEA, record BYTEA NOT NULL, metadata BYTEA NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id));
     CREATE TABLE {s}.blobs (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, channel TEXT NOT NULL, version BIGINT NOT NULL,
        data BYTEA NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version));
     CREATE TABLE {s}.writes (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id BYTEA NOT NULL,
        task_id TEXT NOT NULL, idx BIGINT NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL,
        value BYTEA NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx));
     CREATE TABLE {s}.messages (
        thread_id TEXT NOT NULL, seq BIGINT NOT NULL, body BYTEA NOT NULL,
        PRIMARY KEY (thread_id, seq));",
    // 2: message-store epochs (engine::IndexGuard).
    "CREATE TABLE {s}.thread_epochs (thread_id TEXT PRIMARY KEY, epoch BIGINT NOT NULL);",
    // 3: version marks (Saver::max_channel_version; NULL: unknown), filled from the existing
    // records in the same transaction.
    "CREATE TABLE {s}.version_marks (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, version BIGINT,
        PRIMARY KEY (thread_id, checkpoint_ns));",
    // 4: the run index (`delete_for_runs` finds a run's threads without scanning the store),
    // filled from the existing records in the same transaction.
    "CREATE TABLE {s}.run_threads (run_id TEXT NOT NULL, thread_id TEXT NOT NULL,
        PRIMARY KEY (run_id, thread_id));
     CREATE INDEX run_threads_by_thread ON {s}.run_threads (thread_id);",
];

/// The migration that adds version marks.
const MARKS_MIGRATION: i64 = 3;

/// The migration that adds the run index.
const RUNS_MIGRATION: i64 = 4;

/// The `fresh` CTE of the write statements: 1, or a run-time division by zero when the epoch
/// the writer's index was loaded at (the parameter `$E`, NULL for a write without a message
/// list) is not the thread's epoch.
///
/// A write with a message list locks the thread's epoch row (creating it at 0) with an upsert
/// that changes nothing: unlike a read, which sees the statement's snapshot, `ON CONFLICT DO
/// UPDATE` waits for a concurrent delete, copy or collection that holds the row and then reads
/// the latest committed epoch. Those bump the epoch first in their transactions, so either
/// they commit first and the write sees the new epoch and fails, or the write commits first
/// and their deletes, which run after the bump, see its rows.
const FRESH_CTE: &str = "epoch_lock AS (
    INSERT INTO {s}.thread_epochs (thread_id, epoch) SELECT $1, 0 WHERE $E::bigint IS NOT NULL
    ON CONFLICT (thread_id) DO UPDATE SET epoch = {s}.thread_epochs.epoch
    RETURNING epoch),
 fresh AS (
    SELECT 1 / (CASE WHEN $E::bigint IS NULL OR (SELECT epoch FROM epoch_lock) = $E::bigint
                     THEN 1 ELSE 0 END) AS ok)";

/// The `fresh` CTE of `put`: as [`FRESH_CTE`], but every put locks the thread's epoch row,
/// also one that stores no message list (and checks the epoch only when it does). A put then
/// never commits in the middle of a `delete_thread`, which holds the row from its first
/// statement: it commits before (and the deletes see all of it) or after (a put to a
/// deleted thread). Before 2026-12-01 a put without a message list could commit between
/// the delete's value and checkpoint statements and leave its values behind, which made a
/// later put of the same thread id with other bytes under one of those keys fail for good
/// (`a_put_racing_delete_thread_leaves_no_values_behind`). The price is one row update per
/// put that stores no message list. `fresh` reads the row whatever `$E` is: the planner
/// drops a subquery that a known `NULL` makes unneeded, and an unreferenced data-modifying
/// CTE runs only after the statement's other work, so the lock would come after the
/// statement's other row locks (its version mark's, which the delete takes next: a
/// deadlock).
const PUT_FRESH_CTE: &str = "epoch_lock AS (
    INSERT INTO {s}.thread_epochs (thread_id, epoch) VALUES ($1, 0)
    ON CONFLICT (thread_id) DO UPDATE SET epoch = {s}.thread_epochs.epoch
    RETURNING epoch),
 fresh AS (
    SELECT 1 / (CASE WHEN (SELECT epoch FROM epoch_lock) IS NOT NULL
                      AND ($E::bigint IS NULL OR (SELECT epoch FROM epoch_lock) = $E::bigint)
                     THEN 1 ELSE 0 END) AS ok)";

/// The SQL that bumps thread $1's epoch.
const BUMP_EPOCH_SQL: &str = "INSERT INTO {s}.thread_epochs (thread_id, epoch) VALUES ($1, 1)
    ON CONFLICT (thread_id) DO UPDATE SET epoch = {s}.thread_epochs.epoch + 1";

/// The schema version this build writes.
pub const POSTGRES_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// Connection options of [`PostgresSaver`].
#[derive(Clone, Debug)]
pub struct PostgresOptions {
    /// A libpq-style URL or key/value string, e.g. `postgres://user@host:5432/db`.
    pub url: String,
    /// The schema holding the tables (default `public`); created if missing.
    pub schema: String,
    /// Maximum pooled connections (default 4). With two or more, `connect` opens two, so
    /// that a long body read can split over them (`read_bodies_split`); with one, reads never
    /// split.
    pub pool_size: usize,
    /// Whether each connection's session plans prepared statements generically (default
    /// `true`): `SET plan_cache_mode = force_generic_plan` when the connection is made.
    ///
    /// The statements of reads and writes look rows up by key, so a plan made for one set of
    /// arguments fits all of them. PostgreSQL's own choice plans each of a prepared
    /// statement's first five runs anew at bind time, and keeps doing so for statements
    /// whose generic plan it estimates to cost more: on the development machine the three
    /// statements of a cold `get_state` spent 0.13–0.74 ms each in binding that way, against
    /// 0.02–0.07 ms with the plan the warm-up of a new connection made
    /// (`docs/checkpoint-format.md`, "Reading"). Statements that go over a whole thread
    /// (listings, loading the message index, deletes, copies, collection, sizes) keep the
    /// server's choice, which plans with the thread's own statistics.
    ///
    /// `false` leaves the server's setting alone. Turn it off behind a pooler in transaction
    /// mode: there the session setting would stay with whichever server connection ran it,
    /// for the pooler's other clients.
    pub generic_plans: bool,
}

impl PostgresOptions {
    /// Options for `url` with the defaults.
    pub fn new(url: impl Into<String>) -> Self {
        Self {
            url: url.into(),
            schema: "public".into(),
            pool_size: 4,
            generic_plans: true,
        }
    }

    /// Sets the schema (default `public`).
    #[must_use]
    pub fn with_schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = schema.into();
        self
    }

    /// Sets the pool size (default 4).
    #[must_use]
    pub fn with_pool_size(mut self, n: usize) -> Self {
        self.pool_size = n.max(1);
        self
    }

    /// Sets whether sessions plan prepared statements generically (default `true`, see
    /// [`Self::generic_plans`]).
    #[must_use]
    pub fn with_generic_plans(mut self, generic: bool) -> Self {
        self.generic_plans = generic;
        self
    }
}

fn pg_err(context: impl Into<String>) -> impl FnOnce(tokio_postgres::Error) -> Error {
    move |e| Error::backend(context, e)
}

/// The value of `key` in rows of `(key, value)` text pairs (the store's recorded
/// configuration).
fn config_value(rows: &[tokio_postgres::Row], key: &str) -> Result<Option<String>> {
    for r in rows {
        if r.col::<&str>(0)? == key {
            return r.col::<String>(1).map(Some);
        }
    }
    Ok(None)
}

/// Column reads that fail with a typed error where `Row::get` panics: a column of another type
/// than the schema gives it (a table altered by hand), or text a database whose encoding is
/// `SQL_ASCII` holds as bytes that are not UTF-8.
trait Col {
    /// Column `i`, converted to `T`; [`Error::DamagedColumn`] naming the column when it does
    /// not convert.
    fn col<'a, T: tokio_postgres::types::FromSql<'a>>(&'a self, i: usize) -> Result<T>;
}

impl Col for tokio_postgres::Row {
    fn col<'a, T: tokio_postgres::types::FromSql<'a>>(&'a self, i: usize) -> Result<T> {
        self.try_get(i).map_err(|e| {
            let name = self.columns().get(i).map_or("?", |c| c.name());
            Error::DamagedColumn {
                context: "postgres".into(),
                detail: format!("column {i} ({name}): {e}"),
            }
        })
    }
}

fn pool_err(context: impl Into<String>) -> impl FnOnce(deadpool_postgres::PoolError) -> Error {
    move |e| Error::backend(context, e)
}

fn id_from(thread: &str, bytes: &[u8]) -> Result<CheckpointId> {
    crate::engine::columns::checkpoint_id("postgres", thread, bytes)
}

/// The parent column of checkpoint `child`'s row (see [`crate::engine::columns::parent_id`]).
fn parent_from(thread: &str, child: CheckpointId, bytes: &[u8]) -> Result<CheckpointId> {
    crate::engine::columns::parent_id("postgres", thread, child, bytes)
}

use crate::engine::columns::{i64_of, u64_of};

/// Refuses to drop the `public` schema (quoted as the backend keeps it), which other
/// applications' tables share.
fn droppable(quoted: &str) -> Result<()> {
    if quoted == quote_ident("public") {
        return Err(Error::InvalidArgument(
            "postgres: refusing to drop the public schema, which other applications' tables share; drop_schema is for savers on a schema of their own".into(),
        ));
    }
    Ok(())
}

fn quote_ident(s: &str) -> String {
    format!("\"{}\"", s.replace('"', "\"\""))
}

/// The SQL of the statements on the read and write paths, with the schema filled in once (at
/// connect) instead of formatted on every call; each is prepared once per connection.
///
/// The read path's statements are prepared, and run once, when a connection is made
/// ([`warm_reads`]), the delta history walk's among them (a cold read of a checkpoint that
/// replays writes runs them: unprepared, each cost the new backend a parse and plan with cold
/// catalog caches); the others are prepared on first use (preparing them too showed no
/// difference beyond this machine's noise: three interleaved runs of a cold `get_state`,
/// first turn and fork of the write-amp workload at T = 2000).
struct HotSql {
    checkpoint_by_id: String,
    checkpoint_latest: String,
    ancestors: String,
    blobs: String,
    writes: String,
    messages: String,
    head_by_id: String,
    head_latest: String,
    head_chain_by_id: String,
    head_chain_latest: String,
    put: String,
    put_writes: String,
    epoch: String,
    next_seq: String,
    checkpoint_blobs: String,
    mark: String,
    existing: String,
}

impl HotSql {
    /// The statements a checkpoint read runs, which [`warm_reads`] runs on a new connection:
    /// the head by id and the latest head (each with its writes, and each again with its
    /// ancestors), a checkpoint's values, the bodies of message runs, and the delta history
    /// walk's (its target's row, the ancestor pages, their values and writes, the thread's
    /// epoch, and the check that what it read still exists).
    fn read_path(&self) -> [&str; 12] {
        [
            &self.head_by_id,
            &self.head_latest,
            &self.head_chain_by_id,
            &self.head_chain_latest,
            &self.checkpoint_blobs,
            &self.messages,
            &self.ancestors,
            &self.blobs,
            &self.checkpoint_by_id,
            &self.writes,
            &self.epoch,
            &self.existing,
        ]
    }

    fn new(s: &str) -> Self {
        let sql = |template: &str| template.replace("{s}", s);
        Self {
            checkpoint_by_id: sql(&format!("SELECT {ROW_COLS} FROM {{s}}.checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3")),
            checkpoint_latest: sql(&format!(
                "SELECT {ROW_COLS} FROM {{s}}.checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 ORDER BY checkpoint_id DESC LIMIT 1"
            )),
            ancestors: sql(ANCESTORS_SQL),
            blobs: sql(BLOBS_SQL),
            writes: sql(WRITES_SQL),
            messages: sql(MESSAGES_SQL),
            head_by_id: sql(&HEAD_SQL.replace("{cp}", CP_BY_ID_SQL)),
            head_latest: sql(&HEAD_SQL.replace("{cp}", CP_LATEST_SQL)),
            head_chain_by_id: sql(
                &HEAD_CHAIN_SQL
                    .replace("{cp}", CP_BY_ID_SQL)
                    .replace("{limit}", "$4::int4"),
            ),
            head_chain_latest: sql(
                &HEAD_CHAIN_SQL
                    .replace("{cp}", CP_LATEST_SQL)
                    .replace("{limit}", "$3::int4"),
            ),
            put: sql(&format!(
                "WITH {fresh},
                 k AS (SELECT * FROM unnest($9::text[], $10::bigint[], $11::bytea[]) k(channel, version, data)),
                 -- A relative record ($15) needs its parent. FOR SHARE reads the parent row as
                 -- committed now, not as of the statement's snapshot, and conflicts with the
                 -- FOR UPDATE a delete takes on the rows it deletes: a delete that committed
                 -- before the lock leaves no row to lock (also one this put waited for, on the
                 -- row or on the epoch row that `delete_thread` takes first), and one that comes
                 -- later waits for this put and then sees its child. The filter on `fresh` locks
                 -- the epoch row first, in the order `delete_thread` takes them.
                 par AS (
                    SELECT 1 FROM {{s}}.checkpoints x
                     WHERE $15::bool AND x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id = $4
                       AND (SELECT ok FROM fresh) = 1 FOR SHARE),
                 pok AS (SELECT CASE WHEN $15::bool AND NOT EXISTS (SELECT 1 FROM par) THEN 0 ELSE 1 END AS ok),
                 -- A version already stored with other bytes aborts the whole statement
                 -- (a run-time division by zero, mapped to a version clash): never keep either silently.
                 -- The divisor depends on a subquery so the planner cannot fold it.
                 -- A missing parent is reported before a clash (`pok`), as the other savers do.
                 guard AS (
                    SELECT 1 / (CASE WHEN (SELECT ok FROM pok) = 1 AND EXISTS (
                        SELECT 1 FROM k CROSS JOIN LATERAL (
                            -- LIMIT 1 keeps this a primary-key lookup per key (a cached generic
                            -- plan otherwise hashes every blob of the thread on each put).
                            SELECT x.data FROM {{s}}.blobs x
                             WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.channel = k.channel AND x.version = k.version LIMIT 1) x
                         WHERE x.data <> k.data) THEN 0 ELSE 1 END) AS ok),
                 m AS (
                    INSERT INTO {{s}}.messages (thread_id, seq, body)
                    SELECT $1, * FROM unnest($7::bigint[], $8::bytea[]) WHERE (SELECT ok FROM guard) = 1 AND (SELECT ok FROM fresh) = 1 AND (SELECT ok FROM pok) = 1),
                 -- `guard` sees the statement's snapshot; a put of the same version committing
                 -- meanwhile is met here instead: the conflict waits for it, and other bytes
                 -- divide by zero at run time (the divisor depends on the row, so it is not folded).
                 b AS (
                    INSERT INTO {{s}}.blobs AS x (thread_id, checkpoint_ns, channel, version, data)
                    SELECT $1, $2, channel, version, data FROM k WHERE (SELECT ok FROM guard) = 1 AND (SELECT ok FROM fresh) = 1 AND (SELECT ok FROM pok) = 1
                    ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO UPDATE
                    SET data = CASE WHEN x.data = EXCLUDED.data THEN x.data
                                    ELSE int4send(1 / (length(EXCLUDED.data) * 0)) END),
                 -- A first mark is the record's only if the namespace has no other checkpoint
                 -- (else unknown: NULL); an unknown mark stays unknown.
                 vm AS (
                    INSERT INTO {{s}}.version_marks (thread_id, checkpoint_ns, version)
                    SELECT $1, $2, CASE WHEN EXISTS (
                        SELECT 1 FROM {{s}}.checkpoints x
                         WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id <> $3)
                      THEN NULL ELSE $13::bigint END
                     WHERE (SELECT ok FROM guard) = 1 AND (SELECT ok FROM fresh) = 1 AND (SELECT ok FROM pok) = 1
                    ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE
                    SET version = CASE WHEN {{s}}.version_marks.version IS NULL THEN NULL
                                       ELSE GREATEST({{s}}.version_marks.version, $13::bigint) END),
                 -- The run index: the pair stays until the thread is deleted. An existing pair is
                 -- updated to itself, which locks it: a `delete_thread` deleting the pair waits
                 -- for this put and then, in its next statement, sees the checkpoint too (DO
                 -- NOTHING takes no lock, and the pair could go while the checkpoint stays).
                 rt AS (
                    INSERT INTO {{s}}.run_threads (run_id, thread_id)
                    SELECT $14::text, $1 WHERE $14::text IS NOT NULL AND (SELECT ok FROM guard) = 1 AND (SELECT ok FROM fresh) = 1 AND (SELECT ok FROM pok) = 1
                    ON CONFLICT (run_id, thread_id) DO UPDATE SET run_id = EXCLUDED.run_id)
                 INSERT INTO {{s}}.checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, record, metadata)
                 SELECT $1, $2, $3, $4, $5, $6 WHERE (SELECT ok FROM guard) = 1 AND (SELECT ok FROM fresh) = 1 AND (SELECT ok FROM pok) = 1
                 ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
                 SET parent_id = EXCLUDED.parent_id, record = EXCLUDED.record, metadata = EXCLUDED.metadata
                 -- Whether the thread's epoch moved while the put waited for its row (a delete or
                 -- copy committed meanwhile): the epoch the lock returned is the latest, the plain
                 -- read the statement's snapshot, whose other reads (`vm`) are then stale.
                 RETURNING (SELECT epoch FROM epoch_lock) IS DISTINCT FROM
                           COALESCE((SELECT e.epoch FROM {{s}}.thread_epochs e WHERE e.thread_id = $1), 0)",
                fresh = PUT_FRESH_CTE.replace("$E", "$12"),
            )),
            put_writes: sql(&format!(
                "WITH {fresh},
                 -- The epoch row is locked (through `fresh`, a one-time filter evaluated
                 -- before the scan) before the checkpoint row, in the order delete_thread
                 -- takes them, so the two cannot deadlock.
                 cp AS (
                    SELECT 1 FROM {{s}}.checkpoints WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3
                       AND (SELECT ok FROM fresh) = 1 FOR SHARE),
                 m AS (
                    INSERT INTO {{s}}.messages (thread_id, seq, body)
                    SELECT $1, * FROM unnest($4::bigint[], $5::bytea[]) WHERE EXISTS (SELECT 1 FROM cp) AND (SELECT ok FROM fresh) = 1),
                 w AS (
                    SELECT * FROM unnest($6::text[], $7::bigint[], $8::text[], $9::text[], $10::bytea[])
                        AS w(task_id, idx, channel, task_path, value)
                     WHERE EXISTS (SELECT 1 FROM cp)),
                 up AS (
                    INSERT INTO {{s}}.writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value)
                    SELECT $1, $2, $3, task_id, idx, channel, task_path, value FROM w WHERE idx < 0
                    ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)
                    DO UPDATE SET channel = EXCLUDED.channel, task_path = EXCLUDED.task_path, value = EXCLUDED.value),
                 ins AS (
                    INSERT INTO {{s}}.writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value)
                    SELECT $1, $2, $3, task_id, idx, channel, task_path, value FROM w WHERE idx >= 0
                    ON CONFLICT DO NOTHING)
                 SELECT EXISTS (SELECT 1 FROM cp) AND (SELECT ok FROM fresh) = 1",
                fresh = FRESH_CTE.replace("$E", "$11"),
            )),
            epoch: sql("SELECT epoch FROM {s}.thread_epochs WHERE thread_id = $1"),
            next_seq: sql("SELECT COALESCE(MAX(seq), 0) FROM {s}.messages WHERE thread_id = $1"),
            checkpoint_blobs: sql(CHECKPOINT_BLOBS_SQL),
            existing: sql(EXISTING_SQL),
            mark: sql(
                "SELECT version FROM {s}.version_marks WHERE thread_id = $1 AND checkpoint_ns = $2",
            ),
        }
    }
}

pub(crate) struct PgBackend {
    pool: Pool,
    s: String,
    hot: Arc<HotSql>,
    /// Whether the pool's sessions plan generically ([`PostgresOptions::generic_plans`]).
    generic: bool,
}

/// Runs the read path's statements once on a new connection, with arguments that match no
/// row, and keeps them prepared.
///
/// A new PostgreSQL backend starts with empty catalog caches: the first statements it runs
/// load the definitions of every table, index, type, operator and function they use, and
/// the statistics the planner reads. A server log of a cold `get_state` on a fresh
/// connection put several milliseconds into parsing and binding the read's statements.
/// Paying that when the connection is created moves it out of the first read on it; a
/// pooled connection lives for many reads. With generic plans (the default, see
/// [`PostgresOptions::generic_plans`]) the warm-up's runs also make the plans every later
/// run reuses; otherwise PostgreSQL plans each of a statement's first five runs afresh, and
/// the first read plans again, with warm caches.
///
/// The warm-up waits at most [`WARM_LOCK_TIMEOUT`] for a table lock: a table locked by
/// someone else's DDL must not hold up a connection that may never read it. It runs in a
/// transaction that it rolls back, with the timeout set for that transaction only (`SET
/// LOCAL`), so the session keeps its own setting. It sets its own isolation level and read
/// only mode, so a server default such as serializable deferrable cannot make it wait for a
/// snapshot. The statements it prepared stay prepared (a rollback does not drop them).
/// A warm-up that fails (a lock it did not get, a missing table) is the inner error, for the
/// caller to ignore: such a connection reads as before, only slower at first. The outer
/// error means the transaction could not be ended, and the connection must not be used.
async fn warm_reads(
    c: &deadpool_postgres::ClientWrapper,
    hot: &HotSql,
) -> std::result::Result<std::result::Result<(), tokio_postgres::Error>, tokio_postgres::Error> {
    let began = c
        .batch_execute(&format!(
            "BEGIN ISOLATION LEVEL READ COMMITTED READ ONLY; SET LOCAL lock_timeout = '{WARM_LOCK_TIMEOUT}'"
        ))
        .await;
    let warmed = match began {
        Ok(()) => run_warm_reads(c, hot).await,
        Err(e) => Err(e),
    };
    // Outside a transaction (BEGIN itself failed) ROLLBACK only warns.
    c.batch_execute("ROLLBACK").await?;
    Ok(warmed)
}

/// Makes a session plan its prepared statements generically (see
/// [`PostgresOptions::generic_plans`]). Session level, outside any transaction: the warm-up's
/// rollback must not undo it.
const GENERIC_PLANS_SQL: &str = "SET plan_cache_mode = force_generic_plan";

/// Gives one transaction the server's own plan choice back, on a session that plans
/// generically: see [`PgBackend::whole_thread_tx`].
const SERVER_PLANS_LOCAL_SQL: &str = "SET LOCAL plan_cache_mode TO DEFAULT";

/// Gives the session the server's own plan choice back, until [`GENERIC_PLANS_SQL`]: see
/// [`PgBackend::whole_thread`].
const SERVER_PLANS_SQL: &str = "RESET plan_cache_mode";

/// How long the warm-up of a new connection waits for a table lock.
const WARM_LOCK_TIMEOUT: &str = "100ms";

/// The statements of [`warm_reads`].
async fn run_warm_reads(
    c: &deadpool_postgres::ClientWrapper,
    hot: &HotSql,
) -> std::result::Result<(), tokio_postgres::Error> {
    let [
        by_id,
        latest,
        chain_by_id,
        chain_latest,
        cp_blobs,
        messages,
        ancestors,
        blobs,
        cp_by_id,
        writes,
        epoch,
        existing,
    ] = hot.read_path();
    // A checkpoint id is always 16 bytes, so the empty id matches nothing whatever the thread.
    let none: &[u8] = &[];
    let (key_c, key_v) = (vec!["messages"], vec![0i64]);
    let (lo, hi) = (vec![0i64], vec![0i64]);
    let neg = vec![-1i64];
    let no_ids: Vec<Vec<u8>> = Vec::new();
    type Args<'a> = Vec<&'a (dyn tokio_postgres::types::ToSql + Sync)>;
    let runs: [(&str, Args); 12] = [
        (by_id, vec![&"", &"", &none]),
        // The latest checkpoint of thread "": at most one row and its writes, read and dropped.
        (latest, vec![&"", &""]),
        (chain_by_id, vec![&"", &"", &none, &1i32]),
        (chain_latest, vec![&"", &"", &1i32]),
        (cp_blobs, vec![&"", &"", &none, &key_c, &key_v]),
        // An empty range: [0, 0).
        (messages, vec![&"", &lo, &hi]),
        (ancestors, vec![&"", &"", &none, &1i32]),
        // No blob has a negative version.
        (blobs, vec![&"", &"", &key_c, &neg]),
        (cp_by_id, vec![&"", &"", &none]),
        (writes, vec![&"", &"", &no_ids]),
        (epoch, vec![&""]),
        (existing, vec![&"", &"", &no_ids]),
    ];
    // Polled together, they are prepared in one round trip and run in the next.
    futures::future::try_join_all(runs.iter().map(|(sql, args)| async move {
        let st = c.prepare_cached(sql).await?;
        c.query(&st, args).await
    }))
    .await?;
    Ok(())
}

impl PgBackend {
    async fn read_epoch(&self, c: &deadpool_postgres::Object, thread: &ThreadId) -> Result<u64> {
        let ctx = format!("postgres: thread {thread}: reading its epoch");
        let st = c
            .prepare_cached(&self.hot.epoch)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let row = c
            .query_opt(&st, &[&thread.as_str()])
            .await
            .map_err(pg_err(ctx))?;
        row.map_or(Ok(0), |r| {
            u64_of(thread.as_str(), r.col(0)?, "thread epoch")
        })
    }

    /// After a put that waited for a delete or copy of its thread (see `put`'s `RETURNING`):
    /// its version mark was decided on the statement's snapshot, which still showed the
    /// checkpoints a `delete_thread` removed, so a first mark came out unknown (NULL), which
    /// would stay unknown until the next `delete_thread` and send every `max_channel_version`
    /// of the namespace to the scan of its records. Decided again now, in a transaction that
    /// first locks the thread's epoch row as every put does (so no other put is half done and
    /// every committed one is seen): a namespace that holds no other checkpoint gets the put's
    /// mark, raised to the greatest version a value is stored under there (values outlive
    /// their checkpoints until a collection, and a copy brings them).
    ///
    /// The put has committed: a failure here leaves the mark unknown, which is safe (reads
    /// scan), so it is not the put's error.
    ///
    /// It runs on the put's own connection: waiting for another one while holding it could
    /// wait for good on a small pool.
    async fn settle_mark(&self, c: &mut deadpool_postgres::Object, row: &CheckpointRow, mark: i64) {
        let id = row.id.to_bytes();
        let thread = row.thread_id.as_str();
        // The server's own plan choice: the statement looks at the whole namespace.
        let Ok(tx) = self.whole_thread_tx(c).await else {
            return;
        };
        let locked = tx
            .execute(
                &self.sql(
                    "INSERT INTO {s}.thread_epochs (thread_id, epoch) VALUES ($1, 0)
                     ON CONFLICT (thread_id) DO UPDATE SET epoch = {s}.thread_epochs.epoch",
                ),
                &[&thread],
            )
            .await;
        if locked.is_err() {
            return;
        }
        let updated = tx
            .execute(
                &self.sql(
                    "UPDATE {s}.version_marks
                        SET version = GREATEST($3, (SELECT COALESCE(MAX(b.version), 0) FROM {s}.blobs b
                                                     WHERE b.thread_id = $1 AND b.checkpoint_ns = $2))
                      WHERE thread_id = $1 AND checkpoint_ns = $2 AND version IS NULL
                        AND NOT EXISTS (SELECT 1 FROM {s}.checkpoints x
                                         WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id <> $4)",
                ),
                &[&thread, &row.ns.as_str(), &mark, &id.as_slice()],
            )
            .await;
        if updated.is_ok() {
            let _ = tx.commit().await;
        }
    }

    /// The rows of `sql`, a statement over thread `thread`'s message bodies (`$1`), run with
    /// the server's own plan choice ([`Self::whole_thread`]); `what` names them in errors.
    async fn thread_message_rows(
        &self,
        thread: &ThreadId,
        sql: &str,
        what: &str,
    ) -> Result<Vec<tokio_postgres::Row>> {
        let ctx = format!("postgres: thread {thread}: reading {what}");
        let c = self.client(&ctx).await?;
        self.whole_thread(&c, sql, &[&thread.as_str()])
            .await
            .map_err(pg_err(ctx))
    }

    async fn settled_epoch(&self, c: &deadpool_postgres::Object, thread: &ThreadId) -> Result<u64> {
        let ctx = format!("postgres: thread {thread}: waiting for its epoch");
        let row = c
            .query_opt(
                &self.sql("SELECT epoch FROM {s}.thread_epochs WHERE thread_id = $1 FOR SHARE"),
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx))?;
        row.map_or(Ok(0), |r| {
            u64_of(thread.as_str(), r.col(0)?, "thread epoch")
        })
    }

    /// The error of a write statement that divided by zero: a stale index when the thread's
    /// epoch moved (once settled, see [`Self::settled_epoch`]), otherwise `other` (the
    /// statement's own guard).
    async fn guard_failure(
        &self,
        c: &deadpool_postgres::Object,
        thread: &ThreadId,
        guard: IndexGuard,
        other: Error,
    ) -> Error {
        if guard.epoch.is_none() {
            return other;
        }
        match self.settled_epoch(c, thread).await {
            Ok(now) => guard.check(thread, now).err().unwrap_or(other),
            Err(e) => e,
        }
    }

    fn sql(&self, template: &str) -> String {
        template.replace("{s}", &self.s)
    }

    /// Runs `sql`, a statement that may go over every row of a thread (`WHERE thread_id = $1`
    /// and nothing narrower) or of the store (a listing), with the server's own plan choice,
    /// also on a session that plans generically.
    ///
    /// A generic plan estimates a thread's share of a table as one over the number of
    /// threads; in a store of a few threads, one of them long, that is a large share, and the
    /// plan scans the whole table for a short thread too. The server's choice plans with the
    /// argument, which the statistics know. Pipelined: the three requests leave in this order
    /// when first polled, so the statement binds between the two settings and the settings cost
    /// no round trip of their own.
    async fn whole_thread(
        &self,
        c: &deadpool_postgres::Object,
        sql: &str,
        params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
    ) -> std::result::Result<Vec<tokio_postgres::Row>, tokio_postgres::Error> {
        let st = c.prepare_cached(&self.sql(sql)).await?;
        if !self.generic {
            return c.query(&st, params).await;
        }
        let (server, rows, generic) = tokio::join!(
            c.batch_execute(SERVER_PLANS_SQL),
            c.query(&st, params),
            c.batch_execute(GENERIC_PLANS_SQL)
        );
        let rows = rows?;
        server.and(generic)?;
        Ok(rows)
    }

    /// A READ COMMITTED transaction (see [`read_committed`]) whose statements go over whole
    /// threads: with the server's own plan choice (`SET LOCAL`, see [`Self::whole_thread`]).
    async fn whole_thread_tx<'c>(
        &self,
        c: &'c mut deadpool_postgres::Object,
    ) -> std::result::Result<deadpool_postgres::Transaction<'c>, tokio_postgres::Error> {
        let tx = read_committed(c).await?;
        if self.generic {
            tx.batch_execute(SERVER_PLANS_LOCAL_SQL).await?;
        }
        Ok(tx)
    }

    /// Reads the bodies of `runs` on `c`, or, when the read is long and the pool holds an idle
    /// connection, its two halves on `c` and that connection at once: on a 2-core loopback
    /// machine the server then produces and the client consumes two streams in parallel: the
    /// 4,000-body statement of a 2,000-turn thread took 7.1–7.7 ms instead of 10.0–10.3 ms
    /// (medians of 30 on a warm connection), a cold `get_state` 8.1–10.5 ms instead of
    /// 11.1–13.3 ms (`docs/bench-write-amp.md`). Each half reads the thread's epoch in its own
    /// snapshot; the read's epoch is known only when both agree (epochs only grow, and every
    /// removal of bodies bumps it, so two snapshots with one epoch saw the same bodies).
    async fn read_bodies_split(
        &self,
        c: &deadpool_postgres::Object,
        st: &tokio_postgres::Statement,
        thread: &ThreadId,
        runs: &[(u64, u64)],
        seeding: bool,
        ctx: String,
    ) -> Result<BodyRead> {
        let Some((halves, other, other_st)) = self.second_reader(runs).await else {
            return read_bodies(c, st, thread, runs, seeding, ctx).await;
        };
        let (a, b) = tokio::join!(
            read_bodies(c, st, thread, &halves.0, seeding, ctx.clone()),
            read_bodies(&other, &other_st, thread, &halves.1, seeding, ctx.clone())
        );
        let a = a?;
        // The other connection failing (closed since it was idle, say) fails no read the
        // caller's connection can do alone; it leaves the pool, or every later long read
        // would take it and fail its half again.
        let b = match b {
            Ok(b) => b,
            Err(_) => {
                drop(deadpool_postgres::Object::take(other));
                read_bodies(c, st, thread, &halves.1, seeding, ctx).await?
            }
        };
        Ok(join_halves(a, b))
    }

    /// The halves of `runs`, an idle pooled connection and the body statement prepared on
    /// it, when the read is long enough to split and the pool has a connection at hand.
    ///
    /// Never waits for a connection: a reader holding one while it waits for another could
    /// deadlock with readers doing the same, and opening a new one costs more than the split
    /// saves. Taking an idle connection completes in one poll (no permit to wait for, no I/O:
    /// the pool's fast recycling only checks that the connection is open); anything else (none
    /// idle any more, a closed one to replace) is given up at once, dropping a connection
    /// attempt before it sent anything.
    async fn second_reader(
        &self,
        runs: &[(u64, u64)],
    ) -> Option<(
        (Runs, Runs),
        deadpool_postgres::Object,
        tokio_postgres::Statement,
    )> {
        let halves = split_runs(runs)?;
        if self.pool.status().available == 0 {
            return None;
        }
        let wait_none = deadpool_postgres::Timeouts {
            wait: Some(std::time::Duration::ZERO),
            ..self.pool.timeouts()
        };
        let other = futures::FutureExt::now_or_never(self.pool.timeout_get(&wait_none))?.ok()?;
        match other.prepare_cached(&self.hot.messages).await {
            Ok(st) => Some((halves, other, st)),
            Err(_) => {
                drop(deadpool_postgres::Object::take(other));
                None
            }
        }
    }

    /// Which of `ids` exist, read on the connection `c` the caller holds: a read that holds a
    /// connection must not wait for another (on a pool of one it would wait for ever).
    async fn existing_on(
        &self,
        c: &deadpool_postgres::Object,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
        ctx: String,
    ) -> Result<std::collections::HashSet<CheckpointId>> {
        let id_bytes: Vec<Vec<u8>> = ids.iter().map(|i| i.to_bytes().to_vec()).collect();
        let st = c
            .prepare_cached(&self.hot.existing)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let rows = c
            .query(&st, &[&thread.as_str(), &ns.as_str(), &id_bytes])
            .await
            .map_err(pg_err(ctx))?;
        rows.iter()
            .map(|r| id_from(thread.as_str(), r.col(0)?))
            .collect()
    }

    async fn client(&self, context: &str) -> Result<deadpool_postgres::Object> {
        self.pool
            .get()
            .await
            .map_err(pool_err(format!("postgres: {context}: connection")))
    }
}

fn to_row(r: &tokio_postgres::Row) -> Result<CheckpointRow> {
    let thread: String = r.col(4)?;
    let id: &[u8] = r.col(0)?;
    let parent: Option<&[u8]> = r.col(1)?;
    let id = id_from(&thread, id)?;
    Ok(CheckpointRow {
        id,
        parent: parent.map(|p| parent_from(&thread, id, p)).transpose()?,
        record: r.col(2)?,
        metadata: r.col(3)?,
        ns: CheckpointNs::new(r.col::<String>(5)?),
        thread_id: ThreadId::new(thread),
    })
}

const ROW_COLS: &str = "checkpoint_id, parent_id, record, metadata, thread_id, checkpoint_ns";

/// The value blobs of `(channel, version)` keys ($3, $4) of a thread ($1) and namespace ($2).
const BLOBS_SQL: &str = "SELECT k.channel, k.version, b.data FROM unnest($3::text[], $4::bigint[]) k(channel, version)
  CROSS JOIN LATERAL (
    -- LIMIT 1 (the key is unique anyway) keeps the lookup on the primary key per key: a cached
    -- generic plan otherwise may hash every blob of the thread.
    SELECT data FROM {s}.blobs b
     WHERE b.thread_id = $1 AND b.checkpoint_ns = $2 AND b.channel = k.channel AND b.version = k.version LIMIT 1) b";

/// Up to $4 checkpoint rows along parent pointers from $3 (thread $1, namespace $2).
const ANCESTORS_SQL: &str = "WITH RECURSIVE chain(checkpoint_id, parent_id, record, metadata, depth) AS (
                    SELECT checkpoint_id, parent_id, record, metadata, 0 FROM {s}.checkpoints
                     WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3
                    UNION ALL
                    SELECT c.checkpoint_id, c.parent_id, c.record, c.metadata, chain.depth + 1
                      FROM chain CROSS JOIN LATERAL (
                        -- LATERAL + LIMIT 1 keeps PostgreSQL on the primary key for each step;
                        -- a plain join re-scans the thread per step (measured: 240 ms vs 2 ms for 512).
                        SELECT x.checkpoint_id, x.parent_id, x.record, x.metadata FROM {s}.checkpoints x
                         WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id = chain.parent_id LIMIT 1) c
                     WHERE chain.depth + 1 < $4)
                 SELECT checkpoint_id, parent_id, record, metadata, $1::text, $2::text FROM chain ORDER BY depth";

/// The writes of the checkpoints $3 of thread $1, namespace $2.
///
/// One primary-key range per checkpoint (LATERAL): written as `checkpoint_id = ANY($3)`, the
/// plans PostgreSQL made (generic or custom, with the statistics of a table that grew since)
/// kept only the thread and namespace as the index condition and filtered every write of the
/// thread, 2-9 ms at 4,000 checkpoints for a walk's page of 14.
const WRITES_SQL: &str = "SELECT w.checkpoint_id, w.task_id, w.idx, w.channel, w.task_path, w.value
       FROM unnest($3::bytea[]) k(id) CROSS JOIN LATERAL (
         SELECT checkpoint_id, task_id, idx, channel, task_path, value FROM {s}.writes x
          WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id = k.id
          -- OFFSET 0 keeps the subquery a subquery, run per id on the key: pulled up into a
          -- join, the generic plan hashed every write of the thread again.
          OFFSET 0) w";

/// Which of the checkpoints $3 of thread $1, namespace $2 exist: one primary-key lookup per id
/// (see [`WRITES_SQL`]: `= ANY` filtered every checkpoint of the thread).
const EXISTING_SQL: &str = "SELECT k.id FROM unnest($3::bytea[]) k(id) CROSS JOIN LATERAL (
    SELECT 1 FROM {s}.checkpoints x
     WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id = k.id LIMIT 1) c";

/// The message bodies of a thread ($1) in the runs `[lo, hi)` ($2, $3), in order, and one
/// more row with sequence number -1 holding the thread's epoch (8 bytes, big-endian) from the
/// same snapshot (see `BodyRead`); the reader finds that row by its number, wherever it comes.
const MESSAGES_SQL: &str = "SELECT -1::int8, int8send(COALESCE((SELECT epoch FROM {s}.thread_epochs WHERE thread_id = $1), 0)::int8)
UNION ALL
SELECT m.seq, m.body FROM unnest($2::bigint[], $3::bigint[]) r(lo, hi)
  CROSS JOIN LATERAL (
    SELECT seq, body FROM {s}.messages x
     WHERE x.thread_id = $1 AND x.seq >= r.lo AND x.seq < r.hi ORDER BY x.seq) m";

/// The sequence number of [`MESSAGES_SQL`]'s epoch row.
const EPOCH_ROW: i64 = -1;

/// The rows of a checkpoint and of its writes, told apart by the first column (0: the
/// checkpoint, with the thread's epoch in the seventh column; 1: a write); `{cp}` selects the
/// checkpoint. It runs before the statement that reads the bodies, so the epoch is read first.
const HEAD_SQL: &str = "WITH cp AS ({cp})
SELECT 0::int2, checkpoint_id, parent_id, record, metadata,
       NULL::text, COALESCE((SELECT epoch FROM {s}.thread_epochs WHERE thread_id = $1), 0)::int8,
       NULL::text, NULL::text, NULL::bytea FROM cp
UNION ALL
SELECT 1::int2, NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea,
       w.task_id, w.idx, w.channel, w.task_path, w.value
  FROM {s}.writes w
 -- A scalar subquery, not a join: the checkpoint id then bounds the index scan (a cached
 -- generic plan otherwise scans every write of the thread and filters).
 WHERE w.thread_id = $1 AND w.checkpoint_ns = $2 AND w.checkpoint_id = (SELECT checkpoint_id FROM cp)";

/// [`HEAD_SQL`] plus the checkpoint's ancestors: up to `{limit}` rows (2: id, parent, record,
/// metadata in columns 2–5, the distance from the parent in column 7) along parent pointers
/// from its parent. One statement, so the row, its writes and its ancestors come from one
/// snapshot in one round trip (the graph runtime's cold read of a relative record otherwise
/// spends one more on the ancestors).
const HEAD_CHAIN_SQL: &str = "WITH RECURSIVE cp AS ({cp}),
 chain(checkpoint_id, parent_id, record, metadata, depth) AS (
    SELECT x.checkpoint_id, x.parent_id, x.record, x.metadata, 0 FROM {s}.checkpoints x
     WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id = (SELECT parent_id FROM cp)
       AND {limit} > 0
    UNION ALL
    SELECT c.checkpoint_id, c.parent_id, c.record, c.metadata, chain.depth + 1
      FROM chain CROSS JOIN LATERAL (
        -- As in the ancestor walk: one primary-key lookup per step.
        SELECT x.checkpoint_id, x.parent_id, x.record, x.metadata FROM {s}.checkpoints x
         WHERE x.thread_id = $1 AND x.checkpoint_ns = $2 AND x.checkpoint_id = chain.parent_id LIMIT 1) c
     WHERE chain.depth + 1 < {limit})
SELECT 0::int2, checkpoint_id, parent_id, record, metadata,
       NULL::text, COALESCE((SELECT epoch FROM {s}.thread_epochs WHERE thread_id = $1), 0)::int8,
       NULL::text, NULL::text, NULL::bytea FROM cp
UNION ALL
SELECT 1::int2, NULL::bytea, NULL::bytea, NULL::bytea, NULL::bytea,
       w.task_id, w.idx, w.channel, w.task_path, w.value
  FROM {s}.writes w
 WHERE w.thread_id = $1 AND w.checkpoint_ns = $2 AND w.checkpoint_id = (SELECT checkpoint_id FROM cp)
UNION ALL
SELECT 2::int2, checkpoint_id, parent_id, record, metadata, NULL::text, depth::int8,
       NULL::text, NULL::text, NULL::bytea FROM chain";

/// The row of checkpoint $3 (thread $1, namespace $2), told apart by the first column (0),
/// and the blobs of the keys $4/$5 (1: channel, version, data in columns 6, 7 and 5), only
/// if the checkpoint exists: one statement, so one snapshot.
const CHECKPOINT_BLOBS_SQL: &str = "WITH cp AS (
    SELECT checkpoint_id, parent_id, record, metadata FROM {s}.checkpoints
     WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3)
SELECT 0::int2, checkpoint_id, parent_id, record, metadata, NULL::text, NULL::int8 FROM cp
UNION ALL
SELECT 1::int2, NULL::bytea, NULL::bytea, NULL::bytea, b.data, k.channel, k.version
  FROM unnest($4::text[], $5::bigint[]) k(channel, version)
  CROSS JOIN LATERAL (
    SELECT data FROM {s}.blobs b
     WHERE b.thread_id = $1 AND b.checkpoint_ns = $2 AND b.channel = k.channel AND b.version = k.version LIMIT 1) b
 WHERE EXISTS (SELECT 1 FROM cp)";

/// The `{cp}` of [`HEAD_SQL`] for the checkpoint $3 of thread $1, namespace $2.
const CP_BY_ID_SQL: &str = "SELECT checkpoint_id, parent_id, record, metadata FROM {s}.checkpoints
  WHERE thread_id = $1 AND checkpoint_ns = $2 AND checkpoint_id = $3";

/// The `{cp}` of [`HEAD_SQL`] for the latest checkpoint of thread $1, namespace $2.
const CP_LATEST_SQL: &str = "SELECT checkpoint_id, parent_id, record, metadata FROM {s}.checkpoints
  WHERE thread_id = $1 AND checkpoint_ns = $2 ORDER BY checkpoint_id DESC LIMIT 1";

/// `keys` as the channel and version arrays the blob statements take, without the keys whose
/// version the column cannot hold (a record an older build stored): no value is stored under
/// them, so they read as no value, as on the memory saver, not as the caller's error.
fn key_arrays(keys: &[(ChannelName, ChannelVersion)]) -> (Vec<&str>, Vec<i64>) {
    keys.iter()
        .filter_map(|(c, v)| Some((c.as_str(), i64::try_from(v.get()).ok()?)))
        .unzip()
}

/// Whether every body the values and writes of `rows` reference was read.
fn bodies_complete(rows: &TupleRows) -> bool {
    // Stored lengths: saturating, so a damaged one cannot overflow the sum.
    let wanted = runs_of_rows(&rows.blobs, &rows.writes)
        .iter()
        .fold(0u64, |t, (_, len)| t.saturating_add(*len));
    rows.bodies.len() as u64 == wanted
}

/// The checkpoint row of a statement that tells rows apart by its first column (columns 1–4:
/// id, parent, record, metadata; [`HEAD_SQL`], [`CHECKPOINT_BLOBS_SQL`]).
fn union_row(
    r: &tokio_postgres::Row,
    thread: &ThreadId,
    ns: &CheckpointNs,
) -> Result<CheckpointRow> {
    let parent: Option<&[u8]> = r.col(2)?;
    let id = id_from(thread.as_str(), r.col(1)?)?;
    Ok(CheckpointRow {
        thread_id: thread.clone(),
        ns: ns.clone(),
        id,
        parent: parent
            .map(|p| parent_from(thread.as_str(), id, p))
            .transpose()?,
        record: r.col(3)?,
        metadata: r.col(4)?,
    })
}

/// The rows of [`HEAD_SQL`] or [`HEAD_CHAIN_SQL`], told apart by their first column: the
/// checkpoint with the thread's epoch (0), its writes (1) and its ancestors with their depth
/// (2, put nearest first); `None` when the checkpoint row is not among them.
fn head_rows(
    rows: &[tokio_postgres::Row],
    thread: &ThreadId,
    ns: &CheckpointNs,
) -> Result<Option<HeadChain>> {
    let mut row = None;
    let mut epoch = 0;
    let mut writes = Vec::new();
    let mut chain = Vec::new();
    for r in rows {
        match r.col::<i16>(0)? {
            0 => {
                epoch = u64_of(thread.as_str(), r.col(6)?, "thread epoch")?;
                row = Some(union_row(r, thread, ns)?);
            }
            1 => writes.push(r),
            _ => chain.push((r.col::<i64>(6)?, union_row(r, thread, ns)?)),
        }
    }
    let Some(row) = row else {
        return Ok(None);
    };
    let writes = writes
        .into_iter()
        .map(|r| {
            Ok(WriteRow {
                checkpoint_id: row.id,
                task_id: TaskId::new(r.col::<String>(5)?),
                idx: r.col::<i64>(6)?,
                channel: ChannelName::new(r.col::<String>(7)?),
                task_path: TaskPath::new(r.col::<String>(8)?),
                value: r.col::<Vec<u8>>(9)?,
            })
        })
        .collect::<Result<_>>()?;
    // UNION ALL keeps no order: the walk's depth puts the ancestors nearest first.
    chain.sort_by_key(|(depth, _)| *depth);
    Ok(Some(HeadChain {
        row,
        writes,
        epoch,
        ancestors: chain.into_iter().map(|(_, r)| r).collect(),
    }))
}

/// The value blobs of `keys` as rows of the prepared [`BLOBS_SQL`].
async fn read_blobs(
    c: &deadpool_postgres::Object,
    st: &tokio_postgres::Statement,
    thread: &ThreadId,
    ns: &CheckpointNs,
    keys: &[(ChannelName, ChannelVersion)],
    ctx: String,
) -> Result<Vec<BlobRow>> {
    let (channels, versions) = key_arrays(keys);
    let rows = c
        .query(st, &[&thread.as_str(), &ns.as_str(), &channels, &versions])
        .await
        .map_err(pg_err(ctx))?;
    rows.iter()
        .map(|r| {
            Ok(BlobRow {
                channel: ChannelName::new(r.col::<String>(0)?),
                version: ChannelVersion::new(u64_of(
                    thread.as_str(),
                    r.col(1)?,
                    "channel version",
                )?),
                data: r.col(2)?,
            })
        })
        .collect()
}

/// The row of checkpoint `id` and its value blobs of `keys`, from one snapshot, with the
/// prepared [`CHECKPOINT_BLOBS_SQL`]; `None` when the row is gone.
async fn read_checkpoint_blobs(
    c: &deadpool_postgres::Object,
    st: &tokio_postgres::Statement,
    thread: &ThreadId,
    ns: &CheckpointNs,
    id: CheckpointId,
    keys: &[(ChannelName, ChannelVersion)],
    ctx: String,
) -> Result<Option<(CheckpointRow, Vec<BlobRow>)>> {
    let (channels, versions) = key_arrays(keys);
    let rows = c
        .query(
            st,
            &[
                &thread.as_str(),
                &ns.as_str(),
                &id.to_bytes().as_slice(),
                &channels,
                &versions,
            ],
        )
        .await
        .map_err(pg_err(ctx))?;
    let mut row = None;
    let mut blobs = Vec::new();
    for r in &rows {
        if r.col::<i16>(0)? == 0 {
            row = Some(union_row(r, thread, ns)?);
        } else {
            blobs.push(BlobRow {
                channel: ChannelName::new(r.col::<String>(5)?),
                version: ChannelVersion::new(u64_of(
                    thread.as_str(),
                    r.col(6)?,
                    "channel version",
                )?),
                data: r.col(4)?,
            });
        }
    }
    Ok(row.map(|row| (row, blobs)))
}

/// The checked bodies of `runs` and the thread's epoch in the same snapshot, with the prepared
/// [`MESSAGES_SQL`]; hashed for the message index as they arrive when the read is `seeding` it.
async fn read_bodies(
    c: &deadpool_postgres::Object,
    st: &tokio_postgres::Statement,
    thread: &ThreadId,
    runs: &[(u64, u64)],
    seeding: bool,
    ctx: String,
) -> Result<BodyRead> {
    let lo: Vec<i64> = runs
        .iter()
        .map(|(s, _)| i64::try_from(*s).unwrap_or(i64::MAX))
        .collect();
    let hi: Vec<i64> = runs
        .iter()
        .map(|(s, l)| i64::try_from(s.saturating_add(*l)).unwrap_or(i64::MAX))
        .collect();
    let params: [&(dyn tokio_postgres::types::ToSql + Sync); 3] = [&thread.as_str(), &lo, &hi];
    let rows = c.query_raw(st, params).await.map_err(pg_err(ctx.clone()))?;
    let mut rows = std::pin::pin!(rows);
    // Sized for the bodies the runs name, up to 65,536: a damaged run length (checksummed, but
    // any number) must not reserve memory by itself; a longer read grows as rows arrive.
    let mut out = Vec::with_capacity(
        runs.iter()
            .fold(0u64, |t, (_, l)| t.saturating_add(*l))
            .try_into()
            .unwrap_or(0)
            .min(1 << 16),
    );
    let mut epoch = None;
    // Each row is checked and its body copied out (once) as it arrives, while the server is
    // still sending the rest, and its buffer is released right after.
    while let Some(r) = futures::TryStreamExt::try_next(&mut rows)
        .await
        .map_err(pg_err(ctx.clone()))?
    {
        let seq: i64 = r.col(0)?;
        if seq == EPOCH_ROW {
            // Not eight bytes (never from this statement): unknown, which readers treat as
            // a moved epoch.
            epoch = <[u8; 8]>::try_from(r.col::<&[u8]>(1)?)
                .ok()
                .and_then(|b| u64::try_from(i64::from_be_bytes(b)).ok());
            continue;
        }
        let seq = u64_of(thread.as_str(), seq, "message sequence")?;
        out.push(if seeding {
            BodyRow::check_hashed(seq, r.col(1)?)
        } else {
            BodyRow::check(seq, r.col(1)?)
        });
    }
    Ok(BodyRead { rows: out, epoch })
}

/// The one row an aggregate statement returns.
fn one_row<'r>(rows: &'r [tokio_postgres::Row], ctx: &str) -> Result<&'r tokio_postgres::Row> {
    match rows {
        [row] => Ok(row),
        _ => Err(Error::backend(
            ctx,
            std::io::Error::other(format!(
                "an aggregate returned {} rows, not one",
                rows.len()
            )),
        )),
    }
}

/// The error context of a check of which checkpoints exist.
fn ctx_check(thread: &ThreadId) -> String {
    format!("postgres: thread {thread}: checking checkpoints")
}

/// Below this many bodies a read takes one connection: a second statement costs more than it
/// saves on a short read.
const SPLIT_MIN_BODIES: u64 = 512;

/// Runs of message bodies: `(first sequence number, count)`.
type Runs = Vec<(u64, u64)>;

/// `runs` cut in two at half their bodies (a run may be cut in the middle); `None` when there
/// are too few bodies to be worth two statements.
fn split_runs(runs: &[(u64, u64)]) -> Option<(Runs, Runs)> {
    split_runs_from(runs, SPLIT_MIN_BODIES)
}

/// [`split_runs`] with the threshold as a parameter (tests use small ones).
fn split_runs_from(runs: &[(u64, u64)], min_bodies: u64) -> Option<(Runs, Runs)> {
    let total = runs.iter().fold(0u64, |n, (_, l)| n.saturating_add(*l));
    if total < min_bodies.max(2) {
        return None;
    }
    let mut left = total / 2;
    let (mut first, mut second) = (Vec::new(), Vec::new());
    for &(start, len) in runs.iter().filter(|(_, l)| *l > 0) {
        if left >= len {
            first.push((start, len));
            left -= len;
        } else if left > 0 {
            first.push((start, left));
            second.push((start.saturating_add(left), len - left));
            left = 0;
        } else {
            second.push((start, len));
        }
    }
    Some((first, second))
}

/// The read of two halves: their rows in order, and the epoch only when both halves read the
/// same one (`None`, a moved epoch to the reader, otherwise).
fn join_halves(mut a: BodyRead, b: BodyRead) -> BodyRead {
    a.rows.extend(b.rows);
    if a.epoch != b.epoch {
        a.epoch = None;
    }
    a
}

/// A transaction at READ COMMITTED, whatever the server's or the session's default: the
/// saver's handling of concurrent writers is argued statement by statement (each statement
/// of a transaction sees what committed before it), which REPEATABLE READ or SERIALIZABLE would
/// turn into stale re-checks. Set per transaction, not as a startup option, which connection
/// poolers refuse or drop.
async fn read_committed(
    c: &mut deadpool_postgres::Object,
) -> std::result::Result<deadpool_postgres::Transaction<'_>, tokio_postgres::Error> {
    c.build_transaction()
        .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
        .start()
        .await
}

/// A write's error: a deadlock the server broke by aborting it (nothing of it stored) is a
/// retryable [`Error::Conflict`]; anything else a backend error.
fn deadlock_or(thread: &ThreadId, context: String) -> impl FnOnce(tokio_postgres::Error) -> Error {
    let thread = thread.clone();
    move |e| {
        if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED) {
            Error::Conflict {
                thread_id: thread,
                detail: "the write deadlocked with a concurrent writer of the thread and was rolled back; retry it".into(),
            }
        } else if e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE) {
            // A single-statement write under a stricter default isolation level than READ
            // COMMITTED (set by the server or the session) that met a concurrent writer.
            Error::Conflict {
                thread_id: thread,
                detail:
                    "the write met a concurrent writer of the thread and was rolled back; retry it"
                        .into(),
            }
        } else {
            Error::backend(context, e)
        }
    }
}

fn conflict_or(thread: &ThreadId, context: String) -> impl FnOnce(tokio_postgres::Error) -> Error {
    let thread = thread.clone();
    move |e| {
        if e.code() == Some(&SqlState::UNIQUE_VIOLATION) {
            Error::Conflict {
                thread_id: thread,
                detail: "message sequence numbers were taken by another writer".into(),
            }
        } else if e.code() == Some(&SqlState::T_R_DEADLOCK_DETECTED)
            || e.code() == Some(&SqlState::T_R_SERIALIZATION_FAILURE)
        {
            // The server broke a lock cycle with a concurrent writer of the thread by aborting
            // this write (or, under a stricter default isolation level, refused it after one):
            // nothing of it was stored, and it may be retried.
            Error::Conflict {
                thread_id: thread,
                detail: "the write deadlocked with a concurrent writer of the thread and was rolled back; retry it".into(),
            }
        } else {
            Error::backend(context, e)
        }
    }
}

#[async_trait]
impl Backend for PgBackend {
    async fn read_config(&self) -> Result<Option<(ChannelMode, SnapshotFrequency)>> {
        let c = self.client("reading store configuration").await?;
        // The configuration and whether the store holds checkpoints, in one statement (one
        // snapshot): read apart, a store another process configured and wrote to in between
        // looked damaged (a checkpoint, but no configuration). The key `''` marks checkpoints.
        let rows = c
            .query(
                &self.sql(
                    "SELECT key, value FROM {s}.antler_meta WHERE key IN ('channel_mode', 'snapshot_frequency')
                     UNION ALL SELECT '', '' WHERE EXISTS (SELECT 1 FROM {s}.checkpoints)",
                ),
                &[],
            )
            .await
            .map_err(pg_err("postgres: reading store configuration"))?;
        let get = |k: &str| config_value(&rows, k);
        let (mode, freq) = (get("channel_mode")?, get("snapshot_frequency")?);
        let (Some(mode), Some(freq)) = (mode.clone(), freq.clone()) else {
            // A new store records its configuration before its first checkpoint.
            if get("")?.is_some() {
                return Err(crate::engine::config_damaged(
                    mode.as_deref(),
                    freq.as_deref(),
                ));
            }
            return Ok(None);
        };
        crate::engine::parse_config(&mode, &freq).map(Some)
    }

    async fn write_config(
        &self,
        mode: ChannelMode,
        frequency: SnapshotFrequency,
        expected: Option<(ChannelMode, SnapshotFrequency)>,
    ) -> Result<()> {
        let ctx = "postgres: recording store configuration";
        let mut c = self.client(ctx).await?;
        let tx = read_committed(&mut c).await.map_err(pg_err(ctx))?;
        // A lock that conflicts with itself: concurrent openers compare and write one at a
        // time, and each compares against what the one before it committed.
        tx.batch_execute(&self.sql("LOCK TABLE {s}.antler_meta IN SHARE ROW EXCLUSIVE MODE"))
            .await
            .map_err(pg_err(ctx))?;
        let rows = tx
            .query(&self.sql("SELECT key, value FROM {s}.antler_meta WHERE key IN ('channel_mode', 'snapshot_frequency')"), &[])
            .await
            .map_err(pg_err(ctx))?;
        let get = |k: &str| config_value(&rows, k);
        if !crate::engine::config_is(
            &(get("channel_mode")?, get("snapshot_frequency")?),
            expected,
        ) {
            return Ok(());
        }
        let sql = self.sql("INSERT INTO {s}.antler_meta (key, value) VALUES ($1, $2) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value");
        for (k, v) in [
            ("channel_mode", mode.as_str().to_owned()),
            ("snapshot_frequency", frequency.to_string()),
        ] {
            tx.execute(&sql, &[&k, &v]).await.map_err(pg_err(ctx))?;
        }
        tx.commit().await.map_err(pg_err(ctx))
    }

    async fn checkpoint(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
    ) -> Result<Option<CheckpointRow>> {
        let ctx = format!("postgres: thread {thread}: reading checkpoint");
        let c = self.client(&ctx).await?;
        let row = match id {
            Some(id) => {
                let st = c
                    .prepare_cached(&self.hot.checkpoint_by_id)
                    .await
                    .map_err(pg_err(ctx.clone()))?;
                c.query_opt(
                    &st,
                    &[&thread.as_str(), &ns.as_str(), &id.to_bytes().as_slice()],
                )
                .await
            }
            None => {
                let st = c
                    .prepare_cached(&self.hot.checkpoint_latest)
                    .await
                    .map_err(pg_err(ctx.clone()))?;
                c.query_opt(&st, &[&thread.as_str(), &ns.as_str()]).await
            }
        }
        .map_err(pg_err(ctx))?;
        row.as_ref().map(to_row).transpose()
    }

    async fn checkpoints(&self, scan: RowScan<'_>) -> Result<Vec<CheckpointRow>> {
        let c = self.client("listing checkpoints").await?;
        // `COLLATE "C"` compares text in byte order, like `list_order`; key order compares as
        // the primary key does.
        let (tail, args) = scan_sql(
            &scan,
            |i| format!("${i}"),
            |col| format!(r#"{col} COLLATE "C""#),
        );
        let sql = format!("SELECT {ROW_COLS} FROM {}.checkpoints{tail}", self.s);
        let args: Vec<Box<dyn tokio_postgres::types::ToSql + Sync + Send>> = args
            .into_iter()
            .map(|a| -> Box<dyn tokio_postgres::types::ToSql + Sync + Send> {
                match a {
                    ScanArg::Text(t) => Box::new(t),
                    ScanArg::Bytes(b) => Box::new(b),
                    ScanArg::Int(i) => Box::new(i),
                }
            })
            .collect();
        let refs: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> =
            args.iter().map(|a| a.as_ref() as _).collect();
        // A handful of shapes (which conditions are present): cached per connection. A scan
        // may go over a whole thread, or all of them: the server's own plan choice.
        let rows = self
            .whole_thread(&c, &sql, &refs)
            .await
            .map_err(pg_err("postgres: listing checkpoints"))?;
        rows.iter().map(to_row).collect()
    }

    async fn ancestors(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        start: CheckpointId,
        max: usize,
    ) -> Result<Vec<CheckpointRow>> {
        // The recursive statement always returns its starting row.
        if max == 0 {
            return Ok(Vec::new());
        }
        let ctx = format!("postgres: thread {thread}: walking ancestors");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.ancestors)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let max = i32::try_from(max).unwrap_or(i32::MAX);
        let rows = c
            .query(
                &st,
                &[
                    &thread.as_str(),
                    &ns.as_str(),
                    &start.to_bytes().as_slice(),
                    &max,
                ],
            )
            .await
            .map_err(pg_err(ctx))?;
        rows.iter().map(to_row).collect()
    }

    async fn blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Vec<BlobRow>> {
        if keys.is_empty() {
            return Ok(Vec::new());
        }
        let ctx = format!("postgres: thread {thread}: reading blobs");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.blobs)
            .await
            .map_err(pg_err(ctx.clone()))?;
        read_blobs(&c, &st, thread, ns, keys, ctx).await
    }

    async fn checkpoint_blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: CheckpointId,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<(CheckpointRow, Vec<BlobRow>)>> {
        let ctx = format!("postgres: thread {thread}: reading blobs");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.checkpoint_blobs)
            .await
            .map_err(pg_err(ctx.clone()))?;
        read_checkpoint_blobs(&c, &st, thread, ns, id, keys, ctx).await
    }

    async fn writes(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<Vec<WriteRow>> {
        if ids.is_empty() {
            return Ok(Vec::new());
        }
        let ctx = format!("postgres: thread {thread}: reading writes");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.writes)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let id_bytes: Vec<Vec<u8>> = ids.iter().map(|i| i.to_bytes().to_vec()).collect();
        let rows = c
            .query(&st, &[&thread.as_str(), &ns.as_str(), &id_bytes])
            .await
            .map_err(pg_err(ctx))?;
        rows.iter()
            .map(|r| {
                Ok(WriteRow {
                    checkpoint_id: id_from(thread.as_str(), r.col(0)?)?,
                    task_id: TaskId::new(r.col::<String>(1)?),
                    idx: r.col(2)?,
                    channel: ChannelName::new(r.col::<String>(3)?),
                    task_path: TaskPath::new(r.col::<String>(4)?),
                    value: r.col(5)?,
                })
            })
            .collect()
    }

    async fn existing(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<std::collections::HashSet<CheckpointId>> {
        if ids.is_empty() {
            return Ok(std::collections::HashSet::new());
        }
        let ctx = ctx_check(thread);
        let c = self.client(&ctx).await?;
        self.existing_on(&c, thread, ns, ids, ctx).await
    }

    async fn messages(
        &self,
        thread: &ThreadId,
        runs: &[(u64, u64)],
        seeding: bool,
    ) -> Result<BodyRead> {
        let ctx = format!("postgres: thread {thread}: reading messages");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.messages)
            .await
            .map_err(pg_err(ctx.clone()))?;
        self.read_bodies_split(&c, &st, thread, runs, seeding, ctx)
            .await
    }

    async fn tuple_rows(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        with_values: bool,
    ) -> Result<Option<TupleRows>> {
        // The values are read by a second statement, which returns them only if the checkpoint
        // still exists: a checkpoint deleted in between (a prune, delete_for_runs or
        // delete_thread of another process) is not returned without the values it lists,
        // which would read as none. An addressed one is then gone; the latest is read again.
        // Bodies are read by a third statement: a collection committing before it (a prune,
        // or a delete of the thread) leaves references without bodies. Such a read starts
        // again, which finds the checkpoint gone or complete; the last attempt returns what
        // it read, and a body that is really missing is the engine's typed error.
        for attempt in 0..3 {
            match self.tuple_rows_once(thread, ns, id, with_values).await? {
                Some(Some(rows)) if attempt < 2 && !bodies_complete(&rows) => {}
                Some(rows) => return Ok(rows),
                None if id.is_some() => return Ok(None),
                None => {}
            }
        }
        Err(Error::latest_deleted_while_read(thread))
    }

    async fn head_chain(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        limit: usize,
    ) -> Result<Option<HeadChain>> {
        let ctx = format!("postgres: thread {thread}: reading checkpoint");
        let c = self.client(&ctx).await?;
        let sql = if id.is_some() {
            &self.hot.head_chain_by_id
        } else {
            &self.hot.head_chain_latest
        };
        let st = c.prepare_cached(sql).await.map_err(pg_err(ctx.clone()))?;
        // The engine asks for at most a page of ancestors.
        let limit = i32::try_from(limit).unwrap_or(i32::MAX);
        let rows = match id {
            Some(id) => {
                c.query(
                    &st,
                    &[
                        &thread.as_str(),
                        &ns.as_str(),
                        &id.to_bytes().as_slice(),
                        &limit,
                    ],
                )
                .await
            }
            None => {
                c.query(&st, &[&thread.as_str(), &ns.as_str(), &limit])
                    .await
            }
        }
        .map_err(pg_err(ctx))?;
        head_rows(&rows, thread, ns)
    }

    async fn next_message_seq(&self, thread: &ThreadId) -> Result<u64> {
        let ctx = format!("postgres: thread {thread}: reading message numbers");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.next_seq)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let row = c
            .query_one(&st, &[&thread.as_str()])
            .await
            .map_err(pg_err(ctx))?;
        Ok(u64_of(thread.as_str(), row.col(0)?, "message sequence")?.saturating_add(1))
    }

    async fn all_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>> {
        // No ORDER BY: when the thread is most of the table PostgreSQL scans the heap and
        // sorts every body in the server (measured: 3.5 of 4.4 ms for 4,000 bodies); the
        // rows arrive almost in order, which the sort here checks in one pass.
        let rows = self
            .thread_message_rows(
                thread,
                "SELECT seq, body FROM {s}.messages WHERE thread_id = $1",
                "messages",
            )
            .await?;
        let mut out = rows
            .iter()
            .map(|r| {
                Ok(MessageRow {
                    seq: u64_of(thread.as_str(), r.col(0)?, "message sequence")?,
                    body: r.col(1)?,
                })
            })
            .collect::<Result<Vec<_>>>()?;
        out.sort_unstable_by_key(|m| m.seq);
        Ok(out)
    }

    async fn message_seqs(&self, thread: &ThreadId) -> Result<Vec<u64>> {
        // Read from the primary key's index alone where the visibility map allows, and sorted
        // here, as `all_messages` sorts.
        let rows = self
            .thread_message_rows(
                thread,
                "SELECT seq FROM {s}.messages WHERE thread_id = $1",
                "message numbers",
            )
            .await?;
        let mut out = rows
            .iter()
            .map(|r| u64_of(thread.as_str(), r.col(0)?, "message sequence"))
            .collect::<Result<Vec<_>>>()?;
        out.sort_unstable();
        Ok(out)
    }

    async fn put_checkpoint(
        &self,
        row: CheckpointRow,
        run: Option<crate::ids::RunId>,
        mark: u64,
        blobs: Vec<BlobRow>,
        messages: Vec<MessageRow>,
        guard: IndexGuard,
        parent_required: bool,
    ) -> Result<()> {
        // One statement (data-modifying CTEs are atomic): one round trip per checkpoint.
        // It upserts the checkpoint row unless the required parent is missing (`pok`), so it
        // reports one row written or none.
        let ctx = format!(
            "postgres: thread {}: writing checkpoint {}",
            row.thread_id, row.id
        );
        let mut c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.put)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let seqs = messages
            .iter()
            .map(|m| i64_of(m.seq, "message sequence"))
            .collect::<Result<Vec<_>>>()?;
        let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
        let channels: Vec<&str> = blobs.iter().map(|b| b.channel.as_str()).collect();
        let versions = blobs
            .iter()
            .map(|b| i64_of(b.version.get(), "channel version"))
            .collect::<Result<Vec<_>>>()?;
        let data: Vec<&[u8]> = blobs.iter().map(|b| b.data.as_slice()).collect();
        let parent = row.parent.map(|p| p.to_bytes().to_vec());
        let epoch = guard.epoch.map(|e| i64_of(e, "thread epoch")).transpose()?;
        let mark = i64_of(mark, "channel version")?;
        let run = run.as_ref().map(crate::ids::RunId::as_str);
        let id = row.id.to_bytes();
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 15] = [
            &row.thread_id.as_str(),
            &row.ns.as_str(),
            &id.as_slice(),
            &parent,
            &row.record,
            &row.metadata,
            &seqs,
            &bodies,
            &channels,
            &versions,
            &data,
            &epoch,
            &mark,
            &run,
            &parent_required,
        ];
        let mut result = c.query_opt(&st, &params).await;
        // A version check that failed on a value a `delete_thread` removed without having
        // committed yet (a new run on the thread starts its versions again) is no clash once
        // the delete commits (`settled_epoch`). A put that checks the epoch learns of the
        // delete from it (`guard_failure`); one that does not runs once more after the writer
        // is done, on a snapshot taken after it, and a real clash clashes again.
        if guard.epoch.is_none()
            && matches!(&result, Err(e) if e.code() == Some(&SqlState::DIVISION_BY_ZERO))
        {
            self.settled_epoch(&c, &row.thread_id).await?;
            result = c.query_opt(&st, &params).await;
        }
        match result {
            Ok(None) if parent_required => Err(crate::engine::missing_parent(&row)),
            Ok(None) => Err(Error::Backend {
                context: ctx,
                source: "the checkpoint statement wrote no row".into(),
            }),
            Ok(Some(stale)) => {
                if stale.try_get::<_, bool>(0).unwrap_or(false) {
                    self.settle_mark(&mut c, &row, mark).await;
                }
                Ok(())
            }
            Err(e) if e.code() == Some(&SqlState::DIVISION_BY_ZERO) => {
                let clash = Error::Conflict {
                    thread_id: row.thread_id.clone(),
                    detail: format!(
                        "checkpoint {} stores a channel version that already holds a different value; channel versions must be unique within a thread, across branches",
                        row.id
                    ),
                };
                Err(self.guard_failure(&c, &row.thread_id, guard, clash).await)
            }
            Err(e) => Err(conflict_or(&row.thread_id, ctx)(e)),
        }
    }

    async fn put_writes(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        checkpoint: CheckpointId,
        writes: Vec<WriteRow>,
        messages: Vec<MessageRow>,
        guard: IndexGuard,
    ) -> Result<bool> {
        // One statement: the checkpoint and epoch checks, the message bodies and both kinds of writes.
        let ctx = format!("postgres: thread {thread}: writing writes of checkpoint {checkpoint}");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.put_writes)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let seqs = messages
            .iter()
            .map(|m| i64_of(m.seq, "message sequence"))
            .collect::<Result<Vec<_>>>()?;
        let bodies: Vec<&[u8]> = messages.iter().map(|m| m.body.as_slice()).collect();
        let tasks: Vec<&str> = writes.iter().map(|w| w.task_id.as_str()).collect();
        let idxs: Vec<i64> = writes.iter().map(|w| w.idx).collect();
        let channels: Vec<&str> = writes.iter().map(|w| w.channel.as_str()).collect();
        let paths: Vec<&str> = writes.iter().map(|w| w.task_path.as_str()).collect();
        let values: Vec<&[u8]> = writes.iter().map(|w| w.value.as_slice()).collect();
        let epoch = guard.epoch.map(|e| i64_of(e, "thread epoch")).transpose()?;
        let result = c
            .query_one(
                &st,
                &[
                    &thread.as_str(),
                    &ns.as_str(),
                    &checkpoint.to_bytes().as_slice(),
                    &seqs,
                    &bodies,
                    &tasks,
                    &idxs,
                    &channels,
                    &paths,
                    &values,
                    &epoch,
                ],
            )
            .await;
        match result {
            Ok(row) => Ok(row.col(0)?),
            Err(e) if e.code() == Some(&SqlState::DIVISION_BY_ZERO) => {
                // The epoch is checked before the checkpoint here (lock order); the other
                // savers report a missing checkpoint first, and so does this one.
                let exists = match c.prepare_cached(&self.hot.checkpoint_by_id).await {
                    Ok(st) => c
                        .query_opt(
                            &st,
                            &[
                                &thread.as_str(),
                                &ns.as_str(),
                                &checkpoint.to_bytes().as_slice(),
                            ],
                        )
                        .await
                        .map(|r| r.is_some()),
                    Err(e) => Err(e),
                };
                match exists {
                    Ok(false) => Ok(false),
                    _ => {
                        let other = conflict_or(thread, ctx)(e);
                        Err(self.guard_failure(&c, thread, guard, other).await)
                    }
                }
            }
            Err(e) => Err(conflict_or(thread, ctx)(e)),
        }
    }

    async fn delete_thread(&self, thread: &ThreadId) -> Result<()> {
        let ctx = format!("postgres: thread {thread}: deleting");
        let mut c = self.client(&ctx).await?;
        let tx = self
            .whole_thread_tx(&mut c)
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        // The bump first: it locks the epoch row, so a write of the thread either committed
        // before (and the deletes below see its rows) or waits and fails on the new epoch.
        tx.execute(&self.sql(BUMP_EPOCH_SQL), &[&thread.as_str()])
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        // The thread's checkpoint rows next, as `put_writes` and a re-put lock them before
        // their writes and values: the deletes below then take rows in the order writers do.
        tx.execute(
            &self.sql("SELECT 1 FROM {s}.checkpoints WHERE thread_id = $1 ORDER BY checkpoint_ns, checkpoint_id FOR UPDATE"),
            &[&thread.as_str()],
        )
        .await
        .map_err(deadlock_or(thread, ctx.clone()))?;
        // Every put locks the epoch row (`PUT_FRESH_CTE`), so none commits between these
        // statements. `put_writes` of a message-less write locks its checkpoint row, held
        // above. The order still guards a writer that takes neither lock: values before
        // checkpoints (its checkpoint is deleted with the rest or kept with all its values),
        // and the run index first: a put inserts or locks its pair, so its pair is deleted
        // only after it committed, and then its checkpoint is too; or the pair is kept (a
        // pair without a checkpoint is harmless; a checkpoint without its pair would hide it
        // from `delete_for_runs`;
        // `a_put_racing_delete_thread_keeps_no_checkpoint_without_its_run_pair`).
        for table in [
            "run_threads",
            "writes",
            "blobs",
            "messages",
            "checkpoints",
            "version_marks",
        ] {
            tx.execute(
                &self.sql(&format!("DELETE FROM {{s}}.{table} WHERE thread_id = $1")),
                &[&thread.as_str()],
            )
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        }
        tx.commit().await.map_err(deadlock_or(thread, ctx))
    }

    async fn run_threads(&self, runs: &[crate::ids::RunId]) -> Result<Vec<ThreadId>> {
        let ctx = "postgres: reading the run index";
        let c = self.client(ctx).await?;
        let runs: Vec<&str> = runs.iter().map(crate::ids::RunId::as_str).collect();
        let rows = c
            .query(
                &self.sql(
                    "SELECT DISTINCT thread_id FROM {s}.run_threads WHERE run_id = ANY($1::text[])",
                ),
                &[&runs],
            )
            .await
            .map_err(pg_err(ctx))?;
        rows.iter()
            .map(|r| Ok(ThreadId::new(r.col::<String>(0)?)))
            .collect()
    }

    async fn version_mark(&self, thread: &ThreadId, ns: &CheckpointNs) -> Result<Option<u64>> {
        let ctx = format!("postgres: thread {thread}: reading its version mark");
        let c = self.client(&ctx).await?;
        let st = c
            .prepare_cached(&self.hot.mark)
            .await
            .map_err(pg_err(ctx.clone()))?;
        let row = c
            .query_opt(&st, &[&thread.as_str(), &ns.as_str()])
            .await
            .map_err(pg_err(ctx))?;
        let mark = match row {
            Some(r) => r.col::<Option<i64>>(0)?,
            None => None,
        };
        mark.map(|m| u64_of(thread.as_str(), m, "version mark"))
            .transpose()
    }

    async fn thread_epoch(&self, thread: &ThreadId) -> Result<u64> {
        let ctx = format!("postgres: thread {thread}: reading its epoch");
        let c = self.client(&ctx).await?;
        self.read_epoch(&c, thread).await
    }

    async fn delete_checkpoints(
        &self,
        thread: &ThreadId,
        doomed: &[(CheckpointNs, CheckpointId)],
        expected: &[crate::engine::Expected],
    ) -> Result<bool> {
        let ctx = format!("postgres: thread {thread}: deleting checkpoints");
        let mut c = self.client(&ctx).await?;
        let tx = self
            .whole_thread_tx(&mut c)
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        let ns: Vec<&str> = doomed.iter().map(|(n, _)| n.as_str()).collect();
        let ids: Vec<Vec<u8>> = doomed.iter().map(|(_, i)| i.to_bytes().to_vec()).collect();
        // The rows in key order first, as `delete_thread` locks them, so the two cannot
        // deadlock on the order a scan happens to take.
        tx.execute(
            &self.sql(
                "SELECT 1 FROM {s}.checkpoints c JOIN unnest($2::text[], $3::bytea[]) d(ns, id)
                         ON c.checkpoint_ns = d.ns AND c.checkpoint_id = d.id
                        WHERE c.thread_id = $1
                        ORDER BY c.checkpoint_ns, c.checkpoint_id FOR UPDATE OF c",
            ),
            &[&thread.as_str(), &ns, &ids],
        )
        .await
        .map_err(deadlock_or(thread, ctx.clone()))?;
        // Forks from a doomed checkpoint put since the caller's check. A full record that
        // commits after this read is not seen; its reads then fail on its missing parent. A
        // relative record cannot: its put locks the parent row (FOR SHARE), which waits for
        // this transaction and then finds the parent gone (`MissingParent`).
        let now = tx
            .query(
                &self.sql(&format!(
                    "SELECT {ROW_COLS} FROM {{s}}.checkpoints WHERE thread_id = $1"
                )),
                &[&thread.as_str()],
            )
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?
            .iter()
            .map(to_row)
            .collect::<Result<Vec<_>>>()?;
        if crate::engine::forks_from_doomed(&now, expected, doomed) {
            return Ok(false);
        }
        for table in ["checkpoints", "writes"] {
            tx.execute(
                &self.sql(&format!(
                    "DELETE FROM {{s}}.{table} t USING unnest($2::text[], $3::bytea[]) d(ns, id)
                      WHERE t.thread_id = $1 AND t.checkpoint_ns = d.ns AND t.checkpoint_id = d.id"
                )),
                &[&thread.as_str(), &ns, &ids],
            )
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        }
        tx.commit().await.map_err(deadlock_or(thread, ctx))?;
        Ok(true)
    }

    async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> Result<()> {
        let ctx = format!("postgres: copying thread {source} to {target}");
        let mut c = self.client(&ctx).await?;
        let tx = self
            .whole_thread_tx(&mut c)
            .await
            .map_err(deadlock_or(target, ctx.clone()))?;
        // The epoch rows first, in thread order (so two copies in opposite directions cannot
        // deadlock): the target's bumped, as in `delete_thread`, so the collision check below
        // sees every body a write of the target committed; the source's locked unchanged, so
        // a `delete_thread` of the source waits, and the copy below reads one state of it.
        let mut threads = [(source, false), (target, true)];
        threads.sort_by(|a, b| a.0.as_str().cmp(b.0.as_str()));
        for (thread, bump) in threads {
            if bump {
                tx.execute(&self.sql(BUMP_EPOCH_SQL), &[&thread.as_str()])
                    .await
                    .map_err(deadlock_or(target, ctx.clone()))?;
            } else if source != target {
                tx.execute(
                    &self.sql(
                        "INSERT INTO {s}.thread_epochs (thread_id, epoch) VALUES ($1, 0)
                         ON CONFLICT (thread_id) DO UPDATE SET epoch = {s}.thread_epochs.epoch",
                    ),
                    &[&thread.as_str()],
                )
                .await
                .map_err(deadlock_or(target, ctx.clone()))?;
            }
        }
        let collides: bool = tx
            .query_one(
                &self.sql(
                    "SELECT EXISTS (SELECT 1 FROM {s}.messages s JOIN {s}.messages t ON t.thread_id = $2 AND t.seq = s.seq
                      WHERE s.thread_id = $1 AND t.body <> s.body)",
                ),
                &[&source.as_str(), &target.as_str()],
            )
            .await
            .map_err(deadlock_or(target, ctx.clone()))?
            .col(0)?;
        if collides {
            return Err(crate::engine::body_collision(source, target));
        }
        let clashes: bool = tx
            .query_one(
                &self.sql(
                    "SELECT EXISTS (SELECT 1 FROM {s}.blobs s JOIN {s}.blobs t ON t.thread_id = $2 AND t.checkpoint_ns = s.checkpoint_ns
                        AND t.channel = s.channel AND t.version = s.version
                      WHERE s.thread_id = $1 AND t.data <> s.data)",
                ),
                &[&source.as_str(), &target.as_str()],
            )
            .await
            .map_err(deadlock_or(target, ctx.clone()))?
            .col(0)?;
        if clashes {
            return Err(crate::engine::blob_collision(source, target));
        }
        for (what, sql) in [
            (
                "checkpoints",
                "SELECT EXISTS (SELECT 1 FROM {s}.checkpoints s JOIN {s}.checkpoints t ON t.thread_id = $2
                    AND t.checkpoint_ns = s.checkpoint_ns AND t.checkpoint_id = s.checkpoint_id
                  WHERE s.thread_id = $1 AND (t.parent_id, t.record, t.metadata) IS DISTINCT FROM (s.parent_id, s.record, s.metadata))",
            ),
            (
                "pending writes",
                "SELECT EXISTS (SELECT 1 FROM {s}.writes s JOIN {s}.writes t ON t.thread_id = $2
                    AND t.checkpoint_ns = s.checkpoint_ns AND t.checkpoint_id = s.checkpoint_id
                    AND t.task_id = s.task_id AND t.idx = s.idx
                  WHERE s.thread_id = $1 AND (t.channel, t.task_path, t.value) IS DISTINCT FROM (s.channel, s.task_path, s.value))",
            ),
        ] {
            let differs: bool = tx
                .query_one(&self.sql(sql), &[&source.as_str(), &target.as_str()])
                .await
                .map_err(deadlock_or(target, ctx.clone()))?
                .col(0)?;
            if differs {
                return Err(crate::engine::row_collision(source, target, what));
            }
        }
        // Every copy in one statement (PostgreSQL runs each data-modifying `WITH` part to
        // completion whether or not the query reads it): its parts read one snapshot of the source, so a prune
        // or `delete_for_runs` of the source committing meanwhile (they take no epoch lock
        // when no body goes) leaves the target with the source before it, never with copied
        // checkpoints whose writes or values a later statement no longer found.
        // The collision checks above read an earlier snapshot; a put to the target committing
        // after them is met here, as in `put`: other bytes divide by zero (mapped below).
        // The target's marks rise to the source's; an unknown mark (NULL) on either side stays
        // unknown, and so does a source namespace with checkpoints but no mark.
        tx.execute(
            &self.sql(
                "WITH cps AS (
                   INSERT INTO {s}.checkpoints AS x SELECT $2, checkpoint_ns, checkpoint_id, parent_id, record, metadata FROM {s}.checkpoints WHERE thread_id = $1
                   ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id) DO UPDATE
                   SET record = CASE WHEN (x.parent_id, x.record, x.metadata) IS NOT DISTINCT FROM (EXCLUDED.parent_id, EXCLUDED.record, EXCLUDED.metadata)
                                     THEN x.record ELSE int4send(1 / (length(EXCLUDED.record) * 0)) END),
                 vals AS (
                   INSERT INTO {s}.blobs AS x SELECT $2, checkpoint_ns, channel, version, data FROM {s}.blobs WHERE thread_id = $1
                   ON CONFLICT (thread_id, checkpoint_ns, channel, version) DO UPDATE
                   SET data = CASE WHEN x.data = EXCLUDED.data THEN x.data ELSE int4send(1 / (length(EXCLUDED.data) * 0)) END),
                 wr AS (
                   INSERT INTO {s}.writes AS w SELECT $2, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value FROM {s}.writes WHERE thread_id = $1
                   ON CONFLICT (thread_id, checkpoint_ns, checkpoint_id, task_id, idx) DO UPDATE
                   SET value = CASE WHEN (w.channel, w.task_path, w.value) IS NOT DISTINCT FROM (EXCLUDED.channel, EXCLUDED.task_path, EXCLUDED.value)
                                    THEN w.value ELSE int4send(1 / (length(EXCLUDED.value) * 0)) END),
                 msgs AS (
                   INSERT INTO {s}.messages SELECT $2, seq, body FROM {s}.messages WHERE thread_id = $1
                   ON CONFLICT (thread_id, seq) DO UPDATE SET body = EXCLUDED.body),
                 runs AS (
                   INSERT INTO {s}.run_threads SELECT run_id, $2 FROM {s}.run_threads WHERE thread_id = $1
                   ON CONFLICT DO NOTHING),
                 marks AS (
                   INSERT INTO {s}.version_marks AS m
                   SELECT $2, v.checkpoint_ns,
                          CASE WHEN EXISTS (SELECT 1 FROM {s}.checkpoints c WHERE c.thread_id = $2 AND c.checkpoint_ns = v.checkpoint_ns)
                                AND NOT EXISTS (SELECT 1 FROM {s}.version_marks w WHERE w.thread_id = $2 AND w.checkpoint_ns = v.checkpoint_ns)
                               THEN NULL ELSE v.version END
                     FROM {s}.version_marks v WHERE v.thread_id = $1
                   UNION ALL
                   SELECT DISTINCT $2, checkpoint_ns, NULL::bigint FROM {s}.checkpoints WHERE thread_id = $1
                     AND checkpoint_ns NOT IN (SELECT checkpoint_ns FROM {s}.version_marks WHERE thread_id = $1)
                   ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET version =
                     CASE WHEN m.version IS NULL OR EXCLUDED.version IS NULL THEN NULL
                          ELSE GREATEST(m.version, EXCLUDED.version) END)
                 SELECT 1",
            ),
            &[&source.as_str(), &target.as_str()],
        )
        .await
        .map_err(|e| {
            if e.code() == Some(&SqlState::DIVISION_BY_ZERO) {
                // A put or write to the target committed after the checks above.
                crate::engine::row_collision(
                    source,
                    target,
                    "checkpoints, pending writes or values",
                )
            } else {
                deadlock_or(target, ctx.clone())(e)
            }
        })?;
        tx.commit().await.map_err(deadlock_or(target, ctx))
    }

    async fn blob_keys(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<(CheckpointNs, ChannelName, ChannelVersion)>> {
        let ctx = format!("postgres: thread {thread}: listing blobs");
        let c = self.client(&ctx).await?;
        let rows = self
            .whole_thread(
                &c,
                "SELECT checkpoint_ns, channel, version FROM {s}.blobs WHERE thread_id = $1",
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx))?;
        rows.iter()
            .map(|r| {
                Ok((
                    CheckpointNs::new(r.col::<String>(0)?),
                    ChannelName::new(r.col::<String>(1)?),
                    ChannelVersion::new(u64_of(thread.as_str(), r.col(2)?, "channel version")?),
                ))
            })
            .collect()
    }

    async fn delete_blobs(
        &self,
        thread: &ThreadId,
        keys: &[(CheckpointNs, ChannelName, ChannelVersion)],
        expected: &[crate::engine::Expected],
    ) -> Result<bool> {
        let ctx = format!("postgres: thread {thread}: deleting blobs");
        let mut c = self.client(&ctx).await?;
        let c = self
            .whole_thread_tx(&mut c)
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        let checkpoints_now = self.sql(&format!(
            "SELECT {ROW_COLS} FROM {{s}}.checkpoints WHERE thread_id = $1"
        ));
        let same = |rows: Vec<tokio_postgres::Row>| -> Result<bool> {
            let rows = rows.iter().map(to_row).collect::<Result<Vec<_>>>()?;
            Ok(crate::engine::expected_of(rows.iter()) == expected)
        };
        // The caller read the blob keys before this check: a put committing after it stores
        // keys that list did not return.
        let before = c
            .query(&checkpoints_now, &[&thread.as_str()])
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        if !same(before)? {
            return Ok(false);
        }
        let ns: Vec<&str> = keys.iter().map(|k| k.0.as_str()).collect();
        let ch: Vec<&str> = keys.iter().map(|k| k.1.as_str()).collect();
        let v = keys
            .iter()
            .map(|k| i64_of(k.2.get(), "channel version"))
            .collect::<Result<Vec<_>>>()?;
        c.execute(
            &self.sql(
                "DELETE FROM {s}.blobs b USING unnest($2::text[], $3::text[], $4::bigint[]) k(ns, channel, version)
                  WHERE b.thread_id = $1 AND b.checkpoint_ns = k.ns AND b.channel = k.channel AND b.version = k.version",
            ),
            &[&thread.as_str(), &ns, &ch, &v],
        )
        .await
        .map_err(deadlock_or(thread, ctx.clone()))?;
        // But a `copy_thread` onto the thread, or a put again of a deleted checkpoint, brings
        // back keys the list did return, with checkpoints that reference them. If it wrote
        // those rows first, the delete waited for its commit, and its checkpoints show here
        // (a new snapshot): roll back. If the delete locked them first, it waits, and
        // inserts them again once this commits.
        let after = c
            .query(&checkpoints_now, &[&thread.as_str()])
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        if !same(after)? {
            return Ok(false);
        }
        c.commit().await.map_err(deadlock_or(thread, ctx))?;
        Ok(true)
    }

    async fn all_write_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>> {
        let ctx = format!("postgres: thread {thread}: reading writes");
        let c = self.client(&ctx).await?;
        let rows = self
            .whole_thread(
                &c,
                "SELECT value FROM {s}.writes WHERE thread_id = $1",
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx))?;
        rows.iter().map(|r| r.col(0)).collect()
    }

    async fn all_blob_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>> {
        let ctx = format!("postgres: thread {thread}: reading blobs");
        let c = self.client(&ctx).await?;
        let rows = self
            .whole_thread(
                &c,
                "SELECT data FROM {s}.blobs WHERE thread_id = $1",
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx))?;
        rows.iter().map(|r| r.col(0)).collect()
    }

    async fn delete_messages(&self, thread: &ThreadId, seqs: &[u64]) -> Result<()> {
        let ctx = format!("postgres: thread {thread}: deleting messages");
        let mut c = self.client(&ctx).await?;
        let tx = self
            .whole_thread_tx(&mut c)
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        // The bump first, as in `delete_thread`: writes of message lists now wait for this
        // transaction, and the references read below include every one committed before.
        // A deadlock or serialization failure is a `Conflict`, as in every delete of `prune`.
        tx.execute(&self.sql(BUMP_EPOCH_SQL), &[&thread.as_str()])
            .await
            .map_err(deadlock_or(thread, ctx.clone()))?;
        let payloads = tx
            .query(
                &self.sql(
                    "SELECT data FROM {s}.blobs WHERE thread_id = $1 UNION ALL SELECT value FROM {s}.writes WHERE thread_id = $1",
                ),
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx.clone()))?;
        let payloads = payloads
            .iter()
            .map(|r| r.col::<&[u8]>(0))
            .collect::<Result<Vec<_>>>()?;
        let seqs = unreferenced(seqs, payloads)
            .into_iter()
            .map(|s| i64_of(s, "message sequence"))
            .collect::<Result<Vec<_>>>()?;
        if seqs.is_empty() {
            // Dropping the transaction rolls the bump back: nothing changed.
            return Ok(());
        }
        tx.execute(
            &self.sql("DELETE FROM {s}.messages WHERE thread_id = $1 AND seq = ANY($2::bigint[])"),
            &[&thread.as_str(), &seqs],
        )
        .await
        .map_err(deadlock_or(thread, ctx.clone()))?;
        tx.commit().await.map_err(deadlock_or(thread, ctx))
    }

    #[cfg(feature = "test-util")]
    async fn discard(&self) -> Result<()> {
        self.drop_schema().await
    }

    #[cfg(feature = "test-util")]
    async fn tamper(
        &self,
        thread: &ThreadId,
        column: crate::engine::Column,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let (table, col) = column.table_and_column();
        let ctx = format!("postgres: thread {thread}: tampering");
        let c = self.client(&ctx).await?;
        c.execute(
            &self.sql(&format!(
                "UPDATE {{s}}.{table} SET {col} = $2 WHERE thread_id = $1"
            )),
            &[&thread.as_str(), &bytes],
        )
        .await
        .map_err(pg_err(ctx))?;
        Ok(())
    }

    async fn stats(&self, thread: &ThreadId) -> Result<StorageStats> {
        let ctx = format!("postgres: thread {thread}: measuring");
        let c = self.client(&ctx).await?;
        let rows = self
            .whole_thread(
                &c,
                "SELECT
                      (SELECT COALESCE(SUM(length(record) + COALESCE(length(parent_id), 0)), 0)::bigint FROM {s}.checkpoints WHERE thread_id = $1),
                      (SELECT COALESCE(SUM(length(metadata)), 0)::bigint FROM {s}.checkpoints WHERE thread_id = $1),
                      (SELECT COALESCE(SUM(length(data)), 0)::bigint FROM {s}.blobs WHERE thread_id = $1),
                      (SELECT COALESCE(SUM(octet_length(channel) + octet_length(task_path) + length(value)), 0)::bigint FROM {s}.writes WHERE thread_id = $1),
                      (SELECT COALESCE(SUM(length(body)), 0)::bigint FROM {s}.messages WHERE thread_id = $1),
                      (SELECT COUNT(*) FROM {s}.checkpoints WHERE thread_id = $1) + (SELECT COUNT(*) FROM {s}.blobs WHERE thread_id = $1)
                        + (SELECT COUNT(*) FROM {s}.writes WHERE thread_id = $1) + (SELECT COUNT(*) FROM {s}.messages WHERE thread_id = $1)",
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx.clone()))?;
        let row = one_row(&rows, &ctx)?;
        let u = |i: usize| Ok(u64::try_from(row.col::<i64>(i)?).unwrap_or(0));
        Ok(StorageStats {
            checkpoint_bytes: u(0)?,
            metadata_bytes: u(1)?,
            blob_bytes: u(2)?,
            write_bytes: u(3)?,
            message_bytes: u(4)?,
            rows: u(5)?,
        })
    }
}

/// The PostgreSQL saver.
///
/// ```no_run
/// # async fn example() -> antler_checkpoint::Result<()> {
/// use antler_checkpoint::{PostgresOptions, PostgresSaver, StoreConfig};
/// let saver = PostgresSaver::connect(PostgresOptions::new("postgres://postgres@127.0.0.1:5432/postgres"), StoreConfig::full()).await?;
/// # let _ = saver;
/// # Ok(())
/// # }
/// ```
pub struct PostgresSaver {
    engine: Engine<PgBackend>,
}

impl PostgresSaver {
    /// Connects, creates the schema if needed, applies migrations under an advisory lock, and
    /// records or checks the store configuration.
    ///
    /// Every connection the pool makes (the first one once the migrations ran) prepares and
    /// runs the statements that read a checkpoint, with arguments that match no row, before it
    /// is handed out: a new server backend loads its catalog and planner caches on its first
    /// statements, which otherwise slows the first read on each connection. On the 2-core
    /// development machine this made `connect` about 5 ms slower (median 6.4–6.8 → 11.3–12.6
    /// ms) and a cold `get_state` of a 2,000-turn thread about 5 ms faster
    /// (`docs/bench-write-amp.md`). A connection whose warm-up fails (it waits at most 100
    /// ms for a table lock) is handed out warmed in part or not at all.
    ///
    /// With a pool of two or more, `connect` opens two connections (the second while the first
    /// warms), so that the first long read finds the idle connection it splits its bodies over
    /// (`read_bodies_split`). That costs a second server backend and a few milliseconds more
    /// per `connect`; `with_pool_size(1)` opens one and never splits.
    ///
    /// # Errors
    /// [`Error::StoreConfigMismatch`], [`Error::SchemaTooNew`], or [`Error::Backend`] when the
    /// server is unreachable or a statement fails.
    pub async fn connect(options: PostgresOptions, config: StoreConfig) -> Result<Self> {
        let pg_config: tokio_postgres::Config = options
            .url
            .parse()
            .map_err(pg_err("postgres: parsing connection string"))?;
        let manager = Manager::from_config(
            pg_config,
            NoTls,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let s = quote_ident(&options.schema);
        let hot = Arc::new(HotSql::new(&s));
        // Connections made before the tables are known to exist (the one that migrates) are
        // warmed once the migrations ran; every later one as it is created.
        let ready = Arc::new(AtomicBool::new(false));
        let (hook_hot, hook_ready) = (Arc::clone(&hot), Arc::clone(&ready));
        let generic = options.generic_plans;
        let pool = Pool::builder(manager)
            .max_size(options.pool_size.max(1))
            .post_create(Hook::async_fn(move |c, _| {
                let (hot, ready) = (Arc::clone(&hook_hot), Arc::clone(&hook_ready));
                Box::pin(async move {
                    // Before the warm-up, whose runs then make the generic plans later reads
                    // reuse. A server that refuses the setting (older than PostgreSQL 12)
                    // leaves a usable connection that plans as it always did.
                    if generic {
                        let _ = c.batch_execute(GENERIC_PLANS_SQL).await;
                    }
                    if ready.load(Ordering::Acquire) {
                        // A failed warm-up leaves a usable connection that is merely not warm.
                        let _ = warm_reads(c, &hot)
                            .await
                            .map_err(deadpool_postgres::HookError::Backend)?;
                    }
                    Ok(())
                })
            }))
            .build()
            .map_err(|e| Error::backend("postgres: building the pool", e))?;
        let backend = PgBackend {
            pool,
            hot,
            s,
            generic,
        };
        // Before the migrations: a store recorded with another configuration is refused as it
        // is, so that the build that wrote it still opens it afterwards.
        backend.precheck_config(config).await?;
        backend.migrate().await?;
        ready.store(true, Ordering::Release);
        {
            let ctx = "postgres: warming the connection";
            let c = backend.client(ctx).await?;
            // A second connection, opened (and warmed by the hook) while the first warms: a
            // long body read splits over two idle connections (`read_bodies_split`).
            let (warmed, second) = tokio::join!(warm_reads(&c, &backend.hot), async {
                if options.pool_size >= 2 {
                    Some(backend.client(ctx).await)
                } else {
                    None
                }
            });
            // A failed warm-up leaves a usable connection that is merely not warm.
            let _ = warmed.map_err(pg_err(ctx))?;
            // The second connection only speeds up long reads: a server that takes no more
            // connections (a full `max_connections`, a pooler's limit) fails no `connect`.
            drop(second);
        }
        Ok(Self {
            engine: Engine::open(backend, config).await?,
        })
    }

    /// Payload bytes stored for a thread (keys and row overhead excluded).
    ///
    /// # Errors
    /// [`Error::Backend`] on SQL failure.
    pub async fn storage_stats(&self, thread: &ThreadId) -> Result<StorageStats> {
        self.engine.stats(thread).await
    }

    /// Reads every stored message body of `thread` in one query (the one the message index
    /// loads with), without checking or decoding it: the storage floor under any read that
    /// needs the bodies. Benchmarks time it on a freshly opened saver next to a cold read.
    ///
    /// # Errors
    /// [`Error::Backend`] on SQL failure.
    pub async fn body_scan(&self, thread: &ThreadId) -> Result<BodyScan> {
        self.engine.body_scan(thread).await
    }

    /// `pg_column_size` of every row of the thread, summed over the tables (what PostgreSQL
    /// actually stores, after its own compression and with tuple headers).
    ///
    /// # Errors
    /// [`Error::Backend`] on SQL failure.
    pub async fn pg_column_bytes(&self, thread: &ThreadId) -> Result<u64> {
        let b = &self.engine.backend;
        let ctx = format!("postgres: thread {thread}: measuring");
        let c = b.client(&ctx).await?;
        let rows = b
            .whole_thread(
                &c,
                "SELECT ((SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {s}.checkpoints t WHERE thread_id = $1)
                          + (SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {s}.blobs t WHERE thread_id = $1)
                          + (SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {s}.writes t WHERE thread_id = $1)
                          + (SELECT COALESCE(SUM(pg_column_size(t.*)), 0) FROM {s}.messages t WHERE thread_id = $1))::bigint",
                &[&thread.as_str()],
            )
            .await
            .map_err(pg_err(ctx.clone()))?;
        let row = one_row(&rows, &ctx)?;
        Ok(u64::try_from(row.col::<i64>(0)?).unwrap_or(0))
    }
}

impl PostgresSaver {
    /// Drops the saver's schema and everything in it (`DROP SCHEMA … CASCADE`); for tests and
    /// benchmarks, which give each saver a schema of its own.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] for the `public` schema (the default, which other
    /// applications' tables share: dropping it would take them too), nothing dropped;
    /// [`Error::Backend`] on SQL failure.
    pub async fn drop_schema(self) -> Result<()> {
        self.engine.backend.drop_schema().await
    }
}

impl PgBackend {
    async fn drop_schema(&self) -> Result<()> {
        droppable(&self.s)?;
        let c = self.client("dropping schema").await?;
        c.batch_execute(&self.sql("DROP SCHEMA IF EXISTS {s} CASCADE"))
            .await
            .map_err(pg_err("postgres: dropping schema"))
    }

    /// `tuple_rows`, once: the checkpoint row and its writes in one statement, then its values
    /// (only if the row still exists), then the bodies they reference. `None`: the row was
    /// read, then deleted before its values were.
    async fn tuple_rows_once(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        with_values: bool,
    ) -> Result<Option<Option<TupleRows>>> {
        let ctx = format!("postgres: thread {thread}: reading checkpoint");
        let c = self.client(&ctx).await?;
        let head_sql = if id.is_some() {
            &self.hot.head_by_id
        } else {
            &self.hot.head_latest
        };
        let (blobs_sql, messages_sql) = (&self.hot.checkpoint_blobs, &self.hot.messages);
        // On a connection that was not warmed the three statements are prepared at once (one
        // round trip, not three); afterwards they come from the connection's statement cache.
        let (head, blobs_st, messages_st) = tokio::join!(
            c.prepare_cached(head_sql),
            c.prepare_cached(blobs_sql),
            c.prepare_cached(messages_sql)
        );
        let (head, blobs_st, messages_st) = (
            head.map_err(pg_err(ctx.clone()))?,
            blobs_st.map_err(pg_err(ctx.clone()))?,
            messages_st.map_err(pg_err(ctx.clone()))?,
        );
        // One statement for the checkpoint row and its writes: one round trip, one snapshot.
        let rows = match id {
            Some(id) => {
                c.query(
                    &head,
                    &[&thread.as_str(), &ns.as_str(), &id.to_bytes().as_slice()],
                )
                .await
            }
            None => c.query(&head, &[&thread.as_str(), &ns.as_str()]).await,
        }
        .map_err(pg_err(ctx.clone()))?;
        let Some(HeadChain {
            row, writes, epoch, ..
        }) = head_rows(&rows, thread, ns)?
        else {
            return Ok(Some(None));
        };
        let keys = if with_values {
            record_keys(&row)
        } else {
            Vec::new()
        };
        let blobs = if keys.is_empty() {
            Vec::new()
        } else {
            let ctx = format!("postgres: thread {thread}: reading blobs");
            // The values come only together with the row: a row gone since the first
            // statement is a checkpoint deleted mid-read, never one without values.
            match read_checkpoint_blobs(&c, &blobs_st, thread, ns, row.id, &keys, ctx).await? {
                Some((_, blobs)) => blobs,
                None => return Ok(None),
            }
        };
        let runs = runs_of_rows(&blobs, &writes);
        let bodies = if runs.is_empty() {
            Vec::new()
        } else {
            let ctx = format!("postgres: thread {thread}: reading messages");
            // Only a read with values seeds the index (`Engine::read_tuple`).
            let read = self
                .read_bodies_split(&c, &messages_st, thread, &runs, with_values, ctx)
                .await?;
            // Bodies from a later epoch than the row's may be other messages under the same
            // numbers, unless the checkpoint still exists (see `BodyRead`): a checkpoint gone
            // is read again (the latest) or absent (an addressed one).
            // On the connection this read holds (see `existing_on`).
            if read.epoch != Some(epoch)
                && !self
                    .existing_on(&c, thread, ns, &[row.id], ctx_check(thread))
                    .await?
                    .contains(&row.id)
            {
                return Ok(None);
            }
            read.rows
        };
        Ok(Some(Some(TupleRows {
            row,
            blobs,
            writes,
            bodies,
            epoch,
        })))
    }
}

impl PgBackend {
    /// Refuses a store whose recorded configuration `config` does not match
    /// ([`Error::StoreConfigMismatch`]), reading only: the configuration table exists from the
    /// first schema version, so a store of any version can be checked before it is migrated.
    /// Anything short of a whole, readable record (a new schema, a damaged record) is left to
    /// the check after the migrations, which reports it.
    async fn precheck_config(&self, config: StoreConfig) -> Result<()> {
        let ctx = "postgres: reading store configuration";
        let c = self.client(ctx).await?;
        let table = format!("{}.antler_meta", self.s);
        let exists: bool = c
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .map_err(pg_err(ctx))?
            .col(0)?;
        if !exists {
            return Ok(());
        }
        let rows = c
            .query(
                &self.sql("SELECT key, value FROM {s}.antler_meta WHERE key IN ('channel_mode', 'snapshot_frequency')"),
                &[],
            )
            .await
            .map_err(pg_err(ctx))?;
        let get = |k: &str| config_value(&rows, k);
        let (Some(mode), Some(frequency)) = (get("channel_mode")?, get("snapshot_frequency")?)
        else {
            return Ok(());
        };
        let Ok(stored) = crate::engine::parse_config(&mode, &frequency) else {
            return Ok(());
        };
        config.check_against(Some(stored)).map(drop)
    }

    /// Fills the run index from every record's metadata (migration 4); a record whose metadata
    /// does not decode adds no pair (reading it fails anyway). The table is locked against
    /// writes first, as for the marks: only a build from before the index can write it now
    /// (this one waits on the migration lock), and a record it committed during the scan would
    /// otherwise be missed. Such a process adds no pairs after the migration either: stop older
    /// processes before upgrading.
    async fn backfill_runs(&self, tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
        let ctx = "postgres: migration 4: run index";
        tx.batch_execute(&self.sql("LOCK TABLE {s}.checkpoints IN SHARE MODE"))
            .await
            .map_err(pg_err(ctx))?;
        let rows = tx
            .query_raw(
                &self.sql("SELECT thread_id, metadata FROM {s}.checkpoints"),
                std::iter::empty::<&str>(),
            )
            .await
            .map_err(pg_err(ctx))?;
        let mut rows = std::pin::pin!(rows);
        let mut pairs = std::collections::BTreeSet::new();
        while let Some(r) = futures::TryStreamExt::try_next(&mut rows)
            .await
            .map_err(pg_err(ctx))?
        {
            if let Ok(m) = crate::codec::decode_metadata(r.col(1)?)
                && let Some(run) = m.run_id
            {
                pairs.insert((run.as_str().to_owned(), r.col::<String>(0)?));
            }
        }
        let (runs, threads): (Vec<String>, Vec<String>) = pairs.into_iter().unzip();
        tx.execute(
            &self.sql(
                "INSERT INTO {s}.run_threads (run_id, thread_id) SELECT * FROM unnest($1::text[], $2::text[]) ON CONFLICT DO NOTHING",
            ),
            &[&runs, &threads],
        )
        .await
        .map_err(pg_err(ctx))?;
        Ok(())
    }

    /// Gives every namespace of the store its version mark (see `engine::MarkFold`), reading
    /// the records as a stream. The table is locked against writes first: only a build from
    /// before the marks can write it now (this one waits on the migration lock), and a record
    /// it committed during the scan would otherwise be missed.
    async fn backfill_marks(&self, tx: &tokio_postgres::Transaction<'_>) -> Result<()> {
        let ctx = "postgres: migration 3: version marks";
        tx.batch_execute(&self.sql("LOCK TABLE {s}.checkpoints IN SHARE MODE"))
            .await
            .map_err(pg_err(ctx))?;
        let rows = tx
            .query_raw(
                &self.sql(
                    "SELECT thread_id, checkpoint_ns, checkpoint_id, record FROM {s}.checkpoints",
                ),
                std::iter::empty::<&str>(),
            )
            .await
            .map_err(pg_err(ctx))?;
        let mut rows = std::pin::pin!(rows);
        let mut fold = crate::engine::MarkFold::default();
        while let Some(r) = futures::TryStreamExt::try_next(&mut rows)
            .await
            .map_err(pg_err(ctx))?
        {
            fold.add(r.col(0)?, r.col(1)?, r.col(2)?, r.col(3)?);
        }
        let stored = tx
            .query(
                &self.sql(
                    // A namespace with a negative (damaged) value version gets -1, an unknown
                    // mark, whatever intact versions it also holds (before 2026-12-02 a
                    // greater intact version hid it).
                    "SELECT thread_id, checkpoint_ns,
                            CASE WHEN MIN(version) < 0 THEN -1 ELSE MAX(version) END
                       FROM {s}.blobs GROUP BY 1, 2",
                ),
                &[],
            )
            .await
            .map_err(pg_err(ctx))?;
        for r in &stored {
            fold.stored(r.col(0)?, r.col(1)?, r.col(2)?);
        }
        let marks = fold.finish();
        let mut threads = Vec::with_capacity(marks.len());
        let mut namespaces = Vec::with_capacity(marks.len());
        let mut versions = Vec::with_capacity(marks.len());
        for (thread, ns, mark) in &marks {
            threads.push(thread.as_str());
            namespaces.push(ns.as_str());
            // A mark the column cannot hold (a version above i64::MAX, which an older build
            // may have stored in a record) is unknown, not a reason to refuse every open.
            versions.push(mark.and_then(|m| i64::try_from(m).ok()));
        }
        tx.execute(
            &self.sql(
                "INSERT INTO {s}.version_marks (thread_id, checkpoint_ns, version)
                 SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[])",
            ),
            &[&threads, &namespaces, &versions],
        )
        .await
        .map_err(pg_err(ctx))?;
        Ok(())
    }

    async fn migrate(&self) -> Result<()> {
        let mut c = self.client("migrating").await?;
        // READ COMMITTED whatever the server's default: the backfill's scan must see what
        // committed before its table lock, which a snapshot taken at the first statement
        // (REPEATABLE READ) would not.
        let tx = c
            .build_transaction()
            .isolation_level(tokio_postgres::IsolationLevel::ReadCommitted)
            .start()
            .await
            .map_err(pg_err("postgres: migrating"))?;
        tx.execute("SELECT pg_advisory_xact_lock(hashtext($1))", &[&self.s])
            .await
            .map_err(pg_err("postgres: migration lock"))?;
        // The schema and the version table only when missing: PostgreSQL checks the CREATE
        // privilege before `IF NOT EXISTS` looks, so a role that may only use an existing
        // store (no CREATE on the database or the schema) could not open it otherwise.
        let exists: bool = tx
            .query_one(
                "SELECT to_regclass($1) IS NOT NULL",
                &[&format!("{}.antler_migrations", self.s)],
            )
            .await
            .map_err(pg_err("postgres: looking for the schema version table"))?
            .col(0)?;
        if !exists {
            // The schema too only when missing: a role given CREATE on a schema made for it,
            // but not on the database, may make the store's tables there.
            let schema: bool = tx
                .query_one("SELECT to_regnamespace($1) IS NOT NULL", &[&self.s])
                .await
                .map_err(pg_err("postgres: looking for the schema"))?
                .col(0)?;
            if !schema {
                tx.batch_execute(&self.sql("CREATE SCHEMA IF NOT EXISTS {s}"))
                    .await
                    .map_err(pg_err("postgres: creating the schema"))?;
            }
            tx.batch_execute(
                &self
                    .sql("CREATE TABLE IF NOT EXISTS {s}.antler_migrations (v BIGINT PRIMARY KEY)"),
            )
            .await
            .map_err(pg_err("postgres: migrating"))?;
        }
        let current: i64 = tx
            .query_one(
                &self.sql("SELECT COALESCE(MAX(v), 0) FROM {s}.antler_migrations"),
                &[],
            )
            .await
            .map_err(pg_err("postgres: reading schema version"))?
            .col(0)?;
        if current > POSTGRES_SCHEMA_VERSION {
            return Err(Error::SchemaTooNew {
                found: current,
                supported: POSTGRES_SCHEMA_VERSION,
            });
        }
        for (i, sql) in MIGRATIONS
            .iter()
            .enumerate()
            .skip(usize::try_from(current).unwrap_or(0))
        {
            let v = i as i64 + 1;
            tx.batch_execute(&self.sql(sql)).await.map_err(|e| {
                let hint = if e.code() == Some(&SqlState::DUPLICATE_TABLE) {
                    format!(
                        " (schema {} already holds a table of that name that antler did not create: give antler a schema of its own)",
                        self.s
                    )
                } else {
                    String::new()
                };
                Error::backend(format!("postgres: migration {v}{hint}"), e)
            })?;
            if v == MARKS_MIGRATION {
                self.backfill_marks(&tx).await?;
            }
            if v == RUNS_MIGRATION {
                self.backfill_runs(&tx).await?;
            }
            tx.execute(
                &self.sql("INSERT INTO {s}.antler_migrations (v) VALUES ($1)"),
                &[&v],
            )
            .await
            .map_err(pg_err(format!("postgres: migration {v}")))?;
        }
        tx.commit().await.map_err(pg_err("postgres: migrating"))
    }
}

impl std::fmt::Debug for PostgresSaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresSaver")
            .field("schema", &self.engine.backend.s)
            .field("config", &self.engine.store_config())
            .finish_non_exhaustive()
    }
}

impl_saver!(PostgresSaver);

#[cfg(test)]
mod tests {
    use super::*;

    /// Under `CI=true` a missing `DATABASE_URL` fails the test instead of skipping it.
    /// A saver on a fresh schema of the test database (`None`: skipped, see [`database_url`]).
    /// (Eight connections: the race tests hold some in other sessions.)
    async fn fresh(config: StoreConfig) -> Option<PostgresSaver> {
        Some(
            PostgresSaver::connect(fresh_options(8)?, config)
                .await
                .expect("connect"),
        )
    }

    /// Options for a fresh schema of the test database with a pool of `pool` connections
    /// (`None`: skipped, see [`database_url`]).
    fn fresh_options(pool: usize) -> Option<PostgresOptions> {
        let schema = format!("antler_test_{}", uuid::Uuid::new_v4().simple());
        Some(
            PostgresOptions::new(database_url()?)
                .with_schema(schema)
                .with_pool_size(pool),
        )
    }

    fn database_url() -> Option<String> {
        match std::env::var("DATABASE_URL") {
            Ok(url) if !url.is_empty() => Some(url),
            _ => {
                assert!(
                    // CI services set `CI` to `true` or `1`; only unset, empty, `0` or
                    // `false` is a developer's machine, where the test may skip.
                    !std::env::var("CI").is_ok_and(|v| !matches!(v.as_str(), "" | "0" | "false")),
                    "DATABASE_URL is unset under CI: the PostgreSQL tests must run, not skip"
                );
                eprintln!("SKIPPED: PostgreSQL test (DATABASE_URL is unset)");
                None
            }
        }
    }

    /// Recording the configuration is a compare-and-set: a process whose read found no
    /// configuration does not overwrite one another process recorded meanwhile.
    #[tokio::test]
    async fn the_configuration_is_recorded_only_over_what_was_read() {
        let Some(saver) = fresh(StoreConfig::delta(SnapshotFrequency::new(10).unwrap())).await
        else {
            return;
        };
        crate::engine::check_config_compare_and_set(&saver.engine.backend).await;
        saver.drop_schema().await.expect("drop");
    }

    /// Prune's delete refuses a fork from a doomed checkpoint put since its check, and only
    /// that (the shared scenario, on PostgreSQL's backend).
    #[tokio::test]
    async fn a_delete_checked_against_a_stale_read_deletes_nothing() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        crate::engine::check_delete_against_a_stale_read(&saver.engine).await;
        saver.drop_schema().await.expect("drop");
    }

    /// `ancestors` on PostgreSQL (see the shared check).
    #[tokio::test]
    async fn ancestors_return_at_most_max_rows() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        crate::engine::check_ancestors_bound(&saver.engine).await;
        saver.drop_schema().await.expect("drop");
    }

    /// `message_seqs` on PostgreSQL (see the shared check).
    #[tokio::test]
    async fn message_numbers_are_listed_without_their_bodies() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        crate::engine::check_message_seqs(&saver.engine).await;
        saver.drop_schema().await.expect("drop");
    }

    /// The shared scenario of an interrupted prune, on PostgreSQL's backend.
    #[tokio::test]
    async fn an_interrupted_prune_is_finished_by_the_next() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        crate::engine::check_an_interrupted_prune_is_finished_by_the_next(&saver.engine).await;
        saver.drop_schema().await.expect("drop");
    }

    /// Makes the pool hold `n` idle connections, each warmed: a race test then takes its
    /// connections from them while it holds a table lock, instead of making new ones whose
    /// warm-up would wait on that lock (and show up as the statement the test waits for).
    async fn prefill(b: &PgBackend, n: usize) {
        let held = futures::future::join_all((0..n).map(|_| b.client("test"))).await;
        for c in held {
            drop(c.expect("client"));
        }
    }

    /// Polls (up to 20 s) until a session's statement matching the `LIKE` pattern waits on a
    /// lock: the statement under test has reached the blocking row or table. Panics when none
    /// does: the interleaving the test is about did not happen, so it would check nothing.
    async fn until_a_statement_waits(b: &PgBackend, pattern: &str) {
        let watcher = b.client("test").await.expect("client");
        for _ in 0..2000 {
            let waiting: i64 = watcher
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE $1",
                    &[&pattern],
                )
                .await
                .expect("poll")
                .get(0);
            if waiting > 0 {
                return;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        panic!("no statement like {pattern} waited on a lock within 20 s");
    }

    /// A copy reads one state of the source: a prune of the source that commits while the
    /// copy is under way must not leave the target with checkpoints whose writes or values
    /// the copy's later statements no longer found (runtime-spec §5.8: a copy brings every
    /// checkpoint with its writes).
    #[tokio::test]
    async fn a_prune_committing_during_a_copy_leaves_the_copy_whole() {
        use crate::blob::Blob;
        use crate::model::{
            ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, ListQuery,
            PruneStrategy,
        };
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let (src, dst) = (ThreadId::new("src"), ThreadId::new("dst"));
        let mut parent = None;
        for i in 0..3u64 {
            let mut cp = Checkpoint::empty();
            let a = ChannelName::new("a");
            cp.channel_versions
                .insert(a.clone(), ChannelVersion::new(i + 1));
            cp.channel_values
                .insert(a, Blob::json(&serde_json::json!(i)).expect("blob"));
            let versions: ChannelVersions = cp.channel_versions.clone();
            let at = CheckpointConfig {
                thread_id: src.clone(),
                checkpoint_ns: CheckpointNs::root(),
                checkpoint_id: parent,
            };
            let stored = saver
                .put(&at, cp, CheckpointMetadata::default(), &versions)
                .await
                .expect("put");
            saver
                .put_writes(
                    &stored,
                    vec![(
                        ChannelName::new("a"),
                        Blob::json(&serde_json::json!(format!("w{i}"))).expect("blob"),
                    )],
                    &TaskId::new("task"),
                    &TaskPath::new("0"),
                )
                .await
                .expect("put_writes");
            parent = stored.checkpoint_id;
        }
        let before = saver
            .list(&ListQuery::thread(src.as_str()))
            .await
            .expect("list");
        assert_eq!(before.len(), 3);

        // An uncommitted row on one of the target's value keys: the copy's statement that
        // copies values waits on it, after the checkpoints were copied.
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        let blocker = b.client("test").await.expect("client");
        blocker
            .batch_execute(
                &b.sql("BEGIN; INSERT INTO {s}.blobs VALUES ('dst', '', 'a', 1, '\\x00'::bytea)"),
            )
            .await
            .expect("block");
        let interfere = async {
            until_a_statement_waits(b, &format!("%INSERT INTO {}.blobs%", b.s)).await;
            tokio::time::timeout(
                std::time::Duration::from_secs(20),
                saver.prune(std::slice::from_ref(&src), PruneStrategy::KeepLatest),
            )
            .await
            .expect("the prune does not wait for the copy")
            .expect("prune");
            blocker.batch_execute("ROLLBACK").await.expect("release");
        };
        let (copied, ()) = tokio::join!(saver.copy_thread(&src, &dst), interfere);
        copied.expect("copy");

        let after = saver
            .list(&ListQuery::thread(src.as_str()))
            .await
            .expect("list");
        assert_eq!(after.len(), 1, "the prune kept the head only");
        let copy = saver
            .list(&ListQuery::thread(dst.as_str()))
            .await
            .expect("list");
        for t in &copy {
            let original = before
                .iter()
                .find(|o| o.checkpoint.id == t.checkpoint.id)
                .expect("a checkpoint of the source");
            assert_eq!(
                t.checkpoint.channel_values, original.checkpoint.channel_values,
                "values of {}",
                t.checkpoint.id
            );
            assert_eq!(
                t.pending_writes, original.pending_writes,
                "writes of {}",
                t.checkpoint.id
            );
        }
        // The copy's statement read the source before the prune began (it was already waiting).
        assert_eq!(
            copy.len(),
            3,
            "the copy holds the source as it was before the prune"
        );
        drop(blocker);
        saver.drop_schema().await.expect("drop");
    }

    /// A thread of four checkpoints c0…c3 in a full-mode store, each moving channel `a` and
    /// writing to it, the first `stored` of them also storing its value; then a walk of `a`
    /// from c3 whose read of the writes waits behind a transaction that deletes `deleted`
    /// (its row and writes, as a prune's delete does) and commits. The walk's result.
    async fn walk_while_a_checkpoint_goes(
        stored: u64,
        deleted: usize,
    ) -> Option<Result<std::collections::BTreeMap<ChannelName, crate::model::DeltaChannelHistory>>>
    {
        use crate::blob::Blob;
        walk_while_rows_go(
            "a",
            stored,
            |i| Blob::json(&serde_json::json!([i])).expect("blob"),
            |i| Blob::json(&serde_json::json!(format!("w{i}"))).expect("blob"),
            "writes",
            deleted,
            "",
        )
        .await
    }

    /// The thread of [`walk_while_a_checkpoint_goes`] on `channel`, with `value(i)` stored by
    /// the first `stored` checkpoints and `write(i)` written on each; the walk from c3 waits
    /// on a lock of `table`, behind a transaction that deletes checkpoint `deleted` (row and
    /// writes), then runs `also`, and commits.
    async fn walk_while_rows_go(
        channel: &str,
        stored: u64,
        value: impl Fn(u64) -> crate::blob::Blob,
        write: impl Fn(u64) -> crate::blob::Blob,
        table: &str,
        deleted: usize,
        also: &str,
    ) -> Option<Result<std::collections::BTreeMap<ChannelName, crate::model::DeltaChannelHistory>>>
    {
        use crate::model::{ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let saver = fresh(StoreConfig::full()).await?;
        let ch = ChannelName::new(channel);
        let mut configs: Vec<CheckpointConfig> = Vec::new();
        for i in 0..4u64 {
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert(ch.clone(), ChannelVersion::new(i + 1));
            let mut new_versions = ChannelVersions::new();
            if i < stored {
                cp.channel_values.insert(ch.clone(), value(i));
                new_versions = cp.channel_versions.clone();
            }
            let at = CheckpointConfig {
                thread_id: ThreadId::new("t"),
                checkpoint_ns: CheckpointNs::root(),
                checkpoint_id: configs.last().and_then(|c| c.checkpoint_id),
            };
            let put = saver
                .put(&at, cp, CheckpointMetadata::default(), &new_versions)
                .await
                .expect("put");
            saver
                .put_writes(
                    &put,
                    vec![(ch.clone(), write(i))],
                    &TaskId::new("task"),
                    &TaskPath::new("0"),
                )
                .await
                .expect("put_writes");
            configs.push(put);
        }
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        let blocker = b.client("test").await.expect("client");
        blocker
            .batch_execute(&b.sql(&format!(
                "BEGIN; LOCK TABLE {{s}}.{table} IN ACCESS EXCLUSIVE MODE"
            )))
            .await
            .expect("lock");
        let gone = configs[deleted]
            .checkpoint_id
            .expect("id")
            .to_bytes()
            .to_vec();
        let interfere = async {
            until_a_statement_waits(b, &format!("%FROM {}.{table}%", b.s)).await;
            for rows in ["writes", "checkpoints"] {
                blocker
                    .execute(
                        &b.sql(&format!(
                            "DELETE FROM {{s}}.{rows} WHERE thread_id = 't' AND checkpoint_id = $1"
                        )),
                        &[&gone],
                    )
                    .await
                    .expect("delete");
            }
            if !also.is_empty() {
                blocker.batch_execute(&b.sql(also)).await.expect("also");
            }
            blocker.batch_execute("COMMIT").await.expect("commit");
        };
        let (walked, ()) = tokio::join!(
            saver.delta_channel_history(&configs[3], std::slice::from_ref(&ch)),
            interfere
        );
        drop(blocker);
        saver.drop_schema().await.expect("drop");
        Some(walked)
    }

    /// The delta history walk reads rows, values and writes in separate statements: a delete
    /// of a walked ancestor (with its writes, in one transaction) that commits between them
    /// must fail the walk as a missing parent, not return the history without that
    /// ancestor's writes. Here the walk from c3 seeds at c0 and needs c1.
    #[tokio::test]
    async fn a_walk_through_an_ancestor_deleted_mid_read_fails_closed() {
        let Some(walked) = walk_while_a_checkpoint_goes(1, 1).await else {
            return;
        };
        let err = walked.expect_err("the walk lost c1's writes");
        assert!(matches!(err, Error::MissingParent { .. }), "{err}");
    }

    /// A delete of ancestors older than the walk's seed (what a prune may delete while the
    /// thread is read) that commits in the middle of the walk does not fail it: only the
    /// checkpoints the walk used must still exist. Here the walk from c3 seeds at c1, and
    /// its page also read c0.
    #[tokio::test]
    async fn a_walk_is_not_failed_by_a_delete_beyond_its_seed() {
        let Some(walked) = walk_while_a_checkpoint_goes(2, 0).await else {
            return;
        };
        let history = walked.expect("the walk used nothing the delete removed");
        assert_eq!(
            history[&ChannelName::new("a")].writes.len(),
            2,
            "{history:?}"
        );
    }

    /// The walk reads the message bodies its writes reference after its existence checks: a
    /// delete of a walked ancestor that commits in between, collecting the bodies only that
    /// ancestor referenced, fails the walk as a missing parent (before, the missing body read
    /// as a damaged store). Here the walk from c3 seeds at c0 and needs c1, whose body goes.
    #[tokio::test]
    async fn a_walk_whose_bodies_go_after_its_checks_fails_as_a_missing_parent() {
        use crate::blob::{Blob, MessagesKind};
        let msg = |i: u64| serde_json::json!({"type": "human", "id": format!("m{i}"), "content": format!("body {i}")});
        let Some(walked) = walk_while_rows_go(
            "messages",
            1,
            |_| Blob::messages(MessagesKind::Snapshot, &[msg(100)]).expect("blob"),
            |i| Blob::messages(MessagesKind::Write, &[msg(i)]).expect("blob"),
            "messages",
            1,
            // c1's body: the third stored (c0's snapshot body, then c0's write, then c1's).
            "DELETE FROM {s}.messages WHERE thread_id = 't' AND seq = 3",
        )
        .await
        else {
            return;
        };
        let err = walked.expect_err("c1 and its body went");
        assert!(matches!(err, Error::MissingParent { .. }), "{err}");
    }

    /// Blob collection checks the thread's checkpoints again after its delete: a writer that
    /// brings back a deleted checkpoint and the value it references (a `copy_thread` onto the
    /// thread, a put again of that checkpoint), holding the value's row when the delete
    /// reaches it and committing while the delete waits, makes the collection roll back.
    /// Before, the delete went through and the checkpoint read back without its value.
    #[tokio::test]
    async fn a_collection_racing_a_copy_back_keeps_the_value() {
        use crate::blob::Blob;
        use crate::model::{ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let a = ChannelName::new("a");
        let mut configs: Vec<CheckpointConfig> = Vec::new();
        for i in 1..=2u64 {
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert(a.clone(), ChannelVersion::new(i));
            cp.channel_values
                .insert(a.clone(), Blob::json(&serde_json::json!(i)).expect("blob"));
            let nv: ChannelVersions = cp.channel_versions.clone();
            let at = configs
                .last()
                .cloned()
                .unwrap_or_else(|| CheckpointConfig::latest("t"));
            configs.push(
                saver
                    .put(&at, cp, CheckpointMetadata::default(), &nv)
                    .await
                    .expect("put"),
            );
        }
        let (c1, c2) = (
            configs[0].checkpoint_id.expect("id"),
            configs[1].checkpoint_id.expect("id"),
        );
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        let setup = b.client("test").await.expect("client");
        // c1 goes (as a prune's first transaction deletes it), its row kept aside.
        setup
            .batch_execute(&b.sql("CREATE TABLE {s}.kept (LIKE {s}.checkpoints)"))
            .await
            .expect("kept table");
        setup
            .execute(
                &b.sql("INSERT INTO {s}.kept SELECT * FROM {s}.checkpoints WHERE thread_id = 't' AND checkpoint_id = $1"),
                &[&c1.to_bytes().as_slice()],
            )
            .await
            .expect("keep c1");
        setup
            .execute(
                &b.sql("DELETE FROM {s}.checkpoints WHERE thread_id = 't' AND checkpoint_id = $1"),
                &[&c1.to_bytes().as_slice()],
            )
            .await
            .expect("delete c1");
        // The writer: c1 back, and its value's row written (locked) in the same transaction.
        let writer = b.client("test").await.expect("client");
        writer
            .batch_execute(&b.sql(
                "BEGIN;
                 INSERT INTO {s}.checkpoints SELECT * FROM {s}.kept;
                 UPDATE {s}.blobs SET data = data WHERE thread_id = 't' AND channel = 'a' AND version = 1;",
            ))
            .await
            .expect("writer");
        let interfere = async {
            until_a_statement_waits(b, &format!("%DELETE FROM {}.blobs%", b.s)).await;
            writer.batch_execute("COMMIT").await.expect("commit");
        };
        let t = ThreadId::new("t");
        let c2_row = b
            .checkpoint(&t, &CheckpointNs::root(), Some(c2))
            .await
            .expect("read")
            .expect("c2 is stored");
        let expected = crate::engine::expected_of(std::iter::once(&c2_row));
        let keys = vec![(CheckpointNs::root(), a.clone(), ChannelVersion::new(1))];
        let (deleted, ()) = tokio::join!(b.delete_blobs(&t, &keys, &expected), interfere);
        assert!(!deleted.expect("no error"), "the collection rolled back");
        let back = saver
            .get_tuple(&configs[0])
            .await
            .expect("read")
            .expect("c1 is back");
        assert_eq!(
            back.checkpoint
                .channel_values
                .get(&a)
                .and_then(|v| v.decode_json::<u64>().ok()),
            Some(1),
            "c1 reads with its value"
        );
        drop((setup, writer));
        saver.drop_schema().await.expect("drop");
    }

    /// A put of a run's next checkpoint racing `delete_thread` leaves no checkpoint of the run
    /// without its run-index pair: the put locks the existing pair, so the delete's removal of
    /// the pair waits for the put, and its later delete of the checkpoints sees the new one (the
    /// pair's `DO NOTHING` took no lock: the pair went and the checkpoint stayed).
    #[tokio::test]
    async fn a_put_racing_delete_thread_keeps_no_checkpoint_without_its_run_pair() {
        use crate::ids::RunId;
        use crate::model::{ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let run = RunId::new("r");
        let meta = CheckpointMetadata {
            run_id: Some(run.clone()),
            ..CheckpointMetadata::default()
        };
        let c1 = saver
            .put(
                &CheckpointConfig::latest("t"),
                Checkpoint::empty(),
                meta.clone(),
                &ChannelVersions::new(),
            )
            .await
            .expect("put");
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        // The writer: the run's second checkpoint, through the saver's own statement, left
        // uncommitted (no message list; it locks the epoch row all the same, so the delete
        // waits at its first statement).
        let writer = b.client("test").await.expect("client");
        writer.batch_execute("BEGIN").await.expect("begin");
        let mut c2 = Checkpoint::empty();
        c2.id = CheckpointId::generate();
        let parent = c1.checkpoint_id.map(|p| p.to_bytes().to_vec());
        let empty_i: Vec<i64> = Vec::new();
        let empty_b: Vec<&[u8]> = Vec::new();
        let empty_s: Vec<&str> = Vec::new();
        let epoch: Option<i64> = None;
        let run_str = Some(run.as_str());
        writer
            .execute(
                &b.hot.put,
                &[
                    &"t",
                    &"",
                    &c2.id.to_bytes().as_slice(),
                    &parent,
                    &crate::codec::encode_record(&c2),
                    &crate::codec::encode_metadata(&meta),
                    &empty_i,
                    &empty_b,
                    &empty_s,
                    &empty_i,
                    &empty_b,
                    &epoch,
                    &0i64,
                    &run_str,
                    &false,
                ],
            )
            .await
            .expect("the put, uncommitted");
        let interfere = async {
            until_a_statement_waits(b, &format!("%INTO {}.thread_epochs%", b.s)).await;
            writer.batch_execute("COMMIT").await.expect("commit");
        };
        let t = ThreadId::new("t");
        let (deleted, ()) = tokio::join!(saver.delete_thread(&t), interfere);
        deleted.expect("deleted");
        let left = saver
            .list(&crate::model::ListQuery::thread("t"))
            .await
            .expect("list");
        let paired = b
            .run_threads(std::slice::from_ref(&run))
            .await
            .expect("index");
        assert!(
            left.is_empty() || paired.contains(&ThreadId::new("t")),
            "{} checkpoints of the run left without their pair",
            left.len()
        );
        drop(writer);
        saver.drop_schema().await.expect("drop");
    }

    /// A put that waits for a `delete_thread` holding the thread's epoch row, and then stores
    /// a version the deleted thread held with other bytes (a new run on the thread starts its
    /// versions again), is a put to a fresh thread, not a version clash. Its statement's
    /// snapshot predates the delete's commit, so its version check still saw the deleted
    /// value: before, a put without a message list (which checks no epoch) failed with
    /// `Conflict`. A real clash on a live thread still clashes.
    #[tokio::test]
    async fn a_put_that_waited_for_delete_thread_does_not_clash_with_what_it_deleted() {
        use crate::model::{CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let put = |value: i64| {
            let cp = crate::testing::checkpoint(&[("a", 1, serde_json::json!(value))]);
            let versions = cp.channel_versions.clone();
            let saver = &saver;
            async move {
                saver
                    .put(
                        &CheckpointConfig::latest("t"),
                        cp,
                        CheckpointMetadata::default(),
                        &versions,
                    )
                    .await
            }
        };
        put(1).await.expect("put");
        let clash = put(2).await.expect_err("a real clash");
        assert_eq!(clash.kind(), crate::ErrorKind::Conflict, "{clash}");
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        // The delete, in its own session and uncommitted: the epoch row first, as
        // `delete_thread` takes it, then the thread's rows.
        let deleter = b.client("test").await.expect("client");
        let mut sql = format!("BEGIN; {};", b.sql(BUMP_EPOCH_SQL).replace("$1", "'t'"));
        for table in [
            "run_threads",
            "writes",
            "blobs",
            "messages",
            "checkpoints",
            "version_marks",
        ] {
            sql.push_str(&b.sql(&format!("DELETE FROM {{s}}.{table} WHERE thread_id = 't';")));
        }
        deleter
            .batch_execute(&sql)
            .await
            .expect("the delete, uncommitted");
        // The put waits for the delete's epoch row (where depends on the put: its statement,
        // or the wait after its version check failed).
        let interfere = async {
            until_a_statement_waits(b, &format!("%{}.thread_epochs%", b.s)).await;
            deleter.batch_execute("COMMIT").await.expect("commit");
        };
        let (stored, ()) = tokio::join!(put(2), interfere);
        stored.expect("a put to the deleted thread");
        let read = saver
            .get_tuple(&CheckpointConfig::latest("t"))
            .await
            .expect("read")
            .expect("stored");
        assert_eq!(
            read.checkpoint.channel_values[&crate::ChannelName::new("a")],
            crate::Blob::json(&2).expect("json")
        );
        drop(deleter);
        saver.drop_schema().await.expect("drop");
    }

    /// The saver's transactions run at READ COMMITTED even when the connection string (or the
    /// server) asks for another default, and its operations work under that default.
    #[tokio::test]
    async fn transactions_run_at_read_committed_whatever_the_default() {
        use crate::model::{CheckpointConfig, CheckpointMetadata, PruneStrategy};
        use crate::saver::Saver;
        let Some(url) = database_url() else {
            return;
        };
        let sep = if url.contains('?') { '&' } else { '?' };
        let url =
            format!("{url}{sep}options=-c%20default_transaction_isolation%3Drepeatable%5C%20read");
        let options = PostgresOptions::new(url)
            .with_schema(format!("antler_test_{}", uuid::Uuid::new_v4().simple()));
        let saver = PostgresSaver::connect(options, StoreConfig::full())
            .await
            .expect("connect");
        let mut c = saver.engine.backend.client("test").await.expect("client");
        let session: String = c
            .query_one("SHOW transaction_isolation", &[])
            .await
            .expect("show")
            .get(0);
        let tx = read_committed(&mut c).await.expect("transaction");
        let level: String = tx
            .query_one("SHOW transaction_isolation", &[])
            .await
            .expect("show")
            .get(0);
        drop(tx);
        drop(c);
        let mut at = CheckpointConfig::latest("t");
        for _ in 0..3 {
            at = saver
                .put(
                    &at,
                    crate::model::Checkpoint::empty(),
                    CheckpointMetadata::default(),
                    &crate::model::ChannelVersions::new(),
                )
                .await
                .expect("put");
        }
        saver
            .copy_thread(&ThreadId::new("t"), &ThreadId::new("u"))
            .await
            .expect("copy");
        saver
            .prune(&[ThreadId::new("t")], PruneStrategy::KeepLatest)
            .await
            .expect("prune");
        saver
            .delete_thread(&ThreadId::new("u"))
            .await
            .expect("delete");
        saver.drop_schema().await.expect("drop");
        assert_eq!(session, "repeatable read", "the default the test asked for");
        assert_eq!(level, "read committed");
    }

    /// An open with another configuration than the store records fails before it migrates: a
    /// store of schema version 2 stays at version 2, so the build that wrote it still opens
    /// it, and the right configuration then migrates it. Before 2026-12-02 the migrations ran
    /// first.
    #[tokio::test]
    async fn an_open_with_another_configuration_migrates_nothing() {
        let delta = StoreConfig::delta(crate::mode::SnapshotFrequency::new(10).expect("F"));
        let Some(saver) = fresh(delta).await else {
            return;
        };
        let b = &saver.engine.backend;
        let c = b.client("test").await.expect("client");
        c.batch_execute(
            &b.sql("DROP TABLE {s}.version_marks; DROP TABLE {s}.run_threads; DELETE FROM {s}.antler_migrations WHERE v >= 3;"),
        )
        .await
        .expect("back to version 2");
        let version = || async {
            c.query_one(&b.sql("SELECT MAX(v) FROM {s}.antler_migrations"), &[])
                .await
                .expect("version")
                .get::<_, i64>(0)
        };
        let options = PostgresOptions::new(database_url().expect("url"))
            .with_schema(b.s.trim_matches('"').to_owned());
        let refused = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .expect_err("another configuration");
        assert!(
            matches!(refused, Error::StoreConfigMismatch { .. }),
            "{refused}"
        );
        assert_eq!(version().await, 2, "nothing migrated");
        drop(
            PostgresSaver::connect(options, delta)
                .await
                .expect("its own configuration"),
        );
        assert_eq!(version().await, POSTGRES_SCHEMA_VERSION);
        drop(c);
        saver.drop_schema().await.expect("drop");
    }

    /// Migration 3 gives a namespace whose record lists a version the mark column cannot hold
    /// (above `i64::MAX`, as an older build could store) an unknown mark instead of failing,
    /// so the store still opens (before, every open failed on that record).
    #[tokio::test]
    async fn a_version_beyond_the_mark_column_does_not_stop_the_migration() {
        use crate::model::{Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert(ChannelName::new("a"), ChannelVersion::new(3));
        let stored = saver
            .put(
                &CheckpointConfig::latest("huge"),
                cp,
                CheckpointMetadata::default(),
                &crate::model::ChannelVersions::new(),
            )
            .await
            .expect("put");
        let mut cp = Checkpoint::empty();
        cp.id = stored.checkpoint_id.expect("id");
        cp.channel_versions
            .insert(ChannelName::new("a"), ChannelVersion::new(u64::MAX));
        let b = &saver.engine.backend;
        let c = b.client("test").await.expect("client");
        c.execute(
            &b.sql("UPDATE {s}.checkpoints SET record = $1 WHERE thread_id = 'huge'"),
            &[&crate::codec::encode_record(&cp)],
        )
        .await
        .expect("record");
        c.batch_execute(
            &b.sql("DROP TABLE {s}.version_marks; DROP TABLE {s}.run_threads; DELETE FROM {s}.antler_migrations WHERE v >= 3;"),
        )
        .await
        .expect("back to version 2");
        drop(c);
        let options = PostgresOptions::new(database_url().expect("url"))
            .with_schema(b.s.trim_matches('"').to_owned());
        let reopened = PostgresSaver::connect(options, StoreConfig::full()).await;
        let (max, read, listed) = match &reopened {
            Ok(r) => (
                Some(
                    r.max_channel_version(&ThreadId::new("huge"), &CheckpointNs::root())
                        .await,
                ),
                Some(r.get_tuple(&CheckpointConfig::latest("huge")).await),
                Some(r.list(&crate::model::ListQuery::thread("huge")).await),
            ),
            Err(_) => (None, None, None),
        };
        saver.drop_schema().await.expect("drop");
        let reopened = reopened.expect("the store opens");
        drop(reopened);
        assert_eq!(
            max.and_then(|m| m.ok()),
            Some(u64::MAX),
            "the namespace falls back to its records"
        );
        // The record reads back, with no value under a version no row can have (before
        // 2026-12-02 the read failed with the caller's `InvalidArgument`).
        let read = read
            .expect("opened")
            .expect("the checkpoint reads")
            .expect("it exists");
        assert_eq!(
            read.checkpoint.channel_versions.get(&ChannelName::new("a")),
            Some(&ChannelVersion::new(u64::MAX))
        );
        assert!(read.checkpoint.channel_values.is_empty());
        assert_eq!(listed.expect("opened").expect("the thread lists").len(), 1);
    }

    /// The message index keeps the first sequence number of a repeated body, so the backend
    /// must return a thread's bodies in sequence order even when the heap holds them in
    /// another (here: one row updated, so it moved behind the others, and statistics that
    /// make the planner scan the heap rather than the index).
    #[tokio::test]
    async fn all_messages_come_in_sequence_order_whatever_the_heap_order() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let b = &saver.engine.backend;
        let c = b.client("test").await.expect("client");
        c.batch_execute(&b.sql(
            "INSERT INTO {s}.messages SELECT 't', g, convert_to(repeat('x', 400), 'UTF8')
               FROM generate_series(1, 200) g;
             UPDATE {s}.messages SET body = convert_to(repeat('y', 400), 'UTF8') WHERE seq = 1;
             ANALYZE {s}.messages;",
        ))
        .await
        .expect("setup");
        let rows = b.all_messages(&ThreadId::new("t")).await.expect("read");
        let seqs: Vec<u64> = rows.iter().map(|r| r.seq).collect();
        assert_eq!(seqs, (1..=200).collect::<Vec<u64>>());
        drop(c);
        saver.drop_schema().await.expect("drop");
    }

    /// The statements of a connection's session whose text is one of the read path's.
    async fn warm_statements(c: &deadpool_postgres::Object, hot: &HotSql) -> usize {
        read_statements(c, hot, "TRUE").await
    }

    /// Of those, the ones that also ran (PostgreSQL counts the plans it made for them).
    async fn ran_statements(c: &deadpool_postgres::Object, hot: &HotSql) -> usize {
        read_statements(c, hot, "custom_plans + generic_plans > 0").await
    }

    async fn read_statements(c: &deadpool_postgres::Object, hot: &HotSql, filter: &str) -> usize {
        let texts: Vec<String> = c
            .query(
                &format!("SELECT statement FROM pg_prepared_statements WHERE {filter}"),
                &[],
            )
            .await
            .expect("prepared statements")
            .iter()
            .map(|r| r.get(0))
            .collect();
        hot.read_path()
            .iter()
            .filter(|sql| texts.iter().any(|t| t == *sql))
            .count()
    }

    /// Every connection of the pool has run the read path's statements before its first read:
    /// the one that migrated (warmed once the tables exist), the second one `connect` opens
    /// and one created later (both by the pool's hook). Without it, the first read on a
    /// connection pays for the new backend's catalog caches.
    #[tokio::test]
    async fn every_new_connection_is_warmed_for_reads() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let b = &saver.engine.backend;
        assert_eq!(b.pool.status().size, 2, "connect opened two");
        let first = b.client("test").await.expect("client");
        let second = b.client("test").await.expect("client");
        // The two `connect` opened are checked out, so this one is new.
        let third = b.client("test").await.expect("client");
        let n = b.hot.read_path().len();
        assert_eq!(n, 12, "the head read's eight and the history walk's four");
        for c in [&first, &second, &third] {
            assert_eq!(warm_statements(c, &b.hot).await, n);
            assert_eq!(ran_statements(c, &b.hot).await, n, "run, not only prepared");
        }
        drop(third);
        // Its errors are ignored when a connection is made, so check here that it has none.
        warm_reads(&first, &b.hot)
            .await
            .expect("usable")
            .expect("every warming statement runs");
        let pids: Vec<i32> = futures::future::join_all([&first, &second].map(|c| async move {
            c.query_one("SELECT pg_backend_pid()", &[])
                .await
                .expect("pid")
                .get(0)
        }))
        .await;
        assert_ne!(pids[0], pids[1], "two sessions");
        drop((first, second));
        saver.drop_schema().await.expect("drop");
    }

    /// Puts one checkpoint on thread `t` and reads the latest `reads` times; returns the thread.
    async fn put_and_read(saver: &PostgresSaver, reads: usize) -> ThreadId {
        use crate::{CheckpointConfig, CheckpointMetadata, Saver};
        let thread = ThreadId::new("t");
        let cp = crate::testing::checkpoint(&[("a", 1, serde_json::json!(1))]);
        let versions = cp.channel_versions.clone();
        saver
            .put(
                &CheckpointConfig::latest(thread.clone()),
                cp,
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .expect("put");
        for _ in 0..reads {
            saver
                .get_tuple(&CheckpointConfig::latest(thread.clone()))
                .await
                .expect("read")
                .expect("stored");
        }
        thread
    }

    /// Sessions plan generically unless told not to: every connection of the pool reports
    /// the setting, the warm-up's runs of the read path made generic plans only, and a read
    /// reuses them instead of planning at bind time. With the option off, the session keeps
    /// the server's setting (the default, `auto`, under test), and the same runs made custom
    /// plans.
    #[tokio::test]
    async fn sessions_plan_generically_unless_told_not_to() {
        for generic in [true, false] {
            let Some(options) = fresh_options(2) else {
                return;
            };
            let saver =
                PostgresSaver::connect(options.with_generic_plans(generic), StoreConfig::full())
                    .await
                    .expect("connect");
            put_and_read(&saver, 2).await;
            let b = &saver.engine.backend;
            let first = b.client("test").await.expect("client");
            let second = b.client("test").await.expect("client");
            for c in [&first, &second] {
                let mode: String = c
                    .query_one("SHOW plan_cache_mode", &[])
                    .await
                    .expect("show")
                    .get(0);
                let custom = read_statements(c, &b.hot, "custom_plans > 0").await;
                if generic {
                    assert_eq!(mode, "force_generic_plan");
                    assert_eq!(custom, 0, "no read statement planned at bind time");
                    assert_eq!(
                        read_statements(c, &b.hot, "generic_plans > 0").await,
                        b.hot.read_path().len(),
                        "each made its generic plan in the warm-up"
                    );
                } else {
                    assert_eq!(mode, "auto");
                    assert_eq!(custom, b.hot.read_path().len());
                }
            }
            drop((first, second));
            saver.drop_schema().await.expect("drop");
        }
    }

    /// On a session that plans generically, statements over a whole thread still get the
    /// server's own plan choice (a custom plan for the thread asked for): the size statement
    /// and a listing of the thread, and the transactions of deletes, copies and collection
    /// (`whole_thread_tx`, whose one-off statements leave no trace after them). The session
    /// plans generically again afterwards, and the read path's statements still bind no
    /// custom plan. Without it, a generic plan took a thread's share of a table as one over the
    /// number of threads, a large share in a store of a few threads, and scanned the table.
    #[tokio::test]
    async fn whole_thread_statements_keep_the_servers_plan_choice() {
        use crate::{ListQuery, Saver};
        let Some(options) = fresh_options(1) else {
            return;
        };
        let saver = PostgresSaver::connect(options, StoreConfig::full())
            .await
            .expect("connect");
        let thread = put_and_read(&saver, 1).await;
        saver.storage_stats(&thread).await.expect("stats");
        assert_eq!(
            saver
                .list(&ListQuery::thread(thread.clone()))
                .await
                .expect("list")
                .len(),
            1
        );
        saver.delete_thread(&thread).await.expect("delete");
        let b = &saver.engine.backend;
        let mut c = b.client("test").await.expect("client");
        {
            let tx = b.whole_thread_tx(&mut c).await.expect("transaction");
            let mode: String = tx
                .query_one("SHOW plan_cache_mode", &[])
                .await
                .expect("show")
                .get(0);
            assert_eq!(mode, "auto", "the server's setting within the transaction");
            tx.commit().await.expect("commit");
        }
        let plans = |pattern: &'static str| {
            let c = &c;
            async move {
                let row = c
                    .query_one(
                        "SELECT COALESCE(SUM(custom_plans), 0)::int8, COALESCE(SUM(generic_plans), 0)::int8
                           FROM pg_prepared_statements WHERE statement LIKE $1",
                        &[&pattern],
                    )
                    .await
                    .expect("prepared statements");
                (row.get::<_, i64>(0), row.get::<_, i64>(1))
            }
        };
        for (what, pattern) in [
            ("the size statement", "%SUM(length(record)%"),
            // The listing's own statement (`checkpoints`, ordered in byte order), not the read
            // path's latest-checkpoint statement with the same columns, which a full-mode root
            // put runs for the mode gate and which plans generically.
            (
                "the thread's listing",
                "SELECT checkpoint_id, parent_id, record, metadata, thread_id%COLLATE \"C\"%",
            ),
        ] {
            let (custom, generic) = plans(pattern).await;
            assert!(
                custom > 0 && generic == 0,
                "{what}: {custom} custom, {generic} generic plans"
            );
        }
        let mode: String = c
            .query_one("SHOW plan_cache_mode", &[])
            .await
            .expect("show")
            .get(0);
        assert_eq!(mode, "force_generic_plan", "generic again afterwards");
        assert_eq!(read_statements(&c, &b.hot, "custom_plans > 0").await, 0);
        drop(c);
        saver.drop_schema().await.expect("drop");
    }

    /// The statements that look checkpoints up by a list of ids (a walk's page of writes, the
    /// existence check after a read) find each id on the primary key, with the generic plan the
    /// saver's sessions use: no row of the thread's other checkpoints is read and filtered out.
    /// Before 2026-12-02 they were written `checkpoint_id = ANY($3)`, which PostgreSQL ran as a
    /// range over the whole thread with the ids as a filter: 2-9 ms per page at 4,000
    /// checkpoints, which made a cold read of a head that replays writes take 40 ms instead of 20.
    #[tokio::test]
    async fn lookups_by_a_list_of_ids_stay_on_the_key() {
        use crate::{CheckpointConfig, CheckpointMetadata, Saver, TaskId, TaskPath};
        let Some(options) = fresh_options(1) else {
            return;
        };
        let saver = PostgresSaver::connect(options, StoreConfig::full())
            .await
            .expect("connect");
        let mut parent = CheckpointConfig::latest("t");
        let mut ids = Vec::new();
        for i in 0..200u64 {
            let cp = crate::testing::checkpoint(&[("a", i + 1, serde_json::json!(i))]);
            let versions = cp.channel_versions.clone();
            parent = saver
                .put(&parent, cp, CheckpointMetadata::default(), &versions)
                .await
                .expect("put");
            saver
                .put_writes(
                    &parent,
                    vec![(
                        "a".into(),
                        crate::Blob::json(&serde_json::json!(i)).expect("json"),
                    )],
                    &TaskId::new(format!("task{i}")),
                    &TaskPath::new("~n"),
                )
                .await
                .expect("put_writes");
            ids.push(parent.checkpoint_id.expect("stored"));
        }
        let b = &saver.engine.backend;
        let c = b.client("test").await.expect("client");
        let wanted: Vec<String> = ids[100..103]
            .iter()
            .map(|id| format!("'\\x{}'::bytea", hex(&id.to_bytes())))
            .collect();
        for (name, sql) in [
            ("writes", &b.hot.writes),
            ("existing", &b.sql(EXISTING_SQL)),
        ] {
            c.batch_execute(&format!(
                "PREPARE probe_{name}(text, text, bytea[]) AS {sql}"
            ))
            .await
            .expect("prepare");
            let plan: Vec<String> = c
                .query(
                    &format!(
                        "EXPLAIN (ANALYZE, COSTS OFF) EXECUTE probe_{name}('t', '', ARRAY[{}])",
                        wanted.join(", ")
                    ),
                    &[],
                )
                .await
                .expect("explain")
                .iter()
                .map(|r| r.get(0))
                .collect();
            let plan = plan.join("\n");
            assert!(
                plan.contains("rows=3 loops=1"),
                "{name}: three rows\n{plan}"
            );
            assert!(!plan.contains("Rows Removed by Filter"), "{name}:\n{plan}");
        }
        drop(c);
        saver.drop_schema().await.expect("drop");
    }

    fn hex(bytes: &[u8]) -> String {
        bytes.iter().map(|b| format!("{b:02x}")).collect()
    }

    /// Statements run on a connection so far: PostgreSQL counts a plan (custom, or the
    /// generic one reused) for every run of a prepared statement.
    async fn statement_runs(c: &deadpool_postgres::Object) -> i64 {
        c.query_one(
            "SELECT COALESCE(SUM(custom_plans + generic_plans), 0)::int8 FROM pg_prepared_statements",
            &[],
        )
        .await
        .expect("prepared statements")
        .get(0)
    }

    /// A long read is cut at half its bodies, keeping every body once and in order (a run
    /// may be cut in the middle); a short one is not cut. Every list of up to three runs of
    /// up to 5 bodies each, at thresholds 1 to 12.
    #[test]
    fn long_runs_are_cut_at_half_their_bodies() {
        let lens = 0..=5u64;
        let mut lists: Vec<Vec<(u64, u64)>> = vec![Vec::new()];
        for n in 1..=3 {
            let mut next = Vec::new();
            for list in lists.iter().filter(|l| l.len() == n - 1) {
                for len in lens.clone() {
                    let start = list.last().map_or(100, |(s, l)| s + l + 7);
                    let mut l = list.clone();
                    l.push((start, len));
                    next.push(l);
                }
            }
            lists.extend(next);
        }
        let bodies = |runs: &[(u64, u64)]| -> Vec<u64> {
            runs.iter().flat_map(|&(s, l)| s..s + l).collect()
        };
        let mut cut = 0;
        for runs in &lists {
            let total: u64 = runs.iter().map(|(_, l)| l).sum();
            for min in 1..=12 {
                match split_runs_from(runs, min) {
                    None => assert!(total < min.max(2), "{runs:?} at {min} not cut"),
                    Some((a, b)) => {
                        cut += 1;
                        assert!(total >= min.max(2), "{runs:?} at {min} cut");
                        let (a_bodies, b_bodies) = (bodies(&a), bodies(&b));
                        assert_eq!(a_bodies.len() as u64, total / 2, "{runs:?}");
                        assert!(!b_bodies.is_empty(), "{runs:?}");
                        let mut all = a_bodies;
                        all.extend(b_bodies);
                        assert_eq!(all, bodies(runs), "{runs:?}");
                        assert!(a.iter().chain(&b).all(|(_, l)| *l > 0), "{a:?} {b:?}");
                    }
                }
            }
        }
        assert!(cut > 1000, "the cases cut something: {cut}");
        assert!(split_runs(&[(0, SPLIT_MIN_BODIES - 1)]).is_none());
        assert!(split_runs(&[(0, SPLIT_MIN_BODIES)]).is_some());
    }

    /// The two halves of a read keep their rows in order, and the epoch only when both read
    /// the same one: a prune between the two statements must look like a moved epoch.
    #[test]
    fn halves_keep_the_epoch_only_when_both_read_it() {
        let read = |seqs: &[u64], epoch| BodyRead {
            rows: seqs
                .iter()
                .map(|&s| BodyRow::check(s, &crate::codec::encode_body(b"{}")))
                .collect(),
            epoch,
        };
        let joined = join_halves(read(&[1, 2], Some(3)), read(&[3], Some(3)));
        assert_eq!(
            joined.rows.iter().map(|r| r.seq).collect::<Vec<_>>(),
            [1, 2, 3]
        );
        assert_eq!(joined.epoch, Some(3));
        for (a, b) in [
            (Some(3), Some(4)),
            (Some(4), Some(3)),
            (None, Some(3)),
            (Some(3), None),
        ] {
            assert_eq!(
                join_halves(read(&[1], a), read(&[2], b)).epoch,
                None,
                "{a:?} {b:?}"
            );
        }
    }

    /// A saver with a pool of two (both open) over thread `t` of twice the bodies a read
    /// splits at, and the run of those bodies.
    struct LongRead {
        saver: PostgresSaver,
        t: ThreadId,
        runs: [(u64, u64); 1],
        n: usize,
    }

    /// See [`LongRead`] (`None`: skipped, see [`database_url`]).
    async fn long_read() -> Option<LongRead> {
        let saver = PostgresSaver::connect(fresh_options(2)?, StoreConfig::full())
            .await
            .expect("connect");
        let n = usize::try_from(SPLIT_MIN_BODIES).expect("small") * 2;
        long_thread(&saver, n).await;
        let t = ThreadId::new("t");
        let first_seq = saver.engine.backend.all_messages(&t).await.expect("bodies")[0].seq;
        let runs = [(first_seq, n as u64)];
        Some(LongRead { saver, t, runs, n })
    }

    /// A long read whose pool's idle connection is dead (its server session was terminated)
    /// reads everything on its own connection at once: the pool would have to open a new
    /// connection for the second half, and the read does not wait for that. No connection is
    /// opened during the read, and the dead one is gone from the pool.
    #[tokio::test]
    async fn a_long_read_does_not_wait_for_a_new_connection() {
        let Some(LongRead { saver, t, runs, n }) = long_read().await else {
            return;
        };
        let b = &saver.engine.backend;
        let c = b.client("test").await.expect("client");
        let other = b.client("test").await.expect("client");
        let pid: i32 = other
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("pid")
            .get(0);
        c.execute("SELECT pg_terminate_backend($1)", &[&pid])
            .await
            .expect("terminate");
        for _ in 0..500 {
            if other.is_closed() {
                break;
            }
            tokio::time::sleep(std::time::Duration::from_millis(10)).await;
        }
        assert!(other.is_closed(), "the client saw its session end");
        drop(other);
        let st = c.prepare_cached(&b.hot.messages).await.expect("prepare");
        let read = b
            .read_bodies_split(&c, &st, &t, &runs, false, "test".into())
            .await
            .expect("read on the caller's connection");
        assert_eq!(read.rows.len(), n);
        assert!(read.epoch.is_some());
        assert_eq!(
            b.pool.status().size,
            1,
            "no connection was opened during the read, and the dead one is gone"
        );
        drop(c);
        saver.drop_schema().await.expect("drop");
    }

    /// A thread `t` of `n` messages in one snapshot checkpoint (full mode), on `saver`: the
    /// checkpoint's config and the messages.
    async fn long_thread(
        saver: &PostgresSaver,
        n: usize,
    ) -> (crate::model::CheckpointConfig, Vec<serde_json::Value>) {
        use crate::blob::{Blob, MessagesKind};
        use crate::model::{Checkpoint, CheckpointMetadata};
        use crate::saver::Saver;
        let msgs: Vec<serde_json::Value> = (0..n)
            .map(|i| serde_json::json!({"type": "human", "content": format!("message {i}"), "id": format!("m{i}")}))
            .collect();
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("messages".into(), ChannelVersion::new(1));
        cp.channel_values.insert(
            "messages".into(),
            Blob::messages(MessagesKind::Snapshot, &msgs).expect("blob"),
        );
        let versions = cp.channel_versions.clone();
        let at = saver
            .put(
                &crate::model::CheckpointConfig::latest("t"),
                cp,
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .expect("put");
        (at, msgs)
    }

    /// The messages of the latest checkpoint of thread `t`, read through `saver`.
    async fn latest_messages(saver: &PostgresSaver) -> Vec<serde_json::Value> {
        use crate::saver::Saver;
        let read = crate::model::CheckpointConfig::latest("t");
        let tuple = saver.get_tuple(&read).await.expect("read").expect("exists");
        match &tuple.checkpoint.channel_values["messages"] {
            crate::blob::Blob::Messages(list) => list
                .items
                .iter()
                .map(|m| serde_json::from_slice(m).expect("json"))
                .collect(),
            other => panic!("not a message list: {other:?}"),
        }
    }

    /// A long body read runs its second half on the pool's other idle connection (opened at
    /// connect) and returns what one statement returns; a short read stays on one connection.
    #[tokio::test]
    async fn a_long_body_read_runs_its_halves_on_two_idle_connections() {
        let Some(options) = fresh_options(2) else {
            return;
        };
        let saver = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .expect("connect");
        let n = usize::try_from(SPLIT_MIN_BODIES).expect("small") + 88;
        let (_, msgs) = long_thread(&saver, n).await;
        let cold = PostgresSaver::connect(options, StoreConfig::full())
            .await
            .expect("connect");
        let b = &cold.engine.backend;
        assert_eq!(b.pool.status().size, 2, "connect opened two connections");
        let t = ThreadId::new("t");
        let first_seq = b.all_messages(&t).await.expect("bodies")[0].seq;
        let ctx = || "test".to_owned();
        for (len, other_runs) in [(SPLIT_MIN_BODIES - 1, 0), (n as u64, 1)] {
            let runs = [(first_seq, len)];
            let c = b.client("test").await.expect("client");
            let other = b.client("test").await.expect("client");
            let before = statement_runs(&other).await;
            drop(other);
            let st = c.prepare_cached(&b.hot.messages).await.expect("prepare");
            let split = b
                .read_bodies_split(&c, &st, &t, &runs, true, ctx())
                .await
                .expect("read");
            let whole = read_bodies(&c, &st, &t, &runs, true, ctx())
                .await
                .expect("read");
            let other = b.client("test").await.expect("client");
            assert_eq!(
                statement_runs(&other).await - before,
                other_runs,
                "{len} bodies"
            );
            let seen = |r: &BodyRead| {
                r.rows
                    .iter()
                    .map(|row| (row.seq, row.body.clone().ok(), row.hash))
                    .collect::<Vec<_>>()
            };
            assert_eq!(seen(&split), seen(&whole), "{len} bodies");
            assert_eq!(split.rows.len() as u64, len);
            assert_eq!(split.epoch, whole.epoch);
            assert!(split.epoch.is_some());
        }
        assert_eq!(latest_messages(&cold).await, msgs);
        // Both public reads take the split: three statements each (checkpoint, values,
        // bodies), and one more for the second half, over the pool's two connections.
        let runs_on_both = || async {
            let (x, y) = (
                b.client("test").await.expect("client"),
                b.client("test").await.expect("client"),
            );
            statement_runs(&x).await + statement_runs(&y).await
        };
        for ancestry in [false, true] {
            let before = runs_on_both().await;
            let latest = crate::model::CheckpointConfig::latest("t");
            let read = if ancestry {
                crate::saver::Saver::get_tuple_with_ancestry(&cold, &latest, 8)
                    .await
                    .expect("read")
                    .map(|r| r.tuple)
            } else {
                crate::saver::Saver::get_tuple(&cold, &latest)
                    .await
                    .expect("read")
            };
            assert!(read.is_some());
            assert_eq!(
                runs_on_both().await - before,
                4,
                "with ancestry: {ancestry}"
            );
        }
        drop(cold);
        saver.drop_schema().await.expect("drop");
    }

    /// A second connection that fails its half of a read (here its prepared statement was
    /// dropped on the server, as a closed connection would fail it) fails no read: the half is
    /// read again on the caller's connection.
    #[tokio::test]
    async fn a_failing_second_connection_fails_no_long_read() {
        let Some(LongRead { saver, t, runs, .. }) = long_read().await else {
            return;
        };
        let b = &saver.engine.backend;
        let c = b.client("test").await.expect("client");
        let other = b.client("test").await.expect("client");
        other
            .prepare_cached(&b.hot.messages)
            .await
            .expect("prepare");
        other
            .batch_execute("DEALLOCATE ALL")
            .await
            .expect("deallocate");
        let pid: i32 = other
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("pid")
            .get(0);
        drop(other);
        assert_eq!(b.pool.status().size, 2);
        let st = c.prepare_cached(&b.hot.messages).await.expect("prepare");
        let split = b
            .read_bodies_split(&c, &st, &t, &runs, false, "test".into())
            .await
            .expect("the read does not fail with the other connection");
        let whole = read_bodies(&c, &st, &t, &runs, false, "test".into())
            .await
            .expect("read");
        let seqs = |r: &BodyRead| r.rows.iter().map(|row| row.seq).collect::<Vec<_>>();
        assert_eq!(seqs(&split), seqs(&whole));
        assert_eq!(split.epoch, whole.epoch);
        // The other connection was tried, failed, and left the pool (returned, every later
        // long read would take it and fail its half again): the pool holds only `c`, and the
        // next connection is another session.
        assert_eq!(
            b.pool.status().size,
            1,
            "the failed connection left the pool"
        );
        let next = b.client("test").await.expect("client");
        let next_pid: i32 = next
            .query_one("SELECT pg_backend_pid()", &[])
            .await
            .expect("pid")
            .get(0);
        assert_ne!(next_pid, pid);
        drop((c, next));
        saver.drop_schema().await.expect("drop");
    }

    /// The configuration and whether the store holds checkpoints are read in one snapshot:
    /// a process that configures the store and puts its first checkpoint while an open reads
    /// the configuration makes that open see both or neither, never a checkpoint without a
    /// configuration (which is a damaged store). A lock on `checkpoints` holds the read while
    /// another session records the configuration and a checkpoint; before, the open read the
    /// configuration first, then waited, then found the checkpoint.
    #[tokio::test]
    async fn the_configuration_is_read_with_the_checkpoints_in_one_snapshot() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let b = &saver.engine.backend;
        let setup = b.client("test").await.expect("client");
        let recorded: Vec<(String, String)> = setup
            .query(&b.sql("SELECT key, value FROM {s}.antler_meta"), &[])
            .await
            .expect("config")
            .iter()
            .map(|r| (r.get(0), r.get(1)))
            .collect();
        assert_eq!(recorded.len(), 2, "{recorded:?}");
        setup
            .batch_execute(&b.sql("DELETE FROM {s}.antler_meta"))
            .await
            .expect("unconfigure");
        let locker = b.client("test").await.expect("client");
        locker
            .batch_execute(&b.sql("BEGIN; LOCK TABLE {s}.checkpoints IN ACCESS EXCLUSIVE MODE"))
            .await
            .expect("lock");
        let reading = b.read_config();
        let writing = async {
            until_a_statement_waits(b, "%EXISTS (SELECT 1 FROM %checkpoints)%").await;
            for (k, v) in &recorded {
                locker
                    .execute(
                        &b.sql("INSERT INTO {s}.antler_meta (key, value) VALUES ($1, $2)"),
                        &[k, v],
                    )
                    .await
                    .expect("configure");
            }
            locker
                .batch_execute(&b.sql(
                    "INSERT INTO {s}.checkpoints VALUES ('t', '', '\\x01', NULL, '\\x00', '\\x00'); COMMIT",
                ))
                .await
                .expect("first checkpoint");
        };
        let (read, ()) = tokio::join!(reading, writing);
        let read = read.expect("not a damaged store");
        let get = |k: &str| {
            recorded
                .iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.clone())
                .expect("recorded")
        };
        let want = crate::engine::parse_config(&get("channel_mode"), &get("snapshot_frequency"))
            .expect("parses");
        assert_eq!(read, Some(want));
        drop((setup, locker));
        saver.drop_schema().await.expect("drop");
    }

    /// A put of a relative record checks its parent as committed when it locks the parent
    /// row, not as of its statement's snapshot: a delete of the parent that commits while the
    /// put waits for it leaves the put `MissingParent`, with nothing stored. Two deletes: as
    /// `delete_thread` makes one (the epoch row first, where the put waits) and as `prune` and
    /// `delete_for_runs` make one (the doomed rows locked FOR UPDATE, no epoch row: the put
    /// waits on the parent row). Read under the snapshot, the parent was still there and the
    /// put stored a record no other reader could complete (`docs/checkpoint-format.md`,
    /// "Relative records").
    #[tokio::test]
    async fn a_relative_put_waiting_for_a_delete_sees_its_parent_gone() {
        use crate::model::{ChannelVersions, Checkpoint, CheckpointMetadata, RELATIVE_RECORD_V};
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        let deletes = [
            format!(
                "BEGIN; {}; {}",
                b.sql(BUMP_EPOCH_SQL).replace("$1", "'t'"),
                b.sql("DELETE FROM {s}.checkpoints WHERE thread_id = 't'")
            ),
            b.sql(
                "BEGIN; SELECT 1 FROM {s}.checkpoints c WHERE c.thread_id = 't' FOR UPDATE OF c;
                 DELETE FROM {s}.checkpoints WHERE thread_id = 't'",
            ),
        ];
        for delete in deletes {
            saver
                .delete_thread(&ThreadId::new("t"))
                .await
                .expect("a fresh thread");
            let (head, _) = long_thread(&saver, 1).await;
            let parent = head.checkpoint_id.expect("stored");
            let holder = b.client("test").await.expect("client");
            holder
                .batch_execute(&delete)
                .await
                .expect("delete, uncommitted");
            let racing = async {
                // The put's statement, whose text starts with `PUT_FRESH_CTE`.
                until_a_statement_waits(b, "%epoch_lock AS (%VALUES ($1, 0)%").await;
                holder.batch_execute("COMMIT").await.expect("commit");
            };
            let mut next = Checkpoint::empty();
            next.v = RELATIVE_RECORD_V;
            let id = next.id;
            let none = ChannelVersions::new();
            let (put, ()) = tokio::join!(
                saver.put(&head, next, CheckpointMetadata::default(), &none),
                racing
            );
            match put {
                Err(Error::MissingParent {
                    checkpoint_id,
                    parent_id,
                    ..
                }) => assert_eq!((checkpoint_id, parent_id), (id, parent), "{delete}"),
                other => panic!("{delete}: expected MissingParent, got {other:?}"),
            }
            let c = b.client("test").await.expect("client");
            let rows: i64 = c
                .query_one(
                    &b.sql("SELECT count(*) FROM {s}.checkpoints WHERE thread_id = 't'"),
                    &[],
                )
                .await
                .expect("count")
                .get(0);
            assert_eq!(rows, 0, "{delete}");
        }
    }

    /// A put that stores no message list does not commit while `delete_thread` runs: it waits
    /// for the delete's lock on the thread's epoch row and commits after it (a put to a
    /// deleted thread). The delete is held between its value and checkpoint deletes by a
    /// lock on one of the thread's message rows. Before 2026-12-01 the put committed there,
    /// the checkpoint delete took its checkpoint and its value stayed behind, so a later put
    /// of the same thread id with other bytes under that key failed with `Conflict` for good.
    #[tokio::test]
    async fn a_put_racing_delete_thread_leaves_no_values_behind() {
        use crate::blob::Blob;
        use crate::model::{Checkpoint, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let (head, _) = long_thread(&saver, 1).await;
        let b = &saver.engine.backend;
        prefill(b, 4).await;
        let holder = b.client("test").await.expect("client");
        holder
            .batch_execute(
                &b.sql("BEGIN; SELECT 1 FROM {s}.messages WHERE thread_id = 't' FOR UPDATE"),
            )
            .await
            .expect("hold a message row");
        let t = ThreadId::new("t");
        let racing = async {
            until_a_statement_waits(b, &format!("%DELETE FROM {}.messages%", b.s)).await;
            let mut next = Checkpoint::empty();
            next.channel_versions
                .insert("x".into(), ChannelVersion::new(2));
            next.channel_values
                .insert("x".into(), Blob::json(&"mine").expect("blob"));
            let versions = next.channel_versions.clone();
            let mut put =
                std::pin::pin!(saver.put(&head, next, CheckpointMetadata::default(), &versions));
            let early = tokio::time::timeout(std::time::Duration::from_secs(2), &mut put).await;
            holder.batch_execute("COMMIT").await.expect("release");
            match early {
                Ok(done) => Err(done),
                Err(_) => Ok(put.await),
            }
        };
        let (deleted, put) = tokio::join!(saver.delete_thread(&t), racing);
        deleted.expect("deleted");
        let put = put.expect("the put did not commit while the delete held the thread");
        put.expect("the put, after the delete");
        // What is left is the put's checkpoint with its value: no value without a checkpoint.
        let c = b.client("test").await.expect("client");
        let count = |table: &'static str| {
            let c = &c;
            async move {
                c.query_one(
                    &b.sql(&format!(
                        "SELECT count(*) FROM {{s}}.{table} WHERE thread_id = 't'"
                    )),
                    &[],
                )
                .await
                .expect("count")
                .get::<_, i64>(0)
            }
        };
        assert_eq!((count("checkpoints").await, count("blobs").await), (1, 1));
        // Its version mark is known: the put's own, as for a first put on a fresh thread.
        // Decided on the put's snapshot alone, which still showed the deleted checkpoints, it
        // was unknown (NULL) until the next `delete_thread`.
        let mark: Option<i64> = c
            .query_one(
                &b.sql("SELECT version FROM {s}.version_marks WHERE thread_id = 't' AND checkpoint_ns = ''"),
                &[],
            )
            .await
            .expect("the mark row")
            .get(0);
        assert_eq!(mark, Some(2));
        assert_eq!(
            saver
                .max_channel_version(&t, &crate::ids::CheckpointNs::new(""))
                .await
                .expect("read"),
            2
        );
        drop(c);
        saver.drop_schema().await.expect("drop");
    }

    /// A put that waited for a delete of its thread settles its version mark on its own
    /// connection: on a pool of one it finishes, with its mark known. (Waiting for a second
    /// connection while holding the put's would wait for good there.)
    #[tokio::test]
    async fn a_put_that_waited_for_a_delete_settles_its_mark_on_a_pool_of_one() {
        use crate::blob::Blob;
        use crate::model::{Checkpoint, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(options) = fresh_options(1) else {
            return;
        };
        let saver = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .expect("connect");
        // Another process, with a pool of its own, deleting the thread.
        let other = PostgresSaver::connect(options.with_pool_size(2), StoreConfig::full())
            .await
            .expect("connect");
        let (head, _) = long_thread(&saver, 1).await;
        let b = &other.engine.backend;
        let holder = b.client("test").await.expect("client");
        holder
            .batch_execute(&format!(
                "BEGIN; {}; {}",
                b.sql(BUMP_EPOCH_SQL).replace("$1", "'t'"),
                b.sql(
                    "DELETE FROM {s}.checkpoints WHERE thread_id = 't';
                     DELETE FROM {s}.blobs WHERE thread_id = 't';
                     DELETE FROM {s}.version_marks WHERE thread_id = 't'"
                )
            ))
            .await
            .expect("delete, uncommitted");
        let racing = async {
            until_a_statement_waits(b, "%epoch_lock AS (%VALUES ($1, 0)%").await;
            holder.batch_execute("COMMIT").await.expect("commit");
        };
        let mut next = Checkpoint::empty();
        next.channel_versions
            .insert("x".into(), ChannelVersion::new(2));
        next.channel_values
            .insert("x".into(), Blob::json(&"mine").expect("blob"));
        let versions = next.channel_versions.clone();
        let put = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            saver.put(&head, next, CheckpointMetadata::default(), &versions),
        );
        let (put, ()) = tokio::join!(put, racing);
        put.expect("the put finishes").expect("stored");
        assert_eq!(
            saver
                .max_channel_version(&ThreadId::new("t"), &crate::ids::CheckpointNs::new(""))
                .await
                .expect("read"),
            2
        );
        let c = b.client("test").await.expect("client");
        let mark: Option<i64> = c
            .query_one(
                &b.sql("SELECT version FROM {s}.version_marks WHERE thread_id = 't' AND checkpoint_ns = ''"),
                &[],
            )
            .await
            .expect("the mark row")
            .get(0);
        assert_eq!(mark, Some(2));
        drop(c);
        other.drop_schema().await.expect("drop");
    }

    /// `drop_schema` refuses the shared `public` schema, and only it.
    #[test]
    fn the_public_schema_is_never_dropped() {
        let err = droppable(&quote_ident("public")).expect_err("refused");
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput);
        assert!(err.to_string().contains("public schema"), "{err}");
        assert!(droppable(&quote_ident("antler_test_x")).is_ok());
        assert!(droppable(&quote_ident("Public")).is_ok());
    }

    /// A relative record read with its ancestry costs three statements: the row with its
    /// writes and ancestors, every value it holds (its own and the inherited message list),
    /// and the bodies. Read as three calls (the trait's default) it costs seven: the value
    /// lookup confirms after its bodies that the checkpoint still exists (`BodyRead`).
    #[tokio::test]
    async fn a_relative_record_is_read_with_its_ancestry_in_three_statements() {
        use crate::blob::Blob;
        use crate::model::{Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(options) = fresh_options(1) else {
            return;
        };
        let saver = PostgresSaver::connect(options, StoreConfig::full())
            .await
            .expect("connect");
        let mut full = Checkpoint::empty();
        let list = Blob::messages(
            crate::blob::MessagesKind::Snapshot,
            &[serde_json::json!({"type": "human", "content": "q", "id": "h"})],
        )
        .expect("blob");
        full.channel_versions
            .insert("m".into(), ChannelVersion::new(1));
        full.channel_values.insert("m".into(), list);
        let versions = full.channel_versions.clone();
        let at = saver
            .put(
                &CheckpointConfig::latest("t"),
                full,
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .expect("put");
        let mut relative = Checkpoint::empty();
        relative.v = crate::model::RELATIVE_RECORD_V;
        relative
            .channel_versions
            .insert("b".into(), ChannelVersion::new(2));
        relative
            .channel_values
            .insert("b".into(), Blob::json(&"b2").expect("blob"));
        let versions = relative.channel_versions.clone();
        saver
            .put(&at, relative, CheckpointMetadata::default(), &versions)
            .await
            .expect("put");
        let latest = CheckpointConfig::latest("t");
        let b = &saver.engine.backend;
        for (own, want) in [(true, 3), (false, 7)] {
            // The pool's only connection: the reads below run on it.
            let before = statement_runs(&b.client("test").await.expect("client")).await;
            let read = if own {
                saver.get_tuple_with_ancestry(&latest, 8).await
            } else {
                crate::saver::get_tuple_with_ancestry_default(&saver, &latest, 8).await
            }
            .expect("read")
            .expect("exists");
            let after = statement_runs(&b.client("test").await.expect("client")).await;
            assert_eq!(after - before, want, "own implementation: {own}");
            assert_eq!(read.ancestors.len(), 1);
            let m = read.inherited[&("m".into(), ChannelVersion::new(1))]
                .as_ref()
                .expect("stored");
            assert!(matches!(m, Blob::Messages(l) if l.items.len() == 1));
        }
        saver.drop_schema().await.expect("drop");
    }

    /// The bodies a read hashes as they arrive seed the message index with the keys a write
    /// looks up: after a cold read, a snapshot of the same ten messages (new values, so found
    /// by hash, not by pointer) and one more stores one body, not eleven.
    #[tokio::test]
    async fn bodies_hashed_as_they_arrive_let_the_next_write_find_them() {
        use crate::blob::{Blob, MessagesKind};
        use crate::model::{Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let Some(options) = fresh_options(2) else {
            return;
        };
        let saver = PostgresSaver::connect(options.clone(), StoreConfig::full())
            .await
            .expect("connect");
        let msg = |i: usize| serde_json::json!({"type": "human", "content": format!("message {i}"), "id": format!("m{i}")});
        let list = |n: usize| {
            Blob::messages(MessagesKind::Snapshot, &(0..n).map(msg).collect::<Vec<_>>())
                .expect("blob")
        };
        async fn put(
            s: &PostgresSaver,
            at: CheckpointConfig,
            list: Blob,
            v: u64,
        ) -> CheckpointConfig {
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert("messages".into(), ChannelVersion::new(v));
            cp.channel_values.insert("messages".into(), list);
            let versions = cp.channel_versions.clone();
            s.put(&at, cp, CheckpointMetadata::default(), &versions)
                .await
                .expect("put")
        }
        let first = put(&saver, CheckpointConfig::latest("t"), list(10), 1).await;
        // A saver that did not write the thread: its index comes from the read.
        let cold = PostgresSaver::connect(options, StoreConfig::full())
            .await
            .expect("connect");
        let read = cold
            .get_tuple(&CheckpointConfig::latest("t"))
            .await
            .expect("read")
            .expect("exists");
        assert_eq!(read.config, first);
        put(&cold, first, list(11), 2).await;
        let t = ThreadId::new("t");
        let stored = cold.engine.backend.all_messages(&t).await.expect("bodies");
        assert_eq!(
            stored.len(),
            11,
            "the ten read bodies were found, not stored again"
        );
        drop(cold);
        saver.drop_schema().await.expect("drop");
    }

    /// A connection that cannot be warmed (here: a table of the read path is gone) is still
    /// handed out; the reads on it fail as they would have, with their own errors.
    #[tokio::test]
    async fn a_connection_that_cannot_be_warmed_is_still_usable() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let b = &saver.engine.backend;
        let first = b.client("test").await.expect("client");
        // The other connection `connect` opened, held so that the next one is new.
        let _spare = b.client("test").await.expect("client");
        first
            .batch_execute(&b.sql("ALTER TABLE {s}.blobs RENAME TO blobs_gone"))
            .await
            .expect("rename");
        let second = b
            .client("test")
            .await
            .expect("a new connection despite the failed warm-up");
        let one: i32 = second
            .query_one("SELECT 1", &[])
            .await
            .expect("usable")
            .get(0);
        assert_eq!(one, 1);
        // The four statements parsed before the one on the missing table failed (the warm-up
        // sends them in order: the heads, then the heads with their ancestors) are still
        // prepared after its rollback.
        assert_eq!(warm_statements(&second, &b.hot).await, 4);
        assert!(
            lock_timeout_is_the_sessions(&second).await,
            "the session setting is restored"
        );
        // The connection's statement cache must not name a statement the server dropped: a
        // cached statement runs.
        first
            .batch_execute(&b.sql("ALTER TABLE {s}.blobs_gone RENAME TO blobs"))
            .await
            .expect("rename back");
        let st = second
            .prepare_cached(&b.hot.head_by_id)
            .await
            .expect("cached");
        assert_eq!(warm_statements(&second, &b.hot).await, 4, "a cache hit");
        let none: &[u8] = &[];
        assert!(
            second
                .query(&st, &[&"t", &"", &none])
                .await
                .expect("the cached statement exists")
                .is_empty()
        );
        drop((first, second));
        saver.drop_schema().await.expect("drop");
    }

    /// Whether the session's lock timeout is the one it started with (the server's, role's,
    /// database's or connection string's), not one the warm-up set.
    async fn lock_timeout_is_the_sessions(c: &deadpool_postgres::Object) -> bool {
        c.query_one(
            "SELECT setting = reset_val FROM pg_settings WHERE name = 'lock_timeout'",
            &[],
        )
        .await
        .expect("pg_settings")
        .get(0)
    }

    /// A table of the read path locked by another session (DDL, say) does not hold up a new
    /// connection: its warm-up gives up after a short lock timeout, and the session's own
    /// lock timeout is back afterwards. Without the timeout the new connection waited for
    /// the lock, here for ever (the session holding it waits for the connection).
    #[tokio::test]
    async fn a_locked_table_does_not_hold_up_a_new_connection() {
        let Some(saver) = fresh(StoreConfig::full()).await else {
            return;
        };
        let b = &saver.engine.backend;
        let first = b.client("test").await.expect("client");
        // The other connection `connect` opened, held so that the next one is new.
        let _spare = b.client("test").await.expect("client");
        first
            .batch_execute(&b.sql("BEGIN; LOCK TABLE {s}.messages IN ACCESS EXCLUSIVE MODE"))
            .await
            .expect("lock");
        let second = tokio::time::timeout(std::time::Duration::from_secs(30), b.client("test"))
            .await
            .expect("the new connection did not wait for the lock")
            .expect("client");
        assert!(
            lock_timeout_is_the_sessions(&second).await,
            "the session setting is restored"
        );
        first.batch_execute("COMMIT").await.expect("commit");
        drop((first, second));
        saver.drop_schema().await.expect("drop");
    }
}
