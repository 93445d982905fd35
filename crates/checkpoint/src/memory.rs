//! The in-memory saver: the same engine and byte formats as the database savers, on ordered maps.
//!
//! Useful for tests and ephemeral graphs; it measures stored bytes exactly like the
//! database savers because it stores the same encoded rows.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use crate::engine::{
    Backend, BlobRow, BodyRead, BodyRow, CheckpointRow, Engine, IndexGuard, MessageRow, RowScan,
    ScanOrder, StorageStats, TupleRows, WriteRow, impl_saver, list_order, record_keys,
    runs_of_rows, unreferenced,
};
use crate::error::Result;
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, TaskId, TaskPath, ThreadId,
};
use crate::mode::{ChannelMode, SnapshotFrequency, StoreConfig};

type CpKey = (ThreadId, CheckpointNs, CheckpointId);
type BlobKey = (ThreadId, CheckpointNs, ChannelName, ChannelVersion);
type WriteKey = (ThreadId, CheckpointNs, CheckpointId, TaskId, i64);
/// Parent, record, metadata.
type CpValue = (Option<CheckpointId>, Vec<u8>, Vec<u8>);

#[derive(Default, Clone)]
struct Tables {
    config: Option<(ChannelMode, SnapshotFrequency)>,
    checkpoints: BTreeMap<CpKey, CpValue>,
    blobs: BTreeMap<BlobKey, Vec<u8>>,
    writes: BTreeMap<WriteKey, (ChannelName, TaskPath, Vec<u8>)>,
    messages: BTreeMap<(ThreadId, u64), Vec<u8>>,
    /// Message-store epochs of threads deleted or copied onto (absent: 0).
    epochs: BTreeMap<ThreadId, u64>,
    /// Version marks (`Backend::version_mark`; `None`: unknown).
    marks: BTreeMap<(ThreadId, CheckpointNs), Option<u64>>,
    /// The run index (`Backend::run_threads`): each run with a thread it put a checkpoint on,
    /// kept until the thread is deleted, as the database savers keep theirs.
    runs: BTreeSet<(crate::ids::RunId, ThreadId)>,
}

/// The map-backed row store.
#[derive(Default)]
pub(crate) struct MemoryBackend {
    tables: Mutex<Tables>,
    /// Checkpoint rows `checkpoints` has returned (what a paged list costs).
    pub(crate) rows_listed: std::sync::atomic::AtomicUsize,
    /// Calls of `checkpoints`, and the most rows one returned.
    pub(crate) scans: std::sync::atomic::AtomicUsize,
    pub(crate) largest_scan: std::sync::atomic::AtomicUsize,
    /// Calls of `all_messages` (what loading a thread's message index costs).
    pub(crate) message_loads: std::sync::atomic::AtomicUsize,
    /// Test hook: while above zero, a lookup of a namespace's latest checkpoint deletes the
    /// row it found before returning it (and counts down), as another process deleting it
    /// between the lookup and the read would.
    #[cfg(test)]
    pub(crate) vanish_latest: std::sync::atomic::AtomicUsize,
    /// Calls of `ancestors` (the pages a history walk reads).
    #[cfg(test)]
    pub(crate) ancestor_pages: std::sync::atomic::AtomicUsize,
}

impl MemoryBackend {
    /// The first `limit` rows of `rows` (already in the scan's order) that `scan` admits.
    fn page<'a>(
        &self,
        rows: impl Iterator<Item = (&'a CpKey, &'a CpValue)>,
        scan: &RowScan<'_>,
        limit: usize,
    ) -> Vec<CheckpointRow> {
        let rows: Vec<CheckpointRow> = rows
            .filter(|(k, _)| scan.admits(k.2, &k.0, &k.1))
            .take(limit)
            .map(|(k, v)| row(k, v))
            .collect();
        self.count_listed(rows.len());
        rows
    }

    fn count_listed(&self, n: usize) {
        use std::sync::atomic::Ordering::Relaxed;
        self.rows_listed.fetch_add(n, Relaxed);
        self.scans.fetch_add(1, Relaxed);
        self.largest_scan.fetch_max(n, Relaxed);
    }

    fn lock(&self) -> MutexGuard<'_, Tables> {
        match self.tables.lock() {
            Ok(g) => g,
            Err(p) => p.into_inner(),
        }
    }
}

