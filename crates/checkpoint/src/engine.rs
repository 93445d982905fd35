//! The saver logic shared by every backend.
//!
//! A backend (memory, SQLite, PostgreSQL) only stores and fetches rows of five
//! tables (see `docs/checkpoint-format.md`); everything with semantics —
//! encoding, write ordering, the message store, the history walk, delta-safe
//! pruning — lives here once, so the three savers cannot drift apart.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use xxhash_rust::xxh3::xxh3_128;

use crate::blob::{Blob, MessagesBlob, MessagesKind};
use crate::codec::{self, CodecError, StoredBlob};
use crate::error::{Error, Result};
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, RunId, TaskId, TaskPath, ThreadId,
};
use crate::mode::{ChannelMode, SnapshotFrequency, StoreConfig};
use crate::model::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple,
    DeltaChannelHistory, ListQuery, PendingWrite, PruneStrategy, TupleWithAncestry,
    control_write_index, inherited_keys, sort_writes,
};

/// One row of the checkpoints table.
#[derive(Clone, Debug)]
pub(crate) struct CheckpointRow {
    pub(crate) thread_id: ThreadId,
    pub(crate) ns: CheckpointNs,
    pub(crate) id: CheckpointId,
    pub(crate) parent: Option<CheckpointId>,
    pub(crate) record: Vec<u8>,
    pub(crate) metadata: Vec<u8>,
}

/// Which checkpoint rows [`Backend::checkpoints`] returns, and in which order.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct RowScan<'a> {
    /// Only this thread.
    pub(crate) thread: Option<&'a ThreadId>,
    /// Only this namespace.
    pub(crate) ns: Option<&'a CheckpointNs>,
    /// Only ids less than this one.
    pub(crate) before: Option<CheckpointId>,
    /// Only rows after this one in the scan's order (the last row of the previous page).
    pub(crate) after: Option<(&'a CheckpointId, &'a ThreadId, &'a CheckpointNs)>,
    /// At most this many rows (all when `None`).
    pub(crate) limit: Option<usize>,
    /// The order of the rows.
    pub(crate) order: ScanOrder,
}

/// The order of a [`RowScan`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) enum ScanOrder {
    /// `list` order: checkpoint id descending, then thread id and namespace descending (byte
    /// order), so that a page resumes exactly even when two threads hold the same checkpoint
    /// id (copies).
    #[default]
    List,
    /// The backend's primary-key order, `(thread, namespace, id)` ascending as the backend
    /// compares them: for scans that visit every row and need no particular order, which the
    /// primary key then serves page by page.
    Key,
}

impl<'a> RowScan<'a> {
    /// Every checkpoint of `thread`, all namespaces.
    pub(crate) fn thread(thread: &'a ThreadId) -> Self {
        Self {
            thread: Some(thread),
            ..Self::default()
        }
    }

    /// Whether the row `(id, thread, ns)` is in the scan, ignoring `limit` (the memory
    /// backend's reading: byte order for text).
    pub(crate) fn admits(&self, id: CheckpointId, thread: &ThreadId, ns: &CheckpointNs) -> bool {
        self.thread.is_none_or(|t| t == thread)
            && self.ns.is_none_or(|n| n == ns)
            && self.before.is_none_or(|b| id < b)
            && self.after.is_none_or(|(a_id, a_thread, a_ns)| {
                let (row, cursor) = (
                    (thread.as_str(), ns.as_str(), id),
                    (a_thread.as_str(), a_ns.as_str(), *a_id),
                );
                match self.order {
                    ScanOrder::List => (id, row.0, row.1) < (*a_id, cursor.0, cursor.1),
                    ScanOrder::Key => row > cursor,
                }
            })
    }
}

/// A value [`scan_sql`] binds to a placeholder.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) enum ScanArg {
    Text(String),
    Bytes(Vec<u8>),
    Int(i64),
}

/// The `WHERE … ORDER BY … LIMIT` of a [`RowScan`] in SQL, for the database backends, and the
/// values of its placeholders in order.
///
/// Only the conditions the scan uses are written, each value bound once (an `x IS NULL OR`
/// form would keep SQLite off the primary-key index, and PostgreSQL refuses a placeholder it
/// cannot type). With a thread and a namespace fixed, list order is the primary key's own
/// (`checkpoint_id DESC`), so a page reads about as many rows as it returns; a thread alone
/// is sorted across its namespaces. `param(i)` spells placeholder `i` (1-based) and
/// `text(col)` a column compared in byte order.
#[cfg(any(feature = "sqlite", feature = "postgres"))]
pub(crate) fn scan_sql(
    scan: &RowScan<'_>,
    param: impl Fn(usize) -> String,
    text: impl Fn(&str) -> String,
) -> (String, Vec<ScanArg>) {
    let mut conds = Vec::new();
    let mut args = Vec::new();
    let mut bind = |arg: ScanArg| {
        args.push(arg);
        param(args.len())
    };
    if let Some(t) = scan.thread {
        conds.push(format!(
            "thread_id = {}",
            bind(ScanArg::Text(t.to_string()))
        ));
    }
    if let Some(n) = scan.ns {
        conds.push(format!(
            "checkpoint_ns = {}",
            bind(ScanArg::Text(n.to_string()))
        ));
    }
    if let Some(b) = scan.before {
        conds.push(format!(
            "checkpoint_id < {}",
            bind(ScanArg::Bytes(b.to_bytes().to_vec()))
        ));
    }
    let fixed = scan.thread.is_some() && scan.ns.is_some();
    if let Some((a_id, a_thread, a_ns)) = scan.after {
        let id = bind(ScanArg::Bytes(a_id.to_bytes().to_vec()));
        conds.push(match scan.order {
            ScanOrder::List if fixed => format!("checkpoint_id < {id}"),
            ScanOrder::List => {
                let t = bind(ScanArg::Text(a_thread.to_string()));
                let n = bind(ScanArg::Text(a_ns.to_string()));
                format!(
                    "(checkpoint_id < {id} OR (checkpoint_id = {id} AND ({tc} < {t} OR (thread_id = {t} AND {nc} < {n}))))",
                    tc = text("thread_id"),
                    nc = text("checkpoint_ns"),
                )
            }
            ScanOrder::Key => {
                let t = bind(ScanArg::Text(a_thread.to_string()));
                let n = bind(ScanArg::Text(a_ns.to_string()));
                format!("(thread_id, checkpoint_ns, checkpoint_id) > ({t}, {n}, {id})")
            }
        });
    }
    let mut sql = String::new();
    if !conds.is_empty() {
        sql.push_str(" WHERE ");
        sql.push_str(&conds.join(" AND "));
    }
    match scan.order {
        ScanOrder::List if fixed => sql.push_str(" ORDER BY checkpoint_id DESC"),
        ScanOrder::List => sql.push_str(&format!(
            " ORDER BY checkpoint_id DESC, {} DESC, {} DESC",
            text("thread_id"),
            text("checkpoint_ns")
        )),
        ScanOrder::Key => sql.push_str(" ORDER BY thread_id, checkpoint_ns, checkpoint_id"),
    }
    if let Some(l) = scan.limit {
        let l = bind(ScanArg::Int(i64::try_from(l).unwrap_or(i64::MAX)));
        sql.push_str(&format!(" LIMIT {l}"));
    }
    (sql, args)
}

/// The sort key of list order (see [`RowScan`]): sort ascending by it.
pub(crate) fn list_order(id: CheckpointId, thread: &ThreadId, ns: &CheckpointNs) -> impl Ord {
    std::cmp::Reverse((id, thread.as_str().to_owned(), ns.as_str().to_owned()))
}

/// One row of the blobs table (thread and namespace implied by the call).
#[derive(Clone, Debug)]
pub(crate) struct BlobRow {
    pub(crate) channel: ChannelName,
    pub(crate) version: ChannelVersion,
    pub(crate) data: Vec<u8>,
}

/// One row of the writes table (thread and namespace implied by the call).
#[derive(Clone, Debug)]
pub(crate) struct WriteRow {
    pub(crate) checkpoint_id: CheckpointId,
    pub(crate) task_id: TaskId,
    pub(crate) idx: i64,
    pub(crate) channel: ChannelName,
    pub(crate) task_path: TaskPath,
    pub(crate) value: Vec<u8>,
}

impl WriteRow {
    /// The pending write this row stores, with its value resolved.
    fn into_pending(self, value: Blob) -> PendingWrite {
        PendingWrite {
            task_id: self.task_id,
            idx: self.idx,
            channel: self.channel,
            value,
            task_path: self.task_path,
        }
    }
}

/// One row of the message-bodies table (thread implied by the call).
#[derive(Clone, Debug)]
pub(crate) struct MessageRow {
    pub(crate) seq: u64,
    pub(crate) body: Vec<u8>,
}

/// One message body as read back: checked and stripped of its frame by the backend while it
/// still borrowed the stored bytes (so a read copies each body once), or why it is not valid.
#[derive(Clone, Debug)]
pub(crate) struct BodyRow {
    pub(crate) seq: u64,
    pub(crate) body: std::result::Result<Arc<[u8]>, CodecError>,
    /// The body's key in the thread's message index (`xxh3_128` of the body), when the backend
    /// took it already; seeding the index hashes the others.
    pub(crate) hash: Option<u128>,
}

impl BodyRow {
    /// Checks the stored bytes of body `seq`.
    pub(crate) fn check(seq: u64, stored: &[u8]) -> Self {
        Self {
            seq,
            body: codec::body_arc(stored),
            hash: None,
        }
    }

    /// [`Self::check`], and hashes the body for the message index: for a backend that checks
    /// each row as it arrives (PostgreSQL), on a read that seeds the index, so that the
    /// hashing overlaps the rest of the transfer instead of following it.
    #[cfg_attr(
        not(feature = "postgres"),
        allow(
            dead_code,
            reason = "only the PostgreSQL backend checks rows as they arrive"
        )
    )]
    pub(crate) fn check_hashed(seq: u64, stored: &[u8]) -> Self {
        let mut row = Self::check(seq, stored);
        row.hash = row.body.as_deref().ok().map(xxh3_128);
        row
    }
}

/// What a write that stores a message list checks in its transaction, so that a stale message
/// index never makes it reference the wrong bytes.
///
/// Body numbers are per thread, and a process's index maps message hashes (and remembered
/// item pointers) to numbers. Each thread has an epoch in the store, bumped in the same
/// transaction as anything that removes bodies or brings other ones under existing numbers:
/// `delete_thread`, `copy_thread` onto the thread, and garbage collection of unreferenced
/// bodies. An index remembers the epoch it was loaded at; as long as the thread's epoch is
/// that one, every body the index names is stored with the bytes it maps. A write carrying
/// another epoch fails with [`Error::Conflict`], and the engine reloads the index and retries
/// once.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct IndexGuard {
    /// The epoch the writer's index was loaded at; `None` when the write stores no message list.
    pub(crate) epoch: Option<u64>,
}

impl IndexGuard {
    /// Checks the guard against the thread's epoch `now`, read in the write's transaction.
    pub(crate) fn check(self, thread: &ThreadId, now: u64) -> Result<()> {
        match self.epoch {
            Some(indexed) if indexed != now => Err(Error::Conflict {
                thread_id: thread.clone(),
                detail: format!(
                    "this process indexed the thread's message bodies at epoch {indexed}, but the thread's bodies were deleted, collected or copied onto since (epoch {now})"
                ),
            }),
            _ => Ok(()),
        }
    }
}

/// What `get_tuple` reads: a checkpoint row, its value blobs, its writes and the message
/// bodies those reference (see [`Backend::tuple_rows`]).
pub(crate) struct TupleRows {
    pub(crate) row: CheckpointRow,
    pub(crate) blobs: Vec<BlobRow>,
    pub(crate) writes: Vec<WriteRow>,
    pub(crate) bodies: Vec<BodyRow>,
    /// The thread's epoch, read before the bodies (what seeding the message index needs).
    pub(crate) epoch: u64,
}

/// Message bodies as [`Backend::messages`] reads them: the rows and the thread's epoch, both
/// from one snapshot.
///
/// Body numbers come back: a thread deleted (or whose highest bodies were collected) numbers
/// its next bodies from where its stored ones end. So bodies read in a later snapshot than
/// the checkpoint rows that reference them may be other messages under the same numbers, each
/// with a valid checksum. Anything that removes bodies bumps the epoch in the same
/// transaction, so a reader that read the epoch with (or before) its rows and finds the same
/// epoch with the bodies read them unchanged; when the epoch moved, a referencing checkpoint
/// that still exists after the body read was never deleted meanwhile, so its bodies could
/// not be removed either ([`Engine::confirm_bodies`]).
pub(crate) struct BodyRead {
    pub(crate) rows: Vec<BodyRow>,
    /// `None` when the backend could not tell, which readers treat as a moved epoch.
    pub(crate) epoch: Option<u64>,
}

/// What [`Backend::head_chain`] reads: a checkpoint row, its writes, the thread's epoch (read
/// before any body) and up to `limit` of its ancestors' rows, nearest first.
pub(crate) struct HeadChain {
    pub(crate) row: CheckpointRow,
    pub(crate) writes: Vec<WriteRow>,
    pub(crate) epoch: u64,
    pub(crate) ancestors: Vec<CheckpointRow>,
}

/// The `(channel, version)` keys of a checkpoint row's record; none if the record does not
/// decode (the engine reports that when it decodes the row itself).
pub(crate) fn record_keys(row: &CheckpointRow) -> Vec<(ChannelName, ChannelVersion)> {
    codec::decode_record(&row.record, row.id)
        .map(|cp| cp.channel_versions.into_iter().collect())
        .unwrap_or_default()
}

/// The merged runs of message bodies the given stored values reference; values that do not
/// decode reference nothing (the engine reports them when it decodes them itself).
pub(crate) fn referenced_runs<'a>(values: impl IntoIterator<Item = &'a [u8]>) -> Vec<(u64, u64)> {
    let mut runs = Vec::new();
    for bytes in values {
        runs.extend(codec::blob_runs(bytes).unwrap_or_default());
    }
    merge_runs(&runs)
}

/// Those of `seqs` that none of `payloads` (a thread's value blobs and write values)
/// references: what body collection may delete, decided again inside its transaction.
pub(crate) fn unreferenced<'a>(
    seqs: &[u64],
    payloads: impl IntoIterator<Item = &'a [u8]>,
) -> Vec<u64> {
    let mut runs = Vec::new();
    for bytes in payloads {
        match codec::gc_runs(bytes) {
            Ok(r) => runs.extend(r),
            // A payload this build cannot read (damaged, or a newer format) may reference
            // any body: collect none rather than delete one it needs.
            Err(_) => return Vec::new(),
        }
    }
    let runs = merge_runs(&runs);
    seqs.iter()
        .copied()
        .filter(|&s| {
            // Runs are merged and sorted: the one that could hold `s` starts at or before it.
            let i = runs.partition_point(|&(start, _)| start <= s);
            i == 0 || {
                let (start, len) = runs[i - 1];
                s >= start.saturating_add(len)
            }
        })
        .collect()
}

/// Version marks for records stored before a store kept marks (the migration that adds
/// them), folded one record at a time: the greatest channel version of each thread's
/// namespace. A namespace with a record that cannot be decoded gets an unknown mark (`None`,
/// stored as NULL), so `max_channel_version` reads its records and reports the damage instead
/// of trusting a figure that may be too low.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers migrate")
)]
#[derive(Default)]
pub(crate) struct MarkFold {
    marks: BTreeMap<(String, String), Option<u64>>,
}

#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers migrate")
)]
impl MarkFold {
    /// Folds in one stored record (its checkpoint id as stored bytes).
    pub(crate) fn add(&mut self, thread: String, ns: String, id: &[u8], record: &[u8]) {
        let max = <[u8; 16]>::try_from(id)
            .ok()
            .and_then(|id| codec::decode_record(record, CheckpointId::from_bytes(id)).ok())
            .map(|c| {
                c.channel_versions
                    .values()
                    .map(|v| v.get())
                    .max()
                    .unwrap_or(0)
            });
        let e = self.marks.entry((thread, ns)).or_insert(Some(0));
        *e = match (*e, max) {
            (Some(a), Some(b)) => Some(a.max(b)),
            _ => None,
        };
    }

    /// Folds in the greatest version stored as a value in a namespace (a value is stored under
    /// the version `put` was given for it, which its record may not list).
    /// A negative (damaged) version makes the namespace's mark unknown, as an undecodable
    /// record does, so the damage neither stops the migration nor leaves a mark too low.
    pub(crate) fn stored(&mut self, thread: String, ns: String, version: i64) {
        let e = self.marks.entry((thread, ns)).or_insert(Some(0));
        *e = match (*e, u64::try_from(version)) {
            (Some(m), Ok(v)) => Some(m.max(v)),
            _ => None,
        };
    }

    /// Every namespace seen, with its mark (`None`: unknown).
    pub(crate) fn finish(self) -> Vec<(String, String, Option<u64>)> {
        self.marks
            .into_iter()
            .map(|((t, n), m)| (t, n, m))
            .collect()
    }
}

/// Whether a checkpoint of `now` (a thread's `(namespace, id, parent)` rows) that is not in
/// `expected` has its parent in `doomed` (both sorted): a fork put from a checkpoint a delete
/// is about to remove, after the delete checked the thread. Other checkpoints put meanwhile
/// (the next turn of a live thread, a child of a kept checkpoint) need nothing doomed: a
/// checkpoint needs only its own ancestors, and the first one of those it does not share
/// with `expected` is its direct parent, kept or not.
pub(crate) fn forks_from_doomed(
    now: &[CheckpointRow],
    expected: &[Expected],
    doomed: &[(CheckpointNs, CheckpointId)],
) -> bool {
    now.iter().any(|r| {
        if let Ok(i) = expected.binary_search_by(|e| (&e.0, &e.1).cmp(&(&r.ns, &r.id))) {
            // A checkpoint the caller checked, unless it was put again since with another
            // row (its parent, needs or listed values may differ from what was checked).
            return expected[i].2 != row_digest(r);
        }
        if r.parent
            .is_some_and(|p| doomed.binary_search(&(r.ns.clone(), p)).is_ok())
        {
            return true;
        }
        // A subgraph checkpoint needs the enclosing graphs' checkpoints its metadata names
        // (`parents`: its task's pending writes and the step it continues are stored there),
        // as the keep rules say. One whose metadata does not decode cannot be cleared: the
        // delete waits for a later read, which reports it.
        match codec::decode_metadata(&r.metadata) {
            Ok(m) => m
                .parents
                .iter()
                .any(|(ns, id)| doomed.binary_search(&(ns.clone(), *id)).is_ok()),
            Err(_) => true,
        }
    })
}

/// A checkpoint as a delete checked it: namespace, id and [`row_digest`] of its row. The
/// deletes compare rows, not only ids: a checkpoint put again under its id with another
/// record may list other values or name another parent than the one checked.
pub(crate) type Expected = (CheckpointNs, CheckpointId, u64);

/// A digest of a checkpoint row's parent, record and metadata.
pub(crate) fn row_digest(row: &CheckpointRow) -> u64 {
    let mut h = xxhash_rust::xxh3::Xxh3::new();
    match row.parent {
        Some(p) => {
            h.update(&[1]);
            h.update(&p.to_bytes());
        }
        None => h.update(&[0]),
    }
    h.update(&(row.record.len() as u64).to_le_bytes());
    h.update(&row.record);
    h.update(&row.metadata);
    h.digest()
}

/// The [`Expected`] entries of `rows`, sorted.
pub(crate) fn expected_of<'a>(rows: impl Iterator<Item = &'a CheckpointRow>) -> Vec<Expected> {
    let mut out: Vec<Expected> = rows.map(|r| (r.ns.clone(), r.id, row_digest(r))).collect();
    out.sort();
    out
}

/// A fork put from a doomed checkpoint after the prune read makes the delete a conflict
/// that deletes nothing (before, the doomed parent went and the fork's reads lost their
/// parent); a checkpoint put meanwhile from a kept one (the next turn of a live thread)
/// does not stop it.
/// Puts, under `parent`, a checkpoint whose channel `a` holds `v` at version `v` (the step of
/// the shared scenarios below).
#[cfg(test)]
async fn put_a<B: Backend>(e: &Engine<B>, parent: CheckpointConfig, v: u64) -> CheckpointConfig {
    let mut cp = Checkpoint::empty();
    cp.channel_versions
        .insert("a".into(), ChannelVersion::new(v));
    cp.channel_values
        .insert("a".into(), Blob::json(&v).expect("a value"));
    let nv = cp.channel_versions.clone();
    e.put(&parent, cp, CheckpointMetadata::default(), &nv)
        .await
        .expect("each step of the scenario succeeds")
}

/// `Backend::ancestors` returns at most `max` rows, none for `max = 0`, from `start` along
/// parent pointers (before 2026-12-02 the database backends returned the start row for 0).
#[cfg(test)]
pub(crate) async fn check_ancestors_bound<B: Backend>(e: &Engine<B>) {
    let mut at = CheckpointConfig::latest("t");
    let mut ids = Vec::new();
    for v in 1..=4 {
        at = put_a(e, at, v).await;
        ids.push(at.checkpoint_id.expect("a put names its checkpoint"));
    }
    let (thread, ns) = (ThreadId::new("t"), CheckpointNs::root());
    let head = ids[3];
    for max in 0..=5 {
        let rows = e
            .backend
            .ancestors(&thread, &ns, head, max)
            .await
            .expect("ancestors");
        let got: Vec<CheckpointId> = rows.iter().map(|r| r.id).collect();
        let want: Vec<CheckpointId> = ids.iter().rev().take(max).copied().collect();
        assert_eq!(got, want, "max {max}");
    }
}

/// `Backend::message_seqs` lists the numbers `all_messages` lists, in order, for the thread
/// asked only (garbage collection reads the numbers alone, not the bodies).
#[cfg(test)]
pub(crate) async fn check_message_seqs<B: Backend>(e: &Engine<B>) {
    for (thread, n) in [("t", 5_u64), ("u", 3)] {
        let mut cp = Checkpoint::empty();
        let msgs: Vec<serde_json::Value> = (0..n)
            .map(|i| serde_json::json!({"type": "human", "content": format!("{thread}{i}"), "id": format!("{thread}{i}")}))
            .collect();
        cp.channel_versions
            .insert("messages".into(), ChannelVersion::new(1));
        cp.channel_values.insert(
            "messages".into(),
            Blob::messages(crate::blob::MessagesKind::Snapshot, &msgs).expect("a list"),
        );
        let nv = cp.channel_versions.clone();
        e.put(
            &CheckpointConfig::latest(thread),
            cp,
            CheckpointMetadata::default(),
            &nv,
        )
        .await
        .expect("stored");
    }
    for (thread, n) in [("t", 5_usize), ("u", 3)] {
        let t = ThreadId::new(thread);
        let seqs = e.backend.message_seqs(&t).await.expect("numbers");
        let all: Vec<u64> = e
            .backend
            .all_messages(&t)
            .await
            .expect("bodies")
            .into_iter()
            .map(|m| m.seq)
            .collect();
        assert_eq!(seqs.len(), n, "{thread}");
        assert_eq!(seqs, all, "{thread}");
    }
    assert!(
        e.backend
            .message_seqs(&ThreadId::new("none"))
            .await
            .expect("numbers")
            .is_empty()
    );
}

