//! [`SaverCheckpointer`]: the runtime's persistence seam implemented over `antler-checkpoint`'s [`Saver`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};

use antler_checkpoint as cp;
use async_trait::async_trait;
use serde_json::Value as Json;

use crate::checkpointer::{
    CheckpointRecord, CheckpointTuple, Checkpointer, DeltaHistory, PendingWrite, Scope, Source,
};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, TaskId};

/// Full maps by (scope, checkpoint).
type MapCache = HashMap<(Scope, cp::CheckpointId), Arc<Maps>>;

/// Adapts any [`cp::Saver`] (memory, SQLite, PostgreSQL) to the runtime.
#[derive(Clone)]
pub struct SaverCheckpointer {
    saver: Arc<dyn cp::Saver>,
    /// Full maps of checkpoints this adapter wrote or read (records are immutable, so entries
    /// never go stale); a put whose parent is here is stored as a relative record.
    maps: Arc<Mutex<MapCache>>,
}

impl SaverCheckpointer {
    /// Wraps a saver.
    pub fn new(saver: Arc<dyn cp::Saver>) -> Self {
        Self {
            saver,
            maps: Arc::default(),
        }
    }
    /// The wrapped saver.
    pub fn saver(&self) -> &Arc<dyn cp::Saver> {
        &self.saver
    }
}

fn storage(e: cp::Error) -> Error {
    Error::Storage {
        source: Box::new(e),
    }
}

/// The stored id a runtime id names, when it names one: ids are stored as the savers render
/// them (lowercase, hyphenated), so any other spelling names no stored checkpoint, as in
/// [`MemoryCheckpointer`](crate::MemoryCheckpointer), which compares them as strings. The
/// runtime makes its ids in this spelling (`checkpointer::new_checkpoint_id`).
pub(crate) fn stored_id(id: &CheckpointId) -> Option<cp::CheckpointId> {
    id.as_str()
        .parse::<cp::CheckpointId>()
        .ok()
        .filter(|p| p.to_string() == id.as_str())
}

/// The error for a checkpoint a write or a history walk addresses that is not stored: the
/// runtime's `CheckpointNotFound`, as the in-process checkpointer gives it.
fn not_found(scope: &Scope, id: &CheckpointId) -> Error {
    Error::CheckpointNotFound {
        thread: scope.thread.to_string(),
        checkpoint: id.to_string(),
    }
}

/// [`storage`], except that the saver's "no such checkpoint" is the runtime's.
fn storage_or_not_found<'a>(
    scope: &'a Scope,
    id: &'a CheckpointId,
) -> impl FnOnce(cp::Error) -> Error + 'a {
    move |e| match e {
        cp::Error::UnknownCheckpoint { .. } => not_found(scope, id),
        e => storage(e),
    }
}

fn parse_id(id: &CheckpointId) -> Result<cp::CheckpointId> {
    id.as_str()
        .parse()
        .map_err(|e: cp::ParseCheckpointIdError| Error::Storage {
            source: Box::new(e),
        })
}

/// Stored form of a channel name. The runtime's internal channels are stored compactly:
/// `branch:to:<node>` as `\u{1}<node>` and `join:<rest>` as `\u{2}<rest>`; a name that starts
/// with one of the marker bytes `\u{1}`..`\u{3}` gets a `\u{3}` escape in front, so the mapping is
/// reversible for every name. Each such name occurs in the versions, the versions seen and the
/// writes of most checkpoints, so this saves 9 bytes per occurrence of a branch channel.
fn store_name(name: &str) -> String {
    if let Some(node) = name.strip_prefix("branch:to:") {
        format!("\u{1}{node}")
    } else if let Some(rest) = name.strip_prefix("join:") {
        format!("\u{2}{rest}")
    } else if name.starts_with(['\u{1}', '\u{2}', '\u{3}']) {
        format!("\u{3}{name}")
    } else {
        name.to_owned()
    }
}

/// Inverse of [`store_name`].
fn load_name(stored: &str) -> String {
    if let Some(node) = stored.strip_prefix('\u{1}') {
        format!("branch:to:{node}")
    } else if let Some(rest) = stored.strip_prefix('\u{2}') {
        format!("join:{rest}")
    } else if let Some(name) = stored.strip_prefix('\u{3}') {
        name.to_owned()
    } else {
        stored.to_owned()
    }
}

/// Stored form of a task path: the runtime's `~__pregel_pull, <node>` and `~__pregel_push, <i>`
/// become `\u{1}<node>` and `\u{2}<i>` (escaping as in [`store_name`]). Savers order writes by
/// task path; the mapping keeps that order (`""` < pull paths by node < push paths by index).
fn store_path(path: &str) -> String {
    if let Some(node) = path.strip_prefix("~__pregel_pull, ") {
        format!("\u{1}{node}")
    } else if let Some(i) = path.strip_prefix("~__pregel_push, ") {
        format!("\u{2}{i}")
    } else if path.starts_with(['\u{1}', '\u{2}', '\u{3}']) {
        format!("\u{3}{path}")
    } else {
        path.to_owned()
    }
}

