//! Integration tests of `antler-middleware`.

mod order;