/// The stored blobs of `keys` (absent keys left out).
fn blob_rows(
    t: &Tables,
    thread: &ThreadId,
    ns: &CheckpointNs,
    keys: &[(ChannelName, ChannelVersion)],
) -> Vec<BlobRow> {
    keys.iter()
        .filter_map(|(c, v)| {
            t.blobs
                .get(&(thread.clone(), ns.clone(), c.clone(), *v))
                .map(|data| BlobRow {
                    channel: c.clone(),
                    version: *v,
                    data: data.clone(),
                })
        })
        .collect()
}

fn check_guard(t: &Tables, thread: &ThreadId, guard: IndexGuard) -> Result<()> {
    guard.check(thread, t.epochs.get(thread).copied().unwrap_or(0))
}

fn row(k: &CpKey, v: &CpValue) -> CheckpointRow {
    CheckpointRow {
        thread_id: k.0.clone(),
        ns: k.1.clone(),
        id: k.2,
        parent: v.0,
        record: v.1.clone(),
        metadata: v.2.clone(),
    }
}

fn checkpoint_row(
    t: &Tables,
    thread: &ThreadId,
    ns: &CheckpointNs,
    id: Option<CheckpointId>,
) -> Option<CheckpointRow> {
    match id {
        Some(id) => {
            let k = (thread.clone(), ns.clone(), id);
            t.checkpoints.get(&k).map(|v| row(&k, v))
        }
        None => t
            .checkpoints
            .range(
                (thread.clone(), ns.clone(), CheckpointId::from_u128(0))
                    ..=(
                        thread.clone(),
                        ns.clone(),
                        CheckpointId::from_u128(u128::MAX),
                    ),
            )
            .next_back()
            .map(|(k, v)| row(k, v)),
    }
}

fn write_rows(
    t: &Tables,
    thread: &ThreadId,
    ns: &CheckpointNs,
    ids: &[CheckpointId],
) -> Vec<WriteRow> {
    let mut out = Vec::new();
    for id in ids {
        let lo = (thread.clone(), ns.clone(), *id, TaskId::new(""), i64::MIN);
        for (k, v) in t.writes.range(lo..) {
            if k.0 != *thread || k.1 != *ns || k.2 != *id {
                break;
            }
            out.push(WriteRow {
                checkpoint_id: *id,
                task_id: k.3.clone(),
                idx: k.4,
                channel: v.0.clone(),
                task_path: v.1.clone(),
                value: v.2.clone(),
            });
        }
    }
    out
}

fn body_rows(t: &Tables, thread: &ThreadId, runs: &[(u64, u64)]) -> Vec<BodyRow> {
    let mut out = Vec::new();
    for &(start, len) in runs {
        let end = start.saturating_add(len);
        for ((_, seq), body) in t
            .messages
            .range((thread.clone(), start)..(thread.clone(), end))
        {
            out.push(BodyRow::check(*seq, body));
        }
    }
    out
}

#[async_trait]
impl Backend for MemoryBackend {
    async fn read_config(&self) -> Result<Option<(ChannelMode, SnapshotFrequency)>> {
        Ok(self.lock().config)
    }

    async fn write_config(
        &self,
        mode: ChannelMode,
        frequency: SnapshotFrequency,
        expected: Option<(ChannelMode, SnapshotFrequency)>,
    ) -> Result<()> {
        let mut t = self.lock();
        if t.config == expected {
            t.config = Some((mode, frequency));
        }
        Ok(())
    }

    async fn checkpoint(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
    ) -> Result<Option<CheckpointRow>> {
        #[cfg(test)]
        if id.is_none() {
            use std::sync::atomic::Ordering::Relaxed;
            let mut t = self.lock();
            let found = checkpoint_row(&t, thread, ns, None);
            if let Some(r) = &found
                && self
                    .vanish_latest
                    .fetch_update(Relaxed, Relaxed, |n| n.checked_sub(1))
                    .is_ok()
            {
                t.checkpoints.remove(&(thread.clone(), ns.clone(), r.id));
            }
            return Ok(found);
        }
        Ok(checkpoint_row(&self.lock(), thread, ns, id))
    }

