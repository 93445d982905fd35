//! Typed identifiers: nodes, tasks, interrupts, threads and checkpoints.

use std::fmt;
use std::sync::Arc;

macro_rules! string_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub struct $name(Arc<str>);

        impl serde::Serialize for $name {
            fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
                s.serialize_str(&self.0)
            }
        }
        impl<'de> serde::Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                String::deserialize(d).map(Self::from)
            }
        }

        impl $name {
            /// Wraps a string.
            pub fn new(s: impl AsRef<str>) -> Self {
                Self(Arc::from(s.as_ref()))
            }
            /// The identifier as text.
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }
        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }
        impl fmt::Debug for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({:?})", stringify!($name), &*self.0)
            }
        }
        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self::new(s)
            }
        }
        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(Arc::from(s))
            }
        }
        impl From<&$name> for $name {
            fn from(s: &$name) -> Self {
                s.clone()
            }
        }
        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_id!(
    /// The name of a node of a graph.
    NodeId
);
string_id!(
    /// Deterministic id of a task (one execution of a node in a super-step).
    TaskId
);
string_id!(
    /// Id of one `interrupt()` slot of a task; stable across re-runs of the task.
    InterruptId
);
string_id!(
    /// A conversation thread: the unit of checkpoint history.
    ThreadId
);
string_id!(
    /// A checkpoint id; ids of one process sort in creation order.
    CheckpointId
);

/// Name of the virtual entry node.
pub const START: &str = "__start__";
/// Name of the virtual exit node.
pub const END: &str = "__end__";

impl NodeId {
    /// The virtual entry node `__start__`.
    pub fn start() -> Self {
        Self::new(START)
    }
    /// The virtual exit node `__end__`.
    pub fn end() -> Self {
        Self::new(END)
    }
}

/// The NULL task id under which input-like writes (resume values, Command updates given as input) are stored.
pub(crate) const NULL_TASK_ID: &str = "00000000-0000-0000-0000-000000000000";