#[cfg(test)]
pub(crate) async fn check_delete_against_a_stale_read<B: Backend>(e: &Engine<B>) {
    let t = ThreadId::new("t");
    let put = |parent: CheckpointConfig, v: u64| put_a(e, parent, v);
    let c1 = put(CheckpointConfig::latest("t"), 1).await;
    let c2 = put(c1.clone(), 2).await;
    let read_at_start = e
        .decoded_thread(&t)
        .await
        .expect("each step of the scenario succeeds");
    let doomed: HashSet<_> = [(
        CheckpointNs::default(),
        c1.checkpoint_id
            .expect("each step of the scenario succeeds"),
    )]
    .into();
    let next = put(c2.clone(), 3).await;
    let fork = put(c1.clone(), 4).await;
    let err = e
        .delete_unchanged(&t, read_at_start, &doomed)
        .await
        .expect_err("the delete is refused");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    for c in [&c1, &c2, &next, &fork] {
        assert!(
            e.get_tuple(c)
                .await
                .expect("each step of the scenario succeeds")
                .is_some()
        );
    }
    // A subgraph checkpoint put since the read whose metadata names a doomed checkpoint as
    // its enclosing graph's (`parents`, no parent pointer: the subgraph run's first
    // checkpoint) needs it as a fork does: refused too. Before 2026-12-02 the check followed
    // parent pointers only, and the enclosing checkpoint went with the pending writes the
    // subgraph task's result would be stored beside.
    let sub = ThreadId::new("s");
    let s1 = put(CheckpointConfig::latest("s"), 1).await;
    let s2 = put(s1.clone(), 2).await;
    let read_at_start = e
        .decoded_thread(&sub)
        .await
        .expect("each step of the scenario succeeds");
    let s1_id = s1
        .checkpoint_id
        .expect("each step of the scenario succeeds");
    let nested = e
        .put(
            &CheckpointConfig::latest("s").with_ns("sub:x"),
            Checkpoint::empty(),
            CheckpointMetadata {
                parents: [(CheckpointNs::default(), s1_id)].into_iter().collect(),
                ..CheckpointMetadata::default()
            },
            &ChannelVersions::new(),
        )
        .await
        .expect("each step of the scenario succeeds");
    let doomed: HashSet<_> = [(CheckpointNs::default(), s1_id)].into();
    let err = e
        .delete_unchanged(&sub, read_at_start, &doomed)
        .await
        .expect_err("the delete is refused");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    for c in [&s1, &s2, &nested] {
        assert!(
            e.get_tuple(c)
                .await
                .expect("each step of the scenario succeeds")
                .is_some()
        );
    }
    // A kept checkpoint put again under its id with another record since the read (the
    // contract allows it): the delete is refused too, and a collection chosen from the old
    // record does not delete the value only the new record lists. Before 2026-12-02 both
    // compared ids only, and the value went.
    let r = ThreadId::new("r");
    let r1 = put(CheckpointConfig::latest("r"), 1).await;
    let r2 = put(r1.clone(), 2).await;
    let read_at_start = e
        .decoded_thread(&r)
        .await
        .expect("each step of the scenario succeeds");
    // The same read, for the collection below (a delete consumes its read).
    let stale = e
        .decoded_thread(&r)
        .await
        .expect("each step of the scenario succeeds");
    let mut again = Checkpoint::empty();
    again.id = r2
        .checkpoint_id
        .expect("each step of the scenario succeeds");
    again
        .channel_versions
        .insert("a".into(), ChannelVersion::new(2));
    again
        .channel_versions
        .insert("b".into(), ChannelVersion::new(3));
    again.channel_values.insert(
        "b".into(),
        Blob::json(&"only the new record").expect("a value"),
    );
    let nv: ChannelVersions = [(ChannelName::new("b"), ChannelVersion::new(3))].into();
    e.put(&r1, again, CheckpointMetadata::default(), &nv)
        .await
        .expect("each step of the scenario succeeds");
    let doomed: HashSet<_> = [(
        CheckpointNs::default(),
        r1.checkpoint_id
            .expect("each step of the scenario succeeds"),
    )]
    .into();
    let err = e
        .delete_unchanged(&r, read_at_start, &doomed)
        .await
        .expect_err("the delete is refused");
    assert!(matches!(err, Error::Conflict { .. }), "{err}");
    e.collect_garbage(&r, &stale, &HashSet::new())
        .await
        .expect("each step of the scenario succeeds");
    let got = e
        .get_tuple(&r2)
        .await
        .expect("each step of the scenario succeeds")
        .expect("stored");
    assert_eq!(
        got.checkpoint.channel_values.get(&ChannelName::new("b")),
        Some(&Blob::json(&"only the new record").expect("a value"))
    );
    // On another thread, without a fork: a child of a kept checkpoint put since the read
    // does not stop the delete.
    let f = ThreadId::new("f");
    let c1 = put(CheckpointConfig::latest("f"), 1).await;
    let c2 = put(c1.clone(), 2).await;
    let read_at_start = e
        .decoded_thread(&f)
        .await
        .expect("each step of the scenario succeeds");
    let next = put(c2.clone(), 3).await;
    let doomed: HashSet<_> = [(
        CheckpointNs::default(),
        c1.checkpoint_id
            .expect("each step of the scenario succeeds"),
    )]
    .into();
    e.delete_unchanged(&f, read_at_start, &doomed)
        .await
        .expect("each step of the scenario succeeds");
    assert!(
        e.get_tuple(&c1)
            .await
            .expect("each step of the scenario succeeds")
            .is_none()
    );
    assert!(
        e.get_tuple(&next)
            .await
            .expect("each step of the scenario succeeds")
            .is_some()
    );
}

/// A prune that stopped after deleting its checkpoints (a crash before the collection) is
/// finished by the next prune, even one with nothing left to delete: the values only the
/// deleted checkpoint listed go. Before 2026-12-02 they stayed for good on such a thread.
#[cfg(test)]
pub(crate) async fn check_an_interrupted_prune_is_finished_by_the_next<B: Backend>(e: &Engine<B>) {
    let t = ThreadId::new("t");
    let put = |parent: CheckpointConfig, v: u64| put_a(e, parent, v);
    let c1 = put(CheckpointConfig::latest("t"), 1).await;
    put(c1.clone(), 2).await;
    let all = e.decoded_thread(&t).await.expect("read");
    let expected = expected_of(all.iter().map(|d| &d.row));
    let first = (CheckpointNs::default(), c1.checkpoint_id.expect("id"));
    // The first of the prune's three transactions only.
    assert!(
        e.backend
            .delete_checkpoints(&t, &[first], &expected)
            .await
            .expect("delete")
    );
    assert_eq!(e.backend.blob_keys(&t).await.expect("keys").len(), 2);
    e.prune(std::slice::from_ref(&t), PruneStrategy::KeepLatest)
        .await
        .expect("prune");
    let keys = e.backend.blob_keys(&t).await.expect("keys");
    assert_eq!(
        keys,
        vec![(
            CheckpointNs::default(),
            ChannelName::new("a"),
            ChannelVersion::new(2)
        )]
    );
    // And nothing more on the next one.
    e.prune(std::slice::from_ref(&t), PruneStrategy::KeepLatest)
        .await
        .expect("prune");
    assert_eq!(e.backend.blob_keys(&t).await.expect("keys"), keys);
}

/// The error for a store that holds checkpoints but records its configuration in part or not
/// at all, or records one that does not parse (`mode`, `frequency`: the recorded values
/// found; both present means unreadable).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers record a configuration")
)]
pub(crate) fn config_damaged(mode: Option<&str>, frequency: Option<&str>) -> Error {
    let detail = match (mode, frequency) {
        (None, None) => "missing although the store holds checkpoints".to_owned(),
        (Some(m), None) => format!(
            "incomplete (channel mode {m:?}, no snapshot frequency) although the store holds checkpoints"
        ),
        (None, Some(f)) => format!(
            "incomplete (snapshot frequency {f:?}, no channel mode) although the store holds checkpoints"
        ),
        (Some(m), Some(f)) => format!("unreadable (channel mode {m:?}, snapshot frequency {f:?})"),
    };
    Error::StoreConfigDamaged { detail }
}

/// The recorded configuration (`channel_mode`, `snapshot_frequency` values), parsed; values
/// no build writes (an unknown mode, a frequency that is not a positive `u32`) are a damaged
/// record ([`Error::StoreConfigDamaged`], kind `Config`), not the caller's bad argument.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers record a configuration")
)]
pub(crate) fn parse_config(
    mode: &str,
    frequency: &str,
) -> Result<(ChannelMode, SnapshotFrequency)> {
    let parsed = ChannelMode::parse(mode).zip(
        frequency
            .parse::<u32>()
            .ok()
            .and_then(|f| SnapshotFrequency::new(f).ok()),
    );
    parsed.ok_or_else(|| config_damaged(Some(mode), Some(frequency)))
}

/// Whether the raw recorded configuration (`channel_mode`, `snapshot_frequency` values) is
/// `expected` (`None`: not recorded, as `read_config` reads a store missing either key).
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers record a configuration")
)]
pub(crate) fn config_is(
    current: &(Option<String>, Option<String>),
    expected: Option<(ChannelMode, SnapshotFrequency)>,
) -> bool {
    match expected {
        None => current.0.is_none() || current.1.is_none(),
        Some((mode, frequency)) => {
            current.0.as_deref() == Some(mode.as_str())
                && current.1.as_deref() == Some(frequency.to_string().as_str())
        }
    }
}

/// The compare-and-set of [`Backend::write_config`], on a backend opened with delta mode and
/// frequency 10: a write that expects no configuration leaves the recorded one, a write that
/// expects the recorded one replaces it.
#[cfg(all(test, any(feature = "sqlite", feature = "postgres")))]
pub(crate) async fn check_config_compare_and_set<B: Backend>(b: &B) {
    let freq = |n| SnapshotFrequency::new(n).expect("a valid frequency");
    b.write_config(ChannelMode::Full, freq(50), None)
        .await
        .expect("write the configuration");
    assert_eq!(
        b.read_config().await.expect("read the configuration"),
        Some((ChannelMode::Delta, freq(10)))
    );
    b.write_config(
        ChannelMode::Full,
        freq(50),
        Some((ChannelMode::Delta, freq(10))),
    )
    .await
    .expect("write the configuration");
    assert_eq!(
        b.read_config().await.expect("read the configuration"),
        Some((ChannelMode::Full, freq(50)))
    );
}

/// The merged runs of message bodies that value blobs and write rows reference.
pub(crate) fn runs_of_rows(blobs: &[BlobRow], writes: &[WriteRow]) -> Vec<(u64, u64)> {
    referenced_runs(
        blobs
            .iter()
            .map(|b| b.data.as_slice())
            .chain(writes.iter().map(|w| w.value.as_slice())),
    )
}

/// What a raw scan of a thread's stored message bodies read (see `SqliteSaver::body_scan` and
/// `PostgresSaver::body_scan`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct BodyScan {
    /// Bodies read.
    pub rows: u64,
    /// Their stored bytes.
    pub bytes: u64,
}

/// Payload bytes stored for one thread, by table; keys and row overhead excluded.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StorageStats {
    /// Checkpoint records and parent pointers.
    pub checkpoint_bytes: u64,
    /// Checkpoint metadata.
    pub metadata_bytes: u64,
    /// Channel value blobs (message lists count only their references here).
    pub blob_bytes: u64,
    /// Pending writes: channel, task path and value.
    pub write_bytes: u64,
    /// Message bodies, each stored once per thread.
    pub message_bytes: u64,
    /// Rows: checkpoints, blobs, writes, messages.
    pub rows: u64,
}

impl StorageStats {
    /// The sum of every payload column.
    pub fn total(&self) -> u64 {
        self.checkpoint_bytes
            + self.metadata_bytes
            + self.blob_bytes
            + self.write_bytes
            + self.message_bytes
    }
}

/// The row store a saver runs on. Every method is one transaction.
#[async_trait]
pub(crate) trait Backend: Send + Sync + 'static {
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database savers open a recorded store")
    )]
    async fn read_config(&self) -> Result<Option<(ChannelMode, SnapshotFrequency)>>;
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database savers open a recorded store")
    )]
    /// Records `mode` and `frequency` only if the store still records `expected` (`None`: no
    /// configuration), in one transaction: two processes opening one new store with different
    /// configurations cannot both record theirs, nor leave one key of each.
    async fn write_config(
        &self,
        mode: ChannelMode,
        frequency: SnapshotFrequency,
        expected: Option<(ChannelMode, SnapshotFrequency)>,
    ) -> Result<()>;
    /// The addressed checkpoint, or the greatest id of the namespace when `id` is `None`.
    async fn checkpoint(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
    ) -> Result<Option<CheckpointRow>>;
    /// The checkpoint rows of `scan`, in its order ([`ScanOrder`]).
    async fn checkpoints(&self, scan: RowScan<'_>) -> Result<Vec<CheckpointRow>>;
    /// Up to `max` rows following parent pointers from `start` (inclusive); stops early at a missing row.
    async fn ancestors(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        start: CheckpointId,
        max: usize,
    ) -> Result<Vec<CheckpointRow>>;
    async fn blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Vec<BlobRow>>;
    /// The row of checkpoint `id` and the blobs of `keys`, read in one snapshot (so a delete
    /// cannot fall between them); `None` when the checkpoint does not exist.
    async fn checkpoint_blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: CheckpointId,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<(CheckpointRow, Vec<BlobRow>)>>;
    async fn writes(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<Vec<WriteRow>>;
    /// Those of `ids` whose checkpoint rows exist now.
    async fn existing(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<HashSet<CheckpointId>>;
    /// Message bodies in the given `(first_seq, len)` runs (sorted, not overlapping), checked,
    /// in sequence order; absent ones are simply missing. The thread's epoch comes from the
    /// same snapshot as the bodies ([`BodyRead`]). With `seeding` the read will seed the
    /// message index: a backend may hash the bodies as they arrive
    /// ([`BodyRow::check_hashed`]).
    async fn messages(
        &self,
        thread: &ThreadId,
        runs: &[(u64, u64)],
        seeding: bool,
    ) -> Result<BodyRead>;
    /// Every stored message row of a thread, as stored, in sequence order (for the message
    /// index, which keeps the first number of a repeated body, and garbage collection).
    async fn all_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>>;
    /// The sequence numbers of a thread's stored message bodies, in order, without the bodies
    /// (garbage collection needs only the numbers). The default reads the bodies too.
    async fn message_seqs(&self, thread: &ThreadId) -> Result<Vec<u64>> {
        Ok(self
            .all_messages(thread)
            .await?
            .into_iter()
            .map(|m| m.seq)
            .collect())
    }
    /// The rows `get_tuple` needs: the addressed (or latest) checkpoint row, its value blobs
    /// (only `with_values`), its writes, the message bodies those blobs and writes reference,
    /// and the thread's epoch read before the bodies; `None` when there is no such checkpoint.
    /// Each backend reads them so that a checkpoint deleted meanwhile is never returned
    /// without the values and bodies it lists (one transaction, one lock, or a re-check, see
    /// `BodyRead`); an addressed checkpoint deleted meanwhile is `None`, the latest is read again.
    async fn tuple_rows(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        with_values: bool,
    ) -> Result<Option<TupleRows>>;
    /// The addressed (or latest) checkpoint row with its writes, the thread's epoch, and up to
    /// `limit` rows following parent pointers from its parent (stopping early at a missing
    /// row), for [`Engine::get_tuple_with_ancestry`]. A backend may override this to read them
    /// in one round trip; the default makes four calls.
    async fn head_chain(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        limit: usize,
    ) -> Result<Option<HeadChain>> {
        let epoch = self.thread_epoch(thread).await?;
        let Some(row) = self.checkpoint(thread, ns, id).await? else {
            return Ok(None);
        };
        let writes = self.writes(thread, ns, &[row.id]).await?;
        let ancestors = match row.parent {
            Some(parent) if limit > 0 => self.ancestors(thread, ns, parent, limit).await?,
            _ => Vec::new(),
        };
        Ok(Some(HeadChain {
            row,
            writes,
            epoch,
            ancestors,
        }))
    }
    /// Upserts the checkpoint row; inserts blobs if absent (an existing blob with other bytes is
    /// [`version_clash`]); inserts message rows (conflict = error); raises the namespace's
    /// version mark to `mark` (the greatest version the record lists or stores a value under),
    /// all in one transaction.
    /// A namespace without a mark gets `mark` only if it holds no other checkpoint, an unknown
    /// mark otherwise; an unknown mark stays unknown.
    /// Fails with [`Error::Conflict`] if `guard` does not hold (see [`IndexGuard`]).
    /// A backend that indexes runs ([`Self::run_threads`]) records `(run, thread)` in the same
    /// transaction when `run` is given.
    /// With `parent_required` (a relative record, which a reader completes from its parent),
    /// it stores nothing and fails with [`missing_parent`] unless the row's parent exists in
    /// its namespace when the transaction commits: a parent deleted by a transaction that
    /// committed first (a `delete_for_runs` or `prune` racing the put) is missing.
    #[allow(
        clippy::too_many_arguments,
        reason = "one transaction's inputs, forwarded as they are"
    )]
    async fn put_checkpoint(
        &self,
        row: CheckpointRow,
        run: Option<RunId>,
        mark: u64,
        blobs: Vec<BlobRow>,
        messages: Vec<MessageRow>,
        guard: IndexGuard,
        parent_required: bool,
    ) -> Result<()>;
    /// The threads that hold (or held) checkpoints of `runs`, from the backend's run index
    /// (every backend keeps one, so damage in another thread's records never fails a
    /// `delete_for_runs`). A superset is fine: a pair stays until its thread is deleted
    /// (dropping it when the run's checkpoints go could race a put of the same run); a
    /// missing thread is not.
    async fn run_threads(&self, runs: &[RunId]) -> Result<Vec<ThreadId>>;
    /// The version mark of a thread's namespace: the greatest channel version any record put
    /// there had since the thread was last deleted, or `None` when it is not known: no mark
    /// (nothing put since), or an unknown one (a record the migration that added marks could
    /// not decode, copied or not; a first mark raised while other records were already there).
    async fn version_mark(&self, thread: &ThreadId, ns: &CheckpointNs) -> Result<Option<u64>>;
    /// Stores writes (idx < 0 upsert, else insert-if-absent) if the checkpoint exists; `Ok(false)` otherwise.
    /// Fails with [`Error::Conflict`] if `guard` does not hold.
    async fn put_writes(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        checkpoint: CheckpointId,
        writes: Vec<WriteRow>,
        messages: Vec<MessageRow>,
        guard: IndexGuard,
    ) -> Result<bool>;
    /// The thread's message-store epoch (0 for a thread never deleted or copied onto).
    async fn thread_epoch(&self, thread: &ThreadId) -> Result<u64>;
    /// One more than the greatest stored message sequence number of the thread (1 for none).
    async fn next_message_seq(&self, thread: &ThreadId) -> Result<u64>;
    /// Deletes every row of the thread and bumps its message-store epoch, in one transaction.
    async fn delete_thread(&self, thread: &ThreadId) -> Result<()>;
    /// Deletes the checkpoints `doomed` (sorted) of a thread, in any namespace, and their
    /// writes, in one transaction, unless a checkpoint of the thread outside `expected` (the
    /// set the caller checked, sorted) is a child of a doomed one: the caller checked that no
    /// checkpoint of `expected` needs a doomed one, and such a fork, put since, may
    /// ([`forks_from_doomed`]). `Ok(false)`: nothing deleted. SQLite and the memory saver
    /// check under their write lock; PostgreSQL checks a read taken after locking the doomed
    /// rows, so a fork stored as a full record committed between that read and the delete's
    /// commit is not seen (a relative record's put locks its parent row and waits).
    async fn delete_checkpoints(
        &self,
        thread: &ThreadId,
        doomed: &[(CheckpointNs, CheckpointId)],
        expected: &[Expected],
    ) -> Result<bool>;
    /// Copies every row of `source` onto `target` and bumps the target's message-store epoch,
    /// in one transaction. A target body stored under a number the source also uses, with
    /// other bytes, is [`body_collision`] (nothing is copied): overwriting it would change
    /// what the target's own lists say. So are other values under the source's blob keys
    /// ([`blob_collision`]) and other checkpoint rows or pending writes under its keys
    /// ([`row_collision`]).
    async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> Result<()>;
    /// Every blob key of a thread, with its namespace.
    async fn blob_keys(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<(CheckpointNs, ChannelName, ChannelVersion)>>;
    /// Deletes the blobs `keys` of a thread, in one transaction, only if the thread's
    /// checkpoints are still exactly `expected` (sorted): a checkpoint put since they were read
    /// may reference a key chosen from a scan that did not see it. `Ok(false)`: nothing deleted.
    async fn delete_blobs(
        &self,
        thread: &ThreadId,
        keys: &[(CheckpointNs, ChannelName, ChannelVersion)],
        expected: &[Expected],
    ) -> Result<bool>;
    /// Every write value of a thread (for message garbage collection).
    async fn all_write_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>>;
    async fn all_blob_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>>;
    /// Bumps the thread's epoch ([`IndexGuard`]) and then deletes those of the bodies `seqs`
    /// that no blob or write of the thread references ([`unreferenced`]), decided after the
    /// bump, in one transaction: a write that committed since the caller chose `seqs` and
    /// took one of them by hash keeps it, and a later one waits for the bump and fails.
    /// When none is left to delete, nothing changes (the epoch included).
    async fn delete_messages(&self, thread: &ThreadId, seqs: &[u64]) -> Result<()>;
    async fn stats(&self, thread: &ThreadId) -> Result<StorageStats>;
    /// Overwrites one payload column of every row of a thread (the conformance suite's damage).
    #[cfg(feature = "test-util")]
    async fn tamper(&self, thread: &ThreadId, column: Column, bytes: Vec<u8>) -> Result<()>;
    /// Removes everything the backend stored (the conformance suite's clean-up after a case);
    /// the default does nothing.
    #[cfg(feature = "test-util")]
    async fn discard(&self) -> Result<()> {
        Ok(())
    }
}

/// A payload column the conformance suite may overwrite.
#[cfg(feature = "test-util")]
#[derive(Clone, Copy, Debug)]
pub(crate) enum Column {
    /// `blobs.data`
    BlobData,
    /// `writes.value`
    WriteValue,
    /// `messages.body`
    MessageBody,
    /// `checkpoints.metadata`
    Metadata,
}

#[cfg(feature = "test-util")]
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers name tables")
)]
impl Column {
    /// The table and the column in the database schemas.
    pub(crate) fn table_and_column(self) -> (&'static str, &'static str) {
        match self {
            Self::BlobData => ("blobs", "data"),
            Self::WriteValue => ("writes", "value"),
            Self::MessageBody => ("messages", "body"),
            Self::Metadata => ("checkpoints", "metadata"),
        }
    }
}

