//! Building a middleware chain into a resolved, immutable order.
//!
//! Order is program semantics, so it is never "wherever `push` happened to
//! put it": every insertion names where it goes (an anchor, a placement
//! rule, or the explicit end). Each insertion resolves against the chain as
//! it stands when it is made, so the order of the builder's calls is part of
//! the order it builds (an anchor must be in the chain before something is
//! placed next to it, and a later [`push`](ChainBuilder::push) goes after
//! everything, an earlier `End` placement included). [`ChainBuilder::build`]
//! then checks the whole order once (ordering constraints, Clarification
//! last, duplicate ids, kind names), and the resulting [`Chain`] cannot
//! change. Its `Debug` output is the resolved order, one entry per line.

use std::fmt;
use std::sync::Arc;

use crate::error::{Error, Result};
use crate::hook::Middleware;
use crate::kind::{MiddlewareId, MiddlewareKind, kinds};

type Entry = Arc<dyn Middleware>;

fn matches(entry: &Entry, kind: &MiddlewareKind) -> bool {
    entry.kind() == *kind || entry.families().contains(kind)
}

/// One rule of a semantic placement (kernel-spec R125).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlacementRule {
    /// Right before the first middleware of the kind.
    OuterOf(MiddlewareKind),
    /// Right after the first middleware of the kind.
    InnerOf(MiddlewareKind),
    /// Right before the last middleware of the kind.
    OuterOfLast(MiddlewareKind),
    /// Right after the last middleware of the kind.
    InnerOfLast(MiddlewareKind),
    /// Right after the last `target` that follows the last `after`.
    InnerOfLastAfter {
        /// The middleware to place after.
        target: MiddlewareKind,
        /// The middleware `target` must follow.
        after: MiddlewareKind,
    },
    /// At the very start (outermost).
    Start,
    /// At the very end (innermost).
    End,
}

impl PlacementRule {
    /// The insertion index this rule resolves to in `entries`, if it matches.
    fn resolve(&self, entries: &[Entry]) -> Option<usize> {
        let first = |k: &MiddlewareKind| entries.iter().position(|e| matches(e, k));
        let last = |k: &MiddlewareKind| entries.iter().rposition(|e| matches(e, k));
        match self {
            PlacementRule::OuterOf(k) => first(k),
            PlacementRule::InnerOf(k) => first(k).map(|i| i + 1),
            PlacementRule::OuterOfLast(k) => last(k),
            PlacementRule::InnerOfLast(k) => last(k).map(|i| i + 1),
            PlacementRule::InnerOfLastAfter { target, after } => {
                let after_idx = last(after)?;
                entries
                    .iter()
                    .enumerate()
                    .skip(after_idx + 1)
                    .filter(|(_, e)| matches(e, target))
                    .map(|(i, _)| i + 1)
                    .next_back()
            }
            PlacementRule::Start => Some(0),
            PlacementRule::End => Some(entries.len()),
        }
    }
}

/// How a semantic placement was resolved.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlacementDiagnostic {
    /// The placed middleware.
    pub middleware: MiddlewareId,
    /// The rule that matched, or `None` when no rule matched and the
    /// middleware went to the end.
    pub rule: Option<PlacementRule>,
    /// Whether a fallback (not the first rule) was used.
    pub degraded: bool,
    /// The index it was inserted at, in the chain as it stood then: a later insertion
    /// before it shifts it (the built [`Chain`] has the final order).
    pub index: usize,
}

/// A declared ordering constraint checked at build time (R124): every
/// `outer` must sit at a lower index than every `inner`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OrderingConstraint {
    /// The kind that must be outer.
    pub outer: MiddlewareKind,
    /// The kind that must be inner.
    pub inner: MiddlewareKind,
    /// Why, for the error message.
    pub reason: String,
    /// The extension that declared it; `None` for the core order.
    pub contributor: Option<String>,
}

/// A declared sequence constraint checked at build time (kernel-spec R120, R121): the
/// middlewares of `kinds` that are in the chain sit next to each other, in the order of
/// `kinds`, and with `at_end` they end the chain. Kinds that are absent are skipped (R120's
/// Safety "if enabled"); an entry matches the first of `kinds` it is (or belongs to, through
/// its families); nothing of `kinds` in the chain satisfies it.
///
/// What an [`OrderingConstraint`] cannot say: R121's "SkillActivation, SkillToolPolicy,
/// DurableContext adjacent in that order", R120's exact tail "TerminalResponse,
/// ModelLength, Safety, Clarification".
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SequenceConstraint {
    /// The kinds, in the order they must appear.
    pub kinds: Vec<MiddlewareKind>,
    /// Whether the sequence must end the chain.
    pub at_end: bool,
    /// Why, for the error message.
    pub reason: String,
    /// The extension that declared it; `None` for the core order.
    pub contributor: Option<String>,
}

