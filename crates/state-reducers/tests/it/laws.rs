//! Property tests of the reducer laws.
