//! The stored byte formats (see `docs/checkpoint-format.md`).
//!
//! Every stored payload starts with a one-byte format tag (kind and version)
//! and a four-byte checksum (the low 32 bits of xxh3-64 of the body, with the tag mixed in
//! after hashing), so a
//! flipped or truncated byte is reported as corruption instead of decoding
//! into a wrong value. The bodies are compact binary: LEB128 varints,
//! length-prefixed strings, 16-byte checkpoint ids.

use std::collections::BTreeMap;
use std::sync::Arc;

use xxhash_rust::xxh3::xxh3_64;

use crate::blob::{Blob, MessagesKind};
use crate::ids::{
    ChannelName, ChannelVersion, CheckpointId, CheckpointNs, NodeName, RunId, Timestamp,
};
use crate::mode::{ChannelMode, DeltaCounters};
use crate::model::{Checkpoint, CheckpointMetadata, CheckpointSource};

/// Checkpoint record (everything but channel values), version 1.
pub(crate) const TAG_RECORD_V1: u8 = 0x11;
/// Checkpoint metadata, version 1.
pub(crate) const TAG_METADATA_V1: u8 = 0x21;
/// Blob `Null`, version 1.
pub(crate) const TAG_BLOB_NULL_V1: u8 = 0x31;
/// Blob `Json`, version 1.
pub(crate) const TAG_BLOB_JSON_V1: u8 = 0x32;
/// Blob `Bytes`, version 1.
pub(crate) const TAG_BLOB_BYTES_V1: u8 = 0x33;
/// Blob `Messages` stored as references to message bodies, version 1.
pub(crate) const TAG_BLOB_MESSAGE_REFS_V1: u8 = 0x34;
/// One message body (JSON), version 1.
pub(crate) const TAG_MESSAGE_BODY_V1: u8 = 0x41;

/// Bytes of the header in front of every payload.
pub(crate) const HEADER_LEN: usize = 5;

/// Why a payload did not decode; turned into a typed crate error with thread and checkpoint by the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CodecError {
    Truncated,
    Checksum,
    UnknownVersion(u8),
    Invalid(String),
}

impl std::fmt::Display for CodecError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Truncated => f.write_str("truncated"),
            Self::Checksum => f.write_str("checksum mismatch"),
            Self::UnknownVersion(v) => write!(f, "unknown format version {v:#04x}"),
            Self::Invalid(why) => f.write_str(why),
        }
    }
}

type CResult<T> = Result<T, CodecError>;

fn checksum(tag: u8, body: &[u8]) -> u32 {
    // Mix the tag in so that a flipped tag cannot reinterpret a valid body.
    let h = xxh3_64(body) ^ u64::from(tag).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    (h & 0xFFFF_FFFF) as u32
}

/// Wraps `body` with its tag and checksum.
pub(crate) fn seal(tag: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.len());
    out.push(tag);
    out.extend_from_slice(&checksum(tag, body).to_le_bytes());
    out.extend_from_slice(body);
    out
}

/// Checks tag and checksum; returns `(tag, body)`.
pub(crate) fn open<'a>(bytes: &'a [u8], known: &[u8]) -> CResult<(u8, &'a [u8])> {
    let Some(&tag) = bytes.first() else {
        return Err(CodecError::Truncated);
    };
    if !known.contains(&tag) {
        return Err(CodecError::UnknownVersion(tag));
    }
    if bytes.len() < HEADER_LEN {
        return Err(CodecError::Truncated);
    }
    let mut sum = [0u8; 4];
    sum.copy_from_slice(&bytes[1..HEADER_LEN]);
    let body = &bytes[HEADER_LEN..];
    if u32::from_le_bytes(sum) != checksum(tag, body) {
        return Err(CodecError::Checksum);
    }
    Ok((tag, body))
}