    async fn checkpoints(&self, scan: RowScan<'_>) -> Result<Vec<CheckpointRow>> {
        let t = self.lock();
        let limit = scan.limit.unwrap_or(usize::MAX);
        if scan.order == ScanOrder::Key {
            // The map's own order; a page starts right after the cursor.
            let start = match scan.after {
                Some((id, thread, ns)) => Bound::Excluded((thread.clone(), ns.clone(), *id)),
                None => Bound::Unbounded,
            };
            return Ok(self.page(t.checkpoints.range((start, Bound::Unbounded)), &scan, limit));
        }
        if let (Some(thread), Some(ns)) = (scan.thread, scan.ns) {
            // One namespace is a contiguous key range in id order: walk it backwards, so a
            // page costs its own length, not the thread's.
            let lo = (thread.clone(), ns.clone(), CheckpointId::from_u128(0));
            let hi = (
                thread.clone(),
                ns.clone(),
                CheckpointId::from_u128(u128::MAX),
            );
            return Ok(self.page(t.checkpoints.range(lo..=hi).rev(), &scan, limit));
        }
        let mut keys: Vec<&(ThreadId, CheckpointNs, CheckpointId)> = t
            .checkpoints
            .keys()
            .filter(|k| scan.admits(k.2, &k.0, &k.1))
            .collect();
        keys.sort_by_key(|k| list_order(k.2, &k.0, &k.1));
        let rows: Vec<CheckpointRow> = keys
            .into_iter()
            .take(limit)
            .filter_map(|k| t.checkpoints.get_key_value(k).map(|(k, v)| row(k, v)))
            .collect();
        self.count_listed(rows.len());
        Ok(rows)
    }

    async fn ancestors(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        start: CheckpointId,
        max: usize,
    ) -> Result<Vec<CheckpointRow>> {
        #[cfg(test)]
        self.ancestor_pages
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = self.lock();
        let mut out = Vec::new();
        let mut next = Some(start);
        while let Some(id) = next {
            if out.len() >= max {
                break;
            }
            let k = (thread.clone(), ns.clone(), id);
            let Some(v) = t.checkpoints.get(&k) else {
                break;
            };
            out.push(row(&k, v));
            next = v.0;
        }
        Ok(out)
    }

    async fn blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Vec<BlobRow>> {
        Ok(blob_rows(&self.lock(), thread, ns, keys))
    }

