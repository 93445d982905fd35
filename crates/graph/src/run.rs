//! The super-step loop (runtime-spec §2): load, input handling, plan → run → barrier → checkpoint.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};

use futures::channel::mpsc::UnboundedSender;
use serde_json::Value as Json;

use crate::channel::Channel;
use crate::checkpointer::{
    CheckpointRecord, CheckpointTuple, Checkpointer, ERROR, INTERRUPT, NO_WRITES, PendingWrite,
    RESUME, Scope, Source, is_control, new_checkpoint_id,
};
use crate::compiled::{
    ChanKind, CheckpointEvent, Durability, Graph, HistoryQuery, Input, NodeImpl, Packet, RunConfig,
    RunOutcome, StateSnapshot, StreamEvent, StreamItem, StreamModes, TaskEvent, TaskKind,
    TaskSnapshot, TaskStatus,
};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, END, NULL_TASK_ID, NodeId, START, TaskId};
use crate::state::{State, Update, Val, Write};
use crate::types::{
    Command, Context, Goto, Interrupt, NodeError, NodeErrorKind, Resume, ResumeState, SharedResume,
    TaskCtx, interrupt_id,
};

const INTERRUPT_SEEN: &str = "__interrupt__";

/// The `versions_seen` entry (node and channel name) that carries a branch's version floor.
pub(crate) const VERSION_FLOOR: &str = "__version_floor__";

/// The `versions_seen` entry whose channels have a forced snapshot waiting for their first
/// version on the branch.
pub(crate) const FORCED_SNAPSHOTS: &str = "__forced_snapshots__";

/// Live channels of a thread at one checkpoint.
pub(crate) struct Live {
    pub(crate) chans: Vec<Box<dyn Channel>>,
    pub(crate) versions: Vec<u64>,
    /// Versions at the last checkpoint that reached the store (values are stored only for moved channels).
    pub(crate) stored: Vec<u64>,
    /// New versions must exceed this (set when a new branch starts, see [`Live::next_version`]).
    pub(crate) floor: u64,
    pub(crate) seen: BTreeMap<String, BTreeMap<usize, u64>>,
    pub(crate) updated: Option<BTreeSet<usize>>,
    /// Ordinary reducer channels rebuilt from history (a version without a stored value, on a
    /// thread written through a delta channel): the next checkpoint stores their value under a
    /// new version, so no later read walks again, and none replays writes pending on the loaded
    /// checkpoint that this branch never applied (a fork, an abandoned step).
    pub(crate) rebuilt: BTreeSet<usize>,
}

impl Clone for Live {
    fn clone(&self) -> Self {
        Self {
            chans: self.chans.iter().map(|c| c.box_clone()).collect(),
            versions: self.versions.clone(),
            stored: self.stored.clone(),
            floor: self.floor,
            seen: self.seen.clone(),
            updated: self.updated.clone(),
            rebuilt: self.rebuilt.clone(),
        }
    }
}

impl Live {
    pub(crate) fn new(g: &Graph) -> Result<Self> {
        let chans = (0..g.chans.len())
            .map(|i| g.channel(i, None))
            .collect::<Result<Vec<_>>>()?;
        Ok(Self {
            versions: vec![0; chans.len()],
            stored: vec![0; chans.len()],
            floor: 0,
            chans,
            seen: BTreeMap::new(),
            updated: None,
            rebuilt: BTreeSet::new(),
        })
    }

    /// Empties the untracked channels and strips untracked values from queued `Send`
    /// packets and from an input `__start__` still holds, as a restore from the store finds them.
    fn forget_untracked(&mut self, g: &Graph) -> Result<()> {
        for i in 0..self.chans.len() {
            if g.is_untracked(i) {
                self.chans[i] = g.channel(i, None)?;
            } else if matches!(g.chans[i].kind, ChanKind::Tasks | ChanKind::Start) {
                let stored = self.chans[i].checkpoint(&|v| g.value_to_json(i, v))?;
                self.chans[i] = g.channel(i, stored)?;
            }
        }
        Ok(())
    }

    /// Channels rebuilt from history (delta and ordinary reducer channels) that have a version but
    /// no stored value at `rec`: they need a history walk.
    pub(crate) fn needs_walk(g: &Graph, rec: &CheckpointRecord) -> Vec<String> {
        g.schema
            .specs()
            .filter(|s| {
                s.rebuilds_from_history()
                    && rec.versions.contains_key(s.name())
                    && !rec.values.contains_key(s.name())
                    && !rec.encoded_lists.contains_key(s.name())
            })
            .map(|s| s.name().to_owned())
            .collect()
    }

    /// Rebuilds the channels of a stored checkpoint, walking the history of delta channels.
    pub(crate) async fn load(
        g: &Graph,
        cp: &dyn Checkpointer,
        scope: &Scope,
        rec: &CheckpointRecord,
    ) -> Result<Self> {
        let walk = Self::needs_walk(g, rec);
        let histories = if walk.is_empty() {
            BTreeMap::new()
        } else {
            cp.delta_history(scope, &rec.id, &walk).await?
        };
        Self::restore(g, rec, histories)
    }

    /// Rebuilds the channels of `rec` whose parent `parent` was just rebuilt (`parent_writes`
    /// are the parent's pending writes): a delta channel without a stored value continues the
    /// parent's channel with the parent's writes to it, which is what the history walk would
    /// replay on top of the same seed (writes are applied in batches, and the batch reducer
    /// gives the same result however a sequence of writes is split). Reading a run of
    /// consecutive checkpoints this way walks history once, not once per checkpoint.
    pub(crate) fn continue_from(
        g: &Graph,
        rec: &CheckpointRecord,
        parent: &Live,
        parent_writes: &[PendingWrite],
    ) -> Result<Self> {
        let mut continued = BTreeMap::new();
        for name in Self::needs_walk(g, rec) {
            let (Some(&i), Some(spec)) = (g.chan_idx.get(name.as_str()), g.schema.get(&name))
            else {
                continue;
            };
            let writes: Vec<Json> = parent_writes
                .iter()
                .filter(|w| w.channel == name)
                .map(|w| w.value.clone())
                .collect();
            continued.insert(name, spec.replay_onto(parent.chans[i].box_clone(), writes)?);
        }
        Self::restore_with(g, rec, BTreeMap::new(), continued)
    }

    pub(crate) fn restore(
        g: &Graph,
        rec: &CheckpointRecord,
        histories: BTreeMap<String, crate::checkpointer::DeltaHistory>,
    ) -> Result<Self> {
        Self::restore_with(g, rec, histories, BTreeMap::new())
    }

    /// [`Self::restore`], with some delta channels already rebuilt (`continued`).
    fn restore_with(
        g: &Graph,
        rec: &CheckpointRecord,
        mut histories: BTreeMap<String, crate::checkpointer::DeltaHistory>,
        mut continued: BTreeMap<String, Box<dyn Channel>>,
    ) -> Result<Self> {
        let mut chans = Vec::with_capacity(g.chans.len());
        let mut versions = vec![0; g.chans.len()];
        let mut rebuilt = BTreeSet::new();
        for (i, def) in g.chans.iter().enumerate() {
            versions[i] = rec.versions.get(&*def.name).copied().unwrap_or(0);
            let stored = rec.values.get(&*def.name).cloned();
            let items = rec.encoded_lists.get(&*def.name).cloned();
            if versions[i] > 0
                && stored.is_none()
                && items.is_none()
                && g.schema
                    .get(&def.name)
                    .is_some_and(|s| s.rebuilds_from_history() && !s.is_delta())
            {
                rebuilt.insert(i);
            }
            let ready = continued
                .remove(&*def.name)
                .filter(|_| stored.is_none() && items.is_none());
            let mut ch = match (ready, histories.remove(&*def.name), g.schema.get(&def.name)) {
                (Some(ch), _, _) => ch,
                (None, Some(h), Some(spec)) if stored.is_none() && items.is_none() => {
                    spec.replay(h.seed, h.seed_items, h.writes)?
                }
                (None, _, Some(spec)) if stored.is_none() && items.is_some() => {
                    spec.replay(None, items, Vec::new())?
                }
                _ => g.channel(i, stored)?,
            };
            if let (Some(d), Some((u, s))) = (ch.delta(), rec.counters.get(&*def.name)) {
                d.updates = *u;
                d.supersteps = *s;
            }
            chans.push(ch);
        }
        let mut seen = BTreeMap::new();
        let floor = rec
            .versions_seen
            .get(VERSION_FLOOR)
            .and_then(|m| m.get(VERSION_FLOOR))
            .copied()
            .unwrap_or(0);
        if let Some(waiting) = rec.versions_seen.get(FORCED_SNAPSHOTS) {
            for name in waiting.keys() {
                if let Some(&i) = g.chan_idx.get(name.as_str())
                    && let Some(d) = chans[i].delta()
                {
                    d.forced = true;
                }
            }
        }
        for (node, m) in &rec.versions_seen {
            if node == VERSION_FLOOR || node == FORCED_SNAPSHOTS {
                continue;
            }
            let e: &mut BTreeMap<usize, u64> = seen.entry(node.clone()).or_default();
            for (c, v) in m {
                if let Some(&i) = g.chan_idx.get(c.as_str()) {
                    e.insert(i, *v);
                }
            }
        }
        let updated = rec.updated_channels.as_ref().map(|u| {
            u.iter()
                .filter_map(|c| g.chan_idx.get(c.as_str()).copied())
                .collect()
        });
        Ok(Self {
            chans,
            stored: versions.clone(),
            floor,
            versions,
            seen,
            updated,
            rebuilt,
        })
    }

    /// Gives channel `i` a new version so that the next checkpoint stores its value, without
    /// re-triggering anything: every node (and `__interrupt__`) that had seen the old version
    /// has seen the new one, and the bump is recorded under `__snapshot_bumps__` (runtime-spec
    /// §5.4).
    fn bump_without_trigger(&mut self, i: usize) {
        let old = self.versions[i];
        let new = self.next_version();
        self.versions[i] = new;
        for m in self.seen.values_mut() {
            if m.get(&i) == Some(&old) {
                m.insert(i, new);
            }
        }
        self.seen
            .entry("__snapshot_bumps__".to_owned())
            .or_default()
            .insert(i, new);
    }

    #[expect(
        clippy::too_many_arguments,
        reason = "the record's fields plus two snapshot switches"
    )]
    fn checkpoint_record(
        &mut self,
        g: &Graph,
        id: CheckpointId,
        parent: Option<CheckpointId>,
        step: i64,
        source: Source,
        snapshot_all: bool,
        encode_lists: bool,
    ) -> Result<CheckpointRecord> {
        // Delta cadence (runtime-spec §5.3–§5.4): counters advance on every saved checkpoint; a
        // snapshot stores the whole value, and bumps the version if it did not move, without
        // re-triggering readers (nodes that saw the old version are advanced to the new one).
        let mut snapshots = BTreeSet::new();
        let mut counters = BTreeMap::new();
        for (i, def) in g.chans.iter().enumerate() {
            if !matches!(def.kind, ChanKind::User) {
                continue;
            }
            // A fork checkpoint is saved before any step ran: `updated` still holds the loaded
            // checkpoint's set (its tasks' triggers), whose updates that checkpoint already
            // counted. Only a version that moved since (the command's NULL-task writes) is an
            // update here (runtime-spec §10 rule 6).
            let updated = if source == Source::Fork {
                self.versions[i] != self.stored[i]
            } else {
                self.updated.as_ref().is_some_and(|u| u.contains(&i))
            };
            let versioned = self.versions[i] > 0;
            let Some(d) = self.chans[i].delta() else {
                continue;
            };
            if d.on_checkpoint(updated, snapshot_all, versioned) {
                snapshots.insert(i);
                if self.versions[i] == self.stored[i] {
                    self.bump_without_trigger(i);
                }
            }
            if let Some(d) = self.chans[i].delta()
                && (d.updates, d.supersteps) != (0, 0)
            {
                counters.insert(def.name.to_string(), (d.updates, d.supersteps));
            }
        }
        // A rebuilt ordinary reducer channel stores its value now (see `Live::rebuilt`).
        for i in std::mem::take(&mut self.rebuilt) {
            if self.versions[i] > 0 && self.versions[i] == self.stored[i] {
                self.bump_without_trigger(i);
            }
        }
        let mut values = BTreeMap::new();
        let mut encoded_lists = BTreeMap::new();
        let mut versions = BTreeMap::new();
        let mut new_versions = BTreeSet::new();
        for (i, def) in g.chans.iter().enumerate() {
            if self.versions[i] == 0 {
                continue;
            }
            versions.insert(def.name.to_string(), self.versions[i]);
            if self.versions[i] == self.stored[i] {
                continue;
            }
            new_versions.insert(def.name.to_string());
            if snapshots.contains(&i) {
                if encode_lists {
                    let ser = |v: &Val| g.value_to_json(i, v);
                    if let Some(d) = self.chans[i].delta()
                        && let Some(items) = d.encoded_snapshot(&ser)?
                    {
                        encoded_lists.insert(def.name.to_string(), items);
                        continue;
                    }
                }
                if let Some(v) = self.chans[i].get() {
                    values.insert(def.name.to_string(), g.value_to_json(i, v)?);
                }
                continue;
            }
            if let Some(j) = self.chans[i].checkpoint(&|v: &Val| g.value_to_json(i, v))? {
                values.insert(def.name.to_string(), j);
            }
        }
        let mut versions_seen: BTreeMap<String, BTreeMap<String, u64>> = self
            .seen
            .iter()
            .map(|(n, m)| {
                (
                    n.clone(),
                    m.iter()
                        .map(|(c, v)| (g.chans[*c].name.to_string(), *v))
                        .collect(),
                )
            })
            .collect();
        if self.floor > 0 {
            // A branch's floor rides with its checkpoints (see `Live::next_version`).
            versions_seen.insert(
                VERSION_FLOOR.to_owned(),
                BTreeMap::from([(VERSION_FLOOR.to_owned(), self.floor)]),
            );
        }
        // A snapshot forced while the channel had no version waits for its first write; the
        // wait rides with the checkpoints too, so a process that loads the branch cold still
        // snapshots there (no walk may go past it into writes the branch dropped).
        let mut waiting = BTreeMap::new();
        for (i, def) in g.chans.iter().enumerate() {
            if let Some(d) = self.chans[i].delta()
                && d.forced
            {
                waiting.insert(def.name.to_string(), 1);
            }
        }
        if !waiting.is_empty() {
            versions_seen.insert(FORCED_SNAPSHOTS.to_owned(), waiting);
        }
        let updated_channels = self.updated.as_ref().map(|u| {
            let mut v: Vec<String> = u.iter().map(|c| g.chans[*c].name.to_string()).collect();
            v.sort();
            v
        });
        Ok(CheckpointRecord {
            id,
            parent,
            step,
            source,
            values,
            versions,
            versions_seen,
            updated_channels,
            new_versions,
            counters,
            encoded_lists,
            run_id: None,
            metadata: serde_json::Map::new(),
            parents: BTreeMap::new(),
        })
    }

    pub(crate) fn state_view(&self, g: &Graph) -> State {
        self.view(g, true)
    }

    /// The state a run shows outside itself (its outcome and its `values` events): without
    /// untracked channels, which are the run's private values, never stored, so never in what
    /// a read of the thread shows either (runtime-spec §3; a middleware's `jump_to`, kernel-spec
    /// R1).
    pub(crate) fn output_view(&self, g: &Graph) -> State {
        self.view(g, false)
    }

    fn view(&self, g: &Graph, untracked: bool) -> State {
        let mut m = HashMap::new();
        for (i, def) in g.chans.iter().enumerate() {
            if !matches!(def.kind, ChanKind::User) || (!untracked && g.is_untracked(i)) {
                continue;
            }
            if let (Some(v), Some(spec)) = (self.chans[i].get(), g.schema.get(&def.name))
                && spec.is_state()
            {
                m.insert(def.name.clone(), v.clone());
            }
        }
        State::new(g.schema.clone(), m)
    }

    /// Records that the versions just checkpointed reached the store (not in exit mode).
    fn mark_stored(&mut self, d: Durability) {
        if d != Durability::Exit {
            self.stored.clone_from(&self.versions);
        }
    }

    fn has_versions(&self) -> bool {
        self.versions.iter().any(|v| *v > 0)
    }
}

