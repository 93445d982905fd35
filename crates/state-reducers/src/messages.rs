//! The message reducer (kernel-spec R18–R22): the pairwise [`add_messages`]
//! and the batch [`merge_message_writes`], one algorithm behind both.
//!
//! The batch entry point folds all writes of a step in time linear in the
//! state plus the writes: ids are indexed once in a hash table that stores
//! positions (not cloned ids), removals tombstone positions, and the list is
//! compacted once at the end. Folding [`add_messages`] write by write gives
//! the same result or the same error for every input (R22).

use std::hash::BuildHasher;

use hashbrown::DefaultHashBuilder;
use hashbrown::HashTable;
use serde_json::Value;

use crate::error::{Error, Result, Side};
use crate::message::Message;

/// One write to the `messages` channel: `null` (an error when merged, R21)
/// or a list of messages (a single message is a one-element list).
#[derive(Clone, Debug, PartialEq)]
pub enum MessageWrite {
    /// A `null` write.
    Null,
    /// Messages to add, replace or remove, in order.
    Messages(Vec<Message>),
}

impl MessageWrite {
    /// Coerces a JSON write: `null`, one message-like, or a list of them
    /// (kernel-spec R18). Coercion errors are [`Error::MalformedMessage`].
    pub fn from_json(value: Value) -> Result<Self> {
        match value {
            Value::Null => Ok(MessageWrite::Null),
            Value::Array(items) => items
                .into_iter()
                .map(Message::from_json)
                .collect::<Result<Vec<_>>>()
                .map(MessageWrite::Messages),
            other => Message::from_json(other).map(|m| MessageWrite::Messages(vec![m])),
        }
    }

    /// The JSON form: `null` or a list of message dicts.
    pub fn to_json(&self) -> Value {
        match self {
            MessageWrite::Null => Value::Null,
            MessageWrite::Messages(ms) => Value::Array(ms.iter().map(Message::to_json).collect()),
        }
    }
}

impl From<Message> for MessageWrite {
    fn from(m: Message) -> Self {
        MessageWrite::Messages(vec![m])
    }
}

impl From<Vec<Message>> for MessageWrite {
    fn from(ms: Vec<Message>) -> Self {
        MessageWrite::Messages(ms)
    }
}

/// Where fresh ids for id-less messages come from.
///
/// The default is a random UUIDv4 per message, as in the reference; tests
/// and deterministic replays plug in their own sequence.
pub trait IdSource {
    /// The next fresh id.
    fn next_id(&mut self) -> String;
}

/// Random UUIDv4 ids (the default).
#[derive(Clone, Copy, Debug, Default)]
pub struct UuidV4;

impl IdSource for UuidV4 {
    fn next_id(&mut self) -> String {
        uuid::Uuid::new_v4().to_string()
    }
}

impl<F: FnMut() -> String> IdSource for F {
    fn next_id(&mut self) -> String {
        self()
    }
}

/// The pairwise reducer: merges one write into `left`.
///
/// Equivalent to LangGraph's `add_messages(left, right)`: ids are assigned to
/// id-less messages of `left`, then of `right`; see the crate docs for the
/// merge rules.
pub fn add_messages(left: Vec<Message>, right: MessageWrite) -> Result<Vec<Message>> {
    add_messages_with(left, right, &mut UuidV4)
}

/// [`add_messages`] with an explicit [`IdSource`].
pub fn add_messages_with(
    left: Vec<Message>,
    right: MessageWrite,
    ids: &mut dyn IdSource,
) -> Result<Vec<Message>> {
    merge_message_writes_with(left, [right], ids)
}

/// The batch reducer: folds `writes` into a copy of `state`.
///
/// Observationally identical to folding [`add_messages`] over the writes one
/// by one, errors included (kernel-spec R22). An empty batch returns a copy
/// of `state` without assigning ids (R19).
pub fn merge_message_writes(state: &[Message], writes: &[MessageWrite]) -> Result<Vec<Message>> {
    merge_message_writes_with(state.to_vec(), writes.iter().cloned(), &mut UuidV4)
}

/// [`merge_message_writes`] taking ownership of the state and the writes,
/// so nothing is cloned. On error the state is consumed; callers that must
/// keep it on failure use the borrowing form.
pub fn merge_message_writes_owned(
    state: Vec<Message>,
    writes: impl IntoIterator<Item = MessageWrite>,
) -> Result<Vec<Message>> {
    merge_message_writes_with(state, writes, &mut UuidV4)
}

/// The one algorithm behind every entry point, with an explicit [`IdSource`].
pub fn merge_message_writes_with(
    state: Vec<Message>,
    writes: impl IntoIterator<Item = MessageWrite>,
    ids: &mut dyn IdSource,
) -> Result<Vec<Message>> {
    let writes: Vec<MessageWrite> = writes.into_iter().collect();
    // R19 exception: an empty batch is a plain copy, no ids assigned.
    if writes.is_empty() {
        return Ok(state);
    }
    // Reserving for every written message up front keeps the list from
    // being moved on growth, which dominates a long replay.
    let incoming: usize = writes
        .iter()
        .map(|w| match w {
            MessageWrite::Messages(ms) => ms.len(),
            MessageWrite::Null => 0,
        })
        .sum();
    let mut acc = Accumulator::new(state, incoming, ids);
    for write in writes {
        acc.apply(write, ids)?;
    }
    Ok(acc.finish())
}

