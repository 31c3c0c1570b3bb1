//! Building a scheduler: the tree, each node's policy and queue, the classifier, the shaper.
//!
//! [`TreeBuilder`] is the programmatic way; policy files ([`crate::config`]) compile to it. It
//! validates everything a tree needs (one root, leaves without children, policies where they
//! make sense, depth, rules that name leaves, capacities) and picks each node's queue: as
//! configured, or `auto` by Eiffel's decision tree (Fig. 4.20) from the policy's rank shape:
//!
//! | ranks | queue |
//! |---|---|
//! | a few levels (at most 1024) | `ffs`, one bucket per level |
//! | a fixed range | `hffs`, up to 65 536 buckets |
//! | a moving range | `cffs`, 4 096 buckets per range |
//! | a dense moving range over more than 65 536 ranks (LSTF) | `circular_approx` (approximate gradient, alpha 16) at an internal node; `cffs` at a leaf |
//!
//! Two choices come before the table: an internal node of at most 8 children whose ranks span
//! more than a few levels gets an exact `binary_heap` (Fig. 4.20 sizes a queue for many
//! members; for a few, a heap is a few compares deep and orders them exactly, where a bucket
//! index costs more and a bucket may hold two children's tags), and so does an internal
//! hClock or HTB node's reservation queue, whatever its number of children (see `build`).
//!
//! Fig. 4.20 asks first how many levels there are: below about a thousand the choice matters
//! little, and the approximate gradient pays off only over many dense levels. So a dense moving
//! range of at most 65 536 ranks (DRR's and fq's rounds: about a hundred) gets `cffs` too, one
//! bucket per rank and exact order, where the approximate gradient's search costs more (fq
//! over what were then its 48 ranks: about a seventh less time per packet with `cffs`, `sluice
//! bench sched`, fq_pacing at 1e3 flows).
//!
//! A leaf that ranks each packet by a time (EDF, LSTF) never gets an approximate queue,
//! and is refused one: it files a flow's packets in successive buckets, which an approximate
//! queue may serve out of order. (An internal node's entries name children, each of which
//! sends its own first packet, so order within a flow holds there.)
//!
//! The shaper is a timing wheel unless configured otherwise.

use crate::classify::{Classifier, Match, Rule};
use crate::policy::{
    AnyPolicy, MAX_WEIGHT, MemberCfg, Mode, Policy, PolicyKind, RankShape, ShapeCx,
};
use crate::tree::{MAX_DEPTH, Node, NodeId, NodeStats, Scheduler, Uses};
use crate::units::Rate;
use sluice_queue::approx_gradient::Window;
use sluice_queue::{ConfigError, Overflow, QueueKind, QueueSpec};

/// Most packets (and flows) a scheduler holds: 2^24. Every per-packet node reserves room for all
/// of them, so larger would mean gigabytes of reservations per node.
pub const MAX_PACKETS: usize = 1 << 24;

/// Which queue a node uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum QueueChoice {
    /// Chosen from the policy's rank shape (see the module note).
    #[default]
    Auto,
    /// This structure; buckets and granularity derived from the rank shape unless given.
    Kind {
        /// The structure.
        kind: QueueKind,
        /// Buckets (per range for circular queues).
        buckets: Option<usize>,
        /// Rank units per bucket.
        granularity: Option<u64>,
    },
}

/// The one shaper.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShaperConfig {
    /// Structure (a timing wheel; others for comparison).
    pub kind: QueueKind,
    /// Slot width, ns.
    pub slot_ns: u64,
    /// Slots; horizon = slots * slot_ns.
    pub slots: usize,
    /// A packet whose flow's gate is already beyond the horizon: accept it (`Clamp`: it waits
    /// outside the wheel, in order of time, until it is within the horizon) or reject it (hard
    /// limits).
    pub beyond_horizon: Overflow,
}

impl Default for ShaperConfig {
    /// 1 024 ns slots, 2^20 of them: a 1.07 s horizon.
    fn default() -> Self {
        ShaperConfig {
            kind: QueueKind::TimingWheel,
            slot_ns: 1024,
            slots: 1 << 20,
            beyond_horizon: Overflow::Clamp,
        }
    }
}

impl ShaperConfig {
    /// The horizon in ns.
    pub fn horizon_ns(&self) -> u64 {
        self.slot_ns.saturating_mul(self.slots as u64)
    }
}

/// Scheduler-wide configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SchedConfig {
    /// Most packets held at once (queued and shaped).
    pub capacity: usize,
    /// Flow table slots.
    pub flows: usize,
    /// Largest packet expected, bytes (GSO frames: 64 KiB). It sizes the rank ranges of the
    /// fair-queuing policies, which keep packets up to twice as long in exact order (GSO
    /// frames counted in wire bytes run a few percent over their 64 KiB); longer ones are
    /// still accepted, filed at the edge of their queue's range and counted
    /// ([`crate::SchedStats::ranks_clamped`]), and their fair share is then approximate.
    pub max_packet: u32,
    /// The shaper.
    pub shaper: ShaperConfig,
}

impl Default for SchedConfig {
    fn default() -> Self {
        SchedConfig {
            capacity: 65_536,
            flows: 65_536,
            max_packet: 65_536,
            shaper: ShaperConfig::default(),
        }
    }
}

/// One node as the builder is told it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NodeSpec {
    /// Unique name.
    pub name: String,
    /// Its policy.
    pub policy: PolicyKind,
    /// Its queue.
    pub queue: QueueChoice,
    /// Rate limit on everything leaving this node (HTB: the ceil).
    pub rate: Option<Rate>,
    /// Bytes the rate limit lets through at once after idle.
    pub burst: u64,
    /// How its parent sees it: weight, priority, quantum, reservation.
    pub member: MemberCfg,
    /// Leaves: how the leaf sees each of its flows.
    pub flows: MemberCfg,
    /// Leaves: a pacing rate for every flow, and its cap: a packet's own pacing rate applies
    /// below it ([`crate::gate::capped`]).
    pub flow_rate: Option<Rate>,
    /// Leaves: the flows' burst allowance.
    pub flow_burst: u64,
}