/// A planned task.
pub(crate) struct Task {
    pub(crate) id: TaskId,
    pub(crate) node: usize,
    pub(crate) kind: TaskKind,
    pub(crate) path: String,
    pub(crate) triggers: Vec<usize>,
    pub(crate) input: State,
    pub(crate) start_input: Option<Update>,
}

fn task_id(ckpt: &str, step: i64, node: &str, kind: &str, extra: &[String]) -> TaskId {
    let mut key = format!("{ckpt}\u{0}\u{0}{step}\u{0}{node}\u{0}{kind}");
    for e in extra {
        key.push('\u{0}');
        key.push_str(e);
    }
    TaskId::new(
        uuid::Uuid::new_v5(&uuid::Uuid::NAMESPACE_OID, key.as_bytes())
            .hyphenated()
            .to_string(),
    )
}

/// PUSH tasks from queued packets, then PULL tasks of triggered nodes; in task-path order.
pub(crate) fn prepare_tasks(
    g: &Graph,
    live: &Live,
    ckpt: &str,
    step: i64,
    state: &State,
) -> Result<Vec<Task>> {
    let mut pull = Vec::new();
    let cands: Vec<usize> = match &live.updated {
        Some(u) => {
            let mut s = BTreeSet::new();
            for c in u {
                if let Some(ns) = g.trigger_to_nodes.get(c) {
                    s.extend(ns.iter().copied());
                }
            }
            s.into_iter().collect()
        }
        None => (0..g.nodes.len()).collect(),
    };
    for n in cands {
        let spec = &g.nodes[n];
        let seen = live.seen.get(spec.id.as_str());
        let fires = spec.triggers.iter().any(|&c| {
            live.chans[c].get().is_some()
                && seen.is_none_or(|s| live.versions[c] > s.get(&c).copied().unwrap_or(0))
        });
        if !fires {
            continue;
        }
        let mut trig: Vec<String> = spec
            .triggers
            .iter()
            .map(|&c| g.chans[c].name.to_string())
            .collect();
        trig.sort();
        let start_input = if matches!(spec.imp, NodeImpl::Start) {
            live.chans[g.start_chan]
                .get()
                .and_then(|v| v.downcast_ref::<Update>())
                .cloned()
        } else {
            None
        };
        pull.push(Task {
            id: task_id(ckpt, step, spec.id.as_str(), "__pregel_pull", &trig),
            node: n,
            kind: TaskKind::Pull,
            path: format!("~__pregel_pull, {}", spec.id),
            triggers: spec.triggers.clone(),
            input: state.clone(),
            start_input,
        });
    }
    pull.sort_by(|a, b| a.path.cmp(&b.path));
    let mut tasks = pull;
    let topic = &live.chans[g.tasks_chan];
    if topic.get().is_some() {
        // Invariant: the tasks channel only ever holds `Packet`s (see `goto_write`).
        let packets = topic
            .packets()
            .iter()
            .filter_map(|v| v.downcast_ref::<Packet>());
        for (i, p) in (0..).zip(packets) {
            let spec = &g.nodes[p.node];
            let values: HashMap<Arc<str>, Val> =
                p.arg.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
            tasks.push(Task {
                id: task_id(
                    ckpt,
                    step,
                    spec.id.as_str(),
                    "__pregel_push",
                    &[i.to_string()],
                ),
                node: p.node,
                kind: TaskKind::Push,
                path: format!("~__pregel_push, {i:010}"),
                triggers: Vec::new(),
                input: State::new(g.schema.clone(), values),
                start_input: None,
            });
        }
    }
    Ok(tasks)
}

/// One entry of a barrier batch.
pub(crate) struct Applied<'a> {
    pub(crate) name: &'a str,
    pub(crate) triggers: &'a [usize],
    pub(crate) bump: bool,
    pub(crate) writes: &'a [(usize, Write)],
}

impl<'a> Applied<'a> {
    /// A task's results as the barrier applies them: its triggers recorded as seen and
    /// consumed, and the step's version bump.
    fn task(g: &'a Graph, task: &'a Task, writes: &'a [(usize, Write)]) -> Self {
        Applied {
            name: g.nodes[task.node].id.as_str(),
            triggers: &task.triggers,
            bump: true,
            writes,
        }
    }
}

impl Live {
    /// The version for this step's changes: one above the greatest version of the checkpoint
    /// (runtime-spec §2.4.3), and above `floor`.
    ///
    /// Savers key stored values by (channel, version) within a thread, so versions must be unique
    /// per thread across branches. The reference gets that from a random fraction in every version;
    /// antler keeps plain counters (one or two bytes stored) and, when a run or `update_state`
    /// starts from an addressed older checkpoint (a new branch), sets `floor` to the greatest
    /// version anywhere in the thread. The floor is stored with every checkpoint of the branch
    /// (a `versions_seen` entry under [`VERSION_FLOOR`]), because the branch's newest checkpoint
    /// need not hold a version above it: a fork that changes nothing (an empty `update_state`)
    /// keeps the old checkpoint's versions, and a plain run continuing from it would otherwise
    /// reuse versions of the other branch. With it, by induction, a run from the thread's newest
    /// checkpoint allocates versions above every version in the thread.
    pub(crate) fn next_version(&self) -> u64 {
        self.versions
            .iter()
            .copied()
            .max()
            .unwrap_or(0)
            .max(self.floor)
            + 1
    }
}

/// The greatest channel version of any checkpoint of the scope (for a new branch's `floor`).
pub(crate) async fn thread_max_version(cp: &dyn Checkpointer, scope: &Scope) -> Result<u64> {
    cp.max_version(scope).await
}

/// Sets `live.floor` to the thread's greatest version when that is above every version `live`
/// would allocate from, which only a deletion makes possible: `delete_for_runs` can remove the
/// thread's newest checkpoints (or all of them), and values stored under their versions stay
/// until its collection runs, which a stop or a concurrent put can leave for later. A run
/// continuing from the new head would otherwise reuse those versions, and reads would take a
/// leftover value for the one its own checkpoint lists without storing (a delta channel), or
/// its put would clash with it. A run whose head came from the hot cache skips this read: its
/// head is the one this process's last run left, with nothing deleted after it.
///
/// The floor is set only when needed, because it is stored with every later checkpoint of
/// the branch.
async fn raise_floor_past_deleted_runs(
    live: &mut Live,
    cp: &dyn Checkpointer,
    scope: &Scope,
) -> Result<()> {
    let mark = thread_max_version(cp, scope).await?;
    if mark >= live.next_version() {
        live.floor = mark;
    }
    Ok(())
}

/// `apply_writes` (runtime-spec §2.4). `batch` must be in task-path order.
pub(crate) fn apply_writes(
    g: &Graph,
    live: &mut Live,
    batch: &[Applied<'_>],
) -> Result<BTreeSet<usize>> {
    for t in batch.iter().filter(|t| t.bump) {
        // Input and NULL-task batches are no node: they record nothing in versions_seen (the
        // reference keeps an always-empty `__input__` entry, which no trigger check ever reads).
        let e = live.seen.entry(t.name.to_owned()).or_default();
        for &c in t.triggers {
            if live.versions[c] > 0 {
                e.insert(c, live.versions[c]);
            }
        }
    }
    let next = live.next_version();
    let consumed: BTreeSet<usize> = batch
        .iter()
        .flat_map(|t| t.triggers.iter().copied())
        .collect();
    for c in consumed {
        if live.chans[c].consume() {
            live.versions[c] = next;
        }
    }
    let mut groups: Vec<(usize, Vec<&Write>)> = Vec::new();
    for t in batch {
        for (c, w) in t.writes {
            match groups.iter_mut().find(|(gc, _)| gc == c) {
                Some((_, v)) => v.push(w),
                None => groups.push((*c, vec![w])),
            }
        }
    }
    let mut updated = BTreeSet::new();
    for (c, vals) in &groups {
        if live.chans[*c].update(vals)? {
            live.versions[*c] = next;
            if live.chans[*c].get().is_some() {
                updated.insert(*c);
            }
        }
    }
    let bump = batch.iter().any(|t| t.bump);
    if bump {
        for c in 0..live.chans.len() {
            if live.chans[c].get().is_some() && !updated.contains(&c) && live.chans[c].update(&[])?
            {
                live.versions[c] = next;
                if live.chans[c].get().is_some() {
                    updated.insert(c);
                }
            }
        }
        if updated.iter().all(|c| !g.trigger_to_nodes.contains_key(c)) {
            for c in 0..live.chans.len() {
                if live.chans[c].finish() {
                    live.versions[c] = next;
                    if live.chans[c].get().is_some() {
                        updated.insert(c);
                    }
                }
            }
        }
    }
    Ok(updated)
}

/// Turns a node's [`Command`] plus its static edges and router into channel writes.
pub(crate) struct Resolved {
    pub(crate) writes: Vec<(usize, Write)>,
}

fn goto_write(g: &Graph, goto: &Goto, out: &mut Vec<(usize, Write)>) -> Result<()> {
    match goto {
        Goto::Node(n) if n.as_str() == END => {}
        Goto::Node(n) => {
            let i = *g
                .node_idx
                .get(n)
                .filter(|&&i| i != 0)
                .ok_or_else(|| Error::UnknownNode {
                    node: n.to_string(),
                })?;
            out.push((g.branch_of[i], Write::Value(g.unit.clone())));
        }
        Goto::Send(s) => {
            let i = *g
                .node_idx
                .get(&s.node)
                .filter(|&&i| i != 0)
                .ok_or_else(|| Error::UnknownNode {
                    node: s.node.to_string(),
                })?;
            let mut arg = Vec::with_capacity(s.arg.len());
            for (k, t, v) in &s.arg {
                let spec = g.schema.get(k).ok_or_else(|| Error::UnknownChannel {
                    channel: k.to_string(),
                })?;
                if !spec.accepts_value(*t) {
                    return Err(Error::WriteType {
                        channel: k.to_string(),
                    });
                }
                arg.push((spec.name_arc().clone(), v.clone()));
            }
            out.push((
                g.tasks_chan,
                Write::Value(Arc::new(Packet { node: i, arg })),
            ));
        }
    }
    Ok(())
}

pub(crate) fn resolve(g: &Graph, node: usize, cmd: &Command, base: &Live) -> Result<Resolved> {
    if cmd.to_parent {
        return Err(Error::NoParentGraph);
    }
    let mut writes = update_writes(g, &cmd.update)?;
    let user_writes = writes.len();
    for goto in &cmd.goto {
        goto_write(g, goto, &mut writes)?;
    }
    let spec = &g.nodes[node];
    for &c in &spec.edge_writes {
        writes.push((c, Write::Value(g.unit.clone())));
    }
    for &c in &spec.join_writes {
        writes.push((c, Write::Value(Arc::new(spec.id.to_string()))));
    }
    if let Some(router) = &spec.router {
        // Fresh view: the step-start state with this task's own writes applied (runtime-spec §1.4).
        let mut m = HashMap::new();
        for (i, def) in g.chans.iter().enumerate() {
            if !matches!(def.kind, ChanKind::User) {
                continue;
            }
            let own: Vec<&Write> = writes[..user_writes]
                .iter()
                .filter(|(c, _)| *c == i)
                .map(|(_, w)| w)
                .collect();
            let value = if own.is_empty() {
                base.chans[i].get().cloned()
            } else {
                let mut ch = base.chans[i].box_clone();
                ch.update(&own)?;
                ch.get().cloned()
            };
            if let Some(v) = value {
                m.insert(def.name.clone(), v);
            }
        }
        let fresh = State::new(g.schema.clone(), m);
        for goto in router(&fresh) {
            // A router that declared where it may go goes nowhere else: the graph was checked
            // (reachability, a path to the end) with those targets, as the reference maps a
            // router's result through its path map and fails on a key it lacks. A `Send`
            // is a packet, not a route, as there.
            if let (Goto::Node(to), Some(declared)) = (&goto, &spec.router_targets)
                && !declared.contains(to)
            {
                return Err(Error::UndeclaredRoute {
                    node: spec.id.to_string(),
                    target: to.to_string(),
                });
            }
            goto_write(g, &goto, &mut writes)?;
        }
    }
    Ok(Resolved { writes })
}

/// Persistence wrapper implementing the durability modes.
///
/// Puts that must outlive the run's future run as their own tokio tasks, on an owned handle of
/// the checkpointer: the async-mode put of a step's checkpoint (stored while the next step's
/// tasks run, and stored even when the run is dropped meanwhile), and the exit-mode flush
/// (started when the run ends, or when it is dropped with buffered writes).
struct Persist<'a> {
    /// The checkpointer, owned: store operations run as their own tasks.
    cp_arc: Option<Arc<dyn Checkpointer>>,
    scope: &'a Scope,
    durability: Durability,
    /// The newest checkpoint that exists in the store.
    stored_head: Option<CheckpointId>,
    exit_ckpt: Option<CheckpointRecord>,
    exit_writes: Vec<BufferedWrites>,
    /// The checkpoint put still running (async durability).
    inflight: Option<tokio::task::JoinHandle<Result<()>>>,
    /// The runtime the run started on, for a flush spawned when the run is dropped (which
    /// may happen outside any runtime).
    rt: Option<tokio::runtime::Handle>,
    /// The run id, free metadata and enclosing graphs' checkpoints every checkpoint of the run carries.
    run_id: Option<String>,
    metadata: serde_json::Map<String, Json>,
    parents: BTreeMap<String, CheckpointId>,
}

