//! The delta `messages` channel (runtime-spec §5, kernel-spec R26, R41): the value, its
//! cadence counters, the snapshot decision, the migration seed and materialisation by replay.
//!
//! The channel lives here, not in the graph crate, so that the runtime can use it as a
//! channel kind and the write-amplification benchmark can drive it without a graph.
//!
//! Lifecycle, as the runtime drives it:
//! 1. **Load**: [`materialize`] (or [`DeltaMessages::restore`] on a
//!    [`DeltaChannelHistory`]) rebuilds the value from the nearest stored value
//!    (a snapshot, or a legacy full-mode list: the migration path) plus at most
//!    `F` replayed writes, with one call of the batch reducer.
//! 2. **Step**: each task's writes are persisted with `put_writes` as
//!    [`DeltaWrite::to_blob`] (ids assigned first, [`DeltaWrite::assign_missing_ids`]);
//!    at the barrier [`DeltaMessages::update`] applies the step's batch.
//! 3. **Checkpoint**: [`DeltaMessages::on_checkpoint`] advances the counters and
//!    says whether this checkpoint stores a snapshot ([`DeltaMessages::snapshot_blob`]);
//!    the counters go into metadata with [`write_counters`].

use std::collections::HashSet;
use std::sync::Arc;

use antler_state_reducers::{Message, MessageWrite, merge_message_writes_owned};

use crate::blob::{Blob, MessagesBlob, MessagesKind};
use crate::error::{Error, Result};
use crate::ids::{ChannelName, CheckpointId, ThreadId};
use crate::mode::{DeltaCounters, SnapshotFrequency};
use crate::model::{CheckpointConfig, CheckpointMetadata, CheckpointTuple, DeltaChannelHistory};
use crate::saver::Saver;

/// The channel name of the messages field.
pub const MESSAGES: &str = "messages";

/// The global bound on super-steps between snapshots (runtime-spec §5.4, `DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT`).
pub const DEFAULT_MAX_SUPERSTEPS_SINCE_SNAPSHOT: u32 = 5000;

/// One write to a delta channel.
#[derive(Clone, Debug, PartialEq)]
pub enum DeltaWrite {
    /// An ordinary write, folded by the batch reducer.
    Write(MessageWrite),
    /// An `Overwrite`: replaces the value and drops the step's other writes.
    Overwrite(Vec<Message>),
}

impl From<MessageWrite> for DeltaWrite {
    fn from(w: MessageWrite) -> Self {
        Self::Write(w)
    }
}

impl From<Vec<Message>> for DeltaWrite {
    fn from(m: Vec<Message>) -> Self {
        Self::Write(MessageWrite::Messages(m))
    }
}

impl DeltaWrite {
    /// Gives every id-less message a random UUIDv4 id, so that replay is deterministic
    /// (runtime-spec §5.1 `ensure_message_ids`); call before persisting.
    pub fn assign_missing_ids(&mut self) {
        let list = match self {
            Self::Write(MessageWrite::Messages(list)) | Self::Overwrite(list) => list,
            Self::Write(MessageWrite::Null) => return,
        };
        for m in list {
            if m.id.is_none() {
                m.id = Some(uuid::Uuid::new_v4().to_string());
            }
        }
    }

    /// The blob to persist with `put_writes`: a message list, so bodies are stored once per thread.
    ///
    /// # Errors
    /// The serde error if a message cannot be serialised.
    pub fn to_blob(&self) -> std::result::Result<Blob, serde_json::Error> {
        match self {
            Self::Write(MessageWrite::Null) => Ok(Blob::Null),
            Self::Write(MessageWrite::Messages(list)) => Blob::messages(MessagesKind::Write, list),
            Self::Overwrite(list) => Blob::messages(MessagesKind::Overwrite, list),
        }
    }

