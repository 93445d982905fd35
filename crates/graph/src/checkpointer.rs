//! The persistence seam of the runtime: what the loop stores per checkpoint and per task.
//!
//! [`Checkpointer`] is the narrow, object-safe interface the loop talks to.
//! [`MemoryCheckpointer`] keeps everything in process.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::Value as Json;

use crate::error::Result;
use crate::ids::{CheckpointId, TaskId, ThreadId};

/// Why a checkpoint was created.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Source {
    /// New input was applied.
    Input,
    /// A super-step finished.
    Loop,
    /// `update_state`.
    Update,
    /// Copy of an older checkpoint, start of a new branch.
    Fork,
}

impl Source {
    /// Lowercase name as in the reference metadata.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::Loop => "loop",
            Self::Update => "update",
            Self::Fork => "fork",
        }
    }
}

/// A checkpoint as the loop persists it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointRecord {
    /// Its id (ids sort in creation order).
    pub id: CheckpointId,
    /// The checkpoint it was derived from.
    pub parent: Option<CheckpointId>,
    /// Metadata step.
    pub step: i64,
    /// Metadata source.
    pub source: Source,
    /// Channel values. On `put`: only the channels whose version moved since the previous stored
    /// checkpoint (a moved channel without an entry is empty). On read: every channel with a value.
    pub values: BTreeMap<String, Json>,
    /// Channel versions.
    pub versions: BTreeMap<String, u64>,
    /// Node → channel → version last seen.
    pub versions_seen: BTreeMap<String, BTreeMap<String, u64>>,
    /// Channels updated by the step that produced this checkpoint (sorted).
    pub updated_channels: Option<Vec<String>>,
    /// On `put`: the channels whose version moved since the previous stored checkpoint.
    pub new_versions: std::collections::BTreeSet<String>,
    /// Delta channels' `(updates, supersteps)` since their last snapshot; zero pairs omitted (spec §5.3).
    pub counters: BTreeMap<String, (u32, u32)>,
    /// On `put`, for a store that [accepts them](Checkpointer::accepts_encoded_lists): snapshot
    /// values of message-list channels as their items' serialised JSON, in list order, instead of
    /// an entry in `values` (the runtime keeps these bytes from earlier snapshots, so a snapshot
    /// does not re-serialise the whole list). On read, a store may return such values here
    /// instead of in `values` (the `SaverCheckpointer` does for stored message lists): a channel
    /// has a stored value when it is in either map.
    pub encoded_lists: BTreeMap<String, Vec<std::sync::Arc<[u8]>>>,
    /// The run that created it ([`RunConfig::run_id`](crate::RunConfig::run_id)).
    pub run_id: Option<String>,
    /// Free metadata of the run that created it ([`RunConfig::metadata`](crate::RunConfig::metadata)).
    pub metadata: serde_json::Map<String, Json>,
    /// For a subgraph's checkpoint: namespace → checkpoint id of the enclosing graphs' steps it
    /// ran in (runtime-spec §2.5); empty at the top level.
    pub parents: BTreeMap<String, CheckpointId>,
}

/// What the history walk found for one delta channel (runtime-spec §5.5).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DeltaHistory {
    /// The nearest stored value on the path, if any.
    pub seed: Option<Json>,
    /// The same seed as its list items' serialised JSON, when the store keeps it as a message
    /// list (then `seed` is `None`): the runtime parses the items directly.
    pub seed_items: Option<Vec<std::sync::Arc<[u8]>>>,
    /// Writes to replay on top of the seed, oldest first.
    pub writes: Vec<Json>,
}

/// A write of a task of the step that starts at some checkpoint.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingWrite {
    /// The task.
    pub task_id: TaskId,
    /// The task's path (sort key); empty for NULL-task writes.
    pub task_path: String,
    /// Channel (or control name such as `__error__`).
    pub channel: String,
    /// Serialized value.
    pub value: Json,
}

/// A checkpoint with the writes of the step that started from it.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointTuple {
    /// The checkpoint.
    pub checkpoint: CheckpointRecord,
    /// Pending writes, in (task path, task id, index) order.
    pub pending_writes: Vec<PendingWrite>,
}

