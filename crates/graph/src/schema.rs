//! The state schema: channel declarations ([`ChannelSpec`]) erased into specs with serde hooks.

use std::any::TypeId;
use std::collections::HashMap;
use std::fmt;
use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value as Json;

use crate::channel::{Aux, Channel, Delta, Ephemeral, LastValue, ReduceFn, Reducer};
use crate::error::{BoxError, BuildError, Error, Result};
use crate::state::{Key, Val, Write};

type ToJson = Arc<dyn Fn(&Val) -> std::result::Result<Json, SerdeFail> + Send + Sync>;
type FromJson = Arc<dyn Fn(Json) -> std::result::Result<Val, serde_json::Error> + Send + Sync>;

/// A serialization failure: serde's error, or a value of an unexpected type.
pub(crate) enum SerdeFail {
    Serde(serde_json::Error),
    Type,
}

#[derive(Clone)]
enum Kind {
    LastValue,
    Reducer {
        id: Arc<str>,
        init: Arc<dyn Fn() -> Val + Send + Sync>,
        reduce: ReduceFn,
    },
    Ephemeral,
    Untracked,
    PacketOnly,
    Delta {
        id: Arc<str>,
        init: Arc<dyn Fn() -> Val + Send + Sync>,
        reduce: ReduceFn,
        frequency: u32,
        /// The bound on super-steps between snapshots (runtime-spec §5.4).
        max_supersteps: u32,
        prepare: Option<PrepareFn>,
    },
}

/// Rewrites a write before it is persisted (e.g. assigns message ids, runtime-spec §10 rule 11).
pub(crate) type PrepareFn = Arc<dyn Fn(&Val) -> Option<Val> + Send + Sync>;

/// The global bound on super-steps between snapshots of a delta channel (runtime-spec §5.4).
pub const DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT: u32 = 5000;

/// How a channel updates: the declaration registered into a graph's schema for a [`Key`].
///
/// ```
/// use antler_graph::{ChannelSpec, Key, StateGraph};
/// const LOG: Key<Vec<String>> = Key::from_static("log");
/// let mut graph = StateGraph::new();
/// graph.channel(&LOG, ChannelSpec::reducer("append", Vec::new, |acc: &Vec<String>, writes: &[Vec<String>]| {
///     let mut out = acc.clone();
///     writes.iter().for_each(|w| out.extend(w.iter().cloned()));
///     Ok(out)
/// })).unwrap();
/// ```
pub struct ChannelSpec<V, W = V> {
    kind: Kind,
    _t: std::marker::PhantomData<fn() -> (V, W)>,
}

impl<V> ChannelSpec<V, V> {
    /// A plain field: one write per step, a second one is `InvalidConcurrentUpdate`. Empty until written.
    pub fn last_value() -> Self {
        Self {
            kind: Kind::LastValue,
            _t: std::marker::PhantomData,
        }
    }
    /// A value that lives for one step: cleared in the next step that does not write it.
    pub fn ephemeral() -> Self {
        Self {
            kind: Kind::Ephemeral,
            _t: std::marker::PhantomData,
        }
    }
    /// A value that is never checkpointed (and stripped from persisted writes).
    pub fn untracked() -> Self {
        Self {
            kind: Kind::Untracked,
            _t: std::marker::PhantomData,
        }
    }
    /// Not a state channel: a key that may only appear in `Send` packets (a worker's private input).
    pub fn packet_only() -> Self {
        Self {
            kind: Kind::PacketOnly,
            _t: std::marker::PhantomData,
        }
    }
}

impl<V: Send + Sync + 'static, W: Send + Sync + 'static> ChannelSpec<V, W> {
    /// A reducer channel (`BinaryOperatorAggregate`): starts at `init()`, and folds each step's writes,
    /// in task-path order, with the batch reducer `reduce(value, writes)`.
    ///
    /// `id` names the reducer: two declarations of one channel conflict unless kind, types and id agree.
    /// One [`crate::Update::overwrite`] per step replaces the value and drops the step's other writes.
    pub fn reducer<I, R>(id: &str, init: I, reduce: R) -> Self
    where
        I: Fn() -> V + Send + Sync + 'static,
        R: Fn(&V, &[W]) -> std::result::Result<V, BoxError> + Send + Sync + 'static,
    {
        let reduce: ReduceFn = Arc::new(move |acc: Val, batch: &[Val], _aux: &mut Aux| {
            let acc = acc
                .downcast_ref::<V>()
                .ok_or("reducer state has the wrong type")?;
            let mut writes = Vec::with_capacity(batch.len());
            for w in batch {
                writes.push(
                    w.downcast_ref::<W>()
                        .ok_or("reducer write has the wrong type")?,
                );
            }
            reduce_refs(&reduce, acc, &writes).map(|v| Arc::new(v) as Val)
        });
        Self {
            kind: Kind::Reducer {
                id: Arc::from(id),
                init: Arc::new(move || Arc::new(init()) as Val),
                reduce,
            },
            _t: std::marker::PhantomData,
        }
    }
}

