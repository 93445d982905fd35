//! [`CompiledGraph`]: the validated graph with its channel layout, and the public run API.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;

use futures::{Stream, StreamExt};
use serde_json::Value as Json;

use crate::builder::{RetryPolicy, RouterFn, StateGraph};
use crate::channel::{AfterFinish, Barrier, Channel, Ephemeral, Topic};
use crate::checkpointer::{Checkpointer, Source};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, END, NodeId, START, TaskId, ThreadId};
use crate::schema::Schema;
use crate::state::{State, Update, Val, Write};
use crate::types::{Command, Interrupt};

pub(crate) enum ChanKind {
    User,
    Start,
    Tasks,
    Branch {
        defer: bool,
    },
    Join {
        names: Arc<BTreeSet<String>>,
        after_finish: bool,
    },
}

pub(crate) struct ChanDef {
    pub(crate) name: Arc<str>,
    pub(crate) kind: ChanKind,
}

pub(crate) enum NodeImpl {
    Start,
    User(Arc<dyn crate::builder::Node>),
}

pub(crate) struct NodeSpec {
    pub(crate) id: NodeId,
    pub(crate) imp: NodeImpl,
    pub(crate) triggers: Vec<usize>,
    pub(crate) edge_writes: Vec<usize>,
    pub(crate) join_writes: Vec<usize>,
    pub(crate) router: Option<RouterFn>,
    /// The nodes the router declared it may return (its path map); `None`: any.
    pub(crate) router_targets: Option<Vec<NodeId>>,
    pub(crate) retry: Option<RetryPolicy>,
}

/// A `Send` packet as stored in the tasks topic.
pub(crate) struct Packet {
    pub(crate) node: usize,
    pub(crate) arg: Vec<(Arc<str>, Val)>,
}

pub(crate) struct Graph {
    pub(crate) schema: Arc<Schema>,
    pub(crate) chans: Vec<ChanDef>,
    pub(crate) chan_idx: HashMap<Arc<str>, usize>,
    pub(crate) nodes: Vec<NodeSpec>,
    pub(crate) node_idx: HashMap<NodeId, usize>,
    pub(crate) trigger_to_nodes: HashMap<usize, Vec<usize>>,
    pub(crate) start_chan: usize,
    pub(crate) tasks_chan: usize,
    pub(crate) branch_of: Vec<usize>,
    pub(crate) interrupt_before: Vec<NodeId>,
    pub(crate) interrupt_after: Vec<NodeId>,
    pub(crate) unit: Val,
    /// The graphs of the subgraph nodes, by node.
    pub(crate) subgraphs: HashMap<NodeId, CompiledGraph>,
}

impl Graph {
    fn build(b: StateGraph) -> Self {
        let schema = Arc::new(b.schema);
        let mut chans: Vec<ChanDef> = schema
            .specs()
            .map(|s| ChanDef {
                name: s.name_arc().clone(),
                kind: ChanKind::User,
            })
            .collect();
        let start_chan = chans.len();
        chans.push(ChanDef {
            name: Arc::from(START),
            kind: ChanKind::Start,
        });
        let tasks_chan = chans.len();
        chans.push(ChanDef {
            name: Arc::from("__pregel_tasks"),
            kind: ChanKind::Tasks,
        });
        let mut node_idx = HashMap::new();
        let mut nodes = vec![NodeSpec {
            id: NodeId::start(),
            imp: NodeImpl::Start,
            triggers: vec![start_chan],
            edge_writes: Vec::new(),
            join_writes: Vec::new(),
            router: None,
            router_targets: None,
            retry: None,
        }];
        node_idx.insert(NodeId::start(), 0);
        let mut branch_of = vec![usize::MAX];
        for (id, def) in b.nodes {
            let ch = chans.len();
            chans.push(ChanDef {
                name: Arc::from(format!("branch:to:{id}")),
                kind: ChanKind::Branch {
                    defer: def.options.defer,
                },
            });
            node_idx.insert(id.clone(), nodes.len());
            branch_of.push(ch);
            nodes.push(NodeSpec {
                id,
                imp: NodeImpl::User(def.node),
                triggers: vec![ch],
                edge_writes: Vec::new(),
                join_writes: Vec::new(),
                router: None,
                router_targets: None,
                retry: def.options.retry,
            });
        }
        for (from, to) in &b.edges {
            if to.as_str() == END {
                continue;
            }
            if let (Some(&f), Some(&t)) = (node_idx.get(from), node_idx.get(to)) {
                let ch = branch_of[t];
                if !nodes[f].edge_writes.contains(&ch) {
                    nodes[f].edge_writes.push(ch);
                }
            }
        }
        // One barrier per join: declaring the same join twice must not make two channels under
        // one name (validation refused two different joins whose names coincide).
        let mut made = HashSet::new();
        for (srcs, to) in &b.joins {
            let Some(&t) = node_idx.get(to) else { continue };
            if !made.insert(crate::builder::join_channel_name(srcs, to)) {
                continue;
            }
            let names: BTreeSet<String> = srcs.iter().map(|s| s.to_string()).collect();
            let ch = chans.len();
            let defer = matches!(chans[branch_of[t]].kind, ChanKind::Branch { defer: true });
            chans.push(ChanDef {
                name: Arc::from(crate::builder::join_channel_name(srcs, to)),
                kind: ChanKind::Join {
                    names: Arc::new(names),
                    after_finish: defer,
                },
            });
            nodes[t].triggers.push(ch);
            for s in srcs {
                if let Some(&f) = node_idx.get(s) {
                    nodes[f].join_writes.push(ch);
                }
            }
        }
        for (from, r) in b.routers {
            if let Some(&f) = node_idx.get(&from) {
                nodes[f].router = Some(r.f);
                nodes[f].router_targets = r.targets;
            }
        }
        let mut trigger_to_nodes: HashMap<usize, Vec<usize>> = HashMap::new();
        for (i, n) in nodes.iter().enumerate() {
            for &t in &n.triggers {
                trigger_to_nodes.entry(t).or_default().push(i);
            }
        }
        let chan_idx = chans
            .iter()
            .enumerate()
            .map(|(i, c)| (c.name.clone(), i))
            .collect();
        Self {
            schema,
            chans,
            chan_idx,
            nodes,
            node_idx,
            trigger_to_nodes,
            start_chan,
            tasks_chan,
            branch_of,
            interrupt_before: b.interrupt_before,
            interrupt_after: b.interrupt_after,
            unit: Arc::new(()),
            subgraphs: b.subgraphs.into_iter().collect(),
        }
    }

