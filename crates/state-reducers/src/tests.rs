//! Unit tests, one per rule of kernel-spec §A (the rule number leads each
//! test name); the reference fixtures and the property laws run in `tests/it`.

use serde_json::{Value, json};

use crate::*;

fn ids(ms: &[Message]) -> Vec<&str> {
    ms.iter().filter_map(Message::id).collect()
}

fn msg(id: &str, text: &str) -> Message {
    Message::human(text).with_id(id)
}

/// A deterministic id source: `g0`, `g1`, …
fn counter() -> impl FnMut() -> String {
    let mut n = 0;
    move || {
        n += 1;
        format!("g{}", n - 1)
    }
}

// ---- R5, R3: the schema -------------------------------------------------

#[test]
fn r5_reducer_field_set_is_exact() {
    let mut fields = THREAD_STATE_REDUCER_FIELDS.to_vec();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "artifacts",
            "delegations",
            "goal",
            "messages",
            "promoted",
            "sandbox",
            "skill_context",
            "todos",
            "viewed_images"
        ]
    );
}

#[test]
fn r3_two_writes_to_a_last_value_field_in_one_step_fail() {
    let update = |t: &str| ThreadStateUpdate {
        title: Some(Some(t.to_owned())),
        ..Default::default()
    };
    let err = apply_updates(ThreadState::default(), vec![update("a"), update("b")]).unwrap_err();
    assert!(matches!(
        err,
        Error::InvalidConcurrentUpdate {
            field: "title",
            count: 2
        }
    ));
    assert_eq!(err.kind(), ErrorKind::Conflict);
    let ok = apply_updates(ThreadState::default(), vec![update("a")]).unwrap();
    assert_eq!(ok.title.as_deref(), Some("a"));
}

#[test]
fn r3_reducer_fields_fold_every_write_in_task_order() {
    let w = |a: &[&str]| ThreadStateUpdate {
        artifacts: Some(ChannelWrite::Value(Some(
            a.iter().map(|s| s.to_string()).collect(),
        ))),
        messages: Some(ChannelWrite::Value(msg(&format!("m-{}", a[0]), "x").into())),
        ..Default::default()
    };
    let s = apply_updates(ThreadState::default(), vec![w(&["b", "a"]), w(&["a", "c"])]).unwrap();
    assert_eq!(s.artifacts, ["b", "a", "c"]);
    assert_eq!(ids(&s.messages), ["m-b", "m-a"]);
}

#[test]
fn r3_untouched_fields_stay() {
    let mut state = ThreadState {
        title: Some("kept".into()),
        ..Default::default()
    };
    state.todos = Some(vec![]);
    let s = apply_updates(state.clone(), vec![ThreadStateUpdate::default()]).unwrap();
    assert_eq!(s, state);
}

/// `promoted` written `null` holds `null`, not nothing (R42): the next write goes through
/// `merge_promoted(null, new)`, which de-duplicates its names and keeps `null` for an empty
/// `{}`, where a never-written channel stores the first write as given. The state keeps the
/// `null` through JSON. Before, a `null` write emptied the field and the next write was stored
/// as given.
#[test]
fn r42_promoted_written_null_passes_the_next_write_through_the_reducer() {
    let write = |v: Value| ThreadStateUpdate {
        promoted: Some(ChannelWrite::Value(serde_json::from_value(v).unwrap())),
        ..Default::default()
    };
    let nulled = apply_updates(ThreadState::default(), vec![write(Value::Null)]).unwrap();
    assert_eq!(nulled.promoted, Some(None));
    let json = serde_json::to_value(&nulled).unwrap();
    assert_eq!(json["promoted"], Value::Null);
    assert!(json.as_object().unwrap().contains_key("promoted"));
    let read: ThreadState = serde_json::from_value(json).unwrap();
    assert_eq!(read, nulled);
    let dup = json!({"catalog_hash": "h", "names": ["a", "a"]});
    let s = apply_updates(nulled.clone(), vec![write(dup.clone())]).unwrap();
    assert_eq!(
        serde_json::to_value(s.promoted.flatten().unwrap()).unwrap(),
        json!({"catalog_hash": "h", "names": ["a"]})
    );
    let s = apply_updates(nulled, vec![write(json!({}))]).unwrap();
    assert_eq!(s.promoted, Some(None));
    // Never written: the first write is stored as given.
    let s = apply_updates(ThreadState::default(), vec![write(dup.clone())]).unwrap();
    assert_eq!(
        serde_json::to_value(s.promoted.flatten().unwrap()).unwrap(),
        dup
    );
    let missing: ThreadState = serde_json::from_value(json!({})).unwrap();
    assert_eq!(missing.promoted, None);
}

// ---- R6 sandbox ----------------------------------------------------------

#[test]
fn r6_sandbox_null_write_keeps_existing_even_null() {
    assert_eq!(merge_sandbox(None, None).unwrap(), None);
    let sb = SandboxState::new("sb-1");
    assert_eq!(
        merge_sandbox(Some(sb.clone()), None).unwrap(),
        Some(sb.clone())
    );
    assert_eq!(merge_sandbox(None, Some(sb.clone())).unwrap(), Some(sb));
}

#[test]
fn r6_sandbox_equal_ids_return_the_existing_object() {
    let empty: SandboxState = serde_json::from_value(json!({})).unwrap();
    let null: SandboxState = serde_json::from_value(json!({"sandbox_id": null})).unwrap();
    let merged = merge_sandbox(Some(null.clone()), Some(empty.clone())).unwrap();
    assert_eq!(
        serde_json::to_value(merged).unwrap(),
        json!({"sandbox_id": null})
    );
    let merged = merge_sandbox(Some(empty), Some(null)).unwrap();
    assert_eq!(serde_json::to_value(merged).unwrap(), json!({}));
}

