//! Reducer-channel semantics at the step barrier, including the
//! [`Overwrite`] marker (kernel-spec R3, R42).
//!
//! A reducer channel receives all of one step's writes at once, in task
//! order. [`fold_reducer_writes`] is that update rule, independent of which
//! reducer the channel uses, so the graph runtime and standalone callers
//! share one implementation.

use serde_json::Value;

use crate::error::{Error, Result};

/// A replace-style write to a reducer channel: the value replaces the
/// channel's value without calling the reducer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overwrite<T>(pub T);

/// One write to a reducer channel.
#[derive(Clone, Debug, PartialEq)]
pub enum ChannelWrite<T> {
    /// An ordinary value, folded through the reducer.
    Value(T),
    /// A replacement ([`Overwrite`]).
    Overwrite(T),
}

impl<T> From<Overwrite<T>> for ChannelWrite<T> {
    fn from(o: Overwrite<T>) -> Self {
        ChannelWrite::Overwrite(o.0)
    }
}

/// Folds one step's writes into a reducer channel.
///
/// - `current == None` is an empty channel: the first write seeds it as it
///   is (unwrapped if it is an [`Overwrite`]) without calling the reducer;
/// - later plain writes go through `reducer(acc, value)` left to right;
/// - an [`Overwrite`] replaces the value, and every later plain write of the
///   same step is ignored; a second [`Overwrite`] in the step is
///   [`Error::MultipleOverwrites`].
///
/// Channels whose type has a natural empty value (lists, maps) pass
/// `Some(empty)` so that even the first write goes through the reducer, as
/// the reference does. Returns the new value and whether anything was
/// written (an empty batch changes nothing).
pub fn fold_reducer_writes<T, I, R>(
    current: Option<T>,
    writes: I,
    mut reducer: R,
) -> Result<(Option<T>, bool)>
where
    I: IntoIterator<Item = ChannelWrite<T>>,
    R: FnMut(T, T) -> Result<T>,
{
    let mut writes = writes.into_iter().peekable();
    if writes.peek().is_none() {
        return Ok((current, false));
    }
    let mut value = current;
    let mut seen_overwrite = false;
    for write in writes {
        match write {
            ChannelWrite::Overwrite(v) => {
                if seen_overwrite {
                    return Err(Error::MultipleOverwrites);
                }
                seen_overwrite = true;
                value = Some(v);
            }
            ChannelWrite::Value(_) if seen_overwrite => {}
            ChannelWrite::Value(v) => {
                value = Some(match value {
                    None => v,
                    Some(acc) => reducer(acc, v)?,
                });
            }
        }
    }
    Ok((value, true))
}

/// Recognises the JSON forms of an overwrite marker,
/// `{"__overwrite__": x}` and `{"type": "__overwrite__", "value": x}`,
/// returning the wrapped value.
pub fn overwrite_marker(value: &Value) -> Option<&Value> {
    let Value::Object(map) = value else {
        return None;
    };
    if map.len() == 1
        && let Some(inner) = map.get("__overwrite__")
    {
        return Some(inner);
    }
    if map.len() == 2 && map.get("type").and_then(Value::as_str) == Some("__overwrite__") {
        return map.get("value");
    }
    None
}
