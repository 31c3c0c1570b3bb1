//! The datapath: a lossless virtual switch between ports.
//!
//! ```text
//!  port a ──read──> parse ──> link a->b: Pipeline (source buffers -> admission -> scheduler)
//!                                                         │ egress at release time
//!  port b <──write── delay line (optional) <──────────────┘
//! ```
//!
//! Each [`Datapath::step`] reads every port eagerly (up to a batch each), since no port stops
//! its sender when the reader stalls: the kernel would drop at its ring, and TCP would see loss
//! instead of delay. A frame goes into a buffer of the arena, is parsed (malformed frames are
//! counted per reason, then dropped or sent to the default class), charged its bytes on the
//! wire (every segment of a GSO super-frame) and handed to its link's pipeline. Then every
//! link's scheduler releases what is due, straight to the outgoing port or through its delay
//! line.
//!
//! **At the memory bound** (no free buffer, or the pipeline's source buffers full): lossless,
//! the datapath stops reading that port and keeps the frame in hand until frames leave;
//! lossy, it reads and drops, counted.
//!
//! Time is passed in (the daemon reads the clock once per step); [`Datapath::next_wake`] says
//! when the next release is due, so an event-driven host can sleep until then.

use crate::buffers::{BUF_SIZE, Buffers, Meta};
use crate::codel::{self, Codel};
use crate::config::{AtBound, Malformed};
use crate::delay::DelayLine;
use crate::ecn;
use crate::parse;
use crate::port::{Port, PortEvent, VNET_HDR_LEN, VnetHdr};
use crate::stats::{
    ClassSnapshot, Counters, DropReason, FlowCounts, LinkSnapshot, PortSnapshot, Snapshot,
};
use sluice_flow::dpfq::{BoundAction, RingPool};
use sluice_flow::{IngressError, Pipeline, PipelineConfig};
use sluice_sched::{Fields, Headers, NodeId, Packet, Rate, Scheduler};
use std::collections::VecDeque;
use std::io;

/// Frames read from one port per step at most (so one busy port cannot starve the others).
pub const BATCH: usize = 64;

/// One direction of the switch.
pub struct Link {
    /// Reading port.
    pub from: usize,
    /// Writing port.
    pub to: usize,
    /// Its pipeline (and scheduler).
    pub pipeline: Pipeline,
    /// The policy file it came from.
    pub policy: Option<String>,
    flows: FlowCounts,
    codel: Option<Codel>,
}

/// How to build a link.
pub struct LinkSpec {
    /// Reading port.
    pub from: usize,
    /// Writing port.
    pub to: usize,
    /// Its scheduler.
    pub scheduler: Scheduler,
    /// The policy file (for statistics).
    pub policy: Option<String>,
}

/// Datapath settings.
#[derive(Clone, Copy, Debug)]
pub struct DatapathConfig {
    /// Bytes of frame buffers (the memory bound; see [`Buffers::with_memory`]).
    pub memory: usize,
    /// Action at the bound.
    pub at_bound: AtBound,
    /// Malformed frames.
    pub malformed: Malformed,
    /// Frames the scheduled buffer (zD) of each link holds.
    pub scheduled: usize,
    /// Mark ECN-capable frames Congestion Experienced by CoDel's law with these parameters
    /// (None: never mark). See [`crate::codel`] and [`crate::ecn`].
    pub ecn: Option<codel::Params>,
}

/// Why a datapath cannot be built.
#[derive(Debug, thiserror::Error)]
pub enum DatapathError {
    /// A link names a port that does not exist.
    #[error("link from port {from} to port {to}: no such port")]
    NoPort {
        /// From.
        from: usize,
        /// To.
        to: usize,
    },
    /// A pipeline cannot be built.
    #[error("link {from} -> {to}: {source}")]
    Pipeline {
        /// From.
        from: String,
        /// To.
        to: String,
        /// Why.
        source: sluice_flow::pipeline::PipelineError,
    },
    /// The source buffer pool cannot be built.
    #[error("source buffers: {0}")]
    Pool(#[from] sluice_flow::dpfq::DpfqError),
}

/// The switch; see the module note.
pub struct Datapath {
    ports: Vec<Box<dyn Port>>,
    names: Vec<String>,
    links: Vec<Link>,
    /// For each port, the link its frames go to.
    link_of: Vec<Option<usize>>,
    buffers: Buffers,
    scratch: Vec<u8>,
    delay: Vec<DelayLine>,
    /// Frames a port could not take yet, in order.
    tx_backlog: Vec<VecDeque<u32>>,
    /// Per reading port: a frame refused with backpressure, retried before reading more.
    held: Vec<Option<(u32, Packet)>>,
    /// Ports that may have frames to read: cleared when a read finds none, set again by
    /// [`Datapath::readable`] (the event loop's epoll said so). Saves a system call per port
    /// and step that would only say "nothing here". All true, always, unless
    /// [`Datapath::track_readiness`] was called.
    readable: Vec<bool>,
    tracking_readiness: bool,
    /// A port whose device is gone (its tap deleted under the daemon), and why: every read
    /// would fail the same way, so the host stops ([`Datapath::port_gone`]).
    gone: Option<(usize, io::Error)>,
    /// Ports attached again to their interface on a new descriptor, which an event loop has
    /// not waited on yet ([`Datapath::take_reopened`]).
    reopened: Vec<bool>,
    at_bound: AtBound,
    malformed: Malformed,
    counters: Counters,
}

/// Whether a read error means the port's device is gone for good: a tap whose interface was
/// deleted reads `EBADFD`; a vanished device `ENODEV` or `ENXIO`.
fn is_gone(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::EBADFD | libc::ENODEV | libc::ENXIO)
    )
}

