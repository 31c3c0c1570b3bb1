//! Policies: how a node ranks what it orders. Each built-in policy is one small type behind the
//! [`Policy`] trait (BESS's `traffic_class.h` habit: a class per policy behind a tiny interface).
//!
//! A node orders **entries** in one of two modes ([`Mode`]):
//!
//! - **Per packet** (the classic PIFO tree): every packet that becomes available below the node
//!   adds one entry, ranked once when it is pushed ([`Policy::rank_packet`]). At an internal node
//!   the entry names the child the packet came from; at a leaf it is the packet.
//! - **Per member** (Eiffel's per-flow ranking): the node's members (the flows of a leaf, or the
//!   children of an internal node) are ranked as units, one entry per member that has packets
//!   available, re-ranked when a packet arrives ([`Policy::arrived`]) and after every packet it
//!   sends ([`Policy::served`]), with O(1) moves in the node's queue. Dual policies (hClock, HTB)
//!   keep each member in two queues, a reservation queue ranked by time and a share queue.
//!
//! A policy keeps its per-node state itself (e.g. WFQ's virtual time) and its per-member state
//! in the member's [`Tags`]. It describes its rank space ([`RankShape`]) so that a node set to
//! `queue = "auto"` can pick a queue by Eiffel's decision tree (Fig. 4.20).

mod fair;
mod order;
mod rls;
mod size;

pub use fair::{Drr, Fq, Wfq};
pub use order::{Edf, Fifo, Lstf, Prio};
pub use rls::{HClock, Htb};
pub use size::{LQF_LENGTHS, Lqf, Pfabric, compress};

use crate::packet::Meta;
use crate::units::Rate;
use sluice_queue::Rank;
use std::fmt;

/// Rank meaning "not in this queue" (a dual member without a reservation).
pub const ABSENT: Rank = Rank::MAX;

/// Virtual-time units per byte at weight 1 (fair policies): F += len * VT_PER_BYTE / weight.
pub const VT_PER_BYTE: u64 = 1 << 16;

/// Largest weight accepted.
pub const MAX_WEIGHT: u32 = 1 << 16;

/// Virtual-time length of `len` bytes at `weight`.
fn vt(len: u32, weight: u32) -> u64 {
    u64::from(len) * VT_PER_BYTE / u64::from(weight.max(1))
}

/// A member's charge for `len` bytes at `weight`, in whole virtual-time units, with `carry`,
/// what its earlier charges left below a unit (in units of 1/weight, less than `weight`):
/// the units and the carry after. Carried, the charges of a run add up to its bytes' exact
/// virtual time, to within one unit; truncated one by one, a 64 B packet at weight 59 927
/// (69.99 units) was charged 69, and its member got 1.4% more than its share.
#[inline]
fn vt_carried(len: u32, weight: u32, carry: u64) -> (u64, u64) {
    let w = u64::from(weight.max(1));
    let total = u64::from(len) * VT_PER_BYTE + carry;
    (total / w, total % w)
}

/// A tag's lead over the virtual time `v` (service its member had ahead of its share), earned
/// at weight `from`, as the lead the same bytes give at weight `to`; a tag not ahead of `v`
/// as it is. What a member owes its share is paid at its new weight, as a gate's debt is
/// paid at its new rate.
fn reweighed(tag: u64, v: u64, from: u32, to: u32) -> u64 {
    if tag <= v {
        return tag;
    }
    let lead = u128::from(tag - v) * u128::from(from.max(1)) / u128::from(to.max(1));
    v.saturating_add(u64::try_from(lead).unwrap_or(u64::MAX))
}

/// A fair policy's virtual time at which its node rebases ([`Policy::rebase`]). Virtual time
/// grows by [`VT_PER_BYTE`] per byte over the smallest active weight: a weight-1 member alone
/// at 100 Gbit/s takes it from 0 to 2^62 in about an hour and a half, and a u64 would wrap in
/// six. Half the rank space leaves room for tags ahead of it and keeps clear of [`ABSENT`].
pub const REBASE_AT: u64 = 1 << 62;

