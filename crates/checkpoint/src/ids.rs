//! Typed identifiers: threads, namespaces, checkpoints, channels, tasks, runs and channel versions.
//!
//! Every identifier is a newtype so that a thread id can never be passed where a
//! checkpoint id is expected.
//! String-like ids convert from `&str`/`String` and borrow as `str`, so maps keyed
//! by them can be queried with a string slice.

use std::fmt;
use std::sync::Mutex;
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Deserializer, Serialize, Serializer};

macro_rules! string_id {
    ($(#[$m:meta])* $name:ident) => {
        $(#[$m])*
        #[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            /// Wraps a string as this id.
            pub fn new(id: impl Into<String>) -> Self {
                Self(id.into())
            }

            /// The id as a string slice.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// Unwraps the string.
            pub fn into_inner(self) -> String {
                self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl From<&str> for $name {
            fn from(s: &str) -> Self {
                Self(s.to_owned())
            }
        }

        impl From<String> for $name {
            fn from(s: String) -> Self {
                Self(s)
            }
        }

        impl std::borrow::Borrow<str> for $name {
            fn borrow(&self) -> &str {
                &self.0
            }
        }

        impl AsRef<str> for $name {
            fn as_ref(&self) -> &str {
                &self.0
            }
        }
    };
}

string_id!(
    /// A conversation thread: the unit whose state the checkpoints persist.
    ThreadId
);
string_id!(
    /// A checkpoint namespace: `""` is the root graph, subgraphs use
    /// `parent|node:task_id` paths (runtime-spec §1).
    CheckpointNs
);
string_id!(
    /// The name of a state channel (a graph state field or an internal channel such as `__start__`).
    ChannelName
);
string_id!(
    /// The name of a graph node, the outer key of `versions_seen`.
    NodeName
);
string_id!(
    /// A task id: deterministic per (checkpoint, step, node, triggers), see runtime-spec §2.3.
    TaskId
);
string_id!(
    /// The sortable string form of a task path; pending writes are returned in
    /// `(task_path, task_id, idx)` order and writes without a path sort first.
    TaskPath
);
string_id!(
    /// The id of one run (one invoke) that produced checkpoints; `delete_for_runs` keys on it.
    RunId
);

impl CheckpointNs {
    /// The root namespace `""`.
    pub fn root() -> Self {
        Self(String::new())
    }

    /// Whether this is the root namespace.
    pub fn is_root(&self) -> bool {
        self.0.is_empty()
    }
}

/// The id of the NULL task (runtime-spec §1): writes that do not come from a real task.
pub const NULL_TASK_ID: &str = "00000000-0000-0000-0000-000000000000";

impl TaskId {
    /// The NULL task id, `00000000-0000-0000-0000-000000000000`.
    pub fn null() -> Self {
        Self(NULL_TASK_ID.to_owned())
    }

    /// Whether this is the NULL task id.
    pub fn is_null(&self) -> bool {
        self.0 == NULL_TASK_ID
    }
}

/// A checkpoint id: a 128-bit, time-ordered identifier shown in UUID form.
///
/// Ids made by [`CheckpointId::generate`] are strictly increasing within a
/// process (the high 64 bits are the wall clock in microseconds, bumped past
/// the last id handed out), so "latest" is "greatest" and `list` sorts by id.
/// Across processes the order is only as good as the clocks; the history walk
/// therefore follows parent pointers, never id order.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct CheckpointId(u128);

static LAST_CHECKPOINT_ID: Mutex<u128> = Mutex::new(0);

impl CheckpointId {
    /// A fresh id, greater than every id generated before in this process.
    pub fn generate() -> Self {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_micros())
            .unwrap_or(0);
        // Low bits are random so that two processes starting in the same
        // microsecond do not collide.
        let random = u128::from(uuid::Uuid::new_v4().as_u64_pair().1);
        let candidate = ((micros & u128::from(u64::MAX)) << 64) | random;
        let mut last = match LAST_CHECKPOINT_ID.lock() {
            Ok(guard) => guard,
            Err(poisoned) => poisoned.into_inner(),
        };
        let id = if candidate > *last {
            candidate
        } else {
            last.saturating_add(1)
        };
        *last = id;
        Self(id)
    }

    /// The id with the given numeric value (tests and fixtures).
    pub const fn from_u128(value: u128) -> Self {
        Self(value)
    }

    /// The numeric value; ids order like their values.
    pub const fn as_u128(self) -> u128 {
        self.0
    }

    /// The 16 big-endian bytes of the id (its compact stored form).
    pub const fn to_bytes(self) -> [u8; 16] {
        self.0.to_be_bytes()
    }

    /// The id from its 16 big-endian bytes.
    pub const fn from_bytes(bytes: [u8; 16]) -> Self {
        Self(u128::from_be_bytes(bytes))
    }
}

impl fmt::Display for CheckpointId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(&uuid::Uuid::from_u128(self.0).hyphenated(), f)
    }
}