/// Inverse of [`store_path`].
fn load_path(stored: &str) -> String {
    if let Some(node) = stored.strip_prefix('\u{1}') {
        format!("~__pregel_pull, {node}")
    } else if let Some(i) = stored.strip_prefix('\u{2}') {
        format!("~__pregel_push, {i}")
    } else if let Some(path) = stored.strip_prefix('\u{3}') {
        path.to_owned()
    } else {
        stored.to_owned()
    }
}

fn chan(name: &str) -> cp::ChannelName {
    cp::ChannelName::new(store_name(name))
}

fn decode(channel: &str, b: &cp::Blob) -> Result<Json> {
    b.decode_json::<Json>()
        .map_err(|source| Error::Serialization {
            channel: channel.to_owned(),
            source,
        })
}

/// A stored write as the runtime reads it: [`decode`], except that a message list stored as
/// an `Overwrite` write ([`cp::MessagesKind::Overwrite`], the checkpoint crate's own encoding,
/// which this adapter never writes) reads as the runtime's tagged Overwrite
/// (`{"__overwrite__": list}`), not as a plain list a replay would append.
fn decode_write(channel: &str, b: &cp::Blob) -> Result<Json> {
    let j = decode(channel, b)?;
    Ok(match b {
        cp::Blob::Messages(m) if m.kind == cp::MessagesKind::Overwrite => {
            serde_json::json!({ crate::schema::OVERWRITE_TAG: j })
        }
        _ => j,
    })
}

/// Whether `j` is a non-empty list of LangChain message dicts (objects with `type` and `content`).
fn is_message_list(j: &Json) -> bool {
    match j {
        Json::Array(items) if !items.is_empty() => items.iter().all(|m| {
            m.as_object()
                .is_some_and(|o| o.contains_key("type") && o.contains_key("content"))
        }),
        _ => false,
    }
}

/// Encodes a value or write. Message lists become [`cp::Blob::Messages`], so savers store each
/// message body once per thread and a list (snapshot or write) costs references only; the
/// encoding is lossless for any list of objects, so the shape test cannot change a value.
fn encode(channel: &str, j: &Json, kind: cp::MessagesKind) -> Result<cp::Blob> {
    let fail = |source| Error::Serialization {
        channel: channel.to_owned(),
        source,
    };
    if j.is_null() {
        return Ok(cp::Blob::Null);
    }
    if let Json::Array(items) = j
        && is_message_list(j)
    {
        return cp::Blob::messages(kind, items).map_err(fail);
    }
    cp::Blob::json(j).map_err(fail)
}
fn source_of(s: Option<cp::CheckpointSource>) -> Source {
    match s {
        Some(cp::CheckpointSource::Input) => Source::Input,
        Some(cp::CheckpointSource::Update) => Source::Update,
        Some(cp::CheckpointSource::Fork) => Source::Fork,
        _ => Source::Loop,
    }
}

fn to_cp_source(s: Source) -> cp::CheckpointSource {
    match s {
        Source::Input => cp::CheckpointSource::Input,
        Source::Loop => cp::CheckpointSource::Loop,
        Source::Update => cp::CheckpointSource::Update,
        Source::Fork => cp::CheckpointSource::Fork,
    }
}

/// `Checkpoint::v` of a record whose channel versions and versions seen list only the entries
/// that differ from its parent's (records the runtime can read back exactly; any other record
/// is stored in full with the reference's `v`). The saver keeps a relative record's ancestors
/// on prune and delete_for_runs.
pub use antler_checkpoint::RELATIVE_RECORD_V;

/// Why a read fails when its checkpoint is deleted while it is read.
const VANISHED: &str = "the checkpoint vanished while it was read";

/// Whether `e` is a read of a checkpoint deleted while it was read.
pub(crate) fn is_vanished(e: &Error) -> bool {
    matches!(e, Error::Storage { source } if source
        .downcast_ref::<RelativeRecordError>()
        .is_some_and(|r| r.why == VANISHED))
}

/// The checkpoint kind of a [`RelativeRecordError`]: a read that found its checkpoint
/// deleted is a conflict worth retrying, anything else stored data that cannot be completed.
pub(crate) fn relative_record_kind(e: &RelativeRecordError) -> cp::ErrorKind {
    if e.why == VANISHED {
        cp::ErrorKind::Conflict
    } else {
        cp::ErrorKind::Corrupt
    }
}

/// A full record at least every `FULL_RECORD_EVERY` records along any parent path, so reading a
/// checkpoint whose ancestors are not cached fetches at most this many records.
const FULL_RECORD_EVERY: u32 = 8;

/// Recently written or read checkpoints' full version maps kept per adapter (then cleared).
const MAP_CACHE_MAX: usize = 16_384;

/// A relative record whose parent chain does not reach a full record.
#[derive(Debug, thiserror::Error)]
#[error("checkpoint {checkpoint} of thread '{thread}': {why}")]
pub struct RelativeRecordError {
    /// The thread.
    pub thread: String,
    /// The checkpoint being read.
    pub checkpoint: String,
    /// What is wrong.
    pub why: &'static str,
}

/// The full channel versions and versions seen of one checkpoint.
#[derive(Clone, Debug, PartialEq)]
struct Maps {
    versions: BTreeMap<String, u64>,
    seen: BTreeMap<String, BTreeMap<String, u64>>,
    /// Relative records since the last full one on the parent path (0 for a full record).
    depth: u32,
}

