//! # sluice-sched: the programmable scheduler
//!
//! Eiffel's programming model (§4.2.2) on Sluice's O(1) queues: a scheduler is a tree of
//! nodes; each orders what is below it with a rank queue chosen per node; leaves hold packets
//! ranked one by one, or flows ranked as units and re-ranked on enqueue and dequeue (per-flow
//! ranking, LQF and pFabric); rate limits anywhere in the tree are gates enforced by **one**
//! shaper, a timing wheel, with Carousel timestamping. Policies are small types behind one
//! trait ([`policy::Policy`]).
//!
//! - [`Scheduler`]: `enqueue(now, packet)`, `dequeue(now)`, `next_event(now)`, counters, rates
//!   and weights changed at run time. Time is always passed in.
//! - [`TreeBuilder`]: build a tree in code.
//! - [`oracle::OracleTree`]: the plain reference interpreter the scheduler is tested against.
//! - [`baseline::Fq`]: a port of Linux fq, the baseline for FQ/pacing.
//! - [`workload`]: the closed-loop benchmark workloads of `sluice bench sched` and criterion.
//!
//! ```
//! use sluice_sched::{NodeSpec, Packet, PolicyKind, SchedConfig, TreeBuilder, Rate};
//! use sluice_sched::classify::Match;
//!
//! let mut b = TreeBuilder::new(SchedConfig { capacity: 1024, flows: 64, ..SchedConfig::default() });
//! let root = b.root(NodeSpec::new("root", PolicyKind::Wfq));
//! let gold = b.child(root, NodeSpec::new("gold", PolicyKind::Fifo).weight(3));
//! let bronze = b.child(root, NodeSpec::new("bronze", PolicyKind::Fifo).weight(1));
//! b.rule(vec![Match::Class(1)], gold);
//! b.default_leaf(bronze);
//! let mut s = b.build().unwrap();
//! s.enqueue(0, &Packet { token: 7, len: 1500, class: Some(1), ..Packet::default() }).unwrap();
//! assert_eq!(s.dequeue(0).unwrap().token, 7);
//! ```

// Unsafe nowhere, but in the unit tests' counting allocator (a `GlobalAlloc` must be).
#![cfg_attr(not(test), forbid(unsafe_code))]
#![cfg_attr(test, deny(unsafe_code))]
#![warn(missing_docs)]

pub mod baseline;
pub mod builder;
pub mod classify;
pub mod config;
mod flow;
mod flow_index;
pub mod gate;
pub mod oracle;
pub mod packet;
pub mod policy;
pub mod tree;
pub mod units;
pub mod workload;

/// Counts a thread's allocations, for the unit tests that a rebase allocates nothing.
#[cfg(test)]
#[allow(unsafe_code)]
#[path = "../tests/support/alloc_count.rs"]
mod alloc_count;

pub use builder::{BuildError, NodeSpec, QueueChoice, SchedConfig, ShaperConfig, TreeBuilder};
pub use packet::{Fields, Headers, Packet};
pub use policy::{MemberCfg, PolicyKind};
pub use tree::{Dequeued, NodeId, NodeStats, RejectReason, Rejected, SchedStats, Scheduler};
pub use units::Rate;
