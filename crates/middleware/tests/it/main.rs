//! Integration tests of `antler-middleware`.

mod dispatch;
mod order;
