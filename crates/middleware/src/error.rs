//! The crate's error type.
//!
//! Ordering errors reproduce the reference's texts (they are user-facing
//! and pinned by tests); they are raised at build time, never while a chain
//! runs.

/// Result alias with the crate's [`Error`].
pub type Result<T, E = Error> = std::result::Result<T, E>;

/// Coarse classification of an [`Error`], for callers that branch.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum ErrorKind {
    /// The requested order cannot be built.
    Order,
    /// A model, tool or hook failed while running.
    Runtime,
    /// The agent graph the chain declares cannot be built (two middlewares contribute one
    /// state field with different kinds, say): the chain's order is fine, its parts clash.
    Graph,
}

/// Errors of building or running a middleware chain.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An extra declares both `Next` and `Prev` (kernel-spec R53).
    #[error("{name} cannot have both @Next and @Prev")]
    BothAnchors {
        /// The extra's name.
        name: String,
    },
    /// A middleware was added while one with its id is in the chain already: replacing
    /// the earlier one would drop configuration without a word, as keeping both would make
    /// the id ambiguous (the reference's agent refuses duplicate middlewares too). Two
    /// instances of one kind take distinct instance labels.
    #[error(
        "middleware {id} is already in the chain; give a second instance of its kind its own label"
    )]
    DuplicateMiddleware {
        /// The repeated id.
        id: String,
    },
    /// A middleware's kind name is empty or contains `#`, which separates an id's instance
    /// label: its id would print like another one (kind `A#x` and instance `x` of `A`).
    #[error("middleware kind name {name:?} is not usable: it must be non-empty and contain no '#'")]
    InvalidKindName {
        /// The kind name.
        name: String,
    },
    /// Two extras of one call have the same id: the chain is keyed by id, so one would
    /// silently replace the other.
    #[error("extra middleware {id} is given twice")]
    DuplicateExtra {
        /// The repeated id.
        id: String,
    },
    /// Two extras claim the same anchor in the same direction (R53); the text names the extra
    /// that claimed it again first, as the reference's does.
    #[error("Conflict: {second} and {first} both @{direction}({anchor})")]
    DuplicateAnchor {
        /// The extra that claimed the anchor first.
        first: String,
        /// The extra that claimed it again.
        second: String,
        /// `Next` or `Prev`.
        direction: &'static str,
        /// The anchor's name.
        anchor: String,
    },
    /// Two extras anchor to one middleware in opposite directions (R53); the text names the
    /// later extra first, as the reference's does.
    #[error(
        "Conflict: {second} @{second_direction}({anchor}) and {first} @{first_direction}({anchor}) — use cross-anchoring between extras instead"
    )]
    OppositeAnchors {
        /// The extra that claimed the anchor first.
        first: String,
        /// Its direction.
        first_direction: &'static str,
        /// The extra that claimed the opposite direction.
        second: String,
        /// Its direction.
        second_direction: &'static str,
        /// The anchor's name.
        anchor: String,
    },
    /// Extras anchor to each other in a cycle (R55).
    #[error("Circular dependency among extra middlewares: {}", .names.join(", "))]
    CircularAnchors {
        /// The extras involved.
        names: Vec<String>,
    },
    /// Anchors that match no middleware in the chain (R55, R57).
    #[error("Cannot resolve positions for {} — anchors {} not found in chain", .names.join(", "), .anchors.join(", "))]
    UnresolvedAnchors {
        /// The extras left unplaced.
        names: Vec<String>,
        /// Their anchors.
        anchors: Vec<String>,
    },
    /// `insert_before` / `insert_after` named an anchor not in the chain.
    #[error("anchor {anchor} is not in the middleware chain")]
    AnchorNotFound {
        /// The missing anchor.
        anchor: String,
    },
    /// A tool returned a command the tools step cannot carry out (a resume, an address to the
    /// parent graph, a `jump_to` write, or a goto anywhere but the end of the run, R49); it is
    /// the source of the tools node's failure.
    #[error("{detail}")]
    RefusedToolCommand {
        /// What was refused.
        detail: String,
    },
    /// A middleware comes after the clarification middleware, which must be the last (R119).
    #[error("ClarificationMiddleware must be the last middleware, but {after} comes after it")]
    ClarificationNotLast {
        /// The first middleware after it.
        after: String,
    },
    /// A declared ordering constraint is violated (R124).
    #[error(
        "{outer} (index {outer_index}) must come before {inner} (index {inner_index}): {reason} (contributed by {contributor})"
    )]
    OrderingViolation {
        /// The middleware that must be outer.
        outer: String,
        /// Its index.
        outer_index: usize,
        /// The middleware that must be inner.
        inner: String,
        /// Its index.
        inner_index: usize,
        /// Why the order matters.
        reason: String,
        /// The extension that contributed the constraint, or `core middleware order`.
        contributor: String,
    },
    /// A declared [`SequenceConstraint`](crate::SequenceConstraint) does not hold (R120,
    /// R121): `found` (the entry at `index`) breaks the sequence of `expected`.
    #[error(
        "{} must be adjacent in this order{}: {found} at index {index} breaks it: {reason} (contributed by {contributor})",
        .expected.join(", "),
        if *.at_end { " and end the chain" } else { "" }
    )]
    SequenceViolation {
        /// The kinds of the sequence, in order.
        expected: Vec<String>,
        /// Whether the sequence must end the chain.
        at_end: bool,
        /// Where the sequence breaks.
        index: usize,
        /// The entry there.
        found: String,
        /// Why the order matters.
        reason: String,
        /// The extension that placed the breaking entry, else the constraint's contributor,
        /// or `core middleware order`.
        contributor: String,
    },
    /// The agent graph could not be declared (a conflicting state field, …).
    #[error("agent graph: {0}")]
    Graph(#[source] antler_graph::BuildError),
    /// A hook jumped somewhere it did not declare in `can_jump_to`.
    #[error("middleware {middleware} jumped from {hook} to `{target}` without declaring it")]
    UndeclaredJump {
        /// The middleware.
        middleware: String,
        /// The hook.
        hook: &'static str,
        /// The target.
        target: &'static str,
    },
    /// A hook wrote the `jump_to` channel in its update instead of returning
    /// `HookUpdate::jump_to`, which is where jumps are checked against `can_jump_to`.
    #[error(
        "middleware {middleware} wrote `jump_to` in its {hook} update; return the jump in HookUpdate::jump_to"
    )]
    JumpWrittenDirectly {
        /// The middleware.
        middleware: String,
        /// The hook.
        hook: &'static str,
    },
    /// A chat model's stream ended without a message. (A model's, a tool's or a hook's own
    /// failure is passed on as it is, unwrapped: a wrapper finds it with
    /// `NodeError::failure`, a caller as the source of the graph's `Error::NodeFailed`.)
    #[error("model call failed: {0}")]
    Model(#[source] Box<dyn std::error::Error + Send + Sync>),
}

impl Error {
    /// The coarse kind of this error.
    pub fn kind(&self) -> ErrorKind {
        match self {
            Error::Model(_)
            | Error::UndeclaredJump { .. }
            | Error::JumpWrittenDirectly { .. }
            | Error::RefusedToolCommand { .. } => ErrorKind::Runtime,
            Error::Graph(_) => ErrorKind::Graph,
            // Listed, not a wildcard: a new variant must be filed on purpose.
            Error::BothAnchors { .. }
            | Error::DuplicateMiddleware { .. }
            | Error::DuplicateExtra { .. }
            | Error::InvalidKindName { .. }
            | Error::DuplicateAnchor { .. }
            | Error::OppositeAnchors { .. }
            | Error::CircularAnchors { .. }
            | Error::UnresolvedAnchors { .. }
            | Error::AnchorNotFound { .. }
            | Error::ClarificationNotLast { .. }
            | Error::OrderingViolation { .. }
            | Error::SequenceViolation { .. } => ErrorKind::Order,
        }
    }
}
