//! Store operations that can outlive the call that started them.
//!
//! A run whose stream is dropped stops at its next await, but what it already handed to the
//! store keeps going: an async-durability put runs as its own task, an exit-durability run
//! flushes its buffered checkpoint from `Drop`, and a saver may finish an operation on a
//! blocking thread after the future awaiting it is gone. The reference finishes those saves
//! before closing the stream returns; `Drop` cannot wait, so instead every store operation of a
//! run holds a [`Landing`] guard on its thread until it has finished, and the next call that
//! reads the thread's head ([`settle`]) waits for the guards first. Without that, the next run
//! reads the previous head and the late operation lands beside it (a second branch, a version
//! clash, or a task write that wins over the new run's own).
//!
//! The registry is process-wide and keyed by thread id alone: a subgraph's run, another
//! compiled graph on the same store and the enclosing run all count. Waiting on an unrelated
//! store's thread of the same name costs only the wait.

use std::collections::HashMap;
use std::sync::{LazyLock, Mutex, PoisonError};

use tokio::sync::watch;

/// Per thread: how many store operations are still landing. An entry exists only while the
/// count is above zero; removing it closes the channel, which also releases the waiters.
static LANDING: LazyLock<Mutex<HashMap<String, watch::Sender<usize>>>> =
    LazyLock::new(Mutex::default);

/// Held by a store operation until it has finished (dropped with the task that runs it).
#[derive(Debug)]
pub(crate) struct Landing {
    thread: String,
}

/// Counts one store operation on `thread` as landing. Taken synchronously, before the
/// operation is handed to a task, so that no [`settle`] can slip in between.
pub(crate) fn hold(thread: &str) -> Landing {
    let mut map = LANDING.lock().unwrap_or_else(PoisonError::into_inner);
    match map.get(thread) {
        Some(tx) => tx.send_modify(|n| *n += 1),
        None => {
            map.insert(thread.to_owned(), watch::Sender::new(1));
        }
    }
    Landing {
        thread: thread.to_owned(),
    }
}

impl Drop for Landing {
    fn drop(&mut self) {
        let mut map = LANDING.lock().unwrap_or_else(PoisonError::into_inner);
        let mut done = false;
        if let Some(tx) = map.get(&self.thread) {
            tx.send_modify(|n| {
                *n = n.saturating_sub(1);
                done = *n == 0;
            });
        }
        if done {
            map.remove(&self.thread);
        }
    }
}

/// Waits until no store operation is landing on `thread`.
pub(crate) async fn settle(thread: &str) {
    let rx = LANDING
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .get(thread)
        .map(watch::Sender::subscribe);
    if let Some(mut rx) = rx {
        // Closed (the last guard removed the entry) counts as landed too.
        let _ = rx.wait_for(|n| *n == 0).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn settle_waits_for_every_guard_of_the_thread_only() {
        let (a, b) = (hold("landing-t1"), hold("landing-t1"));
        let other = hold("landing-t2");
        let waiter = tokio::spawn(async { settle("landing-t1").await });
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(a);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "one guard still holds");
        drop(b);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("released once the last guard goes")
            .expect("no panic");
        // Another thread's guard does not hold this one up.
        settle("landing-t1").await;
        drop(other);
        settle("landing-t2").await;
        assert!(
            !LANDING
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .contains_key("landing-t1")
        );
    }
}
