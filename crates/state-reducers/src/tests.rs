//! Unit tests, one per rule of kernel-spec §A; the reference fixtures run in
//! `tests/it`.
