//! Identity of middlewares: kinds (what a middleware is, used by anchors)
//! and ids (which entry of a chain it is).

use std::borrow::Cow;
use std::fmt;

/// What a middleware is: a stable type key that anchors refer to, such as
/// `ClarificationMiddleware`.
///
/// Rust has no subclassing; a middleware that should also match anchors of
/// a broader family lists that family in [`Middleware::families`](crate::Middleware::families).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MiddlewareKind(Cow<'static, str>);

impl MiddlewareKind {
    /// A kind with a static name (usable in `const` items).
    pub const fn new(name: &'static str) -> Self {
        MiddlewareKind(Cow::Borrowed(name))
    }

    /// A kind whose name is only known at run time (e.g. loaded extensions).
    pub fn owned(name: String) -> Self {
        MiddlewareKind(Cow::Owned(name))
    }

    /// The kind's name.
    pub fn name(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for MiddlewareKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl fmt::Display for MiddlewareKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

/// Which entry of a chain a middleware is: its kind plus an optional
/// instance label, for chains that hold two middlewares of one kind.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct MiddlewareId {
    kind: MiddlewareKind,
    instance: Option<Cow<'static, str>>,
}

impl MiddlewareId {
    /// The id of the only instance of `kind` in a chain.
    pub fn of(kind: MiddlewareKind) -> Self {
        MiddlewareId {
            kind,
            instance: None,
        }
    }

    /// The id of a labelled instance of `kind`.
    pub fn instance(kind: MiddlewareKind, label: impl Into<Cow<'static, str>>) -> Self {
        MiddlewareId {
            kind,
            instance: Some(label.into()),
        }
    }

    /// The kind.
    pub fn kind(&self) -> &MiddlewareKind {
        &self.kind
    }
}

impl fmt::Debug for MiddlewareId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

impl fmt::Display for MiddlewareId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match &self.instance {
            None => write!(f, "{}", self.kind),
            Some(label) => write!(f, "{}#{label}", self.kind),
        }
    }
}

/// Where an extra middleware asks to be placed relative to an anchor
/// (`@Next` / `@Prev`, kernel-spec R52).
///
/// Both fields exist so that declaring both is representable and reported
/// as the reference's error rather than made impossible silently.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Anchors {
    /// Place right after the first middleware of this kind.
    pub next: Option<MiddlewareKind>,
    /// Place right before the first middleware of this kind.
    pub prev: Option<MiddlewareKind>,
}

impl Anchors {
    /// No anchor.
    pub const NONE: Anchors = Anchors {
        next: None,
        prev: None,
    };

    /// `@Next(kind)`.
    pub fn next(kind: MiddlewareKind) -> Self {
        Anchors {
            next: Some(kind),
            prev: None,
        }
    }

    /// `@Prev(kind)`.
    pub fn prev(kind: MiddlewareKind) -> Self {
        Anchors {
            next: None,
            prev: Some(kind),
        }
    }
}

/// Kinds of the built-in middlewares that ordering rules name.
pub mod kinds {
    use super::MiddlewareKind;

    /// `ClarificationMiddleware`: always last (R51).
    pub const CLARIFICATION: MiddlewareKind = MiddlewareKind::new("ClarificationMiddleware");
    /// `SafetyFinishReasonMiddleware`.
    pub const SAFETY_FINISH_REASON: MiddlewareKind =
        MiddlewareKind::new("SafetyFinishReasonMiddleware");
    /// `ToolProgressMiddleware`.
    pub const TOOL_PROGRESS: MiddlewareKind = MiddlewareKind::new("ToolProgressMiddleware");
    /// `ToolErrorHandlingMiddleware`.
    pub const TOOL_ERROR_HANDLING: MiddlewareKind =
        MiddlewareKind::new("ToolErrorHandlingMiddleware");
    /// `TerminalResponseMiddleware`.
    pub const TERMINAL_RESPONSE: MiddlewareKind = MiddlewareKind::new("TerminalResponseMiddleware");
    /// `LLMErrorHandlingMiddleware`.
    pub const LLM_ERROR_HANDLING: MiddlewareKind =
        MiddlewareKind::new("LLMErrorHandlingMiddleware");
    /// `SystemMessageCoalescingMiddleware`.
    pub const SYSTEM_MESSAGE_COALESCING: MiddlewareKind =
        MiddlewareKind::new("SystemMessageCoalescingMiddleware");
}
