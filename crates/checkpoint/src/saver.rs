//! The [`Saver`] trait: the storage contract the runtime relies on (runtime-spec §4.2, §5.5, §5.8).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use async_trait::async_trait;

use crate::blob::Blob;
use crate::error::{Error, Result};
use crate::ids::{ChannelName, ChannelVersion, CheckpointNs, RunId, TaskId, TaskPath, ThreadId};
use crate::mode::StoreConfig;
use crate::model::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointTuple,
    DeltaChannelHistory, ListQuery, PruneStrategy, RELATIVE_RECORD_V, TupleWithAncestry,
    inherited_keys,
};

/// A checkpoint store. Object safe (`Arc<dyn Saver>`), `Send + Sync`, async.
///
/// Contract, shared by every implementation and pinned by the conformance suite
/// (`antler_checkpoint::testing`, feature `test-util`):
///
/// - **keys**: a thread id, namespace, channel name, task id, task path or run id holding a
///   NUL character is [`Error::InvalidArgument`](crate::Error::InvalidArgument) on every
///   saver, before anything is read or written (PostgreSQL's text columns cannot hold one).
/// - **put** stores `checkpoint` under `config.thread_id`/`config.checkpoint_ns`;
///   `config.checkpoint_id` is the *parent*. Values are stored only for the
///   channels in `new_versions`; a channel whose version did not move keeps
///   the value stored with that version earlier. Returns the new address.
///   Values are keyed by `(channel, version)` within a thread and namespace, so
///   **channel versions must be unique within a thread across branches**, not
///   only increasing: two forks that store the same version with different
///   values make the second `put` fail with [`Error::Conflict`](crate::Error::Conflict)
///   (nothing written) instead of sharing a value. Re-putting an identical value is fine.
///   A relative record ([`RELATIVE_RECORD_V`](crate::RELATIVE_RECORD_V)) is completed from
///   its parent's, so its parent must exist in the namespace when the put commits:
///   otherwise the put fails with [`Error::MissingParent`](crate::Error::MissingParent)
///   (nothing written), also when a delete of the parent committed while the put waited;
///   one without a parent is [`Error::InvalidArgument`](crate::Error::InvalidArgument).
/// - **put_writes** attaches writes of one task to an existing checkpoint
///   (an unknown checkpoint is an error, also for an empty list of writes, which stores
///   nothing). Regular writes are keyed
///   `(task_id, idx)` and insert-if-absent; control writes (`__error__`,
///   `__scheduled__`, `__interrupt__`, `__resume__`) take fixed negative
///   indexes and are upserts.
/// - **get_tuple** returns the addressed checkpoint, or the latest of the
///   namespace when `checkpoint_id` is `None`; pending writes in
///   `(task_path, task_id, idx)` order. Absent → `Ok(None)`; unreadable → `Err`,
///   never an empty state.
/// - **get_tuple_without_values** is `get_tuple` with `checkpoint.channel_values`
///   left empty: same addressing, mode gate, pending writes (with their values)
///   and typed errors, but no value blob and no message body of the checkpoint's
///   channels is read, so a damaged value does not fail it (a damaged record,
///   metadata or write still does).
/// - **get_ancestors_without_values** is a chain of `get_tuple_without_values`
///   reads along parent pointers (the addressed checkpoint first), without
///   pending writes, in as few backend round trips as the saver can manage.
/// - **get_channel_values** returns the values `put` stored for given
///   `(channel, version)` keys of a thread and namespace, wherever along the
///   parent path they were stored.
/// - **list** returns newest first (by checkpoint id), filtered, then limited;
///   **list_without_values** is the same list without values or pending writes.
/// - **max_channel_version** is at least the greatest channel version of every
///   checkpoint stored in a thread's namespace (0 for none): a new branch takes
///   versions above it, which keeps them unique across branches.
/// - **delete_for_runs**, **copy_thread** and **prune** keep every remaining
///   delta checkpoint readable (runtime-spec §5.8) or fail; they never
///   silently truncate history.
/// - **delta_channel_history** is the walk of runtime-spec §5.5.
#[async_trait]
pub trait Saver: Send + Sync {
    /// The addressed checkpoint (latest when no id), or `None` when it does not exist.
    async fn get_tuple(&self, config: &CheckpointConfig) -> Result<Option<CheckpointTuple>>;