/// Names every graph uses, stored as one byte (`index + 1`); `0` means an inline string follows.
/// Append-only: changing an entry changes the meaning of stored data.
const WELL_KNOWN_NAMES: &[&str] = &[
    "messages",
    "__start__",
    "__input__",
    "__interrupt__",
    "__resume__",
    "__error__",
    "__error_source_node__",
    "__no_writes__",
    "__pregel_tasks",
    "__return__",
    "__previous__",
    "__scheduled__",
    "__end__",
    "__snapshot_bumps__",
    "agent",
    "tools",
    "model",
    // The graph runtime's branch bookkeeping in `versions_seen` (appended 2026-11-30).
    "__version_floor__",
    "__forced_snapshots__",
];

#[derive(Default)]
pub(crate) struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    pub(crate) fn u8(&mut self, v: u8) {
        self.buf.push(v);
    }
    pub(crate) fn varint(&mut self, mut v: u64) {
        loop {
            let byte = (v & 0x7f) as u8;
            v >>= 7;
            if v == 0 {
                self.buf.push(byte);
                return;
            }
            self.buf.push(byte | 0x80);
        }
    }
    pub(crate) fn zigzag(&mut self, v: i64) {
        self.varint(((v << 1) ^ (v >> 63)) as u64);
    }
    pub(crate) fn bytes(&mut self, b: &[u8]) {
        self.varint(b.len() as u64);
        self.buf.extend_from_slice(b);
    }
    pub(crate) fn str(&mut self, s: &str) {
        self.bytes(s.as_bytes());
    }
    /// A channel or node name: one byte for a well-known name, else `0` and the string.
    pub(crate) fn name(&mut self, s: &str) {
        match WELL_KNOWN_NAMES.iter().position(|n| *n == s) {
            Some(i) => self.varint(i as u64 + 1),
            None => {
                self.varint(0);
                self.str(s);
            }
        }
    }
    pub(crate) fn raw(&mut self, b: &[u8]) {
        self.buf.extend_from_slice(b);
    }
    pub(crate) fn finish(self) -> Vec<u8> {
        self.buf
    }
}

pub(crate) struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    pub(crate) fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }
    pub(crate) fn u8(&mut self) -> CResult<u8> {
        let (&b, rest) = self.buf.split_first().ok_or(CodecError::Truncated)?;
        self.buf = rest;
        Ok(b)
    }
    pub(crate) fn varint(&mut self) -> CResult<u64> {
        let mut v: u64 = 0;
        for shift in (0..64).step_by(7) {
            let b = self.u8()?;
            // The tenth byte holds only bit 63: anything more would be dropped by the shift.
            if shift == 63 && b & 0x7e != 0 {
                return Err(CodecError::Invalid("varint longer than 64 bits".into()));
            }
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(CodecError::Invalid("varint longer than 64 bits".into()))
    }
    pub(crate) fn zigzag(&mut self) -> CResult<i64> {
        let v = self.varint()?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }
    pub(crate) fn len(&mut self) -> CResult<usize> {
        let n = self.varint()?;
        let n = usize::try_from(n).map_err(|_| CodecError::Invalid("length overflows".into()))?;
        if n > self.buf.len() {
            return Err(CodecError::Truncated);
        }
        Ok(n)
    }
    pub(crate) fn take(&mut self, n: usize) -> CResult<&'a [u8]> {
        if n > self.buf.len() {
            return Err(CodecError::Truncated);
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    pub(crate) fn bytes(&mut self) -> CResult<&'a [u8]> {
        let n = self.len()?;
        self.take(n)
    }
    pub(crate) fn string(&mut self) -> CResult<String> {
        let b = self.bytes()?;
        std::str::from_utf8(b)
            .map(str::to_owned)
            .map_err(|_| CodecError::Invalid("string is not UTF-8".into()))
    }
    pub(crate) fn name(&mut self) -> CResult<String> {
        match self.varint()? {
            0 => self.string(),
            k => usize::try_from(k - 1)
                .ok()
                .and_then(|i| WELL_KNOWN_NAMES.get(i))
                .map(|s| (*s).to_owned())
                .ok_or_else(|| CodecError::Invalid(format!("unknown well-known name {k}"))),
        }
    }
    pub(crate) fn count(&mut self) -> CResult<usize> {
        // A count can never exceed the remaining bytes (every element takes at least one).
        let n = self.varint()?;
        usize::try_from(n)
            .ok()
            .filter(|&n| n <= self.buf.len())
            .ok_or(CodecError::Truncated)
    }
    pub(crate) fn id(&mut self) -> CResult<CheckpointId> {
        let b = self.take(16)?;
        let mut a = [0u8; 16];
        a.copy_from_slice(b);
        Ok(CheckpointId::from_bytes(a))
    }
    pub(crate) fn end(&self) -> CResult<()> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(CodecError::Invalid("trailing bytes".into()))
        }
    }
}