impl Datapath {
    /// A switch over `ports` (named `names`), with `links` and per-port delay lines `delays`
    /// (`(delay_ns, jitter_ns)`).
    pub fn new(
        ports: Vec<Box<dyn Port>>,
        names: Vec<String>,
        delays: Vec<(u64, u64)>,
        links: Vec<LinkSpec>,
        cfg: DatapathConfig,
    ) -> Result<Self, DatapathError> {
        let n = ports.len();
        let buffers = Buffers::with_memory(cfg.memory);
        let frames = buffers.count();
        let pool = RingPool::new(frames.div_ceil(16) + 1024, 16, frames)?;
        let mut link_of = vec![None; n];
        let mut built = Vec::with_capacity(links.len());
        for (i, l) in links.into_iter().enumerate() {
            if l.from >= n || l.to >= n {
                return Err(DatapathError::NoPort {
                    from: l.from,
                    to: l.to,
                });
            }
            let sources = l.scheduler.flow_capacity().max(1);
            let scheduled = cfg.scheduled.min(l.scheduler.capacity()).max(1);
            let pcfg = PipelineConfig {
                at_bound: match cfg.at_bound {
                    AtBound::Pause => BoundAction::Pause,
                    AtBound::Drop => BoundAction::Drop,
                },
                ..PipelineConfig::new(sources, scheduled, frames)
            };
            let pipeline =
                Pipeline::with_pool(l.scheduler, pcfg, pool.clone()).map_err(|source| {
                    DatapathError::Pipeline {
                        from: names[l.from].clone(),
                        to: names[l.to].clone(),
                        source,
                    }
                })?;
            link_of[l.from] = Some(i);
            built.push(Link {
                from: l.from,
                to: l.to,
                pipeline,
                policy: l.policy,
                flows: FlowCounts::new(4096),
                codel: cfg.ecn.map(Codel::new),
            });
        }
        Ok(Datapath {
            delay: (0..n)
                .map(|i| {
                    let (d, j) = delays.get(i).copied().unwrap_or((0, 0));
                    DelayLine::new(d, j, 0x5eed + i as u64)
                })
                .collect(),
            tx_backlog: vec![VecDeque::new(); n],
            held: vec![None; n],
            readable: vec![true; n],
            tracking_readiness: false,
            gone: None,
            reopened: vec![false; n],
            ports,
            names,
            links: built,
            link_of,
            buffers,
            scratch: vec![0; BUF_SIZE],
            at_bound: cfg.at_bound,
            malformed: cfg.malformed,
            counters: Counters::default(),
        })
    }

    /// The ports.
    pub fn ports(&self) -> &[Box<dyn Port>] {
        &self.ports
    }

    /// The links.
    pub fn links(&self) -> &[Link] {
        &self.links
    }

    /// The datapath's own counters.
    pub fn counters(&self) -> &Counters {
        &self.counters
    }

    /// From now on, read a port that a read found empty only after [`Datapath::readable`] says
    /// it has frames again. For an event loop that watches the ports' descriptors.
    pub fn track_readiness(&mut self) {
        self.tracking_readiness = true;
    }

    /// Port `p` has frames to read (its descriptor polled readable).
    pub fn readable(&mut self, p: usize) {
        if let Some(r) = self.readable.get_mut(p) {
            *r = true;
        }
    }

    /// The port whose device is gone, by name, and the error its reads gave: a host stops the
    /// daemon when it sees one (a level-triggered epoll would report the dead descriptor
    /// forever, and every read fail).
    pub fn port_gone(&self) -> Option<(&str, &io::Error)> {
        self.gone
            .as_ref()
            .map(|(p, e)| (self.names[*p].as_str(), e))
    }

    /// Epoll reported an error condition on port `p`: take the port's pending error so that
    /// it is not reported again. An AF_PACKET socket reports `ENETDOWN` when its interface goes
    /// down or is deleted: the port notes the outage, which the next step says
    /// ([`Datapath::step`] tends the ports).
    pub fn port_error(&mut self, p: usize) {
        let Some(port) = self.ports.get_mut(p) else {
            return;
        };
        match port.take_error() {
            Ok(Some(e)) if is_gone(&e) => {
                self.gone.get_or_insert((p, e));
            }
            Ok(Some(e)) => {
                tracing::debug!(port = %self.names[p], error = %e, "port reports an error")
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(port = %self.names[p], error = %e, "cannot read the port's error")
            }
        }
        self.readable(p);
    }

    /// Whether port `p` was attached again to its interface on a new descriptor since the
    /// last call: an event loop stops counting the old one as watched (closing it took it out
    /// of the epoll set) and waits on the new one.
    pub fn take_reopened(&mut self, p: usize) -> bool {
        self.reopened.get_mut(p).is_some_and(std::mem::take)
    }

    /// Whether port `p` should be read now: it feeds a link, no frame read from it is waiting
    /// for room, and a large buffer is free to read into (or frames are dropped at the bound).
    /// An event-driven host stops waiting for `p`'s frames while this is false, and looks
    /// again after a step.
    pub fn wants_read(&self, p: usize) -> bool {
        self.link_of.get(p).is_some_and(Option::is_some)
            && self.held.get(p).is_some_and(Option::is_none)
            && (self.buffers.can_read() || self.at_bound == AtBound::Drop)
    }

    /// Frames held anywhere in the datapath (buffers in use).
    pub fn held(&self) -> usize {
        self.buffers.count() - self.buffers.available()
    }

    /// One round: read every port, release what the schedulers let go, flush delay lines,
    /// look after the ports' interfaces. Returns whether any frame moved.
    pub fn step(&mut self, now: u64) -> bool {
        let mut moved = false;
        for p in 0..self.ports.len() {
            moved |= self.read_port(p, now);
        }
        for l in 0..self.links.len() {
            moved |= self.release(l, now);
        }
        for p in 0..self.ports.len() {
            moved |= self.flush(p, now);
        }
        for p in 0..self.ports.len() {
            self.tend(p, now);
        }
        moved
    }

