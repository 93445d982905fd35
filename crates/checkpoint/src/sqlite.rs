//! The SQLite saver (feature `sqlite`, the embedded default): a file (WAL) or `:memory:`.
//!
//! One connection behind a mutex; opening it and every statement run on tokio's blocking
//! pool, so no async thread blocks on a query. (Closing the connection when the saver is
//! dropped, which checkpoints the WAL of the last connection to a file, runs on the thread
//! that drops it.) Schema changes are numbered migrations tracked in
//! `PRAGMA user_version`; a database with a newer schema than this build knows is refused.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use rusqlite::{Connection, OptionalExtension, params};

use crate::engine::{
    Backend, BlobRow, BodyRead, BodyRow, BodyScan, CheckpointRow, Engine, HeadChain, IndexGuard,
    MessageRow, RowScan, ScanArg, StorageStats, TupleRows, WriteRow, config_is, impl_saver,
    record_keys, runs_of_rows, scan_sql, unreferenced,
};
use crate::error::{Error, Result};
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, TaskId, TaskPath, ThreadId,
};
use crate::mode::{ChannelMode, SnapshotFrequency, StoreConfig};

/// Schema migrations; index + 1 = the `user_version` after applying it.
const MIGRATIONS: &[&str] = &[
    // 1: the store's configuration and the four data tables of docs/checkpoint-format.md.
    "CREATE TABLE antler_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL) WITHOUT ROWID;
     CREATE TABLE checkpoints (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id BLOB NOT NULL,
        parent_id BLOB, record BLOB NOT NULL, metadata BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id)) WITHOUT ROWID;
     CREATE TABLE blobs (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, channel TEXT NOT NULL, version INTEGER NOT NULL,
        data BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, channel, version)) WITHOUT ROWID;
     CREATE TABLE writes (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, checkpoint_id BLOB NOT NULL,
        task_id TEXT NOT NULL, idx INTEGER NOT NULL, channel TEXT NOT NULL, task_path TEXT NOT NULL,
        value BLOB NOT NULL,
        PRIMARY KEY (thread_id, checkpoint_ns, checkpoint_id, task_id, idx)) WITHOUT ROWID;
     CREATE TABLE messages (
        thread_id TEXT NOT NULL, seq INTEGER NOT NULL, body BLOB NOT NULL,
        PRIMARY KEY (thread_id, seq)) WITHOUT ROWID;",
    // 2: message-store epochs (engine::IndexGuard).
    "CREATE TABLE thread_epochs (thread_id TEXT PRIMARY KEY, epoch INTEGER NOT NULL) WITHOUT ROWID;",
    // 3: version marks (Saver::max_channel_version; NULL: unknown), filled from the existing
    // records by `backfill_marks` in the same transaction.
    "CREATE TABLE version_marks (
        thread_id TEXT NOT NULL, checkpoint_ns TEXT NOT NULL, version INTEGER,
        PRIMARY KEY (thread_id, checkpoint_ns)) WITHOUT ROWID;",
    // 4: the run index (`delete_for_runs` finds a run's threads without scanning the store),
    // filled from the existing records by `backfill_runs` in the same transaction.
    "CREATE TABLE run_threads (run_id TEXT NOT NULL, thread_id TEXT NOT NULL,
        PRIMARY KEY (run_id, thread_id)) WITHOUT ROWID;
     CREATE INDEX run_threads_by_thread ON run_threads (thread_id);",
];

/// The migration that adds version marks.
const MARKS_MIGRATION: usize = 3;

/// The migration that adds the run index.
const RUNS_MIGRATION: usize = 4;

/// The schema version this build writes.
pub const SQLITE_SCHEMA_VERSION: i64 = MIGRATIONS.len() as i64;

/// A SQLite error with its context. A stored value of a type or range no build writes (SQLite
/// columns take any type whatever the schema says: a TEXT checkpoint id, a REAL sequence
/// number) is damage, [`Error::DamagedColumn`] (kind `Corrupt`), not a backend failure a
/// caller might retry; PostgreSQL's typed columns cannot hold such values.
fn sql_err(context: impl Into<String>) -> impl FnOnce(rusqlite::Error) -> Error {
    move |e| match e {
        rusqlite::Error::InvalidColumnType(_, column, found) => Error::DamagedColumn {
            context: context.into(),
            detail: format!("column {column} holds a value of type {found}"),
        },
        rusqlite::Error::IntegralValueOutOfRange(i, v) => Error::DamagedColumn {
            context: context.into(),
            detail: format!("column {i} holds {v}, out of range"),
        },
        rusqlite::Error::FromSqlConversionFailure(i, found, source) => Error::DamagedColumn {
            context: context.into(),
            detail: format!("column {i} holds a {found} value that does not convert: {source}"),
        },
        // A damaged file is no failure a retry helps with, and a lock that outlasted the busy
        // timeout is one it does (the kind PostgreSQL's lock failures have: `Conflict`).
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseCorrupt | rusqlite::ErrorCode::NotADatabase
            ) =>
        {
            Error::StoreDamaged {
                context: context.into(),
                detail: e.to_string(),
            }
        }
        rusqlite::Error::SqliteFailure(f, _)
            if matches!(
                f.code,
                rusqlite::ErrorCode::DatabaseBusy | rusqlite::ErrorCode::DatabaseLocked
            ) =>
        {
            Error::StoreBusy {
                context: context.into(),
                detail: e.to_string(),
            }
        }
        e => Error::backend(context, e),
    }
}

fn id_bytes(id: CheckpointId) -> [u8; 16] {
    id.to_bytes()
}

fn id_from(thread: &str, bytes: Vec<u8>) -> Result<CheckpointId> {
    crate::engine::columns::checkpoint_id("sqlite", thread, &bytes)
}

/// The parent column of checkpoint `child`'s row (see [`crate::engine::columns::parent_id`]).
fn parent_from(thread: &str, child: CheckpointId, bytes: &[u8]) -> Result<CheckpointId> {
    crate::engine::columns::parent_id("sqlite", thread, child, bytes)
}

use crate::engine::columns::{i64_of, u64_of};

/// Prepared statements a connection keeps (see `SqliteSaver::from_connection`).
const STATEMENT_CACHE: usize = 64;

/// How long a connection waits for another one's lock.
const BUSY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// Refuses a store whose recorded configuration `config` does not match
/// ([`Error::StoreConfigMismatch`]), reading only: the configuration table exists from the
/// first schema version, so a store of any version can be checked before it is migrated.
/// Anything short of a whole, readable record (a new file, a damaged record) is
/// left to the check after the migrations, which reports it.
///
/// A file that holds tables but is not an antler store is another program's database (a
/// LangGraph `checkpoints.sqlite`, say): refused as it is, before the WAL switch would have
/// changed it for good, with an error that asks for a file of antler's own. Every antler
/// schema version has the `antler_meta` table (the first migration creates it and sets the
/// version in one transaction), so a file with tables is foreign when it lacks that table or
/// records version 0, whatever version another program set; a negative version is never
/// antler's either, nor a positive one without that table (tables or not).
/// A store of a newer schema than this build's is refused here too (`SchemaTooNew`), before
/// the WAL switch, so a store the newer build left in another journal mode stays as it was.
///
/// Everything is read in one read transaction: a concurrent open that migrates the new file
/// meanwhile (tables and version together) is seen entirely or not at all, never as tables
/// without their version, which would read as a foreign file.
fn precheck_config(conn: &Connection, config: StoreConfig) -> Result<()> {
    let ctx = "sqlite: reading store configuration";
    let tx = conn.unchecked_transaction().map_err(sql_err(ctx))?;
    let (version, tables, has_meta): (i64, i64, bool) = tx
        .query_row(
            "SELECT (SELECT user_version FROM pragma_user_version),
                    (SELECT COUNT(*) FROM sqlite_master WHERE type = 'table'),
                    EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'antler_meta')",
            [],
            |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
        )
        .map_err(sql_err(ctx))?;
    if version < 0 || (version > 0 && !has_meta) || (tables > 0 && (version == 0 || !has_meta)) {
        return Err(Error::InvalidArgument(format!(
            "sqlite: the file holds tables antler did not create (schema version {version}{}): give antler a file of its own",
            if has_meta {
                ""
            } else {
                ", no antler_meta table"
            }
        )));
    }
    if !has_meta {
        return Ok(());
    }
    if version > SQLITE_SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: version,
            supported: SQLITE_SCHEMA_VERSION,
        });
    }
    // Both keys in one statement of the same read transaction: a record another process
    // rewrites meanwhile is read whole, before or after.
    let (mode, frequency): (Option<String>, Option<String>) = tx
        .query_row(
            "SELECT (SELECT value FROM antler_meta WHERE key = 'channel_mode'),
                    (SELECT value FROM antler_meta WHERE key = 'snapshot_frequency')",
            [],
            |r| Ok((r.get(0).ok(), r.get(1).ok())),
        )
        .map_err(sql_err(ctx))?;
    drop(tx);
    let (Some(mode), Some(frequency)) = (mode, frequency) else {
        return Ok(());
    };
    let Ok(stored) = crate::engine::parse_config(&mode, &frequency) else {
        return Ok(());
    };
    config.check_against(Some(stored)).map(drop)
}

/// Switches the database to WAL. Switching needs exclusive access, and SQLite reports a
/// concurrent opener's lock as `SQLITE_BUSY` without consulting the busy timeout, so two
/// processes opening a new file at once retry here for up to [`BUSY_TIMEOUT`]; once the file
/// is in WAL mode the pragma needs no lock.
fn set_wal(conn: &Connection) -> rusqlite::Result<()> {
    let started = std::time::Instant::now();
    loop {
        match conn.pragma_update_and_check(None, "journal_mode", "WAL", |r| r.get::<_, String>(0)) {
            Err(rusqlite::Error::SqliteFailure(e, _))
                if e.code == rusqlite::ErrorCode::DatabaseBusy
                    && started.elapsed() < BUSY_TIMEOUT =>
            {
                std::thread::sleep(std::time::Duration::from_millis(5));
            }
            // SQLite answers with the mode it is in: anything but WAL means it could not
            // switch (the readers and the single writer then block each other).
            Ok(mode) if !mode.eq_ignore_ascii_case("wal") => {
                return Err(rusqlite::Error::SqliteFailure(
                    rusqlite::ffi::Error::new(rusqlite::ffi::SQLITE_CANTOPEN),
                    Some(format!(
                        "the database stays in journal mode {mode}, not WAL"
                    )),
                ));
            }
            other => return other.map(drop),
        }
    }
}

/// The keys of a thread's checkpoints, sorted.
fn thread_checkpoints(
    tx: &rusqlite::Transaction<'_>,
    thread: &str,
    ctx: &str,
) -> Result<Vec<crate::engine::Expected>> {
    Ok(crate::engine::expected_of(
        thread_rows(tx, thread, ctx)?.iter(),
    ))
}