impl<V: Clone + Send + Sync + 'static, W: Send + Sync + 'static> ChannelSpec<V, W> {
    /// Like [`ChannelSpec::reducer`], but the reducer takes the accumulated value by value and the
    /// whole step's writes at once: when the channel holds the only reference to its value (the
    /// usual case at the barrier), the value is updated in place instead of cloned.
    pub fn reducer_owned<I, R>(id: &str, init: I, reduce: R) -> Self
    where
        I: Fn() -> V + Send + Sync + 'static,
        R: Fn(V, &[&W]) -> std::result::Result<V, BoxError> + Send + Sync + 'static,
    {
        let reduce: ReduceFn = Arc::new(move |acc: Val, batch: &[Val], _aux: &mut Aux| {
            let acc: Arc<V> = acc
                .downcast::<V>()
                .map_err(|_| "reducer state has the wrong type")?;
            let owned = Arc::try_unwrap(acc).unwrap_or_else(|shared| (*shared).clone());
            let mut writes = Vec::with_capacity(batch.len());
            for w in batch {
                writes.push(
                    w.downcast_ref::<W>()
                        .ok_or("reducer write has the wrong type")?,
                );
            }
            reduce(owned, &writes).map(|v| Arc::new(v) as Val)
        });
        Self {
            kind: Kind::Reducer {
                id: Arc::from(id),
                init: Arc::new(move || Arc::new(init()) as Val),
                reduce,
            },
            _t: std::marker::PhantomData,
        }
    }
}

impl<V: Send + Sync + 'static, W: Send + Sync + 'static> ChannelSpec<V, W> {
    /// Sets a delta channel's bound on super-steps between snapshots (default
    /// [`DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT`], runtime-spec §5.4): a channel that stopped
    /// receiving writes still snapshots after this many checkpoints, which bounds its walk.
    /// Must be positive (0 fails at declaration with [`BuildError::InvalidSuperstepBound`]);
    /// no effect on other kinds.
    #[must_use]
    pub fn with_max_supersteps_since_snapshot(mut self, bound: u32) -> Self {
        if let Kind::Delta { max_supersteps, .. } = &mut self.kind {
            *max_supersteps = bound;
        }
        self
    }

    /// Turns a reducer declaration into a delta channel with snapshot frequency `F` (runtime-spec §5).
    fn into_delta(self, snapshot_frequency: u32) -> Self {
        match self.kind {
            Kind::Reducer { id, init, reduce } => Self {
                kind: Kind::Delta {
                    id,
                    init,
                    reduce,
                    frequency: snapshot_frequency,
                    max_supersteps: DELTA_MAX_SUPERSTEPS_SINCE_SNAPSHOT,
                    prepare: None,
                },
                _t: std::marker::PhantomData,
            },
            other => Self {
                kind: other,
                _t: std::marker::PhantomData,
            },
        }
    }

    /// A delta channel (runtime-spec §5): like [`ChannelSpec::reducer`], but checkpoints store only
    /// the step's writes, plus a snapshot of the value every `snapshot_frequency` updates (and when
    /// forced: an Overwrite, pending writes that will not be replayed, exit durability).
    /// The reducer must be batching-invariant. `snapshot_frequency` must be positive: declaring a
    /// channel with 0 fails with [`BuildError::InvalidSnapshotFrequency`].
    pub fn delta<I, R>(id: &str, init: I, reduce: R, snapshot_frequency: u32) -> Self
    where
        I: Fn() -> V + Send + Sync + 'static,
        R: Fn(&V, &[W]) -> std::result::Result<V, BoxError> + Send + Sync + 'static,
    {
        Self::reducer(id, init, reduce).into_delta(snapshot_frequency)
    }
}