fn is_relative(c: &cp::Checkpoint) -> bool {
    c.v == RELATIVE_RECORD_V
}

/// Folds a stored record's version entries onto `base` (a full record: onto nothing).
fn fold(base: Option<&Maps>, c: &cp::Checkpoint) -> Maps {
    let mut m = match base {
        Some(b) if is_relative(c) => Maps {
            depth: b.depth + 1,
            ..b.clone()
        },
        _ => Maps {
            versions: BTreeMap::new(),
            seen: BTreeMap::new(),
            depth: 0,
        },
    };
    for (ch, v) in &c.channel_versions {
        m.versions.insert(load_name(ch.as_str()), v.get());
    }
    for (n, seen) in &c.versions_seen {
        let e = m.seen.entry(n.to_string()).or_default();
        for (ch, v) in seen {
            e.insert(load_name(ch.as_str()), v.get());
        }
    }
    m
}

/// The entries of `rec` that differ from `parent`, or `None` when a relative record cannot
/// represent `rec` exactly (an entry or a node disappeared, or a node is new with no entries).
#[expect(clippy::type_complexity, reason = "the two maps of a record")]
fn relative_to(
    rec: &CheckpointRecord,
    parent: &Maps,
) -> Option<(
    BTreeMap<String, u64>,
    BTreeMap<String, BTreeMap<String, u64>>,
)> {
    if parent
        .versions
        .keys()
        .any(|c| !rec.versions.contains_key(c))
    {
        return None;
    }
    let versions = rec
        .versions
        .iter()
        .filter(|(c, v)| parent.versions.get(*c) != Some(*v) || rec.new_versions.contains(*c))
        .map(|(c, v)| (c.clone(), *v))
        .collect();
    let mut seen = BTreeMap::new();
    for (n, pm) in &parent.seen {
        let m = rec.versions_seen.get(n)?;
        if pm.keys().any(|c| !m.contains_key(c)) {
            return None;
        }
    }
    for (n, m) in &rec.versions_seen {
        let pm = parent.seen.get(n);
        if pm.is_none() && m.is_empty() {
            return None;
        }
        let diff: BTreeMap<String, u64> = m
            .iter()
            .filter(|(c, v)| pm.and_then(|pm| pm.get(*c)) != Some(*v))
            .map(|(c, v)| (c.clone(), *v))
            .collect();
        if !diff.is_empty() {
            seen.insert(n.clone(), diff);
        }
    }
    Some((versions, seen))
}

/// Ancestors fetched ahead of a walk in `SaverCheckpointer::load`, nearest first.
#[derive(Default)]
struct Ahead {
    chain: std::collections::VecDeque<cp::CheckpointTuple>,
    /// The last fetched chain came back shorter than asked: nothing lies beyond `chain`.
    ended: bool,
    /// Values of channel versions read with the record (see
    /// [`cp::Saver::get_tuple_with_ancestry`]): `None` for a key under which nothing is stored.
    inherited: BTreeMap<(cp::ChannelName, cp::ChannelVersion), Option<cp::Blob>>,
}

impl Ahead {
    /// What a [`cp::Saver::get_tuple_with_ancestry`] read with `limit` brought besides the record.
    fn from_ancestry(
        ancestors: Vec<cp::CheckpointTuple>,
        limit: usize,
        inherited: BTreeMap<(cp::ChannelName, cp::ChannelVersion), Option<cp::Blob>>,
    ) -> Self {
        Self {
            ended: ancestors.len() < limit,
            chain: ancestors.into(),
            inherited,
        }
    }
}

/// Every checkpoint of `scope`.
fn scope_query(scope: &Scope) -> cp::ListQuery {
    cp::ListQuery {
        thread_id: Some(cp::ThreadId::new(scope.thread.as_str())),
        checkpoint_ns: Some(cp::CheckpointNs::new(scope.ns.as_str())),
        ..cp::ListQuery::default()
    }
}

fn parent_of(t: &cp::CheckpointTuple) -> Option<cp::CheckpointId> {
    t.parent_config.as_ref().and_then(|p| p.checkpoint_id)
}

/// Builds the runtime's tuple from a stored one, its full maps and its resolved values.
/// Stored values as the runtime reads them: message-list snapshots as their items.
#[derive(Default)]
struct Values {
    json: BTreeMap<String, Json>,
    lists: BTreeMap<String, Vec<Arc<[u8]>>>,
}

impl Values {
    fn add(&mut self, name: String, b: &cp::Blob) -> Result<()> {
        match b {
            cp::Blob::Messages(m) if m.kind == cp::MessagesKind::Snapshot => {
                self.lists.insert(name, m.items.clone());
            }
            other => {
                let j = decode(&name, other)?;
                self.json.insert(name, j);
            }
        }
        Ok(())
    }
}

