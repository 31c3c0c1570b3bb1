//! Frame parsing: what the software NIC reads out of an Ethernet frame before it classifies and
//! schedules it, and what a frame costs on the wire.
//!
//! [`parse`] reads one Ethernet frame (the bytes after the virtio-net header) defensively: every
//! read is bounds-checked, nothing panics, and a frame that is cut short or contradicts itself
//! is an `Err(`[`Malformed`]`)` naming the reason (one counter per reason in the daemon's
//! statistics). It allocates nothing and reads each header once: O(headers), at most
//! [`MAX_VLAN_TAGS`] tags and [`MAX_IPV6_EXT_HEADERS`] IPv6 extension headers.
//!
//! What is parsed:
//!
//! | layer | parsed | not parsed (the frame is still valid) |
//! |---|---|---|
//! | L2 | Ethernet II; up to two 802.1Q (`0x8100`) or 802.1ad (`0x88a8`) tags, in any order | 802.3 length frames, LLC/SNAP, MPLS, PPPoE: "not IP" |
//! | L3 | IPv4 with options and fragments; IPv6 with hop-by-hop, routing, fragment, destination options and AH extension headers | ARP and every other ethertype: "not IP" |
//! | L4 | TCP (with options), UDP, in an unfragmented packet or a first fragment (in IPv6, right after its fragment header, where a fragment's chain ends) | later fragments, ESP, ICMP, SCTP, IPv4's AH (the protocol is AH's), every other protocol: "no ports" |
//!
//! Checksums are not verified (offloaded frames carry partial ones). Trailing bytes after the IP
//! packet (Ethernet padding) are allowed. An IPv4 total length or IPv6 payload length of 0 is
//! accepted only when more than 65535 bytes follow the IP header (a BIG TCP super-frame).
//!
//! Malformed reasons ([`Malformed::name`], in [`Malformed::ALL`] order):
//!
//! | name | the frame ... |
//! |---|---|
//! | `truncated_ethernet` | is shorter than the 14-byte Ethernet header |
//! | `truncated_vlan` | ends inside a VLAN tag |
//! | `too_many_vlan_tags` | carries a third VLAN tag |
//! | `truncated_ipv4` | ends inside the IPv4 header (20 bytes or IHL words) |
//! | `ipv4_version` | says IPv4 (ethertype) but the version field is not 4 |
//! | `ipv4_ihl` | has an IHL below 5 words |
//! | `ipv4_total_length` | has a total length below the header or beyond the frame |
//! | `truncated_ipv6` | ends inside the 40-byte IPv6 header |
//! | `ipv6_version` | says IPv6 but the version field is not 6 |
//! | `ipv6_payload_length` | has a payload length beyond the frame |
//! | `ipv6_ext_headers` | has an extension header chain that is truncated, longer than the limit, or has hop-by-hop anywhere but first |
//! | `truncated_tcp` | ends inside the TCP header (20 bytes or data offset words) |
//! | `tcp_data_offset` | has a TCP data offset below 5 words |
//! | `truncated_udp` | ends inside the 8-byte UDP header |
//! | `udp_length` | has a UDP length below 8 or beyond the IP payload |
//!
//! A first fragment whose TCP or UDP header does not fit is malformed (the tiny-fragment attack of
//! RFC 1858); its UDP length may exceed the fragment (it covers the whole datagram). Every
//! fragment, the first one included, hands the classifier no ports ([`Parsed::headers`]) and its
//! flow key leaves them out, so the fragments of a datagram are one flow in one class.
//!
//! [`Parsed::flow_key`] hashes the 5-tuple (and VLAN ids) into the scheduler's flow key;
//! [`wire_bytes`] is what the shaper charges for a frame: for a GSO super-frame, every segment it
//! will become, headers included (Linux's `qdisc_pkt_len_init`).
//!
//! "Never panics" is held three ways: outside tests this module denies clippy's
//! `indexing_slicing`, `unwrap_used`, `expect_used`, `panic` and `arithmetic_side_effects`
//! lints; `tests/parse.rs` property-tests valid, mutated and arbitrary frames; and `fuzz/` runs it
//! under libFuzzer (`fuzz/README.md`). Every successful parse satisfies [`Parsed::check`].

#![cfg_attr(
    not(test),
    deny(
        clippy::indexing_slicing,
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::arithmetic_side_effects
    )
)]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sluice_sched::Headers;

use crate::port::VnetHdr;

/// Ethertype of IPv4.
pub const ETHERTYPE_IPV4: u16 = 0x0800;
/// Ethertype of ARP.
pub const ETHERTYPE_ARP: u16 = 0x0806;
/// Ethertype (TPID) of an 802.1Q VLAN tag (C-tag).
pub const ETHERTYPE_VLAN: u16 = 0x8100;
/// Ethertype (TPID) of an 802.1ad service tag (S-tag, QinQ).
pub const ETHERTYPE_QINQ: u16 = 0x88a8;
/// Ethertype of IPv6.
pub const ETHERTYPE_IPV6: u16 = 0x86dd;

/// IP protocol number of TCP.
pub const IPPROTO_TCP: u8 = 6;
/// IP protocol number of UDP.
pub const IPPROTO_UDP: u8 = 17;

/// Bytes of Ethernet II header (destination, source, ethertype).
pub const ETH_HDR_LEN: usize = 14;
/// Bytes of one VLAN tag (TPID is the previous ethertype; TCI and the next ethertype).
pub const VLAN_TAG_LEN: usize = 4;
/// VLAN tags parsed at most (802.1ad outer + 802.1Q inner); a third is [`Malformed::TooManyVlanTags`].
pub const MAX_VLAN_TAGS: usize = 2;
/// IPv6 extension headers parsed at most before the upper layer; more is
/// [`Malformed::Ipv6ExtHeaders`]. RFC 8200's recommended order has at most six (destination
/// options twice) before ESP or the upper layer.
pub const MAX_IPV6_EXT_HEADERS: usize = 8;
/// The most header bytes [`wire_bytes`] believes from a virtio-net header's `hdr_len` hint when
/// the frame did not parse (Linux's tap fills the hint with the linear head's length, which can
/// include payload).
pub const MAX_HINT_HDR_LEN: u16 = 256;

const IPV4_MIN_HDR_LEN: usize = 20;
const IPV6_HDR_LEN: usize = 40;
const TCP_MIN_HDR_LEN: usize = 20;
const UDP_HDR_LEN: usize = 8;
const VID_MASK: u16 = 0x0fff;
const IPV4_OFFSET_MASK: u16 = 0x1fff;
const IPV4_MORE_FRAGMENTS: u16 = 0x2000;

const IPV6_HOPOPTS: u8 = 0;
const IPV6_ROUTING: u8 = 43;
const IPV6_FRAGMENT: u8 = 44;
const IPV6_AH: u8 = 51;
const IPV6_DSTOPTS: u8 = 60;

/// `gso_type` of UDP fragmentation offload (UFO): the datagram becomes IP fragments, so only
/// the L2 and L3 headers repeat.
const VIRTIO_NET_HDR_GSO_UDP: u8 = 3;