    /// Look after port `p`'s interface ([`Port::tend`]): say an outage once when it begins
    /// and once when it ends (an AF_PACKET port's interface down, deleted, created again), and
    /// read the port again once it is back.
    fn tend(&mut self, p: usize, now: u64) {
        let Some(event) = self.ports[p].tend(now) else {
            return;
        };
        let (port, ifname) = (&self.names[p], self.ports[p].ifname());
        match &event {
            PortEvent::Lost(why) => tracing::warn!(
                port = %port,
                error = %why,
                "interface `{ifname}` is down or gone: frames sent to it are dropped (tx_error) \
                 until it is back"
            ),
            PortEvent::Back {
                ifindex,
                rebound: true,
                ..
            } => tracing::info!(
                port = %port,
                "interface `{ifname}` back, re-bound to index {ifindex}"
            ),
            PortEvent::Back { ifindex, .. } => tracing::info!(
                port = %port,
                "interface `{ifname}` back, up again at index {ifindex}"
            ),
            PortEvent::Stuck(why) => tracing::warn!(
                port = %port,
                error = %why,
                "interface `{ifname}` is back but the port cannot attach to it yet; trying again"
            ),
        }
        if let PortEvent::Back { reopened, .. } = event {
            self.readable[p] = true;
            self.reopened[p] |= reopened;
        }
    }

    /// Read up to a batch of frames from port `p` into its link.
    fn read_port(&mut self, p: usize, now: u64) -> bool {
        let Some(l) = self.link_of[p] else {
            return false;
        };
        let mut moved = false;
        if let Some((buf, pkt)) = self.held[p].take() {
            if !self.ingress(p, l, buf, pkt, now) {
                return false;
            }
            moved = true;
        }
        if !self.readable[p] {
            return moved;
        }
        for _ in 0..BATCH {
            let Some(buf) = self.buffers.take() else {
                match self.at_bound {
                    AtBound::Pause => {
                        // Lossless: leave the frames in the kernel until frames leave here.
                        self.counters.read_pauses += 1;
                        break;
                    }
                    AtBound::Drop => match self.ports[p].recv(&mut self.scratch) {
                        Ok(Some(_)) => {
                            self.counters.drop(DropReason::AtBound);
                            moved = true;
                            continue;
                        }
                        Ok(None) => {
                            self.readable[p] = !self.tracking_readiness;
                            break;
                        }
                        Err(e) => {
                            self.read_failed(p, e);
                            break;
                        }
                    },
                }
            };
            match self.ports[p].recv(self.buffers.space(buf)) {
                Ok(Some(len)) => {
                    self.buffers.set_len(buf, len);
                    let buf = self.buffers.shrink(buf);
                    moved = true;
                    let Some(pkt) = self.classify(buf, now) else {
                        self.buffers.give(buf);
                        continue;
                    };
                    if !self.ingress(p, l, buf, pkt, now) {
                        break;
                    }
                }
                Ok(None) => {
                    self.buffers.give(buf);
                    self.readable[p] = !self.tracking_readiness;
                    break;
                }
                Err(e) => {
                    self.buffers.give(buf);
                    self.read_failed(p, e);
                    break;
                }
            }
        }
        moved
    }

    /// A read of port `p` failed with `e`, into a buffer or, at the bound, into the scratch
    /// space (it was not counted there, and a frame lost that way went unseen).
    fn read_failed(&mut self, p: usize, e: io::Error) {
        self.readable[p] = !self.tracking_readiness;
        if is_gone(&e) {
            self.gone.get_or_insert((p, e));
            return;
        }
        if e.kind() == io::ErrorKind::InvalidData {
            // A frame was read but cannot be used (a tap's frame cut at the buffer's end):
            // lost here, so counted here.
            self.counters.malformed(crate::stats::UNREADABLE_FRAME);
            self.counters.drop(DropReason::Malformed);
        }
        if e.kind() != io::ErrorKind::Interrupted {
            tracing::warn!(port = %self.names[p], error = %e, "read failed");
        }
    }

    /// Parse the frame in `buf` into a packet descriptor, or count why not (`None`: dropped).
    fn classify(&mut self, buf: u32, now: u64) -> Option<Packet> {
        let frame = self.buffers.frame(buf);
        let Some(vnet) = VnetHdr::read(frame) else {
            self.counters.malformed(crate::stats::TRUNCATED_VNET_HEADER);
            self.counters.drop(DropReason::Malformed);
            return None;
        };
        let eth = &frame[VNET_HDR_LEN..];
        if eth.is_empty() {
            self.counters.drop(DropReason::Empty);
            return None;
        }
        let mut meta = Meta {
            arrived: now,
            l3: 0,
            ethertype: 0,
        };
        let (headers, flow, wire) = match parse::parse(eth) {
            Ok(pp) => {
                if pp.l3_len > 0 {
                    meta.l3 = pp.l2_len + VNET_HDR_LEN as u16;
                    meta.ethertype = pp.ethertype;
                }
                (
                    pp.headers(),
                    pp.flow_key(),
                    parse::wire_bytes(&vnet, Some(&pp), eth.len()),
                )
            }
            Err(m) => {
                self.counters.malformed(m.name());
                if self.malformed == Malformed::Drop {
                    self.counters.drop(DropReason::Malformed);
                    return None;
                }
                (
                    Headers::default(),
                    0,
                    parse::wire_bytes(&vnet, None, eth.len()),
                )
            }
        };
        self.buffers.set_meta(buf, meta);
        Some(Packet {
            token: u64::from(buf),
            len: wire.min(u64::from(u32::MAX)) as u32,
            flow,
            class: None,
            headers,
            fields: Fields::default(),
            flow_id: None,
        })
    }