    /// The declared spec of the state channel `name`; `UnknownChannel` when the graph does not
    /// declare it (a stored write a deploy left behind).
    pub(crate) fn declared(&self, name: &str) -> Result<&crate::schema::ErasedSpec> {
        self.schema.get(name).ok_or_else(|| Error::UnknownChannel {
            channel: name.to_owned(),
        })
    }

    /// A fresh channel for slot `i`, restored from its stored form when given.
    pub(crate) fn channel(&self, i: usize, stored: Option<Json>) -> Result<Box<dyn Channel>> {
        let def = &self.chans[i];
        Ok(match &def.kind {
            ChanKind::User => self.declared(&def.name)?.channel(stored)?,
            ChanKind::Start => {
                let value = stored
                    .map(|j| self.update_from_json(j).map(|u| Arc::new(u) as Val))
                    .transpose()?;
                Box::new(Ephemeral {
                    name: def.name.clone(),
                    value,
                    guard: true,
                    untracked: false,
                })
            }
            ChanKind::Tasks => {
                let mut t = Topic::default();
                if let Some(Json::Array(items)) = stored {
                    for j in items {
                        t.values.push(Arc::new(self.packet_from_json(j)?));
                    }
                    if !t.values.is_empty() {
                        t.list = Some(self.unit.clone());
                    }
                }
                Box::new(t)
            }
            ChanKind::Branch { defer: false } => Box::new(Ephemeral {
                name: def.name.clone(),
                value: stored.map(|_| self.unit.clone()),
                guard: false,
                untracked: false,
            }),
            ChanKind::Branch { defer: true } => Box::new(AfterFinish {
                value: stored.as_ref().map(|_| self.unit.clone()),
                finished: stored
                    .as_ref()
                    .and_then(|j| j.get("finished"))
                    .and_then(Json::as_bool)
                    .unwrap_or(false),
            }),
            ChanKind::Join {
                names,
                after_finish,
            } => {
                let (seen_j, finished) = match stored {
                    Some(Json::Object(m)) => (
                        m.get("seen").cloned(),
                        m.get("finished").and_then(Json::as_bool).unwrap_or(false),
                    ),
                    other => (other, false),
                };
                let seen = match seen_j {
                    Some(Json::Array(a)) => a
                        .iter()
                        .filter_map(|x| x.as_str().map(str::to_owned))
                        .collect(),
                    _ => BTreeSet::new(),
                };
                Box::new(Barrier {
                    name: def.name.clone(),
                    names: names.clone(),
                    seen,
                    after_finish: *after_finish,
                    finished,
                    unit: self.unit.clone(),
                })
            }
        })
    }

    /// Serializes a channel's stored value.
    /// Whether channel `i` is an untracked state channel (never stored, its writes never
    /// persisted, runtime-spec §3).
    pub(crate) fn is_untracked(&self, i: usize) -> bool {
        let def = &self.chans[i];
        matches!(def.kind, ChanKind::User)
            && self
                .schema
                .get(&def.name)
                .is_some_and(crate::schema::ErasedSpec::is_untracked)
    }

    pub(crate) fn value_to_json(&self, i: usize, v: &Val) -> Result<Json> {
        let def = &self.chans[i];
        match &def.kind {
            ChanKind::User => self.declared(&def.name)?.value_to_json(v),
            ChanKind::Start => match v.downcast_ref::<Update>() {
                Some(u) => self.update_to_json(u),
                None => Err(Error::WriteType {
                    channel: def.name.to_string(),
                }),
            },
            ChanKind::Tasks => match v.downcast_ref::<Packet>() {
                Some(p) => self.packet_to_json(p, false),
                None => Err(Error::WriteType {
                    channel: def.name.to_string(),
                }),
            },
            ChanKind::Branch { .. } | ChanKind::Join { .. } => Ok(Json::Null),
        }
    }

    pub(crate) fn write_to_json(&self, i: usize, w: &Write) -> Result<Json> {
        self.write_json(i, w, false)
    }

    /// [`Self::write_to_json`] as a stream event shows it: a plain write unescaped (see
    /// `ErasedSpec::write_to_json`).
    pub(crate) fn write_to_shown_json(&self, i: usize, w: &Write) -> Result<Json> {
        self.write_json(i, w, true)
    }

