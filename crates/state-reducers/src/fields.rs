//! The `ThreadState` field types and their merge rules (kernel-spec R2–R17).
//!
//! Each reducer takes the existing value and the incoming write by value and
//! returns the merged value; `None` is the reference's `null`. Where the
//! reference distinguishes a missing key from a key set to `null` (the
//! sandbox id, the promoted catalog), the types keep that distinction so a
//! value round-trips unchanged.

use indexmap::IndexMap;
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use crate::error::{Error, Result};
use crate::pytext::{collapse_whitespace, is_truthy, py_str, take_chars};

/// Deserialises a field that may be missing (`None`), `null` (`Some(None)`)
/// or a value (`Some(Some(v))`).
fn double_option<'de, D, T>(d: D) -> std::result::Result<Option<Option<T>>, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(d).map(Some)
}

/// The thread's sandbox binding (`{sandbox_id?: string | null}`).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct SandboxState {
    /// Missing (`None`), `null` (`Some(None)`) or an id.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub sandbox_id: Option<Option<String>>,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl SandboxState {
    /// A sandbox bound to `id`.
    pub fn new(id: impl Into<String>) -> Self {
        SandboxState {
            sandbox_id: Some(Some(id.into())),
            extra: Map::new(),
        }
    }

    /// The id, with a missing key reading as `None`.
    pub fn id(&self) -> Option<&str> {
        self.sandbox_id.as_ref().and_then(|s| s.as_deref())
    }
}

/// `merge_sandbox` (R6): the same id (or both missing) keeps the existing
/// object; two different ids fail closed with [`Error::SandboxConflict`].
pub fn merge_sandbox(
    existing: Option<SandboxState>,
    new: Option<SandboxState>,
) -> Result<Option<SandboxState>> {
    let Some(new) = new else {
        return Ok(existing);
    };
    let Some(existing) = existing else {
        return Ok(Some(new));
    };
    if existing.id() == new.id() {
        return Ok(Some(existing));
    }
    Err(Error::SandboxConflict {
        existing: existing.id().map(str::to_owned),
        new: new.id().map(str::to_owned),
    })
}

/// Deduplicates keeping the first occurrence, order-preserving.
fn dedup_first(items: impl IntoIterator<Item = String>) -> Vec<String> {
    let mut seen = hashbrown::HashSet::new();
    items
        .into_iter()
        .filter(|s| seen.insert(s.clone()))
        .collect()
}

/// `merge_artifacts` (R7): concatenate and de-duplicate, except that a
/// `null` write returns the existing list untouched (duplicates kept).
pub fn merge_artifacts(existing: Option<Vec<String>>, new: Option<Vec<String>>) -> Vec<String> {
    match (existing, new) {
        (None, new) => new.unwrap_or_default(),
        (Some(existing), None) => existing,
        (Some(existing), Some(new)) => dedup_first(existing.into_iter().chain(new)),
    }
}

/// Metadata of an image the agent has viewed.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ViewedImage {
    /// MIME type, e.g. `image/png`.
    pub mime_type: String,
    /// Size in bytes.
    pub size: u64,
    /// Where the file actually lives.
    pub actual_path: String,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `image_path → ViewedImage`, in insertion order.
pub type ViewedImages = IndexMap<String, ViewedImage>;

/// `merge_viewed_images` (R8): an empty map clears, otherwise a shallow merge
/// where new keys overwrite and existing keys keep their position.
pub fn merge_viewed_images(
    existing: Option<ViewedImages>,
    new: Option<ViewedImages>,
) -> ViewedImages {
    match (existing, new) {
        (None, new) => new.unwrap_or_default(),
        (Some(existing), None) => existing,
        (Some(_), Some(new)) if new.is_empty() => ViewedImages::new(),
        (Some(mut existing), Some(new)) => {
            existing.extend(new);
            existing
        }
    }
}