    /// Hand a frame to link `l`'s pipeline. False when the link pushes back (the frame is
    /// kept for the next step and reading port `p` stops).
    fn ingress(&mut self, p: usize, l: usize, buf: u32, pkt: Packet, now: u64) -> bool {
        let (flow, len) = (pkt.flow, u64::from(pkt.len));
        match self.links[l].pipeline.ingress(now, pkt) {
            Ok(()) => {
                if let Some(codel) = self.links[l].codel.as_mut() {
                    codel.on_arrive(flow, len);
                }
                true
            }
            Err(IngressError::Backpressure(_)) => {
                self.held[p] = Some((buf, pkt));
                false
            }
            Err(e) => {
                self.counters.drop(match e {
                    IngressError::NoClass => DropReason::NoClass,
                    IngressError::ZeroLength => DropReason::Empty,
                    IngressError::Dropped | IngressError::Backpressure(_) => DropReason::AtBound,
                });
                self.buffers.give(buf);
                true
            }
        }
    }

    /// Let link `l`'s scheduler release what is due at `now`.
    fn release(&mut self, l: usize, now: u64) -> bool {
        let mut moved = false;
        while let Some(pkt) = self.links[l].pipeline.egress(now) {
            moved = true;
            let buf = pkt.token as u32;
            let link = &mut self.links[l];
            let headers = pkt.headers;
            link.flows
                .add(pkt.flow, u64::from(pkt.len), || label(&headers));
            let to = link.to;
            self.mark_if_late(l, buf, pkt.flow, u64::from(pkt.len), now);
            if self.delay[to].is_active() {
                self.delay[to].push(now, buf);
            } else {
                self.transmit(to, buf);
            }
        }
        while let Some((pkt, _why)) = self.links[l].pipeline.take_rejected() {
            if let Some(codel) = self.links[l].codel.as_mut() {
                codel.forget(pkt.flow, u64::from(pkt.len));
            }
            self.counters.drop(DropReason::Rejected);
            self.buffers.give(pkt.token as u32);
        }
        moved
    }

    /// Mark the frame in `buf` (of `flow`, leaving link `l`) Congestion Experienced if CoDel
    /// says its flow's queue has stood too long.
    fn mark_if_late(&mut self, l: usize, buf: u32, flow: u64, len: u64, now: u64) {
        let Some(codel) = self.links[l].codel.as_mut() else {
            return;
        };
        let meta = self.buffers.meta(buf);
        let late = codel.on_leave(flow, now, now.saturating_sub(meta.arrived), len);
        if meta.l3 == 0 || !late {
            return;
        }
        let frame = self.buffers.frame_mut(buf);
        if ecn::mark_ce(frame, usize::from(meta.l3), meta.ethertype) == ecn::Marked::Marked {
            self.counters.ecn_marked += 1;
        }
    }

    /// Write what port `p` has waiting: frames it could not take before, then due delayed ones.
    fn flush(&mut self, p: usize, now: u64) -> bool {
        let mut moved = self.retry_backlog(p);
        while self.tx_backlog[p].is_empty() {
            let Some(buf) = self.delay[p].pop_due(now) else {
                break;
            };
            moved = true;
            self.transmit(p, buf);
        }
        moved
    }