/// Every checkpoint row of a thread.
fn thread_rows(
    tx: &rusqlite::Transaction<'_>,
    thread: &str,
    ctx: &str,
) -> Result<Vec<CheckpointRow>> {
    tx.prepare(&format!(
        "SELECT {ROW_COLS} FROM checkpoints WHERE thread_id = ?1"
    ))
    .and_then(|mut s| {
        s.query_map([thread], read_row)
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
    })
    .map_err(sql_err(ctx.to_owned()))?
    .into_iter()
    .map(to_row)
    .collect()
}

/// Applies pending migrations; refuses a newer schema.
///
/// One transaction under the write lock, which reads the version it starts from: two
/// processes opening a new file at once apply each migration once (the second finds it done).
fn migrate(conn: &mut Connection) -> Result<()> {
    // An up-to-date file needs no write lock (a read-only or busy file still opens).
    let version: i64 = conn
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql_err("sqlite: reading schema version"))?;
    if version == SQLITE_SCHEMA_VERSION {
        return Ok(());
    }
    // A newer schema only ever moves on: refuse it before waiting for the write lock, which a
    // read-only file cannot give and a busy one may not give in time.
    if version > SQLITE_SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: version,
            supported: SQLITE_SCHEMA_VERSION,
        });
    }
    let tx = write_tx(conn).map_err(sql_err("sqlite: migration"))?;
    let current: i64 = tx
        .query_row("PRAGMA user_version", [], |r| r.get(0))
        .map_err(sql_err("sqlite: reading schema version"))?;
    if current > SQLITE_SCHEMA_VERSION {
        return Err(Error::SchemaTooNew {
            found: current,
            supported: SQLITE_SCHEMA_VERSION,
        });
    }
    if current == SQLITE_SCHEMA_VERSION {
        return Ok(());
    }
    for (i, sql) in MIGRATIONS
        .iter()
        .enumerate()
        .skip(usize::try_from(current).unwrap_or(0))
    {
        tx.execute_batch(sql)
            .map_err(sql_err(format!("sqlite: migration {}", i + 1)))?;
        if i + 1 == MARKS_MIGRATION {
            backfill_marks(&tx)?;
        }
        if i + 1 == RUNS_MIGRATION {
            backfill_runs(&tx)?;
        }
        tx.pragma_update(None, "user_version", i as i64 + 1)
            .map_err(sql_err("sqlite: migration"))?;
    }
    tx.commit().map_err(sql_err("sqlite: migration"))
}

pub(crate) struct SqliteBackend {
    conn: Arc<Mutex<Connection>>,
    path: Option<PathBuf>,
}

impl SqliteBackend {
    async fn run<T: Send + 'static>(
        &self,
        f: impl FnOnce(&mut Connection) -> Result<T> + Send + 'static,
    ) -> Result<T> {
        let conn = self.conn.clone();
        tokio::task::spawn_blocking(move || {
            let mut guard = match conn.lock() {
                Ok(g) => g,
                Err(p) => p.into_inner(),
            };
            f(&mut guard)
        })
        .await
        .map_err(|e| Error::backend("sqlite: blocking task", e))?
    }
}

/// Id, parent, record, metadata, thread, namespace.
type RawRow = (Vec<u8>, Option<Vec<u8>>, Vec<u8>, Vec<u8>, String, String);

fn read_row(r: &rusqlite::Row<'_>) -> rusqlite::Result<RawRow> {
    Ok((
        r.get(0)?,
        r.get(1)?,
        r.get(2)?,
        r.get(3)?,
        r.get(4)?,
        r.get(5)?,
    ))
}

fn to_row(raw: RawRow) -> Result<CheckpointRow> {
    let (id, parent, record, metadata, thread, ns) = raw;
    let id = id_from(&thread, id)?;
    Ok(CheckpointRow {
        id,
        parent: parent.map(|p| parent_from(&thread, id, &p)).transpose()?,
        thread_id: ThreadId::new(thread),
        ns: CheckpointNs::new(ns),
        record,
        metadata,
    })
}

fn insert_messages(
    tx: &rusqlite::Transaction<'_>,
    thread: &ThreadId,
    messages: &[MessageRow],
) -> Result<()> {
    let mut stmt = tx
        .prepare_cached("INSERT INTO messages (thread_id, seq, body) VALUES (?1, ?2, ?3)")
        .map_err(sql_err(format!(
            "sqlite: thread {thread}: inserting messages"
        )))?;
    for m in messages {
        stmt.execute(params![
            thread.as_str(),
            i64_of(m.seq, "message sequence")?,
            m.body
        ])
        .map_err(|e| match e {
            rusqlite::Error::SqliteFailure(f, _)
                if f.code == rusqlite::ErrorCode::ConstraintViolation =>
            {
                Error::Conflict {
                    thread_id: thread.clone(),
                    detail: format!("message sequence {} was taken by another writer", m.seq),
                }
            }
            // A damaged file or a busy lock keeps its own kind, as in every other statement.
            other => sql_err(format!(
                "sqlite: thread {thread}: inserting message {}",
                m.seq
            ))(other),
        })?;
    }
    Ok(())
}

/// Fills the run index from every record's metadata; a record whose metadata does not decode
/// adds no pair (reading it fails anyway, and `delete_for_runs` fails on its thread when the
/// thread is visited for another run). A process of an older build that keeps writing after
/// the migration adds no pairs either: stop older processes before upgrading.
fn backfill_runs(tx: &rusqlite::Transaction<'_>) -> Result<()> {
    let ctx = "sqlite: migration 4: run index";
    let mut pairs = std::collections::BTreeSet::new();
    {
        let mut stmt = tx
            .prepare("SELECT thread_id, metadata FROM checkpoints")
            .map_err(sql_err(ctx))?;
        let mut rows = stmt.query([]).map_err(sql_err(ctx))?;
        while let Some(r) = rows.next().map_err(sql_err(ctx))? {
            let metadata = r
                .get_ref(1)
                .ok()
                .and_then(|v| v.as_blob().ok())
                .unwrap_or_default();
            // A thread key that is not text names no thread a read can address.
            if let Ok(m) = crate::codec::decode_metadata(metadata)
                && let Some(run) = m.run_id
                && let Some(thread) = text_at(r, 0)
            {
                pairs.insert((run.as_str().to_owned(), thread));
            }
        }
    }
    let mut insert = tx
        .prepare("INSERT OR IGNORE INTO run_threads (run_id, thread_id) VALUES (?1, ?2)")
        .map_err(sql_err(ctx))?;
    for (run, thread) in pairs {
        insert.execute([run, thread]).map_err(sql_err(ctx))?;
    }
    Ok(())
}

/// Column `i` of `r` as text; `None` for a value of another type (damage a migration steps
/// over instead of failing every open).
fn text_at(r: &rusqlite::Row<'_>, i: usize) -> Option<String> {
    r.get_ref(i)
        .ok()
        .and_then(|v| v.as_str().ok())
        .map(str::to_owned)
}

/// Gives every namespace of the store its version mark (see `engine::MarkFold`), reading the
/// records one at a time.
fn backfill_marks(tx: &rusqlite::Transaction<'_>) -> Result<()> {
    let ctx = "sqlite: migration 3: version marks";
    let mut fold = crate::engine::MarkFold::default();
    {
        let mut stmt = tx
            .prepare("SELECT thread_id, checkpoint_ns, checkpoint_id, record FROM checkpoints")
            .map_err(sql_err(ctx))?;
        let mut rows = stmt.query([]).map_err(sql_err(ctx))?;
        while let Some(r) = rows.next().map_err(sql_err(ctx))? {
            // A column of another type is a record that cannot be decoded, not a failed open.
            let blob = |i| {
                r.get_ref(i)
                    .ok()
                    .and_then(|v| v.as_blob().ok())
                    .unwrap_or_default()
            };
            // Keys that are not text name no namespace a read can address.
            let (Some(thread), Some(ns)) = (text_at(r, 0), text_at(r, 1)) else {
                continue;
            };
            fold.add(thread, ns, blob(2), blob(3));
        }
        // A namespace with any damaged value version (negative, or not an integer) gets -1,
        // an unknown mark, whatever intact versions it also holds: the scan reports the
        // damage (before 2026-12-02 a greater intact version hid a negative one, and a
        // version that is no integer failed the migration, so every open).
        let mut stmt = tx
            .prepare(
                "SELECT thread_id, checkpoint_ns,
                        CASE WHEN SUM(typeof(version) <> 'integer') > 0 OR MIN(version) < 0
                             THEN -1 ELSE MAX(version) END
                   FROM blobs GROUP BY 1, 2",
            )
            .map_err(sql_err(ctx))?;
        let mut rows = stmt.query([]).map_err(sql_err(ctx))?;
        while let Some(r) = rows.next().map_err(sql_err(ctx))? {
            // Keys that are not text name no namespace a read can address.
            let (Some(thread), Some(ns)) = (text_at(r, 0), text_at(r, 1)) else {
                continue;
            };
            let version = r
                .get_ref(2)
                .ok()
                .and_then(|v| v.as_i64().ok())
                .unwrap_or(-1);
            fold.stored(thread, ns, version);
        }
    }
    let mut insert = tx
        .prepare(
            "INSERT INTO version_marks (thread_id, checkpoint_ns, version) VALUES (?1, ?2, ?3)",
        )
        .map_err(sql_err(ctx))?;
    for (thread, ns, mark) in fold.finish() {
        // A mark the column cannot hold (a version above i64::MAX, which an older build may
        // have stored in a record) is unknown, not a reason to refuse every open.
        let mark = mark.and_then(|m| i64::try_from(m).ok());
        insert
            .execute(params![thread, ns, mark])
            .map_err(sql_err(ctx))?;
    }
    Ok(())
}

/// Raises the version mark of a thread's namespace to `mark` (the record `id` just stored):
/// a namespace without a mark gets `mark` only if it holds no other checkpoint (otherwise an
/// unknown mark, NULL), and an unknown mark stays unknown.
fn raise_mark(
    tx: &rusqlite::Transaction<'_>,
    thread: &str,
    ns: &str,
    id: CheckpointId,
    mark: u64,
) -> Result<()> {
    let mark = i64_of(mark, "channel version")?;
    tx.prepare_cached(
        "INSERT INTO version_marks (thread_id, checkpoint_ns, version)
         SELECT ?1, ?2, CASE WHEN EXISTS (
             SELECT 1 FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id <> ?3)
           THEN NULL ELSE ?4 END
         WHERE true
         ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE
         SET version = CASE WHEN version IS NULL THEN NULL ELSE max(version, ?4) END",
    )
    .and_then(|mut s| s.execute(params![thread, ns, id_bytes(id), mark]))
    .map_err(sql_err(format!(
        "sqlite: thread {thread}: raising its version mark"
    )))?;
    Ok(())
}

