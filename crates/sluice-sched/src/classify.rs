//! Classifiers: which leaf a packet goes to. Rules are tried in order; the first whose every
//! condition holds wins; a packet no rule matches goes to the default leaf, or is rejected
//! (and counted) if there is none.

use crate::packet::Packet;
use std::net::IpAddr;

/// One condition on a packet.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Match {
    /// The class id the host gave.
    Class(u32),
    /// DSCP value (0..=63).
    Dscp(u8),
    /// VLAN id.
    Vlan(u16),
    /// IP protocol number.
    Proto(u8),
    /// Source address within a prefix.
    Src(IpAddr, u8),
    /// Destination address within a prefix.
    Dst(IpAddr, u8),
    /// Source port in an inclusive range.
    Sport(u16, u16),
    /// Destination port in an inclusive range.
    Dport(u16, u16),
}

fn in_prefix(addr: Option<IpAddr>, net: IpAddr, len: u8) -> bool {
    match (addr, net) {
        (Some(IpAddr::V4(a)), IpAddr::V4(n)) => {
            let mask = u32::MAX
                .checked_shl(32 - u32::from(len.min(32)))
                .unwrap_or(0);
            u32::from(a) & mask == u32::from(n) & mask
        }
        (Some(IpAddr::V6(a)), IpAddr::V6(n)) => {
            let mask = u128::MAX
                .checked_shl(128 - u32::from(len.min(128)))
                .unwrap_or(0);
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

impl std::fmt::Display for Match {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Match::Class(c) => write!(f, "class={c}"),
            Match::Dscp(d) => write!(f, "dscp={d}"),
            Match::Vlan(v) => write!(f, "vlan={v}"),
            Match::Proto(p) => write!(f, "proto={p}"),
            Match::Src(a, l) => write!(f, "src={a}/{l}"),
            Match::Dst(a, l) => write!(f, "dst={a}/{l}"),
            Match::Sport(lo, hi) if lo == hi => write!(f, "sport={lo}"),
            Match::Sport(lo, hi) => write!(f, "sport={lo}-{hi}"),
            Match::Dport(lo, hi) if lo == hi => write!(f, "dport={lo}"),
            Match::Dport(lo, hi) => write!(f, "dport={lo}-{hi}"),
        }
    }
}

impl Match {
    /// Whether `p` satisfies this condition.
    pub fn holds(&self, p: &Packet) -> bool {
        let h = &p.headers;
        match *self {
            Match::Class(c) => p.class == Some(c),
            Match::Dscp(d) => h.dscp == Some(d),
            Match::Vlan(v) => h.vlan == Some(v),
            Match::Proto(x) => h.proto == Some(x),
            Match::Src(net, len) => in_prefix(h.src, net, len),
            Match::Dst(net, len) => in_prefix(h.dst, net, len),
            Match::Sport(lo, hi) => h.sport.is_some_and(|s| (lo..=hi).contains(&s)),
            Match::Dport(lo, hi) => h.dport.is_some_and(|s| (lo..=hi).contains(&s)),
        }
    }
}

/// A rule: all conditions must hold (an empty rule matches everything).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Rule {
    /// Conditions, all of which must hold.
    pub all: Vec<Match>,
    /// The leaf (node index) packets matching go to.
    pub leaf: u16,
}

impl Rule {
    /// Why no packet can satisfy every condition of this rule, if none can: addresses of two
    /// families, or ports with a protocol that has none.
    pub fn never_matches(&self) -> Option<&'static str> {
        let has = |v4: bool| {
            self.all
                .iter()
                .any(|m| matches!(m, Match::Src(a, _) | Match::Dst(a, _) if a.is_ipv4() == v4))
        };
        if has(true) && has(false) {
            return Some("its addresses are of two families (IPv4 and IPv6)");
        }
        let ports = self
            .all
            .iter()
            .any(|m| matches!(m, Match::Sport(..) | Match::Dport(..)));
        // TCP, UDP, DCCP, SCTP and UDP-Lite carry ports; the parser reads TCP's and UDP's.
        let portless = self
            .all
            .iter()
            .any(|m| matches!(m, Match::Proto(p) if !matches!(p, 6 | 17 | 33 | 132 | 136)));
        if ports && portless {
            return Some("it asks for ports with a protocol that has none");
        }
        None
    }

    /// Whether every packet this rule matches is matched by `earlier` too (whose conditions
    /// are a subset of this one's), so that, coming after it, this rule is never reached.
    pub fn shadowed_by(&self, earlier: &Rule) -> bool {
        earlier.all.iter().all(|m| self.all.contains(m))
    }
}

/// Ordered rules plus a default.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Classifier {
    /// Rules, first match wins.
    pub rules: Vec<Rule>,
    /// Leaf for packets no rule matches; `None` rejects them.
    pub default: Option<u16>,
}

