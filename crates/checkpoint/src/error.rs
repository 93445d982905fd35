//! The crate's error type: one enum, with [`Error::kind`] for callers that branch.

use crate::ids::{CheckpointId, CheckpointNs, ThreadId};
use crate::mode::{ChannelMode, SnapshotFrequency};

/// A `Result` with this crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// What went wrong, coarsely, for callers that branch (sqlx style).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// An addressed checkpoint or parent does not exist.
    NotFound,
    /// Stored data is corrupt, truncated, cyclic or of an unknown format version.
    Corrupt,
    /// A full-mode process met a delta thread (kernel-spec R34).
    ModeMismatch,
    /// The store was created with another mode or snapshot frequency.
    Config,
    /// Another writer changed the same thread concurrently, or an operation would break history.
    Conflict,
    /// A caller-supplied value is invalid.
    InvalidInput,
    /// A value could not be (de)serialised or reduced.
    Serialization,
    /// The storage backend failed (IO, SQL, connection).
    Backend,
}

/// Every error of the checkpoint crate.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Stored bytes failed their checksum, were truncated or did not decode.
    #[error("thread {thread_id}: checkpoint {checkpoint_id}: corrupt {what}: {detail}")]
    Corrupt {
        /// The thread read.
        thread_id: ThreadId,
        /// The checkpoint being read.
        checkpoint_id: CheckpointId,
        /// Which record (checkpoint record, metadata, blob of a channel, write, message body).
        what: String,
        /// What was wrong.
        detail: String,
    },
    /// A stored record has a format version this build does not know.
    #[error(
        "thread {thread_id}: checkpoint {checkpoint_id}: {what} has unknown format version {version}"
    )]
    UnknownFormat {
        /// The thread read.
        thread_id: ThreadId,
        /// The checkpoint being read.
        checkpoint_id: CheckpointId,
        /// Which record.
        what: String,
        /// The version byte found.
        version: u8,
    },
    /// A parent pointer leads to a checkpoint that does not exist.
    #[error(
        "thread {thread_id}: checkpoint {checkpoint_id} names parent {parent_id}, which does not exist"
    )]
    MissingParent {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint whose parent is missing.
        checkpoint_id: CheckpointId,
        /// The missing parent.
        parent_id: CheckpointId,
    },
    /// Parent pointers form a cycle.
    #[error("thread {thread_id}: parent pointers cycle back to checkpoint {checkpoint_id}")]
    ParentCycle {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint seen twice.
        checkpoint_id: CheckpointId,
    },
    /// A write, walk or fork addressed a checkpoint that does not exist.
    #[error(
        "thread {thread_id}: checkpoint {checkpoint_id} does not exist in namespace {checkpoint_ns:?}"
    )]
    UnknownCheckpoint {
        /// The thread.
        thread_id: ThreadId,
        /// The namespace.
        checkpoint_ns: CheckpointNs,
        /// The missing checkpoint.
        checkpoint_id: CheckpointId,
    },
    /// An operation needs a specific checkpoint id and got none.
    #[error("thread {thread_id}: {operation} needs a checkpoint id")]
    CheckpointIdRequired {
        /// The thread.
        thread_id: ThreadId,
        /// The operation.
        operation: &'static str,
    },
    /// A full-mode process met a delta-mode checkpoint (kernel-spec R34).
    #[error(
        "thread {thread_id} requires delta mode; materialize and convert its checkpoints before using full mode{}",
        checkpoint_id.map(|c| format!(" (checkpoint {c})")).unwrap_or_default()
    )]
    CheckpointModeMismatch {
        /// The thread.
        thread_id: ThreadId,
        /// The delta checkpoint met, if known.
        checkpoint_id: Option<CheckpointId>,
    },
    /// The store records another mode or snapshot frequency than the one asked for. A store
    /// recording delta mode opened in full mode is the delta→full direction of kernel-spec
    /// R34, which fails closed: its [`kind`](Self::kind) is [`ErrorKind::ModeMismatch`] and
    /// its text says the store requires delta mode; any other mismatch is a configuration
    /// error.
    #[error(
        "store records mode {stored_mode} and snapshot frequency {stored_frequency}, but was opened with mode {requested_mode} and snapshot frequency {requested_frequency}; all processes sharing a store must use one configuration{}",
        if *stored_mode == crate::ChannelMode::Delta && *requested_mode == crate::ChannelMode::Full {
            " (the store requires delta mode: its threads' history cannot be read in full mode, and the delta to full direction is not supported)"
        } else {
            ""
        }
    )]
    StoreConfigMismatch {
        /// The recorded mode.
        stored_mode: ChannelMode,
        /// The recorded frequency.
        stored_frequency: SnapshotFrequency,
        /// The requested mode.
        requested_mode: ChannelMode,
        /// The requested frequency.
        requested_frequency: SnapshotFrequency,
    },
    /// The store's recorded configuration does not parse (a mode or frequency no build
    /// writes), or the store holds checkpoints but records no configuration or only half of
    /// one (its record was removed or damaged): opening it would read data, or record the
    /// caller's configuration over data, written under an unknown one.
    #[error(
        "store's recorded configuration is {detail}; refusing to open a store written under an unknown configuration"
    )]
    StoreConfigDamaged {
        /// What is missing or unreadable.
        detail: String,
    },
    /// The database schema is newer than this build understands.
    #[error(
        "store schema version {found} is newer than the supported version {supported}; upgrade antler"
    )]
    SchemaTooNew {
        /// The version found.
        found: i64,
        /// The newest version this build knows.
        supported: i64,
    },
    /// Deleting the requested checkpoints would make a remaining delta checkpoint unreadable.
    ///
    /// This crate's savers no longer return it: `prune` and `delete_for_runs` keep what a
    /// remaining checkpoint needs instead of refusing (runtime-spec §5.8). It stays for other
    /// [`Saver`](crate::Saver) implementations that refuse.
    #[error(
        "thread {thread_id}: checkpoint {checkpoint_id} replays history from checkpoint {needed_id}, which the operation would delete"
    )]
    WouldBreakDeltaHistory {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint that would become unreadable.
        checkpoint_id: CheckpointId,
        /// The ancestor it needs.
        needed_id: CheckpointId,
    },
    /// Another writer raced this one on the same thread.
    #[error("thread {thread_id}: concurrent write conflict: {detail}")]
    Conflict {
        /// The thread.
        thread_id: ThreadId,
        /// What collided.
        detail: String,
    },
    /// An invalid argument (e.g. `snapshot frequency must be positive`).
    #[error("{0}")]
    InvalidArgument(String),
    /// A key or number column of a stored row holds a value no build writes (a negative
    /// sequence number or epoch, a checkpoint id of the wrong length, on SQLite a value of
    /// another type than the column's): the store was damaged.
    #[error("{context}: damaged column: {detail}")]
    DamagedColumn {
        /// Which backend, thread and column.
        context: String,
        /// What was found.
        detail: String,
    },
    /// The store's file as a whole is damaged (SQLite: the file is corrupt, or is not a
    /// database): no retry helps.
    #[error("{context}: the store is damaged: {detail}")]
    StoreDamaged {
        /// Which backend and operation.
        context: String,
        /// What the backend reported.
        detail: String,
    },
    /// Another writer held the store's lock for longer than the saver waits (SQLite's busy
    /// timeout): nothing was written; retry.
    #[error("{context}: the store stayed locked by another writer: {detail}; retry")]
    StoreBusy {
        /// Which backend and operation.
        context: String,
        /// What the backend reported.
        detail: String,
    },
    /// A value could not be serialised or deserialised.
    #[error("thread {thread_id}: checkpoint {checkpoint_id}: {what}: {source}")]
    Serialization {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint.
        checkpoint_id: CheckpointId,
        /// Which value.
        what: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The message reducer rejected a replayed write.
    #[error(
        "thread {thread_id}: checkpoint {checkpoint_id}: replaying channel {channel}: {source}"
    )]
    Reducer {
        /// The thread.
        thread_id: ThreadId,
        /// The checkpoint being materialised.
        checkpoint_id: CheckpointId,
        /// The channel.
        channel: String,
        /// The reducer error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
    /// The storage backend failed.
    #[error("{context}: {source}")]
    Backend {
        /// What was being done, naming the thread where there is one.
        context: String,
        /// The driver error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync + 'static>,
    },
}

