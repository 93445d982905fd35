//! Channel kinds and their update / consume / finish / checkpoint rules (runtime-spec §3).
//!
//! Channels are internal: users pick a kind through [`crate::ChannelSpec`]; the graph adds
//! trigger channels (`branch:to:<node>`), join barriers and the `Send` topic itself.

use std::any::Any;
use std::collections::BTreeSet;
use std::sync::Arc;

use serde_json::Value as Json;

use antler_state_reducers::Message;

use crate::error::{BoxError, Error, Result};
use crate::state::{Val, Write};

/// What a reducer keeps beside the value between steps (the message reducer's id index), so
/// that a step costs time in its writes, not in the value. `None` after the value was replaced
/// any other way; reducers must then rebuild it from the value.
pub(crate) type Aux = Option<Arc<dyn Any + Send + Sync>>;

/// The erased reducer of a reducer channel: folds a batch of writes into the value.
pub(crate) type ReduceFn =
    Arc<dyn Fn(Val, &[Val], &mut Aux) -> std::result::Result<Val, BoxError> + Send + Sync>;

/// One channel of a running graph.
pub(crate) trait Channel: Send + Sync {
    /// The value, when available.
    fn get(&self) -> Option<&Val>;
    /// Applies one step's writes (all of them, in task order). Returns whether the channel changed.
    fn update(&mut self, writes: &[&Write]) -> Result<bool>;
    /// Called on trigger channels of executed tasks; barriers reset here.
    fn consume(&mut self) -> bool {
        false
    }
    /// Called when nothing will trigger any more (tentative last step).
    fn finish(&mut self) -> bool {
        false
    }
    /// Stored form, or `None` when the channel stores nothing.
    fn checkpoint(&self, ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>>;
    /// A copy (values are shared, state is not).
    fn box_clone(&self) -> Box<dyn Channel>;
    /// Queued packets (only the `Send` topic has any).
    fn packets(&self) -> &[Val] {
        &[]
    }
    /// The delta channel's cadence state, for delta channels.
    fn delta(&mut self) -> Option<&mut Delta> {
        None
    }
}

fn payload(w: &Write) -> &Val {
    match w {
        Write::Value(v) | Write::Overwrite(v) => v,
    }
}

/// `LastValue`: exactly one write per step.
#[derive(Clone)]
pub(crate) struct LastValue {
    pub(crate) name: Arc<str>,
    pub(crate) value: Option<Val>,
}

impl Channel for LastValue {
    fn get(&self) -> Option<&Val> {
        self.value.as_ref()
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        match writes {
            [] => Ok(false),
            [w] => {
                self.value = Some(payload(w).clone());
                Ok(true)
            }
            _ => Err(Error::InvalidConcurrentUpdate {
                channel: self.name.to_string(),
            }),
        }
    }
    fn checkpoint(&self, ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        self.value.as_ref().map(ser).transpose()
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
}

/// `BinaryOperatorAggregate`: folds the step's writes with a batch reducer; one `Overwrite` per step.
#[derive(Clone)]
pub(crate) struct Reducer {
    pub(crate) name: Arc<str>,
    pub(crate) value: Val,
    pub(crate) reduce: ReduceFn,
    /// Kept by `reduce` beside `value`; dropped whenever `value` is replaced otherwise.
    pub(crate) aux: Aux,
}

impl Reducer {
    /// Replaces the value outside the reducer (an Overwrite, a replayed Overwrite).
    pub(crate) fn set_value(&mut self, value: Val) {
        self.value = value;
        self.aux = None;
    }
}

impl Reducer {
    /// Applies one step's writes. With an `Overwrite` among them the overwrite's value is the
    /// new value and the writes after it are ignored; the writes before it go through the
    /// reducer first when `fold_before_overwrite` (`BinaryOperatorAggregate` folds them, so a
    /// write the reducer refuses fails the step even though the overwrite would discard its
    /// result), and are dropped unread otherwise (the delta channel drops every other write of
    /// an overwrite step, runtime-spec §5.1).
    pub(crate) fn apply(&mut self, writes: &[&Write], fold_before_overwrite: bool) -> Result<bool> {
        if writes.is_empty() {
            return Ok(false);
        }
        let first = writes.iter().enumerate().find_map(|(i, w)| match w {
            Write::Overwrite(v) => Some((i, v.clone())),
            Write::Value(_) => None,
        });
        if let Some((at, v)) = first {
            // In write order, as the reference meets them: a refused write before the first
            // Overwrite fails before a second Overwrite does.
            if fold_before_overwrite && at > 0 {
                self.fold(&writes[..at])?;
            }
            if writes[at + 1..]
                .iter()
                .any(|w| matches!(w, Write::Overwrite(_)))
            {
                return Err(Error::MultipleOverwrites {
                    channel: self.name.to_string(),
                });
            }
            // Invariant: an Overwrite replaces the value and drops the step's later writes (spec §3, R42).
            self.set_value(v);
            return Ok(true);
        }
        self.fold(writes)?;
        Ok(true)
    }

