//! The [`Middleware`] trait.

use crate::kind::{Anchors, MiddlewareId, MiddlewareKind};

/// A middleware: identity for ordering, plus hooks around the agent loop.
pub trait Middleware: Send + Sync + 'static {
    /// What this middleware is; anchors refer to kinds.
    fn kind(&self) -> MiddlewareKind;

    /// Which entry of a chain this is. Defaults to the kind alone; chains
    /// holding two middlewares of one kind label them apart.
    fn id(&self) -> MiddlewareId {
        MiddlewareId::of(self.kind())
    }

    /// Broader kinds this middleware also matches when used as an anchor
    /// (the "subclass instances match" rule of R55). Defaults to none.
    fn families(&self) -> Vec<MiddlewareKind> {
        Vec::new()
    }

    /// `@Next` / `@Prev` placement for extras (R52). Defaults to none.
    fn anchors(&self) -> Anchors {
        Anchors::NONE
    }
}