    /// Reads a stored write back: message lists, `Null`, or a legacy JSON write (`null`,
    /// one message-like, or a list of them).
    ///
    /// # Errors
    /// [`Error::Serialization`] or [`Error::Reducer`] (coercion) naming thread and checkpoint.
    pub fn from_blob(
        blob: &Blob,
        thread_id: &ThreadId,
        checkpoint_id: CheckpointId,
    ) -> Result<Self> {
        match blob {
            Blob::Null => Ok(Self::Write(MessageWrite::Null)),
            Blob::Messages(MessagesBlob { kind, items }) => {
                let list = decode_items(items, thread_id, checkpoint_id)?;
                Ok(match kind {
                    MessagesKind::Overwrite => Self::Overwrite(list),
                    // A snapshot used as a write replaces nothing: treat it as messages to add.
                    _ => Self::Write(MessageWrite::Messages(list)),
                })
            }
            Blob::Json(bytes) | Blob::Bytes(bytes) => {
                let value: serde_json::Value =
                    serde_json::from_slice(bytes).map_err(|source| Error::Serialization {
                        thread_id: thread_id.clone(),
                        checkpoint_id,
                        what: "delta channel write".into(),
                        source,
                    })?;
                MessageWrite::from_json(value)
                    .map(Self::Write)
                    .map_err(|e| Error::Reducer {
                        thread_id: thread_id.clone(),
                        checkpoint_id,
                        channel: MESSAGES.into(),
                        source: Box::new(e),
                    })
            }
        }
    }
}

fn decode_items(
    items: &[Arc<[u8]>],
    thread_id: &ThreadId,
    checkpoint_id: CheckpointId,
) -> Result<Vec<Message>> {
    // Sequential: the byte-exact fast path decodes 4,000 messages in about 1.3 ms, faster
    // than serde's general path split over two threads was (docs/bench-write-amp.md).
    antler_state_reducers::decode_messages(items).map_err(|e| Error::Serialization {
        thread_id: thread_id.clone(),
        checkpoint_id,
        what: format!("stored message {}", e.index),
        source: e.source,
    })
}

/// Decodes a stored value of the messages channel: a snapshot/message list, a legacy
/// full-mode JSON list (the migration seed), or `Null` (empty).
///
/// # Errors
/// [`Error::Serialization`] naming thread and checkpoint when the value is not a message list.
pub fn decode_messages_value(
    blob: &Blob,
    thread_id: &ThreadId,
    checkpoint_id: CheckpointId,
) -> Result<Vec<Message>> {
    match blob {
        Blob::Null => Ok(Vec::new()),
        Blob::Messages(MessagesBlob { items, .. }) => decode_items(items, thread_id, checkpoint_id),
        Blob::Json(bytes) | Blob::Bytes(bytes) => {
            serde_json::from_slice(bytes).map_err(|source| Error::Serialization {
                thread_id: thread_id.clone(),
                checkpoint_id,
                what: "stored messages value".into(),
                source,
            })
        }
    }
}

/// Whether a checkpoint stores a snapshot of the channel, and why.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum SnapshotDecision {
    /// No snapshot: the checkpoint stores no value for the channel.
    Skip,
    /// `updates >= F`.
    Frequency,
    /// `supersteps >=` the global bound.
    SuperstepBound,
    /// Forced: an Overwrite, a fresh thread or fork input, or unreplayed pending writes.
    Forced,
}

impl SnapshotDecision {
    /// Whether a snapshot is stored.
    pub fn is_snapshot(self) -> bool {
        !matches!(self, Self::Skip)
    }
}

/// The delta messages channel: its value and snapshot cadence.
///
/// Appending messages with new ids (the common step) costs O(batch), not O(value): the
/// channel keeps the set of ids and the serialised form of every message, so neither the
/// reducer's index nor a snapshot has to touch the whole list. Any other write (replace,
/// remove, id-less message) goes through the batch reducer and drops those caches.
#[derive(Clone, Debug)]
pub struct DeltaMessages {
    value: Option<Vec<Message>>,
    counters: DeltaCounters,
    frequency: SnapshotFrequency,
    max_supersteps: u32,
    forced: bool,
    written: bool,
    /// Ids of `value`, when every message has one (else `None`: the fast path is off).
    ids: Option<HashSet<String>>,
    /// Serialised `value`, item by item, when known.
    encoded: Option<Vec<Arc<[u8]>>>,
}