/// Why a frame did not parse. Discriminants run from 0 in [`Malformed::ALL`] order, so
/// `reason as usize` indexes a per-reason counter array of `Malformed::ALL.len()`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, thiserror::Error)]
#[repr(u8)]
pub enum Malformed {
    /// Shorter than the 14-byte Ethernet header.
    #[error("frame shorter than an Ethernet header")]
    TruncatedEthernet = 0,
    /// Ends inside a VLAN tag.
    #[error("frame ends inside a VLAN tag")]
    TruncatedVlan,
    /// More than [`MAX_VLAN_TAGS`] VLAN tags.
    #[error("more than {MAX_VLAN_TAGS} VLAN tags")]
    TooManyVlanTags,
    /// Ends inside the IPv4 header.
    #[error("frame ends inside the IPv4 header")]
    TruncatedIpv4,
    /// IPv4 ethertype, but the version field is not 4.
    #[error("IPv4 version field is not 4")]
    Ipv4Version,
    /// IPv4 header length below 5 words.
    #[error("IPv4 header length below 20 bytes")]
    Ipv4Ihl,
    /// IPv4 total length below the header length or beyond the frame.
    #[error("IPv4 total length below the header or beyond the frame")]
    Ipv4TotalLength,
    /// Ends inside the IPv6 header.
    #[error("frame ends inside the IPv6 header")]
    TruncatedIpv6,
    /// IPv6 ethertype, but the version field is not 6.
    #[error("IPv6 version field is not 6")]
    Ipv6Version,
    /// IPv6 payload length beyond the frame.
    #[error("IPv6 payload length beyond the frame")]
    Ipv6PayloadLength,
    /// IPv6 extension header chain truncated, longer than [`MAX_IPV6_EXT_HEADERS`], or with
    /// hop-by-hop options anywhere but first.
    #[error("IPv6 extension header chain truncated, too long or misordered")]
    Ipv6ExtHeaders,
    /// Ends inside the TCP header (20 bytes, or as many as the data offset says).
    #[error("packet ends inside the TCP header")]
    TruncatedTcp,
    /// TCP data offset below 5 words.
    #[error("TCP data offset below 20 bytes")]
    TcpDataOffset,
    /// Ends inside the UDP header.
    #[error("packet ends inside the UDP header")]
    TruncatedUdp,
    /// UDP length below 8 or beyond the IP payload.
    #[error("UDP length below 8 or beyond the IP payload")]
    UdpLength,
}

impl Malformed {
    /// Every reason, in discriminant order.
    pub const ALL: [Malformed; 15] = [
        Malformed::TruncatedEthernet,
        Malformed::TruncatedVlan,
        Malformed::TooManyVlanTags,
        Malformed::TruncatedIpv4,
        Malformed::Ipv4Version,
        Malformed::Ipv4Ihl,
        Malformed::Ipv4TotalLength,
        Malformed::TruncatedIpv6,
        Malformed::Ipv6Version,
        Malformed::Ipv6PayloadLength,
        Malformed::Ipv6ExtHeaders,
        Malformed::TruncatedTcp,
        Malformed::TcpDataOffset,
        Malformed::TruncatedUdp,
        Malformed::UdpLength,
    ];

    /// The reason's snake_case name, for counters and metrics labels.
    pub fn name(self) -> &'static str {
        match self {
            Malformed::TruncatedEthernet => "truncated_ethernet",
            Malformed::TruncatedVlan => "truncated_vlan",
            Malformed::TooManyVlanTags => "too_many_vlan_tags",
            Malformed::TruncatedIpv4 => "truncated_ipv4",
            Malformed::Ipv4Version => "ipv4_version",
            Malformed::Ipv4Ihl => "ipv4_ihl",
            Malformed::Ipv4TotalLength => "ipv4_total_length",
            Malformed::TruncatedIpv6 => "truncated_ipv6",
            Malformed::Ipv6Version => "ipv6_version",
            Malformed::Ipv6PayloadLength => "ipv6_payload_length",
            Malformed::Ipv6ExtHeaders => "ipv6_ext_headers",
            Malformed::TruncatedTcp => "truncated_tcp",
            Malformed::TcpDataOffset => "tcp_data_offset",
            Malformed::TruncatedUdp => "truncated_udp",
            Malformed::UdpLength => "udp_length",
        }
    }
}

/// Whether an IP packet is a fragment, and which.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum Fragment {
    /// Not a fragment (or not IP). An IPv6 atomic fragment (offset 0, no more fragments) counts
    /// as not a fragment.
    #[default]
    No,
    /// The first fragment (offset 0, more to come): it carries the L4 header.
    First,
    /// A later fragment (offset > 0): no L4 header.
    Later,
}

/// What [`parse`] read out of a frame. Offsets: L3 starts at `l2_len`, L4 at `l2_len + l3_len`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct Parsed {
    /// The outer VLAN id (the first tag, 802.1Q or 802.1ad); VID 0 (a priority tag) is `Some(0)`.
    pub vlan: Option<u16>,
    /// The inner VLAN id of a double-tagged frame.
    pub inner_vlan: Option<u16>,
    /// The ethertype after the VLAN tags (a length, below `0x0600`, for 802.3 frames).
    pub ethertype: u16,
    /// Bytes of Ethernet header and VLAN tags (14, 18 or 22).
    pub l2_len: u16,
    /// Bytes of IP header: IPv4 with options, or IPv6 with its extension headers (0 if not IP).
    pub l3_len: u16,
    /// Bytes of TCP header with options, or 8 for UDP (0 if no ports were parsed).
    pub l4_len: u16,
    /// Source address (IP only).
    pub src: Option<IpAddr>,
    /// Destination address (IP only).
    pub dst: Option<IpAddr>,
    /// IP protocol: IPv4's protocol field, or IPv6's last next-header value (IP only).
    pub proto: Option<u8>,
    /// DSCP, the upper six bits of the TOS / traffic class byte (IP only).
    pub dscp: Option<u8>,
    /// Source port (TCP and UDP, not in later fragments).
    pub sport: Option<u16>,
    /// Destination port (TCP and UDP, not in later fragments).
    pub dport: Option<u16>,
    /// Whether the packet is an IP fragment.
    pub fragment: Fragment,
}

const _: () = assert!(std::mem::size_of::<Parsed>() <= 64);

/// A fixed, arbitrary start for [`Parsed::flow_key`] (so key 0 is not the empty flow).
const FLOW_SEED: u64 = 0x5a17_ce00_f10e_c0de;

/// MurmurHash3's 64-bit finalizer: a bijection in which every input bit flips each output bit
/// with probability close to one half.
fn fmix64(mut x: u64) -> u64 {
    x ^= x >> 33;
    x = x.wrapping_mul(0xff51_afd7_ed55_8ccd);
    x ^= x >> 33;
    x = x.wrapping_mul(0xc4ce_b9fe_1a85_ec53);
    x ^ (x >> 33)
}

/// An IPv6 address as two words.
fn v6_words(a: Ipv6Addr) -> [u64; 2] {
    let x = u128::from(a);
    [(x >> 64) as u64, x as u64]
}

impl Parsed {
    /// Bytes of L2, L3 and L4 headers: what every segment of a GSO super-frame repeats.
    pub fn header_len(&self) -> usize {
        usize::from(self.l2_len)
            .saturating_add(usize::from(self.l3_len))
            .saturating_add(usize::from(self.l4_len))
    }

    /// The fields classifiers match on. An IP fragment has no ports here, the first one
    /// included, so that every fragment of a datagram goes to the same class (and a port rule
    /// matches no fragment), as the flow key leaves them out too.
    pub fn headers(&self) -> Headers {
        let ports = self.fragment == Fragment::No;
        Headers {
            src: self.src,
            dst: self.dst,
            sport: self.sport.filter(|_| ports),
            dport: self.dport.filter(|_| ports),
            proto: self.proto,
            dscp: self.dscp,
            vlan: self.vlan,
        }
    }

    /// A flow key: a hash of the VLAN ids, the ethertype, and for IP the protocol and both
    /// addresses, and for TCP and UDP the two ports. Non-IP frames of one ethertype in one
    /// VLAN are one flow.
    ///
    /// Stable (the same fields give the same key in every process, build and platform) and
    /// well mixed (each step is MurmurHash3's finalizer, so any bit of the key can pick an
    /// engine or a bucket). Directional: the two directions of a connection usually get
    /// different keys, which is what a scheduler of one direction wants. Fragments of an IP
    /// packet hash without ports, the first one included, so that all fragments of a datagram
    /// are one flow and are never reordered against each other (as Linux's flow dissector does
    /// by default).
    pub fn flow_key(&self) -> u64 {
        let vid = |v: Option<u16>| v.map_or(0, |id| u64::from(id) | 0x1_0000);
        let head = (vid(self.vlan) << 47)
            | (vid(self.inner_vlan) << 30)
            | (u64::from(self.ethertype) << 8)
            | u64::from(self.proto.unwrap_or(0));
        let mut h = fmix64(FLOW_SEED ^ head);
        match (self.src, self.dst) {
            (Some(IpAddr::V4(s)), Some(IpAddr::V4(d))) => {
                h = fmix64(h ^ (u64::from(u32::from(s)) << 32 | u64::from(u32::from(d))));
            }
            (Some(IpAddr::V6(s)), Some(IpAddr::V6(d))) => {
                for w in v6_words(s).into_iter().chain(v6_words(d)) {
                    h = fmix64(h ^ w);
                }
            }
            _ => {}
        }
        if let (Some(s), Some(d), Fragment::No) = (self.sport, self.dport, self.fragment) {
            h = fmix64(h ^ (u64::from(s) << 16 | u64::from(d)));
        }
        h
    }