/// Writes of one task held back in exit durability: (checkpoint, task, task path, writes).
type BufferedWrites = (CheckpointId, TaskId, String, Vec<(String, Json)>);

/// The result of a spawned put: a panic in the checkpointer is a storage error.
fn joined(r: std::result::Result<Result<()>, tokio::task::JoinError>) -> Result<()> {
    r.unwrap_or_else(|e| {
        Err(Error::Storage {
            source: Box::new(e),
        })
    })
}

/// Stores an exit-durability run's buffered checkpoint, then its buffered writes, in order.
async fn flush_buffered(
    cp: Arc<dyn Checkpointer>,
    scope: Scope,
    rec: Option<CheckpointRecord>,
    writes: Vec<BufferedWrites>,
) -> Result<()> {
    if let Some(rec) = rec {
        cp.put(&scope, rec).await?;
    }
    for (c, t, p, w) in writes {
        cp.put_writes(&scope, &c, &t, &p, w).await?;
    }
    Ok(())
}

/// Runs a store operation of `thread` as its own task on `rt`, counted as landing on the thread
/// until it has finished: a run dropped meanwhile still completes it, and the next call that
/// reads the thread waits for it (see [`crate::landing`]). The count is taken here, before the
/// caller can be dropped.
fn spawn_landing<F>(
    rt: &tokio::runtime::Handle,
    thread: &str,
    op: F,
) -> tokio::task::JoinHandle<Result<()>>
where
    F: std::future::Future<Output = Result<()>> + Send + 'static,
{
    let guard = crate::landing::hold(thread);
    rt.spawn(async move {
        let _guard = guard;
        op.await
    })
}

/// [`spawn_landing`], awaited (inline, still counted, outside a tokio runtime).
async fn store_landing<F>(rt: Option<&tokio::runtime::Handle>, thread: &str, op: F) -> Result<()>
where
    F: std::future::Future<Output = Result<()>> + Send + 'static,
{
    match rt {
        Some(rt) => joined(spawn_landing(rt, thread, op).await),
        None => {
            let _guard = crate::landing::hold(thread);
            op.await
        }
    }
}

impl Persist<'_> {
    async fn put(&mut self, mut rec: CheckpointRecord) -> Result<()> {
        let Some(cp) = self.cp_arc.clone() else {
            return Ok(());
        };
        if self.durability == Durability::Exit {
            rec.parent = self.stored_head.clone();
            self.exit_writes.clear();
            self.exit_ckpt = Some(rec);
            return Ok(());
        }
        // Checkpoints reach the store in order: the previous put finishes first.
        self.drain().await?;
        let scope = self.scope.clone();
        let op = async move { cp.put(&scope, rec).await };
        let thread = self.scope.thread.as_str();
        if self.durability == Durability::Async
            && let Some(rt) = &self.rt
        {
            // Stored while the next step's tasks run; drained before any write attaches to it.
            self.inflight = Some(spawn_landing(rt, thread, op));
            return Ok(());
        }
        store_landing(self.rt.as_ref(), thread, op).await
    }

    /// Waits for the checkpoint put still in flight (async durability).
    async fn drain(&mut self) -> Result<()> {
        match self.inflight.take() {
            Some(h) => joined(h.await),
            None => Ok(()),
        }
    }

    async fn put_writes(
        &mut self,
        ckpt: &CheckpointId,
        task: &TaskId,
        path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        let Some(cp) = self.cp_arc.clone() else {
            return Ok(());
        };
        // The checkpoint these writes attach to must be stored first.
        self.drain().await?;
        if self.durability == Durability::Exit {
            self.exit_writes
                .push((ckpt.clone(), task.clone(), path.to_owned(), writes));
            return Ok(());
        }
        let scope = self.scope.clone();
        let (ckpt, task, path) = (ckpt.clone(), task.clone(), path.to_owned());
        let op = async move { cp.put_writes(&scope, &ckpt, &task, &path, writes).await };
        store_landing(self.rt.as_ref(), self.scope.thread.as_str(), op).await
    }

    async fn flush(&mut self) -> Result<()> {
        // An invoke that returned has stored everything, in every durability mode.
        self.drain().await?;
        let Some(cp) = self.cp_arc.clone() else {
            return Ok(());
        };
        let (rec, writes) = (self.exit_ckpt.take(), std::mem::take(&mut self.exit_writes));
        if rec.is_none() && writes.is_empty() {
            return Ok(());
        }
        // Its own task, so that a run dropped while it flushes still stores all of it (a
        // consumer that stops at the interrupt event must not leave the checkpoint without its
        // interrupt write).
        let op = flush_buffered(cp, self.scope.clone(), rec, writes);
        store_landing(self.rt.as_ref(), self.scope.thread.as_str(), op).await
    }
}

impl Drop for Persist<'_> {
    /// A run dropped (its stream dropped) with exit-durability writes still buffered stores
    /// them, as a run that ends does: the last finished step and the finished tasks' writes.
    fn drop(&mut self) {
        if self.exit_ckpt.is_none() && self.exit_writes.is_empty() {
            return;
        }
        let (Some(arc), Some(rt)) = (&self.cp_arc, &self.rt) else {
            return;
        };
        let (rec, writes) = (self.exit_ckpt.take(), std::mem::take(&mut self.exit_writes));
        // Nobody waits for the task itself (an error has no one to reach), but the next call
        // that reads the thread waits for it to land.
        drop(spawn_landing(
            rt,
            self.scope.thread.as_str(),
            flush_buffered(arc.clone(), self.scope.clone(), rec, writes),
        ));
    }
}

struct Emitter<'a> {
    tx: Option<&'a UnboundedSender<Result<StreamItem>>>,
    modes: StreamModes,
    /// The run's config: a subgraph's events are tagged with its namespace.
    cfg: &'a RunConfig,
}

impl Emitter<'_> {
    fn send(&self, ev: StreamEvent) {
        if let Some(tx) = self.tx {
            // A closed receiver means the stream was dropped; the run stops at its next await.
            let _ = tx.unbounded_send(Ok(crate::types::stream_item(self.cfg, ev)));
        }
    }
}

fn decode_writes(
    g: &Graph,
    pending: &[PendingWrite],
    task: &TaskId,
) -> Result<Option<Vec<(usize, Write)>>> {
    let mut done = false;
    let mut out = Vec::new();
    for w in pending
        .iter()
        .filter(|w| &w.task_id == task && !is_control(&w.channel))
    {
        done = true;
        if w.channel == NO_WRITES {
            continue;
        }
        out.push(stored_write(g, w)?);
    }
    Ok(done.then_some(out))
}

/// A stored write decoded for its channel; a channel the graph does not declare (a deploy
/// removed it) fails closed: skipping the write would drop stored data silently.
fn stored_write(g: &Graph, w: &PendingWrite) -> Result<(usize, Write)> {
    let c = *g
        .chan_idx
        .get(w.channel.as_str())
        .ok_or_else(|| Error::UnknownChannel {
            channel: w.channel.clone(),
        })?;
    Ok((c, g.write_from_json(c, w.value.clone())?))
}

/// The checkpoint's input writes (stored under the NULL task id), decoded for the channels they
/// name; control writes (a resume value) are left to the caller. A write to a channel the graph
/// does not declare fails closed, as a task's does: skipping it would drop stored input silently.
fn null_writes(g: &Graph, pending: &[PendingWrite]) -> Result<Vec<(usize, Write)>> {
    pending
        .iter()
        .filter(|w| w.task_id.as_str() == NULL_TASK_ID && !is_control(&w.channel))
        .map(|w| stored_write(g, w))
        .collect()
}

fn saved_answers(pending: &[PendingWrite], task: &TaskId) -> Vec<Json> {
    pending
        .iter()
        .find(|w| &w.task_id == task && w.channel == RESUME)
        .map(|w| match &w.value {
            Json::Array(a) => a.clone(),
            other => vec![other.clone()],
        })
        .unwrap_or_default()
}

fn saved_interrupts(pending: &[PendingWrite], task: &TaskId) -> Vec<Interrupt> {
    pending
        .iter()
        .filter(|w| &w.task_id == task && w.channel == INTERRUPT)
        .flat_map(|w| serde_json::from_value::<Vec<Interrupt>>(w.value.clone()).unwrap_or_default())
        .collect()
}

/// The namespace a task runs in (`<node>:<task id>` under the graph's own, nested with `|`):
/// its interrupt ids and a subgraph's checkpoints derive from it.
fn task_ns(graph_ns: &str, node: &str, task: &TaskId) -> String {
    if graph_ns.is_empty() {
        format!("{node}:{task}")
    } else {
        format!("{graph_ns}|{node}:{task}")
    }
}

/// Every interrupt still pending on the checkpoint, with its task, in task-id order
/// (runtime-spec §2.2 counts these): each task waits on at most one interrupt of its own, a
/// subgraph's task on every interrupt its subgraph stopped on.
fn waiting_interrupts(pending: &[PendingWrite], graph_ns: &str) -> Vec<(TaskId, Interrupt)> {
    pending
        .iter()
        .filter(|w| w.channel == INTERRUPT)
        .map(|w| &w.task_id)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .flat_map(|t| {
            pending_interrupts(pending, t, graph_ns)
                .into_iter()
                .map(move |i| (t.clone(), i))
        })
        .collect()
}

/// `task` with its path, when `interrupt` is the task's own for the slot after its stored
/// answers (not one its subgraph stopped on, which carries the subgraph task's id).
fn own_interrupt(
    pending: &[PendingWrite],
    graph_ns: &str,
    task: &TaskId,
    interrupt: &Interrupt,
) -> Option<(TaskId, String)> {
    let slot = saved_answers(pending, task).len();
    if interrupt.id != interrupt_id(&task_ns(graph_ns, interrupt.node.as_str(), task), slot) {
        return None;
    }
    let path = pending
        .iter()
        .find(|w| &w.task_id == task && w.channel == INTERRUPT)?
        .task_path
        .clone();
    Some((task.clone(), path))
}

/// The interrupts `task` still waits on (runtime-spec §2.2 counts only pending ones): none
/// once the task has a result; otherwise its saved interrupt, unless the task has since been
/// given the answer for that interrupt's slot. The interrupt write is an upsert and outlives
/// the answer a resume map gave, so a task answered by map that has not finished, or one
/// that failed after its answer, would otherwise still count. (An interrupt raised inside a
/// subgraph carries the subgraph task's id; its parent task stores no answers of its own.)
fn pending_interrupts(pending: &[PendingWrite], task: &TaskId, graph_ns: &str) -> Vec<Interrupt> {
    if pending
        .iter()
        .any(|w| &w.task_id == task && !is_control(&w.channel))
    {
        return Vec::new();
    }
    let answered = saved_answers(pending, task).len();
    saved_interrupts(pending, task)
        .into_iter()
        .filter(|i| {
            answered == 0
                || i.id == interrupt_id(&task_ns(graph_ns, i.node.as_str(), task), answered)
        })
        .collect()
}

/// The writes to persist: writes to untracked channels are left out (runtime-spec §3).
fn ser_writes(g: &Graph, writes: &[(usize, Write)]) -> Result<Vec<(String, Json)>> {
    writes
        .iter()
        .filter(|(c, _)| !g.is_untracked(*c))
        .map(|(c, w)| Ok((g.chans[*c].name.to_string(), g.write_to_json(*c, w)?)))
        .collect()
}

/// Writes as they are applied within the run, untracked ones included.
fn ser_writes_in_run(g: &Graph, writes: &[(usize, Write)]) -> Result<Vec<(String, Json)>> {
    writes
        .iter()
        .map(|(c, w)| Ok((g.chans[*c].name.to_string(), g.write_to_json_in_run(*c, w)?)))
        .collect()
}

fn task_event(g: &Graph, t: &Task, writes: &[(usize, Write)], step: i64) -> Result<TaskEvent> {
    let mut user = Vec::new();
    let mut sends = Vec::new();
    for (c, w) in writes {
        match g.chans[*c].kind {
            // An untracked channel's writes are the run's private values (see `output_view`).
            ChanKind::User if g.is_untracked(*c) => {}
            ChanKind::User => {
                user.push((g.chans[*c].name.to_string(), g.write_to_shown_json(*c, w)?))
            }
            ChanKind::Tasks => {
                if let Write::Value(v) = w
                    && let Some(p) = v.downcast_ref::<Packet>()
                {
                    let mut m = serde_json::Map::new();
                    for (k, v) in &p.arg {
                        // A packet's untracked values are the run's own, as stored packets
                        // leave them out.
                        if let Some(spec) = g.schema.get(k).filter(|s| !s.is_untracked()) {
                            m.insert(k.to_string(), spec.value_to_json(v)?);
                        }
                    }
                    sends.push((g.nodes[p.node].id.clone(), Json::Object(m)));
                }
            }
            _ => {}
        }
    }
    Ok(TaskEvent {
        step,
        node: g.nodes[t.node].id.clone(),
        kind: t.kind,
        writes: user,
        sends,
    })
}

fn should_interrupt(g: &Graph, live: &Live, list: &[NodeId], tasks: &[&Task]) -> bool {
    if list.is_empty() {
        return false;
    }
    let seen = live.seen.get(INTERRUPT_SEEN);
    let any_new = live
        .versions
        .iter()
        .enumerate()
        .any(|(c, v)| *v > seen.and_then(|s| s.get(&c)).copied().unwrap_or(0));
    any_new
        && tasks.iter().any(|t| {
            // `*` names every node but the hidden ones (runtime-spec §2.3.5): the input task of
            // `__start__` is never a breakpoint.
            list.iter().any(|n| {
                (n.as_str() == "*" && g.nodes[t.node].id.as_str() != START)
                    || *n == g.nodes[t.node].id
            })
        })
}

/// Forces a snapshot of every delta channel that has writes of real tasks pending on the loaded
/// checkpoint which this run will not apply (abandoned step, fork, update_state): a later history
/// walk through that checkpoint must not replay them (runtime-spec §5.4, [1.2.22]).
fn force_unreplayed(g: &Graph, live: &mut Live, pending: &[PendingWrite]) {
    force_snapshots(
        g,
        live,
        pending
            .iter()
            .filter(|w| w.task_id.as_str() != NULL_TASK_ID)
            .map(|w| w.channel.as_str()),
    );
}

/// Forces a snapshot of every delta channel when `tasks`, the loaded checkpoint's next step,
/// is not empty: a child made from that checkpoint without finishing its step (new input that
/// abandons it, a fork, an update) must not walk into the writes a resume addressed to the
/// loaded checkpoint stores there later, which its branch never applies (runtime-spec §5.4).
fn force_if_unfinished(live: &mut Live, tasks: &[Task]) {
    if tasks.is_empty() {
        return;
    }
    for ch in &mut live.chans {
        if let Some(d) = ch.delta() {
            d.forced = true;
        }
    }
}