#[test]
fn r6_sandbox_conflict_fails_closed_with_python_repr() {
    let err = merge_sandbox(
        Some(SandboxState::new("sb-1")),
        Some(SandboxState::new("sb-2")),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Conflicting sandbox state updates: 'sb-1' != 'sb-2'"
    );
    let err = merge_sandbox(
        Some(SandboxState::default()),
        Some(SandboxState::new("sb-2")),
    )
    .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Conflicting sandbox state updates: None != 'sb-2'"
    );
    assert_eq!(err.kind(), ErrorKind::Conflict);
}

// ---- R7 artifacts --------------------------------------------------------

fn strings(a: &[&str]) -> Vec<String> {
    a.iter().map(|s| s.to_string()).collect()
}

#[test]
fn r7_artifacts_dedup_except_on_the_null_path() {
    assert_eq!(merge_artifacts(None, None), Vec::<String>::new());
    assert_eq!(
        merge_artifacts(None, Some(strings(&["a", "a"]))),
        ["a", "a"]
    );
    assert_eq!(
        merge_artifacts(Some(strings(&["a", "a"])), None),
        ["a", "a"]
    );
    assert_eq!(
        merge_artifacts(Some(strings(&["a", "a"])), Some(vec![])),
        ["a"]
    );
    assert_eq!(
        merge_artifacts(Some(strings(&["b", "a"])), Some(strings(&["c", "b", "d"]))),
        ["b", "a", "c", "d"]
    );
}

// ---- R8 viewed images ----------------------------------------------------

fn image(size: u64) -> ViewedImage {
    ViewedImage {
        mime_type: "image/png".into(),
        size,
        actual_path: "/p".into(),
        extra: Default::default(),
    }
}

#[test]
fn r8_viewed_images_empty_map_clears_and_merge_keeps_order() {
    let mut a = ViewedImages::new();
    a.insert("x".into(), image(1));
    a.insert("y".into(), image(2));
    let mut b = ViewedImages::new();
    b.insert("z".into(), image(3));
    b.insert("x".into(), image(9));
    let merged = merge_viewed_images(Some(a.clone()), Some(b.clone()));
    assert_eq!(merged.keys().collect::<Vec<_>>(), ["x", "y", "z"]);
    assert_eq!(merged["x"].size, 9);
    assert!(merge_viewed_images(Some(a.clone()), Some(ViewedImages::new())).is_empty());
    assert_eq!(merge_viewed_images(Some(a.clone()), None), a);
    assert_eq!(merge_viewed_images(None, Some(b.clone())), b);
    assert!(merge_viewed_images(None, None).is_empty());
}

// ---- R9, R10 todos and goal ---------------------------------------------

#[test]
fn r9_todos_null_preserves_empty_list_clears() {
    let todo = Todo {
        content: "a".into(),
        status: "pending".into(),
        extra: Default::default(),
    };
    let existing = Some(vec![todo.clone()]);
    assert_eq!(merge_todos(existing.clone(), None), existing);
    assert_eq!(merge_todos(existing, Some(vec![])), Some(vec![]));
    assert_eq!(merge_todos(None, None), None);
}

#[test]
fn r10_goal_null_preserves_any_goal_replaces() {
    let g = |o: &str| -> GoalState {
        serde_json::from_value(json!({"objective": o, "status": "active"})).unwrap()
    };
    assert_eq!(merge_goal(Some(g("a")), None), Some(g("a")));
    assert_eq!(merge_goal(Some(g("a")), Some(g("b"))), Some(g("b")));
    assert_eq!(merge_goal(None, None), None);
}

/// R4: the goal is opaque to its reducer, so it reads back exactly as written: a key set to
/// `null`, a count that is not an integer, a goal without an objective, an unknown key.
/// Before 2026-12-01 the first two were lost or refused, and a goal without an objective
/// made the whole state unreadable.
#[test]
fn r4_goal_is_kept_exactly_as_written() {
    let written = json!({
        "objective": "ship it", "status": "active", "last_evaluation": null,
        "created_at": null, "continuation_count": 1.5, "custom": {"k": [1]}
    });
    let goal: GoalState = serde_json::from_value(written.clone()).unwrap();
    assert_eq!(serde_json::to_value(&goal).unwrap(), written);
    assert_eq!(goal.objective(), Some("ship it"));
    assert_eq!(goal.continuation_count(), None, "not an integer");
    assert_eq!(goal.last_evaluation(), None);
    let state: ThreadState = serde_json::from_value(json!({"goal": {"status": "active"}}))
        .expect("a goal without an objective is still a goal");
    let goal = state.goal.expect("set");
    assert_eq!(goal.objective(), None);
    assert_eq!(
        goal,
        GoalState(json!({"status": "active"}).as_object().unwrap().clone())
    );
    let active = GoalState::active("x");
    assert_eq!(
        (active.objective(), active.status()),
        (Some("x"), Some("active"))
    );
}

// ---- R11 promoted --------------------------------------------------------

