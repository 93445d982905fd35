//! Integration tests of `antler-middleware`.
#![allow(clippy::unwrap_used, reason = "a failed unwrap is a failed test")]

mod dispatch;
mod order;