fn convert(t: &cp::CheckpointTuple, maps: &Maps, values: Values) -> Result<CheckpointTuple> {
    let mut pending_writes = Vec::with_capacity(t.pending_writes.len());
    for w in &t.pending_writes {
        let channel = load_name(w.channel.as_str());
        pending_writes.push(PendingWrite {
            task_id: TaskId::new(w.task_id.as_str()),
            task_path: load_path(w.task_path.as_str()),
            value: decode_write(&channel, &w.value)?,
            channel,
        });
    }
    let c = &t.checkpoint;
    let (counters, counters_read) = cp::mode::all_counters(&t.metadata);
    Ok(CheckpointTuple {
        checkpoint: CheckpointRecord {
            id: CheckpointId::new(c.id.to_string()),
            parent: parent_of(t).map(|id| CheckpointId::new(id.to_string())),
            step: t.metadata.step,
            source: source_of(t.metadata.source),
            values: values.json,
            versions: maps.versions.clone(),
            versions_seen: maps.seen.clone(),
            updated_channels: c
                .updated_channels
                .as_ref()
                .map(|u| u.iter().map(|c| load_name(c.as_str())).collect()),
            new_versions: Default::default(),
            encoded_lists: values.lists,
            // Typed, or carried in `extra` by metadata copied key by key: the gate takes such a
            // checkpoint as delta by those counters, so the cadence counts them too.
            counters: counters
                .iter()
                .map(|(c, n)| (load_name(c.as_str()), (n.updates, n.supersteps)))
                .collect(),
            run_id: t.metadata.run_id.as_ref().map(|r| r.as_str().to_owned()),
            parents: t
                .metadata
                .parents
                .iter()
                .map(|(ns, id)| (ns.to_string(), CheckpointId::new(id.to_string())))
                .collect(),
            // The free keys, without the mode marker's older spelling (the saver's own key)
            // and without counters read from `extra` above.
            metadata: t
                .metadata
                .extra
                .iter()
                .filter(|(k, _)| k.as_str() != cp::model::CHANNEL_MODE_METADATA_KEY)
                .filter(|(k, _)| !(counters_read && k.as_str() == cp::model::COUNTERS_METADATA_KEY))
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
        },
        pending_writes,
    })
}