#[test]
fn r11_promoted_scoped_by_catalog_hash() {
    let p = |h: &str, n: &[&str]| PromotedState::new(h, strings(n));
    let merge = |a: Option<PromotedState>, b: Option<PromotedState>| {
        merge_promoted(a, b).expect("a well-formed write")
    };
    let existing = Some(p("h1", &["a", "b"]));
    assert_eq!(merge(existing.clone(), None), existing);
    assert_eq!(
        merge(existing.clone(), Some(PromotedState::default())),
        existing
    );
    assert_eq!(
        merge(existing.clone(), Some(p("h1", &["b", "c", "c"]))),
        Some(p("h1", &["a", "b", "c"]))
    );
    assert_eq!(
        merge(existing, Some(p("h2", &["c", "c"]))),
        Some(p("h2", &["c"]))
    );
    let malformed: PromotedState = serde_json::from_value(json!({"names": ["x"]})).unwrap();
    assert_eq!(
        merge(Some(malformed.clone()), Some(p("h1", &["y"]))),
        Some(p("h1", &["y"]))
    );
    // A malformed existing value (no `catalog_hash` key) is a mismatch even for a write whose
    // hash is null (R11.2): its stale names go. Before, both hashes read as null and the
    // names were accumulated.
    let write: PromotedState =
        serde_json::from_value(json!({"catalog_hash": null, "names": ["y", "y"]})).unwrap();
    let merged = merge(Some(malformed.clone()), Some(write)).unwrap();
    assert_eq!(
        serde_json::to_value(&merged).unwrap(),
        json!({"catalog_hash": null, "names": ["y"]})
    );
    // A write whose hash is null is not the empty write: its hash differs, so it replaces
    // wholesale and the stale names go (R11.1 ignores only null and `{}`).
    let write: PromotedState =
        serde_json::from_value(json!({"catalog_hash": null, "names": []})).unwrap();
    let merged = merge(Some(p("h1", &["a"])), Some(write)).unwrap();
    assert_eq!(
        serde_json::to_value(&merged).unwrap(),
        json!({"catalog_hash": null, "names": []})
    );
}

/// R11 where the reference raises (it reads `new["catalog_hash"]`, `new["names"]` and, for
/// the same hash, `existing["names"]`): a write without either key or with `names: null`,
/// and a same-hash merge into a value without a list of names, fail as malformed instead
/// of emptying the promotions. Before 2026-12-01 `{"names": ["x"]}` replaced them with a
/// `null` hash and `{"catalog_hash": null}` with no names.
#[test]
fn r11_promoted_malformed_writes_fail_as_the_reference_does() {
    let existing = Some(PromotedState::new("h1", strings(&["a"])));
    for write in [
        json!({"names": ["x"]}),
        json!({"catalog_hash": null}),
        json!({"catalog_hash": "h1"}),
        json!({"catalog_hash": "h2", "names": null}),
        json!({"other": 1}),
    ] {
        let w: PromotedState = serde_json::from_value(write.clone()).unwrap();
        for base in [existing.clone(), None] {
            let err = merge_promoted(base.clone(), Some(w.clone())).unwrap_err();
            assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{write}: {err}");
            assert!(err.to_string().contains("promoted"), "{err}");
        }
    }
    for stored in [
        json!({"catalog_hash": "h1"}),
        json!({"catalog_hash": "h1", "names": null}),
    ] {
        let stored: PromotedState = serde_json::from_value(stored).unwrap();
        let err = merge_promoted(
            Some(stored.clone()),
            Some(PromotedState::new("h1", strings(&["b"]))),
        )
        .unwrap_err();
        assert_eq!(err.kind(), crate::ErrorKind::InvalidInput, "{err}");
        // Another hash replaces it wholesale, as the reference does.
        assert_eq!(
            merge_promoted(
                Some(stored),
                Some(PromotedState::new("h2", strings(&["b"])))
            )
            .unwrap(),
            Some(PromotedState::new("h2", strings(&["b"])))
        );
    }
}

// ---- R12–R14 delegations -------------------------------------------------

fn deleg(id: &str, status: &str, created: &str, run: Option<&str>) -> DelegationEntry {
    DelegationEntry {
        id: id.into(),
        description: "d".into(),
        subagent_type: "general".into(),
        status: status.into(),
        created_at: created.into(),
        run_id: run.map(str::to_owned),
        result_brief: None,
        result_sha256: None,
        result_ref: None,
        stop_reason: None,
        extra: Default::default(),
    }
}

#[test]
fn r12_terminal_statuses_are_the_subagent_contract() {
    for s in [
        "completed",
        "failed",
        "cancelled",
        "timed_out",
        "polling_timed_out",
    ] {
        assert!(is_terminal_status(s));
    }
    assert!(!is_terminal_status("in_progress"));
    assert!(!is_terminal_status("running"));
}

#[test]
fn r13_terminal_is_never_downgraded_but_may_change_terminal() {
    let existing = vec![deleg("d1", "completed", "t0", None)];
    let out = merge_delegations(
        Some(existing.clone()),
        Some(vec![deleg("d1", "in_progress", "t1", None)]),
    );
    assert_eq!(out, existing);
    let out = merge_delegations(
        Some(existing),
        Some(vec![deleg("d1", "failed", "t1", None)]),
    );
    assert_eq!(out[0].status, "failed");
}

#[test]
fn r13_created_at_and_run_id_carry_over() {
    let out = merge_delegations(
        Some(vec![deleg("d1", "in_progress", "t0", Some("r1"))]),
        Some(vec![deleg("d1", "completed", "t9", None)]),
    );
    assert_eq!(out[0].created_at, "t0");
    assert_eq!(out[0].run_id.as_deref(), Some("r1"));
    // No created_at on the previous entry: run_id is not carried either.
    let out = merge_delegations(
        Some(vec![deleg("d1", "in_progress", "", Some("r1"))]),
        Some(vec![deleg("d1", "completed", "t9", Some(""))]),
    );
    assert_eq!(out[0].created_at, "t9");
    assert_eq!(out[0].run_id.as_deref(), Some(""));
}

#[test]
fn r13_first_seen_order_dedup_and_empty_write() {
    let out = merge_delegations(
        Some(vec![
            deleg("a", "in_progress", "t", None),
            deleg("b", "in_progress", "t", None),
        ]),
        Some(vec![
            deleg("c", "in_progress", "t", None),
            deleg("a", "completed", "t", None),
        ]),
    );
    assert_eq!(
        out.iter().map(|d| d.id.as_str()).collect::<Vec<_>>(),
        ["a", "b", "c"]
    );
    assert_eq!(out[0].status, "completed");
    let existing = vec![deleg("a", "x", "t", None), deleg("a", "y", "t", None)];
    assert_eq!(
        merge_delegations(Some(existing.clone()), Some(vec![])),
        existing
    );
    assert_eq!(merge_delegations(None, None), vec![]);
}

