//! Baselines the scheduler is measured against (ports of other schedulers' algorithms).
//!
//! ## [`Fq`]: Linux fq (`net/sched/sch_fq.c`), flow scheduling and pacing
//!
//! A port of fq's algorithm, written from its source, with `std::collections::BTreeMap` where
//! the kernel uses red-black trees. It keeps fq's data structures and their costs:
//!
//! - **Flow lookup**: flows live in `2^trees_log` trees (fq's `fq_root[]`, default 1024) keyed
//!   by flow key; a packet's tree is picked by a multiplicative hash of its key (`hash_ptr`),
//!   then searched. A flow is created on its first packet with `initial_quantum` credit and
//!   stays after it empties (fq: "we do not immediately remove it from rb trees").
//! - **Per-flow FIFO** of packets (fq's `head`/`tail` list; the EDT time-ordered rb-tree of
//!   packets is not needed: packets here carry no departure timestamp, so their send times are
//!   their arrival times and always in order).
//! - **Round robin with credit**: active flows sit on a `new_flows` list (flows that just became
//!   active, served first) or an `old_flows` list. The flow at the head sends while its credit
//!   is positive; when it is spent, the flow gets `quantum` (2 MTU) more and moves to the tail
//!   of `old_flows`. A new flow starts with `initial_quantum` (10 MTU). An empty flow found on
//!   `new_flows` moves to `old_flows` (so new flows cannot starve old ones); found empty on
//!   `old_flows` it is *detached* (on no list), stamped with the time. A detached flow that
//!   gets a packet joins `new_flows`, with at least `quantum` credit if it was idle for more
//!   than `flow_refill_delay` (40 ms).
//! - **Pacing**: after a packet leaves, a flow with a rate (the packet's own `pacing_bps`, fq's
//!   `sk_pacing_rate`, capped by the configured `flow_max_rate`) gets
//!   `time_next_packet = now + len / rate`, where `len` is the packet (rates at or below
//!   `low_rate_threshold`, credit then reset to 0) or, above it, a whole `quantum` charged once
//!   the credit is spent; minus up to half of that for the time the flow was served late, as
//!   fq does. A flow whose head is not due is **throttled**: taken off its list into the
//!   `delayed` tree ordered by `time_next_packet`; every dequeue first moves the flows that are
//!   due back to the tail of `old_flows` (`fq_check_throttled`).
//! - **Garbage collection**: on every lookup, detached flows idle for more than `gc_age`
//!   (fq: 3 s) that the lookup meets in the key's tree are freed. fq frees those on the search
//!   path of the rb-tree; a `BTreeMap` does not expose its path, so this port inspects the
//!   flows next to the key in its tree (`gc_scan` on each side, the deepest part of that
//!   path). As in fq, where the test reads only the node being visited (`age` shares the flow's
//!   first cache line with its tree node), the detach stamp lives in the tree entry itself
//!   (`jiffies | 1`, in milliseconds), so the scan reads no flow records. A [`Fq::gc_sweep`]
//!   over every tree stands in for the full collection fq runs when its trees are resized.
//!
//! Not ported (the benchmarks do not exercise them): the three priority bands and their
//! weights (every packet is in one band), the fast-path queue (`q->internal`, used only when
//! no flow is eligible and no `maxrate` is set), EDT timestamps and the horizon, ECN marking,
//! and socket reuse detection.
//!
//! Bounded like the scheduler: at most `capacity` packets and `flows` flows; past either bound
//! an enqueue is rejected with a reason (fq drops instead) and counted. Packets and flows live
//! in slabs reserved at construction; the trees allocate their nodes as the kernel's rb-tree
//! users allocate flows. Time is passed in; nothing reads a clock.
//!
//! Costs: enqueue O(log F) (F flows per tree) plus the gc scan; dequeue O(1) for an unpaced
//! flow, O(log T) when a flow is throttled or comes back (T throttled flows).

use crate::packet::Packet;
use crate::tree::Dequeued;
use crate::units::Rate;
use std::collections::BTreeMap;

/// End of a list, or no packet.
const NIL: u32 = u32::MAX;
/// `Flow::next` of a throttled flow (fq's `&throttled` sentinel).
const THROTTLED: u32 = u32::MAX - 1;
/// Largest `gc_scan` accepted.
pub const MAX_GC_SCAN: usize = 8;
/// fq clamps a pacing delay to one second.
const MAX_DELAY_NS: u64 = 1_000_000_000;

/// A flow's tree entry: its id in the low half, and in the high half the millisecond it was
/// detached (fq's `age = jiffies | 1`, never 0) or 0 while it is on a list.
fn entry(id: u32, age: u32) -> u64 {
    u64::from(id) | u64::from(age) << 32
}

fn entry_id(e: u64) -> u32 {
    e as u32
}

fn entry_age(e: u64) -> Option<u32> {
    match (e >> 32) as u32 {
        0 => None,
        age => Some(age),
    }
}

