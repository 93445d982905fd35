//! Integration tests of `antler-graph`: the runtime-spec §10 checklist, snapshot traces, faults,
//! and the reference-trace runner (issue 6).

mod checklist;
mod common;
mod crash;
mod delta;
mod interrupts;
mod laws;
mod reference_traces;
mod runs;
mod streaming;
mod subgraph;
mod traces;