#[test]
fn r14_ledger_keeps_the_last_fifty() {
    let new: Vec<_> = (0..60)
        .map(|i| deleg(&format!("d{i}"), "in_progress", "t", None))
        .collect();
    let out = merge_delegations(None, Some(new));
    assert_eq!(out.len(), DELEGATION_LEDGER_MAX);
    assert_eq!(out[0].id, "d10");
    assert_eq!(out[49].id, "d59");
}

// ---- R15–R17 skill context -----------------------------------------------

fn skill(raw: Value) -> Result<SkillEntry> {
    SkillEntry::from_raw(raw.as_object().unwrap())
}

#[test]
fn r16_skill_entries_are_normalised() {
    let long = "word ".repeat(200);
    let e = skill(json!({
        "name": null, "path": "/s/SKILL.md", "description": format!("  a\n\tb  {long}"),
        "loaded_at": "7", "content": "legacy body"
    }))
    .unwrap();
    assert_eq!(e.name, "");
    assert_eq!(e.loaded_at, 0);
    // The description is normalised by the merge.
    let e = merge_skill_context(None, Some(vec![e])).remove(0);
    assert_eq!(e.description.chars().count(), SKILL_DESCRIPTION_MAX);
    assert!(e.description.starts_with("a b word word"));
    assert_eq!(
        serde_json::to_value(&e)
            .unwrap()
            .as_object()
            .unwrap()
            .keys()
            .collect::<Vec<_>>(),
        ["name", "path", "description", "loaded_at"]
    );
    // `loaded_at` as the reference keeps it: integers and booleans as they are, else 0.
    for (raw, kept) in [
        (json!(true), json!(true)),
        (json!(false), json!(false)),
        (json!(u64::MAX), json!(u64::MAX)),
        (json!(-3), json!(-3)),
        (json!(1.5), json!(0)),
        (json!("7"), json!(0)),
        (json!(null), json!(0)),
    ] {
        let e = skill(json!({"path": "/s", "loaded_at": raw})).unwrap();
        assert_eq!(serde_json::to_value(e).unwrap()["loaded_at"], kept, "{raw}");
    }
    let e = skill(json!({"name": 5, "path": 12, "description": 3, "loaded_at": 4})).unwrap();
    assert_eq!(
        (
            e.name.as_str(),
            e.path.as_str(),
            e.description.as_str(),
            e.loaded_at
        ),
        ("5", "12", "", LoadedAt::Int(4))
    );
    assert_eq!(
        skill(json!({"name": "x"})).unwrap_err(),
        Error::MissingSkillPath
    );
}

/// R16 normalises an entry once per merge call: collapsing, then cutting to 500 characters,
/// can end in a space, which a second normalisation (at reading and again at merging) would
/// drop. The reference keeps it.
#[test]
fn r16_a_description_is_normalised_once_per_merge() {
    let raw = format!("{} b", "a".repeat(499));
    let written = skill(json!({"path": "p", "description": raw})).unwrap();
    let out = merge_skill_context(None, Some(vec![written]));
    assert_eq!(out[0].description, format!("{} ", "a".repeat(499)));
    // The next merge normalises the stored entry again, as the reference does.
    let again = merge_skill_context(Some(out), None);
    assert_eq!(again[0].description, "a".repeat(499));
}

#[test]
fn r17_recency_refresh_and_cap() {
    let s = |p: &str, d: &str| SkillEntry::new("n", p, d, 1);
    let out = merge_skill_context(
        Some(vec![s("a", "1"), s("b", "1"), s("c", "1")]),
        Some(vec![s("a", "2"), s("d", "2")]),
    );
    assert_eq!(
        out.iter().map(|e| e.path.as_str()).collect::<Vec<_>>(),
        ["b", "c", "a", "d"]
    );
    assert_eq!(out[2].description, "2");
    let many: Vec<_> = (0..10).map(|i| s(&format!("p{i}"), "")).collect();
    let out = merge_skill_context(None, Some(many));
    assert_eq!(out.len(), SKILL_CONTEXT_MAX);
    assert_eq!(out[0].path, "p2");
}

#[test]
fn r17_null_write_returns_normalised_existing_without_folding_duplicates() {
    let dup = vec![
        SkillEntry::new("a", "p", " x  y ", 1),
        SkillEntry::new("b", "p", "", 2),
    ];
    let out = merge_skill_context(Some(dup.clone()), None);
    assert_eq!(out.len(), 2);
    assert_eq!(out[0].description, "x y");
    // Any real merge folds the duplicate path, keeping the first position.
    let out = merge_skill_context(Some(dup), Some(vec![SkillEntry::new("c", "q", "", 3)]));
    assert_eq!(
        out.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
        ["b", "c"]
    );
}

// ---- R18 coercion ---------------------------------------------------------

#[test]
fn r18_role_aliases_pairs_strings_and_chunks() {
    let cases = [
        (json!({"role": "user", "content": "a"}), MessageType::Human),
        (
            json!({"role": "assistant", "content": "a"}),
            MessageType::Ai,
        ),
        (
            json!({"type": "AIMessageChunk", "content": "a", "tool_call_chunks": []}),
            MessageType::Ai,
        ),
        (
            json!({"role": "system", "content": "a"}),
            MessageType::System,
        ),
        (
            json!({"role": "tool", "content": "a", "tool_call_id": "c"}),
            MessageType::Tool,
        ),
        (
            json!({"role": "remove", "content": "", "id": "x"}),
            MessageType::Remove,
        ),
        (json!(["user", "hi"]), MessageType::Human),
        (json!(["ai", "hi"]), MessageType::Ai),
        (json!("bare"), MessageType::Human),
    ];
    for (value, kind) in cases {
        let m = Message::from_json(value.clone()).unwrap();
        assert_eq!(m.kind, kind, "{value}");
        assert!(!m.extra().contains_key("tool_call_chunks"));
    }
    let dev = Message::from_json(json!({"role": "developer", "content": "x"})).unwrap();
    assert_eq!(dev.kind, MessageType::System);
    assert_eq!(dev.additional_kwargs()["__openai_role__"], "developer");
}