/// The loaded checkpoint's next tasks, for [`force_if_unfinished`].
fn next_tasks(g: &Graph, live: &Live, ckpt: Option<&CheckpointId>, step: i64) -> Result<Vec<Task>> {
    let state = live.state_view(g);
    let ck = ckpt.map_or("", CheckpointId::as_str);
    prepare_tasks(g, live, ck, step, &state)
}

/// Forces a snapshot of every delta channel the input stored on the loaded checkpoint (its
/// NULL-task writes) writes, for a run or update that does not apply that input: a later
/// history walk through the checkpoint must not replay it.
fn force_stored_input(g: &Graph, live: &mut Live, pending: &[PendingWrite]) {
    force_snapshots(
        g,
        live,
        pending
            .iter()
            .filter(|w| w.task_id.as_str() == NULL_TASK_ID)
            .map(|w| w.channel.as_str()),
    );
}

/// Forces a snapshot of every delta channel among `channels` (written channel names).
fn force_snapshots<'a>(g: &Graph, live: &mut Live, channels: impl IntoIterator<Item = &'a str>) {
    for channel in channels {
        if let Some(&c) = g.chan_idx.get(channel)
            && let Some(d) = live.chans[c].delta()
        {
            d.forced = true;
        }
    }
}

fn mark_interrupt_seen(live: &mut Live) {
    let all: BTreeMap<usize, u64> = live
        .versions
        .iter()
        .enumerate()
        .filter(|(_, v)| **v > 0)
        .map(|(c, v)| (c, *v))
        .collect();
    live.seen.insert(INTERRUPT_SEEN.to_owned(), all);
}

enum TaskResult {
    Done {
        writes: Vec<(usize, Write)>,
    },
    /// Stopped on interrupts (a node's one, or a subgraph's), or (none) paused by a subgraph's
    /// static breakpoint.
    Interrupted(Vec<Interrupt>),
    Failed(Error),
}

/// Runs one call on a thread.
pub(crate) async fn run(
    g: &Graph,
    cp_arc: Option<&Arc<dyn Checkpointer>>,
    cache: &crate::compiled::HotCache,
    input: Input,
    cfg: &RunConfig,
    tx: Option<&UnboundedSender<Result<StreamItem>>>,
    modes: StreamModes,
) -> Result<RunOutcome> {
    // A caller's run starts in the root namespace: another one holds a subgraph's
    // checkpoints, which only its parent's task runs (with the parent's step it belongs to,
    // `parents`). Running this graph there would store this graph's checkpoints among the
    // subgraph's; the reference instead runs the root's head, ignoring the namespace and an
    // addressed checkpoint alike, which would run something the caller did not address.
    if !cfg.checkpoint_ns.is_empty() && cfg.parents.is_empty() {
        return Err(Error::NamespacedRun {
            namespace: cfg.checkpoint_ns.clone(),
        });
    }
    // One run of the root graph per thread at a time (see `running.rs`); a subgraph's run is
    // part of its enclosing one. Held until the run ends or its future is dropped.
    let _running = match cp_arc {
        Some(store) if cfg.checkpoint_ns.is_empty() => {
            Some(crate::running::enter(store, cfg.thread_id.as_str())?)
        }
        _ => None,
    };
    let cp: Option<&dyn Checkpointer> = cp_arc.map(|a| a.as_ref());
    let info = Arc::new(crate::types::RunInfo {
        cp: cp_arc.cloned(),
        cfg: cfg.clone(),
        custom: tx.filter(|_| modes.custom).cloned(),
        subgraph_stream: tx
            .filter(|_| modes.subgraphs)
            .cloned()
            .map(|tx| (tx, modes)),
    });
    let scope = cfg.scope();
    let mut persist = Persist {
        cp_arc: cp_arc.cloned(),
        scope: &scope,
        durability: cfg.durability,
        stored_head: None,
        exit_ckpt: None,
        exit_writes: Vec::new(),
        inflight: None,
        rt: tokio::runtime::Handle::try_current().ok(),
        run_id: cfg.run_id.clone(),
        metadata: cfg.metadata.clone(),
        parents: cfg.parents.clone(),
    };
    let em = Emitter { tx, modes, cfg };
    let r = run_inner(g, cp, &info, cache, input, cfg, &mut persist, &em).await;
    // Exit durability: persist on every exit path (normal, error, interrupt).
    let flushed = persist.flush().await;
    let (outcome, head) = match (r, flushed) {
        (Ok(done), Ok(())) => done,
        (Ok(_), Err(e)) | (Err(e), Ok(())) => return Err(e),
        // Neither error may hide the other: the run's is the cause, the store's says the
        // thread may lack what the run left.
        (Err(error), Err(storage)) => return Err(Error::unstored(error, storage)),
    };
    if let (Some(_), Some((id, mut live))) = (cp, head) {
        // Invariant: the cached channels equal what restoring `id` from the store gives, which
        // has no untracked value (never stored).
        live.stored.clone_from(&live.versions);
        if live.forget_untracked(g).is_ok() {
            cache.put(&scope, id, live);
        }
    }
    Ok(outcome)
}

