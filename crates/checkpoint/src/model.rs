//! The checkpoint data model of runtime-spec §4: checkpoints, metadata, tuples, pending writes and queries.

use std::collections::BTreeMap;

use serde_json::{Map, Value};

use crate::blob::Blob;
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, NodeName, RunId, TaskId, TaskPath,
    ThreadId, Timestamp,
};
use crate::mode::{ChannelMode, DeltaCounters};

/// The checkpoint format version the runtime writes (runtime-spec §4.1: `v = 4`).
pub const CHECKPOINT_FORMAT_VERSION: u32 = 4;

/// [`Checkpoint::v`] of a *relative* record: its `channel_versions` and
/// `versions_seen` list only the entries that differ from its parent's, so it
/// depends on every ancestor up to the nearest record with another `v`.
/// Savers keep that chain whenever they keep the record (prune,
/// delete_for_runs), exactly as they keep delta-history ancestors.
pub const RELATIVE_RECORD_V: u32 = 0x41;

/// Reserved channel names (runtime-spec §1).
pub mod channels {
    /// Graph input.
    pub const INPUT: &str = "__input__";
    /// An interrupt raised by a task (control write, upsert, idx −3).
    pub const INTERRUPT: &str = "__interrupt__";
    /// A resume value (control write, upsert, idx −4).
    pub const RESUME: &str = "__resume__";
    /// A task error (control write, upsert, idx −1).
    pub const ERROR: &str = "__error__";
    /// The node whose error handler must run on resume.
    pub const ERROR_SOURCE_NODE: &str = "__error_source_node__";
    /// Marker of a task that finished without writes.
    pub const NO_WRITES: &str = "__no_writes__";
    /// The `Send` topic.
    pub const TASKS: &str = "__pregel_tasks";
    /// A function's return value.
    pub const RETURN: &str = "__return__";
    /// The previous return value (functional API).
    pub const PREVIOUS: &str = "__previous__";
    /// A scheduled task (control write, upsert, idx −2).
    pub const SCHEDULED: &str = "__scheduled__";
    /// The graph's start channel.
    pub const START: &str = "__start__";
}

/// The fixed index of a control write, or `None` for a regular channel
/// (the reference's `WRITES_IDX_MAP`): control writes are upserts, regular
/// writes are insert-if-absent (runtime-spec §4.2).
pub fn control_write_index(channel: &str) -> Option<i64> {
    match channel {
        channels::ERROR => Some(-1),
        channels::SCHEDULED => Some(-2),
        channels::INTERRUPT => Some(-3),
        channels::RESUME => Some(-4),
        _ => None,
    }
}

/// One checkpoint: the state of every channel after a super-step.
#[derive(Clone, Debug, PartialEq)]
pub struct Checkpoint {
    /// Format version ([`CHECKPOINT_FORMAT_VERSION`]).
    pub v: u32,
    /// The checkpoint id.
    pub id: CheckpointId,
    /// When it was created.
    pub ts: Timestamp,
    /// Stored channel values. On `put`, only channels listed in `new_versions` are
    /// stored; on read, every channel whose current version has a stored value.
    /// A delta channel without a snapshot at this checkpoint is absent: that means
    /// "rebuild from history", never "empty".
    pub channel_values: BTreeMap<ChannelName, Blob>,
    /// The version of every channel.
    pub channel_versions: BTreeMap<ChannelName, ChannelVersion>,
    /// For each node, the channel versions it last consumed.
    pub versions_seen: BTreeMap<NodeName, BTreeMap<ChannelName, ChannelVersion>>,
    /// The channels updated by the step that produced this checkpoint (sorted), if known.
    pub updated_channels: Option<Vec<ChannelName>>,
}

impl Checkpoint {
    /// An empty checkpoint with a fresh id and the current time.
    ///
    /// The time is the one the id was generated at (its high 64 bits, in microseconds), not a
    /// second clock reading: the stored record keeps `ts` relative to the id, so a record's
    /// size then does not depend on how long the two readings were apart (before 2026-12-02
    /// it took one byte more when they were 64 µs or more apart, and byte counts of the same
    /// workload could differ by run).
    pub fn empty() -> Self {
        let id = CheckpointId::generate();
        Self {
            v: CHECKPOINT_FORMAT_VERSION,
            id,
            ts: Timestamp::from_micros(i64::try_from(id.as_u128() >> 64).unwrap_or(i64::MAX)),
            channel_values: BTreeMap::new(),
            channel_versions: BTreeMap::new(),
            versions_seen: BTreeMap::new(),
            updated_channels: None,
        }
    }
}