impl NodeSpec {
    /// A node with this name and policy and default everything else.
    pub fn new(name: &str, policy: PolicyKind) -> Self {
        NodeSpec {
            name: name.to_string(),
            policy,
            queue: QueueChoice::Auto,
            rate: None,
            burst: 0,
            member: MemberCfg::default(),
            flows: MemberCfg::default(),
            flow_rate: None,
            flow_burst: 0,
        }
    }

    /// Builder-style: a rate limit with burst.
    pub fn rate(mut self, rate: Rate, burst: u64) -> Self {
        self.rate = Some(rate);
        self.burst = burst;
        self
    }

    /// Builder-style: weight in the parent.
    pub fn weight(mut self, weight: u32) -> Self {
        self.member.weight = weight;
        self
    }

    /// Builder-style: strict priority in the parent.
    pub fn priority(mut self, priority: u8) -> Self {
        self.member.priority = Some(priority);
        self
    }

    /// Builder-style: reservation (hClock) or guaranteed rate (HTB) in the parent.
    pub fn reservation(mut self, rate: Rate) -> Self {
        self.member.reservation = Some(rate);
        self
    }

    /// Builder-style: the queue.
    pub fn queue(mut self, queue: QueueChoice) -> Self {
        self.queue = queue;
        self
    }
}

/// Most buckets the queues of all nodes may have together: 2^28, a few GiB of bucket lists
/// and bitmaps. Bucket arrays are filled when they are built, and Linux grants memory on
/// request, so without a bound a file asking for 2^24 buckets on each of hundreds of nodes
/// ran the machine out of memory instead of failing to build. A moving range (cFFS) counts
/// both its ranges. `auto` gives a node at most 65 536 buckets (LQF's lengths): 4096 such
/// nodes fit, or 32 767 nodes of EDF's two ranges of 4096.
pub const MAX_TREE_BUCKETS: usize = 1 << 28;

/// Why a tree cannot be built.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BuildError {
    /// No root was given.
    #[error("the tree has no root")]
    NoRoot,
    /// Two nodes share a name.
    #[error("two nodes are named `{0}`")]
    DuplicateName(String),
    /// A policy placed where it cannot work.
    #[error("node `{node}`: policy `{policy}` {why}")]
    Misplaced {
        /// The node.
        node: String,
        /// Its policy.
        policy: PolicyKind,
        /// What is wrong.
        why: &'static str,
    },
    /// The tree is too deep.
    #[error("node `{0}` is deeper than the {MAX_DEPTH} levels supported")]
    TooDeep(String),
    /// Too many nodes.
    #[error("{0} nodes is more than the 65535 supported")]
    TooManyNodes(usize),
    /// A rule names a node that is not a leaf.
    #[error("a classifier rule sends packets to `{0}`, which is not a leaf")]
    RuleToInner(String),
    /// A value outside its range.
    #[error("{0}")]
    Invalid(String),
    /// A node's queue cannot be built.
    #[error("node `{node}`: queue: {source}")]
    Queue {
        /// The node.
        node: String,
        /// Why.
        source: ConfigError,
    },
    /// A node's queue has a fixed range of ranks and its policy's ranks move forward without
    /// bound ([`PolicyKind::moving_ranks`]).
    #[error(
        "node `{node}`: queue `{kind}` has a fixed range of ranks, and policy `{policy}` ranks \
         by values that grow without bound (past the range its order would be lost)"
    )]
    QueueRange {
        /// The node.
        node: String,
        /// Its policy.
        policy: PolicyKind,
        /// The queue kind asked for.
        kind: QueueKind,
    },
    /// A leaf that ranks each packet by a time (EDF, LSTF) has an approximate queue,
    /// which may serve a flow's later packets before its earlier ones.
    #[error(
        "node `{node}`: queue `{kind}` is approximate, and leaf policy `{policy}` ranks each \
         packet by a time: a flow's later packets could leave before its earlier ones"
    )]
    ApproximateLeaf {
        /// The node.
        node: String,
        /// Its policy.
        policy: PolicyKind,
        /// The queue kind asked for.
        kind: QueueKind,
    },
    /// A node's queue is a timing wheel: its front follows the time it pops at, which a node
    /// never passes to its queue (and a per-member node never pops), so ranks past its first
    /// horizon would all be clamped into its last slot. The wheel is the shaper's.
    #[error(
        "node `{node}`: queue `timing_wheel` is the shaper's; a node's ranks would pile into \
         its last slot once they pass its first horizon"
    )]
    NodeWheel {
        /// The node.
        node: String,
    },
    /// The shaper cannot be built.
    #[error("shaper: {0}")]
    Shaper(ConfigError),
    /// The shaper's structure cannot order release times: only a timing wheel or an exact
    /// structure can (a fixed range is outgrown; a moving range files a release below its
    /// minimum behind what it holds).
    #[error("shaper: `{0}` {why}", why = shaper_misfit(*.0))]
    ShaperKind(QueueKind),
    /// The nodes' queues up to `node` have more buckets in all than [`MAX_TREE_BUCKETS`].
    #[error(
        "node `{node}`: the queues up to it have {buckets} buckets in all, more than the \
         {MAX_TREE_BUCKETS} supported"
    )]
    TooManyBuckets {
        /// The node whose queue crossed the bound.
        node: String,
        /// The buckets counted so far.
        buckets: usize,
    },
    /// The packet, flow or record tables cannot be reserved.
    #[error("cannot reserve memory for {0} packets and flows; lower `capacity` or `flows`")]
    OutOfMemory(usize),
}

/// One node, validated, with everything needed to build it.
pub(crate) struct NodePlan {
    pub name: String,
    pub parent: Option<NodeId>,
    pub slot: u32,
    pub children: Vec<NodeId>,
    pub leaf: bool,
    pub mode: Mode,
    pub dual: bool,
    pub policy: crate::policy::AnyPolicy,
    pub queues: Vec<QueueSpec>,
    /// The rank units each queue's ranks spread over (the policy's rank shape).
    pub spans: Vec<u64>,
    pub gate: Option<crate::gate::Gate>,
    pub member_cfg: Vec<MemberCfg>,
    pub flow_rate: Option<(Rate, u64)>,
    /// Whether a reservation slower than its reservation queue was sized for widens that
    /// queue's buckets ([`widened_reservation_queue`]): a dual node's bucketed reservation
    /// queue whose granularity the builder chose.
    pub widens: bool,
}