#[expect(
    clippy::too_many_arguments,
    reason = "the loop's context, threaded through one call"
)]
async fn run_inner(
    g: &Graph,
    cp: Option<&dyn Checkpointer>,
    info: &Arc<crate::types::RunInfo>,
    cache: &crate::compiled::HotCache,
    input: Input,
    cfg: &RunConfig,
    persist: &mut Persist<'_>,
    em: &Emitter<'_>,
) -> Result<(RunOutcome, Option<(CheckpointId, Live)>)> {
    let thread = &cfg.thread_id;
    let scope = &cfg.scope();
    // Refused before anything is read or stored, as the reference refuses it: with no step
    // allowed, the input checkpoint and the first step's would be stored before the limit
    // error.
    if cfg.recursion_limit < 1 {
        return Err(Error::InvalidRecursionLimit);
    }
    // A command that asks for nothing is refused before anything is read or stored, as the
    // reference refuses it (a resume map counts, even an empty one; one addressed to the
    // parent fails as such below).
    if let Input::Command(c) = &input
        && !c.to_parent
        && c.update.is_empty()
        && c.goto.is_empty()
        && c.resume.is_none()
    {
        return Err(Error::EmptyCommand);
    }
    if let Some(key) = cfg.reserved_metadata_key() {
        return Err(Error::ReservedMetadataKey {
            key: key.to_owned(),
        });
    }
    if let Some(cp) = cp {
        check_store_mode(g, cp)?;
    }
    // A run of the root graph reads the thread's head only once what a dropped run of the
    // thread still stores has landed (a subgraph's run is part of its enclosing run, whose own
    // puts it must not wait for).
    if cp.is_some() {
        settle_root(cfg).await;
    }
    // The head without values first: on a hot-cache hit they are not needed.
    let saved = match cp {
        Some(cp) => cp.head(scope, cfg.checkpoint_id.as_ref()).await?,
        None => None,
    };
    // Runtime-spec §2.2: a run on a checkpoint that its own run id created resumes it, whatever
    // the input: a retried run (after a crash or an error) does not apply its input twice.
    // Subgraph runs take resuming from their parent instead.
    let input = match (&input, &saved, &cfg.run_id) {
        (Input::Values(_), Some(t), Some(run))
            if cfg.checkpoint_ns.is_empty()
                && !t.checkpoint.versions.is_empty()
                && t.checkpoint.run_id.as_ref() == Some(run) =>
        {
            Input::Continue
        }
        _ => input,
    };
    if let (Some(id), None) = (&cfg.checkpoint_id, &saved) {
        return Err(Error::CheckpointNotFound {
            thread: thread.to_string(),
            checkpoint: id.to_string(),
        });
    }
    let explicit = cfg.checkpoint_id.is_some();
    // A run on an addressed checkpoint also reads the namespace's newest one: a store's mode
    // gate (kernel-spec R35 c) checks the thread's head as well as the selected checkpoint, so
    // a full-mode process does not branch off an old full checkpoint of a thread that has
    // moved on to delta mode.
    let newest = match (explicit, cp) {
        (true, Some(cp)) => Some(cp.head(scope, None).await?.map(|t| t.checkpoint.id)),
        _ => None,
    };
    let mut dirty = false;
    let mut cached = false;
    let (mut live, mut ckpt_id, meta_step, meta_source, mut pending) = match &saved {
        Some(t) => (
            match (!explicit)
                .then(|| cache.get(scope, &t.checkpoint.id))
                .flatten()
            {
                Some(live) => {
                    cached = true;
                    live
                }
                None => {
                    let cp = cp.ok_or(Error::NoCheckpointer)?;
                    let full = cp
                        .get_tuple(scope, Some(&t.checkpoint.id))
                        .await?
                        .ok_or_else(|| Error::CheckpointNotFound {
                            thread: thread.to_string(),
                            checkpoint: t.checkpoint.id.to_string(),
                        })?;
                    Live::load(g, cp, scope, &full.checkpoint).await?
                }
            },
            Some(t.checkpoint.id.clone()),
            t.checkpoint.step,
            Some(t.checkpoint.source),
            t.pending_writes.clone(),
        ),
        None => (Live::new(g)?, None, -2, None, Vec::new()),
    };
    if let Some(cp) = cp {
        if explicit {
            // Time travel starts a new branch: its versions must exceed every version of the
            // thread.
            live.floor = thread_max_version(cp, scope).await?;
        } else if !cached && (saved.is_some() || cfg.checkpoint_ns.is_empty()) {
            // A subgraph's first run in its namespace needs no read: the namespace names its
            // task, new to the store, so nothing of it was deleted.
            raise_floor_past_deleted_runs(&mut live, cp, scope).await?;
        }
    }
    persist.stored_head.clone_from(&ckpt_id);
    let limit = i64::try_from(cfg.recursion_limit).unwrap_or(i64::MAX / 4);
    let mut step = meta_step + 1;
    // Saturating: a limit near `i64::MAX` means "no practical limit", not an overflow.
    let stop = step.saturating_add(limit).saturating_add(1);
    // Whether the loaded checkpoint is the newest of its namespace. Only then has it no
    // children, whose history walks would replay input a run stores on it.
    let loaded_is_newest = if explicit && matches!(input, Input::Continue | Input::Command(_)) {
        newest.flatten().is_some_and(|id| Some(id) == ckpt_id)
    } else {
        !explicit
    };
    // A resume addressed to an older checkpoint whose tasks all have results (its step finished,
    // on the branch that continued from it) answers nothing: it is time travel, and forks like
    // it, so that a goto's new tasks do not store writes on a checkpoint whose children's
    // history walks would replay them (runtime-spec §5.4).
    // The loaded checkpoint's next tasks, for a run addressed to a checkpoint (before any
    // command of the run changes the channels).
    let loaded_tasks = if explicit && matches!(input, Input::Continue | Input::Command(_)) {
        next_tasks(g, &live, ckpt_id.as_ref(), step)?
    } else {
        Vec::new()
    };
    let nothing_to_resume = explicit
        && !loaded_is_newest
        && matches!(&input, Input::Command(c) if c.resume.is_some())
        && loaded_tasks.iter().all(|t| {
            pending
                .iter()
                .any(|w| w.task_id == t.id && !is_control(&w.channel))
        });
    // Time travel that is not a resume saves a fork checkpoint first (runtime-spec §2.2): a
    // replay, and a command without a resume value (its update or goto starts the new branch).
    let replay = explicit
        && match &input {
            Input::Continue => true,
            Input::Command(c) => c.resume.is_none() || nothing_to_resume,
            Input::Values(_) => false,
        };
    // Whether that fork checkpoint will be saved: not when the addressed checkpoint is the
    // thread's newest and itself a fork or an update (it has no children to keep apart from),
    // unless it stores answers or interrupts of its tasks. A replay in place re-runs the tasks
    // under the same ids, and those stored writes (kept first, or upserted only when the
    // re-run stores its own) would answer the re-run's questions with the earlier run's
    // answers; on a fork of its own the tasks get new ids.
    let stale_answers = pending
        .iter()
        .any(|w| w.channel == RESUME || w.channel == INTERRUPT);
    // A subgraph task re-run in place would find its namespace (named by its task id) holding
    // its earlier run, and return or continue that instead of running the subgraph again: such
    // a replay forks when a subgraph task's namespace holds a checkpoint (one read per subgraph
    // task, only for a replay that would otherwise run in place).
    let mut reruns_subgraph = false;
    if let Some(cp) = cp
        && replay
        && loaded_is_newest
        && matches!(meta_source, Some(Source::Update | Source::Fork))
        && !stale_answers
    {
        for t in &loaded_tasks {
            let node = &g.nodes[t.node].id;
            if g.subgraphs.contains_key(node) {
                let sub = Scope {
                    thread: scope.thread.clone(),
                    ns: task_ns(&cfg.checkpoint_ns, node.as_str(), &t.id),
                };
                if cp.head(&sub, None).await?.is_some() {
                    reruns_subgraph = true;
                    break;
                }
            }
        }
    }
    let fork_saved = replay
        && (!loaded_is_newest
            || !matches!(meta_source, Some(Source::Update | Source::Fork))
            || stale_answers
            || reruns_subgraph);
    if replay || matches!(input, Input::Values(_)) {
        // Pending writes of the loaded checkpoint that this run will not apply.
        force_unreplayed(g, &mut live, &pending);
    }
    // A replay without a fork re-runs the loaded checkpoint's tasks under the same task ids, so
    // their new writes go to positions the earlier run's writes hold there, and the store keeps
    // the first write at each position: the delta channels the re-run writes snapshot at the
    // step's checkpoint, or a walk through the loaded checkpoint would replay the old writes.
    let mut rerun_in_place = replay
        && !fork_saved
        && pending
            .iter()
            .any(|w| w.task_id.as_str() != NULL_TASK_ID && !is_control(&w.channel));
    if explicit {
        // The input (NULL-task writes) stored on the addressed checkpoint is its own and is
        // applied, as on the head (runtime-spec §2.2; before, a run addressed to an older
        // checkpoint, and a replay that saves a fork, dropped it, so the branch did not start
        // from the state `get_state` shows for that checkpoint). A history walk through the
        // checkpoint replays that input too, so a channel only it writes needs no snapshot.
        if replay {
            // Time travel: writes saved by the original run's tasks are not reused, and a
            // resume value stored on the checkpoint is stale.
            pending.retain(|w| w.task_id.as_str() == NULL_TASK_ID && w.channel != RESUME);
        } else if !loaded_is_newest {
            // A resume addressed to an older checkpoint brings its own resume value; the one
            // stored there answered the original branch.
            pending.retain(|w| !(w.task_id.as_str() == NULL_TASK_ID && w.channel == RESUME));
        }
    }
    let resuming = live.has_versions() && matches!(input, Input::Continue | Input::Command(_));
    // A run without value input resumes a checkpoint, and one that holds no channel version
    // has nothing to resume: refused here, before a command's writes are stored on it (the
    // reference stores them first, and every refused attempt then added its update to the
    // checkpoint's input).
    if !resuming && !matches!(input, Input::Values(_)) {
        return Err(Error::EmptyInput {
            thread: thread.to_string(),
        });
    }
    let mut shared = SharedResume {
        parent: cfg.parent_resume.clone(),
        ..SharedResume::default()
    };
    // The command's writes to store on the loaded checkpoint, stored only once they applied:
    // stored first, a write the channels refuse (two values for a last-value channel, a
    // removal of an unknown message) would fail every later read and run of the thread.
    let mut input_to_store: Option<(CheckpointId, Vec<(String, Json)>)> = None;
    // A single resume value that answers a task's own interrupt: the task, its path and its
    // answers with the value, stored on the loaded checkpoint after the command's input.
    let mut answer_to_store: Option<(TaskId, String, Json)> = None;

    if let Input::Command(cmd) = &input {
        let mut null_writes = Vec::new();
        let resolved = resolve_input_command(g, cmd)?;
        // The Send queue holds one step's packets and a write replaces them; a packet's task
        // id is its position, so a new packet would take an old one's id and stored results.
        let queued = live.chans[g.tasks_chan].packets().len();
        if queued > 0 && resolved.iter().any(|(c, _)| *c == g.tasks_chan) {
            return Err(Error::SendOverQueuedPackets { queued });
        }
        // Applied in this run as given (untracked values included); stored without what is
        // never persisted.
        let mut stored = ser_writes(g, &resolved)?;
        null_writes.extend(ser_writes_in_run(g, &resolved)?);
        match &cmd.resume {
            Some(Resume::Value(v)) => {
                let waiting = waiting_interrupts(&pending, &cfg.checkpoint_ns);
                if waiting.len() > 1 {
                    return Err(Error::AmbiguousResume {
                        count: waiting.len(),
                    });
                }
                // The one interrupt waiting is a task's own (not its subgraph's), on a
                // checkpoint whose tasks keep their ids and that stores the answer: the value
                // becomes that task's answer for the interrupt's slot, stored as the task's
                // `__resume__` write before anything runs. Stored as the NULL task's value, it
                // would stay on the checkpoint after the task took it, and a run after an
                // unfinished step (a failure after the answer, a later interrupt) would give it
                // to the next question without an answer; the task's own list keeps it where
                // it was used (the reference stores the NULL-task value and has that flaw).
                // Only for a command that is nothing but the value (its answer is then the
                // one write it stores, where an update beside it would be a second write
                // that a failure between the two could leave alone), and only when no NULL-task
                // value is stored there already: that one is replaced by an upsert of the NULL
                // task's value, and left in place it would answer the next question.
                let null_stored = pending
                    .iter()
                    .any(|w| w.task_id.as_str() == NULL_TASK_ID && w.channel == RESUME);
                let own = waiting
                    .first()
                    .filter(|_| {
                        stored.is_empty()
                            && !null_stored
                            && !fork_saved
                            && loaded_is_newest
                            && ckpt_id.is_some()
                    })
                    .and_then(|(task, only)| {
                        own_interrupt(&pending, &cfg.checkpoint_ns, task, only)
                    });
                match own {
                    Some((task, path)) => {
                        let mut answers = saved_answers(&pending, &task);
                        answers.push(v.clone());
                        let value = Json::Array(answers);
                        pending.retain(|w| !(w.task_id == task && w.channel == RESUME));
                        pending.push(PendingWrite {
                            task_id: task.clone(),
                            task_path: path.clone(),
                            channel: RESUME.to_owned(),
                            value: value.clone(),
                        });
                        answer_to_store = Some((task, path, value));
                    }
                    None => {
                        null_writes.push((RESUME.to_owned(), v.clone()));
                        stored.push((RESUME.to_owned(), v.clone()));
                    }
                }
            }
            Some(Resume::Map(m)) => shared.map.clone_from(m),
            None => {}
        }
        // On an addressed older checkpoint the command's writes never join the input stored
        // there: they are applied in this run (a fork stores them applied) and nothing is
        // attached to the addressed checkpoint, whose existing children's history walks pass
        // through it. So the delta channels they touch snapshot at the run's first checkpoint,
        // and no walk needs them from that checkpoint. A resume addressed to the newest
        // checkpoint is a run on the head.
        if fork_saved || (explicit && !replay && !loaded_is_newest) {
            force_snapshots(g, &mut live, null_writes.iter().map(|(c, _)| c.as_str()));
        }
        // They are stored on the loaded checkpoint, for a later run on the head to find, only
        // when it is the newest: on an older one the history walks of its children would
        // replay them into branches that never saw them.
        if !fork_saved
            && loaded_is_newest
            && let Some(id) = &ckpt_id
            && !stored.is_empty()
        {
            // The checkpoint's input accumulates: regular writes are stored insert-if-absent by
            // position, so the new ones go after those already pending (stored in that order,
            // each batch with its regular writes first and the resume value, an upsert, last).
            let mut all: Vec<(String, Json)> = pending
                .iter()
                .filter(|w| w.task_id.as_str() == NULL_TASK_ID && !is_control(&w.channel))
                .map(|w| (w.channel.clone(), w.value.clone()))
                .collect();
            all.extend(stored);
            input_to_store = Some((id.clone(), all));
        }
        for (channel, value) in null_writes {
            // Upsert semantics for the NULL task's resume value.
            if channel == RESUME {
                pending.retain(|w| !(w.task_id.as_str() == NULL_TASK_ID && w.channel == RESUME));
            }
            pending.push(PendingWrite {
                task_id: TaskId::new(NULL_TASK_ID),
                task_path: String::new(),
                channel,
                value,
            });
        }
    }
    // NULL-task writes: this checkpoint's own not-yet-applied input.
    if let Some(w) = pending
        .iter()
        .find(|w| w.task_id.as_str() == NULL_TASK_ID && w.channel == RESUME)
    {
        shared.null_value = Mutex::new(Some(w.value.clone()));
    }
    let null_ch = null_writes(g, &pending)?;
    if !null_ch.is_empty() {
        let upd = apply_writes(
            g,
            &mut live,
            &[Applied {
                name: "__input__",
                triggers: &[],
                bump: false,
                writes: &null_ch,
            }],
        )?;
        // Without a stored set every node is a candidate already; a set gains the input's
        // channels (turning "every node" into the input's channels would lose the others).
        if let Some(u) = &mut live.updated {
            u.extend(upd);
        }
        dirty = true;
    }
    if let Some((id, writes)) = input_to_store {
        persist
            .put_writes(&id, &TaskId::new(NULL_TASK_ID), "", writes)
            .await?;
    }
    if let (Some((task, path, value)), Some(id)) = (answer_to_store, &ckpt_id) {
        persist
            .put_writes(id, &task, &path, vec![(RESUME.to_owned(), value)])
            .await?;
    }
    let shared = Arc::new(shared);

    if resuming {
        mark_interrupt_seen(&mut live);
        dirty = true;
        if fork_saved {
            force_if_unfinished(&mut live, &loaded_tasks);
            let id = save_checkpoint(
                g,
                &mut live,
                persist,
                em,
                ckpt_id.clone(),
                step,
                Source::Fork,
            )
            .await?;
            dirty = false;
            ckpt_id = Some(id);
            step += 1;
        }
        // A resumed run starts by streaming the state it resumes from, as the reference's
        // first tick does.
        if em.modes.values {
            em.send(StreamEvent::Values(live.output_view(g)));
        }
    } else if let Input::Values(u) = &input {
        // Any value input maps to a write of `__start__`, an empty one too (the reference's
        // `map_input` yields `("__start__", {})` for `{}`; only `None` is "no input").
        let state = live.state_view(g);
        let ck = ckpt_id.as_ref().map_or("", CheckpointId::as_str).to_owned();
        let discard = prepare_tasks(g, &live, &ck, step, &state)?;
        force_if_unfinished(&mut live, &discard);
        let input_writes = vec![(g.start_chan, Write::Value(Arc::new(u.clone())))];
        let mut batch = vec![Applied {
            name: "__input__",
            triggers: &[],
            bump: false,
            writes: &input_writes,
        }];
        for t in &discard {
            batch.push(Applied {
                name: g.nodes[t.node].id.as_str(),
                triggers: &t.triggers,
                bump: true,
                writes: &[],
            });
        }
        live.updated = Some(apply_writes(g, &mut live, &batch)?);
        let id = save_checkpoint(
            g,
            &mut live,
            persist,
            em,
            ckpt_id.clone(),
            step,
            Source::Input,
        )
        .await?;
        dirty = false;
        ckpt_id = Some(id);
        step += 1;
        pending.clear();
        shared.clear_null_value();
    } else if !resuming {
        return Err(Error::EmptyInput {
            thread: thread.to_string(),
        });
    }

    loop {
        if step > stop {
            return Err(Error::RecursionLimit {
                limit: cfg.recursion_limit,
            });
        }
        let state = live.state_view(g);
        let ck = ckpt_id.clone().unwrap_or_else(|| CheckpointId::new(""));
        let mut tasks = prepare_tasks(g, &live, ck.as_str(), step, &state)?;
        if tasks.is_empty() {
            break;
        }
        let mut results: Vec<Option<TaskResult>> = Vec::with_capacity(tasks.len());
        for t in &tasks {
            results
                .push(decode_writes(g, &pending, &t.id)?.map(|writes| TaskResult::Done { writes }));
        }
        // Tasks whose writes an earlier run stored (their updates are streamed as cached).
        let cached: Vec<bool> = results.iter().map(Option::is_some).collect();
        let to_run: Vec<&Task> = tasks
            .iter()
            .zip(&results)
            .filter(|(_, r)| r.is_none())
            .map(|(t, _)| t)
            .collect();
        if should_interrupt(g, &live, &g.interrupt_before, &to_run) {
            return Ok(finish(g, live, ckpt_id, dirty, Vec::new(), true));
        }
        execute(
            g,
            &tasks,
            &mut results,
            &pending,
            &shared,
            &live,
            step,
            &ck,
            persist,
            info,
        )
        .await?;

        // Barrier. Inputs are no longer needed: dropping them leaves the channels the only owners of
        // their values, so owned reducers update in place.
        drop(state);
        let empty = State::new(g.schema.clone(), HashMap::new());
        for t in &mut tasks {
            t.input = empty.clone();
        }
        let mut first_error = None;
        let mut interrupts = Vec::new();
        let mut paused = false;
        let mut done: Vec<(usize, &Vec<(usize, Write)>)> = Vec::new();
        for (i, r) in results.iter_mut().enumerate() {
            match r {
                Some(TaskResult::Failed(_)) => {
                    if first_error.is_none()
                        && let Some(TaskResult::Failed(e)) = r.take()
                    {
                        first_error = Some(e);
                    }
                }
                Some(TaskResult::Interrupted(int)) => {
                    paused = true;
                    interrupts.extend(int.clone());
                }
                Some(TaskResult::Done { writes, .. }) => done.push((i, writes)),
                None => {}
            }
        }
        // The finished tasks' updates, in task-path order, also when a sibling failed or stopped
        // on an interrupt or the step's writes conflict (the reference emits a task's updates
        // as it finishes, before the barrier). Debug task events are for finished steps only,
        // below.
        // Rendered once for both modes. The `__start__` task (which applies the input) is
        // hidden from both unless asked for, as the reference tags its start node hidden.
        let shown: Vec<&(usize, _)> = if em.modes.updates || em.modes.debug {
            done.iter()
                .filter(|(i, _)| em.modes.hidden || g.nodes[tasks[*i].node].id.as_str() != START)
                .collect()
        } else {
            Vec::new()
        };
        let mut events: Vec<Result<TaskEvent>> = if em.modes.updates || em.modes.debug {
            shown
                .iter()
                .map(|(i, writes)| task_event(g, &tasks[*i], writes, step))
                .collect()
        } else {
            Vec::new()
        };
        if em.modes.updates {
            let stopping = first_error.is_some() || paused;
            for (k, (i, _)) in shown.iter().enumerate() {
                match &mut events[k] {
                    Ok(ev) => em.send(StreamEvent::Updates {
                        node: ev.node.clone(),
                        // The debug event below needs them too; otherwise they move.
                        writes: if em.modes.debug {
                            ev.writes.clone()
                        } else {
                            std::mem::take(&mut ev.writes)
                        },
                        cached: cached.get(*i).copied().unwrap_or(false),
                    }),
                    // A step that stops reports its error or interrupt, not a failure to
                    // render a sibling's update.
                    Err(_) if stopping => {}
                    Err(_) => {
                        events.swap_remove(k)?;
                    }
                }
            }
        }
        if let Some(e) = first_error {
            return Err(e);
        }
        let batch: Vec<Applied<'_>> = done
            .iter()
            .map(|(i, w)| Applied::task(g, &tasks[*i], w))
            .collect();
        if paused {
            // The run's output has the finished tasks' writes applied, as the reference's does
            // (their conflicts win too); the stored head, and so the hot cache, does not: they
            // stay pending on the checkpoint for the resume.
            let mut scratch = live.clone();
            let updated = apply_writes(g, &mut scratch, &batch)?;
            let values = scratch.output_view(g);
            let run_values = scratch.state_view(g);
            // A last `values` event when they changed the state, as the reference emits one.
            if em.modes.values && changes_state(g, &updated) {
                em.send(StreamEvent::Values(values.clone()));
            }
            // A subgraph's pause has no interrupt to report, as a static breakpoint here has none.
            // A subgraph's interrupts are reported by its enclosing run, once it has stored them
            // as its task's: a consumer that stops at an `Interrupted` event must not drop the
            // stream before that (its own events of the subgraph would otherwise stop first).
            if !interrupts.is_empty() && cfg.parents.is_empty() {
                em.send(StreamEvent::Interrupted(interrupts.clone()));
            }
            let (mut outcome, head) = finish(g, live, ckpt_id, dirty, interrupts, true);
            outcome.values = values;
            outcome.run_values = run_values;
            return Ok((outcome, head));
        }
        let updated = apply_writes(g, &mut live, &batch)?;
        live.updated = Some(updated);
        if std::mem::take(&mut rerun_in_place) {
            let written: BTreeSet<usize> = done
                .iter()
                .flat_map(|(_, w)| w.iter().map(|(c, _)| *c))
                .collect();
            for c in written {
                if let Some(d) = live.chans[c].delta() {
                    d.forced = true;
                }
            }
        }
        if em.modes.debug {
            for ev in events {
                em.send(StreamEvent::Task(ev?));
            }
        }
        // Only when the step changed the state, as the reference's `after_tick` emits values
        // only when the updated channels meet the output keys (and as the paused branch above);
        // before the step's checkpoint is saved and its event sent, in the reference's order.
        if em.modes.values && live.updated.as_ref().is_some_and(|u| changes_state(g, u)) {
            em.send(StreamEvent::Values(live.output_view(g)));
        }
        let id = save_checkpoint(
            g,
            &mut live,
            persist,
            em,
            ckpt_id.clone(),
            step,
            Source::Loop,
        )
        .await?;
        dirty = false;
        ckpt_id = Some(id);
        if persist.durability != Durability::Exit {
            persist.stored_head.clone_from(&ckpt_id);
        }
        step += 1;
        pending.clear();
        shared.clear_null_value();
        let ran: Vec<&Task> = tasks.iter().collect();
        if should_interrupt(g, &live, &g.interrupt_after, &ran) {
            return Ok(finish(g, live, ckpt_id, dirty, Vec::new(), true));
        }
    }
    Ok(finish(g, live, ckpt_id, dirty, Vec::new(), false))
}

