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
    merge_message_writes_indexed(state, &mut MessageIndex::default(), writes, ids)
}

/// The id index of a message list, kept between merges so that a long list
/// is not re-indexed for every small batch.
///
/// A merge through [`merge_message_writes_indexed`] normally costs time
/// linear in the list plus the writes, because the list's ids are hashed
/// first. A caller that merges many batches into one growing list (a
/// conversation appending two messages per turn) keeps a `MessageIndex`
/// beside the list and passes both to every merge: the index is then
/// updated in place and a merge costs time linear in the writes only.
///
/// The index describes the list returned by the merge that produced it.
/// A merge checks the index against the list it is given (its length, and
/// that the last message's id is indexed at the last position) and rebuilds
/// it from the list when they disagree, so a stale index costs time, never
/// correctness for those changes. A caller that edits the list in place
/// without changing its length or its last id must [`clear`](Self::clear)
/// the index. A fresh (default) index is always valid.
#[derive(Clone, Default)]
pub struct MessageIndex {
    /// id → latest live position, compared through the list. Each entry
    /// keeps its hash so that growing the table never touches the messages.
    table: HashTable<(u64, usize)>,
    /// Previous position carrying the same id (`NONE` if none): lets a
    /// removal reach every duplicate of an id without scanning the list.
    prev_same: Vec<usize>,
    hasher: DefaultHashBuilder,
}

impl MessageIndex {
    /// Forgets the indexed list; the next merge rebuilds the index (a cleared index
    /// describes only the empty list, which it indexes correctly).
    pub fn clear(&mut self) {
        self.table.clear();
        self.prev_same.clear();
    }

    /// Whether the index describes `list` as far as a cheap check can tell:
    /// same length and the last id indexed at the last position.
    fn describes(&self, list: &[Message]) -> bool {
        // `prev_same` has one entry per indexed position, so its length is the list's.
        if self.prev_same.len() != list.len() {
            return false;
        }
        let Some(last) = list.last() else {
            return self.table.is_empty();
        };
        let Some(id) = last.id.as_deref() else {
            return false;
        };
        let hash = self.hasher.hash_one(id);
        let pos = list.len() - 1;
        self.table
            .find(hash, |&(_, p)| p == pos)
            .is_some_and(|&(h, _)| h == hash)
    }
}

impl std::fmt::Debug for MessageIndex {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MessageIndex")
            .field("ids", &self.table.len())
            .field("len", &self.prev_same.len())
            .finish()
    }
}

/// [`merge_message_writes_with`] reusing `index`, the id index of `state`
/// (see [`MessageIndex`]); on return `index` describes the returned list.
///
/// Results and errors are exactly those of [`merge_message_writes_with`].
/// On error `index` is cleared (the state is consumed).
pub fn merge_message_writes_indexed(
    state: Vec<Message>,
    index: &mut MessageIndex,
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
    let mut acc = Accumulator::new(state, std::mem::take(index), incoming, ids);
    for write in writes {
        if let Err(e) = acc.apply(write, ids) {
            index.clear();
            return Err(e);
        }
    }
    let (list, ix) = acc.finish();
    *index = ix;
    Ok(list)
}

/// A stored message that could not be decoded: its position in the list and the serde error.
#[derive(Debug, thiserror::Error)]
#[error("message {index} of the list cannot be decoded: {source}")]
pub struct DecodeError {
    /// The position of the item in the list.
    pub index: usize,
    /// What serde_json reported.
    #[source]
    pub source: serde_json::Error,
}

/// Decodes individually serialised messages (one JSON document per item, as savers store them)
/// into a list, in order.
///
/// Deserialising messages dominates a cold read of a long conversation. Plain human, AI and
/// system messages in the layout [`Message`]'s `Serialize` writes are matched byte for byte and
/// built directly (about 2.5 times faster than serde's general path); every other item goes
/// through `serde_json`, and the result is always the one of decoding item by item with
/// `serde_json::from_slice::<Message>`.
///
/// The decode is sequential: splitting it over scoped threads was slower on every list size
/// measured (4,000 to 40,000 messages, two cores), because each new thread allocates from a
/// fresh heap arena.
///
/// # Errors
/// [`DecodeError`] for the first item that is not a message-like JSON document.
pub fn decode_messages<B: AsRef<[u8]>>(
    items: &[B],
) -> std::result::Result<Vec<Message>, DecodeError> {
    // Sized up front: collecting through `Result` gives no size hint, and growing a list of
    // thousands of messages by doubling copies it about twice more.
    let mut out = Vec::with_capacity(items.len());
    for (index, item) in items.iter().enumerate() {
        let bytes = item.as_ref();
        out.push(match crate::canonical::decode(bytes) {
            Some(m) => m,
            None => serde_json::from_slice::<Message>(bytes)
                .map_err(|source| DecodeError { index, source })?,
        });
    }
    Ok(out)
}