impl PartialEq for DeltaMessages {
    fn eq(&self, other: &Self) -> bool {
        self.value == other.value
            && self.counters == other.counters
            && self.frequency == other.frequency
            && self.max_supersteps == other.max_supersteps
            && self.forced == other.forced
            && self.written == other.written
    }
}

/// Whether the reducer, merging `batch` into `base`, stamps an id on some message: one of
/// either lacks an id (kernel-spec R19).
fn stamps_ids(base: &[Message], batch: &[MessageWrite]) -> bool {
    base.iter().any(|m| m.id.is_none())
        || batch.iter().any(|w| match w {
            MessageWrite::Messages(ms) => ms.iter().any(|m| m.id.is_none()),
            MessageWrite::Null => false,
        })
}

fn id_set(list: &[Message]) -> Option<HashSet<String>> {
    let mut set = HashSet::with_capacity(list.len());
    for m in list {
        if !set.insert(m.id.clone()?) {
            return None;
        }
    }
    Some(set)
}

/// A channel rebuilt from storage, with what it cost.
#[derive(Clone, Debug, PartialEq)]
pub struct Materialized {
    /// The channel.
    pub channel: DeltaMessages,
    /// How many stored writes were replayed (≤ F per snapshot cadence).
    pub replayed_writes: usize,
    /// The checkpoint whose stored value seeded the replay, if any.
    pub seed_checkpoint: Option<CheckpointId>,
}

impl DeltaMessages {
    /// An unavailable channel (never written on this branch) with frequency `F`.
    pub fn new(frequency: SnapshotFrequency) -> Self {
        Self {
            value: None,
            counters: DeltaCounters::default(),
            frequency,
            max_supersteps: DEFAULT_MAX_SUPERSTEPS_SINCE_SNAPSHOT,
            forced: false,
            written: false,
            ids: None,
            encoded: None,
        }
    }

    fn set_value(&mut self, value: Vec<Message>, encoded: Option<Vec<Arc<[u8]>>>) {
        self.ids = id_set(&value);
        self.encoded = encoded.filter(|e| e.len() == value.len());
        self.value = Some(value);
        self.written = true;
    }

    /// Sets the global super-step bound (default [`DEFAULT_MAX_SUPERSTEPS_SINCE_SNAPSHOT`]).
    #[must_use]
    pub fn with_max_supersteps(mut self, n: u32) -> Self {
        self.max_supersteps = n.max(1);
        self
    }

    /// Sets the counters carried in the loaded checkpoint's metadata (default zero).
    #[must_use]
    pub fn with_counters(mut self, counters: DeltaCounters) -> Self {
        self.counters = counters;
        self
    }

    /// A channel holding `value` (e.g. a migrated plain list), marked as written.
    pub fn from_value(frequency: SnapshotFrequency, value: Vec<Message>) -> Self {
        let mut channel = Self::new(frequency);
        channel.set_value(value, None);
        channel
    }

