//! The `ThreadState` schema (kernel-spec R1–R5) and its step-barrier merge.
//!
//! [`ThreadState`] is the typed value of a DeerFlow thread. A super-step's
//! writes arrive as [`ThreadStateUpdate`]s in task order; [`apply_updates`]
//! merges them the way the graph runtime does at the barrier: reducer fields
//! fold every write left to right, last-value fields accept one write per
//! step and fail with [`Error::InvalidConcurrentUpdate`] on two.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::channel::{ChannelWrite, fold_reducer_writes};
use crate::error::{Error, Result};
use crate::fields::{
    BackgroundTask, DelegationEntry, GoalState, PromotedState, SandboxState, SkillEntry,
    ThreadData, Todo, ViewedImages, merge_artifacts, merge_delegations, merge_goal, merge_promoted,
    merge_sandbox, merge_skill_context, merge_todos, merge_viewed_images,
};
use crate::message::Message;
use crate::messages::{MessageWrite, merge_message_writes_owned};

/// Field names of the schema, the only place they are spelled out.
pub mod field {
    /// `messages`
    pub const MESSAGES: &str = "messages";
    /// `jump_to` (ephemeral control value, never persisted)
    pub const JUMP_TO: &str = "jump_to";
    /// `structured_response`
    pub const STRUCTURED_RESPONSE: &str = "structured_response";
    /// `sandbox`
    pub const SANDBOX: &str = "sandbox";
    /// `thread_data`
    pub const THREAD_DATA: &str = "thread_data";
    /// `title`
    pub const TITLE: &str = "title";
    /// `artifacts`
    pub const ARTIFACTS: &str = "artifacts";
    /// `todos`
    pub const TODOS: &str = "todos";
    /// `goal`
    pub const GOAL: &str = "goal";
    /// `uploaded_files`
    pub const UPLOADED_FILES: &str = "uploaded_files";
    /// `viewed_images`
    pub const VIEWED_IMAGES: &str = "viewed_images";
    /// `promoted`
    pub const PROMOTED: &str = "promoted";
    /// `delegations`
    pub const DELEGATIONS: &str = "delegations";
    /// `skill_context`
    pub const SKILL_CONTEXT: &str = "skill_context";
    /// `summary_text`
    pub const SUMMARY_TEXT: &str = "summary_text";
    /// `background_tasks`
    pub const BACKGROUND_TASKS: &str = "background_tasks";
}

/// The reducer-backed fields (`THREAD_STATE_REDUCER_FIELDS`, R5). State
/// edits that mean "replace" must wrap values for these in an
/// [`Overwrite`](crate::Overwrite).
pub const THREAD_STATE_REDUCER_FIELDS: [&str; 9] = [
    field::MESSAGES,
    field::SANDBOX,
    field::ARTIFACTS,
    field::TODOS,
    field::GOAL,
    field::VIEWED_IMAGES,
    field::PROMOTED,
    field::DELEGATIONS,
    field::SKILL_CONTEXT,
];

/// A stored `null` in a list field reads as the empty list, which is what an
/// `Overwrite(None)` leaves there (docs/reducers.md): a state the reference
/// wrote with a null list stays readable instead of failing as a whole.
fn null_as_empty<'de, D, T>(d: D) -> std::result::Result<T, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(d)?.unwrap_or_default())
}

/// A field that is present, `null` included: `Some(None)` for `null` (a
/// missing field is `None` through the struct's `default`).
fn present<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Ok(Some(Option::<T>::deserialize(d)?))
}

