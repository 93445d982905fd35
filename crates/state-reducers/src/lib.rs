//! ThreadState fields, the message model and the merge rules of the antler
//! kernel (kernel-spec §A).
//!
//! Many tasks of one super-step may write the same thread state; this crate
//! holds the rules that merge those writes at the step barrier without
//! conflicts or lost data:
//!
//! - [`Message`]: LangChain's message model, serialising to the same JSON
//!   dict shape, with coercion of message-likes ([`Message::from_json`],
//!   [`MessageWrite::from_json`]).
//! - The message reducer, with one algorithm behind the pairwise
//!   [`add_messages`] and the linear-time batch [`merge_message_writes`]:
//!   id assignment, replacement at the latest position, deferred removal of
//!   every position of an id, the remove-all sentinel, and fail-closed
//!   deletion of a missing id.
//! - One reducer per [`ThreadState`] field ([`merge_sandbox`],
//!   [`merge_artifacts`], [`merge_delegations`], …), the [`Overwrite`]
//!   marker ([`fold_reducer_writes`]) and a step-barrier merge of a whole
//!   state ([`apply_updates`]).
//! - The subagent status contract ([`read_subagent_result_metadata`]) and
//!   head/tail text bounding ([`bound_head_tail`]).
//!
//! The crate is synchronous and does no IO: it never knows about async
//! runtimes, storage or graphs.
//!
//! # Example
//!
//! ```
//! use antler_state_reducers::{Error, Message, MessageWrite, merge_message_writes};
//!
//! let state = vec![Message::human("hi").with_id("m1"), Message::ai("hello").with_id("m2")];
//! let writes = vec![
//!     // Replace m2 in place, append m3.
//!     MessageWrite::from(vec![Message::ai("hello!").with_id("m2"), Message::human("bye").with_id("m3")]),
//!     // Delete m1.
//!     MessageWrite::from(Message::remove("m1")),
//! ];
//! let merged = merge_message_writes(&state, &writes)?;
//! let ids: Vec<_> = merged.iter().filter_map(Message::id).collect();
//! assert_eq!(ids, ["m2", "m3"]);
//!
//! // Deleting an id that does not exist fails closed.
//! let err = merge_message_writes(&state, &[Message::remove("nope").into()]).unwrap_err();
//! assert_eq!(err.to_string(), "Attempting to delete a message with an ID that doesn't exist ('nope')");
//! assert!(matches!(err, Error::MissingMessageId { .. }));
//! # Ok::<(), Error>(())
//! ```
#![warn(missing_docs)]

mod canonical;
mod channel;
mod coerce;
mod error;
mod fields;
mod message;
mod messages;
mod pytext;
mod state;
mod subagent;
mod text;

#[cfg(test)]
mod tests;

pub use channel::{ChannelWrite, Overwrite, fold_reducer_writes, overwrite_marker};
pub use error::{Error, ErrorKind, Result, Side};
pub use fields::{
    BackgroundTask, DELEGATION_LEDGER_MAX, DelegationEntry, GoalState, LoadedAt, PromotedState,
    SKILL_CONTEXT_MAX, SKILL_DESCRIPTION_MAX, SandboxState, SkillEntry, TERMINAL_STATUSES,
    ThreadData, Todo, ViewedImage, ViewedImages, is_terminal_status, merge_artifacts,
    merge_delegations, merge_goal, merge_promoted, merge_sandbox, merge_skill_context, merge_todos,
    merge_viewed_images,
};
pub use message::{Content, InvalidToolCall, Message, MessageType, REMOVE_ALL_MESSAGES, ToolCall};
pub use messages::{
    DecodeError, IdSource, MessageIndex, MessageWrite, UuidV4, add_messages, add_messages_with,
    decode_messages, merge_message_writes, merge_message_writes_indexed,
    merge_message_writes_owned, merge_message_writes_with,
};
pub use state::{
    THREAD_STATE_REDUCER_FIELDS, ThreadState, ThreadStateUpdate, apply_updates, field,
};
pub use subagent::{
    LEGACY_MAX_TURNS_STATUS, SUBAGENT_STOP_REASONS, SUBAGENT_TEXT_MAX, SubagentResult,
    read_subagent_result_metadata,
};
pub use text::{HEAD_TAIL_MARKER, bound_head_tail};
