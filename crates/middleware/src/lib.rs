//! Middleware for antler agents: before/after/wrap hooks, a resolved order with stable anchors, and the model and tool interfaces the hooks wrap.
//!
//! Status: this crate is part of the workspace layout but not built yet; it
//! exports nothing so that no caller can depend on functionality that does not
//! exist.
//! See `docs/ARCHITECTURE.md` for the role it will play and what it may depend on.
#![warn(missing_docs)]