/// The time in milliseconds, odd (fq: `jiffies | 1` with HZ = 1000).
fn jiffies(now: u64) -> u32 {
    ((now / 1_000_000) as u32) | 1
}

/// fq's `time_after(jiffies, age + limit)`, wrap-safe like jiffies.
fn idle_longer(now: u64, age: u32, limit_ns: u64) -> bool {
    let limit = (limit_ns / 1_000_000).min(i32::MAX as u64) as i32;
    (jiffies(now).wrapping_sub(age) as i32) > limit
}

/// fq's parameters (the kernel's defaults for a 1514-byte MTU), plus the bounds of this port.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FqConfig {
    /// Most packets held (fq's `limit`, default 10 000).
    pub capacity: usize,
    /// Flow slots (fq allocates flows without a bound).
    pub flows: usize,
    /// Most packets one flow may hold (`flow_limit`, 100).
    pub flow_plimit: u32,
    /// Credit a flow gets each round, bytes (`quantum`, 2 MTU).
    pub quantum: u32,
    /// Credit of a new flow, bytes (`initial_quantum`, 10 MTU).
    pub initial_quantum: u32,
    /// A cap on every flow's rate (`maxrate`); `None` for no cap.
    pub flow_max_rate: Option<Rate>,
    /// Rates at or below this (bit/s) are paced per packet without credit (550 kbit/s).
    pub low_rate_threshold_bps: u64,
    /// A detached flow idle longer than this gets `quantum` credit again (40 ms).
    pub flow_refill_delay_ns: u64,
    /// A detached flow idle longer than this may be collected (fq's `FQ_GC_AGE`, 3 s).
    pub gc_age_ns: u64,
    /// log2 of the number of flow trees (`buckets`, default 1024 trees); 0..=18.
    pub trees_log: u32,
    /// Flows inspected on each side of the key for collection on every lookup, 0..=8
    /// (0 turns collection on lookup off).
    pub gc_scan: usize,
}

impl Default for FqConfig {
    fn default() -> Self {
        FqConfig {
            capacity: 10_000,
            flows: 65_536,
            flow_plimit: 100,
            quantum: 2 * 1514,
            initial_quantum: 10 * 1514,
            flow_max_rate: None,
            low_rate_threshold_bps: 550_000,
            flow_refill_delay_ns: 40_000_000,
            gc_age_ns: 3_000_000_000,
            trees_log: 10,
            gc_scan: 4,
        }
    }
}

/// Why [`Fq`] refused a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
pub enum FqRejectReason {
    /// `capacity` packets are held already (fq: the band's packet limit).
    #[error("packet buffer full")]
    BufferFull,
    /// Every flow slot holds a flow that cannot be collected.
    #[error("flow table full")]
    FlowTableFull,
    /// The flow holds `flow_plimit` packets already (fq: `flows_plimit`).
    #[error("per-flow packet limit reached")]
    FlowLimit,
    /// A zero-length packet.
    #[error("zero-length packet")]
    ZeroLength,
}

/// A packet [`Fq`] refused, with its token.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("packet {token} rejected: {reason}")]
pub struct FqRejected {
    /// Why.
    pub reason: FqRejectReason,
    /// The packet's token.
    pub token: u64,
}

/// [`Fq`]'s counters (fq's `tc -s` statistics that this port keeps).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FqStats {
    /// Packets accepted.
    pub enqueued: u64,
    /// Packets dequeued.
    pub dequeued: u64,
    /// Packets rejected (any reason).
    pub rejected: u64,
    /// Times a flow was throttled (`throttled`).
    pub throttled: u64,
    /// Flows collected (`gc_flows`).
    pub gc_flows: u64,
    /// Pacing delays clamped to one second (`pkts_too_long`).
    pub pkts_too_long: u64,
}

/// A queued packet.
#[derive(Clone, Copy, Debug)]
struct Pkt {
    token: u64,
    arrival: u64,
    pacing_bps: u64,
    len: u32,
    next: u32,
}

/// One flow (fq's `struct fq_flow`).
#[derive(Clone, Copy, Debug)]
struct Flow {
    key: u64,
    head: u32,
    tail: u32,
    qlen: u32,
    credit: i32,
    /// Next flow on its round-robin list, [`NIL`], or [`THROTTLED`].
    next: u32,
    /// On no list (fq: `age` has its low bit set; the stamp itself is in the tree entry).
    detached: bool,
    time_next_packet: u64,
}

/// A round-robin list (fq's `struct fq_flow_head`).
#[derive(Clone, Copy, Debug)]
struct List {
    first: u32,
    last: u32,
}

impl List {
    const EMPTY: List = List {
        first: NIL,
        last: NIL,
    };
}

/// Which list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Which {
    New,
    Old,
}

/// A fixed-capacity slab with a free stack.
#[derive(Debug)]
struct Slab<T> {
    items: Vec<T>,
    free: Vec<u32>,
}