/// Up to `max` rows following parent pointers from `start` (inclusive), nearest first; stops
/// early at a missing row.
fn read_ancestors(
    c: &Connection,
    thread: &str,
    ns: &str,
    start: CheckpointId,
    max: usize,
) -> Result<Vec<CheckpointRow>> {
    let max = i64::try_from(max).unwrap_or(i64::MAX);
    let mut stmt = c
        .prepare_cached(
            "WITH RECURSIVE chain(checkpoint_id, parent_id, record, metadata, depth) AS (
                SELECT checkpoint_id, parent_id, record, metadata, 0 FROM checkpoints
                 WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3
                UNION ALL
                SELECT c.checkpoint_id, c.parent_id, c.record, c.metadata, chain.depth + 1
                  FROM chain JOIN checkpoints c
                    ON c.thread_id = ?1 AND c.checkpoint_ns = ?2 AND c.checkpoint_id = chain.parent_id
                 WHERE chain.depth + 1 < ?4)
             SELECT checkpoint_id, parent_id, record, metadata, ?1, ?2 FROM chain ORDER BY depth",
        )
        .map_err(sql_err(format!("sqlite: thread {thread}: walking ancestors")))?;
    let rows = stmt
        .query_map(params![thread, ns, id_bytes(start), max], read_row)
        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
        .map_err(sql_err(format!(
            "sqlite: thread {thread}: walking ancestors"
        )))?;
    rows.into_iter().map(to_row).collect()
}

/// The thread's message-store epoch (0 without a row).
fn read_epoch(c: &Connection, thread: &str) -> Result<u64> {
    let epoch: Option<i64> = c
        .prepare_cached("SELECT epoch FROM thread_epochs WHERE thread_id = ?1")
        .and_then(|mut s| s.query_row([thread], |r| r.get(0)).optional())
        .map_err(sql_err(format!(
            "sqlite: thread {thread}: reading its epoch"
        )))?;
    epoch.map_or(Ok(0), |e| u64_of(thread, e, "thread epoch"))
}

/// Bumps the thread's message-store epoch (see [`IndexGuard`]).
fn bump_epoch(tx: &rusqlite::Transaction<'_>, thread: &str) -> Result<()> {
    tx.prepare_cached(
        "INSERT INTO thread_epochs (thread_id, epoch) VALUES (?1, 1)
         ON CONFLICT (thread_id) DO UPDATE SET epoch = epoch + 1",
    )
    .and_then(|mut s| s.execute([thread]))
    .map_err(sql_err(format!(
        "sqlite: thread {thread}: bumping its epoch"
    )))?;
    Ok(())
}

/// A transaction that writes: it takes the database's write lock when it begins (waiting up
/// to the busy timeout for another connection's write), so what it reads first (the epoch,
/// a checkpoint's existence) is read under that lock.
///
/// A deferred transaction that reads and then writes cannot upgrade its lock once another
/// connection committed after its read began (`SQLITE_BUSY`, which waiting does not resolve):
/// two processes writing one file failed at random (`two_savers_on_one_sqlite_file_write_concurrently`).
fn write_tx(c: &mut Connection) -> rusqlite::Result<rusqlite::Transaction<'_>> {
    c.transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
}

/// Checks a write's [`IndexGuard`] inside its transaction.
fn check_guard(tx: &rusqlite::Transaction<'_>, thread: &ThreadId, guard: IndexGuard) -> Result<()> {
    if guard.epoch.is_none() {
        return Ok(());
    }
    guard.check(thread, read_epoch(tx, thread.as_str())?)
}

/// The addressed checkpoint row, or the latest of the namespace.
fn read_checkpoint(
    c: &Connection,
    thread: &str,
    ns: &str,
    id: Option<CheckpointId>,
) -> Result<Option<CheckpointRow>> {
    let ctx = format!("sqlite: thread {thread}: reading checkpoint");
    let raw = match id {
        Some(id) => c
            .prepare_cached(&format!("SELECT {ROW_COLS} FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"))
            .and_then(|mut s| s.query_row(params![thread, ns, id_bytes(id)], read_row).optional()),
        None => c
            .prepare_cached(&format!("SELECT {ROW_COLS} FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 ORDER BY checkpoint_id DESC LIMIT 1"))
            .and_then(|mut s| s.query_row(params![thread, ns], read_row).optional()),
    }
    .map_err(sql_err(ctx))?;
    raw.map(to_row).transpose()
}

fn read_blobs(
    c: &Connection,
    thread: &str,
    ns: &str,
    keys: Vec<(ChannelName, ChannelVersion)>,
) -> Result<Vec<BlobRow>> {
    let ctx = format!("sqlite: thread {thread}: reading blobs");
    let mut stmt = c
        .prepare_cached("SELECT data FROM blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4")
        .map_err(sql_err(ctx.clone()))?;
    let mut out = Vec::new();
    for (channel, version) in keys {
        // A version the column cannot hold (a record an older build stored) has no value
        // stored under it: no value, as the memory saver answers, not the caller's error.
        let Ok(stored_version) = i64::try_from(version.get()) else {
            continue;
        };
        let data: Option<Vec<u8>> = stmt
            .query_row(params![thread, ns, channel.as_str(), stored_version], |r| {
                r.get(0)
            })
            .optional()
            .map_err(sql_err(ctx.clone()))?;
        if let Some(data) = data {
            out.push(BlobRow {
                channel,
                version,
                data,
            });
        }
    }
    Ok(out)
}

