//! What nodes return and receive: [`Command`], [`Send`], [`Goto`], interrupts and the task [`Context`].

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::{Arc, Mutex};

use serde_json::Value as Json;

use crate::error::BoxError;
use crate::ids::{InterruptId, NodeId, TaskId};
use crate::state::{Key, Update, Val};

/// A packet for a node: the node runs as a PUSH task whose input is exactly the packet's values.
#[derive(Clone)]
pub struct Send {
    pub(crate) node: NodeId,
    pub(crate) arg: Vec<(Arc<str>, TypeId, Val)>,
}

impl Send {
    /// A packet for `node` with no values yet.
    pub fn new(node: impl Into<NodeId>) -> Self {
        Self {
            node: node.into(),
            arg: Vec::new(),
        }
    }
    /// Adds a value for `key` (a state channel or a packet-only key of the schema).
    pub fn with<V: std::marker::Send + Sync + 'static, W>(mut self, key: &Key<V, W>, v: V) -> Self {
        self.arg
            .push((Arc::from(key.name()), TypeId::of::<V>(), Arc::new(v)));
        self
    }
    /// The target node.
    pub fn node(&self) -> &NodeId {
        &self.node
    }
}

impl fmt::Debug for Send {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "Send({}, {:?})",
            self.node,
            self.arg.iter().map(|a| &*a.0).collect::<Vec<_>>()
        )
    }
}

/// Where control goes next: a node (or `__end__`), or a `Send` packet.
#[derive(Clone, Debug)]
pub enum Goto {
    /// Trigger this node in the next step (`__end__` does nothing).
    Node(NodeId),
    /// Run the packet's node as a PUSH task in the next step.
    Send(Send),
}

impl From<&str> for Goto {
    fn from(s: &str) -> Self {
        Self::Node(NodeId::from(s))
    }
}
impl From<NodeId> for Goto {
    fn from(s: NodeId) -> Self {
        Self::Node(s)
    }
}
impl From<Send> for Goto {
    fn from(s: Send) -> Self {
        Self::Send(s)
    }
}

/// The answer(s) to pending interrupts.
#[derive(Clone, Debug, PartialEq)]
pub enum Resume {
    /// One value: consumed by the first `interrupt()` that needs an answer.
    Value(Json),
    /// Interrupt id → value, for several pending interrupts.
    Map(HashMap<InterruptId, Json>),
}

/// A node's full return value: state writes plus control flow; also usable as graph input to resume.
#[derive(Clone, Default, Debug)]
pub struct Command {
    pub(crate) update: Update,
    pub(crate) goto: Vec<Goto>,
    pub(crate) resume: Option<Resume>,
    pub(crate) to_parent: bool,
}

impl Command {
    /// An empty command.
    pub fn new() -> Self {
        Self::default()
    }
    /// Sets the state writes.
    pub fn update(mut self, update: Update) -> Self {
        self.update = update;
        self
    }
    /// Adds a goto target (node name, `__end__` or a [`Send`]).
    pub fn goto(mut self, to: impl Into<Goto>) -> Self {
        self.goto.push(to.into());
        self
    }
    /// Resume with one value (as graph input).
    pub fn resume(value: Json) -> Self {
        Self {
            resume: Some(Resume::Value(value)),
            ..Self::default()
        }
    }
    /// Resume several interrupts by id (as graph input).
    pub fn resume_map(map: HashMap<InterruptId, Json>) -> Self {
        Self {
            resume: Some(Resume::Map(map)),
            ..Self::default()
        }
    }
    /// Addresses the command to the parent graph (only valid inside a subgraph).
    pub fn to_parent(mut self) -> Self {
        self.to_parent = true;
        self
    }
    /// The state writes.
    pub fn updates(&self) -> &Update {
        &self.update
    }
    /// The goto targets, in order.
    pub fn gotos(&self) -> &[Goto] {
        &self.goto
    }
    /// Whether the command resumes interrupts (a graph input's role).
    pub fn has_resume(&self) -> bool {
        self.resume.is_some()
    }
    /// Whether the command is addressed to the parent graph.
    pub fn is_to_parent(&self) -> bool {
        self.to_parent
    }
    /// Splits a node's command into its writes and goto targets (for code that
    /// combines several sub-results into one task's command); resume and
    /// parent addressing only make sense on a graph input or a subgraph's own result.
    pub fn into_update_and_gotos(self) -> (Update, Vec<Goto>) {
        (self.update, self.goto)
    }
}

impl From<Update> for Command {
    fn from(update: Update) -> Self {
        Self {
            update,
            ..Self::default()
        }
    }
}

/// A pending `interrupt(value)` of a task.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Interrupt {
    /// Stable id of the interrupt slot (use it in [`Command::resume_map`]).
    pub id: InterruptId,
    /// The value passed to `interrupt()`.
    pub value: Json,
    /// The node whose task raised it.
    pub node: NodeId,
}