/// The persisted state of a DeerFlow thread (R2). `None` means the field was
/// never written (or, except for `promoted`, written `null`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ThreadState {
    /// The conversation (message reducer).
    pub messages: Vec<Message>,
    /// Structured output of the agent, if it produces one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub structured_response: Option<Value>,
    /// Sandbox binding (`merge_sandbox`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<SandboxState>,
    /// Workspace folders (last value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub thread_data: Option<ThreadData>,
    /// Thread title (last value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// Output files (`merge_artifacts`).
    #[serde(deserialize_with = "null_as_empty")]
    pub artifacts: Vec<String>,
    /// Todo list (`merge_todos`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub todos: Option<Vec<Todo>>,
    /// Goal (`merge_goal`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub goal: Option<GoalState>,
    /// Uploaded files (last value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub uploaded_files: Option<Vec<Map<String, Value>>>,
    /// Viewed images (`merge_viewed_images`).
    #[serde(deserialize_with = "null_as_empty")]
    pub viewed_images: ViewedImages,
    /// Deferred-tool promotions (`merge_promoted`): `None` never written,
    /// `Some(None)` written `null`. The two differ here, unlike in the other
    /// optional fields: a channel holding `null` passes the next write through
    /// the reducer (R42), and `merge_promoted(null, new)` de-duplicates `new`'s
    /// names and keeps `null` for an empty `{}`, where an empty channel stores
    /// the first write as given.
    #[serde(skip_serializing_if = "Option::is_none", deserialize_with = "present")]
    pub promoted: Option<Option<PromotedState>>,
    /// Delegation ledger (`merge_delegations`).
    #[serde(deserialize_with = "null_as_empty")]
    pub delegations: Vec<DelegationEntry>,
    /// Skill references (`merge_skill_context`).
    #[serde(deserialize_with = "null_as_empty")]
    pub skill_context: Vec<SkillEntry>,
    /// Summary of compacted history (last value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub summary_text: Option<String>,
    /// Background task statuses (last value).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub background_tasks: Option<Vec<BackgroundTask>>,
}

/// One task's writes to a [`ThreadState`]; `None` leaves a field untouched.
///
/// Reducer fields take a [`ChannelWrite`] (a value for the reducer, or an
/// overwrite); last-value fields take the new value, where an inner `None`
/// writes `null`.
#[derive(Clone, Debug, Default, PartialEq)]
#[allow(
    missing_docs,
    reason = "each field mirrors the ThreadState field of the same name"
)]
pub struct ThreadStateUpdate {
    pub messages: Option<ChannelWrite<MessageWrite>>,
    pub structured_response: Option<Option<Value>>,
    pub sandbox: Option<ChannelWrite<Option<SandboxState>>>,
    pub thread_data: Option<Option<ThreadData>>,
    pub title: Option<Option<String>>,
    pub artifacts: Option<ChannelWrite<Option<Vec<String>>>>,
    pub todos: Option<ChannelWrite<Option<Vec<Todo>>>>,
    pub goal: Option<ChannelWrite<Option<GoalState>>>,
    pub uploaded_files: Option<Option<Vec<Map<String, Value>>>>,
    pub viewed_images: Option<ChannelWrite<Option<ViewedImages>>>,
    pub promoted: Option<ChannelWrite<Option<PromotedState>>>,
    pub delegations: Option<ChannelWrite<Option<Vec<DelegationEntry>>>>,
    pub skill_context: Option<ChannelWrite<Option<Vec<SkillEntry>>>>,
    pub summary_text: Option<Option<String>>,
    pub background_tasks: Option<Option<Vec<BackgroundTask>>>,
}