fn read_writes(
    c: &Connection,
    thread: &str,
    ns: &str,
    ids: &[CheckpointId],
) -> Result<Vec<WriteRow>> {
    let ctx = format!("sqlite: thread {thread}: reading writes");
    let mut stmt = c
        .prepare_cached("SELECT task_id, idx, channel, task_path, value FROM writes WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3")
        .map_err(sql_err(ctx.clone()))?;
    let mut out = Vec::new();
    for &id in ids {
        let rows = stmt
            .query_map(params![thread, ns, id_bytes(id)], |r| {
                Ok((
                    r.get::<_, String>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, String>(2)?,
                    r.get::<_, String>(3)?,
                    r.get::<_, Vec<u8>>(4)?,
                ))
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
            .map_err(sql_err(ctx.clone()))?;
        out.extend(
            rows.into_iter()
                .map(|(task, idx, channel, path, value)| WriteRow {
                    checkpoint_id: id,
                    task_id: TaskId::new(task),
                    idx,
                    channel: ChannelName::new(channel),
                    task_path: TaskPath::new(path),
                    value,
                }),
        );
    }
    Ok(out)
}

/// Stored message bodies as the blocking closure reads them (one `Vec` per body), checked
/// and copied into their final form on the caller's thread by [`RawBodies::check`].
///
/// Where the memory is allocated matters more than the number of copies here: the cold read
/// of 4,000 bodies took 4.3 ms this way, against 7.6 ms when the final bodies were allocated
/// on the blocking thread (one copy fewer) and 8–9 ms with one large buffer, because glibc
/// then handed the blocking thread's memory back to the system and faulted it in again on
/// every read.
#[derive(Default)]
struct RawBodies(Vec<(u64, Vec<u8>)>);

impl RawBodies {
    fn check(self) -> Vec<BodyRow> {
        self.0
            .into_iter()
            .map(|(seq, stored)| BodyRow::check(seq, &stored))
            .collect()
    }
}

/// The stored bodies of the runs, one range query per run.
fn read_bodies(c: &Connection, thread: &str, runs: &[(u64, u64)]) -> Result<RawBodies> {
    let ctx = format!("sqlite: thread {thread}: reading messages");
    if runs.is_empty() {
        return Ok(RawBodies::default());
    }
    let mut stmt = c
        .prepare_cached("SELECT seq, body FROM messages WHERE thread_id = ?1 AND seq >= ?2 AND seq < ?3 ORDER BY seq")
        .map_err(sql_err(ctx.clone()))?;
    let mut out = Vec::new();
    for &(start, len) in runs {
        let end = i64::try_from(start.saturating_add(len)).unwrap_or(i64::MAX);
        let lo = i64::try_from(start).unwrap_or(i64::MAX);
        let rows = stmt
            .query_map(params![thread, lo, end], |r| {
                Ok((r.get::<_, i64>(0)?, r.get::<_, Vec<u8>>(1)?))
            })
            .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
            .map_err(sql_err(ctx.clone()))?;
        for (seq, body) in rows {
            out.push((u64_of(thread, seq, "message sequence")?, body));
        }
    }
    Ok(RawBodies(out))
}

const ROW_COLS: &str = "checkpoint_id, parent_id, record, metadata, thread_id, checkpoint_ns";

#[async_trait]
impl Backend for SqliteBackend {
    async fn read_config(&self) -> Result<Option<(ChannelMode, SnapshotFrequency)>> {
        self.run(|c| {
            let ctx = "sqlite: reading store configuration";
            // One read transaction: its reads see one snapshot, so a record another process
            // rewrites meanwhile is read whole, before or after (as PostgreSQL's one statement).
            let tx = c.transaction().map_err(sql_err(ctx))?;
            // Read as any SQLite value: a value of another type than text (which no build
            // writes) is a damaged record of the configuration, kind `Config`, as an
            // unparseable text is, not a damaged column.
            let get = |k: &str| -> Result<Option<String>> {
                let v = tx
                    .query_row("SELECT value FROM antler_meta WHERE key = ?1", [k], |r| {
                        r.get::<_, rusqlite::types::Value>(0)
                    })
                    .optional()
                    .map_err(sql_err(ctx))?;
                match v {
                    None => Ok(None),
                    Some(rusqlite::types::Value::Text(s)) => Ok(Some(s)),
                    Some(other) => Err(Error::StoreConfigDamaged {
                        detail: format!("unreadable ({k} holds a {} value)", other.data_type()),
                    }),
                }
            };
            let (mode, freq) = (get("channel_mode")?, get("snapshot_frequency")?);
            let (Some(mode), Some(freq)) = (mode.clone(), freq.clone()) else {
                // A new store records its configuration before its first checkpoint.
                let data: bool = tx
                    .query_row("SELECT EXISTS (SELECT 1 FROM checkpoints)", [], |r| {
                        r.get(0)
                    })
                    .map_err(sql_err(ctx))?;
                if data {
                    return Err(crate::engine::config_damaged(
                        mode.as_deref(),
                        freq.as_deref(),
                    ));
                }
                return Ok(None);
            };
            crate::engine::parse_config(&mode, &freq).map(Some)
        })
        .await
    }

    async fn write_config(
        &self,
        mode: ChannelMode,
        frequency: SnapshotFrequency,
        expected: Option<(ChannelMode, SnapshotFrequency)>,
    ) -> Result<()> {
        self.run(move |c| {
            // The write lock first (IMMEDIATE): the compare and the write see one state.
            let tx = write_tx(c).map_err(sql_err("sqlite: recording store configuration"))?;
            let get = |k: &str| -> Result<Option<String>> {
                tx.query_row("SELECT value FROM antler_meta WHERE key = ?1", [k], |r| {
                    r.get(0)
                })
                .optional()
                .map_err(sql_err("sqlite: reading store configuration"))
            };
            let current = (get("channel_mode")?, get("snapshot_frequency")?);
            if !config_is(&current, expected) {
                return Ok(());
            }
            for (k, v) in [
                ("channel_mode", mode.as_str().to_owned()),
                ("snapshot_frequency", frequency.to_string()),
            ] {
                tx.execute(
                    "INSERT OR REPLACE INTO antler_meta (key, value) VALUES (?1, ?2)",
                    params![k, v],
                )
                .map_err(sql_err("sqlite: recording store configuration"))?;
            }
            tx.commit()
                .map_err(sql_err("sqlite: recording store configuration"))
        })
        .await
    }

    async fn checkpoint(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
    ) -> Result<Option<CheckpointRow>> {
        let (thread, ns) = (thread.to_string(), ns.to_string());
        self.run(move |c| read_checkpoint(c, &thread, &ns, id))
            .await
    }

    async fn checkpoints(&self, scan: RowScan<'_>) -> Result<Vec<CheckpointRow>> {
        // SQLite's BINARY collation compares text in byte order, like `list_order`.
        let (tail, args) = scan_sql(&scan, |i| format!("?{i}"), str::to_owned);
        let sql = format!("SELECT {ROW_COLS} FROM checkpoints{tail}");
        let args: Vec<rusqlite::types::Value> = args
            .into_iter()
            .map(|a| match a {
                ScanArg::Text(t) => t.into(),
                ScanArg::Bytes(b) => b.into(),
                ScanArg::Int(i) => i.into(),
            })
            .collect();
        self.run(move |c| {
            let mut stmt = c
                .prepare_cached(&sql)
                .map_err(sql_err("sqlite: listing checkpoints"))?;
            let rows = stmt
                .query_map(rusqlite::params_from_iter(args), read_row)
                .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                .map_err(sql_err("sqlite: listing checkpoints"))?;
            rows.into_iter().map(to_row).collect()
        })
        .await
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
        let (thread, ns) = (thread.to_string(), ns.to_string());
        self.run(move |c| read_ancestors(c, &thread, &ns, start, max))
            .await
    }

    async fn head_chain(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        limit: usize,
    ) -> Result<Option<HeadChain>> {
        let (thread, ns) = (thread.to_string(), ns.to_string());
        // One trip to the blocking pool and one read transaction: the row, its writes and its
        // ancestors come from one snapshot, as PostgreSQL's single statement reads them.
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: reading checkpoint");
            let tx = c.transaction().map_err(sql_err(ctx.clone()))?;
            let epoch = read_epoch(&tx, &thread)?;
            let Some(row) = read_checkpoint(&tx, &thread, &ns, id)? else {
                return Ok(None);
            };
            let writes = read_writes(&tx, &thread, &ns, &[row.id])?;
            let ancestors = match row.parent {
                Some(parent) if limit > 0 => read_ancestors(&tx, &thread, &ns, parent, limit)?,
                _ => Vec::new(),
            };
            tx.commit().map_err(sql_err(ctx))?;
            Ok(Some(HeadChain {
                row,
                writes,
                epoch,
                ancestors,
            }))
        })
        .await
    }

    async fn blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Vec<BlobRow>> {
        let (thread, ns, keys) = (thread.to_string(), ns.to_string(), keys.to_vec());
        // One read transaction (one statement per key): the values come from one snapshot.
        self.run(move |c| {
            let tx = c
                .transaction()
                .map_err(sql_err(format!("sqlite: thread {thread}: reading blobs")))?;
            read_blobs(&tx, &thread, &ns, keys)
        })
        .await
    }

    async fn checkpoint_blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: CheckpointId,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<(CheckpointRow, Vec<BlobRow>)>> {
        let (thread, ns, keys) = (thread.to_string(), ns.to_string(), keys.to_vec());
        self.run(move |c| {
            // One read transaction: the row and the blobs come from the same snapshot.
            let ctx = format!("sqlite: thread {thread}: reading blobs");
            let tx = c.transaction().map_err(sql_err(ctx.clone()))?;
            let Some(row) = read_checkpoint(&tx, &thread, &ns, Some(id))? else {
                return Ok(None);
            };
            let blobs = read_blobs(&tx, &thread, &ns, keys)?;
            tx.commit().map_err(sql_err(ctx))?;
            Ok(Some((row, blobs)))
        })
        .await
    }

    async fn writes(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<Vec<WriteRow>> {
        let (thread, ns, ids) = (thread.to_string(), ns.to_string(), ids.to_vec());
        // One read transaction (one statement per checkpoint): one snapshot.
        self.run(move |c| {
            let tx = c
                .transaction()
                .map_err(sql_err(format!("sqlite: thread {thread}: reading writes")))?;
            read_writes(&tx, &thread, &ns, &ids)
        })
        .await
    }

    async fn existing(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<std::collections::HashSet<CheckpointId>> {
        let (thread, ns, ids) = (thread.to_string(), ns.to_string(), ids.to_vec());
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: checking checkpoints");
            // One read transaction: every id is checked against one snapshot.
            let tx = c.transaction().map_err(sql_err(ctx.clone()))?;
            let mut st = tx
                .prepare_cached("SELECT 1 FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3")
                .map_err(sql_err(ctx.clone()))?;
            let mut out = std::collections::HashSet::new();
            for id in ids {
                if st
                    .exists(params![thread, ns, id_bytes(id)])
                    .map_err(sql_err(ctx.clone()))?
                {
                    out.insert(id);
                }
            }
            Ok(out)
        })
        .await
    }

    async fn messages(
        &self,
        thread: &ThreadId,
        runs: &[(u64, u64)],
        _seeding: bool,
    ) -> Result<BodyRead> {
        // Read in process: hashing here or when the index is seeded costs the same.
        let (thread, runs) = (thread.to_string(), runs.to_vec());
        let (bodies, epoch) = self
            .run(move |c| {
                // One read transaction: the runs and the epoch from one snapshot (`BodyRead`).
                let ctx = format!("sqlite: thread {thread}: reading messages");
                let tx = c.transaction().map_err(sql_err(ctx.clone()))?;
                let epoch = read_epoch(&tx, &thread)?;
                let bodies = read_bodies(&tx, &thread, &runs)?;
                tx.commit().map_err(sql_err(ctx))?;
                Ok((bodies, epoch))
            })
            .await?;
        Ok(BodyRead {
            rows: bodies.check(),
            epoch: Some(epoch),
        })
    }

    async fn tuple_rows(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        with_values: bool,
    ) -> Result<Option<TupleRows>> {
        let (thread, ns) = (thread.to_string(), ns.to_string());
        // One trip to the blocking pool for the four reads, instead of four.
        let rows = self.run(move |c| {
            // One read transaction: the row, its values and writes and their bodies come from
            // one snapshot, so a prune or delete committing in between cannot leave the row
            // without the values it lists (a missing value would read as none).
            let ctx = format!("sqlite: thread {thread}: reading checkpoint");
            let tx = c.transaction().map_err(sql_err(ctx.clone()))?;
            // The epoch before the bodies (see `TupleRows::epoch`).
            let epoch = read_epoch(&tx, &thread)?;
            let Some(row) = read_checkpoint(&tx, &thread, &ns, id)? else {
                return Ok(None);
            };
            let blobs = if with_values {
                read_blobs(&tx, &thread, &ns, record_keys(&row))?
            } else {
                Vec::new()
            };
            let writes = read_writes(&tx, &thread, &ns, &[row.id])?;
            let runs = runs_of_rows(&blobs, &writes);
            let bodies = read_bodies(&tx, &thread, &runs)?;
            tx.commit().map_err(sql_err(ctx))?;
            Ok(Some((row, blobs, writes, bodies, epoch)))
        });
        Ok(rows
            .await?
            .map(|(row, blobs, writes, bodies, epoch)| TupleRows {
                row,
                blobs,
                writes,
                bodies: bodies.check(),
                epoch,
            }))
    }

    async fn next_message_seq(&self, thread: &ThreadId) -> Result<u64> {
        let thread = thread.to_string();
        self.run(move |c| {
            let max: i64 = c
                .prepare_cached("SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = ?1")
                .and_then(|mut s| s.query_row([&thread], |r| r.get(0)))
                .map_err(sql_err(format!(
                    "sqlite: thread {thread}: reading message numbers"
                )))?;
            Ok(u64_of(thread.as_str(), max, "message sequence")?.saturating_add(1))
        })
        .await
    }

    async fn all_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>> {
        let thread = thread.to_string();
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: reading messages");
            let rows = c
                .prepare_cached("SELECT seq, body FROM messages WHERE thread_id = ?1 ORDER BY seq")
                .and_then(|mut s| {
                    s.query_map([&thread], |r| {
                        // A body stored as another type than a blob is damaged: it is kept
                        // as no bytes, which fail the body check, so that it is neither
                        // offered for reuse nor fails the whole list (the index load, and
                        // with it every message write to the thread). Reads of it still
                        // fail on its type.
                        let body = match r.get_ref(1)? {
                            rusqlite::types::ValueRef::Blob(b) => b.to_vec(),
                            _ => Vec::new(),
                        };
                        Ok((r.get::<_, i64>(0)?, body))
                    })
                    .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                })
                .map_err(sql_err(ctx))?;
            rows.into_iter()
                .map(|(seq, body)| {
                    Ok(MessageRow {
                        seq: u64_of(thread.as_str(), seq, "message sequence")?,
                        body,
                    })
                })
                .collect()
        })
        .await
    }

    async fn message_seqs(&self, thread: &ThreadId) -> Result<Vec<u64>> {
        let thread = thread.to_string();
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: reading message numbers");
            c.prepare_cached("SELECT seq FROM messages WHERE thread_id = ?1 ORDER BY seq")
                .and_then(|mut s| {
                    s.query_map([&thread], |r| r.get::<_, i64>(0))
                        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                })
                .map_err(sql_err(ctx))?
                .into_iter()
                .map(|seq| u64_of(thread.as_str(), seq, "message sequence"))
                .collect()
        })
        .await
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
        self.run(move |c| {
            let ctx = format!("sqlite: thread {}: writing checkpoint {}", row.thread_id, row.id);
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            check_guard(&tx, &row.thread_id, guard)?;
            if parent_required {
                // The write transaction holds the file's write lock: no delete commits between
                // this check and the put's commit.
                let found = match row.parent {
                    Some(p) => tx
                        .prepare_cached("SELECT 1 FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3")
                        .and_then(|mut s| s.exists(params![row.thread_id.as_str(), row.ns.as_str(), id_bytes(p)]))
                        .map_err(sql_err(ctx.clone()))?,
                    None => false,
                };
                if !found {
                    return Err(crate::engine::missing_parent(&row));
                }
            }
            insert_messages(&tx, &row.thread_id, &messages)?;
            {
                let mut stmt = tx
                    .prepare_cached("INSERT OR IGNORE INTO blobs (thread_id, checkpoint_ns, channel, version, data) VALUES (?1, ?2, ?3, ?4, ?5)")
                    .map_err(sql_err(ctx.clone()))?;
                for b in &blobs {
                    let version = i64_of(b.version.get(), "channel version")?;
                    let inserted = stmt
                        .execute(params![row.thread_id.as_str(), row.ns.as_str(), b.channel.as_str(), version, b.data])
                        .map_err(sql_err(ctx.clone()))?;
                    if inserted == 0 {
                        // The version exists: fine if it is the same value (an idempotent re-put).
                        let same: bool = tx
                            .prepare_cached("SELECT data = ?5 FROM blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4")
                            .and_then(|mut s| s.query_row(params![row.thread_id.as_str(), row.ns.as_str(), b.channel.as_str(), version, b.data], |r| r.get(0)))
                            .map_err(sql_err(ctx.clone()))?;
                        if !same {
                            return Err(crate::engine::version_clash(&row, &b.channel, b.version));
                        }
                    }
                }
                tx.prepare_cached("INSERT OR REPLACE INTO checkpoints (thread_id, checkpoint_ns, checkpoint_id, parent_id, record, metadata) VALUES (?1, ?2, ?3, ?4, ?5, ?6)")
                    .and_then(|mut s| s.execute(params![row.thread_id.as_str(), row.ns.as_str(), id_bytes(row.id), row.parent.map(id_bytes), row.record, row.metadata]))
                    .map_err(sql_err(ctx.clone()))?;
            }
            raise_mark(&tx, row.thread_id.as_str(), row.ns.as_str(), row.id, mark)?;
            if let Some(run) = &run {
                tx.prepare_cached("INSERT OR IGNORE INTO run_threads (run_id, thread_id) VALUES (?1, ?2)")
                    .and_then(|mut s| s.execute([run.as_str(), row.thread_id.as_str()]))
                    .map_err(sql_err(ctx.clone()))?;
            }
            tx.commit().map_err(sql_err(ctx))
        })
        .await
    }

    async fn run_threads(&self, runs: &[crate::ids::RunId]) -> Result<Vec<ThreadId>> {
        let runs: Vec<String> = runs.iter().map(|r| r.as_str().to_owned()).collect();
        self.run(move |c| {
            let ctx = "sqlite: reading the run index";
            let mut stmt = c
                .prepare_cached("SELECT DISTINCT thread_id FROM run_threads WHERE run_id = ?1")
                .map_err(sql_err(ctx))?;
            let mut threads = std::collections::BTreeSet::new();
            for run in &runs {
                let found = stmt
                    .query_map([run], |r| r.get::<_, String>(0))
                    .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                    .map_err(sql_err(ctx))?;
                threads.extend(found.into_iter().map(ThreadId::new));
            }
            Ok(threads.into_iter().collect())
        })
        .await
    }

    async fn version_mark(&self, thread: &ThreadId, ns: &CheckpointNs) -> Result<Option<u64>> {
        let (thread, ns) = (thread.to_string(), ns.to_string());
        self.run(move |c| {
            let mark: Option<Option<i64>> = c
                .prepare_cached(
                    "SELECT version FROM version_marks WHERE thread_id = ?1 AND checkpoint_ns = ?2",
                )
                .and_then(|mut s| s.query_row([&thread, &ns], |r| r.get(0)).optional())
                .map_err(sql_err(format!(
                    "sqlite: thread {thread}: reading its version mark"
                )))?;
            mark.flatten()
                .map(|m| u64_of(thread.as_str(), m, "version mark"))
                .transpose()
        })
        .await
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
        let (thread, ns) = (thread.clone(), ns.clone());
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: writing writes of checkpoint {checkpoint}");
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            let exists: Option<i64> = tx
                .prepare_cached("SELECT 1 FROM checkpoints WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3")
                .and_then(|mut s| s.query_row(params![thread.as_str(), ns.as_str(), id_bytes(checkpoint)], |r| r.get(0)).optional())
                .map_err(sql_err(ctx.clone()))?;
            if exists.is_none() {
                return Ok(false);
            }
            check_guard(&tx, &thread, guard)?;
            insert_messages(&tx, &thread, &messages)?;
            for w in &writes {
                let verb = if w.idx < 0 { "INSERT OR REPLACE" } else { "INSERT OR IGNORE" };
                tx.prepare_cached(&format!(
                    "{verb} INTO writes (thread_id, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)"
                ))
                .and_then(|mut s| {
                    s.execute(params![thread.as_str(), ns.as_str(), id_bytes(checkpoint), w.task_id.as_str(), w.idx, w.channel.as_str(), w.task_path.as_str(), w.value])
                })
                .map_err(sql_err(ctx.clone()))?;
            }
            tx.commit().map_err(sql_err(ctx))?;
            Ok(true)
        })
        .await
    }

    async fn thread_epoch(&self, thread: &ThreadId) -> Result<u64> {
        let thread = thread.to_string();
        self.run(move |c| read_epoch(c, &thread)).await
    }

    async fn delete_thread(&self, thread: &ThreadId) -> Result<()> {
        let thread = thread.to_string();
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: deleting");
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            for table in [
                "checkpoints",
                "blobs",
                "writes",
                "messages",
                "version_marks",
                "run_threads",
            ] {
                tx.execute(
                    &format!("DELETE FROM {table} WHERE thread_id = ?1"),
                    [&thread],
                )
                .map_err(sql_err(ctx.clone()))?;
            }
            bump_epoch(&tx, &thread)?;
            tx.commit().map_err(sql_err(ctx))
        })
        .await
    }

    async fn delete_checkpoints(
        &self,
        thread: &ThreadId,
        doomed: &[(CheckpointNs, CheckpointId)],
        expected: &[crate::engine::Expected],
    ) -> Result<bool> {
        let (thread, doomed, expected) = (thread.to_string(), doomed.to_vec(), expected.to_vec());
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: deleting checkpoints");
            // Under the write lock: no put commits between the check and the deletes.
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            let now = thread_rows(&tx, &thread, &ctx)?;
            if crate::engine::forks_from_doomed(&now, &expected, &doomed) {
                return Ok(false);
            }
            for (ns, id) in doomed {
                for table in ["checkpoints", "writes"] {
                    tx.execute(&format!("DELETE FROM {table} WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND checkpoint_id = ?3"), params![thread, ns.as_str(), id_bytes(id)])
                        .map_err(sql_err(ctx.clone()))?;
                }
            }
            tx.commit().map_err(sql_err(ctx))?;
            Ok(true)
        })
        .await
    }

    async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> Result<()> {
        let (source, target) = (source.to_string(), target.to_string());
        self.run(move |c| {
            let ctx = format!("sqlite: copying thread {source} to {target}");
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            let collides: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM messages s JOIN messages t ON t.thread_id = ?2 AND t.seq = s.seq
                      WHERE s.thread_id = ?1 AND t.body <> s.body)",
                    params![source, target],
                    |r| r.get(0),
                )
                .map_err(sql_err(ctx.clone()))?;
            if collides {
                return Err(crate::engine::body_collision(&ThreadId::new(source.as_str()), &ThreadId::new(target.as_str())));
            }
            let clashes: bool = tx
                .query_row(
                    "SELECT EXISTS (SELECT 1 FROM blobs s JOIN blobs t ON t.thread_id = ?2 AND t.checkpoint_ns = s.checkpoint_ns
                        AND t.channel = s.channel AND t.version = s.version
                      WHERE s.thread_id = ?1 AND t.data <> s.data)",
                    params![source, target],
                    |r| r.get(0),
                )
                .map_err(sql_err(ctx.clone()))?;
            if clashes {
                return Err(crate::engine::blob_collision(&ThreadId::new(source.as_str()), &ThreadId::new(target.as_str())));
            }
            for (what, sql) in [
                (
                    "checkpoints",
                    "SELECT EXISTS (SELECT 1 FROM checkpoints s JOIN checkpoints t ON t.thread_id = ?2
                        AND t.checkpoint_ns = s.checkpoint_ns AND t.checkpoint_id = s.checkpoint_id
                      WHERE s.thread_id = ?1 AND (t.parent_id IS NOT s.parent_id OR t.record <> s.record OR t.metadata <> s.metadata))",
                ),
                (
                    "pending writes",
                    "SELECT EXISTS (SELECT 1 FROM writes s JOIN writes t ON t.thread_id = ?2
                        AND t.checkpoint_ns = s.checkpoint_ns AND t.checkpoint_id = s.checkpoint_id
                        AND t.task_id = s.task_id AND t.idx = s.idx
                      WHERE s.thread_id = ?1 AND (t.channel <> s.channel OR t.task_path <> s.task_path OR t.value <> s.value))",
                ),
            ] {
                let differs: bool = tx
                    .query_row(sql, params![source, target], |r| r.get(0))
                    .map_err(sql_err(ctx.clone()))?;
                if differs {
                    return Err(crate::engine::row_collision(
                        &ThreadId::new(source.as_str()),
                        &ThreadId::new(target.as_str()),
                        what,
                    ));
                }
            }
            bump_epoch(&tx, &target)?;
            for sql in [
                // The target's marks rise to the source's; an unknown mark (NULL) on either side
                // stays unknown, and so does a namespace with checkpoints but no mark on either
                // side (the target's own checkpoints counted before the copy adds any).
                "INSERT INTO version_marks SELECT ?2, v.checkpoint_ns,
                    CASE WHEN EXISTS (SELECT 1 FROM checkpoints c WHERE c.thread_id = ?2 AND c.checkpoint_ns = v.checkpoint_ns)
                          AND NOT EXISTS (SELECT 1 FROM version_marks w WHERE w.thread_id = ?2 AND w.checkpoint_ns = v.checkpoint_ns)
                         THEN NULL ELSE v.version END
                    FROM version_marks v WHERE v.thread_id = ?1
                  ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET version =
                    CASE WHEN version IS NULL OR excluded.version IS NULL THEN NULL ELSE max(version, excluded.version) END",
                "INSERT INTO version_marks SELECT DISTINCT ?2, checkpoint_ns, NULL FROM checkpoints WHERE thread_id = ?1
                    AND checkpoint_ns NOT IN (SELECT checkpoint_ns FROM version_marks WHERE thread_id = ?1)
                  ON CONFLICT (thread_id, checkpoint_ns) DO UPDATE SET version = NULL",
                "INSERT OR REPLACE INTO checkpoints SELECT ?2, checkpoint_ns, checkpoint_id, parent_id, record, metadata FROM checkpoints WHERE thread_id = ?1",
                "INSERT OR REPLACE INTO blobs SELECT ?2, checkpoint_ns, channel, version, data FROM blobs WHERE thread_id = ?1",
                "INSERT OR REPLACE INTO writes SELECT ?2, checkpoint_ns, checkpoint_id, task_id, idx, channel, task_path, value FROM writes WHERE thread_id = ?1",
                "INSERT OR REPLACE INTO messages SELECT ?2, seq, body FROM messages WHERE thread_id = ?1",
                "INSERT OR IGNORE INTO run_threads SELECT run_id, ?2 FROM run_threads WHERE thread_id = ?1",
            ] {
                tx.execute(sql, params![source, target]).map_err(sql_err(ctx.clone()))?;
            }
            tx.commit().map_err(sql_err(ctx))
        })
        .await
    }

    async fn blob_keys(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<(CheckpointNs, ChannelName, ChannelVersion)>> {
        let thread = thread.to_string();
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: listing blobs");
            let rows = c
                .prepare("SELECT checkpoint_ns, channel, version FROM blobs WHERE thread_id = ?1")
                .and_then(|mut s| {
                    s.query_map([&thread], |r| {
                        Ok((
                            r.get::<_, String>(0)?,
                            r.get::<_, String>(1)?,
                            r.get::<_, i64>(2)?,
                        ))
                    })
                    .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                })
                .map_err(sql_err(ctx))?;
            rows.into_iter()
                .map(|(ns, c, v)| {
                    Ok((
                        CheckpointNs::new(ns),
                        ChannelName::new(c),
                        ChannelVersion::new(u64_of(thread.as_str(), v, "channel version")?),
                    ))
                })
                .collect()
        })
        .await
    }

    async fn delete_blobs(
        &self,
        thread: &ThreadId,
        keys: &[(CheckpointNs, ChannelName, ChannelVersion)],
        expected: &[crate::engine::Expected],
    ) -> Result<bool> {
        let (thread, keys, expected) = (thread.to_string(), keys.to_vec(), expected.to_vec());
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: deleting blobs");
            // Under the write lock: no put commits between the check and the deletes.
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            if thread_checkpoints(&tx, &thread, &ctx)? != expected {
                return Ok(false);
            }
            for (ns, ch, v) in keys {
                tx.execute(
                    "DELETE FROM blobs WHERE thread_id = ?1 AND checkpoint_ns = ?2 AND channel = ?3 AND version = ?4",
                    params![thread, ns.as_str(), ch.as_str(), i64_of(v.get(), "channel version")?],
                )
                .map_err(sql_err(ctx.clone()))?;
            }
            tx.commit().map_err(sql_err(ctx))?;
            Ok(true)
        })
        .await
    }

    async fn all_write_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>> {
        let thread = thread.to_string();
        self.run(move |c| {
            c.prepare("SELECT value FROM writes WHERE thread_id = ?1")
                .and_then(|mut s| {
                    s.query_map([&thread], |r| r.get(0))
                        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                })
                .map_err(sql_err(format!("sqlite: thread {thread}: reading writes")))
        })
        .await
    }

    async fn all_blob_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>> {
        let thread = thread.to_string();
        self.run(move |c| {
            c.prepare("SELECT data FROM blobs WHERE thread_id = ?1")
                .and_then(|mut s| {
                    s.query_map([&thread], |r| r.get(0))
                        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                })
                .map_err(sql_err(format!("sqlite: thread {thread}: reading blobs")))
        })
        .await
    }

    async fn delete_messages(&self, thread: &ThreadId, seqs: &[u64]) -> Result<()> {
        let (thread, seqs) = (thread.to_string(), seqs.to_vec());
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: deleting messages");
            let tx = write_tx(c).map_err(sql_err(ctx.clone()))?;
            bump_epoch(&tx, &thread)?;
            // Under the write lock: the references as they are now.
            let payloads: Vec<Vec<u8>> = tx
                .prepare_cached(
                    "SELECT data FROM blobs WHERE thread_id = ?1 UNION ALL SELECT value FROM writes WHERE thread_id = ?1",
                )
                .and_then(|mut s| {
                    s.query_map([&thread], |r| r.get(0))
                        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                })
                .map_err(sql_err(ctx.clone()))?;
            let dead = unreferenced(&seqs, payloads.iter().map(Vec::as_slice));
            if dead.is_empty() {
                // Dropping the transaction rolls the bump back: nothing changed.
                return Ok(());
            }
            for s in dead {
                tx.execute(
                    "DELETE FROM messages WHERE thread_id = ?1 AND seq = ?2",
                    params![thread, i64_of(s, "message sequence")?],
                )
                .map_err(sql_err(ctx.clone()))?;
            }
            tx.commit().map_err(sql_err(ctx))
        })
        .await
    }

    #[cfg(feature = "test-util")]
    async fn tamper(
        &self,
        thread: &ThreadId,
        column: crate::engine::Column,
        bytes: Vec<u8>,
    ) -> Result<()> {
        let (table, col) = column.table_and_column();
        let thread = thread.to_string();
        self.run(move |c| {
            c.execute(
                &format!("UPDATE {table} SET {col} = ?2 WHERE thread_id = ?1"),
                params![thread, bytes],
            )
            .map(drop)
            .map_err(sql_err(format!("sqlite: thread {thread}: tampering")))
        })
        .await
    }

    async fn stats(&self, thread: &ThreadId) -> Result<StorageStats> {
        let thread = thread.to_string();
        self.run(move |c| {
            let ctx = format!("sqlite: thread {thread}: measuring");
            // One read transaction: the four sums describe one state of the thread.
            let tx = c.transaction().map_err(sql_err(ctx.clone()))?;
            let q = |sql: &str| -> Result<(i64, i64, i64)> {
                tx.query_row(sql, [&thread], |r| Ok((r.get::<_, Option<i64>>(0)?.unwrap_or(0), r.get::<_, Option<i64>>(1)?.unwrap_or(0), r.get(2)?)))
                    .map_err(sql_err(ctx.clone()))
            };
            let (cp, md, n1) = q("SELECT SUM(length(record) + COALESCE(length(parent_id), 0)), SUM(length(metadata)), COUNT(*) FROM checkpoints WHERE thread_id = ?1")?;
            let (bl, _, n2) = q("SELECT SUM(length(data)), 0, COUNT(*) FROM blobs WHERE thread_id = ?1")?;
            let (wr, _, n3) = q("SELECT SUM(length(CAST(channel AS BLOB)) + length(CAST(task_path AS BLOB)) + length(value)), 0, COUNT(*) FROM writes WHERE thread_id = ?1")?;
            let (ms, _, n4) = q("SELECT SUM(length(body)), 0, COUNT(*) FROM messages WHERE thread_id = ?1")?;
            let u = |v: i64| u64::try_from(v).unwrap_or(0);
            Ok(StorageStats {
                checkpoint_bytes: u(cp),
                metadata_bytes: u(md),
                blob_bytes: u(bl),
                write_bytes: u(wr),
                message_bytes: u(ms),
                rows: u(n1 + n2 + n3 + n4),
            })
        })
        .await
    }
}