impl ChannelSpec<Vec<antler_state_reducers::Message>, Vec<antler_state_reducers::Message>> {
    /// The `messages` channel in delta mode: `add_messages` semantics, checkpoints store the step's
    /// writes and a snapshot every `snapshot_frequency` updates (positive; 0 fails at declaration with
    /// [`BuildError::InvalidSnapshotFrequency`]). Messages without an id get one
    /// before the write is persisted, so replay rebuilds the same list.
    pub fn messages_delta(snapshot_frequency: u32) -> Self {
        use antler_state_reducers::Message;
        let mut spec = Self::messages().into_delta(snapshot_frequency);
        if let Kind::Delta { prepare, .. } = &mut spec.kind {
            *prepare = Some(Arc::new(|v: &Val| {
                let list = v.downcast_ref::<Vec<Message>>()?;
                if list.iter().all(|m| m.id.is_some()) {
                    return None;
                }
                let mut list = list.clone();
                for m in &mut list {
                    if m.id.is_none() {
                        m.id = Some(uuid::Uuid::new_v4().to_string());
                    }
                }
                Some(Arc::new(list) as Val)
            }));
        }
        spec
    }
}

impl ChannelSpec<Vec<antler_state_reducers::Message>, Vec<antler_state_reducers::Message>> {
    /// The `messages` channel in full mode: `add_messages` semantics (replace by id, append, remove),
    /// each write a list of messages.
    pub fn messages() -> Self {
        use antler_state_reducers::{
            Message, MessageIndex, MessageWrite, UuidV4, merge_message_writes_indexed,
        };
        // Written by hand rather than through `reducer_owned`: the channel keeps the list's id
        // index between steps, so appending to a long conversation does not re-index it.
        let reduce: ReduceFn = Arc::new(|acc: Val, batch: &[Val], aux: &mut Aux| {
            let acc: Arc<Vec<Message>> = acc
                .downcast::<Vec<Message>>()
                .map_err(|_| "reducer state has the wrong type")?;
            let mut writes = Vec::with_capacity(batch.len());
            for w in batch {
                let w = w
                    .downcast_ref::<Vec<Message>>()
                    .ok_or("reducer write has the wrong type")?;
                writes.push(MessageWrite::Messages(w.clone()));
            }
            // A shared index (the channel was copied) is rebuilt rather than cloned.
            let mut index = aux
                .take()
                .and_then(|a| a.downcast::<MessageIndex>().ok())
                .and_then(|a| Arc::try_unwrap(a).ok())
                .unwrap_or_default();
            let owned = Arc::try_unwrap(acc).unwrap_or_else(|shared| (*shared).clone());
            let merged = merge_message_writes_indexed(owned, &mut index, writes, &mut UuidV4)
                .map_err(|e| Box::new(e) as BoxError)?;
            *aux = Some(Arc::new(index));
            Ok(Arc::new(merged) as Val)
        });
        Self {
            kind: Kind::Reducer {
                id: Arc::from("add_messages"),
                init: Arc::new(|| Arc::new(Vec::<Message>::new()) as Val),
                reduce,
            },
            _t: std::marker::PhantomData,
        }
    }
}

fn reduce_refs<V, W, R>(reduce: &R, acc: &V, writes: &[&W]) -> std::result::Result<V, BoxError>
where
    R: Fn(&V, &[W]) -> std::result::Result<V, BoxError>,
{
    // The reducer takes `&[W]` but the writes are shared; rather than cloning them, fold write by
    // write. Reducers must be batching-invariant (runtime-spec §5.1), so this equals one batch call.
    match writes {
        [] => reduce(acc, &[]),
        [one] => reduce(acc, std::slice::from_ref(*one)),
        [first, rest @ ..] => {
            let mut v = reduce(acc, std::slice::from_ref(*first))?;
            for w in rest {
                v = reduce(&v, std::slice::from_ref(*w))?;
            }
            Ok(v)
        }
    }
}

impl<V, W> fmt::Debug for ChannelSpec<V, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&kind_desc(&self.kind))
    }
}

fn kind_desc(k: &Kind) -> String {
    match k {
        Kind::LastValue => "last_value".into(),
        Kind::Reducer { id, .. } => format!("reducer({id})"),
        Kind::Ephemeral => "ephemeral".into(),
        Kind::Untracked => "untracked".into(),
        Kind::PacketOnly => "packet_only".into(),
        Kind::Delta {
            id,
            frequency,
            max_supersteps,
            ..
        } => format!(
            "delta({id}, snapshot_frequency={frequency}, max_supersteps_since_snapshot={max_supersteps})"
        ),
    }
}

