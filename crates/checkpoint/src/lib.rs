//! Durable thread state for antler: the checkpoint model, the `Saver` trait and the memory, SQLite and PostgreSQL savers, in full and delta channel modes.
//!
//! Status: this crate is part of the workspace layout but not built yet; it
//! exports nothing so that no caller can depend on functionality that does not
//! exist.
//! See `docs/ARCHITECTURE.md` for the role it will play and what it may depend on.
#![warn(missing_docs)]