struct MsgIndex {
    /// The thread's epoch when the index was loaded (see [`IndexGuard`]).
    epoch: u64,
    /// The next free sequence number; `None` until the first write of an index seeded by a
    /// read (which reads it then).
    next_seq: Option<u64>,
    /// Hash → a sequence number storing those bytes: every stored body numbered below
    /// `known_below`, and the bodies reads fetched (a stored body it lacks is stored again
    /// under a new number: a duplicate, never a wrong reference).
    by_hash: HashMap<u128, u64>,
    /// Every body numbered below this is in `by_hash`: the next number when the index was
    /// loaded from every body, moved along by this process's own writes while nobody else's
    /// numbers came between; 0 for an index seeded by reads.
    known_below: u64,
    /// The last snapshot list this process stored for the thread; see [`Remembered`].
    last_snapshot: Option<Remembered>,
}

/// A snapshot list stored earlier, item by item with the sequence number each item was
/// stored under, so that the next snapshot can take those numbers without hashing.
///
/// The runtime's delta channel caches its serialised messages as `Arc<[u8]>` and puts the
/// same `Arc`s in every snapshot (it only appends new ones), so an item of a new list that
/// is [`Arc::ptr_eq`] to the remembered item at the same position is the same bytes. That
/// holds because we keep a clone of every remembered `Arc`: its allocation cannot be freed
/// and reused for other bytes while we hold it, and a shared `Arc<[u8]>` cannot be mutated.
/// Nothing is trusted beyond that: a different `Arc` is hashed as before, and a write naming
/// remembered numbers carries the index's epoch ([`IndexGuard`]), so it fails if the bodies
/// were deleted or collected since.
///
/// It lives in the thread's [`MsgIndex`], so whatever drops or reloads the hash index
/// (a failed commit, `delete_thread`, `copy_thread`, pruning, `delete_for_runs`) drops it too.
struct Remembered {
    items: Vec<Arc<[u8]>>,
    seqs: Vec<u64>,
    /// The bytes this list keeps alive, as charged to `budget`.
    charged: usize,
    budget: Arc<PinBudget>,
}

impl Drop for Remembered {
    fn drop(&mut self) {
        self.budget.release(self.charged);
    }
}

/// A bound on the bytes the remembered lists of all threads keep alive: the runtime usually
/// holds the same `Arc`s, but once it drops a thread only the remembered list pins them.
struct PinBudget {
    used: std::sync::atomic::AtomicUsize,
    limit: usize,
}

impl PinBudget {
    fn new(limit: usize) -> Self {
        Self {
            used: std::sync::atomic::AtomicUsize::new(0),
            limit,
        }
    }

    /// Charges `bytes` if that stays within the limit.
    fn try_charge(&self, bytes: usize) -> bool {
        use std::sync::atomic::Ordering;
        self.used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                used.checked_add(bytes).filter(|&total| total <= self.limit)
            })
            .is_ok()
    }

    fn release(&self, bytes: usize) {
        use std::sync::atomic::Ordering;
        // Saturating: a release never exceeds what was charged, but never wrap if it did.
        let _ = self
            .used
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| {
                Some(used.saturating_sub(bytes))
            });
    }
}

/// How many bytes the remembered snapshot lists of one saver may keep alive in total
/// (about 30 threads of 4,000 messages of 530 bytes); beyond it, snapshots are hashed.
const MAX_REMEMBERED_BYTES: usize = 64 << 20;

/// What encoding message lists produced, to be committed and then folded into the index.
#[derive(Default)]
struct Encoding {
    /// Bodies first stored by this call, by hash.
    fresh: HashMap<u128, u64>,
    new_rows: Vec<MessageRow>,
    /// The next sequence number to give a new body.
    next_seq: u64,
    /// The last snapshot list encoded, to remember after the commit.
    last_snapshot: Option<SnapshotUpdate>,
    /// Items that went through the hash path (tests check the pointer path skips it).
    #[cfg(test)]
    hashed: usize,
    /// The deepest JSON nesting among the new bodies (see [`codec::MAX_JSON_DEPTH`]).
    deepest: usize,
}

/// Refuses a payload nested deeper than a store reads back ([`codec::MAX_JSON_DEPTH`]):
/// stored, it would fail every read of its checkpoint.
fn check_depth(thread: &ThreadId, what: &str, depth: usize) -> Result<()> {
    if depth > codec::MAX_JSON_DEPTH {
        return Err(Error::InvalidArgument(format!(
            "thread {thread}: {what} nests JSON {depth} levels deep; a store keeps at most {} (a much deeper value would not read back)",
            codec::MAX_JSON_DEPTH
        )));
    }
    Ok(())
}

/// How the thread's remembered snapshot changes once a commit succeeds.
enum SnapshotUpdate {
    /// The new list starts with the whole remembered list (by pointer): append its tail.
    Extend(Vec<Arc<[u8]>>, Vec<u64>),
    /// Anything else: remember the new list instead.
    Replace(Vec<Arc<[u8]>>, Vec<u64>),
}

/// What a remembered list of these items keeps alive: the bodies plus the two vectors.
fn pinned_bytes(items: &[Arc<[u8]>]) -> usize {
    items
        .iter()
        .map(|i| i.len() + std::mem::size_of::<Arc<[u8]>>() + std::mem::size_of::<u64>())
        .sum()
}

type IndexSlot = Arc<tokio::sync::Mutex<Option<MsgIndex>>>;

/// How many threads' message indexes a saver keeps before dropping the idle ones
/// (each costs about 24 bytes per stored message; a dropped index reloads on the next write).
const MAX_CACHED_INDEXES: usize = 256;

/// The most rows one `ancestors` call of [`Engine::get_ancestors_without_values`] asks for:
/// a parent cycle (which the backends follow until their row limit) costs at most this many
/// rows before the engine sees the repeat and fails.
const ANCESTOR_PAGE: usize = 512;

/// The most checkpoint rows one page of [`Engine::list`] asks for (pages start at the
/// query's limit and grow fourfold while a metadata filter rejects rows), and the page of the
/// store-wide scan of `delete_for_runs`.
const LIST_PAGE: usize = 1024;

/// The shared saver logic over a backend.
pub(crate) struct Engine<B> {
    pub(crate) backend: B,
    config: StoreConfig,
    indexes: Mutex<HashMap<ThreadId, IndexSlot>>,
    pins: Arc<PinBudget>,
    /// Items hashed by `encode_value` so far (the pointer path's tests read it).
    #[cfg(test)]
    pub(crate) hashed: std::sync::atomic::AtomicUsize,
    /// Message indexes loaded from every body so far (the seeding tests read it).
    #[cfg(test)]
    pub(crate) index_loads: std::sync::atomic::AtomicUsize,
}

fn codec_error(
    thread: &ThreadId,
    cp: CheckpointId,
    what: impl Into<String>,
    e: CodecError,
) -> Error {
    match e {
        CodecError::UnknownVersion(version) => Error::UnknownFormat {
            thread_id: thread.clone(),
            checkpoint_id: cp,
            what: what.into(),
            version,
        },
        other => Error::Corrupt {
            thread_id: thread.clone(),
            checkpoint_id: cp,
            what: what.into(),
            detail: other.to_string(),
        },
    }
}

/// A decoded checkpoint row.
struct Decoded {
    row: CheckpointRow,
    checkpoint: Checkpoint,
    metadata: CheckpointMetadata,
}

/// A stored value waiting for its message bodies.
enum Pending {
    Ready(Blob),
    Refs(MessagesKind, Vec<(u64, u64)>),
}

