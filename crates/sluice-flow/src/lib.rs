//! # sluice-flow: lossless flow control
//!
//! Sluice never drops a packet it accepted and never lets a queue grow with the number of flows.
//! This crate holds the mechanisms that make that true between traffic sources and the
//! scheduler (the *scheduled buffer*):
//!
//! - [`completion`]: deferred completions (Carousel §3.4.2). Every admitted packet gets exactly
//!   one completion when it leaves, in any order; per-flow packets in flight are counted against
//!   a TSQ-like limit.
//! - [`admission`]: zD's backpressure (zD §4): sources are Active or Paused; a fixed-capacity
//!   scheduled buffer; `probe`, pause into a paused-sources queue ordered like the scheduler,
//!   resume the best-ranked source into every freed slot.
//! - [`doorbell`]: Backdraft's doorbell queues: the engine polls a few rings, never idle queues.
//! - [`dpfq`]: Backdraft's dynamic per-flow queues: a queue per active flow from a shared pool
//!   of fixed rings (a lock-free stack), linked for bursts, returned when idle, bounded
//!   globally.
//! - [`flows`]: one cache-line record per flow holding what a resume touches (admission,
//!   queue, in-flight count), so resuming a random flow costs one cache miss.
//! - [`opf`]: Backdraft's overlay pause frames over UDP: pause, then pace, the upstream flow.
//! - [`pipeline`]: one engine's lossless path: source buffers, admission, the scheduler,
//!   egress and completions.
//! - [`nba`]: the NIC-level bandwidth allocator (Carousel §3.4.3): aggregate rate limits shared
//!   by per-core engines, redistributed every ~100 ms by max-min water-filling.
//! - [`engine`]: per-core engines: flows hashed to engines, SPSC rings between threads, the
//!   allocator's thread, and a step per engine that tests drive with injected time.

#![forbid(unsafe_code)]
#![warn(missing_docs)]

pub mod admission;
pub mod completion;
pub mod doorbell;
pub mod dpfq;
pub mod engine;
pub mod flows;
pub mod nba;
pub mod opf;
pub mod pipeline;

/// The cache prefetch hint (from `sluice-queue`, the one place with `unsafe`).
pub use sluice_queue::prefetch;

/// Per-flow state of one kind, indexed by flow id: a component's own `Vec`, or one field of the
/// merged per-flow records of [`flows::FlowTable`]. Lets admission, the per-flow queues and
/// completions work on either.
pub(crate) trait Slots<T> {
    /// Flow ids `0..count()` have a slot.
    fn count(&self) -> usize;
    fn slot(&self, i: u32) -> Option<&T>;
    fn slot_mut(&mut self, i: u32) -> Option<&mut T>;
}

impl<T> Slots<T> for [T] {
    #[inline(always)]
    fn count(&self) -> usize {
        self.len()
    }
    #[inline(always)]
    fn slot(&self, i: u32) -> Option<&T> {
        self.get(i as usize)
    }
    #[inline(always)]
    fn slot_mut(&mut self, i: u32) -> Option<&mut T> {
        self.get_mut(i as usize)
    }
}

pub use admission::{Admission, AdmissionConfig, PausedOrder, Probe, Verdict};
pub use completion::{Completion, CompletionError, Completions, Outcome, Ticket};
pub use pipeline::{IngressError, Pipeline, PipelineConfig, RankBy};