/// A rebase lowers virtual time by a multiple of this: a power of two, and a multiple of the
/// granularity `auto` gives any queue of fair ranks (2^21 with the default 64 KiB packets, 2^37
/// with 4 GiB ones), so every shifted rank stays in the bucket order it had. (A coarser
/// granularity set by hand may reorder members within one bucket, as its granularity allows.)
pub const REBASE_ALIGN: u64 = 1 << 40;

/// How far a policy whose virtual time is `v` rebases: down to between one and two
/// [`REBASE_ALIGN`]s, so that tags just behind `v` stay above zero.
pub fn rebase_offset(v: u64) -> u64 {
    (v & !(REBASE_ALIGN - 1)).saturating_sub(REBASE_ALIGN)
}

/// Start-time fair queuing's virtual time (Goyal et al.), as WFQ and hClock's and HTB's shares
/// keep it: `v`, the largest start tag served (SFQ's v(t) while the node is busy), and `f`, the
/// largest finish tag served, which `v` takes when a busy period ends ([`Policy::busy`]), so
/// that what a member sent in one busy period is not held against it in the next. Without
/// it, a member that sent one 9000 B packet alone waited, once the node had been idle, while
/// one of equal weight that came with it sent six of 1500 B.
///
/// `f` is taken only from members that empty: a member's finish tag only grows while it
/// sends, and by the end of a busy period every member has emptied, so the largest finish
/// tag served is the largest a member had when it emptied; a backlogged member's service
/// costs nothing more.
#[derive(Debug, Default)]
struct Clock {
    /// Virtual time.
    v: u64,
    /// The largest finish tag of a member when it emptied.
    f: u64,
}

impl Clock {
    /// A packet with start tag `start` was served: V follows it.
    #[inline]
    fn start(&mut self, start: u64) {
        self.v = self.v.max(start);
    }

    /// A member emptied with finish tag `finish`.
    #[inline]
    fn finish(&mut self, finish: u64) {
        self.f = self.f.max(finish);
    }

    /// [`Policy::busy`]: the node was idle, so its last busy period ended with V at the
    /// largest finish tag: every member that comes back starts there, level with the others.
    #[inline]
    fn busy(&mut self) {
        self.v = self.v.max(self.f);
    }

    /// [`Policy::rebase`].
    fn rebase(&mut self) -> u64 {
        let d = rebase_offset(self.v);
        self.v -= d;
        self.f = self.f.saturating_sub(d);
        d
    }

    /// [`Policy::set_param`]: `virtual_time` starts the clock elsewhere (tests of the rebase).
    fn set(&mut self, name: &str, value: u64) -> bool {
        match name {
            "virtual_time" => {
                self.v = value;
                self.f = value;
                true
            }
            _ => false,
        }
    }
}

/// How a node holds entries; see the module note.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// One entry per available packet, ranked once.
    PerPacket,
    /// One entry per member with available packets, re-ranked on arrival and service.
    PerMember,
}

/// Per-member ranking state; each policy documents what it keeps in `a`, `b`, `c`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Tags {
    /// First word.
    pub a: u64,
    /// Second word.
    pub b: u64,
    /// Third word.
    pub c: u64,
}

/// Configuration of one member: a child as set in the policy file, or a leaf's defaults for its
/// flows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct MemberCfg {
    /// Share (WFQ, hClock, HTB borrowing), 1..=65536.
    pub weight: u32,
    /// Strict priority of a child (0 = first); `None` for flows, which use the packet's.
    pub priority: Option<u8>,
    /// DRR / FQ quantum in bytes.
    pub quantum: u32,
    /// Guaranteed rate (hClock reservation, HTB rate).
    pub reservation: Option<Rate>,
}

impl Default for MemberCfg {
    fn default() -> Self {
        MemberCfg {
            weight: 1,
            priority: None,
            quantum: 3028,
            reservation: None,
        }
    }
}