/// The error a node returns: a failure, or an interrupt raised through [`Context::interrupt`].
pub struct NodeError(pub(crate) NodeErrorKind);

pub(crate) enum NodeErrorKind {
    /// The node's own `interrupt` (one value), or every interrupt a subgraph stopped on.
    Interrupt(Vec<Interrupt>),
    /// A subgraph stopped at one of its static breakpoints: the task pauses without an
    /// interrupt value, and resuming the parent continues the subgraph (runtime-spec §2.6).
    Paused,
    Failed(BoxError),
}

impl NodeError {
    /// Wraps a failure.
    pub fn failed(e: impl Into<BoxError>) -> Self {
        Self(NodeErrorKind::Failed(e.into()))
    }
    /// Whether this is an interrupt (propagate it with `?`, do not swallow it).
    pub fn is_interrupt(&self) -> bool {
        matches!(self.0, NodeErrorKind::Interrupt(_) | NodeErrorKind::Paused)
    }
    /// The failure this error carries (`None` for an interrupt or a pause), for code that
    /// decides on it: a wrapper retrying a model call by the error's type, downcasting it.
    pub fn failure(&self) -> Option<&(dyn std::error::Error + std::marker::Send + Sync + 'static)> {
        match &self.0 {
            NodeErrorKind::Failed(e) => Some(e.as_ref()),
            NodeErrorKind::Interrupt(_) | NodeErrorKind::Paused => None,
        }
    }
}

impl fmt::Display for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            NodeErrorKind::Interrupt(i) => write!(f, "interrupted ({} interrupt(s))", i.len()),
            NodeErrorKind::Paused => f.write_str("paused at a subgraph's breakpoint"),
            NodeErrorKind::Failed(e) => write!(f, "{e}"),
        }
    }
}

impl<E: std::error::Error + std::marker::Send + Sync + 'static> From<E> for NodeError {
    fn from(e: E) -> Self {
        Self::failed(e)
    }
}

impl fmt::Debug for NodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.0 {
            NodeErrorKind::Interrupt(i) => {
                let values: Vec<&Json> = i.iter().map(|i| &i.value).collect();
                write!(f, "Interrupt({values:?})")
            }
            NodeErrorKind::Paused => f.write_str("Paused"),
            NodeErrorKind::Failed(e) => write!(f, "Failed({e})"),
        }
    }
}

#[derive(Default)]
pub(crate) struct ResumeState {
    /// Answers this task already holds, by interrupt slot.
    pub(crate) answers: Vec<Json>,
    /// Next slot index.
    pub(crate) counter: usize,
    /// Whether this run added answers (they must be persisted).
    pub(crate) added: bool,
}

/// Per-run resume inputs shared by the tasks of a step.
#[derive(Default)]
pub(crate) struct SharedResume {
    pub(crate) null_value: Mutex<Option<Json>>,
    pub(crate) map: HashMap<InterruptId, Json>,
    /// The enclosing run's, for a subgraph's run: an interrupt the subgraph's own resume
    /// inputs do not answer takes the parent's (runtime-spec §2.7; the reference's scratchpad
    /// falls back to its parent's NULL-task resume value, and hands the resume map down).
    pub(crate) parent: Option<Arc<SharedResume>>,
}

impl std::fmt::Debug for SharedResume {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedResume")
            .field("mapped", &self.map.len())
            .field("nested", &self.parent.is_some())
            .finish_non_exhaustive()
    }
}

impl SharedResume {
    /// The answer the run's inputs give interrupt `id`: its entry in the resume map, else the
    /// NULL task's resume value (taken: it answers one interrupt), else, in a subgraph's run,
    /// the enclosing run's answer.
    pub(crate) fn answer(&self, id: &InterruptId) -> Option<Json> {
        if let Some(v) = self.map.get(id) {
            return Some(v.clone());
        }
        let own = self
            .null_value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        own.or_else(|| self.parent.as_ref()?.answer(id))
    }

    /// Drops the NULL task's resume value with the loaded checkpoint's other pending writes
    /// (runtime-spec §2.3): it answers an interrupt of the step the run resumes, never one a
    /// later step raises.
    pub(crate) fn clear_null_value(&self) {
        *self
            .null_value
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = None;
    }
}

/// What a task knows about the run it belongs to (subgraph nodes run in the same thread and store).
pub(crate) struct RunInfo {
    pub(crate) cp: Option<Arc<dyn crate::checkpointer::Checkpointer>>,
    pub(crate) cfg: crate::compiled::RunConfig,
    /// Where custom events go while the task runs (a stream with the `custom` mode).
    pub(crate) custom:
        Option<futures::channel::mpsc::UnboundedSender<crate::Result<crate::compiled::StreamItem>>>,
    /// Where a subgraph node's run streams, and in which modes: set only for a stream with
    /// [`StreamModes::subgraphs`](crate::StreamModes::subgraphs).
    pub(crate) subgraph_stream: Option<(
        futures::channel::mpsc::UnboundedSender<crate::Result<crate::compiled::StreamItem>>,
        crate::compiled::StreamModes,
    )>,
}