/// The SQLite saver.
///
/// ```
/// # fn block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime").block_on(f)
/// # }
/// # block_on(async {
/// use antler_checkpoint::{CheckpointConfig, Saver, SqliteSaver, StoreConfig};
/// let saver = SqliteSaver::open_in_memory(StoreConfig::full()).await?;
/// assert!(saver.get_tuple(&CheckpointConfig::latest("t1")).await?.is_none());
/// # Ok::<(), antler_checkpoint::Error>(())
/// # }).expect("example");
/// ```
pub struct SqliteSaver {
    engine: Engine<SqliteBackend>,
}

/// Connection options of a file-backed [`SqliteSaver`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct SqliteOptions {
    /// Bytes of the database file SQLite reads through a memory map (`PRAGMA mmap_size`);
    /// 0 reads every page with a system call into SQLite's own page cache.
    ///
    /// Default: [`SqliteOptions::DEFAULT_MMAP_SIZE`]. A freshly opened connection has an empty
    /// page cache, so a cold read of a long conversation otherwise copies every page it
    /// touches into newly allocated cache memory; mapped pages are read in place from the
    /// operating system's cache. Writes still go through SQLite's normal path (and the WAL).
    ///
    /// The trade-off SQLite documents for memory-mapped I/O: an I/O error while reading a
    /// mapped page, or the file truncated underneath by another program, stops the process
    /// with `SIGBUS` instead of returning [`Error::Backend`]. Set 0 for a database on
    /// storage that can fail that way (a network file system, say).
    pub mmap_size: u64,
}