    /// Check the invariants every successful parse of a `frame_len`-byte frame satisfies (the
    /// unit, property and fuzz tests hold every result to them). `Err` names the broken one.
    ///
    /// The tags and `l2_len` agree; the headers fit in the frame; IP (and only IP) has
    /// addresses of the ethertype's family, a protocol, a DSCP below 64 and an L3 length in
    /// range; ports come in pairs, only with a TCP (20 to 60 bytes) or UDP (8 bytes) header,
    /// never in a later fragment.
    pub fn check(&self, frame_len: usize) -> Result<(), &'static str> {
        fn ensure(ok: bool, why: &'static str) -> Result<(), &'static str> {
            if ok { Ok(()) } else { Err(why) }
        }
        let vid_ok = |v: Option<u16>| v.is_none_or(|id| id <= VID_MASK);
        ensure(
            vid_ok(self.vlan) && vid_ok(self.inner_vlan),
            "VLAN id above 4095",
        )?;
        ensure(
            self.vlan.is_some() || self.inner_vlan.is_none(),
            "inner VLAN without outer",
        )?;
        let tags = [self.vlan, self.inner_vlan].iter().flatten().count();
        let l2 = [
            ETH_HDR_LEN,
            ETH_HDR_LEN + VLAN_TAG_LEN,
            ETH_HDR_LEN + 2 * VLAN_TAG_LEN,
        ];
        ensure(
            l2.get(tags) == Some(&usize::from(self.l2_len)),
            "l2_len does not match the tags",
        )?;
        ensure(
            self.header_len() <= frame_len,
            "headers longer than the frame",
        )?;
        let l3 = usize::from(self.l3_len);
        let v4 = |a: Option<IpAddr>| a.map(|a| a.is_ipv4());
        match self.ethertype {
            ETHERTYPE_IPV4 | ETHERTYPE_IPV6 => {
                let is_v4 = Some(self.ethertype == ETHERTYPE_IPV4);
                ensure(
                    v4(self.src) == is_v4 && v4(self.dst) == is_v4,
                    "address family",
                )?;
                ensure(self.proto.is_some(), "IP without a protocol")?;
                ensure(
                    self.dscp.is_some_and(|d| d < 64),
                    "DSCP missing or above 63",
                )?;
                let range = if is_v4 == Some(true) {
                    IPV4_MIN_HDR_LEN..=4 * 15
                } else {
                    IPV6_HDR_LEN..=IPV6_HDR_LEN + MAX_IPV6_EXT_HEADERS * 8 * 256
                };
                ensure(
                    range.contains(&l3) && l3 % 4 == 0,
                    "L3 header length out of range",
                )?;
            }
            _ => {
                let ip_fields = self.src.is_some() || self.dst.is_some() || self.proto.is_some();
                ensure(
                    !ip_fields && self.dscp.is_none(),
                    "IP fields in a non-IP frame",
                )?;
                ensure(
                    l3 == 0 && self.fragment == Fragment::No,
                    "L3 in a non-IP frame",
                )?;
            }
        }
        let ports = self.sport.is_some();
        ensure(ports == self.dport.is_some(), "one port without the other")?;
        ensure(
            ports == (self.l4_len != 0),
            "ports and L4 header length disagree",
        )?;
        if ports {
            ensure(
                self.fragment != Fragment::Later,
                "ports in a later fragment",
            )?;
            let l4 = usize::from(self.l4_len);
            let ok = match self.proto {
                Some(IPPROTO_TCP) => (TCP_MIN_HDR_LEN..=4 * 15).contains(&l4) && l4 % 4 == 0,
                Some(IPPROTO_UDP) => l4 == UDP_HDR_LEN,
                _ => false,
            };
            ensure(ok, "L4 header length does not fit the protocol")?;
        }
        Ok(())
    }
}

/// `N` bytes of `b` from `at`, if all there.
fn bytes<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

/// Parse one Ethernet frame (no virtio-net header in front).
///
/// Never panics, whatever the bytes. Non-IP frames (ARP and every ethertype other than IPv4 and
/// IPv6) and IP packets of protocols other than TCP and UDP parse successfully with no
/// addresses, or no ports; see the [module notes](self) for what is checked.
pub fn parse(frame: &[u8]) -> Result<Parsed, Malformed> {
    let is_tag = |ethertype| ethertype == ETHERTYPE_VLAN || ethertype == ETHERTYPE_QINQ;
    let [_, _, _, _, _, _, _, _, _, _, _, _, t0, t1] =
        bytes::<ETH_HDR_LEN>(frame, 0).ok_or(Malformed::TruncatedEthernet)?;
    let mut ethertype = u16::from_be_bytes([t0, t1]);
    let mut l2 = ETH_HDR_LEN;
    let mut vids = [None; MAX_VLAN_TAGS];
    for vid in &mut vids {
        if !is_tag(ethertype) {
            break;
        }
        let [c0, c1, e0, e1] = bytes(frame, l2).ok_or(Malformed::TruncatedVlan)?;
        *vid = Some(u16::from_be_bytes([c0, c1]) & VID_MASK);
        ethertype = u16::from_be_bytes([e0, e1]);
        l2 = l2.saturating_add(VLAN_TAG_LEN);
    }
    if is_tag(ethertype) {
        return Err(Malformed::TooManyVlanTags);
    }
    let [vlan, inner_vlan] = vids;
    let mut p = Parsed {
        vlan,
        inner_vlan,
        ethertype,
        l2_len: l2 as u16,
        ..Parsed::default()
    };
    let l3 = frame.get(l2..).unwrap_or_default();
    match ethertype {
        ETHERTYPE_IPV4 => ipv4(l3, &mut p)?,
        ETHERTYPE_IPV6 => ipv6(l3, &mut p)?,
        _ => {}
    }
    Ok(p)
}

/// The length an IP header declares, or with 0 (BIG TCP) everything there when that is more
/// than the field can say.
fn declared_len(field: u16, available: usize) -> usize {
    if field == 0 && available > usize::from(u16::MAX) {
        available
    } else {
        usize::from(field)
    }
}

fn ipv4(l3: &[u8], p: &mut Parsed) -> Result<(), Malformed> {
    let [
        vihl,
        tos,
        tl0,
        tl1,
        _,
        _,
        f0,
        f1,
        _,
        proto,
        _,
        _,
        s0,
        s1,
        s2,
        s3,
        d0,
        d1,
        d2,
        d3,
    ] = bytes::<IPV4_MIN_HDR_LEN>(l3, 0).ok_or(Malformed::TruncatedIpv4)?;
    if vihl >> 4 != 4 {
        return Err(Malformed::Ipv4Version);
    }
    let ihl = usize::from(vihl & 0x0f) * 4;
    if ihl < IPV4_MIN_HDR_LEN {
        return Err(Malformed::Ipv4Ihl);
    }
    if ihl > l3.len() {
        return Err(Malformed::TruncatedIpv4);
    }
    let total = declared_len(u16::from_be_bytes([tl0, tl1]), l3.len());
    if total < ihl || total > l3.len() {
        return Err(Malformed::Ipv4TotalLength);
    }
    let frag = u16::from_be_bytes([f0, f1]);
    p.fragment = if frag & IPV4_OFFSET_MASK != 0 {
        Fragment::Later
    } else if frag & IPV4_MORE_FRAGMENTS != 0 {
        Fragment::First
    } else {
        Fragment::No
    };
    p.src = Some(IpAddr::V4(Ipv4Addr::new(s0, s1, s2, s3)));
    p.dst = Some(IpAddr::V4(Ipv4Addr::new(d0, d1, d2, d3)));
    p.proto = Some(proto);
    p.dscp = Some(tos >> 2);
    p.l3_len = ihl as u16;
    if p.fragment == Fragment::Later {
        return Ok(());
    }
    l4(proto, l3.get(ihl..total).unwrap_or_default(), p)
}