/// One todo item (`{content, status}`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Todo {
    /// What to do.
    pub content: String,
    /// `pending`, `in_progress`, `completed`, …
    pub status: String,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `merge_todos` (R9): `null` preserves, anything else (even `[]`) replaces.
pub fn merge_todos(existing: Option<Vec<Todo>>, new: Option<Vec<Todo>>) -> Option<Vec<Todo>> {
    new.or(existing)
}

/// The thread's goal (R4): opaque to its reducer, so kept as the JSON object it was
/// written as, every key and value as given (a `null` stays a `null`, a key of another
/// type or a missing one is kept as it is), with typed readers for R4's keys.
///
/// Before 2026-12-01 it was a struct of R4's fields: a goal without an `objective`, or
/// with a count that is not an integer, made the whole state unreadable, and a key
/// written as `null` was dropped on the way back out.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct GoalState(pub Map<String, Value>);

impl GoalState {
    /// A goal with an objective, status `"active"` and nothing else set.
    pub fn active(objective: impl Into<String>) -> Self {
        let mut m = Map::new();
        m.insert("objective".into(), Value::String(objective.into()));
        m.insert("status".into(), Value::String("active".into()));
        Self(m)
    }

    fn str_of(&self, key: &str) -> Option<&str> {
        self.0.get(key).and_then(Value::as_str)
    }

    fn int_of(&self, key: &str) -> Option<i64> {
        self.0.get(key).and_then(Value::as_i64)
    }

    /// What the agent pursues (`None` when missing or not a string).
    pub fn objective(&self) -> Option<&str> {
        self.str_of("objective")
    }

    /// Always `"active"` while a goal is set.
    pub fn status(&self) -> Option<&str> {
        self.str_of("status")
    }

    /// Creation time (ISO-8601).
    pub fn created_at(&self) -> Option<&str> {
        self.str_of("created_at")
    }

    /// Last update time (ISO-8601).
    pub fn updated_at(&self) -> Option<&str> {
        self.str_of("updated_at")
    }

    /// Continuations used so far.
    pub fn continuation_count(&self) -> Option<i64> {
        self.int_of("continuation_count")
    }

    /// Continuation budget.
    pub fn max_continuations(&self) -> Option<i64> {
        self.int_of("max_continuations")
    }

    /// Consecutive continuations without progress.
    pub fn no_progress_count(&self) -> Option<i64> {
        self.int_of("no_progress_count")
    }

    /// Budget for continuations without progress.
    pub fn max_no_progress_continuations(&self) -> Option<i64> {
        self.int_of("max_no_progress_continuations")
    }

    /// The last evaluation, free-form (`None` when missing, `null` or not an object).
    pub fn last_evaluation(&self) -> Option<&Map<String, Value>> {
        self.0.get("last_evaluation").and_then(Value::as_object)
    }
}

/// `merge_goal` (R10): `null` preserves, any goal replaces.
pub fn merge_goal(existing: Option<GoalState>, new: Option<GoalState>) -> Option<GoalState> {
    new.or(existing)
}

/// Deferred-tool promotions scoped by a catalog hash (R11).
///
/// Both keys keep missing (`None`) apart from `null` (`Some(None)`): a write of
/// `{"catalog_hash": null}` is not the empty write `{}` that R11.1 ignores.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct PromotedState {
    /// Hash of the tool catalog the names refer to: missing in malformed values, `null`
    /// when a write set it so.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub catalog_hash: Option<Option<String>>,
    /// Promoted tool names: missing in malformed values, `null` when a write set it so.
    #[serde(
        default,
        deserialize_with = "double_option",
        skip_serializing_if = "Option::is_none"
    )]
    pub names: Option<Option<Vec<String>>>,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl PromotedState {
    /// Promotions of `names` under `catalog_hash`.
    pub fn new(catalog_hash: impl Into<String>, names: Vec<String>) -> Self {
        PromotedState {
            catalog_hash: Some(Some(catalog_hash.into())),
            names: Some(Some(names)),
            extra: Map::new(),
        }
    }

    /// The catalog hash, a missing key read as `null` (R11.2).
    pub fn hash(&self) -> Option<&str> {
        self.catalog_hash.as_ref().and_then(Option::as_deref)
    }

    /// The names, missing or `null` read as none.
    pub fn name_list(&self) -> &[String] {
        self.names
            .as_ref()
            .and_then(Option::as_deref)
            .unwrap_or_default()
    }

    /// The empty write `{}` (no key at all).
    fn is_empty(&self) -> bool {
        self.catalog_hash.is_none() && self.names.is_none() && self.extra.is_empty()
    }
}

