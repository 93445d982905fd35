//! The Pregel/BSP super-step runtime of antler: channels, the `StateGraph` builder, `Send`/`Command`, interrupts, durability, streaming and time travel.
//!
//! Status: this crate is part of the workspace layout but not built yet; it
//! exports nothing so that no caller can depend on functionality that does not
//! exist.
//! See `docs/ARCHITECTURE.md` for the role it will play and what it may depend on.
#![warn(missing_docs)]