/// Where a graph's checkpoints live: a thread and a checkpoint namespace (`""` = the root graph,
/// `<node>:<task id>` for a subgraph run by that task, nested with `|`).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Scope {
    /// The thread.
    pub thread: ThreadId,
    /// The checkpoint namespace.
    pub ns: String,
}

impl Scope {
    /// The root namespace of `thread`.
    pub fn root(thread: impl Into<ThreadId>) -> Self {
        Self {
            thread: thread.into(),
            ns: String::new(),
        }
    }
}

/// Control write names: upserted, never attached to tasks as results.
pub(crate) const ERROR: &str = "__error__";
pub(crate) const INTERRUPT: &str = "__interrupt__";
pub(crate) const RESUME: &str = "__resume__";
pub(crate) const NO_WRITES: &str = "__no_writes__";

pub(crate) fn is_control(channel: &str) -> bool {
    matches!(
        channel,
        ERROR | INTERRUPT | RESUME | "__error_source_node__" | "__scheduled__"
    )
}

/// The persistence the loop needs; implemented by [`MemoryCheckpointer`] and by the `Saver` adapter.
#[async_trait]
pub trait Checkpointer: Send + Sync {
    /// The latest checkpoint of the thread, or the addressed one, with its pending writes.
    async fn get_tuple(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>>;
    /// Like [`Checkpointer::get_tuple`], but the returned record's `values` may be empty: for a
    /// caller that already holds the checkpoint's channels (the hot-state cache) and needs only
    /// its id, metadata, versions and pending writes. The default reads everything.
    async fn head(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.get_tuple(scope, id).await
    }
    /// Whether `put` takes message-list snapshots as [`CheckpointRecord::encoded_lists`]
    /// (default no: every value arrives as JSON in `values`).
    fn accepts_encoded_lists(&self) -> bool {
        false
    }
    /// Whether the store keeps a delta `messages` channel (default yes). A store configured for
    /// full mode does not (kernel-spec R26–R35): a run or `update_state` of a graph that declares
    /// `messages` as a delta channel fails with
    /// [`Error::StoreModeMismatch`](crate::Error::StoreModeMismatch) before it writes anything.
    fn stores_delta_messages(&self) -> bool {
        true
    }
    /// The snapshot frequency the store records for its delta `messages` channel, which every
    /// process sharing the store must use (kernel-spec R30); `None` (the default) when the store
    /// records none. A run or `update_state` of a graph whose delta `messages` channel has
    /// another frequency fails with
    /// [`Error::SnapshotFrequencyMismatch`](crate::Error::SnapshotFrequencyMismatch) before it
    /// writes anything.
    fn messages_snapshot_frequency(&self) -> Option<u32> {
        None
    }
    /// All checkpoints of the thread, newest first.
    async fn list(&self, scope: &Scope) -> Result<Vec<CheckpointTuple>>;
    /// The ids of the thread's checkpoints older than `before` (all when `None`), newest first,
    /// at most `limit`: a page of history without reading any state.
    ///
    /// The default filters [`Checkpointer::list`], which reads every checkpoint with its values;
    /// the checkpointers of this crate read only the page's rows.
    async fn list_ids(
        &self,
        scope: &Scope,
        before: Option<&CheckpointId>,
        limit: Option<usize>,
    ) -> Result<Vec<CheckpointId>> {
        Ok(self
            .list(scope)
            .await?
            .into_iter()
            .map(|t| t.checkpoint.id)
            .filter(|id| before.is_none_or(|b| id < b))
            .take(limit.unwrap_or(usize::MAX))
            .collect())
    }
    /// The thread's checkpoints older than `before` (all when `None`), newest first, at most
    /// `limit`, each as [`Checkpointer::get_tuple`] reads it: a page of history. A checkpoint
    /// deleted while the page is read is left out.
    ///
    /// The default reads the page's ids, then each checkpoint on its own; the
    /// `SaverCheckpointer` reads the page's rows, values and writes with one saver `list` (the
    /// message bodies the page's lists share are fetched once), then completes each relative
    /// record of the page as a single read does (the values it inherits, with one
    /// `get_channel_values` call per such record, and on a cold adapter its ancestors).
    async fn list_page(
        &self,
        scope: &Scope,
        before: Option<&CheckpointId>,
        limit: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        let mut out = Vec::new();
        for id in self.list_ids(scope, before, Some(limit)).await? {
            if let Some(t) = self.get_tuple(scope, Some(&id)).await? {
                out.push(t);
            }
        }
        Ok(out)
    }
    /// At least the greatest channel version of any checkpoint of the thread's namespace (0 for
    /// none): a new branch's versions must exceed it.
    ///
    /// The default reads [`Checkpointer::list`]; [`MemoryCheckpointer`] reads its records, and
    /// [`SaverCheckpointer`](crate::SaverCheckpointer) asks
    /// [`Saver::max_channel_version`](antler_checkpoint::Saver::max_channel_version), which the
    /// savers of `antler-checkpoint` answer from a high-water mark with one key lookup.
    async fn max_version(&self, scope: &Scope) -> Result<u64> {
        Ok(self
            .list(scope)
            .await?
            .iter()
            .flat_map(|t| t.checkpoint.versions.values().copied())
            .max()
            .unwrap_or(0))
    }
    /// Stores a checkpoint.
    async fn put(&self, scope: &Scope, checkpoint: CheckpointRecord) -> Result<()>;
    /// Stores writes of one task against `checkpoint`: regular writes insert-if-absent, control writes upsert,
    /// each identified by `(task_id, idx)` (the task path only orders them).
    /// A checkpoint that is not stored is `Error::CheckpointNotFound` (the saver's
    /// `UnknownCheckpoint` is mapped to it), never writes kept for it.
    async fn put_writes(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()>;
    /// The delta history walk (runtime-spec §5.5) from `checkpoint` for each channel: starting at its
    /// parent, nearest first, collect each ancestor's writes to the channel, stop at the first ancestor
    /// with a stored value (the seed), or with no seed at an ancestor without a version of the
    /// channel (it was empty there); writes returned oldest first.
    async fn delta_history(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaHistory>>;
}

#[derive(Default)]
struct ThreadData {
    checkpoints: BTreeMap<CheckpointId, CheckpointRecord>,
    // (channel, version) → value: unchanged channels are stored once.
    blobs: HashMap<(String, u64), Json>,
    // (channel, version) → the checkpoint that stored the value.
    stored_by: HashMap<(String, u64), CheckpointId>,
    // checkpoint → (task path, task id, idx) → write
    writes: HashMap<CheckpointId, BTreeMap<(String, TaskId, i64), PendingWrite>>,
}

/// A put of a value under a `(channel, version)` that already holds another value in the
/// thread (versions must be unique within a thread, across branches).
#[derive(Debug, thiserror::Error)]
#[error(
    "channel {channel} at version {version} already holds a different value; channel versions must be unique within a thread, across branches"
)]
pub struct VersionClash {
    /// The channel.
    pub channel: String,
    /// The version.
    pub version: u64,
}

/// History that cannot be read from what the store holds: on a delta history walk, a
/// checkpoint on the path names a parent that is not stored, or the parent pointers loop; on
/// a page of history, older checkpoints remain but every read of the page finds them gone.
#[derive(Debug, thiserror::Error)]
#[error("thread {thread}: checkpoint {checkpoint}: {why}; its history cannot be read")]
pub struct BrokenHistory {
    /// The thread.
    pub thread: String,
    /// The checkpoint whose parent is missing, at which the cycle closes, or before which the
    /// page was read (`newest` for the first page).
    pub checkpoint: String,
    /// What is wrong.
    pub why: &'static str,
}

/// An in-process checkpointer.
#[derive(Default)]
pub struct MemoryCheckpointer {
    threads: Mutex<HashMap<Scope, ThreadData>>,
}

impl MemoryCheckpointer {
    /// An empty store.
    pub fn new() -> Self {
        Self::default()
    }
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<Scope, ThreadData>> {
        self.threads
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// The fixed index of a control write (upserted), as the savers give it (runtime-spec §4.2);
/// every other write is insert-if-absent at its position.
fn control_idx(channel: &str) -> Option<i64> {
    match channel {
        ERROR => Some(-1),
        "__scheduled__" => Some(-2),
        INTERRUPT => Some(-3),
        RESUME => Some(-4),
        _ => None,
    }
}

fn tuple_of(t: &ThreadData, c: &CheckpointRecord) -> CheckpointTuple {
    let mut checkpoint = c.clone();
    checkpoint.values = c
        .versions
        .iter()
        .filter_map(|(ch, v)| {
            t.blobs
                .get(&(ch.clone(), *v))
                .map(|j| (ch.clone(), j.clone()))
        })
        .collect();
    CheckpointTuple {
        checkpoint,
        pending_writes: t
            .writes
            .get(&c.id)
            .map(|w| w.values().cloned().collect())
            .unwrap_or_default(),
    }
}

#[async_trait]
impl Checkpointer for MemoryCheckpointer {
    async fn get_tuple(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        let g = self.lock();
        let Some(t) = g.get(scope) else {
            return Ok(None);
        };
        let c = match id {
            Some(id) => t.checkpoints.get(id),
            None => t.checkpoints.values().next_back(),
        };
        Ok(c.map(|c| tuple_of(t, c)))
    }

    async fn list(&self, scope: &Scope) -> Result<Vec<CheckpointTuple>> {
        let g = self.lock();
        let Some(t) = g.get(scope) else {
            return Ok(Vec::new());
        };
        Ok(t.checkpoints
            .values()
            .rev()
            .map(|c| tuple_of(t, c))
            .collect())
    }

    async fn list_ids(
        &self,
        scope: &Scope,
        before: Option<&CheckpointId>,
        limit: Option<usize>,
    ) -> Result<Vec<CheckpointId>> {
        let g = self.lock();
        let Some(t) = g.get(scope) else {
            return Ok(Vec::new());
        };
        let older = match before {
            Some(b) => t.checkpoints.range(..b),
            None => t.checkpoints.range::<CheckpointId, _>(..),
        };
        Ok(older
            .rev()
            .take(limit.unwrap_or(usize::MAX))
            .map(|(id, _)| id.clone())
            .collect())
    }

    async fn max_version(&self, scope: &Scope) -> Result<u64> {
        let g = self.lock();
        Ok(g.get(scope).map_or(0, |t| {
            t.checkpoints
                .values()
                .flat_map(|c| c.versions.values().copied())
                .max()
                .unwrap_or(0)
        }))
    }

    async fn put(&self, scope: &Scope, checkpoint: CheckpointRecord) -> Result<()> {
        let mut g = self.lock();
        let t = g.entry(scope.clone()).or_default();
        let mut checkpoint = checkpoint;
        for (ch, items) in std::mem::take(&mut checkpoint.encoded_lists) {
            let list = items
                .iter()
                .map(|b| serde_json::from_slice(b))
                .collect::<std::result::Result<Vec<Json>, _>>()
                .map_err(|source| crate::error::Error::Serialization {
                    channel: ch.clone(),
                    source,
                })?;
            checkpoint.values.insert(ch, Json::Array(list));
        }
        // Values are keyed by (channel, version): another value under a stored key would change
        // what the other checkpoints holding that version read, so the put fails, storing nothing.
        for (ch, value) in &checkpoint.values {
            let v = checkpoint.versions.get(ch).copied().unwrap_or(0);
            if t.blobs
                .get(&(ch.clone(), v))
                .is_some_and(|old| old != value)
            {
                return Err(crate::error::Error::Storage {
                    source: Box::new(VersionClash {
                        channel: ch.clone(),
                        version: v,
                    }),
                });
            }
        }
        for (ch, value) in std::mem::take(&mut checkpoint.values) {
            let v = checkpoint.versions.get(&ch).copied().unwrap_or(0);
            // The first checkpoint to store a value stays its owner (the walk's seed), also
            // when an identical value is put again.
            t.stored_by
                .entry((ch.clone(), v))
                .or_insert_with(|| checkpoint.id.clone());
            t.blobs.insert((ch, v), value);
        }
        t.checkpoints.insert(checkpoint.id.clone(), checkpoint);
        Ok(())
    }

    async fn put_writes(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        let mut g = self.lock();
        let t = g.entry(scope.clone()).or_default();
        // As the savers do (`UnknownCheckpoint`): writes belong to a stored checkpoint, and
        // kept for a missing one they would surface under a checkpoint put later with its id.
        if !t.checkpoints.contains_key(checkpoint) {
            return Err(crate::Error::CheckpointNotFound {
                thread: scope.thread.to_string(),
                checkpoint: checkpoint.to_string(),
            });
        }
        let w = t.writes.entry(checkpoint.clone()).or_default();
        for (i, (channel, value)) in writes.into_iter().enumerate() {
            let (idx, upsert) = match control_idx(&channel) {
                Some(idx) => (idx, true),
                None => (i64::try_from(i).unwrap_or(i64::MAX), false),
            };
            let key = (task_path.to_owned(), task_id.clone(), idx);
            let pw = PendingWrite {
                task_id: task_id.clone(),
                task_path: task_path.to_owned(),
                channel,
                value,
            };
            // A write is identified by `(task_id, idx)`, as in the savers; the path only
            // orders the writes. So a write of the same task and index under another path is
            // the same write: kept first (a regular write) or replaced, path and all (a
            // control write).
            let same = w
                .keys()
                .find(|(_, t, i)| t == task_id && *i == idx)
                .cloned();
            match same {
                Some(old) if upsert => {
                    w.remove(&old);
                    w.insert(key, pw);
                }
                Some(_) => {}
                None => {
                    w.insert(key, pw);
                }
            }
        }
        Ok(())
    }

    async fn delta_history(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaHistory>> {
        self.walk(scope, checkpoint, channels)
    }
}

impl MemoryCheckpointer {
    fn walk(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaHistory>> {
        let g = self.lock();
        let mut out: BTreeMap<String, DeltaHistory> = BTreeMap::new();
        // A walk from a checkpoint that is not stored would read as an empty history, that is
        // an empty channel: an error instead.
        let not_found = || crate::error::Error::CheckpointNotFound {
            thread: scope.thread.to_string(),
            checkpoint: checkpoint.to_string(),
        };
        let t = g.get(scope).ok_or_else(not_found)?;
        let start = t.checkpoints.get(checkpoint).ok_or_else(not_found)?;
        let broken = |at: &CheckpointId, why: &'static str| crate::error::Error::Storage {
            source: Box::new(BrokenHistory {
                thread: scope.thread.to_string(),
                checkpoint: at.to_string(),
                why,
            }),
        };
        for ch in channels {
            // Ancestors nearest first; per ancestor its writes in (task path, task id, idx) order.
            let mut chunks: Vec<Vec<Json>> = Vec::new();
            let mut seed = None;
            let mut seen: HashSet<&CheckpointId> = HashSet::from([checkpoint]);
            let mut child = checkpoint;
            let mut cur = start.parent.as_ref();
            while let Some(id) = cur {
                // A parent that is not stored (or a loop back to a checkpoint already walked)
                // would cut the walk short and drop the writes beyond it: the value would be
                // wrong without a sign, so the walk fails instead.
                let Some(c) = t.checkpoints.get(id) else {
                    return Err(broken(child, "its parent is not stored"));
                };
                if !seen.insert(id) {
                    return Err(broken(id, "its parent pointers form a cycle"));
                }
                let writes: Vec<Json> = t
                    .writes
                    .get(id)
                    .map(|w| {
                        w.values()
                            .filter(|w| &w.channel == ch)
                            .map(|w| w.value.clone())
                            .collect()
                    })
                    .unwrap_or_default();
                chunks.push(writes);
                // The seed: the value this ancestor stored itself (not one it inherited).
                if let Some(v) = c.versions.get(ch)
                    && t.stored_by.get(&(ch.clone(), *v)) == Some(id)
                {
                    seed = t.blobs.get(&(ch.clone(), *v)).cloned();
                    break;
                }
                // The channel had no version here: it was empty, and nothing older belongs to
                // its value (as in `antler-checkpoint`'s walk).
                if !c.versions.contains_key(ch) {
                    break;
                }
                child = id;
                cur = c.parent.as_ref();
            }
            let writes = chunks.into_iter().rev().flatten().collect();
            out.insert(
                ch.clone(),
                DeltaHistory {
                    seed,
                    seed_items: None,
                    writes,
                },
            );
        }
        Ok(out)
    }
}

/// New checkpoint ids: strictly increasing within the process, UUID-shaped, in the checkpoint
/// crate's layout (wall-clock microseconds in the high 64 bits), so a saver stores the
/// checkpoint's timestamp as a one-byte offset from its id.
pub(crate) fn new_checkpoint_id() -> CheckpointId {
    CheckpointId::new(antler_checkpoint::CheckpointId::generate().to_string())
}
