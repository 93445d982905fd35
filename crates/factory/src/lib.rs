//! Agent factories for antler: the SDK factory and the lead-agent factory that assemble model, tools and middleware into a compiled graph.
//!
//! Status: this crate is part of the workspace layout but not built yet; it
//! exports nothing so that no caller can depend on functionality that does not
//! exist.
//! See `docs/ARCHITECTURE.md` for the role it will play and what it may depend on.
#![warn(missing_docs)]
