//! Channel modes, snapshot cadence configuration, mode markers and the fail-closed mode gate
//! (kernel-spec R26–R35).
//!
//! Only the `full → delta` direction is supported: a delta-mode process reads
//! legacy full checkpoints (the old plain value seeds the delta channel), but a
//! full-mode process that meets a delta checkpoint fails with
//! [`Error::CheckpointModeMismatch`],
//! whose text contains `requires delta mode`, instead of showing an empty or
//! partial state.

use std::fmt;
use std::num::NonZeroU32;

use serde::{Deserialize, Serialize};

use crate::error::{Error, Result};
use crate::ids::ThreadId;
use crate::model::{CheckpointMetadata, CheckpointTuple};

/// How the `messages` channel is stored (kernel-spec R26).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ChannelMode {
    /// Every checkpoint whose step changed `messages` stores the whole list (the default).
    #[default]
    Full,
    /// Checkpoints store only the step's writes, plus a snapshot every `F` updates.
    Delta,
}

impl ChannelMode {
    /// `"full"` or `"delta"`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Full => "full",
            Self::Delta => "delta",
        }
    }

    /// Parses `"full"` or `"delta"`.
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "full" => Some(Self::Full),
            "delta" => Some(Self::Delta),
            _ => None,
        }
    }
}

impl fmt::Display for ChannelMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How many updates of a delta channel may accumulate before a snapshot (kernel-spec R27, default 10).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(try_from = "u32", into = "u32")]
pub struct SnapshotFrequency(NonZeroU32);

impl SnapshotFrequency {
    /// The default frequency, 10.
    pub const DEFAULT: Self = Self(NonZeroU32::MIN.saturating_add(9));

    /// A frequency of `n` updates.
    ///
    /// # Errors
    /// [`Error::InvalidArgument`] `snapshot frequency must be positive` when `n` is 0 (R29).
    pub fn new(n: u32) -> Result<Self> {
        NonZeroU32::new(n)
            .map(Self)
            .ok_or_else(|| Error::InvalidArgument("snapshot frequency must be positive".into()))
    }

    /// The number of updates.
    pub fn get(self) -> u32 {
        self.0.get()
    }
}

impl Default for SnapshotFrequency {
    fn default() -> Self {
        Self::DEFAULT
    }
}

impl TryFrom<u32> for SnapshotFrequency {
    type Error = Error;
    fn try_from(n: u32) -> Result<Self> {
        Self::new(n)
    }
}

impl From<SnapshotFrequency> for u32 {
    fn from(f: SnapshotFrequency) -> u32 {
        f.get()
    }
}

impl fmt::Display for SnapshotFrequency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A delta channel's cadence counters (runtime-spec §5.3), persisted in metadata as `[updates, supersteps]`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct DeltaCounters {
    /// Checkpoints at which the channel's version moved, since the last snapshot.
    pub updates: u32,
    /// Checkpoints of any kind since the last snapshot.
    pub supersteps: u32,
}

impl DeltaCounters {
    /// Whether both counters are zero (such pairs are not stored).
    pub fn is_zero(self) -> bool {
        self.updates == 0 && self.supersteps == 0
    }
}

/// The configuration a store records at creation and checks at every open.
///
/// Opening a store with a different mode or snapshot frequency fails with
/// [`Error::StoreConfigMismatch`], except the one supported migration,
/// `full → delta`, which must be asked for with
/// [`StoreConfig::allow_full_to_delta_migration`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct StoreConfig {
    /// The channel mode of every process sharing the store (default full).
    pub mode: ChannelMode,
    /// The snapshot frequency of delta channels (default 10; recorded in both modes).
    pub snapshot_frequency: SnapshotFrequency,
    /// Whether opening a full-mode store in delta mode converts the store's record to delta (default false).
    pub migrate_full_to_delta: bool,
}

impl StoreConfig {
    /// Full mode with the default frequency.
    pub fn full() -> Self {
        Self::default()
    }

    /// Delta mode with the given snapshot frequency.
    pub fn delta(snapshot_frequency: SnapshotFrequency) -> Self {
        Self {
            mode: ChannelMode::Delta,
            snapshot_frequency,
            migrate_full_to_delta: false,
        }
    }

    /// Allows opening a store recorded as full mode in delta mode, converting its record (default false).
    #[must_use]
    pub fn allow_full_to_delta_migration(mut self) -> Self {
        self.migrate_full_to_delta = true;
        self
    }

    /// Decides what opening a store recorded with `stored` means for `self`:
    /// `Ok(false)` nothing to record, `Ok(true)` the record must be rewritten.
    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database savers open a recorded store")
    )]
    pub(crate) fn check_against(
        self,
        stored: Option<(ChannelMode, SnapshotFrequency)>,
    ) -> Result<bool> {
        let Some((mode, frequency)) = stored else {
            return Ok(true);
        };
        let migrating = mode == ChannelMode::Full
            && self.mode == ChannelMode::Delta
            && self.migrate_full_to_delta;
        if !migrating && (mode != self.mode || frequency != self.snapshot_frequency) {
            return Err(Error::StoreConfigMismatch {
                stored_mode: mode,
                stored_frequency: frequency,
                requested_mode: self.mode,
                requested_frequency: self.snapshot_frequency,
            });
        }
        Ok(migrating)
    }
}