    /// Rebuilds the value from a history walk: seed (or empty) plus the writes, replayed with
    /// one batch-reducer call; the last Overwrite, if any, becomes the base (runtime-spec §5.1).
    /// A walk that found neither a seed nor a write found a channel never written on this
    /// path: unavailable, as [`Self::new`] (runtime-spec §5.5: a delta channel without any
    /// version is simply empty), not a written empty list that a snapshot would store.
    ///
    /// # Errors
    /// A typed error naming thread and checkpoint when a stored value or write does not
    /// decode, or the reducer rejects the replay. Never an empty value instead.
    pub fn restore(
        frequency: SnapshotFrequency,
        history: &DeltaChannelHistory,
        thread_id: &ThreadId,
        checkpoint_id: CheckpointId,
    ) -> Result<Self> {
        if history.seed.is_none() && history.writes.is_empty() {
            return Ok(Self::new(frequency));
        }
        let seed_cp = history.seed_checkpoint.unwrap_or(checkpoint_id);
        let (mut base, mut encoded) = match &history.seed {
            Some(Blob::Messages(list)) => (
                decode_items(&list.items, thread_id, seed_cp)?,
                Some(list.items.clone()),
            ),
            Some(blob) => (decode_messages_value(blob, thread_id, seed_cp)?, None),
            None => (Vec::new(), Some(Vec::new())),
        };
        let mut batch: Vec<MessageWrite> = Vec::with_capacity(history.writes.len());
        for w in &history.writes {
            match DeltaWrite::from_blob(&w.value, thread_id, checkpoint_id)? {
                DeltaWrite::Overwrite(list) => {
                    base = list;
                    encoded = None;
                    batch.clear();
                }
                DeltaWrite::Write(mw) => {
                    // Appended items keep their stored bytes while the replay only appends.
                    if let (Some(enc), Blob::Messages(list)) = (encoded.as_mut(), &w.value) {
                        enc.extend(list.items.iter().cloned());
                    } else {
                        encoded = None;
                    }
                    batch.push(mw);
                }
            }
        }
        // The reducer stamps an id on every message without one: the stored bytes (without
        // it) then no longer stand for the value, which the next snapshot must store as it is
        // now (kernel-spec R41: stamped ids persist).
        // (An empty batch leaves the state as it is, ids included: kernel-spec R19.)
        let stamps_ids = !batch.is_empty() && stamps_ids(&base, &batch);
        let before = base.len();
        let added: usize = batch
            .iter()
            .map(|w| match w {
                MessageWrite::Messages(m) => m.len(),
                MessageWrite::Null => 0,
            })
            .sum();
        let value = merge_message_writes_owned(base, batch).map_err(|e| Error::Reducer {
            thread_id: thread_id.clone(),
            checkpoint_id,
            channel: MESSAGES.into(),
            source: Box::new(e),
        })?;
        // The cache is only valid when the replay appended every written message unchanged.
        if value.len() != before + added || stamps_ids {
            encoded = None;
        }
        let mut channel = Self::new(frequency);
        channel.set_value(value, encoded);
        // The stamped ids are this replay's own: the next checkpoint snapshots them, so that
        // they are the ones stored from then on.
        channel.forced = stamps_ids;
        Ok(channel)
    }

    /// The current value (empty when unavailable).
    pub fn value(&self) -> &[Message] {
        self.value.as_deref().unwrap_or(&[])
    }

    /// Unwraps the value.
    pub fn into_value(self) -> Vec<Message> {
        self.value.unwrap_or_default()
    }

    /// Whether the channel has a value.
    pub fn is_available(&self) -> bool {
        self.value.is_some()
    }

    /// The cadence counters.
    pub fn counters(&self) -> DeltaCounters {
        self.counters
    }

    /// The snapshot frequency.
    pub fn frequency(&self) -> SnapshotFrequency {
        self.frequency
    }

    /// Applies one super-step's writes; returns whether the value changed.
    ///
    /// Empty → no change. One Overwrite replaces the value, drops the step's other
    /// writes and forces a snapshot at the next checkpoint; two fail.
    ///
    /// # Errors
    /// The reducer's error (`Can receive only one Overwrite value per super-step.`, unknown
    /// removal id, …); the value is unchanged on error.
    pub fn update(
        &mut self,
        writes: Vec<DeltaWrite>,
    ) -> std::result::Result<bool, antler_state_reducers::Error> {
        if writes.is_empty() {
            return Ok(false);
        }
        let overwrites = writes
            .iter()
            .filter(|w| matches!(w, DeltaWrite::Overwrite(_)))
            .count();
        if overwrites > 1 {
            return Err(antler_state_reducers::Error::MultipleOverwrites);
        }
        if overwrites == 1 {
            if let Some(DeltaWrite::Overwrite(list)) = writes
                .into_iter()
                .find(|w| matches!(w, DeltaWrite::Overwrite(_)))
            {
                // Through set_value: the id index and the cached encoding describe the old
                // list, and keeping them would let the snapshot store the old bodies.
                self.set_value(list, None);
            }
            self.forced = true;
            self.written = true;
            return Ok(true);
        }
        let batch: Vec<MessageWrite> = writes
            .into_iter()
            .filter_map(|w| match w {
                DeltaWrite::Write(mw) => Some(mw),
                DeltaWrite::Overwrite(_) => None,
            })
            .collect();
        if self.try_append(&batch) {
            return Ok(true);
        }
        let current = self.value.clone().unwrap_or_default();
        // The reducer stamps ids on id-less messages, in the value (a migrated plain list, a
        // stored Overwrite) and in the writes: those ids are this process's own, and a cold
        // replay would stamp others, so the next checkpoint snapshots them (kernel-spec R41).
        let stamps_ids = stamps_ids(&current, &batch);
        let next = merge_message_writes_owned(current, batch)?;
        self.set_value(next, None);
        if stamps_ids {
            self.forced = true;
        }
        Ok(true)
    }