    fn fold(&mut self, writes: &[&Write]) -> Result<()> {
        let batch: Vec<Val> = writes.iter().map(|w| payload(w).clone()).collect();
        // The reducer receives the value by value: when this channel holds the only reference the
        // value is reused in place instead of cloned. On error the channel is discarded with the run.
        let current = std::mem::replace(&mut self.value, Arc::new(()) as Val);
        // A user reducer that panics fails the step as one that returns an error does (the
        // panic does not unwind through the run and its caller).
        let reduced = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            (self.reduce)(current, &batch, &mut self.aux)
        }))
        .unwrap_or_else(|p| {
            Err(format!(
                "the reducer panicked: {}",
                crate::run::panic_message(p.as_ref())
            )
            .into())
        });
        self.value = reduced.map_err(|source| Error::Reducer {
            channel: self.name.to_string(),
            source,
        })?;
        Ok(())
    }
}

impl Channel for Reducer {
    fn get(&self) -> Option<&Val> {
        Some(&self.value)
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        self.apply(writes, true)
    }
    fn checkpoint(&self, ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        ser(&self.value).map(Some)
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
}

/// `EphemeralValue`: cleared by `update([])` one step after it was set. `guard` rejects two writes.
#[derive(Clone)]
pub(crate) struct Ephemeral {
    pub(crate) name: Arc<str>,
    pub(crate) value: Option<Val>,
    pub(crate) guard: bool,
    /// Untracked values are never stored and are not cleared by `update([])`.
    pub(crate) untracked: bool,
}

impl Channel for Ephemeral {
    fn get(&self) -> Option<&Val> {
        self.value.as_ref()
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        match writes {
            [] if self.untracked => Ok(false),
            [] => Ok(self.value.take().is_some()),
            [.., last] => {
                if self.guard && writes.len() > 1 {
                    return Err(Error::InvalidConcurrentUpdate {
                        channel: self.name.to_string(),
                    });
                }
                self.value = Some(payload(last).clone());
                Ok(true)
            }
        }
    }
    fn checkpoint(&self, ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        if self.untracked {
            return Ok(None);
        }
        self.value.as_ref().map(ser).transpose()
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
}

/// `LastValueAfterFinish`: the trigger of a deferred node, readable only after `finish()`.
#[derive(Clone)]
pub(crate) struct AfterFinish {
    pub(crate) value: Option<Val>,
    pub(crate) finished: bool,
}

impl Channel for AfterFinish {
    fn get(&self) -> Option<&Val> {
        if self.finished {
            self.value.as_ref()
        } else {
            None
        }
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        match writes.last() {
            None => Ok(false),
            Some(w) => {
                self.value = Some(payload(w).clone());
                self.finished = false;
                Ok(true)
            }
        }
    }
    fn consume(&mut self) -> bool {
        if self.finished {
            self.finished = false;
            self.value = None;
            true
        } else {
            false
        }
    }
    fn finish(&mut self) -> bool {
        if !self.finished && self.value.is_some() {
            self.finished = true;
            true
        } else {
            false
        }
    }
    fn checkpoint(&self, _ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        Ok(self
            .value
            .as_ref()
            .map(|_| serde_json::json!({"finished": self.finished})))
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
}

/// `NamedBarrierValue` (optionally `…AfterFinish`): available once every source has written its name.
#[derive(Clone)]
pub(crate) struct Barrier {
    pub(crate) name: Arc<str>,
    pub(crate) names: Arc<BTreeSet<String>>,
    pub(crate) seen: BTreeSet<String>,
    pub(crate) after_finish: bool,
    pub(crate) finished: bool,
    pub(crate) unit: Val,
}

impl Barrier {
    /// Every source has written, compared as sets as the reference does: a restored value
    /// may name sources the join does not have (foreign or damaged stored data), which must
    /// not stand in for one that has not written.
    fn complete(&self) -> bool {
        self.names.iter().all(|n| self.seen.contains(n))
    }
}

impl Channel for Barrier {
    fn get(&self) -> Option<&Val> {
        if self.complete() && (!self.after_finish || self.finished) {
            Some(&self.unit)
        } else {
            None
        }
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        let mut changed = false;
        for w in writes {
            let Some(n) = payload(w).downcast_ref::<String>() else {
                return Err(Error::WriteType {
                    channel: self.name.to_string(),
                });
            };
            if !self.names.contains(n) {
                return Err(Error::UnknownNode { node: n.clone() });
            }
            changed |= self.seen.insert(n.clone());
        }
        Ok(changed)
    }
    fn consume(&mut self) -> bool {
        if self.complete() && (!self.after_finish || self.finished) {
            self.seen.clear();
            self.finished = false;
            true
        } else {
            false
        }
    }
    fn finish(&mut self) -> bool {
        if self.after_finish && !self.finished && self.complete() {
            self.finished = true;
            true
        } else {
            false
        }
    }
    fn checkpoint(&self, _ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        // Invariant: the stored form is a copy taken now, never a view of the live set (spec §4 of the
        // graph-programs README: the reference leaked next-step writes into stored barriers).
        if self.seen.is_empty() && !self.finished {
            return Ok(None);
        }
        let seen: Vec<&String> = self.seen.iter().collect();
        Ok(Some(if self.after_finish {
            serde_json::json!({"seen": seen, "finished": self.finished})
        } else {
            serde_json::json!(seen)
        }))
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
}

/// Non-accumulating `Topic` of `Send` packets (`__pregel_tasks`).
#[derive(Clone, Default)]
pub(crate) struct Topic {
    pub(crate) values: Vec<Val>,
    pub(crate) list: Option<Val>,
}

impl Channel for Topic {
    fn get(&self) -> Option<&Val> {
        self.list.as_ref()
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        let mut updated = !self.values.is_empty();
        self.values.clear();
        if !writes.is_empty() {
            updated = true;
            self.values
                .extend(writes.iter().map(|w| payload(w).clone()));
        }
        self.list = if self.values.is_empty() {
            None
        } else {
            Some(Arc::new(()) as Arc<dyn Any + Send + Sync>)
        };
        Ok(updated)
    }
    fn checkpoint(&self, ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        if self.values.is_empty() {
            return Ok(None);
        }
        self.values
            .iter()
            .map(ser)
            .collect::<Result<Vec<_>>>()
            .map(|v| Some(Json::Array(v)))
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
    fn packets(&self) -> &[Val] {
        &self.values
    }
}

/// `DeltaChannel` (runtime-spec §5): a reducer channel whose checkpoints store only the step's
/// writes, plus a snapshot of the whole value when the cadence says so (decided by the runtime).
#[derive(Clone)]
pub(crate) struct Delta {
    pub(crate) inner: Reducer,
    /// `(updates, supersteps)` since the last snapshot (runtime-spec §5.3).
    pub(crate) updates: u32,
    pub(crate) supersteps: u32,
    pub(crate) frequency: u32,
    pub(crate) max_supersteps: u32,
    /// An Overwrite reached the channel (or pending writes will not be replayed): snapshot next.
    pub(crate) forced: bool,
    /// The channel's reducer stamps random ids on messages written without one (the delta
    /// `messages` channel): a replay of such a write would stamp other ids.
    pub(crate) stamps_ids: bool,
    /// The value may hold a message without an id (a legacy full-mode value, as an Overwrite
    /// stored it): set where the value is loaded, cleared by the first write, which stamps
    /// every message.
    pub(crate) unstamped: bool,
    /// For a message list: the serialised JSON of a prefix of the current value, so a
    /// snapshot serialises only the messages appended since the last one. Emptied by any update
    /// that is not a pure append (replace, remove, overwrite).
    pub(crate) encoded: Arc<EncodedPrefix>,
}

/// The serialised items of a prefix of a message list, and the id of its last message (checked
/// against the list before the prefix is used).
#[derive(Clone, Debug, Default)]
pub(crate) struct EncodedPrefix {
    pub(crate) items: Vec<Arc<[u8]>>,
    pub(crate) last_id: String,
}

impl EncodedPrefix {
    /// The prefix of `list` whose serialised items are `items` (one per message, in order), or
    /// `None` when a message has no id.
    pub(crate) fn of(list: &[Message], items: Vec<Arc<[u8]>>) -> Option<Self> {
        if items.len() != list.len() || list.iter().any(|m| m.id.is_none()) {
            return None;
        }
        let last_id = list.last().and_then(|m| m.id.clone()).unwrap_or_default();
        Some(Self { items, last_id })
    }