    /// The addressed checkpoint like [`get_tuple`](Saver::get_tuple), but with
    /// `checkpoint.channel_values` empty; `None` when it does not exist.
    ///
    /// For a caller that already holds the checkpoint's channel values (the runtime's
    /// hot-state cache) and only needs the id, versions, metadata, parent and pending
    /// writes: its cost does not grow with the size of the stored values (a delta
    /// snapshot of thousands of messages is neither fetched nor decoded).
    /// Pending writes come back complete, message lists included.
    ///
    /// The default implementation calls `get_tuple` and drops the values, so it returns the
    /// right tuple but does read them (and reports their corruption); the savers of this
    /// crate override it.
    ///
    /// # Errors
    /// The same as [`get_tuple`](Saver::get_tuple) (mode gate, corrupt record, metadata
    /// or write), except that the value blobs and their message bodies are not read,
    /// so their corruption is not detected here.
    async fn get_tuple_without_values(
        &self,
        config: &CheckpointConfig,
    ) -> Result<Option<CheckpointTuple>> {
        let mut tuple = self.get_tuple(config).await?;
        if let Some(t) = tuple.as_mut() {
            t.checkpoint.channel_values.clear();
        }
        Ok(tuple)
    }

    /// The addressed checkpoint followed by its ancestors along parent pointers, nearest
    /// first, at most `limit` tuples, each without channel values and without pending writes.
    ///
    /// For a caller that needs the records of a checkpoint's ancestry (versions, versions
    /// seen, metadata, parent) but neither values nor writes, such as the graph runtime
    /// completing a record stored relative to its parent: one call instead of one
    /// [`get_tuple_without_values`](Saver::get_tuple_without_values) per ancestor.
    ///
    /// - Addressing is that of [`get_tuple`](Saver::get_tuple): `config.checkpoint_id`, or the
    ///   latest checkpoint of the namespace when it is `None`. The ancestors are those of the
    ///   same thread and namespace.
    /// - Each tuple is what `get_tuple_without_values` returns for that checkpoint with
    ///   `pending_writes` emptied: `checkpoint` (record, `channel_values` empty), `metadata`,
    ///   `config` and `parent_config`.
    /// - An unknown thread, namespace or checkpoint, and `limit == 0`, give an empty list.
    /// - The chain ends at a root (no parent), after `limit` tuples, or before a parent that
    ///   does not exist. So a list shorter than `limit` whose last tuple names a parent means
    ///   that parent is missing; the caller decides whether that is an error.
    ///
    /// Whether pending writes are read at all is up to the implementation: the default
    /// implementation reads each tuple with `get_tuple_without_values` (so a damaged write
    /// fails it), while the savers of this crate read neither writes nor values (one
    /// recursive query for the chain on SQLite and PostgreSQL).
    ///
    /// # Errors
    /// As `get_tuple_without_values` for every checkpoint of the chain, never a shorter list:
    /// a damaged record or metadata is [`Error::Corrupt`](crate::Error::Corrupt) naming the
    /// thread and that checkpoint, a delta checkpoint in a full-mode store is
    /// [`Error::CheckpointModeMismatch`](crate::Error::CheckpointModeMismatch), and a parent
    /// pointer leading back to a checkpoint already in the chain is
    /// [`Error::ParentCycle`](crate::Error::ParentCycle).
    async fn get_ancestors_without_values(
        &self,
        config: &CheckpointConfig,
        limit: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        // One read per checkpoint: correct for any implementation, and what the savers of
        // this crate replace with a single chain query.
        let mut out: Vec<CheckpointTuple> = Vec::new();
        let mut seen = HashSet::new();
        let mut next = config.clone();
        while out.len() < limit {
            let Some(mut tuple) = self.get_tuple_without_values(&next).await? else {
                break;
            };
            tuple.pending_writes.clear();
            seen.insert(tuple.checkpoint.id);
            let parent = tuple.parent_config.clone();
            out.push(tuple);
            let Some(parent) = parent else { break };
            let Some(parent_id) = parent.checkpoint_id else {
                break;
            };
            if out.len() < limit && seen.contains(&parent_id) {
                return Err(Error::ParentCycle {
                    thread_id: config.thread_id.clone(),
                    checkpoint_id: parent_id,
                });
            }
            next = parent;
        }
        Ok(out)
    }