/// Where a checkpoint came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum CheckpointSource {
    /// The input checkpoint of a run.
    Input,
    /// A checkpoint after a super-step.
    Loop,
    /// A checkpoint written by `update_state`.
    Update,
    /// A copy made to start a new branch (time travel).
    Fork,
}

impl CheckpointSource {
    /// The reference's string form (`input`, `loop`, `update`, `fork`).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Input => "input",
            Self::Loop => "loop",
            Self::Update => "update",
            Self::Fork => "fork",
        }
    }

    /// Parses the string form.
    pub fn parse(s: &str) -> Option<Self> {
        Some(match s {
            "input" => Self::Input,
            "loop" => Self::Loop,
            "update" => Self::Update,
            "fork" => Self::Fork,
            _ => return None,
        })
    }
}

/// The metadata key of the DeerFlow mode marker (kernel-spec R32).
pub const CHANNEL_MODE_METADATA_KEY: &str = "deerflow_checkpoint_channel_mode";
/// The metadata key of the delta counters (runtime-spec §5.3).
pub const COUNTERS_METADATA_KEY: &str = "counters_since_delta_snapshot";

/// Checkpoint metadata: the well-known keys typed, everything else in [`CheckpointMetadata::extra`].
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CheckpointMetadata {
    /// Where the checkpoint came from.
    pub source: Option<CheckpointSource>,
    /// The step (−1 = the first input checkpoint of a thread; −2 = the synthetic empty start).
    pub step: i64,
    /// Namespace → checkpoint id of the enclosing graphs.
    pub parents: BTreeMap<CheckpointNs, CheckpointId>,
    /// The run that wrote the checkpoint.
    pub run_id: Option<RunId>,
    /// Per delta channel: updates and super-steps since its last snapshot (only non-zero pairs).
    pub counters_since_delta_snapshot: BTreeMap<ChannelName, DeltaCounters>,
    /// The mode marker (kernel-spec R32): `Some(Delta)` for delta runs; absence means full.
    pub channel_mode: Option<ChannelMode>,
    /// Free keys copied from the run config (strings, numbers, …), kept in insertion order.
    pub extra: Map<String, Value>,
}

impl CheckpointMetadata {
    /// The reference's dict view of the metadata, used by `list` filters.
    pub fn to_json(&self) -> Map<String, Value> {
        let mut map = Map::new();
        if let Some(source) = self.source {
            map.insert("source".into(), Value::from(source.as_str()));
        }
        map.insert("step".into(), Value::from(self.step));
        let parents: Map<String, Value> = self
            .parents
            .iter()
            .map(|(ns, id)| (ns.to_string(), Value::from(id.to_string())))
            .collect();
        map.insert("parents".into(), Value::Object(parents));
        if let Some(run_id) = &self.run_id {
            map.insert("run_id".into(), Value::from(run_id.as_str()));
        }
        if !self.counters_since_delta_snapshot.is_empty() {
            let counters: Map<String, Value> = self
                .counters_since_delta_snapshot
                .iter()
                .map(|(c, n)| {
                    (
                        c.to_string(),
                        Value::from(vec![Value::from(n.updates), Value::from(n.supersteps)]),
                    )
                })
                .collect();
            map.insert(COUNTERS_METADATA_KEY.into(), Value::Object(counters));
        }
        if let Some(mode) = self.channel_mode {
            map.insert(CHANNEL_MODE_METADATA_KEY.into(), Value::from(mode.as_str()));
        }
        for (k, v) in &self.extra {
            map.entry(k.clone()).or_insert_with(|| v.clone());
        }
        map
    }