/// Whether checkpoint metadata marks a delta-mode checkpoint (kernel-spec R33):
/// the mode marker says delta, or the counters map has a `messages` entry, whether they sit in
/// their typed fields or, as a metadata dict copied key by key puts them, in `extra` (the same
/// dict view `list` filters read).
pub fn metadata_uses_delta(metadata: &CheckpointMetadata) -> bool {
    marked_delta(metadata) || has_counters(metadata, "messages")
}

/// Whether the metadata's mode marker says delta, in its typed field or in `extra`.
pub(crate) fn marked_delta(metadata: &CheckpointMetadata) -> bool {
    metadata.channel_mode == Some(ChannelMode::Delta)
        || metadata
            .extra
            .get(crate::model::CHANNEL_MODE_METADATA_KEY)
            .is_some_and(|v| v == "delta")
}

/// Whether the metadata carries snapshot counters for `channel`, in the typed field or, as a
/// metadata dict copied key by key puts them, in `extra`: what [`metadata_uses_delta`] reads,
/// so that pruning and the mode gate see the same counters.
pub(crate) fn has_counters(metadata: &CheckpointMetadata, channel: &str) -> bool {
    metadata.counters_since_delta_snapshot.contains_key(channel)
        || metadata
            .extra
            .get(crate::model::COUNTERS_METADATA_KEY)
            .and_then(serde_json::Value::as_object)
            .is_some_and(|m| m.contains_key(channel))
}

/// The counters of `channel` in `extra`, where a metadata dict copied key by key puts them,
/// in the reference's form `[updates, supersteps]`; `None` when absent or of another shape.
fn counters_in_extra(metadata: &CheckpointMetadata, channel: &str) -> Option<DeltaCounters> {
    let pair = metadata
        .extra
        .get(crate::model::COUNTERS_METADATA_KEY)?
        .as_object()?
        .get(channel)?
        .as_array()?;
    let [u, s] = pair.as_slice() else {
        return None;
    };
    Some(DeltaCounters {
        updates: u32::try_from(u.as_u64()?).ok()?,
        supersteps: u32::try_from(s.as_u64()?).ok()?,
    })
}

/// The snapshot counters of `channel`: the typed field's, else those `extra` carries (where
/// the mode gate also looks for them), else zero. The cadence reads them here, so a
/// checkpoint the gate takes as delta by its counters in `extra` also counts them.
pub fn counters_of(metadata: &CheckpointMetadata, channel: &str) -> DeltaCounters {
    metadata
        .counters_since_delta_snapshot
        .get(channel)
        .copied()
        .or_else(|| counters_in_extra(metadata, channel))
        .unwrap_or_default()
}

/// Every channel's snapshot counters, typed or carried in `extra` (the typed ones win), and
/// whether `extra`'s entry was read in full (every channel in it in the `[updates,
/// supersteps]` form), so that a reader may leave it out of the free keys.
pub fn all_counters(
    metadata: &CheckpointMetadata,
) -> (
    std::collections::BTreeMap<crate::ids::ChannelName, DeltaCounters>,
    bool,
) {
    let mut all: std::collections::BTreeMap<_, _> = metadata
        .counters_since_delta_snapshot
        .iter()
        .map(|(c, n)| (c.clone(), *n))
        .collect();
    let mut complete = true;
    if let Some(extra) = metadata.extra.get(crate::model::COUNTERS_METADATA_KEY) {
        match extra.as_object() {
            Some(map) => {
                for channel in map.keys() {
                    match counters_in_extra(metadata, channel) {
                        Some(n) => {
                            all.entry(crate::ids::ChannelName::new(channel.as_str()))
                                .or_insert(n);
                        }
                        None => complete = false,
                    }
                }
            }
            None => complete = false,
        }
    }
    (all, complete)
}

/// Whether a (possibly absent) tuple is a delta checkpoint; `None` → false (R33).
pub fn tuple_uses_delta(tuple: Option<&CheckpointTuple>) -> bool {
    tuple.is_some_and(|t| metadata_uses_delta(&t.metadata))
}

/// The gate of kernel-spec R34/R35: a full-mode process must not use a delta checkpoint.
///
/// Delta mode never gates. Call it on each snapshot a read returns, on the head
/// tuple *before* a write, and before a run on the head and on the addressed checkpoint.
///
/// # Errors
/// [`Error::CheckpointModeMismatch`] (`requires delta mode`) when `mode` is full and the tuple is delta.
pub fn check_mode(
    mode: ChannelMode,
    thread_id: &ThreadId,
    tuple: Option<&CheckpointTuple>,
) -> Result<()> {
    if mode == ChannelMode::Full && tuple_uses_delta(tuple) {
        return Err(Error::CheckpointModeMismatch {
            thread_id: thread_id.clone(),
            checkpoint_id: tuple.map(|t| t.checkpoint.id),
        });
    }
    Ok(())
}

/// Injects the mode marker into metadata (kernel-spec R32): delta sets it, full removes it.
pub fn inject_mode_marker(metadata: &mut CheckpointMetadata, mode: ChannelMode) {
    metadata
        .extra
        .shift_remove(crate::model::CHANNEL_MODE_METADATA_KEY);
    metadata.channel_mode = match mode {
        ChannelMode::Delta => Some(ChannelMode::Delta),
        ChannelMode::Full => None,
    };
}