/// A validated tree.
pub(crate) struct Plan {
    pub nodes: Vec<NodePlan>,
    pub classifier: Classifier,
    pub capacity: usize,
    pub flows: usize,
    pub shaper: QueueSpec,
    pub horizon: Horizon,
    pub beyond_horizon: Overflow,
    /// Notes on settings dropped because they cannot take effect ([`ignored_settings`]).
    pub ignored: Vec<String>,
    /// The largest packet, bytes.
    pub max_packet: u32,
}

/// How far ahead the one shaper holds a release.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Horizon {
    /// `slots * slot_ns` for a timing wheel (below `u64::MAX` unless it spans every time);
    /// `u64::MAX` for an exact structure (any time).
    pub ns: u64,
    /// The wheel's slot.
    pub slot_ns: u64,
}

impl Horizon {
    /// The latest release the shaper takes at `now`. A wheel's window starts at the start of
    /// now's slot, so this is up to a slot short of `now + ns`: a release clamped only to that
    /// would be clamped again by the wheel, one slot earlier.
    pub fn latest(&self, now: u64) -> u64 {
        if self.ns == u64::MAX {
            return u64::MAX;
        }
        self.slot_start(now).saturating_add(self.ns - 1)
    }

    /// The start of the shaper's slot that holds `t`: when a release at `t` is due.
    pub fn slot_start(&self, t: u64) -> u64 {
        t - t % self.slot_ns.max(1)
    }

    /// [`Horizon::latest`] if `at` is later than that, else `None`. Without a division for
    /// the releases well inside the window (nearly all of them): whatever now's phase in its
    /// slot, the window reaches at least `now + ns - slot`.
    #[inline]
    pub fn beyond(&self, at: u64, now: u64) -> Option<u64> {
        let sure = now.saturating_add(self.ns.saturating_sub(self.slot_ns.max(1)));
        if at <= sure {
            return None;
        }
        let latest = self.latest(now);
        (at > latest).then_some(latest)
    }
}

/// Builds a [`Scheduler`]; see the module note.
#[derive(Clone, Debug)]
pub struct TreeBuilder {
    cfg: SchedConfig,
    specs: Vec<(NodeSpec, Option<NodeId>)>,
    rules: Vec<Rule>,
    default_leaf: Option<NodeId>,
}

impl TreeBuilder {
    /// A builder with this configuration.
    pub fn new(cfg: SchedConfig) -> Self {
        TreeBuilder {
            cfg,
            specs: Vec::new(),
            rules: Vec::new(),
            default_leaf: None,
        }
    }

    /// The root; call first.
    pub fn root(&mut self, spec: NodeSpec) -> NodeId {
        self.specs.push((spec, None));
        (self.specs.len() - 1) as NodeId
    }

    /// A child of `parent`.
    pub fn child(&mut self, parent: NodeId, spec: NodeSpec) -> NodeId {
        self.specs.push((spec, Some(parent)));
        (self.specs.len() - 1) as NodeId
    }

    /// Send packets matching all of `all` to `leaf` (rules are tried in the order added).
    pub fn rule(&mut self, all: Vec<Match>, leaf: NodeId) {
        self.rules.push(Rule { all, leaf });
    }

    /// Send packets no rule matches to `leaf` (without one they are rejected).
    pub fn default_leaf(&mut self, leaf: NodeId) {
        self.default_leaf = Some(leaf);
    }

    fn check_member(name: &str, m: &MemberCfg) -> Result<(), BuildError> {
        if m.weight == 0 || m.weight > MAX_WEIGHT {
            return Err(BuildError::Invalid(format!(
                "node `{name}`: weight {} is outside 1..={MAX_WEIGHT}",
                m.weight
            )));
        }
        if m.quantum == 0 {
            return Err(BuildError::Invalid(format!(
                "node `{name}`: quantum must be at least 1 byte"
            )));
        }
        Ok(())
    }