    /// Whether every `(key, value)` of `filter` equals the metadata's value for that key, as
    /// the reference's in-memory saver compares them: a key the metadata lacks compares as
    /// `null`, and values compare by [`json_equal`] (numbers by value, so `1.0` matches `1`).
    pub fn matches(&self, filter: &Map<String, Value>) -> bool {
        if filter.is_empty() {
            return true;
        }
        let json = self.to_json();
        filter
            .iter()
            .all(|(k, v)| json_equal(json.get(k).unwrap_or(&Value::Null), v))
    }
}

/// JSON equality as Python compares decoded JSON numbers: by value (`1`, `1.0` and `1e0` are
/// equal), arrays element by element, objects key by key in any order; otherwise as
/// `serde_json::Value` compares, so unlike Python a boolean never equals a number
/// (`true` is not `1`).
pub fn json_equal(a: &Value, b: &Value) -> bool {
    match (a, b) {
        (Value::Number(x), Value::Number(y)) => match (integer(x), integer(y)) {
            (Some(i), Some(j)) => i == j,
            (Some(i), None) => float_is(y, i),
            (None, Some(j)) => float_is(x, j),
            (None, None) => x.as_f64() == y.as_f64(),
        },
        (Value::Array(x), Value::Array(y)) => {
            x.len() == y.len() && x.iter().zip(y).all(|(a, b)| json_equal(a, b))
        }
        (Value::Object(x), Value::Object(y)) => {
            x.len() == y.len()
                && x.iter()
                    .all(|(k, v)| y.get(k).is_some_and(|w| json_equal(v, w)))
        }
        _ => a == b,
    }
}

/// The value of an integer JSON number (`None` for a float).
fn integer(n: &serde_json::Number) -> Option<i128> {
    n.as_i64()
        .map(i128::from)
        .or_else(|| n.as_u64().map(i128::from))
}

/// Whether the float `n` is exactly the integer `i` (Python compares an int with a float
/// exactly, not through the float nearest the int).
fn float_is(n: &serde_json::Number, i: i128) -> bool {
    // Every integer a JSON number holds here fits in 2^64 in magnitude, where an f64 with no
    // fraction converts to i128 exactly.
    const BOUND: f64 = 18_446_744_073_709_551_616.0;
    n.as_f64()
        .is_some_and(|f| f.fract() == 0.0 && f.abs() <= BOUND && f as i128 == i)
}

/// Addresses a thread's checkpoint: `checkpoint_id = None` means the latest.
#[derive(Clone, Debug, PartialEq, Eq, Hash, Default)]
pub struct CheckpointConfig {
    /// The thread.
    pub thread_id: ThreadId,
    /// The namespace (root = `""`).
    pub checkpoint_ns: CheckpointNs,
    /// A specific checkpoint, or `None` for the latest.
    pub checkpoint_id: Option<CheckpointId>,
}

impl CheckpointConfig {
    /// The latest checkpoint of `thread_id` in the root namespace.
    pub fn latest(thread_id: impl Into<ThreadId>) -> Self {
        Self {
            thread_id: thread_id.into(),
            checkpoint_ns: CheckpointNs::root(),
            checkpoint_id: None,
        }
    }

    /// Sets the namespace (builder-lite).
    #[must_use]
    pub fn with_ns(mut self, ns: impl Into<CheckpointNs>) -> Self {
        self.checkpoint_ns = ns.into();
        self
    }

    /// Sets the checkpoint id (builder-lite).
    #[must_use]
    pub fn with_checkpoint_id(mut self, id: CheckpointId) -> Self {
        self.checkpoint_id = Some(id);
        self
    }
}

/// One pending write: a task's write to a channel, attached to the checkpoint its step started from.
#[derive(Clone, Debug, PartialEq)]
pub struct PendingWrite {
    /// The task that wrote it.
    pub task_id: TaskId,
    /// The write's index within the task (control writes have fixed negative indexes).
    pub idx: i64,
    /// The channel written.
    pub channel: ChannelName,
    /// The value written.
    pub value: Blob,
    /// The task path (sort key).
    pub task_path: TaskPath,
}