    /// The fast path: every written message has a fresh id and is not a removal, so the
    /// reducer would append them in order. Returns false (nothing changed) otherwise.
    fn try_append(&mut self, batch: &[MessageWrite]) -> bool {
        // Decide first, change nothing until then: a batch the fast path cannot take goes to
        // the reducer, which may refuse it, and a refused update leaves the channel as it was
        // (an empty channel stays unavailable).
        let none = HashSet::new();
        let known = match (&self.value, &self.ids) {
            (None, _) => &none,
            (Some(_), Some(ids)) => ids,
            (Some(_), None) => return false,
        };
        let mut fresh: HashSet<&str> = HashSet::new();
        for w in batch {
            let MessageWrite::Messages(list) = w else {
                return false;
            };
            for m in list {
                let Some(id) = m.id.as_deref() else {
                    return false;
                };
                if m.is_remove() || m.is_remove_all() || known.contains(id) || !fresh.insert(id) {
                    return false;
                }
            }
        }
        if self.value.is_none() {
            self.value = Some(Vec::new());
            self.ids = Some(HashSet::new());
            self.encoded = Some(Vec::new());
        }
        let (Some(value), Some(ids)) = (self.value.as_mut(), self.ids.as_mut()) else {
            return false;
        };
        for w in batch {
            if let MessageWrite::Messages(list) = w {
                for m in list {
                    if let Some(enc) = self.encoded.as_mut() {
                        match serde_json::to_vec(m) {
                            Ok(bytes) => enc.push(Arc::from(bytes)),
                            Err(_) => self.encoded = None,
                        }
                    }
                    if let Some(id) = &m.id {
                        ids.insert(id.clone());
                    }
                    value.push(m.clone());
                }
            }
        }
        self.written = true;
        true
    }

    /// Forces a snapshot at the next checkpoint (fresh-thread or fork input, unreplayed pending writes).
    pub fn force_snapshot(&mut self) {
        self.forced = true;
    }

    /// Advances the counters for one saved checkpoint (input, loop, update or fork; not the
    /// exit re-save) and decides whether that checkpoint stores a snapshot (runtime-spec §5.3–§5.4).
    /// `updated` = the channel's version moved in this step. On a snapshot the counters reset.
    pub fn on_checkpoint(&mut self, updated: bool) -> SnapshotDecision {
        self.counters.supersteps = self.counters.supersteps.saturating_add(1);
        if updated {
            self.counters.updates = self.counters.updates.saturating_add(1);
        }
        if !self.written || self.value.is_none() {
            return SnapshotDecision::Skip;
        }
        let decision = if self.forced {
            SnapshotDecision::Forced
        } else if self.counters.updates >= self.frequency.get() {
            SnapshotDecision::Frequency
        } else if self.counters.supersteps >= self.max_supersteps {
            SnapshotDecision::SuperstepBound
        } else {
            SnapshotDecision::Skip
        };
        if decision.is_snapshot() {
            self.counters = DeltaCounters::default();
            self.forced = false;
        }
        decision
    }