    fn write_json(&self, i: usize, w: &Write, shown: bool) -> Result<Json> {
        let def = &self.chans[i];
        match (&def.kind, w) {
            (ChanKind::User, w) => {
                let spec = self.declared(&def.name)?;
                if shown {
                    spec.write_to_shown_json(w)
                } else {
                    spec.write_to_json(w)
                }
            }
            (ChanKind::Join { .. }, Write::Value(v)) => match v.downcast_ref::<String>() {
                Some(s) => Ok(Json::String(s.clone())),
                None => Err(Error::WriteType {
                    channel: def.name.to_string(),
                }),
            },
            (_, Write::Value(v) | Write::Overwrite(v)) => self.value_to_json(i, v),
        }
    }

    /// [`Self::write_to_json`] for a write that stays in the run (a command's input applied in
    /// memory): `Send` packets keep their untracked values.
    pub(crate) fn write_to_json_in_run(&self, i: usize, w: &Write) -> Result<Json> {
        match (&self.chans[i].kind, w) {
            (ChanKind::Tasks, Write::Value(v)) => match v.downcast_ref::<Packet>() {
                Some(p) => self.packet_to_json(p, true),
                None => Err(Error::WriteType {
                    channel: self.chans[i].name.to_string(),
                }),
            },
            _ => self.write_to_json(i, w),
        }
    }

    pub(crate) fn write_from_json(&self, i: usize, j: Json) -> Result<Write> {
        let def = &self.chans[i];
        Ok(match &def.kind {
            ChanKind::User => self.declared(&def.name)?.write_from_json(j)?,
            ChanKind::Start => Write::Value(Arc::new(self.update_from_json(j)?)),
            ChanKind::Tasks => Write::Value(Arc::new(self.packet_from_json(j)?)),
            ChanKind::Branch { .. } => Write::Value(self.unit.clone()),
            ChanKind::Join { .. } => match j {
                Json::String(s) => Write::Value(Arc::new(s)),
                _ => {
                    return Err(Error::WriteType {
                        channel: def.name.to_string(),
                    });
                }
            },
        })
    }

    /// The stored form of an input held by `__start__`: writes to untracked channels are left
    /// out, as they are from stored task writes and `Send` packets (runtime-spec §3).
    pub(crate) fn update_to_json(&self, u: &Update) -> Result<Json> {
        let mut out = Vec::with_capacity(u.writes.len());
        for w in &u.writes {
            let spec = self.declared(&w.channel)?;
            if spec.is_untracked() {
                continue;
            }
            out.push(serde_json::json!([
                &*w.channel,
                spec.write_to_json(&w.write)?
            ]));
        }
        Ok(Json::Array(out))
    }

    fn update_from_json(&self, j: Json) -> Result<Update> {
        let mut u = Update::new();
        let Json::Array(items) = j else {
            return Err(Error::WriteType {
                channel: START.to_owned(),
            });
        };
        for item in items {
            let (name, w) = match item {
                Json::Array(mut pair) if pair.len() == 2 => {
                    let w = pair.pop().unwrap_or(Json::Null);
                    (pair.pop().unwrap_or(Json::Null), w)
                }
                _ => {
                    return Err(Error::WriteType {
                        channel: START.to_owned(),
                    });
                }
            };
            let name = name.as_str().unwrap_or_default().to_owned();
            let spec = self.declared(&name)?;
            let write = spec.write_from_json(w)?;
            let type_id = spec.type_id_of(&write);
            u.writes.push(crate::state::NamedWrite {
                channel: spec.name_arc().clone(),
                type_id,
                write,
            });
        }
        Ok(u)
    }

    /// A packet's stored form: untracked values are stripped from a packet before it is
    /// persisted (runtime-spec §2.7), so a resumed task gets its packet without them; with
    /// `keep_untracked`, for a form that never leaves the run, they stay.
    pub(crate) fn packet_to_json(&self, p: &Packet, keep_untracked: bool) -> Result<Json> {
        let mut arg = Vec::with_capacity(p.arg.len());
        for (k, v) in &p.arg {
            let spec = self.declared(k)?;
            if spec.is_untracked() && !keep_untracked {
                continue;
            }
            arg.push(serde_json::json!([&**k, spec.value_to_json(v)?]));
        }
        Ok(serde_json::json!({"node": self.nodes[p.node].id.as_str(), "arg": arg}))
    }

    fn packet_from_json(&self, j: Json) -> Result<Packet> {
        let bad = || Error::WriteType {
            channel: "__pregel_tasks".to_owned(),
        };
        let node = j.get("node").and_then(Json::as_str).ok_or_else(bad)?;
        let node = *self
            .node_idx
            .get(&NodeId::from(node))
            .ok_or_else(|| Error::UnknownNode {
                node: node.to_owned(),
            })?;
        let mut arg = Vec::new();
        for item in j.get("arg").and_then(Json::as_array).ok_or_else(bad)? {
            let k = item.get(0).and_then(Json::as_str).ok_or_else(bad)?;
            let spec = self.declared(k)?;
            arg.push((
                spec.name_arc().clone(),
                spec.value_from_json(item.get(1).cloned().unwrap_or(Json::Null))?,
            ));
        }
        Ok(Packet { node, arg })
    }
}

/// How often checkpoints reach the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Durability {
    /// Each checkpoint is stored before the next step starts.
    Sync,
    /// Each checkpoint is stored while the next step's tasks run (its own tokio task, so a run
    /// dropped meanwhile still stores it); an `invoke` that returned has stored everything.
    #[default]
    Async,
    /// Nothing is stored during the run; the final checkpoint and pending writes at exit, or
    /// when the run is dropped (its stream dropped), the last finished step's.
    ///
    /// The saves of a dropped run (and an `Async` run's save in flight) run as tokio tasks of
    /// their own: a runtime shut down right after the drop cancels them, and what they would
    /// have stored is lost, so a program that drops a stream should keep its runtime until
    /// the next call on the thread (which waits for them) or a short while.
    Exit,
}