/// Merges one super-step's updates (in task order) into `state`.
///
/// Fails without partial effects: on error the caller still owns its
/// original state only if it passed a clone, so the graph runtime applies a
/// step to a copy and commits it at the barrier.
///
/// `messages` follows the *full* channel's rules: writes before an `Overwrite`
/// still go through the reducer (so their errors surface), as the reference's
/// `BinaryOperatorAggregate` folds them, and ids are random UUIDs. A *delta*
/// channel drops a step's other writes beside an `Overwrite` (runtime-spec
/// §5.1) and takes its ids from the runtime: the graph's delta channel
/// implements that, not this function.
pub fn apply_updates(
    mut state: ThreadState,
    updates: Vec<ThreadStateUpdate>,
) -> Result<ThreadState> {
    macro_rules! collect {
        ($f:ident) => {
            updates
                .iter()
                .filter_map(|u| u.$f.clone())
                .collect::<Vec<_>>()
        };
    }
    macro_rules! last_value {
        ($f:ident, $name:expr) => {{
            let mut writes = collect!($f);
            match writes.len() {
                0 => {}
                1 => state.$f = writes.pop().flatten(),
                count => {
                    return Err(Error::InvalidConcurrentUpdate {
                        field: $name,
                        count,
                    });
                }
            }
        }};
    }
    // Fields whose reference type has an empty value (list, map) start from
    // it, so their first write already goes through the reducer.
    macro_rules! always_present {
        ($f:ident, $merge:expr) => {{
            let current = std::mem::take(&mut state.$f);
            let (value, _) = fold_reducer_writes(Some(Some(current)), collect!($f), |a, b| {
                Ok(Some($merge(a, b)))
            })?;
            state.$f = value.flatten().unwrap_or_default();
        }};
    }
    // Optional fields start empty: the first write seeds them.
    macro_rules! optional {
        ($f:ident, $merge:expr) => {{
            let current = state.$f.take().map(Some);
            let (value, _) = fold_reducer_writes(current, collect!($f), $merge)?;
            state.$f = value.flatten();
        }};
    }

    let message_writes: Vec<ChannelWrite<MessageWrite>> = collect!(messages);
    if !message_writes.is_empty() {
        state.messages = fold_message_writes(std::mem::take(&mut state.messages), message_writes)?;
    }
    last_value!(structured_response, field::STRUCTURED_RESPONSE);
    optional!(sandbox, merge_sandbox);
    last_value!(thread_data, field::THREAD_DATA);
    last_value!(title, field::TITLE);
    always_present!(artifacts, merge_artifacts);
    optional!(todos, |a, b| Ok(merge_todos(a, b)));
    optional!(goal, |a, b| Ok(merge_goal(a, b)));
    last_value!(uploaded_files, field::UPLOADED_FILES);
    always_present!(viewed_images, merge_viewed_images);
    // `promoted` keeps a written `null` apart from an empty channel (see the
    // field): the fold starts from what the field holds, `null` included.
    let (promoted, _) =
        fold_reducer_writes(state.promoted.take(), collect!(promoted), merge_promoted)?;
    state.promoted = promoted;
    always_present!(delegations, merge_delegations);
    always_present!(skill_context, merge_skill_context);
    last_value!(summary_text, field::SUMMARY_TEXT);
    last_value!(background_tasks, field::BACKGROUND_TASKS);
    Ok(state)
}

/// The messages channel: plain writes batch through the message reducer; an
/// overwrite replaces the list and the step's later plain writes are ignored.
fn fold_message_writes(
    state: Vec<Message>,
    writes: Vec<ChannelWrite<MessageWrite>>,
) -> Result<Vec<Message>> {
    let mut acc = state;
    let mut pending: Vec<MessageWrite> = Vec::new();
    let mut seen_overwrite = false;
    for write in writes {
        match write {
            ChannelWrite::Value(_) if seen_overwrite => {}
            ChannelWrite::Value(w) => pending.push(w),
            ChannelWrite::Overwrite(w) => {
                if seen_overwrite {
                    return Err(Error::MultipleOverwrites);
                }
                seen_overwrite = true;
                // Writes before the overwrite still run, so their errors surface.
                merge_message_writes_owned(acc, std::mem::take(&mut pending))?;
                // The replacement is stored verbatim, without the reducer; an
                // overwrite with `null` empties the list.
                acc = match w {
                    MessageWrite::Null => Vec::new(),
                    MessageWrite::Messages(ms) => ms,
                };
            }
        }
    }
    merge_message_writes_owned(acc, pending)
}
