//! Helpers shared by the integration tests: a log channel, a recording store, trace rendering.

use std::sync::{Arc, Mutex};

use antler_graph::{
    ChannelSpec, CheckpointId, CheckpointRecord, CheckpointTuple, Checkpointer, CompiledGraph,
    Input, Key, MemoryCheckpointer, Result, RunConfig, StateGraph, StreamEvent, StreamItem,
    StreamModes, TaskId,
};
use futures::StreamExt;
use serde_json::Value as Json;

pub(crate) const LOG: Key<Vec<String>> = Key::from_static("log");
pub(crate) const LAST: Key<String> = Key::from_static("last");
pub(crate) const N: Key<i64> = Key::from_static("n");

/// A graph with `log` (append reducer), `last` (last value) and `n` (sum).
pub(crate) fn graph() -> StateGraph {
    let mut g = StateGraph::new();
    g.channel(
        &LOG,
        ChannelSpec::reducer(
            "append",
            Vec::new,
            |acc: &Vec<String>, w: &[Vec<String>]| {
                Ok(acc.iter().chain(w.iter().flatten()).cloned().collect())
            },
        ),
    )
    .expect("log declared once");
    g.channel(&LAST, ChannelSpec::last_value())
        .expect("last declared once");
    g.channel(
        &N,
        ChannelSpec::reducer(
            "sum",
            || 0,
            |acc: &i64, w: &[i64]| Ok(acc + w.iter().sum::<i64>()),
        ),
    )
    .expect("n declared once");
    g
}

pub(crate) fn log(items: &[&str]) -> Vec<String> {
    items.iter().map(|s| (*s).to_owned()).collect()
}