#[test]
fn r18_a_non_list_write_is_a_one_element_list() {
    let w = MessageWrite::from_json(json!({"type": "human", "content": "x"})).unwrap();
    assert!(matches!(w, MessageWrite::Messages(ref v) if v.len() == 1));
    let w = MessageWrite::from_json(json!(["a", "b"])).unwrap();
    assert!(matches!(w, MessageWrite::Messages(ref v) if v.len() == 2));
    assert_eq!(
        MessageWrite::from_json(Value::Null).unwrap(),
        MessageWrite::Null
    );
}

#[test]
fn r18_bad_message_likes_are_typed_errors() {
    for bad in [
        json!(5),
        json!({"type": "martian", "content": "x"}),
        json!({"type": "human"}),
        json!({"content": "x"}),
        json!({"type": "human", "content": 5}),
        json!({"type": "tool", "content": "x"}),
        json!({"type": "remove", "content": ""}),
        json!({"type": "ai", "content": "", "tool_calls": [{"args": {}}]}),
        json!({"type": "human", "content": "x", "additional_kwargs": []}),
    ] {
        let err = Message::from_json(bad.clone()).unwrap_err();
        assert!(
            matches!(err, Error::MalformedMessage { .. }),
            "{bad}: {err}"
        );
        assert_eq!(err.kind(), ErrorKind::InvalidInput);
    }
    let err = Message::from_json(json!({"type": "martian", "content": "x"})).unwrap_err();
    assert!(
        err.to_string()
            .contains("Unexpected message type: 'martian'")
    );
}

#[test]
fn r18_openai_tool_calls_are_converted() {
    let m = Message::from_json(json!({
        "role": "assistant", "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{\"a\": 1}"}},
            {"id": "c2", "type": "function", "function": {"name": "g", "arguments": "{bad"}}
        ]
    }))
    .unwrap();
    assert_eq!(m.tool_calls().len(), 1);
    assert_eq!(m.tool_calls()[0].args["a"], 1);
    assert_eq!(m.invalid_tool_calls()[0].args.as_deref(), Some("{bad"));
}

/// Tool call arguments parse as the reference parses them (`json.loads(…, strict=False)`):
/// raw control characters inside strings are taken as they are, in an OpenAI-shaped call and
/// in the provider's raw calls alike, while one outside a string, or after a backslash, still
/// makes the call invalid. Before 2026-12-02 a literal line break in an argument string made
/// the call invalid, and the tool never ran.
#[test]
fn r18_r23_argument_strings_may_hold_raw_control_characters() {
    let lenient = "{\"code\": \"a\nb\tc\"}";
    let broken = ["{\"code\": \"a\\\nb\"}", "{\u{1}\"code\": 1}"];
    let openai = |arguments: &str| {
        Message::from_json(json!({
            "role": "assistant", "content": "",
            "tool_calls": [{"id": "c1", "type": "function",
                            "function": {"name": "run", "arguments": arguments}}]
        }))
        .unwrap()
    };
    let raw = |arguments: &str| {
        Message::from_json(json!({
            "type": "ai", "content": "", "tool_calls": [],
            "additional_kwargs": {"tool_calls": [{"id": "c1", "type": "function",
                "function": {"name": "run", "arguments": arguments}}]}
        }))
        .unwrap()
    };
    for m in [openai(lenient), raw(lenient)] {
        assert_eq!(m.tool_calls().len(), 1, "{m:?}");
        assert_eq!(m.tool_calls()[0].args["code"], json!("a\nb\tc"));
        assert!(m.invalid_tool_calls().is_empty());
    }
    for arguments in broken {
        for m in [openai(arguments), raw(arguments)] {
            assert!(m.tool_calls().is_empty(), "{arguments:?}: {m:?}");
            assert_eq!(m.invalid_tool_calls().len(), 1, "{arguments:?}");
        }
    }
}