/// The merged list under construction.
struct Accumulator {
    /// Messages in order; tombstoned positions are skipped by `finish`.
    items: Vec<Message>,
    /// `dead[i]`: position `i` was removed. Empty until the first removal,
    /// then as long as `items` (so an append-only merge never touches it).
    dead: Vec<bool>,
    /// The ids of `items` (its `len` is kept up to date by `finish`).
    ix: MessageIndex,
    live: usize,
}

const NONE: usize = usize::MAX;

impl Accumulator {
    fn new(
        mut state: Vec<Message>,
        ix: MessageIndex,
        incoming: usize,
        ids: &mut dyn IdSource,
    ) -> Self {
        let mut acc = if ix.describes(&state) {
            // Every indexed message has an id: ids were assigned before it was indexed.
            let live = state.len();
            Accumulator {
                items: state,
                dead: Vec::new(),
                ix,
                live,
            }
        } else {
            for m in &mut state {
                if m.id.is_none() {
                    m.id = Some(ids.next_id());
                }
            }
            let mut acc = Accumulator {
                items: Vec::new(),
                dead: Vec::new(),
                ix,
                live: 0,
            };
            acc.reset(state);
            acc
        };
        acc.reserve(incoming);
        acc
    }

    fn reserve(&mut self, additional: usize) {
        self.items.reserve(additional);
        self.ix.prev_same.reserve(additional);
        self.ix.table.reserve(additional, |&(h, _)| h);
    }

    /// Replaces the whole list (state load, or the remove-all path).
    fn reset(&mut self, items: Vec<Message>) {
        self.ix.table.clear();
        self.ix.table.reserve(items.len(), |&(h, _)| h);
        self.ix.prev_same.clear();
        self.ix.prev_same.reserve(items.len());
        self.dead = Vec::new();
        self.items = items;
        for pos in 0..self.items.len() {
            let prev = self.index_position(pos);
            self.ix.prev_same.push(prev);
        }
        self.live = self.items.len();
    }

    fn hash_id(&self, id: &str) -> u64 {
        self.ix.hasher.hash_one(id)
    }

    fn find_hashed(&self, hash: u64, id: &str) -> Option<usize> {
        let items = &self.items;
        self.ix
            .table
            .find(hash, |&(_, p)| items[p].id.as_deref() == Some(id))
            .map(|&(_, p)| p)
    }

    /// Makes `pos` the latest position of its id; returns the previous one.
    fn index_position(&mut self, pos: usize) -> usize {
        let id = self.items[pos].id.as_deref().unwrap_or_default();
        let hash = self.ix.hasher.hash_one(id);
        self.index_position_hashed(hash, pos)
    }

    /// [`Self::index_position`] with the id's hash already computed.
    fn index_position_hashed(&mut self, hash: u64, pos: usize) -> usize {
        let id = self.items[pos].id.as_deref().unwrap_or_default();
        let items = &self.items;
        match self.ix.table.entry(
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
                    if !self.dead.is_empty() {
                        self.dead.push(false);
                    }
                    let prev = self.index_position_hashed(hash, pos);
                    self.ix.prev_same.push(prev);
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
            .ix
            .table
            .find_entry(hash, |&(_, p)| items[p].id.as_deref() == Some(id))
        else {
            return;
        };
        let ((_, mut pos), _) = entry.remove();
        if self.dead.is_empty() {
            self.dead = vec![false; self.items.len()];
        }
        while pos != NONE {
            // Invariant: a chain only links live positions of one id, because
            // a removal always takes the whole chain at once.
            self.dead[pos] = true;
            self.live -= 1;
            pos = self.ix.prev_same[pos];
        }
    }

    /// The merged list and its index (rebuilt lazily when removals moved positions).
    fn finish(self) -> (Vec<Message>, MessageIndex) {
        let Accumulator {
            mut items,
            dead,
            mut ix,
            ..
        } = self;
        // `dead` is allocated by the first removal only.
        if !dead.is_empty() {
            let mut i = 0;
            items.retain(|_| {
                let keep = !dead[i];
                i += 1;
                keep
            });
            // Compaction moved positions: the next merge re-indexes.
            ix.clear();
        }
        (items, ix)
    }
}

#[cfg(test)]
mod index_tests {
    use super::*;

