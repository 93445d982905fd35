//! Property tests of the super-step laws: the result never depends on task completion order.

use std::time::Duration;

use antler_graph::{RunConfig, State, Update};
use proptest::prelude::*;

use crate::common::{LOG, graph, log, memory};

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    /// BSP determinism: k parallel nodes finishing in any order (random delays on a paused clock)
    /// reach the reducer in task-path order (node-name order), and a join after them sees all writes.
    /// The nodes are declared and wired in a shuffled order, so name order is neither the
    /// declaration order nor the edge order.
    #[test]
    fn reducer_order_is_task_path_order_whatever_the_completion_order(
        (delays, order) in proptest::collection::vec(0u64..50, 2..7)
            .prop_flat_map(|d| {
                let order: Vec<usize> = (0..d.len()).collect();
                (Just(d), Just(order).prop_shuffle())
            })
    ) {
        let rt = tokio::runtime::Builder::new_current_thread().enable_time().start_paused(true).build().expect("runtime");
        let names: Vec<String> = (0..delays.len()).map(|i| format!("n{i}")).collect();
        let got = rt.block_on(async {
            let mut g = graph();
            for &i in &order {
                let (name, delay) = (&names[i], &delays[i]);
                let (owned, delay) = (name.clone(), *delay);
                g.add_node(name.as_str(), move |_s: State, _c| {
                    let name = owned.clone();
                    async move {
                        tokio::time::sleep(Duration::from_millis(delay)).await;
                        Ok(Update::new().set(&LOG, vec![name]))
                    }
                });
                g.add_edge("__start__", name.as_str());
            }
            g.add_join(names.iter().map(String::as_str), "join");
            g.add_node("join", |s: State, _c| async move {
                Ok(Update::new().set(&LOG, log(&[&format!("join saw {}", s.get(&LOG).map_or(0, Vec::len))])))
            });
            g.add_edge("join", "__end__");
            let out = memory(g).invoke(Update::new().set(&LOG, log(&["in"])), &RunConfig::new("t")).await.expect("runs");
            out.values.get(&LOG).cloned().unwrap_or_default()
        });
        let mut want = vec!["in".to_owned()];
        want.extend(names.iter().cloned());
        want.push(format!("join saw {}", names.len() + 1));
        prop_assert_eq!(got, want);
    }
}