impl<T: Copy> Slab<T> {
    fn new(capacity: usize) -> Self {
        Slab {
            items: Vec::with_capacity(capacity),
            free: Vec::with_capacity(capacity),
        }
    }

    fn insert(&mut self, v: T) -> Option<u32> {
        if let Some(i) = self.free.pop() {
            self.items[i as usize] = v;
            Some(i)
        } else if self.items.len() < self.items.capacity() {
            self.items.push(v);
            Some((self.items.len() - 1) as u32)
        } else {
            None
        }
    }

    fn release(&mut self, i: u32) {
        self.free.push(i);
    }
}

/// Linux fq's flow scheduler; see the module note.
///
/// ```
/// use sluice_sched::baseline::{Fq, FqConfig};
/// use sluice_sched::{Fields, Packet};
///
/// let mut fq = Fq::new(FqConfig::default());
/// // A flow paced at 100 kbit/s: its 1500-byte packets leave 120 ms apart.
/// let p = |token| Packet {
///     token,
///     len: 1500,
///     flow: 7,
///     fields: Fields { pacing_bps: 100_000, ..Fields::default() },
///     ..Packet::default()
/// };
/// fq.enqueue(0, &p(1)).unwrap();
/// fq.enqueue(0, &p(2)).unwrap();
/// assert_eq!(fq.dequeue(0).map(|d| d.token), Some(1));
/// assert_eq!(fq.dequeue(0), None);
/// assert_eq!(fq.next_event(0), Some(120_000_000));
/// assert_eq!(fq.dequeue(120_000_000).map(|d| d.token), Some(2));
/// ```
#[derive(Debug)]
pub struct Fq {
    cfg: FqConfig,
    /// Flow key -> [`entry`]: the flow's id and its detach stamp.
    trees: Vec<BTreeMap<u64, u64>>,
    flows: Slab<Flow>,
    pkts: Slab<Pkt>,
    /// Packets held.
    len: usize,
    new_flows: List,
    old_flows: List,
    /// Throttled flows by (time_next_packet, arrival order).
    delayed: BTreeMap<(u64, u64), u32>,
    delayed_seq: u64,
    time_next_delayed_flow: u64,
    /// Flows in the trees.
    flow_count: usize,
    /// Flows without packets.
    inactive_flows: usize,
    /// Flows in `delayed`.
    throttled_flows: usize,
    stats: FqStats,
}

impl Fq {
    /// An empty fq. Out-of-range parameters are clamped: `trees_log` to 18, `gc_scan` to
    /// [`MAX_GC_SCAN`], capacities and quanta to at least 1.
    pub fn new(cfg: FqConfig) -> Self {
        let cfg = FqConfig {
            capacity: cfg.capacity.max(1),
            flows: cfg.flows.max(1),
            flow_plimit: cfg.flow_plimit.max(1),
            quantum: cfg.quantum.clamp(1, 1 << 20),
            initial_quantum: cfg.initial_quantum.min(i32::MAX as u32),
            trees_log: cfg.trees_log.min(18),
            gc_scan: cfg.gc_scan.min(MAX_GC_SCAN),
            ..cfg
        };
        Fq {
            trees: vec![BTreeMap::new(); 1 << cfg.trees_log],
            flows: Slab::new(cfg.flows),
            pkts: Slab::new(cfg.capacity),
            len: 0,
            new_flows: List::EMPTY,
            old_flows: List::EMPTY,
            delayed: BTreeMap::new(),
            delayed_seq: 0,
            time_next_delayed_flow: u64::MAX,
            flow_count: 0,
            inactive_flows: 0,
            throttled_flows: 0,
            stats: FqStats::default(),
            cfg,
        }
    }

    /// The configuration in use (after clamping).
    pub fn config(&self) -> &FqConfig {
        &self.cfg
    }

    /// Packets held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when no packet is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Flows in the trees (with packets or idle).
    pub fn flows(&self) -> usize {
        self.flow_count
    }

    /// Flows waiting for their pacing time.
    pub fn throttled_flows(&self) -> usize {
        self.throttled_flows
    }

    /// Counters.
    pub fn stats(&self) -> FqStats {
        self.stats
    }

    fn reject(&mut self, reason: FqRejectReason, token: u64) -> Result<(), FqRejected> {
        self.stats.rejected += 1;
        Err(FqRejected { reason, token })
    }

    /// The tree of `key` (fq: `hash_ptr(sk, fq_trees_log)`).
    fn tree_of(&self, key: u64) -> usize {
        if self.cfg.trees_log == 0 {
            0
        } else {
            (key.wrapping_mul(0x61C8_8646_80B5_83EB) >> (64 - self.cfg.trees_log)) as usize
        }
    }

    /// Whether the flow behind tree entry `e` may be collected at `now`.
    fn gc_candidate(&self, e: u64, now: u64) -> bool {
        entry_age(e).is_some_and(|age| idle_longer(now, age, self.cfg.gc_age_ns))
    }