fn u32_of(v: u64) -> CResult<u32> {
    u32::try_from(v).map_err(|_| CodecError::Invalid("value out of range".into()))
}

fn id_micros(id: CheckpointId) -> i64 {
    i64::try_from(id.as_u128() >> 64).unwrap_or(0)
}

/// The stored record of a checkpoint without its channel values.
pub(crate) fn encode_record(cp: &Checkpoint) -> Vec<u8> {
    let mut w = Writer::default();
    w.varint(u64::from(cp.v));
    // Generated ids carry their creation time in the high 64 bits: store ts relative to it.
    w.zigzag(cp.ts.as_micros().wrapping_sub(id_micros(cp.id)));
    w.varint(cp.channel_versions.len() as u64);
    for (c, v) in &cp.channel_versions {
        w.name(c.as_str());
        w.varint(v.get());
    }
    w.varint(cp.versions_seen.len() as u64);
    for (node, seen) in &cp.versions_seen {
        w.name(node.as_str());
        w.varint(seen.len() as u64);
        for (c, v) in seen {
            w.name(c.as_str());
            w.varint(v.get());
        }
    }
    match &cp.updated_channels {
        None => w.varint(0),
        Some(list) => {
            w.varint(list.len() as u64 + 1);
            for c in list {
                w.name(c.as_str());
            }
        }
    }
    seal(TAG_RECORD_V1, &w.finish())
}

/// Decodes a record; channel values stay empty.
pub(crate) fn decode_record(bytes: &[u8], id: CheckpointId) -> CResult<Checkpoint> {
    let (_, body) = open(bytes, &[TAG_RECORD_V1])?;
    let mut r = Reader::new(body);
    let v = u32_of(r.varint()?)?;
    let ts = Timestamp::from_micros(r.zigzag()?.wrapping_add(id_micros(id)));
    let mut channel_versions = BTreeMap::new();
    for _ in 0..r.count()? {
        let c = ChannelName::new(r.name()?);
        channel_versions.insert(c, ChannelVersion::new(r.varint()?));
    }
    let mut versions_seen = BTreeMap::new();
    for _ in 0..r.count()? {
        let node = NodeName::new(r.name()?);
        let mut seen = BTreeMap::new();
        for _ in 0..r.count()? {
            let c = ChannelName::new(r.name()?);
            seen.insert(c, ChannelVersion::new(r.varint()?));
        }
        versions_seen.insert(node, seen);
    }
    let n = r.varint()?;
    let updated_channels = if n == 0 {
        None
    } else {
        let n = usize::try_from(n - 1).map_err(|_| CodecError::Truncated)?;
        let mut list = Vec::with_capacity(n.min(1024));
        for _ in 0..n {
            list.push(ChannelName::new(r.name()?));
        }
        Some(list)
    };
    r.end()?;
    Ok(Checkpoint {
        v,
        id,
        ts,
        channel_values: BTreeMap::new(),
        channel_versions,
        versions_seen,
        updated_channels,
    })
}