impl SqliteOptions {
    /// The default memory-map window: 256 MiB of address space, not memory.
    pub const DEFAULT_MMAP_SIZE: u64 = 256 << 20;

    /// The options with a memory-map window of `bytes` (0: no memory map).
    #[must_use]
    pub fn with_mmap_size(mut self, bytes: u64) -> Self {
        self.mmap_size = bytes;
        self
    }
}

impl Default for SqliteOptions {
    fn default() -> Self {
        Self {
            mmap_size: Self::DEFAULT_MMAP_SIZE,
        }
    }
}

impl SqliteSaver {
    /// Opens (creating if needed) the database file at `path` in WAL mode with the default
    /// [`SqliteOptions`], applies migrations, and records or checks the store configuration.
    /// The path `:memory:` opens a private in-memory database, as [`Self::open_in_memory`] (the
    /// options of [`Self::open_with`] concern the file and do not apply).
    ///
    /// # Errors
    /// [`Error::StoreConfigMismatch`] when the store was created with another mode or
    /// frequency; [`Error::SchemaTooNew`]; [`Error::InvalidArgument`] for an empty path;
    /// [`Error::Backend`] for IO/SQL failures.
    pub async fn open(path: impl AsRef<Path>, config: StoreConfig) -> Result<Self> {
        Self::open_with(path, config, SqliteOptions::default()).await
    }

    /// [`Self::open`] with explicit connection options.
    ///
    /// # Errors
    /// As [`Self::open`].
    pub async fn open_with(
        path: impl AsRef<Path>,
        config: StoreConfig,
        options: SqliteOptions,
    ) -> Result<Self> {
        let path = path.as_ref().to_path_buf();
        // SQLite opens an empty name as a private temporary database, deleted on close: a
        // store that silently loses everything, most likely from an unset setting.
        if path.as_os_str().is_empty() {
            return Err(Error::InvalidArgument(
                "sqlite: the database path is empty (use open_in_memory for a store that lives in memory)"
                    .into(),
            ));
        }
        // SQLite's own name for a private in-memory database, which has no WAL journal.
        if path.as_os_str() == ":memory:" {
            return Self::open_in_memory(config).await;
        }
        let p = path.clone();
        let conn = tokio::task::spawn_blocking(move || -> Result<Connection> {
            let ctx = format!("sqlite: opening {}", p.display());
            let mut conn = Connection::open(&p).map_err(sql_err(ctx.clone()))?;
            conn.busy_timeout(BUSY_TIMEOUT)
                .map_err(sql_err(ctx.clone()))?;
            // Before anything changes the file (the WAL switch, a migration): a store recorded
            // with another configuration is refused as it is, so that the build that wrote it
            // still opens it afterwards.
            precheck_config(&conn, config)?;
            set_wal(&conn).map_err(sql_err(ctx.clone()))?;
            conn.pragma_update(None, "synchronous", "NORMAL")
                .map_err(sql_err(ctx.clone()))?;
            // SQLite clamps the request to its compile-time maximum; 0 turns mapping off.
            let mmap = i64::try_from(options.mmap_size).unwrap_or(i64::MAX);
            conn.pragma_update(None, "mmap_size", mmap)
                .map_err(sql_err(ctx))?;
            migrate(&mut conn)?;
            Ok(conn)
        })
        .await
        .map_err(|e| Error::backend("sqlite: blocking task", e))??;
        Self::from_connection(conn, Some(path), config).await
    }

