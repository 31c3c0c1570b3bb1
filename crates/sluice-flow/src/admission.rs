//! zD admission (zD §4, Algorithm 1): sources are Active or Paused; a scheduled buffer of fixed
//! capacity, independent of the number of sources, takes packets only from Active sources that
//! pass `probe`; a failed probe pauses the source and files it in the paused-sources queue,
//! ordered like the scheduler orders them; every freed slot resumes the best-ranked paused
//! source.
//!
//! ```text
//!  offer(src) ─ paused? ──────────────────────────────> Paused (keep waiting)
//!     │        ─ src has `limit` packets in the buffer > Throttled (wait for its own departure)
//!     │        ─ granted a slot on resume ────────────> Admit (uses the reserved slot)
//!     │        ─ probe fails ─────────────────────────> pause, file by rank > Paused
//!     │        ─ others are paused and src's resume credit is spent > pause > Paused
//!     └────────────────────────────────────────────────> Admit
//!  departed(src) ─ a slot is free ─ pop the best paused source, reserve the slot for it,
//!                  give it `resume_credit` packets it may place before it can be paused again
//! ```
//!
//! **Probes.** FIFO: the buffer (counting reserved slots) has room. Fair share: that, and the
//! source holds fewer than its share of the buffer, `capacity / sources wanting room`.
//!
//! **Deadlock freedom.** A source is paused only while others hold the buffer's slots or are
//! paused ahead of it, and a slot that frees always goes to a paused source if there is one. A
//! resumed source that has nothing to send must say so ([`Admission::idle`]); its reserved slot
//! then passes to the next paused source. So whenever a source is paused, the buffer holds a
//! packet or a slot is reserved for a resumed source: someone will depart or send, and the
//! paused queue keeps moving (property-tested in `tests/admission.rs`).

use crate::Slots;
use sluice_queue::{AnyQueue, QueueKind, QueueSpec, Rank, RankQueue};
use std::collections::VecDeque;

/// How `probe` decides whether a source may place a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Probe {
    /// Room in the buffer.
    Fifo,
    /// Room in the buffer and the source below its share of it.
    FairShare,
}

/// The order of the paused-sources queue (the scheduler's order).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PausedOrder {
    /// In the order they were paused.
    Fifo,
    /// By priority (rank 0..=255, 0 first), FIFO within a level.
    Priority,
    /// By time (the rank is when the source may send next, e.g. its rate limit's next release),
    /// within `horizon_ns` of each other.
    Time {
        /// How far apart the ranks of paused sources can be.
        horizon_ns: u64,
    },
    /// Any rank a policy gives, in the queue `spec` describes (its capacity set to the
    /// sources, its overflow to `Clamp`: a paused source must never be refused, or it would
    /// wait for a resume that never comes).
    Rank(QueueSpec),
}

/// Configuration.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AdmissionConfig {
    /// Packets the scheduled buffer holds (fixed, whatever the number of sources).
    pub capacity: usize,
    /// Source ids `0..sources`.
    pub sources: usize,
    /// Packets one source may have in the buffer at once (zD and TSQ: 2).
    pub per_source: u32,
    /// Packets a resumed source may place before it can be paused again (zD: 2).
    pub resume_credit: u32,
    /// How to probe.
    pub probe: Probe,
    /// How paused sources are ordered.
    pub order: PausedOrder,
}

impl AdmissionConfig {
    /// zD's defaults: FIFO probe and order, two packets per source, resume credit two.
    pub fn new(capacity: usize, sources: usize) -> Self {
        AdmissionConfig {
            capacity,
            sources,
            per_source: 2,
            resume_credit: 2,
            probe: Probe::Fifo,
            order: PausedOrder::Fifo,
        }
    }
}

/// Why a configuration cannot hold.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum AdmissionError {
    /// A zero capacity, source count, per-source limit or resume credit.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// Source ids must be below `u32::MAX`.
    #[error("sources must be below 2^32 - 1")]
    TooManySources,
    /// The paused queue cannot be built.
    #[error("paused-sources queue: {0}")]
    Queue(#[from] sluice_queue::ConfigError),
}

