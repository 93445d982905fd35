//! The crate's error type.
//!
//! Texts that the reference implementation prints are reproduced byte for
//! byte (they are part of the observable behaviour callers and fixtures
//! compare against); antler's own errors follow the house style (lowercase,
//! naming the offending value).

use std::fmt;

/// Result alias with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Which argument of the pairwise reducer was present in a null-write error.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The accumulated list was non-empty, so only `left` counts as received.
    Left,
    /// The accumulated list was empty.
    Right,
}

impl fmt::Display for Side {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Side::Left => "left",
            Side::Right => "right",
        })
    }
}

/// Coarse classification of an [`Error`], for callers that branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// Two writes disagree and the rule refuses to pick one (fail closed).
    Conflict,
    /// A write refers to something that does not exist.
    NotFound,
    /// A value does not have the shape the rule needs.
    InvalidInput,
}

/// Every way a reducer or a coercion can fail.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// Two different sandbox ids were written to one thread (kernel-spec R6).
    #[error("Conflicting sandbox state updates: {} != {}", py_repr(.existing.as_deref()), py_repr(.new.as_deref()))]
    SandboxConflict {
        /// The id already in the state (`None` for null or missing).
        existing: Option<String>,
        /// The id of the incoming write.
        new: Option<String>,
    },
    /// A `RemoveMessage` named an id that is not in the list (kernel-spec R20).
    #[error("Attempting to delete a message with an ID that doesn't exist ('{id}')")]
    MissingMessageId {
        /// The id that was not found.
        id: String,
    },
    /// A null write reached the message reducer (kernel-spec R21).
    #[error(
        "Must specify non-null arguments for both 'left' and 'right'. Only received: '{side}'."
    )]
    NullWrite {
        /// Which side the reference reports as received.
        side: Side,
    },
    /// More than one `Overwrite` in one super-step for one channel (kernel-spec R42).
    #[error("Can receive only one Overwrite value per super-step.")]
    MultipleOverwrites,
    /// Two writes to a last-value field within one super-step (kernel-spec R3).
    #[error(
        "invalid concurrent update: field `{field}` can receive only one value per step, got {count}"
    )]
    InvalidConcurrentUpdate {
        /// The field written more than once.
        field: &'static str,
        /// How many writes it received.
        count: usize,
    },
    /// A value could not be coerced into a message (kernel-spec R18).
    #[error("malformed message: {reason}")]
    MalformedMessage {
        /// What is wrong with it.
        reason: String,
    },
    /// A value of a `ThreadState` field does not have the field's shape.
    #[error("malformed value for field `{field}`: {reason}")]
    MalformedField {
        /// The field whose value is malformed.
        field: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// A skill-context entry without a `path` (kernel-spec R16: a hard error).
    #[error("skill context entry has no `path`")]
    MissingSkillPath,
}

impl Error {
    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::SandboxConflict { .. }
            | Error::MultipleOverwrites
            | Error::InvalidConcurrentUpdate { .. } => ErrorKind::Conflict,
            Error::MissingMessageId { .. } => ErrorKind::NotFound,
            Error::NullWrite { .. }
            | Error::MalformedMessage { .. }
            | Error::MalformedField { .. }
            | Error::MissingSkillPath => ErrorKind::InvalidInput,
        }
    }

    pub(crate) fn malformed(reason: impl Into<String>) -> Self {
        Error::MalformedMessage {
            reason: reason.into(),
        }
    }
}

/// Renders an optional string the way Python's `repr` does for `str | None`,
/// because the sandbox conflict text is compared byte for byte.
fn py_repr(value: Option<&str>) -> String {
    match value {
        None => "None".to_owned(),
        Some(s) => crate::pytext::repr_str(s),
    }
}