impl MemberCfg {
    /// Apply a run-time change: the configuration as it was if `change` changed it, so that
    /// the member is re-ranked ([`Policy::reconfigured`]) only on a change (a lead forgiven
    /// again every 100 us gave a reserved member a fifth more than its reservation).
    pub fn edit(&mut self, change: impl FnOnce(&mut MemberCfg)) -> Option<MemberCfg> {
        let was = *self;
        change(self);
        (was != *self).then_some(was)
    }
}

/// What a member's queued packets look like, for policies that must look at them (pFabric's
/// minimum remaining size after its minimum leaves).
pub trait Backlog {
    /// Call `f` with every packet the member has queued, first to last.
    fn for_each(&self, f: &mut dyn FnMut(&Meta));
}

/// What happened when a member was served.
pub struct Service<'a> {
    /// The packet that left.
    pub sent: &'a Meta,
    /// Packets the member still has available (0: it leaves the queue).
    pub available: u32,
    /// The member's queued packets, for policies that must look.
    pub backlog: &'a dyn Backlog,
    /// Which queue the member was picked from (dual policies: 0 reservation, 1 share).
    pub from: usize,
    /// The time.
    pub now: u64,
}

/// A member with nothing to show (internal nodes' children).
pub struct NoBacklog;

impl Backlog for NoBacklog {
    fn for_each(&self, _f: &mut dyn FnMut(&Meta)) {}
}

/// The shape of a policy's ranks, for choosing a queue (Eiffel Fig. 4.20).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RankShape {
    /// A handful of distinct ranks `0..levels`.
    Levels(u64),
    /// Ranks in a fixed range `0..max`.
    Fixed {
        /// Exclusive upper end.
        max: u64,
    },
    /// Ranks within `span` of the current minimum, moving forward; `dense` when nearly every
    /// rank in the span is occupied (LSTF, hierarchical time stamps).
    Moving {
        /// Rank units ahead of the minimum.
        span: u64,
        /// Occupancy is dense.
        dense: bool,
    },
}

impl RankShape {
    /// The rank units its ranks spread over: the levels, the range, or the span ahead.
    pub fn span(self) -> u64 {
        match self {
            RankShape::Levels(l) => l,
            RankShape::Fixed { max } => max,
            RankShape::Moving { span, .. } => span,
        }
    }
}

/// What a policy may know to describe its ranks.
#[derive(Clone, Copy, Debug)]
pub struct ShapeCx {
    /// Largest packet, bytes.
    pub max_len: u32,
    /// Smallest member quantum (DRR, FQ), bytes, at least 1.
    pub min_quantum: u32,
    /// Smallest reservation among members, if any.
    pub min_reservation: Option<Rate>,
    /// Most packets the scheduler holds.
    pub capacity: u32,
}

/// A node's ranking policy; see the module note. Methods a mode does not use keep defaults.
pub trait Policy: fmt::Debug + Send {
    /// The policy's name in policy files.
    fn name(&self) -> &'static str;

    /// The mode this policy runs in at a leaf (`at_leaf`) or an internal node.
    fn mode(&self, at_leaf: bool) -> Mode;

    /// Whether members sit in two queues (reservation by time, then share).
    fn dual(&self) -> bool {
        false
    }

    /// Whether members' weights share this node (wfq, hclock, htb), so that changing one
    /// ([`crate::Scheduler::set_weight`]) does something. DRR and fq share by quantum.
    fn weighs(&self) -> bool {
        false
    }

    /// The shape of ranks in queue `which` (0, or 1 for a dual policy's share queue).
    fn shape(&self, cx: &ShapeCx, which: usize) -> RankShape;

    /// The node's queues order ranks exactly (a heap, a B-tree, a skip list), not by bucket:
    /// a policy that coarsens or clamps its ranks to fit a bucketed queue's range (pFabric's
    /// compressed sizes, EDF's and LSTF's window of deadlines) ranks by the exact values, so
    /// that the order is exactly the policy's.
    fn exact_queues(&mut self) {}