/// What `offer` decided.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Place the packet in the scheduled buffer now (it is counted in the buffer).
    Admit,
    /// The source has its `per_source` packets in the buffer: wait for one to depart.
    Throttled,
    /// The source is paused: stop pulling from it until it is resumed.
    Paused,
}

/// Counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AdmissionStats {
    /// Packets admitted.
    pub admitted: u64,
    /// Offers refused by the per-source limit.
    pub throttled: u64,
    /// Sources paused.
    pub paused: u64,
    /// Sources resumed.
    pub resumed: u64,
    /// Reserved slots handed on because the resumed source had nothing to send.
    pub idle_grants: u64,
    /// Calls naming a source out of range (ignored).
    pub bad_source: u64,
}

const NIL: u32 = u32::MAX;

/// A source's state: 16 bytes, four per cache line.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Source {
    /// The next source paused at the same priority level (an intrusive FIFO), or `NIL`.
    next: u32,
    /// Packets in the buffer.
    queued: u32,
    /// Packets it may still place since its resume before it can be paused for others.
    credit: u32,
    paused: bool,
    /// A slot is reserved for it.
    granted: bool,
}

const _: () = assert!(std::mem::size_of::<Source>() == 16);

impl Default for Source {
    fn default() -> Self {
        Source {
            next: NIL,
            queued: 0,
            credit: 0,
            paused: false,
            granted: false,
        }
    }
}

/// Levels of [`PausedOrder::Priority`].
const LEVELS: usize = 256;

/// The paused-sources queue. FIFO and strict priority, the common orders, need no general
/// priority queue: a ring of ids (FIFO: 4 bytes per source, and the next sources to resume can
/// be read ahead, see [`Admission::upcoming`]) or one intrusive FIFO per level linked through
/// [`Source::next`] (no memory per source beyond the link). Other orders use a sluice-queue.
enum PausedQueue {
    Fifo(VecDeque<u32>),
    Levels {
        head: Box<[u32; LEVELS]>,
        tail: Box<[u32; LEVELS]>,
        /// Bit `l` set when level `l` holds a source.
        nonempty: [u64; LEVELS / 64],
        len: usize,
    },
    Ranked(Box<AnyQueue<u32>>),
}

impl PausedQueue {
    fn len(&self) -> usize {
        match self {
            PausedQueue::Fifo(q) => q.len(),
            PausedQueue::Levels { len, .. } => *len,
            PausedQueue::Ranked(q) => q.len(),
        }
    }

    fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// File `src` (not paused now) at `rank`. False if the queue refused it.
    fn push<S: Slots<Source> + ?Sized>(&mut self, sources: &mut S, src: u32, rank: Rank) -> bool {
        match self {
            PausedQueue::Fifo(q) => q.push_back(src),
            PausedQueue::Levels {
                head,
                tail,
                nonempty,
                len,
            } => {
                // Ranks beyond the lowest level wait at the lowest level.
                let l = rank.min(LEVELS as u64 - 1) as usize;
                sources.slot_mut(src).expect("source id").next = NIL;
                if tail[l] == NIL {
                    head[l] = src;
                    nonempty[l / 64] |= 1 << (l % 64);
                } else {
                    sources.slot_mut(tail[l]).expect("source id").next = src;
                }
                tail[l] = src;
                *len += 1;
            }
            PausedQueue::Ranked(q) => return q.push(rank, src).is_ok(),
        }
        true
    }

    /// The best-ranked paused source, removed.
    fn pop<S: Slots<Source> + ?Sized>(&mut self, sources: &mut S) -> Option<u32> {
        match self {
            PausedQueue::Fifo(q) => q.pop_front(),
            PausedQueue::Levels {
                head,
                tail,
                nonempty,
                len,
            } => {
                let w = nonempty.iter().position(|&w| w != 0)?;
                let l = w * 64 + nonempty[w].trailing_zeros() as usize;
                let src = head[l];
                let next =
                    std::mem::replace(&mut sources.slot_mut(src).expect("source id").next, NIL);
                head[l] = next;
                if next == NIL {
                    tail[l] = NIL;
                    nonempty[w] &= !(1 << (l % 64));
                }
                *len -= 1;
                Some(src)
            }
            PausedQueue::Ranked(q) => q.pop_min().map(|e| e.item),
        }
    }