    /// Free a detached flow.
    fn free_flow(&mut self, tree: usize, key: u64, id: u32) {
        self.trees[tree].remove(&key);
        self.flows.release(id);
        self.flow_count -= 1;
        self.inactive_flows -= 1;
        self.stats.gc_flows += 1;
    }

    /// Find the flow of `key`, collecting idle flows met on the way, or create it
    /// (fq's `fq_classify` with `fq_gc`). Returns its id and, if it was detached (or is new),
    /// when it was detached; the tree entry is marked attached, as the packet joins it.
    fn classify(&mut self, now: u64, key: u64) -> Option<(u32, Option<u32>)> {
        let t = self.tree_of(key);
        let found = if self.cfg.gc_scan == 0 {
            // No collection: one search of the tree, as fq's lookup. The entry is written only
            // when it holds a detach stamp (fq: `flow_queue_add` overwrites `age`), so a lookup
            // of an attached flow leaves the tree's memory clean.
            self.trees[t].get_mut(&key).map(|e| {
                let (id, age) = (entry_id(*e), entry_age(*e));
                if age.is_some() {
                    *e = entry(id, 0);
                }
                (id, age)
            })
        } else {
            self.lookup_and_collect(now, key, t)
        };
        if found.is_some() {
            return found;
        }
        let id = self.flows.insert(Flow {
            key,
            head: NIL,
            tail: NIL,
            qlen: 0,
            credit: self.cfg.initial_quantum as i32,
            next: NIL,
            detached: true,
            time_next_packet: 0,
        })?;
        self.trees[t].insert(key, entry(id, 0));
        self.flow_count += 1;
        self.inactive_flows += 1;
        Some((id, Some(jiffies(now))))
    }

    /// [`Fq::classify`]'s lookup with collection (`gc_scan > 0`): find the flow of `key` in
    /// tree `t`, marking its entry attached, and free the idle flows among the `gc_scan`
    /// entries on each side of it.
    fn lookup_and_collect(&mut self, now: u64, key: u64, t: usize) -> Option<(u32, Option<u32>)> {
        let scan = self.cfg.gc_scan;
        let mut victims = [(0u64, 0u32); 2 * MAX_GC_SCAN];
        let mut n = 0;
        let mut found = None;
        for (&k, &e) in self.trees[t].range(..key).rev().take(scan) {
            if self.gc_candidate(e, now) {
                victims[n] = (k, entry_id(e));
                n += 1;
            }
        }
        let gc_age = self.cfg.gc_age_ns;
        // The first entry at or after `key` is the flow itself when it exists.
        let mut after = self.trees[t].range_mut(key..).peekable();
        if let Some((_, e)) = after.next_if(|(k, _)| **k == key) {
            found = Some((entry_id(*e), entry_age(*e)));
            *e = entry(entry_id(*e), 0);
        }
        for (&k, &mut e) in after.take(scan) {
            if entry_age(e).is_some_and(|age| idle_longer(now, age, gc_age)) {
                victims[n] = (k, entry_id(e));
                n += 1;
            }
        }
        for &(k, id) in &victims[..n] {
            self.free_flow(t, k, id);
        }
        found
    }

    /// Collect every detached flow idle longer than `gc_age` at `now`, in every tree (what fq
    /// does when its trees are resized). O(flows). Returns how many were freed.
    pub fn gc_sweep(&mut self, now: u64) -> usize {
        let mut freed = 0;
        for t in 0..self.trees.len() {
            let victims: Vec<(u64, u32)> = self.trees[t]
                .iter()
                .filter(|&(_, &e)| self.gc_candidate(e, now))
                .map(|(&k, &e)| (k, entry_id(e)))
                .collect();
            for (k, id) in victims {
                self.free_flow(t, k, id);
                freed += 1;
            }
        }
        freed
    }

    fn list(&mut self, which: Which) -> &mut List {
        match which {
            Which::New => &mut self.new_flows,
            Which::Old => &mut self.old_flows,
        }
    }

    /// Append a flow to a list (fq's `fq_flow_add_tail`).
    fn add_tail(&mut self, which: Which, id: u32) {
        let head = *self.list(which);
        if head.first == NIL {
            self.list(which).first = id;
        } else {
            self.flows.items[head.last as usize].next = id;
        }
        self.list(which).last = id;
        self.flows.items[id as usize].next = NIL;
    }

    /// Take the head flow off its list.
    fn pop_head(&mut self, which: Which, id: u32) {
        let next = self.flows.items[id as usize].next;
        self.list(which).first = next;
    }

    /// Park a flow in `delayed` until its `time_next_packet` (fq's `fq_flow_set_throttled`).
    fn set_throttled(&mut self, id: u32) {
        let f = &mut self.flows.items[id as usize];
        f.next = THROTTLED;
        let t = f.time_next_packet;
        self.delayed.insert((t, self.delayed_seq), id);
        self.delayed_seq += 1;
        self.throttled_flows += 1;
        self.stats.throttled += 1;
        self.time_next_delayed_flow = self.time_next_delayed_flow.min(t);
    }

