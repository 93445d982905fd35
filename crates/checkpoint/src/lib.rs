//! Durable thread state for antler: the checkpoint model, the [`Saver`] trait and the memory,
//! SQLite and PostgreSQL savers, in full and delta channel modes.
//!
//! This crate is the storage half of antler's promise that a thread's state
//! survives restarts, crashes and forks without costing storage that grows with
//! the square of the conversation. It knows nothing about graphs, middleware or
//! factories; the runtime (`antler-graph`) drives it through [`Saver`].
//!
//! - [`model`]: checkpoints, metadata, tuples, pending writes (runtime-spec §4).
//! - [`Saver`]: the async, object-safe storage contract; [`MemorySaver`],
//!   `SqliteSaver` (feature `sqlite`, default) and `PostgresSaver` (feature
//!   `postgres`) implement it on one shared engine and one byte format
//!   (`docs/checkpoint-format.md`).
//! - [`mode`]: full and delta channel modes, the store's recorded
//!   configuration and the fail-closed mode gate (kernel-spec R26–R35).
//! - [`delta`]: the delta `messages` channel (cadence counters, snapshot
//!   decision, migration seed, materialisation by replay).
//! - `testing` (feature `test-util`): the conformance suite every saver passes.
//!
//! # How a runtime drives a saver
//!
//! One super-step, in the order the runtime must call (runtime-spec §2, §5):
//!
//! 1. **Load**: `get_tuple(&CheckpointConfig::latest(thread))` (or an addressed
//!    checkpoint). Channels with a stored value decode from
//!    `checkpoint.channel_values`; a delta channel with a version but no value is
//!    rebuilt with [`delta::materialize`] (seed + at most `F` replayed writes).
//!    In full mode, check the head with [`mode::check_mode`] before running
//!    (the saver itself also refuses delta checkpoints when opened in full mode).
//!    A runtime that already holds the thread's channel values (a hot cache)
//!    reads the head with [`Saver::get_tuple_without_values`] instead: the same
//!    tuple without `channel_values`, at a cost that does not grow with the thread.
//!    A runtime whose records list only the channels a step changed
//!    ([`RELATIVE_RECORD_V`]) reads a record with the ancestors it depends on and
//!    the values they give it in one call, [`Saver::get_tuple_with_ancestry`], or
//!    reads those values by key, with [`Saver::get_channel_values`].
//!    A run that starts a new branch (from an older checkpoint) takes its
//!    versions above [`Saver::max_channel_version`], so that no two branches
//!    store different values under one `(channel, version)`.
//! 2. **Tasks**: each finished task's writes go to `put_writes` against the
//!    checkpoint the step *started from*, with its task id and task path.
//!    Delta-channel writes are [`delta::DeltaWrite::to_blob`] after
//!    [`delta::DeltaWrite::assign_missing_ids`]; other channels serialise themselves
//!    into a [`Blob`] (usually [`Blob::json`]).
//! 3. **Barrier**: writes are applied in task-path order; the delta channel takes
//!    the step's batch with [`delta::DeltaMessages::update`].
//! 4. **Checkpoint**: call [`delta::DeltaMessages::on_checkpoint`] once per saved
//!    checkpoint; if it says snapshot, put [`delta::DeltaMessages::snapshot_blob`]
//!    into `channel_values` and make sure the channel is in `new_versions` (bump its
//!    version if the step did not move it). Write the counters into metadata with
//!    [`delta::write_counters`] and the mode marker with [`mode::inject_mode_marker`].
//!    Then `put(&parent_config, checkpoint, metadata, &new_versions)`, where
//!    `new_versions` lists only the channels whose version moved.
//!
//! Ids: [`CheckpointId::generate`] is strictly increasing within a process;
//! [`ChannelVersion::next_after`] gives the one new version of a step.
//!
//! ```
//! use antler_checkpoint::{Blob, Checkpoint, CheckpointConfig, CheckpointMetadata, MemorySaver, Saver, StoreConfig};
//!
//! # fn block_on<F: std::future::Future>(f: F) -> F::Output {
//! #     tokio::runtime::Builder::new_current_thread().build().expect("runtime").block_on(f)
//! # }
//! # block_on(async {
//! let saver = MemorySaver::new(StoreConfig::full());
//! let mut checkpoint = Checkpoint::empty();
//! checkpoint.channel_versions.insert("topic".into(), 1.into());
//! checkpoint.channel_values.insert("topic".into(), Blob::json(&"rust")?);
//! let new_versions = checkpoint.channel_versions.clone();
//! let stored = saver
//!     .put(&CheckpointConfig::latest("thread-1"), checkpoint, CheckpointMetadata::default(), &new_versions)
//!     .await?;
//! let tuple = saver.get_tuple(&stored).await?.expect("just stored");
//! assert_eq!(tuple.checkpoint.channel_values["topic"].decode_json::<String>()?, "rust");
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).expect("example");
//! ```
#![warn(missing_docs)]

mod blob;
mod codec;
pub mod delta;
mod engine;
mod error;
mod ids;
mod memory;
pub mod mode;
pub mod model;
#[cfg(feature = "postgres")]
mod postgres;
mod saver;
#[cfg(feature = "sqlite")]
mod sqlite;
#[cfg(feature = "test-util")]
pub mod testing;

pub use blob::{Blob, MessagesBlob, MessagesKind};
pub use engine::{BodyScan, StorageStats};
pub use error::{Error, ErrorKind, Result};
pub use ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, NULL_TASK_ID, NodeName,
    ParseCheckpointIdError, RunId, TaskId, TaskPath, ThreadId, Timestamp,
};
pub use memory::MemorySaver;
pub use mode::{ChannelMode, DeltaCounters, SnapshotFrequency, StoreConfig};
pub use model::{
    ChannelVersions, Checkpoint, CheckpointConfig, CheckpointMetadata, CheckpointSource,
    CheckpointTuple, DeltaChannelHistory, ListQuery, PendingWrite, PruneStrategy,
    RELATIVE_RECORD_V, TupleWithAncestry, inherited_keys, json_equal,
};
#[cfg(feature = "postgres")]
pub use postgres::{POSTGRES_SCHEMA_VERSION, PostgresOptions, PostgresSaver};
pub use saver::{Saver, get_tuple_with_ancestry_default};
#[cfg(feature = "sqlite")]
pub use sqlite::{SQLITE_SCHEMA_VERSION, SqliteOptions, SqliteSaver};