pub(crate) fn encode_metadata(m: &CheckpointMetadata) -> Vec<u8> {
    let mut w = Writer::default();
    w.u8(match m.source {
        None => 0,
        Some(CheckpointSource::Input) => 1,
        Some(CheckpointSource::Loop) => 2,
        Some(CheckpointSource::Update) => 3,
        Some(CheckpointSource::Fork) => 4,
    });
    w.zigzag(m.step);
    w.varint(m.parents.len() as u64);
    for (ns, id) in &m.parents {
        w.str(ns.as_str());
        w.raw(&id.to_bytes());
    }
    match &m.run_id {
        None => w.u8(0),
        Some(run) => match uuid::Uuid::try_parse(run.as_str()) {
            // Only the canonical lowercase hyphenated form round-trips through 16 bytes.
            Ok(u) if u.hyphenated().to_string() == run.as_str() => {
                w.u8(1);
                w.raw(u.as_bytes());
            }
            _ => {
                w.u8(2);
                w.str(run.as_str());
            }
        },
    }
    w.varint(m.counters_since_delta_snapshot.len() as u64);
    for (c, n) in &m.counters_since_delta_snapshot {
        w.name(c.as_str());
        w.varint(u64::from(n.updates));
        w.varint(u64::from(n.supersteps));
    }
    w.u8(match m.channel_mode {
        None => 0,
        Some(ChannelMode::Full) => 1,
        Some(ChannelMode::Delta) => 2,
    });
    if m.extra.is_empty() {
        w.varint(0);
    } else {
        // Serialising a map of JSON values cannot fail.
        let json = serde_json::to_vec(&m.extra).unwrap_or_default();
        w.bytes(&json);
    }
    seal(TAG_METADATA_V1, &w.finish())
}

pub(crate) fn decode_metadata(bytes: &[u8]) -> CResult<CheckpointMetadata> {
    let (_, body) = open(bytes, &[TAG_METADATA_V1])?;
    let mut r = Reader::new(body);
    let source = match r.u8()? {
        0 => None,
        1 => Some(CheckpointSource::Input),
        2 => Some(CheckpointSource::Loop),
        3 => Some(CheckpointSource::Update),
        4 => Some(CheckpointSource::Fork),
        x => return Err(CodecError::Invalid(format!("unknown source tag {x}"))),
    };
    let step = r.zigzag()?;
    let mut parents = BTreeMap::new();
    for _ in 0..r.count()? {
        let ns = CheckpointNs::new(r.string()?);
        parents.insert(ns, r.id()?);
    }
    let run_id = match r.u8()? {
        0 => None,
        1 => {
            let b = r.take(16)?;
            let u = uuid::Uuid::from_slice(b).map_err(|e| CodecError::Invalid(e.to_string()))?;
            Some(RunId::new(u.hyphenated().to_string()))
        }
        2 => Some(RunId::new(r.string()?)),
        x => return Err(CodecError::Invalid(format!("unknown run id tag {x}"))),
    };
    let mut counters = BTreeMap::new();
    for _ in 0..r.count()? {
        let c = ChannelName::new(r.name()?);
        let updates = u32_of(r.varint()?)?;
        let supersteps = u32_of(r.varint()?)?;
        counters.insert(
            c,
            DeltaCounters {
                updates,
                supersteps,
            },
        );
    }
    let channel_mode = match r.u8()? {
        0 => None,
        1 => Some(ChannelMode::Full),
        2 => Some(ChannelMode::Delta),
        x => return Err(CodecError::Invalid(format!("unknown mode tag {x}"))),
    };
    let extra_bytes = r.bytes()?;
    let extra = if extra_bytes.is_empty() {
        serde_json::Map::new()
    } else {
        serde_json::from_slice(extra_bytes).map_err(|e| CodecError::Invalid(e.to_string()))?
    };
    r.end()?;
    Ok(CheckpointMetadata {
        source,
        step,
        parents,
        run_id,
        counters_since_delta_snapshot: counters,
        channel_mode,
        extra,
    })
}

/// A blob as stored: either self-contained or referencing message bodies by sequence number.
pub(crate) enum StoredBlob {
    Inline(Blob),
    /// Kind and runs `(first_seq, len)` of message sequence numbers.
    Refs(MessagesKind, Vec<(u64, u64)>),
}