    /// The addressed checkpoint with its values, its ancestors, and the values its record
    /// inherits from them: everything a reader of a relative record
    /// ([`RELATIVE_RECORD_V`](crate::RELATIVE_RECORD_V)) needs, in one call.
    ///
    /// Returns `None` when the checkpoint does not exist (or was deleted while it was read);
    /// otherwise a [`TupleWithAncestry`] whose `tuple` is what [`get_tuple`](Saver::get_tuple)
    /// returns; whose `ancestors`, for a relative record, are what
    /// [`get_ancestors_without_values`](Saver::get_ancestors_without_values) returns from the
    /// tuple's parent with `limit`, cut after the first full record (none for a full record);
    /// and whose `inherited` maps every key [`inherited_keys`] finds in the record and those
    /// ancestors to the value stored under it (what
    /// [`get_channel_values`](Saver::get_channel_values) finds), or to `None`.
    ///
    /// The graph runtime reads every checkpoint it needs with values this way: otherwise a
    /// cold read of a relative record costs three calls (the tuple, its ancestors, the values
    /// stored by them). The savers of this crate read the checkpoint row, its writes and its
    /// ancestors together (one statement on PostgreSQL, one read transaction on SQLite), then
    /// every value it holds and the message bodies they reference; the default
    /// implementation makes the three calls.
    ///
    /// ```
    /// use antler_checkpoint::{Blob, ChannelVersion, Checkpoint, CheckpointConfig, CheckpointMetadata, MemorySaver, RELATIVE_RECORD_V, Saver, StoreConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(async {
    /// let saver = MemorySaver::new(StoreConfig::full());
    /// // A full record with `topic` and `step`, then a relative one listing only `step`.
    /// let mut first = Checkpoint::empty();
    /// first.channel_versions.insert("topic".into(), ChannelVersion::new(1));
    /// first.channel_versions.insert("step".into(), ChannelVersion::new(1));
    /// first.channel_values.insert("topic".into(), Blob::json(&"rust")?);
    /// first.channel_values.insert("step".into(), Blob::json(&1)?);
    /// let versions = first.channel_versions.clone();
    /// let at = saver.put(&CheckpointConfig::latest("t"), first, CheckpointMetadata::default(), &versions).await?;
    /// let mut second = Checkpoint::empty();
    /// second.v = RELATIVE_RECORD_V;
    /// second.channel_versions.insert("step".into(), ChannelVersion::new(2));
    /// second.channel_values.insert("step".into(), Blob::json(&2)?);
    /// let versions = second.channel_versions.clone();
    /// saver.put(&at, second, CheckpointMetadata::default(), &versions).await?;
    ///
    /// let read = saver.get_tuple_with_ancestry(&CheckpointConfig::latest("t"), 8).await?.expect("exists");
    /// assert_eq!(read.tuple.checkpoint.channel_values["step"].decode_json::<i64>()?, 2);
    /// assert_eq!(read.ancestors.len(), 1);
    /// let topic = read.inherited[&("topic".into(), ChannelVersion::new(1))].as_ref().expect("stored");
    /// assert_eq!(topic.decode_json::<String>()?, "rust");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).expect("example");
    /// ```
    ///
    /// # Errors
    /// Those of the three calls: a damaged record, metadata, write, value or body is
    /// [`Error::Corrupt`](crate::Error::Corrupt) naming the thread and a checkpoint (an
    /// inherited value's damage names the addressed one, for the savers of this crate), a
    /// parent pointer cycle among the ancestors is
    /// [`Error::ParentCycle`](crate::Error::ParentCycle), and in a full-mode store a delta
    /// checkpoint is [`Error::CheckpointModeMismatch`](crate::Error::CheckpointModeMismatch).
    /// The savers of this crate decode and check ancestors only up to the first full record,
    /// so damage beyond it does not fail their read; the default implementation reads (and
    /// checks) up to `limit` ancestors before it cuts the chain.
    async fn get_tuple_with_ancestry(
        &self,
        config: &CheckpointConfig,
        limit: usize,
    ) -> Result<Option<TupleWithAncestry>> {
        get_tuple_with_ancestry_default(self, config, limit).await
    }