impl<B: Backend> Engine<B> {
    /// Opens the engine, recording or checking the store configuration.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database savers open a recorded store")
    )]
    pub(crate) async fn open(backend: B, config: StoreConfig) -> Result<Self> {
        let stored = backend.read_config().await?;
        if config.check_against(stored)? {
            let ours = (config.mode, config.snapshot_frequency);
            backend.write_config(ours.0, ours.1, stored).await?;
            // Another process may have recorded its configuration since the read: the write
            // replaced only what was read, and what the store records now decides.
            let now = backend.read_config().await?;
            if now != Some(ours) {
                let (stored_mode, stored_frequency) = now.unwrap_or(ours);
                return Err(Error::StoreConfigMismatch {
                    stored_mode,
                    stored_frequency,
                    requested_mode: ours.0,
                    requested_frequency: ours.1,
                });
            }
        }
        Ok(Self {
            backend,
            config,
            indexes: Mutex::new(HashMap::new()),
            pins: Arc::new(PinBudget::new(MAX_REMEMBERED_BYTES)),
            #[cfg(test)]
            hashed: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            index_loads: std::sync::atomic::AtomicUsize::new(0),
        })
    }

    /// An engine over a backend whose configuration needs no check (a fresh memory store).
    pub(crate) fn new_unchecked(backend: B, config: StoreConfig) -> Self {
        Self {
            backend,
            config,
            indexes: Mutex::new(HashMap::new()),
            pins: Arc::new(PinBudget::new(MAX_REMEMBERED_BYTES)),
            #[cfg(test)]
            hashed: std::sync::atomic::AtomicUsize::new(0),
            #[cfg(test)]
            index_loads: std::sync::atomic::AtomicUsize::new(0),
        }
    }

    pub(crate) fn store_config(&self) -> StoreConfig {
        self.config
    }

    fn slot(&self, thread: &ThreadId) -> IndexSlot {
        let mut map = match self.indexes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        if map.len() >= MAX_CACHED_INDEXES && !map.contains_key(thread) {
            // Drop indexes nobody is using; they reload from the store on demand.
            map.retain(|_, slot| Arc::strong_count(slot) > 1);
        }
        map.entry(thread.clone()).or_default().clone()
    }

    /// Drops the thread's index slot whoever holds it, as a fresh process starts without one.
    #[cfg(test)]
    fn drop_index(&self, thread: &ThreadId) {
        let mut map = match self.indexes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        map.remove(thread);
    }

    /// Drops the thread's index slot, `slot` (the caller's, already emptied), unless another
    /// call still holds it: a call that cloned the slot before and a later one that made a
    /// new slot would then number message bodies from two indexes of one thread, and their
    /// numbers would collide.
    fn forget_index(&self, thread: &ThreadId, slot: &IndexSlot) {
        let mut map = match self.indexes.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        };
        // Held by the map and the caller only.
        if map
            .get(thread)
            .is_some_and(|s| Arc::ptr_eq(s, slot) && Arc::strong_count(s) == 2)
        {
            map.remove(thread);
        }
    }

    /// The mode gate (kernel-spec R34): a full-mode store never returns or builds on a delta checkpoint.
    fn gate(
        &self,
        thread: &ThreadId,
        id: CheckpointId,
        metadata: &CheckpointMetadata,
    ) -> Result<()> {
        if self.config.mode == ChannelMode::Full && crate::mode::metadata_uses_delta(metadata) {
            return Err(Error::CheckpointModeMismatch {
                thread_id: thread.clone(),
                checkpoint_id: Some(id),
            });
        }
        Ok(())
    }

    /// In full mode, checks the addressed checkpoint before anything is written (R35 b); a
    /// write that addresses none (a root checkpoint, or writes without an id) checks the
    /// namespace's latest instead: a root put on a delta thread would become its head and
    /// shadow the delta history from full-mode reads.
    /// With `head_too` (a put) the latest is checked as well, one read when it is the
    /// addressed checkpoint: a put on an older full checkpoint of a delta thread (a fork, or
    /// a put again of a delta checkpoint's id under its full parent) would likewise become
    /// the head, or replace a delta record with a full one (before 2026-12-02 only the parent
    /// was checked).
    async fn gate_before_write(&self, config: &CheckpointConfig, head_too: bool) -> Result<()> {
        if self.config.mode != ChannelMode::Full {
            return Ok(());
        }
        let (thread, ns) = (&config.thread_id, &config.checkpoint_ns);
        let latest = if head_too || config.checkpoint_id.is_none() {
            self.backend.checkpoint(thread, ns, None).await?
        } else {
            None
        };
        let addressed = match (config.checkpoint_id, &latest) {
            (None, _) => None,
            (Some(id), Some(row)) if row.id == id => None,
            (Some(id), _) => self.backend.checkpoint(thread, ns, Some(id)).await?,
        };
        for row in latest.iter().chain(addressed.iter()) {
            let metadata = codec::decode_metadata(&row.metadata)
                .map_err(|e| codec_error(&row.thread_id, row.id, "checkpoint metadata", e))?;
            self.gate(thread, row.id, &metadata)?;
        }
        Ok(())
    }

    fn decode_row(&self, row: CheckpointRow) -> Result<Decoded> {
        let checkpoint = codec::decode_record(&row.record, row.id)
            .map_err(|e| codec_error(&row.thread_id, row.id, "checkpoint record", e))?;
        let metadata = codec::decode_metadata(&row.metadata)
            .map_err(|e| codec_error(&row.thread_id, row.id, "checkpoint metadata", e))?;
        Ok(Decoded {
            row,
            checkpoint,
            metadata,
        })
    }

    async fn load_index(&self, thread: &ThreadId) -> Result<MsgIndex> {
        // The epoch first: a delete or copy after this read bumps it, and the next write fails
        // its guard instead of trusting bodies read before the change.
        #[cfg(test)]
        self.index_loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let epoch = self.backend.thread_epoch(thread).await?;
        let rows = self.backend.all_messages(thread).await?;
        let mut by_hash = HashMap::with_capacity(rows.len());
        let mut next_seq = 1;
        for row in rows {
            // Its number is taken whatever the body holds; a body that fails its check is not
            // offered for reuse (a write of the same message stores a fresh copy). Failing the
            // load instead would refuse every message write to the thread over a body only
            // old checkpoints reference, whose reads fail on it anyway.
            next_seq = next_seq.max(row.seq + 1);
            if let Ok(body) = codec::decode_body(&row.body) {
                by_hash.entry(xxh3_128(body)).or_insert(row.seq);
            }
        }
        Ok(MsgIndex {
            epoch,
            next_seq: Some(next_seq),
            by_hash,
            known_below: next_seq,
            last_snapshot: None,
        })
    }

    /// The first half of seeding a thread's message index from a read (`get_tuple` gets the
    /// epoch from the backend's `tuple_rows` instead): unless the thread's index is being
    /// loaded or written, the thread's epoch, read before the read fetches any body (a
    /// delete, copy or collection after this bumps the epoch, and the seeded index's next
    /// write fails its guard and reloads, as a loaded index's would).
    ///
    /// Without it, a process's first write on a thread loads and hashes every body of the
    /// thread, right after the reads that rebuilt the thread's state fetched the ones that
    /// matter: the state's messages, which the next snapshot stores again. A loaded index
    /// learns from reads the bodies another process stored since, so that its next write
    /// neither stores them again nor collides with their numbers.
    async fn seed_epoch(&self, thread: &ThreadId) -> Result<Option<(IndexSlot, u64)>> {
        let Some(slot) = self.seed_slot(thread) else {
            return Ok(None);
        };
        let epoch = self.backend.thread_epoch(thread).await?;
        Ok(Some((slot, epoch)))
    }

    /// The thread's index slot, unless somebody is loading or writing it.
    fn seed_slot(&self, thread: &ThreadId) -> Option<IndexSlot> {
        let slot = self.slot(thread);
        let free = slot.try_lock().is_ok();
        free.then_some(slot)
    }

    /// The second half: indexes the (checked) bodies the read fetched. Reads at the same
    /// epoch add up (a head read, then the history walk that finds the messages' snapshot,
    /// and later reads that bring bodies another process stored); a seed from a newer epoch
    /// replaces the stale one, an older one is dropped.
    fn seed_index(seed: Option<(IndexSlot, u64)>, bodies: &Bodies) {
        let Some((slot, epoch)) = seed else {
            return;
        };
        if bodies.items.is_empty() {
            return;
        }
        let Ok(mut guard) = slot.try_lock() else {
            return;
        };
        let index = match &mut *guard {
            Some(i) if i.epoch == epoch => i,
            // A read that began before the thread's last bump: its numbers are stale.
            Some(i) if i.epoch > epoch => return,
            other => other.insert(MsgIndex {
                epoch,
                next_seq: None,
                by_hash: HashMap::with_capacity(bodies.items.len()),
                known_below: 0,
                last_snapshot: None,
            }),
        };
        // Bodies from `known_below` on may be new to the index (stored by another process
        // since): the next write must neither store them again nor collide with their numbers
        // (a collision is a conflict and a reload of every body).
        for ((seq, hash), item) in bodies.seqs.iter().zip(&bodies.hashes).zip(&bodies.items) {
            if *seq >= index.known_below {
                let hash = hash.unwrap_or_else(|| xxh3_128(item));
                index.by_hash.entry(hash).or_insert(*seq);
            }
        }
        if let (Some(next), Some(&last)) = (index.next_seq.as_mut(), bodies.seqs.last()) {
            *next = (*next).max(last.saturating_add(1));
        }
    }

    /// Encodes a value; message lists are split into bodies (new ones appended to
    /// `enc.new_rows`) and references.
    ///
    /// An item that is the same `Arc` as the remembered snapshot's item at its position takes
    /// that item's sequence number without hashing (see [`Remembered`]); every other item is
    /// hashed and looked up in the index.
    fn encode_value(blob: &Blob, index: Option<&MsgIndex>, enc: &mut Encoding) -> Vec<u8> {
        match blob {
            Blob::Messages(MessagesBlob { kind, items }) => {
                let remembered = index.and_then(|i| i.last_snapshot.as_ref());
                let mut seqs = Vec::with_capacity(items.len());
                // How many leading items were taken by pointer.
                let mut prefix = 0;
                for (pos, item) in items.iter().enumerate() {
                    if let Some(r) = remembered
                        && let (Some(old), Some(&s)) = (r.items.get(pos), r.seqs.get(pos))
                        && Arc::ptr_eq(old, item)
                    {
                        if prefix == pos {
                            prefix += 1;
                        }
                        seqs.push(s);
                        continue;
                    }
                    #[cfg(test)]
                    {
                        enc.hashed += 1;
                    }
                    let h = xxh3_128(item);
                    let seq = match (index.and_then(|i| i.by_hash.get(&h)), enc.fresh.get(&h)) {
                        (Some(&s), _) | (None, Some(&s)) => s,
                        (None, None) => {
                            let s = enc.next_seq;
                            enc.next_seq += 1;
                            enc.fresh.insert(h, s);
                            enc.deepest = enc.deepest.max(codec::json_depth(item));
                            enc.new_rows.push(MessageRow {
                                seq: s,
                                body: codec::encode_body(item),
                            });
                            s
                        }
                    };
                    seqs.push(seq);
                }
                let bytes = codec::encode_refs(*kind, &seqs);
                if *kind == MessagesKind::Snapshot {
                    // The usual snapshot appends to the previous one: keep the remembered
                    // list and add the tail, instead of cloning and dropping every `Arc`.
                    enc.last_snapshot = Some(match remembered {
                        Some(r) if prefix == r.items.len() => {
                            SnapshotUpdate::Extend(items[prefix..].to_vec(), seqs.split_off(prefix))
                        }
                        _ => SnapshotUpdate::Replace(items.clone(), seqs),
                    });
                }
                bytes
            }
            other => codec::encode_inline_blob(other).unwrap_or_default(),
        }
    }

    /// Updates the thread's remembered snapshot within the pin budget; over budget, the thread
    /// remembers nothing (a missing remembered list only costs hashing).
    fn remember(&self, index: &mut MsgIndex, update: SnapshotUpdate) {
        match update {
            SnapshotUpdate::Extend(items, seqs) => {
                let Some(r) = index.last_snapshot.as_mut() else {
                    return;
                };
                let extra = pinned_bytes(&items);
                if self.pins.try_charge(extra) {
                    r.items.extend(items);
                    r.seqs.extend(seqs);
                    r.charged += extra;
                } else {
                    index.last_snapshot = None;
                }
            }
            SnapshotUpdate::Replace(items, seqs) => {
                // Release the old list before charging the new one.
                index.last_snapshot = None;
                let charged = pinned_bytes(&items);
                if self.pins.try_charge(charged) {
                    index.last_snapshot = Some(Remembered {
                        items,
                        seqs,
                        charged,
                        budget: self.pins.clone(),
                    });
                }
            }
        }
    }

    /// Encodes values under the thread's message index, commits with `commit`, then updates the index.
    ///
    /// `commit` gets the encoded values, the new message rows, and the [`IndexGuard`] of the
    /// index that numbered them: the backend checks the thread's epoch against it in the
    /// commit's transaction, so bodies another process deleted, collected or copied onto since
    /// the index was loaded are a conflict, never a dangling or wrong reference. On a conflict
    /// the index is reloaded from the store and the commit is tried once more.
    async fn with_messages<T, F, Fut>(
        &self,
        thread: &ThreadId,
        values: &[&Blob],
        commit: F,
    ) -> Result<T>
    where
        F: Fn(Vec<Vec<u8>>, Vec<MessageRow>, IndexGuard) -> Fut,
        Fut: std::future::Future<Output = Result<T>>,
    {
        for b in values {
            if let Blob::Json(json) = b {
                check_depth(thread, "a value", codec::json_depth(json))?;
            }
        }
        let has_messages = values.iter().any(|b| matches!(b, Blob::Messages(_)));
        if !has_messages {
            let encoded = values
                .iter()
                .map(|b| codec::encode_inline_blob(b).unwrap_or_default())
                .collect();
            return commit(encoded, Vec::new(), IndexGuard::default()).await;
        }
        let slot = self.slot(thread);
        let mut guard = slot.lock().await;
        let mut attempt = 0;
        loop {
            attempt += 1;
            if guard.is_none() {
                *guard = Some(self.load_index(thread).await?);
            }
            if let Some(index) = guard.as_mut()
                && index.next_seq.is_none()
            {
                // Seeded by a read. A number taken by another writer since is a unique
                // violation, i.e. a conflict, after which the index is loaded in full.
                index.next_seq = Some(self.backend.next_message_seq(thread).await?);
            }
            let mut enc = Encoding {
                next_seq: guard.as_ref().and_then(|i| i.next_seq).unwrap_or(1),
                ..Encoding::default()
            };
            let encoded: Vec<Vec<u8>> = values
                .iter()
                .map(|b| Self::encode_value(b, guard.as_ref(), &mut enc))
                .collect();
            #[cfg(test)]
            self.hashed
                .fetch_add(enc.hashed, std::sync::atomic::Ordering::Relaxed);
            // Only bodies new to the store are scanned: the others were when first stored.
            check_depth(thread, "a message", enc.deepest)?;
            let Encoding {
                fresh,
                new_rows,
                last_snapshot,
                next_seq,
                ..
            } = enc;
            let guard_of_write = IndexGuard {
                epoch: guard.as_ref().map(|i| i.epoch),
            };
            match commit(encoded, new_rows, guard_of_write).await {
                Ok(v) => {
                    if let Some(index) = guard.as_mut() {
                        index.by_hash.extend(fresh);
                        // The write numbered its new bodies from the index's next number:
                        // if everything below that was known, so is everything below now.
                        if index.next_seq == Some(index.known_below) {
                            index.known_below = next_seq;
                        }
                        index.next_seq = Some(next_seq);
                        if let Some(update) = last_snapshot {
                            self.remember(index, update);
                        }
                    }
                    return Ok(v);
                }
                Err(e) => {
                    // A write refused for a missing checkpoint or parent stored nothing and
                    // changed nothing the index knows: keep it (the index takes a write's
                    // numbers only after it commits). A busy store is not a stale index either:
                    // trying again would wait out the busy timeout once more, after reading
                    // every body of the thread; the caller retries (kind `Conflict`).
                    if matches!(
                        e,
                        Error::UnknownCheckpoint { .. }
                            | Error::MissingParent { .. }
                            | Error::StoreBusy { .. }
                    ) {
                        return Err(e);
                    }
                    // Another writer may have taken sequence numbers or deleted bodies: reload
                    // (which also forgets the remembered snapshot).
                    *guard = None;
                    if attempt >= 2 || e.kind() != crate::error::ErrorKind::Conflict {
                        return Err(e);
                    }
                }
            }
        }
    }

    pub(crate) async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: &ChannelVersions,
    ) -> Result<CheckpointConfig> {
        let thread = &config.thread_id;
        let id = checkpoint.id;
        // Versions are keys of the databases' signed 64-bit columns: every saver refuses a
        // greater one alike, before anything is written.
        if let Some((channel, version)) = checkpoint
            .channel_versions
            .iter()
            .chain(new_versions.iter())
            .find(|(_, v)| i64::try_from(v.get()).is_err())
        {
            return Err(Error::InvalidArgument(format!(
                "thread {thread}: checkpoint {id}: channel {channel} has version {version}, above the largest a store keeps ({})",
                i64::MAX
            )));
        }
        self.gate(thread, id, &metadata)?;
        // A reader completes a relative record from its parent chain, so one whose parent is
        // gone could never be read: the backend checks the parent in the put's transaction.
        let relative = checkpoint.v == crate::model::RELATIVE_RECORD_V;
        if relative && config.checkpoint_id.is_none() {
            return Err(Error::InvalidArgument(format!(
                "thread {thread}: checkpoint {id} is a relative record (v = {}) without a parent; a reader completes such a record from its parent's",
                crate::model::RELATIVE_RECORD_V
            )));
        }
        for (key, value) in &metadata.extra {
            let depth = codec::json_depth(&serde_json::to_vec(value).unwrap_or_default());
            check_depth(thread, &format!("metadata key {key:?}"), depth)?;
        }
        self.gate_before_write(config, true).await?;
        let mut stored: Vec<(ChannelName, ChannelVersion, &Blob)> = Vec::new();
        for (channel, version) in new_versions {
            if let Some(value) = checkpoint.channel_values.get(channel) {
                stored.push((channel.clone(), *version, value));
            }
        }
        // Values are stored under `new_versions`, so those count too, listed or not.
        let mark = checkpoint
            .channel_versions
            .values()
            .chain(new_versions.values())
            .map(|v| v.get())
            .max()
            .unwrap_or(0);
        let row = CheckpointRow {
            thread_id: thread.clone(),
            ns: config.checkpoint_ns.clone(),
            id,
            parent: config.checkpoint_id,
            record: codec::encode_record(&checkpoint),
            metadata: codec::encode_metadata(&metadata),
        };
        let values: Vec<&Blob> = stored.iter().map(|(_, _, b)| *b).collect();
        self.with_messages(thread, &values, |encoded, messages, guard| {
            let blobs = stored
                .iter()
                .zip(encoded)
                .map(|((channel, version, _), data)| BlobRow {
                    channel: channel.clone(),
                    version: *version,
                    data,
                })
                .collect();
            self.backend.put_checkpoint(
                row.clone(),
                metadata.run_id.clone(),
                mark,
                blobs,
                messages,
                guard,
                relative,
            )
        })
        .await?;
        Ok(CheckpointConfig {
            thread_id: thread.clone(),
            checkpoint_ns: config.checkpoint_ns.clone(),
            checkpoint_id: Some(id),
        })
    }

    /// [`Saver::max_channel_version`](crate::Saver::max_channel_version): the namespace's
    /// version mark, or, for a namespace without a known one, the greatest version its records
    /// list or its values are stored under (a read of every record, which fails on one that
    /// cannot be decoded).
    pub(crate) async fn max_channel_version(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
    ) -> Result<u64> {
        if let Some(mark) = self.backend.version_mark(thread, ns).await? {
            return Ok(mark);
        }
        let query = ListQuery {
            thread_id: Some(thread.clone()),
            checkpoint_ns: Some(ns.clone()),
            ..ListQuery::default()
        };
        let listed = crate::saver::max_listed_version(&self.list(&query, false).await?);
        // A value is stored under the version `put` was given for it, listed or not.
        let stored = self
            .backend
            .blob_keys(thread)
            .await?
            .into_iter()
            .filter(|(n, _, _)| n == ns)
            .map(|(_, _, v)| v.get())
            .max()
            .unwrap_or(0);
        Ok(listed.max(stored))
    }

    pub(crate) async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(ChannelName, Blob)>,
        task_id: &TaskId,
        task_path: &TaskPath,
    ) -> Result<()> {
        let thread = &config.thread_id;
        let Some(cp) = config.checkpoint_id else {
            return Err(Error::CheckpointIdRequired {
                thread_id: thread.clone(),
                operation: "put_writes",
            });
        };
        if writes.is_empty() {
            // Nothing to store, but a write for an unknown checkpoint is refused all the same,
            // with or without writes (before 2026-12-02 an empty one passed unchecked).
            return match self
                .backend
                .checkpoint(thread, &config.checkpoint_ns, Some(cp))
                .await?
            {
                Some(_) => Ok(()),
                None => Err(Error::UnknownCheckpoint {
                    thread_id: thread.clone(),
                    checkpoint_ns: config.checkpoint_ns.clone(),
                    checkpoint_id: cp,
                }),
            };
        }
        self.gate_before_write(config, false).await?;
        let values: Vec<&Blob> = writes.iter().map(|(_, b)| b).collect();
        self.with_messages(thread, &values, |encoded, messages, guard| {
            let mut rows: Vec<WriteRow> = writes
                .iter()
                .zip(encoded)
                .enumerate()
                .map(|(i, ((channel, _), value))| WriteRow {
                    checkpoint_id: cp,
                    task_id: task_id.clone(),
                    idx: control_write_index(channel.as_str()).unwrap_or(i as i64),
                    channel: channel.clone(),
                    task_path: task_path.clone(),
                    value,
                })
                .collect();
            // Two control writes of one kind in one call: the later one wins, as an upsert would.
            let mut seen = HashSet::new();
            rows.reverse();
            rows.retain(|w| w.idx >= 0 || seen.insert(w.idx));
            rows.reverse();
            let stored =
                self.backend
                    .put_writes(thread, &config.checkpoint_ns, cp, rows, messages, guard);
            // A refused write is an error inside the commit, not after it: the message
            // index then does not take the numbers it gave the write's bodies, which were not
            // stored.
            async move {
                if stored.await? {
                    Ok(())
                } else {
                    Err(Error::UnknownCheckpoint {
                        thread_id: thread.clone(),
                        checkpoint_ns: config.checkpoint_ns.clone(),
                        checkpoint_id: cp,
                    })
                }
            }
        })
        .await
    }

    pub(crate) async fn get_tuple(
        &self,
        config: &CheckpointConfig,
    ) -> Result<Option<CheckpointTuple>> {
        self.read_tuple(config, true).await
    }

    /// [`Self::get_tuple`] without channel values: no blob and no body of the checkpoint's
    /// channels is fetched, so a head read costs the same at 10 and at 4,000 messages.
    pub(crate) async fn get_tuple_without_values(
        &self,
        config: &CheckpointConfig,
    ) -> Result<Option<CheckpointTuple>> {
        self.read_tuple(config, false).await
    }

    /// The addressed (or latest) checkpoint and its ancestors, nearest first, at most `limit`,
    /// without values or writes (see [`Saver::get_ancestors_without_values`](crate::Saver)).
    ///
    /// The chain comes from the backend's `ancestors` walk (one recursive query on SQLite and
    /// PostgreSQL) in pages of at most [`ANCESTOR_PAGE`] rows, so a cycle of parent pointers
    /// costs a bounded read before it is reported. Every row is decoded (checksums included)
    /// and mode-gated as `read_tuple` does; a row seen twice is a cycle.
    pub(crate) async fn get_ancestors_without_values(
        &self,
        config: &CheckpointConfig,
        limit: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        let thread = &config.thread_id;
        let ns = &config.checkpoint_ns;
        if limit == 0 {
            return Ok(Vec::new());
        }
        let mut chain: Vec<Decoded> = Vec::new();
        let mut seen: HashSet<CheckpointId> = HashSet::new();
        let mut next = config.checkpoint_id;
        if next.is_none() {
            // The latest has to be found first; the walk then starts at its parent.
            let Some(head) = self.backend.checkpoint(thread, ns, None).await? else {
                return Ok(Vec::new());
            };
            next = head.parent;
            self.chain_link(thread, head, &mut seen, &mut chain)?;
        }
        self.follow_chain(thread, ns, next, limit, false, &mut seen, &mut chain)
            .await?;
        Ok(bare_tuples(chain))
    }

    /// Extends `chain` along parent pointers from `next` until it holds `limit` rows or the
    /// chain ends (a root, a missing parent, or with `to_full` a full record), in pages of at
    /// most [`ANCESTOR_PAGE`] rows.
    #[expect(
        clippy::too_many_arguments,
        reason = "the walk's state, passed through"
    )]
    async fn follow_chain(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        mut next: Option<CheckpointId>,
        limit: usize,
        to_full: bool,
        seen: &mut HashSet<CheckpointId>,
        chain: &mut Vec<Decoded>,
    ) -> Result<()> {
        while let Some(start) = next
            && chain.len() < limit
        {
            let want = (limit - chain.len()).min(ANCESTOR_PAGE);
            let rows = self.backend.ancestors(thread, ns, start, want).await?;
            next = self.link_page(thread, rows, start, want, to_full, seen, chain)?;
        }
        Ok(())
    }

    /// Appends a page of `want` rows the backend read along parent pointers from `start`,
    /// checking that each is the parent of the one before, and with `to_full` stopping after
    /// the first full record (the rest is neither decoded nor kept); the parent of the last
    /// one when the page is full (the chain may go on), `None` when the chain ended: a root,
    /// a missing parent, or the full record.
    #[expect(
        clippy::too_many_arguments,
        reason = "the walk's state, passed through"
    )]
    fn link_page(
        &self,
        thread: &ThreadId,
        rows: Vec<CheckpointRow>,
        start: CheckpointId,
        want: usize,
        to_full: bool,
        seen: &mut HashSet<CheckpointId>,
        chain: &mut Vec<Decoded>,
    ) -> Result<Option<CheckpointId>> {
        let fetched = rows.len();
        let mut expected = Some(start);
        for row in rows.into_iter().take(want) {
            if expected != Some(row.id) {
                // Backends follow the parent pointers themselves, so this is a backend
                // fault; reporting it beats returning a chain that is not one.
                return Err(Error::Corrupt {
                    thread_id: thread.clone(),
                    checkpoint_id: row.id,
                    what: "parent chain".into(),
                    detail: format!(
                        "the store returned checkpoint {} where {} was expected",
                        row.id,
                        expected.map_or_else(|| "the end".to_owned(), |e| e.to_string())
                    ),
                });
            }
            expected = row.parent;
            self.chain_link(thread, row, seen, chain)?;
            if to_full
                && chain
                    .last()
                    .is_some_and(|d| d.checkpoint.v != crate::model::RELATIVE_RECORD_V)
            {
                return Ok(None);
            }
        }
        Ok(if fetched < want { None } else { expected })
    }

    /// The addressed (or latest) checkpoint with its values, its ancestors and the values its
    /// record inherits (see [`Saver::get_tuple_with_ancestry`](crate::Saver)).
    ///
    /// The row, its writes, the thread's epoch and the first page of ancestors come from
    /// [`Backend::head_chain`] (one query on PostgreSQL); every value the checkpoint holds, its
    /// own and the inherited ones, from one [`Backend::checkpoint_blobs`], which reads them
    /// only if the row still exists; then the bodies those values and the writes reference,
    /// which seed the message index as reads do. A checkpoint deleted in between is `None`
    /// when addressed and read again when it was the latest, as `get_tuple` does.
    pub(crate) async fn get_tuple_with_ancestry(
        &self,
        config: &CheckpointConfig,
        limit: usize,
    ) -> Result<Option<TupleWithAncestry>> {
        let thread = &config.thread_id;
        let ns = &config.checkpoint_ns;
        let addressed = config.checkpoint_id.is_some();
        let first = limit.min(ANCESTOR_PAGE);
        for _ in 0..3 {
            let Some(head) = self
                .backend
                .head_chain(thread, ns, config.checkpoint_id, first)
                .await?
            else {
                return Ok(None);
            };
            let HeadChain {
                row,
                writes,
                epoch,
                ancestors,
            } = head;
            let decoded = self.decode_row(row)?;
            self.gate(thread, decoded.row.id, &decoded.metadata)?;
            let id = decoded.row.id;
            let mut seen = HashSet::new();
            let mut chain = Vec::new();
            // A full record depends on no ancestor; a relative one on those up to the first
            // full record (the backend read a page of them with the row, not knowing which).
            if let Some(parent) = decoded.row.parent
                && first > 0
                && decoded.checkpoint.v == crate::model::RELATIVE_RECORD_V
            {
                let next = self.link_page(
                    thread, ancestors, parent, first, true, &mut seen, &mut chain,
                )?;
                self.follow_chain(thread, ns, next, limit, true, &mut seen, &mut chain)
                    .await?;
            }
            let inherited =
                inherited_keys(&decoded.checkpoint, chain.iter().map(|d| &d.checkpoint));
            let mut keys: Vec<(ChannelName, ChannelVersion)> = decoded
                .checkpoint
                .channel_versions
                .iter()
                .map(|(c, v)| (c.clone(), *v))
                .chain(inherited.iter().cloned())
                .collect();
            keys.sort();
            keys.dedup();
            let Some((_, blob_rows)) = self.backend.checkpoint_blobs(thread, ns, id, &keys).await?
            else {
                if addressed {
                    return Ok(None);
                }
                continue;
            };
            let rows = vec![decoded];
            let group = decode_group(thread, &rows, &[0], blob_rows, writes)?;
            let runs = merge_runs(&group.runs);
            let bodies = if runs.is_empty() {
                Bodies::default()
            } else {
                let read = self.backend.messages(thread, &runs, true).await?;
                // Bodies from a later epoch than the row's may be other messages under the
                // same numbers, unless the checkpoint still exists (see `BodyRead`).
                if read.epoch != Some(epoch) && !self.confirm_bodies(thread, ns, &[id]).await? {
                    if addressed {
                        return Ok(None);
                    }
                    continue;
                }
                Bodies::from_rows(read.rows)
            };
            if !bodies.items.is_empty() {
                // The backend read the epoch before the bodies.
                let seed = self.seed_slot(thread).map(|slot| (slot, epoch));
                Self::seed_index(seed, &bodies);
            }
            match resolve_with_ancestry(thread, rows, group, &bodies, inherited) {
                Ok((tuple, inherited)) => {
                    return Ok(tuple.map(|tuple| TupleWithAncestry {
                        tuple,
                        ancestors: bare_tuples(chain),
                        inherited,
                    }));
                }
                // The bodies come from a later snapshot than the row: a body missing because
                // the checkpoint was deleted and its bodies collected in between is no damage.
                Err(e) => {
                    if self
                        .backend
                        .existing(thread, ns, &[id])
                        .await?
                        .contains(&id)
                    {
                        return Err(e);
                    }
                    if addressed {
                        return Ok(None);
                    }
                }
            }
        }
        Err(Error::latest_deleted_while_read(thread))
    }

    /// The values stored for `keys` (see [`Saver::get_channel_values`](crate::Saver)): the
    /// addressed checkpoint's row and the blob rows of the keys in one read (one snapshot, so
    /// a concurrent delete gives `None` or the values, never fewer values), then the message
    /// bodies they reference, with no walk along parent pointers. The row is decoded and
    /// gated as `get_tuple` does; the bodies seed the thread's message index as reads do.
    pub(crate) async fn get_channel_values(
        &self,
        config: &CheckpointConfig,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<BTreeMap<(ChannelName, ChannelVersion), Blob>>> {
        let thread = &config.thread_id;
        let ns = &config.checkpoint_ns;
        if let Some(id) = config.checkpoint_id {
            return self.channel_values_at(thread, ns, id, keys).await;
        }
        // The latest checkpoint, deleted between finding it and reading it, is looked up
        // again, as `get_tuple` does: `None` says the namespace has no checkpoint.
        for _ in 0..3 {
            let Some(row) = self.backend.checkpoint(thread, ns, None).await? else {
                return Ok(None);
            };
            if let Some(values) = self.channel_values_at(thread, ns, row.id, keys).await? {
                return Ok(Some(values));
            }
        }
        Err(Error::latest_deleted_while_read(thread))
    }

    /// [`Self::get_channel_values`] of checkpoint `id`; `None` when it does not exist (or was
    /// deleted during the read).
    async fn channel_values_at(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: CheckpointId,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<BTreeMap<(ChannelName, ChannelVersion), Blob>>> {
        let mut unique: Vec<(ChannelName, ChannelVersion)> = keys.to_vec();
        unique.sort();
        unique.dedup();
        let Some((row, rows)) = self
            .backend
            .checkpoint_blobs(thread, ns, id, &unique)
            .await?
        else {
            return Ok(None);
        };
        let decoded = self.decode_row(row)?;
        self.gate(thread, id, &decoded.metadata)?;
        let mut pending = Vec::with_capacity(rows.len());
        let mut runs = Vec::new();
        for b in rows {
            let p = decode_blob_row(thread, id, &b, &mut runs)?;
            pending.push(((b.channel, b.version), p));
        }
        let bodies = self.fetch_seeding_bodies(thread, &runs).await?;
        // The row was read in an earlier snapshot than the bodies, with no epoch to compare:
        // they are its own only if it still exists (see `BodyRead`).
        if !runs.is_empty() && !self.confirm_bodies(thread, ns, &[id]).await? {
            return Ok(None);
        }
        let resolved = pending
            .into_iter()
            .map(|(key, p)| Ok((key, resolve(thread, id, &p, &bodies)?)))
            .collect::<Result<BTreeMap<_, _>>>();
        match resolved {
            Ok(values) => Ok(Some(values)),
            // The bodies come from a later snapshot than the row: a body missing because the
            // checkpoint was deleted and its bodies collected in between is no damage.
            Err(e)
                if !self
                    .backend
                    .existing(thread, ns, &[id])
                    .await?
                    .contains(&id) =>
            {
                drop(e);
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    /// Every stored body of `thread`, read raw with [`Backend::all_messages`] and only counted.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database savers expose the scan")
    )]
    pub(crate) async fn body_scan(&self, thread: &ThreadId) -> Result<BodyScan> {
        let rows = self.backend.all_messages(thread).await?;
        Ok(BodyScan {
            rows: rows.len() as u64,
            bytes: rows.iter().map(|r| r.body.len() as u64).sum(),
        })
    }

    /// Decodes and gates one row of an ancestor chain and appends it; a row already in the
    /// chain is a parent cycle.
    fn chain_link(
        &self,
        thread: &ThreadId,
        row: CheckpointRow,
        seen: &mut HashSet<CheckpointId>,
        chain: &mut Vec<Decoded>,
    ) -> Result<()> {
        if !seen.insert(row.id) {
            return Err(Error::ParentCycle {
                thread_id: thread.clone(),
                checkpoint_id: row.id,
            });
        }
        let decoded = self.decode_row(row)?;
        self.gate(thread, decoded.row.id, &decoded.metadata)?;
        chain.push(decoded);
        Ok(())
    }

    async fn read_tuple(
        &self,
        config: &CheckpointConfig,
        with_values: bool,
    ) -> Result<Option<CheckpointTuple>> {
        let Some(fetched) = self
            .backend
            .tuple_rows(
                &config.thread_id,
                &config.checkpoint_ns,
                config.checkpoint_id,
                with_values,
            )
            .await?
        else {
            return Ok(None);
        };
        let TupleRows {
            row,
            blobs,
            writes,
            bodies,
            epoch,
        } = fetched;
        let decoded = self.decode_row(row)?;
        self.gate(&config.thread_id, decoded.row.id, &decoded.metadata)?;
        let rows = vec![decoded];
        let group = decode_group(&config.thread_id, &rows, &[0], blobs, writes)?;
        let bodies = Bodies::from_rows(bodies);
        if with_values && !bodies.items.is_empty() {
            // The backend read the epoch before the bodies.
            let seed = self.seed_slot(&config.thread_id).map(|slot| (slot, epoch));
            Self::seed_index(seed, &bodies);
        }
        let mut values = vec![BTreeMap::new()];
        let mut pending = vec![Vec::new()];
        finish_group(
            &config.thread_id,
            &rows,
            &[0],
            group,
            &bodies,
            &mut values,
            &mut pending,
        )?;
        Ok(into_tuples(rows, values, pending).pop())
    }

    /// `list`, with values and pending writes when `values`; without either otherwise.
    ///
    /// Rows come from the backend in pages, so a limited list reads about `limit` rows
    /// however long the thread is: the first page asks for `limit` rows (all rows when the
    /// query has no limit), and each further page, needed only while the metadata filter
    /// rejects rows, for four times as many, up to [`LIST_PAGE`].
    pub(crate) async fn list(
        &self,
        query: &ListQuery,
        values: bool,
    ) -> Result<Vec<CheckpointTuple>> {
        if query.limit == Some(0) {
            return Ok(Vec::new());
        }
        let mut selected: Vec<Decoded> = Vec::new();
        let mut last: Option<(CheckpointId, ThreadId, CheckpointNs)> = None;
        let mut page = query.limit.map(|l| l.min(LIST_PAGE));
        'pages: loop {
            let scan = RowScan {
                thread: query.thread_id.as_ref(),
                ns: query.checkpoint_ns.as_ref(),
                before: query.before,
                after: last.as_ref().map(|(id, t, n)| (id, t, n)),
                limit: page,
                order: ScanOrder::List,
            };
            let rows = self.backend.checkpoints(scan).await?;
            let fetched = rows.len();
            for row in rows {
                last = Some((row.id, row.thread_id.clone(), row.ns.clone()));
                let decoded = self.decode_row(row)?;
                // Gated before the filter: a full-mode process that reads a delta checkpoint
                // fails closed (kernel-spec R35), whether or not the filter keeps it.
                self.gate(&decoded.row.thread_id, decoded.row.id, &decoded.metadata)?;
                if !decoded.metadata.matches(&query.filter) {
                    continue;
                }
                selected.push(decoded);
                if query.limit.is_some_and(|l| selected.len() >= l) {
                    break 'pages;
                }
            }
            match page {
                Some(p) if fetched >= p => page = Some(p.saturating_mul(4).min(LIST_PAGE)),
                _ => break,
            }
        }
        if values {
            return self.assemble(selected).await;
        }
        let n = selected.len();
        Ok(into_tuples(
            selected,
            vec![BTreeMap::new(); n],
            vec![Vec::new(); n],
        ))
    }

    /// Loads blobs, message bodies and writes for decoded rows, keeping their order.
    async fn assemble(&self, rows: Vec<Decoded>) -> Result<Vec<CheckpointTuple>> {
        // Group by (thread, namespace) so that each group costs one query per table.
        let mut groups: BTreeMap<(ThreadId, CheckpointNs), Vec<usize>> = BTreeMap::new();
        for (i, d) in rows.iter().enumerate() {
            groups
                .entry((d.row.thread_id.clone(), d.row.ns.clone()))
                .or_default()
                .push(i);
        }
        let mut values: Vec<BTreeMap<ChannelName, Blob>> = vec![BTreeMap::new(); rows.len()];
        let mut writes: Vec<Vec<PendingWrite>> = vec![Vec::new(); rows.len()];
        // Rows whose checkpoints were deleted while they were read: left out.
        let mut gone: HashSet<usize> = HashSet::new();
        for ((thread, ns), members) in groups {
            let keys: BTreeSet<(ChannelName, ChannelVersion)> = members
                .iter()
                .flat_map(|&i| {
                    rows[i]
                        .checkpoint
                        .channel_versions
                        .iter()
                        .map(|(c, v)| (c.clone(), *v))
                })
                .collect();
            let keys: Vec<_> = keys.into_iter().collect();
            let blob_rows = self.backend.blobs(&thread, &ns, &keys).await?;
            let ids: Vec<CheckpointId> = members.iter().map(|&i| rows[i].row.id).collect();
            let write_rows = self.backend.writes(&thread, &ns, &ids).await?;
            let group = decode_group(&thread, &rows, &members, blob_rows, write_rows)?;
            let bodies = self.fetch_bodies(&thread, &group.runs).await?;
            // The reads above are separate snapshots: a checkpoint deleted meanwhile (a prune,
            // `delete_for_runs`) may have lost values and bodies its record lists, and would
            // read as having none. One still there now was there throughout (ids never come
            // back), and its values could not be collected while it referenced them.
            let still = self.backend.existing(&thread, &ns, &ids).await?;
            let kept: Vec<usize> = members
                .iter()
                .copied()
                .filter(|&i| still.contains(&rows[i].row.id))
                .collect();
            gone.extend(
                members
                    .iter()
                    .copied()
                    .filter(|&i| !still.contains(&rows[i].row.id)),
            );
            if kept.is_empty() {
                continue;
            }
            finish_group(
                &thread,
                &rows,
                &kept,
                group,
                &bodies,
                &mut values,
                &mut writes,
            )?;
        }
        let mut tuples = into_tuples(rows, values, writes);
        if !gone.is_empty() {
            let mut i = 0;
            tuples.retain(|_| {
                i += 1;
                !gone.contains(&(i - 1))
            });
        }
        Ok(tuples)
    }

    /// [`Self::fetch_bodies`] for a read that also seeds the thread's message index with them
    /// (the epoch read first, see [`Self::seed_epoch`]).
    async fn fetch_seeding_bodies(&self, thread: &ThreadId, runs: &[(u64, u64)]) -> Result<Bodies> {
        if runs.is_empty() {
            return Ok(Bodies::default());
        }
        let seed = self.seed_epoch(thread).await?;
        let bodies = self.read_bodies(thread, runs, seed.is_some()).await?;
        Self::seed_index(seed, &bodies);
        Ok(bodies)
    }

    async fn fetch_bodies(&self, thread: &ThreadId, runs: &[(u64, u64)]) -> Result<Bodies> {
        self.read_bodies(thread, runs, false).await
    }

    async fn read_bodies(
        &self,
        thread: &ThreadId,
        runs: &[(u64, u64)],
        seeding: bool,
    ) -> Result<Bodies> {
        if runs.is_empty() {
            return Ok(Bodies::default());
        }
        let merged = merge_runs(runs);
        let read = self.backend.messages(thread, &merged, seeding).await?;
        Ok(Bodies::from_rows(read.rows))
    }

    /// Whether every checkpoint of `ids` still exists, checked after a read of bodies they
    /// reference: then none was deleted since its row was read, so no body it references was
    /// removed, and the bodies read are its own (see [`BodyRead`]).
    async fn confirm_bodies(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<bool> {
        let alive = self.backend.existing(thread, ns, ids).await?;
        Ok(ids.iter().all(|id| alive.contains(id)))
    }

    pub(crate) async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[ChannelName],
    ) -> Result<BTreeMap<ChannelName, DeltaChannelHistory>> {
        let thread = &config.thread_id;
        let ns = &config.checkpoint_ns;
        let mut out: BTreeMap<ChannelName, DeltaChannelHistory> = channels
            .iter()
            .map(|c| (c.clone(), DeltaChannelHistory::default()))
            .collect();
        let Some(target) = self
            .backend
            .checkpoint(thread, ns, config.checkpoint_id)
            .await?
        else {
            return match config.checkpoint_id {
                Some(id) => Err(Error::UnknownCheckpoint {
                    thread_id: thread.clone(),
                    checkpoint_ns: ns.clone(),
                    checkpoint_id: id,
                }),
                None => Ok(out),
            };
        };
        // The walk is a read (R35 a): a full-mode store does not hand out the history of a
        // delta checkpoint to build state from, as `get_tuple` does not return it.
        if self.config.mode == ChannelMode::Full {
            let metadata = codec::decode_metadata(&target.metadata)
                .map_err(|e| codec_error(thread, target.id, "checkpoint metadata", e))?;
            self.gate(thread, target.id, &metadata)?;
        }
        let walk = self
            .walk(
                thread,
                ns,
                &target,
                channels.iter().cloned().collect(),
                true,
            )
            .await?;
        let walk_ids = walk.visited;
        let mut runs = Vec::new();
        let mut seeds = BTreeMap::new();
        for (c, (cp, bytes)) in walk.seeds {
            let p = decode_pending(thread, cp, &format!("blob of channel {c}"), &bytes)?;
            if let Pending::Refs(_, r) = &p {
                runs.extend_from_slice(r);
            }
            seeds.insert(c, (cp, p));
        }
        let mut writes = Vec::new();
        for (c, chunks) in walk.writes {
            for w in chunks.into_iter().rev().flatten() {
                let p = decode_pending(
                    thread,
                    w.checkpoint_id,
                    &format!("write of task {} to channel {}", w.task_id, w.channel),
                    &w.value,
                )?;
                if let Pending::Refs(_, r) = &p {
                    runs.extend_from_slice(r);
                }
                writes.push((c.clone(), w, p));
            }
        }
        let bodies = self.fetch_seeding_bodies(thread, &runs).await?;
        let resolved = (|| -> Result<()> {
            for (c, (cp, p)) in seeds {
                if let Some(h) = out.get_mut(&c) {
                    h.seed = Some(resolve(thread, cp, &p, &bodies)?);
                    h.seed_checkpoint = Some(cp);
                }
            }
            for (c, w, p) in writes {
                let value = resolve(thread, w.checkpoint_id, &p, &bodies)?;
                if let Some(h) = out.get_mut(&c) {
                    h.writes.push(w.into_pending(value));
                }
            }
            Ok(())
        })();
        // The bodies are read after the walk's existence checks: a delete that committed in
        // between (and collected the bodies only the deleted checkpoints referenced) is a
        // checkpoint gone mid-read, as in the walk, not a damaged store. Such a delete may also
        // have let other messages take the collected numbers, which read as valid bodies: the
        // walk's bodies are its own only if every checkpoint of it still exists (`BodyRead`).
        if resolved.is_err() || !runs.is_empty() {
            let mut chain = Vec::with_capacity(walk_ids.len() + 1);
            chain.push(target.id);
            chain.extend_from_slice(&walk_ids);
            let alive = self.backend.existing(thread, ns, &chain).await?;
            if !alive.contains(&target.id) {
                return Err(Error::UnknownCheckpoint {
                    thread_id: thread.clone(),
                    checkpoint_ns: ns.clone(),
                    checkpoint_id: target.id,
                });
            }
            if let Some(pair) = chain.windows(2).find(|p| !alive.contains(&p[1])) {
                return Err(Error::MissingParent {
                    thread_id: thread.clone(),
                    checkpoint_id: pair[0],
                    parent_id: pair[1],
                });
            }
            resolved?;
        }
        Ok(out)
    }

    /// Follows parent pointers from `target`'s parent until each channel finds a stored value.
    ///
    /// Returns, per channel, the seed `(checkpoint, stored bytes)` and the writes of every
    /// visited ancestor in walk order (nearest first, each chunk sorted), plus the visited ids.
    /// With `strict`, a missing parent is an error; otherwise the walk stops there.
    async fn walk(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        target: &CheckpointRow,
        channels: BTreeSet<ChannelName>,
        strict: bool,
    ) -> Result<Walk> {
        let mut walk = Walk {
            seeds: BTreeMap::new(),
            writes: channels.iter().map(|c| (c.clone(), Vec::new())).collect(),
            visited: Vec::new(),
        };
        let mut remaining = channels;
        let mut seen: HashSet<CheckpointId> = HashSet::from([target.id]);
        let mut child = target.id;
        let mut next = target.parent;
        // The channels the record below the visited one (first the target) leaves to its
        // parent: a relative record that does not list a channel carries its parent's version
        // of it, so the parent's writes to it were not applied on this path (a sibling branch,
        // an update or fork beside them, applied them) and are not replayed.
        let mut carried_below: BTreeSet<ChannelName> = {
            let record = codec::decode_record(&target.record, target.id)
                .map_err(|e| codec_error(thread, target.id, "checkpoint record", e))?;
            carried(&record, &remaining)
        };
        // One page should reach the seed: a graph run stores more than one checkpoint per
        // update (the input step's, and steps that update other channels), and at 2F + 4 the
        // write-amp workload's deepest replay (9 writes, 29 checkpoints back to the seed) took
        // two pages, three more round trips on PostgreSQL.
        let page = (4 * self.config.snapshot_frequency.get() as usize + 4).min(512);
        while !remaining.is_empty() {
            let Some(start) = next else { break };
            let rows = self.backend.ancestors(thread, ns, start, page).await?;
            if rows.is_empty() {
                if strict {
                    return Err(Error::MissingParent {
                        thread_id: thread.clone(),
                        checkpoint_id: child,
                        parent_id: start,
                    });
                }
                break;
            }
            let mut decoded = Vec::with_capacity(rows.len());
            let mut expected = Some(start);
            // A row the page read but that does not decode, or closes a parent cycle, fails
            // the walk only if the walk gets there: the page reads on past the seed, and damage
            // beyond it (like a missing row there) is not the history's.
            let mut beyond: Option<Error> = None;
            for row in rows {
                if expected != Some(row.id) {
                    break;
                }
                if !seen.insert(row.id) {
                    beyond = Some(Error::ParentCycle {
                        thread_id: thread.clone(),
                        checkpoint_id: row.id,
                    });
                    break;
                }
                expected = row.parent;
                match self.decode_row(row) {
                    Ok(d) => decoded.push(d),
                    Err(e) => {
                        beyond = Some(e);
                        break;
                    }
                }
            }
            let keys: BTreeSet<(ChannelName, ChannelVersion)> = decoded
                .iter()
                .flat_map(|d| {
                    remaining.iter().filter_map(|c| {
                        d.checkpoint
                            .channel_versions
                            .get(c)
                            .map(|v| (c.clone(), *v))
                    })
                })
                .collect();
            let keys: Vec<_> = keys.into_iter().collect();
            let blobs: HashMap<(ChannelName, ChannelVersion), Vec<u8>> = self
                .backend
                .blobs(thread, ns, &keys)
                .await?
                .into_iter()
                .map(|b| ((b.channel, b.version), b.data))
                .collect();
            let ids: Vec<CheckpointId> = decoded.iter().map(|d| d.row.id).collect();
            let mut by_cp: HashMap<CheckpointId, Vec<WriteRow>> = HashMap::new();
            for w in self.backend.writes(thread, ns, &ids).await? {
                by_cp.entry(w.checkpoint_id).or_default().push(w);
            }
            // Where this page's part of the walk starts, for the check below.
            let (page_start, page_child) = (walk.visited.len(), child);
            for d in &decoded {
                walk.visited.push(d.row.id);
                child = d.row.id;
                next = d.row.parent;
                let mut here = by_cp.remove(&d.row.id).unwrap_or_default();
                here.sort_by(|a, b| {
                    (a.task_path.as_str(), a.task_id.as_str(), a.idx).cmp(&(
                        b.task_path.as_str(),
                        b.task_id.as_str(),
                        b.idx,
                    ))
                });
                for c in remaining.clone() {
                    let chunk: Vec<WriteRow> = if carried_below.contains(&c) {
                        Vec::new()
                    } else {
                        here.iter().filter(|w| w.channel == c).cloned().collect()
                    };
                    if let Some(list) = walk.writes.get_mut(&c) {
                        list.push(chunk);
                    }
                    if let Some(bytes) = d
                        .checkpoint
                        .channel_versions
                        .get(&c)
                        .and_then(|v| blobs.get(&(c.clone(), *v)))
                    {
                        walk.seeds.insert(c.clone(), (d.row.id, bytes.clone()));
                        remaining.remove(&c);
                    } else if d.checkpoint.v != crate::model::RELATIVE_RECORD_V
                        && !d.checkpoint.channel_versions.contains_key(&c)
                    {
                        // A full record without the channel: it was never written before this
                        // checkpoint, so nothing older belongs to its value (runtime-spec §5.5
                        // rule 4, "no stored value: start from empty", reached here instead of
                        // at the root, which a prune may have removed).
                        remaining.remove(&c);
                    }
                }
                carried_below = carried(&d.checkpoint, &remaining);
                if remaining.is_empty() {
                    break;
                }
            }
            if strict {
                // The rows, values and writes were read in separate statements: a delete that
                // committed in between removed some of them. A checkpoint's writes go with its
                // row (one transaction) and its values after it, so the rows still existing now
                // were read whole; a walk through one that is gone fails as a missing parent
                // instead of replaying less. Only the rows the walk used count: a prune may
                // delete the older ones the page read beyond the seed.
                let used = &walk.visited[page_start..];
                let alive = self.backend.existing(thread, ns, used).await?;
                let mut from = page_child;
                for id in used {
                    if !alive.contains(id) {
                        return Err(Error::MissingParent {
                            thread_id: thread.clone(),
                            checkpoint_id: from,
                            parent_id: *id,
                        });
                    }
                    from = *id;
                }
            }
            if let Some(e) = beyond {
                if remaining.is_empty() {
                    break;
                }
                return Err(e);
            }
            if expected.is_some() && decoded.len() < page && !remaining.is_empty() {
                // The backend stopped before the page was full: the next parent is missing.
                if let Some(missing) = expected {
                    if strict {
                        return Err(Error::MissingParent {
                            thread_id: thread.clone(),
                            checkpoint_id: child,
                            parent_id: missing,
                        });
                    }
                    break;
                }
            }
        }
        Ok(walk)
    }

    /// The ancestors a checkpoint needs to stay readable: those the walk visits
    /// for every channel that has a version but no stored value.
    /// Every ancestor `d` needs to be read back: the delta-history ancestors
    /// of its own channels and, for a relative record, its parent chain up to
    /// the first full record together with what each of those needs.
    async fn needed_ancestors(&self, d: &Decoded, all: &[Decoded]) -> Result<Vec<CheckpointId>> {
        let mut out = self.delta_ancestors(d).await?;
        let mut cur = d;
        // Parent pointers can loop (a checkpoint put again as a relative record below its own
        // descendant, or a damaged column): a chain that comes back to a record fails as the
        // reads of it do, instead of growing `out` for ever.
        let mut chain = HashSet::from([d.row.id]);
        while cur.checkpoint.v == crate::model::RELATIVE_RECORD_V {
            let Some(parent) = cur.row.parent else {
                break;
            };
            if !chain.insert(parent) {
                return Err(Error::ParentCycle {
                    thread_id: d.row.thread_id.clone(),
                    checkpoint_id: parent,
                });
            }
            out.push(parent);
            let Some(p) = all
                .iter()
                .find(|x| x.row.ns == cur.row.ns && x.row.id == parent)
            else {
                // A missing parent is reported by the read path as corruption.
                break;
            };
            out.extend(self.delta_ancestors(p).await?);
            cur = p;
        }
        Ok(out)
    }

    async fn delta_ancestors(&self, d: &Decoded) -> Result<Vec<CheckpointId>> {
        let keys: Vec<(ChannelName, ChannelVersion)> = d
            .checkpoint
            .channel_versions
            .iter()
            .map(|(c, v)| (c.clone(), *v))
            .collect();
        let stored: HashSet<ChannelName> = self
            .backend
            .blobs(&d.row.thread_id, &d.row.ns, &keys)
            .await?
            .into_iter()
            .map(|b| b.channel)
            .collect();
        // A delta-marked record (kernel-spec R32) comes from a delta-mode runtime, which keeps
        // counters for every delta channel not snapshotted at that checkpoint: a channel with
        // a version, no stored value and no counters is another kind (an ephemeral input or
        // branch channel, cleared), which needs no history. Without the marker every such
        // channel counts, as the reference's walk would take it.
        // Marker and counters are read where the mode gate reads them, typed or in `extra`.
        // Counters in `extra` of another shape cannot say which channels are delta: then the
        // record counts as unmarked, every channel (keeping too much, never too little).
        let delta_marked =
            crate::mode::marked_delta(&d.metadata) && crate::mode::all_counters(&d.metadata).1;
        let missing: BTreeSet<ChannelName> = d
            .checkpoint
            .channel_versions
            .keys()
            .filter(|c| !stored.contains(*c))
            .filter(|c| !delta_marked || crate::mode::has_counters(&d.metadata, c.as_str()))
            .cloned()
            .collect();
        if missing.is_empty() {
            return Ok(Vec::new());
        }
        Ok(self
            .walk(&d.row.thread_id, &d.row.ns, &d.row, missing, false)
            .await?
            .visited)
    }

    pub(crate) async fn delete_thread(&self, thread: &ThreadId) -> Result<()> {
        let slot = self.slot(thread);
        let mut guard = slot.lock().await;
        let r = self.backend.delete_thread(thread).await;
        *guard = None;
        drop(guard);
        self.forget_index(thread, &slot);
        r
    }

    pub(crate) async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> Result<()> {
        let slot = self.slot(target);
        let mut guard = slot.lock().await;
        let r = self.backend.copy_thread(source, target).await;
        *guard = None;
        r
    }

    /// Adds to `keep` the checkpoints of `all` at `roots` and, transitively, every ancestor
    /// they need to stay readable ([`Self::needed_ancestors`]): a kept ancestor may itself be
    /// a relative record or need delta history of its own.
    async fn keep_needed(
        &self,
        all: &[Decoded],
        roots: impl IntoIterator<Item = usize>,
        keep: &mut HashSet<(CheckpointNs, CheckpointId)>,
    ) -> Result<()> {
        let mut work: Vec<usize> = roots.into_iter().collect();
        while let Some(i) = work.pop() {
            let d = &all[i];
            if !keep.insert((d.row.ns.clone(), d.row.id)) {
                continue;
            }
            // A subgraph's checkpoint belongs to its enclosing graphs' checkpoints (its task's
            // pending writes and the step it continues live there): they stay with it.
            for (ns, id) in &d.metadata.parents {
                match all.iter().position(|x| &x.row.ns == ns && x.row.id == *id) {
                    Some(j) => work.push(j),
                    None => {
                        keep.insert((ns.clone(), *id));
                    }
                }
            }
            for id in self.needed_ancestors(d, all).await? {
                match all
                    .iter()
                    .position(|x| x.row.ns == d.row.ns && x.row.id == id)
                {
                    Some(j) => work.push(j),
                    None => {
                        keep.insert((d.row.ns.clone(), id));
                    }
                }
            }
        }
        Ok(())
    }

    /// Deletes `doomed` (none of which a checkpoint of `all` left standing needs, see
    /// [`Self::keep_needed`]) in one
    /// transaction, if the thread's checkpoints are still `all`; otherwise
    /// [`Error::Conflict`], nothing deleted.
    async fn delete_unchanged(
        &self,
        thread: &ThreadId,
        all: Vec<Decoded>,
        doomed: &HashSet<(CheckpointNs, CheckpointId)>,
    ) -> Result<()> {
        if doomed.is_empty() {
            return self.finish_collection(thread, &all).await;
        }
        let expected = expected_of(all.iter().map(|d| &d.row));
        let mut sorted: Vec<(CheckpointNs, CheckpointId)> = doomed.iter().cloned().collect();
        sorted.sort();
        let slot = self.slot(thread);
        let mut guard = slot.lock().await;
        if !self
            .backend
            .delete_checkpoints(thread, &sorted, &expected)
            .await?
        {
            return Err(Error::Conflict {
                thread_id: thread.clone(),
                detail: format!(
                    "a checkpoint was put from one being deleted after the thread was checked; \
                     nothing of thread {thread} was deleted, retry"
                ),
            });
        }
        let r = self.collect_garbage(thread, &all, doomed).await;
        *guard = None;
        r
    }

    /// A delete that has nothing to delete still collects what an earlier one left: the
    /// checkpoints, the blobs and the bodies go in three transactions, and a process that
    /// stopped after the first (a crash, a dropped future) left values no checkpoint lists,
    /// which no later delete would otherwise reclaim on a thread that has nothing more to
    /// delete. Only the keys are read to find out (no value, no body); a collection runs only
    /// when some blob is unlisted.
    async fn finish_collection(&self, thread: &ThreadId, all: &[Decoded]) -> Result<()> {
        let listed = listed_keys(all, &HashSet::new());
        let keys = self.backend.blob_keys(thread).await?;
        if keys.iter().all(|k| listed.contains(k)) {
            return Ok(());
        }
        let slot = self.slot(thread);
        let mut guard = slot.lock().await;
        let r = self.collect_garbage(thread, all, &HashSet::new()).await;
        *guard = None;
        r
    }

    /// Deletes blobs no remaining checkpoint references and message bodies no remaining blob or write references.
    async fn collect_garbage(
        &self,
        thread: &ThreadId,
        all: &[Decoded],
        doomed: &HashSet<(CheckpointNs, CheckpointId)>,
    ) -> Result<()> {
        let live = listed_keys(all, doomed);
        let dead: Vec<_> = self
            .backend
            .blob_keys(thread)
            .await?
            .into_iter()
            .filter(|k| !live.contains(k))
            .collect();
        if !dead.is_empty() {
            // `live` comes from the checkpoints read when the prune began; a put committed
            // since may store or need a key it lacks. The backend deletes only if the thread's
            // checkpoints are still these; otherwise the blobs stay for a later collection.
            // (A put committing after that check stores keys the scan above did not return.)
            let expected = expected_of(
                all.iter()
                    .map(|d| &d.row)
                    .filter(|r| !doomed.contains(&(r.ns.clone(), r.id))),
            );
            self.backend.delete_blobs(thread, &dead, &expected).await?;
        }
        let blob_values = self.backend.all_blob_values(thread).await?;
        let write_values = self.backend.all_write_values(thread).await?;
        let seqs = self.backend.message_seqs(thread).await?;
        // Deleting bodies bumps the thread's epoch (in the backend's transaction), so another
        // process's index that still names them fails its next write and reloads; the backend
        // checks the references again after the bump, for writes that committed meanwhile.
        let dead_messages = unreferenced(
            &seqs,
            blob_values.iter().chain(&write_values).map(Vec::as_slice),
        );
        if !dead_messages.is_empty() {
            self.backend.delete_messages(thread, &dead_messages).await?;
        }
        Ok(())
    }

    async fn decoded_thread(&self, thread: &ThreadId) -> Result<Vec<Decoded>> {
        self.backend
            .checkpoints(RowScan::thread(thread))
            .await?
            .into_iter()
            .map(|r| self.decode_row(r))
            .collect()
    }

    pub(crate) async fn delete_for_runs(&self, run_ids: &[RunId]) -> Result<()> {
        if run_ids.is_empty() {
            return Ok(());
        }
        let runs: HashSet<&RunId> = run_ids.iter().collect();
        // The run index names the runs' threads: only those are read, so damage in another
        // thread's records does not fail the call.
        let threads: BTreeSet<ThreadId> = self
            .backend
            .run_threads(run_ids)
            .await?
            .into_iter()
            .collect();
        // The runs' checkpoints that a remaining checkpoint needs to stay readable (its delta
        // history, the parent chain of a relative record, and what those need in turn) are
        // kept, as prune keeps them (runtime-spec §5.8: preserve what a remaining checkpoint
        // needs); the others go. Every thread is read and decided before any is deleted. Each
        // thread is then deleted in its own transaction, checked again against what it read: a
        // checkpoint put meanwhile on a thread still to go fails that thread's delete after the
        // earlier threads went (the error names it; calling again finishes the job).
        // `Saver::delete_for_runs` documents this.
        let mut checked = Vec::with_capacity(threads.len());
        for thread in threads {
            let all = self.decoded_thread(&thread).await?;
            let of_runs =
                |d: &Decoded| d.metadata.run_id.as_ref().is_some_and(|r| runs.contains(r));
            let mut keep: HashSet<(CheckpointNs, CheckpointId)> = HashSet::new();
            let remaining: Vec<usize> = (0..all.len()).filter(|&i| !of_runs(&all[i])).collect();
            self.keep_needed(&all, remaining, &mut keep).await?;
            let doomed: HashSet<(CheckpointNs, CheckpointId)> = all
                .iter()
                .filter(|d| of_runs(d))
                .map(|d| (d.row.ns.clone(), d.row.id))
                .filter(|k| !keep.contains(k))
                .collect();
            // Nothing left needs what goes (by construction, so no second check).
            checked.push((thread, all, doomed));
        }
        for (thread, all, doomed) in checked {
            self.delete_unchanged(&thread, all, &doomed).await?;
        }
        Ok(())
    }

    pub(crate) async fn prune(
        &self,
        thread_ids: &[ThreadId],
        strategy: PruneStrategy,
    ) -> Result<()> {
        for thread in thread_ids {
            match strategy {
                PruneStrategy::Delete => self.delete_thread(thread).await?,
                PruneStrategy::KeepLatest => {
                    let all = self.decoded_thread(thread).await?;
                    let mut keep: HashSet<(CheckpointNs, CheckpointId)> = HashSet::new();
                    let mut latest: BTreeMap<CheckpointNs, usize> = BTreeMap::new();
                    for (i, d) in all.iter().enumerate() {
                        let e = latest.entry(d.row.ns.clone()).or_insert(i);
                        if all[*e].row.id < d.row.id {
                            *e = i;
                        }
                    }
                    // Keep the latest checkpoints and, transitively, everything
                    // they need: a kept ancestor may itself be a relative record
                    // or need delta history of its own.
                    self.keep_needed(&all, latest.values().copied(), &mut keep)
                        .await?;
                    let doomed: HashSet<_> = all
                        .iter()
                        .map(|d| (d.row.ns.clone(), d.row.id))
                        .filter(|k| !keep.contains(k))
                        .collect();
                    self.delete_unchanged(thread, all, &doomed).await?;
                }
            }
        }
        Ok(())
    }

    pub(crate) async fn stats(&self, thread: &ThreadId) -> Result<StorageStats> {
        self.backend.stats(thread).await
    }

    #[cfg(feature = "test-util")]
    pub(crate) async fn tamper(
        &self,
        thread: &ThreadId,
        tamper: crate::testing::Tamper,
    ) -> Result<()> {
        use crate::testing::Tamper;
        let (column, bytes) = match tamper {
            Tamper::Blobs(b) => (Column::BlobData, b),
            Tamper::Writes(b) => (Column::WriteValue, b),
            Tamper::Messages(b) => (Column::MessageBody, b),
            Tamper::Metadata(m) => (Column::Metadata, codec::encode_metadata(&m)),
            Tamper::MetadataBytes(b) => (Column::Metadata, b),
        };
        // Damaged bodies must not survive in this process's message index.
        let slot = self.slot(thread);
        let mut guard = slot.lock().await;
        let r = self.backend.tamper(thread, column, bytes).await;
        *guard = None;
        r
    }
}

struct Walk {
    seeds: BTreeMap<ChannelName, (CheckpointId, Vec<u8>)>,
    writes: BTreeMap<ChannelName, Vec<Vec<WriteRow>>>,
    visited: Vec<CheckpointId>,
}

/// The channels of `channels` that a relative record carries unchanged from its parent (it
/// does not list them); none for a full record, which lists every version it has.
fn carried(record: &Checkpoint, channels: &BTreeSet<ChannelName>) -> BTreeSet<ChannelName> {
    if record.v != crate::model::RELATIVE_RECORD_V {
        return BTreeSet::new();
    }
    channels
        .iter()
        .filter(|c| !record.channel_versions.contains_key(*c))
        .cloned()
        .collect()
}

/// Decodes a stored value blob (attributed to checkpoint `cp` in errors) and adds the body
/// runs it references to `runs`.
fn decode_blob_row(
    thread: &ThreadId,
    cp: CheckpointId,
    b: &BlobRow,
    runs: &mut Vec<(u64, u64)>,
) -> Result<Pending> {
    let p = decode_pending(
        thread,
        cp,
        &format!("blob of channel {} at version {}", b.channel, b.version),
        &b.data,
    )?;
    if let Pending::Refs(_, r) = &p {
        runs.extend_from_slice(r);
    }
    Ok(p)
}

fn decode_pending(
    thread: &ThreadId,
    cp: CheckpointId,
    what: &str,
    bytes: &[u8],
) -> Result<Pending> {
    match codec::decode_blob(bytes).map_err(|e| codec_error(thread, cp, what, e))? {
        StoredBlob::Inline(b) => Ok(Pending::Ready(b)),
        StoredBlob::Refs(kind, runs) => Ok(Pending::Refs(kind, runs)),
    }
}

/// Message bodies read for one call, sorted by sequence number, without duplicates.
///
/// A body that fails its check is kept aside, not failed at once: the value that references
/// it fails when it is resolved, naming the checkpoint that stored that value (one read
/// fetches the bodies of several checkpoints: a page of a list, a history walk).
#[derive(Default)]
struct Bodies {
    seqs: Vec<u64>,
    items: Vec<Arc<[u8]>>,
    /// The index hash of each item, where the backend took it (see [`BodyRow::hash`]).
    hashes: Vec<Option<u128>>,
    damaged: BTreeMap<u64, CodecError>,
}

impl Bodies {
    /// Collects the checked bodies, and the damaged ones aside.
    fn from_rows(rows: Vec<BodyRow>) -> Self {
        let mut seqs = Vec::with_capacity(rows.len());
        let mut items = Vec::with_capacity(rows.len());
        let mut hashes = Vec::with_capacity(rows.len());
        let mut damaged = BTreeMap::new();
        for row in rows {
            match row.body {
                Ok(body) => {
                    seqs.push(row.seq);
                    items.push(body);
                    hashes.push(row.hash);
                }
                Err(e) => {
                    damaged.entry(row.seq).or_insert(e);
                }
            }
        }
        // Backends return the merged runs in order, so this is a check, not a sort.
        if !seqs.windows(2).all(|w| w[0] < w[1]) {
            let mut rows: Vec<(u64, Arc<[u8]>, Option<u128>)> = seqs
                .into_iter()
                .zip(items)
                .zip(hashes)
                .map(|((s, i), h)| (s, i, h))
                .collect();
            rows.sort_by_key(|(s, _, _)| *s);
            rows.dedup_by_key(|(s, _, _)| *s);
            seqs = Vec::with_capacity(rows.len());
            items = Vec::with_capacity(rows.len());
            hashes = Vec::with_capacity(rows.len());
            for (s, i, h) in rows {
                seqs.push(s);
                items.push(i);
                hashes.push(h);
            }
        }
        Self {
            seqs,
            items,
            hashes,
            damaged,
        }
    }

    /// The bodies of `start..start + len`, or the first missing sequence number.
    fn run(&self, start: u64, len: u64) -> std::result::Result<&[Arc<[u8]>], u64> {
        let Some(last) = len.checked_sub(1) else {
            return Ok(&[]);
        };
        let i = self.seqs.partition_point(|&s| s < start);
        let end = usize::try_from(len).ok().and_then(|n| i.checked_add(n));
        if let Some(end) = end
            && let Some(seqs) = self.seqs.get(i..end)
            // Sorted and unique: the run is complete when its ends are in place.
            && seqs.first() == Some(&start)
            && seqs.last().copied() == start.checked_add(last)
            && let Some(items) = self.items.get(i..end)
        {
            return Ok(items);
        }
        let mut expected = start;
        for &s in self.seqs.get(i..).unwrap_or_default() {
            match expected.checked_add(1) {
                Some(next) if s == expected => expected = next,
                _ => break,
            }
        }
        Err(expected)
    }
}

fn resolve(thread: &ThreadId, cp: CheckpointId, p: &Pending, bodies: &Bodies) -> Result<Blob> {
    match p {
        Pending::Ready(b) => Ok(b.clone()),
        Pending::Refs(kind, runs) => {
            // Stored lengths: saturating, so a damaged one cannot overflow the sum.
            let total = runs.iter().fold(0u64, |t, (_, l)| t.saturating_add(*l));
            // Up to 65,536 up front: a damaged length must not reserve memory by itself.
            let mut items = Vec::with_capacity(usize::try_from(total).unwrap_or(0).min(1 << 16));
            for &(start, len) in runs {
                let run = bodies
                    .run(start, len)
                    .map_err(|seq| match bodies.damaged.get(&seq) {
                        Some(e) => {
                            codec_error(thread, cp, format!("message body {seq}"), e.clone())
                        }
                        None => Error::Corrupt {
                            thread_id: thread.clone(),
                            checkpoint_id: cp,
                            what: "message list".into(),
                            detail: format!("message body {seq} is missing"),
                        },
                    })?;
                items.extend_from_slice(run);
            }
            Ok(Blob::Messages(MessagesBlob { kind: *kind, items }))
        }
    }
}

/// The decoded blobs and writes of a group of checkpoints, and the message runs they reference.
struct Group {
    by_key: HashMap<(ChannelName, ChannelVersion), Pending>,
    writes: Vec<(WriteRow, Pending)>,
    runs: Vec<(u64, u64)>,
}

/// Decodes the blob and write rows read for the checkpoints `members` of `rows` (one thread
/// and namespace); a bad payload is a typed error naming a checkpoint that references it.
fn decode_group(
    thread: &ThreadId,
    rows: &[Decoded],
    members: &[usize],
    blob_rows: Vec<BlobRow>,
    write_rows: Vec<WriteRow>,
) -> Result<Group> {
    let first_cp = rows[members[0]].row.id;
    let mut by_key = HashMap::new();
    let mut runs = Vec::new();
    for b in blob_rows {
        // Attribute a bad blob to a checkpoint of the group that references it.
        let cp = members
            .iter()
            .map(|&i| &rows[i])
            .find(|d| d.checkpoint.channel_versions.get(&b.channel) == Some(&b.version))
            .map_or(first_cp, |d| d.row.id);
        let pending = decode_blob_row(thread, cp, &b, &mut runs)?;
        by_key.insert((b.channel, b.version), pending);
    }
    let mut writes = Vec::with_capacity(write_rows.len());
    for w in write_rows {
        let pending = decode_pending(
            thread,
            w.checkpoint_id,
            &format!("write of task {} to channel {}", w.task_id, w.channel),
            &w.value,
        )?;
        if let Pending::Refs(_, r) = &pending {
            runs.extend_from_slice(r);
        }
        writes.push((w, pending));
    }
    Ok(Group {
        by_key,
        writes,
        runs,
    })
}

/// Resolves a decoded group's values and writes against the fetched bodies.
fn finish_group(
    thread: &ThreadId,
    rows: &[Decoded],
    members: &[usize],
    group: Group,
    bodies: &Bodies,
    values: &mut [BTreeMap<ChannelName, Blob>],
    writes: &mut [Vec<PendingWrite>],
) -> Result<()> {
    for &i in members {
        let d = &rows[i];
        for (c, v) in &d.checkpoint.channel_versions {
            if let Some(p) = group.by_key.get(&(c.clone(), *v)) {
                let blob = resolve(thread, d.row.id, p, bodies)?;
                values[i].insert(c.clone(), blob);
            }
        }
    }
    let position: HashMap<CheckpointId, usize> =
        members.iter().map(|&i| (rows[i].row.id, i)).collect();
    for (w, pending) in group.writes {
        let Some(&i) = position.get(&w.checkpoint_id) else {
            continue;
        };
        let value = resolve(thread, w.checkpoint_id, &pending, bodies)?;
        writes[i].push(w.into_pending(value));
    }
    Ok(())
}

/// Ancestor rows as tuples without values or writes.
fn bare_tuples(chain: Vec<Decoded>) -> Vec<CheckpointTuple> {
    let n = chain.len();
    into_tuples(chain, vec![BTreeMap::new(); n], vec![Vec::new(); n])
}

/// The values of [`TupleWithAncestry::inherited`].
type Inherited = BTreeMap<(ChannelName, ChannelVersion), Option<Blob>>;

/// The tuple of the single checkpoint of `rows` and the values of its `inherited` keys
/// (`None` for a key nothing is stored under), resolved against the fetched bodies.
fn resolve_with_ancestry(
    thread: &ThreadId,
    rows: Vec<Decoded>,
    group: Group,
    bodies: &Bodies,
    inherited: Vec<(ChannelName, ChannelVersion)>,
) -> Result<(Option<CheckpointTuple>, Inherited)> {
    let id = rows[0].row.id;
    let values = inherited
        .into_iter()
        .map(|key| {
            let value = group
                .by_key
                .get(&key)
                .map(|p| resolve(thread, id, p, bodies))
                .transpose()?;
            Ok((key, value))
        })
        .collect::<Result<BTreeMap<_, _>>>()?;
    let mut own = vec![BTreeMap::new()];
    let mut pending = vec![Vec::new()];
    finish_group(thread, &rows, &[0], group, bodies, &mut own, &mut pending)?;
    Ok((into_tuples(rows, own, pending).pop(), values))
}

/// Turns decoded rows with their values and writes into tuples, writes sorted.
fn into_tuples(
    rows: Vec<Decoded>,
    values: Vec<BTreeMap<ChannelName, Blob>>,
    writes: Vec<Vec<PendingWrite>>,
) -> Vec<CheckpointTuple> {
    let mut out = Vec::with_capacity(rows.len());
    for ((d, vals), mut ws) in rows.into_iter().zip(values).zip(writes) {
        sort_writes(&mut ws);
        let mut checkpoint = d.checkpoint;
        checkpoint.channel_values = vals;
        let config = CheckpointConfig {
            thread_id: d.row.thread_id.clone(),
            checkpoint_ns: d.row.ns.clone(),
            checkpoint_id: Some(d.row.id),
        };
        let parent_config = d.row.parent.map(|p| CheckpointConfig {
            thread_id: d.row.thread_id.clone(),
            checkpoint_ns: d.row.ns.clone(),
            checkpoint_id: Some(p),
        });
        out.push(CheckpointTuple {
            config,
            checkpoint,
            metadata: d.metadata,
            parent_config,
            pending_writes: ws,
        });
    }
    out
}

/// The error for a `copy_thread` onto a target that stores other bytes under a body number the
/// source uses.
/// The error for a copy onto a thread that stores another value under a channel version the
/// source uses: overwriting it would change the target's own checkpoints.
pub(crate) fn blob_collision(source: &ThreadId, target: &ThreadId) -> Error {
    Error::Conflict {
        thread_id: target.clone(),
        detail: format!(
            "copy_thread from '{source}': the target stores other values under channel versions the source uses; copy onto a new or deleted thread"
        ),
    }
}

/// `copy_thread` onto a target whose own checkpoint rows or pending writes differ from the
/// source's under the same keys (`what`): replacing them would change what the target's own
/// checkpoints read, as replacing a value or a body would.
pub(crate) fn row_collision(source: &ThreadId, target: &ThreadId, what: &str) -> Error {
    Error::Conflict {
        thread_id: target.clone(),
        detail: format!(
            "copy_thread from '{source}': the target stores other {what} under keys the source uses; copy onto a new or deleted thread"
        ),
    }
}

pub(crate) fn body_collision(source: &ThreadId, target: &ThreadId) -> Error {
    Error::Conflict {
        thread_id: target.clone(),
        detail: format!(
            "copy_thread from '{source}': the target stores other message bodies under numbers the source uses; copy onto a new or deleted thread"
        ),
    }
}

/// The error of a put whose relative record names a parent that does not exist (any more).
pub(crate) fn missing_parent(row: &CheckpointRow) -> Error {
    match row.parent {
        Some(parent_id) => Error::MissingParent {
            thread_id: row.thread_id.clone(),
            checkpoint_id: row.id,
            parent_id,
        },
        // The engine refuses a relative record without a parent before a backend sees it.
        None => Error::InvalidArgument(format!(
            "thread {}: checkpoint {} is a relative record without a parent",
            row.thread_id, row.id
        )),
    }
}

/// The error for a channel version stored twice with different values (two branches of a
/// thread that reached the same version number): failing beats silently keeping either.
pub(crate) fn version_clash(
    row: &CheckpointRow,
    channel: &ChannelName,
    version: ChannelVersion,
) -> Error {
    Error::Conflict {
        thread_id: row.thread_id.clone(),
        detail: format!(
            "checkpoint {} stores channel {channel} at version {version}, which already holds a different value; channel versions must be unique within a thread, across branches",
            row.id
        ),
    }
}

/// The value keys `(namespace, channel, version)` the records of `all` list, leaving out
/// the `doomed` ones: the blobs a collection keeps.
fn listed_keys(
    all: &[Decoded],
    doomed: &HashSet<(CheckpointNs, CheckpointId)>,
) -> HashSet<(CheckpointNs, ChannelName, ChannelVersion)> {
    all.iter()
        .filter(|d| !doomed.contains(&(d.row.ns.clone(), d.row.id)))
        .flat_map(|d| {
            d.checkpoint
                .channel_versions
                .iter()
                .map(|(c, v)| (d.row.ns.clone(), c.clone(), *v))
        })
        .collect()
}

/// Sorts and merges overlapping or adjacent runs.
fn merge_runs(runs: &[(u64, u64)]) -> Vec<(u64, u64)> {
    let mut sorted = runs.to_vec();
    sorted.sort_unstable();
    let mut out: Vec<(u64, u64)> = Vec::with_capacity(sorted.len());
    for (start, len) in sorted {
        let end = start.saturating_add(len);
        match out.last_mut() {
            Some((s, l)) if *s + *l >= start => {
                let e = (*s + *l).max(end);
                *l = e - *s;
            }
            _ => out.push((start, len)),
        }
    }
    out
}

/// The check every saver makes of the text keys it is given (thread ids, namespaces, channel
/// names, task ids and paths, run ids): none may hold a NUL character.
///
/// PostgreSQL's text columns cannot hold one, and its error would be a backend error, which
/// reads as worth retrying; so every saver refuses such a key alike, as the caller's bad
/// input, before it reads or writes anything.
pub(crate) mod keys {
    use crate::error::{Error, Result};
    use crate::ids::ChannelName;
    use crate::model::{CheckpointConfig, ListQuery};

    /// Refuses `s` (a `what`) when it holds a NUL character.
    pub(crate) fn text(what: &str, s: &str) -> Result<()> {
        if s.contains('\0') {
            return Err(Error::InvalidArgument(format!(
                "{what} {s:?} holds a NUL character, which no store keeps in a key"
            )));
        }
        Ok(())
    }

    /// The thread id and namespace of `config`.
    pub(crate) fn config(config: &CheckpointConfig) -> Result<()> {
        text("thread id", config.thread_id.as_str())?;
        text("checkpoint namespace", config.checkpoint_ns.as_str())
    }

    /// Channel names.
    pub(crate) fn channels<'a>(names: impl IntoIterator<Item = &'a ChannelName>) -> Result<()> {
        names
            .into_iter()
            .try_for_each(|c| text("channel name", c.as_str()))
    }

    /// The thread and namespace a listing is narrowed to.
    pub(crate) fn query(query: &ListQuery) -> Result<()> {
        if let Some(t) = &query.thread_id {
            text("thread id", t.as_str())?;
        }
        if let Some(ns) = &query.checkpoint_ns {
            text("checkpoint namespace", ns.as_str())?;
        }
        Ok(())
    }
}

