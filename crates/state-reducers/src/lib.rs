//! ThreadState fields, the message model and the merge rules of the antler kernel.
#![warn(missing_docs)]