fn ipv6(l3: &[u8], p: &mut Parsed) -> Result<(), Malformed> {
    let [b0, b1, _, _, pl0, pl1, next, _] = bytes(l3, 0).ok_or(Malformed::TruncatedIpv6)?;
    let src: [u8; 16] = bytes(l3, 8).ok_or(Malformed::TruncatedIpv6)?;
    let dst: [u8; 16] = bytes(l3, 24).ok_or(Malformed::TruncatedIpv6)?;
    if b0 >> 4 != 6 {
        return Err(Malformed::Ipv6Version);
    }
    let rest = l3.get(IPV6_HDR_LEN..).unwrap_or_default();
    let plen = declared_len(u16::from_be_bytes([pl0, pl1]), rest.len());
    let payload = rest.get(..plen).ok_or(Malformed::Ipv6PayloadLength)?;
    p.src = Some(IpAddr::V6(Ipv6Addr::from(src)));
    p.dst = Some(IpAddr::V6(Ipv6Addr::from(dst)));
    p.dscp = Some(((b0 << 4) | (b1 >> 4)) >> 2);

    let mut nh = next;
    let mut off = 0usize;
    let mut allowed = 0..MAX_IPV6_EXT_HEADERS;
    loop {
        let (after, len) = match nh {
            IPV6_HOPOPTS | IPV6_ROUTING | IPV6_DSTOPTS => {
                if nh == IPV6_HOPOPTS && off != 0 {
                    return Err(Malformed::Ipv6ExtHeaders);
                }
                let [n, words] = bytes(payload, off).ok_or(Malformed::Ipv6ExtHeaders)?;
                (n, usize::from(words).saturating_add(1).saturating_mul(8))
            }
            IPV6_FRAGMENT => {
                let [n, _, o0, o1] = bytes(payload, off).ok_or(Malformed::Ipv6ExtHeaders)?;
                let fo = u16::from_be_bytes([o0, o1]);
                if fo >> 3 != 0 {
                    p.fragment = Fragment::Later;
                } else if fo & 1 != 0 {
                    p.fragment = Fragment::First;
                }
                (n, 8)
            }
            IPV6_AH => {
                let [n, words] = bytes(payload, off).ok_or(Malformed::Ipv6ExtHeaders)?;
                (n, usize::from(words).saturating_add(2).saturating_mul(4))
            }
            _ => break,
        };
        let end = off.saturating_add(len);
        if allowed.next().is_none() || end > payload.len() {
            return Err(Malformed::Ipv6ExtHeaders);
        }
        off = end;
        nh = after;
        // A fragment's chain ends at its fragment header, as in Linux's flow dissector: what
        // follows is the fragmentable part, which only the first fragment carries, so every
        // fragment of a datagram reports the protocol its fragment header names.
        if p.fragment != Fragment::No {
            break;
        }
    }
    p.proto = Some(nh);
    p.l3_len =
        u16::try_from(off.saturating_add(IPV6_HDR_LEN)).map_err(|_| Malformed::Ipv6ExtHeaders)?;
    if p.fragment == Fragment::Later {
        return Ok(());
    }
    l4(nh, payload.get(off..).unwrap_or_default(), p)
}

/// Parse the TCP or UDP header at the start of `seg`, the IP payload after the IP headers.
fn l4(proto: u8, seg: &[u8], p: &mut Parsed) -> Result<(), Malformed> {
    let (ports, len) = match proto {
        IPPROTO_TCP => {
            let [
                s0,
                s1,
                d0,
                d1,
                _,
                _,
                _,
                _,
                _,
                _,
                _,
                _,
                doff,
                _,
                _,
                _,
                _,
                _,
                _,
                _,
            ] = bytes::<TCP_MIN_HDR_LEN>(seg, 0).ok_or(Malformed::TruncatedTcp)?;
            let len = usize::from(doff >> 4) * 4;
            if len < TCP_MIN_HDR_LEN {
                return Err(Malformed::TcpDataOffset);
            }
            if len > seg.len() {
                return Err(Malformed::TruncatedTcp);
            }
            ([s0, s1, d0, d1], len)
        }
        IPPROTO_UDP => {
            let [s0, s1, d0, d1, l0, l1, _, _] =
                bytes::<UDP_HDR_LEN>(seg, 0).ok_or(Malformed::TruncatedUdp)?;
            let ulen = declared_len(u16::from_be_bytes([l0, l1]), seg.len());
            // A first fragment holds only part of the datagram the length covers.
            let fits = ulen <= seg.len() || p.fragment == Fragment::First;
            if ulen < UDP_HDR_LEN || !fits {
                return Err(Malformed::UdpLength);
            }
            ([s0, s1, d0, d1], UDP_HDR_LEN)
        }
        _ => return Ok(()),
    };
    let [s0, s1, d0, d1] = ports;
    p.sport = Some(u16::from_be_bytes([s0, s1]));
    p.dport = Some(u16::from_be_bytes([d0, d1]));
    p.l4_len = len as u16;
    Ok(())
}