/// The merged list under construction.
struct Accumulator {
    /// Messages in order; tombstoned positions are skipped by `finish`.
    items: Vec<Message>,
    /// `dead[i]`: position `i` was removed.
    dead: Vec<bool>,
    /// Previous position carrying the same id (`NONE` if none): lets a
    /// removal reach every duplicate of an id without scanning the list.
    prev_same: Vec<usize>,
    /// id → latest live position, compared through `items`. Each entry keeps
    /// its hash so that growing the table never touches the messages.
    index: HashTable<(u64, usize)>,
    hasher: DefaultHashBuilder,
    live: usize,
    any_dead: bool,
}

const NONE: usize = usize::MAX;

impl Accumulator {
    fn new(mut state: Vec<Message>, incoming: usize, ids: &mut dyn IdSource) -> Self {
        for m in &mut state {
            if m.id.is_none() {
                m.id = Some(ids.next_id());
            }
        }
        let mut acc = Accumulator {
            items: Vec::new(),
            dead: Vec::new(),
            prev_same: Vec::new(),
            index: HashTable::new(),
            hasher: DefaultHashBuilder::default(),
            live: 0,
            any_dead: false,
        };
        acc.reset(state);
        acc.reserve(incoming);
        acc
    }

    fn reserve(&mut self, additional: usize) {
        self.items.reserve(additional);
        self.dead.reserve(additional);
        self.prev_same.reserve(additional);
        self.index.reserve(additional, |&(h, _)| h);
    }

    /// Replaces the whole list (state load, or the remove-all path).
    fn reset(&mut self, items: Vec<Message>) {
        self.index.clear();
        self.index.reserve(items.len(), |&(h, _)| h);
        self.dead = vec![false; items.len()];
        self.prev_same = Vec::with_capacity(items.len());
        self.items = Vec::new();
        self.live = 0;
        self.any_dead = false;
        self.items = items;
        for pos in 0..self.items.len() {
            let prev = self.index_position(pos);
            self.prev_same.push(prev);
        }
        self.live = self.items.len();
    }

    fn hash_id(&self, id: &str) -> u64 {
        self.hasher.hash_one(id)
    }

    fn find_hashed(&self, hash: u64, id: &str) -> Option<usize> {
        let items = &self.items;
        self.index
            .find(hash, |&(_, p)| items[p].id.as_deref() == Some(id))
            .map(|&(_, p)| p)
    }

    /// Makes `pos` the latest position of its id; returns the previous one.
    fn index_position(&mut self, pos: usize) -> usize {
        let id = self.items[pos].id.as_deref().unwrap_or_default();
        let hash = self.hasher.hash_one(id);
        self.index_position_hashed(hash, pos)
    }

    /// [`Self::index_position`] with the id's hash already computed.
    fn index_position_hashed(&mut self, hash: u64, pos: usize) -> usize {
        let id = self.items[pos].id.as_deref().unwrap_or_default();
        let items = &self.items;
        match self.index.entry(
            hash,
            |&(_, p)| items[p].id.as_deref() == Some(id),
            |&(h, _)| h,
        ) {
            hashbrown::hash_table::Entry::Occupied(mut e) => {
                std::mem::replace(&mut e.get_mut().1, pos)
            }
            hashbrown::hash_table::Entry::Vacant(e) => {
                e.insert((hash, pos));
                NONE
            }
        }
    }

    fn apply(&mut self, write: MessageWrite, ids: &mut dyn IdSource) -> Result<()> {
        let mut messages = match write {
            MessageWrite::Null => {
                let side = if self.live > 0 {
                    Side::Left
                } else {
                    Side::Right
                };
                return Err(Error::NullWrite { side });
            }
            MessageWrite::Messages(ms) => ms,
        };
        for m in &mut messages {
            if m.id.is_none() {
                m.id = Some(ids.next_id());
            }
        }
        if let Some(last) = messages.iter().rposition(Message::is_remove_all) {
            let rest = messages.split_off(last + 1);
            self.reset(rest);
            return Ok(());
        }
        // Ids to delete once the write is through; usually empty.
        let mut to_remove: hashbrown::HashSet<String> = hashbrown::HashSet::new();
        for m in messages {
            let id = m.id.as_deref().unwrap_or_default();
            let hash = self.hash_id(id);
            match self.find_hashed(hash, id) {
                Some(pos) => {
                    if m.is_remove() {
                        if !to_remove.contains(id) {
                            to_remove.insert(id.to_owned());
                        }
                    } else {
                        to_remove.remove(id);
                        self.items[pos] = m;
                    }
                }
                None => {
                    if m.is_remove() {
                        return Err(Error::MissingMessageId { id: id.to_owned() });
                    }
                    let pos = self.items.len();
                    self.items.push(m);
                    self.dead.push(false);
                    let prev = self.index_position_hashed(hash, pos);
                    self.prev_same.push(prev);
                    self.live += 1;
                }
            }
        }
        for id in to_remove {
            self.remove_all_positions(&id);
        }
        Ok(())
    }

    /// Deletes every position carrying `id` (replacement only touches the
    /// latest one, removal takes them all: R20.3).
    fn remove_all_positions(&mut self, id: &str) {
        let hash = self.hash_id(id);
        let items = &self.items;
        let Ok(entry) = self
            .index
            .find_entry(hash, |&(_, p)| items[p].id.as_deref() == Some(id))
        else {
            return;
        };
        let ((_, mut pos), _) = entry.remove();
        while pos != NONE {
            // Invariant: a chain only links live positions of one id, because
            // a removal always takes the whole chain at once.
            self.dead[pos] = true;
            self.live -= 1;
            pos = self.prev_same[pos];
        }
        self.any_dead = true;
    }

    fn finish(self) -> Vec<Message> {
        let Accumulator {
            mut items,
            dead,
            any_dead,
            ..
        } = self;
        if any_dead {
            let mut i = 0;
            items.retain(|_| {
                let keep = !dead[i];
                i += 1;
                keep
            });
        }
        items
    }
}
