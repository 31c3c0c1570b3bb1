//! What a host tells the scheduler about a packet, and what the scheduler keeps of it.
//!
//! The scheduler never sees packet bytes. The host passes a [`Packet`]: its own `token` (an index
//! into its packet buffer, handed back on dequeue), the length on the wire, a flow key, the
//! header fields classifiers match on, and the fields policies rank by. The scheduler keeps a
//! [`Meta`] of 56 bytes per queued packet.

use std::net::IpAddr;

/// Header fields classifiers can match. All optional: a host fills in what it parsed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Headers {
    /// Source address.
    pub src: Option<IpAddr>,
    /// Destination address.
    pub dst: Option<IpAddr>,
    /// Source port (TCP/UDP).
    pub sport: Option<u16>,
    /// Destination port (TCP/UDP).
    pub dport: Option<u16>,
    /// IP protocol number (6 TCP, 17 UDP, ...).
    pub proto: Option<u8>,
    /// DSCP (the upper six bits of the traffic class).
    pub dscp: Option<u8>,
    /// VLAN id (802.1Q).
    pub vlan: Option<u16>,
}

/// Fields policies rank by. Zero means "not given" for the optional ones.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Fields {
    /// Strict-priority level, 0 = most urgent.
    pub priority: u8,
    /// Absolute deadline in ns (EDF).
    pub deadline: u64,
    /// Slack in ns at arrival (LSTF: rank = arrival + slack).
    pub slack: u64,
    /// Bytes the flow has left to send, including this packet (SRPT, pFabric).
    pub remaining: u64,
    /// The flow's own pacing rate in bit/s (Carousel: 2 cwnd / RTT), 0 = not given: the flow
    /// keeps the rate its packets last gave (as a socket keeps its pacing rate), or its leaf's
    /// `flow_rate` if none did. The leaf's `flow_rate` caps it (Linux fq's maxrate). 2^63 or
    /// more (`u64::MAX`, as Linux's `~0UL`) is no pacing of the flow's own: the flow then goes
    /// at the leaf's `flow_rate`, or unpaced if the leaf has none. The rate is kept with the
    /// flow's entry in the flow table: a flow reclaimed for a new one (idle, its gate's burst
    /// whole again) comes back as a new flow would, so a host whose flows may be reclaimed
    /// gives the rate with every packet, as a socket's skb carries it to fq.
    pub pacing_bps: u64,
}

/// A packet offered to the scheduler.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Packet {
    /// The host's handle for this packet, returned by `dequeue`.
    pub token: u64,
    /// Bytes on the wire (for a GSO super-frame, every segment's wire bytes).
    pub len: u32,
    /// Flow key: packets with the same key are one flow (e.g. a hash of the 5-tuple).
    pub flow: u64,
    /// A class id given by the host, for `class = N` classifiers.
    pub class: Option<u32>,
    /// Header fields for classifiers.
    pub headers: Headers,
    /// Fields for ranking.
    pub fields: Fields,
    /// The scheduler's id for this packet's flow, if the host kept it from an earlier
    /// [`Dequeued::flow_id`](crate::Dequeued) or [`Scheduler::flow_id`](crate::Scheduler):
    /// it saves the flow lookup. Checked against the key and the leaf, so a stale id (the
    /// flow was reclaimed meanwhile) costs the lookup, never a misfiled packet.
    pub flow_id: Option<FlowId>,
}

/// Dense flow id inside the scheduler.
pub type FlowId = u32;

/// What the scheduler keeps of a queued packet.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Meta {
    /// The host's token.
    pub token: u64,
    /// Arrival time (ns).
    pub arrival: u64,
    /// Ranking fields.
    pub deadline: u64,
    /// LSTF slack (ns).
    pub slack: u64,
    /// SRPT / pFabric remaining bytes.
    pub remaining: u64,
    /// Bytes on the wire.
    pub len: u32,
    /// Its flow.
    pub flow: FlowId,
    /// Strict priority.
    pub priority: u8,
}

impl Meta {
    /// The scheduler's record of `p`, arriving at `now` in flow `flow`.
    pub fn new(p: &Packet, flow: FlowId, now: u64) -> Self {
        Meta {
            token: p.token,
            arrival: now,
            deadline: p.fields.deadline,
            slack: p.fields.slack,
            remaining: p.fields.remaining,
            len: p.len,
            flow,
            priority: p.fields.priority,
        }
    }
}

const _: () = assert!(std::mem::size_of::<Meta>() == 56);