    /// The `k`-th source to be resumed (0: the next), where the queue can tell cheaply.
    fn upcoming<S: Slots<Source> + ?Sized>(&self, sources: &S, k: usize) -> Option<u32> {
        match self {
            PausedQueue::Fifo(q) => q.get(k).copied(),
            PausedQueue::Levels { head, nonempty, .. } => {
                let w = nonempty.iter().position(|&w| w != 0)?;
                let first = head[w * 64 + nonempty[w].trailing_zeros() as usize];
                match k {
                    0 => Some(first),
                    1 => sources.slot(first).map(|s| s.next).filter(|&n| n != NIL),
                    _ => None,
                }
            }
            PausedQueue::Ranked(_) => None,
        }
    }
}

/// The regulator; see the module note.
pub struct Admission {
    cfg: AdmissionConfig,
    sources: Vec<Source>,
    paused: PausedQueue,
    occupancy: usize,
    grants: usize,
    /// Sources with packets in the buffer or paused (they all want a share).
    wanting: usize,
    stats: AdmissionStats,
}

impl Admission {
    /// A regulator; errors for zeros and bad queue configurations.
    pub fn new(cfg: AdmissionConfig) -> Result<Self, AdmissionError> {
        for (v, name) in [
            (cfg.capacity, "capacity"),
            (cfg.sources, "sources"),
            (cfg.per_source as usize, "per_source"),
            (cfg.resume_credit as usize, "resume_credit"),
        ] {
            if v == 0 {
                return Err(AdmissionError::Zero(name));
            }
        }
        if cfg.sources >= NIL as usize {
            return Err(AdmissionError::TooManySources);
        }
        let paused = match cfg.order {
            PausedOrder::Fifo => PausedQueue::Fifo(VecDeque::with_capacity(cfg.sources)),
            PausedOrder::Priority => PausedQueue::Levels {
                head: Box::new([NIL; LEVELS]),
                tail: Box::new([NIL; LEVELS]),
                nonempty: [0; LEVELS / 64],
                len: 0,
            },
            PausedOrder::Time { horizon_ns } => {
                let g = (horizon_ns / 4096).max(1).next_power_of_two();
                PausedQueue::Ranked(Box::new(
                    QueueSpec::new(QueueKind::Cffs, 4096, g, cfg.sources).build()?,
                ))
            }
            PausedOrder::Rank(spec) => PausedQueue::Ranked(Box::new(
                QueueSpec {
                    capacity: cfg.sources,
                    overflow: sluice_queue::Overflow::Clamp,
                    ..spec
                }
                .build()?,
            )),
        };
        Ok(Admission {
            sources: vec![Source::default(); cfg.sources],
            paused,
            occupancy: 0,
            grants: 0,
            wanting: 0,
            cfg,
            stats: AdmissionStats::default(),
        })
    }

    /// The `k`-th paused source in resume order (0: the one the next freed slot resumes), if
    /// the order tells it cheaply: FIFO for any `k`, priority for `k` 0 and 1, other orders
    /// never. A hint only (a source paused later at a better rank may come first): hosts use
    /// it to prefetch the per-flow state they will touch when that source resumes.
    #[inline]
    pub fn upcoming(&self, k: usize) -> Option<u32> {
        self.upcoming_in(&self.sources[..], k)
    }

    #[inline]
    pub(crate) fn upcoming_in<S: Slots<Source> + ?Sized>(&self, ss: &S, k: usize) -> Option<u32> {
        self.paused.upcoming(ss, k)
    }

    /// Start loading `src`'s state into the cache ahead of use (a prefetch hint, see
    /// [`crate::prefetch`]). Out-of-range ids are ignored.
    #[inline]
    pub fn prefetch(&self, src: u32) {
        if let Some(s) = self.sources.get(src as usize) {
            crate::prefetch(s);
        }
    }