    /// Validate and derive every node's parts (shared by the scheduler and the oracle).
    pub(crate) fn plan(&self) -> Result<Plan, BuildError> {
        let n = self.specs.len();
        if n == 0 || self.specs[0].1.is_some() || self.specs.iter().skip(1).any(|s| s.1.is_none()) {
            return Err(BuildError::NoRoot);
        }
        if n > u16::MAX as usize {
            return Err(BuildError::TooManyNodes(n));
        }
        if self.cfg.capacity == 0 || self.cfg.flows == 0 {
            return Err(BuildError::Invalid(
                "capacity and flows must be at least 1".into(),
            ));
        }
        if self.cfg.capacity > MAX_PACKETS || self.cfg.flows > MAX_PACKETS {
            return Err(BuildError::Invalid(
                "capacity and flows must be at most 2^24".into(),
            ));
        }
        if self.cfg.max_packet == 0 {
            return Err(BuildError::Invalid(
                "max_packet must be at least 1 byte".into(),
            ));
        }
        // Linear in the nodes (a policy file may name tens of thousands): names in a set,
        // each node's slot in its parent and its depth as it is added, parents coming first.
        let mut children: Vec<Vec<NodeId>> = vec![Vec::new(); n];
        let mut slots = vec![0u32; n];
        let mut depth = vec![1usize; n];
        let mut names = std::collections::HashSet::with_capacity(n);
        for (i, (spec, parent)) in self.specs.iter().enumerate() {
            if !names.insert(spec.name.as_str()) {
                return Err(BuildError::DuplicateName(spec.name.clone()));
            }
            if let Some(p) = parent {
                let p = *p as usize;
                if p >= i {
                    return Err(BuildError::Invalid(format!(
                        "node `{}`: its parent must be built before it",
                        spec.name
                    )));
                }
                slots[i] = children[p].len() as u32;
                children[p].push(i as NodeId);
                depth[i] = depth[p] + 1;
                if depth[i] > MAX_DEPTH {
                    return Err(BuildError::TooDeep(spec.name.clone()));
                }
            }
            Self::check_member(&spec.name, &spec.member)?;
            Self::check_member(&spec.name, &spec.flows)?;
            // As in a policy file: a larger burst lets a gate send gigabytes at once, and one
            // whose time at a low rate overflows never refills (a flow kept for ever).
            let max = crate::config::MAX_SIZE;
            if spec.burst > max || spec.flow_burst > max {
                return Err(BuildError::Invalid(format!(
                    "node `{}`: a burst of at most {max} bytes",
                    spec.name
                )));
            }
        }
        for (i, r) in self.rules.iter().enumerate() {
            if let Some(e) = r.all.iter().find_map(|m| m.check().err()) {
                return Err(BuildError::Invalid(format!(
                    "classifier rule {}: {e}",
                    i + 1
                )));
            }
            if r.leaf as usize >= n || !children[r.leaf as usize].is_empty() {
                let name = self
                    .specs
                    .get(r.leaf as usize)
                    .map_or("?".to_string(), |s| s.0.name.clone());
                return Err(BuildError::RuleToInner(name));
            }
        }
        if let Some(d) = self.default_leaf {
            if d as usize >= n || !children[d as usize].is_empty() {
                let name = self
                    .specs
                    .get(d as usize)
                    .map_or("?".to_string(), |s| s.0.name.clone());
                return Err(BuildError::RuleToInner(name));
            }
        }

        let mut nodes = Vec::with_capacity(n);
        let mut ignored = Vec::new();
        let mut buckets = 0usize;
        for (i, (spec, parent)) in self.specs.iter().enumerate() {
            let leaf = children[i].is_empty();
            let kind = spec.policy;
            if leaf && kind.internal_only() {
                return Err(BuildError::Misplaced {
                    node: spec.name.clone(),
                    policy: kind,
                    why: "orders child classes and cannot be a leaf",
                });
            }
            if !leaf && kind.leaf_only() {
                return Err(BuildError::Misplaced {
                    node: spec.name.clone(),
                    policy: kind,
                    why: "orders flows and must be a leaf",
                });
            }
            let mut policy = kind.build();
            policy.set_param("capacity", self.cfg.capacity as u64);
            policy.set_param("max_packet", u64::from(self.cfg.max_packet));
            let mode = policy.mode(leaf);
            ignored_settings(spec, parent.is_none(), leaf, &policy, &mut ignored);
            let member_cfg: Vec<MemberCfg> = if leaf {
                vec![spec.flows]
            } else {
                children[i]
                    .iter()
                    .map(|&c| self.specs[c as usize].0.member)
                    .collect()
            };
            let cx = shape_cx(&member_cfg, self.cfg.max_packet, self.cfg.capacity);
            let entries = match (mode, leaf) {
                (Mode::PerPacket, _) => self.cfg.capacity,
                (Mode::PerMember, true) => self.cfg.flows.min(self.cfg.capacity),
                (Mode::PerMember, false) => children[i].len(),
            };
            let queue_count = if policy.dual() { 2 } else { 1 };
            let mut queues = Vec::with_capacity(queue_count);
            let mut spans = Vec::with_capacity(queue_count);
            for which in 0..queue_count {
                let shape = policy.shape(&cx, which);
                // Under `auto`, an internal node's reservation queue (hClock, HTB) is exact: its
                // span must hold the next tag of the slowest reservation, so a 1 kbit/s child
                // beside 500 Mbit/s ones made buckets of half a second, where a due child
                // waited behind one that was not (500 Mbit/s reserved got 485). A node has few
                // children, for which a heap costs little; a leaf's flows share one
                // reservation, whose tags a moving range orders well. Every queue of a node of
                // at most [`FEW_CHILDREN`] children is exact too, unless its ranks are a few
                // levels (an FFS of one bucket per level is exact already): their tags in
                // order, not in buckets, for a few compares, fewer than a bucket index costs.
                let few_children = mode == Mode::PerMember
                    && !leaf
                    && entries <= FEW_CHILDREN
                    && !matches!(shape, RankShape::Levels(l) if l <= FEW_LEVELS);
                let choice = if spec.queue == QueueChoice::Auto
                    && !leaf
                    && ((policy.dual() && which == 0) || few_children)
                {
                    QueueChoice::Kind {
                        kind: QueueKind::BinaryHeap,
                        buckets: None,
                        granularity: None,
                    }
                } else {
                    spec.queue
                };
                let mut qs = node_queue_spec(choice, shape, entries);
                // A leaf that ranks each packet by a time (EDF, LSTF) files a flow's
                // packets in successive buckets, and an approximate queue may serve a later
                // bucket before the first (up to `error_bound` buckets past it): a flow's
                // packets would leave out of order (LSTF's leaf on `auto`'s approximate queue
                // did, 4 ms buckets apart). So `auto` gives such a leaf cFFS, whose buckets
                // leave in order, and an approximate queue asked for there is refused. At an
                // internal node an entry names a child, which sends its own first packet.
                if qs.kind.approximate()
                    && leaf
                    && mode == Mode::PerPacket
                    && matches!(shape, RankShape::Moving { .. })
                {
                    if spec.queue != QueueChoice::Auto {
                        return Err(BuildError::ApproximateLeaf {
                            node: spec.name.clone(),
                            policy: kind,
                            kind: qs.kind,
                        });
                    }
                    let cffs = QueueChoice::Kind {
                        kind: QueueKind::Cffs,
                        buckets: None,
                        granularity: None,
                    };
                    qs = node_queue_spec(cffs, shape, entries);
                }
                if qs.kind == QueueKind::TimingWheel {
                    return Err(BuildError::NodeWheel {
                        node: spec.name.clone(),
                    });
                }
                if !qs.kind.exact() {
                    // A moving range keeps two ranges of buckets.
                    let ranges = if qs.kind.moving_range() { 2 } else { 1 };
                    buckets = buckets.saturating_add(qs.buckets.saturating_mul(ranges));
                    if buckets > MAX_TREE_BUCKETS {
                        return Err(BuildError::TooManyBuckets {
                            node: spec.name.clone(),
                            buckets,
                        });
                    }
                }
                if matches!(shape, RankShape::Moving { .. })
                    && !qs.kind.moving_range()
                    && !qs.kind.exact()
                {
                    return Err(BuildError::QueueRange {
                        node: spec.name.clone(),
                        policy: kind,
                        kind: qs.kind,
                    });
                }
                queues.push(qs);
                spans.push(shape.span());
            }
            if queues.iter().all(|q| q.kind.exact()) {
                policy.exact_queues();
            }
            let granularity_given = matches!(
                spec.queue,
                QueueChoice::Kind {
                    granularity: Some(_),
                    ..
                }
            );
            let widens = policy.dual() && !queues[0].kind.exact() && !granularity_given;
            nodes.push(NodePlan {
                name: spec.name.clone(),
                parent: *parent,
                slot: slots[i],
                children: children[i].clone(),
                leaf,
                mode,
                dual: policy.dual(),
                policy,
                queues,
                spans,
                gate: spec.rate.map(|r| crate::gate::Gate::new(r, spec.burst)),
                member_cfg,
                flow_rate: spec.flow_rate.map(|r| (r, spec.flow_burst)),
                widens,
            });
        }
        // Build each queue once here, once all are known to fit together ([`MAX_TREE_BUCKETS`]),
        // so that a bad queue is a build error, not a later panic.
        for node in &nodes {
            for qs in &node.queues {
                qs.build::<u32>().map_err(|source| BuildError::Queue {
                    node: node.name.clone(),
                    source,
                })?;
            }
        }
        let s = self.cfg.shaper;
        if s.kind != QueueKind::TimingWheel && !s.kind.exact() {
            return Err(BuildError::ShaperKind(s.kind));
        }
        // Releases beyond the horizon are brought in by a wake filed at the horizon's end:
        // with one slot, that is the slot it leaves, again and again.
        if s.kind == QueueKind::TimingWheel && s.slots < 2 {
            return Err(BuildError::Invalid(
                "the shaper's timing wheel needs at least 2 slots".into(),
            ));
        }
        if s.kind.exact() && s.beyond_horizon == Overflow::Reject {
            ignored.push(format!(
                "the shaper: `beyond_horizon = \"reject\"` has no effect: its queue `{}` is \
                 exact and has no horizon, so no release is ever beyond it",
                s.kind
            ));
        }
        let wheel = ShaperConfig::default();
        if s.kind.exact() && (s.slot_ns, s.slots) != (wheel.slot_ns, wheel.slots) {
            ignored.push(format!(
                "the shaper: `slot` and `horizon` have no effect: its queue `{}` is exact and \
                 has no slots, so it holds a release for any time",
                s.kind
            ));
        }
        let mut shaper = QueueSpec::new(s.kind, s.slots, s.slot_ns, self.cfg.capacity);
        shaper.overflow = Overflow::Clamp;
        shaper.build::<u32>().map_err(BuildError::Shaper)?;
        // The wheel holds `slots * slot_ns` ahead of the present; an exact structure, any time.
        // u64::MAX stands for the latter, and for a wheel that spans every u64 time from any
        // front (2^64 ns or more). A wheel of exactly u64::MAX ns (3 slots of u64::MAX / 3)
        // does not: from time 0 its window ends one slot short of u64::MAX, where it clamped a
        // release at the end of time (a saturated stamp), 195 years early. Its horizon is a
        // nanosecond shorter: such a release waits beyond it until the window reaches it.
        let horizon = Horizon {
            ns: if s.kind.exact() {
                u64::MAX
            } else {
                match s.slot_ns.checked_mul(s.slots as u64) {
                    Some(ns) => ns.clamp(1, u64::MAX - 1),
                    None => u64::MAX,
                }
            },
            slot_ns: s.slot_ns,
        };
        Ok(Plan {
            nodes,
            classifier: Classifier {
                rules: self.rules.clone(),
                default: self.default_leaf,
            },
            capacity: self.cfg.capacity,
            flows: self.cfg.flows,
            shaper,
            horizon,
            beyond_horizon: s.beyond_horizon,
            ignored,
            max_packet: self.cfg.max_packet,
        })
    }