/// The reference's `writes_sort_key`: `(task_path, task_id, idx)`.
pub(crate) fn sort_writes(writes: &mut [PendingWrite]) {
    writes.sort_by(|a, b| {
        (a.task_path.as_str(), a.task_id.as_str(), a.idx).cmp(&(
            b.task_path.as_str(),
            b.task_id.as_str(),
            b.idx,
        ))
    });
}

/// A checkpoint with its address, metadata, parent and pending writes.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointTuple {
    /// The address, with `checkpoint_id` set.
    pub config: CheckpointConfig,
    /// The checkpoint.
    pub checkpoint: Checkpoint,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
    /// The parent's address, if any.
    pub parent_config: Option<CheckpointConfig>,
    /// Pending writes in `(task_path, task_id, idx)` order.
    pub pending_writes: Vec<PendingWrite>,
}

/// A checkpoint read together with what completing a relative record takes
/// ([`Saver::get_tuple_with_ancestry`](crate::Saver::get_tuple_with_ancestry)).
///
/// A relative record ([`RELATIVE_RECORD_V`]) lists only the channel versions its step
/// changed; the others are those of the nearest ancestor that lists them, up to the first
/// full record. `ancestors` are those records, and `inherited` the values stored under the
/// versions they give, so a reader needs no further call to know every channel's version
/// and value.
#[derive(Clone, Debug, PartialEq)]
pub struct TupleWithAncestry {
    /// What [`get_tuple`](crate::Saver::get_tuple) returns for the checkpoint.
    pub tuple: CheckpointTuple,
    /// The records a relative record depends on: its ancestors, nearest first, up to and
    /// including the first full record, at most the limit asked for (what
    /// [`get_ancestors_without_values`](crate::Saver::get_ancestors_without_values) returns
    /// from its parent, cut after the first full record). Empty for a full record.
    pub ancestors: Vec<CheckpointTuple>,
    /// Every key of [`inherited_keys`] (empty unless the record is relative), with the value
    /// stored under it, or `None` when none is (a channel that was empty at that version).
    pub inherited: BTreeMap<(ChannelName, ChannelVersion), Option<Blob>>,
}

/// The channel versions a relative record inherits from `ancestors` (nearest first): each
/// channel the record does not list, at the version of the nearest ancestor that lists it,
/// looking no further than the first full record. None for a full record.
///
/// A relative record never drops a channel its parent has (the runtime writes a full record
/// then), so these and the record's own entries are all the versions it holds, provided the
/// ancestors reach a full record.
///
/// ```
/// use antler_checkpoint::{inherited_keys, ChannelVersion, Checkpoint, RELATIVE_RECORD_V};
///
/// let mut full = Checkpoint::empty();
/// full.channel_versions.insert("a".into(), ChannelVersion::new(1));
/// full.channel_versions.insert("b".into(), ChannelVersion::new(1));
/// let mut parent = Checkpoint::empty();
/// parent.v = RELATIVE_RECORD_V;
/// parent.channel_versions.insert("b".into(), ChannelVersion::new(2));
/// let mut head = Checkpoint::empty();
/// head.v = RELATIVE_RECORD_V;
/// head.channel_versions.insert("c".into(), ChannelVersion::new(3));
///
/// let keys = inherited_keys(&head, [&parent, &full]);
/// assert_eq!(keys, vec![("b".into(), ChannelVersion::new(2)), ("a".into(), ChannelVersion::new(1))]);
/// assert!(inherited_keys(&full, [&parent]).is_empty());
/// ```
pub fn inherited_keys<'a>(
    record: &Checkpoint,
    ancestors: impl IntoIterator<Item = &'a Checkpoint>,
) -> Vec<(ChannelName, ChannelVersion)> {
    if record.v != RELATIVE_RECORD_V {
        return Vec::new();
    }
    let mut listed: std::collections::BTreeSet<&ChannelName> =
        record.channel_versions.keys().collect();
    let mut out = Vec::new();
    for a in ancestors {
        for (c, v) in &a.channel_versions {
            if listed.insert(c) {
                out.push((c.clone(), *v));
            }
        }
        if a.v != RELATIVE_RECORD_V {
            break;
        }
    }
    out
}