/// Implements [`Saver`](crate::Saver) for a newtype `$ty` with an `engine: Engine<_>` field.
macro_rules! impl_saver {
    ($ty:ty) => {
        #[async_trait::async_trait]
        impl $crate::saver::Saver for $ty {
            async fn get_tuple(
                &self,
                config: &$crate::model::CheckpointConfig,
            ) -> $crate::Result<Option<$crate::model::CheckpointTuple>> {
                $crate::engine::keys::config(config)?;
                self.engine.get_tuple(config).await
            }
            async fn get_tuple_without_values(
                &self,
                config: &$crate::model::CheckpointConfig,
            ) -> $crate::Result<Option<$crate::model::CheckpointTuple>> {
                $crate::engine::keys::config(config)?;
                self.engine.get_tuple_without_values(config).await
            }
            async fn get_ancestors_without_values(
                &self,
                config: &$crate::model::CheckpointConfig,
                limit: usize,
            ) -> $crate::Result<Vec<$crate::model::CheckpointTuple>> {
                $crate::engine::keys::config(config)?;
                self.engine
                    .get_ancestors_without_values(config, limit)
                    .await
            }
            async fn get_tuple_with_ancestry(
                &self,
                config: &$crate::model::CheckpointConfig,
                limit: usize,
            ) -> $crate::Result<Option<$crate::model::TupleWithAncestry>> {
                $crate::engine::keys::config(config)?;
                self.engine.get_tuple_with_ancestry(config, limit).await
            }
            async fn get_channel_values(
                &self,
                config: &$crate::model::CheckpointConfig,
                keys: &[($crate::ids::ChannelName, $crate::ids::ChannelVersion)],
            ) -> $crate::Result<
                Option<
                    std::collections::BTreeMap<
                        ($crate::ids::ChannelName, $crate::ids::ChannelVersion),
                        $crate::blob::Blob,
                    >,
                >,
            > {
                $crate::engine::keys::config(config)?;
                $crate::engine::keys::channels(keys.iter().map(|(c, _)| c))?;
                self.engine.get_channel_values(config, keys).await
            }
            async fn list(
                &self,
                query: &$crate::model::ListQuery,
            ) -> $crate::Result<Vec<$crate::model::CheckpointTuple>> {
                $crate::engine::keys::query(query)?;
                self.engine.list(query, true).await
            }
            async fn list_without_values(
                &self,
                query: &$crate::model::ListQuery,
            ) -> $crate::Result<Vec<$crate::model::CheckpointTuple>> {
                $crate::engine::keys::query(query)?;
                self.engine.list(query, false).await
            }
            async fn put(
                &self,
                config: &$crate::model::CheckpointConfig,
                checkpoint: $crate::model::Checkpoint,
                metadata: $crate::model::CheckpointMetadata,
                new_versions: &$crate::model::ChannelVersions,
            ) -> $crate::Result<$crate::model::CheckpointConfig> {
                $crate::engine::keys::config(config)?;
                $crate::engine::keys::channels(
                    checkpoint
                        .channel_versions
                        .keys()
                        .chain(checkpoint.channel_values.keys())
                        .chain(new_versions.keys()),
                )?;
                if let Some(run) = &metadata.run_id {
                    $crate::engine::keys::text("run id", run.as_str())?;
                }
                self.engine
                    .put(config, checkpoint, metadata, new_versions)
                    .await
            }
            async fn put_writes(
                &self,
                config: &$crate::model::CheckpointConfig,
                writes: Vec<($crate::ids::ChannelName, $crate::blob::Blob)>,
                task_id: &$crate::ids::TaskId,
                task_path: &$crate::ids::TaskPath,
            ) -> $crate::Result<()> {
                $crate::engine::keys::config(config)?;
                $crate::engine::keys::channels(writes.iter().map(|(c, _)| c))?;
                $crate::engine::keys::text("task id", task_id.as_str())?;
                $crate::engine::keys::text("task path", task_path.as_str())?;
                self.engine
                    .put_writes(config, writes, task_id, task_path)
                    .await
            }
            async fn max_channel_version(
                &self,
                thread_id: &$crate::ids::ThreadId,
                checkpoint_ns: &$crate::ids::CheckpointNs,
            ) -> $crate::Result<u64> {
                $crate::engine::keys::text("thread id", thread_id.as_str())?;
                $crate::engine::keys::text("checkpoint namespace", checkpoint_ns.as_str())?;
                self.engine
                    .max_channel_version(thread_id, checkpoint_ns)
                    .await
            }
            async fn delete_thread(&self, thread_id: &$crate::ids::ThreadId) -> $crate::Result<()> {
                $crate::engine::keys::text("thread id", thread_id.as_str())?;
                self.engine.delete_thread(thread_id).await
            }
            async fn delete_for_runs(&self, run_ids: &[$crate::ids::RunId]) -> $crate::Result<()> {
                run_ids
                    .iter()
                    .try_for_each(|r| $crate::engine::keys::text("run id", r.as_str()))?;
                self.engine.delete_for_runs(run_ids).await
            }
            async fn copy_thread(
                &self,
                source: &$crate::ids::ThreadId,
                target: &$crate::ids::ThreadId,
            ) -> $crate::Result<()> {
                $crate::engine::keys::text("thread id", source.as_str())?;
                $crate::engine::keys::text("thread id", target.as_str())?;
                self.engine.copy_thread(source, target).await
            }
            async fn prune(
                &self,
                thread_ids: &[$crate::ids::ThreadId],
                strategy: $crate::model::PruneStrategy,
            ) -> $crate::Result<()> {
                thread_ids
                    .iter()
                    .try_for_each(|t| $crate::engine::keys::text("thread id", t.as_str()))?;
                self.engine.prune(thread_ids, strategy).await
            }
            async fn delta_channel_history(
                &self,
                config: &$crate::model::CheckpointConfig,
                channels: &[$crate::ids::ChannelName],
            ) -> $crate::Result<
                std::collections::BTreeMap<
                    $crate::ids::ChannelName,
                    $crate::model::DeltaChannelHistory,
                >,
            > {
                $crate::engine::keys::config(config)?;
                $crate::engine::keys::channels(channels)?;
                self.engine.delta_channel_history(config, channels).await
            }
            fn store_config(&self) -> $crate::mode::StoreConfig {
                self.engine.store_config()
            }
            #[cfg(feature = "test-util")]
            async fn tamper_for_conformance(
                &self,
                thread_id: &$crate::ids::ThreadId,
                tamper: $crate::testing::Tamper,
            ) -> $crate::Result<bool> {
                self.engine.tamper(thread_id, tamper).await?;
                Ok(true)
            }
            #[cfg(feature = "test-util")]
            async fn discard_for_conformance(&self) -> $crate::Result<()> {
                self.engine.backend.discard().await
            }
        }
    };
}
pub(crate) use impl_saver;

