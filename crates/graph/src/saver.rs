//! [`SaverCheckpointer`]: the runtime's persistence seam implemented over `antler-checkpoint`'s [`Saver`].

use std::collections::BTreeMap;
use std::sync::Arc;

use antler_checkpoint as cp;
use async_trait::async_trait;
use serde_json::Value as Json;

use crate::checkpointer::{
    CheckpointRecord, CheckpointTuple, Checkpointer, DeltaHistory, PendingWrite, Scope, Source,
};
use crate::error::{Error, Result};
use crate::ids::{CheckpointId, TaskId};

/// Adapts any [`cp::Saver`] (memory, SQLite, PostgreSQL) to the runtime.
#[derive(Clone)]
pub struct SaverCheckpointer {
    saver: Arc<dyn cp::Saver>,
}

impl SaverCheckpointer {
    /// Wraps a saver.
    pub fn new(saver: Arc<dyn cp::Saver>) -> Self {
        Self { saver }
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

fn convert(t: cp::CheckpointTuple) -> Result<CheckpointTuple> {
    let c = t.checkpoint;
    let mut values = BTreeMap::new();
    for (ch, b) in &c.channel_values {
        values.insert(load_name(ch.as_str()), decode(ch.as_str(), b)?);
    }
    let versions = c
        .channel_versions
        .iter()
        .map(|(ch, v)| (load_name(ch.as_str()), v.get()))
        .collect();
    let versions_seen = c
        .versions_seen
        .iter()
        .map(|(n, m)| {
            (
                n.to_string(),
                m.iter()
                    .map(|(ch, v)| (load_name(ch.as_str()), v.get()))
                    .collect(),
            )
        })
        .collect();
    let mut pending_writes = Vec::with_capacity(t.pending_writes.len());
    for w in &t.pending_writes {
        pending_writes.push(PendingWrite {
            task_id: TaskId::new(w.task_id.as_str()),
            task_path: load_path(w.task_path.as_str()),
            channel: load_name(w.channel.as_str()),
            value: decode(w.channel.as_str(), &w.value)?,
        });
    }
    Ok(CheckpointTuple {
        checkpoint: CheckpointRecord {
            id: CheckpointId::new(c.id.to_string()),
            parent: t
                .parent_config
                .and_then(|p| p.checkpoint_id)
                .map(|id| CheckpointId::new(id.to_string())),
            step: t.metadata.step,
            source: source_of(t.metadata.source),
            values,
            versions,
            versions_seen,
            updated_channels: c
                .updated_channels
                .map(|u| u.iter().map(|c| load_name(c.as_str())).collect()),
            new_versions: Default::default(),
            counters: t
                .metadata
                .counters_since_delta_snapshot
                .iter()
                .map(|(c, n)| (load_name(c.as_str()), (n.updates, n.supersteps)))
                .collect(),
        },
        pending_writes,
    })
}

#[async_trait]
impl Checkpointer for SaverCheckpointer {
    async fn get_tuple(
        &self,
        scope: &Scope,
        id: Option<&CheckpointId>,
    ) -> Result<Option<CheckpointTuple>> {
        let mut config =
            cp::CheckpointConfig::latest(scope.thread.as_str()).with_ns(scope.ns.as_str());
        if let Some(id) = id {
            config = config.with_checkpoint_id(parse_id(id)?);
        }
        self.saver
            .get_tuple(&config)
            .await
            .map_err(storage)?
            .map(convert)
            .transpose()
    }

    async fn list(&self, scope: &Scope) -> Result<Vec<CheckpointTuple>> {
        let query = cp::ListQuery {
            thread_id: Some(cp::ThreadId::new(scope.thread.as_str())),
            checkpoint_ns: Some(cp::CheckpointNs::new(scope.ns.as_str())),
            ..cp::ListQuery::default()
        };
        self.saver
            .list(&query)
            .await
            .map_err(storage)?
            .into_iter()
            .map(convert)
            .collect()
    }

    async fn put(&self, scope: &Scope, rec: CheckpointRecord) -> Result<()> {
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
            checkpoint.channel_values.insert(
                chan(ch),
                encode(ch, j, cp::MessagesKind::Snapshot)?,
            );
        }
        checkpoint.channel_versions = rec
            .versions
            .iter()
            .map(|(ch, v)| (chan(ch), cp::ChannelVersion::new(*v)))
            .collect();
        checkpoint.versions_seen = rec
            .versions_seen
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
        let mut metadata = cp::CheckpointMetadata {
            source: Some(to_cp_source(rec.source)),
            step: rec.step,
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
        self.saver
            .put(&config, checkpoint, metadata, &new_versions)
            .await
            .map_err(storage)?;
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
            .with_checkpoint_id(parse_id(checkpoint)?);
        let mut blobs = Vec::with_capacity(writes.len());
        for (ch, j) in &writes {
            blobs.push((
                chan(ch),
                encode(ch, j, cp::MessagesKind::Write)?,
            ));
        }
        self.saver
            .put_writes(
                &config,
                blobs,
                &cp::TaskId::new(task_id.as_str()),
                &cp::TaskPath::new(store_path(task_path)),
            )
            .await
            .map_err(storage)
    }

    async fn delta_history(
        &self,
        scope: &Scope,
        checkpoint: &CheckpointId,
        channels: &[String],
    ) -> Result<BTreeMap<String, DeltaHistory>> {
        let config = cp::CheckpointConfig::latest(scope.thread.as_str())
            .with_ns(scope.ns.as_str())
            .with_checkpoint_id(parse_id(checkpoint)?);
        let names: Vec<cp::ChannelName> = channels
            .iter()
            .map(|c| chan(c))
            .collect();
        let found = self
            .saver
            .delta_channel_history(&config, &names)
            .await
            .map_err(storage)?;
        let mut out = BTreeMap::new();
        for (ch, h) in found {
            let seed = h
                .seed
                .as_ref()
                .map(|b| decode(ch.as_str(), b))
                .transpose()?;
            let writes = h
                .writes
                .iter()
                .map(|w| decode(ch.as_str(), &w.value))
                .collect::<Result<Vec<_>>>()?;
            out.insert(load_name(ch.as_str()), DeltaHistory { seed, writes });
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::{load_name, load_path, store_name, store_path};

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