    fn retry_backlog(&mut self, p: usize) -> bool {
        let mut moved = false;
        while let Some(&buf) = self.tx_backlog[p].front() {
            match self.ports[p].send(self.buffers.frame(buf)) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                result => {
                    self.tx_backlog[p].pop_front();
                    if result.is_err() {
                        self.counters.drop(DropReason::TxError);
                    }
                    self.buffers.give(buf);
                    moved = true;
                }
            }
        }
        moved
    }

    /// Write the frame in `buf` to port `p` (or queue it behind frames the port could not take).
    fn transmit(&mut self, p: usize, buf: u32) {
        if !self.tx_backlog[p].is_empty() {
            self.tx_backlog[p].push_back(buf);
            return;
        }
        match self.ports[p].send(self.buffers.frame(buf)) {
            Ok(()) => self.buffers.give(buf),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tx_backlog[p].push_back(buf),
            Err(e) => {
                tracing::debug!(port = %self.names[p], error = %e, "write failed");
                self.counters.drop(DropReason::TxError);
                self.buffers.give(buf);
            }
        }
    }

    /// When something is next due: a scheduler release, a delayed frame, a look for a port's
    /// lost interface, or soon if a port pushed back. `None` when nothing is pending (wait for
    /// frames).
    pub fn next_wake(&self, now: u64) -> Option<u64> {
        let mut t = None;
        let mut at = |x: Option<u64>| {
            if let Some(x) = x {
                t = Some(t.map_or(x, |t: u64| t.min(x)));
            }
        };
        for l in &self.links {
            at(l.pipeline.next_event(now));
        }
        for d in &self.delay {
            at(d.next_due());
        }
        for port in &self.ports {
            at(port.next_tend());
        }
        if self.tx_backlog.iter().any(|b| !b.is_empty()) {
            at(Some(now + 50_000));
        }
        t
    }

    /// Change the rate limit of class `node` of the link from port `from`, at run time (at
    /// `now`, the time [`Datapath::step`] is given), and its burst; without a burst (`None`)
    /// the class keeps the one it has (0 if it has no limit now). A burst without a rate is
    /// refused: a class without a limit keeps no burst.
    pub fn set_rate(
        &mut self,
        now: u64,
        from: &str,
        node: &str,
        rate: Option<Rate>,
        burst: Option<u64>,
    ) -> Result<(), String> {
        let (l, n) = self.find(from, node)?;
        if rate.is_none() && burst.is_some() {
            return Err(
                "a burst with rate \"none\": a class without a limit keeps no burst; give it \
                 with the next rate"
                    .into(),
            );
        }
        self.set_node_rate(now, l, n, rate, burst);
        Ok(())
    }

    /// Set the rate limit of node `n` of link `l`, and its burst unless `None` (then it keeps
    /// its own). One engine answers `set_rate` this way and the allocator of several engines
    /// installs each engine's share this way, so both treat an absent burst alike.
    pub fn set_node_rate(
        &mut self,
        now: u64,
        l: usize,
        n: NodeId,
        rate: Option<Rate>,
        burst: Option<u64>,
    ) {
        let s = self.links[l].pipeline.scheduler_mut();
        let burst = burst.unwrap_or_else(|| s.burst(n));
        s.set_rate(now, n, rate, burst);
    }

    /// Link `l`'s index and node `node`'s id in it, for the link that reads from port `from`.
    pub fn find(&self, from: &str, node: &str) -> Result<(usize, NodeId), String> {
        let l = self
            .links
            .iter()
            .position(|l| self.names[l.from] == from)
            .ok_or_else(|| format!("no link reads from port `{from}`"))?;
        let n = self.links[l]
            .pipeline
            .scheduler()
            .node_by_name(node)
            .ok_or_else(|| format!("the policy of link `{from}` has no node `{node}`"))?;
        Ok((l, n))
    }

    /// Change the weight of class `node` of the link from port `from`, at run time.
    pub fn set_weight(&mut self, from: &str, node: &str, weight: u32) -> Result<(), String> {
        let (l, n) = self.find(from, node)?;
        if weight == 0 || weight > sluice_sched::policy::MAX_WEIGHT {
            return Err(format!(
                "weight {weight} is outside 1..={}",
                sluice_sched::policy::MAX_WEIGHT
            ));
        }
        let sched = self.links[l].pipeline.scheduler_mut();
        if !sched.set_weight(n, weight) {
            let Some(parent) = sched.parent(n) else {
                // A root with no children is the policy's one leaf: the weight is its flows',
                // and only its own policy can make it count.
                if sched.node_count() == 1 {
                    return Err(format!(
                        "`{node}` is the one leaf of its policy and does not share its flows \
                         by weight (its policy is {}); weights count under wfq, hclock and htb",
                        sched.node_policy(n)
                    ));
                }
                return Err(format!(
                    "`{node}` is the root of its policy: it has no parent to be weighed in"
                ));
            };
            return Err(format!(
                "`{node}`'s parent `{}` does not share by weight (its policy is {}); weights \
                 count under wfq, hclock and htb",
                sched.node_name(parent),
                sched.node_policy(parent)
            ));
        }
        Ok(())
    }

    /// Everything counted, now, with the `top_flows` busiest flows of each link (0: none, and
    /// then the flows are not looked at).
    pub fn snapshot(&self, uptime_ns: u64, top_flows: usize) -> Snapshot {
        let ports = self
            .ports
            .iter()
            .enumerate()
            .map(|(i, p)| {
                let c = p.counters();
                PortSnapshot {
                    name: self.names[i].clone(),
                    ifname: p.ifname().to_string(),
                    rx_frames: c.rx_frames,
                    rx_bytes: c.rx_bytes,
                    tx_frames: c.tx_frames,
                    tx_bytes: c.tx_bytes,
                    kernel_drops: c.kernel_drops,
                    delayed: self.delay[i].len() as u64,
                }
            })
            .collect();
        let links = self
            .links
            .iter()
            .map(|l| {
                let s = l.pipeline.scheduler();
                let classes = (0..s.node_count() as NodeId)
                    .map(|n| {
                        let st = s.node_stats(n);
                        ClassSnapshot {
                            name: s.node_name(n).to_string(),
                            rate_bps: s.rate(n).map(|r| r.bps()),
                            sent: st.sent,
                            sent_bytes: st.sent_bytes,
                            queued: st.arrived.saturating_sub(st.sent),
                            shaped: st.shaped,
                        }
                    })
                    .collect();
                let ps = l.pipeline.stats();
                LinkSnapshot {
                    from: self.names[l.from].clone(),
                    to: self.names[l.to].clone(),
                    policy: l.policy.clone(),
                    classes,
                    held: l.pipeline.len() as u64,
                    scheduled: l.pipeline.admission().occupancy() as u64,
                    paused: l.pipeline.admission().paused() as u64,
                    backpressure: ps.backpressure,
                    top_flows: l.flows.top(top_flows),
                }
            })
            .collect();
        Snapshot {
            uptime_ns,
            buffers_used: self.held() as u64,
            buffers_total: self.buffers.count() as u64,
            ports,
            links,
            drops: DropReason::ALL
                .iter()
                .map(|&r| (r.name().to_string(), self.counters.drops_for(r)))
                .collect(),
            malformed: self
                .counters
                .malformed
                .iter()
                .map(|(k, v)| ((*k).to_string(), *v))
                .collect(),
            read_pauses: self.counters.read_pauses,
            ecn_marked: self.counters.ecn_marked,
        }
    }
}

