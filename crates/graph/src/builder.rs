//! [`StateGraph`]: declare channels, nodes and edges; `compile()` validates them.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use petgraph::visit::EdgeRef;
use serde::Serialize;
use serde::de::DeserializeOwned;

use crate::compiled::CompiledGraph;
use crate::error::{BoxError, BuildError};
use crate::ids::{END, NodeId, START};
use crate::schema::{ChannelSpec, ErasedSpec, Schema};
use crate::state::{Key, State};
use crate::types::{Command, Context, Goto, NodeError};

/// A node: an async function of the task input and its [`Context`].
#[async_trait]
pub trait Node: Send + Sync + 'static {
    /// Runs the node once.
    async fn run(&self, input: State, ctx: Context) -> Result<Command, NodeError>;
}

struct FnNode<F>(F);

#[async_trait]
impl<F, Fut, O> Node for FnNode<F>
where
    F: Fn(State, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, NodeError>> + Send + 'static,
    O: Into<Command> + 'static,
{
    async fn run(&self, input: State, ctx: Context) -> Result<Command, NodeError> {
        (self.0)(input, ctx).await.map(Into::into)
    }
}

/// Wraps an async closure `|input, ctx| async { Ok(update_or_command) }` as a [`Node`],
/// for [`StateGraph::add_node_with`].
pub fn node_fn<F, Fut, O>(f: F) -> Arc<dyn Node>
where
    F: Fn(State, Context) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<O, NodeError>> + Send + 'static,
    O: Into<Command> + 'static,
{
    Arc::new(FnNode(f))
}

/// A router (conditional edge): reads the source task's fresh view and picks the next nodes or packets.
pub type RouterFn = Arc<dyn Fn(&State) -> Vec<Goto> + Send + Sync>;

/// Retry policy of a node: failed attempts are re-run before the failure is recorded.
#[derive(Clone, Debug, PartialEq)]
pub struct RetryPolicy {
    /// Attempts in total, including the first (default 3).
    pub max_attempts: u32,
    /// Wait before the first retry (default 500 ms).
    pub initial_interval: Duration,
    /// Multiplier per retry (default 2.0).
    pub backoff_factor: f64,
    /// Upper bound of a wait (default 128 s).
    pub max_interval: Duration,
    /// Whether each wait gets a random extra of up to one second, still capped at
    /// `max_interval` (default `true`, as the reference's): retries of many threads that
    /// failed together then do not hit the failed service again in lockstep.
    pub jitter: bool,
    /// Which failures are retried; `None` (the default) is [`RetryOn::default_rule`].
    pub retry_on: Option<RetryOn>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self {
            max_attempts: 3,
            initial_interval: Duration::from_millis(500),
            backoff_factor: 2.0,
            max_interval: Duration::from_secs(128),
            jitter: true,
            retry_on: None,
        }
    }
}

impl RetryPolicy {
    /// The wait before retry number `retry` (1 for the first): `initial_interval ×
    /// backoff_factor^(retry − 1)`, capped at `max_interval`; with `jitter`, plus `unit`
    /// seconds (`unit` in [0, 1), drawn by the caller) and capped again.
    ///
    /// The policy is caller data: a negative factor gives a negative wait (no wait), an
    /// unbounded interval one beyond [`Duration`] (the bound itself); neither panics.
    pub(crate) fn wait(&self, retry: u32, unit: f64) -> Duration {
        let max = self.max_interval.as_secs_f64();
        let mut secs = (self.initial_interval.as_secs_f64()
            * self
                .backoff_factor
                .powi(i32::try_from(retry.saturating_sub(1)).unwrap_or(i32::MAX)))
        .min(max);
        if self.jitter {
            secs = (secs + unit.clamp(0.0, 1.0)).min(max);
        }
        Duration::try_from_secs_f64(secs).unwrap_or(if secs > 0.0 {
            self.max_interval
        } else {
            Duration::ZERO
        })
    }

    /// Whether a failed attempt with error `e` is retried (attempts left aside).
    pub(crate) fn retries(&self, e: &BoxError) -> bool {
        match &self.retry_on {
            Some(r) => (r.0)(e.as_ref()),
            None => RetryOn::default_rule(e.as_ref()),
        }
    }
}