    /// The snapshot value to store in `channel_values` (a [`MessagesKind::Snapshot`] list,
    /// whose bodies the savers store once per thread). Reuses the cached serialised messages;
    /// after a non-append write it serialises the list once and caches it again.
    ///
    /// # Errors
    /// The serde error if a message cannot be serialised.
    pub fn snapshot_blob(&mut self) -> std::result::Result<Blob, serde_json::Error> {
        let fresh = match &self.encoded {
            Some(items) if items.len() == self.value().len() => None,
            _ => match Blob::messages(MessagesKind::Snapshot, self.value())? {
                Blob::Messages(list) => Some(list.items),
                _ => None,
            },
        };
        if fresh.is_some() {
            self.encoded = fresh;
        }
        Ok(Blob::Messages(MessagesBlob {
            kind: MessagesKind::Snapshot,
            items: self.encoded.clone().unwrap_or_default(),
        }))
    }
}

/// The counters of `channel` in checkpoint metadata (zero when absent).
pub fn read_counters(metadata: &CheckpointMetadata, channel: &str) -> DeltaCounters {
    crate::mode::counters_of(metadata, channel)
}

/// Stores `counters` for `channel` in metadata; zero pairs are removed (runtime-spec §5.3).
/// The channel's pair carried in `extra` (metadata copied key by key, see
/// [`crate::mode::counters_of`]) goes either way: the typed entry is the channel's count now, and
/// a stale one left there would read back once the typed entry is removed.
pub fn write_counters(metadata: &mut CheckpointMetadata, channel: &str, counters: DeltaCounters) {
    let key = crate::model::COUNTERS_METADATA_KEY;
    if let Some(serde_json::Value::Object(map)) = metadata.extra.get_mut(key) {
        map.remove(channel);
        if map.is_empty() {
            metadata.extra.remove(key);
        }
    }
    if counters.is_zero() {
        metadata.counters_since_delta_snapshot.remove(channel);
    } else {
        metadata
            .counters_since_delta_snapshot
            .insert(ChannelName::new(channel), counters);
    }
}

/// Materialises the delta channel `channel` at the checkpoint `tuple` holds: its stored value
/// if it has one, else seed + replay from the saver's history walk; counters from its metadata.
///
/// # Errors
/// Typed errors naming thread and checkpoint for unreadable history (missing parent, cycle,
/// corrupt blob, undecodable message) — never an empty value in their place.
pub async fn materialize(
    saver: &dyn Saver,
    tuple: &CheckpointTuple,
    channel: &str,
    frequency: SnapshotFrequency,
) -> Result<Materialized> {
    let thread_id = &tuple.config.thread_id;
    let cp = tuple.checkpoint.id;
    let counters = read_counters(&tuple.metadata, channel);
    if let Some(blob) = tuple.checkpoint.channel_values.get(channel) {
        let value = decode_messages_value(blob, thread_id, cp)?;
        return Ok(Materialized {
            channel: DeltaMessages::from_value(frequency, value).with_counters(counters),
            replayed_writes: 0,
            seed_checkpoint: Some(cp),
        });
    }
    // A full record without a version of the channel has none on this path: empty. A relative
    // record (`RELATIVE_RECORD_V`) lists only what its step changed, so there a missing version
    // is the parent's, unknown here: the walk finds it (kernel-spec R43, never "empty").
    if !tuple.checkpoint.channel_versions.contains_key(channel)
        && tuple.checkpoint.v != crate::model::RELATIVE_RECORD_V
    {
        return Ok(Materialized {
            channel: DeltaMessages::new(frequency).with_counters(counters),
            replayed_writes: 0,
            seed_checkpoint: None,
        });
    }
    let config = CheckpointConfig {
        thread_id: thread_id.clone(),
        checkpoint_ns: tuple.config.checkpoint_ns.clone(),
        checkpoint_id: Some(cp),
    };
    let mut histories = saver
        .delta_channel_history(&config, &[ChannelName::new(channel)])
        .await?;
    // A walk that leaves the channel out read nothing for it (a saver that breaks the
    // trait's contract): an error, never an empty value in its place (before 2026-12-02 it
    // read as an empty list, which the next snapshot would have stored).
    let history = histories.remove(channel).ok_or_else(|| Error::Corrupt {
        thread_id: thread_id.clone(),
        checkpoint_id: cp,
        what: format!("delta history of channel {channel}"),
        detail: "the saver's history walk returned no entry for the channel".into(),
    })?;
    let restored =
        DeltaMessages::restore(frequency, &history, thread_id, cp)?.with_counters(counters);
    Ok(Materialized {
        channel: restored,
        replayed_writes: history.writes.len(),
        seed_checkpoint: history.seed_checkpoint,
    })
}