impl Error {
    /// A read of a thread's latest checkpoint that found it deleted mid-read on three tries in
    /// a row (writers and deleters keep racing it): a [`Error::Conflict`] to retry.
    pub(crate) fn latest_deleted_while_read(thread: &ThreadId) -> Self {
        Self::Conflict {
            thread_id: thread.clone(),
            detail: "the thread's latest checkpoint was deleted while it was read, three times"
                .into(),
        }
    }

    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::Corrupt { .. }
            | Self::UnknownFormat { .. }
            | Self::ParentCycle { .. }
            | Self::DamagedColumn { .. }
            | Self::StoreDamaged { .. } => ErrorKind::Corrupt,
            Self::MissingParent { .. } | Self::UnknownCheckpoint { .. } => ErrorKind::NotFound,
            Self::CheckpointModeMismatch { .. } => ErrorKind::ModeMismatch,
            Self::StoreConfigMismatch {
                stored_mode: crate::ChannelMode::Delta,
                requested_mode: crate::ChannelMode::Full,
                ..
            } => ErrorKind::ModeMismatch,
            Self::StoreConfigMismatch { .. }
            | Self::StoreConfigDamaged { .. }
            | Self::SchemaTooNew { .. } => ErrorKind::Config,
            Self::WouldBreakDeltaHistory { .. }
            | Self::Conflict { .. }
            | Self::StoreBusy { .. } => ErrorKind::Conflict,
            Self::InvalidArgument(_) | Self::CheckpointIdRequired { .. } => ErrorKind::InvalidInput,
            Self::Serialization { .. } | Self::Reducer { .. } => ErrorKind::Serialization,
            Self::Backend { .. } => ErrorKind::Backend,
        }
    }

    #[cfg_attr(
        not(any(feature = "sqlite", feature = "postgres")),
        allow(dead_code, reason = "only the database savers open a recorded store")
    )]
    pub(crate) fn backend(
        context: impl Into<String>,
        source: impl std::error::Error + Send + Sync + 'static,
    ) -> Self {
        Self::Backend {
            context: context.into(),
            source: Box::new(source),
        }
    }
}