    /// Per packet: rank an entry for a packet from a member. `floor` is the rank of the node's
    /// first entry, or `now` when it holds none (see [`Policy::ranks_by_time`]; `now` for
    /// other policies).
    fn rank_packet(
        &mut self,
        _tags: &mut Tags,
        _cfg: &MemberCfg,
        _pkt: &Meta,
        _now: u64,
        _floor: Rank,
    ) -> Rank {
        0
    }

    /// Whether per-packet ranks are times that a moving-range queue must hold within its
    /// span of its first entry (EDF, LSTF): the host then passes that entry's rank as
    /// `floor` to [`Policy::rank_packet`].
    fn ranks_by_time(&self) -> bool {
        false
    }

    /// Per packet: an entry with `rank` left, carrying `pkt`.
    fn popped(&mut self, _rank: Rank, _pkt: &Meta, _now: u64) {}

    /// Per member: a member gets its first available packet, `head`. Returns its ranks.
    fn activate(
        &mut self,
        _tags: &mut Tags,
        _cfg: &MemberCfg,
        _head: &Meta,
        _now: u64,
    ) -> [Rank; 2] {
        [0, ABSENT]
    }

    /// Per member: a member is about to get its first available packet ([`Policy::activate`])
    /// at a node that had none, after its busy period ended (no member with packets).
    /// Start-time fair queuing forgets that period here (WFQ, hClock, HTB).
    fn busy(&mut self) {}

    /// Per member: another packet became available at an active member, which now has
    /// `available` of them. New ranks, if they change: `Some` moves the member in every queue
    /// (behind the members already at its new rank); `None` leaves it where it is.
    fn arrived(
        &mut self,
        _tags: &mut Tags,
        _cfg: &MemberCfg,
        _pkt: &Meta,
        _available: u32,
        _now: u64,
    ) -> Option<[Rank; 2]> {
        None
    }

    /// Per member: the member sent a packet. Its new ranks, used if it still has packets
    /// available (`s.available > 0`); otherwise it leaves the queue and they are ignored.
    fn served(&mut self, _tags: &mut Tags, _cfg: &MemberCfg, _s: &Service<'_>) -> [Rank; 2] {
        [0, ABSENT]
    }

    /// Per member, gone idle: whether its tags remember service it had ahead of its share (a
    /// debt of rounds, a finish tag past the virtual time), so that it would come back behind
    /// where a new member starts. The flow table keeps such a flow while its leaf holds
    /// packets instead of giving its slot to a new flow, which would forget the debt (as Linux
    /// fq keeps a flow with negative credit on its old list, not collected). hClock and HTB
    /// keep no such debt: their virtual time stands still while reservations serve everyone,
    /// so a share tag ahead of it need not be a lead, and a flow kept for it could be kept
    /// for good.
    fn owes(&self, _tags: &Tags, _cfg: &MemberCfg) -> bool {
        false
    }

    /// Per member: its weight or reservation (`cfg`, as it is now; `was`, as it was) was
    /// changed at run time, at `now`. Its new ranks if the change moves it (the scheduler then
    /// moves it in every queue if it has packets available); `None` leaves it where it is.
    fn reconfigured(
        &self,
        _tags: &mut Tags,
        _was: &MemberCfg,
        _cfg: &MemberCfg,
        _now: u64,
    ) -> Option<[Rank; 2]> {
        None
    }

    /// Per member, dual policies: the queue whose rank a service from queue `from` never
    /// changes (hClock: share service leaves the reservation tag as it was), so that the
    /// scheduler need not read the member's rank there to know it keeps its place.
    fn keeps(&self, _from: usize) -> Option<usize> {
        None
    }

    /// Change a node-wide parameter at run time (e.g. a default quantum); false if unknown.
    fn set_param(&mut self, _name: &str, _value: u64) -> bool {
        false
    }

    /// Fair policies (WFQ, hClock, HTB): the virtual time their share ranks follow; `None` for
    /// policies without one. The scheduler rebases the node when it reaches [`REBASE_AT`].
    fn virtual_time(&self) -> Option<u64> {
        None
    }