/// Helpers of the database backends for converting column values; errors say which
/// backend, thread and column.
#[cfg_attr(
    not(any(feature = "sqlite", feature = "postgres")),
    allow(dead_code, reason = "only the database savers read columns")
)]
pub(crate) mod columns {
    use crate::error::{Error, Result};
    use crate::ids::CheckpointId;

    /// A checkpoint id stored as 16 bytes.
    pub(crate) fn checkpoint_id(backend: &str, thread: &str, bytes: &[u8]) -> Result<CheckpointId> {
        let arr: [u8; 16] = bytes.try_into().map_err(|_| Error::DamagedColumn {
            context: format!("{backend}: thread {thread}: checkpoint id column"),
            detail: format!("expected 16 bytes, found {}", bytes.len()),
        })?;
        Ok(CheckpointId::from_bytes(arr))
    }

    /// The parent id column of checkpoint `child`'s row, stored as 16 bytes; a damaged one
    /// names the checkpoint whose row holds it.
    pub(crate) fn parent_id(
        backend: &str,
        thread: &str,
        child: CheckpointId,
        bytes: &[u8],
    ) -> Result<CheckpointId> {
        let arr: [u8; 16] = bytes.try_into().map_err(|_| Error::DamagedColumn {
            context: format!("{backend}: thread {thread}: checkpoint {child}: parent id column"),
            detail: format!("expected 16 bytes, found {}", bytes.len()),
        })?;
        Ok(CheckpointId::from_bytes(arr))
    }