/// Adds a node per name that appends its name to `LOG` (the common graph's reducer).
pub(crate) fn logging_nodes(g: &mut StateGraph, names: &[&'static str]) {
    for &name in names {
        g.add_node(name, move |_s, _c| async move {
            Ok(antler_graph::Update::new().set(&LOG, log(&[name])))
        });
    }
}

/// One store operation as the loop issued it.
#[derive(Clone, Debug)]
pub(crate) enum Op {
    Put(Box<CheckpointRecord>),
    Writes { checkpoint: CheckpointId },
}

/// A memory store that records every `put` and `put_writes`.
#[derive(Default)]
pub(crate) struct Recording {
    inner: MemoryCheckpointer,
    pub(crate) ops: Mutex<Vec<Op>>,
}

impl Recording {
    pub(crate) fn ops(&self) -> Vec<Op> {
        self.ops.lock().expect("not poisoned").clone()
    }
    pub(crate) fn puts(&self) -> Vec<CheckpointRecord> {
        self.ops()
            .into_iter()
            .filter_map(|o| if let Op::Put(r) = o { Some(*r) } else { None })
            .collect()
    }
}

#[async_trait::async_trait]
impl Checkpointer for Recording {
    async fn get_tuple(
        &self,
        thread: &antler_graph::Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.inner.get_tuple(thread, id).await
    }
    async fn delta_history(
        &self,
        thread: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<std::collections::BTreeMap<String, antler_graph::DeltaHistory>> {
        self.inner.delta_history(thread, checkpoint, channels).await
    }
    async fn list(&self, thread: &antler_graph::Scope) -> Result<Vec<CheckpointTuple>> {
        self.inner.list(thread).await
    }
    async fn put(&self, thread: &antler_graph::Scope, checkpoint: CheckpointRecord) -> Result<()> {
        self.ops
            .lock()
            .expect("not poisoned")
            .push(Op::Put(Box::new(checkpoint.clone())));
        self.inner.put(thread, checkpoint).await
    }
    async fn put_writes(
        &self,
        thread: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        self.ops.lock().expect("not poisoned").push(Op::Writes {
            checkpoint: checkpoint.clone(),
        });
        self.inner
            .put_writes(thread, checkpoint, task_id, task_path, writes)
            .await
    }
}

/// Adds `sub` as node `name`, the only step of `g`: `__start__` → `name` → `__end__`.
pub(crate) fn only_subgraph(g: &mut StateGraph, name: &str, sub: CompiledGraph) {
    g.add_subgraph(name, sub);
    g.add_edge("__start__", name).add_edge(name, "__end__");
}

pub(crate) fn memory(g: StateGraph) -> CompiledGraph {
    g.compile()
        .expect("valid graph")
        .with_checkpointer(Arc::new(MemoryCheckpointer::new()))
}

/// Runs with debug events and renders a salsa-style trace: one line per task of a finished step
/// (node, kind, writes, sends) and per saved checkpoint (source, step), then the outcome.
pub(crate) async fn trace(
    graph: &CompiledGraph,
    input: impl Into<Input>,
    cfg: &RunConfig,
) -> String {
    let modes = StreamModes {
        debug: true,
        custom: true,
        hidden: true,
        ..StreamModes::default()
    };
    let mut s = Box::pin(graph.stream(input, cfg, modes));
    let mut out = String::new();
    while let Some(item) = s.next().await {
        let line = match item {
            Ok(StreamItem::Event(StreamEvent::Task(t))) => {
                let writes: Vec<String> =
                    t.writes.iter().map(|(c, v)| format!("{c}={v}")).collect();
                let sends: Vec<String> = t.sends.iter().map(|(n, p)| format!("{n}<-{p}")).collect();
                format!(
                    "step {} {:?} {}: writes [{}]{}",
                    t.step,
                    t.kind,
                    t.node,
                    writes.join(", "),
                    if sends.is_empty() {
                        String::new()
                    } else {
                        format!(" sends [{}]", sends.join(", "))
                    }
                )
            }
            Ok(StreamItem::Event(StreamEvent::Checkpoint(c))) => {
                format!("checkpoint {} step {}", c.source.as_str(), c.step)
            }
            Ok(StreamItem::Event(StreamEvent::Custom { node, value })) => {
                format!("custom {node}: {value}")
            }
            Ok(StreamItem::Event(StreamEvent::Interrupted(i))) => {
                format!(
                    "interrupted {:?}",
                    i.iter()
                        .map(|i| format!("{}:{}", i.node, i.value))
                        .collect::<Vec<_>>()
                )
            }
            Ok(StreamItem::Event(other)) => format!("{other:?}"),
            Ok(StreamItem::Done(o)) => format!("done {:?}", o.values),
            Ok(other) => format!("{other:?}"),
            Err(e) => format!("error {e}"),
        };
        out.push_str(&line);
        out.push('\n');
    }
    out
}

/// The packet of [`add_split`]'s sends.
pub(crate) const ITEM: Key<String> = Key::from_static("item");

/// Declares [`ITEM`] (packets only) and adds a node `split` that sends `n` packets
/// (`x0`, `x1`, …) to a node `work`, which the caller adds.
pub(crate) fn add_split(g: &mut StateGraph, n: usize) {
    g.channel(&ITEM, ChannelSpec::packet_only())
        .expect("item declared once");
    let split = antler_graph::node_fn(move |_s, _c| async move {
        let mut cmd = antler_graph::Command::new();
        for i in 0..n {
            cmd = cmd.goto(antler_graph::Send::new("work").with(&ITEM, format!("x{i}")));
        }
        Ok(cmd)
    });
    g.add_node_with(
        "split",
        split,
        antler_graph::NodeOptions {
            destinations: vec!["work".into()],
            ..Default::default()
        },
    );
}

/// [`trace`], then what each checkpoint the run saved stores, read back with `get_state` once
/// the run is over: its source and step, the next step's tasks (node, kind, status) and its
/// values.
pub(crate) async fn trace_with_checkpoints(
    graph: &CompiledGraph,
    input: impl Into<Input>,
    cfg: &RunConfig,
) -> String {
    let before: std::collections::HashSet<antler_graph::CheckpointId> = graph
        .get_state_history(cfg)
        .await
        .expect("history")
        .into_iter()
        .map(|s| s.checkpoint_id)
        .collect();
    let mut out = trace(graph, input, cfg).await;
    let mut saved: Vec<_> = graph
        .get_state_history(cfg)
        .await
        .expect("history")
        .into_iter()
        .filter(|s| !before.contains(&s.checkpoint_id))
        .collect();
    // History is newest first; the run's checkpoints oldest first.
    saved.reverse();
    for s in saved {
        let tasks: Vec<String> = s
            .tasks
            .iter()
            .map(|t| format!("{}:{:?}:{:?}", t.node, t.kind, t.status))
            .collect();
        out.push_str(&format!(
            "= {} step {}: next [{}] values {:?}\n",
            s.source.as_str(),
            s.step,
            tasks.join(", "),
            s.values
        ));
    }
    out
}

/// An in-process store whose first put of a checkpoint of one step waits until the gate opens;
/// it tells when that put starts waiting (`entered`) and when it is stored (`stored`).
pub(crate) struct GatedStore {
    inner: MemoryCheckpointer,
    step: i64,
    gated: std::sync::atomic::AtomicBool,
    pub(crate) entered: tokio::sync::Notify,
    pub(crate) stored: tokio::sync::Notify,
    open: tokio::sync::watch::Sender<bool>,
}

impl GatedStore {
    /// Gates the first put of a step-`step` checkpoint.
    pub(crate) fn new(step: i64) -> Self {
        Self {
            inner: MemoryCheckpointer::new(),
            step,
            gated: false.into(),
            entered: tokio::sync::Notify::new(),
            stored: tokio::sync::Notify::new(),
            open: tokio::sync::watch::Sender::new(false),
        }
    }

    /// Opens the gate (for good).
    pub(crate) fn open(&self) {
        self.open.send_replace(true);
    }
}

#[async_trait::async_trait]
impl Checkpointer for GatedStore {
    async fn get_tuple(
        &self,
        thread: &antler_graph::Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.inner.get_tuple(thread, id).await
    }
    async fn delta_history(
        &self,
        thread: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<std::collections::BTreeMap<String, antler_graph::DeltaHistory>> {
        self.inner.delta_history(thread, checkpoint, channels).await
    }
    async fn list(&self, thread: &antler_graph::Scope) -> Result<Vec<CheckpointTuple>> {
        self.inner.list(thread).await
    }
    async fn put(&self, thread: &antler_graph::Scope, checkpoint: CheckpointRecord) -> Result<()> {
        let gated = checkpoint.step == self.step
            && !self.gated.swap(true, std::sync::atomic::Ordering::SeqCst);
        if gated {
            self.entered.notify_one();
            let mut open = self.open.subscribe();
            let _ = open.wait_for(|o| *o).await;
        }
        self.inner.put(thread, checkpoint).await?;
        if gated {
            self.stored.notify_one();
        }
        Ok(())
    }
    async fn put_writes(
        &self,
        thread: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        self.inner
            .put_writes(thread, checkpoint, task_id, task_path, writes)
            .await
    }
}

/// Which write a [`Failing`] store's rule is asked about.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum StoreWrite {
    Put,
    Writes,
}

/// Whether a [`Failing`] store fails a write to a scope.
type FailRule = dyn Fn(&antler_graph::Scope, StoreWrite) -> bool + Send + Sync;

/// A memory store whose `put` and `put_writes` fail with a `Storage` error when its rule says
/// so (reads always succeed).
pub(crate) struct Failing {
    inner: MemoryCheckpointer,
    fails: Box<FailRule>,
    /// Fail with a checkpoint crate `Conflict` (a saver's retryable error) instead of a plain
    /// message.
    conflict: bool,
}

impl Failing {
    pub(crate) fn new(
        fails: impl Fn(&antler_graph::Scope, StoreWrite) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            inner: MemoryCheckpointer::new(),
            fails: Box::new(fails),
            conflict: false,
        }
    }

    /// Fails as [`Failing::new`] does, with a checkpoint crate `Conflict` as the source.
    pub(crate) fn conflicting(
        fails: impl Fn(&antler_graph::Scope, StoreWrite) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self {
            conflict: true,
            ..Self::new(fails)
        }
    }

    fn check(&self, scope: &antler_graph::Scope, write: StoreWrite) -> Result<()> {
        if (self.fails)(scope, write) {
            if self.conflict {
                return Err(antler_graph::Error::Storage {
                    source: Box::new(antler_checkpoint::Error::Conflict {
                        thread_id: antler_checkpoint::ThreadId::new(scope.thread.as_str()),
                        detail: "a concurrent writer".into(),
                    }),
                });
            }
            return Err(antler_graph::Error::Storage {
                source: "the store is down".into(),
            });
        }
        Ok(())
    }
}

#[async_trait::async_trait]
impl Checkpointer for Failing {
    async fn get_tuple(
        &self,
        scope: &antler_graph::Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.inner.get_tuple(scope, id).await
    }
    async fn delta_history(
        &self,
        scope: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<std::collections::BTreeMap<String, antler_graph::DeltaHistory>> {
        self.inner.delta_history(scope, checkpoint, channels).await
    }
    async fn list(&self, scope: &antler_graph::Scope) -> Result<Vec<CheckpointTuple>> {
        self.inner.list(scope).await
    }
    async fn put(&self, scope: &antler_graph::Scope, checkpoint: CheckpointRecord) -> Result<()> {
        self.check(scope, StoreWrite::Put)?;
        self.inner.put(scope, checkpoint).await
    }
    async fn put_writes(
        &self,
        scope: &antler_graph::Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        self.check(scope, StoreWrite::Writes)?;
        self.inner
            .put_writes(scope, checkpoint, task_id, task_path, writes)
            .await
    }
}