/// An AI message given no parsed calls takes them from the provider's raw calls in
/// `additional_kwargs.tool_calls`, as LangChain's AI message does
/// (`_backwards_compat_tool_calls` with `default_tool_parser`): arguments that are not JSON
/// make an invalid call without an error text, an entry without `function` is skipped, an
/// entry the reference's parse stops on (a `function` without a name) leaves every call out,
/// and a value the message model refuses fails the message. Parsed calls given beside raw
/// ones win. The read path (serde) parses alike, and the parse is stable over a round trip.
/// Before 2026-12-02 the raw calls were never parsed.
#[test]
fn r23_raw_provider_calls_are_parsed_when_no_parsed_ones_are_given() {
    let raw = |calls: Value| {
        json!({"type": "ai", "content": "", "tool_calls": [],
               "additional_kwargs": {"tool_calls": calls}})
    };
    let call = |id: &str, name: &str, args: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": args}});
    let m = Message::from_json(raw(json!([
        call("c1", "task", "{\"description\": \"x\"}"),
        {"id": "skip", "type": "other"},
        call("c2", "write_file", "{bad"),
        call("c3", "empty", "null"),
    ])))
    .unwrap();
    let calls: Vec<(Option<&str>, &str, Value)> = m
        .tool_calls()
        .iter()
        .map(|c| {
            (
                c.id.as_deref(),
                c.name.as_str(),
                Value::Object(c.args.clone()),
            )
        })
        .collect();
    assert_eq!(
        calls,
        [
            (Some("c1"), "task", json!({"description": "x"})),
            (Some("c3"), "empty", json!({})),
        ]
    );
    let invalid = &m.invalid_tool_calls()[0];
    assert_eq!(
        (
            invalid.id.as_deref(),
            invalid.name.as_deref(),
            invalid.args.as_deref(),
            invalid.error.as_deref()
        ),
        (Some("c2"), Some("write_file"), Some("{bad"), None)
    );
    assert!(m.additional_kwargs().contains_key("tool_calls"), "kept raw");
    // The read path, and a round trip.
    let read: Message = serde_json::from_value(raw(json!([call("c1", "f", "{}")]))).unwrap();
    assert_eq!(read.tool_calls()[0].name, "f");
    let again = Message::from_json(read.to_json()).unwrap();
    assert_eq!(again, read);
    // Parsed calls given beside raw ones win.
    let mut given = raw(json!([call("raw", "f", "{}")]));
    given["tool_calls"] = json!([{"id": "p", "name": "g", "args": {}}]);
    let m = Message::from_json(given).unwrap();
    assert_eq!(m.tool_calls().len(), 1);
    assert_eq!(m.tool_calls()[0].id.as_deref(), Some("p"));
    // A `function` without a name stops the reference's parse: no call at all.
    let m = Message::from_json(raw(json!([
        call("c1", "f", "{}"),
        {"id": "c2", "function": {"arguments": "{}"}},
    ])))
    .unwrap();
    assert!(m.tool_calls().is_empty() && m.invalid_tool_calls().is_empty());
    // Not a list: nothing parsed.
    let m = Message::from_json(raw(json!({"function": "x"}))).unwrap();
    assert!(m.tool_calls().is_empty());
    // Arguments that are JSON but no object fail the message, as the reference's validation does.
    let err = Message::from_json(raw(json!([call("c1", "f", "[1]")]))).unwrap_err();
    assert!(err.to_string().contains("arguments"), "{err}");
}

// ---- R19 id assignment -----------------------------------------------------

#[test]
fn r19_ids_go_to_state_first_then_each_write_in_order() {
    let state = vec![Message::human("s0"), msg("k", "kept"), Message::human("s1")];
    let writes = vec![
        MessageWrite::from(vec![Message::ai("w0"), Message::ai("w1")]),
        MessageWrite::from(Message::ai("w2")),
    ];
    let out = merge_message_writes_with(state, writes, &mut counter()).unwrap();
    assert_eq!(ids(&out), ["g0", "k", "g1", "g2", "g3", "g4"]);
}

#[test]
fn r19_empty_batch_assigns_no_ids() {
    let state = vec![Message::human("s0")];
    let out = merge_message_writes_with(state.clone(), [], &mut counter()).unwrap();
    assert_eq!(out, state);
    // An empty *write* is not an empty batch.
    let out =
        merge_message_writes_with(state, [MessageWrite::from(vec![])], &mut counter()).unwrap();
    assert_eq!(ids(&out), ["g0"]);
}

#[test]
fn r19_ids_before_a_remove_all_are_still_allocated() {
    let writes = [MessageWrite::from(vec![
        Message::ai("lost"),
        Message::remove_all(),
        Message::ai("kept"),
    ])];
    let out = merge_message_writes_with(vec![Message::human("s")], writes, &mut counter()).unwrap();
    assert_eq!(ids(&out), ["g2"]);
}

// ---- R20 merge rules -------------------------------------------------------

#[test]
fn r20_replace_touches_the_latest_position_only() {
    let state = vec![msg("x", "first"), msg("y", "y"), msg("x", "second")];
    let out = merge_message_writes(&state, &[msg("x", "new").into()]).unwrap();
    assert_eq!(
        out.iter().map(|m| m.content.text()).collect::<Vec<_>>(),
        ["first", "y", "new"]
    );
}

#[test]
fn r20_removal_takes_every_position_of_an_id() {
    let state = vec![msg("x", "first"), msg("y", "y"), msg("x", "second")];
    let out = merge_message_writes(&state, &[Message::remove("x").into()]).unwrap();
    assert_eq!(ids(&out), ["y"]);
}

#[test]
fn r20_order_within_and_across_writes() {
    let state = vec![msg("a", "a"), msg("x", "old"), msg("b", "b")];
    // [Remove(x), Msg(x)] in one write: in-place replacement.
    let w = MessageWrite::from(vec![Message::remove("x"), msg("x", "new")]);
    let out = merge_message_writes(&state, &[w]).unwrap();
    assert_eq!(ids(&out), ["a", "x", "b"]);
    assert_eq!(out[1].content.text(), "new");
    // [Msg(x), Remove(x)] in one write: deletion.
    let w = MessageWrite::from(vec![msg("x", "new"), Message::remove("x")]);
    assert_eq!(
        ids(&merge_message_writes(&state, &[w]).unwrap()),
        ["a", "b"]
    );
    // [Remove(x)] then [Msg(x)]: delete, then append at the end.
    let ws = [Message::remove("x").into(), msg("x", "new").into()];
    assert_eq!(
        ids(&merge_message_writes(&state, &ws).unwrap()),
        ["a", "b", "x"]
    );
    // A message appended earlier in the same write can be removed in it.
    let w = MessageWrite::from(vec![msg("n", "n"), Message::remove("n")]);
    assert_eq!(
        ids(&merge_message_writes(&state, &[w]).unwrap()),
        ["a", "x", "b"]
    );
}

#[test]
fn r20_remove_all_keeps_items_after_the_last_sentinel_verbatim() {
    let state = vec![msg("a", "a")];
    let w = MessageWrite::from(vec![
        Message::remove("unknown"),
        Message::remove_all(),
        msg("b", "1"),
        Message::remove_all(),
        msg("c", "c"),
        msg("c", "dup"),
        Message::remove("zzz"),
    ]);
    let out = merge_message_writes(&state, &[w]).unwrap();
    assert_eq!(ids(&out), ["c", "c", "zzz"]);
    assert!(out[2].is_remove());
    // The list after a remove-all is an ordinary list for later writes.
    let out = merge_message_writes(&out, &[Message::remove("c").into()]).unwrap();
    assert_eq!(ids(&out), ["zzz"]);
}