impl SequenceConstraint {
    /// The first entry at or after which the sequence is broken, if it is: an entry that is
    /// not of `kinds` between the first and the last that are, one out of order, or (with
    /// `at_end`) one after the last.
    fn violation(&self, entries: &[Entry]) -> Option<usize> {
        let rank = |e: &Entry| self.kinds.iter().position(|k| matches(e, k));
        let first = entries.iter().position(|e| rank(e).is_some())?;
        let last = entries.iter().rposition(|e| rank(e).is_some())?;
        let mut prev = 0;
        for (at, e) in entries.iter().enumerate().take(last + 1).skip(first) {
            match rank(e) {
                Some(r) if r >= prev => prev = r,
                _ => return Some(at),
            }
        }
        (self.at_end && last + 1 != entries.len()).then_some(last + 1)
    }
}

/// Who a constraint violation is blamed on (R124): the extensions that placed the violating
/// entries, else the constraint's contributor, else the core order.
fn blame(placed_by: Option<&str>, contributor: Option<&str>) -> String {
    placed_by
        .or(contributor)
        .unwrap_or("core middleware order")
        .to_owned()
}

/// Builds a [`Chain`].
///
/// Adding a middleware whose [`MiddlewareId`] is already present is refused
/// ([`Error::DuplicateMiddleware`](crate::Error::DuplicateMiddleware)): give a second
/// instance of a kind its own label.
#[derive(Default)]
pub struct ChainBuilder {
    entries: Vec<Entry>,
    constraints: Vec<OrderingConstraint>,
    sequences: Vec<SequenceConstraint>,
    diagnostics: Vec<PlacementDiagnostic>,
    /// The entries [`place`](Self::place) inserted: later placements resolve against the
    /// others (the stack before contributions), as the reference resolves every contribution.
    placed: Vec<MiddlewareId>,
    /// The extension that placed an entry ([`place_from`](Self::place_from)), named by an
    /// ordering violation the entry takes part in (R124).
    sources: Vec<(MiddlewareId, String)>,
    /// Ids given again while already in the chain ([`push`](Self::push),
    /// [`place`](Self::place)): [`build`](Self::build) refuses them.
    repeated: Vec<MiddlewareId>,
}