/// Per-call configuration.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// The thread.
    pub thread_id: ThreadId,
    /// Start from this checkpoint (time travel) instead of the thread's latest (default none).
    pub checkpoint_id: Option<CheckpointId>,
    /// Checkpoint namespace (default `""`, the root graph; subgraphs run in `<node>:<task id>`,
    /// nested with `|`). The state calls hand a subgraph's namespace to that subgraph
    /// ([`CompiledGraph::get_state`]); a run given one is refused ([`Error::NamespacedRun`]):
    /// a subgraph's namespace is run by its parent's task.
    pub checkpoint_ns: String,
    /// Super-steps allowed per call (default 10007, as the reference).
    pub recursion_limit: usize,
    /// Durability mode (default [`Durability::Async`]).
    pub durability: Durability,
    /// The run these calls belong to (default none): stored in the metadata of every checkpoint
    /// they create, where `Saver::delete_for_runs` finds it. A run on a checkpoint that the same
    /// run id created resumes it, whatever the input (runtime-spec §2.2: a retried run does not
    /// apply its input twice), so give every new run (every turn) its own id: an input sent
    /// again under the id of the run that created the head is not applied.
    pub run_id: Option<String>,
    /// Free metadata copied into every checkpoint these calls create (runtime-spec §4.1), for
    /// `list` filters. Keys the runtime writes itself, and keys starting with `__` or
    /// `langgraph_`, are refused ([`Error::ReservedMetadataKey`]).
    pub metadata: serde_json::Map<String, Json>,
    /// Namespace → checkpoint id of the enclosing graphs' steps (set for a subgraph's run by
    /// its parent; empty at the top level), stored as the checkpoints' `parents` metadata.
    pub(crate) parents: std::collections::BTreeMap<String, CheckpointId>,
    /// The enclosing run's resume inputs (set for a subgraph's run by its parent's task; none
    /// at the top level): see `SharedResume::parent`.
    pub(crate) parent_resume: Option<std::sync::Arc<crate::types::SharedResume>>,
}

impl RunConfig {
    /// Config for `thread` with defaults.
    pub fn new(thread: impl Into<ThreadId>) -> Self {
        Self {
            thread_id: thread.into(),
            checkpoint_id: None,
            checkpoint_ns: String::new(),
            recursion_limit: 10007,
            durability: Durability::Async,
            run_id: None,
            metadata: serde_json::Map::new(),
            parents: std::collections::BTreeMap::new(),
            parent_resume: None,
        }
    }
    /// Where this config's checkpoints live.
    pub fn scope(&self) -> crate::checkpointer::Scope {
        crate::checkpointer::Scope {
            thread: self.thread_id.clone(),
            ns: self.checkpoint_ns.clone(),
        }
    }
    /// Sets the starting checkpoint.
    pub fn with_checkpoint(mut self, id: CheckpointId) -> Self {
        self.checkpoint_id = Some(id);
        self
    }
    /// Sets the recursion limit.
    pub fn with_recursion_limit(mut self, limit: usize) -> Self {
        self.recursion_limit = limit;
        self
    }
    /// Sets the durability mode.
    pub fn with_durability(mut self, d: Durability) -> Self {
        self.durability = d;
        self
    }
    /// Sets the run id stored with the checkpoints.
    pub fn with_run_id(mut self, run_id: impl Into<String>) -> Self {
        self.run_id = Some(run_id.into());
        self
    }
    /// Adds a free metadata entry stored with the checkpoints.
    pub fn with_metadata(mut self, key: impl Into<String>, value: impl Into<Json>) -> Self {
        self.metadata.insert(key.into(), value.into());
        self
    }
    /// The first metadata key the runtime does not let a caller set, if any.
    pub(crate) fn reserved_metadata_key(&self) -> Option<&str> {
        self.metadata.keys().map(String::as_str).find(|k| {
            RESERVED_METADATA_KEYS.contains(k) || k.starts_with("__") || k.starts_with("langgraph_")
        })
    }
}

/// Metadata keys the runtime and the savers write themselves (runtime-spec §4.1, kernel-spec R32).
const RESERVED_METADATA_KEYS: &[&str] = &[
    "source",
    "step",
    "parents",
    "run_id",
    "thread_id",
    "checkpoint_id",
    "checkpoint_ns",
    antler_checkpoint::model::COUNTERS_METADATA_KEY,
    antler_checkpoint::model::CHANNEL_MODE_METADATA_KEY,
];

/// Input of a run.
#[derive(Clone, Debug)]
pub enum Input {
    /// New values (an unfinished step of the thread is abandoned).
    Values(Update),
    /// A command: resume interrupts, update state, goto.
    Command(Command),
    /// No input: continue the thread's pending step (after an error, or to replay a checkpoint).
    Continue,
}

impl From<Update> for Input {
    fn from(u: Update) -> Self {
        Self::Values(u)
    }
}
impl From<Command> for Input {
    fn from(c: Command) -> Self {
        Self::Command(c)
    }
}
impl From<Option<Update>> for Input {
    fn from(u: Option<Update>) -> Self {
        u.map_or(Self::Continue, Self::Values)
    }
}