    /// Run `f` on this regulator with its own per-source states.
    #[inline(always)]
    fn own<R>(&mut self, f: impl FnOnce(&mut Self, &mut [Source]) -> R) -> R {
        let mut ss = std::mem::take(&mut self.sources);
        let r = f(self, &mut ss);
        self.sources = ss;
        r
    }

    /// A regulator whose per-source states live elsewhere (the `_in` methods take them).
    pub(crate) fn detached(cfg: AdmissionConfig) -> Result<Self, AdmissionError> {
        let mut a = Admission::new(cfg)?;
        a.sources = Vec::new();
        Ok(a)
    }

    /// Packets in the scheduled buffer.
    pub fn occupancy(&self) -> usize {
        self.occupancy
    }

    /// The buffer's capacity.
    pub fn capacity(&self) -> usize {
        self.cfg.capacity
    }

    /// Sources paused now.
    pub fn paused(&self) -> usize {
        self.paused.len()
    }

    /// Slots reserved for resumed sources.
    pub fn reserved(&self) -> usize {
        self.grants
    }

    /// Whether `src` is paused.
    pub fn is_paused(&self, src: u32) -> bool {
        self.sources.get(src as usize).is_some_and(|s| s.paused)
    }

    pub(crate) fn is_paused_in<S: Slots<Source> + ?Sized>(ss: &S, src: u32) -> bool {
        ss.slot(src).is_some_and(|s| s.paused)
    }

    /// Packets `src` has in the buffer.
    pub fn queued(&self, src: u32) -> u32 {
        self.sources.get(src as usize).map_or(0, |s| s.queued)
    }

    pub(crate) fn queued_in<S: Slots<Source> + ?Sized>(ss: &S, src: u32) -> u32 {
        ss.slot(src).map_or(0, |s| s.queued)
    }

    /// Counters.
    pub fn stats(&self) -> AdmissionStats {
        self.stats
    }

    fn share(&self) -> u32 {
        (self.cfg.capacity / self.wanting.max(1)).max(1) as u32
    }

    fn probe(&self, s: &Source) -> bool {
        let room = self.occupancy + self.grants < self.cfg.capacity;
        match self.cfg.probe {
            Probe::Fifo => room,
            Probe::FairShare => room && s.queued < self.share(),
        }
    }

    fn wants(s: &Source) -> bool {
        s.queued > 0 || s.paused
    }

    /// Source `src` has a packet to place; `rank` is where it would wait if paused.
    pub fn offer(&mut self, src: u32, rank: Rank) -> Verdict {
        self.own(|a, ss| a.offer_in(ss, src, rank))
    }

    #[inline]
    pub(crate) fn offer_in<S: Slots<Source> + ?Sized>(
        &mut self,
        ss: &mut S,
        src: u32,
        rank: Rank,
    ) -> Verdict {
        let Some(&s) = ss.slot(src) else {
            self.stats.bad_source += 1;
            return Verdict::Paused;
        };
        if s.paused {
            return Verdict::Paused;
        }
        if s.queued >= self.cfg.per_source {
            self.stats.throttled += 1;
            return Verdict::Throttled;
        }
        let mut s = s;
        let admit = if s.granted {
            s.granted = false;
            self.grants -= 1;
            true
        } else {
            self.probe(&s) && (s.credit > 0 || self.paused.is_empty())
        };
        if !admit {
            return self.pause(ss, src, s, rank);
        }
        let wanted = Self::wants(&s);
        s.credit = s.credit.saturating_sub(1);
        s.queued += 1;
        *ss.slot_mut(src).expect("checked above") = s;
        if !wanted {
            self.wanting += 1;
        }
        self.occupancy += 1;
        self.stats.admitted += 1;
        Verdict::Admit
    }

    fn pause<S: Slots<Source> + ?Sized>(
        &mut self,
        ss: &mut S,
        src: u32,
        mut s: Source,
        rank: Rank,
    ) -> Verdict {
        let wanted = Self::wants(&s);
        if !self.paused.push(ss, src, rank) {
            // The paused queue holds every source at most once and was sized for all; a
            // rank out of its range is clamped. Refusing here would lose the source.
            debug_assert!(false, "paused queue refused source {src}");
            return Verdict::Throttled;
        }
        // `push` may have written the link of `src` itself: keep it.
        let slot = ss.slot_mut(src).expect("checked by offer");
        s.next = slot.next;
        s.paused = true;
        s.credit = 0;
        *slot = s;
        if !wanted {
            self.wanting += 1;
        }
        self.stats.paused += 1;
        Verdict::Paused
    }

