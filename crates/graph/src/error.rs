//! The crate's error types: one [`Error`] for running graphs, a narrow [`BuildError`] for `compile()`.

use crate::ids::NodeId;

/// A boxed error as returned by user code (nodes, reducers).
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// Result alias of this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Why [`crate::StateGraph::compile`] rejected a graph.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// An edge, router target or interrupt list names a node that was never added.
    #[error("unknown node '{node}' referenced by {context}")]
    UnknownNode {
        /// The missing node.
        node: String,
        /// Where it was referenced.
        context: String,
    },
    /// A node name was added twice.
    #[error("node '{node}' is already present")]
    DuplicateNode {
        /// The node.
        node: String,
    },
    /// A node name collides with a reserved name (`__start__`, `__end__`, `__…`) or contains `|`/`:`.
    #[error("node name '{node}' is reserved or contains a separator")]
    ReservedName {
        /// The node.
        node: String,
    },
    /// No edge leaves `__start__`.
    #[error("graph has no entry point: add an edge from __start__")]
    NoEntry,
    /// A node cannot be reached from `__start__` by edges, routers, gotos or `Send`.
    #[error("node '{node}' is not reachable from __start__")]
    Unreachable {
        /// The node.
        node: String,
    },
    /// A run cannot come to an end after this node: an edge or join out of it leads to a node
    /// that cannot, or its router can pick no target that can (`__end__`, or a node that can).
    #[error("node '{node}' has no path to __end__")]
    NoPathToEnd {
        /// The node.
        node: String,
    },
    /// A channel was declared twice with different kinds or types.
    #[error("channel '{channel}' declared twice with different kinds: {first} vs {second}")]
    ChannelConflict {
        /// The channel.
        channel: String,
        /// The first declaration.
        first: String,
        /// The conflicting declaration.
        second: String,
    },
    /// A channel name is reserved or malformed.
    #[error("channel name '{channel}' is reserved")]
    ReservedChannel {
        /// The channel.
        channel: String,
    },
    /// A node has more than one router.
    #[error("node '{node}' already has a router")]
    DuplicateRouter {
        /// The node.
        node: String,
    },
    /// A delta channel was declared with snapshot frequency 0 (kernel-spec R29: it must be
    /// positive; snapshotting every update is frequency 1).
    #[error("channel '{channel}': snapshot frequency must be positive")]
    InvalidSnapshotFrequency {
        /// The channel.
        channel: String,
    },
    /// A delta channel was declared with a bound of 0 super-steps between snapshots.
    #[error("channel '{channel}': the bound on super-steps between snapshots must be positive")]
    InvalidSuperstepBound {
        /// The channel.
        channel: String,
    },
    /// A join needs at least one source.
    #[error("join into '{node}' has no sources")]
    EmptyJoin {
        /// The join target.
        node: String,
    },
}

/// Coarse classification of an [`Error`], for callers that branch.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Concurrent or ill-typed writes reached a channel.
    InvalidUpdate,
    /// The recursion limit was hit.
    RecursionLimit,
    /// A node returned an error or panicked. A subgraph's node that failed with one of the
    /// runtime's own errors inside the subgraph has that error's kind instead.
    Node,
    /// A reducer rejected the step's writes.
    Reducer,
    /// The input or config of a call is not acceptable.
    Input,
    /// A checkpoint or thread does not exist.
    NotFound,
    /// The checkpoint store failed.
    Storage,
    /// A value could not be (de)serialized.
    Serialization,
    /// The graph definition is invalid.
    Build,
    /// The thread is running already: retry when that run has finished.
    Busy,
}

