//! Ordering: anchors, extras, semantic placement and constraints
//! (kernel-spec R51–R58, R124, R125).

use std::sync::Arc;

use antler_middleware::{
    Anchors, Chain, ChainBuilder, Error, Middleware, MiddlewareId, MiddlewareKind, NodeHooks,
    OrderingConstraint, PlacementRule, SequenceConstraint, kinds,
};
use expect_test::{Expect, expect};
use proptest::prelude::*;

#[derive(Clone)]
struct Mw {
    kind: MiddlewareKind,
    anchors: Anchors,
    families: Vec<MiddlewareKind>,
    label: Option<&'static str>,
}

impl Middleware for Mw {
    fn kind(&self) -> MiddlewareKind {
        self.kind.clone()
    }
    fn id(&self) -> MiddlewareId {
        match self.label {
            Some(l) => MiddlewareId::instance(self.kind.clone(), l),
            None => MiddlewareId::of(self.kind.clone()),
        }
    }
    fn families(&self) -> Vec<MiddlewareKind> {
        self.families.clone()
    }
    fn anchors(&self) -> Anchors {
        self.anchors.clone()
    }
    fn node_hooks(&self) -> NodeHooks {
        NodeHooks::NONE
    }
}

fn k(name: &'static str) -> MiddlewareKind {
    MiddlewareKind::new(name)
}

fn mw(name: &'static str) -> Arc<dyn Middleware> {
    Arc::new(Mw {
        kind: k(name),
        anchors: Anchors::NONE,
        families: vec![],
        label: None,
    })
}

fn next(name: &'static str, anchor: &'static str) -> Arc<dyn Middleware> {
    Arc::new(Mw {
        kind: k(name),
        anchors: Anchors::next(k(anchor)),
        families: vec![],
        label: None,
    })
}

/// The instance `label` of kind `name`.
fn labelled(name: &'static str, label: &'static str) -> Arc<dyn Middleware> {
    Arc::new(Mw {
        kind: k(name),
        anchors: Anchors::NONE,
        families: vec![],
        label: Some(label),
    })
}

/// `name` declaring both anchors (`@Next(A)`, `@Prev(B)`): an R53 error.
fn both_anchors(name: &'static str) -> Arc<dyn Middleware> {
    Arc::new(Mw {
        kind: k(name),
        anchors: Anchors {
            next: Some(k("A")),
            prev: Some(k("B")),
        },
        families: vec![],
        label: None,
    })
}

fn prev(name: &'static str, anchor: &'static str) -> Arc<dyn Middleware> {
    Arc::new(Mw {
        kind: k(name),
        anchors: Anchors::prev(k(anchor)),
        families: vec![],
        label: None,
    })
}

/// The SDK chain with all features on (R60).
fn sdk_chain() -> ChainBuilder {
    let mut b = ChainBuilder::new();
    for name in [
        "ThreadDataMiddleware",
        "UploadsMiddleware",
        "SandboxMiddleware",
        "DanglingToolCallMiddleware",
        "ToolErrorHandlingMiddleware",
        "TitleMiddleware",
        "SubagentLimitMiddleware",
        "LoopDetectionMiddleware",
        "ClarificationMiddleware",
    ] {
        b.push(mw(name));
    }
    b
}

fn order(chain: &Chain) -> Vec<String> {
    chain.ids().iter().map(ToString::to_string).collect()
}

fn check(extras: Vec<Arc<dyn Middleware>>, expect: Expect) {
    let mut b = sdk_chain();
    let actual = match b.insert_extras(extras) {
        Ok(_) => format!("{:?}", b.build().expect("no constraints")),
        Err(e) => format!("error: {e}"),
    };
    expect.assert_eq(&actual);
}