pub(crate) fn encode_inline_blob(blob: &Blob) -> Option<Vec<u8>> {
    Some(match blob {
        Blob::Null => seal(TAG_BLOB_NULL_V1, &[]),
        Blob::Json(b) => seal(TAG_BLOB_JSON_V1, b),
        Blob::Bytes(b) => seal(TAG_BLOB_BYTES_V1, b),
        Blob::Messages(_) => return None,
    })
}

fn kind_tag(kind: MessagesKind) -> u8 {
    match kind {
        MessagesKind::Write => 1,
        MessagesKind::Overwrite => 2,
        MessagesKind::Snapshot => 3,
    }
}

/// Encodes message references as runs of consecutive sequence numbers.
pub(crate) fn encode_refs(kind: MessagesKind, seqs: &[u64]) -> Vec<u8> {
    let mut runs: Vec<(u64, u64)> = Vec::new();
    for &s in seqs {
        match runs.last_mut() {
            Some((start, len)) if start.checked_add(*len) == Some(s) => *len += 1,
            _ => runs.push((s, 1)),
        }
    }
    let mut w = Writer::default();
    w.u8(kind_tag(kind));
    w.varint(runs.len() as u64);
    let mut prev_end: i64 = 0;
    for (start, len) in runs {
        let start_i = start as i64;
        w.zigzag(start_i.wrapping_sub(prev_end));
        w.varint(len);
        prev_end = start_i.wrapping_add(len as i64);
    }
    seal(TAG_BLOB_MESSAGE_REFS_V1, &w.finish())
}

pub(crate) fn decode_blob(bytes: &[u8]) -> CResult<StoredBlob> {
    let (tag, body) = open(
        bytes,
        &[
            TAG_BLOB_NULL_V1,
            TAG_BLOB_JSON_V1,
            TAG_BLOB_BYTES_V1,
            TAG_BLOB_MESSAGE_REFS_V1,
        ],
    )?;
    Ok(match tag {
        TAG_BLOB_NULL_V1 => {
            if !body.is_empty() {
                return Err(CodecError::Invalid("null blob has a body".into()));
            }
            StoredBlob::Inline(Blob::Null)
        }
        TAG_BLOB_JSON_V1 => StoredBlob::Inline(Blob::Json(Arc::from(body))),
        TAG_BLOB_BYTES_V1 => StoredBlob::Inline(Blob::Bytes(Arc::from(body))),
        _ => {
            let (kind, runs) = decode_refs(body)?;
            StoredBlob::Refs(kind, runs)
        }
    })
}

/// The runs a stored blob or write value references, for garbage collection: none for an
/// inline blob, an error for a reference blob that does not decode, for any payload whose
/// checksum fails, or for a tag this build does not know (a newer format may reference bodies).
pub(crate) fn gc_runs(bytes: &[u8]) -> CResult<Vec<(u64, u64)>> {
    match bytes.first() {
        Some(&(TAG_BLOB_NULL_V1 | TAG_BLOB_JSON_V1 | TAG_BLOB_BYTES_V1)) => {
            // Checked, not trusted by its tag: a reference list whose tag byte was damaged
            // into an inline one would otherwise reference nothing, and collection would
            // delete the bodies only it needs (before 2026-12-02).
            open(
                bytes,
                &[TAG_BLOB_NULL_V1, TAG_BLOB_JSON_V1, TAG_BLOB_BYTES_V1],
            )?;
            Ok(Vec::new())
        }
        Some(&TAG_BLOB_MESSAGE_REFS_V1) => {
            let (_, body) = open(bytes, &[TAG_BLOB_MESSAGE_REFS_V1])?;
            decode_refs(body).map(|(_, runs)| runs)
        }
        Some(&tag) => Err(CodecError::UnknownVersion(tag)),
        None => Err(CodecError::Truncated),
    }
}