    /// The values `put` stored for `keys` in the thread and namespace of `config`: for each
    /// `(channel, version)` whose value was stored, that value (a message list with its
    /// bodies); keys without a stored value are left out. `None` when the checkpoint `config`
    /// names (the latest when its id is `None`) does not exist.
    ///
    /// For a reader that knows which version of each channel a checkpoint holds but whose
    /// record does not carry every value: a relative record of the graph runtime lists only
    /// the channels its step changed, and the rest were stored by ancestors.
    ///
    /// `keys` are meant to be versions the checkpoint holds (from its record and its
    /// ancestors'), which are always stored on its parent path. The savers of this crate read
    /// the checkpoint's row and the keys' values in one snapshot (one query on SQLite and
    /// PostgreSQL, plus one for message bodies), however far back the values were stored, so
    /// a concurrent delete of the checkpoint gives `None`, never fewer values. The default
    /// implementation walks the parent path and reads each record that lists a wanted key with
    /// `get_tuple`, stopping once every key is found or passed (versions grow along a parent
    /// path, so an ancestor listing a channel below the wanted version ends the search for
    /// that key); it finds only keys stored on that path.
    ///
    /// ```
    /// use antler_checkpoint::{Blob, ChannelVersion, Checkpoint, CheckpointConfig, CheckpointMetadata, MemorySaver, Saver, StoreConfig};
    ///
    /// # tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(async {
    /// let saver = MemorySaver::new(StoreConfig::full());
    /// // The first checkpoint stores `topic` at version 1; the second changes only `step`.
    /// let mut first = Checkpoint::empty();
    /// first.channel_versions.insert("topic".into(), ChannelVersion::new(1));
    /// first.channel_values.insert("topic".into(), Blob::json(&"rust")?);
    /// let versions = first.channel_versions.clone();
    /// let at = saver.put(&CheckpointConfig::latest("t"), first, CheckpointMetadata::default(), &versions).await?;
    /// let mut second = Checkpoint::empty();
    /// second.channel_versions.insert("step".into(), ChannelVersion::new(2));
    /// second.channel_values.insert("step".into(), Blob::json(&2)?);
    /// let versions = second.channel_versions.clone();
    /// let head = saver.put(&at, second, CheckpointMetadata::default(), &versions).await?;
    ///
    /// let key = ("topic".into(), ChannelVersion::new(1));
    /// let values = saver.get_channel_values(&head, std::slice::from_ref(&key)).await?.expect("head exists");
    /// assert_eq!(values[&key].decode_json::<String>()?, "rust");
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// # }).expect("example");
    /// ```
    ///
    /// # Errors
    /// As `get_tuple`: a damaged value or body is [`Error::Corrupt`](crate::Error::Corrupt)
    /// naming the thread and a checkpoint (the one `config` names, for the savers of this
    /// crate); in a full-mode store, a delta checkpoint is
    /// [`Error::CheckpointModeMismatch`](crate::Error::CheckpointModeMismatch).
    async fn get_channel_values(
        &self,
        config: &CheckpointConfig,
        keys: &[(ChannelName, ChannelVersion)],
    ) -> Result<Option<BTreeMap<(ChannelName, ChannelVersion), Blob>>> {
        /// Records per ancestor read: the graph runtime writes a full record at least every 8.
        const CHAIN: usize = 8;
        let mut want: BTreeSet<(ChannelName, ChannelVersion)> = keys.iter().cloned().collect();
        let mut out = BTreeMap::new();
        let mut seen = HashSet::new();
        let mut next = config.clone();
        let mut first = true;
        loop {
            let chain = self.get_ancestors_without_values(&next, CHAIN).await?;
            if first && chain.is_empty() {
                return Ok(None);
            }
            first = false;
            for t in &chain {
                if want.is_empty() {
                    break;
                }
                if !seen.insert(t.checkpoint.id) {
                    return Err(Error::ParentCycle {
                        thread_id: config.thread_id.clone(),
                        checkpoint_id: t.checkpoint.id,
                    });
                }
                let listed = &t.checkpoint.channel_versions;
                let hits: Vec<(ChannelName, ChannelVersion)> = want
                    .iter()
                    .filter(|(c, v)| listed.get(c) == Some(v))
                    .cloned()
                    .collect();
                if !hits.is_empty() {
                    let at = CheckpointConfig {
                        checkpoint_id: Some(t.checkpoint.id),
                        ..config.clone()
                    };
                    if let Some(full) = self.get_tuple(&at).await? {
                        for key in hits {
                            if let Some(b) = full.checkpoint.channel_values.get(&key.0) {
                                out.insert(key.clone(), b.clone());
                            }
                            want.remove(&key);
                        }
                    }
                }
                want.retain(|(c, v)| listed.get(c).is_none_or(|have| have > v));
            }
            let parent = chain.last().and_then(|t| t.parent_config.clone());
            match parent {
                Some(p) if chain.len() == CHAIN && !want.is_empty() => next = p,
                _ => break,
            }
        }
        Ok(Some(out))
    }