    async fn checkpoint_blobs(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: CheckpointId,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<(CheckpointRow, Vec<BlobRow>)>> {
        let t = self.lock();
        let k = (thread.clone(), ns.clone(), id);
        let Some(cp) = t.checkpoints.get(&k).map(|v| row(&k, v)) else {
            return Ok(None);
        };
        Ok(Some((cp, blob_rows(&t, thread, ns, keys))))
    }

    async fn writes(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<Vec<WriteRow>> {
        Ok(write_rows(&self.lock(), thread, ns, ids))
    }

    async fn existing(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        ids: &[CheckpointId],
    ) -> Result<std::collections::HashSet<CheckpointId>> {
        let t = self.lock();
        Ok(ids
            .iter()
            .filter(|id| {
                t.checkpoints
                    .contains_key(&(thread.clone(), ns.clone(), **id))
            })
            .copied()
            .collect())
    }

    async fn messages(
        &self,
        thread: &ThreadId,
        runs: &[(u64, u64)],
        _seeding: bool,
    ) -> Result<BodyRead> {
        // Read in process: hashing here or when the index is seeded costs the same.
        let t = self.lock();
        Ok(BodyRead {
            rows: body_rows(&t, thread, runs),
            epoch: Some(t.epochs.get(thread).copied().unwrap_or(0)),
        })
    }

    /// The five reads of the default under one lock: a delete on another thread of the
    /// runtime cannot remove the values or bodies of a checkpoint between them (SQLite reads
    /// them in one transaction, PostgreSQL re-checks the row).
    async fn tuple_rows(
        &self,
        thread: &ThreadId,
        ns: &CheckpointNs,
        id: Option<CheckpointId>,
        with_values: bool,
    ) -> Result<Option<TupleRows>> {
        let t = self.lock();
        let epoch = t.epochs.get(thread).copied().unwrap_or(0);
        let Some(row) = checkpoint_row(&t, thread, ns, id) else {
            return Ok(None);
        };
        let blobs = if with_values {
            blob_rows(&t, thread, ns, &record_keys(&row))
        } else {
            Vec::new()
        };
        let writes = write_rows(&t, thread, ns, &[row.id]);
        let runs = runs_of_rows(&blobs, &writes);
        let bodies = body_rows(&t, thread, &runs);
        Ok(Some(TupleRows {
            row,
            blobs,
            writes,
            bodies,
            epoch,
        }))
    }

    async fn next_message_seq(&self, thread: &ThreadId) -> Result<u64> {
        let t = self.lock();
        Ok(t.messages
            .range((thread.clone(), 0)..=(thread.clone(), u64::MAX))
            .next_back()
            .map_or(1, |((_, seq), _)| seq.saturating_add(1)))
    }

    async fn all_messages(&self, thread: &ThreadId) -> Result<Vec<MessageRow>> {
        self.message_loads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let t = self.lock();
        Ok(t.messages
            .range((thread.clone(), 0)..=(thread.clone(), u64::MAX))
            .map(|((_, seq), body)| MessageRow {
                seq: *seq,
                body: body.clone(),
            })
            .collect())
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
        let mut t = self.lock();
        check_guard(&t, &row.thread_id, guard)?;
        if parent_required
            && !row.parent.is_some_and(|p| {
                t.checkpoints
                    .contains_key(&(row.thread_id.clone(), row.ns.clone(), p))
            })
        {
            return Err(crate::engine::missing_parent(&row));
        }
        for m in &messages {
            if t.messages.contains_key(&(row.thread_id.clone(), m.seq)) {
                return Err(crate::Error::Conflict {
                    thread_id: row.thread_id.clone(),
                    detail: format!("message sequence {} is taken", m.seq),
                });
            }
        }
        // Every check before the first change: a refused put writes nothing.
        for b in &blobs {
            let key = (
                row.thread_id.clone(),
                row.ns.clone(),
                b.channel.clone(),
                b.version,
            );
            if t.blobs.get(&key).is_some_and(|old| *old != b.data) {
                return Err(crate::engine::version_clash(&row, &b.channel, b.version));
            }
        }
        for m in messages {
            t.messages.insert((row.thread_id.clone(), m.seq), m.body);
        }
        for b in blobs {
            t.blobs
                .entry((row.thread_id.clone(), row.ns.clone(), b.channel, b.version))
                .or_insert(b.data);
        }
        let key = (row.thread_id.clone(), row.ns.clone());
        let raised = match t.marks.get(&key) {
            Some(m) => m.map(|m| m.max(mark)),
            // A first mark is the record's only if the namespace has no other checkpoint.
            None => {
                let others = t
                    .checkpoints
                    .range(
                        (
                            key.0.clone(),
                            key.1.clone(),
                            CheckpointId::from_bytes([0; 16]),
                        )..,
                    )
                    .take_while(|(k, _)| k.0 == key.0 && k.1 == key.1)
                    .any(|(k, _)| k.2 != row.id);
                (!others).then_some(mark)
            }
        };
        t.marks.insert(key, raised);
        if let Some(run) = run {
            t.runs.insert((run, row.thread_id.clone()));
        }
        t.checkpoints.insert(
            (row.thread_id, row.ns, row.id),
            (row.parent, row.record, row.metadata),
        );
        Ok(())
    }

    async fn run_threads(&self, runs: &[crate::ids::RunId]) -> Result<Vec<ThreadId>> {
        let t = self.lock();
        let found: BTreeSet<ThreadId> = t
            .runs
            .iter()
            .filter(|(run, _)| runs.contains(run))
            .map(|(_, th)| th.clone())
            .collect();
        Ok(found.into_iter().collect())
    }

    async fn version_mark(&self, thread: &ThreadId, ns: &CheckpointNs) -> Result<Option<u64>> {
        Ok(self
            .lock()
            .marks
            .get(&(thread.clone(), ns.clone()))
            .copied()
            .flatten())
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
        let mut t = self.lock();
        if !t
            .checkpoints
            .contains_key(&(thread.clone(), ns.clone(), checkpoint))
        {
            return Ok(false);
        }
        check_guard(&t, thread, guard)?;
        for m in &messages {
            if t.messages.contains_key(&(thread.clone(), m.seq)) {
                return Err(crate::Error::Conflict {
                    thread_id: thread.clone(),
                    detail: format!("message sequence {} is taken", m.seq),
                });
            }
        }
        for m in messages {
            t.messages.insert((thread.clone(), m.seq), m.body);
        }
        for w in writes {
            let k = (thread.clone(), ns.clone(), checkpoint, w.task_id, w.idx);
            if w.idx < 0 || !t.writes.contains_key(&k) {
                t.writes.insert(k, (w.channel, w.task_path, w.value));
            }
        }
        Ok(true)
    }

    async fn delete_thread(&self, thread: &ThreadId) -> Result<()> {
        let mut t = self.lock();
        t.checkpoints.retain(|k, _| &k.0 != thread);
        t.blobs.retain(|k, _| &k.0 != thread);
        t.writes.retain(|k, _| &k.0 != thread);
        t.messages.retain(|k, _| &k.0 != thread);
        t.marks.retain(|k, _| &k.0 != thread);
        t.runs.retain(|(_, th)| th != thread);
        *t.epochs.entry(thread.clone()).or_insert(0) += 1;
        Ok(())
    }

    async fn thread_epoch(&self, thread: &ThreadId) -> Result<u64> {
        Ok(self.lock().epochs.get(thread).copied().unwrap_or(0))
    }

    async fn delete_checkpoints(
        &self,
        thread: &ThreadId,
        doomed: &[(CheckpointNs, CheckpointId)],
        expected: &[crate::engine::Expected],
    ) -> Result<bool> {
        let mut t = self.lock();
        let now: Vec<CheckpointRow> = t
            .checkpoints
            .iter()
            .filter(|(k, _)| &k.0 == thread)
            .map(|(k, v)| row(k, v))
            .collect();
        if crate::engine::forks_from_doomed(&now, expected, doomed) {
            return Ok(false);
        }
        for (ns, id) in doomed {
            t.checkpoints.remove(&(thread.clone(), ns.clone(), *id));
        }
        let doomed: std::collections::HashSet<(&CheckpointNs, &CheckpointId)> =
            doomed.iter().map(|(n, i)| (n, i)).collect();
        t.writes
            .retain(|k, _| !(&k.0 == thread && doomed.contains(&(&k.1, &k.2))));
        Ok(true)
    }

    async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> Result<()> {
        let mut t = self.lock();
        let cps: Vec<_> = t
            .checkpoints
            .iter()
            .filter(|(k, _)| &k.0 == source)
            .map(|(k, v)| ((target.clone(), k.1.clone(), k.2), v.clone()))
            .collect();
        let blobs: Vec<_> = t
            .blobs
            .iter()
            .filter(|(k, _)| &k.0 == source)
            .map(|(k, v)| ((target.clone(), k.1.clone(), k.2.clone(), k.3), v.clone()))
            .collect();
        let writes: Vec<_> = t
            .writes
            .iter()
            .filter(|(k, _)| &k.0 == source)
            .map(|(k, v)| {
                (
                    (target.clone(), k.1.clone(), k.2, k.3.clone(), k.4),
                    v.clone(),
                )
            })
            .collect();
        let msgs: Vec<_> = t
            .messages
            .iter()
            .filter(|(k, _)| &k.0 == source)
            .map(|(k, v)| ((target.clone(), k.1), v.clone()))
            .collect();
        if msgs
            .iter()
            .any(|(k, v)| t.messages.get(k).is_some_and(|old| old != v))
        {
            return Err(crate::engine::body_collision(source, target));
        }
        if blobs
            .iter()
            .any(|(k, v)| t.blobs.get(k).is_some_and(|old| old != v))
        {
            return Err(crate::engine::blob_collision(source, target));
        }
        if cps
            .iter()
            .any(|(k, v)| t.checkpoints.get(k).is_some_and(|old| old != v))
        {
            return Err(crate::engine::row_collision(source, target, "checkpoints"));
        }
        if writes
            .iter()
            .any(|(k, v)| t.writes.get(k).is_some_and(|old| old != v))
        {
            return Err(crate::engine::row_collision(
                source,
                target,
                "pending writes",
            ));
        }
        *t.epochs.entry(target.clone()).or_insert(0) += 1;
        // The target's marks rise to the source's; an unknown one on either side stays
        // unknown, and so does a source namespace that has checkpoints but no mark.
        let mut marks: BTreeMap<CheckpointNs, Option<u64>> = cps
            .iter()
            .map(|((_, ns, _), _)| (ns.clone(), None))
            .collect();
        for (k, v) in t.marks.iter().filter(|(k, _)| &k.0 == source) {
            marks.insert(k.1.clone(), *v);
        }
        for (ns, v) in marks {
            // A target namespace with checkpoints of its own but no mark is unknown, and stays so.
            let unknown_here = t
                .checkpoints
                .keys()
                .any(|(th, n, _)| th == target && *n == ns);
            let key = (target.clone(), ns);
            let merged = match t.marks.get(&key) {
                Some(old) => old.zip(v).map(|(a, b)| a.max(b)),
                None if unknown_here => None,
                None => v,
            };
            t.marks.insert(key, merged);
        }
        let runs: Vec<_> = t
            .runs
            .iter()
            .filter(|(_, th)| th == source)
            .map(|(run, _)| (run.clone(), target.clone()))
            .collect();
        t.runs.extend(runs);
        t.checkpoints.extend(cps);
        t.blobs.extend(blobs);
        t.writes.extend(writes);
        t.messages.extend(msgs);
        Ok(())
    }

    async fn blob_keys(
        &self,
        thread: &ThreadId,
    ) -> Result<Vec<(CheckpointNs, ChannelName, ChannelVersion)>> {
        Ok(self
            .lock()
            .blobs
            .keys()
            .filter(|k| &k.0 == thread)
            .map(|k| (k.1.clone(), k.2.clone(), k.3))
            .collect())
    }

    async fn delete_blobs(
        &self,
        thread: &ThreadId,
        keys: &[(CheckpointNs, ChannelName, ChannelVersion)],
        expected: &[crate::engine::Expected],
    ) -> Result<bool> {
        let mut t = self.lock();
        // Keys are ordered by (thread, namespace, id): the thread's checkpoints come sorted.
        let rows: Vec<CheckpointRow> = t
            .checkpoints
            .iter()
            .filter(|(k, _)| &k.0 == thread)
            .map(|(k, v)| row(k, v))
            .collect();
        let now = crate::engine::expected_of(rows.iter());
        if now != expected {
            return Ok(false);
        }
        for (ns, c, v) in keys {
            t.blobs.remove(&(thread.clone(), ns.clone(), c.clone(), *v));
        }
        Ok(true)
    }

    async fn all_write_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .lock()
            .writes
            .iter()
            .filter(|(k, _)| &k.0 == thread)
            .map(|(_, v)| v.2.clone())
            .collect())
    }

