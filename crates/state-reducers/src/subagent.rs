//! The subagent status contract (kernel-spec R24): reading a task tool
//! message's structured result, as delegation capture needs it.

use serde_json::{Map, Value};

use crate::fields::is_terminal_status;
use crate::text::bound_head_tail;

/// Bound for every text read from the metadata.
pub const SUBAGENT_TEXT_MAX: i64 = 2000;

/// The stop reasons a subagent may report.
pub const SUBAGENT_STOP_REASONS: [&str; 3] = ["token_capped", "turn_capped", "loop_capped"];

/// The legacy status older subagents report when they ran out of turns.
pub const LEGACY_MAX_TURNS_STATUS: &str = "max_turns_reached";

/// The structured result of a finished subagent task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SubagentResult {
    /// One of the terminal statuses.
    pub status: String,
    /// A bounded summary (only for `completed`).
    pub result_brief: Option<String>,
    /// SHA-256 of the full result, 64 lowercase hex characters (only for `completed`).
    pub result_sha256: Option<String>,
    /// A bounded error text (only when not `completed`).
    pub error: Option<String>,
    /// `token_capped`, `turn_capped` or `loop_capped`.
    pub stop_reason: Option<String>,
}

fn non_blank<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a str> {
    map.get(key)
        .and_then(Value::as_str)
        // Python's `str.strip()`, which also strips U+001C–U+001F.
        .filter(|s| !s.chars().all(crate::pytext::is_py_space))
}

fn is_sha256(s: &str) -> bool {
    s.len() == 64
        && s.bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b))
}

/// `read_subagent_result_metadata`: `None` when the map is empty or the
/// status is not terminal (the dispatch then stays in progress).
pub fn read_subagent_result_metadata(kwargs: &Map<String, Value>) -> Option<SubagentResult> {
    if kwargs.is_empty() {
        return None;
    }
    let raw_status = kwargs.get("subagent_status").and_then(Value::as_str)?;
    let brief = non_blank(kwargs, "subagent_result_brief");
    let (status, legacy_stop) = if raw_status == LEGACY_MAX_TURNS_STATUS {
        let status = if brief.is_some() {
            "completed"
        } else {
            "failed"
        };
        (status, Some("turn_capped"))
    } else if is_terminal_status(raw_status) {
        (raw_status, None)
    } else {
        return None;
    };
    let explicit_stop = kwargs
        .get("subagent_stop_reason")
        .and_then(Value::as_str)
        .filter(|r| SUBAGENT_STOP_REASONS.contains(r));
    let completed = status == "completed";
    // The digest is of the full result, and read only beside a brief of it, as the
    // reference reads it.
    let with_brief = completed && brief.is_some();
    Some(SubagentResult {
        status: status.to_owned(),
        result_brief: brief
            .filter(|_| completed)
            .map(|b| bound_head_tail(b, SUBAGENT_TEXT_MAX)),
        result_sha256: kwargs
            .get("subagent_result_sha256")
            .and_then(Value::as_str)
            .filter(|s| with_brief && is_sha256(s))
            .map(str::to_owned),
        error: non_blank(kwargs, "subagent_error")
            .filter(|_| !completed)
            .map(|e| bound_head_tail(e, SUBAGENT_TEXT_MAX)),
        stop_reason: explicit_stop.or(legacy_stop).map(str::to_owned),
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn read(v: Value) -> Option<SubagentResult> {
        read_subagent_result_metadata(v.as_object().expect("object"))
    }

    /// R24 with the reference: the result's digest is read only beside a non-blank brief
    /// (before 2026-12-02 it was read for any completed result, and reached the ledger).
    #[test]
    fn the_digest_is_read_only_beside_a_brief() {
        let hash = "a".repeat(64);
        for brief in [None, Some("   ")] {
            let mut v = json!({"subagent_status": "completed", "subagent_result_sha256": hash});
            if let Some(b) = brief {
                v["subagent_result_brief"] = json!(b);
            }
            let r = read(v).expect("a completed result");
            assert_eq!(r.result_sha256, None, "brief {brief:?}");
        }
        let r = read(
            json!({"subagent_status": "completed", "subagent_result_brief": "done",
                            "subagent_result_sha256": hash}),
        )
        .expect("a completed result");
        assert_eq!(r.result_sha256.as_deref(), Some(hash.as_str()));
    }

    /// A brief is blank as Python's `str.strip()` sees it, which also strips the
    /// ASCII information separators U+001C–U+001F (Rust's `trim` does not): a
    /// legacy max-turns result with such a brief failed, and so does an error
    /// text of them count as none. Before, the brief counted and the result read
    /// as completed.
    #[test]
    fn r24_a_brief_of_python_whitespace_is_blank() {
        let r = read(json!({
            "subagent_status": LEGACY_MAX_TURNS_STATUS,
            "subagent_result_brief": "\u{1f} \u{1c}",
        }))
        .expect("a result");
        assert_eq!(r.status, "failed");
        assert_eq!(r.result_brief, None);
        let r = read(json!({"subagent_status": "failed", "subagent_error": "\u{1d}"}))
            .expect("a result");
        assert_eq!(r.error, None);
    }

    #[test]
    fn r24_empty_or_non_terminal_is_none() {
        assert_eq!(read(json!({})), None);
        assert_eq!(read(json!({"subagent_status": "in_progress"})), None);
        assert_eq!(read(json!({"subagent_status": "running"})), None);
        assert_eq!(read(json!({"other": 1})), None);
    }

    #[test]
    fn r24_completed_reads_brief_and_sha_only() {
        let sha = "a".repeat(64);
        let r = read(json!({
            "subagent_status": "completed", "subagent_result_brief": "done",
            "subagent_result_sha256": sha, "subagent_error": "ignored"
        }))
        .unwrap();
        assert_eq!(r.result_brief.as_deref(), Some("done"));
        assert_eq!(r.result_sha256.as_deref(), Some(sha.as_str()));
        assert_eq!(r.error, None);
        let r =
            read(json!({"subagent_status": "completed", "subagent_result_sha256": "A".repeat(64)}))
                .unwrap();
        assert_eq!(r.result_sha256, None);
    }

    #[test]
    fn r24_failure_reads_error_only_bounded() {
        let long = "e".repeat(5000);
        let r = read(json!({"subagent_status": "failed", "subagent_error": long, "subagent_result_brief": "x"}))
            .unwrap();
        assert_eq!(r.result_brief, None);
        assert_eq!(r.error.unwrap().chars().count(), 2000);
    }

    #[test]
    fn r24_legacy_max_turns_status() {
        let r = read(
            json!({"subagent_status": "max_turns_reached", "subagent_result_brief": "partial"}),
        )
        .unwrap();
        assert_eq!(
            (r.status.as_str(), r.stop_reason.as_deref()),
            ("completed", Some("turn_capped"))
        );
        let r =
            read(json!({"subagent_status": "max_turns_reached", "subagent_result_brief": "  "}))
                .unwrap();
        assert_eq!(r.status, "failed");
        let r = read(json!({
            "subagent_status": "max_turns_reached", "subagent_stop_reason": "token_capped"
        }))
        .unwrap();
        assert_eq!(r.stop_reason.as_deref(), Some("token_capped"));
        let r =
            read(json!({"subagent_status": "completed", "subagent_stop_reason": "bogus"})).unwrap();
        assert_eq!(r.stop_reason, None);
    }
}
