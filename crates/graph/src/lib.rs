//! The Pregel/BSP super-step runtime of antler: channels, the [`StateGraph`] builder, [`Send`]/[`Command`],
//! interrupts, durability, streaming and time travel.
//!
//! A graph is a schema of typed channels ([`Key`] + [`ChannelSpec`]), nodes (async functions of a
//! [`State`] view and a [`Context`]) and edges.
//! It runs in super-steps: all tasks of a step run concurrently on the step-start state; their writes
//! are applied at the barrier in task-path order, never completion order; a checkpoint follows every step.
//! The semantics are LangGraph's (`runtime-spec.md` §2–§3, §8); see `docs/super-step.md`.
//!
//! - Channels: last value, reducer ([`ChannelSpec::reducer`], [`ChannelSpec::reducer_owned`]),
//!   delta ([`ChannelSpec::delta`], [`ChannelSpec::messages_delta`]), ephemeral, untracked, packet-only;
//!   a conflicting re-declaration is a [`BuildError`].
//! - Control flow: edges, joins, routers, [`Command`] gotos, [`Send`] fan-out, deferred nodes,
//!   [`Context::interrupt`] with [`Command::resume`], static breakpoints, subgraphs
//!   ([`StateGraph::add_subgraph`]) in their own checkpoint namespace, whose state the
//!   parent's `get_state`, `get_state_history` and `update_state` reach by that namespace.
//! - Persistence through the [`Checkpointer`] seam: [`MemoryCheckpointer`], or any
//!   `antler_checkpoint::Saver` through [`SaverCheckpointer`]; [`Durability`] sync / async / exit;
//!   time travel ([`CompiledGraph::get_state_history`], pages of it with
//!   [`CompiledGraph::get_state_history_with`] and a [`HistoryQuery`],
//!   [`RunConfig::with_checkpoint`], [`CompiledGraph::update_state`]); a per-thread hot-state cache.
//! - Streaming ([`CompiledGraph::stream`]): values, updates, custom and debug events, and on
//!   request ([`StreamModes::subgraphs`]) those of subgraph runs, tagged with their namespace.
//!
//! This crate knows channels, checkpoints and nodes; it never learns that middleware hooks exist.
//!
//! ```
//! use std::sync::Arc;
//! use antler_graph::{ChannelSpec, Key, MemoryCheckpointer, RunConfig, State, StateGraph, Update};
//!
//! const LOG: Key<Vec<String>> = Key::from_static("log");
//!
//! # tokio::runtime::Builder::new_current_thread().enable_time().build().unwrap().block_on(async {
//! let mut g = StateGraph::new();
//! g.channel(&LOG, ChannelSpec::reducer("append", Vec::new, |acc: &Vec<String>, w: &[Vec<String>]| {
//!     Ok(acc.iter().chain(w.iter().flatten()).cloned().collect())
//! }))
//! .unwrap();
//! for name in ["a", "b"] {
//!     g.add_node(name, move |_s: State, _ctx| async move { Ok(Update::new().set(&LOG, vec![name.to_owned()])) });
//!     g.add_edge("__start__", name);
//!     g.add_edge(name, "__end__");
//! }
//! let graph = g.compile().unwrap().with_checkpointer(Arc::new(MemoryCheckpointer::new()));
//! let out = graph.invoke(Update::new().set(&LOG, vec!["in".into()]), &RunConfig::new("t")).await.unwrap();
//! // a and b ran in the same step; their writes reach the reducer in task-path order.
//! assert_eq!(out.values.get(&LOG).unwrap(), &["in", "a", "b"]);
//! # });
//! ```
#![warn(missing_docs)]

mod builder;
mod channel;
mod checkpointer;
mod compiled;
mod error;
mod ids;
mod landing;
mod run;
mod running;
mod saver;
mod schema;
mod state;
mod subgraph;
mod types;

pub use builder::{Node, NodeOptions, RetryOn, RetryPolicy, RouterFn, StateGraph, node_fn};
pub use checkpointer::{
    BrokenHistory, CheckpointRecord, CheckpointTuple, Checkpointer, DeltaHistory,
    MemoryCheckpointer, PendingWrite, Scope, Source, VersionClash,
};
pub use compiled::{
    CheckpointEvent, CompiledGraph, Durability, HistoryQuery, Input, RunConfig, RunOutcome,
    StateSnapshot, StreamEvent, StreamItem, StreamModes, TaskEvent, TaskKind, TaskSnapshot,
    TaskStatus,
};
pub use error::{BoxError, BuildError, Error, ErrorKind, Result};
pub use ids::{CheckpointId, END, InterruptId, NodeId, START, TaskId, ThreadId};
pub use saver::{RELATIVE_RECORD_V, RelativeRecordError, SaverCheckpointer};
pub use schema::{ChannelSpec, DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT};
pub use state::{Key, State, Update};
pub use types::{Command, Context, Goto, Interrupt, NodeError, Resume, Send};