    /// Checkpoints matching `query`, newest first.
    ///
    /// Given a thread and a namespace, the savers of this crate read about `query.limit`
    /// checkpoint rows however long the thread is (more only while `query.filter` rejects
    /// rows); a wider query pages too, but the database sorts the rows it spans for each page.
    async fn list(&self, query: &ListQuery) -> Result<Vec<CheckpointTuple>>;

    /// [`list`](Saver::list) with every tuple's `channel_values` and `pending_writes` empty:
    /// the ids, versions, versions seen, metadata and parents of the matching checkpoints.
    ///
    /// For a caller that scans records, not states (the graph runtime finding the greatest
    /// channel version of a thread before it forks one): no value blob, message body or write
    /// is read, so the cost is one small row per checkpoint.
    ///
    /// The default implementation calls `list` and drops the values and writes, so it returns
    /// the right tuples but does read them; the savers of this crate override it.
    ///
    /// # Errors
    /// The same as [`list`](Saver::list) (mode gate, corrupt record or metadata), except that
    /// values and writes are not read, so their corruption is not detected here.
    async fn list_without_values(&self, query: &ListQuery) -> Result<Vec<CheckpointTuple>> {
        let mut tuples = self.list(query).await?;
        for t in &mut tuples {
            t.checkpoint.channel_values.clear();
            t.pending_writes.clear();
        }
        Ok(tuples)
    }