    /// Move the throttled flows due at `now` back to `old_flows` (fq's `fq_check_throttled`).
    fn check_throttled(&mut self, now: u64) {
        if self.time_next_delayed_flow > now {
            return;
        }
        self.time_next_delayed_flow = u64::MAX;
        while let Some(e) = self.delayed.first_entry() {
            let t = e.key().0;
            if t > now {
                self.time_next_delayed_flow = t;
                break;
            }
            let id = e.remove();
            self.throttled_flows -= 1;
            self.add_tail(Which::Old, id);
        }
    }

    /// Offer a packet at `now` (fq's `fq_enqueue`). `now` must not go backwards.
    pub fn enqueue(&mut self, now: u64, p: &Packet) -> Result<(), FqRejected> {
        if p.len == 0 {
            return self.reject(FqRejectReason::ZeroLength, p.token);
        }
        if self.len >= self.cfg.capacity {
            return self.reject(FqRejectReason::BufferFull, p.token);
        }
        let Some((id, detached_at)) = self.classify(now, p.flow) else {
            return self.reject(FqRejectReason::FlowTableFull, p.token);
        };
        let (quantum, refill) = (self.cfg.quantum, self.cfg.flow_refill_delay_ns);
        // A detached flow has no packets, so only an attached one can be at its limit (and
        // `classify` left its entry as it was).
        if self.flows.items[id as usize].qlen >= self.cfg.flow_plimit {
            return self.reject(FqRejectReason::FlowLimit, p.token);
        }
        if let Some(age) = detached_at {
            self.add_tail(Which::New, id);
            let f = &mut self.flows.items[id as usize];
            f.detached = false;
            if idle_longer(now, age, refill) {
                // fq: `max_t(u32, f->credit, q->quantum)`, which compares as unsigned and so
                // leaves a negative credit as it is.
                f.credit = (f.credit as u32).max(quantum) as i32;
            }
        }
        let Some(pkt) = self.pkts.insert(Pkt {
            token: p.token,
            arrival: now,
            pacing_bps: p.fields.pacing_bps,
            len: p.len,
            next: NIL,
        }) else {
            // Unreachable: `len < capacity` and the slab holds `capacity` packets.
            return self.reject(FqRejectReason::BufferFull, p.token);
        };
        let f = &mut self.flows.items[id as usize];
        if f.qlen == 0 {
            self.inactive_flows -= 1;
        }
        f.qlen += 1;
        if f.head == NIL {
            f.head = pkt;
        } else {
            self.pkts.items[f.tail as usize].next = pkt;
        }
        f.tail = pkt;
        self.len += 1;
        self.stats.enqueued += 1;
        Ok(())
    }

    /// When a packet may next be dequeued: `now` if a flow is eligible, the earliest
    /// throttled flow's time otherwise, `None` when empty (fq arms its watchdog for it).
    pub fn next_event(&self, now: u64) -> Option<u64> {
        if self.len == 0 {
            None
        } else if self.flow_count > self.inactive_flows + self.throttled_flows {
            Some(now)
        } else {
            Some(self.time_next_delayed_flow.max(now))
        }
    }

    /// Take the next packet to send at `now` (fq's `fq_dequeue`). Every flow is in one class:
    /// [`Dequeued::leaf`] is 0.
    pub fn dequeue(&mut self, now: u64) -> Option<Dequeued> {
        if self.len == 0 {
            return None;
        }
        self.check_throttled(now);
        let (id, pkt) = loop {
            let which = if self.new_flows.first != NIL {
                Which::New
            } else if self.old_flows.first != NIL {
                Which::Old
            } else {
                return None;
            };
            let id = self.list(which).first;
            let f = self.flows.items[id as usize];
            if f.credit <= 0 {
                self.flows.items[id as usize].credit += self.cfg.quantum as i32;
                self.pop_head(which, id);
                self.add_tail(Which::Old, id);
                continue;
            }
            if f.head == NIL {
                self.pop_head(which, id);
                if which == Which::New {
                    // Force a pass through old_flows to prevent starvation.
                    self.add_tail(Which::Old, id);
                } else {
                    let f = &mut self.flows.items[id as usize];
                    f.detached = true;
                    let key = f.key;
                    let t = self.tree_of(key);
                    if let Some(e) = self.trees[t].get_mut(&key) {
                        *e = entry(id, jiffies(now));
                    }
                }
                continue;
            }
            let time_next_packet = self.pkts.items[f.head as usize]
                .arrival
                .max(f.time_next_packet);
            if now < time_next_packet {
                self.pop_head(which, id);
                self.flows.items[id as usize].time_next_packet = time_next_packet;
                self.set_throttled(id);
                continue;
            }
            break (id, f.head);
        };
        let p = self.pkts.items[pkt as usize];
        self.pkts.release(pkt);
        self.len -= 1;
        self.stats.dequeued += 1;
        let max_rate = self.cfg.flow_max_rate.map_or(u64::MAX, Rate::bps);
        let low_rate = self.cfg.low_rate_threshold_bps;
        let quantum = self.cfg.quantum;
        let f = &mut self.flows.items[id as usize];
        f.head = p.next;
        if f.head == NIL {
            f.tail = NIL;
        }
        f.qlen -= 1;
        if f.qlen == 0 {
            self.inactive_flows += 1;
        }
        f.credit -= p.len as i32;
        let key = f.key;

        // Pacing: the socket's rate, capped by the qdisc's maxrate.
        let rate = match p.pacing_bps {
            0 => max_rate,
            r => r.min(max_rate),
        };
        let mut plen = p.len;
        let mut pace = true;
        if rate <= low_rate {
            f.credit = 0;
        } else {
            plen = plen.max(quantum);
            pace = f.credit <= 0;
        }
        if pace && rate != u64::MAX {
            // A 64-bit division, as fq's `div64_ul`, whenever the bits times 1e9 fit in 64 bits
            // (packets and quanta below 2.3 GB); 128 bits otherwise. The same quotient.
            let mut delay = match u64::from(plen).checked_mul(8_000_000_000) {
                Some(x) => x / rate,
                None => (u128::from(plen) * 8_000_000_000 / u128::from(rate)) as u64,
            };
            if delay > MAX_DELAY_NS {
                delay = MAX_DELAY_NS;
                self.stats.pkts_too_long += 1;
            }
            // Account for being served late: the flow was due at `time_next_packet`.
            if f.time_next_packet != 0 {
                delay -= (delay / 2).min(now.saturating_sub(f.time_next_packet));
            }
            f.time_next_packet = now + delay;
        }
        Some(Dequeued {
            token: p.token,
            len: p.len,
            flow: key,
            flow_id: id,
            leaf: 0,
            arrival: p.arrival,
        })
    }