    fn msg(id: &str) -> Message {
        Message::human(format!("text of {id}")).with_id(id)
    }

    fn write(ids: &[&str]) -> MessageWrite {
        MessageWrite::Messages(ids.iter().map(|i| msg(i)).collect())
    }

    #[test]
    fn an_append_keeps_the_index_describing_the_list() {
        let mut ix = MessageIndex::default();
        let list =
            merge_message_writes_indexed(Vec::new(), &mut ix, [write(&["a", "b"])], &mut UuidV4)
                .unwrap();
        assert!(ix.describes(&list));
        let list =
            merge_message_writes_indexed(list, &mut ix, [write(&["c"])], &mut UuidV4).unwrap();
        assert!(ix.describes(&list), "{ix:?}");
        // Replacing by id keeps positions, so the index stays valid too.
        let list =
            merge_message_writes_indexed(list, &mut ix, [write(&["a"])], &mut UuidV4).unwrap();
        assert!(ix.describes(&list));
        assert_eq!(list.len(), 3);
    }

    #[test]
    fn a_removal_or_an_error_clears_the_index() {
        let mut ix = MessageIndex::default();
        let list = merge_message_writes_indexed(
            Vec::new(),
            &mut ix,
            [write(&["a", "b", "c"])],
            &mut UuidV4,
        )
        .unwrap();
        let removal = MessageWrite::Messages(vec![Message::remove("b")]);
        let list = merge_message_writes_indexed(list, &mut ix, [removal], &mut UuidV4).unwrap();
        assert!(!ix.describes(&list));
        // The next merge rebuilds it from the compacted list, and finds "c" at its new place.
        let list =
            merge_message_writes_indexed(list, &mut ix, [write(&["c"])], &mut UuidV4).unwrap();
        assert_eq!(list.len(), 2);
        assert!(ix.describes(&list));
        let err =
            merge_message_writes_indexed(list.clone(), &mut ix, [MessageWrite::Null], &mut UuidV4);
        assert!(err.is_err());
        assert!(!ix.describes(&list));
    }

    #[test]
    fn an_index_of_another_list_is_rebuilt_not_trusted() {
        let mut ix = MessageIndex::default();
        let _ =
            merge_message_writes_indexed(Vec::new(), &mut ix, [write(&["a", "b"])], &mut UuidV4)
                .unwrap();
        // Same length, different last id: the check sees it.
        let other = vec![msg("x"), msg("y")];
        assert!(!ix.describes(&other));
        let out = merge_message_writes_indexed(other, &mut ix, [write(&["a", "y"])], &mut UuidV4)
            .unwrap();
        let ids: Vec<_> = out.iter().filter_map(|m| m.id.as_deref()).collect();
        assert_eq!(ids, ["x", "y", "a"]);
        // Different length.
        let longer = vec![msg("p"), msg("q"), msg("r")];
        assert!(!ix.describes(&longer));
    }

    fn encoded(n: usize) -> Vec<Vec<u8>> {
        (0..n)
            .map(|i| {
                let m = if i % 2 == 0 {
                    Message::human(format!("question {i}"))
                } else {
                    Message::ai(format!("answer {i}"))
                };
                serde_json::to_vec(&m.with_id(format!("m{i}"))).unwrap()
            })
            .collect()
    }

    #[test]
    fn decode_messages_equals_item_by_item_decoding() {
        for n in [0, 3, 1_000] {
            let mut items = encoded(n);
            // Items off the fast path too: extras and a non-canonical key order.
            if n > 0 {
                items[n / 2] = br#"{"content":"k","additional_kwargs":{"a":1},"response_metadata":{},"type":"human","name":null,"id":"k"}"#.to_vec();
                items[n - 1] = br#"{"type":"ai","content":"reordered","id":"r"}"#.to_vec();
            }
            let one_by_one: Vec<Message> = items
                .iter()
                .map(|b| serde_json::from_slice(b).unwrap())
                .collect();
            assert_eq!(decode_messages(&items).unwrap(), one_by_one, "n = {n}");
        }
    }

    #[test]
    fn decode_messages_reports_the_first_bad_item() {
        let n = 2_000;
        for bad in [vec![5], vec![n - 1], vec![1_025, n - 2], vec![2, n / 2]] {
            let mut items = encoded(n);
            for &b in &bad {
                items[b] = b"{\"content\": 1}".to_vec();
            }
            let err = decode_messages(&items).unwrap_err();
            assert_eq!(err.index, bad[0], "{bad:?}");
            assert!(
                err.to_string()
                    .starts_with(&format!("message {} of the list", bad[0]))
            );
        }
    }
}
