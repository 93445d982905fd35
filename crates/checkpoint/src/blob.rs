//! Channel values and write values as the saver sees them: opaque, already serialised blobs.
//!
//! The runtime serialises each channel itself and hands the saver a [`Blob`].
//! Only one shape is not opaque: [`Blob::Messages`], a list of individually
//! serialised chat messages.
//! Savers store each message body of such a list once per thread and keep the
//! blob as a compact list of references, which is what makes a delta snapshot
//! cost bytes proportional to what changed (see `docs/checkpoint-format.md`).

use std::sync::Arc;

use serde::Serialize;
use serde::de::DeserializeOwned;

/// A serialised channel value or write value.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Blob {
    /// No value (the reference's `None` / `("null", b"")`).
    Null,
    /// A JSON document (UTF-8), e.g. a plain state field or a full-mode message list.
    Json(Arc<[u8]>),
    /// Raw bytes the runtime encodes itself.
    Bytes(Arc<[u8]>),
    /// A list of chat messages, each serialised on its own to LangChain's JSON dict shape.
    Messages(MessagesBlob),
}

/// What a [`Blob::Messages`] list stands for.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum MessagesKind {
    /// One ordinary write of a delta channel: the messages go through the reducer.
    Write,
    /// An `Overwrite` write: the list replaces the value (runtime-spec §5.1).
    Overwrite,
    /// A delta snapshot: the whole value of the channel at a checkpoint (the reference's `_DeltaSnapshot`).
    Snapshot,
}

/// A list of individually serialised messages; see [`Blob::Messages`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MessagesBlob {
    /// What the list stands for.
    pub kind: MessagesKind,
    /// One JSON document per message, in list order.
    pub items: Vec<Arc<[u8]>>,
}

impl Blob {
    /// Serialises `value` as a JSON blob.
    ///
    /// # Errors
    /// The serde error when `value` cannot be serialised to JSON.
    pub fn json<T: Serialize + ?Sized>(value: &T) -> Result<Self, serde_json::Error> {
        Ok(Self::Json(serde_json::to_vec(value)?.into()))
    }

    /// Wraps already serialised JSON bytes (not validated until decoded).
    pub fn from_json_bytes(bytes: impl Into<Arc<[u8]>>) -> Self {
        Self::Json(bytes.into())
    }

    /// Wraps raw bytes.
    pub fn bytes(bytes: impl Into<Arc<[u8]>>) -> Self {
        Self::Bytes(bytes.into())
    }

    /// Serialises each item on its own into a [`Blob::Messages`] list.
    ///
    /// # Errors
    /// The serde error of the first item that cannot be serialised.
    pub fn messages<T: Serialize>(
        kind: MessagesKind,
        items: &[T],
    ) -> Result<Self, serde_json::Error> {
        let items = items
            .iter()
            .map(|m| serde_json::to_vec(m).map(Arc::from))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(Self::Messages(MessagesBlob { kind, items }))
    }

    /// Decodes a JSON blob into `T`.
    ///
    /// [`Blob::Null`] decodes as JSON `null`, and a [`Blob::Messages`] list as a JSON array of its items.
    ///
    /// # Errors
    /// The serde error when the bytes are not a `T` (raw [`Blob::Bytes`] are decoded as JSON too).
    pub fn decode_json<T: DeserializeOwned>(&self) -> Result<T, serde_json::Error> {
        match self {
            Self::Null => serde_json::from_slice(b"null"),
            Self::Json(b) | Self::Bytes(b) => serde_json::from_slice(b),
            Self::Messages(list) => {
                let mut buf = Vec::with_capacity(list.payload_len() + list.items.len() + 2);
                buf.push(b'[');
                for (i, item) in list.items.iter().enumerate() {
                    if i > 0 {
                        buf.push(b',');
                    }
                    buf.extend_from_slice(item);
                }
                buf.push(b']');
                serde_json::from_slice(&buf)
            }
        }
    }

    /// Whether this is [`Blob::Null`].
    pub fn is_null(&self) -> bool {
        matches!(self, Self::Null)
    }

    /// The number of payload bytes the blob carries (message bodies summed).
    pub fn payload_len(&self) -> usize {
        match self {
            Self::Null => 0,
            Self::Json(b) | Self::Bytes(b) => b.len(),
            Self::Messages(list) => list.payload_len(),
        }
    }
}

impl MessagesBlob {
    /// The sum of the item lengths.
    pub fn payload_len(&self) -> usize {
        self.items.iter().map(|i| i.len()).sum()
    }
}