/// The outcome, plus the head's live channels for the hot-state cache when they are exactly the
/// stored head (not `dirty` with NULL-task writes or resume bookkeeping applied since the last put).
fn finish(
    g: &Graph,
    live: Live,
    ckpt_id: Option<CheckpointId>,
    dirty: bool,
    interrupts: Vec<Interrupt>,
    paused: bool,
) -> (RunOutcome, Option<(CheckpointId, Live)>) {
    let outcome = RunOutcome {
        values: live.output_view(g),
        run_values: live.state_view(g),
        interrupts,
        checkpoint_id: ckpt_id.clone(),
        paused,
    };
    let head = if dirty {
        None
    } else {
        ckpt_id.map(|id| (id, live))
    };
    (outcome, head)
}

/// Creates and stores a run's next checkpoint under the run's durability: the record (with
/// the delta cadence), the put, the stored marks and the debug event. Returns its id.
async fn save_checkpoint(
    g: &Graph,
    live: &mut Live,
    persist: &mut Persist<'_>,
    em: &Emitter<'_>,
    parent: Option<CheckpointId>,
    step: i64,
    source: Source,
) -> Result<CheckpointId> {
    let id = new_checkpoint_id();
    let mut rec = live.checkpoint_record(
        g,
        id.clone(),
        parent.clone(),
        step,
        source,
        persist.durability == Durability::Exit,
        persist
            .cp_arc
            .as_ref()
            .is_some_and(|c| c.accepts_encoded_lists()),
    )?;
    rec.run_id.clone_from(&persist.run_id);
    rec.metadata.clone_from(&persist.metadata);
    rec.parents.clone_from(&persist.parents);
    // Exit durability stores only the run's last checkpoint, under the head the run found
    // (`Persist::put`): the event names the parent the store will record, not a buffered
    // checkpoint that is never stored.
    let recorded = if persist.durability == Durability::Exit && persist.cp_arc.is_some() {
        persist.stored_head.clone()
    } else {
        parent
    };
    persist.put(rec).await?;
    live.mark_stored(persist.durability);
    emit_checkpoint(em, &id, recorded.as_ref(), step, source);
    Ok(id)
}

fn emit_checkpoint(
    em: &Emitter<'_>,
    id: &CheckpointId,
    parent: Option<&CheckpointId>,
    step: i64,
    source: Source,
) {
    if em.modes.debug {
        em.send(StreamEvent::Checkpoint(CheckpointEvent {
            id: id.clone(),
            parent: parent.cloned(),
            step,
            source,
        }));
    }
}

fn resolve_input_command(g: &Graph, cmd: &Command) -> Result<Vec<(usize, Write)>> {
    if cmd.to_parent {
        return Err(Error::NoParentGraph);
    }
    let mut writes = update_writes(g, &cmd.update)?;
    for goto in &cmd.goto {
        goto_write(g, goto, &mut writes)?;
    }
    Ok(writes)
}

/// Resolves an update's writes to channel positions, for a node's result and a
/// graph input alike: unknown or non-state channels and mistyped values are errors,
/// and delta messages get their ids before the write is persisted (spec §10 rule 11).
fn update_writes(g: &Graph, update: &Update) -> Result<Vec<(usize, Write)>> {
    let mut writes = Vec::with_capacity(update.writes.len());
    for w in &update.writes {
        let unknown = || Error::UnknownChannel {
            channel: w.channel.to_string(),
        };
        let pos = g.schema.position(&w.channel).ok_or_else(unknown)?;
        let spec = g.schema.get(&w.channel).ok_or_else(unknown)?;
        if !spec.is_state() {
            return Err(unknown());
        }
        if !spec.accepts_write(w.type_id, &w.write) {
            return Err(Error::WriteType {
                channel: w.channel.to_string(),
            });
        }
        writes.push((
            pos,
            spec.prepare_write(&w.write)
                .unwrap_or_else(|| w.write.clone()),
        ));
    }
    Ok(writes)
}

/// Runs every task without saved writes concurrently; persists each one's writes as it finishes.
#[expect(
    clippy::too_many_arguments,
    reason = "one step's context, threaded through one call"
)]
async fn execute(
    g: &Graph,
    tasks: &[Task],
    results: &mut [Option<TaskResult>],
    pending: &[PendingWrite],
    shared: &Arc<SharedResume>,
    live: &Live,
    step: i64,
    ck: &CheckpointId,
    persist: &mut Persist<'_>,
    info: &Arc<crate::types::RunInfo>,
) -> Result<()> {
    let mut step_tasks = StepTasks {
        set: tokio::task::JoinSet::new(),
        // A run without a checkpointer stores nothing and settles nothing.
        thread: info
            .cp
            .is_some()
            .then(|| info.cfg.thread_id.as_str().to_owned()),
        rt: tokio::runtime::Handle::try_current().ok(),
    };
    let r = execute_in(
        g,
        tasks,
        results,
        pending,
        shared,
        live,
        step,
        ck,
        persist,
        info,
        &mut step_tasks.set,
    )
    .await;
    if r.is_err() {
        // The step stops here: the tasks still running are cancelled, and awaited, so that
        // none of them (a subgraph storing what it buffered, say) still writes after the run
        // returned its error and the thread counts as settled.
        step_tasks.set.shutdown().await;
    }
    r
}

/// The spawned tasks of one step, and what their end counts as when the run is dropped.
///
/// A run whose stream is dropped drops this with its step: the tasks are aborted, but one that
/// is running on another worker at that moment (a node that blocks its thread, a subgraph in
/// its barrier) goes on until its next await, and a subgraph task's cancellation runs its
/// exit-durability flush. So the drop counts the tasks' shutdown as landing on the thread
/// ([`crate::landing`]) and awaits it in a task of its own: the next run of the thread (which
/// settles first) starts only after every task of the dropped step has stopped and handed its
/// store operations over, instead of beside them, where a subgraph task re-created with the
/// same id would run its nodes a second time at once and its late put would clash or fork.
///
/// The wait runs on the dropped run's runtime: on a current-thread runtime that is not
/// driven after the drop, the aborted tasks are dropped only when it runs again (or is
/// dropped), and a run of the thread on another runtime waits until then.
struct StepTasks {
    set: tokio::task::JoinSet<(usize, std::result::Result<Command, NodeError>)>,
    /// The thread the run stores to (`None` without a checkpointer).
    thread: Option<String>,
    rt: Option<tokio::runtime::Handle>,
}

impl Drop for StepTasks {
    fn drop(&mut self) {
        let Some(thread) = &self.thread else {
            return;
        };
        if self.set.is_empty() {
            return;
        }
        let mut set = std::mem::replace(&mut self.set, tokio::task::JoinSet::new());
        // Taken here, synchronously, before any later call can settle the thread.
        let hold = crate::landing::hold(thread);
        match &self.rt {
            Some(rt) => {
                rt.spawn(async move {
                    set.shutdown().await;
                    drop(hold);
                });
            }
            // No runtime to wait on: the tasks are aborted as the set drops.
            None => drop((set, hold)),
        }
    }
}

/// The tasks of one step (see [`execute`]), spawned on `set`.
#[expect(
    clippy::too_many_arguments,
    reason = "one step's context, threaded through one call"
)]
async fn execute_in(
    g: &Graph,
    tasks: &[Task],
    results: &mut [Option<TaskResult>],
    pending: &[PendingWrite],
    shared: &Arc<SharedResume>,
    live: &Live,
    step: i64,
    ck: &CheckpointId,
    persist: &mut Persist<'_>,
    info: &Arc<crate::types::RunInfo>,
    set: &mut tokio::task::JoinSet<(usize, std::result::Result<Command, NodeError>)>,
) -> Result<()> {
    let mut ctxs: HashMap<usize, Arc<TaskCtx>> = HashMap::new();
    let mut ids = HashMap::new();
    for (i, t) in tasks.iter().enumerate() {
        if results[i].is_some() {
            continue;
        }
        let spec = &g.nodes[t.node];
        match &spec.imp {
            NodeImpl::Start => {
                let cmd = Command::from(t.start_input.clone().unwrap_or_default());
                // A router on `__start__` runs here: its panic is the task's, as a user node's
                // router's is (below), not one that unwinds through the run.
                results[i] = Some(
                    std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                        finish_ok(g, t, &cmd, live, !info.cfg.checkpoint_ns.is_empty())
                    }))
                    .unwrap_or_else(|p| {
                        TaskResult::Failed(Error::NodePanicked {
                            node: g.nodes[t.node].id.clone(),
                            message: panic_message(p.as_ref()),
                        })
                    }),
                );
                persist_result(g, t, results[i].as_ref(), None, pending, ck, persist)
                    .await
                    .map_err(|storage| unstored(results[i].take(), storage))?;
            }
            NodeImpl::User(node) => {
                let ctx = Arc::new(TaskCtx {
                    node: spec.id.clone(),
                    task_id: t.id.clone(),
                    step,
                    checkpoint: ck.clone(),
                    ns: task_ns(&info.cfg.checkpoint_ns, spec.id.as_str(), &t.id),
                    run: info.clone(),
                    parent_schema: g.schema.clone(),
                    resume: Mutex::new(ResumeState {
                        answers: saved_answers(pending, &t.id),
                        counter: 0,
                        added: false,
                    }),
                    shared: shared.clone(),
                });
                ctxs.insert(i, ctx.clone());
                let node = node.clone();
                let input = t.input.clone();
                let retry = spec.retry.clone();
                let handle = set.spawn(async move {
                    let mut attempt = 1u32;
                    loop {
                        {
                            let mut r = ctx
                                .resume
                                .lock()
                                .unwrap_or_else(std::sync::PoisonError::into_inner);
                            r.counter = 0;
                        }
                        let r = node
                            .run(input.clone(), Context { inner: ctx.clone() })
                            .await;
                        match (&r, &retry) {
                            (Err(NodeError(NodeErrorKind::Failed(e))), Some(p))
                                if attempt < p.max_attempts && p.retries(e) =>
                            {
                                tokio::time::sleep(p.wait(attempt, unit_random())).await;
                                attempt += 1;
                            }
                            _ => return (i, r),
                        }
                    }
                });
                ids.insert(handle.id(), i);
            }
        }
    }
    while let Some(joined) = set.join_next_with_id().await {
        let (i, r) = match joined {
            Ok((_, (i, r))) => (i, r),
            Err(e) => {
                let Some(&i) = ids.get(&e.id()) else { continue };
                let message = if e.is_panic() {
                    panic_message(e.into_panic().as_ref())
                } else {
                    "task cancelled".to_owned()
                };
                let node = g.nodes[tasks[i].node].id.clone();
                results[i] = Some(TaskResult::Failed(Error::NodePanicked { node, message }));
                persist_result(
                    g,
                    &tasks[i],
                    results[i].as_ref(),
                    ctxs.get(&i),
                    pending,
                    ck,
                    persist,
                )
                .await
                .map_err(|storage| unstored(results[i].take(), storage))?;
                continue;
            }
        };
        let t = &tasks[i];
        let ctx = ctxs.get(&i);
        results[i] = Some(match r {
            // The node's router and its own-view reducers run here, outside the task: a panic in
            // them is the task's, caught and stored as a node's panic is, not one that unwinds
            // through the run and its caller.
            Ok(cmd) => std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
                finish_ok(g, t, &cmd, live, !info.cfg.checkpoint_ns.is_empty())
            }))
            .unwrap_or_else(|p| {
                TaskResult::Failed(Error::NodePanicked {
                    node: g.nodes[t.node].id.clone(),
                    message: panic_message(p.as_ref()),
                })
            }),
            Err(NodeError(NodeErrorKind::Interrupt(int))) => TaskResult::Interrupted(int),
            Err(NodeError(NodeErrorKind::Paused)) => TaskResult::Interrupted(Vec::new()),
            Err(NodeError(NodeErrorKind::Failed(source))) => {
                TaskResult::Failed(Error::NodeFailed {
                    node: g.nodes[t.node].id.clone(),
                    source,
                })
            }
        });
        persist_result(g, t, results[i].as_ref(), ctx, pending, ck, persist)
            .await
            .map_err(|storage| unstored(results[i].take(), storage))?;
    }
    Ok(())
}

/// The step's error when storing a task's result failed: for a failed task its own error
/// together with the store's (neither may hide the other: the node's is the cause), for any
/// other the store's.
fn unstored(result: Option<TaskResult>, storage: Error) -> Error {
    match result {
        Some(TaskResult::Failed(error)) => Error::unstored(error, storage),
        _ => storage,
    }
}

/// The text of a panic payload (a `&str` or `String` message).
pub(crate) fn panic_message(p: &(dyn std::any::Any + Send)) -> String {
    p.downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| p.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "non-string panic payload".to_owned())
}

fn finish_ok(g: &Graph, t: &Task, cmd: &Command, live: &Live, nested: bool) -> TaskResult {
    if cmd.to_parent && nested {
        let mut up = cmd.clone();
        up.to_parent = false;
        return TaskResult::Failed(Error::ParentCommand(Box::new(up)));
    }
    match resolve(g, t.node, cmd, live) {
        Ok(r) => TaskResult::Done { writes: r.writes },
        Err(e) => TaskResult::Failed(e),
    }
}