    /// A packet of `src` left the buffer. Returns the source resumed into the freed slot, if
    /// any: offer its packets next (it has a slot reserved and `resume_credit` to spend).
    pub fn departed(&mut self, src: u32) -> Option<u32> {
        self.own(|a, ss| a.departed_in(ss, src))
    }

    #[inline]
    pub(crate) fn departed_in<S: Slots<Source> + ?Sized>(
        &mut self,
        ss: &mut S,
        src: u32,
    ) -> Option<u32> {
        let Some(s) = ss.slot_mut(src) else {
            self.stats.bad_source += 1;
            return None;
        };
        if s.queued == 0 {
            self.stats.bad_source += 1;
            return None;
        }
        s.queued -= 1;
        if !Self::wants(s) {
            self.wanting -= 1;
        }
        self.occupancy -= 1;
        self.resume_one(ss)
    }

    /// A resumed source had nothing to send: hand its reserved slot to the next paused source.
    /// Returns that source, if any.
    pub fn idle(&mut self, src: u32) -> Option<u32> {
        self.own(|a, ss| a.idle_in(ss, src))
    }

    #[inline]
    pub(crate) fn idle_in<S: Slots<Source> + ?Sized>(
        &mut self,
        ss: &mut S,
        src: u32,
    ) -> Option<u32> {
        let Some(s) = ss.slot_mut(src) else {
            self.stats.bad_source += 1;
            return None;
        };
        if !s.granted {
            return None;
        }
        s.granted = false;
        s.credit = 0;
        self.grants -= 1;
        self.stats.idle_grants += 1;
        self.resume_one(ss)
    }

    /// Source `src`, which holds nothing and is neither paused nor granted a slot, is given to
    /// another flow: the resume credit its old flow left goes (it was granted to that flow, and
    /// would let the new one place packets ahead of paused sources).
    #[inline]
    pub(crate) fn reuse_in<S: Slots<Source> + ?Sized>(ss: &mut S, src: u32) {
        if let Some(s) = ss.slot_mut(src) {
            debug_assert!(
                !Self::wants(s) && !s.granted,
                "source {src} reused while in use"
            );
            s.credit = 0;
        }
    }

    /// Resume the best paused source into a free slot, if there is one and a slot is free.
    fn resume_one<S: Slots<Source> + ?Sized>(&mut self, ss: &mut S) -> Option<u32> {
        if self.occupancy + self.grants >= self.cfg.capacity {
            return None;
        }
        let src = self.paused.pop(ss)?;
        let s = ss.slot_mut(src).expect("paused ids are in range");
        s.paused = false;
        s.granted = true;
        s.credit = self.cfg.resume_credit;
        if !Self::wants(s) {
            self.wanting -= 1;
        }
        self.grants += 1;
        self.stats.resumed += 1;
        Some(src)
    }

    /// Check the counters against the sources; for tests. O(sources).
    pub fn check(&self) {
        self.check_in(&self.sources[..]);
    }

    pub(crate) fn check_in<S: Slots<Source> + ?Sized>(&self, ss: &S) {
        let all = || (0..ss.count() as u32).filter_map(|i| ss.slot(i));
        let queued: usize = all().map(|s| s.queued as usize).sum();
        assert_eq!(queued, self.occupancy);
        assert_eq!(all().filter(|s| s.granted).count(), self.grants);
        assert_eq!(all().filter(|s| s.paused).count(), self.paused.len());
        assert_eq!(all().filter(|s| Self::wants(s)).count(), self.wanting);
        assert!(
            self.occupancy + self.grants <= self.cfg.capacity,
            "buffer over capacity"
        );
        if !self.paused.is_empty() {
            assert!(
                self.occupancy + self.grants > 0,
                "paused sources with nobody to wake them"
            );
        }
    }
}