    /// Opens a private in-memory database (`:memory:`).
    ///
    /// # Errors
    /// [`Error::Backend`] if SQLite cannot allocate the database.
    pub async fn open_in_memory(config: StoreConfig) -> Result<Self> {
        // On the blocking pool as a file's open is: the migrations run statements.
        let conn = tokio::task::spawn_blocking(|| -> Result<Connection> {
            let mut conn =
                Connection::open_in_memory().map_err(sql_err("sqlite: opening :memory:"))?;
            migrate(&mut conn)?;
            Ok(conn)
        })
        .await
        .map_err(|e| Error::backend("sqlite: blocking task", e))??;
        Self::from_connection(conn, None, config).await
    }

    async fn from_connection(
        conn: Connection,
        path: Option<PathBuf>,
        config: StoreConfig,
    ) -> Result<Self> {
        // The backend prepares about 30 distinct statements, and one turn of a graph run
        // (put, put_writes, reads) uses more than rusqlite's default 16: with the default,
        // least-recently-used eviction re-prepared most of them on every turn.
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
        let backend = SqliteBackend {
            conn: Arc::new(Mutex::new(conn)),
            path,
        };
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

    /// Checkpoints the WAL, runs `VACUUM`, and returns the database file size in bytes
    /// (`None` for `:memory:`).
    ///
    /// # Errors
    /// [`Error::Backend`] on SQL or IO failure.
    pub async fn vacuum(&self) -> Result<Option<u64>> {
        let path = self.engine.backend.path.clone();
        self.engine
            .backend
            .run(move |c| {
                c.execute_batch(
                    "PRAGMA wal_checkpoint(TRUNCATE); VACUUM; PRAGMA wal_checkpoint(TRUNCATE);",
                )
                .map_err(sql_err("sqlite: vacuum"))?;
                path.map(|p| {
                    std::fs::metadata(&p)
                        .map(|m| m.len())
                        .map_err(|e| Error::backend(format!("sqlite: size of {}", p.display()), e))
                })
                .transpose()
            })
            .await
    }
}

impl std::fmt::Debug for SqliteSaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteSaver")
            .field("path", &self.engine.backend.path)
            .field("config", &self.engine.store_config())
            .finish_non_exhaustive()
    }
}

impl_saver!(SqliteSaver);

#[cfg(test)]
mod tests {
    use super::{SqliteOptions, SqliteSaver};
    use crate::mode::StoreConfig;