    /// At least the greatest channel version of any checkpoint stored in `checkpoint_ns` of
    /// `thread_id` (0 when there is none); the versions of a new branch start above it.
    ///
    /// The default lists the namespace's checkpoints without values (a read of every record).
    /// The savers of this crate keep a high-water mark per thread and namespace instead, raised
    /// in the transaction of every `put` and read with one key lookup: it does not go down when
    /// `prune` or `delete_for_runs` removes checkpoints, is raised to the source's by
    /// `copy_thread`, and is forgotten by `delete_thread`.
    async fn max_channel_version(
        &self,
        thread_id: &ThreadId,
        checkpoint_ns: &CheckpointNs,
    ) -> Result<u64> {
        let query = ListQuery {
            thread_id: Some(thread_id.clone()),
            checkpoint_ns: Some(checkpoint_ns.clone()),
            ..ListQuery::default()
        };
        Ok(max_listed_version(&self.list_without_values(&query).await?))
    }

    /// Stores a checkpoint whose parent is `config.checkpoint_id`; see the trait docs.
    async fn put(
        &self,
        config: &CheckpointConfig,
        checkpoint: Checkpoint,
        metadata: CheckpointMetadata,
        new_versions: &ChannelVersions,
    ) -> Result<CheckpointConfig>;

    /// Stores the writes of one task against the checkpoint `config` addresses.
    async fn put_writes(
        &self,
        config: &CheckpointConfig,
        writes: Vec<(ChannelName, Blob)>,
        task_id: &TaskId,
        task_path: &TaskPath,
    ) -> Result<()>;

    /// Deletes every checkpoint, write and blob of a thread (all namespaces). Unknown thread → no-op.
    ///
    /// The database savers keep one small row per deleted thread (its message-store epoch), so
    /// another process's index of the deleted thread's message bodies is recognised as stale
    /// when the thread is written again (docs/checkpoint-format.md, "The message store").
    async fn delete_thread(&self, thread_id: &ThreadId) -> Result<()>;

    /// Deletes the checkpoints (and their writes) written by the given runs, except those a
    /// remaining checkpoint needs to stay readable (runtime-spec §5.8): the ancestors its
    /// delta history replays from, the parent chain of a relative record, and, transitively,
    /// what those need. Those stay, with their writes, as `prune` keeps them.
    ///
    /// Every thread the runs wrote is read and decided first. The threads are then deleted one
    /// transaction each: a checkpoint put meanwhile on a thread not yet deleted can fail that
    /// thread with [`Error::Conflict`](crate::Error::Conflict) after earlier threads were
    /// deleted. Calling again with the same runs finishes the job.
    async fn delete_for_runs(&self, run_ids: &[RunId]) -> Result<()>;

    /// Copies every checkpoint, write and blob of `source` to `target`. Unknown source → no-op.
    ///
    /// The message bodies of a delta thread keep their per-thread numbers, values keep their
    /// channel versions, and checkpoints and pending writes keep their ids and keys, so a
    /// target that stores other bytes under a number, a `(namespace, channel, version)`, a
    /// checkpoint id or a `(checkpoint, task, idx)` the source uses is refused with
    /// [`Error::Conflict`](crate::Error::Conflict) and nothing is copied (copy onto a new or
    /// deleted thread). Rows equal to the source's are no collision: copying again is fine.
    async fn copy_thread(&self, source: &ThreadId, target: &ThreadId) -> Result<()>;

    /// Prunes the given threads with `strategy`, one thread at a time: an error on one (a
    /// `Conflict` with a concurrent writer, say) leaves the threads before it pruned and the
    /// rest untouched, and pruning again is safe.
    async fn prune(&self, thread_ids: &[ThreadId], strategy: PruneStrategy) -> Result<()>;