#[test]
fn r54_unanchored_extras_go_before_clarification_in_order() {
    check(
        vec![mw("A"), mw("B")],
        expect![[r#"
            Chain [
               0 ThreadDataMiddleware
               1 UploadsMiddleware
               2 SandboxMiddleware
               3 DanglingToolCallMiddleware
               4 ToolErrorHandlingMiddleware
               5 TitleMiddleware
               6 SubagentLimitMiddleware
               7 LoopDetectionMiddleware
               8 A
               9 B
              10 ClarificationMiddleware
            ]"#]],
    );
}

#[test]
fn r55_anchored_extras_sit_next_to_the_first_match() {
    check(
        vec![
            next("AfterSandbox", "SandboxMiddleware"),
            prev("BeforeTitle", "TitleMiddleware"),
        ],
        expect![[r#"
            Chain [
               0 ThreadDataMiddleware
               1 UploadsMiddleware
               2 SandboxMiddleware
               3 AfterSandbox
               4 DanglingToolCallMiddleware
               5 ToolErrorHandlingMiddleware
               6 BeforeTitle
               7 TitleMiddleware
               8 SubagentLimitMiddleware
               9 LoopDetectionMiddleware
              10 ClarificationMiddleware
            ]"#]],
    );
}

#[test]
fn r55_extras_may_anchor_to_each_other_in_any_order() {
    // C anchors to B, which anchors to A, which anchors to the chain; given backwards.
    check(
        vec![next("C", "B"), next("B", "A"), next("A", "TitleMiddleware")],
        expect![[r#"
            Chain [
               0 ThreadDataMiddleware
               1 UploadsMiddleware
               2 SandboxMiddleware
               3 DanglingToolCallMiddleware
               4 ToolErrorHandlingMiddleware
               5 TitleMiddleware
               6 A
               7 B
               8 C
               9 SubagentLimitMiddleware
              10 LoopDetectionMiddleware
              11 ClarificationMiddleware
            ]"#]],
    );
}

#[test]
fn r55_anchors_match_by_type_family() {
    let base = k("GuardrailBase");
    let mut b = ChainBuilder::new();
    b.push(mw("X"))
        .push(Arc::new(Mw {
            kind: k("FirstGuard"),
            anchors: Anchors::NONE,
            families: vec![base.clone()],
            label: None,
        }))
        .push(Arc::new(Mw {
            kind: k("SecondGuard"),
            anchors: Anchors::NONE,
            families: vec![base],
            label: None,
        }))
        .push(mw("ClarificationMiddleware"));
    b.insert_extras(vec![next("AfterGuard", "GuardrailBase")])
        .unwrap();
    assert_eq!(
        order(&b.build().unwrap()),
        [
            "X",
            "FirstGuard",
            "AfterGuard",
            "SecondGuard",
            "ClarificationMiddleware"
        ]
    );
}

#[test]
fn r56_prev_clarification_lands_between_unanchored_extras_and_clarification() {
    let mut b = sdk_chain();
    b.insert_extras(vec![prev("Last", "ClarificationMiddleware"), mw("U")])
        .unwrap();
    let o = order(&b.build().unwrap());
    assert_eq!(&o[o.len() - 3..], ["U", "Last", "ClarificationMiddleware"]);
}

#[test]
fn r58_clarification_is_restored_to_last() {
    let mut b = sdk_chain();
    b.insert_extras(vec![next("AfterClar", "ClarificationMiddleware")])
        .unwrap();
    let o = order(&b.build().unwrap());
    assert_eq!(&o[o.len() - 2..], ["AfterClar", "ClarificationMiddleware"]);
}

#[test]
fn r53_both_anchors_is_an_error() {
    let both = both_anchors("Both");
    check(
        vec![both],
        expect!["error: Both cannot have both @Next and @Prev"],
    );
}

#[test]
fn r53_duplicate_anchor_is_an_error() {
    check(
        vec![next("X", "TitleMiddleware"), next("Y", "TitleMiddleware")],
        expect!["error: Conflict: Y and X both @Next(TitleMiddleware)"],
    );
    check(
        vec![prev("X", "TitleMiddleware"), prev("Y", "TitleMiddleware")],
        expect!["error: Conflict: Y and X both @Prev(TitleMiddleware)"],
    );
}

#[test]
fn r53_opposite_directions_is_an_error() {
    check(
        vec![next("X", "TitleMiddleware"), prev("Y", "TitleMiddleware")],
        expect![
            "error: Conflict: Y @Prev(TitleMiddleware) and X @Next(TitleMiddleware) — use cross-anchoring between extras instead"
        ],
    );
}

#[test]
fn r55_circular_dependency_is_an_error() {
    check(
        vec![next("X", "Y"), next("Y", "X")],
        expect!["error: Circular dependency among extra middlewares: X, Y"],
    );
    // Only the classes in the cycle: Z waits on a missing anchor, not on X or Y.
    check(
        vec![
            next("X", "Y"),
            next("Y", "X"),
            next("Z", "MemoryMiddleware"),
        ],
        expect!["error: Circular dependency among extra middlewares: X, Y"],
    );
}

#[test]
fn r57_unresolvable_anchor_is_an_error() {
    check(
        vec![next("X", "MemoryMiddleware")],
        expect![
            "error: Cannot resolve positions for X — anchors MemoryMiddleware not found in chain"
        ],
    );
    // An error leaves the builder unchanged.
    let mut b = sdk_chain();
    let before = order(&ChainBuilder::build(sdk_chain()).unwrap());
    assert!(
        b.insert_extras(vec![mw("Fine"), next("X", "Nope")])
            .is_err()
    );
    assert_eq!(order(&b.build().unwrap()), before);
}

#[test]
fn errors_have_the_order_kind() {
    let mut b = sdk_chain();
    let err = b.insert_extras(vec![next("X", "Nope")]).unwrap_err();
    assert_eq!(err.kind(), antler_middleware::ErrorKind::Order);
}

/// A middleware whose id is already in the chain is refused, however it is added: replacing
/// the earlier one would drop its configuration without a word (the reference's agent refuses
/// duplicate middlewares too). Two instances of one kind take instance labels. Before
/// 2026-12-01 the new entry replaced the old one (a push moved it to the end).
#[test]
fn an_id_already_in_the_chain_is_refused_and_instances_are_distinct() {
    let refused = |e: antler_middleware::Error| {
        assert_eq!(e.kind(), antler_middleware::ErrorKind::Order);
        assert!(
            e.to_string()
                .starts_with("middleware A is already in the chain"),
            "{e}"
        );
    };
    let mut b = ChainBuilder::new();
    b.push(mw("A")).push(mw("B")).push(mw("A"));
    refused(b.build().unwrap_err());
    let mut b = ChainBuilder::new();
    b.push(mw("A")).push(mw("B"));
    refused(b.insert_before(&k("B"), mw("A")).err().unwrap());
    refused(b.insert_after(&k("B"), mw("A")).err().unwrap());
    refused(b.insert_extras(vec![mw("A")]).err().unwrap());
    let placed = b.place(mw("A"), &[]);
    assert_eq!(placed.index, 0, "the diagnostic names where A is");
    refused(b.build().unwrap_err());

    let mut b = ChainBuilder::new();
    b.push(mw("A")).push(mw("B"));
    let guard = |l| labelled("Guardrail", l);
    b.push(guard("authz")).push(guard("explicit"));
    b.insert_before(&k("B"), mw("C")).unwrap();
    b.insert_after(&k("B"), mw("D")).unwrap();
    expect![[r#"
        Chain [
           0 A
           1 C
           2 B
           3 D
           4 Guardrail#authz
           5 Guardrail#explicit
        ]"#]]
    .assert_eq(&format!("{:?}", b.build().unwrap()));
    let mut b = ChainBuilder::new();
    let err = b.insert_after(&k("Missing"), mw("X")).err().unwrap();
    assert_eq!(
        err.to_string(),
        "anchor Missing is not in the middleware chain"
    );
}

fn lead_tail() -> ChainBuilder {
    let mut b = ChainBuilder::new();
    for n in [
        "InputSanitizationMiddleware",
        "LLMErrorHandlingMiddleware",
        "SystemMessageCoalescingMiddleware",
        "TerminalResponseMiddleware",
        "ModelLengthFinishReasonMiddleware",
        "SafetyFinishReasonMiddleware",
        "ClarificationMiddleware",
    ] {
        b.push(mw(n));
    }
    b
}

#[test]
fn r125_semantic_placement_with_fallbacks_and_diagnostics() {
    let model_physical = |b: &mut ChainBuilder, name| {
        b.place(
            mw(name),
            &[
                PlacementRule::InnerOfLastAfter {
                    target: kinds::SAFETY_FINISH_REASON,
                    after: kinds::TERMINAL_RESPONSE,
                },
                PlacementRule::InnerOfLast(kinds::TERMINAL_RESPONSE),
                PlacementRule::OuterOfLast(kinds::CLARIFICATION),
            ],
        )
    };
    let mut b = lead_tail();
    let d = model_physical(&mut b, "Physical");
    assert!(!d.degraded);
    b.place(
        mw("Logical"),
        &[PlacementRule::OuterOf(kinds::LLM_ERROR_HANDLING)],
    );
    b.place(mw("Visible"), &[PlacementRule::Start]);
    let chain = b.build().unwrap();
    expect![[r#"
        Chain [
           0 Visible
           1 InputSanitizationMiddleware
           2 Logical
           3 LLMErrorHandlingMiddleware
           4 SystemMessageCoalescingMiddleware
           5 TerminalResponseMiddleware
           6 ModelLengthFinishReasonMiddleware
           7 SafetyFinishReasonMiddleware
           8 Physical
           9 ClarificationMiddleware
        ]"#]]
    .assert_eq(&format!("{chain:?}"));
    assert_eq!(chain.diagnostics().len(), 3);

    // Without Safety the first fallback applies and is reported as degraded.
    let mut b = ChainBuilder::new();
    b.push(mw("TerminalResponseMiddleware"))
        .push(mw("X"))
        .push(mw("ClarificationMiddleware"));
    let d = model_physical(&mut b, "Physical");
    assert!(d.degraded);
    assert_eq!(
        d.rule,
        Some(PlacementRule::InnerOfLast(kinds::TERMINAL_RESPONSE))
    );
    assert_eq!(d.index, 1);
    // Nothing matches: the end, degraded, with no rule.
    let mut b = ChainBuilder::new();
    b.push(mw("X"));
    let d = b.place(mw("Y"), &[PlacementRule::OuterOf(k("Nope"))]);
    assert_eq!((d.rule, d.degraded, d.index), (None, true, 1));
}

/// R125, several contributions on one spot: each resolves against the stack without the
/// earlier contributions, and they keep their order there (the first placed is the
/// outermost), as the reference resolves every contribution against the original stack.
#[test]
fn r125_contributions_on_one_spot_keep_their_order() {
    let physical = |b: &mut ChainBuilder, name| {
        b.place(
            mw(name),
            &[PlacementRule::InnerOfLastAfter {
                target: kinds::SAFETY_FINISH_REASON,
                after: kinds::TERMINAL_RESPONSE,
            }],
        )
    };
    let mut b = lead_tail();
    b.place(mw("V1"), &[PlacementRule::Start]);
    b.place(mw("V2"), &[PlacementRule::Start]);
    physical(&mut b, "P1");
    physical(&mut b, "P2");
    let d = b.place(
        mw("L"),
        &[PlacementRule::OuterOf(kinds::LLM_ERROR_HANDLING)],
    );
    assert_eq!(d.index, 3, "the index it was inserted at");
    let chain = b.build().unwrap();
    expect![[r#"
        Chain [
           0 V1
           1 V2
           2 InputSanitizationMiddleware
           3 L
           4 LLMErrorHandlingMiddleware
           5 SystemMessageCoalescingMiddleware
           6 TerminalResponseMiddleware
           7 ModelLengthFinishReasonMiddleware
           8 SafetyFinishReasonMiddleware
           9 P1
          10 P2
          11 ClarificationMiddleware
        ]"#]]
    .assert_eq(&format!("{chain:?}"));
    // Two at the end of a chain without clarification keep their order too.
    let mut b = ChainBuilder::new();
    b.push(mw("X"));
    b.place(mw("E1"), &[PlacementRule::End]);
    b.place(mw("E2"), &[PlacementRule::End]);
    let names: Vec<String> = b
        .build()
        .unwrap()
        .entries()
        .iter()
        .map(|e| e.id().to_string())
        .collect();
    assert_eq!(names, ["X", "E1", "E2"]);
}

/// R119 (R51): the chain a builder returns ends with the clarification middleware; anything
/// put after it (pushed, inserted after it, or placed at the end) fails the build.
#[test]
fn r119_nothing_may_follow_clarification() {
    let mut b = ChainBuilder::new();
    b.push(mw("ClarificationMiddleware")).push(mw("X"));
    let err = b.build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "ClarificationMiddleware must be the last middleware, but X comes after it"
    );
    let mut b = lead_tail();
    b.place(mw("E"), &[PlacementRule::End]);
    assert!(matches!(
        b.build(),
        Err(antler_middleware::Error::ClarificationNotLast { .. })
    ));
    let mut b = lead_tail();
    b.insert_after(&kinds::CLARIFICATION, mw("Y")).unwrap();
    assert!(b.build().is_err());
    assert!(lead_tail().build().is_ok());
}

#[test]
fn r125_last_match_rules() {
    let mut b = ChainBuilder::new();
    let t = |l| labelled("T", l);
    b.push(t("1"))
        .push(mw("Y"))
        .push(t("2"))
        .push(t("3"))
        .push(mw("Z"));
    b.place(mw("a"), &[PlacementRule::OuterOfLast(k("T"))]);
    b.place(mw("b"), &[PlacementRule::InnerOf(k("T"))]);
    b.place(
        mw("c"),
        &[
            PlacementRule::InnerOfLastAfter {
                target: k("T"),
                after: k("Z"),
            },
            PlacementRule::End,
        ],
    );
    assert_eq!(
        order(&b.build().unwrap()),
        ["T#1", "b", "Y", "T#2", "a", "T#3", "Z", "c"]
    );
}

#[test]
fn r124_ordering_constraint_violation_names_everything() {
    let mut b = ChainBuilder::new();
    b.push(mw("ToolErrorHandlingMiddleware"))
        .push(mw("ToolProgressMiddleware"));
    b.require_order(OrderingConstraint {
        outer: kinds::TOOL_PROGRESS,
        inner: kinds::TOOL_ERROR_HANDLING,
        reason: "progress must observe tool errors".into(),
        contributor: None,
    });
    let err = b.build().unwrap_err();
    assert_eq!(
        err.to_string(),
        "ToolProgressMiddleware (index 1) must come before ToolErrorHandlingMiddleware (index 0): progress must observe tool errors (contributed by core middleware order)"
    );
    let mut b = ChainBuilder::new();
    b.push(mw("ToolErrorHandlingMiddleware"));
    b.require_order(OrderingConstraint {
        outer: kinds::TOOL_PROGRESS,
        inner: kinds::TOOL_ERROR_HANDLING,
        reason: "r".into(),
        contributor: Some("ext-a".into()),
    });
    assert!(b.build().is_ok(), "no-op when one side is absent");
    let mut b = ChainBuilder::new();
    b.push(mw("ToolErrorHandlingMiddleware"))
        .push(mw("ToolProgressMiddleware"));
    b.require_order(OrderingConstraint {
        outer: kinds::TOOL_PROGRESS,
        inner: kinds::TOOL_ERROR_HANDLING,
        reason: "r".into(),
        contributor: Some("ext-a".into()),
    });
    assert!(
        b.build()
            .unwrap_err()
            .to_string()
            .ends_with("(contributed by ext-a)")
    );
    // Every progress entry before every error-handling one: one progress entry after it is
    // enough to fail, wherever the others are.
    let mut b = ChainBuilder::new();
    b.push(mw("ToolProgressMiddleware"))
        .push(mw("ToolErrorHandlingMiddleware"))
        .push(labelled("ToolProgressMiddleware", "second"));
    let err = b.build().unwrap_err();
    assert!(err.to_string().contains("(index 2)"), "{err}");
    // The core constraint holds without being declared.
    let mut b = ChainBuilder::new();
    b.push(mw("ToolErrorHandlingMiddleware"))
        .push(mw("ToolProgressMiddleware"));
    assert!(
        b.build()
            .unwrap_err()
            .to_string()
            .ends_with("(contributed by core middleware order)")
    );
    // An extension that placed the offending middleware is named, not the core order.
    let mut b = ChainBuilder::new();
    b.push(mw("ToolErrorHandlingMiddleware"));
    b.place_from(mw("ToolProgressMiddleware"), &[PlacementRule::End], "ext-a");
    assert!(
        b.build()
            .unwrap_err()
            .to_string()
            .ends_with("(contributed by ext-a)")
    );
    // Every extension whose entry violates the order is named, also one whose entry sits
    // between the two reported ones (before 2026-12-02: the core order was blamed here).
    let mut b = ChainBuilder::new();
    b.push(mw("ToolErrorHandlingMiddleware"));
    b.place_from(
        labelled("ToolProgressMiddleware", "x"),
        &[PlacementRule::InnerOf(kinds::TOOL_ERROR_HANDLING)],
        "ext-a",
    );
    b.place_from(
        labelled("ToolProgressMiddleware", "y"),
        &[PlacementRule::End],
        "ext-b",
    );
    b.push(mw("ToolProgressMiddleware"));
    let err = b.build().unwrap_err();
    assert!(
        err.to_string().ends_with("(contributed by ext-a, ext-b)"),
        "{err}"
    );
}

/// Names for generated extras and chain members.
const BASE: [&str; 4] = ["B0", "B1", "B2", "ClarificationMiddleware"];
const EXTRA: [&str; 5] = ["E0", "E1", "E2", "E3", "E4"];
const ANCHOR: [&str; 10] = [
    "B0",
    "B1",
    "B2",
    "ClarificationMiddleware",
    "E0",
    "E1",
    "E2",
    "E3",
    "E4",
    "Missing",
];

proptest! {
    /// Placement either fails with a documented error, or every anchored
    /// extra sits right after (`Next`) or right before (`Prev`) the first
    /// match of its anchor, with nothing between them but extras anchored to
    /// something in between (two extras on one side of one anchor are refused
    /// by R53 here, where no extra has families), and Clarification is last.
    #[test]
    fn anchored_extras_sit_next_to_their_anchor(spec in prop::collection::vec((0usize..3, 0usize..10), 1..6)) {
        let extras: Vec<Arc<dyn Middleware>> = spec
            .iter()
            .enumerate()
            .map(|(i, &(dir, a))| -> Arc<dyn Middleware> {
                let anchors = match dir {
                    0 => Anchors::NONE,
                    1 => Anchors::next(k(ANCHOR[a])),
                    _ => Anchors::prev(k(ANCHOR[a])),
                };
                Arc::new(Mw { kind: k(EXTRA[i]), anchors, families: vec![], label: None })
            })
            .collect();
        let mut b = ChainBuilder::new();
        for n in BASE {
            b.push(mw(n));
        }
        match b.insert_extras(extras.clone()) {
            Err(e) => prop_assert!(matches!(
                e,
                Error::DuplicateAnchor { .. } | Error::OppositeAnchors { .. } | Error::CircularAnchors { .. } | Error::UnresolvedAnchors { .. }
            ), "undocumented error {e}"),
            Ok(_) => {
                let o = order(&b.build().unwrap());
                prop_assert_eq!(o.last().map(String::as_str), Some("ClarificationMiddleware"));
                // Each extra's anchor, if any: what may sit between another extra and its anchor.
                let anchor_of = |x: &str| {
                    extras.iter().find(|e| e.kind().name() == x).and_then(|e| {
                        let a = e.anchors();
                        a.next.or(a.prev).map(|a| a.name().to_owned())
                    })
                };
                let chained = |x: &String, span: &[String]| {
                    anchor_of(x).is_some_and(|a| span.contains(&a))
                };
                prop_assert_eq!(o.len(), BASE.len() + extras.len());
                for e in &extras {
                    let me = o.iter().position(|x| x == e.kind().name()).unwrap();
                    let a = e.anchors();
                    if let Some(anchor) = a.next.filter(|a| *a != kinds::CLARIFICATION) {
                        let at = o.iter().position(|x| x == anchor.name()).unwrap();
                        // Right after the anchor, or after extras that were
                        // chained onto it (anchored to something between).
                        prop_assert!(me > at, "{} not after {}: {:?}", e.kind(), anchor, o);
                        prop_assert!(o[at + 1..me].iter().all(|x| chained(x, &o[at..=me])), "{:?}", o);
                    }
                    if let Some(anchor) = a.prev {
                        let at = o.iter().position(|x| x == anchor.name()).unwrap();
                        prop_assert!(me < at, "{} not before {}: {:?}", e.kind(), anchor, o);
                        prop_assert!(o[me + 1..at].iter().all(|x| chained(x, &o[me..=at])), "{:?}", o);
                    }
                }
            }
        }
    }
}

/// R54/R58 with a custom Clarification: a middleware of its own kind that belongs to the
/// Clarification family is the one unanchored extras go before, and it stays last (before, the
/// lookup compared the exact kind, so extras landed after it).
#[test]
fn r54_a_clarification_family_member_is_clarification() {
    let mut b = ChainBuilder::new();
    b.push(mw("ThreadDataMiddleware"));
    b.push(Arc::new(Mw {
        kind: k("MyClarification"),
        anchors: Anchors::NONE,
        families: vec![kinds::CLARIFICATION],
        label: None,
    }));
    b.insert_extras(vec![mw("A"), mw("B")]).unwrap();
    let chain = b.build().unwrap();
    assert_eq!(
        order(&chain),
        ["ThreadDataMiddleware", "A", "B", "MyClarification"]
    );
    // A second member of the family as an extra: it goes before the first Clarification, which
    // is then the first member and moves back to the end, and the chain, where the extra now
    // follows the built-in one, is refused (R119).
    let mut b = ChainBuilder::new();
    b.push(mw("ThreadDataMiddleware"));
    b.push(mw("ClarificationMiddleware"));
    b.insert_extras(vec![Arc::new(Mw {
        kind: k("MyClarification"),
        anchors: Anchors::NONE,
        families: vec![kinds::CLARIFICATION],
        label: None,
    })])
    .unwrap();
    let err = b.build().unwrap_err();
    assert!(
        matches!(&err, Error::ClarificationNotLast { after } if after == "MyClarification"),
        "{err}"
    );
}

/// Two extras with one id are refused with a typed error (before, both went into the chain,
/// and the agent graph failed later on a duplicate node).
#[test]
fn two_extras_with_one_id_are_refused() {
    let mut b = sdk_chain();
    let err = b.insert_extras(vec![mw("X"), mw("X")]).unwrap_err();
    assert!(matches!(err, Error::DuplicateExtra { .. }), "{err}");
    assert_eq!(err.kind(), antler_middleware::ErrorKind::Order);
    // Nothing was inserted.
    assert!(!order(&b.build().unwrap()).iter().any(|i| i == "X"));
    // R53 classifies in extras order: the first extra at fault is reported with the spec's
    // error, before a later extra's repeated id (before, every repeat was found first).
    let both = both_anchors("Both");
    let err = sdk_chain()
        .insert_extras(vec![both, mw("Y"), mw("Y")])
        .unwrap_err();
    assert_eq!(err.to_string(), "Both cannot have both @Next and @Prev");
    // One id anchored twice on the same anchor: the second claim is R53's conflict.
    let err = sdk_chain()
        .insert_extras(vec![
            next("X", "TitleMiddleware"),
            next("X", "TitleMiddleware"),
        ])
        .unwrap_err();
    assert!(
        err.to_string()
            .starts_with("Conflict: X and X both @Next(TitleMiddleware)"),
        "{err}"
    );
}

/// R55 with unanchored extras: an extra anchored `@Next` to the middleware right before
/// Clarification lands right after it, before the unanchored extras already inserted there.
#[test]
fn r55_next_of_the_entry_before_clarification_goes_before_unanchored_extras() {
    let mut b = ChainBuilder::new();
    for n in ["B0", "B1", "B2", "ClarificationMiddleware"] {
        b.push(mw(n));
    }
    b.insert_extras(vec![mw("E0"), next("E1", "B2")]).unwrap();
    assert_eq!(
        order(&b.build().unwrap()),
        ["B0", "B1", "B2", "E1", "E0", "ClarificationMiddleware"]
    );
}

/// Every insertion resolves against the chain as it stands: an anchor pushed later is not
/// there yet, and a push after an `End` placement goes after it.
#[test]
fn insertions_resolve_against_the_chain_as_it_stands() {
    let mut b = ChainBuilder::new();
    let err = b.insert_after(&k("Audit"), mw("M")).unwrap_err();
    assert!(matches!(err, Error::AnchorNotFound { .. }), "{err}");
    b.push(mw("Audit"));
    b.insert_after(&k("Audit"), mw("M")).unwrap();
    let d = b.place(mw("C"), &[PlacementRule::End]);
    assert_eq!(
        (d.rule, d.degraded, d.index),
        (Some(PlacementRule::End), false, 2)
    );
    b.push(mw("T"));
    assert_eq!(order(&b.build().unwrap()), ["Audit", "M", "C", "T"]);
}

/// Two insertions on one anchor: `insert_before` keeps call order, `insert_after` reverses
/// it (each lands right after the anchor), as documented.
#[test]
fn two_insertions_on_one_anchor_have_a_documented_order() {
    let mut b = ChainBuilder::new();
    b.push(mw("A"));
    b.insert_before(&k("A"), mw("m1")).unwrap();
    b.insert_before(&k("A"), mw("m2")).unwrap();
    b.insert_after(&k("A"), mw("m3")).unwrap();
    b.insert_after(&k("A"), mw("m4")).unwrap();
    assert_eq!(order(&b.build().unwrap()), ["m1", "m2", "A", "m4", "m3"]);
}

/// R53 compares anchors by kind: extras anchored `@Next` to a middleware and to a family it
/// belongs to are no conflict; both land right after it, the later-placed one nearer.
#[test]
fn r53_extras_on_a_kind_and_on_its_family_both_land_next_to_it() {
    let mut b = ChainBuilder::new();
    b.push(Arc::new(Mw {
        kind: k("A"),
        anchors: Anchors::NONE,
        families: vec![k("F")],
        label: None,
    }));
    b.push(mw("Z"));
    b.insert_extras(vec![next("E1", "A"), next("E2", "F")])
        .unwrap();
    assert_eq!(order(&b.build().unwrap()), ["A", "E2", "E1", "Z"]);
}

/// R55: a cycle among extras names each kind once, however many instances of it take part
/// (before 2026-12-02 the instances were each named: `X, X, Y`).
#[test]
fn r55_a_cycle_names_each_kind_once() {
    let x = |label, anchor| -> Arc<dyn Middleware> {
        Arc::new(Mw {
            kind: k("X"),
            anchors: Anchors::next(k(anchor)),
            families: vec![],
            label: Some(label),
        })
    };
    let mut b = ChainBuilder::new();
    b.push(mw("B0"));
    let err = b
        .insert_extras(vec![x("1", "Y"), x("2", "Missing"), next("Y", "X")])
        .unwrap_err();
    assert_eq!(
        err.to_string(),
        "Circular dependency among extra middlewares: X, Y"
    );
}

/// A kind name with `#` (which separates an id's instance label) or an empty one is refused
/// at build, so no two ids print alike in errors or in the chain's `Debug` order.
#[test]
fn kind_names_with_a_hash_are_refused() {
    for name in ["A#x", ""] {
        let mut b = ChainBuilder::new();
        b.push(labelled("A", "x"));
        b.push(mw(name));
        let err = b.build().unwrap_err();
        assert!(matches!(err, Error::InvalidKindName { .. }), "{err}");
        assert_eq!(err.kind(), antler_middleware::ErrorKind::Order);
    }
    let mut b = ChainBuilder::new();
    b.push(labelled("A", "x#y"));
    assert_eq!(order(&b.build().unwrap()), ["A#x#y"]);
}

/// R121 as a declared sequence: SkillActivation, SkillToolPolicy and DurableContext adjacent
/// in that order; anything between them or a swap fails the build, naming where it breaks.
#[test]
fn r121_a_sequence_constraint_keeps_its_kinds_adjacent_and_in_order() {
    let r121 = || SequenceConstraint {
        kinds: vec![
            k("SkillActivation"),
            k("SkillToolPolicy"),
            k("DurableContext"),
        ],
        at_end: false,
        reason: "the policy shares the activation's owner token".to_owned(),
        contributor: None,
    };
    let build = |names: &[&'static str]| {
        let mut b = ChainBuilder::new();
        for n in names {
            b.push(mw(n));
        }
        b.require_sequence(r121());
        b.build().map(|c| order(&c))
    };
    assert_eq!(
        build(&[
            "A",
            "SkillActivation",
            "SkillToolPolicy",
            "DurableContext",
            "Z"
        ])
        .unwrap(),
        [
            "A",
            "SkillActivation",
            "SkillToolPolicy",
            "DurableContext",
            "Z"
        ]
    );
    // Nothing of the sequence in the chain: nothing to keep together.
    assert!(build(&["A", "Z"]).is_ok());
    let err = build(&["SkillActivation", "X", "SkillToolPolicy", "DurableContext"]).unwrap_err();
    assert_eq!(
        err.to_string(),
        "SkillActivation, SkillToolPolicy, DurableContext must be adjacent in this order: X at index 1 breaks it: the policy shares the activation's owner token (contributed by core middleware order)"
    );
    assert_eq!(err.kind(), antler_middleware::ErrorKind::Order);
    let err = build(&["SkillToolPolicy", "SkillActivation", "DurableContext"]).unwrap_err();
    assert!(
        matches!(&err, Error::SequenceViolation { index: 1, found, .. } if found == "SkillActivation"),
        "{err}"
    );
}

/// R120's tail as a declared sequence at the end: TerminalResponse, ModelLength, Safety (if
/// enabled), Clarification; an absent Safety is skipped, an entry after the tail fails, and
/// an extension that placed the breaking entry is named.
#[test]
fn r120_a_sequence_at_the_end_is_the_exact_tail() {
    let tail = || SequenceConstraint {
        kinds: vec![
            kinds::TERMINAL_RESPONSE,
            k("ModelLengthFinishReasonMiddleware"),
            kinds::SAFETY_FINISH_REASON,
            kinds::CLARIFICATION,
        ],
        at_end: true,
        reason: "the finish-reason middlewares see the model's last answer in this order"
            .to_owned(),
        contributor: None,
    };
    let build = |names: &[&'static str], extra: Option<PlacementRule>| {
        let mut b = ChainBuilder::new();
        for n in names {
            b.push(mw(n));
        }
        if let Some(rule) = extra {
            b.place_from(mw("Ext"), &[rule], "ext-a");
        }
        b.require_sequence(tail());
        b.build().map(|c| order(&c))
    };
    let with_safety = [
        "A",
        "TerminalResponseMiddleware",
        "ModelLengthFinishReasonMiddleware",
        "SafetyFinishReasonMiddleware",
        "ClarificationMiddleware",
    ];
    assert!(build(&with_safety, None).is_ok());
    let without = [
        "A",
        "TerminalResponseMiddleware",
        "ModelLengthFinishReasonMiddleware",
        "ClarificationMiddleware",
    ];
    assert!(build(&without, None).is_ok());
    // A contribution placed inside the tail breaks it, and its extension is named.
    let err = build(
        &with_safety,
        Some(PlacementRule::InnerOf(kinds::TERMINAL_RESPONSE)),
    )
    .unwrap_err();
    assert!(
        matches!(&err, Error::SequenceViolation { index: 2, contributor, .. } if contributor == "ext-a"),
        "{err}"
    );
    // Without Clarification the tail must still end the chain.
    let err = build(
        &[
            "TerminalResponseMiddleware",
            "ModelLengthFinishReasonMiddleware",
            "Z",
        ],
        None,
    )
    .unwrap_err();
    assert!(
        err.to_string().starts_with(
            "TerminalResponseMiddleware, ModelLengthFinishReasonMiddleware, SafetyFinishReasonMiddleware, ClarificationMiddleware must be adjacent in this order and end the chain: Z at index 2 breaks it"
        ),
        "{err}"
    );
}
