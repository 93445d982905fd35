//! antler: a stateful-agent kernel.
//!
//! This facade re-exports the workspace crates under one name and passes the
//! storage features (`sqlite`, `postgres`) through; it has no logic of its own.
//!
//! ```
//! use antler::state_reducers::{Message, merge_message_writes};
//!
//! let state = vec![Message::human("hello").with_id("m1")];
//! let merged = merge_message_writes(&state, &[vec![Message::ai("hi").with_id("m2")].into()])?;
//! assert_eq!(merged.len(), 2);
//! # Ok::<(), antler::state_reducers::Error>(())
//! ```
#![warn(missing_docs)]
// The README is part of the crate docs so that its example is compiled and run.
#![doc = include_str!("../../../README.md")]

pub use antler_checkpoint as checkpoint;
pub use antler_factory as factory;
pub use antler_graph as graph;
pub use antler_middleware as middleware;
pub use antler_state_reducers as state_reducers;