    /// Validate and build the scheduler.
    pub fn build(&self) -> Result<Scheduler, BuildError> {
        let plan = self.plan()?;
        let nodes = plan
            .nodes
            .into_iter()
            .map(|p| {
                // Each queue built alone in `plan`; all of them together may still not fit.
                let queues = p
                    .queues
                    .iter()
                    .map(|q| q.build::<u32>())
                    .collect::<Result<Vec<_>, _>>()
                    .map_err(|source| BuildError::Queue {
                        node: p.name.clone(),
                        source,
                    });
                queues.map(|queues| Node {
                    name: p.name,
                    parent: p.parent,
                    slot: p.slot,
                    members: vec![Default::default(); if p.leaf { 0 } else { p.children.len() }],
                    children: p.children,
                    leaf: p.leaf,
                    mode: p.mode,
                    dual: p.dual,
                    policy: p.policy,
                    queues,
                    first_seen: 0,
                    queue_specs: p.queues,
                    rank_spans: p.spans,
                    gate: p.gate,
                    line: Default::default(),
                    member_cfg: p.member_cfg,
                    flow_rate: p.flow_rate,
                    widens: p.widens,
                    stats: NodeStats::default(),
                })
            })
            .collect::<Result<Vec<_>, _>>()?;
        let shaper = plan.shaper.build::<u32>().map_err(BuildError::Shaper)?;
        Scheduler::from_parts(
            nodes,
            plan.classifier,
            plan.capacity,
            plan.flows,
            (shaper, plan.shaper),
            plan.horizon,
            plan.beyond_horizon,
        )
        .map(|mut s| {
            s.ignored = plan.ignored;
            s.max_packet = plan.max_packet;
            s
        })
        .map_err(|_| BuildError::OutOfMemory(plan.capacity.max(plan.flows)))
    }
}