impl ChainBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    fn source_of(&self, id: &MiddlewareId) -> Option<&str> {
        self.sources
            .iter()
            .find(|(p, _)| p == id)
            .map(|(_, s)| s.as_str())
    }

    fn contains(&self, id: &MiddlewareId) -> bool {
        self.entries.iter().any(|e| e.id() == *id)
    }

    /// The error for `id` given while already in the chain.
    fn already_in(id: &MiddlewareId) -> Error {
        Error::DuplicateMiddleware { id: id.to_string() }
    }

    /// Appends `m` as the innermost entry so far. A middleware whose id is already in the
    /// chain is not added, and [`build`](Self::build) fails with
    /// [`Error::DuplicateMiddleware`]: replacing the earlier one would drop configuration
    /// without a word (two instances of one kind take distinct instance labels).
    pub fn push(&mut self, m: Entry) -> &mut Self {
        if self.contains(&m.id()) {
            self.repeated.push(m.id());
            return self;
        }
        self.entries.push(m);
        self
    }

    /// Inserts `m` right before the first middleware of kind `anchor`, in the chain as it
    /// stands (a missing anchor is [`Error::AnchorNotFound`] now, not at build).
    ///
    /// Two calls on one anchor keep their call order: `insert_before(A, m1)` then
    /// `insert_before(A, m2)` gives `[m1, m2, A]`.
    pub fn insert_before(&mut self, anchor: &MiddlewareKind, m: Entry) -> Result<&mut Self> {
        self.insert_relative(anchor, m, 0)
    }

    /// Inserts `m` right after the first middleware of kind `anchor`, in the chain as it
    /// stands (a missing anchor is [`Error::AnchorNotFound`] now, not at build).
    ///
    /// Each call lands right after the anchor, so two calls on one anchor end up in reverse
    /// call order: `insert_after(A, m1)` then `insert_after(A, m2)` gives `[A, m2, m1]` (to
    /// keep a sequence in order, anchor each to the one before it).
    pub fn insert_after(&mut self, anchor: &MiddlewareKind, m: Entry) -> Result<&mut Self> {
        self.insert_relative(anchor, m, 1)
    }

    fn insert_relative(
        &mut self,
        anchor: &MiddlewareKind,
        m: Entry,
        offset: usize,
    ) -> Result<&mut Self> {
        if self.contains(&m.id()) {
            return Err(Self::already_in(&m.id()));
        }
        let mut entries = self.entries.clone();
        let Some(i) = entries.iter().position(|e| matches(e, anchor)) else {
            return Err(Error::AnchorNotFound {
                anchor: anchor.to_string(),
            });
        };
        entries.insert(i + offset, m);
        self.entries = entries;
        Ok(self)
    }

    /// Places a contribution by semantic placement (R125): the first rule of
    /// `rules` that matches decides; nothing matching puts it at the end. A
    /// fallback is recorded as a degraded [`PlacementDiagnostic`].
    ///
    /// Rules resolve against the chain without the earlier contributions (as
    /// the reference resolves every contribution against the stack before
    /// them), and contributions that land on the same spot keep their order:
    /// the first placed is the outermost.
    ///
    /// A middleware whose id is already in the chain is not placed (the diagnostic names
    /// where it is), and [`build`](Self::build) fails with [`Error::DuplicateMiddleware`].
    pub fn place(&mut self, m: Entry, rules: &[PlacementRule]) -> PlacementDiagnostic {
        if let Some(index) = self.entries.iter().position(|e| e.id() == m.id()) {
            self.repeated.push(m.id());
            return PlacementDiagnostic {
                middleware: m.id(),
                rule: None,
                degraded: true,
                index,
            };
        }
        let base: Vec<Entry> = self
            .entries
            .iter()
            .filter(|e| !self.placed.contains(&e.id()))
            .cloned()
            .collect();
        let found = rules
            .iter()
            .enumerate()
            .find_map(|(n, r)| r.resolve(&base).map(|i| (n, r.clone(), i)));
        // The spot in the base stack, as a position in the chain: right before the
        // base entry there (after contributions placed there earlier), or the end.
        let at = |k: usize| {
            base.get(k)
                .and_then(|next| self.entries.iter().position(|e| e.id() == next.id()))
                .unwrap_or(self.entries.len())
        };
        let diagnostic = match found {
            Some((n, rule, k)) => PlacementDiagnostic {
                middleware: m.id(),
                rule: Some(rule),
                degraded: n > 0,
                index: at(k),
            },
            None => PlacementDiagnostic {
                middleware: m.id(),
                rule: None,
                degraded: true,
                index: self.entries.len(),
            },
        };
        self.placed.push(m.id());
        self.entries.insert(diagnostic.index, m);
        self.diagnostics.push(diagnostic.clone());
        diagnostic
    }

    /// [`place`](Self::place) for a contribution of the extension `contributor`: an ordering
    /// violation this entry takes part in names that extension (R124).
    pub fn place_from(
        &mut self,
        m: Entry,
        rules: &[PlacementRule],
        contributor: impl Into<String>,
    ) -> PlacementDiagnostic {
        let id = m.id();
        let d = self.place(m, rules);
        self.sources.push((id, contributor.into()));
        d
    }

    /// Declares an ordering constraint checked by [`build`](Self::build).
    pub fn require_order(&mut self, constraint: OrderingConstraint) -> &mut Self {
        self.constraints.push(constraint);
        self
    }

    /// Declares a sequence constraint checked by [`build`](Self::build) (R120, R121).
    pub fn require_sequence(&mut self, constraint: SequenceConstraint) -> &mut Self {
        self.sequences.push(constraint);
        self
    }

    /// Inserts extra middlewares by their `@Next`/`@Prev` anchors
    /// (kernel-spec R53–R58, the SDK factory's algorithm):
    ///
    /// 1. classify in order, rejecting both anchors on one extra, two extras
    ///    on one anchor in one direction, and opposite directions on one
    ///    anchor;
    /// 2. insert unanchored extras right before the first
    ///    `ClarificationMiddleware` (at the end if there is none), in order;
    /// 3. place anchored extras in rounds, each at the first middleware of
    ///    its anchor's kind, so extras may anchor to each other in any
    ///    order; a round without progress fails as circular or unresolved;
    /// 4. move `ClarificationMiddleware` back to the end.
    ///
    /// On error the builder is unchanged.
    pub fn insert_extras(&mut self, extras: Vec<Entry>) -> Result<&mut Self> {
        if extras.is_empty() {
            return Ok(self);
        }
        struct Anchored {
            entry: Entry,
            next: bool,
            anchor: MiddlewareKind,
        }
        // One pass in extras order (R53): each extra's anchor checks first, then whether its
        // id was given before (the chain is keyed by id), so the first extra at fault, and the
        // spec's error for it, is what is reported.
        let mut ids = std::collections::HashSet::new();
        let in_chain: std::collections::HashSet<MiddlewareId> =
            self.entries.iter().map(|e| e.id()).collect();
        let duplicate = |ids: &mut std::collections::HashSet<MiddlewareId>, e: &Entry| {
            if in_chain.contains(&e.id()) {
                return Err(Self::already_in(&e.id()));
            }
            if ids.insert(e.id()) {
                Ok(())
            } else {
                Err(Error::DuplicateExtra {
                    id: e.id().to_string(),
                })
            }
        };
        let mut unanchored = Vec::new();
        let mut anchored: Vec<Anchored> = Vec::new();
        for entry in extras {
            let a = entry.anchors();
            let name = entry.kind().to_string();
            let (next, anchor) = match (a.next, a.prev) {
                (Some(_), Some(_)) => return Err(Error::BothAnchors { name }),
                (Some(k), None) => (true, k),
                (None, Some(k)) => (false, k),
                (None, None) => {
                    duplicate(&mut ids, &entry)?;
                    unanchored.push(entry);
                    continue;
                }
            };
            let dir = |n: bool| if n { "Next" } else { "Prev" };
            for other in &anchored {
                if other.anchor != anchor {
                    continue;
                }
                let first = other.entry.kind().to_string();
                if other.next == next {
                    return Err(Error::DuplicateAnchor {
                        first,
                        second: name,
                        direction: dir(next),
                        anchor: anchor.to_string(),
                    });
                }
                return Err(Error::OppositeAnchors {
                    first,
                    first_direction: dir(other.next),
                    second: name,
                    second_direction: dir(next),
                    anchor: anchor.to_string(),
                });
            }
            duplicate(&mut ids, &entry)?;
            anchored.push(Anchored {
                entry,
                next,
                anchor,
            });
        }

        // No extra is in the chain already (checked above).
        let mut entries = self.entries.clone();
        let at = entries
            .iter()
            .position(|e| matches(e, &kinds::CLARIFICATION))
            .unwrap_or(entries.len());
        entries.splice(at..at, unanchored);
        let rounds = anchored.len() + 1;
        let mut pending = anchored;
        for _ in 0..rounds {
            if pending.is_empty() {
                break;
            }
            let mut still = Vec::new();
            let before = pending.len();
            for item in pending {
                match entries.iter().position(|e| matches(e, &item.anchor)) {
                    Some(i) => entries.insert(if item.next { i + 1 } else { i }, item.entry),
                    None => still.push(item),
                }
            }
            if still.len() == before {
                let circular = still
                    .iter()
                    .any(|p| still.iter().any(|q| q.entry.kind() == p.anchor));
                let names = still.iter().map(|p| p.entry.kind().to_string()).collect();
                if circular {
                    // Only the extras some pending extra anchors to (R55: the pending anchor
                    // classes that are pending extras), not one stuck on a missing anchor.
                    // Each kind once, in extras order: two instances of one kind are one
                    // anchor class, as the reference reports a set of classes.
                    let mut names: Vec<String> = Vec::new();
                    for p in &still {
                        let name = p.entry.kind().to_string();
                        if still.iter().any(|q| q.anchor == p.entry.kind())
                            && !names.contains(&name)
                        {
                            names.push(name);
                        }
                    }
                    return Err(Error::CircularAnchors { names });
                }
                return Err(Error::UnresolvedAnchors {
                    names,
                    anchors: still.iter().map(|p| p.anchor.to_string()).collect(),
                });
            }
            pending = still;
        }
        if let Some(i) = entries
            .iter()
            .position(|e| matches(e, &kinds::CLARIFICATION))
            && i + 1 != entries.len()
        {
            let c = entries.remove(i);
            entries.push(c);
        }
        self.entries = entries;
        Ok(self)
    }

    /// Checks the order every insertion resolved (every declared [`OrderingConstraint`],
    /// the core one, Clarification last) and freezes the chain.
    ///
    /// A kind name that is empty or contains `#` is refused ([`Error::InvalidKindName`]):
    /// `#` separates an id's instance label, so such a kind would print like another id in
    /// errors and in the chain's `Debug` order.
    pub fn build(self) -> Result<Chain> {
        if let Some(id) = self.repeated.first() {
            return Err(Self::already_in(id));
        }
        if let Some(e) = self
            .entries
            .iter()
            .find(|e| e.kind().name().is_empty() || e.kind().name().contains('#'))
        {
            return Err(Error::InvalidKindName {
                name: e.kind().name().to_owned(),
            });
        }
        // The declared constraints, then the core one every chain keeps (R124): tool progress
        // is reported outside the error handling, so it sees the errors it turns into results.
        let core = OrderingConstraint {
            outer: kinds::TOOL_PROGRESS,
            inner: kinds::TOOL_ERROR_HANDLING,
            reason: "tool progress must observe the errors tool error handling turns into results"
                .to_owned(),
            contributor: None,
        };
        for c in self.constraints.iter().chain(std::iter::once(&core)) {
            let last_outer = self.entries.iter().rposition(|e| matches(e, &c.outer));
            let first_inner = self.entries.iter().position(|e| matches(e, &c.inner));
            // Strictly lower: one entry on both sides (through its families) violates it too.
            if let (Some(o), Some(i)) = (last_outer, first_inner)
                && o >= i
            {
                // The extensions that placed any violating entry (an outer one at or after the
                // first inner one, an inner one at or before the last outer one), in chain
                // order, are the cause; else the constraint's contributor, or the core order.
                // (Before 2026-12-02 only the two reported entries were looked at, so an
                // extension's entry between them went unnamed.)
                let mut sources: Vec<&str> = Vec::new();
                for (at, e) in self.entries.iter().enumerate() {
                    let violating =
                        (at >= i && matches(e, &c.outer)) || (at <= o && matches(e, &c.inner));
                    if let Some(s) = self.source_of(&e.id()).filter(|_| violating)
                        && !sources.contains(&s)
                    {
                        sources.push(s);
                    }
                }
                let placed_by = (!sources.is_empty()).then(|| sources.join(", "));
                let placed_by = placed_by.as_deref();
                return Err(Error::OrderingViolation {
                    outer: c.outer.to_string(),
                    outer_index: o,
                    inner: c.inner.to_string(),
                    inner_index: i,
                    reason: c.reason.clone(),
                    contributor: blame(placed_by, c.contributor.as_deref()),
                });
            }
        }
        for c in &self.sequences {
            if let Some(at) = c.violation(&self.entries) {
                let breaking = self.entries.get(at);
                return Err(Error::SequenceViolation {
                    expected: c.kinds.iter().map(ToString::to_string).collect(),
                    at_end: c.at_end,
                    index: at,
                    found: breaking.map(|e| e.id().to_string()).unwrap_or_default(),
                    reason: c.reason.clone(),
                    contributor: blame(
                        breaking.and_then(|e| self.source_of(&e.id())),
                        c.contributor.as_deref(),
                    ),
                });
            }
        }
        // R119 (R51): the clarification middleware is the last, whatever inserted after it.
        if let Some(at) = self
            .entries
            .iter()
            .position(|e| matches(e, &kinds::CLARIFICATION))
            && let Some(after) = self.entries.get(at + 1..).and_then(<[Entry]>::first)
        {
            return Err(Error::ClarificationNotLast {
                after: after.id().to_string(),
            });
        }
        Ok(Chain {
            entries: self.entries.into(),
            diagnostics: self.diagnostics.into(),
        })
    }
}

/// A resolved, immutable middleware order. Cheap to clone.
///
/// Before hooks run first to last, after hooks last to first, and wrap hooks
/// nest with the first entry outermost (see the crate docs).
#[derive(Clone)]
pub struct Chain {
    entries: Arc<[Entry]>,
    diagnostics: Arc<[PlacementDiagnostic]>,
}

impl Chain {
    /// The middlewares, outermost first.
    pub fn entries(&self) -> &[Entry] {
        &self.entries
    }

    /// The ids in order.
    pub fn ids(&self) -> Vec<MiddlewareId> {
        self.entries.iter().map(|e| e.id()).collect()
    }

    /// Number of middlewares.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether the chain is empty.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// How semantic placements were resolved, degraded ones included.
    pub fn diagnostics(&self) -> &[PlacementDiagnostic] {
        &self.diagnostics
    }
}

impl fmt::Debug for ChainBuilder {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.entries.iter().map(|e| e.id()))
            .finish()
    }
}

impl fmt::Debug for Chain {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(f, "Chain [")?;
        for (i, e) in self.entries.iter().enumerate() {
            writeln!(f, "  {i:2} {}", e.id())?;
        }
        write!(f, "]")
    }
}