#[test]
fn r20_deleting_a_missing_id_fails_closed() {
    let state = vec![msg("a", "a")];
    let err = merge_message_writes(&state, &[Message::remove("b").into()]).unwrap_err();
    assert_eq!(err, Error::MissingMessageId { id: "b".into() });
    assert_eq!(
        err.to_string(),
        "Attempting to delete a message with an ID that doesn't exist ('b')"
    );
    assert_eq!(err.kind(), ErrorKind::NotFound);
}

// ---- R21 null writes -------------------------------------------------------

#[test]
fn r21_null_write_names_the_side_by_emptiness() {
    let err = merge_message_writes(&[msg("a", "a")], &[MessageWrite::Null]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Must specify non-null arguments for both 'left' and 'right'. Only received: 'left'."
    );
    let err = merge_message_writes(&[], &[MessageWrite::Null]).unwrap_err();
    assert_eq!(err, Error::NullWrite { side: Side::Right });
    // After the accumulated list emptied, the side is `right` again.
    let ws = [Message::remove("a").into(), MessageWrite::Null];
    let err = merge_message_writes(&[msg("a", "a")], &ws).unwrap_err();
    assert_eq!(err, Error::NullWrite { side: Side::Right });
    let err = add_messages(vec![msg("a", "a")], MessageWrite::Null).unwrap_err();
    assert_eq!(err, Error::NullWrite { side: Side::Left });
}

// ---- R23 message model -----------------------------------------------------

#[test]
fn r23_unknown_keys_and_role_fields_survive_a_round_trip() {
    let dict = json!({
        "type": "human", "content": [{"type": "text", "text": "hi"}, "raw"], "id": "h",
        "name": null, "additional_kwargs": {"hide_from_ui": true}, "response_metadata": {},
        "custom_key": {"nested": [1, 2]}
    });
    let m = Message::from_json(dict.clone()).unwrap();
    assert_eq!(m.content.text(), "hiraw");
    assert_eq!(m.to_json(), dict);
    // A role-specific field set on another role is serialised, not dropped.
    let mut h = Message::human("x").with_id("h");
    h.set_tool_call_id(Some("c".into()));
    let back = Message::from_json(h.to_json()).unwrap();
    assert_eq!(back.extra()["tool_call_id"], "c");
}

#[test]
fn r23_tool_message_defaults() {
    let t = Message::tool("r", "c1").with_id("t");
    let v = t.to_json();
    assert_eq!(v["status"], "success");
    assert_eq!(v["artifact"], Value::Null);
    assert_eq!(v["tool_call_id"], "c1");
}

// ---- R25 head/tail ---------------------------------------------------------

#[test]
fn r25_head_tail_bound() {
    assert_eq!(bound_head_tail("short", 10), "short");
    assert_eq!(bound_head_tail("abcdef", 0), "");
    assert_eq!(bound_head_tail("abcdef", -3), "");
    assert_eq!(bound_head_tail("abcdefgh", 5), "abcde");
    // c = 7: head 4, tail -2 → first 7 characters.
    assert_eq!(bound_head_tail("abcdefghij", 7), "abcdefg");
    let text: String = ('a'..='z').collect();
    let out = bound_head_tail(&text, 12);
    // head = 8, tail = 12 - 8 - 5 = -1 → first 12.
    assert_eq!(out, "abcdefghijkl");
    let out = bound_head_tail(&text, 20);
    // head = 13, tail = 2.
    assert_eq!(out, "abcdefghijklm\n...\nyz");
    assert_eq!(out.chars().count(), 20);
    let uni = "ü".repeat(40);
    assert_eq!(bound_head_tail(&uni, 30).chars().count(), 30);
}

// ---- R42 Overwrite ---------------------------------------------------------

fn concat(a: Vec<i32>, b: Vec<i32>) -> Result<Vec<i32>> {
    Ok([a, b].concat())
}

#[test]
fn r42_overwrite_into_an_empty_channel_stores_the_unwrapped_value() {
    let (v, changed) =
        fold_reducer_writes(None, [ChannelWrite::Overwrite(vec![1])], concat).unwrap();
    assert_eq!((v, changed), (Some(vec![1]), true));
}

#[test]
fn r42_later_plain_writes_are_ignored_and_a_second_overwrite_fails() {
    let writes = [
        ChannelWrite::Value(vec![1]),
        ChannelWrite::Overwrite(vec![7]),
        ChannelWrite::Value(vec![8]),
    ];
    let (v, _) = fold_reducer_writes(Some(vec![0]), writes, concat).unwrap();
    assert_eq!(v, Some(vec![7]));
    let writes = [
        ChannelWrite::Overwrite(vec![1]),
        ChannelWrite::Overwrite(vec![2]),
    ];
    let err = fold_reducer_writes(Some(vec![0]), writes, concat).unwrap_err();
    assert_eq!(
        err.to_string(),
        "Can receive only one Overwrite value per super-step."
    );
}

#[test]
fn r42_plain_first_write_seeds_then_reducer_applies() {
    let writes = [ChannelWrite::Value(vec![1]), ChannelWrite::Value(vec![2])];
    let (v, _) = fold_reducer_writes(None, writes, concat).unwrap();
    assert_eq!(v, Some(vec![1, 2]));
    let (v, changed) = fold_reducer_writes(Some(vec![5]), Vec::new(), concat).unwrap();
    assert_eq!((v, changed), (Some(vec![5]), false));
}