/// What a run returned.
#[derive(Clone, Debug)]
pub struct RunOutcome {
    /// The state after the run (the head checkpoint's values).
    pub values: State,
    /// Pending interrupts when the run stopped on them, in task order.
    pub interrupts: Vec<Interrupt>,
    /// The head checkpoint after the run.
    pub checkpoint_id: Option<CheckpointId>,
    /// Whether the run stopped before the graph finished, on interrupts or at a static
    /// breakpoint (`interrupt_before`/`interrupt_after`, where `interrupts` is empty): resuming
    /// the thread continues it.
    pub paused: bool,
    /// The state as the run's own nodes see it: `values` plus the untracked channels, which a
    /// subgraph's run passes to its parent task within the enclosing run.
    pub(crate) run_values: State,
}

/// Kind of a task.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskKind {
    /// Triggered by a channel.
    Pull,
    /// Created by a `Send` packet.
    Push,
}

/// Status of a pending task of a checkpoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TaskStatus {
    /// Not run yet.
    Todo,
    /// Finished; its writes are saved.
    Done,
    /// Raised an error.
    Error,
    /// Stopped on an interrupt.
    Interrupted,
}

/// A task of a checkpoint's next step.
#[derive(Clone, Debug)]
pub struct TaskSnapshot {
    /// Deterministic id.
    pub id: TaskId,
    /// Node.
    pub node: NodeId,
    /// Pull or push.
    pub kind: TaskKind,
    /// What happened to it so far.
    pub status: TaskStatus,
    /// Its pending interrupts.
    pub interrupts: Vec<Interrupt>,
    /// Its saved error message.
    pub error: Option<String>,
    /// For a task of a subgraph node, the namespace its subgraph's checkpoints live in (set
    /// whether or not the task has started): set it as [`RunConfig::checkpoint_ns`] to read or
    /// update the subgraph's state through this graph (the reference's task `state` config);
    /// `None` for any other node. An update there before the subgraph has stored anything is
    /// refused ([`Error::SubgraphNotStarted`]).
    pub subgraph_ns: Option<String>,
}

/// Which checkpoints [`CompiledGraph::get_state_history_with`] returns: those older than
/// `before` whose metadata matches `filter`, newest first, at most `limit` (LangGraph's
/// `before`, `filter` and `limit`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct HistoryQuery {
    /// Only checkpoints older than this one (the last snapshot of the previous page).
    pub before: Option<CheckpointId>,
    /// At most this many snapshots.
    pub limit: Option<usize>,
    /// Only checkpoints whose metadata holds each of these entries, as the reference's
    /// filter compares them: `source` (`"input"`, `"loop"`, `"update"`, `"fork"`), `step`,
    /// `run_id`, `parents` (namespace → checkpoint id) and the free keys of
    /// [`RunConfig::metadata`]; a key the metadata lacks compares as `null`.
    pub filter: serde_json::Map<String, Json>,
}

impl HistoryQuery {
    /// The newest `limit` checkpoints (none for 0, without reading the store).
    pub fn limit(limit: usize) -> Self {
        Self {
            limit: Some(limit),
            ..Self::default()
        }
    }

    /// Only checkpoints older than `id`.
    #[must_use]
    pub fn before(mut self, id: CheckpointId) -> Self {
        self.before = Some(id);
        self
    }

    /// Only checkpoints whose metadata `key` is `value` (see the `filter` field).
    #[must_use]
    pub fn filter(mut self, key: impl Into<String>, value: impl Into<Json>) -> Self {
        self.filter.insert(key.into(), value.into());
        self
    }
}

/// A checkpoint as seen by `get_state`.
#[derive(Clone, Debug)]
pub struct StateSnapshot {
    /// Stored values, with the checkpoint's input applied; for the thread's head (no checkpoint
    /// id) also the results the next step's finished tasks stored.
    pub values: State,
    /// Nodes of the next step in task order; for the head, only those of tasks without a
    /// stored result (all of them when the head shows the checkpoint as stored, see
    /// [`CompiledGraph::get_state`]).
    pub next: Vec<NodeId>,
    /// Tasks of the next step in task order.
    pub tasks: Vec<TaskSnapshot>,
    /// This checkpoint.
    pub checkpoint_id: CheckpointId,
    /// Its parent.
    pub parent_id: Option<CheckpointId>,
    /// Metadata step.
    pub step: i64,
    /// Metadata source.
    pub source: Source,
    /// The run that created the checkpoint ([`RunConfig::run_id`]).
    pub run_id: Option<String>,
    /// The free metadata of the run that created it ([`RunConfig::metadata`]).
    pub metadata: serde_json::Map<String, Json>,
    /// For a subgraph's checkpoint: namespace → checkpoint id of the enclosing graphs' steps
    /// it ran in (runtime-spec §2.5); empty at the top level.
    pub parents: std::collections::BTreeMap<String, CheckpointId>,
}

impl StateSnapshot {
    /// Pending interrupts of all tasks, in task order.
    pub fn interrupts(&self) -> Vec<Interrupt> {
        self.tasks
            .iter()
            .flat_map(|t| t.interrupts.iter().cloned())
            .collect()
    }
}

/// A task of a finished step, as streamed in debug mode.
#[derive(Clone, Debug, PartialEq)]
pub struct TaskEvent {
    /// The step's metadata step.
    pub step: i64,
    /// Node.
    pub node: NodeId,
    /// Pull or push.
    pub kind: TaskKind,
    /// Writes to state channels, in write order.
    pub writes: Vec<(String, Json)>,
    /// Packets it emitted, in emission order: (target, packet values).
    pub sends: Vec<(NodeId, Json)>,
}

/// A checkpoint saved by a run, as streamed in debug mode.
#[derive(Clone, Debug, PartialEq)]
pub struct CheckpointEvent {
    /// Its id.
    pub id: CheckpointId,
    /// Its parent.
    pub parent: Option<CheckpointId>,
    /// Metadata step.
    pub step: i64,
    /// Metadata source.
    pub source: Source,
}

