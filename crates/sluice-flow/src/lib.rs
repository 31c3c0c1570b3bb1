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
pub mod nba;
pub mod opf;
pub mod pipeline;

pub use admission::{Admission, AdmissionConfig, PausedOrder, Probe, Verdict};
pub use completion::{Completion, CompletionError, Completions, Outcome, Ticket};
pub use pipeline::{IngressError, Pipeline, PipelineConfig, RankBy};
