//! The lossless pipeline of one engine: what a Backdraft-style virtual switch (and Sluice's
//! software NIC) does with every packet.
//!
//! ```text
//!  ingress ─> source buffer ─> zD admission ─> scheduled buffer ─> egress ─> completion
//!             (per-flow DPFQ,   (probe, pause,   (the scheduler and
//!              global bound)     resume)          its shaper: fixed
//!                                                 capacity)
//! ```
//!
//! - **Ingress** classifies the packet (refusing one no class takes, before accepting it) and
//!   queues it in its source's per-flow queue. At the memory bound it applies the configured
//!   action: [`BoundAction::Pause`] refuses the packet with [`IngressError::Backpressure`] (the
//!   host keeps it and pauses the source: stops reading that port, or sends an overlay pause
//!   frame upstream) — nothing accepted is ever dropped; [`BoundAction::Drop`] drops it and
//!   counts the drop.
//! - **Admission** moves packets from source buffers into the scheduler, a few per source
//!   (zD's two), never more than the scheduled buffer's fixed capacity in all; sources that
//!   must wait are paused in the order the configured rank gives, and each departure resumes
//!   the best-ranked one.
//! - **Egress** takes what the scheduler releases at `now`; each packet that leaves is
//!   completed exactly once ([`Completions`]), which frees its slot and resumes a source.
//!
//! The pipeline owns the packet descriptors it holds (the host's [`Packet`], whose `token`
//! names the host's buffer). Sources are flows, identified by `Packet::flow`, and are forgotten
//! as soon as they hold nothing (a new flow given a forgotten one's source id inherits none of
//! its state, its unspent resume credit included). Time is passed in; nothing reads a clock.

use crate::admission::{Admission, AdmissionConfig, AdmissionError, PausedOrder, Probe, Verdict};
use crate::completion::{Completions, Outcome, Ticket};
use crate::dpfq::{AtBound, BoundAction, Dpfq, DpfqError, INLINE, RingPool};
use crate::flows::FlowTable;
use sluice_sched::{Packet, RejectReason, Scheduler};
use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

/// How many resumes ahead egress prefetches the record of a paused source (see
/// [`Admission::upcoming`] and [`FlowTable::prefetch`]): far enough that a cache miss
/// (~100 ns) overlaps the work of the packets in between (4 is too few at 1e6 flows; 8 and 12
/// measure alike).
pub const PREFETCH_AHEAD: usize = 8;

/// How paused sources are ordered (the scheduler's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RankBy {
    /// The order they were paused.
    #[default]
    Fifo,
    /// The head packet's strict priority (0 first).
    Priority,
    /// When the source's own rate limit lets it send next (rate-limit order).
    RateLimit,
}

/// Configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PipelineConfig {
    /// Sources (flows) tracked at once.
    pub sources: usize,
    /// Packets the scheduled buffer holds (fixed, whatever the number of sources).
    pub buffer: usize,
    /// Packets one source may have in the scheduled buffer (zD: 2).
    pub per_source: u32,
    /// Probe.
    pub probe: Probe,
    /// Paused-source order.
    pub rank_by: RankBy,
    /// Packets the pipeline holds at most, in its source buffers and its scheduled buffer
    /// together (the global memory bound: one descriptor each).
    pub max_packets: usize,
    /// Packets per ring of the per-flow queues.
    pub ring_slots: usize,
    /// What to do at the memory bound.
    pub at_bound: BoundAction,
}

impl PipelineConfig {
    /// A lossless pipeline for `sources` sources, a scheduled buffer of `buffer` packets and
    /// source buffers of `max_packets` packets in rings of 16.
    pub fn new(sources: usize, buffer: usize, max_packets: usize) -> Self {
        PipelineConfig {
            sources,
            buffer,
            per_source: 2,
            probe: Probe::Fifo,
            rank_by: RankBy::Fifo,
            max_packets,
            ring_slots: 16,
            at_bound: BoundAction::Pause,
        }
    }
}

