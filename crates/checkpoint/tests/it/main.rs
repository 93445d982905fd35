//! Integration tests of antler-checkpoint: the conformance suite on every saver, mode gate,
//! corruption and format tests. One binary, one module per area.
#![expect(
    clippy::unwrap_used,
    clippy::print_stderr,
    reason = "test helpers assert by unwrapping and report skipped PostgreSQL tests on stderr"
)]

mod corruption;
mod delta;
mod gate;
mod memory;
mod postgres;
mod send;
mod sqlite;
