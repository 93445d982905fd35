//! Typed channel keys, the read-only [`State`] view a node receives, and the [`Update`] it returns.

use std::any::{Any, TypeId};
use std::borrow::Cow;
use std::collections::HashMap;
use std::fmt;
use std::marker::PhantomData;
use std::sync::Arc;

use crate::schema::Schema;

/// A type-erased, cheaply clonable value of a channel.
pub(crate) type Val = Arc<dyn Any + Send + Sync>;

/// A typed key of one state channel: `V` is the stored value, `W` what a node writes.
///
/// For last-value channels `W = V`; reducer channels may take a different write type
/// (for example message writes folded into a list of messages).
/// Keys are usually constants (`const LOG: Key<Vec<String>> = Key::from_static("log");`);
/// keys created at run time with [`Key::new`] work the same way (graphs built from data).
pub struct Key<V, W = V> {
    name: Cow<'static, str>,
    _types: PhantomData<fn() -> (V, W)>,
}

impl<V, W> Key<V, W> {
    /// A key with a static name; usable in `const` items.
    pub const fn from_static(name: &'static str) -> Self {
        Self {
            name: Cow::Borrowed(name),
            _types: PhantomData,
        }
    }
    /// A key whose name is only known at run time.
    pub fn new(name: impl Into<String>) -> Self {
        Self {
            name: Cow::Owned(name.into()),
            _types: PhantomData,
        }
    }
    /// The channel name.
    pub fn name(&self) -> &str {
        &self.name
    }
}

impl<V, W> Clone for Key<V, W> {
    fn clone(&self) -> Self {
        Self {
            name: self.name.clone(),
            _types: PhantomData,
        }
    }
}

impl<V, W> fmt::Debug for Key<V, W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Key({:?})", self.name)
    }
}

/// One write to a channel: a plain value, or an `Overwrite` that replaces a reducer channel's value.
#[derive(Clone)]
pub(crate) enum Write {
    Value(Val),
    Overwrite(Val),
}

/// A write with its channel name and the `TypeId` it was created with.
#[derive(Clone)]
pub(crate) struct NamedWrite {
    pub(crate) channel: Arc<str>,
    pub(crate) type_id: TypeId,
    pub(crate) write: Write,
}

/// The writes a node returns, in write order.
///
/// ```
/// use antler_graph::{Key, Update};
/// const COUNT: Key<i64> = Key::from_static("count");
/// let update = Update::new().set(&COUNT, 1);
/// assert_eq!(update.len(), 1);
/// ```
#[derive(Clone, Default)]
pub struct Update {
    pub(crate) writes: Vec<NamedWrite>,
}