    fn is_prefix_of(&self, list: &[Message]) -> bool {
        let n = self.items.len();
        n <= list.len() && (n == 0 || list[n - 1].id.as_deref() == Some(self.last_id.as_str()))
    }
}

impl Delta {
    /// Advances the counters for one saved checkpoint and decides whether it stores a snapshot.
    /// `versioned`: the channel was ever written on this branch (only then can it snapshot).
    pub(crate) fn on_checkpoint(&mut self, updated: bool, force: bool, versioned: bool) -> bool {
        self.supersteps = self.supersteps.saturating_add(1);
        if updated {
            self.updates = self.updates.saturating_add(1);
        }
        if !versioned {
            return false;
        }
        let snapshot = self.forced
            || force
            || self.updates >= self.frequency
            || self.supersteps >= self.max_supersteps;
        if snapshot {
            self.updates = 0;
            self.supersteps = 0;
            self.forced = false;
        }
        snapshot
    }
}

impl Delta {
    /// Whether the current value holds a message without an id (a legacy full-mode value, as an
    /// Overwrite stored it), which the reducer stamps at the next write.
    pub(crate) fn value_lacks_ids(&self) -> bool {
        self.inner
            .value
            .downcast_ref::<Vec<Message>>()
            .is_some_and(|list| list.iter().any(|m| m.id.is_none()))
    }
}

/// Whether `w` writes messages of which one has no id (which the reducer then stamps).
pub(crate) fn lacks_message_ids(w: &Write) -> bool {
    let (Write::Value(v) | Write::Overwrite(v)) = w;
    v.downcast_ref::<Vec<Message>>()
        .is_some_and(|list| list.iter().any(|m| m.id.is_none()))
}

fn messages_len(v: &Val) -> Option<usize> {
    v.downcast_ref::<Vec<Message>>().map(Vec::len)
}

impl Delta {
    /// The current value as individually serialised messages (the snapshot form savers store as
    /// message references), or `None` when the value is not a list of messages that all have ids.
    /// Serialises only messages past the still-valid encoded prefix, with `ser` (the channel's own
    /// value serialiser applied to the new messages), so the bytes equal a full serialisation.
    pub(crate) fn encoded_snapshot(
        &mut self,
        ser: &dyn Fn(&Val) -> Result<Json>,
    ) -> Result<Option<Vec<Arc<[u8]>>>> {
        let Some(list) = self.inner.value.downcast_ref::<Vec<Message>>() else {
            return Ok(None);
        };
        // `apply_tracked` drops the prefix on every update that is not a pure append, so the
        // prefix is the list's head; checking the boundary id (not every id) keeps a snapshot
        // from costing time in the whole list while still catching a missed reset.
        let cache = Arc::make_mut(&mut self.encoded);
        if !cache.is_prefix_of(list) {
            cache.items.clear();
            cache.last_id.clear();
        }
        let tail = &list[cache.items.len()..];
        // The prefix's messages had ids when they were encoded, and a pure append keeps them.
        if tail.iter().any(|m| m.id.is_none()) {
            return Ok(None);
        }
        if let Some(last) = tail.last() {
            let Json::Array(items) = ser(&(Arc::new(tail.to_vec()) as Val))? else {
                return Ok(None);
            };
            if items.len() != tail.len() {
                return Ok(None);
            }
            for item in items {
                let bytes = serde_json::to_vec(&item).map_err(|source| Error::Serialization {
                    channel: self.inner.name.to_string(),
                    source,
                })?;
                cache.items.push(Arc::from(bytes));
            }
            cache.last_id = last.id.clone().unwrap_or_default();
        }
        Ok(Some(cache.items.clone()))
    }
}

impl Channel for Delta {
    fn get(&self) -> Option<&Val> {
        self.inner.get()
    }
    fn update(&mut self, writes: &[&Write]) -> Result<bool> {
        // Replay must never have to reproduce "drop the step's other writes" (spec §10 rule 5),
        // nor the ids the reducer stamps on messages written without one (a stored task write
        // from a full-mode store): a replay would stamp other, random ids (kernel-spec R41).
        if writes
            .iter()
            .any(|w| matches!(w, Write::Overwrite(_)) || (self.stamps_ids && lacks_message_ids(w)))
            || (self.unstamped && !writes.is_empty())
        {
            self.forced = true;
        }
        let updated = self.apply_tracked(writes)?;
        if !writes.is_empty() {
            self.unstamped = false;
        }
        Ok(updated)
    }
    fn checkpoint(&self, _ser: &dyn Fn(&Val) -> Result<Json>) -> Result<Option<Json>> {
        // The runtime, not the channel, decides when a snapshot is stored.
        Ok(None)
    }
    fn box_clone(&self) -> Box<dyn Channel> {
        Box::new(self.clone())
    }
    fn delta(&mut self) -> Option<&mut Delta> {
        Some(self)
    }
}

impl Delta {
    /// Applies writes to the inner reducer (a step's batch or a replay), keeping the encoded
    /// prefix only when the writes were a pure append.
    pub(crate) fn apply_tracked(&mut self, writes: &[&Write]) -> Result<bool> {
        let before = messages_len(&self.inner.value);
        let appended: Option<usize> = writes
            .iter()
            .map(|w| match w {
                Write::Value(v) => v.downcast_ref::<Vec<Message>>().map(Vec::len),
                Write::Overwrite(_) => None,
            })
            .sum();
        let updated = self.inner.apply(writes, false)?;
        let after = messages_len(&self.inner.value);
        // A pure append grows the list by exactly the written messages (a replace, a remove or
        // a duplicate id adds fewer), leaving the encoded prefix valid.
        let pure = matches!((before, appended, after), (Some(b), Some(k), Some(a)) if a == b + k);
        if !pure && !self.encoded.items.is_empty() {
            self.encoded = Arc::default();
        }
        Ok(updated)
    }
}

#[cfg(test)]
mod tests;