/// A channel declaration with its types erased and serde hooks captured.
#[derive(Clone)]
pub(crate) struct ErasedSpec {
    name: Arc<str>,
    kind: Kind,
    value_type: TypeId,
    write_type: TypeId,
    type_names: (&'static str, &'static str),
    value_to_json: ToJson,
    value_from_json: FromJson,
    write_to_json: ToJson,
    write_from_json: FromJson,
}

fn to_json<T: Serialize + 'static>() -> ToJson {
    Arc::new(|v: &Val| match v.downcast_ref::<T>() {
        Some(t) => serde_json::to_value(t).map_err(SerdeFail::Serde),
        None => Err(SerdeFail::Type),
    })
}

fn from_json<T: DeserializeOwned + Send + Sync + 'static>() -> FromJson {
    Arc::new(|j: Json| serde_json::from_value::<T>(j).map(|t| Arc::new(t) as Val))
}

impl ErasedSpec {
    pub(crate) fn new<V, W>(key: &Key<V, W>, spec: ChannelSpec<V, W>) -> Self
    where
        V: Serialize + DeserializeOwned + Send + Sync + 'static,
        W: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        Self {
            name: Arc::from(key.name()),
            kind: spec.kind,
            value_type: TypeId::of::<V>(),
            write_type: TypeId::of::<W>(),
            type_names: (std::any::type_name::<V>(), std::any::type_name::<W>()),
            value_to_json: to_json::<V>(),
            value_from_json: from_json::<V>(),
            write_to_json: to_json::<W>(),
            write_from_json: from_json::<W>(),
        }
    }

    pub(crate) fn name(&self) -> &str {
        &self.name
    }
    pub(crate) fn name_arc(&self) -> &Arc<str> {
        &self.name
    }

    /// Human-readable kind, used in conflict errors.
    pub(crate) fn describe(&self) -> String {
        format!(
            "{}<{}, {}>",
            kind_desc(&self.kind),
            self.type_names.0,
            self.type_names.1
        )
    }

    /// Whether `other` declares the same channel (same kind, reducer id and types).
    pub(crate) fn same_as(&self, other: &Self) -> bool {
        let kinds = match (&self.kind, &other.kind) {
            (Kind::Reducer { id: a, .. }, Kind::Reducer { id: b, .. }) => a == b,
            (
                Kind::Delta {
                    id: a,
                    frequency: fa,
                    max_supersteps: ma,
                    ..
                },
                Kind::Delta {
                    id: b,
                    frequency: fb,
                    max_supersteps: mb,
                    ..
                },
            ) => a == b && fa == fb && ma == mb,
            (a, b) => std::mem::discriminant(a) == std::mem::discriminant(b),
        };
        kinds && self.value_type == other.value_type && self.write_type == other.write_type
    }

    /// Whether a subgraph's key and its parent's of the same name can pass values both ways:
    /// the subgraph takes the parent's value as a write, and the parent the subgraph's final
    /// value (see `subgraph.rs`), so each side's value type must be the other's write type.
    pub(crate) fn crosses(&self, other: &Self) -> bool {
        self.value_type == other.write_type && other.value_type == self.write_type
    }

    /// Whether this is a state channel (packet-only keys are not).
    pub(crate) fn is_state(&self) -> bool {
        !matches!(self.kind, Kind::PacketOnly)
    }

    pub(crate) fn accepts_write(&self, type_id: TypeId, write: &Write) -> bool {
        match write {
            Write::Value(_) => type_id == self.write_type,
            Write::Overwrite(_) => {
                type_id == self.value_type
                    && matches!(self.kind, Kind::Reducer { .. } | Kind::Delta { .. })
            }
        }
    }

    pub(crate) fn type_id_of(&self, write: &Write) -> TypeId {
        match write {
            Write::Value(_) => self.write_type,
            Write::Overwrite(_) => self.value_type,
        }
    }

    pub(crate) fn accepts_value(&self, type_id: TypeId) -> bool {
        type_id == self.value_type
    }

    fn map_fail(&self, f: SerdeFail) -> Error {
        match f {
            SerdeFail::Serde(source) => Error::Serialization {
                channel: self.name.to_string(),
                source,
            },
            SerdeFail::Type => Error::WriteType {
                channel: self.name.to_string(),
            },
        }
    }

    pub(crate) fn value_to_json(&self, v: &Val) -> Result<Json> {
        (self.value_to_json)(v).map_err(|f| self.map_fail(f))
    }
    pub(crate) fn value_from_json(&self, j: Json) -> Result<Val> {
        (self.value_from_json)(j).map_err(|source| Error::Serialization {
            channel: self.name.to_string(),
            source,
        })
    }
    /// A reducer channel's stored write is tagged when it is an `Overwrite`
    /// (`{"__overwrite__": value}`, the reference's form); a plain write whose own JSON has
    /// that shape, or the escape's (`{"__value__": json}`), is stored escaped, so that it reads
    /// back plain: before, such a write came back as an Overwrite after a resume.
    fn tags_writes(&self) -> bool {
        matches!(self.kind, Kind::Reducer { .. } | Kind::Delta { .. })
    }

    pub(crate) fn write_to_json(&self, w: &Write) -> Result<Json> {
        let j = self.write_to_shown_json(w)?;
        if matches!(w, Write::Value(_)) && self.tags_writes() && tagged(&j).is_some() {
            return Ok(serde_json::json!({ VALUE_TAG: j }));
        }
        Ok(j)
    }

    /// A write as a stream event shows it: a plain write's own JSON, unescaped.
    pub(crate) fn write_to_shown_json(&self, w: &Write) -> Result<Json> {
        match w {
            Write::Value(v) => (self.write_to_json)(v).map_err(|f| self.map_fail(f)),
            Write::Overwrite(v) => Ok(serde_json::json!({ OVERWRITE_TAG: self.value_to_json(v)? })),
        }
    }
    pub(crate) fn write_from_json(&self, j: Json) -> Result<Write> {
        let plain = match tagged(&j).filter(|_| self.tags_writes()) {
            Some((OVERWRITE_TAG, inner)) => {
                return Ok(Write::Overwrite(self.value_from_json(inner.clone())?));
            }
            Some((_, inner)) => inner.clone(),
            None => j,
        };
        (self.write_from_json)(plain)
            .map(Write::Value)
            .map_err(|source| Error::Serialization {
                channel: self.name.to_string(),
                source,
            })
    }

    /// Whether the channel is untracked: never stored, its writes never persisted.
    pub(crate) fn is_untracked(&self) -> bool {
        matches!(self.kind, Kind::Untracked)
    }

    /// A fresh channel, optionally restored from its stored form.
    pub(crate) fn channel(&self, stored: Option<Json>) -> Result<Box<dyn Channel>> {
        let value = stored.map(|j| self.value_from_json(j)).transpose()?;
        self.channel_with(value)
    }

    /// The stored seed of a message-list channel given as its items' serialised JSON: for a
    /// `Vec<Message>` channel each item is parsed straight into a message (the same
    /// deserialiser as the JSON path, without an intermediate `Value`), and a delta channel
    /// keeps the bytes as its encoded prefix; any other channel parses the list as JSON.
    fn seed_from_items(&self, items: Vec<Arc<[u8]>>) -> Result<Box<dyn Channel>> {
        let fail = |source| Error::Serialization {
            channel: self.name.to_string(),
            source,
        };
        if self.value_type != TypeId::of::<Vec<antler_state_reducers::Message>>() {
            let list = items
                .iter()
                .map(|b| serde_json::from_slice::<Json>(b))
                .collect::<std::result::Result<Vec<_>, _>>()
                .map_err(fail)?;
            return self.channel(Some(Json::Array(list)));
        }
        let list = antler_state_reducers::decode_messages(&items).map_err(|e| {
            // Keep the position of the bad item in the message (the serde error has only the
            // line and column within that item).
            fail(<serde_json::Error as serde::de::Error>::custom(e))
        })?;
        let encoded = crate::channel::EncodedPrefix::of(&list, items);
        let mut ch = self.channel_with(Some(Arc::new(list) as Val))?;
        if let (Some(d), Some(e)) = (ch.delta(), encoded) {
            d.encoded = Arc::new(e);
        }
        Ok(ch)
    }

    fn channel_with(&self, value: Option<Val>) -> Result<Box<dyn Channel>> {
        Ok(match &self.kind {
            Kind::LastValue | Kind::PacketOnly => Box::new(LastValue {
                name: self.name.clone(),
                value,
            }),
            Kind::Reducer { init, reduce, .. } => Box::new(Reducer {
                name: self.name.clone(),
                value: value.unwrap_or_else(|| init()),
                reduce: reduce.clone(),
                aux: None,
            }),
            Kind::Ephemeral => Box::new(Ephemeral {
                name: self.name.clone(),
                value,
                guard: true,
                untracked: false,
            }),
            Kind::Untracked => Box::new(Ephemeral {
                name: self.name.clone(),
                value,
                guard: true,
                untracked: true,
            }),
            Kind::Delta {
                init,
                reduce,
                frequency,
                max_supersteps,
                prepare,
                ..
            } => {
                let mut d = Delta {
                    inner: Reducer {
                        name: self.name.clone(),
                        value: value.unwrap_or_else(|| init()),
                        reduce: reduce.clone(),
                        aux: None,
                    },
                    updates: 0,
                    supersteps: 0,
                    frequency: *frequency,
                    max_supersteps: *max_supersteps,
                    forced: false,
                    stamps_ids: prepare.is_some(),
                    unstamped: false,
                    encoded: Arc::default(),
                };
                // Looked at once, as the value is loaded: a step's write then checks a flag,
                // not the whole list.
                d.unstamped = d.stamps_ids && d.value_lacks_ids();
                Box::new(d)
            }
        })
    }

    /// Whether this is a delta channel.
    pub(crate) fn is_delta(&self) -> bool {
        matches!(self.kind, Kind::Delta { .. })
    }

    /// The snapshot frequency of a delta channel.
    pub(crate) fn delta_frequency(&self) -> Option<u32> {
        match self.kind {
            Kind::Delta { frequency, .. } => Some(frequency),
            _ => None,
        }
    }

    /// Whether a stored checkpoint that gives this channel a version but no value is rebuilt
    /// from the thread's history: a delta channel, and an ordinary reducer channel too
    /// (runtime-spec §5.5, [1.2.22]: a thread written through a delta channel and read by a
    /// graph that declares the field as an ordinary reducer; an empty value would lose it).
    pub(crate) fn rebuilds_from_history(&self) -> bool {
        matches!(self.kind, Kind::Delta { .. } | Kind::Reducer { .. })
    }

    /// Rewrites a write before it is persisted (delta messages: assign missing ids).
    pub(crate) fn prepare_write(&self, w: &Write) -> Option<Write> {
        let Kind::Delta {
            prepare: Some(p), ..
        } = &self.kind
        else {
            return None;
        };
        match w {
            Write::Value(v) => p(v).map(Write::Value),
            Write::Overwrite(v) => p(v).map(Write::Overwrite),
        }
    }

    /// Rebuilds a delta channel from a history walk: the seed (or the initial value) plus the writes,
    /// where the last Overwrite becomes the base (runtime-spec §5.1 `replay_writes`).
    pub(crate) fn replay(
        &self,
        seed: Option<Json>,
        seed_items: Option<Vec<Arc<[u8]>>>,
        writes: Vec<Json>,
    ) -> Result<Box<dyn Channel>> {
        let ch = match seed_items {
            Some(items) => self.seed_from_items(items)?,
            None => self.channel(seed)?,
        };
        self.replay_onto(ch, writes)
    }

    /// Applies stored `writes` (oldest first) to a channel rebuilt up to just before them,
    /// as one replay batch: the history walk's replay, on an already rebuilt seed.
    pub(crate) fn replay_onto(
        &self,
        mut ch: Box<dyn Channel>,
        writes: Vec<Json>,
    ) -> Result<Box<dyn Channel>> {
        let mut batch = Vec::with_capacity(writes.len());
        for j in writes {
            match self.write_from_json(j)? {
                Write::Overwrite(v) => {
                    batch.clear();
                    batch.push(Write::Overwrite(v));
                }
                w => batch.push(w),
            }
        }
        if let Some(d) = ch.delta() {
            // Replay is not a step: apply to the inner reducer, so no snapshot is forced.
            let rest: Vec<&Write> = match batch.first() {
                Some(Write::Overwrite(v)) => {
                    d.inner.set_value(v.clone());
                    batch[1..].iter().collect()
                }
                _ => batch.iter().collect(),
            };
            if matches!(batch.first(), Some(Write::Overwrite(_))) {
                d.encoded = Arc::default();
            }
            // Ids stamped now are this read's own: a run continuing from it snapshots at its
            // first checkpoint, so that they are the ones stored from then on.
            if d.stamps_ids
                && !rest.is_empty()
                && (d.unstamped
                    || d.value_lacks_ids()
                    || rest.iter().any(|w| crate::channel::lacks_message_ids(w)))
            {
                d.forced = true;
            }
            d.apply_tracked(&rest)?;
            // The reducer stamped every message a non-empty batch reached.
            if !rest.is_empty() {
                d.unstamped = false;
            }
        } else {
            // An ordinary reducer channel takes the writes one per update, as the reference
            // replays a `BinaryOperatorAggregate`: no call sees two writes as one step's
            // (a second Overwrite in one call would be refused).
            for w in &batch {
                ch.update(&[w])?;
            }
        }
        Ok(ch)
    }
}

