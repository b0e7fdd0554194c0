//! [`KStream::split`]: a stream split into branches by predicates (Kafka Streams'
//! `KStream.split` and `BranchedKStream`), with the branch node beside it in `node.rs`.
//!
//! Names follow Kafka's `BranchedKStreamImpl`: the split's processor is `KSTREAM-BRANCH-<n>`
//! (or the [`Named`] given), and each branch is a pass-through processor named the split's
//! name followed by the branch's own name ([`Branched::as_`]) or, unnamed, by its position
//! (`1`, `2`, … in the order added; `0` for the default branch). Each branch takes a counter
//! value, as in Kafka, so the nodes after a split are numbered as Kafka numbers them.

mod node;

use std::cell::RefCell;
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;

use crate::dsl::named::{check_name, node_name};
use crate::dsl::split::node::{Branch, Predicate};
use crate::dsl::{KStream, Named};
use crate::processor::node::{NodeRef, Passthrough};
use crate::topology::{BuiltNode, Erased, GraphBuilder, NodeFactory};

impl<K, V> KStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// Splits the stream into branches: each record goes to the first branch whose predicate
    /// holds for it, else to the default branch, if any (Kafka's `KStream.split`).
    ///
    /// ```
    /// use riffle::dsl::Branched;
    /// use riffle::{Consumed, Produced, Serdes, StreamsBuilder};
    /// let builder = StreamsBuilder::new();
    /// let branches = builder
    ///     .stream("numbers", Consumed::with(Serdes::string(), Serdes::i64()))
    ///     .split()
    ///     .branch_with(|_, v| *v < 0, Branched::as_("negative"))
    ///     .branch(|_, v| *v == 0)
    ///     .default_branch();
    /// let mut names: Vec<&String> = branches.keys().collect();
    /// names.sort();
    /// assert_eq!(names, ["KSTREAM-BRANCH-00000000010", "KSTREAM-BRANCH-00000000012", "KSTREAM-BRANCH-0000000001negative"]);
    /// branches["KSTREAM-BRANCH-0000000001negative"].to("negative", Produced::with(Serdes::string(), Serdes::i64()));
    /// ```
    pub fn split(&self) -> BranchedKStream<K, V> {
        self.split_as(None)
    }

    /// [`KStream::split`], the split's processor named `named` (and its branches after it).
    pub fn split_named(&self, named: Named) -> BranchedKStream<K, V> {
        self.split_as(Some(&named))
    }

    fn split_as(&self, named: Option<&Named>) -> BranchedKStream<K, V> {
        let mut g = self.graph.borrow_mut();
        let name = node_name(&mut g, "KSTREAM-BRANCH", named);
        let factory = branch_factory::<K, V>(Arc::from(Vec::new()));
        let node = g.add_named_processor::<K, V, K, V>(name.clone(), &[self.node], factory);
        BranchedKStream {
            graph: self.graph.clone(),
            node,
            name,
            repartition_required: self.repartition_required,
            predicates: Vec::new(),
            branches: HashMap::new(),
        }
    }
}

fn branch_factory<K: Clone + 'static, V: Clone + 'static>(
    predicates: Arc<[Predicate<K, V>]>,
) -> NodeFactory {
    Arc::new(move |ctx| {
        let node: NodeRef<K, V> = Rc::new(RefCell::new(Branch {
            predicates: predicates.clone(),
            forward: ctx.forward::<K, V>(),
        }));
        BuiltNode::plain(Box::new(node) as Erased)
    })
}

/// What a branch is named and what becomes of it (Kafka Streams' `Branched`).
pub struct Branched<K, V> {
    name: Option<String>,
    chain: Chain<K, V>,
}

type BranchFunction<K, V> = Box<dyn FnOnce(KStream<K, V>) -> KStream<K, V>>;
type BranchConsumer<K, V> = Box<dyn FnOnce(KStream<K, V>)>;

enum Chain<K, V> {
    /// The branch itself goes in the map.
    Keep,
    /// What the function makes of the branch goes in the map.
    Function(BranchFunction<K, V>),
    /// The consumer takes the branch; nothing goes in the map.
    Consumer(BranchConsumer<K, V>),
}

impl<K, V> Default for Branched<K, V> {
    fn default() -> Self {
        Branched {
            name: None,
            chain: Chain::Keep,
        }
    }
}

impl<K, V> Branched<K, V> {
    /// A branch named `name`: its processor, and its key in the map, is the split's name
    /// followed by `name` (Kafka's `Branched.as`).
    pub fn as_(name: impl Into<String>) -> Self {
        Branched {
            name: Some(name.into()),
            chain: Chain::Keep,
        }
    }