#[cfg(test)]
mod restore_tests {
    use super::*;
    use crate::model::PendingWrite;

    /// A walk with neither seed nor write restores an unavailable channel, as a record without
    /// a version of it does (before, a relative record's walk gave an available empty list,
    /// which the superstep bound then snapshotted).
    #[test]
    fn an_empty_walk_restores_a_channel_never_written() {
        let frequency = SnapshotFrequency::default();
        // At the superstep bound, where a written channel snapshots.
        let due = DeltaCounters {
            updates: 0,
            supersteps: u32::MAX - 1,
        };
        let mut ch = DeltaMessages::restore(
            frequency,
            &DeltaChannelHistory::default(),
            &ThreadId::new("t"),
            CheckpointId::generate(),
        )
        .expect("restores")
        .with_counters(due);
        assert!(!ch.is_available());
        assert!(ch.value().is_empty());
        assert_eq!(ch.on_checkpoint(false), SnapshotDecision::Skip);
        let mut written = DeltaMessages::from_value(frequency, Vec::new()).with_counters(due);
        assert!(
            written.on_checkpoint(false).is_snapshot(),
            "the bound applies"
        );
    }

    /// A replay that stamps ids on id-less messages (a legacy seed) drops the stored bytes, so
    /// the next snapshot stores the ids the value now holds (kernel-spec R41); before, the
    /// snapshot stored the id-less bytes and every later read stamped new random ids.
    #[test]
    fn a_replay_that_stamps_ids_snapshots_them() {
        let seed = Blob::messages(
            MessagesKind::Snapshot,
            &[serde_json::json!({"type": "human", "content": "a"})],
        )
        .expect("serialisable");
        let write = DeltaWrite::from(vec![Message::ai("b").with_id("b1")])
            .to_blob()
            .expect("serialisable");
        let history = DeltaChannelHistory {
            seed: Some(seed),
            writes: vec![PendingWrite {
                task_id: crate::ids::TaskId::new("t"),
                idx: 0,
                channel: MESSAGES.into(),
                value: write,
                task_path: crate::ids::TaskPath::default(),
            }],
            seed_checkpoint: None,
        };
        let thread = ThreadId::new("t");
        let mut ch = DeltaMessages::restore(
            SnapshotFrequency::default(),
            &history,
            &thread,
            CheckpointId::generate(),
        )
        .expect("restores");
        let stamped = ch.value()[0].id.clone().expect("an id was stamped");
        let Blob::Messages(list) = ch.snapshot_blob().expect("serialisable") else {
            panic!("a message list");
        };
        let first: serde_json::Value = serde_json::from_slice(&list.items[0]).expect("json");
        assert_eq!(first["id"], serde_json::json!(stamped));
        // The next checkpoint stores them, whatever the cadence: another replay would stamp
        // other ids.
        assert_eq!(ch.on_checkpoint(false), SnapshotDecision::Forced);
        let mut plain = DeltaMessages::restore(
            SnapshotFrequency::default(),
            &DeltaChannelHistory {
                seed: None,
                ..history
            },
            &thread,
            CheckpointId::generate(),
        )
        .expect("restores");
        assert_eq!(plain.on_checkpoint(false), SnapshotDecision::Skip);
    }
}