/// One item of [`CompiledGraph::stream`].
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StreamEvent {
    /// Full state after a step (mode `values`).
    Values(State),
    /// A task's state writes (mode `updates`), at the end of its step, in task order; a step
    /// that fails or stops on an interrupt still reports its finished tasks' writes, before the
    /// error or the interrupt.
    #[non_exhaustive]
    Updates {
        /// Node.
        node: NodeId,
        /// Writes as JSON.
        writes: Vec<(String, Json)>,
        /// The writes were stored by an earlier run: a resumed step reports its tasks that had
        /// finished before it stopped again, as the reference marks them cached. It does not
        /// mean an earlier stream delivered them: `updates` are streamed at the end of a step,
        /// so a task that finished in a run whose stream was dropped, or whose process died,
        /// before its step ended was stored but never streamed. A consumer that skips cached
        /// updates as duplicates misses those.
        cached: bool,
    },
    /// A custom event a node emitted (mode `custom`), delivered as the node emits it.
    Custom {
        /// Node.
        node: NodeId,
        /// Payload.
        value: Json,
    },
    /// A task of a finished step (mode `debug`).
    Task(TaskEvent),
    /// A checkpoint was saved (mode `debug`).
    Checkpoint(CheckpointEvent),
    /// The run stopped on interrupts.
    Interrupted(Vec<Interrupt>),
}

/// Which events a stream carries.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StreamModes {
    /// `values` events.
    pub values: bool,
    /// `updates` events.
    pub updates: bool,
    /// `custom` events.
    pub custom: bool,
    /// `debug` events (tasks and checkpoints). There is no separate `tasks` mode: the debug
    /// task events come after a step, with each finished task's writes, where the reference's
    /// `tasks` mode also reports each task as it starts.
    pub debug: bool,
    /// Also the `__start__` task's `updates` and `debug` task events: the task that applies a
    /// run's input, which the reference hides from both (its start node is tagged hidden).
    /// Off by default and in [`all`](Self::all); on for traces and differential tests that
    /// record every task.
    pub hidden: bool,
    /// Also the events of subgraph runs, however deep, in the modes above, as
    /// [`StreamItem::Subgraph`] (the reference's `subgraphs=True`). Off by default and in
    /// [`all`](Self::all): a subgraph's run then streams nothing.
    pub subgraphs: bool,
}

impl StreamModes {
    /// Every mode (without the hidden `__start__` task).
    pub fn all() -> Self {
        Self {
            values: true,
            updates: true,
            custom: true,
            debug: true,
            hidden: false,
            subgraphs: false,
        }
    }
}

/// Per-thread hot state: the live channels at the thread's head checkpoint as this process left them,
/// so the next run on the head skips rebuilding channels from stored values.
#[derive(Default)]
pub(crate) struct HotCache {
    pub(crate) disabled: std::sync::atomic::AtomicBool,
    pub(crate) entries:
        std::sync::Mutex<HashMap<crate::checkpointer::Scope, (CheckpointId, crate::run::Live)>>,
    pub(crate) hits: std::sync::atomic::AtomicU64,
}

/// Threads kept in the hot-state cache before it is cleared.
const HOT_CACHE_THREADS: usize = 1024;

impl HotCache {
    pub(crate) fn get(
        &self,
        thread: &crate::checkpointer::Scope,
        id: &CheckpointId,
    ) -> Option<crate::run::Live> {
        if self.disabled.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let mut g = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Taken, not copied: the run then holds the only reference to each value, so reducers
        // update in place; the run puts its head back when it ends.
        let hit = match g.get(thread) {
            Some((cid, _)) if cid == id => g.remove(thread).map(|(_, live)| live),
            _ => None,
        };
        if hit.is_some() {
            self.hits.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }
        hit
    }
    /// Whether the cache holds channels of some checkpoint of `thread` (so a read of the head
    /// is worth making to see whether they are the head's).
    pub(crate) fn holds(&self, thread: &crate::checkpointer::Scope) -> bool {
        if self.disabled.load(std::sync::atomic::Ordering::Relaxed) {
            return false;
        }
        self.entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .contains_key(thread)
    }
    /// A copy of the cached channels of `id` (left in the cache), for reads.
    pub(crate) fn peek(
        &self,
        thread: &crate::checkpointer::Scope,
        id: &CheckpointId,
    ) -> Option<crate::run::Live> {
        if self.disabled.load(std::sync::atomic::Ordering::Relaxed) {
            return None;
        }
        let g = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Not counted in `hits`, which counts runs started from the cache.
        match g.get(thread) {
            Some((cid, live)) if cid == id => Some(live.clone()),
            _ => None,
        }
    }
    pub(crate) fn put(
        &self,
        thread: &crate::checkpointer::Scope,
        id: CheckpointId,
        live: crate::run::Live,
    ) {
        // Off means off: no state is kept that no run will read.
        if self.disabled.load(std::sync::atomic::Ordering::Relaxed) {
            return;
        }
        let mut g = self
            .entries
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.len() >= HOT_CACHE_THREADS && !g.contains_key(thread) {
            g.clear();
        }
        g.insert(thread.clone(), (id, live));
    }
}

/// A validated graph, ready to run on threads.
#[derive(Clone)]
pub struct CompiledGraph {
    pub(crate) g: Arc<Graph>,
    pub(crate) cp: Option<Arc<dyn Checkpointer>>,
    pub(crate) cache: Arc<HotCache>,
}