/// A stream item of `event` from the run `cfg` configures: the streamed graph's own event, or
/// a subgraph run's tagged with its namespace. A subgraph's run is the one whose config names
/// enclosing steps (`parents`, which only a subgraph node sets).
pub(crate) fn stream_item(
    cfg: &crate::compiled::RunConfig,
    event: crate::compiled::StreamEvent,
) -> crate::compiled::StreamItem {
    if cfg.parents.is_empty() {
        crate::compiled::StreamItem::Event(event)
    } else {
        crate::compiled::StreamItem::Subgraph {
            namespace: cfg.checkpoint_ns.clone(),
            event,
        }
    }
}

pub(crate) struct TaskCtx {
    pub(crate) run: Arc<RunInfo>,
    pub(crate) parent_schema: Arc<crate::schema::Schema>,
    pub(crate) node: NodeId,
    pub(crate) task_id: TaskId,
    pub(crate) step: i64,
    /// The checkpoint the task's step started from.
    pub(crate) checkpoint: crate::ids::CheckpointId,
    pub(crate) ns: String,
    pub(crate) resume: Mutex<ResumeState>,
    pub(crate) shared: Arc<SharedResume>,
}

/// What a running task knows about itself; also the door to `interrupt()` and custom stream events.
#[derive(Clone)]
pub struct Context {
    pub(crate) inner: Arc<TaskCtx>,
}

pub(crate) fn interrupt_id(ns: &str, slot: usize) -> InterruptId {
    let key = if slot == 0 {
        ns.to_owned()
    } else {
        format!("{ns}|{slot}")
    };
    InterruptId::new(
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_URL, key.as_bytes())
            .simple()
            .to_string(),
    )
}

impl Context {
    /// The node this task runs.
    pub fn node(&self) -> &NodeId {
        &self.inner.node
    }
    /// The task's deterministic id.
    pub fn task_id(&self) -> &TaskId {
        &self.inner.task_id
    }
    /// The super-step number.
    pub fn step(&self) -> i64 {
        self.inner.step
    }

    /// Pauses the graph until a resume value is supplied, or returns that value when it exists.
    ///
    /// On resume the node re-runs from its beginning; the n-th call of a run gets the n-th answer.
    /// Propagate the error with `?`.
    pub fn interrupt(&self, value: Json) -> Result<Json, NodeError> {
        let mut st = self
            .inner
            .resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let slot = st.counter;
        st.counter += 1;
        if let Some(v) = st.answers.get(slot) {
            return Ok(v.clone());
        }
        let id = interrupt_id(&self.inner.ns, slot);
        let answer = self.inner.shared.answer(&id);
        match answer {
            Some(v) if st.answers.len() == slot => {
                st.answers.push(v.clone());
                st.added = true;
                Ok(v)
            }
            _ => Err(NodeError(NodeErrorKind::Interrupt(vec![Interrupt {
                id,
                value,
                node: self.inner.node.clone(),
            }]))),
        }
    }

    /// The task's checkpoint namespace (`<node>:<task id>`, prefixed by the enclosing namespaces).
    pub fn checkpoint_ns(&self) -> &str {
        &self.inner.ns
    }

    /// The thread the run belongs to (kernel-spec R136's `thread_id`; a subgraph's nodes see
    /// their parent's thread).
    pub fn thread_id(&self) -> &crate::ids::ThreadId {
        &self.inner.run.cfg.thread_id
    }

    /// The run id the caller gave the run ([`RunConfig::run_id`](crate::RunConfig::run_id);
    /// kernel-spec R136's `run_id`), if any.
    pub fn run_id(&self) -> Option<&str> {
        self.inner.run.cfg.run_id.as_deref()
    }

    /// Emits a custom stream event, delivered at once to a stream with the `custom` mode
    /// (dropped when nobody streams custom events).
    ///
    /// A node of a subgraph emits into its subgraph's run, which streams only for a stream
    /// with [`StreamModes::subgraphs`](crate::StreamModes::subgraphs) (tagged with its
    /// namespace): otherwise its events are dropped, as the reference drops a subgraph's events
    /// unless the caller streams with `subgraphs=True`.
    pub fn emit(&self, value: Json) {
        if let Some(tx) = &self.inner.run.custom {
            let ev = crate::compiled::StreamEvent::Custom {
                node: self.inner.node.clone(),
                value,
            };
            // A closed receiver means the stream was dropped; the run stops at its next await.
            let _ = tx.unbounded_send(Ok(stream_item(&self.inner.run.cfg, ev)));
        }
    }
}