/// Why a pipeline cannot be built.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum PipelineError {
    /// Admission configuration.
    #[error(transparent)]
    Admission(#[from] AdmissionError),
    /// Per-flow queue configuration.
    #[error(transparent)]
    Queues(#[from] DpfqError),
    /// The scheduler cannot hold the scheduled buffer.
    #[error("the scheduler holds {scheduler} packets, fewer than the scheduled buffer's {buffer}")]
    SchedulerTooSmall {
        /// Scheduler capacity.
        scheduler: usize,
        /// Buffer capacity.
        buffer: usize,
    },
}

/// Why ingress did not take a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum IngressError {
    /// Lossless: the memory bound (or the source table) is full. The host keeps the packet and
    /// pauses its source until packets leave.
    #[error("backpressure: {0}")]
    Backpressure(&'static str),
    /// Lossy: dropped at the memory bound (counted).
    #[error("dropped at the memory bound")]
    Dropped,
    /// No class takes it (counted).
    #[error("no class matched")]
    NoClass,
    /// A zero-length packet (counted).
    #[error("zero-length packet")]
    ZeroLength,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PipelineStats {
    /// Packets accepted at ingress.
    pub accepted: u64,
    /// Packets sent at egress.
    pub sent: u64,
    /// Refused with backpressure.
    pub backpressure: u64,
    /// Dropped at the bound (lossy).
    pub dropped: u64,
    /// Refused: no class.
    pub no_class: u64,
    /// Refused: zero length.
    pub zero_length: u64,
    /// Accepted, then refused by the scheduler (completed as rejected).
    pub sched_rejected: u64,
    /// Most packets ever in the scheduled buffer at once.
    pub buffer_high: usize,
    /// Most packets ever in the source buffers at once.
    pub source_high: usize,
}

/// A held packet: the host's descriptor and its completion ticket once admitted.
#[derive(Clone, Copy, Debug)]
struct Desc {
    pkt: Packet,
    src: u32,
    ticket: Option<Ticket>,
}

/// The pipeline's own state of a source, kept in the source's [`FlowTable`] record (its key,
/// needed only to forget it, is in a separate table).
#[derive(Clone, Copy, Debug)]
struct Source {
    /// Packets anywhere in the pipeline.
    held: u32,
    /// The scheduler's id of this source's flow, from its last departure ([`NO_FLOW_ID`]:
    /// none yet): handed back with its next packet, it saves the scheduler's flow lookup.
    sched_flow: u32,
    in_ready: bool,
}

/// [`Source::sched_flow`] before the scheduler has named the flow.
const NO_FLOW_ID: u32 = u32::MAX;

// A source's record stays one cache line with the pipeline's state in its spare bytes.
const _: () = assert!(std::mem::size_of::<crate::flows::FlowRecord<Source>>() == 64);

impl Default for Source {
    fn default() -> Self {
        Source {
            held: 0,
            sched_flow: NO_FLOW_ID,
            in_ready: false,
        }
    }
}

/// One engine's lossless pipeline; see the module note.
pub struct Pipeline {
    sched: Scheduler,
    /// Admission, per-flow queues and completions: one record per source.
    flows: FlowTable<Source>,
    descs: Vec<Option<Desc>>,
    free_descs: Vec<u32>,
    keys: Vec<u64>,
    by_key: HashMap<u64, u32>,
    free_sources: Vec<u32>,
    ready: VecDeque<u32>,
    rejected: VecDeque<(Packet, RejectReason)>,
    rank_by: RankBy,
    at_bound: BoundAction,
    stats: PipelineStats,
}

impl Pipeline {
    /// A pipeline over `sched` with its own pool of rings.
    pub fn new(sched: Scheduler, cfg: PipelineConfig) -> Result<Self, PipelineError> {
        // Enough rings that the packet bound, not the rings, is what fills: a flow needs a ring
        // only beyond its INLINE packets, and all its rings but the last are full.
        let rings = cfg.max_packets.div_ceil(cfg.ring_slots.max(1))
            + cfg.sources.min(cfg.max_packets / (INLINE + 1));
        let pool = RingPool::new(rings, cfg.ring_slots, cfg.max_packets)?;
        Self::with_pool(sched, cfg, pool)
    }

    /// A pipeline over `sched` sharing `pool` (and its bound) with other engines.
    pub fn with_pool(
        sched: Scheduler,
        cfg: PipelineConfig,
        pool: Arc<RingPool>,
    ) -> Result<Self, PipelineError> {
        if sched.capacity() < cfg.buffer {
            return Err(PipelineError::SchedulerTooSmall {
                scheduler: sched.capacity(),
                buffer: cfg.buffer,
            });
        }
        let order = match cfg.rank_by {
            RankBy::Fifo => PausedOrder::Fifo,
            RankBy::Priority => PausedOrder::Priority,
            RankBy::RateLimit => PausedOrder::Time {
                horizon_ns: 1 << 30,
            },
        };
        let flows = FlowTable::new(
            AdmissionConfig {
                capacity: cfg.buffer,
                sources: cfg.sources,
                per_source: cfg.per_source,
                resume_credit: 2,
                probe: cfg.probe,
                order,
            },
            pool,
            cfg.per_source,
        )?;
        let max = flows.queues().pool().max_packets();
        Ok(Pipeline {
            sched,
            flows,
            descs: vec![None; max],
            free_descs: (0..max as u32).rev().collect(),
            keys: vec![0; cfg.sources],
            by_key: HashMap::with_capacity(cfg.sources),
            free_sources: (0..cfg.sources as u32).rev().collect(),
            ready: VecDeque::with_capacity(cfg.sources),
            rejected: VecDeque::new(),
            rank_by: cfg.rank_by,
            at_bound: cfg.at_bound,
            stats: PipelineStats::default(),
        })
    }

    /// The scheduler.
    pub fn scheduler(&self) -> &Scheduler {
        &self.sched
    }

    /// The scheduler, to change rates and weights at run time.
    pub fn scheduler_mut(&mut self) -> &mut Scheduler {
        &mut self.sched
    }

    /// The admission regulator: counters and buffer state (its per-source state is in the
    /// pipeline's [`FlowTable`]; see [`Pipeline::flows`]).
    pub fn admission(&self) -> &Admission {
        self.flows.admission()
    }

    /// The completion tracker: counters and packets in flight.
    pub fn completions(&self) -> &Completions {
        self.flows.completions()
    }

    /// The per-flow source queues: pool and counters.
    pub fn queues(&self) -> &Dpfq {
        self.flows.queues()
    }

    /// The per-source records (admission, queue, in flight), indexed by source id.
    pub fn flows(&self) -> &FlowTable<impl Copy + Default> {
        &self.flows
    }

    /// Packets held (in source buffers and in the scheduled buffer).
    pub fn len(&self) -> usize {
        self.descs.len() - self.free_descs.len()
    }

    /// True when nothing is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sources tracked now.
    pub fn sources(&self) -> usize {
        self.by_key.len()
    }

    /// Counters.
    pub fn stats(&self) -> PipelineStats {
        self.stats
    }

    /// Take the next packet refused by the scheduler after it was accepted (completed as
    /// rejected), so the host can release it.
    pub fn take_rejected(&mut self) -> Option<(Packet, RejectReason)> {
        self.rejected.pop_front()
    }

    /// Accept a packet into its source's buffer, or refuse it (see [`IngressError`]).
    pub fn ingress(&mut self, now: u64, pkt: Packet) -> Result<(), IngressError> {
        if pkt.len == 0 {
            self.stats.zero_length += 1;
            return Err(IngressError::ZeroLength);
        }
        if self.sched.classify(&pkt).is_none() {
            self.stats.no_class += 1;
            return Err(IngressError::NoClass);
        }
        let src = match self.by_key.get(&pkt.flow) {
            Some(&s) => s,
            None => match self.free_sources.pop() {
                Some(s) => {
                    self.by_key.insert(pkt.flow, s);
                    self.keys[s as usize] = pkt.flow;
                    *self.src_mut(s) = Source::default();
                    // The id's admission state is idle, but may keep the resume credit its
                    // forgotten flow did not spend: the new flow must not jump ahead with it.
                    self.flows.reuse(s);
                    s
                }
                None => return self.at_bound("sources"),
            },
        };
        let Some(idx) = self.free_descs.pop() else {
            self.forget_if_idle(src);
            return self.at_bound("packets");
        };
        if let Err(AtBound { what }) = self.flows.push(src, idx) {
            self.free_descs.push(idx);
            self.forget_if_idle(src);
            return self.at_bound(what);
        }
        self.descs[idx as usize] = Some(Desc {
            pkt,
            src,
            ticket: None,
        });
        self.src_mut(src).held += 1;
        self.stats.accepted += 1;
        self.stats.source_high = self.stats.source_high.max(self.flows.queues().packets());
        self.wake(src);
        self.pump(now);
        Ok(())
    }

    fn at_bound(&mut self, what: &'static str) -> Result<(), IngressError> {
        match self.at_bound {
            BoundAction::Pause => {
                self.stats.backpressure += 1;
                Err(IngressError::Backpressure(what))
            }
            BoundAction::Drop => {
                self.stats.dropped += 1;
                Err(IngressError::Dropped)
            }
        }
    }

    #[inline]
    fn src(&self, src: u32) -> Source {
        *self.flows.extra(src).expect("source id")
    }

    #[inline]
    fn src_mut(&mut self, src: u32) -> &mut Source {
        self.flows.extra_mut(src).expect("source id")
    }

    fn wake(&mut self, src: u32) {
        let s = self.src_mut(src);
        if !s.in_ready {
            s.in_ready = true;
            self.ready.push_back(src);
        }
    }

    /// The rank `src` waits at if it is paused at `now`. By rate limit, a source that may send
    /// now (no gate, or its gate's time passed) ranks as `now`: ranked 0, as before, it moved
    /// the time-ordered queue's window to time 0, and every paced source more than a window
    /// later was then filed at its edge, in arrival order.
    fn rank_of(&self, src: u32, head: &Packet, now: u64) -> u64 {
        match self.rank_by {
            RankBy::Fifo => 0,
            RankBy::Priority => u64::from(head.fields.priority),
            RankBy::RateLimit => self
                .sched
                .classify(head)
                .and_then(|leaf| self.sched.flow_next_release(leaf, self.keys[src as usize]))
                .map_or(now, |t| t.max(now)),
        }
    }

    /// Move packets from woken sources into the scheduler while admission lets them.
    fn pump(&mut self, now: u64) {
        while let Some(src) = self.ready.pop_front() {
            self.src_mut(src).in_ready = false;
            loop {
                let Some(idx) = self.flows.peek(src) else {
                    // Nothing to send: a resumed source hands its reserved slot on.
                    if let Some(next) = self.flows.idle(src) {
                        self.wake(next);
                    }
                    break;
                };
                let Some(desc) = self.descs[idx as usize] else {
                    break;
                };
                let rank = self.rank_of(src, &desc.pkt, now);
                if self.flows.offer(src, rank) != Verdict::Admit {
                    break;
                }
                self.flows.pop(src);
                self.admit(now, src, idx, desc);
            }
            // All its packets refused by the scheduler (beyond the horizon, its flow table
            // full), a source may hold nothing now: forget it, or the table fills with them.
            self.forget_if_idle(src);
        }
        self.stats.buffer_high = self
            .stats
            .buffer_high
            .max(self.flows.admission().occupancy());
    }

    /// Hand an admitted packet to the scheduler.
    fn admit(&mut self, now: u64, src: u32, idx: u32, mut desc: Desc) {
        desc.ticket = self.flows.admit(src, u64::from(idx));
        self.descs[idx as usize] = Some(desc);
        let mut p = desc.pkt;
        p.token = u64::from(idx);
        let id = self.src(src).sched_flow;
        p.flow_id = (id != NO_FLOW_ID).then_some(id);
        if let Err(r) = self.sched.enqueue(now, &p) {
            // Classified at ingress, and the scheduler holds the whole buffer: this is a
            // beyond-horizon refusal or a scheduler flow table smaller than the sources.
            self.stats.sched_rejected += 1;
            self.leave(
                src,
                idx,
                Outcome::Rejected {
                    code: r.reason as u8,
                },
            );
            self.rejected.push_back((desc.pkt, r.reason));
        }
    }

    /// A packet left the scheduled buffer: complete it, free its slot, resume a source.
    fn leave(&mut self, src: u32, idx: u32, outcome: Outcome) -> Option<Packet> {
        let desc = self.descs[idx as usize].take()?;
        if let Some(t) = desc.ticket {
            let _ = self.flows.complete(t, outcome);
        }
        self.free_descs.push(idx);
        if let Some(next) = self.flows.departed(src) {
            self.wake(next);
        }
        self.wake(src);
        self.src_mut(src).held -= 1;
        Some(desc.pkt)
    }

    /// Forget a source that holds nothing (its id goes back to the free list).
    /// Idempotent: a source already forgotten (its key no longer maps to it) is left alone,
    /// so that two paths reaching it (egress, and the pump it runs) free its id once.
    fn forget_if_idle(&mut self, src: u32) {
        let s = self.src(src);
        let key = self.keys[src as usize];
        if s.held == 0
            && !s.in_ready
            && !self.flows.is_paused(src)
            && self.flows.queued(src) == 0
            && self.by_key.get(&key) == Some(&src)
        {
            self.by_key.remove(&key);
            self.free_sources.push(src);
        }
    }

    /// The next packet to put on the wire at `now`, if the scheduler releases one. Its
    /// completion is delivered (its source may send more) before it is returned.
    pub fn egress(&mut self, now: u64) -> Option<Packet> {
        self.pump(now);
        let d = self.sched.dequeue(now)?;
        // Each departure resumes a paused source: start loading the state of the one resumed a
        // few departures from now, so its cache misses overlap the work in between.
        if let Some(f) = self.flows.upcoming(PREFETCH_AHEAD) {
            self.flows.prefetch(f);
        }
        let idx = d.token as u32;
        let src = self.descs.get(idx as usize).copied().flatten()?.src;
        self.src_mut(src).sched_flow = d.flow_id;
        let pkt = self.leave(src, idx, Outcome::Sent)?;
        self.stats.sent += 1;
        self.pump(now);
        // A source that holds nothing more is forgotten once it is neither paused nor owed a
        // slot (pump may have handed it one, or forgotten it already).
        self.forget_if_idle(src);
        Some(pkt)
    }

    /// When egress may next have something: now, the shaper's next release, or never.
    pub fn next_event(&self, now: u64) -> Option<u64> {
        self.sched.next_event(now)
    }

    /// Check the invariants across the parts; for tests. O(sources).
    pub fn check(&self) {
        self.flows.check();
        let adm = self.flows.admission();
        assert!(
            adm.occupancy() <= adm.capacity(),
            "scheduled buffer over capacity"
        );
        assert_eq!(
            adm.occupancy(),
            self.flows.completions().len(),
            "every packet in the buffer is in flight once"
        );
        assert_eq!(
            adm.occupancy(),
            self.sched.len(),
            "the buffer is the scheduler"
        );
        assert!(
            self.queues().pool().packets() <= self.queues().pool().max_packets(),
            "memory bound"
        );
        let held: usize = self
            .by_key
            .values()
            .map(|&s| self.src(s).held as usize)
            .sum();
        assert_eq!(held, self.len());
    }
}