/// What the delta history walk found for one channel (runtime-spec §5.5).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct DeltaChannelHistory {
    /// The nearest stored value on the path (snapshot or legacy plain value), if any.
    pub seed: Option<Blob>,
    /// The writes to replay on top of the seed, oldest first.
    pub writes: Vec<PendingWrite>,
    /// The checkpoint that held the seed, if any.
    pub seed_checkpoint: Option<CheckpointId>,
}

/// A `list` query; every field narrows the result.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct ListQuery {
    /// Only this thread (all threads when `None`).
    pub thread_id: Option<ThreadId>,
    /// Only this namespace (all namespaces when `None`).
    pub checkpoint_ns: Option<CheckpointNs>,
    /// Only checkpoints whose metadata has these key/value pairs.
    pub filter: Map<String, Value>,
    /// Only checkpoints with an id less than this one.
    pub before: Option<CheckpointId>,
    /// At most this many (after filtering).
    pub limit: Option<usize>,
}

impl ListQuery {
    /// Every checkpoint of `thread_id`, newest first.
    pub fn thread(thread_id: impl Into<ThreadId>) -> Self {
        Self {
            thread_id: Some(thread_id.into()),
            ..Self::default()
        }
    }
}

/// What `prune` does with each thread.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum PruneStrategy {
    /// Keep the latest checkpoint of each namespace (and, for delta channels,
    /// every ancestor back to the seed so the state stays readable).
    KeepLatest,
    /// Delete every checkpoint of the thread.
    Delete,
}

/// The channel versions that moved since the last stored checkpoint: `put` stores blobs only for these.
pub type ChannelVersions = BTreeMap<ChannelName, ChannelVersion>;

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// A fresh checkpoint's time is its id's: the stored record keeps `ts` relative to the id,
    /// so every empty checkpoint's record has the same size however the clock moves.
    #[test]
    fn an_empty_checkpoint_s_time_is_its_id_s() {
        let sizes: std::collections::BTreeSet<usize> = (0..2_000)
            .map(|_| {
                let cp = Checkpoint::empty();
                assert_eq!(
                    i128::from(cp.ts.as_micros()),
                    i128::try_from(cp.id.as_u128() >> 64).unwrap()
                );
                crate::codec::encode_record(&cp).len()
            })
            .collect();
        assert_eq!(sizes.len(), 1, "{sizes:?}");
    }

    /// Numbers compare by value as Python compares them, exactly between an int and a float;
    /// arrays and objects element by element; anything else as `Value` compares.
    #[test]
    fn json_equal_compares_numbers_by_value() {
        let eq = |a: Value, b: Value| (json_equal(&a, &b), json_equal(&b, &a));
        assert_eq!(eq(json!(1), json!(1.0)), (true, true));
        assert_eq!(eq(json!(-3), json!(-3.0)), (true, true));
        assert_eq!(eq(json!(1), json!(1.5)), (false, false));
        assert_eq!(eq(json!(u64::MAX), json!(u64::MAX)), (true, true));
        assert_eq!(eq(json!(u64::MAX), json!(-1)), (false, false));
        assert_eq!(eq(json!(0.5), json!(0.5)), (true, true));
        // 2^53 + 1 has no f64: the float nearest it is 2^53, which Python does not call equal.
        assert_eq!(
            eq(
                json!(9_007_199_254_740_993_i64),
                json!(9_007_199_254_740_992.0)
            ),
            (false, false)
        );
        assert_eq!(
            eq(
                json!(9_007_199_254_740_992_i64),
                json!(9_007_199_254_740_992.0)
            ),
            (true, true)
        );
        assert_eq!(
            eq(json!([1, {"a": 2}]), json!([1.0, {"a": 2.0}])),
            (true, true)
        );
        assert_eq!(eq(json!([1, 2]), json!([1])), (false, false));
        assert_eq!(
            eq(json!({"a": 1, "b": 2}), json!({"b": 2.0, "a": 1})),
            (true, true)
        );
        assert_eq!(
            eq(json!({"a": 1}), json!({"a": 1, "b": null})),
            (false, false)
        );
        assert_eq!(eq(json!(null), json!(false)), (false, false));
        assert_eq!(eq(json!("1"), json!(1)), (false, false));
    }
}