async fn persist_result(
    g: &Graph,
    t: &Task,
    r: Option<&TaskResult>,
    ctx: Option<&Arc<TaskCtx>>,
    pending: &[PendingWrite],
    ck: &CheckpointId,
    persist: &mut Persist<'_>,
) -> Result<()> {
    if ck.as_str().is_empty() {
        return Ok(());
    }
    let mut out = Vec::new();
    if let Some(ctx) = ctx {
        let st = ctx
            .resume
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if st.added {
            out.push((RESUME.to_owned(), Json::Array(st.answers.clone())));
        }
    }
    match r {
        // A command for the parent is no failure of the task: the parent's task takes it as
        // its result and stores that. Nothing is stored here (as the reference stores nothing
        // for a bubbling command): the subgraph's step shows the task as not yet run.
        Some(TaskResult::Failed(Error::ParentCommand(_))) => return Ok(()),
        Some(TaskResult::Done { writes, .. }) => {
            let w = ser_writes(g, writes)?;
            if w.is_empty() {
                out.push((NO_WRITES.to_owned(), Json::Null));
            }
            out.extend(w);
        }
        Some(TaskResult::Interrupted(i)) => {
            // A paused subgraph task stores an empty list: the task waits, nothing to answer.
            out.push((
                INTERRUPT.to_owned(),
                serde_json::to_value(i).unwrap_or(Json::Null),
            ));
        }
        Some(TaskResult::Failed(e)) => {
            out.push((
                ERROR.to_owned(),
                serde_json::json!({ "message": error_message(e) }),
            ));
            // The task's interrupt, if it had one, is answered or gone: the failure is what it
            // ended on. (A subgraph's task stores no answers to show that its interrupt was
            // answered, so the stale interrupt would otherwise outrank the error.)
            if pending
                .iter()
                .any(|w| w.task_id == t.id && w.channel == INTERRUPT)
            {
                out.push((INTERRUPT.to_owned(), Json::Array(Vec::new())));
            }
        }
        None => return Ok(()),
    }
    persist.put_writes(ck, &t.id, &t.path, out).await
}

fn error_message(e: &Error) -> String {
    match e {
        Error::NodeFailed { source, .. } => source.to_string(),
        other => other.to_string(),
    }
}

/// Builds the snapshot of one stored checkpoint (see [`snapshot_from`] for `finished`).
pub(crate) async fn snapshot_of(
    g: &Graph,
    cp: &dyn Checkpointer,
    scope: &Scope,
    t: &CheckpointTuple,
    finished: Finished,
) -> Result<StateSnapshot> {
    let live = Live::load(g, cp, scope, &t.checkpoint).await?;
    snapshot_from(g, scope, t, live, finished)
}

/// What a snapshot does with the results its next step's finished tasks stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finished {
    /// Applies them to the values and leaves those tasks out of `next`: the thread's head, as
    /// `get_state` without a checkpoint id shows it (the reference's `apply_pending_writes`):
    /// the state a resume continues from, with the siblings of an interrupted or failed task.
    Apply,
    /// Shows the checkpoint's values as stored (plus its input): an addressed checkpoint and
    /// every entry of the history.
    Stored,
}

/// The snapshot of `t` from its live channels (loaded or from the hot cache).
fn snapshot_from(
    g: &Graph,
    scope: &Scope,
    t: &CheckpointTuple,
    mut live: Live,
    finished: Finished,
) -> Result<StateSnapshot> {
    let null_ch = null_writes(g, &t.pending_writes)?;
    if !null_ch.is_empty() {
        apply_writes(
            g,
            &mut live,
            &[Applied {
                name: "__input__",
                triggers: &[],
                bump: false,
                writes: &null_ch,
            }],
        )?;
    }
    // Every node is a candidate, whatever the checkpoint's last step updated (as the
    // reference's state snapshot): a node whose trigger moved earlier and is still unseen,
    // such as the target of a complete join, is next too.
    live.updated = None;
    let state = live.state_view(g);
    let tasks = prepare_tasks(
        g,
        &live,
        t.checkpoint.id.as_str(),
        t.checkpoint.step + 1,
        &state,
    )?;
    let mut snaps = Vec::with_capacity(tasks.len());
    for task in &tasks {
        let mine: Vec<&PendingWrite> = t
            .pending_writes
            .iter()
            .filter(|w| w.task_id == task.id)
            .collect();
        let error = mine.iter().find(|w| w.channel == ERROR).map(|w| {
            w.value
                .get("message")
                .and_then(Json::as_str)
                .unwrap_or_default()
                .to_owned()
        });
        let interrupts = pending_interrupts(&t.pending_writes, &task.id, scope.ns.as_str());
        let has_result = mine.iter().any(|w| !is_control(&w.channel));
        // A result wins over a stale error (a retry or a resume that succeeded), and an
        // interrupt raised after an error (the failed task ran again) is what the task waits
        // on now; the error write, an upsert, stays either way.
        let status = if has_result {
            TaskStatus::Done
        } else if !interrupts.is_empty() {
            TaskStatus::Interrupted
        } else if error.is_some() {
            TaskStatus::Error
        } else {
            TaskStatus::Todo
        };
        let node = &g.nodes[task.node].id;
        snaps.push(TaskSnapshot {
            id: task.id.clone(),
            node: node.clone(),
            subgraph_ns: g
                .subgraphs
                .contains_key(node)
                .then(|| task_ns(scope.ns.as_str(), node.as_str(), &task.id)),
            kind: task.kind,
            status,
            interrupts: if status == TaskStatus::Interrupted {
                interrupts
            } else {
                Vec::new()
            },
            error,
        });
    }
    let mut values = state;
    let mut applied = false;
    if finished == Finished::Apply {
        // The finished tasks' stored results, in task order as the barrier applies them. One
        // that does not decode (a write to a channel a deploy removed) fails the run that
        // resumes the step, not this read: the snapshot then shows the checkpoint as stored.
        let mut done = Vec::new();
        let mut decodes = true;
        for task in &tasks {
            match decode_writes(g, &t.pending_writes, &task.id) {
                Ok(Some(writes)) => done.push((task, writes)),
                Ok(None) => {}
                Err(_) => decodes = false,
            }
        }
        if decodes && !done.is_empty() {
            let batch: Vec<Applied<'_>> = done
                .iter()
                .map(|(task, writes)| Applied::task(g, task, writes))
                .collect();
            // Results the barrier refused together (two values for a last-value channel:
            // the step failed there) cannot be shown applied; the snapshot then shows the
            // checkpoint as stored, those tasks done and still next, instead of failing the
            // read of a thread that needs inspecting most.
            if apply_writes(g, &mut live, &batch).is_ok() {
                values = live.state_view(g);
                applied = true;
            }
        }
    }
    let next = snaps
        .iter()
        .filter(|s| !applied || s.status != TaskStatus::Done)
        .map(|s| s.node.clone())
        .collect();
    Ok(StateSnapshot {
        values,
        next,
        tasks: snaps,
        checkpoint_id: t.checkpoint.id.clone(),
        parent_id: t.checkpoint.parent.clone(),
        step: t.checkpoint.step,
        source: t.checkpoint.source,
        run_id: t.checkpoint.run_id.clone(),
        metadata: t.checkpoint.metadata.clone(),
        parents: t.checkpoint.parents.clone(),
    })
}

/// Waits until what a dropped run of the thread still stores has landed, for a call on the root
/// namespace: a subgraph's run and its state read (at each subgraph task's start) are part of
/// an enclosing run, whose own store operations they must not wait for.
async fn settle_root(cfg: &RunConfig) {
    if cfg.checkpoint_ns.is_empty() {
        crate::landing::settle(cfg.thread_id.as_str()).await;
    }
}

/// A number in [0, 1) from the operating system's random source (through the crate's v4
/// UUIDs): the jitter of a retry wait, which must differ between
/// processes that retry at once, not be reproducible.
fn unit_random() -> f64 {
    // The lowest 53 bits: all random in a v4 UUID (its version and variant bits sit higher),
    // and exactly representable, so the quotient stays below 1.
    let bits = uuid::Uuid::new_v4().as_u128() & ((1u128 << 53) - 1);
    bits as f64 / (1u64 << 53) as f64
}

pub(crate) async fn get_state(
    g: &Graph,
    cp: &dyn Checkpointer,
    cache: &crate::compiled::HotCache,
    cfg: &RunConfig,
) -> Result<Option<StateSnapshot>> {
    let scope = cfg.scope();
    settle_root(cfg).await;
    if cfg.checkpoint_id.is_none() && cache.holds(&scope) {
        // The head: from the hot-state cache when it holds exactly that checkpoint (a cold
        // cache skips this read: the head is read with its values below anyway).
        let Some(head) = cp.head(&scope, None).await? else {
            return Ok(None);
        };
        if let Some(live) = cache.peek(&scope, &head.checkpoint.id) {
            return snapshot_from(g, &scope, &head, live, Finished::Apply).map(Some);
        }
    }
    match cp.get_tuple(&scope, cfg.checkpoint_id.as_ref()).await? {
        Some(t) => {
            let finished = if cfg.checkpoint_id.is_none() {
                Finished::Apply
            } else {
                Finished::Stored
            };
            snapshot_of(g, cp, &scope, &t, finished).await.map(Some)
        }
        None => Ok(None),
    }
}

/// A page of the thread's history older than `before`, as `get_state` reads each of its
/// checkpoints; one deleted meanwhile (a prune by another process) is no longer history: left
/// out.
async fn history_page(
    cp: &dyn Checkpointer,
    scope: &Scope,
    before: Option<&CheckpointId>,
    limit: usize,
) -> Result<Vec<CheckpointTuple>> {
    let mut page = cp.list_page(scope, before, limit).await?;
    // An empty page ends the history only when nothing older is left: every checkpoint of a
    // page can go between its listing and its reads while older ones stay (a prune keeps
    // seeds and full records), and the next listing, taken after those deletes, finds them.
    // Older checkpoints are only ever deleted (new ones are newer than any `before`), so this
    // stops; the bound covers a store that keeps bringing old ids back (a delete and a copy
    // onto the thread, repeated), and is an error rather than an empty page that would read
    // as the end.
    let mut reads = 1;
    loop {
        if !page.is_empty() || cp.list_ids(scope, before, Some(1)).await?.is_empty() {
            return Ok(page);
        }
        if reads == 16 {
            return Err(Error::Storage {
                source: Box::new(crate::checkpointer::BrokenHistory {
                    thread: scope.thread.to_string(),
                    checkpoint: before.map_or_else(|| "newest".to_owned(), ToString::to_string),
                    why: "older checkpoints remain, but every read of the page before \
                          it found them gone",
                }),
            });
        }
        reads += 1;
        page = cp.list_page(scope, before, limit).await?;
    }
}

/// The fewest checkpoints a filtered history page reads at a time.
const FILTERED_PAGE: usize = 64;

/// Whether a checkpoint's metadata holds every entry of `filter`, compared as the reference's
/// history filter compares its metadata: `source`, `step`, `run_id`, `parents` and the free
/// keys; a key the metadata lacks compares as `null`, and numbers compare by value.
fn metadata_matches(t: &CheckpointTuple, filter: &serde_json::Map<String, Json>) -> bool {
    let c = &t.checkpoint;
    filter.iter().all(|(key, want)| {
        let have = match key.as_str() {
            "source" => Json::from(c.source.as_str()),
            "step" => Json::from(c.step),
            "run_id" => c.run_id.clone().map_or(Json::Null, Json::from),
            "parents" => Json::Object(
                c.parents
                    .iter()
                    .map(|(ns, id)| (ns.clone(), Json::from(id.as_str())))
                    .collect(),
            ),
            other => c.metadata.get(other).cloned().unwrap_or(Json::Null),
        };
        antler_checkpoint::json_equal(&have, want)
    })
}

pub(crate) async fn history(
    g: &Graph,
    cp: &dyn Checkpointer,
    cfg: &RunConfig,
    query: &HistoryQuery,
) -> Result<Vec<StateSnapshot>> {
    let scope = cfg.scope();
    // `before` bounds the ids, compared as the store orders them: only the spelling the
    // runtime gives ids has the same order as a string and as stored (before 2026-12-01 an
    // upper-case spelling paged differently with and without a limit, and text that is no
    // id was a storage error with a limit).
    if let Some(b) = &query.before
        && crate::saver::stored_id(b).is_none()
    {
        return Err(Error::InvalidCheckpointId {
            id: b.as_str().to_owned(),
        });
    }
    settle_root(cfg).await;
    if query.limit == Some(0) {
        // Kernel-spec R36: a limit of zero is an explicit empty page, read from nowhere (an
        // empty page read from the store would look emptied by a concurrent delete).
        return Ok(Vec::new());
    }
    if let Some(id) = &cfg.checkpoint_id {
        // A config that names a checkpoint lists only it, as the reference's savers filter
        // `list` by the config's checkpoint id: the one snapshot `get_state` gives for it,
        // when it exists and passes `before` and the filter.
        if query.before.as_ref().is_some_and(|b| id >= b) {
            return Ok(Vec::new());
        }
        // The head read (no values) decides; `get_state` then reads it with its values.
        let Some(t) = cp.head(&scope, Some(id)).await? else {
            return Ok(Vec::new());
        };
        if !metadata_matches(&t, &query.filter) {
            return Ok(Vec::new());
        }
        let snapshot = get_state(g, cp, &crate::compiled::HotCache::default(), cfg).await?;
        return Ok(snapshot.into_iter().collect());
    }
    // Newest first, as returned. With a filter, every checkpoint read is rebuilt (a match's
    // parent that does not match still lets the match continue its delta channels instead
    // of walking history) and only the matches are returned (`wanted`).
    let (tuples, wanted): (Vec<CheckpointTuple>, Option<HashSet<CheckpointId>>) = match query.limit
    {
        // The whole history: one bulk read beats a read per checkpoint.
        None => {
            let tuples: Vec<CheckpointTuple> = cp
                .list(&scope)
                .await?
                .into_iter()
                .filter(|t| query.before.as_ref().is_none_or(|b| t.checkpoint.id < *b))
                .collect();
            let wanted = (!query.filter.is_empty()).then(|| {
                tuples
                    .iter()
                    .filter(|t| metadata_matches(t, &query.filter))
                    .map(|t| t.checkpoint.id.clone())
                    .collect()
            });
            (tuples, wanted)
        }
        // A filtered page: pages read in turn, older each time, until `limit` checkpoints
        // match or the history ends; the filter is applied to what the reads return, so a
        // rare match costs reading the pages before it (read at least `FILTERED_PAGE` at a
        // time, not `limit`, which may be one).
        Some(limit) if !query.filter.is_empty() => {
            let mut read: Vec<CheckpointTuple> = Vec::new();
            let mut wanted = HashSet::new();
            let mut before = query.before.clone();
            while wanted.len() < limit {
                let page =
                    history_page(cp, &scope, before.as_ref(), limit.max(FILTERED_PAGE)).await?;
                let Some(last) = page.last() else { break };
                before = Some(last.checkpoint.id.clone());
                for t in page {
                    if wanted.len() == limit {
                        break;
                    }
                    if metadata_matches(&t, &query.filter) {
                        wanted.insert(t.checkpoint.id.clone());
                    }
                    read.push(t);
                }
            }
            (read, Some(wanted))
        }
        Some(limit) => (
            history_page(cp, &scope, query.before.as_ref(), limit).await?,
            None,
        ),
    };
    // Oldest first, so that a checkpoint whose parent was just rebuilt continues the parent's
    // delta channels instead of walking history again: one walk per run of consecutive
    // checkpoints, not one per checkpoint.
    // Only checkpoints with a child among the tuples are kept for that child.
    let parents: BTreeSet<CheckpointId> = tuples
        .iter()
        .filter_map(|t| t.checkpoint.parent.clone())
        .collect();
    let mut out = Vec::with_capacity(tuples.len());
    let mut rebuilt: HashMap<CheckpointId, (Live, Vec<PendingWrite>)> = HashMap::new();
    for t in tuples.into_iter().rev() {
        let shown = wanted.as_ref().is_none_or(|w| w.contains(&t.checkpoint.id));
        if !shown && !parents.contains(&t.checkpoint.id) {
            continue;
        }
        let parent = t.checkpoint.parent.as_ref().and_then(|p| rebuilt.get(p));
        let live = match parent {
            Some((p, writes)) => Live::continue_from(g, &t.checkpoint, p, writes)?,
            None => match Live::load(g, cp, &scope, &t.checkpoint).await {
                Ok(live) => live,
                // Deleted after the page was read (a prune by another process): its history
                // walk found it or an ancestor gone. No longer history, as for a record the
                // page's own read saw go; a record that still exists keeps its error.
                Err(e) => {
                    let gone = match cp.head(&scope, Some(&t.checkpoint.id)).await {
                        Ok(found) => found.is_none(),
                        // Its read found it going as well; any other error of this second
                        // read leaves the first error the one to report.
                        Err(again) => crate::saver::is_vanished(&again),
                    };
                    if gone {
                        continue;
                    }
                    return Err(e);
                }
            },
        };
        if parents.contains(&t.checkpoint.id) {
            if shown {
                out.push(snapshot_from(
                    g,
                    &scope,
                    &t,
                    live.clone(),
                    Finished::Stored,
                )?);
            }
            rebuilt.insert(t.checkpoint.id.clone(), (live, t.pending_writes));
        } else {
            out.push(snapshot_from(g, &scope, &t, live, Finished::Stored)?);
        }
    }
    out.reverse();
    Ok(out)
}