/// `merge_promoted` (R11): same catalog hash accumulates names, a different
/// (or missing) hash replaces wholesale so stale names cannot leak across a
/// catalog change; a null or empty (`{}`) write keeps the existing value.
///
/// An existing value without a `catalog_hash` key is malformed and never
/// matches (R11.2), not even a new value whose hash is `null` or missing: its
/// names would otherwise survive the write.
///
/// # Errors
/// [`Error::MalformedField`] (kind `InvalidInput`) where the reference raises: a
/// non-empty write without a `catalog_hash` or a `names` key, or with `names:
/// null`, and, for a write of the same hash, an existing value without a list
/// of names. Such a write never empties the field (before 2026-12-01 a write
/// `{"names": [...]}` replaced the promotions with a `null` hash).
pub fn merge_promoted(
    existing: Option<PromotedState>,
    new: Option<PromotedState>,
) -> Result<Option<PromotedState>> {
    let new = match new {
        Some(n) if !n.is_empty() => n,
        _ => return Ok(existing),
    };
    let malformed = |reason: &str| Error::MalformedField {
        field: "promoted",
        reason: reason.to_owned(),
    };
    // The reference reads `new["catalog_hash"]` and `new["names"]` (a missing key is a
    // `KeyError`, a `null` list a `TypeError`).
    let new_hash = match new.catalog_hash {
        Some(h) => h,
        None => return Err(malformed("a write has no `catalog_hash`")),
    };
    let new_names = match new.names {
        Some(Some(names)) => names,
        Some(None) => return Err(malformed("a write's `names` is null")),
        None => return Err(malformed("a write has no `names`")),
    };
    let names = match existing {
        Some(existing)
            if existing.catalog_hash.is_some() && existing.hash() == new_hash.as_deref() =>
        {
            let kept = match existing.names {
                Some(Some(names)) => names,
                Some(None) => return Err(malformed("the existing `names` is null")),
                None => return Err(malformed("the existing value has no `names`")),
            };
            dedup_first(kept.into_iter().chain(new_names))
        }
        _ => dedup_first(new_names),
    };
    Ok(Some(PromotedState {
        catalog_hash: Some(new_hash),
        names: Some(Some(names)),
        extra: Map::new(),
    }))
}

/// The subagent statuses that end a delegation (`SUBAGENT_STATUS_VALUES`).
pub const TERMINAL_STATUSES: [&str; 5] = [
    "completed",
    "failed",
    "cancelled",
    "timed_out",
    "polling_timed_out",
];

/// How many delegations the ledger keeps (R14).
pub const DELEGATION_LEDGER_MAX: usize = 50;

/// Whether `status` is terminal (`in_progress` and unknown strings are not).
pub fn is_terminal_status(status: &str) -> bool {
    TERMINAL_STATUSES.contains(&status)
}