impl SaverCheckpointer {
    fn cached(&self, scope: &Scope, id: &cp::CheckpointId) -> Option<Arc<Maps>> {
        self.maps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&(scope.clone(), *id))
            .cloned()
    }

    fn remember(&self, scope: &Scope, id: cp::CheckpointId, maps: Arc<Maps>) {
        let mut g = self
            .maps
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if g.len() >= MAP_CACHE_MAX {
            g.clear();
        }
        g.insert((scope.clone(), id), maps);
    }

    /// The stored tuple of `id` (the latest when `None`); its values only `with_values` (a
    /// tuple without them costs no value or message-body reads).
    ///
    /// With values it is read with its ancestry ([`cp::Saver::get_tuple_with_ancestry`]), so
    /// that completing a relative record whose maps are not cached (a cold read) needs no
    /// further call: the parent chain up to the full record and the values stored by those
    /// records come with it. A read whose maps are cached uses only the values (the
    /// ancestors cost the savers of `antler-checkpoint` a few rows in the same statement).
    async fn raw(
        &self,
        scope: &Scope,
        id: Option<cp::CheckpointId>,
        with_values: bool,
    ) -> Result<Option<(cp::CheckpointTuple, Ahead)>> {
        let mut config =
            cp::CheckpointConfig::latest(scope.thread.as_str()).with_ns(scope.ns.as_str());
        if let Some(id) = id {
            config = config.with_checkpoint_id(id);
        }
        if with_values {
            let limit = FULL_RECORD_EVERY as usize;
            let read = self
                .saver
                .get_tuple_with_ancestry(&config, limit)
                .await
                .map_err(storage)?;
            return Ok(read.map(|r| {
                (
                    r.tuple,
                    Ahead::from_ancestry(r.ancestors, limit, r.inherited),
                )
            }));
        }
        let t = self
            .saver
            .get_tuple_without_values(&config)
            .await
            .map_err(storage)?;
        Ok(t.map(|t| (t, Ahead::default())))
    }

    fn broken(scope: &Scope, t: &cp::CheckpointTuple, why: &'static str) -> Error {
        Error::Storage {
            source: Box::new(RelativeRecordError {
                thread: scope.thread.to_string(),
                checkpoint: t.checkpoint.id.to_string(),
                why,
            }),
        }
    }

    /// The parent of a relative record (which always has one).
    fn parent_id(scope: &Scope, t: &cp::CheckpointTuple) -> Result<cp::CheckpointId> {
        parent_of(t).ok_or_else(|| Self::broken(scope, t, "relative record without a parent"))
    }

    /// The parent of the relative record `last`, the next record of `ahead`: taken from the
    /// chain fetched earlier, or, once that is used up, the first of a new chain of up to
    /// [`FULL_RECORD_EVERY`] records fetched in one saver call (no values, no writes).
    ///
    /// One such chain reaches the full record of any relative record this adapter writes (at
    /// most `FULL_RECORD_EVERY - 1` records below one); a store written with a wider spacing
    /// costs one more call per `FULL_RECORD_EVERY` records, up to the caller's bound.
    async fn parent_record(
        &self,
        scope: &Scope,
        head: &cp::CheckpointTuple,
        last: &cp::CheckpointTuple,
        ahead: &mut Ahead,
    ) -> Result<cp::CheckpointTuple> {
        let pid = Self::parent_id(scope, last)?;
        if ahead.chain.is_empty() && !ahead.ended {
            let config = cp::CheckpointConfig::latest(scope.thread.as_str())
                .with_ns(scope.ns.as_str())
                .with_checkpoint_id(pid);
            let limit = FULL_RECORD_EVERY as usize;
            let chain = self
                .saver
                .get_ancestors_without_values(&config, limit)
                .await
                .map_err(storage)?;
            // A shorter chain ends at a root or before a missing parent: asking again for the
            // parent of its last record would only confirm that it is missing.
            ahead.ended = chain.len() < limit;
            ahead.chain.extend(chain);
        }
        match ahead.chain.pop_front() {
            Some(p) if p.checkpoint.id == pid => Ok(p),
            Some(_) => Err(Self::broken(
                scope,
                last,
                "the saver returned another record as the parent",
            )),
            None => {
                // Either the record being read (`head`) went with its ancestors (a prune by
                // another process between its read and this one: it vanished, and a page of
                // history leaves it out), or the store lost a record that an existing one needs.
                let gone = self
                    .saver
                    .get_tuple_without_values(&head.config)
                    .await
                    .map_err(storage)?
                    .is_none();
                Err(Self::broken(
                    scope,
                    last,
                    if gone {
                        VANISHED
                    } else {
                        "the parent of a relative record is missing"
                    },
                ))
            }
        }
    }

    /// Full maps of `t` and, with `with_values`, its channel values: each channel's value is
    /// the value stored for the version the full maps give it (the one the nearest record on
    /// the parent path that lists the channel stored or carried).
    /// Fetches parents only when their maps are not cached, from the ancestors read with the
    /// record (`ahead`) or as one chain per saver call (see [`Self::parent_record`]); at most
    /// [`FULL_RECORD_EVERY`] records separate a relative record from a full one. Values the
    /// record itself does not carry come from `ahead.inherited` (read with it), the rest from
    /// one [`get_channel_values`](cp::Saver::get_channel_values) call.
    async fn load(
        &self,
        scope: &Scope,
        t: cp::CheckpointTuple,
        with_values: bool,
        mut ahead: Ahead,
    ) -> Result<CheckpointTuple> {
        let guard = 4 * FULL_RECORD_EVERY as usize + 4;
        // Nearest first: `t`, then the ancestors the map walk needs (read without values).
        let mut path = vec![t];
        let maps = match self.cached(scope, &path[0].checkpoint.id) {
            Some(m) => m,
            None => {
                // Walk up until a full record or an ancestor with cached maps.
                let mut base: Option<Arc<Maps>> = None;
                while let Some(last) = path.last()
                    && is_relative(&last.checkpoint)
                {
                    let pid = Self::parent_id(scope, last)?;
                    if let Some(m) = self.cached(scope, &pid) {
                        base = Some(m);
                        break;
                    }
                    if path.len() > guard {
                        return Err(Self::broken(scope, last, "no full record within the bound"));
                    }
                    let p = self
                        .parent_record(scope, &path[0], last, &mut ahead)
                        .await?;
                    path.push(p);
                }
                let mut cur = base;
                for r in path.iter().rev() {
                    let m = Arc::new(fold(cur.as_deref(), &r.checkpoint));
                    self.remember(scope, r.checkpoint.id, m.clone());
                    cur = Some(m);
                }
                cur.ok_or_else(|| Self::broken(scope, &path[0], "empty path"))?
            }
        };
        let mut values = Values::default();
        if with_values {
            // A channel the record lists takes the value read with it (or has none); the
            // others were stored by ancestors at the versions the full maps name, and one
            // saver call reads those by key, however far back they were stored.
            let head = &path[0].checkpoint;
            // The head's entries by runtime name (as the maps are keyed).
            let listed: BTreeMap<String, &cp::ChannelName> = head
                .channel_versions
                .keys()
                .map(|c| (load_name(c.as_str()), c))
                .collect();
            let mut elsewhere = Vec::new();
            for (name, version) in &maps.versions {
                match listed.get(name) {
                    Some(stored) => {
                        if let Some(b) = head.channel_values.get(*stored) {
                            values.add(name.clone(), b)?;
                        }
                    }
                    None => {
                        let key = (chan(name), cp::ChannelVersion::new(*version));
                        // Read with the record: the value, or the knowledge that none is stored.
                        match ahead.inherited.get(&key) {
                            Some(Some(b)) => values.add(name.clone(), b)?,
                            Some(None) => {}
                            None => elsewhere.push(key),
                        }
                    }
                }
            }
            if !elsewhere.is_empty() {
                let config = cp::CheckpointConfig::latest(scope.thread.as_str())
                    .with_ns(scope.ns.as_str())
                    .with_checkpoint_id(head.id);
                let found = self
                    .saver
                    .get_channel_values(&config, &elsewhere)
                    .await
                    .map_err(storage)?
                    .ok_or_else(|| Self::broken(scope, &path[0], VANISHED))?;
                for ((ch, _), b) in &found {
                    values.add(load_name(ch.as_str()), b)?;
                }
            }
        }
        convert(&path[0], &maps, values)
    }

    /// The addressed checkpoint (or the latest) with full maps; values only `with_values`.
    async fn read(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
        with_values: bool,
    ) -> Result<Option<CheckpointTuple>> {
        let id = match id {
            Some(given) => match stored_id(given) {
                Some(id) => Some(id),
                None => return Ok(None),
            },
            None => None,
        };
        // A checkpoint deleted between its read and its completion (a prune or
        // `delete_for_runs` by another process) is gone when it was addressed; the latest is
        // read again, as the savers read it, up to three times in all.
        for _ in 0..3 {
            let Some((t, ahead)) = self.raw(scope, id, with_values).await? else {
                return Ok(None);
            };
            match self.load(scope, t, with_values, ahead).await {
                Err(e) if is_vanished(&e) => {
                    if id.is_some() {
                        return Ok(None);
                    }
                }
                done => return done.map(Some),
            }
        }
        Err(storage(cp::Error::Conflict {
            thread_id: cp::ThreadId::new(scope.thread.as_str()),
            detail: "the thread's latest checkpoint was deleted while it was read, three times"
                .into(),
        }))
    }
}