/// Errors of running a compiled graph.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two writes (or two values) reached a last-value channel in one step.
    ///
    /// The text reproduces the reference's `InvalidUpdateError` byte for byte.
    #[error(
        "At key '{channel}': Can receive only one value per step. Use an Annotated key to handle multiple values.\nFor troubleshooting, visit: https://docs.langchain.com/oss/python/langgraph/errors/INVALID_CONCURRENT_GRAPH_UPDATE"
    )]
    InvalidConcurrentUpdate {
        /// The channel.
        channel: String,
    },
    /// More than one `Overwrite` reached a reducer channel in one step.
    #[error("At key '{channel}': Can receive only one Overwrite value per super-step.")]
    MultipleOverwrites {
        /// The channel.
        channel: String,
    },
    /// A write's type does not match the channel's declared write type.
    #[error("write to channel '{channel}' has the wrong type")]
    WriteType {
        /// The channel.
        channel: String,
    },
    /// A write or packet names a channel the schema does not know.
    #[error("unknown channel '{channel}'")]
    UnknownChannel {
        /// The channel.
        channel: String,
    },
    /// A router returned a node it did not declare among its targets (its path map).
    #[error(
        "the router of node '{node}' returned '{target}', which it did not declare among its targets"
    )]
    UndeclaredRoute {
        /// The node whose router it is.
        node: String,
        /// The node it returned.
        target: String,
    },
    /// A `Send`, a `goto` or `update_state`'s `as_node` names an unknown node.
    #[error("unknown node '{node}' (in a goto, a Send or as_node)")]
    UnknownNode {
        /// The node.
        node: String,
    },
    /// The recursion limit was reached.
    ///
    /// The text reproduces the reference's `GraphRecursionError` byte for byte.
    #[error(
        "Recursion limit of {limit} reached without hitting a stop condition. You can increase the limit by setting the `recursion_limit` config key.\nFor troubleshooting, visit: https://docs.langchain.com/oss/python/langgraph/errors/GRAPH_RECURSION_LIMIT"
    )]
    RecursionLimit {
        /// The configured limit.
        limit: usize,
    },
    /// A node returned an error.
    #[error("node '{node}' failed: {source}")]
    NodeFailed {
        /// The node.
        node: NodeId,
        /// What the node returned.
        #[source]
        source: BoxError,
    },
    /// A node panicked; the panic was caught.
    #[error("node '{node}' panicked: {message}")]
    NodePanicked {
        /// The node.
        node: NodeId,
        /// The panic payload, when it was a string.
        message: String,
    },
    /// A reducer rejected the writes of a step.
    #[error("reducer of channel '{channel}' failed: {source}")]
    Reducer {
        /// The channel.
        channel: String,
        /// The reducer's error.
        #[source]
        source: BoxError,
    },
    /// Neither input nor a resumable checkpoint was given.
    #[error("received no input and thread '{thread}' has nothing to resume")]
    EmptyInput {
        /// The thread.
        thread: String,
    },
    /// [`RunConfig::recursion_limit`](crate::RunConfig::recursion_limit) is zero.
    ///
    /// The text reproduces the reference's.
    #[error("recursion_limit must be at least 1")]
    InvalidRecursionLimit,
    /// A `Command` given as input carries no update, goto or resume value.
    ///
    /// The text reproduces the reference's `EmptyInputError`.
    #[error("Received empty Command input")]
    EmptyCommand,
    /// A single resume value was given while several interrupts are pending.
    #[error(
        "a single resume value cannot answer {count} pending interrupts; pass a map interrupt id -> value"
    )]
    AmbiguousResume {
        /// Pending interrupts.
        count: usize,
    },
    /// A command's goto `Send` on a thread whose pending step has `Send` packets queued: the
    /// queue takes one step's packets, so the new ones would replace the queued ones, and a
    /// packet's task id is its position (with the checkpoint, the step and the target node),
    /// so in place a new packet to the same node would take the stored results of the old
    /// packet at its position.
    #[error(
        "a command's goto Send would replace the {queued} Send packet(s) queued on the pending step; continue the step first, start anew with new input, or fork with update_state"
    )]
    SendOverQueuedPackets {
        /// The packets queued.
        queued: usize,
    },
    /// A run of the root graph, or an `update_state` on any namespace, on a thread that a run
    /// in this process is going on already (on the same checkpointer): two at once would
    /// fork the thread without a word. Nothing was read or written.
    #[error(
        "thread {thread} has a run going already; one run (or update_state) at a time per thread: retry when it has finished (a stream counts until it is read to its end or dropped)"
    )]
    ThreadBusy {
        /// The thread.
        thread: String,
    },
    /// A `Command` addressed to the parent graph reached the top level.
    #[error("there is no parent graph for a Command addressed to the parent")]
    NoParentGraph,
    /// A node of a subgraph returned a `Command` addressed to the parent graph; the subgraph run
    /// stops and the enclosing subgraph node returns the command as its own result.
    #[error("a node returned a command for the parent graph")]
    ParentCommand(Box<crate::types::Command>),
    /// The graph declares `messages` as a delta channel, but the checkpointer's store is in full
    /// mode (kernel-spec R26–R35: a full-mode store refuses delta checkpoints).
    #[error(
        "channel '{channel}' is a delta channel, but the store is in full mode: open the store in delta mode or declare the channel in full mode"
    )]
    StoreModeMismatch {
        /// The first delta channel of the graph.
        channel: String,
    },
    /// The graph's delta `messages` channel snapshots at another frequency than the one the
    /// store records, which every process sharing it must use (kernel-spec R30).
    #[error(
        "channel '{channel}' snapshots every {graph} updates, but the store records a snapshot frequency of {store}: declare the channel with {store} or open a store with {graph}"
    )]
    SnapshotFrequencyMismatch {
        /// The channel.
        channel: String,
        /// The graph's frequency.
        graph: u32,
        /// The store's.
        store: u32,
    },
    /// [`RunConfig::metadata`](crate::RunConfig::metadata) sets a key the runtime writes itself
    /// (or one starting with `__` or `langgraph_`).
    #[error("metadata key '{key}' is reserved for the runtime")]
    ReservedMetadataKey {
        /// The key.
        key: String,
    },
    /// A checkpoint id given as a bound (`HistoryQuery::before`) is not spelled as the
    /// runtime spells the ids it makes.
    #[error("'{id}' is not a checkpoint id as the runtime spells them")]
    InvalidCheckpointId {
        /// The text given.
        id: String,
    },
    /// The addressed checkpoint does not exist.
    #[error("checkpoint '{checkpoint}' not found in thread '{thread}'")]
    CheckpointNotFound {
        /// The thread.
        thread: String,
        /// The checkpoint.
        checkpoint: String,
    },
    /// A state call's `checkpoint_ns` leads to no subgraph node of the graph (the reference's
    /// `Subgraph … not found`).
    #[error("Subgraph {path} not found (checkpoint namespace '{namespace}')")]
    SubgraphNotFound {
        /// The namespace given.
        namespace: String,
        /// Its path of node names, task ids left out.
        path: String,
    },
    /// A run was given a checkpoint namespace: runs start in the root namespace, and a
    /// subgraph's namespace is run by its parent's task (resume the parent instead).
    #[error(
        "a run starts in the root namespace: checkpoint namespace '{namespace}' holds a subgraph's checkpoints, which its parent's task runs (run or resume the parent instead)"
    )]
    NamespacedRun {
        /// The namespace given.
        namespace: String,
    },
    /// `update_state` on a subgraph's namespace that holds no checkpoint yet: the subgraph
    /// has not run there, and its first checkpoint is its parent task's to make.
    #[error(
        "checkpoint namespace '{namespace}' holds no checkpoint yet: the subgraph has not run there, and its first checkpoint is its parent task's to make"
    )]
    SubgraphNotStarted {
        /// The namespace given.
        namespace: String,
    },
    /// An operation needs a checkpointer but the graph has none.
    #[error("operation needs a checkpointer")]
    NoCheckpointer,
    /// `update_state` needs a node or a single candidate node.
    #[error("update_state needs as_node: {reason}")]
    AmbiguousAsNode {
        /// Why no node could be chosen.
        reason: String,
    },
    /// A value could not be (de)serialized.
    #[error("cannot (de)serialize channel '{channel}': {source}")]
    Serialization {
        /// The channel.
        channel: String,
        /// The serde error.
        #[source]
        source: serde_json::Error,
    },
    /// The checkpoint store failed.
    #[error("checkpoint store failed: {source}")]
    Storage {
        /// The store's error.
        #[source]
        source: BoxError,
    },
    /// A run failed, and storing what it left (exit durability's buffered checkpoint and
    /// writes, a store operation still in flight, or under sync and async durability a
    /// failed task's error write) failed too: both errors, the run's first.
    /// The thread may lack the failed step's writes, as after a crash.
    #[error("{error}; storing what the run left failed too: {storage}")]
    RunFailedUnstored {
        /// Why the run failed.
        error: Box<Error>,
        /// Why storing failed.
        #[source]
        storage: Box<Error>,
    },
    /// The graph definition is invalid.
    #[error(transparent)]
    Build(#[from] BuildError),
}