#[test]
fn r42_overwrite_markers_in_json() {
    assert_eq!(
        overwrite_marker(&json!({"__overwrite__": [1]})),
        Some(&json!([1]))
    );
    assert_eq!(
        overwrite_marker(&json!({"type": "__overwrite__", "value": 2})),
        Some(&json!(2))
    );
    assert_eq!(overwrite_marker(&json!({"__overwrite__": 1, "x": 2})), None);
    assert_eq!(overwrite_marker(&json!([1])), None);
}

#[test]
fn r42_messages_overwrite_replaces_the_list_verbatim() {
    let state = ThreadState {
        messages: vec![msg("a", "a")],
        ..Default::default()
    };
    let updates = vec![
        ThreadStateUpdate {
            messages: Some(ChannelWrite::Overwrite(
                vec![Message::human("no id")].into(),
            )),
            ..Default::default()
        },
        ThreadStateUpdate {
            messages: Some(ChannelWrite::Value(msg("b", "ignored").into())),
            ..Default::default()
        },
    ];
    let s = apply_updates(state, updates).unwrap();
    assert_eq!(s.messages.len(), 1);
    assert_eq!(s.messages[0].id, None);
}

#[test]
fn r23_streamed_serialisation_equals_the_dict_form() {
    let mut m = Message::ai("x").with_id("a");
    m.extra_mut().insert("type".into(), json!("bogus"));
    m.extra_mut().insert("custom".into(), json!([1]));
    m.tool_calls_mut()
        .push(ToolCall::new("f", serde_json::Map::new(), "c1"));
    let streamed = serde_json::to_value(&m).unwrap();
    assert_eq!(streamed, m.to_json());
    assert_eq!(streamed["type"], "ai");
    assert_eq!(streamed["custom"], json!([1]));
    let text = serde_json::to_string(&m).unwrap();
    assert_eq!(
        serde_json::from_str::<Message>(&text).unwrap().tool_calls(),
        m.tool_calls()
    );
}

#[test]
fn message_stays_small() {
    // Kept small on purpose: the reducers move messages.
    assert!(std::mem::size_of::<Message>() <= 128);
}

#[test]
fn r23_chat_messages_round_trip_with_and_without_a_role() {
    let m =
        Message::from_json(json!({"type": "chat", "role": "narrator", "content": "x", "id": "c"}))
            .unwrap();
    assert_eq!((m.kind, m.role()), (MessageType::Chat, Some("narrator")));
    assert_eq!(Message::from_json(m.to_json()).unwrap(), m);
    let bare = Message::new(MessageType::Chat, "y");
    assert_eq!(Message::from_json(bare.to_json()).unwrap(), bare);
    // Without `type`, `role` is the message type (LangChain's precedence).
    let err = Message::from_json(json!({"role": "narrator", "content": "x"})).unwrap_err();
    assert!(
        err.to_string()
            .contains("Unexpected message type: 'narrator'")
    );
    let err =
        Message::from_json(json!({"role": "user", "type": "ai", "content": "x"})).unwrap_err();
    assert!(matches!(err, Error::MalformedMessage { .. }));
}

#[test]
fn r18_streaming_deserialiser_agrees_with_the_value_path() {
    let cases = [
        r#"{"type":"human","content":"hi","id":"h","extra_key":[1,{"a":null}]}"#,
        r#"{"role":"assistant","content":[{"type":"text","text":"x"}],"tool_calls":[{"id":"c","type":"function","function":{"name":"f","arguments":"{}"}}]}"#,
        r#"{"type":"tool","content":"r","tool_call_id":7,"status":"error","artifact":{"a":1}}"#,
        r#"{"type":"human","content":"x","tool_call_id":"on a human"}"#,
        r#"{"type":"AIMessageChunk","content":"","tool_call_chunks":[],"usage_metadata":{"input_tokens":1}}"#,
        r#""bare string""#,
        r#"["user","pair"]"#,
        r#"{"type":"remove","content":"","id":"x"}"#,
        r#"{"type":"human","content":"caf\u00e9 \"quoted\"","id":"esc\u0041"}"#,
        r#"{"type":"martian","content":"x"}"#,
        r#"{"type":"tool","content":"x"}"#,
        r#"{"content":"x"}"#,
        r#"5"#,
        r#"null"#,
    ];
    for case in cases {
        let streamed = serde_json::from_str::<Message>(case);
        let via_value = Message::from_json(serde_json::from_str::<Value>(case).unwrap());
        match (&streamed, &via_value) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{case}"),
            (Err(a), Err(b)) => assert!(
                a.to_string().starts_with(&b.to_string()),
                "{case}: {a} vs {b}"
            ),
            _ => panic!("{case}: {streamed:?} vs {via_value:?}"),
        }
    }
}

#[test]
fn floats_in_unknown_keys_survive_storage_exactly() {
    // Regression from fuzzing: serde_json's default float parser is not
    // correctly rounded, so a stored message could come back different.
    let text = r#"{"type":"human","content":"x","big":107777777777777777777777777777700}"#;
    let m: Message = serde_json::from_str(text).unwrap();
    let again: Message = serde_json::from_slice(&serde_json::to_vec(&m).unwrap()).unwrap();
    assert_eq!(again, m);
}

/// A state with `null` list fields (the reference's channels hold `None` after an
/// `Overwrite(None)`, R7, R8, R13, R17) reads, with those fields empty.
#[test]
fn null_list_fields_read_as_empty() {
    let st: ThreadState = serde_json::from_value(json!({
        "artifacts": null, "viewed_images": null, "delegations": null, "skill_context": null,
        "title": "t"
    }))
    .unwrap();
    assert!(st.artifacts.is_empty() && st.viewed_images.is_empty());
    assert!(st.delegations.is_empty() && st.skill_context.is_empty());
    assert_eq!(st.title.as_deref(), Some("t"));
}