#[async_trait]
impl Checkpointer for SaverCheckpointer {
    async fn get_tuple(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.read(scope, id, true).await
    }

    async fn head(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        self.read(scope, id, false).await
    }

    fn accepts_encoded_lists(&self) -> bool {
        true
    }

    fn stores_delta_messages(&self) -> bool {
        self.saver.store_config().mode == cp::ChannelMode::Delta
    }

    fn messages_snapshot_frequency(&self) -> Option<u32> {
        let config = self.saver.store_config();
        (config.mode == cp::ChannelMode::Delta).then(|| config.snapshot_frequency.get())
    }

    async fn list_ids(
        &self,
        scope: &Scope,
        before: Option<&CheckpointId>,
        limit: Option<usize>,
    ) -> Result<Vec<CheckpointId>> {
        let query = cp::ListQuery {
            before: before.map(parse_id).transpose()?,
            limit,
            ..scope_query(scope)
        };
        let raws = self
            .saver
            .list_without_values(&query)
            .await
            .map_err(storage)?;
        Ok(raws
            .iter()
            .map(|t| CheckpointId::new(t.checkpoint.id.to_string()))
            .collect())
    }

    async fn list_page(
        &self,
        scope: &Scope,
        before: Option<&CheckpointId>,
        limit: usize,
    ) -> Result<Vec<CheckpointTuple>> {
        let query = cp::ListQuery {
            before: before.map(parse_id).transpose()?,
            limit: Some(limit),
            ..scope_query(scope)
        };
        // One saver call for the page's rows, values and writes; each record is then completed
        // as a single read completes it (maps from cached or fetched ancestors, values its
        // ancestors stored by key).
        let raws = self.saver.list(&query).await.map_err(storage)?;
        let mut out = Vec::with_capacity(raws.len());
        for t in raws {
            match self.load(scope, t, true, Ahead::default()).await {
                Ok(t) => out.push(t),
                // Deleted between the list and its completion (a prune by another process):
                // no longer history, as for a page read one checkpoint at a time.
                Err(e) if is_vanished(&e) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(out)
    }

    async fn max_version(&self, scope: &Scope) -> Result<u64> {
        // A relative record lists only the entries that differ from its parent, so every
        // version of a completed record appears in the record that set it: the greatest raw
        // entry, which is what the saver reports, is the greatest version.
        self.saver
            .max_channel_version(
                &cp::ThreadId::new(scope.thread.as_str()),
                &cp::CheckpointNs::new(scope.ns.as_str()),
            )
            .await
            .map_err(storage)
    }

    async fn list(&self, scope: &Scope) -> Result<Vec<CheckpointTuple>> {
        let raws = self
            .saver
            .list(&scope_query(scope))
            .await
            .map_err(storage)?;
        let at: HashMap<cp::CheckpointId, usize> = raws
            .iter()
            .enumerate()
            .map(|(i, t)| (t.checkpoint.id, i))
            .collect();
        // Maps: parents before children (a relative record's chain is at most a few long).
        let mut maps: Vec<Option<Arc<Maps>>> = vec![None; raws.len()];
        for start in 0..raws.len() {
            let mut chain = Vec::new();
            let mut i = start;
            let base = loop {
                if let Some(m) = &maps[i] {
                    break Some(m.clone());
                }
                chain.push(i);
                if !is_relative(&raws[i].checkpoint) {
                    break None;
                }
                let parent = parent_of(&raws[i]).and_then(|p| at.get(&p).copied());
                match parent {
                    Some(p) if chain.len() <= raws.len() => i = p,
                    _ => {
                        return Err(Self::broken(
                            scope,
                            &raws[i],
                            "the parent of a relative record is missing",
                        ));
                    }
                }
            };
            let mut cur = base;
            for &j in chain.iter().rev() {
                let m = Arc::new(fold(cur.as_deref(), &raws[j].checkpoint));
                maps[j] = Some(m.clone());
                cur = Some(m);
            }
        }
        let mut out = Vec::with_capacity(raws.len());
        for (i, t) in raws.iter().enumerate() {
            let Some(m) = &maps[i] else {
                return Err(Self::broken(scope, t, "unresolved record"));
            };
            let mut values = Values::default();
            let mut need: std::collections::BTreeSet<&str> =
                m.versions.keys().map(String::as_str).collect();
            let mut j = i;
            loop {
                let c = &raws[j].checkpoint;
                for ch in c.channel_versions.keys() {
                    let name = load_name(ch.as_str());
                    if need.remove(name.as_str())
                        && let Some(b) = c.channel_values.get(ch)
                    {
                        values.add(name.clone(), b)?;
                    }
                }
                if need.is_empty() || !is_relative(c) {
                    break;
                }
                match parent_of(&raws[j]).and_then(|p| at.get(&p).copied()) {
                    Some(p) => j = p,
                    None => break,
                }
            }
            out.push(convert(t, m, values)?);
        }
        Ok(out)
    }

    async fn put(&self, scope: &Scope, mut rec: CheckpointRecord) -> Result<()> {
        let mut config =
            cp::CheckpointConfig::latest(scope.thread.as_str()).with_ns(scope.ns.as_str());
        if let Some(parent) = &rec.parent {
            config = config.with_checkpoint_id(parse_id(parent)?);
        }
        let mut checkpoint = cp::Checkpoint::empty();
        checkpoint.id = parse_id(&rec.id)?;
        // The id carries its creation time (see `new_checkpoint_id`): the stored timestamp is
        // an offset of zero from it. Ids made elsewhere keep the time of the put.
        let id_micros = i64::try_from(checkpoint.id.as_u128() >> 64).unwrap_or(0);
        if (checkpoint.ts.as_micros() - id_micros).abs() < 60_000_000 {
            checkpoint.ts = cp::Timestamp::from_micros(id_micros);
        }
        for (ch, j) in &rec.values {
            checkpoint
                .channel_values
                .insert(chan(ch), encode(ch, j, cp::MessagesKind::Snapshot)?);
        }
        // Moved, not copied: a snapshot's list holds one pointer per message of the thread.
        for (ch, items) in std::mem::take(&mut rec.encoded_lists) {
            let blob = if items.is_empty() {
                encode(&ch, &Json::Array(Vec::new()), cp::MessagesKind::Snapshot)?
            } else {
                cp::Blob::Messages(cp::MessagesBlob {
                    kind: cp::MessagesKind::Snapshot,
                    items,
                })
            };
            checkpoint.channel_values.insert(chan(&ch), blob);
        }
        let parent_maps = match &rec.parent {
            Some(p) => self.cached(scope, &parse_id(p)?),
            None => None,
        };
        let relative = parent_maps
            .as_deref()
            .filter(|m| m.depth + 1 < FULL_RECORD_EVERY)
            .and_then(|m| relative_to(&rec, m).map(|r| (r, m.depth + 1)));
        let (versions, seen, depth) = match &relative {
            Some(((v, s), depth)) => {
                checkpoint.v = RELATIVE_RECORD_V;
                (v, s, *depth)
            }
            None => (&rec.versions, &rec.versions_seen, 0),
        };
        checkpoint.channel_versions = versions
            .iter()
            .map(|(ch, v)| (chan(ch), cp::ChannelVersion::new(*v)))
            .collect();
        checkpoint.versions_seen = seen
            .iter()
            .map(|(n, m)| {
                (
                    cp::NodeName::new(n.as_str()),
                    m.iter()
                        .map(|(ch, v)| (chan(ch), cp::ChannelVersion::new(*v)))
                        .collect(),
                )
            })
            .collect();
        checkpoint.updated_channels = rec
            .updated_channels
            .as_ref()
            .map(|u| u.iter().map(|c| chan(c)).collect());
        let new_versions: cp::ChannelVersions = rec
            .new_versions
            .iter()
            .filter_map(|ch| {
                rec.versions
                    .get(ch)
                    .map(|v| (chan(ch), cp::ChannelVersion::new(*v)))
            })
            .collect();
        let parents = rec
            .parents
            .iter()
            .map(|(ns, id)| Ok((cp::CheckpointNs::new(ns.as_str()), parse_id(id)?)))
            .collect::<Result<_>>()?;
        let mut metadata = cp::CheckpointMetadata {
            source: Some(to_cp_source(rec.source)),
            step: rec.step,
            parents,
            run_id: rec.run_id.as_deref().map(cp::RunId::new),
            extra: rec
                .metadata
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect(),
            ..Default::default()
        };
        for (ch, (updates, supersteps)) in &rec.counters {
            metadata.counters_since_delta_snapshot.insert(
                chan(ch),
                cp::DeltaCounters {
                    updates: *updates,
                    supersteps: *supersteps,
                },
            );
        }
        // The mode marker (kernel-spec R32) follows the store's configured mode.
        cp::mode::inject_mode_marker(&mut metadata, self.saver.store_config().mode);
        let id = checkpoint.id;
        self.saver
            .put(&config, checkpoint, metadata, &new_versions)
            .await
            .map_err(storage)?;
        self.remember(
            scope,
            id,
            Arc::new(Maps {
                versions: rec.versions,
                seen: rec.versions_seen,
                depth,
            }),
        );
        Ok(())
    }

    async fn put_writes(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        task_id: &TaskId,
        task_path: &str,
        writes: Vec<(String, Json)>,
    ) -> Result<()> {
        let config = cp::CheckpointConfig::latest(scope.thread.as_str())
            .with_ns(scope.ns.as_str())
            .with_checkpoint_id(stored_id(checkpoint).ok_or_else(|| not_found(scope, checkpoint))?);
        let mut blobs = Vec::with_capacity(writes.len());
        for (ch, j) in &writes {
            blobs.push((chan(ch), encode(ch, j, cp::MessagesKind::Write)?));
        }
        self.saver
            .put_writes(
                &config,
                blobs,
                &cp::TaskId::new(task_id.as_str()),
                &cp::TaskPath::new(store_path(task_path)),
            )
            .await
            .map_err(storage_or_not_found(scope, checkpoint))
    }

    async fn delta_history(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaHistory>> {
        let id = stored_id(checkpoint).ok_or_else(|| not_found(scope, checkpoint))?;
        let config = cp::CheckpointConfig::latest(scope.thread.as_str())
            .with_ns(scope.ns.as_str())
            .with_checkpoint_id(id);
        let names: Vec<cp::ChannelName> = channels.iter().map(|c| chan(c)).collect();
        let found = self
            .saver
            .delta_channel_history(&config, &names)
            .await
            .map_err(storage_or_not_found(scope, checkpoint))?;
        let mut out = BTreeMap::new();
        for (ch, h) in found {
            // A message-list seed is handed over as its items, parsed by the channel itself.
            let (seed, seed_items) = match &h.seed {
                Some(cp::Blob::Messages(m)) if m.kind == cp::MessagesKind::Snapshot => {
                    (None, Some(m.items.clone()))
                }
                other => (
                    other.as_ref().map(|b| decode(ch.as_str(), b)).transpose()?,
                    None,
                ),
            };
            let writes = h
                .writes
                .iter()
                .map(|w| decode_write(ch.as_str(), &w.value))
                .collect::<Result<Vec<_>>>()?;
            out.insert(
                load_name(ch.as_str()),
                DeltaHistory {
                    seed,
                    seed_items,
                    writes,
                },
            );
        }
        // The walk answers every channel asked for (an empty history is an answer); a saver
        // that leaves one out would make the channel read as empty, a state that is not the
        // checkpoint's: fail closed, as `delta::materialize` does.
        if let Some(missing) = channels.iter().find(|c| !out.contains_key(c.as_str())) {
            return Err(storage(cp::Error::Corrupt {
                thread_id: cp::ThreadId::new(scope.thread.as_str()),
                checkpoint_id: id,
                what: format!("history of channel {missing}"),
                detail: "the saver's history walk left the channel out".into(),
            }));
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{load_name, load_path, store_name, store_path};

    /// The checkpoint crate's Overwrite write of a message list reads as the runtime's tagged
    /// Overwrite, which the delta channel takes as one (a plain list would be appended).
    #[test]
    fn a_stored_overwrite_of_messages_reads_as_an_overwrite() {
        use antler_checkpoint::delta::DeltaWrite;
        use antler_state_reducers::{Message, MessageWrite};
        let list = vec![Message::human("kept").with_id("k")];
        let overwrite = DeltaWrite::Overwrite(list.clone()).to_blob().unwrap();
        let j = super::decode_write("messages", &overwrite).unwrap();
        let key: crate::Key<Vec<Message>> = crate::Key::new("messages");
        let spec = crate::schema::ErasedSpec::new(&key, crate::ChannelSpec::messages_delta(10));
        let write = spec.write_from_json(j).unwrap();
        assert!(matches!(write, crate::state::Write::Overwrite(_)));
        let plain = DeltaWrite::Write(MessageWrite::Messages(list))
            .to_blob()
            .unwrap();
        let j = super::decode_write("messages", &plain).unwrap();
        assert!(matches!(
            spec.write_from_json(j).unwrap(),
            crate::state::Write::Value(_)
        ));
    }

    #[test]
    fn stored_names_round_trip_and_are_shorter() {
        for n in [
            "messages",
            "branch:to:turn",
            "join:a+b:c",
            "\u{1}odd",
            "\u{3}x",
            "",
            "branch:to:",
        ] {
            assert_eq!(load_name(&store_name(n)), n, "{n:?}");
        }
        assert_eq!(store_name("branch:to:turn"), "\u{1}turn");
    }

    #[test]
    fn stored_paths_round_trip_and_keep_the_order() {
        let paths = [
            "",
            "~__pregel_pull, __start__",
            "~__pregel_pull, a",
            "~__pregel_pull, b",
            "~__pregel_push, 0000000000",
            "~__pregel_push, 0000000011",
        ];
        for p in paths {
            assert_eq!(load_path(&store_path(p)), p);
        }
        let stored: Vec<String> = paths.iter().map(|p| store_path(p)).collect();
        assert!(stored.windows(2).all(|w| w[0] < w[1]), "{stored:?}");
        assert_eq!(load_path(&store_path("\u{2}x")), "\u{2}x");
    }
}