impl CompiledGraph {
    pub(crate) fn new(b: StateGraph) -> Self {
        Self {
            g: Arc::new(Graph::build(b)),
            cp: None,
            cache: Arc::default(),
        }
    }

    /// Attaches a checkpointer (without one, runs keep no history and cannot be resumed).
    ///
    /// The hot cache starts empty for the new store, and stays off if
    /// [`with_hot_cache`](Self::with_hot_cache) turned it off before (before 2026-12-01 a
    /// checkpointer attached afterwards turned it back on).
    pub fn with_checkpointer(mut self, cp: Arc<dyn Checkpointer>) -> Self {
        let disabled = self
            .cache
            .disabled
            .load(std::sync::atomic::Ordering::Relaxed);
        self.cp = Some(cp);
        self.cache = Arc::default();
        self.cache
            .disabled
            .store(disabled, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// Runs to completion or interrupt.
    pub async fn invoke(&self, input: impl Into<Input>, config: &RunConfig) -> Result<RunOutcome> {
        crate::run::run(
            &self.g,
            self.cp.as_ref(),
            &self.cache,
            input.into(),
            config,
            None,
            StreamModes::default(),
        )
        .await
    }

    /// Runs and streams events; the last item is the outcome. Dropping the stream cancels the run at
    /// its next await point; finished tasks keep their saved writes and no partial checkpoint is written.
    /// Store operations the run already started still finish, and the next run, state read or
    /// update of the thread waits for them.
    ///
    /// A stream counts as the thread's run until it is read to its end or dropped: a run or
    /// update of the thread meanwhile fails with [`Error::ThreadBusy`] (a consumer that stops
    /// reading at an `Interrupted` event drops the stream before it resumes).
    pub fn stream(
        &self,
        input: impl Into<Input>,
        config: &RunConfig,
        modes: StreamModes,
    ) -> impl Stream<Item = Result<StreamItem>> + Send + 'static {
        let (tx, rx) = futures::channel::mpsc::unbounded::<Result<StreamItem>>();
        let this = self.clone();
        let input = input.into();
        let config = config.clone();
        let fut = async move {
            let r = crate::run::run(
                &this.g,
                this.cp.as_ref(),
                &this.cache,
                input,
                &config,
                Some(&tx),
                modes,
            )
            .await;
            let _ = tx.unbounded_send(r.map(StreamItem::Done));
            // The stream ends with the run's outcome, also when a node left a clone of its
            // `Context` (a sender) in a task of its own: closing the channel ends it for every
            // sender once the queued items are read (before 2026-12-01 the stream stayed open
            // until that task dropped its clone).
            tx.close_channel();
        };
        let driver = futures::stream::once(fut).filter_map(|()| async { None });
        futures::stream::select(rx, driver)
    }

    /// The thread's latest checkpoint (or the configured one) with its next tasks.
    ///
    /// Without a checkpoint id (the thread's head) the values include the results the next
    /// step's finished tasks stored (the siblings of an interrupted or failed task), and
    /// `next` lists only the tasks still to run, as the reference's `get_state` does; when
    /// those results cannot be decoded (a write to a channel a deploy removed) or applied
    /// together (the step failed at its barrier), the head shows the checkpoint as stored. With a checkpoint id, and in the history, a snapshot
    /// shows the checkpoint as stored and every task of its next step.
    ///
    /// A `checkpoint_ns` other than the root's names a subgraph's checkpoints (as
    /// [`TaskSnapshot::subgraph_ns`] gives it): the read is handed to that subgraph node's
    /// graph, which reads them with its own schema through this graph's checkpointer, as the
    /// reference hands a namespaced `get_state` to its subgraph
    /// ([`Error::SubgraphNotFound`] when no subgraph node of this graph, or of its subgraphs,
    /// has that path).
    pub async fn get_state(&self, config: &RunConfig) -> Result<Option<StateSnapshot>> {
        let cp = self.cp.as_deref().ok_or(Error::NoCheckpointer)?;
        match self.subgraph_at(&config.checkpoint_ns)? {
            // A subgraph's runs start from the store, never from a hot cache of its own. A
            // caller's read waits for what a dropped run still stores, in the subgraph's
            // namespace too (the runtime's own reads of it are part of the enclosing run and
            // do not wait).
            Some(sub) => {
                crate::landing::settle(config.thread_id.as_str()).await;
                crate::run::get_state(&sub.g, cp, &HotCache::default(), config).await
            }
            None => crate::run::get_state(&self.g, cp, &self.cache, config).await,
        }
    }

    /// The graph whose checkpoints live in namespace `ns`: `None` for the root namespace (this
    /// graph's own), else the subgraph node's graph that the namespace's path (its node names,
    /// task ids left out) leads to from this graph.
    fn subgraph_at(&self, ns: &str) -> Result<Option<&CompiledGraph>> {
        if ns.is_empty() {
            return Ok(None);
        }
        let path: Vec<&str> = ns
            .split('|')
            .map(|part| part.split_once(':').map_or(part, |(node, _)| node))
            .collect();
        let mut at = self;
        for node in &path {
            at =
                at.g.subgraphs
                    .get(&NodeId::new(node))
                    .ok_or_else(|| Error::SubgraphNotFound {
                        namespace: ns.to_owned(),
                        path: path.join("|"),
                    })?;
        }
        Ok(Some(at))
    }

    /// Every checkpoint of the thread, newest first (all branches); only the named one when
    /// `config` names a checkpoint, as the reference's savers list.
    ///
    /// Each snapshot holds its whole state, so the whole history of a long thread is large;
    /// [`get_state_history_with`](Self::get_state_history_with) reads a page of it.
    pub async fn get_state_history(&self, config: &RunConfig) -> Result<Vec<StateSnapshot>> {
        self.get_state_history_with(config, &HistoryQuery::default())
            .await
    }

    /// The checkpoints of the thread that `query` selects, newest first (all branches).
    ///
    /// With a limit and no filter, the cost is that of `limit` [`get_state`](Self::get_state)
    /// reads of older checkpoints however long the thread is (with a filter, pages of at least
    /// 64 checkpoints are read until `limit` match, so a rare match costs reading the pages
    /// before it); walk further back by passing the last
    /// snapshot's id as the next query's `before`, until a page comes back empty (a page can
    /// be short without being the last: a checkpoint deleted between listing and reading it
    /// is left out; an empty page is checked against the store and read again while older
    /// checkpoints remain, up to 16 reads, then [`Error::Storage`]).
    ///
    /// A config that names a checkpoint selects only it: the one snapshot
    /// [`get_state`](Self::get_state) gives for it, when it exists and passes `query`.
    ///
    /// A subgraph's namespace is handed to that subgraph, as for [`get_state`](Self::get_state).
    pub async fn get_state_history_with(
        &self,
        config: &RunConfig,
        query: &HistoryQuery,
    ) -> Result<Vec<StateSnapshot>> {
        let cp = self.cp.as_deref().ok_or(Error::NoCheckpointer)?;
        let g = match self.subgraph_at(&config.checkpoint_ns)? {
            Some(sub) => {
                // As for `get_state`.
                crate::landing::settle(config.thread_id.as_str()).await;
                &sub.g
            }
            None => &self.g,
        };
        crate::run::history(g, cp, config, query).await
    }

    /// Applies `values` as if `as_node` had written them, creating an `update` checkpoint; returns its id.
    ///
    /// `as_node` may be `__start__`: the values are then the input task's writes, and the nodes
    /// after `__start__` run next (a thread seeded without running anything). Without
    /// `as_node`, the node that ran last is taken, `__start__` included, and `__start__` when
    /// nothing ran ([`Error::AmbiguousAsNode`] when several ran last together).
    ///
    /// Empty `values` as `__end__` clear the pending step instead: its tasks are consumed as if
    /// they had run, the results its finished tasks stored are applied, and an interrupted,
    /// failed or unstarted task will not run (what the applied results trigger is next). This
    /// is how a pending interrupt is dropped. Values as `__end__` are refused.
    ///
    /// A subgraph's namespace is handed to that subgraph, as for [`get_state`](Self::get_state):
    /// the values are its channels' and `as_node` one of its nodes.
    pub async fn update_state(
        &self,
        config: &RunConfig,
        values: Update,
        as_node: Option<NodeId>,
    ) -> Result<CheckpointId> {
        let cp = self.cp.as_ref().ok_or(Error::NoCheckpointer)?;
        let g = self
            .subgraph_at(&config.checkpoint_ns)?
            .map_or(&self.g, |sub| &sub.g);
        crate::run::update_state(g, cp, config, values, as_node).await
    }

    /// Turns the per-thread hot-state cache on or off (default on); off, every run rebuilds the head's
    /// channels from the store (delta channels by their history walk).
    pub fn with_hot_cache(self, enabled: bool) -> Self {
        self.cache
            .disabled
            .store(!enabled, std::sync::atomic::Ordering::Relaxed);
        self
    }

    /// How many runs started from the per-thread hot-state cache instead of rebuilding channels.
    pub fn hot_cache_hits(&self) -> u64 {
        self.cache.hits.load(std::sync::atomic::Ordering::Relaxed)
    }

    /// Node names, in declaration order (without `__start__`).
    pub fn nodes(&self) -> Vec<NodeId> {
        self.g.nodes.iter().skip(1).map(|n| n.id.clone()).collect()
    }
}

/// An item of [`CompiledGraph::stream`]: an event, or the final outcome.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum StreamItem {
    /// An event of the graph streamed.
    Event(StreamEvent),
    /// An event of a subgraph's run, with [`StreamModes::subgraphs`]: the same modes as the
    /// graph's own events, tagged with the namespace the subgraph runs in (its task's
    /// [`TaskSnapshot::subgraph_ns`], nested with `|`), as the reference's `subgraphs=True`
    /// stream tags them.
    Subgraph {
        /// The subgraph run's checkpoint namespace.
        namespace: String,
        /// The event.
        event: StreamEvent,
    },
    /// The run finished with this outcome (always the last item).
    Done(RunOutcome),
}

#[cfg(test)]
mod tests {
    use crate::{ChannelSpec, Key, StateGraph, Update};

    /// The same join declared twice makes one barrier channel, not two under one name.
    #[test]
    fn a_join_declared_twice_makes_one_barrier() {
        const LOG: Key<Vec<String>> = Key::from_static("log");
        let mut g = StateGraph::new();
        g.channel(&LOG, ChannelSpec::last_value())
            .expect("declared once");
        for n in ["a", "b", "c"] {
            g.add_node(n, |_s, _c| async { Ok(Update::new()) });
        }
        g.add_edge("__start__", "a").add_edge("__start__", "b");
        g.add_join(["a", "b"], "c").add_join(["a", "b"], "c");
        g.add_edge("c", "__end__");
        let compiled = g.compile().expect("a repeated join is the same join");
        let barriers = compiled
            .g
            .chans
            .iter()
            .filter(|c| &*c.name == "join:a+b:c")
            .count();
        assert_eq!(barriers, 1);
    }
}