    /// Verify the counters against the lists and trees; for tests. O(flows).
    pub fn check(&self) {
        let mut on_lists = 0;
        for list in [self.new_flows, self.old_flows] {
            let mut cur = list.first;
            while cur != NIL {
                let f = &self.flows.items[cur as usize];
                assert!(!f.detached && f.next != THROTTLED);
                on_lists += 1;
                cur = f.next;
            }
        }
        let mut flows = 0;
        let (mut inactive, mut throttled, mut detached, mut packets) = (0, 0, 0, 0);
        for tree in &self.trees {
            for (&k, &e) in tree {
                let f = &self.flows.items[entry_id(e) as usize];
                assert_eq!(f.key, k);
                assert_eq!(f.detached, entry_age(e).is_some());
                flows += 1;
                inactive += usize::from(f.qlen == 0);
                throttled += usize::from(f.next == THROTTLED);
                detached += usize::from(f.detached);
                packets += f.qlen as usize;
                if f.detached {
                    assert_eq!(f.qlen, 0, "a detached flow has no packets");
                }
            }
        }
        assert_eq!(flows, self.flow_count);
        assert_eq!(inactive, self.inactive_flows);
        assert_eq!(throttled, self.throttled_flows);
        assert_eq!(throttled, self.delayed.len());
        assert_eq!(packets, self.len);
        assert_eq!(on_lists + throttled + detached, flows);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Fields;

    fn pkt(token: u64, flow: u64, pacing_bps: u64) -> Packet {
        Packet {
            token,
            len: 1500,
            flow,
            fields: Fields {
                pacing_bps,
                ..Fields::default()
            },
            ..Packet::default()
        }
    }

    /// Dequeue everything, jumping to `next_event` when nothing is ready (no link time).
    fn drain(fq: &mut Fq, mut now: u64) -> Vec<(u64, Dequeued)> {
        let mut out = Vec::new();
        while let Some(t) = fq.next_event(now) {
            now = t;
            match fq.dequeue(now) {
                Some(d) => out.push((now, d)),
                None => now += 1,
            }
            fq.check();
        }
        out
    }

    #[test]
    fn paces_a_low_rate_flow_packet_by_packet() {
        let mut fq = Fq::new(FqConfig::default());
        for i in 0..20 {
            fq.enqueue(0, &pkt(i, 1, 100_000)).unwrap();
        }
        let sent = drain(&mut fq, 0);
        assert_eq!(sent.len(), 20);
        // 100 kbit/s is below the low-rate threshold: one packet every 120 ms, no burst.
        for (i, (t, d)) in sent.iter().enumerate() {
            assert_eq!(d.token, i as u64);
            assert_eq!(*t, i as u64 * 120_000_000);
        }
        assert_eq!(fq.stats().throttled, 19);
    }

    #[test]
    fn paces_a_fast_flow_to_its_rate_per_quantum() {
        let rate = 100_000_000; // 100 Mbit/s: 120 us per 1500-byte packet.
        let mut fq = Fq::new(FqConfig {
            flow_plimit: 1000,
            ..FqConfig::default()
        });
        for i in 0..400 {
            fq.enqueue(0, &pkt(i, 1, rate)).unwrap();
        }
        let sent = drain(&mut fq, 0);
        assert_eq!(sent.len(), 400);
        // The initial quantum (10 MTU) leaves at once...
        assert!(sent[..10].iter().all(|(t, _)| *t == 0));
        // ...then the flow is paced a quantum (2 MTU) at a time: each time its credit is
        // spent it waits one quantum's time at the rate and gets one quantum of credit, so in
        // the long run it sends at the rate.
        let (t0, t1) = (sent[20].0, sent[399].0);
        let bits = 379.0 * 1500.0 * 8.0;
        let achieved = bits / ((t1 - t0) as f64 / 1e9);
        assert!(
            (achieved / rate as f64 - 1.0).abs() < 0.01,
            "achieved {achieved} bit/s, paced at {rate}"
        );
    }

    #[test]
    fn max_rate_caps_the_socket_rate() {
        let mut fq = Fq::new(FqConfig {
            flow_max_rate: Rate::from_bps(100_000).ok(),
            ..FqConfig::default()
        });
        for i in 0..3 {
            fq.enqueue(0, &pkt(i, 1, 10_000_000_000)).unwrap();
        }
        let times: Vec<u64> = drain(&mut fq, 0).iter().map(|(t, _)| *t).collect();
        assert_eq!(times, vec![0, 120_000_000, 240_000_000]);
    }

    #[test]
    fn round_robins_flows_fairly() {
        let mut fq = Fq::new(FqConfig {
            flow_plimit: 1000,
            ..FqConfig::default()
        });
        for i in 0..300 {
            for flow in 0..3 {
                fq.enqueue(0, &pkt(i * 3 + flow, flow, 0)).unwrap();
            }
        }
        let mut count = [0i64; 3];
        for _ in 0..600 {
            let d = fq.dequeue(0).unwrap();
            count[d.flow as usize] += 1;
        }
        fq.check();
        // Fair to within the initial quantum plus a quantum (about 12 packets of 1500 bytes).
        let (min, max) = (count.iter().min().unwrap(), count.iter().max().unwrap());
        assert!(max - min <= 12, "{count:?}");
        // Within one round the flows alternate two packets (one quantum) at a time.
        let order: Vec<u64> = (0..12).map(|_| fq.dequeue(0).unwrap().flow).collect();
        for w in order.chunks(6) {
            let mut flows: Vec<u64> = w.to_vec();
            flows.sort_unstable();
            flows.dedup();
            assert_eq!(flows.len(), 3, "{order:?}");
        }
    }

    #[test]
    fn a_new_flow_goes_before_old_ones() {
        let mut fq = Fq::new(FqConfig::default());
        for i in 0..100 {
            fq.enqueue(0, &pkt(i, 1, 0)).unwrap();
        }
        // Flow 1 spends its initial quantum and becomes old.
        for _ in 0..20 {
            assert_eq!(fq.dequeue(0).unwrap().flow, 1);
        }
        fq.enqueue(0, &pkt(1000, 2, 0)).unwrap();
        // Flow 1 is on old_flows by now: the new flow goes next.
        assert_eq!(fq.dequeue(0).unwrap().flow, 2);
    }

    /// With and without collection on lookup, which find the flow by different paths (the
    /// one without writes the tree entry only to clear its detach stamp, read here).
    #[test]
    fn a_flow_idle_past_the_refill_delay_gets_a_quantum_of_credit() {
        let cases = [(10, 140), (100, 2 * 1514)];
        for ((idle_ms, credit), gc_scan) in cases.into_iter().flat_map(|c| [(c, 0), (c, 4)]) {
            let mut fq = Fq::new(FqConfig {
                gc_scan,
                ..FqConfig::default()
            });
            // Flow 1 sends 10 packets on its initial quantum: 140 bytes of credit left.
            for i in 0..10 {
                fq.enqueue(0, &pkt(i, 1, 0)).unwrap();
            }
            drain(&mut fq, 0);
            // Flow 2 spends its initial quantum, joins old_flows behind flow 1 and so makes a
            // dequeue find flow 1 empty there: flow 1 is detached at time 0.
            for i in 0..12 {
                fq.enqueue(0, &pkt(100 + i, 2, 0)).unwrap();
            }
            drain(&mut fq, 0);
            let id = |fq: &Fq| {
                fq.trees[fq.tree_of(1)]
                    .get(&1)
                    .map(|&e| entry_id(e))
                    .unwrap()
            };
            assert!(fq.flows.items[id(&fq) as usize].detached);
            let now = idle_ms * 1_000_000;
            fq.enqueue(now, &pkt(200, 1, 0)).unwrap();
            let f = &fq.flows.items[id(&fq) as usize];
            assert!(!f.detached);
            assert_eq!(f.credit, credit, "idle {idle_ms} ms, gc_scan {gc_scan}");
            let e = fq.trees[fq.tree_of(1)][&1];
            assert_eq!(entry_age(e), None, "attached again, gc_scan {gc_scan}");
            fq.check();
        }
    }

    #[test]
    fn throttled_flows_come_back_when_due_and_others_go_meanwhile() {
        let mut fq = Fq::new(FqConfig::default());
        // Flow 1 paced at 1 Mbit/s (above the low-rate threshold: paced a quantum at a time
        // once its initial quantum is spent), flow 2 unpaced.
        for i in 0..40 {
            fq.enqueue(0, &pkt(i, 1, 1_000_000)).unwrap();
        }
        fq.enqueue(0, &pkt(100, 2, 0)).unwrap();
        let mut now = 0;
        let mut sent = Vec::new();
        while sent.len() < 41 {
            match fq.dequeue(now) {
                Some(d) => sent.push((now, d.flow)),
                None => {
                    assert!(fq.throttled_flows() > 0);
                    now = fq.next_event(now).unwrap().max(now + 1);
                }
            }
            fq.check();
        }
        assert!(fq.stats().throttled > 0);
        // Flow 2 did not wait for flow 1's pacing.
        let t2 = sent.iter().find(|s| s.1 == 2).unwrap().0;
        assert_eq!(t2, 0);
        // Flow 1 sent its initial quantum at once, then came back each time it was due:
        // the other 29 packets took about their time at 1 Mbit/s (12 ms each).
        assert_eq!(sent.iter().filter(|s| s.1 == 1 && s.0 == 0).count(), 11);
        let last = sent.iter().rev().find(|s| s.1 == 1).unwrap().0;
        let paced_ns = 29.0 * 12e6;
        assert!((last as f64 / paced_ns - 1.0).abs() < 0.1, "{last}");
        assert!(fq.is_empty() && fq.throttled_flows() == 0);
    }

    #[test]
    fn gc_frees_flows_idle_longer_than_the_age_near_the_key() {
        let mut fq = Fq::new(FqConfig {
            trees_log: 0,
            ..FqConfig::default()
        });
        for k in 1..=10u64 {
            fq.enqueue(0, &pkt(k, k * 10, 0)).unwrap();
        }
        assert_eq!(drain(&mut fq, 0).len(), 10);
        // Emptied flows are detached lazily, by a dequeue passing over them on old_flows:
        // flow 1000 spends its initial quantum, joins old_flows behind them and makes the
        // dequeue walk the list.
        for i in 0..12 {
            fq.enqueue(1, &pkt(200 + i, 1000, 0)).unwrap();
        }
        assert_eq!(drain(&mut fq, 1).len(), 12);
        assert_eq!(fq.flows(), 11);
        fq.check();
        // Before the age, a lookup collects nothing.
        fq.enqueue(2_000_000_000, &pkt(100, 55, 0)).unwrap();
        assert_eq!(fq.stats().gc_flows, 0);
        assert_eq!(fq.flows(), 12);
        // After it, the lookup for key 55 frees the idle flows next to it: 20..50 below,
        // 60..90 above (four on each side).
        fq.enqueue(4_000_000_000, &pkt(101, 55, 0)).unwrap();
        assert_eq!(fq.stats().gc_flows, 8);
        assert_eq!(fq.flows(), 4, "10, 100, 1000 and 55 remain");
        fq.check();
        // A full sweep takes the other detached ones (10 and 100); flows still on a list
        // (1000 on old_flows, 55 with packets) stay.
        assert_eq!(fq.gc_sweep(9_000_000_000), 2);
        assert_eq!(fq.flows(), 2);
        assert_eq!(fq.len(), 2);
        fq.check();
    }

    #[test]
    fn bounds_are_explicit_rejections() {
        let mut fq = Fq::new(FqConfig {
            capacity: 4,
            flows: 2,
            flow_plimit: 3,
            ..FqConfig::default()
        });
        let reason = |r: Result<(), FqRejected>| r.err().map(|e| e.reason);
        assert_eq!(reason(fq.enqueue(0, &pkt(1, 1, 0))), None);
        assert_eq!(reason(fq.enqueue(0, &pkt(2, 1, 0))), None);
        assert_eq!(reason(fq.enqueue(0, &pkt(3, 1, 0))), None);
        assert_eq!(
            reason(fq.enqueue(0, &pkt(4, 1, 0))),
            Some(FqRejectReason::FlowLimit)
        );
        assert_eq!(reason(fq.enqueue(0, &pkt(5, 2, 0))), None);
        assert_eq!(
            reason(fq.enqueue(0, &pkt(6, 3, 0))),
            Some(FqRejectReason::BufferFull)
        );
        fq.dequeue(0);
        assert_eq!(
            reason(fq.enqueue(0, &pkt(7, 3, 0))),
            Some(FqRejectReason::FlowTableFull)
        );
        let mut z = pkt(8, 1, 0);
        z.len = 0;
        assert_eq!(reason(fq.enqueue(0, &z)), Some(FqRejectReason::ZeroLength));
        assert_eq!(fq.stats().rejected, 4);
        fq.check();
    }
}