    /// Lower the virtual time by [`rebase_offset`] and return by how much, `d`. The scheduler
    /// then passes every member of the node to [`Policy::shifted`] and moves each queued one to
    /// its new ranks, in the order it had: only differences of tags matter, so the schedule
    /// goes on exactly as it would have without the shift.
    fn rebase(&mut self) -> u64 {
        0
    }

    /// A member's tags lowered by `d` after [`Policy::rebase`] (those already below `d`, long
    /// idle, to 0: behind the virtual time either way), and its ranks from them; with `d` = 0,
    /// the ranks its tags give as they stand.
    fn shifted(&self, _tags: &mut Tags, _cfg: &MemberCfg, _d: u64) -> [Rank; 2] {
        [ABSENT, ABSENT]
    }
}

/// The built-in policies, as named in policy files.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum PolicyKind {
    /// First in, first out.
    Fifo,
    /// Strict priority.
    Prio,
    /// Weighted fair queuing (start-time fair queuing with virtual time).
    Wfq,
    /// Deficit round robin.
    Drr,
    /// Earliest deadline first.
    Edf,
    /// Least slack time first.
    Lstf,
    /// pFabric / SRPT: least remaining flow size first, per flow.
    Pfabric,
    /// Longest queue first.
    Lqf,
    /// hClock: reservations, limits, shares.
    HClock,
    /// HTB-like: rate and ceil with borrowing.
    Htb,
    /// FQ/pacing: per-flow max rate plus fair queuing (Linux fq).
    Fq,
}

impl PolicyKind {
    /// Every kind.
    pub const ALL: [PolicyKind; 11] = [
        PolicyKind::Fifo,
        PolicyKind::Prio,
        PolicyKind::Wfq,
        PolicyKind::Drr,
        PolicyKind::Edf,
        PolicyKind::Lstf,
        PolicyKind::Pfabric,
        PolicyKind::Lqf,
        PolicyKind::HClock,
        PolicyKind::Htb,
        PolicyKind::Fq,
    ];

    /// Name in policy files.
    pub fn name(self) -> &'static str {
        match self {
            PolicyKind::Fifo => "fifo",
            PolicyKind::Prio => "prio",
            PolicyKind::Wfq => "wfq",
            PolicyKind::Drr => "drr",
            PolicyKind::Edf => "edf",
            PolicyKind::Lstf => "lstf",
            PolicyKind::Pfabric => "pfabric",
            PolicyKind::Lqf => "lqf",
            PolicyKind::HClock => "hclock",
            PolicyKind::Htb => "htb",
            PolicyKind::Fq => "fq",
        }
    }

    /// Look a name up (`srpt` is accepted for pFabric).
    pub fn from_name(name: &str) -> Option<PolicyKind> {
        if name == "srpt" {
            return Some(PolicyKind::Pfabric);
        }
        PolicyKind::ALL.into_iter().find(|k| k.name() == name)
    }

    /// Whether the policy orders flows and so belongs at a leaf only (or at internal nodes too).
    pub fn leaf_only(self) -> bool {
        matches!(self, PolicyKind::Pfabric | PolicyKind::Fq)
    }

    /// Whether the policy only makes sense at internal nodes.
    pub fn internal_only(self) -> bool {
        matches!(self, PolicyKind::Htb)
    }

    /// Whether its ranks move forward without bound (virtual time, rounds, deadlines, tags in
    /// time: [`RankShape::Moving`]), so that a queue for them needs a moving range or an exact
    /// order: a fixed range would soon hold every rank in its last bucket.
    pub fn moving_ranks(self) -> bool {
        !matches!(
            self,
            PolicyKind::Fifo | PolicyKind::Prio | PolicyKind::Pfabric | PolicyKind::Lqf
        )
    }

    /// A fresh policy object.
    pub fn build(self) -> AnyPolicy {
        match self {
            PolicyKind::Fifo => AnyPolicy::Fifo(Fifo),
            PolicyKind::Prio => AnyPolicy::Prio(Prio),
            PolicyKind::Wfq => AnyPolicy::Wfq(Wfq::default()),
            PolicyKind::Drr => AnyPolicy::Drr(Drr::default()),
            PolicyKind::Edf => AnyPolicy::Edf(Edf::default()),
            PolicyKind::Lstf => AnyPolicy::Lstf(Lstf::default()),
            PolicyKind::Pfabric => AnyPolicy::Pfabric(Pfabric::default()),
            PolicyKind::Lqf => AnyPolicy::Lqf(Lqf::default()),
            PolicyKind::HClock => AnyPolicy::HClock(HClock::default()),
            PolicyKind::Htb => AnyPolicy::Htb(Htb::default()),
            PolicyKind::Fq => AnyPolicy::Fq(Fq::default()),
        }
    }
}