    async fn all_blob_values(&self, thread: &ThreadId) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .lock()
            .blobs
            .iter()
            .filter(|(k, _)| &k.0 == thread)
            .map(|(_, v)| v.clone())
            .collect())
    }

    async fn delete_messages(&self, thread: &ThreadId, seqs: &[u64]) -> Result<()> {
        let mut t = self.lock();
        let payloads = t
            .blobs
            .iter()
            .filter(|(k, _)| &k.0 == thread)
            .map(|(_, v)| v.as_slice())
            .chain(
                t.writes
                    .iter()
                    .filter(|(k, _)| &k.0 == thread)
                    .map(|(_, v)| v.2.as_slice()),
            );
        let dead = unreferenced(seqs, payloads);
        if dead.is_empty() {
            return Ok(());
        }
        // One lock: the bump and the deletes are one step, as a transaction would make them.
        *t.epochs.entry(thread.clone()).or_insert(0) += 1;
        for s in dead {
            t.messages.remove(&(thread.clone(), s));
        }
        Ok(())
    }

    #[cfg(feature = "test-util")]
    async fn tamper(
        &self,
        thread: &ThreadId,
        column: crate::engine::Column,
        bytes: Vec<u8>,
    ) -> Result<()> {
        use crate::engine::Column;
        let mut t = self.lock();
        let t = &mut *t;
        match column {
            Column::BlobData => t
                .blobs
                .iter_mut()
                .filter(|(k, _)| &k.0 == thread)
                .for_each(|(_, v)| v.clone_from(&bytes)),
            Column::WriteValue => t
                .writes
                .iter_mut()
                .filter(|(k, _)| &k.0 == thread)
                .for_each(|(_, v)| v.2.clone_from(&bytes)),
            Column::MessageBody => t
                .messages
                .iter_mut()
                .filter(|(k, _)| &k.0 == thread)
                .for_each(|(_, v)| v.clone_from(&bytes)),
            Column::Metadata => t
                .checkpoints
                .iter_mut()
                .filter(|(k, _)| &k.0 == thread)
                .for_each(|(_, v)| v.2.clone_from(&bytes)),
        }
        Ok(())
    }

    async fn stats(&self, thread: &ThreadId) -> Result<StorageStats> {
        let t = self.lock();
        let mut s = StorageStats::default();
        for (k, v) in t.checkpoints.iter().filter(|(k, _)| &k.0 == thread) {
            let _ = k;
            s.checkpoint_bytes += v.1.len() as u64 + if v.0.is_some() { 16 } else { 0 };
            s.metadata_bytes += v.2.len() as u64;
            s.rows += 1;
        }
        for (_, v) in t.blobs.iter().filter(|(k, _)| &k.0 == thread) {
            s.blob_bytes += v.len() as u64;
            s.rows += 1;
        }
        for (_, v) in t.writes.iter().filter(|(k, _)| &k.0 == thread) {
            s.write_bytes += (v.0.as_str().len() + v.1.as_str().len() + v.2.len()) as u64;
            s.rows += 1;
        }
        for (_, v) in t.messages.iter().filter(|(k, _)| &k.0 == thread) {
            s.message_bytes += v.len() as u64;
            s.rows += 1;
        }
        Ok(s)
    }
}