/// One dispatched subagent task (R12).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct DelegationEntry {
    /// Ledger id (the tool-call id of the dispatch).
    pub id: String,
    /// What was delegated.
    pub description: String,
    /// Which subagent runs it.
    pub subagent_type: String,
    /// `in_progress` or one of [`TERMINAL_STATUSES`].
    pub status: String,
    /// Creation time; carried over on replacement when truthy.
    pub created_at: String,
    /// The subagent run id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// A bounded summary of the result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_brief: Option<String>,
    /// SHA-256 of the full result.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_sha256: Option<String>,
    /// Where the full result is stored.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub result_ref: Option<String>,
    /// `token_capped`, `turn_capped` or `loop_capped`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<String>,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// `merge_delegations` (R13): latest entry per id at its first-seen
/// position; a terminal status is never downgraded; `created_at` (and then
/// `run_id`) carry over on replacement; only the last 50 are kept.
pub fn merge_delegations(
    existing: Option<Vec<DelegationEntry>>,
    new: Option<Vec<DelegationEntry>>,
) -> Vec<DelegationEntry> {
    let new = match new {
        Some(n) if !n.is_empty() => n,
        _ => return existing.unwrap_or_default(),
    };
    let mut by_id: IndexMap<String, DelegationEntry> = IndexMap::new();
    for mut incoming in existing.unwrap_or_default().into_iter().chain(new) {
        match by_id.get(&incoming.id) {
            None => {}
            Some(prev) => {
                if is_terminal_status(&prev.status) && !is_terminal_status(&incoming.status) {
                    continue;
                }
                if !prev.created_at.is_empty() {
                    incoming.created_at.clone_from(&prev.created_at);
                    let prev_run = prev.run_id.as_deref().filter(|r| !r.is_empty());
                    let incoming_run = incoming.run_id.as_deref().filter(|r| !r.is_empty());
                    if let (Some(run), None) = (prev_run, incoming_run) {
                        incoming.run_id = Some(run.to_owned());
                    }
                }
            }
        }
        // IndexMap::insert keeps the first-seen position of an existing key.
        by_id.insert(incoming.id.clone(), incoming);
    }
    let skip = by_id.len().saturating_sub(DELEGATION_LEDGER_MAX);
    by_id.into_values().skip(skip).collect()
}

/// How many skill references the context keeps (R15).
pub const SKILL_CONTEXT_MAX: usize = 8;
/// Maximum description length in characters (R15).
pub const SKILL_DESCRIPTION_MAX: usize = 500;

/// A reference to a skill file the agent has read (R15), never its body.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct SkillEntry {
    /// Skill name (`""` when unknown).
    pub name: String,
    /// Path of the skill file; the identity of the entry.
    pub path: String,
    /// Description as written or stored; [`merge_skill_context`] collapses its whitespace
    /// and cuts it to 500 characters (R16).
    pub description: String,
    /// Informational message index (0 when unknown), kept as stored.
    pub loaded_at: LoadedAt,
}

/// A skill entry's `loaded_at` as the reference keeps it (R16, kernel-spec's quirk list): an
/// integer, or a boolean, which Python counts as an integer and so keeps as it is (`true`
/// stays `true`). Anything else reads as `0`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(untagged)]
pub enum LoadedAt {
    /// An integer that fits `i64`.
    Int(i64),
    /// A larger non-negative integer (Python's integers have no range).
    Large(u64),
    /// A boolean, kept as it was written.
    Bool(bool),
}

impl LoadedAt {
    /// The value of a stored `loaded_at`: an integer or a boolean as it is, else `0`.
    /// (An integer beyond `u64` has already become a float in JSON parsing and reads as `0`.)
    pub fn from_json(v: Option<&Value>) -> Self {
        match v {
            Some(Value::Bool(b)) => LoadedAt::Bool(*b),
            Some(Value::Number(n)) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => LoadedAt::Int(i),
                (None, Some(u)) => LoadedAt::Large(u),
                _ => LoadedAt::Int(0),
            },
            _ => LoadedAt::Int(0),
        }
    }
}

impl From<i64> for LoadedAt {
    fn from(i: i64) -> Self {
        LoadedAt::Int(i)
    }
}

