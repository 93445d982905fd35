//! Integration tests of antler-checkpoint: the conformance suite on every saver, mode gate,
//! corruption and format tests. One binary, one module per area.

mod corruption;
mod delta;
mod gate;
mod memory;
mod postgres;
mod sqlite;