/// The declared channels of a graph, in declaration order.
#[derive(Clone, Default)]
pub(crate) struct Schema {
    specs: Vec<ErasedSpec>,
    index: HashMap<Arc<str>, usize>,
}

impl Schema {
    /// Adds a declaration; an identical re-declaration is a no-op, a different one a [`BuildError`].
    pub(crate) fn declare(&mut self, spec: ErasedSpec) -> std::result::Result<(), BuildError> {
        let name = spec.name();
        if name.starts_with("__") || name.contains(':') || name.contains('|') || name.is_empty() {
            return Err(BuildError::ReservedChannel {
                channel: name.to_owned(),
            });
        }
        if matches!(spec.kind, Kind::Delta { frequency: 0, .. }) {
            return Err(BuildError::InvalidSnapshotFrequency {
                channel: name.to_owned(),
            });
        }
        if matches!(
            spec.kind,
            Kind::Delta {
                max_supersteps: 0,
                ..
            }
        ) {
            return Err(BuildError::InvalidSuperstepBound {
                channel: name.to_owned(),
            });
        }
        if let Some(&i) = self.index.get(name) {
            let first = &self.specs[i];
            if first.same_as(&spec) {
                return Ok(());
            }
            return Err(BuildError::ChannelConflict {
                channel: name.to_owned(),
                first: first.describe(),
                second: spec.describe(),
            });
        }
        self.index.insert(spec.name.clone(), self.specs.len());
        self.specs.push(spec);
        Ok(())
    }