impl PartialEq<i64> for LoadedAt {
    fn eq(&self, other: &i64) -> bool {
        *self == LoadedAt::Int(*other)
    }
}

impl SkillEntry {
    /// An entry; its description is normalised when merged (R16).
    pub fn new(
        name: impl Into<String>,
        path: impl Into<String>,
        description: &str,
        loaded_at: i64,
    ) -> Self {
        SkillEntry {
            name: name.into(),
            path: path.into(),
            description: description.to_owned(),
            loaded_at: LoadedAt::Int(loaded_at),
        }
    }

    /// Reads a raw stored or incoming entry (R16): keeps only the four fields, coerces their
    /// types, drops legacy keys such as `content`. A missing `path` is
    /// [`Error::MissingSkillPath`]. The description is kept as given (a non-string one is
    /// `""`): [`merge_skill_context`] normalises it once per call, as the reference does, and
    /// normalising twice is not the same (a cut that ends in a space loses it the second time).
    pub fn from_raw(raw: &Map<String, Value>) -> Result<Self> {
        let path = raw.get("path").ok_or(Error::MissingSkillPath)?;
        let name = match raw.get("name") {
            Some(v) if is_truthy(v) => py_str(v),
            _ => String::new(),
        };
        let description = match raw.get("description") {
            Some(Value::String(s)) => s.clone(),
            _ => String::new(),
        };
        let loaded_at = LoadedAt::from_json(raw.get("loaded_at"));
        Ok(SkillEntry {
            name,
            path: py_str(path),
            description,
            loaded_at,
        })
    }

    fn normalized(self) -> Self {
        SkillEntry {
            description: normalize_description(&self.description),
            ..self
        }
    }
}

fn normalize_description(s: &str) -> String {
    let collapsed = collapse_whitespace(s);
    take_chars(&collapsed, SKILL_DESCRIPTION_MAX).to_owned()
}

impl<'de> Deserialize<'de> for SkillEntry {
    fn deserialize<D: Deserializer<'de>>(d: D) -> std::result::Result<Self, D::Error> {
        let raw = Map::deserialize(d)?;
        SkillEntry::from_raw(&raw).map_err(serde::de::Error::custom)
    }
}

/// `merge_skill_context` (R17): normalise, refresh recency by path (a re-read
/// skill moves to the end), keep the 8 most recent.
pub fn merge_skill_context(
    existing: Option<Vec<SkillEntry>>,
    new: Option<Vec<SkillEntry>>,
) -> Vec<SkillEntry> {
    let existing: Vec<SkillEntry> = existing
        .unwrap_or_default()
        .into_iter()
        .map(SkillEntry::normalized)
        .collect();
    // A null or empty write returns the normalised list as it is: duplicates
    // are only folded when something is merged.
    let Some(new) = new.filter(|n| !n.is_empty()) else {
        return existing;
    };
    let mut by_path: IndexMap<String, SkillEntry> = IndexMap::new();
    for entry in existing {
        by_path.insert(entry.path.clone(), entry);
    }
    for entry in new {
        let entry = entry.normalized();
        by_path.shift_remove(&entry.path);
        by_path.insert(entry.path.clone(), entry);
    }
    let skip = by_path.len().saturating_sub(SKILL_CONTEXT_MAX);
    by_path.into_values().skip(skip).collect()
}

/// Paths of the thread's workspace folders (last value wins).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct ThreadData {
    /// The agent's working directory.
    #[serde(default)]
    pub workspace_path: Option<String>,
    /// Where uploads land.
    #[serde(default)]
    pub uploads_path: Option<String>,
    /// Where outputs are written.
    #[serde(default)]
    pub outputs_path: Option<String>,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

/// A background task's status (last value wins).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackgroundTask {
    /// Task id.
    pub task_id: String,
    /// Human-readable name.
    pub task_name: String,
    /// Status string.
    pub status: String,
    /// Last update time.
    pub updated_at: String,
    /// Unknown keys, preserved.
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