impl Classifier {
    /// The leaf for `p`.
    #[inline]
    pub fn classify(&self, p: &Packet) -> Option<u16> {
        self.rules
            .iter()
            .find(|r| r.all.iter().all(|m| m.holds(p)))
            .map(|r| r.leaf)
            .or(self.default)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Headers;

    fn pkt(dscp: u8, dport: u16, dst: &str) -> Packet {
        Packet {
            len: 100,
            headers: Headers {
                dscp: Some(dscp),
                dport: Some(dport),
                dst: Some(dst.parse().unwrap()),
                ..Headers::default()
            },
            ..Packet::default()
        }
    }

    #[test]
    fn first_matching_rule_wins_then_default() {
        let c = Classifier {
            rules: vec![
                Rule {
                    all: vec![Match::Dscp(46)],
                    leaf: 1,
                },
                Rule {
                    all: vec![
                        Match::Dport(5000, 5999),
                        Match::Dst("10.0.0.0".parse().unwrap(), 8),
                    ],
                    leaf: 2,
                },
            ],
            default: Some(3),
        };
        assert_eq!(c.classify(&pkt(46, 80, "10.1.1.1")), Some(1));
        assert_eq!(c.classify(&pkt(0, 5201, "10.1.1.1")), Some(2));
        assert_eq!(c.classify(&pkt(0, 5201, "192.168.0.1")), Some(3));
        assert_eq!(c.classify(&pkt(0, 80, "10.1.1.1")), Some(3));
        let strict = Classifier { default: None, ..c };
        assert_eq!(strict.classify(&pkt(0, 80, "10.1.1.1")), None);
    }

    #[test]
    fn prefixes_of_any_length() {
        let a: IpAddr = "10.1.2.3".parse().unwrap();
        assert!(in_prefix(Some(a), "10.1.0.0".parse().unwrap(), 16));
        assert!(!in_prefix(Some(a), "10.2.0.0".parse().unwrap(), 16));
        assert!(in_prefix(Some(a), "0.0.0.0".parse().unwrap(), 0));
        assert!(in_prefix(Some(a), a, 32));
        let v6: IpAddr = "fd00::1".parse().unwrap();
        assert!(in_prefix(Some(v6), "fd00::".parse().unwrap(), 8));
        assert!(!in_prefix(Some(v6), "10.0.0.0".parse().unwrap(), 8));
        assert!(!in_prefix(None, "10.0.0.0".parse().unwrap(), 8));
    }

    #[test]
    fn a_zero_length_prefix_holds_every_address_of_its_family() {
        let from = |src: &str| Packet {
            len: 100,
            headers: Headers {
                src: Some(src.parse().unwrap()),
                ..Headers::default()
            },
            ..Packet::default()
        };
        let any4 = Match::Src("0.0.0.0".parse().unwrap(), 0);
        let any6 = Match::Src("::".parse().unwrap(), 0);
        assert!(any4.holds(&from("10.1.2.3")));
        assert!(any6.holds(&from("2001:db8::1")));
        assert!(!any4.holds(&from("2001:db8::1")));
        assert!(!any6.holds(&from("10.1.2.3")));
    }

    #[test]
    fn only_addresses_of_two_families_make_a_rule_that_never_matches() {
        let rule = |all: Vec<Match>| Rule { all, leaf: 0 }.never_matches();
        let v4 = || Match::Src("10.0.0.0".parse().unwrap(), 8);
        let v6 = || Match::Dst("2001:db8::".parse().unwrap(), 32);
        assert_eq!(rule(vec![v4()]), None);
        assert_eq!(rule(vec![v6()]), None);
        assert_eq!(
            rule(vec![v4(), Match::Dst("10.9.0.0".parse().unwrap(), 16)]),
            None
        );
        assert!(rule(vec![v4(), v6()]).is_some_and(|why| why.contains("two families")));
    }

    #[test]
    fn port_ranges_include_both_ends() {
        let at = |sport: u16, dport: u16| Packet {
            len: 100,
            headers: Headers {
                sport: Some(sport),
                dport: Some(dport),
                ..Headers::default()
            },
            ..Packet::default()
        };
        for (lo, hi) in [(5000, 5999), (80, 80)] {
            for (port, inside) in [(lo - 1, false), (lo, true), (hi, true), (hi + 1, false)] {
                assert_eq!(
                    Match::Sport(lo, hi).holds(&at(port, 0)),
                    inside,
                    "sport {port}"
                );
                assert_eq!(
                    Match::Dport(lo, hi).holds(&at(0, port)),
                    inside,
                    "dport {port}"
                );
            }
        }
    }

    #[test]
    fn ports_match_with_every_protocol_that_carries_them() {
        let rule = |proto: u8| Rule {
            all: vec![Match::Proto(proto), Match::Dport(80, 80)],
            leaf: 0,
        };
        // TCP, UDP, DCCP, SCTP, UDP-Lite.
        for proto in [6, 17, 33, 132, 136] {
            assert_eq!(rule(proto).never_matches(), None, "proto {proto}");
        }
        for proto in [1, 47, 58] {
            assert!(rule(proto).never_matches().is_some(), "proto {proto}");
        }
    }
}
