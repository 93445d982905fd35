//! Runs of the root graph in progress, per store and thread, in this process.
//!
//! Two runs on one thread at once both extend the head they read: the thread forks without a
//! word, and with a delta channel both runs' task writes land on the same checkpoint, so a cold
//! read of one branch could show the other's writes. So a run of the root graph (and an
//! `update_state` on the root namespace) enters its thread here first, and one that finds the
//! thread entered fails with [`Error::ThreadBusy`](crate::Error::ThreadBusy) before it reads or
//! writes anything, as the reference's server refuses a second run by default. Waiting instead
//! would deadlock a node that runs its own thread again.
//!
//! The registry is process-wide and keyed by the checkpointer (the address of the
//! `Arc<dyn Checkpointer>` the graphs share) and the thread id: graphs given one checkpointer
//! are serialised, while two checkpointers, even two `SaverCheckpointer`s over one saver, or
//! two processes, are not (that needs a head-conditional put in the store). A subgraph's run
//! belongs to its enclosing run and does not enter. A stream counts as a run until it is read
//! to its end or dropped.

use std::collections::HashSet;
use std::sync::{Arc, LazyLock, Mutex, PoisonError};

use crate::checkpointer::Checkpointer;
use crate::error::{Error, Result};

static RUNNING: LazyLock<Mutex<HashSet<(usize, String)>>> = LazyLock::new(Mutex::default);

/// Held by a run (or update) while it is going; dropping it, with the run's future when a
/// stream is dropped, lets the next one in.
#[derive(Debug)]
pub(crate) struct Running {
    key: (usize, String),
}

/// Enters `thread` of `store`, or fails with `ThreadBusy` when a run is in it.
pub(crate) fn enter(store: &Arc<dyn Checkpointer>, thread: &str) -> Result<Running> {
    // The data address of the shared checkpointer: one per store object, whichever graphs
    // share it.
    let key = (Arc::as_ptr(store).cast::<()>() as usize, thread.to_owned());
    let mut running = RUNNING.lock().unwrap_or_else(PoisonError::into_inner);
    if !running.insert(key.clone()) {
        return Err(Error::ThreadBusy {
            thread: thread.to_owned(),
        });
    }
    Ok(Running { key })
}

impl Drop for Running {
    fn drop(&mut self) {
        RUNNING
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&self.key);
    }
}