/// The runs a stored blob references, or `None` for any other blob. Looks at the tag before
/// anything else, so a JSON or bytes blob is neither checksummed nor copied; a reference blob
/// is checked in full (a damaged one is `None` here and an error where it is decoded).
pub(crate) fn blob_runs(bytes: &[u8]) -> Option<Vec<(u64, u64)>> {
    if bytes.first() != Some(&TAG_BLOB_MESSAGE_REFS_V1) {
        return None;
    }
    let (_, body) = open(bytes, &[TAG_BLOB_MESSAGE_REFS_V1]).ok()?;
    decode_refs(body).ok().map(|(_, runs)| runs)
}

/// The body of a `0x34` blob: its kind and runs `(first_seq, len)`.
fn decode_refs(body: &[u8]) -> CResult<(MessagesKind, Vec<(u64, u64)>)> {
    let mut r = Reader::new(body);
    let kind = match r.u8()? {
        1 => MessagesKind::Write,
        2 => MessagesKind::Overwrite,
        3 => MessagesKind::Snapshot,
        x => return Err(CodecError::Invalid(format!("unknown messages kind {x}"))),
    };
    let n = r.count()?;
    let mut runs = Vec::with_capacity(n);
    let mut prev_end: i64 = 0;
    for _ in 0..n {
        let start = prev_end.wrapping_add(r.zigzag()?);
        let len = r.varint()?;
        let start_u = u64::try_from(start)
            .map_err(|_| CodecError::Invalid("negative message sequence".into()))?;
        if len == 0 || start_u.checked_add(len).is_none() {
            return Err(CodecError::Invalid("bad message run".into()));
        }
        runs.push((start_u, len));
        prev_end = start.wrapping_add(len as i64);
    }
    r.end()?;
    Ok((kind, runs))
}

/// The deepest nesting of JSON a store takes: serde_json reads at most 127 levels back, and a
/// payload is read inside at most a few more (a message list decoded whole adds one,
/// metadata's map one, a graph's stored input or interrupt two), so a value nested deeper
/// would be stored and then fail every read of its checkpoint.
pub(crate) const MAX_JSON_DEPTH: usize = 120;