/// Notes, pushed to `out`, on what of node `spec` (the `root`, a `leaf` or neither, with its
/// built `policy`) the tree drops because it cannot take effect there: the keys that place a
/// node in its parent, on the root; a leaf's flow settings its policy does not use ([`Uses`]);
/// the buckets of an exact queue. Member and flow settings count as given when they differ
/// from the defaults (where a default is dropped, nothing changes either way).
fn ignored_settings(
    spec: &NodeSpec,
    root: bool,
    leaf: bool,
    policy: &AnyPolicy,
    out: &mut Vec<String>,
) {
    let name = &spec.name;
    let none = MemberCfg::default();
    // The keys of `m` that differ from the default, with whether `uses` takes each.
    let given = |m: &MemberCfg, uses: Uses| {
        [
            ("weight", m.weight != none.weight, uses.weight),
            ("priority", m.priority.is_some(), uses.priority),
            ("quantum", m.quantum != none.quantum, uses.quantum),
            ("reservation", m.reservation.is_some(), uses.reservation),
        ]
        .into_iter()
        .filter(|&(_, set, _)| set)
        .map(|(key, _, used)| (key, used))
        .collect::<Vec<_>>()
    };
    if root {
        let keys: Vec<String> = given(&spec.member, Uses::default())
            .iter()
            .map(|(k, _)| format!("`{k}`"))
            .collect();
        if !keys.is_empty() {
            out.push(format!(
                "node `{name}`: {} ignored: {} a node in its parent, and the root has no \
                 parent",
                are(&keys),
                if keys.len() == 1 {
                    "it places"
                } else {
                    "they place"
                }
            ));
        }
    }
    if leaf {
        let flows = given(&spec.flows, Uses::of(policy));
        let unused: Vec<String> = flows
            .iter()
            .filter(|(_, used)| !used)
            .map(|(k, _)| format!("`flow_{k}`"))
            .collect();
        if !unused.is_empty() {
            let all = Uses::of(policy);
            let takes: Vec<String> = [
                ("flow_weight", all.weight),
                ("flow_quantum", all.quantum),
                ("flow_reservation", all.reservation),
            ]
            .into_iter()
            .filter(|&(_, used)| used)
            .map(|(k, _)| format!("`{k}`"))
            .collect();
            let takes = if takes.is_empty() {
                "none of them".to_string()
            } else {
                format!("only {}", join_and(&takes))
            };
            out.push(format!(
                "node `{name}`: {} ignored: policy `{}` does not use {} for its flows (of \
                 `flow_weight`, `flow_quantum` and `flow_reservation` it uses {takes})",
                are(&unused),
                policy.name(),
                if unused.len() == 1 { "it" } else { "them" }
            ));
        }
    }
    if let QueueChoice::Kind {
        kind,
        buckets,
        granularity,
    } = spec.queue
    {
        let keys: Vec<String> = [
            ("buckets", buckets.is_some()),
            ("granularity", granularity.is_some()),
        ]
        .into_iter()
        .filter(|&(_, set)| set)
        .map(|(k, _)| format!("`{k}`"))
        .collect();
        if kind.exact() && !keys.is_empty() {
            out.push(format!(
                "node `{name}`: {} ignored: its queue `{kind}` is exact and has no buckets",
                are(&keys)
            ));
        }
    }
}

/// `a`, `a and b`, `a, b and c`.
fn join_and(items: &[String]) -> String {
    match items {
        [] => String::new(),
        [one] => one.clone(),
        [rest @ .., last] => format!("{} and {last}", rest.join(", ")),
    }
}

/// `a is`, `a and b are`.
fn are(items: &[String]) -> String {
    let verb = if items.len() == 1 { "is" } else { "are" };
    format!("{} {verb}", join_and(items))
}

/// Eiffel's threshold in Fig. 4.20: up to this many levels the choice of queue matters little,
/// so `auto` gives a few levels an FFS.
const FEW_LEVELS: u64 = 1024;
/// Internal nodes with at most this many children get an exact binary heap from `auto` (for
/// ranks of more than [`FEW_LEVELS`] levels). Where a heap costs no more than cFFS: a WFQ root
/// over K backlogged FIFO children executed, per packet, 98 fewer instructions on a heap at K
/// = 2, 45 fewer at 4, 7 more at 8, 48 more at 16 and 96 more at 64 (of about 1500; callgrind,
/// `examples/fanout_probe.rs`). eiffel_fig47's two internal nodes of two children each: 2306
/// -> 2094 instructions per packet (callgrind at 1e3 flows).
const FEW_CHILDREN: usize = 8;
/// Dense moving ranges of up to this many ranks (fq's and DRR's rounds) get an exact cFFS, one
/// bucket per rank (a megabyte at most); the approximate gradient only above. Eiffel's 1024
/// gave fq with a quantum below about 257 B (at a 64 KiB `max_packet`) buckets of two ranks,
/// where a new flow (rank 2r) and an old one (2r + 1) left in arrival order: new flows lost
/// their turn first.
const DENSE_EXACT: u64 = 1 << 16;
/// Buckets per range for moving ranges chosen by `auto`.
const MOVING_BUCKETS: usize = 4096;
/// Why a queue kind other than the timing wheel or an exact structure cannot be the shaper.
/// Release times grow without bound, and a new one may come before every release already
/// waiting (a flow paced faster than the others): the wheel keeps its front at the present,
/// and an exact structure orders any ranks.
fn shaper_misfit(kind: QueueKind) -> &'static str {
    if kind.moving_range() {
        "cannot order release times: a moving range files a rank below its minimum behind \
         what it holds, so a flow paced sooner than the waiting ones would wait for them"
    } else {
        "cannot order release times: they outgrow its fixed range, past which every packet \
         would leave at once"
    }
}

/// Most buckets for fixed ranges chosen by `auto`.
const FIXED_BUCKETS: u64 = 1 << 16;

/// What a node's members (`member_cfg`), the largest packet and the scheduler's capacity tell
/// its policy about the ranks it will make ([`crate::policy::Policy::shape`]).
pub(crate) fn shape_cx(member_cfg: &[MemberCfg], max_len: u32, capacity: usize) -> ShapeCx {
    ShapeCx {
        max_len,
        min_quantum: member_cfg
            .iter()
            .map(|m| m.quantum.max(1))
            .min()
            .unwrap_or(1),
        min_reservation: member_cfg.iter().filter_map(|m| m.reservation).min(),
        capacity: capacity.min(u32::MAX as usize) as u32,
    }
}

/// The reservation queue (`spec`) of a dual node whose members' reservations are now
/// `member_cfg`, widened if its window no longer holds the slowest one's next tag: the
/// granularity a build with those reservations would give its buckets, and the span of ranks
/// it covers; `None` if it still fits. For a node whose queue [`NodePlan::widens`].
///
/// Filed at the edge of a window too narrow, a tag not due for long hid the due ones behind
/// it for as long: a class whose reservation went from 300 Mbit/s to 10 bit/s (20 minutes a
/// packet) at a node built on cFFS left its sibling 3 of its 200 Mbit/s reservation.
pub(crate) fn widened_reservation_queue(
    spec: &QueueSpec,
    policy: &AnyPolicy,
    member_cfg: &[MemberCfg],
    max_packet: u32,
    capacity: usize,
) -> Option<(QueueSpec, u64)> {
    let cx = shape_cx(member_cfg, max_packet, capacity);
    let RankShape::Moving { span, .. } = policy.shape(&cx, 0) else {
        return None;
    };
    if (spec.buckets as u64).saturating_mul(spec.granularity) >= span {
        return None;
    }
    let granularity = span
        .div_ceil(spec.buckets as u64)
        .max(1)
        .checked_next_power_of_two()
        .unwrap_or(1 << 63);
    Some((
        QueueSpec {
            granularity,
            ..*spec
        },
        span,
    ))
}

