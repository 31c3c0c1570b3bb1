//! Frames described field by field: their bytes, and what `parse` must read out of them. Used by
//! the parser's property tests and to write the fuzz seed corpus (`tests/parse.rs`).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use sluice_dp::parse::{
    ETHERTYPE_IPV4, ETHERTYPE_IPV6, ETHERTYPE_QINQ, ETHERTYPE_VLAN, Fragment, IPPROTO_TCP,
    IPPROTO_UDP, Parsed,
};

/// A valid frame.
#[derive(Clone, Debug)]
pub struct Frame {
    /// VLAN tags, outer first: (TPID, TCI).
    pub tags: Vec<(u16, u16)>,
    /// What follows the tags.
    pub l3: L3,
    /// Bytes of Ethernet padding after the packet.
    pub padding: usize,
}

/// The network layer.
#[derive(Clone, Debug)]
pub enum L3 {
    /// IPv4 with `opt_words` words of options; a fragment if `offset` (8-byte units) or `more`.
    Ipv4 {
        src: [u8; 4],
        dst: [u8; 4],
        tos: u8,
        opt_words: u8,
        offset: u16,
        more: bool,
        l4: L4,
    },
    /// IPv6 with extension headers.
    Ipv6 {
        src: [u8; 16],
        dst: [u8; 16],
        tclass: u8,
        exts: Vec<Ext>,
        l4: L4,
    },
    /// Another ethertype (not IP, not a VLAN tag) and `len` bytes of payload.
    Other { ethertype: u16, len: usize },
}

/// An IPv6 extension header; the numbers are the header's length field.
#[derive(Clone, Copy, Debug)]
pub enum Ext {
    HopByHop(u8),
    Routing(u8),
    DestOpts(u8),
    Ah(u8),
    Fragment { offset: u16, more: bool },
}

/// The transport layer.
#[derive(Clone, Debug)]
pub enum L4 {
    /// TCP with `opt_words` (0..=10) words of options and `data` payload bytes.
    Tcp {
        sport: u16,
        dport: u16,
        opt_words: u8,
        data: usize,
    },
    /// UDP with `data` payload bytes.
    Udp { sport: u16, dport: u16, data: usize },
    /// Another protocol (not TCP, UDP or an IPv6 extension header) and `data` bytes.
    Other { proto: u8, data: usize },
}

impl L4 {
    pub fn proto(&self) -> u8 {
        match self {
            L4::Tcp { .. } => IPPROTO_TCP,
            L4::Udp { .. } => IPPROTO_UDP,
            L4::Other { proto, .. } => *proto,
        }
    }

    pub fn bytes(&self) -> Vec<u8> {
        let mut b = Vec::new();
        match *self {
            L4::Tcp {
                sport,
                dport,
                opt_words,
                data,
            } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&[0, 0, 0x10, 0, 0, 0, 0, 0]);
                b.push((5 + opt_words) << 4);
                b.extend_from_slice(&[0x10, 0xff, 0xff, 0, 0, 0, 0]);
                b.extend(std::iter::repeat_n(1u8, 4 * usize::from(opt_words)));
                b.extend((0..data).map(|i| i as u8));
            }
            L4::Udp { sport, dport, data } => {
                b.extend_from_slice(&sport.to_be_bytes());
                b.extend_from_slice(&dport.to_be_bytes());
                b.extend_from_slice(&((8 + data) as u16).to_be_bytes());
                b.extend_from_slice(&[0, 0]);
                b.extend((0..data).map(|i| i as u8));
            }
            L4::Other { data, .. } => b.extend((0..data).map(|i| i as u8)),
        }
        b
    }

    /// (ports, header length) as `parse` reports them.
    fn expected(&self) -> (Option<(u16, u16)>, u16) {
        match *self {
            L4::Tcp {
                sport,
                dport,
                opt_words,
                ..
            } => (Some((sport, dport)), 20 + 4 * u16::from(opt_words)),
            L4::Udp { sport, dport, .. } => (Some((sport, dport)), 8),
            L4::Other { .. } => (None, 0),
        }
    }
}

impl Ext {
    pub fn code(&self) -> u8 {
        match self {
            Ext::HopByHop(_) => 0,
            Ext::Routing(_) => 43,
            Ext::DestOpts(_) => 60,
            Ext::Ah(_) => 51,
            Ext::Fragment { .. } => 44,
        }
    }

    pub fn len(&self) -> usize {
        match *self {
            Ext::HopByHop(n) | Ext::Routing(n) | Ext::DestOpts(n) => (usize::from(n) + 1) * 8,
            Ext::Ah(n) => (usize::from(n) + 2) * 4,
            Ext::Fragment { .. } => 8,
        }
    }

    pub fn bytes(&self, next: u8) -> Vec<u8> {
        let mut b = vec![next];
        match *self {
            Ext::HopByHop(n) | Ext::Routing(n) | Ext::DestOpts(n) | Ext::Ah(n) => b.push(n),
            Ext::Fragment { offset, more } => {
                b.push(0);
                b.extend_from_slice(&((offset << 3) | u16::from(more)).to_be_bytes());
            }
        }
        b.resize(self.len(), 0);
        b
    }
}

impl Frame {
    /// The ethertype after the tags.
    pub fn ethertype(&self) -> u16 {
        match self.l3 {
            L3::Ipv4 { .. } => ETHERTYPE_IPV4,
            L3::Ipv6 { .. } => ETHERTYPE_IPV6,
            L3::Other { ethertype, .. } => ethertype,
        }
    }