    /// The delta history walk (runtime-spec §5.5) from `config`'s checkpoint for each channel.
    ///
    /// The walk for a channel also ends, with no seed, at a full record (not a relative one)
    /// that has no version of the channel: it was empty there (docs/checkpoint-format.md).
    /// A relative record that does not list the channel carries its parent's version of it
    /// unchanged, so the walk does not replay that parent's writes to the channel (they were
    /// not applied on this path) and goes on to the value the parent stores or inherits.
    ///
    /// A checkpoint on the path that is missing, or deleted while the walk reads it, is
    /// [`Error::MissingParent`](crate::Error::MissingParent), never a shorter history.
    async fn delta_channel_history(
        &self,
        config: &CheckpointConfig,
        channels: &[ChannelName],
    ) -> Result<BTreeMap<ChannelName, DeltaChannelHistory>>;

    /// The mode and snapshot frequency this saver was opened with (and the store records).
    fn store_config(&self) -> StoreConfig;

    /// Test hook of the conformance suite, not an API: overwrites stored bytes of a
    /// thread so that the suite can check what a read does and does not look at.
    /// Returns `false` when the saver does not support it (the default); the cases
    /// that need it then fail, since every saver of this crate supports it.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    async fn tamper_for_conformance(
        &self,
        thread_id: &ThreadId,
        tamper: crate::testing::Tamper,
    ) -> Result<bool> {
        let _ = (thread_id, tamper);
        Ok(false)
    }

    /// Test hook of the conformance suite, not an API: removes what the saver stored, after
    /// a case (the PostgreSQL saver drops its schema, so that passing runs leave nothing in
    /// the test database). The default does nothing.
    #[cfg(feature = "test-util")]
    #[doc(hidden)]
    async fn discard_for_conformance(&self) -> Result<()> {
        Ok(())
    }
}

/// The default implementation of [`Saver::get_tuple_with_ancestry`], from `saver`'s
/// [`get_tuple`](Saver::get_tuple),
/// [`get_ancestors_without_values`](Saver::get_ancestors_without_values) and
/// [`get_channel_values`](Saver::get_channel_values): for a wrapper that overrides the method
/// but sometimes wants the three calls.
///
/// # Errors
/// Those of the three calls; [`Error::Conflict`] when the latest checkpoint was deleted
/// between them three times in a row.
pub async fn get_tuple_with_ancestry_default<S: Saver + ?Sized>(
    saver: &S,
    config: &CheckpointConfig,
    limit: usize,
) -> Result<Option<TupleWithAncestry>> {
    // A latest checkpoint deleted between the calls (a concurrent delete_for_runs) is read
    // again, as the savers of this crate do; an addressed one is gone.
    for _ in 0..3 {
        let Some(tuple) = saver.get_tuple(config).await? else {
            return Ok(None);
        };
        let ancestors = match &tuple.parent_config {
            Some(parent) if limit > 0 && tuple.checkpoint.v == RELATIVE_RECORD_V => {
                let mut chain = saver.get_ancestors_without_values(parent, limit).await?;
                if let Some(full) = chain
                    .iter()
                    .position(|a| a.checkpoint.v != RELATIVE_RECORD_V)
                {
                    chain.truncate(full + 1);
                }
                chain
            }
            _ => Vec::new(),
        };
        let keys = inherited_keys(&tuple.checkpoint, ancestors.iter().map(|a| &a.checkpoint));
        let inherited = if keys.is_empty() {
            BTreeMap::new()
        } else {
            let Some(mut found) = saver.get_channel_values(&tuple.config, &keys).await? else {
                if config.checkpoint_id.is_some() {
                    return Ok(None);
                }
                continue;
            };
            keys.into_iter()
                .map(|k| {
                    let v = found.remove(&k);
                    (k, v)
                })
                .collect()
        };
        return Ok(Some(TupleWithAncestry {
            tuple,
            ancestors,
            inherited,
        }));
    }
    Err(Error::latest_deleted_while_read(&config.thread_id))
}

/// The greatest channel version in `tuples` (0 for none).
pub(crate) fn max_listed_version(tuples: &[CheckpointTuple]) -> u64 {
    tuples
        .iter()
        .flat_map(|t| t.checkpoint.channel_versions.values().map(|v| v.get()))
        .max()
        .unwrap_or(0)
}