impl Update {
    /// An empty update.
    pub fn new() -> Self {
        Self::default()
    }
    /// Appends a write of `w` to `key`'s channel.
    pub fn set<V: 'static, W: Send + Sync + 'static>(mut self, key: &Key<V, W>, w: W) -> Self {
        self.push(key, w);
        self
    }
    /// Appends a write of `w` to `key`'s channel (in-place form of [`Update::set`]).
    pub fn push<V: 'static, W: Send + Sync + 'static>(&mut self, key: &Key<V, W>, w: W) {
        self.writes.push(NamedWrite {
            channel: Arc::from(key.name()),
            type_id: TypeId::of::<W>(),
            write: Write::Value(Arc::new(w)),
        });
    }
    /// Appends an `Overwrite`: the reducer channel's value becomes `v` and the step's other writes to it are dropped.
    pub fn overwrite<V: Send + Sync + 'static, W: 'static>(
        mut self,
        key: &Key<V, W>,
        v: V,
    ) -> Self {
        self.writes.push(NamedWrite {
            channel: Arc::from(key.name()),
            type_id: TypeId::of::<V>(),
            write: Write::Overwrite(Arc::new(v)),
        });
        self
    }
    /// Number of writes.
    pub fn len(&self) -> usize {
        self.writes.len()
    }
    /// Whether there are no writes.
    pub fn is_empty(&self) -> bool {
        self.writes.is_empty()
    }
    /// Names of the written channels, in write order.
    pub fn channels(&self) -> impl Iterator<Item = &str> {
        self.writes.iter().map(|w| &*w.channel)
    }
    /// Appends all of `other`'s writes after this update's, keeping their order
    /// (for code that combines the updates of several sub-results into one task's writes).
    pub fn extend(&mut self, other: Update) {
        self.writes.extend(other.writes);
    }
    /// The plain writes of type `W` to `key`'s channel (not its overwrites), in write order,
    /// for code that checks or adjusts a sub-result's writes before passing them on (an
    /// agent's tool step checks that a tool's command answers its call). A write shared with
    /// a clone of this update is copied first, so the clone keeps its value.
    ///
    /// ```
    /// use antler_graph::{Key, Update};
    /// const LOG: Key<Vec<String>> = Key::from_static("log");
    /// let mut update = Update::new().set(&LOG, vec!["a".to_owned()]);
    /// for w in update.writes_mut(&LOG) {
    ///     w.push("b".to_owned());
    /// }
    /// assert_eq!(update.writes_mut(&LOG).next().map(|w| w.len()), Some(2));
    /// ```
    pub fn writes_mut<V: 'static, W: Clone + Send + Sync + 'static>(
        &mut self,
        key: &Key<V, W>,
    ) -> impl Iterator<Item = &mut W> {
        let name = key.name();
        self.writes
            .iter_mut()
            .filter(move |w| &*w.channel == name && w.type_id == TypeId::of::<W>())
            .filter_map(|w| {
                let Write::Value(v) = &mut w.write else {
                    return None;
                };
                if Arc::get_mut(v).is_none() {
                    let copy: W = v.downcast_ref::<W>()?.clone();
                    *v = Arc::new(copy);
                }
                Arc::get_mut(v)?.downcast_mut::<W>()
            })
    }
}

impl fmt::Debug for Update {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.writes.iter().map(|w| &*w.channel))
            .finish()
    }
}

/// A read-only view of state values: the step-start state for a triggered node, the packet for a `Send` target.
///
/// Cloning is cheap (values are shared).
#[derive(Clone)]
pub struct State {
    pub(crate) schema: Arc<Schema>,
    pub(crate) values: Arc<HashMap<Arc<str>, Val>>,
}

impl State {
    pub(crate) fn new(schema: Arc<Schema>, values: HashMap<Arc<str>, Val>) -> Self {
        Self {
            schema,
            values: Arc::new(values),
        }
    }
    /// The value of `key`, or `None` when the channel is empty (or holds another type).
    pub fn get<V: 'static, W>(&self, key: &Key<V, W>) -> Option<&V> {
        self.values
            .get(key.name())
            .and_then(|v| v.downcast_ref::<V>())
    }
    /// Whether the channel named `name` has a value.
    pub fn contains(&self, name: &str) -> bool {
        self.values.contains_key(name)
    }
    /// Names of the channels that have a value, sorted.
    pub fn channels(&self) -> Vec<&str> {
        let mut v: Vec<&str> = self.values.keys().map(|k| &**k).collect();
        v.sort_unstable();
        v
    }
    /// The values as a JSON object through each channel's serde hooks (schema order).
    pub fn to_json(&self) -> crate::Result<serde_json::Map<String, serde_json::Value>> {
        let mut out = serde_json::Map::new();
        for spec in self.schema.specs() {
            if let Some(v) = self.values.get(spec.name()) {
                out.insert(spec.name().to_owned(), spec.value_to_json(v)?);
            }
        }
        Ok(out)
    }
}

impl fmt::Debug for State {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.to_json() {
            Ok(m) => write!(f, "State({})", serde_json::Value::Object(m)),
            Err(_) => write!(f, "State({:?})", self.channels()),
        }
    }
}