pub(crate) async fn update_state(
    g: &Graph,
    cp_arc: &Arc<dyn Checkpointer>,
    cfg: &RunConfig,
    values: Update,
    as_node: Option<NodeId>,
) -> Result<CheckpointId> {
    let cp = cp_arc.as_ref();
    if let Some(key) = cfg.reserved_metadata_key() {
        return Err(Error::ReservedMetadataKey {
            key: key.to_owned(),
        });
    }
    check_store_mode(g, cp)?;
    // Not while a run is going on the thread (see `running.rs`), in any namespace: only
    // callers update state, never an enclosing run, so an update of a subgraph's namespace
    // while the thread's run executes that subgraph would fork it under the run (before
    // 2026-12-01 only the root namespace was guarded). Likewise it first waits for what a
    // dropped run still stores.
    let _running = crate::running::enter(cp_arc, cfg.thread_id.as_str())?;
    crate::landing::settle(cfg.thread_id.as_str()).await;
    let saved = cp
        .get_tuple(&cfg.scope(), cfg.checkpoint_id.as_ref())
        .await?;
    if cfg.checkpoint_id.is_some() {
        // Kernel-spec R35 b: a write checks the thread's head before anything is written, also
        // when it addresses an older checkpoint (the store's mode gate fails the read of a head
        // this process's mode cannot use).
        cp.head(&cfg.scope(), None).await?;
    }
    if let (Some(id), None) = (&cfg.checkpoint_id, &saved) {
        return Err(Error::CheckpointNotFound {
            thread: cfg.thread_id.to_string(),
            checkpoint: id.to_string(),
        });
    }
    // A subgraph's first checkpoint is its parent task's to make: one made by an update would
    // make the task take the subgraph as already run, and skip the parent's input.
    if saved.is_none() && !cfg.checkpoint_ns.is_empty() {
        return Err(Error::SubgraphNotStarted {
            namespace: cfg.checkpoint_ns.clone(),
        });
    }
    let (mut live, parent, step) = match &saved {
        Some(t) => (
            Live::load(g, cp, &cfg.scope(), &t.checkpoint).await?,
            Some(t.checkpoint.id.clone()),
            t.checkpoint.step + 1,
        ),
        // A fresh thread's update is step 0, as the reference numbers it (the step after
        // "none", -1), whatever node it is applied as.
        None => (Live::new(g)?, None, 0),
    };
    if cfg.checkpoint_id.is_some() {
        // An update on an addressed checkpoint starts a new branch (see `Live::next_version`).
        live.floor = thread_max_version(cp, &cfg.scope()).await?;
    } else {
        raise_floor_past_deleted_runs(&mut live, cp, &cfg.scope()).await?;
    }
    // No values as `__end__`: the update clears the pending step instead (the reference's
    // `bulk_update_state` branch for it): see `clear_pending`.
    let clear = values.is_empty() && as_node.as_ref().is_some_and(|n| n.as_str() == END);
    let mut pending = Vec::new();
    if let Some(t) = &saved {
        // update_state does not apply the head's pending step, not even its finished tasks'
        // writes: the reference's traces show it (graph-programs g1-00000 and g1-00043, an
        // update on the head after a fan-out where one task stopped on an interrupt).
        force_unreplayed(g, &mut live, &t.pending_writes);
        let tasks = next_tasks(g, &live, Some(&t.checkpoint.id), t.checkpoint.step + 1)?;
        force_if_unfinished(&mut live, &tasks);
        if cfg.checkpoint_id.is_some() && !clear {
            // The input stored on an addressed checkpoint is not applied (below).
            force_stored_input(g, &mut live, &t.pending_writes);
        }
        pending = tasks;
    }
    // The input stored on the head (a command's update) is applied first, as a run on the head
    // would; not on an addressed checkpoint, as the reference's update applies pending writes
    // only when no checkpoint is addressed (a run addressed to it applies that input). A clear
    // applies it on an addressed checkpoint too, as the reference's does.
    // The channels that input moved count for the delta counters with the update's own, as
    // in a run, which adds the input's channels to its set (before 2026-12-02 they were left
    // out here, and the snapshot after a stored command's update came one update late).
    let mut input_moved = BTreeSet::new();
    if let Some(t) = saved
        .as_ref()
        .filter(|_| cfg.checkpoint_id.is_none() || clear)
    {
        let null_ch = null_writes(g, &t.pending_writes)?;
        if !null_ch.is_empty() {
            input_moved = apply_writes(
                g,
                &mut live,
                &[Applied {
                    name: "__input__",
                    triggers: &[],
                    bump: false,
                    writes: &null_ch,
                }],
            )?;
        }
    }
    let mut updated = if clear {
        clear_pending(g, &mut live, saved.as_ref(), &pending)?
    } else {
        update_as_node(g, &mut live, values, as_node)?
    };
    updated.extend(input_moved);
    live.updated = Some(updated);
    let id = new_checkpoint_id();
    let mut rec = live.checkpoint_record(
        g,
        id.clone(),
        parent,
        step,
        Source::Update,
        false,
        cp.accepts_encoded_lists(),
    )?;
    // The update's channels counted for the delta counters above; the checkpoint stores no
    // set, as the reference's update checkpoint does, so the next run considers every node
    // (a set of only the update's channels would hide a node still pending from before, such
    // as the target of a complete join).
    rec.updated_channels = None;
    rec.run_id.clone_from(&cfg.run_id);
    rec.metadata.clone_from(&cfg.metadata);
    // An update in a subgraph's namespace belongs to the enclosing step its checkpoints name
    // (the reference copies the loaded checkpoint's `parents`).
    rec.parents = match &saved {
        Some(t) => t.checkpoint.parents.clone(),
        None => cfg.parents.clone(),
    };
    // A caller dropped while the update is stored still leaves it whole, and counted.
    let (cp, scope) = (cp_arc.clone(), cfg.scope());
    let thread = cfg.thread_id.as_str().to_owned();
    store_landing(
        tokio::runtime::Handle::try_current().ok().as_ref(),
        &thread,
        async move { cp.put(&scope, rec).await },
    )
    .await?;
    Ok(id)
}

/// Clears the loaded checkpoint's pending step (`update_state` with no values as `__end__`,
/// runtime-spec §8's update, the reference's branch for it): every task of the step is
/// consumed as if it had run, with the results the finished ones stored applied in task
/// order as the barrier applies them, and nothing for the others (an interrupted or failed
/// task, or one that never ran); the update checkpoint then has no pending step left, unless
/// those results trigger nodes of their own. A stored result that does not decode fails the
/// update, as it fails a run that resumes the step.
fn clear_pending(
    g: &Graph,
    live: &mut Live,
    saved: Option<&CheckpointTuple>,
    tasks: &[Task],
) -> Result<BTreeSet<usize>> {
    let Some(t) = saved else {
        return Ok(BTreeSet::new());
    };
    let mut results = Vec::with_capacity(tasks.len());
    for task in tasks {
        results.push(decode_writes(g, &t.pending_writes, &task.id)?.unwrap_or_default());
    }
    let batch: Vec<Applied<'_>> = tasks
        .iter()
        .zip(&results)
        .map(|(task, writes)| Applied::task(g, task, writes))
        .collect();
    if batch.is_empty() {
        return Ok(BTreeSet::new());
    }
    apply_writes(g, live, &batch)
}

/// Applies `values` as `as_node`'s writes (its writers and router run), as `update_state` does.
fn update_as_node(
    g: &Graph,
    live: &mut Live,
    values: Update,
    as_node: Option<NodeId>,
) -> Result<BTreeSet<usize>> {
    let node = match as_node {
        // `__start__` too (node 0): its writers take the values as input and trigger the
        // nodes after it, which is how a thread is seeded without running anything.
        // An unknown node is an invalid update, as the reference's `InvalidUpdateError`.
        Some(n) => *g.node_idx.get(&n).ok_or_else(|| Error::UnknownNode {
            node: n.to_string(),
        })?,
        None => infer_as_node(g, live)?,
    };
    // `as_node`'s router runs here: a panic in it is the update's error, as a router's panic
    // in a run is the task's, not one that unwinds into the caller.
    let command = Command::from(values);
    let resolved = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        resolve(g, node, &command, live)
    }))
    .unwrap_or_else(|p| {
        Err(Error::NodePanicked {
            node: g.nodes[node].id.clone(),
            message: panic_message(p.as_ref()),
        })
    })?;
    // The update's writes are not stored as task writes anywhere a history walk would find them:
    // the update checkpoint snapshots every delta channel it writes (spec §8, §5.4).
    for (c, _) in &resolved.writes {
        if let Some(d) = live.chans[*c].delta() {
            d.forced = true;
        }
    }
    let name = g.nodes[node].id.as_str();
    apply_writes(
        g,
        live,
        &[Applied {
            name,
            triggers: &[],
            bump: true,
            writes: &resolved.writes,
        }],
    )
}

/// A graph whose `messages` channel is a delta channel does not write to a full-mode store: the
/// store would refuse its first delta checkpoint with a per-thread mode error that names the
/// thread, not the cause. The store's mode is about `messages` (kernel-spec R26, R33): other
/// delta channels are stored in either mode.
fn check_store_mode(g: &Graph, cp: &dyn Checkpointer) -> Result<()> {
    let Some(s) = g
        .schema
        .specs()
        .find(|s| s.is_delta() && s.name() == "messages")
    else {
        return Ok(());
    };
    if !cp.stores_delta_messages() {
        return Err(Error::StoreModeMismatch {
            channel: s.name().to_owned(),
        });
    }
    // Kernel-spec R30: the cadence is the graph's, but every process sharing the store must
    // use the one it records, or reads replay more writes than that store's bound.
    match (s.delta_frequency(), cp.messages_snapshot_frequency()) {
        (Some(graph), Some(store)) if graph != store => Err(Error::SnapshotFrequencyMismatch {
            channel: s.name().to_owned(),
            graph,
            store,
        }),
        _ => Ok(()),
    }
}

/// Whether a step that updated the channels `updated` changed the state (a tracked channel
/// of the state among them): what a `values` event needs, as the reference's `after_tick`
/// emits values only when the updated channels meet the output keys.
fn changes_state(g: &Graph, updated: &BTreeSet<usize>) -> bool {
    updated
        .iter()
        .any(|c| matches!(g.chans[*c].kind, ChanKind::User) && !g.is_untracked(*c))
}

fn infer_as_node(g: &Graph, live: &Live) -> Result<usize> {
    // Every node counts, `__start__` included: after an input that stopped at a breakpoint
    // it is the node that ran last, so the update lands as input and the next node stays next.
    // As the reference, every seen version of every node counts on its own: the newest must
    // be newer than the next one, even when both are one node's (a join that saw its two
    // triggers at one version is as ambiguous there as two nodes of one step).
    // A node that has seen nothing has not run (an update as it on a fresh thread records it
    // so): it adds nothing, as in the reference, which counts seen versions only.
    let mut pairs: Vec<(u64, usize)> = g
        .nodes
        .iter()
        .enumerate()
        .filter_map(|(i, n)| live.seen.get(n.id.as_str()).map(|m| (i, m)))
        .flat_map(|(i, m)| m.values().map(move |v| (*v, i)))
        .collect();
    pairs.sort_unstable();
    match pairs.as_slice() {
        // Nothing has run (a fresh thread): the update is the thread's input, as in the
        // reference, whose input node is `__start__`.
        [] => Ok(0),
        [(_, only)] => Ok(*only),
        [.., (second, _), (newest, node)] if newest != second => Ok(*node),
        _ => Err(Error::AmbiguousAsNode {
            reason: "the newest version was seen twice (several nodes ran last, or one saw two channels at once)".to_owned(),
        }),
    }
}

#[cfg(test)]
mod jitter_tests {
    /// Draws lie in [0, 1) and differ: the jitter of processes that retry at once differs.
    #[test]
    fn unit_random_draws_differ_within_the_unit_interval() {
        let draws: Vec<f64> = (0..200).map(|_| super::unit_random()).collect();
        assert!(draws.iter().all(|d| (0.0..1.0).contains(d)), "{draws:?}");
        let distinct: std::collections::BTreeSet<u64> = draws.iter().map(|d| d.to_bits()).collect();
        assert!(distinct.len() > 190, "{} distinct of 200", distinct.len());
        // Both halves of the interval occur (a fixed or truncated draw would not).
        assert!(draws.iter().any(|d| *d < 0.5) && draws.iter().any(|d| *d >= 0.5));
    }
}