/// Bytes on the wire of every segment a frame becomes: what the shaper charges.
///
/// `frame_len` is the Ethernet frame's length (without the virtio-net header), `parsed` what
/// [`parse`] made of it (`None` if it did not parse). A frame that is not a GSO super-frame
/// ([`VnetHdr::is_gso`]) costs `frame_len`. A super-frame becomes
/// `segs = ceil((frame_len - hdr) / gso_size)` segments, each repeating the `hdr` bytes of
/// headers, so it costs `frame_len + (segs - 1) * hdr`: the accounting Linux's
/// `qdisc_pkt_len_init` does for GSO packets from untrusted sources (`SKB_GSO_DODGY`).
/// Ethernet framing (preamble, FCS, inter-frame gap) is not counted, as in Linux.
///
/// `hdr` is the parsed L2 + L3 + L4 header length (L2 + L3 for UFO, `gso_type` 3, whose
/// segments are IP fragments), or when the frame did not parse that far the virtio-net header's
/// `hdr_len` hint capped at [`MAX_HINT_HDR_LEN`]. Clamps keep the result sane: `hdr` is at
/// most `frame_len`, and segments are taken to be at least `hdr` bytes of payload (a smaller
/// `gso_size` would be a segment that is mostly headers), so the result always lies in
/// `frame_len ..= 2 * frame_len`.
pub fn wire_bytes(vnet: &VnetHdr, parsed: Option<&Parsed>, frame_len: usize) -> u64 {
    let frame = frame_len as u64;
    if !vnet.is_gso() {
        return frame;
    }
    let ufo = vnet.gso_type & !VnetHdr::GSO_ECN == VIRTIO_NET_HDR_GSO_UDP;
    let from_parse = parsed.and_then(|p| {
        if ufo {
            (p.l3_len > 0).then(|| u64::from(p.l2_len).saturating_add(u64::from(p.l3_len)))
        } else {
            (p.l4_len > 0).then(|| p.header_len() as u64)
        }
    });
    let hdr = from_parse
        .unwrap_or_else(|| u64::from(vnet.hdr_len.min(MAX_HINT_HDR_LEN)))
        .min(frame);
    let seg = u64::from(vnet.gso_size).max(hdr).max(1);
    let segs = frame.saturating_sub(hdr).div_ceil(seg).max(1);
    frame.saturating_add(segs.saturating_sub(1).saturating_mul(hdr))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Parse a frame that must parse, and hold the result to [`Parsed::check`].
    fn ok(frame: &[u8]) -> Parsed {
        let p = parse(frame).unwrap_or_else(|m| panic!("{m} from {frame:02x?}"));
        p.check(frame.len()).unwrap();
        p
    }

    /// A hand-built frame, written layer by layer.
    struct F(Vec<u8>);

    impl F {
        /// Ethernet: destination 02:00:00:00:00:02, source 02:00:00:00:00:01.
        fn eth(ethertype: u16) -> F {
            let mut b = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
            b.extend_from_slice(&ethertype.to_be_bytes());
            F(b)
        }
        /// Eth with tags (tpid, tci) in front of `ethertype`.
        fn tagged(tags: &[(u16, u16)], ethertype: u16) -> F {
            let mut b = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
            for &(tpid, tci) in tags {
                b.extend_from_slice(&tpid.to_be_bytes());
                b.extend_from_slice(&tci.to_be_bytes());
            }
            b.extend_from_slice(&ethertype.to_be_bytes());
            F(b)
        }
        fn raw(mut self, bytes: &[u8]) -> F {
            self.0.extend_from_slice(bytes);
            self
        }
        fn len(&self) -> usize {
            self.0.len()
        }
    }

    /// IPv4 header: 10.0.0.1 -> 10.0.0.2, TOS 0xb8 (DSCP 46), `opts` bytes of options.
    fn ipv4(proto: u8, l4_len: usize, opts: usize, frag: u16) -> Vec<u8> {
        let ihl = 20 + opts;
        let total = (ihl + l4_len) as u16;
        let mut b = vec![0x40 | (ihl / 4) as u8, 0xb8];
        b.extend_from_slice(&total.to_be_bytes());
        b.extend_from_slice(&[0x12, 0x34]);
        b.extend_from_slice(&frag.to_be_bytes());
        b.extend_from_slice(&[64, proto, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2]);
        b.extend(std::iter::repeat_n(1u8, opts)); // NOP options
        b
    }

    /// IPv6 header: fd00::1 -> fd00::2, traffic class 0x28 (DSCP 10), flow label 0x12345.
    fn ipv6(next: u8, payload_len: u16) -> Vec<u8> {
        let mut b = vec![0x62, 0x81, 0x23, 0x45];
        b.extend_from_slice(&payload_len.to_be_bytes());
        b.extend_from_slice(&[next, 64]);
        b.extend_from_slice(&"fd00::1".parse::<Ipv6Addr>().unwrap().octets());
        b.extend_from_slice(&"fd00::2".parse::<Ipv6Addr>().unwrap().octets());
        b
    }

    /// TCP header with `opts` bytes of options (a multiple of 4), then `data` payload bytes.
    fn tcp(sport: u16, dport: u16, opts: usize, data: usize) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&sport.to_be_bytes());
        b.extend_from_slice(&dport.to_be_bytes());
        b.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 0]);
        b.push((((20 + opts) / 4) as u8) << 4);
        b.extend_from_slice(&[0x18, 0xff, 0xff, 0, 0, 0, 0]);
        b.extend(std::iter::repeat_n(1u8, opts));
        b.extend(std::iter::repeat_n(0xaa, data));
        b
    }

    /// UDP header and `data` payload bytes, length field consistent.
    fn udp(sport: u16, dport: u16, data: usize) -> Vec<u8> {
        let mut b = Vec::new();
        b.extend_from_slice(&sport.to_be_bytes());
        b.extend_from_slice(&dport.to_be_bytes());
        b.extend_from_slice(&((8 + data) as u16).to_be_bytes());
        b.extend_from_slice(&[0, 0]);
        b.extend(std::iter::repeat_n(0xbb, data));
        b
    }

    fn v4(a: [u8; 4]) -> Option<IpAddr> {
        Some(IpAddr::V4(Ipv4Addr::from(a)))
    }

    fn v6(s: &str) -> Option<IpAddr> {
        Some(IpAddr::V6(s.parse().unwrap()))
    }

    fn ipv4_tcp(opts: usize, tcp_opts: usize, data: usize) -> F {
        let seg = tcp(40000, 443, tcp_opts, data);
        F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(IPPROTO_TCP, seg.len(), opts, 0x4000))
            .raw(&seg)
    }

    #[test]
    fn ipv4_tcp_with_options() {
        let f = ipv4_tcp(8, 12, 100);
        let p = ok(&f.0);
        assert_eq!(
            p,
            Parsed {
                vlan: None,
                inner_vlan: None,
                ethertype: ETHERTYPE_IPV4,
                l2_len: 14,
                l3_len: 28,
                l4_len: 32,
                src: v4([10, 0, 0, 1]),
                dst: v4([10, 0, 0, 2]),
                proto: Some(6),
                dscp: Some(46),
                sport: Some(40000),
                dport: Some(443),
                fragment: Fragment::No,
            }
        );
        assert_eq!(p.header_len(), 14 + 28 + 32);
        assert_eq!(
            p.headers(),
            Headers {
                src: v4([10, 0, 0, 1]),
                dst: v4([10, 0, 0, 2]),
                sport: Some(40000),
                dport: Some(443),
                proto: Some(6),
                dscp: Some(46),
                vlan: None,
            }
        );
    }

    #[test]
    fn ipv4_udp_and_ethernet_padding() {
        // A 60-byte minimum frame: 14 + 20 + 8 + 4 data, then 14 bytes of padding.
        let seg = udp(5353, 53, 4);
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(IPPROTO_UDP, seg.len(), 0, 0))
            .raw(&seg)
            .raw(&[0; 14]);
        assert_eq!(f.len(), 60);
        let p = ok(&f.0);
        assert_eq!(
            (p.proto, p.sport, p.dport),
            (Some(17), Some(5353), Some(53))
        );
        assert_eq!((p.l2_len, p.l3_len, p.l4_len), (14, 20, 8));
    }

    #[test]
    fn ipv4_other_protocol_has_no_ports() {
        // ICMP echo request.
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(1, 8, 0, 0))
            .raw(&[8, 0, 0, 0, 0, 1, 0, 1]);
        let p = ok(&f.0);
        assert_eq!(
            (p.proto, p.sport, p.dport, p.l4_len),
            (Some(1), None, None, 0)
        );
        assert_eq!(p.header_len(), 34);
        // AH (51) over IPv4 is not read through, as IPv6's AH header is: TCP behind it
        // gives no ports, and the protocol is AH's.
        let seg = tcp(1, 2, 0, 0);
        let mut ah = vec![IPPROTO_TCP, 4, 0, 0];
        ah.resize(24, 0);
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(51, ah.len() + seg.len(), 0, 0))
            .raw(&ah)
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!((p.proto, p.sport, p.l4_len), (Some(51), None, 0));
    }

    #[test]
    fn ipv4_fragments() {
        // First fragment: MF, offset 0: ports parsed; the UDP length covers the datagram.
        let mut seg = udp(1000, 2000, 1400);
        seg.truncate(8 + 64);
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(IPPROTO_UDP, seg.len(), 0, 0x2000))
            .raw(&seg);
        let first = ok(&f.0);
        assert_eq!(first.fragment, Fragment::First);
        assert_eq!((first.sport, first.dport), (Some(1000), Some(2000)));
        // Later fragment: offset 9 (72 bytes): no L4, whatever the bytes look like.
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(IPPROTO_UDP, 3, 0, 9))
            .raw(&[0xff, 0xff, 0xff]);
        let later = ok(&f.0);
        assert_eq!(later.fragment, Fragment::Later);
        assert_eq!(
            (later.proto, later.sport, later.l4_len),
            (Some(17), None, 0)
        );
        // Both fragments are one flow, in one class: neither hands the classifier ports.
        assert_eq!(first.flow_key(), later.flow_key());
        assert_eq!(first.headers(), later.headers());
        assert_eq!((first.headers().sport, first.headers().dport), (None, None));
        // A tiny first fragment that cuts the TCP header is malformed.
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(IPPROTO_TCP, 8, 0, 0x2000))
            .raw(&tcp(1, 2, 0, 0)[..8]);
        assert_eq!(parse(&f.0), Err(Malformed::TruncatedTcp));
    }

    #[test]
    fn vlan_tags() {
        let seg = udp(1, 2, 0);
        let ip = ipv4(IPPROTO_UDP, seg.len(), 0, 0);
        let one = F::tagged(&[(ETHERTYPE_VLAN, 0x2064)], ETHERTYPE_IPV4)
            .raw(&ip)
            .raw(&seg);
        let p = ok(&one.0);
        assert_eq!((p.vlan, p.inner_vlan, p.l2_len), (Some(100), None, 18));
        assert_eq!(p.headers().vlan, Some(100));
        assert_eq!(p.sport, Some(1));

        let two = F::tagged(
            &[(ETHERTYPE_QINQ, 0x0fff), (ETHERTYPE_VLAN, 0xe007)],
            ETHERTYPE_IPV4,
        )
        .raw(&ip)
        .raw(&seg);
        let p = ok(&two.0);
        assert_eq!((p.vlan, p.inner_vlan, p.l2_len), (Some(4095), Some(7), 22));
        assert_eq!((p.ethertype, p.dport), (ETHERTYPE_IPV4, Some(2)));

        // Priority tag: VID 0.
        let prio = F::tagged(&[(ETHERTYPE_VLAN, 0xa000)], ETHERTYPE_ARP).raw(&[0; 28]);
        assert_eq!(ok(&prio.0).vlan, Some(0));

        // Same 5-tuple in another VLAN: another flow.
        let other = F::tagged(&[(ETHERTYPE_VLAN, 0x2065)], ETHERTYPE_IPV4)
            .raw(&ip)
            .raw(&seg);
        assert_ne!(ok(&one.0).flow_key(), ok(&other.0).flow_key());
    }

    #[test]
    fn arp_and_other_ethertypes_are_not_ip() {
        let arp = F::eth(ETHERTYPE_ARP)
            .raw(&[0, 1, 8, 0, 6, 4, 0, 1])
            .raw(&[0; 20]);
        let p = ok(&arp.0);
        assert_eq!(p.ethertype, ETHERTYPE_ARP);
        assert_eq!((p.src, p.proto, p.sport, p.l3_len), (None, None, None, 0));
        assert_eq!(p.header_len(), 14);
        assert_eq!(p.headers(), Headers::default());
        // A bare Ethernet header of an unknown ethertype, and an 802.3 length frame.
        assert_eq!(ok(&F::eth(0x88b5).0).ethertype, 0x88b5);
        assert_eq!(ok(&F::eth(46).raw(&[0; 46]).0).ethertype, 46);
        // ARP in one VLAN is one flow; another ethertype is another.
        assert_eq!(
            ok(&arp.0).flow_key(),
            ok(&F::eth(ETHERTYPE_ARP).0).flow_key()
        );
        assert_ne!(ok(&arp.0).flow_key(), ok(&F::eth(0x88b5).0).flow_key());
    }

    #[test]
    fn ipv6_tcp_and_udp() {
        let seg = tcp(5000, 80, 12, 10);
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(IPPROTO_TCP, seg.len() as u16))
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!(
            p,
            Parsed {
                ethertype: ETHERTYPE_IPV6,
                l2_len: 14,
                l3_len: 40,
                l4_len: 32,
                src: v6("fd00::1"),
                dst: v6("fd00::2"),
                proto: Some(6),
                dscp: Some(10),
                sport: Some(5000),
                dport: Some(80),
                ..Parsed::default()
            }
        );
        let seg = udp(4433, 443, 1200);
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(IPPROTO_UDP, seg.len() as u16))
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!(
            (p.proto, p.sport, p.dport, p.l4_len),
            (Some(17), Some(4433), Some(443), 8)
        );
    }

    #[test]
    fn ipv6_extension_headers() {
        let seg = udp(7, 9, 3);
        // Hop-by-hop (8 bytes), routing (24 bytes), destination options (16), AH (24), fragment
        // header (atomic: offset 0, M 0), then UDP.
        let mut ext = Vec::new();
        ext.extend_from_slice(&[IPV6_ROUTING, 0, 5, 2, 1, 0, 0, 0]);
        ext.extend_from_slice(&[IPV6_DSTOPTS, 2, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&[0; 16]);
        ext.extend_from_slice(&[IPV6_AH, 1, 1, 4, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0]);
        ext.extend_from_slice(&[IPV6_FRAGMENT, 4, 0, 0]);
        ext.extend_from_slice(&[0; 20]);
        ext.extend_from_slice(&[IPPROTO_UDP, 0, 0, 0, 0xab, 0xcd, 0xef, 0x01]);
        assert_eq!(ext.len(), 8 + 24 + 16 + 24 + 8);
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(IPV6_HOPOPTS, (ext.len() + seg.len()) as u16))
            .raw(&ext)
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!((p.proto, p.l3_len, p.l4_len), (Some(17), 40 + 80, 8));
        assert_eq!(
            (p.sport, p.dport, p.fragment),
            (Some(7), Some(9), Fragment::No)
        );
        assert_eq!(p.header_len(), 14 + 120 + 8);
    }

    #[test]
    fn ipv6_fragments_and_no_ports() {
        let seg = tcp(1, 2, 0, 100);
        // First fragment (offset 0, M 1).
        let frag = [IPPROTO_TCP, 0, 0, 1, 0, 0, 0, 42];
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(IPV6_FRAGMENT, (8 + seg.len()) as u16))
            .raw(&frag)
            .raw(&seg);
        let first = ok(&f.0);
        assert_eq!(
            (first.fragment, first.sport, first.l3_len),
            (Fragment::First, Some(1), 48)
        );
        // Later fragment (offset 15 * 8): no L4 even though bytes follow.
        let frag = [IPPROTO_TCP, 0, 0, 15 << 3, 0, 0, 0, 42];
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(IPV6_FRAGMENT, (8 + seg.len()) as u16))
            .raw(&frag)
            .raw(&seg);
        let later = ok(&f.0);
        assert_eq!(
            (later.fragment, later.sport, later.l4_len),
            (Fragment::Later, None, 0)
        );
        assert_eq!((later.proto, later.l3_len), (Some(6), 48));
        assert_eq!(first.flow_key(), later.flow_key());
        assert_eq!(first.headers(), later.headers());
        // With destination options after the fragment header, the chain still ends at the
        // fragment header, first fragment or later: both report its next header (60), where
        // the first used to read on to TCP (6) and became another flow in another class.
        let opts = [IPPROTO_TCP, 0, 0, 0, 0, 0, 0, 0];
        let frame = |offset: u8| {
            let frag = [IPV6_DSTOPTS, 0, 0, offset << 3 | 1, 0, 0, 0, 42];
            F::eth(ETHERTYPE_IPV6)
                .raw(&ipv6(IPV6_FRAGMENT, (16 + seg.len()) as u16))
                .raw(&frag)
                .raw(&opts)
                .raw(&seg)
        };
        let (first, later) = (ok(&frame(0).0), ok(&frame(15).0));
        assert_eq!(
            (first.fragment, later.fragment),
            (Fragment::First, Fragment::Later)
        );
        for p in [&first, &later] {
            assert_eq!((p.proto, p.l3_len, p.sport), (Some(IPV6_DSTOPTS), 48, None));
        }
        assert_eq!(first.flow_key(), later.flow_key());
        assert_eq!(first.headers(), later.headers());
        // ESP and "no next header" stop the chain; ICMPv6 has no ports.
        for proto in [50, 59, 58] {
            let f = F::eth(ETHERTYPE_IPV6).raw(&ipv6(proto, 4)).raw(&[0; 4]);
            let p = ok(&f.0);
            assert_eq!((p.proto, p.sport, p.l3_len), (Some(proto), None, 40));
        }
    }

    #[test]
    fn flow_keys() {
        let key = |sport: u16, dport: u16| {
            let seg = tcp(sport, dport, 0, 0);
            let f = F::eth(ETHERTYPE_IPV4)
                .raw(&ipv4(IPPROTO_TCP, seg.len(), 0, 0))
                .raw(&seg);
            ok(&f.0).flow_key()
        };
        // Stable: pinned, so a change of the hash is a deliberate one.
        assert_eq!(key(40000, 443), key(40000, 443));
        assert_eq!(
            key(40000, 443),
            0x019c_20eb_9c1c_b7c6,
            "{:#x}",
            key(40000, 443)
        );
        // Directional.
        assert_ne!(key(40000, 443), key(443, 40000));
        // Well mixed: 65536 source ports over 256 buckets of the low byte and of the high
        // byte, each a chi-square test (255 degrees of freedom; 330 is p ~ 0.001).
        for shift in [0, 56] {
            let mut buckets = [0u32; 256];
            for s in 0..=u16::MAX {
                buckets[((key(s, 443) >> shift) & 0xff) as usize] += 1;
            }
            let chi2: f64 = buckets
                .iter()
                .map(|&c| (f64::from(c) - 256.0).powi(2) / 256.0)
                .sum();
            assert!(chi2 < 330.0, "shift {shift}: chi2 {chi2}");
        }
        // Avalanche: flipping one port bit flips about half the key's bits.
        let mut flipped = 0;
        for bit in 0..16 {
            flipped += (key(40000, 443) ^ key(40000 ^ (1 << bit), 443)).count_ones();
        }
        let mean = f64::from(flipped) / 16.0;
        assert!((26.0..38.0).contains(&mean), "mean flipped bits {mean}");
        // IPv6 and IPv4 with the same ports are different flows.
        let seg = tcp(40000, 443, 0, 0);
        let f = F::eth(ETHERTYPE_IPV6).raw(&ipv6(IPPROTO_TCP, 20)).raw(&seg);
        assert_ne!(ok(&f.0).flow_key(), key(40000, 443));
    }

    #[test]
    fn check_catches_broken_invariants() {
        let good = ok(&ipv4_tcp(0, 0, 10).0);
        let len = 64;
        assert_eq!(good.check(len), Ok(()));
        let broken = [
            Parsed { l2_len: 18, ..good },
            Parsed {
                inner_vlan: Some(1),
                l2_len: 18,
                ..good
            },
            Parsed {
                vlan: Some(4096),
                l2_len: 18,
                ..good
            },
            Parsed { l4_len: 0, ..good },
            Parsed {
                dport: None,
                ..good
            },
            Parsed {
                proto: Some(1),
                ..good
            },
            Parsed { l4_len: 64, ..good },
            Parsed {
                fragment: Fragment::Later,
                ..good
            },
            Parsed {
                src: v6("::1"),
                ..good
            },
            Parsed {
                dscp: Some(64),
                ..good
            },
            Parsed { l3_len: 18, ..good },
            Parsed {
                ethertype: ETHERTYPE_ARP,
                ..good
            },
        ];
        for b in broken {
            assert!(b.check(len).is_err(), "{b:?}");
        }
        assert_eq!(
            good.check(good.header_len() - 1),
            Err("headers longer than the frame")
        );
    }

    #[test]
    fn malformed_names() {
        for (i, m) in Malformed::ALL.iter().enumerate() {
            assert_eq!(*m as usize, i);
            let name = m.name();
            assert!(
                name.chars()
                    .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_')
            );
            assert!(!m.to_string().is_empty());
            assert!(
                Malformed::ALL[..i].iter().all(|o| o.name() != name),
                "{name} twice"
            );
        }
    }

    /// Every reason, each from a frame built to have exactly that defect.
    #[test]
    fn every_malformed_reason() {
        use Malformed::*;
        let udp_seg = udp(1, 2, 0);
        let good_v4 = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(IPPROTO_UDP, 8, 0, 0))
            .raw(&udp_seg);
        let with_ip4 = |f: &dyn Fn(&mut Vec<u8>)| {
            let mut b = good_v4.0.clone();
            f(&mut b);
            b
        };
        let good_v6 = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(IPPROTO_UDP, 8))
            .raw(&udp_seg);
        let mut cases: Vec<(Malformed, Vec<u8>)> = vec![
            (TruncatedEthernet, vec![]),
            (TruncatedEthernet, F::eth(ETHERTYPE_IPV4).0[..13].to_vec()),
            (TruncatedVlan, F::eth(ETHERTYPE_VLAN).raw(&[0, 1, 8]).0),
            (
                TooManyVlanTags,
                F::tagged(&[(ETHERTYPE_QINQ, 1), (ETHERTYPE_VLAN, 2)], ETHERTYPE_VLAN)
                    .raw(&[0, 3, 8, 0])
                    .0,
            ),
            (TruncatedIpv4, F::eth(ETHERTYPE_IPV4).raw(&[0x45; 19]).0),
            (Ipv4Version, with_ip4(&|b| b[14] = 0x65)),
            (Ipv4Ihl, with_ip4(&|b| b[14] = 0x44)),
            (TruncatedIpv4, with_ip4(&|b| b[14] = 0x4f)), // 60-byte header, 28 bytes there
            (Ipv4TotalLength, with_ip4(&|b| b[17] = 19)), // below the header
            (Ipv4TotalLength, with_ip4(&|b| b[17] = 29)), // one beyond the frame
            (
                Ipv4TotalLength,
                with_ip4(&|b| b[16..18].copy_from_slice(&[0, 0])),
            ),
            (TruncatedIpv6, F::eth(ETHERTYPE_IPV6).raw(&[0x60; 39]).0),
            (Ipv6Version, {
                let mut b = good_v6.0.clone();
                b[14] = 0x40;
                b
            }),
            (Ipv6PayloadLength, {
                let mut b = good_v6.0.clone();
                b[19] = 9;
                b
            }),
            (
                TruncatedTcp,
                F::eth(ETHERTYPE_IPV4)
                    .raw(&ipv4(6, 19, 0, 0))
                    .raw(&[0; 19])
                    .0,
            ),
            (TruncatedTcp, {
                // Data offset 6 (24 bytes), 20 there.
                let mut seg = tcp(1, 2, 0, 0);
                seg[12] = 0x60;
                F::eth(ETHERTYPE_IPV4).raw(&ipv4(6, 20, 0, 0)).raw(&seg).0
            }),
            (TcpDataOffset, {
                let mut seg = tcp(1, 2, 0, 0);
                seg[12] = 0x40;
                F::eth(ETHERTYPE_IPV4).raw(&ipv4(6, 20, 0, 0)).raw(&seg).0
            }),
            (
                TruncatedUdp,
                F::eth(ETHERTYPE_IPV4)
                    .raw(&ipv4(17, 7, 0, 0))
                    .raw(&[0; 7])
                    .0,
            ),
            (TruncatedUdp, F::eth(ETHERTYPE_IPV6).raw(&ipv6(17, 0)).0),
            (UdpLength, with_ip4(&|b| b[39] = 7)),
            (UdpLength, with_ip4(&|b| b[39] = 9)),
        ];
        // The extension header chain: truncated inside a header's fixed part, a header longer
        // than the payload, too many headers, hop-by-hop not first.
        let v6 = |next: u8, ext: &[u8]| {
            F::eth(ETHERTYPE_IPV6)
                .raw(&ipv6(next, ext.len() as u16))
                .raw(ext)
                .0
        };
        cases.push((Ipv6ExtHeaders, v6(IPV6_HOPOPTS, &[17])));
        cases.push((Ipv6ExtHeaders, v6(IPV6_FRAGMENT, &[17, 0, 0])));
        cases.push((Ipv6ExtHeaders, v6(IPV6_ROUTING, &[17, 1, 0, 0, 0, 0, 0, 0])));
        cases.push((Ipv6ExtHeaders, v6(IPV6_AH, &[17, 1, 0, 0, 0, 0, 0, 0])));
        // One more destination options header than the limit, the last with no next header.
        let mut chain = Vec::new();
        for _ in 0..MAX_IPV6_EXT_HEADERS {
            chain.extend_from_slice(&[IPV6_DSTOPTS, 0, 0, 0, 0, 0, 0, 0]);
        }
        chain.extend_from_slice(&[59, 0, 0, 0, 0, 0, 0, 0]);
        cases.push((Ipv6ExtHeaders, v6(IPV6_DSTOPTS, &chain)));
        cases.push((
            Ipv6ExtHeaders,
            v6(
                IPV6_DSTOPTS,
                &[IPV6_HOPOPTS, 0, 0, 0, 0, 0, 0, 0, 59, 0, 0, 0, 0, 0, 0, 0],
            ),
        ));
        // The chain of the limit's length itself is fine.
        chain.drain(..8);
        let p = ok(&v6(IPV6_DSTOPTS, &chain));
        assert_eq!(
            (p.proto, usize::from(p.l3_len)),
            (Some(59), 40 + chain.len())
        );

        for m in Malformed::ALL {
            assert!(
                cases.iter().any(|(c, _)| *c == m),
                "no case for {}",
                m.name()
            );
        }
        for (want, frame) in &cases {
            assert_eq!(
                parse(frame),
                Err(*want),
                "{} from {frame:02x?}",
                want.name()
            );
        }
        // And the unmodified frames parse.
        assert!(parse(&good_v4.0).is_ok());
        assert!(parse(&good_v6.0).is_ok());
    }

    #[test]
    fn big_tcp_zero_lengths() {
        // IPv4 total length 0 with more than 64 KiB after the header: accepted.
        let seg = tcp(1, 2, 0, 70_000);
        let mut f = F::eth(ETHERTYPE_IPV4).raw(&ipv4(6, 0, 0, 0)).raw(&seg);
        f.0[16..18].copy_from_slice(&[0, 0]);
        assert_eq!(ok(&f.0).sport, Some(1));
        let f = F::eth(ETHERTYPE_IPV6).raw(&ipv6(6, 0)).raw(&seg);
        assert_eq!(ok(&f.0).dport, Some(2));
        // IPv6 payload length 0 otherwise means an empty payload.
        let f = F::eth(ETHERTYPE_IPV6).raw(&ipv6(6, 0)).raw(&seg[..100]);
        assert_eq!(parse(&f.0), Err(Malformed::TruncatedTcp));
    }

    fn gso(gso_type: u8, gso_size: u16, hdr_len: u16) -> VnetHdr {
        VnetHdr {
            flags: 1,
            gso_type,
            hdr_len,
            gso_size,
            csum_start: 34,
            csum_offset: 16,
        }
    }

    #[test]
    fn wire_bytes_of_a_tso_frame() {
        // A full 64 KiB TCPv4 TSO super-frame: IPv4 total length 65535, TCP with timestamps
        // (32-byte header): 14 + 65535 = 65549 bytes, headers 14 + 20 + 32 = 66, payload 65483.
        let f = ipv4_tcp(0, 12, 65535 - 20 - 32);
        assert_eq!(f.len(), 65549);
        let p = ok(&f.0);
        assert_eq!(p.header_len(), 66);
        // ceil(65483 / 1448) = 46 segments (45 full, one of 323 bytes), 45 repeated headers:
        // 65549 + 45 * 66 = 68519 = 46 * 66 + 65483.
        let v = gso(1, 1448, 66);
        assert_eq!(wire_bytes(&v, Some(&p), f.len()), 68_519);
        // The ECN bit changes nothing; without GSO the frame costs its length.
        assert_eq!(wire_bytes(&gso(0x81, 1448, 66), Some(&p), f.len()), 68_519);
        assert_eq!(wire_bytes(&VnetHdr::default(), Some(&p), f.len()), 65_549);
        assert_eq!(wire_bytes(&gso(0, 1448, 66), Some(&p), f.len()), 65_549);
        // Unparsed: the hint (66 here) is used.
        assert_eq!(wire_bytes(&v, None, f.len()), 68_519);
        // The hint's bogus values: 0 charges the frame; a large one is capped at 256:
        // ceil((65549 - 256) / 1448) = 46, 65549 + 45 * 256 = 77069.
        assert_eq!(wire_bytes(&gso(1, 1448, 0), None, f.len()), 65_549);
        assert_eq!(wire_bytes(&gso(1, 1448, 9000), None, f.len()), 77_069);
    }

    #[test]
    fn wire_bytes_of_other_gso_frames() {
        // TCPv6, 2 segments exactly: 14 + 40 + 20 headers, 2 * 1000 payload.
        let seg = tcp(1, 2, 0, 2000);
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(6, seg.len() as u16))
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!(f.len(), 74 + 2000);
        assert_eq!(
            wire_bytes(&gso(4, 1000, 0), Some(&p), f.len()),
            2 * (74 + 1000)
        );
        // One byte more of payload than gso_size multiples: a third segment.
        let seg = tcp(1, 2, 0, 2001);
        let f = F::eth(ETHERTYPE_IPV6)
            .raw(&ipv6(6, seg.len() as u16))
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!(
            wire_bytes(&gso(4, 1000, 0), Some(&p), f.len()),
            3 * 74 + 2001
        );
        // UDP GSO (type 5): headers 14 + 20 + 8 = 42, 10 segments of 1200.
        let seg = udp(1, 2, 12_000);
        let f = F::eth(ETHERTYPE_IPV4)
            .raw(&ipv4(17, seg.len(), 0, 0))
            .raw(&seg);
        let p = ok(&f.0);
        assert_eq!(
            wire_bytes(&gso(5, 1200, 0), Some(&p), f.len()),
            10 * 42 + 12_000
        );
        // UFO (type 3): fragments of 1480 repeat only the 34 bytes of L2 + L3:
        // payload 12008 -> 9 fragments, 12042 + 8 * 34.
        assert_eq!(
            wire_bytes(&gso(3, 1480, 0), Some(&p), f.len()),
            12_042 + 8 * 34
        );
        // A frame with less payload than gso_size is one segment.
        let small = ipv4_tcp(0, 0, 100);
        let p = ok(&small.0);
        assert_eq!(
            wire_bytes(&gso(1, 1448, 54), Some(&p), small.len()),
            small.len() as u64
        );
        // An ARP frame flagged GSO: no parsed L4, the hint is used.
        let arp = F::eth(ETHERTYPE_ARP).raw(&[0; 3000]);
        let p = ok(&arp.0);
        assert_eq!(wire_bytes(&gso(1, 1000, 14), Some(&p), 3014), 3014 + 2 * 14);
    }

    #[test]
    fn wire_bytes_clamps() {
        let f = ipv4_tcp(0, 0, 10_000);
        let p = ok(&f.0);
        let len = f.len() as u64;
        // gso_size 1 would be 10000 segments of 55 bytes; segments are taken to be >= 54.
        let w = wire_bytes(&gso(1, 1, 54), Some(&p), f.len());
        assert_eq!(w, len + 10_000u64.div_ceil(54).saturating_sub(1) * 54);
        assert!(w <= 2 * len);
        for frame_len in [0, 1, 13, 54, 100, 65_549] {
            for g in [1, 7, 54, 1448, u16::MAX] {
                for hint in [0, 1, 54, 255, 256, u16::MAX] {
                    for parsed in [None, Some(&p)] {
                        let w = wire_bytes(&gso(1, g, hint), parsed, frame_len);
                        let fl = frame_len as u64;
                        assert!(fl <= w && w <= 2 * fl, "{frame_len} {g} {hint}: {w}");
                    }
                }
            }
        }
    }

    #[test]
    fn every_prefix_of_valid_frames_is_handled() {
        let seg = udp(1, 2, 10);
        let mut ext = vec![IPV6_FRAGMENT, 0, 0, 1, 0, 0, 0, 1];
        ext.extend_from_slice(&[IPPROTO_UDP, 0, 0, 0, 0, 0, 0, 0]);
        let frames = [
            ipv4_tcp(4, 8, 10).0,
            F::tagged(&[(ETHERTYPE_QINQ, 1), (ETHERTYPE_VLAN, 2)], ETHERTYPE_IPV6)
                .raw(&ipv6(IPV6_HOPOPTS, (ext.len() + seg.len()) as u16))
                .raw(&ext)
                .raw(&seg)
                .0,
        ];
        for f in &frames {
            assert!(parse(f).is_ok());
            for n in 0..f.len() {
                // Shortening a frame below its IP length is always malformed.
                assert!(parse(&f[..n]).is_err(), "prefix {n} parsed");
            }
        }
    }
}