    /// An unsigned value the store keeps in a signed 64-bit column.
    pub(crate) fn i64_of(v: u64, what: &str) -> Result<i64> {
        i64::try_from(v)
            .map_err(|_| Error::InvalidArgument(format!("{what} {v} does not fit the store")))
    }

    /// A signed 64-bit column of `thread`'s rows read back as the unsigned value it stores;
    /// a negative one is a damaged store.
    pub(crate) fn u64_of(thread: &str, v: i64, what: &str) -> Result<u64> {
        u64::try_from(v).map_err(|_| Error::DamagedColumn {
            context: format!("thread {thread}: stored {what}"),
            detail: format!("{v} is negative"),
        })
    }
}

#[cfg(test)]
mod tests {
    //! The pointer path of message-list encoding (see [`Remembered`]).

    use std::sync::atomic::Ordering;

    use super::*;
    use crate::memory::MemoryBackend;
    use crate::mode::SnapshotFrequency;

    fn engine() -> Engine<MemoryBackend> {
        Engine::new_unchecked(
            MemoryBackend::default(),
            StoreConfig::delta(SnapshotFrequency::DEFAULT),
        )
    }

    fn items(texts: &[String]) -> Vec<Arc<[u8]>> {
        texts
            .iter()
            .map(|t| Arc::from(serde_json::to_vec(t).unwrap()))
            .collect()
    }

    fn texts(n: usize) -> Vec<String> {
        (0..n).map(|i| format!("message {i}")).collect()
    }

    /// The same bytes in new allocations: what the hash path sees.
    fn deep_copy(list: &[Arc<[u8]>]) -> Vec<Arc<[u8]>> {
        list.iter().map(|i| Arc::from(i.to_vec())).collect()
    }

    fn hashed(e: &Engine<MemoryBackend>) -> usize {
        e.hashed.load(Ordering::Relaxed)
    }

    /// The length of the thread's remembered snapshot, if any.
    async fn remembered(e: &Engine<MemoryBackend>, thread: &str) -> Option<usize> {
        let slot = e.slot(&ThreadId::new(thread));
        let guard = slot.lock().await;
        guard
            .as_ref()
            .and_then(|i| i.last_snapshot.as_ref())
            .map(|r| r.items.len())
    }

    /// Puts a checkpoint on `parent` storing `list` as the `messages` snapshot at `version`.
    async fn put_snapshot(
        e: &Engine<MemoryBackend>,
        parent: &CheckpointConfig,
        version: u64,
        list: &[Arc<[u8]>],
    ) -> Result<CheckpointConfig> {
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("messages".into(), ChannelVersion::new(version));
        cp.channel_values.insert(
            "messages".into(),
            Blob::Messages(MessagesBlob {
                kind: MessagesKind::Snapshot,
                items: list.to_vec(),
            }),
        );
        let nv = cp.channel_versions.clone();
        e.put(parent, cp, CheckpointMetadata::default(), &nv).await
    }

    async fn read_list(e: &Engine<MemoryBackend>, at: &CheckpointConfig) -> Vec<Arc<[u8]>> {
        let t = e.get_tuple(at).await.unwrap().unwrap();
        match &t.checkpoint.channel_values["messages"] {
            Blob::Messages(list) => list.items.clone(),
            other => panic!("not a message list: {other:?}"),
        }
    }

    /// Everything stored for a thread: value blobs and message rows.
    async fn stored(
        e: &Engine<MemoryBackend>,
        thread: &str,
    ) -> (Vec<Vec<u8>>, Vec<(u64, Vec<u8>)>) {
        let thread = ThreadId::new(thread);
        let blobs = e.backend.all_blob_values(&thread).await.unwrap();
        let messages = e
            .backend
            .all_messages(&thread)
            .await
            .unwrap()
            .into_iter()
            .map(|m| (m.seq, m.body))
            .collect();
        (blobs, messages)
    }

    #[tokio::test]
    async fn a_reused_list_is_stored_by_pointer_with_the_references_hashing_gives() {
        // Items 3 and 7 have equal bytes in different allocations: hashing stores one body.
        let mut t = texts(40);
        t[7] = t[3].clone();
        let first = items(&t);
        let mut second = first.clone();
        second.extend(items(&["appended".to_owned()]));

        let by_pointer = engine();
        let root = CheckpointConfig::latest("t");
        let c1 = put_snapshot(&by_pointer, &root, 1, &first).await.unwrap();
        assert_eq!(remembered(&by_pointer, "t").await, Some(40));
        let before = hashed(&by_pointer);
        let c2 = put_snapshot(&by_pointer, &c1, 2, &second).await.unwrap();
        assert_eq!(
            hashed(&by_pointer) - before,
            1,
            "only the appended item is hashed"
        );
        assert_eq!(read_list(&by_pointer, &c2).await, second);
        // The remembered list grew by the tail: the next append is taken by pointer too.
        assert_eq!(remembered(&by_pointer, "t").await, Some(41));
        let mut third = second.clone();
        third.extend(items(&["appended again".to_owned()]));
        let before = hashed(&by_pointer);
        let c3 = put_snapshot(&by_pointer, &c2, 3, &third).await.unwrap();
        assert_eq!(hashed(&by_pointer) - before, 1);
        assert_eq!(read_list(&by_pointer, &c3).await, third);

        let by_hash = engine();
        let c1 = put_snapshot(&by_hash, &root, 1, &deep_copy(&first))
            .await
            .unwrap();
        let before = hashed(&by_hash);
        let c2 = put_snapshot(&by_hash, &c1, 2, &deep_copy(&second))
            .await
            .unwrap();
        assert_eq!(hashed(&by_hash) - before, 41);
        put_snapshot(&by_hash, &c2, 3, &deep_copy(&third))
            .await
            .unwrap();

        assert_eq!(stored(&by_pointer, "t").await, stored(&by_hash, "t").await);
    }

