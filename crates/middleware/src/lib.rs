//! Middleware for antler agents: before/after/wrap hooks, a resolved order
//! with stable anchors, and the model and tool interfaces the hooks wrap.
//!
//! In this kernel middleware order is program semantics, so a chain is
//! built once into an immutable, resolved [`Chain`] whose `Debug` prints the
//! order. Insertion always names a place: an anchor
//! ([`ChainBuilder::insert_after`], the `@Next`/`@Prev` algorithm of
//! [`ChainBuilder::insert_extras`]) or a semantic placement with fallbacks
//! ([`ChainBuilder::place`]).
//!
//! ```text
//!              request                                   response
//!   ──────────────────────────────▶            ◀──────────────────────────────
//!   ┌──────────────────────────── m0 ───────────────────────────────────────┐
//!   │ ┌────────────────────────── m1 ─────────────────────────────────────┐ │
//!   │ │ ┌──────────────────────── m2 ───────────────────────────────────┐ │ │
//!   │ │ │                     model / tool                              │ │ │
//!   │ │ └───────────────────────────────────────────────────────────────┘ │ │
//!   │ └───────────────────────────────────────────────────────────────────┘ │
//!   └───────────────────────────────────────────────────────────────────────┘
//!   before_agent, before_model: m0 → m1 → m2     (first to last)
//!   after_model, after_agent:   m2 → m1 → m0     (last to first)
//!   wrap_model_call, wrap_tool_call: m0 outermost, m2 closest to the model
//! ```
//!
//! The crate never names a checkpoint backend or the factory.
//!
//! # Example
//!
//! ```
//! use std::sync::Arc;
//! use antler_middleware::{Anchors, ChainBuilder, Middleware, MiddlewareKind, NodeHooks};
//!
//! struct Plain(&'static str);
//! impl Middleware for Plain {
//!     fn kind(&self) -> MiddlewareKind { MiddlewareKind::new(self.0) }
//!     fn node_hooks(&self) -> NodeHooks { NodeHooks::NONE }
//! }
//! struct AfterAudit;
//! impl Middleware for AfterAudit {
//!     fn kind(&self) -> MiddlewareKind { MiddlewareKind::new("AfterAudit") }
//!     fn anchors(&self) -> Anchors { Anchors::next(MiddlewareKind::new("Audit")) }
//!     fn node_hooks(&self) -> NodeHooks { NodeHooks::NONE }
//! }
//!
//! let mut b = ChainBuilder::new();
//! b.push(Arc::new(Plain("Audit")))
//!     .push(Arc::new(Plain("Title")))
//!     .push(Arc::new(Plain("ClarificationMiddleware")));
//! b.insert_extras(vec![Arc::new(Plain("Extra")), Arc::new(AfterAudit)])?;
//! let chain = b.build()?;
//! let order: Vec<String> = chain.ids().iter().map(|id| id.to_string()).collect();
//! assert_eq!(order, ["Audit", "AfterAudit", "Title", "Extra", "ClarificationMiddleware"]);
//! # Ok::<(), antler_middleware::Error>(())
//! ```
#![warn(missing_docs)]

mod agent;
#[doc = include_str!("../../../docs/middleware.md")]
pub mod guide {}
mod chain;
mod error;
mod hook;
mod kind;
mod model;
mod tool;

pub use agent::{AgentGraph, JUMP_TO, MESSAGES, MODEL_NODE, TOOLS_NODE};
pub use chain::{
    Chain, ChainBuilder, OrderingConstraint, PlacementDiagnostic, PlacementRule, SequenceConstraint,
};
pub use error::{Error, ErrorKind, Result};
pub use hook::{
    HookUpdate, JumpTo, Middleware, ModelNext, NodeHook, NodeHooks, StateField, ToolNext,
};
pub use kind::{Anchors, MiddlewareId, MiddlewareKind, kinds};
pub use model::{ChatModel, ModelChunk, ModelRequest, ModelResponse, ModelSettings, ToolSchema};
pub use tool::{Tool, ToolOutcome, ToolRequest};