    pub(crate) fn specs(&self) -> impl Iterator<Item = &ErasedSpec> {
        self.specs.iter()
    }

    pub(crate) fn position(&self, name: &str) -> Option<usize> {
        self.index.get(name).copied()
    }

    pub(crate) fn get(&self, name: &str) -> Option<&ErasedSpec> {
        self.position(name).map(|i| &self.specs[i])
    }
}

/// The tag of a stored reducer write that is an `Overwrite`.
pub(crate) const OVERWRITE_TAG: &str = "__overwrite__";
/// The tag of a stored plain reducer write whose own JSON looks tagged.
const VALUE_TAG: &str = "__value__";

/// The tag and the tagged JSON of a stored reducer write of the form `{tag: json}`.
fn tagged(j: &Json) -> Option<(&'static str, &Json)> {
    let Json::Object(m) = j else { return None };
    if m.len() != 1 {
        return None;
    }
    [OVERWRITE_TAG, VALUE_TAG]
        .into_iter()
        .find_map(|tag| m.get(tag).map(|inner| (tag, inner)))
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use antler_state_reducers::Message;

    use super::{ChannelSpec, ErasedSpec};
    use crate::state::Key;

    /// A stored message list with a bad item fails as a serialisation error of the channel
    /// that names the item's position.
    #[test]
    fn a_bad_stored_item_names_its_position() {
        let key: Key<Vec<Message>> = Key::new("messages");
        let spec = ErasedSpec::new(&key, ChannelSpec::messages_delta(10));
        let good: Arc<[u8]> = Arc::from(
            serde_json::to_vec(&Message::human("hi").with_id("1"))
                .unwrap()
                .as_slice(),
        );
        let bad: Arc<[u8]> = Arc::from(&b"{\"type\": 7}"[..]);
        let err = spec
            .replay(None, Some(vec![good.clone(), good, bad]), Vec::new())
            .err()
            .unwrap();
        assert!(
            matches!(&err, crate::Error::Serialization { channel, .. } if channel == "messages"),
            "{err:?}"
        );
        assert!(err.to_string().contains("message 2 of the list"), "{err}");
    }
}