/// How deep `json`'s arrays and objects nest (0 for a scalar), by one pass over the bytes
/// (brackets inside strings do not count); for a payload about to be stored.
pub(crate) fn json_depth(json: &[u8]) -> usize {
    let (mut depth, mut deepest, mut in_string, mut escaped) = (0usize, 0usize, false, false);
    for &b in json {
        if in_string {
            match b {
                _ if escaped => escaped = false,
                b'\\' => escaped = true,
                b'"' => in_string = false,
                _ => {}
            }
            continue;
        }
        match b {
            b'"' => in_string = true,
            b'[' | b'{' => {
                depth += 1;
                deepest = deepest.max(depth);
            }
            b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    deepest
}

pub(crate) fn encode_body(json: &[u8]) -> Vec<u8> {
    seal(TAG_MESSAGE_BODY_V1, json)
}

pub(crate) fn decode_body(bytes: &[u8]) -> CResult<&[u8]> {
    open(bytes, &[TAG_MESSAGE_BODY_V1]).map(|(_, b)| b)
}

/// Checks a stored message body and copies its JSON out: the one copy a read makes, done
/// while the backend still borrows the stored bytes.
pub(crate) fn body_arc(bytes: &[u8]) -> CResult<Arc<[u8]>> {
    decode_body(bytes).map(Arc::from)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every `u64` round-trips, and a tenth byte carrying more than bit 63 is refused rather
    /// than losing the bits the shift would drop.
    #[test]
    fn varints_round_trip_and_refuse_more_than_64_bits() {
        for v in [
            0,
            1,
            127,
            128,
            300,
            u64::from(u32::MAX),
            u64::MAX - 1,
            u64::MAX,
        ] {
            let mut w = Writer::default();
            w.varint(v);
            assert_eq!(Reader::new(&w.buf).varint().unwrap(), v);
        }
        let mut max = Writer::default();
        max.varint(u64::MAX);
        assert_eq!(max.buf.len(), 10);
        assert_eq!(max.buf[9], 0x01);
        for last in [0x02u8, 0x03, 0x7f] {
            let mut bad = max.buf.clone();
            bad[9] = last;
            assert!(Reader::new(&bad).varint().is_err(), "tenth byte {last:#x}");
        }
    }

    #[test]
    fn refs_round_trip_as_runs() {
        let seqs = [1, 2, 3, 4, 10, 11, 5];
        let enc = encode_refs(MessagesKind::Snapshot, &seqs);
        let StoredBlob::Refs(kind, runs) = decode_blob(&enc).unwrap() else {
            panic!("not refs")
        };
        assert_eq!(kind, MessagesKind::Snapshot);
        assert_eq!(runs, vec![(1, 4), (10, 2), (5, 1)]);
        // 4000 consecutive messages cost a handful of bytes.
        let many: Vec<u64> = (1..=4000).collect();
        assert!(encode_refs(MessagesKind::Snapshot, &many).len() < 16);
    }

    /// Garbage collection reads a payload's references only from a payload that checks: a
    /// reference list with a damaged tag byte (now an inline tag) is an error, not "no
    /// references"; an intact inline payload references nothing.
    #[test]
    fn collection_trusts_no_tag_without_its_checksum() {
        let refs = encode_refs(MessagesKind::Snapshot, &[1, 2, 3]);
        assert_eq!(gc_runs(&refs).unwrap(), vec![(1, 3)]);
        for tag in [TAG_BLOB_NULL_V1, TAG_BLOB_JSON_V1, TAG_BLOB_BYTES_V1] {
            let mut bad = refs.clone();
            bad[0] = tag;
            assert!(gc_runs(&bad).is_err(), "tag {tag:#x}");
        }
        let inline = seal(TAG_BLOB_JSON_V1, b"{}");
        assert!(gc_runs(&inline).unwrap().is_empty());
        let mut damaged = inline.clone();
        damaged[HEADER_LEN] ^= 0x01;
        assert!(gc_runs(&damaged).is_err());
    }

    #[test]
    fn every_flipped_byte_is_detected() {
        let mut cp = Checkpoint::empty();
        cp.channel_versions
            .insert("messages".into(), ChannelVersion::new(3));
        let enc = encode_record(&cp);
        for i in 0..enc.len() {
            let mut bad = enc.clone();
            bad[i] ^= 0x01;
            assert!(decode_record(&bad, cp.id).is_err(), "flip at {i}");
        }
        for n in 0..enc.len() {
            assert!(decode_record(&enc[..n], cp.id).is_err(), "truncated to {n}");
        }
    }

    #[test]
    fn metadata_round_trips() {
        let mut m = CheckpointMetadata {
            source: Some(CheckpointSource::Loop),
            step: -1,
            run_id: Some(RunId::new(uuid::Uuid::new_v4().to_string())),
            channel_mode: Some(ChannelMode::Delta),
            ..CheckpointMetadata::default()
        };
        m.parents
            .insert(CheckpointNs::new("a"), CheckpointId::generate());
        m.counters_since_delta_snapshot.insert(
            "messages".into(),
            DeltaCounters {
                updates: 2,
                supersteps: 5,
            },
        );
        m.extra.insert("user".into(), serde_json::json!("x"));
        assert_eq!(decode_metadata(&encode_metadata(&m)).unwrap(), m);
        m.run_id = Some(RunId::new("not-a-uuid"));
        assert_eq!(decode_metadata(&encode_metadata(&m)).unwrap(), m);
    }
}

#[cfg(test)]
mod depth_tests {
    /// Nesting counts arrays and objects, not brackets inside strings (escaped quotes
    /// included).
    #[test]
    fn json_depth_counts_nesting_outside_strings() {
        for (json, depth) in [
            (&b"0"[..], 0),
            (b"[]", 1),
            (b"{\"a\":[1,{\"b\":[]}]}", 4),
            (b"[\"[[[\\\"]]]\"]", 1),
            (b"[[\"\\\\\"],[]]", 2),
        ] {
            assert_eq!(
                super::json_depth(json),
                depth,
                "{}",
                String::from_utf8_lossy(json)
            );
        }
    }
}