/// Any built-in policy. The scheduler calls a node's policy two or three times per packet;
/// dispatching by `match` instead of through a vtable lets the compiler inline the few
/// instructions each call does (the policies stay small types behind [`Policy`]).
#[derive(Debug)]
#[allow(missing_docs)]
pub enum AnyPolicy {
    Fifo(Fifo),
    Prio(Prio),
    Wfq(Wfq),
    Drr(Drr),
    Edf(Edf),
    Lstf(Lstf),
    Pfabric(Pfabric),
    Lqf(Lqf),
    HClock(HClock),
    Htb(Htb),
    Fq(Fq),
}

/// Run `$body` with `$p` bound to the inner policy, whatever its type.
macro_rules! with_policy {
    ($any:expr, $p:ident => $body:expr) => {
        match $any {
            AnyPolicy::Fifo($p) => $body,
            AnyPolicy::Prio($p) => $body,
            AnyPolicy::Wfq($p) => $body,
            AnyPolicy::Drr($p) => $body,
            AnyPolicy::Edf($p) => $body,
            AnyPolicy::Lstf($p) => $body,
            AnyPolicy::Pfabric($p) => $body,
            AnyPolicy::Lqf($p) => $body,
            AnyPolicy::HClock($p) => $body,
            AnyPolicy::Htb($p) => $body,
            AnyPolicy::Fq($p) => $body,
        }
    };
}

impl AnyPolicy {
    /// [`Policy::served`] from the service's parts: each policy's arm builds its own
    /// [`Service`] (and the member's backlog, from `backlog`), so that a policy whose `served`
    /// is inlined reads the parts where they are instead of from a `Service` written to memory
    /// before the dispatch (callgrind, hclock at 1e3 flows: 1342 -> 1326 instructions per packet).
    #[allow(clippy::too_many_arguments)]
    #[inline]
    pub(crate) fn served_by<B: Backlog>(
        &mut self,
        tags: &mut Tags,
        cfg: &MemberCfg,
        sent: &Meta,
        available: u32,
        backlog: impl FnOnce() -> B,
        from: usize,
        now: u64,
    ) -> [Rank; 2] {
        with_policy!(self, p => {
            let backlog = backlog();
            let s = Service {
                sent,
                available,
                backlog: &backlog,
                from,
                now,
            };
            p.served(tags, cfg, &s)
        })
    }
}