/// The predicate inside a [`RetryOn`].
type RetryPredicate = dyn Fn(&(dyn std::error::Error + 'static)) -> bool + Send + Sync;

/// A predicate choosing which node failures a [`RetryPolicy`] retries.
#[derive(Clone)]
pub struct RetryOn(Arc<RetryPredicate>);

impl RetryOn {
    /// Retries the failures `f` accepts.
    pub fn new(
        f: impl Fn(&(dyn std::error::Error + 'static)) -> bool + Send + Sync + 'static,
    ) -> Self {
        Self(Arc::new(f))
    }

    /// The rule of a policy without a predicate: every failure is retried except this
    /// runtime's own deterministic errors coming up from a subgraph node (a recursion limit,
    /// an invalid update, a refused input, a reducer's or a build error, a value that does
    /// not (de)serialize, a missing checkpoint) and panics, which another attempt would only
    /// repeat; a node inside the subgraph that failed with an error of its own, or a store
    /// error, is retried. A failure passed up through nested subgraphs is judged by what the
    /// innermost node failed with, however deep; a subgraph run that failed and then failed
    /// to store what it left (`Error::RunFailedUnstored`) is a store error, retried. A node's
    /// own run of a thread that is busy (`Error::ThreadBusy`, most often its own) is not.
    pub fn default_rule(e: &(dyn std::error::Error + 'static)) -> bool {
        use crate::error::{Error, ErrorKind};
        let mut e = e;
        loop {
            match e.downcast_ref::<Error>() {
                // A subgraph's node failed: its own failure decides, not the wrapping.
                Some(Error::NodeFailed { source, .. }) => e = source.as_ref(),
                Some(g) => return g.kind() == ErrorKind::Storage,
                None => return true,
            }
        }
    }
}

impl std::fmt::Debug for RetryOn {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("RetryOn(..)")
    }
}

impl PartialEq for RetryOn {
    /// The same predicate (one `Arc`).
    fn eq(&self, other: &Self) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
}

/// Options of a node.
#[derive(Clone, Debug, Default)]
pub struct NodeOptions {
    /// Deferred: runs only when nothing else will (default false).
    pub defer: bool,
    /// Retry policy (default none).
    pub retry: Option<RetryPolicy>,
    /// Nodes this node may `goto` or `Send` to; used only for validation (default none): they
    /// make those nodes reachable. A goto is optional and adds to the node's edges, which fire
    /// whatever it returns, so destinations neither give the node a way to `__end__` nor take
    /// one away.
    pub destinations: Vec<NodeId>,
}

pub(crate) struct NodeDef {
    pub(crate) node: Arc<dyn Node>,
    pub(crate) options: NodeOptions,
}

pub(crate) struct RouterDef {
    pub(crate) f: RouterFn,
    /// Possible targets; `None` = any node.
    pub(crate) targets: Option<Vec<NodeId>>,
}

/// Builder of a graph over typed state channels.
///
/// ```
/// use antler_graph::{ChannelSpec, Key, StateGraph, Update, RunConfig, MemoryCheckpointer};
/// const N: Key<i64> = Key::from_static("n");
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// let mut g = StateGraph::new();
/// g.channel(&N, ChannelSpec::last_value()).unwrap();
/// g.add_node("inc", |s: antler_graph::State, _ctx| async move {
///     Ok(Update::new().set(&N, s.get(&N).copied().unwrap_or(0) + 1))
/// });
/// g.add_edge("__start__", "inc");
/// g.add_edge("inc", "__end__");
/// let graph = g.compile().unwrap().with_checkpointer(std::sync::Arc::new(MemoryCheckpointer::new()));
/// let out = graph.invoke(Update::new().set(&N, 41), &RunConfig::new("t1")).await.unwrap();
/// assert_eq!(out.values.get(&N), Some(&42));
/// # });
/// ```
#[derive(Default)]
pub struct StateGraph {
    pub(crate) schema: Schema,
    pub(crate) nodes: Vec<(NodeId, NodeDef)>,
    pub(crate) edges: Vec<(NodeId, NodeId)>,
    pub(crate) joins: Vec<(Vec<NodeId>, NodeId)>,
    pub(crate) routers: BTreeMap<NodeId, RouterDef>,
    pub(crate) interrupt_before: Vec<NodeId>,
    pub(crate) interrupt_after: Vec<NodeId>,
    /// The subgraph nodes' graphs: their schemas are checked against this graph's at compile
    /// time, and a namespaced state call is handed to them (see `CompiledGraph::get_state`).
    pub(crate) subgraphs: Vec<(NodeId, CompiledGraph)>,
    errors: Vec<BuildError>,
}

impl StateGraph {
    /// An empty graph.
    pub fn new() -> Self {
        Self::default()
    }

    /// Declares `key`'s channel; re-declaring it identically is allowed, differently is an error.
    ///
    /// # Errors
    /// A [`BuildError`] for a declaration that conflicts with an earlier one, a reserved or
    /// malformed name, or an invalid spec; `compile` reports it again, so a graph whose
    /// declaration failed never compiles, whether or not the caller looked at this result.
    pub fn channel<V, W>(
        &mut self,
        key: &Key<V, W>,
        spec: ChannelSpec<V, W>,
    ) -> Result<&mut Self, BuildError>
    where
        V: Serialize + DeserializeOwned + Send + Sync + 'static,
        W: Serialize + DeserializeOwned + Send + Sync + 'static,
    {
        if let Err(e) = self.schema.declare(ErasedSpec::new(key, spec)) {
            self.errors.push(e.clone());
            return Err(e);
        }
        Ok(self)
    }

    /// Adds a node from an async closure `|input, ctx| async { Ok(update_or_command) }`.
    pub fn add_node<F, Fut, O>(&mut self, name: impl Into<NodeId>, f: F) -> &mut Self
    where
        F: Fn(State, Context) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<O, NodeError>> + Send + 'static,
        O: Into<Command> + 'static,
    {
        self.add_node_with(name, Arc::new(FnNode(f)), NodeOptions::default())
    }

    /// Adds a node implementing [`Node`] with options.
    pub fn add_node_with(
        &mut self,
        name: impl Into<NodeId>,
        node: Arc<dyn Node>,
        options: NodeOptions,
    ) -> &mut Self {
        let name = name.into();
        let n = name.as_str();
        if n.starts_with("__") || n.contains('|') || n.contains(':') || n.is_empty() {
            self.errors
                .push(BuildError::ReservedName { node: n.to_owned() });
        } else if self.nodes.iter().any(|(id, _)| *id == name) {
            self.errors
                .push(BuildError::DuplicateNode { node: n.to_owned() });
        } else {
            self.nodes.push((name, NodeDef { node, options }));
        }
        self
    }

    /// Adds a compiled graph as a node. It runs in the parent's thread and store under its own
    /// checkpoint namespace (`<node>:<task id>`); it receives the parent's values of the keys both
    /// schemas declare and writes back its final values of those keys. Interrupts inside it
    /// interrupt the parent; resuming the parent resumes it.
    pub fn add_subgraph(&mut self, name: impl Into<NodeId>, graph: CompiledGraph) -> &mut Self {
        self.add_subgraph_with(name, graph, NodeOptions::default())
    }

    /// [`add_subgraph`](Self::add_subgraph) with node options (a retry policy, deferral).
    pub fn add_subgraph_with(
        &mut self,
        name: impl Into<NodeId>,
        graph: CompiledGraph,
        options: NodeOptions,
    ) -> &mut Self {
        let name = name.into();
        self.subgraphs.push((name.clone(), graph.clone()));
        self.add_node_with(
            name,
            Arc::new(crate::subgraph::SubgraphNode { graph }),
            options,
        )
    }

    /// A plain edge: after a task of `from`, `to` runs in the next step.
    pub fn add_edge(&mut self, from: impl Into<NodeId>, to: impl Into<NodeId>) -> &mut Self {
        self.edges.push((from.into(), to.into()));
        self
    }

    /// A join: `to` runs once every source ran since `to` last ran through this join.
    pub fn add_join<I, N>(&mut self, from: I, to: impl Into<NodeId>) -> &mut Self
    where
        I: IntoIterator<Item = N>,
        N: Into<NodeId>,
    {
        let from: Vec<NodeId> = from.into_iter().map(Into::into).collect();
        let to = to.into();
        if from.is_empty() {
            self.errors.push(BuildError::EmptyJoin {
                node: to.to_string(),
            });
        }
        self.joins.push((from, to));
        self
    }

    /// A router on `from`: after `from`'s task, `f` (fed the task's fresh view) picks what runs next.
    /// `targets` lists the possible targets for validation (`None`: any node).
    pub fn add_router<F>(
        &mut self,
        from: impl Into<NodeId>,
        targets: Option<Vec<NodeId>>,
        f: F,
    ) -> &mut Self
    where
        F: Fn(&State) -> Vec<Goto> + Send + Sync + 'static,
    {
        let from = from.into();
        match self.routers.entry(from) {
            std::collections::btree_map::Entry::Occupied(e) => {
                self.errors.push(BuildError::DuplicateRouter {
                    node: e.key().to_string(),
                });
            }
            std::collections::btree_map::Entry::Vacant(e) => {
                e.insert(RouterDef {
                    f: Arc::new(f),
                    targets,
                });
            }
        }
        self
    }

    /// Static breakpoint before these nodes (`"*"` = all).
    pub fn interrupt_before<I: IntoIterator<Item = N>, N: Into<NodeId>>(
        &mut self,
        nodes: I,
    ) -> &mut Self {
        self.interrupt_before
            .extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Static breakpoint after these nodes (`"*"` = all).
    pub fn interrupt_after<I: IntoIterator<Item = N>, N: Into<NodeId>>(
        &mut self,
        nodes: I,
    ) -> &mut Self {
        self.interrupt_after
            .extend(nodes.into_iter().map(Into::into));
        self
    }

    /// Validates the graph: unknown nodes, no entry, unreachable nodes, no path to `__end__`.
    pub fn compile(self) -> Result<CompiledGraph, BuildError> {
        if let Some(e) = self.errors.first() {
            return Err(e.clone());
        }
        self.validate()?;
        Ok(CompiledGraph::new(self))
    }

    fn validate(&self) -> Result<(), BuildError> {
        // A subgraph shares the keys both schemas declare, in one thread and one store: a
        // delta channel on one side and a full one (or another delta) on the other would mix
        // delta and full messages in one program, so it is refused here as a redeclaration
        // within one graph is (other channels may differ: the subgraph's reducers are its own).
        for (node, sub) in &self.subgraphs {
            for spec in sub.g.schema.specs() {
                if let Some(mine) = self.schema.get(spec.name())
                    && (mine.is_delta() || spec.is_delta())
                    && !mine.same_as(spec)
                {
                    return Err(BuildError::ChannelConflict {
                        channel: spec.name().to_owned(),
                        first: mine.describe(),
                        second: format!("{} in subgraph {node}", spec.describe()),
                    });
                }
                // The subgraph takes the parent's value of a shared key as a write and gives
                // back its own: a key whose value and write types differ on a side (a reducer
                // that appends one item) would fail every run of the subgraph.
                if let Some(mine) = self.schema.get(spec.name())
                    && mine.is_state()
                    && spec.is_state()
                    && !mine.crosses(spec)
                {
                    return Err(BuildError::ChannelConflict {
                        channel: spec.name().to_owned(),
                        first: mine.describe(),
                        second: format!(
                            "{} in subgraph {node} (a subgraph takes the parent's value as a write and returns its own: each side's value type must be the other's write type)",
                            spec.describe()
                        ),
                    });
                }
            }
        }
        let known: HashSet<&str> = self.nodes.iter().map(|(n, _)| n.as_str()).collect();
        // `allow`: the one reserved name the reference may name besides the nodes.
        let check = |n: &NodeId, ctx: &str, allow: Option<&str>| -> Result<(), BuildError> {
            if known.contains(n.as_str()) || Some(n.as_str()) == allow {
                Ok(())
            } else {
                Err(BuildError::UnknownNode {
                    node: n.to_string(),
                    context: ctx.to_owned(),
                })
            }
        };
        for (a, b) in &self.edges {
            check(a, &format!("edge {a} -> {b}"), Some(START))?;
            check(b, &format!("edge {a} -> {b}"), Some(END))?;
        }
        // A join's barrier channel is named by its sources and target; two different joins
        // whose names coincide (node names may hold `+`) would share one stored barrier.
        let mut join_names: HashMap<String, &Vec<NodeId>> = HashMap::new();
        for (srcs, to) in &self.joins {
            for s in srcs {
                check(s, &format!("join into {to}"), Some(START))?;
            }
            // A join into END, as the reference takes it, waits for nothing: each source simply
            // ends its branch (the compiled graph makes no barrier for it).
            check(to, "a join", Some(END))?;
            let name = join_channel_name(srcs, to);
            if let Some(other) = join_names.insert(name.clone(), srcs)
                && other != srcs
            {
                return Err(BuildError::ChannelConflict {
                    channel: name,
                    first: format!("the join of {other:?}"),
                    second: format!("the join of {srcs:?}"),
                });
            }
        }
        for (from, r) in &self.routers {
            check(from, "a router", Some(START))?;
            for t in r.targets.iter().flatten() {
                check(t, &format!("router of {from}"), Some(END))?;
            }
        }
        for (n, d) in &self.nodes {
            for t in &d.options.destinations {
                check(t, &format!("destinations of {n}"), Some(END))?;
            }
        }
        for n in self.interrupt_before.iter().chain(&self.interrupt_after) {
            check(n, "an interrupt list", Some("*"))?;
        }
        // Topology: node 0 = START, 1 = END, user nodes from 2 in declaration order. Each edge
        // says how it leads on, since the kinds differ in what a run must take: a node's edges
        // and joins always fire, a router picks among its targets, a goto is optional.
        let mut g: petgraph::graph::DiGraph<(), Link> = petgraph::graph::DiGraph::new();
        let start = g.add_node(());
        let end = g.add_node(());
        let mut idx: HashMap<&str, petgraph::graph::NodeIndex> =
            HashMap::from([(START, start), (END, end)]);
        let mut all = Vec::new();
        for (n, _) in &self.nodes {
            let i = g.add_node(());
            idx.insert(n.as_str(), i);
            all.push(i);
        }
        let id = |n: &NodeId| idx.get(n.as_str()).copied().unwrap_or(end);
        for (a, b) in &self.edges {
            g.update_edge(id(a), id(b), Link::Edge);
        }
        for (j, (srcs, to)) in self.joins.iter().enumerate() {
            for s in srcs {
                g.add_edge(id(s), id(to), Link::Join(j));
            }
        }
        for (from, r) in &self.routers {
            let targets: Vec<_> = match &r.targets {
                Some(ts) => ts.iter().map(&id).collect(),
                None => all.iter().copied().chain(std::iter::once(end)).collect(),
            };
            for t in targets {
                g.add_edge(id(from), t, Link::Router);
            }
        }
        for (n, d) in &self.nodes {
            for t in &d.options.destinations {
                g.add_edge(id(n), id(t), Link::Goto);
            }
        }
        if g.neighbors(start).next().is_none() {
            return Err(BuildError::NoEntry);
        }
        let reach = reached(&g, start, &self.joins, &id);
        let ends = ending(&g, end);
        // Unreachable nodes first: a node that never runs can look like a trap to the nodes
        // that lead to it (a join waiting on it never opens).
        for ((n, _), k) in self.nodes.iter().zip(&all) {
            if !reach.contains(k) {
                return Err(BuildError::Unreachable {
                    node: n.to_string(),
                });
            }
        }
        for ((n, _), k) in self.nodes.iter().zip(&all) {
            if !ends.contains(k) {
                return Err(BuildError::NoPathToEnd {
                    node: n.to_string(),
                });
            }
        }
        Ok(())
    }
}

/// How an edge of the validation graph leads from one node to the next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Link {
    /// A plain edge: it fires after every task of its source.
    Edge,
    /// A source of the join with this index into the builder's joins: its target runs once
    /// every source has run.
    Join(usize),
    /// A router's (declared or, undeclared, any) target: the router picks one or more.
    Router,
    /// A declared destination of a goto or `Send`: the node may return it, or nothing.
    Goto,
}

type Topology = petgraph::graph::DiGraph<(), Link>;
type Ix = petgraph::graph::NodeIndex;

/// The nodes a run can get to from START (a least fixed point): any edge, router target or
/// declared destination of a reached node, and a join's target once all its sources are
/// reached (before that its barrier never opens).
fn reached(
    g: &Topology,
    start: Ix,
    joins: &[(Vec<NodeId>, NodeId)],
    id: &impl Fn(&NodeId) -> Ix,
) -> BTreeSet<Ix> {
    let mut reach = BTreeSet::from([start]);
    let mut todo = vec![start];
    loop {
        while let Some(n) = todo.pop() {
            for e in g.edges(n) {
                if !matches!(e.weight(), Link::Join(_)) && reach.insert(e.target()) {
                    todo.push(e.target());
                }
            }
        }
        for (srcs, to) in joins {
            let to = id(to);
            if !reach.contains(&to) && srcs.iter().all(|s| reach.contains(&id(s))) {
                reach.insert(to);
                todo.push(to);
            }
        }
        if todo.is_empty() {
            return reach;
        }
    }
}

/// The nodes after whose task a run can still come to an end (a least fixed point): END; a
/// node whose edges and joins all lead to such nodes (they fire whatever the node returns, so
/// a router or goto to END does not stop an edge back into a cycle), and whose router, if it
/// has one, can pick such a node. A goto is optional, so declared destinations neither help
/// nor hinder, and a node with no way out ends the run.
fn ending(g: &Topology, end: Ix) -> BTreeSet<Ix> {
    let settles = |n: Ix, ends: &BTreeSet<Ix>| {
        // No router edge at all (no router, or one declared with no targets, which can only
        // return nothing) is no constraint; otherwise one of its targets must end.
        let (mut routes, mut can_pick) = (false, false);
        for e in g.edges(n) {
            match e.weight() {
                Link::Edge | Link::Join(_) if !ends.contains(&e.target()) => return false,
                Link::Router => {
                    routes = true;
                    can_pick |= ends.contains(&e.target());
                }
                _ => {}
            }
        }
        !routes || can_pick
    };
    let mut ends = BTreeSet::from([end]);
    loop {
        let more: Vec<Ix> = g
            .node_indices()
            .filter(|&n| !ends.contains(&n) && settles(n, &ends))
            .collect();
        if more.is_empty() {
            return ends;
        }
        ends.extend(more);
    }
}

/// The name of a join's barrier channel: `join:<sources joined by +>:<target>`.
pub(crate) fn join_channel_name(srcs: &[NodeId], to: &NodeId) -> String {
    format!(
        "join:{}:{to}",
        srcs.iter()
            .map(NodeId::as_str)
            .collect::<Vec<_>>()
            .join("+")
    )
}

#[cfg(test)]
mod retry_tests {
    use super::*;

    fn policy(jitter: bool) -> RetryPolicy {
        RetryPolicy {
            initial_interval: Duration::from_secs(1),
            backoff_factor: 2.0,
            max_interval: Duration::from_secs(5),
            jitter,
            ..RetryPolicy::default()
        }
    }

    /// Without jitter the waits are the capped backoff, whatever the random draw.
    #[test]
    fn waits_back_off_and_stop_at_the_bound() {
        let p = policy(false);
        let secs: Vec<f64> = (1..=5).map(|r| p.wait(r, 0.9).as_secs_f64()).collect();
        assert_eq!(secs, [1.0, 2.0, 4.0, 5.0, 5.0]);
    }

    /// Jitter adds the draw (up to a second) to each wait and caps the sum at the bound again,
    /// as the reference does; the default policy has it.
    #[test]
    fn jitter_adds_up_to_a_second_within_the_bound() {
        assert!(RetryPolicy::default().jitter);
        let p = policy(true);
        assert_eq!(p.wait(1, 0.0), Duration::from_secs(1));
        assert_eq!(p.wait(1, 0.25), Duration::from_millis(1250));
        assert_eq!(p.wait(2, 0.5), Duration::from_millis(2500));
        assert_eq!(p.wait(3, 0.75), Duration::from_millis(4750));
        assert_eq!(
            p.wait(4, 0.5),
            Duration::from_secs(5),
            "5.5 s is capped at 5 s"
        );
        // A draw outside [0, 1) (not one the runtime makes) still gives a bounded wait.
        assert_eq!(p.wait(1, 7.0), Duration::from_secs(2));
        assert_eq!(p.wait(1, -7.0), Duration::from_secs(1));
    }
}
