//! Classifiers: which leaf a packet goes to. Rules are tried in order; the first whose every
//! condition holds wins; a packet no rule matches goes to the default leaf, or is rejected
//! (and counted) if there is none.

use crate::packet::Packet;
use std::net::IpAddr;

/// One condition on a packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
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

/// Whether `net` has no bit set after its first `len` (at most its width).
fn network_only(net: IpAddr, len: u8) -> bool {
    match net {
        IpAddr::V4(a) => u32::from(a).checked_shl(u32::from(len)).unwrap_or(0) == 0,
        IpAddr::V6(a) => u128::from(a).checked_shl(u32::from(len)).unwrap_or(0) == 0,
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
    /// Whether the condition can hold as written: a DSCP in 0..=63, a VLAN id in 0..=4095, a
    /// prefix no longer than its address with its host bits zero, a port range not empty.
    /// The policy-file parser checks these with the file's line; this is for rules built in
    /// code, which would otherwise match nothing (or a prefix other than the one written).
    pub fn check(&self) -> Result<(), String> {
        let prefix = |net: IpAddr, len: u8| {
            let bits = if net.is_ipv4() { 32 } else { 128 };
            if u32::from(len) > bits {
                return Err(format!(
                    "{self}: a prefix of {bits}-bit addresses is at most /{bits}"
                ));
            }
            if !network_only(net, len) {
                return Err(format!("{self}: host bits are set after /{len}"));
            }
            Ok(())
        };
        match *self {
            Match::Dscp(d) if d > 63 => Err(format!("{self}: a DSCP is 0..=63")),
            Match::Vlan(v) if v > 4095 => Err(format!("{self}: a VLAN id is 0..=4095")),
            Match::Src(net, len) | Match::Dst(net, len) => prefix(net, len),
            Match::Sport(lo, hi) | Match::Dport(lo, hi) if lo > hi => {
                Err(format!("{self}: the range is empty"))
            }
            _ => Ok(()),
        }
    }

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

    /// Which packet fields the rule has a condition on: one bit per [`Match`] variant.
    fn fields(&self) -> u8 {
        self.all.iter().fold(0, |mask, m| mask | 1 << m.field())
    }
}

impl Match {
    /// The packet field the condition is on, 0..8 (a rule has at most one per field).
    fn field(&self) -> u8 {
        match self {
            Match::Class(_) => 0,
            Match::Dscp(_) => 1,
            Match::Vlan(_) => 2,
            Match::Proto(_) => 3,
            Match::Src(..) => 4,
            Match::Dst(..) => 5,
            Match::Sport(..) => 6,
            Match::Dport(..) => 7,
        }
    }
}

/// For each rule, the first rule before it that shadows it ([`Rule::shadowed_by`]: a subset
/// of its conditions), if any. A rule shadows a later one with one condition per field (as
/// every rule of a policy file) by having exactly that one's conditions on some of its
/// fields: so each rule's conditions are filed under its set of fields, and a rule looks
/// itself up under each set of fields that earlier rules have and that its own include (one
/// or two in most files, at most 256). Each rule is compared with every rule before it, in
/// O(rules x such sets) in all: trying each pair took `sluice policy check` 32 s for 40 000
/// rules, and then a window of the 4096 before each rule 83 s for 600 000. A rule with two
/// conditions on one field (only a host's own rules can have them) is compared pair by pair.
pub fn shadowing(rules: &[Rule]) -> Vec<Option<usize>> {
    use std::collections::HashMap;
    // (fields, the conditions on them in field order) -> the first rule with exactly those.
    let mut first: HashMap<(u8, Vec<&Match>), usize> = HashMap::new();
    let mut field_sets: Vec<u8> = Vec::new();
    let mut out = Vec::with_capacity(rules.len());
    for (i, r) in rules.iter().enumerate() {
        let mut conds: Vec<&Match> = Vec::with_capacity(r.all.len());
        for m in &r.all {
            if !conds.contains(&m) {
                conds.push(m);
            }
        }
        conds.sort_by_key(|m| m.field());
        let fields = r.fields();
        if conds.len() != fields.count_ones() as usize {
            out.push((0..i).find(|&j| r.shadowed_by(&rules[j])));
            continue;
        }
        let found = field_sets
            .iter()
            .filter(|&&set| set & !fields == 0)
            .filter_map(|&set| {
                let on_set = conds.iter().copied().filter(|m| set & 1 << m.field() != 0);
                first.get(&(set, on_set.collect())).copied()
            })
            .min();
        out.push(found);
        if !field_sets.contains(&fields) {
            field_sets.push(fields);
        }
        first.entry((fields, conds)).or_insert(i);
    }
    out
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

/// An index over a classifier's rules that are one equality on a class id, a DSCP value or a
/// VLAN id, the rules a policy with a class per VM or per traffic type has by the hundred: a
/// packet looks its three values up, then tries only the other rules that come before the
/// indexed one it found, in order. The answer is [`Classifier::classify`]'s (first match wins),
/// without a scan of every rule: with 128 `class = N` rules that scan was about 10
/// instructions per rule and packet (`examples/fanout_probe.rs`).
#[derive(Clone, Debug, Default)]
pub struct RuleIndex {
    /// (value, first rule with that one condition), sorted by value: class ids, DSCP values,
    /// VLAN ids.
    class: Vec<(u32, usize)>,
    dscp: Vec<(u32, usize)>,
    vlan: Vec<(u32, usize)>,
    /// Every other rule, in order.
    rest: Vec<usize>,
}

impl RuleIndex {
    /// The index of `c`'s rules.
    pub fn new(c: &Classifier) -> Self {
        let mut index = RuleIndex::default();
        for (i, rule) in c.rules.iter().enumerate() {
            let (keys, value) = match rule.all[..] {
                [Match::Class(v)] => (&mut index.class, v),
                [Match::Dscp(v)] => (&mut index.dscp, u32::from(v)),
                [Match::Vlan(v)] => (&mut index.vlan, u32::from(v)),
                _ => {
                    index.rest.push(i);
                    continue;
                }
            };
            keys.push((value, i));
        }
        for keys in [&mut index.class, &mut index.dscp, &mut index.vlan] {
            // By value, then rule: a later rule of the same value is never reached (the
            // earlier one matches first), and goes.
            keys.sort_unstable();
            keys.dedup_by_key(|&mut (value, _)| value);
        }
        index
    }

    /// Whether any rule is indexed: if not, the index would scan every rule as
    /// [`Classifier::classify`] does, a little later.
    pub fn is_useful(&self) -> bool {
        !(self.class.is_empty() && self.dscp.is_empty() && self.vlan.is_empty())
    }

    /// The leaf for `p` under `c`, the classifier the index was built from: the same answer
    /// as `c.classify(p)`.
    #[inline]
    pub fn classify(&self, c: &Classifier, p: &Packet) -> Option<u16> {
        let h = &p.headers;
        let first = first_rule(&self.class, p.class)
            .min(first_rule(&self.dscp, h.dscp.map(u32::from)))
            .min(first_rule(&self.vlan, h.vlan.map(u32::from)));
        if self.rest.first().is_some_and(|&i| i < first) {
            if let Some(leaf) = self.scan(c, p, first) {
                return Some(leaf);
            }
        }
        c.rules.get(first).map(|r| r.leaf).or(c.default)
    }

    /// The first of the rules that are not indexed and come before `first` (the first indexed
    /// one that matches) that `p` matches. A call of its own, so that the lookups keep their
    /// few registers (inlined, the scan's loads of every header field were hoisted before the
    /// lookups, for every packet).
    #[inline(never)]
    fn scan(&self, c: &Classifier, p: &Packet, first: usize) -> Option<u16> {
        self.rest
            .iter()
            .take_while(|&&i| i < first)
            .filter_map(|&i| c.rules.get(i))
            .find(|r| r.all.iter().all(|m| m.holds(p)))
            .map(|r| r.leaf)
    }
}

/// The first rule of `value` in `keys`, or `usize::MAX` (also for a packet without the field).
#[inline]
fn first_rule(keys: &[(u32, usize)], value: Option<u32>) -> usize {
    match value {
        Some(v) if !keys.is_empty() => match keys.binary_search_by_key(&v, |&(k, _)| k) {
            Ok(at) => keys[at].1,
            Err(_) => usize::MAX,
        },
        _ => usize::MAX,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::packet::Headers;
    use proptest::prelude::*;

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

    /// A prefix matches addresses of its own family only, as docs/policy-files.md says: an
    /// IPv4-mapped IPv6 address is an IPv6 address here.
    #[test]
    fn a_prefix_matches_its_own_family_only() {
        let v4: IpAddr = "10.0.0.0".parse().unwrap();
        let mapped: IpAddr = "::ffff:10.0.0.0".parse().unwrap();
        assert!(Match::Dst(v4, 8).holds(&pkt(0, 0, "10.1.2.3")));
        assert!(!Match::Dst(v4, 8).holds(&pkt(0, 0, "::ffff:10.1.2.3")));
        assert!(Match::Dst(mapped, 104).holds(&pkt(0, 0, "::ffff:10.1.2.3")));
        assert!(!Match::Dst(mapped, 104).holds(&pkt(0, 0, "10.1.2.3")));
        // Even the prefix of length 0: every address of its family, none of the other.
        let any: IpAddr = "0.0.0.0".parse().unwrap();
        assert!(Match::Dst(any, 0).holds(&pkt(0, 0, "192.0.2.1")));
        assert!(!Match::Dst(any, 0).holds(&pkt(0, 0, "fd00::1")));
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
    fn the_index_finds_the_first_matching_rule_whatever_comes_before() {
        let class = |c: u32| Packet {
            class: Some(c),
            ..pkt(10, 80, "10.1.1.1")
        };
        let rule = |all: Vec<Match>, leaf: u16| Rule { all, leaf };
        let c = Classifier {
            rules: vec![
                // Not indexed (two conditions), before the class rules: it wins where it holds.
                rule(vec![Match::Class(1), Match::Dport(80, 80)], 1),
                rule(vec![Match::Class(1)], 2),
                rule(vec![Match::Class(2)], 3),
                // Never reached: class 2 matched first.
                rule(vec![Match::Class(2)], 4),
                // Indexed by DSCP, after the class rules: reached only without them.
                rule(vec![Match::Dscp(10)], 5),
                rule(vec![Match::Dport(80, 80)], 6),
            ],
            default: Some(7),
        };
        let index = RuleIndex::new(&c);
        assert!(index.is_useful());
        for (p, leaf) in [
            (class(1), 1),
            (
                Packet {
                    class: Some(1),
                    ..pkt(10, 443, "10.1.1.1")
                },
                2,
            ),
            (class(2), 3),
            (class(9), 5),
            (pkt(0, 80, "10.1.1.1"), 6),
            (pkt(0, 443, "10.1.1.1"), 7),
        ] {
            assert_eq!(c.classify(&p), Some(leaf), "{p:?}");
            assert_eq!(index.classify(&c, &p), Some(leaf), "{p:?}");
        }
        // Nothing indexed: not useful, and still right.
        let plain = Classifier {
            rules: vec![c.rules[0].clone(), c.rules[5].clone()],
            default: None,
        };
        let index = RuleIndex::new(&plain);
        assert!(!index.is_useful());
        assert_eq!(index.classify(&plain, &class(1)), Some(1));
        assert_eq!(index.classify(&plain, &pkt(0, 443, "10.1.1.1")), None);
    }

    fn a_match() -> impl Strategy<Value = Match> {
        prop_oneof![
            (0u32..4).prop_map(Match::Class),
            (0u8..4).prop_map(Match::Dscp),
            (0u16..3).prop_map(Match::Vlan),
            (0u8..2).prop_map(|p| Match::Proto(p + 6)),
            (0u16..4, 0u16..3).prop_map(|(lo, w)| Match::Dport(lo, lo + w)),
        ]
    }

    fn a_packet() -> impl Strategy<Value = Packet> {
        use prop::option::of;
        (
            of(0u32..5),
            of(0u8..5),
            of(0u16..4),
            of(6u8..9),
            of(0u16..8),
        )
            .prop_map(|(class, dscp, vlan, proto, dport)| Packet {
                len: 100,
                class,
                headers: Headers {
                    dscp,
                    vlan,
                    proto,
                    dport,
                    ..Headers::default()
                },
                ..Packet::default()
            })
    }

    proptest! {
        /// Differential: the index answers what the scan of the rules answers, for rules of
        /// one or more conditions in any order over small domains (so values repeat).
        #[test]
        fn the_index_agrees_with_the_scan(
            rules in prop::collection::vec(
                (prop::collection::vec(a_match(), 0..3), 0u16..20),
                0..24,
            ),
            default in prop::option::of(20u16..22),
            packets in prop::collection::vec(a_packet(), 1..40),
        ) {
            let c = Classifier {
                rules: rules.into_iter().map(|(all, leaf)| Rule { all, leaf }).collect(),
                default,
            };
            let index = RuleIndex::new(&c);
            for p in &packets {
                prop_assert_eq!(index.classify(&c, p), c.classify(p), "{:?}", p);
            }
        }
    }

    proptest! {
        /// Differential: `shadowing` names, for each rule, the first earlier rule whose
        /// conditions are a subset of its own, as trying every pair does; over small domains
        /// (so conditions repeat), with rules of two conditions on one field too.
        #[test]
        fn shadowing_agrees_with_every_pair(
            rules in prop::collection::vec(prop::collection::vec(a_match(), 0..6), 0..60),
        ) {
            let rules: Vec<Rule> = rules.into_iter().map(|all| Rule { all, leaf: 0 }).collect();
            let pairs: Vec<Option<usize>> = (0..rules.len())
                .map(|i| (0..i).find(|&j| rules[i].shadowed_by(&rules[j])))
                .collect();
            prop_assert_eq!(shadowing(&rules), pairs);
        }
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