    /// Migration 3 gives a namespace whose record lists a version the mark column cannot hold
    /// (above `i64::MAX`, as an older build could store) an unknown mark instead of failing,
    /// so the store still opens (before, every open failed on that record).
    #[tokio::test]
    async fn a_version_beyond_the_mark_column_does_not_stop_the_migration() {
        use crate::ids::ChannelVersion;
        use crate::model::{Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let dir = std::env::temp_dir().join(format!("antler-huge-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let stored = {
            let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert("a".into(), ChannelVersion::new(3));
            saver
                .put(
                    &CheckpointConfig::latest("huge"),
                    cp,
                    CheckpointMetadata::default(),
                    &crate::model::ChannelVersions::new(),
                )
                .await
                .unwrap()
        };
        let id = stored.checkpoint_id.unwrap();
        let mut cp = Checkpoint::empty();
        cp.id = id;
        cp.channel_versions
            .insert("a".into(), ChannelVersion::new(u64::MAX));
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute(
            "UPDATE checkpoints SET record = ?1 WHERE thread_id = 'huge'",
            [crate::codec::encode_record(&cp)],
        )
        .unwrap();
        conn.execute_batch(
            "DROP TABLE version_marks; DROP TABLE run_threads; PRAGMA user_version = 2;",
        )
        .unwrap();
        drop(conn);
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await;
        let _ = std::fs::remove_dir_all(&dir);
        let saver = saver.expect("the store opens");
        let max = saver
            .max_channel_version(&"huge".into(), &crate::ids::CheckpointNs::root())
            .await
            .unwrap();
        assert_eq!(max, u64::MAX, "the namespace falls back to its records");
        // The record reads back, with no value under a version no row can have (before
        // 2026-12-02 the read failed with the caller's `InvalidArgument`).
        let read = saver
            .get_tuple(&CheckpointConfig::latest("huge"))
            .await
            .expect("the checkpoint reads")
            .expect("it exists");
        assert_eq!(
            read.checkpoint
                .channel_versions
                .get(&crate::ids::ChannelName::new("a")),
            Some(&ChannelVersion::new(u64::MAX))
        );
        assert!(read.checkpoint.channel_values.is_empty());
        let listed = saver
            .list(&crate::model::ListQuery::thread("huge"))
            .await
            .expect("the thread lists");
        assert_eq!(listed.len(), 1);
    }

    /// Recording the configuration is a compare-and-set: a process whose read found no
    /// configuration does not overwrite one another process recorded meanwhile.
    #[tokio::test]
    async fn the_configuration_is_recorded_only_over_what_was_read() {
        use crate::mode::SnapshotFrequency;
        let saver =
            SqliteSaver::open_in_memory(StoreConfig::delta(SnapshotFrequency::new(10).unwrap()))
                .await
                .unwrap();
        crate::engine::check_config_compare_and_set(&saver.engine.backend).await;
    }

    /// Prune's delete refuses a fork from a doomed checkpoint put since its check, and only
    /// that (the shared scenario, on SQLite's backend).
    #[tokio::test]
    async fn a_delete_checked_against_a_stale_read_deletes_nothing() {
        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        crate::engine::check_delete_against_a_stale_read(&saver.engine).await;
    }

    /// `ancestors` on SQLite (see the shared check).
    #[tokio::test]
    async fn ancestors_return_at_most_max_rows() {
        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        crate::engine::check_ancestors_bound(&saver.engine).await;
    }

    /// `message_seqs` on SQLite (see the shared check).
    #[tokio::test]
    async fn message_numbers_are_listed_without_their_bodies() {
        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        crate::engine::check_message_seqs(&saver.engine).await;
    }

    /// The shared scenario of an interrupted prune, on SQLite's backend.
    #[tokio::test]
    async fn an_interrupted_prune_is_finished_by_the_next() {
        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        crate::engine::check_an_interrupted_prune_is_finished_by_the_next(&saver.engine).await;
    }

    async fn mmap_size(saver: &SqliteSaver) -> i64 {
        saver
            .engine
            .backend
            .run(|c| {
                c.query_row("PRAGMA mmap_size", [], |r| r.get(0))
                    .map_err(super::sql_err("test: PRAGMA mmap_size"))
            })
            .await
            .unwrap()
    }

    /// A file that is not a database is a damaged store (kind `Corrupt`: no retry helps), and
    /// a write that waited out the busy timeout behind another writer is `StoreBusy` (kind
    /// `Conflict`: retry), as PostgreSQL's lock failures are; before 2026-12-02 both were kind
    /// `Backend`. Nothing of the refused write is stored.
    #[tokio::test]
    async fn a_damaged_file_and_a_busy_store_have_their_own_kinds() {
        use crate::model::{Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;
        let dir = std::env::temp_dir().join(format!("antler-kinds-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let garbage = dir.join("garbage.db");
        std::fs::write(&garbage, vec![0x5a_u8; 4096]).unwrap();
        let err = SqliteSaver::open(&garbage, StoreConfig::full())
            .await
            .expect_err("not a database");
        assert_eq!(err.kind(), crate::ErrorKind::Corrupt, "{err}");
        let path = dir.join("store.db");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        let holder = rusqlite::Connection::open(&path).unwrap();
        holder.execute_batch("BEGIN IMMEDIATE").unwrap();
        // A message list, so the write goes through the message index: a busy store is not
        // an index gone stale, and the write is not tried again after a reload (which would
        // wait out the timeout twice).
        let mut cp = Checkpoint::empty();
        let msgs: Vec<serde_json::Value> = (0..3)
            .map(|i| serde_json::json!({"type": "human", "content": format!("m{i}"), "id": format!("m{i}")}))
            .collect();
        cp.channel_versions
            .insert("messages".into(), crate::ids::ChannelVersion::new(1));
        cp.channel_values.insert(
            "messages".into(),
            crate::blob::Blob::messages(crate::blob::MessagesKind::Snapshot, &msgs).unwrap(),
        );
        let versions = cp.channel_versions.clone();
        let hashed = || {
            saver
                .engine
                .hashed
                .load(std::sync::atomic::Ordering::Relaxed)
        };
        let before = hashed();
        let err = saver
            .put(
                &CheckpointConfig::latest("t"),
                cp,
                CheckpointMetadata::default(),
                &versions,
            )
            .await
            .expect_err("the lock outlasts the wait");
        assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
        assert!(err.to_string().contains("retry"), "{err}");
        assert_eq!(hashed() - before, 3, "one attempt");
        holder.execute_batch("ROLLBACK").unwrap();
        assert!(
            saver
                .get_tuple(&CheckpointConfig::latest("t"))
                .await
                .unwrap()
                .is_none()
        );
        drop(saver);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Another program's database (tables of its own, no `antler_meta`, whatever schema
    /// version it set) is refused as bad input before anything changes it: its journal mode,
    /// version and tables stay, and the error asks for a file of antler's own. Before
    /// 2026-12-02 the open switched it to WAL for good, then failed on a table name it shared
    /// (version 0); at an antler version it failed later on a missing table, above antler's
    /// with `SchemaTooNew`, and at a negative one antler added its tables to the file.
    #[tokio::test]
    async fn a_foreign_database_file_is_left_as_it_was() {
        let dir = std::env::temp_dir().join(format!("antler-foreign-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        // Another program's tables, under the schema versions it may set itself: 0, one of
        // antler's, one above antler's, and a negative one. A negative version without
        // tables is refused too.
        // And a positive version without tables: antler's first migration creates
        // `antler_meta` with the version, so such a file was never antler's (before, it was
        // switched to WAL and its migrations skipped).
        for (i, (version, tables)) in [
            (0, true),
            (4, true),
            (99, true),
            (-1, true),
            (-1, false),
            (3, false),
            (99, false),
        ]
        .into_iter()
        .enumerate()
        {
            let path = dir.join(format!("theirs-{i}.sqlite"));
            let conn = rusqlite::Connection::open(&path).unwrap();
            if tables {
                conn.execute_batch(
                    "CREATE TABLE checkpoints (thread_id TEXT, checkpoint BLOB); INSERT INTO checkpoints VALUES ('theirs', x'00');",
                )
                .unwrap();
            }
            conn.pragma_update(None, "user_version", version).unwrap();
            drop(conn);
            let err = SqliteSaver::open(&path, StoreConfig::full())
                .await
                .expect_err("refused");
            assert_eq!(
                err.kind(),
                crate::ErrorKind::InvalidInput,
                "version {version}: {err}"
            );
            assert!(
                err.to_string().contains("a file of its own"),
                "version {version}: {err:?}"
            );
            let conn = rusqlite::Connection::open(&path).unwrap();
            let journal: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            let kept: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap();
            let names: Vec<String> = conn
                .prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
                .unwrap()
                .query_map([], |r| r.get(0))
                .unwrap()
                .collect::<rusqlite::Result<_>>()
                .unwrap();
            let expected: Vec<String> = if tables {
                vec!["checkpoints".into()]
            } else {
                Vec::new()
            };
            assert_eq!(
                (journal.as_str(), kept, names),
                ("delete", version, expected),
                "version {version}"
            );
            drop(conn);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// A store of a newer schema than this build's, which that build left in another journal
    /// mode, is refused (`SchemaTooNew`) before the WAL switch: the file keeps its mode and
    /// version. Before, the open switched it to WAL and only then refused it.
    #[tokio::test]
    async fn a_newer_schema_is_refused_before_the_wal_switch() {
        let dir = std::env::temp_dir().join(format!("antler-newer-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        drop(SqliteSaver::open(&path, StoreConfig::full()).await.unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.pragma_update(None, "user_version", super::SQLITE_SCHEMA_VERSION + 1)
            .unwrap();
        let _: String = conn
            .query_row("PRAGMA journal_mode = DELETE", [], |r| r.get(0))
            .unwrap();
        drop(conn);
        let err = SqliteSaver::open(&path, StoreConfig::full())
            .await
            .expect_err("a newer schema");
        assert!(matches!(err, crate::Error::SchemaTooNew { .. }), "{err}");
        let conn = rusqlite::Connection::open(&path).unwrap();
        let journal: String = conn
            .query_row("PRAGMA journal_mode", [], |r| r.get(0))
            .unwrap();
        let version: i64 = conn
            .query_row("PRAGMA user_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(
            (journal.as_str(), version),
            ("delete", super::SQLITE_SCHEMA_VERSION + 1)
        );
        drop(conn);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// An open with another configuration than the store records fails before it changes the
    /// file: a store of an older schema version (version 2 here) keeps its version and its
    /// journal mode, so the build that wrote it still opens it; the right configuration then
    /// migrates it. Before 2026-12-02 the migrations ran first and the older build was locked
    /// out (`SchemaTooNew`) by an open that failed.
    #[tokio::test]
    async fn an_open_with_another_configuration_changes_nothing() {
        let dir = std::env::temp_dir().join(format!("antler-precheck-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let delta = StoreConfig::delta(crate::mode::SnapshotFrequency::new(10).unwrap());
        drop(SqliteSaver::open(&path, delta).await.unwrap());
        let conn = rusqlite::Connection::open(&path).unwrap();
        conn.execute_batch(
            "DROP TABLE version_marks; DROP TABLE run_threads; PRAGMA user_version = 2; PRAGMA journal_mode = DELETE;",
        )
        .unwrap();
        drop(conn);
        let state = || {
            let conn = rusqlite::Connection::open(&path).unwrap();
            let version: i64 = conn
                .query_row("PRAGMA user_version", [], |r| r.get(0))
                .unwrap();
            let journal: String = conn
                .query_row("PRAGMA journal_mode", [], |r| r.get(0))
                .unwrap();
            (version, journal)
        };
        assert_eq!(state(), (2, "delete".to_owned()));
        let refused = SqliteSaver::open(&path, StoreConfig::full())
            .await
            .expect_err("another configuration");
        assert!(
            matches!(refused, crate::Error::StoreConfigMismatch { .. }),
            "{refused}"
        );
        assert_eq!(state(), (2, "delete".to_owned()), "the file is as it was");
        drop(
            SqliteSaver::open(&path, delta)
                .await
                .expect("its own configuration"),
        );
        assert_eq!(state(), (super::SQLITE_SCHEMA_VERSION, "wal".to_owned()));
        let _ = std::fs::remove_dir_all(&dir);
    }

    #[tokio::test]
    async fn concurrent_opens_of_a_new_file_migrate_once() {
        let dir = std::env::temp_dir().join(format!("antler-open-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        // Spawned, so that the opens run on the blocking pool at the same time.
        let opens: Vec<_> = (0..4)
            .map(|_| tokio::spawn(SqliteSaver::open(path.clone(), StoreConfig::full())))
            .collect();
        for open in opens {
            let saver = open.await.unwrap().unwrap();
            let version: i64 = saver
                .engine
                .backend
                .run(|c| {
                    c.query_row("PRAGMA user_version", [], |r| r.get(0))
                        .map_err(super::sql_err("test: PRAGMA user_version"))
                })
                .await
                .unwrap();
            assert_eq!(version, super::SQLITE_SCHEMA_VERSION);
        }
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// The pages of a thread-and-namespace list and of the store-wide key-order scan are
    /// primary-key ranges, read in index order (no scan of the thread, no sort).
    #[tokio::test]
    async fn list_pages_are_primary_key_ranges() {
        use crate::engine::{RowScan, ScanOrder, scan_sql};
        use crate::ids::{CheckpointId, CheckpointNs, ThreadId};

        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        let (thread, ns, id) = (
            ThreadId::new("t"),
            CheckpointNs::root(),
            CheckpointId::from_u128(7),
        );
        let scans = [
            RowScan {
                thread: Some(&thread),
                ns: Some(&ns),
                after: Some((&id, &thread, &ns)),
                limit: Some(10),
                ..RowScan::default()
            },
            RowScan {
                after: Some((&id, &thread, &ns)),
                limit: Some(10),
                order: ScanOrder::Key,
                ..RowScan::default()
            },
        ];
        for scan in scans {
            let (tail, _) = scan_sql(&scan, |i| format!("?{i}"), str::to_owned);
            let sql = format!(
                "EXPLAIN QUERY PLAN SELECT {} FROM checkpoints{tail}",
                super::ROW_COLS
            );
            let plan: Vec<String> = saver
                .engine
                .backend
                .run(move |c| {
                    let mut st = c.prepare(&sql).map_err(super::sql_err("test: plan"))?;
                    let n = st.parameter_count();
                    let rows = st
                        .query_map(
                            rusqlite::params_from_iter(
                                (0..n).map(|_| rusqlite::types::Value::Null),
                            ),
                            |r| r.get::<_, String>(3),
                        )
                        .and_then(Iterator::collect::<rusqlite::Result<Vec<_>>>)
                        .map_err(super::sql_err("test: plan"))?;
                    Ok(rows)
                })
                .await
                .unwrap();
            let plan = plan.join(" / ");
            assert!(plan.contains("PRIMARY KEY"), "{scan:?}: {plan}");
            assert!(!plan.contains("TEMP B-TREE"), "{scan:?}: {plan}");
        }
    }

    /// Stores `m0..m{n}` as the thread `t`'s message snapshot at `version`.
    async fn put_snapshot(saver: &SqliteSaver, n: usize, version: u64) {
        use crate::blob::{Blob, MessagesKind};
        use crate::model::{Checkpoint, CheckpointConfig, CheckpointMetadata};
        use crate::saver::Saver;

        let list: Vec<serde_json::Value> =
            (0..n).map(|i| serde_json::json!(format!("m{i}"))).collect();
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("messages".into(), version.into());
        cp.channel_values.insert(
            "messages".into(),
            Blob::messages(MessagesKind::Snapshot, &list).unwrap(),
        );
        let nv = cp.channel_versions.clone();
        saver
            .put(
                &CheckpointConfig::latest("t"),
                cp,
                CheckpointMetadata::default(),
                &nv,
            )
            .await
            .unwrap();
    }

    /// Two processes taking turns on one thread: a process whose loaded index predates the
    /// other's writes learns their bodies from its read of the thread, so its next write
    /// neither collides with their numbers (which would make it reload every body) nor stores
    /// them again.
    #[tokio::test]
    async fn a_read_teaches_a_loaded_index_the_other_process_bodies() {
        use std::sync::atomic::Ordering;

        use crate::engine::Backend;
        use crate::ids::ThreadId;
        use crate::model::CheckpointConfig;
        use crate::saver::Saver;

        let dir = std::env::temp_dir().join(format!("antler-turns-{}", uuid::Uuid::new_v4()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let a = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        let b = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        put_snapshot(&a, 3, 1).await; // a loads its index: bodies 1..=3
        put_snapshot(&b, 5, 2).await; // b stores bodies 4 and 5
        a.get_tuple(&CheckpointConfig::latest("t"))
            .await
            .unwrap()
            .unwrap();
        let loads = a.engine.index_loads.load(Ordering::Relaxed);
        put_snapshot(&a, 6, 3).await;
        assert_eq!(
            a.engine.index_loads.load(Ordering::Relaxed),
            loads,
            "a reloaded its index"
        );
        let thread = ThreadId::new("t");
        let seqs: Vec<u64> = a
            .engine
            .backend
            .all_messages(&thread)
            .await
            .unwrap()
            .iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs, [1, 2, 3, 4, 5, 6]);
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// As the engine's test of the same name: SQLite decides again under its write lock.
    #[tokio::test]
    async fn collection_keeps_bodies_referenced_since_it_chose_them() {
        use crate::engine::Backend;
        use crate::ids::ThreadId;

        let saver = SqliteSaver::open_in_memory(StoreConfig::full())
            .await
            .unwrap();
        put_snapshot(&saver, 4, 1).await;
        let backend = &saver.engine.backend;
        let thread = ThreadId::new("t");
        backend
            .delete_messages(&thread, &[1, 2, 3, 4])
            .await
            .unwrap();
        assert_eq!(backend.all_messages(&thread).await.unwrap().len(), 4);
        assert_eq!(backend.thread_epoch(&thread).await.unwrap(), 0);
    }

    #[tokio::test]
    async fn a_file_store_reads_through_a_memory_map_unless_told_not_to() {
        let dir = std::env::temp_dir().join(format!("antler-mmap-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("store.db");
        let saver = SqliteSaver::open(&path, StoreConfig::full()).await.unwrap();
        assert_eq!(
            mmap_size(&saver).await,
            i64::try_from(SqliteOptions::DEFAULT_MMAP_SIZE).unwrap()
        );
        drop(saver);
        let off = SqliteOptions::default().with_mmap_size(0);
        let saver = SqliteSaver::open_with(&path, StoreConfig::full(), off)
            .await
            .unwrap();
        assert_eq!(mmap_size(&saver).await, 0);
        drop(saver);
        let _ = std::fs::remove_dir_all(&dir);
    }
}