/// The queue spec for a node: `choice`, sized from the rank `shape`, for `entries` entries.
pub fn node_queue_spec(choice: QueueChoice, shape: RankShape, entries: usize) -> QueueSpec {
    let auto_kind = match shape {
        RankShape::Levels(l) if l <= FEW_LEVELS => QueueKind::Ffs,
        RankShape::Levels(_) | RankShape::Fixed { .. } => QueueKind::HierFfs,
        RankShape::Moving { dense: true, span } if span > DENSE_EXACT => QueueKind::CircularApprox,
        RankShape::Moving { .. } => QueueKind::Cffs,
    };
    let (kind, buckets, granularity) = match choice {
        QueueChoice::Auto => (auto_kind, None, None),
        QueueChoice::Kind {
            kind,
            buckets,
            granularity,
        } => (kind, buckets, granularity),
    };
    let approx = kind.approximate();
    let approx_window = Window::for_alpha(16).map_or(1, |w| w.buckets()) as u64;
    let (default_buckets, span) = match shape {
        // An approximate queue holds at most its window of buckets, whatever the shape.
        RankShape::Levels(l) if approx => (l.min(approx_window), l),
        RankShape::Fixed { max } if approx => (max.min(approx_window), max),
        RankShape::Levels(l) => (l, l),
        RankShape::Fixed { max } => (max.min(FIXED_BUCKETS), max),
        RankShape::Moving { span, dense } => {
            let window = if approx {
                approx_window
            } else if dense && span <= DENSE_EXACT {
                span
            } else {
                MOVING_BUCKETS as u64
            };
            (window.min(span.max(1)), span)
        }
    };
    let buckets = buckets.unwrap_or(default_buckets.max(1) as usize);
    let granularity = granularity.unwrap_or_else(|| {
        span.max(1)
            .div_ceil(buckets as u64)
            .max(1)
            .checked_next_power_of_two()
            .unwrap_or(1 << 63) // a span near 2^64 (a 1 bit/s reservation): the coarsest
    });
    QueueSpec::new(kind, buckets, granularity, entries.max(1))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn auto(shape: RankShape) -> QueueSpec {
        node_queue_spec(QueueChoice::Auto, shape, 100)
    }

    #[test]
    fn a_wheel_of_one_slot_is_refused() {
        let mut b = TreeBuilder::new(SchedConfig {
            shaper: ShaperConfig {
                slots: 1,
                ..ShaperConfig::default()
            },
            ..SchedConfig::default()
        });
        let root = b.root(NodeSpec::new("root", PolicyKind::Fifo));
        b.default_leaf(root);
        assert!(matches!(b.build(), Err(BuildError::Invalid(e)) if e.contains("2 slots")));
    }

    /// A rule built in code is held to what a policy file's parser checks: out of range, it
    /// would match nothing (a DSCP of 64, a VLAN id of 4096, an empty port range), or another
    /// prefix than the one written (host bits set, a v4 prefix longer than /32).
    #[test]
    fn a_rule_that_could_never_hold_as_written_is_refused() {
        use crate::classify::Match;
        use std::net::IpAddr;
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let build = |m: Match| {
            let mut b = TreeBuilder::new(SchedConfig::default());
            let root = b.root(NodeSpec::new("leaf", PolicyKind::Fifo));
            b.rule(vec![Match::Proto(6), m], root);
            b.build().map(|_| ())
        };
        for (m, why) in [
            (Match::Dscp(64), "dscp=64: a DSCP is 0..=63"),
            (Match::Vlan(4096), "vlan=4096: a VLAN id is 0..=4095"),
            (Match::Sport(9, 8), "sport=9-8: the range is empty"),
            (Match::Dport(2, 1), "dport=2-1: the range is empty"),
            (
                Match::Src(ip("10.1.0.0"), 8),
                "src=10.1.0.0/8: host bits are set after /8",
            ),
            (
                Match::Dst(ip("fd00::1"), 64),
                "dst=fd00::1/64: host bits are set after /64",
            ),
            (
                Match::Src(ip("10.0.0.1"), 33),
                "a prefix of 32-bit addresses is at most /32",
            ),
            (
                Match::Dst(ip("::"), 129),
                "a prefix of 128-bit addresses is at most /128",
            ),
        ] {
            match build(m) {
                Err(BuildError::Invalid(e)) => {
                    assert!(
                        e.starts_with("classifier rule 1: ") && e.ends_with(why),
                        "{e}"
                    )
                }
                other => panic!("{m}: {other:?}"),
            }
        }
        for m in [
            Match::Dscp(63),
            Match::Vlan(4095),
            Match::Sport(8, 8),
            Match::Src(ip("10.0.0.0"), 8),
            Match::Src(ip("10.0.0.1"), 32),
            Match::Dst(ip("0.0.0.0"), 0),
            Match::Dst(ip("fd00::1"), 128),
        ] {
            assert!(build(m).is_ok(), "{m}");
        }
    }

    #[test]
    fn a_burst_above_4_gib_is_refused_as_in_a_policy_file() {
        for (burst, flow_burst) in [(1u64 << 32, 0), (0, u64::MAX)] {
            let mut b = TreeBuilder::new(SchedConfig::default());
            let mut leaf = NodeSpec::new("leaf", PolicyKind::Fifo).rate(Rate::mbit(1), burst);
            leaf.flow_rate = Some(Rate::mbit(1));
            leaf.flow_burst = flow_burst;
            let root = b.root(leaf);
            b.default_leaf(root);
            assert!(
                matches!(b.build(), Err(BuildError::Invalid(e)) if e.contains("4294967295 bytes"))
            );
        }
        let mut b = TreeBuilder::new(SchedConfig::default());
        let root = b.root(NodeSpec::new("leaf", PolicyKind::Fifo));
        b.default_leaf(root);
        let mut s = b.build().unwrap();
        s.set_rate(0, root, Some(Rate::mbit(1)), u64::MAX);
        assert_eq!(
            s.burst(root),
            crate::config::MAX_SIZE,
            "capped at run time too"
        );
    }

    #[test]
    fn auto_follows_the_decision_tree() {
        assert_eq!(auto(RankShape::Levels(256)).kind, QueueKind::Ffs);
        assert_eq!(
            auto(RankShape::Fixed { max: 1 << 20 }).kind,
            QueueKind::HierFfs
        );
        let sparse = auto(RankShape::Moving {
            span: 1 << 30,
            dense: false,
        });
        assert_eq!(
            (sparse.kind, sparse.buckets),
            (QueueKind::Cffs, MOVING_BUCKETS)
        );
        let lstf = auto(RankShape::Moving {
            span: 1 << 30,
            dense: true,
        });
        assert_eq!(lstf.kind, QueueKind::CircularApprox);
    }

    #[test]
    fn few_dense_moving_ranks_get_an_exact_cffs() {
        // fq's and DRR's rounds: one bucket per rank, so the order is exact.
        let fq = auto(RankShape::Moving {
            span: 48,
            dense: true,
        });
        assert_eq!(
            (fq.kind, fq.buckets, fq.granularity),
            (QueueKind::Cffs, 48, 1)
        );
        let edge = auto(RankShape::Moving {
            span: DENSE_EXACT,
            dense: true,
        });
        assert_eq!(
            (edge.kind, edge.buckets as u64, edge.granularity),
            (QueueKind::Cffs, DENSE_EXACT, 1)
        );
        let above = auto(RankShape::Moving {
            span: DENSE_EXACT + 1,
            dense: true,
        });
        assert_eq!(above.kind, QueueKind::CircularApprox);
    }

    #[test]
    fn auto_gives_an_ffs_up_to_eiffels_1024_levels_and_a_hierarchical_one_above() {
        assert_eq!(auto(RankShape::Levels(FEW_LEVELS)).kind, QueueKind::Ffs);
        assert_eq!(
            auto(RankShape::Levels(FEW_LEVELS + 1)).kind,
            QueueKind::HierFfs
        );
    }

    #[test]
    fn auto_caps_a_fixed_range_at_its_bucket_count_and_widens_the_buckets() {
        let q = auto(RankShape::Fixed { max: 1 << 20 });
        assert_eq!(q.buckets as u64, FIXED_BUCKETS);
        assert!(q.granularity * FIXED_BUCKETS >= 1 << 20, "{q:?}");
    }

    #[test]
    fn auto_gives_an_internal_node_of_a_few_children_an_exact_heap() {
        let describe = |policy: PolicyKind, children: usize| {
            let mut b = TreeBuilder::new(SchedConfig::default());
            let root = b.root(NodeSpec::new("root", policy));
            for i in 0..children {
                let leaf = b.child(root, NodeSpec::new(&format!("c{i}"), PolicyKind::Fifo));
                if i == 0 {
                    b.default_leaf(leaf);
                }
            }
            let d = b.build().unwrap().describe();
            d.lines().next().unwrap_or_default().to_string()
        };
        for policy in [PolicyKind::Wfq, PolicyKind::Drr, PolicyKind::Lqf] {
            let few = describe(policy, FEW_CHILDREN);
            assert!(few.contains("queue binary_heap]"), "{few}");
            let many = describe(policy, FEW_CHILDREN + 1);
            assert!(
                many.contains("queue cffs(") || many.contains("queue hffs("),
                "{many}"
            );
        }
        // Both of hClock's queues; strict priority keeps its FFS of one bucket per level.
        let few = describe(PolicyKind::HClock, 2);
        assert!(few.contains("queue binary_heap + binary_heap]"), "{few}");
        let many = describe(PolicyKind::HClock, FEW_CHILDREN + 1);
        assert!(many.contains("queue binary_heap + cffs("), "{many}");
        let prio = describe(PolicyKind::Prio, 2);
        assert!(prio.contains("queue ffs("), "{prio}");
    }

    #[test]
    fn a_leaf_hclock_under_auto_orders_its_reservations_on_cffs() {
        // Only an internal node's reservation queue becomes a heap (few children); a leaf's
        // flows share one reservation, whose tags a moving range orders well.
        let mut b = TreeBuilder::new(SchedConfig::default());
        let mut spec = NodeSpec::new("root", PolicyKind::HClock);
        spec.flows.reservation = Some(Rate::mbit(1));
        let root = b.root(spec);
        b.default_leaf(root);
        let d = b.build().unwrap().describe();
        assert!(d.contains("queue cffs(") && d.contains("+ cffs("), "{d}");
        assert!(!d.contains("binary_heap"), "{d}");
    }

    #[test]
    fn a_moving_range_counts_its_two_ranges_of_buckets_against_the_tree() {
        let mut b = TreeBuilder::new(SchedConfig::default());
        let root = b.root(
            NodeSpec::new("root", PolicyKind::Wfq).queue(QueueChoice::Kind {
                kind: QueueKind::Cffs,
                buckets: Some(MAX_TREE_BUCKETS / 2 + 1),
                granularity: None,
            }),
        );
        let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo));
        b.default_leaf(a);
        match b.build() {
            Err(BuildError::TooManyBuckets { buckets, .. }) => {
                assert_eq!(buckets, MAX_TREE_BUCKETS + 2)
            }
            Err(e) => panic!("{e}"),
            Ok(_) => panic!("built"),
        }
    }

    #[test]
    fn a_weight_outside_1_to_max_weight_is_refused() {
        for (weight, ok) in [
            (0, false),
            (1, true),
            (MAX_WEIGHT, true),
            (MAX_WEIGHT + 1, false),
        ] {
            let mut b = TreeBuilder::new(SchedConfig::default());
            let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
            let a = b.child(root, NodeSpec::new("a", PolicyKind::Fifo).weight(weight));
            b.default_leaf(a);
            match b.build() {
                Ok(_) => assert!(ok, "weight {weight} accepted"),
                Err(BuildError::Invalid(e)) => {
                    assert!(!ok && e.contains("weight"), "weight {weight}: {e}")
                }
                Err(e) => panic!("weight {weight}: {e}"),
            }
        }
    }
}
