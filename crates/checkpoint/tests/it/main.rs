//! Integration tests of antler-checkpoint: the conformance suite on every saver, mode gate,
//! corruption and format tests. One binary, one module per area.

mod memory;
mod postgres;
mod sqlite;
