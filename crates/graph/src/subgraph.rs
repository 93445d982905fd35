//! Subgraphs: a compiled graph used as a node of another graph, with its own checkpoint namespace.
//!
//! The subgraph runs in the parent's thread and store under the namespace `<node>:<task id>`
//! (nested with `|`), so its checkpoints never mix with the parent's. Input: the parent state's
//! values of the keys both schemas declare. Output: the subgraph's final values of the keys both
//! declare, written to the parent through the parent's channels (as the reference does).
//! An interrupt inside the subgraph interrupts the parent task; resuming the parent re-runs the
//! task, which resumes the subgraph from its own checkpoint with the parent's resume value.
//! A static breakpoint inside the subgraph pauses the parent task the same way, without an
//! interrupt value; resuming the parent (`Input::Continue`) continues the subgraph.
//! A `Command::to_parent` returned inside the subgraph ends the subgraph run and becomes the
//! parent task's result (its update and gotos apply in the parent).

use std::sync::Arc;

use async_trait::async_trait;

use crate::builder::Node;
use crate::compiled::{CompiledGraph, Input};
use crate::state::{NamedWrite, State, Update, Write};
use crate::types::{Command, Context, NodeError, NodeErrorKind, Resume};

pub(crate) struct SubgraphNode {
    pub(crate) graph: CompiledGraph,
}

/// The values of `state` whose keys `target` declares as state channels, as writes.
fn project(state: &State, target: &crate::schema::Schema) -> Update {
    let mut u = Update::new();
    for spec in target.specs().filter(|s| s.is_state()) {
        if let Some(v) = state.values.get(spec.name()) {
            u.writes.push(NamedWrite {
                channel: spec.name_arc().clone(),
                type_id: (**v).type_id(),
                write: Write::Value(v.clone()),
            });
        }
    }
    u
}

#[async_trait]
impl Node for SubgraphNode {
    async fn run(&self, input: State, ctx: Context) -> Result<Command, NodeError> {
        let info = &ctx.inner.run;
        let mut cfg = info.cfg.clone();
        // The subgraph's checkpoints name the enclosing graphs' steps they ran in (runtime-spec
        // §2.5: the parent's map plus the parent's own namespace and checkpoint).
        cfg.parents
            .insert(info.cfg.checkpoint_ns.clone(), ctx.inner.checkpoint.clone());
        cfg.checkpoint_ns = ctx.inner.ns.clone();
        cfg.checkpoint_id = None;
        // An interrupt of the subgraph that its own resume inputs do not answer takes this
        // run's: the parent's resume value reaches a subgraph node that interrupts for the
        // first time (after a static breakpoint, or a state update that left new tasks).
        cfg.parent_resume = Some(ctx.inner.shared.clone());
        let mut sub = self.graph.clone();
        if let Some(cp) = &info.cp {
            sub = sub.with_checkpointer(cp.clone());
        }
        // The subgraph reads its own namespace itself (its public `get_state` would take the
        // namespace as one of its own subgraphs').
        let existing = match &info.cp {
            Some(cp) => crate::run::get_state(&sub.g, cp.as_ref(), &sub.cache, &cfg)
                .await
                .map_err(NodeError::failed)?,
            None => None,
        };
        // The parent's single resume value, when this task takes it, and the interrupts it was
        // taken for: a failed attempt that left them all unanswered puts it back, so that a
        // retry (or the parent's next run) still answers them.
        let mut taken: Option<(serde_json::Value, Vec<crate::InterruptId>)> = None;
        let sub_input = match existing {
            // The subgraph stopped mid-run (interrupt or error): continue it, answering its interrupts.
            Some(snap) if !snap.tasks.is_empty() => {
                let pending = snap.interrupts();
                let shared = &ctx.inner.shared;
                let mapped: std::collections::HashMap<_, _> = pending
                    .iter()
                    .filter_map(|i| shared.map.get(&i.id).map(|v| (i.id.clone(), v.clone())))
                    .collect();
                let null = if mapped.is_empty() && !pending.is_empty() {
                    shared
                        .null_value
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .take()
                } else {
                    None
                };
                taken = null
                    .clone()
                    .map(|v| (v, pending.iter().map(|i| i.id.clone()).collect()));
                match (null, mapped.is_empty()) {
                    (Some(v), _) => Input::Command(Command {
                        resume: Some(Resume::Value(v)),
                        ..Command::default()
                    }),
                    (None, false) => Input::Command(Command::resume_map(mapped)),
                    (None, true) => Input::Continue,
                }
            }
            // The subgraph already finished in this namespace (the parent task runs again:
            // its step was resumed, or the subgraph paused after its last node): its final
            // values are the result, not a second run from scratch.
            Some(snap) => return Ok(Command::from(project(&snap.values, &ctx_schema(&ctx)))),
            None => Input::Values(project(&input, &self.graph.g.schema)),
        };
        // With a stream that asks for subgraphs' events the subgraph's run streams into it.
        let (tx, modes) = match &info.subgraph_stream {
            Some((tx, modes)) => (Some(tx), *modes),
            None => (None, crate::compiled::StreamModes::default()),
        };
        let run = crate::run::run(
            &sub.g,
            sub.cp.as_ref(),
            &sub.cache,
            sub_input,
            &cfg,
            tx,
            modes,
        );
        let out = match run.await {
            Ok(out) => out,
            // `Command::to_parent` inside the subgraph: the command becomes this task's result.
            Err(crate::Error::ParentCommand(cmd)) => return Ok(*cmd),
            Err(e) => {
                if let (Some((v, ids)), Some(cp)) = (taken, &info.cp) {
                    // Only when the failed attempt answered none of them (it failed before the
                    // value was stored, or before any node took it): an answered interrupt
                    // would let the value answer another, later question instead. A failed
                    // re-read keeps the value out; it stays stored with the parent's step.
                    let unanswered = crate::run::get_state(&sub.g, cp.as_ref(), &sub.cache, &cfg)
                        .await
                        .ok()
                        .flatten()
                        .is_some_and(|snap| {
                            let still: Vec<_> =
                                snap.interrupts().into_iter().map(|i| i.id).collect();
                            ids.iter().all(|id| still.contains(id))
                        });
                    let mut slot = ctx
                        .inner
                        .shared
                        .null_value
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner);
                    // Unless something else put a value there since.
                    if unanswered && slot.is_none() {
                        *slot = Some(v);
                    }
                }
                return Err(NodeError::failed(e));
            }
        };
        // Every interrupt the subgraph stopped on is the task's: several parallel nodes of the
        // subgraph may each wait for an answer, and a resume map can answer them all at once.
        if !out.interrupts.is_empty() {
            return Err(NodeError(NodeErrorKind::Interrupt(out.interrupts)));
        }
        // A run that stopped at a static breakpoint returns no interrupt: only the top level
        // swallows that pause (runtime-spec §2.6); here the parent task pauses too, and
        // resuming the parent continues the subgraph.
        if out.paused {
            return Err(NodeError(NodeErrorKind::Paused));
        }
        // The values the subgraph's nodes saw, untracked ones included: they stay within the
        // enclosing run, whose parent task takes them as its result.
        Ok(Command::from(project(&out.run_values, &ctx_schema(&ctx))))
    }
}

/// The parent's schema, captured when the subgraph node was added.
fn ctx_schema(ctx: &Context) -> Arc<crate::schema::Schema> {
    ctx.inner.parent_schema.clone()
}