    #[tokio::test]
    async fn a_changed_item_at_a_remembered_position_is_hashed() {
        let e = engine();
        let first = items(&texts(20));
        let c1 = put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &first)
            .await
            .unwrap();
        let mut second = first.clone();
        // Other bytes in a new `Arc`: a new body.
        second[3] = Arc::from(serde_json::to_vec("edited").unwrap());
        // The same bytes in a new `Arc`: hashed, and found.
        second[5] = Arc::from(first[5].to_vec());
        let before = hashed(&e);
        let c2 = put_snapshot(&e, &c1, 2, &second).await.unwrap();
        assert_eq!(hashed(&e) - before, 2);
        assert_eq!(read_list(&e, &c2).await, second);
        assert_eq!(read_list(&e, &c1).await, first);
        assert_eq!(stored(&e, "t").await.1.len(), 21);
    }

    #[tokio::test]
    async fn deleting_a_thread_forgets_its_remembered_list() {
        let e = engine();
        let list = items(&texts(10));
        put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &list)
            .await
            .unwrap();
        assert_eq!(remembered(&e, "t").await, Some(10));
        e.delete_thread(&ThreadId::new("t")).await.unwrap();
        assert_eq!(remembered(&e, "t").await, None);
        let before = hashed(&e);
        let c = put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &list)
            .await
            .unwrap();
        assert_eq!(
            hashed(&e) - before,
            10,
            "nothing is taken from the deleted thread"
        );
        assert_eq!(read_list(&e, &c).await, list);
        assert_eq!(stored(&e, "t").await.1.len(), 10);
    }

    /// A process with no index of a thread (here: one that forgot it) that reads the thread's
    /// head and then stores the next snapshot loads no body to index them: the read seeded the
    /// index, so the snapshot references the stored bodies (its items are new allocations, so
    /// they are hashed, not taken by pointer), stores only its new item, under a fresh number.
    #[tokio::test]
    async fn a_read_seeds_the_index_so_the_first_write_loads_no_body() {
        let e = engine();
        let list = items(&texts(30));
        let first = put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &list)
            .await
            .unwrap();
        // A body the head does not reference: the seeded index does not know it.
        let gone = items(&["dropped".to_owned()]);
        let mut with_gone = list.clone();
        with_gone.extend(gone.iter().cloned());
        let second = put_snapshot(&e, &first, 2, &with_gone).await.unwrap();
        let head = put_snapshot(&e, &second, 3, &list).await.unwrap();
        assert_eq!(stored(&e, "t").await.1.len(), 31);

        e.drop_index(&ThreadId::new("t"));
        let loads = || e.backend.message_loads.load(Ordering::Relaxed);
        let before = loads();
        let mut next = deep_copy(&read_list(&e, &head).await);
        next.extend(items(&["new".to_owned()]));
        let newest = put_snapshot(&e, &head, 4, &next).await.unwrap();
        assert_eq!(loads(), before, "the write loaded the thread's bodies");
        assert_eq!(read_list(&e, &newest).await, next);
        let seqs: Vec<u64> = stored(&e, "t").await.1.iter().map(|(s, _)| *s).collect();
        assert_eq!(seqs.len(), 32, "only the new body is stored");
        assert_eq!(seqs.last(), Some(&32), "under the next free number");
        // The body the seed did not know is stored again when reused: a duplicate, never a
        // wrong reference.
        let before = loads();
        let mut again = next.clone();
        again.extend(deep_copy(&gone));
        let last = put_snapshot(&e, &newest, 5, &again).await.unwrap();
        assert_eq!(loads(), before);
        assert_eq!(read_list(&e, &last).await, again);
        assert_eq!(stored(&e, "t").await.1.len(), 33);
    }

    /// Values read by key seed the message index too: after `get_channel_values` of a message
    /// list, the first write of the process loads no body.
    #[tokio::test]
    async fn values_read_by_key_seed_the_index() {
        let e = engine();
        let list = items(&texts(20));
        let head = put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &list)
            .await
            .unwrap();
        e.drop_index(&ThreadId::new("t"));
        let loads = || e.backend.message_loads.load(Ordering::Relaxed);
        let before = loads();
        let got = e
            .get_channel_values(&head, &[("messages".into(), ChannelVersion::new(1))])
            .await
            .unwrap()
            .unwrap();
        let Some(Blob::Messages(read)) = got.values().next() else {
            panic!("not a message list: {got:?}");
        };
        let mut next = deep_copy(&read.items);
        next.extend(items(&["new".to_owned()]));
        put_snapshot(&e, &head, 2, &next).await.unwrap();
        assert_eq!(loads(), before, "the write loaded the thread's bodies");
        assert_eq!(
            stored(&e, "t").await.1.len(),
            21,
            "only the new body is stored"
        );
    }

    /// Body collection decides again, after its epoch bump, which bodies are unreferenced: a
    /// body a write took by hash after the collector chose it stays (and with nothing left to
    /// delete, the bump is undone).
    #[tokio::test]
    async fn collection_keeps_bodies_referenced_since_it_chose_them() {
        let e = engine();
        let list = items(&texts(4));
        put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &list)
            .await
            .unwrap();
        let thread = ThreadId::new("t");
        let epoch = e.backend.thread_epoch(&thread).await.unwrap();
        e.backend
            .delete_messages(&thread, &[1, 2, 3, 4])
            .await
            .unwrap();
        assert_eq!(stored(&e, "t").await.1.len(), 4);
        // Nothing deleted, nothing changed: other processes keep their indexes.
        assert_eq!(e.backend.thread_epoch(&thread).await.unwrap(), epoch);
    }

    /// `delete_for_runs` finds a run through the run index, however many checkpoints other
    /// threads hold, and reads only its threads' rows (before, the memory saver scanned the
    /// whole store in pages).
    #[tokio::test]
    async fn delete_for_runs_reads_only_the_runs_threads() {
        let e = engine();
        let put = |run: &'static str, parent: CheckpointConfig| {
            let e = &e;
            async move {
                let mut cp = Checkpoint::empty();
                cp.channel_versions.insert("a".into(), 1.into());
                cp.channel_values
                    .insert("a".into(), Blob::json(&1).unwrap());
                let nv = cp.channel_versions.clone();
                let meta = CheckpointMetadata {
                    run_id: Some(RunId::new(run)),
                    ..CheckpointMetadata::default()
                };
                e.put(&parent, cp, meta, &nv).await.unwrap()
            }
        };
        let old = put("r1", CheckpointConfig::latest("old")).await;
        let mut at = CheckpointConfig::latest("new");
        for _ in 0..LIST_PAGE + 10 {
            at = put("r2", at).await;
        }
        let (scans, rows) = (
            e.backend.scans.load(Ordering::Relaxed),
            e.backend.rows_listed.load(Ordering::Relaxed),
        );
        e.delete_for_runs(&[RunId::new("r1")]).await.unwrap();
        assert!(e.get_tuple(&old).await.unwrap().is_none());
        assert!(e.get_tuple(&at).await.unwrap().is_some());
        // One read of the old thread's one row; the other thread is not read.
        assert_eq!(e.backend.scans.load(Ordering::Relaxed) - scans, 1);
        assert_eq!(e.backend.rows_listed.load(Ordering::Relaxed) - rows, 1);
    }

    /// Body collection keeps every body when a payload of the thread cannot be read (damaged,
    /// or a format from a newer build that may reference bodies): it cannot know what that
    /// payload needs.
    #[test]
    fn collection_keeps_every_body_beside_a_payload_it_cannot_read() {
        let refs = codec::encode_refs(MessagesKind::Snapshot, &[2, 3]);
        let json = codec::encode_inline_blob(&Blob::json(&1).unwrap()).unwrap();
        assert_eq!(
            unreferenced(&[1, 2, 3, 4], [refs.as_slice(), json.as_slice()]),
            vec![1, 4]
        );
        let mut damaged = refs.clone();
        let last = damaged.len() - 1;
        damaged[last] ^= 1;
        let newer = [0x35_u8, 0, 0, 0, 0, 0];
        for odd in [damaged.as_slice(), &newer[..], &[][..]] {
            assert_eq!(
                unreferenced(&[1, 2, 3, 4], [refs.as_slice(), odd]),
                Vec::<u64>::new()
            );
        }
    }

    /// Blob collection decides from the checkpoints a prune read when it began: a checkpoint
    /// put since then keeps the values it stored (collection is skipped; before, its new
    /// blob was unreferenced by those checkpoints and deleted, and it read without it).
    #[tokio::test]
    async fn collection_keeps_the_values_of_a_checkpoint_put_since_the_prune_read() {
        let e = engine();
        let t = ThreadId::new("t");
        let put = |parent: CheckpointConfig, channels: &'static [(&'static str, u64)]| {
            let e = &e;
            async move {
                let mut cp = Checkpoint::empty();
                for (c, v) in channels {
                    cp.channel_versions
                        .insert((*c).into(), ChannelVersion::new(*v));
                    cp.channel_values
                        .insert((*c).into(), Blob::json(v).unwrap());
                }
                let nv = cp.channel_versions.clone();
                e.put(&parent, cp, CheckpointMetadata::default(), &nv)
                    .await
                    .unwrap()
            }
        };
        let c1 = put(CheckpointConfig::latest("t"), &[("a", 1)]).await;
        let c2 = put(c1, &[("a", 2)]).await;
        let read_at_start = e.decoded_thread(&t).await.unwrap();
        let c3 = put(c2, &[("a", 2), ("b", 3)]).await;
        e.collect_garbage(&t, &read_at_start, &HashSet::new())
            .await
            .unwrap();
        let got = e.get_tuple(&c3).await.unwrap().unwrap();
        assert_eq!(
            got.checkpoint.channel_values.get(&ChannelName::new("b")),
            Some(&Blob::json(&3).unwrap())
        );
    }

    #[tokio::test]
    async fn a_delete_checked_against_a_stale_read_deletes_nothing() {
        check_delete_against_a_stale_read(&engine()).await;
    }

    #[tokio::test]
    async fn message_numbers_are_listed_without_their_bodies() {
        check_message_seqs(&engine()).await;
    }

    #[tokio::test]
    async fn ancestors_return_at_most_max_rows() {
        check_ancestors_bound(&engine()).await;
    }

    /// `delete_thread` keeps the thread's index slot while another call holds it, so a call
    /// after it uses the same slot, not a second index of the thread whose body numbers
    /// would collide with the first's; an unshared slot goes (before 2026-12-02 it always
    /// went).
    #[tokio::test]
    async fn delete_thread_keeps_an_index_slot_another_call_holds() {
        let e = engine();
        let t = ThreadId::new("t");
        let held = e.slot(&t);
        e.delete_thread(&t).await.expect("delete");
        assert!(Arc::ptr_eq(&held, &e.slot(&t)), "the same slot");
        drop(held);
        e.delete_thread(&t).await.expect("delete");
        let map = e.indexes.lock().expect("lock");
        assert!(!map.contains_key(&t), "an unshared slot goes");
    }

    #[tokio::test]
    async fn an_interrupted_prune_is_finished_by_the_next() {
        check_an_interrupted_prune_is_finished_by_the_next(&engine()).await;
    }

    /// A put refused for a version clash writes nothing, not even the message bodies it
    /// brought.
    #[tokio::test]
    async fn a_refused_put_stores_no_body() {
        let e = engine();
        let at = CheckpointConfig::latest("t");
        let mut first = Checkpoint::empty();
        first
            .channel_versions
            .insert("a".into(), ChannelVersion::new(1));
        first
            .channel_values
            .insert("a".into(), Blob::json(&1).unwrap());
        let nv = first.channel_versions.clone();
        let c1 = e
            .put(&at, first, CheckpointMetadata::default(), &nv)
            .await
            .unwrap();
        let mut clash = Checkpoint::empty();
        clash
            .channel_versions
            .insert("a".into(), ChannelVersion::new(1));
        clash
            .channel_values
            .insert("a".into(), Blob::json(&2).unwrap());
        clash
            .channel_versions
            .insert("m".into(), ChannelVersion::new(1));
        let list = [serde_json::json!({"type": "human", "content": "new", "id": "n"})];
        clash.channel_values.insert(
            "m".into(),
            Blob::messages(MessagesKind::Snapshot, &list).unwrap(),
        );
        let nv = clash.channel_versions.clone();
        let err = e
            .put(&c1, clash, CheckpointMetadata::default(), &nv)
            .await
            .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
        assert!(
            e.backend
                .all_messages(&ThreadId::new("t"))
                .await
                .unwrap()
                .is_empty()
        );
    }

    /// Puts a child of `parent` that stores channel `a` at version `v` (value `v`).
    async fn put_a(
        e: &Engine<MemoryBackend>,
        parent: CheckpointConfig,
        v: u64,
    ) -> CheckpointConfig {
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("a".into(), ChannelVersion::new(v));
        cp.channel_values
            .insert("a".into(), Blob::json(&v).unwrap());
        let nv = cp.channel_versions.clone();
        e.put(&parent, cp, CheckpointMetadata::default(), &nv)
            .await
            .unwrap()
    }

    /// A stored run length is only checksummed, so any number: resolving a run of `u64::MAX`
    /// bodies must fail as a missing body, not reserve memory for them up front.
    #[test]
    fn a_huge_stored_run_length_is_a_missing_body_not_an_allocation() {
        let thread = ThreadId::new("t");
        let cp = CheckpointId::from_bytes([7; 16]);
        for runs in [
            vec![(0, u64::MAX)],
            vec![(0, u64::MAX / 2), (5, u64::MAX / 2)],
        ] {
            let pending = Pending::Refs(MessagesKind::Snapshot, runs);
            match resolve(&thread, cp, &pending, &Bodies::default()) {
                Err(Error::Corrupt { detail, .. }) => {
                    assert_eq!(detail, "message body 0 is missing");
                }
                other => panic!("expected a missing body, got {:?}", other.map(|_| ())),
            }
        }
    }

    /// A history walk whose seed is 29 checkpoints back (the write-amp workload's deepest
    /// replay at F = 10: more than two checkpoints per update) reads its ancestors in one page:
    /// each page is a round trip on the database savers (at 2F + 4 rows a page it took two).
    #[tokio::test]
    async fn a_walk_over_a_snapshot_cycle_reads_one_page_of_ancestors() {
        use std::sync::atomic::Ordering;
        let e = engine();
        let messages = ChannelName::new("messages");
        let mut parent = CheckpointConfig::latest("t");
        for i in 0..30u64 {
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert(messages.clone(), ChannelVersion::new(i + 1));
            let mut nv = ChannelVersions::new();
            if i == 0 {
                cp.channel_values.insert(
                    messages.clone(),
                    Blob::messages(MessagesKind::Snapshot, &[serde_json::json!("hi")]).unwrap(),
                );
                nv = cp.channel_versions.clone();
            }
            parent = e
                .put(&parent, cp, CheckpointMetadata::default(), &nv)
                .await
                .unwrap();
        }
        e.backend.ancestor_pages.store(0, Ordering::Relaxed);
        let history = e
            .delta_channel_history(&parent, std::slice::from_ref(&messages))
            .await
            .unwrap();
        assert!(
            history[&messages].seed.is_some(),
            "the walk reached the seed"
        );
        assert_eq!(e.backend.ancestor_pages.load(Ordering::Relaxed), 1);
    }

    /// A read of the latest checkpoint (`get_channel_values`, `get_tuple_with_ancestry`) looks
    /// the latest up again when the one it found is deleted before its values are read, up to
    /// three lookups, then fails with a typed error instead of answering `None` (which says
    /// the namespace is empty).
    #[tokio::test]
    async fn a_latest_read_looks_up_three_times_then_fails_typed() {
        use std::sync::atomic::Ordering;
        async fn five() -> Engine<MemoryBackend> {
            let e = engine();
            let mut parent = CheckpointConfig::latest("t");
            for v in 1..=5u64 {
                parent = put_a(&e, parent, v).await;
            }
            e
        }
        let keys: Vec<(ChannelName, ChannelVersion)> = (1..=5u64)
            .map(|v| ("a".into(), ChannelVersion::new(v)))
            .collect();
        let latest = CheckpointConfig::latest("t");
        for (vanishing, remaining) in [(0, 5), (1, 4), (2, 3), (3, 2)] {
            let e = five().await;
            e.backend.vanish_latest.store(vanishing, Ordering::Relaxed);
            let values = e.get_channel_values(&latest, &keys).await;
            let t = five().await;
            t.backend.vanish_latest.store(vanishing, Ordering::Relaxed);
            let tuple = t.get_tuple_with_ancestry(&latest, 0).await;
            if vanishing < 3 {
                assert_eq!(values.unwrap().map(|v| v.len()), Some(5), "{vanishing}");
                let a = tuple.unwrap().unwrap().tuple.checkpoint.channel_values["a"].clone();
                assert_eq!(a, Blob::json(&remaining).unwrap(), "{vanishing}");
            } else {
                for err in [values.unwrap_err(), tuple.err().unwrap()] {
                    assert_eq!(err.kind(), crate::ErrorKind::Conflict, "{err}");
                }
            }
            for e in [&e, &t] {
                assert_eq!(
                    e.list(&ListQuery::thread("t"), false).await.unwrap().len(),
                    remaining
                );
            }
        }
    }

    /// The greatest channel version is the namespace's mark, read without listing a record,
    /// and it is a high-water mark: a prune that removes the checkpoint holding it leaves it.
    #[tokio::test]
    async fn the_greatest_version_is_a_mark_read_without_listing_records() {
        use std::sync::atomic::Ordering;
        let e = engine();
        let put = |parent: CheckpointConfig, v: u64| put_a(&e, parent, v);
        let first = put(CheckpointConfig::latest("t"), 1).await;
        let third = put(put(first.clone(), 2).await, 3).await;
        // A fork of the first checkpoint at 9, then the main line again at 4 (the latest).
        put(first, 9).await;
        put(third, 4).await;
        let (t, ns) = (ThreadId::new("t"), CheckpointNs::new(""));
        let listed = e.backend.rows_listed.load(Ordering::Relaxed);
        assert_eq!(e.max_channel_version(&t, &ns).await.unwrap(), 9);
        assert_eq!(e.backend.rows_listed.load(Ordering::Relaxed), listed);
        e.prune(std::slice::from_ref(&t), PruneStrategy::KeepLatest)
            .await
            .unwrap();
        assert_eq!(
            e.list(&ListQuery::thread("t"), false).await.unwrap().len(),
            1
        );
        assert_eq!(e.max_channel_version(&t, &ns).await.unwrap(), 9);
        e.delete_thread(&t).await.unwrap();
        assert_eq!(e.max_channel_version(&t, &ns).await.unwrap(), 0);
    }

    /// `list` pages its rows: a limited list reads as many rows as it returns, however long
    /// the thread, and a filtered one reads pages growing fourfold, never the whole thread
    /// when the matches are recent; either way the result is the unpaged one.
    #[tokio::test]
    async fn a_limited_list_reads_pages_not_the_whole_thread() {
        let e = engine();
        let mut at = CheckpointConfig::latest("t");
        for step in 0..200_u64 {
            let mut cp = Checkpoint::empty();
            cp.channel_versions
                .insert("a".into(), ChannelVersion::new(step + 1));
            cp.channel_values
                .insert("a".into(), Blob::json(&step).unwrap());
            let mut meta = CheckpointMetadata {
                step: i64::try_from(step).unwrap(),
                ..CheckpointMetadata::default()
            };
            if step % 50 == 0 {
                meta.extra.insert("mark".into(), true.into());
            }
            let nv = cp.channel_versions.clone();
            at = e.put(&at, cp, meta, &nv).await.unwrap();
        }
        let listed = || e.backend.rows_listed.load(Ordering::Relaxed);
        let steps = |ts: &[CheckpointTuple]| ts.iter().map(|t| t.metadata.step).collect::<Vec<_>>();
        let everything = e.list(&ListQuery::thread("t"), true).await.unwrap();
        assert_eq!(everything.len(), 200);

        let before = listed();
        let five = ListQuery {
            limit: Some(5),
            ..ListQuery::thread("t")
        };
        let got = e.list(&five, true).await.unwrap();
        assert_eq!(listed() - before, 5, "one page of five rows");
        assert_eq!(got, everything[..5]);
        let before = listed();
        let in_ns = ListQuery {
            checkpoint_ns: Some(CheckpointNs::root()),
            ..five.clone()
        };
        assert_eq!(e.list(&in_ns, true).await.unwrap(), everything[..5]);
        assert_eq!(listed() - before, 5);

        // The two newest marks are steps 150 and 100: rows 199..=100, reached by pages of
        // 2, 8, 32 and 128 rows (170 in all), never all 200.
        let marked = ListQuery {
            limit: Some(2),
            filter: [("mark".to_owned(), serde_json::Value::Bool(true))]
                .into_iter()
                .collect(),
            ..ListQuery::thread("t")
        };
        let before = listed();
        let got = e.list(&marked, true).await.unwrap();
        assert_eq!(steps(&got), [150, 100]);
        assert_eq!(listed() - before, 170);
        // Without a limit every row is read, in one page.
        let before = listed();
        let all_marks = e
            .list(
                &ListQuery {
                    limit: None,
                    ..marked
                },
                false,
            )
            .await
            .unwrap();
        assert_eq!(steps(&all_marks), [150, 100, 50, 0]);
        assert_eq!(listed() - before, 200);
    }

    /// A thread whose remembered snapshot belongs to a checkpoint that pruning (or
    /// `delete_for_runs`) removes, bodies included: the list is forgotten, and storing it
    /// again stores the bodies again.
    #[tokio::test]
    async fn pruning_or_deleting_runs_forgets_the_remembered_list() {
        for how in ["prune", "delete_for_runs"] {
            let e = engine();
            let list = items(&texts(10));
            let mut cp = Checkpoint::empty();
            cp.channel_versions.insert("messages".into(), 1.into());
            cp.channel_values.insert(
                "messages".into(),
                Blob::Messages(MessagesBlob {
                    kind: MessagesKind::Snapshot,
                    items: list.clone(),
                }),
            );
            let meta = CheckpointMetadata {
                run_id: Some(RunId::new("old")),
                ..CheckpointMetadata::default()
            };
            let nv = cp.channel_versions.clone();
            e.put(&CheckpointConfig::latest("t"), cp, meta, &nv)
                .await
                .unwrap();
            assert_eq!(remembered(&e, "t").await, Some(10));
            // A newer, unrelated root: the only checkpoint pruning keeps.
            let mut cp = Checkpoint::empty();
            cp.channel_versions.insert("a".into(), 1.into());
            cp.channel_values
                .insert("a".into(), Blob::json(&1).unwrap());
            let nv = cp.channel_versions.clone();
            let kept = e
                .put(
                    &CheckpointConfig::latest("t"),
                    cp,
                    CheckpointMetadata::default(),
                    &nv,
                )
                .await
                .unwrap();
            match how {
                "prune" => e
                    .prune(&[ThreadId::new("t")], PruneStrategy::KeepLatest)
                    .await
                    .unwrap(),
                _ => e.delete_for_runs(&[RunId::new("old")]).await.unwrap(),
            }
            // Every body is unreferenced: all are collected (the epoch bump keeps their numbers
            // from being trusted by a stale index).
            assert_eq!(
                stored(&e, "t").await.1.len(),
                0,
                "{how}: every body collected"
            );
            assert_eq!(remembered(&e, "t").await, None, "{how}");
            let c = put_snapshot(&e, &kept, 2, &list).await.unwrap();
            assert_eq!(read_list(&e, &c).await, list, "{how}");
            assert_eq!(stored(&e, "t").await.1.len(), 10, "{how}");
        }
    }

    #[tokio::test]
    async fn a_failed_commit_or_a_copy_forgets_the_remembered_list() {
        let e = engine();
        let list = items(&texts(10));
        let c1 = put_snapshot(&e, &CheckpointConfig::latest("t"), 1, &list)
            .await
            .unwrap();
        assert_eq!(remembered(&e, "t").await, Some(10));
        // Version 1 again with other bytes: a conflict, nothing written.
        let other = items(&texts(11));
        let err = put_snapshot(&e, &c1, 1, &other).await.unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Conflict, "{err}");
        assert_eq!(remembered(&e, "t").await, None);

        put_snapshot(&e, &CheckpointConfig::latest("u"), 1, &list)
            .await
            .unwrap();
        assert_eq!(remembered(&e, "u").await, Some(10));
        e.copy_thread(&ThreadId::new("t"), &ThreadId::new("u"))
            .await
            .unwrap();
        assert_eq!(remembered(&e, "u").await, None);
    }

    fn body_rows(seqs: &[u64]) -> Vec<BodyRow> {
        seqs.iter()
            .map(|&s| BodyRow::check(s, &codec::encode_body(format!("\"{s}\"").as_bytes())))
            .collect()
    }

    fn texts_of(run: &[Arc<[u8]>]) -> Vec<String> {
        run.iter()
            .map(|b| String::from_utf8(b.to_vec()).unwrap())
            .collect()
    }

    #[test]
    fn bodies_resolve_runs_and_name_the_first_missing_one() {
        let bodies = Bodies::from_rows(body_rows(&[1, 2, 3, 7, 8, 10]));
        assert_eq!(texts_of(bodies.run(2, 2).unwrap()), ["\"2\"", "\"3\""]);
        assert_eq!(texts_of(bodies.run(7, 2).unwrap()), ["\"7\"", "\"8\""]);
        assert_eq!(bodies.run(1, 5).unwrap_err(), 4);
        assert_eq!(bodies.run(8, 3).unwrap_err(), 9);
        assert_eq!(bodies.run(4, 1).unwrap_err(), 4);
        assert_eq!(bodies.run(11, 1).unwrap_err(), 11);
        assert_eq!(bodies.run(u64::MAX, 1).unwrap_err(), u64::MAX);
        assert!(bodies.run(5, 0).unwrap().is_empty());
    }

    /// Rows out of order or repeated (no backend returns them so, but nothing relies on it)
    /// are sorted and deduplicated, so that a run's ends being present still means the run is.
    #[test]
    fn bodies_sort_and_deduplicate_rows() {
        let bodies = Bodies::from_rows(body_rows(&[3, 1, 3, 1]));
        assert_eq!(bodies.run(1, 3).unwrap_err(), 2);
        assert_eq!(texts_of(bodies.run(3, 1).unwrap()), ["\"3\""]);
    }

    /// A damaged body fails the value that references it, as a typed error naming the body
    /// and the checkpoint resolving that value; values that do not reference it resolve.
    #[test]
    fn a_damaged_body_is_a_typed_error_naming_it() {
        let t = ThreadId::new("t");
        let cp = CheckpointId::generate();
        let mut rows = body_rows(&[1, 2]);
        rows.push(BodyRow::check(3, b"\x41\0\0\0\0x"));
        let bodies = Bodies::from_rows(rows);
        let refs = |runs: Vec<(u64, u64)>| Pending::Refs(MessagesKind::Snapshot, runs);
        assert!(resolve(&t, cp, &refs(vec![(1, 2)]), &bodies).is_ok());
        let err = resolve(&t, cp, &refs(vec![(1, 3)]), &bodies).unwrap_err();
        assert_eq!(err.kind(), crate::error::ErrorKind::Corrupt);
        assert!(err.to_string().contains("message body 3"), "{err}");
        assert!(err.to_string().contains(&cp.to_string()), "{err}");
        assert!(!err.to_string().contains("missing"), "{err}");
    }

    /// A chain longer than one `ancestors` page is read page by page without a gap or a
    /// repeat, and a cycle is reported even with an unbounded limit.
    #[tokio::test]
    async fn ancestor_chains_cross_pages_and_cycles_end_them() {
        let e = engine();
        let mut at = CheckpointConfig::latest("t");
        let mut ids = Vec::new();
        for _ in 0..ANCESTOR_PAGE + 40 {
            at = e
                .put(
                    &at,
                    Checkpoint::empty(),
                    CheckpointMetadata::default(),
                    &ChannelVersions::new(),
                )
                .await
                .unwrap();
            ids.extend(at.checkpoint_id);
        }
        ids.reverse();
        for limit in [
            ANCESTOR_PAGE,
            ANCESTOR_PAGE + 1,
            ANCESTOR_PAGE + 40,
            usize::MAX,
        ] {
            let got = e.get_ancestors_without_values(&at, limit).await.unwrap();
            let got: Vec<CheckpointId> = got.iter().map(|t| t.checkpoint.id).collect();
            assert_eq!(got, ids[..limit.min(ids.len())], "{limit}");
        }

        let (a, b) = (CheckpointId::generate(), CheckpointId::generate());
        for (id, parent) in [(a, b), (b, a)] {
            let mut cp = Checkpoint::empty();
            cp.id = id;
            let parent = CheckpointConfig::latest("cycle").with_checkpoint_id(parent);
            e.put(
                &parent,
                cp,
                CheckpointMetadata::default(),
                &ChannelVersions::new(),
            )
            .await
            .unwrap();
        }
        let from_a = CheckpointConfig::latest("cycle").with_checkpoint_id(a);
        let err = e
            .get_ancestors_without_values(&from_a, usize::MAX)
            .await
            .unwrap_err();
        assert!(
            matches!(err, Error::ParentCycle { checkpoint_id, .. } if checkpoint_id == a),
            "{err}"
        );
    }

    #[tokio::test]
    async fn the_pin_budget_bounds_what_remembered_lists_keep_alive() {
        let mut e = engine();
        let small = items(&texts(4));
        let per_item = pinned_bytes;
        let limit = per_item(&small) + 1;
        e.pins = Arc::new(PinBudget::new(limit));
        let big = items(&texts(8));
        let c = put_snapshot(&e, &CheckpointConfig::latest("big"), 1, &big)
            .await
            .unwrap();
        assert_eq!(remembered(&e, "big").await, None, "over the budget");
        let before = hashed(&e);
        put_snapshot(&e, &c, 2, &big).await.unwrap();
        assert_eq!(hashed(&e) - before, 8, "hashed, since not remembered");

        let c = put_snapshot(&e, &CheckpointConfig::latest("small"), 1, &small)
            .await
            .unwrap();
        assert_eq!(remembered(&e, "small").await, Some(4));
        assert_eq!(e.pins.used.load(Ordering::Relaxed), per_item(&small));
        e.delete_thread(&ThreadId::new("small")).await.unwrap();
        assert_eq!(
            e.pins.used.load(Ordering::Relaxed),
            0,
            "released with the index"
        );

        // Appending beyond the budget forgets the list and releases what it held.
        let c = put_snapshot(&e, &c, 1, &small).await.unwrap();
        assert_eq!(remembered(&e, "small").await, Some(4));
        let mut longer = small.clone();
        longer.extend(items(&["one more".to_owned()]));
        put_snapshot(&e, &c, 2, &longer).await.unwrap();
        assert_eq!(remembered(&e, "small").await, None);
        assert_eq!(e.pins.used.load(Ordering::Relaxed), 0);
    }
}