/// A readable 5-tuple for the top-flows view.
fn label(h: &Headers) -> String {
    match (h.src, h.dst) {
        (Some(s), Some(d)) => {
            let proto = match h.proto {
                Some(6) => "tcp",
                Some(17) => "udp",
                Some(1) => "icmp",
                _ => "ip",
            };
            match (h.sport, h.dport) {
                (Some(sp), Some(dp)) => format!("{proto} {s}:{sp} > {d}:{dp}"),
                _ => format!("{proto} {s} > {d}"),
            }
        }
        _ => "non-ip".to_string(),
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::buffers::SMALL_SIZE;
    use crate::port::PortCounters;
    use std::sync::{Arc, Mutex};

    /// A port that delivers a script of frames and read errors, then nothing, and keeps what
    /// is sent to it.
    struct Scripted {
        to_read: VecDeque<io::Result<Vec<u8>>>,
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Port for Scripted {
        fn ifname(&self) -> &str {
            "scripted"
        }
        fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
            match self.to_read.pop_front() {
                None => Ok(None),
                Some(Err(e)) => Err(e),
                Some(Ok(f)) => {
                    buf[..f.len()].copy_from_slice(&f);
                    Ok(Some(f.len()))
                }
            }
        }
        fn send(&mut self, frame: &[u8]) -> io::Result<()> {
            self.sent.lock().unwrap().push(frame.to_vec());
            Ok(())
        }
        fn fd(&self) -> std::os::fd::RawFd {
            -1
        }
        fn counters(&self) -> PortCounters {
            PortCounters::default()
        }
    }

    /// A virtio-net header and an Ethernet/IPv4/TCP frame from source port `sport` carrying
    /// `payload` bytes (whose content is `fill`).
    fn tcp_frame(sport: u16, payload: usize, fill: u8) -> Vec<u8> {
        let mut f = vec![0u8; VNET_HDR_LEN];
        f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let total = (40 + payload) as u16;
        let mut ip = [0u8; 20];
        ip[0] = 0x45;
        ip[2..4].copy_from_slice(&total.to_be_bytes());
        ip[8] = 64;
        ip[9] = 6;
        ip[12..16].copy_from_slice(&[10, 77, 0, 1]);
        ip[16..20].copy_from_slice(&[10, 77, 0, 2]);
        f.extend_from_slice(&ip);
        let mut tcp = [0u8; 20];
        tcp[0..2].copy_from_slice(&sport.to_be_bytes());
        tcp[2..4].copy_from_slice(&5201u16.to_be_bytes());
        tcp[12] = 5 << 4;
        tcp[13] = 0x10;
        f.extend_from_slice(&tcp);
        f.extend(std::iter::repeat_n(fill, payload));
        f
    }

    /// A datapath from a scripted port 0 to port 1 through `policy`, with `memory` bytes of
    /// buffers; also what port 1 is sent.
    pub(crate) fn scripted(
        frames: Vec<Vec<u8>>,
        policy: &str,
        memory: usize,
    ) -> (Datapath, Arc<Mutex<Vec<Vec<u8>>>>) {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let port = |to_read| -> Box<dyn Port> {
            Box::new(Scripted {
                to_read,
                sent: sent.clone(),
            })
        };
        let ports = vec![
            port(frames.into_iter().map(Ok).collect()),
            port(VecDeque::new()),
        ];
        let dp = two_ports(ports, policy, memory, AtBound::Pause);
        (dp, sent)
    }

    /// A datapath from port 0 (`a`) to port 1 (`b`) of `ports` through `policy`, with `memory`
    /// bytes of buffers and `at_bound` at their bound.
    fn two_ports(
        ports: Vec<Box<dyn Port>>,
        policy: &str,
        memory: usize,
        at_bound: AtBound,
    ) -> Datapath {
        let link = LinkSpec {
            from: 0,
            to: 1,
            scheduler: sluice_sched::config::build_str(policy, "test").unwrap(),
            policy: None,
        };
        let cfg = DatapathConfig {
            memory,
            at_bound,
            malformed: Malformed::Drop,
            scheduled: 4096,
            ecn: None,
        };
        Datapath::new(ports, vec!["a".into(), "b".into()], vec![], vec![link], cfg).unwrap()
    }

    const FIFO: &str =
        "[scheduler]\ndefault = \"q\"\n\n[[node]]\nname = \"q\"\npolicy = \"fifo\"\n";

    /// A port that says what its interface does, one event per [`Port::tend`], and keeps
    /// what is sent to it.
    struct Tended {
        events: VecDeque<Option<PortEvent>>,
        next_tend: Option<u64>,
        sent: Arc<Mutex<Vec<Vec<u8>>>>,
    }

    impl Port for Tended {
        fn ifname(&self) -> &str {
            "tended"
        }
        fn recv(&mut self, _buf: &mut [u8]) -> io::Result<Option<usize>> {
            Ok(None)
        }
        fn send(&mut self, frame: &[u8]) -> io::Result<()> {
            self.sent.lock().unwrap().push(frame.to_vec());
            Ok(())
        }
        fn fd(&self) -> std::os::fd::RawFd {
            -1
        }
        fn tend(&mut self, _now: u64) -> Option<PortEvent> {
            self.events.pop_front().flatten()
        }
        fn next_tend(&self) -> Option<u64> {
            self.next_tend
        }
        fn counters(&self) -> PortCounters {
            PortCounters::default()
        }
    }

    /// Every step tends every port; a port back on a new descriptor is to be waited on anew
    /// (said once), and read again; a port that waits to look for its interface wakes an
    /// event loop that has nothing else to do.
    #[test]
    fn ports_are_tended_and_a_reopened_one_is_said_once() {
        let sent = Arc::new(Mutex::new(Vec::new()));
        let back = |reopened| {
            Some(PortEvent::Back {
                ifindex: 7,
                rebound: true,
                reopened,
            })
        };
        let tended = Tended {
            events: [
                Some(PortEvent::Lost("gone".into())),
                None,
                Some(PortEvent::Stuck("not yet".into())),
                back(true),
                back(false),
            ]
            .into(),
            next_tend: Some(5_000),
            sent: sent.clone(),
        };
        let reader = Scripted {
            to_read: vec![Ok(tcp_frame(1, 10, 1))].into(),
            sent: sent.clone(),
        };
        let link = LinkSpec {
            from: 0,
            to: 1,
            scheduler: sluice_sched::config::build_str(FIFO, "test").unwrap(),
            policy: None,
        };
        let cfg = DatapathConfig {
            memory: 4 << 20,
            at_bound: AtBound::Pause,
            malformed: Malformed::Drop,
            scheduled: 4096,
            ecn: None,
        };
        let ports: Vec<Box<dyn Port>> = vec![Box::new(reader), Box::new(tended)];
        let mut dp =
            Datapath::new(ports, vec!["a".into(), "b".into()], vec![], vec![link], cfg).unwrap();
        dp.track_readiness();
        assert_eq!(dp.next_wake(1_000), Some(5_000), "a look is due");
        for t in 1..=3 {
            dp.step(t);
            assert!(!dp.take_reopened(1), "not reopened yet");
        }
        dp.step(4);
        assert!(dp.take_reopened(1), "reopened");
        assert!(!dp.take_reopened(1), "said once");
        assert!(dp.readable[1], "read again");
        dp.step(5);
        assert!(!dp.take_reopened(1), "back on the same descriptor");
        assert!(!dp.take_reopened(0) && !dp.take_reopened(9));
        assert_eq!(sent.lock().unwrap().len(), 1, "frames move meanwhile");
    }

    /// Where the rules send what is not a whole TCP or UDP packet: the fragments of a datagram
    /// go to one class (no ports, the first fragment included, though it carries them), frames
    /// that are not IP match only `vlan` rules and rules with no condition, and with
    /// `malformed = "default"` a malformed frame is classified with no fields at all.
    #[test]
    fn fragments_non_ip_and_malformed_frames_are_classified_as_documented() {
        let ip_flags = VNET_HDR_LEN + 14 + 6;
        let fragment = |flags: [u8; 2]| {
            let mut f = tcp_frame(40_000, 100, 1);
            f[ip_flags..ip_flags + 2].copy_from_slice(&flags);
            f
        };
        let eth = |tags: &[u8], ethertype: [u8; 2], len: usize| {
            let mut f = vec![0u8; VNET_HDR_LEN];
            f.extend_from_slice(&[2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1]);
            f.extend_from_slice(tags);
            f.extend_from_slice(&ethertype);
            f.extend(std::iter::repeat_n(0u8, len));
            f
        };
        let frames = vec![
            tcp_frame(40_000, 100, 1),               // whole: web
            fragment([0x20, 0]),                     // first fragment: rest (its ports ignored)
            fragment([0, 9]),                        // later fragment: rest
            eth(&[], [0x08, 0x06], 28),              // ARP: rest
            eth(&[0x81, 0, 0, 7], [0x08, 0x06], 28), // ARP in VLAN 7: vid
            eth(&[], [0x08, 0x00], 10),              // truncated IPv4: rest (no fields)
        ];
        let leaf = |name: &str| {
            format!("\n[[node]]\nname = \"{name}\"\nparent = \"root\"\npolicy = \"fifo\"\n")
        };
        let rules =
            "[[classify]]\nto = \"web\"\ndport = 5201\n\n[[classify]]\nto = \"vid\"\nvlan = 7\n";
        let base = format!(
            "[scheduler]\ndefault = \"rest\"\n\n[[node]]\nname = \"root\"\npolicy = \"wfq\"\n{}{}{}{}\n{rules}",
            leaf("web"),
            leaf("vid"),
            leaf("rest"),
            leaf("all"),
        );
        let sent_by_class = |policy: &str| {
            let (mut dp, sent) = scripted(frames.clone(), policy, 4 << 20);
            dp.malformed = Malformed::Default;
            for t in 1..100 {
                dp.step(t * 1_000_000);
            }
            assert_eq!(
                sent.lock().unwrap().len(),
                frames.len(),
                "every frame is sent"
            );
            let snap = dp.snapshot(5, 0);
            assert_eq!(snap.malformed.values().sum::<u64>(), 1);
            snap.links[0]
                .classes
                .iter()
                .map(|c| (c.name.clone(), c.sent))
                .filter(|(_, n)| *n > 0)
                .collect::<Vec<_>>()
        };
        let named = |v: &[(&str, u64)]| {
            v.iter()
                .map(|(n, c)| (n.to_string(), *c))
                .collect::<Vec<_>>()
        };
        assert_eq!(
            sent_by_class(&base),
            named(&[("root", 6), ("web", 1), ("vid", 1), ("rest", 4)])
        );
        // A rule with no condition, last, takes what no other rule matched: the fragments,
        // the untagged ARP frame and the malformed one.
        let catch_all = format!("{base}\n[[classify]]\nto = \"all\"\n");
        assert_eq!(
            sent_by_class(&catch_all),
            named(&[("root", 6), ("web", 1), ("vid", 1), ("all", 4)])
        );
    }

    /// The control socket's `set_weight` names a class; the root of a policy with classes
    /// has no weight, and saying so beats changing a child's weight in its place.
    #[test]
    fn set_weight_changes_a_class_and_refuses_an_internal_root() {
        let policy = "[scheduler]\ndefault = \"a\"\n\n[[node]]\nname = \"root\"\n\
                      policy = \"wfq\"\n\n[[node]]\nname = \"a\"\nparent = \"root\"\n\
                      policy = \"fifo\"\n";
        let (mut dp, _) = scripted(Vec::new(), policy, 4 << 20);
        assert_eq!(dp.set_weight("a", "a", 4), Ok(()));
        let err = dp.set_weight("a", "root", 4).unwrap_err();
        assert!(err.contains("`root` is the root"), "{err}");
        assert!(dp.set_weight("a", "a", 0).is_err());
        // Under a parent that shares by quantum (or priority), a weight would change nothing.
        let drr = policy.replace("\"wfq\"", "\"drr\"");
        let (mut dp, _) = scripted(Vec::new(), &drr, 4 << 20);
        let err = dp.set_weight("a", "a", 4).unwrap_err();
        assert!(
            err.contains("parent `root` does not share by weight"),
            "{err}"
        );
    }

    /// A policy of one leaf weighs its flows (docs/daemon.md): under `wfq` its weight
    /// changes, under a policy that does not share by weight (`fifo`, the policy of a link
    /// without a policy file, or `drr`) the refusal said "`fifo` is the root of its policy: it
    /// has no parent to be weighed in", which holds of a root with classes, not of a leaf
    /// whose weight would count under another policy. Now it names the policy.
    #[test]
    fn set_weight_on_a_policy_of_one_leaf_says_why_it_is_refused() {
        let one = |policy: &str| {
            format!(
                "[scheduler]\ndefault = \"q\"\n\n[[node]]\nname = \"q\"\npolicy = \"{policy}\"\n"
            )
        };
        let (mut dp, _) = scripted(Vec::new(), &one("wfq"), 4 << 20);
        assert_eq!(dp.set_weight("a", "q", 4), Ok(()));
        for policy in ["fifo", "drr"] {
            let (mut dp, _) = scripted(Vec::new(), &one(policy), 4 << 20);
            let err = dp.set_weight("a", "q", 4).unwrap_err();
            assert!(!err.contains("no parent"), "{policy}: {err}");
            assert!(
                err.contains(&format!("its policy is {policy}"))
                    && err.contains("weights count under wfq, hclock and htb"),
                "{policy}: {err}"
            );
        }
    }

    #[test]
    fn small_and_large_frames_leave_byte_for_byte_in_order() {
        let frames: Vec<Vec<u8>> = (0..300)
            .map(|i| {
                let payload = [10, SMALL_SIZE - 64, SMALL_SIZE + 500, 60_000][i % 4];
                tcp_frame(40_000, payload, i as u8)
            })
            .collect();
        let (mut dp, sent) = scripted(frames.clone(), FIFO, 4 << 20);
        for t in 1..1000 {
            dp.step(t * 1_000_000);
        }
        assert_eq!(*sent.lock().unwrap(), frames);
        assert_eq!(dp.held(), 0, "every buffer is back");
    }

    /// A snapshot for the metrics text (no flows) has every counter a full one has.
    #[test]
    fn a_snapshot_without_flows_differs_only_by_them() {
        let frames: Vec<Vec<u8>> = (0..30).map(|i| tcp_frame(40_000 + i % 3, 10, 1)).collect();
        let (mut dp, _) = scripted(frames, FIFO, 4 << 20);
        for t in 1..100 {
            dp.step(t * 1_000_000);
        }
        let full = dp.snapshot(5, crate::stats::TOP_FLOWS);
        assert_eq!(full.links[0].top_flows.len(), 3);
        let mut counters = dp.snapshot(5, 0);
        assert!(counters.links[0].top_flows.is_empty());
        counters.links[0].top_flows = full.links[0].top_flows.clone();
        assert_eq!(counters, full);
    }

    /// With `at_bound = "drop"` every frame read is sent, held or counted as a drop, also
    /// when no buffer is free: a frame the port read but could not use (a tap's frame cut at
    /// the buffer's end) was lost without a count when it was read at the bound, though the
    /// same frame read below the bound counts as `malformed` (`unreadable_frame`).
    #[test]
    fn at_the_bound_a_lossy_datapath_counts_every_frame_it_loses() {
        let cut = || io::Error::new(io::ErrorKind::InvalidData, "a frame filled the buffer");
        let memory = crate::buffers::MIN_MEMORY;
        let (large, _) = Buffers::split(memory);
        // Large frames fill the large buffers (a rate holds them), then more come, one cut.
        let mut script: VecDeque<io::Result<Vec<u8>>> = (0..large + 3)
            .map(|i| Ok(tcp_frame(i as u16, 60_000, 1)))
            .collect();
        script.push_back(Err(cut()));
        script.extend((0..3).map(|i| Ok(tcp_frame(1000 + i, 60_000, 2))));
        let offered = script.len() as u64;
        let sent = Arc::new(Mutex::new(Vec::new()));
        let ports: Vec<Box<dyn Port>> = vec![
            Box::new(Scripted {
                to_read: script,
                sent: sent.clone(),
            }),
            Box::new(Scripted {
                to_read: VecDeque::new(),
                sent: sent.clone(),
            }),
        ];
        let policy = "[scheduler]\ndefault = \"root\"\n\n[[node]]\nname = \"root\"\n\
                      policy = \"fifo\"\nrate = \"1kbit\"\nburst = \"3KB\"\n";
        let mut dp = two_ports(ports, policy, memory, AtBound::Drop);
        for t in 1..100 {
            dp.step(t * 1_000);
        }
        let s = dp.snapshot(1, 0);
        let dropped: u64 = s.drops.values().sum();
        let sent = sent.lock().unwrap().len() as u64;
        assert!(
            s.drops["at_bound"] > 0,
            "the bound was reached: {:?}",
            s.drops
        );
        assert_eq!(
            sent + dp.held() as u64 + dropped,
            offered,
            "sent {sent}, held {}, drops {:?}",
            dp.held(),
            s.drops
        );
        assert_eq!(
            s.malformed.get("unreadable_frame"),
            Some(&1),
            "{:?}",
            s.malformed
        );
    }

    #[test]
    fn small_frames_are_held_beyond_the_large_buffers() {
        // 47 large buffers and 271 small ones; a rate that lets almost nothing out.
        let memory = 4 << 20;
        let (large, small) = Buffers::split(memory);
        assert!(large < 200 && small > 200);
        let frames: Vec<Vec<u8>> = (0..200)
            .map(|i| tcp_frame(40_000 + i, 1448 * 2, 1))
            .collect();
        let policy = "[scheduler]\ndefault = \"root\"\n\n[[node]]\nname = \"root\"\n\
                      policy = \"fq\"\nrate = \"1kbit\"\nburst = \"3KB\"\n";
        let (mut dp, sent) = scripted(frames, policy, memory);
        for t in 1..100 {
            dp.step(t * 1_000);
        }
        let sent = sent.lock().unwrap().len();
        assert!(sent <= 1, "the rate holds them: {sent} sent");
        assert_eq!(dp.held() + sent, 200, "all read and held by the daemon");
        assert!(dp.wants_read(0), "large buffers are free to read more");
        let big: Vec<Vec<u8>> = (0..large + 5)
            .map(|i| tcp_frame(i as u16, 60_000, 2))
            .collect();
        let (mut dp, _) = scripted(big, policy, memory);
        for t in 1..100 {
            dp.step(t * 1_000);
        }
        assert!(dp.held() <= large, "large frames only fit large buffers");
        assert!(!dp.wants_read(0), "no large buffer free: reading pauses");
    }
}