    /// The map holds what `f` makes of the branch (Kafka's `Branched.withFunction`).
    pub fn with_function(f: impl FnOnce(KStream<K, V>) -> KStream<K, V> + 'static) -> Self {
        Branched {
            name: None,
            chain: Chain::Function(Box::new(f)),
        }
    }

    /// `f` takes the branch, and the map does not hold it (Kafka's `Branched.withConsumer`).
    pub fn with_consumer(f: impl FnOnce(KStream<K, V>) + 'static) -> Self {
        Branched {
            name: None,
            chain: Chain::Consumer(Box::new(f)),
        }
    }

    /// This branch, named `name` (Kafka's `Branched.withName`).
    pub fn with_name(mut self, name: impl Into<String>) -> Self {
        self.name = Some(name.into());
        self
    }
}

/// A stream being split into branches (Kafka Streams' `BranchedKStream`): add branches with
/// [`branch`](Self::branch), then end with [`default_branch`](Self::default_branch) or
/// [`no_default_branch`](Self::no_default_branch), which return the branches by name.
pub struct BranchedKStream<K, V> {
    graph: Rc<RefCell<GraphBuilder>>,
    /// The split's node.
    node: usize,
    name: String,
    repartition_required: bool,
    predicates: Vec<Predicate<K, V>>,
    branches: HashMap<String, KStream<K, V>>,
}

impl<K, V> std::fmt::Debug for BranchedKStream<K, V> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("BranchedKStream")
            .field("name", &self.name)
            .field("branches", &self.predicates.len())
            .finish()
    }
}

impl<K, V> BranchedKStream<K, V>
where
    K: Clone + 'static,
    V: Clone + 'static,
{
    /// A branch of the records for which `predicate` holds and no earlier predicate did,
    /// named by its position.
    pub fn branch(self, predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static) -> Self {
        self.branch_with(predicate, Branched::default())
    }

    /// [`branch`](Self::branch), named and chained as `branched` says.
    pub fn branch_with(
        mut self,
        predicate: impl Fn(&K, &V) -> bool + Send + Sync + 'static,
        branched: Branched<K, V>,
    ) -> Self {
        self.predicates.push(Arc::new(predicate));
        // The split's node sends to the branches of its predicates, as they are now.
        let factory = branch_factory::<K, V>(Arc::from(self.predicates.clone()));
        self.graph.borrow_mut().nodes[self.node].factory = factory;
        let index = self.predicates.len();
        self.add_branch(branched, index);
        self
    }

    /// Ends the split with a default branch, of the records no predicate took, named by
    /// position `0`; returns the branches by name.
    pub fn default_branch(self) -> HashMap<String, KStream<K, V>> {
        self.default_branch_with(Branched::default())
    }

    /// [`default_branch`](Self::default_branch), named and chained as `branched` says.
    pub fn default_branch_with(
        mut self,
        branched: Branched<K, V>,
    ) -> HashMap<String, KStream<K, V>> {
        self.add_branch(branched, 0);
        self.branches
    }

    /// Ends the split without a default branch: records no predicate takes are dropped.
    /// Returns the branches by name.
    pub fn no_default_branch(self) -> HashMap<String, KStream<K, V>> {
        self.branches
    }

    fn add_branch(&mut self, branched: Branched<K, V>, index: usize) {
        let name = match &branched.name {
            Some(suffix) => format!("{}{suffix}", self.name),
            None => format!("{}{index}", self.name),
        };
        let node = {
            let mut g = self.graph.borrow_mut();
            // The counter moves for each branch, as Kafka's `newProcessorName` does.
            g.next_name(&name);
            check_name(&mut g, &name);
            let factory: NodeFactory = Arc::new(|ctx| {
                let node: NodeRef<K, V> = Rc::new(RefCell::new(Passthrough {
                    forward: ctx.forward::<K, V>(),
                }));
                BuiltNode::plain(Box::new(node) as Erased)
            });
            g.add_named_processor::<K, V, K, V>(name.clone(), &[self.node], factory)
        };
        let stream = KStream::at(self.graph.clone(), node, self.repartition_required);
        match branched.chain {
            Chain::Keep => {
                self.branches.insert(name, stream);
            }
            Chain::Function(f) => {
                self.branches.insert(name, f(stream));
            }
            Chain::Consumer(f) => f(stream),
        }
    }
}