/// The error of parsing a [`CheckpointId`] from a string that is not in UUID form.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid checkpoint id {input:?}: expected the 36-character UUID form")]
pub struct ParseCheckpointIdError {
    /// The rejected input.
    pub input: String,
}

impl std::str::FromStr for CheckpointId {
    type Err = ParseCheckpointIdError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        uuid::Uuid::parse_str(s)
            .map(|u| Self(u.as_u128()))
            .map_err(|_| ParseCheckpointIdError {
                input: s.to_owned(),
            })
    }
}

impl Serialize for CheckpointId {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_str(self)
    }
}

impl<'de> Deserialize<'de> for CheckpointId {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let s = String::deserialize(deserializer)?;
        s.parse().map_err(serde::de::Error::custom)
    }
}

/// A channel version: versions only increase and compare with `>` (runtime-spec §4.3).
///
/// The runtime gives every channel changed in one step the same new version,
/// one above the greatest current version ([`ChannelVersion::next_after`]).
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct ChannelVersion(u64);

impl ChannelVersion {
    /// The version with the given number.
    pub const fn new(n: u64) -> Self {
        Self(n)
    }

    /// The version number.
    pub const fn get(self) -> u64 {
        self.0
    }

    /// The version after `current` (`None` → 1), the `get_next_version` of the reference.
    pub fn next_after(current: Option<Self>) -> Self {
        match current {
            None => Self(1),
            Some(v) => Self(v.0.saturating_add(1)),
        }
    }
}

impl From<u64> for ChannelVersion {
    fn from(n: u64) -> Self {
        Self(n)
    }
}

impl fmt::Display for ChannelVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}

/// A point in time, in microseconds since the Unix epoch, shown as ISO-8601 UTC.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Default, Serialize, Deserialize,
)]
#[serde(transparent)]
pub struct Timestamp(i64);

impl Timestamp {
    /// The current wall-clock time.
    pub fn now() -> Self {
        let micros = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| i64::try_from(d.as_micros()).unwrap_or(i64::MAX))
            .unwrap_or(0);
        Self(micros)
    }

    /// The timestamp `micros` microseconds after the epoch.
    pub const fn from_micros(micros: i64) -> Self {
        Self(micros)
    }

    /// Microseconds since the epoch.
    pub const fn as_micros(self) -> i64 {
        self.0
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let secs = self.0.div_euclid(1_000_000);
        let micros = self.0.rem_euclid(1_000_000);
        let days = secs.div_euclid(86_400);
        let sod = secs.rem_euclid(86_400);
        // Civil-from-days (Howard Hinnant's algorithm).
        let z = days + 719_468;
        let era = z.div_euclid(146_097);
        let doe = z.rem_euclid(146_097);
        let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
        let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
        let mp = (5 * doy + 2) / 153;
        let day = doy - (153 * mp + 2) / 5 + 1;
        let month = if mp < 10 { mp + 3 } else { mp - 9 };
        let year = yoe + era * 400 + i64::from(month <= 2);
        write!(
            f,
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{micros:06}+00:00",
            sod / 3600,
            (sod / 60) % 60,
            sod % 60
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn checkpoint_ids_increase_and_round_trip() {
        let a = CheckpointId::generate();
        let b = CheckpointId::generate();
        assert!(b > a);
        assert!(b.to_string() > a.to_string());
        let parsed: CheckpointId = a.to_string().parse().unwrap();
        assert_eq!(parsed, a);
        assert!("nope".parse::<CheckpointId>().is_err());
        assert_eq!(CheckpointId::from_bytes(a.to_bytes()), a);
    }

    #[test]
    fn timestamp_formats_iso() {
        assert_eq!(
            Timestamp::from_micros(0).to_string(),
            "1970-01-01T00:00:00.000000+00:00"
        );
        assert_eq!(
            Timestamp::from_micros(1_700_000_000_123_456).to_string(),
            "2023-11-14T22:13:20.123456+00:00"
        );
    }

    #[test]
    fn versions_increase() {
        assert_eq!(ChannelVersion::next_after(None), ChannelVersion::new(1));
        assert_eq!(
            ChannelVersion::next_after(Some(ChannelVersion::new(7))),
            ChannelVersion::new(8)
        );
    }
}