/// The in-memory saver.
///
/// ```
/// # tokio_test_block_on(async {
/// use antler_checkpoint::{MemorySaver, StoreConfig, Saver, CheckpointConfig};
/// let saver = MemorySaver::new(StoreConfig::full());
/// assert!(saver.get_tuple(&CheckpointConfig::latest("t1")).await?.is_none());
/// # Ok::<(), antler_checkpoint::Error>(())
/// # });
/// # fn tokio_test_block_on<F: std::future::Future>(f: F) -> F::Output {
/// #     tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(f)
/// # }
/// ```
pub struct MemorySaver {
    engine: Engine<MemoryBackend>,
}

impl MemorySaver {
    /// An empty store recording `config`.
    pub fn new(config: StoreConfig) -> Self {
        let tables = Tables {
            config: Some((config.mode, config.snapshot_frequency)),
            ..Tables::default()
        };
        // Opening a fresh map never waits and never fails: the engine only reads the config back.
        let backend = MemoryBackend {
            tables: Mutex::new(tables),
            ..MemoryBackend::default()
        };
        Self {
            engine: Engine::new_unchecked(backend, config),
        }
    }

    /// Payload bytes stored for a thread.
    ///
    /// # Errors
    /// Never fails for the memory saver; the signature matches the database savers.
    pub async fn storage_stats(&self, thread: &ThreadId) -> Result<StorageStats> {
        self.engine.stats(thread).await
    }
}

impl std::fmt::Debug for MemorySaver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemorySaver")
            .field("config", &self.engine.store_config())
            .finish_non_exhaustive()
    }
}

impl_saver!(MemorySaver);