impl Policy for AnyPolicy {
    fn name(&self) -> &'static str {
        with_policy!(self, p => p.name())
    }
    fn mode(&self, at_leaf: bool) -> Mode {
        with_policy!(self, p => p.mode(at_leaf))
    }
    fn dual(&self) -> bool {
        with_policy!(self, p => p.dual())
    }
    fn weighs(&self) -> bool {
        with_policy!(self, p => p.weighs())
    }
    fn shape(&self, cx: &ShapeCx, which: usize) -> RankShape {
        with_policy!(self, p => p.shape(cx, which))
    }
    fn exact_queues(&mut self) {
        with_policy!(self, p => p.exact_queues())
    }
    #[inline]
    fn rank_packet(
        &mut self,
        tags: &mut Tags,
        cfg: &MemberCfg,
        pkt: &Meta,
        now: u64,
        floor: Rank,
    ) -> Rank {
        with_policy!(self, p => p.rank_packet(tags, cfg, pkt, now, floor))
    }
    #[inline]
    fn ranks_by_time(&self) -> bool {
        with_policy!(self, p => p.ranks_by_time())
    }
    #[inline]
    fn popped(&mut self, rank: Rank, pkt: &Meta, now: u64) {
        with_policy!(self, p => p.popped(rank, pkt, now))
    }
    #[inline]
    fn activate(&mut self, tags: &mut Tags, cfg: &MemberCfg, head: &Meta, now: u64) -> [Rank; 2] {
        with_policy!(self, p => p.activate(tags, cfg, head, now))
    }
    #[inline]
    fn busy(&mut self) {
        with_policy!(self, p => p.busy())
    }
    #[inline]
    fn arrived(
        &mut self,
        tags: &mut Tags,
        cfg: &MemberCfg,
        pkt: &Meta,
        available: u32,
        now: u64,
    ) -> Option<[Rank; 2]> {
        with_policy!(self, p => p.arrived(tags, cfg, pkt, available, now))
    }
    #[inline]
    fn served(&mut self, tags: &mut Tags, cfg: &MemberCfg, s: &Service<'_>) -> [Rank; 2] {
        with_policy!(self, p => p.served(tags, cfg, s))
    }
    #[inline]
    fn keeps(&self, from: usize) -> Option<usize> {
        with_policy!(self, p => p.keeps(from))
    }
    fn set_param(&mut self, name: &str, value: u64) -> bool {
        with_policy!(self, p => p.set_param(name, value))
    }
    #[inline]
    fn virtual_time(&self) -> Option<u64> {
        with_policy!(self, p => p.virtual_time())
    }
    fn rebase(&mut self) -> u64 {
        with_policy!(self, p => p.rebase())
    }
    fn shifted(&self, tags: &mut Tags, cfg: &MemberCfg, d: u64) -> [Rank; 2] {
        with_policy!(self, p => p.shifted(tags, cfg, d))
    }
    fn reconfigured(
        &self,
        tags: &mut Tags,
        was: &MemberCfg,
        cfg: &MemberCfg,
        now: u64,
    ) -> Option<[Rank; 2]> {
        with_policy!(self, p => p.reconfigured(tags, was, cfg, now))
    }
    fn owes(&self, tags: &Tags, cfg: &MemberCfg) -> bool {
        with_policy!(self, p => p.owes(tags, cfg))
    }
}

impl fmt::Display for PolicyKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Carried charges add up to the exact virtual time of all the bytes, rounded down once.
    #[test]
    fn carried_charges_add_up_to_the_exact_virtual_time() {
        for (weight, lens) in [
            (59_927, &[64u32][..]),
            (63_953, &[40, 1500, 9000]),
            (3, &[1, 2]),
            (MAX_WEIGHT, &[65_535]),
            (1, &[64, 1500]),
        ] {
            let (mut units, mut carry, mut bytes) = (0, 0, 0);
            for i in 0..10_000 {
                let len = lens[i % lens.len()];
                let (u, c) = vt_carried(len, weight, carry);
                assert!(c < u64::from(weight), "weight {weight}: carry {c}");
                (units, carry, bytes) = (units + u, c, bytes + u64::from(len));
            }
            assert_eq!(
                units,
                bytes * VT_PER_BYTE / u64::from(weight),
                "weight {weight}"
            );
        }
    }

    /// `moving_ranks` says what every queue of the built policy's `shape` says.
    #[test]
    fn moving_ranks_agrees_with_every_queue_shape() {
        let cx = ShapeCx {
            max_len: 9000,
            min_quantum: 1500,
            min_reservation: Some(Rate::mbit(1)),
            capacity: 1024,
        };
        for kind in PolicyKind::ALL {
            let p = kind.build();
            let queues = if p.dual() { 2 } else { 1 };
            for which in 0..queues {
                let moving = matches!(p.shape(&cx, which), RankShape::Moving { .. });
                assert_eq!(kind.moving_ranks(), moving, "{kind:?} queue {which}");
            }
        }
    }
}