impl Error {
    /// A run's `error` and the failure to store what it left: both, neither hiding the other
    /// ([`Error::RunFailedUnstored`]).
    pub(crate) fn unstored(error: Error, storage: Error) -> Self {
        Self::RunFailedUnstored {
            error: Box::new(error),
            storage: Box::new(storage),
        }
    }

    /// For a store error of the checkpoint crate's savers (through
    /// [`SaverCheckpointer`](crate::SaverCheckpointer)), that error's own kind: a mode mismatch
    /// (kernel-spec R34–R35), corruption, a conflict worth retrying, a backend failure…, which
    /// [`kind`](Self::kind) reports as [`ErrorKind::Storage`]. Also the store error of a
    /// [`Error::RunFailedUnstored`]. A [`RelativeRecordError`](crate::RelativeRecordError) of
    /// that adapter is `Corrupt` (a stored relative record that cannot be completed), or
    /// `Conflict` when its checkpoint was deleted while it was read (worth retrying). A
    /// subgraph node that failed on such an error ([`Error::NodeFailed`] over this crate's
    /// error) gives its kind too. `None` for any other error.
    pub fn checkpoint_kind(&self) -> Option<antler_checkpoint::ErrorKind> {
        match self {
            Self::Storage { source } => source
                .downcast_ref::<antler_checkpoint::Error>()
                .map(antler_checkpoint::Error::kind)
                .or_else(|| {
                    source
                        .downcast_ref::<crate::RelativeRecordError>()
                        .map(crate::saver::relative_record_kind)
                }),
            Self::RunFailedUnstored { error, storage } => storage
                .checkpoint_kind()
                .or_else(|| error.checkpoint_kind()),
            // A subgraph node whose run failed on a store error: that error's kind, however
            // deep, as `kind` looks through the node's failure.
            Self::NodeFailed { source, .. } => source
                .downcast_ref::<Self>()
                .and_then(Self::checkpoint_kind),
            _ => None,
        }
    }

    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Self::InvalidConcurrentUpdate { .. }
            | Self::MultipleOverwrites { .. }
            | Self::WriteType { .. }
            | Self::UnknownChannel { .. }
            | Self::UnknownNode { .. }
            | Self::UndeclaredRoute { .. } => ErrorKind::InvalidUpdate,
            Self::RecursionLimit { .. } => ErrorKind::RecursionLimit,
            // A subgraph node whose run failed with one of this runtime's errors (a recursion
            // limit, an invalid update, a store error…) fails with that error's kind, as the
            // reference re-raises the subgraph's own exception; a node's own failure, however
            // deep, stays `Node`.
            Self::NodeFailed { source, .. } => source
                .downcast_ref::<Self>()
                .map_or(ErrorKind::Node, Self::kind),
            Self::NodePanicked { .. } => ErrorKind::Node,
            Self::Reducer { .. } => ErrorKind::Reducer,
            Self::EmptyInput { .. }
            | Self::InvalidRecursionLimit
            | Self::EmptyCommand
            | Self::AmbiguousResume { .. }
            | Self::SendOverQueuedPackets { .. }
            | Self::NoParentGraph
            | Self::ParentCommand(_)
            | Self::NoCheckpointer
            | Self::SubgraphNotFound { .. }
            | Self::NamespacedRun { .. }
            | Self::AmbiguousAsNode { .. }
            | Self::ReservedMetadataKey { .. }
            | Self::InvalidCheckpointId { .. } => ErrorKind::Input,
            Self::CheckpointNotFound { .. } | Self::SubgraphNotStarted { .. } => {
                ErrorKind::NotFound
            }
            Self::Serialization { .. } => ErrorKind::Serialization,
            Self::Storage { .. } | Self::RunFailedUnstored { .. } => ErrorKind::Storage,
            Self::Build(_)
            | Self::StoreModeMismatch { .. }
            | Self::SnapshotFrequencyMismatch { .. } => ErrorKind::Build,
            Self::ThreadBusy { .. } => ErrorKind::Busy,
        }
    }
}