    /// The frame's bytes.
    pub fn bytes(&self) -> Vec<u8> {
        let mut b = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for &(tpid, tci) in &self.tags {
            b.extend_from_slice(&tpid.to_be_bytes());
            b.extend_from_slice(&tci.to_be_bytes());
        }
        b.extend_from_slice(&self.ethertype().to_be_bytes());
        match &self.l3 {
            L3::Ipv4 {
                src,
                dst,
                tos,
                opt_words,
                offset,
                more,
                l4,
            } => {
                let seg = l4.bytes();
                let ihl = 5 + opt_words;
                let total = (4 * usize::from(ihl) + seg.len()) as u16;
                let frag = (offset & 0x1fff) | if *more { 0x2000 } else { 0 };
                b.extend_from_slice(&[0x40 | ihl, *tos]);
                b.extend_from_slice(&total.to_be_bytes());
                b.extend_from_slice(&[0xbe, 0xef]);
                b.extend_from_slice(&frag.to_be_bytes());
                b.extend_from_slice(&[64, l4.proto(), 0, 0]);
                b.extend_from_slice(src);
                b.extend_from_slice(dst);
                b.extend(std::iter::repeat_n(1u8, 4 * usize::from(*opt_words)));
                b.extend_from_slice(&seg);
            }
            L3::Ipv6 {
                src,
                dst,
                tclass,
                exts,
                l4,
            } => {
                let seg = l4.bytes();
                let mut ext_bytes = Vec::new();
                for (i, e) in exts.iter().enumerate() {
                    let next = exts.get(i + 1).map_or(l4.proto(), Ext::code);
                    ext_bytes.extend_from_slice(&e.bytes(next));
                }
                let first = exts.first().map_or(l4.proto(), Ext::code);
                let plen = (ext_bytes.len() + seg.len()) as u16;
                b.extend_from_slice(&[0x60 | (tclass >> 4), (tclass << 4) | 0x1, 0x23, 0x45]);
                b.extend_from_slice(&plen.to_be_bytes());
                b.extend_from_slice(&[first, 64]);
                b.extend_from_slice(src);
                b.extend_from_slice(dst);
                b.extend_from_slice(&ext_bytes);
                b.extend_from_slice(&seg);
            }
            L3::Other { len, .. } => b.extend((0..*len).map(|i| (i * 7) as u8)),
        }
        b.extend(std::iter::repeat_n(0u8, self.padding));
        b
    }

    /// What `parse` must read out of [`Frame::bytes`].
    pub fn expected(&self) -> Parsed {
        let mut p = Parsed {
            vlan: self.tags.first().map(|t| t.1 & 0x0fff),
            inner_vlan: self.tags.get(1).map(|t| t.1 & 0x0fff),
            ethertype: self.ethertype(),
            l2_len: 14 + 4 * self.tags.len() as u16,
            ..Parsed::default()
        };
        let l4 = match &self.l3 {
            L3::Ipv4 {
                src,
                dst,
                tos,
                opt_words,
                offset,
                more,
                l4,
            } => {
                p.src = Some(IpAddr::V4(Ipv4Addr::from(*src)));
                p.dst = Some(IpAddr::V4(Ipv4Addr::from(*dst)));
                p.dscp = Some(tos >> 2);
                p.proto = Some(l4.proto());
                p.l3_len = 20 + 4 * u16::from(*opt_words);
                p.fragment = match (offset & 0x1fff, more) {
                    (0, false) => Fragment::No,
                    (0, true) => Fragment::First,
                    _ => Fragment::Later,
                };
                l4
            }
            L3::Ipv6 {
                src,
                dst,
                tclass,
                exts,
                l4,
            } => {
                p.src = Some(IpAddr::V6(Ipv6Addr::from(*src)));
                p.dst = Some(IpAddr::V6(Ipv6Addr::from(*dst)));
                p.dscp = Some(tclass >> 2);
                p.l3_len = 40;
                p.proto = Some(l4.proto());
                // The chain ends at the first fragment header of a fragment (not an atomic
                // one); a first fragment has ports if its L4 header comes right after it.
                let mut ports = true;
                for (i, e) in exts.iter().enumerate() {
                    p.l3_len += e.len() as u16;
                    if let Ext::Fragment { offset, more } = *e {
                        p.fragment = match (offset & 0x1fff, more) {
                            (0, false) => continue,
                            (0, true) => Fragment::First,
                            _ => Fragment::Later,
                        };
                        ports = i + 1 == exts.len();
                        p.proto = Some(exts.get(i + 1).map_or(l4.proto(), Ext::code));
                        break;
                    }
                }
                if !ports {
                    return p;
                }
                l4
            }
            L3::Other { .. } => return p,
        };
        if p.fragment != Fragment::Later {
            let (ports, len) = l4.expected();
            p.sport = ports.map(|p| p.0);
            p.dport = ports.map(|p| p.1);
            p.l4_len = len;
        }
        p
    }
}

/// TPIDs of VLAN tags.
pub const TPIDS: [u16; 2] = [ETHERTYPE_VLAN, ETHERTYPE_QINQ];

/// Protocol numbers the parser treats as IPv6 extension headers.
pub const EXT_CODES: [u8; 5] = [0, 43, 44, 51, 60];
