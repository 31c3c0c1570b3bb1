//! Properties of the frame parser: valid frames of every shape read back their fields;
//! truncated ones and ones whose length fields (IPv4 total length, IPv6 payload length, TCP data
//! offset, UDP length) disagree with the bytes there fail with the right reason; arbitrary bytes
//! and structure-aware mutations of valid frames never panic and every successful parse passes
//! `Parsed::check`; and `wire_bytes` stays within its bounds. libFuzzer checks the same
//! invariants in `fuzz/` (see fuzz/README.md), whose seed corpus this file writes
//! (`write_fuzz_seed_corpus`, ignored).

mod parse_frames;

use parse_frames::{EXT_CODES, Ext, Frame, L3, L4, TPIDS};
use proptest::prelude::*;
use proptest::sample::Index;
use sluice_dp::parse::{
    ETHERTYPE_ARP, ETHERTYPE_IPV4, ETHERTYPE_IPV6, Fragment, MAX_IPV6_EXT_HEADERS, Malformed,
    parse, wire_bytes,
};
use sluice_dp::port::{VNET_HDR_LEN, VnetHdr};

fn l4() -> impl Strategy<Value = L4> {
    prop_oneof![
        (any::<u16>(), any::<u16>(), 0u8..=10, 0usize..300).prop_map(
            |(sport, dport, opt_words, data)| L4::Tcp {
                sport,
                dport,
                opt_words,
                data
            }
        ),
        (any::<u16>(), any::<u16>(), 0usize..300).prop_map(|(sport, dport, data)| L4::Udp {
            sport,
            dport,
            data
        }),
        (
            any::<u8>().prop_filter("not TCP, UDP or an extension header", |p| {
                *p != 6 && *p != 17 && !EXT_CODES.contains(p)
            }),
            0usize..100
        )
            .prop_map(|(proto, data)| L4::Other { proto, data }),
    ]
}

/// An extension header other than hop-by-hop (which may only come first).
fn ext() -> impl Strategy<Value = Ext> {
    prop_oneof![
        (0u8..4).prop_map(Ext::Routing),
        (0u8..4).prop_map(Ext::DestOpts),
        (0u8..6).prop_map(Ext::Ah),
        // Offsets mostly 0 so that first fragments and atomic fragments are common.
        (prop_oneof![Just(0u16), 0u16..0x2000], any::<bool>())
            .prop_map(|(offset, more)| Ext::Fragment { offset, more }),
        // The largest lengths, now and then.
        Just(Ext::DestOpts(255)),
        Just(Ext::Ah(255)),
    ]
}

fn exts() -> impl Strategy<Value = Vec<Ext>> {
    (
        prop::option::of(0u8..4),
        prop::collection::vec(ext(), 0..MAX_IPV6_EXT_HEADERS),
    )
        .prop_map(|(hbh, mut rest)| {
            if let Some(n) = hbh {
                rest.insert(0, Ext::HopByHop(n));
            }
            rest
        })
}

fn l3() -> impl Strategy<Value = L3> {
    prop_oneof![
        (
            any::<[u8; 4]>(),
            any::<[u8; 4]>(),
            any::<u8>(),
            0u8..=10,
            prop_oneof![3 => Just(0u16), 1 => 0u16..0x2000],
            any::<bool>(),
            l4(),
        )
            .prop_map(|(src, dst, tos, opt_words, offset, more, l4)| L3::Ipv4 {
                src,
                dst,
                tos,
                opt_words,
                offset,
                more,
                l4
            }),
        (
            any::<[u8; 16]>(),
            any::<[u8; 16]>(),
            any::<u8>(),
            exts(),
            l4()
        )
            .prop_map(|(src, dst, tclass, exts, l4)| L3::Ipv6 {
                src,
                dst,
                tclass,
                exts,
                l4
            }),
        (
            prop_oneof![
                Just(ETHERTYPE_ARP),
                any::<u16>().prop_filter("not IP or a VLAN tag", |e| {
                    *e != ETHERTYPE_IPV4 && *e != ETHERTYPE_IPV6 && !TPIDS.contains(e)
                })
            ],
            0usize..100
        )
            .prop_map(|(ethertype, len)| L3::Other { ethertype, len }),
    ]
}

fn frame() -> impl Strategy<Value = Frame> {
    (
        prop::collection::vec((prop::sample::select(TPIDS.to_vec()), any::<u16>()), 0..=2),
        l3(),
        prop_oneof![3 => Just(0usize), 1 => 0usize..64],
    )
        .prop_map(|(tags, l3, padding)| Frame { tags, l3, padding })
}

fn vnet() -> impl Strategy<Value = VnetHdr> {
    (
        prop::sample::select(vec![0u8, 1, 3, 4, 5, 0x81, 0x7f]),
        any::<u16>(),
        prop_oneof![Just(0u16), 1u16..100, 1000u16..1500, any::<u16>()],
    )
        .prop_map(|(gso_type, hdr_len, gso_size)| VnetHdr {
            flags: 1,
            gso_type,
            hdr_len,
            gso_size,
            csum_start: 0,
            csum_offset: 0,
        })
}

/// What must hold for any bytes: a successful parse passes `check`, and `wire_bytes` is in
/// bounds with or without it.
fn assert_sane(bytes: &[u8], vnet: &VnetHdr) -> Result<(), TestCaseError> {
    let parsed = parse(bytes);
    if let Ok(p) = &parsed {
        prop_assert_eq!(p.check(bytes.len()), Ok(()), "{:?}", p);
    }
    let n = bytes.len() as u64;
    for w in [
        wire_bytes(vnet, parsed.as_ref().ok(), bytes.len()),
        wire_bytes(vnet, None, bytes.len()),
    ] {
        prop_assert!(n <= w && w <= 2 * n, "{} bytes, {:?}: {}", n, vnet, w);
        prop_assert!(vnet.is_gso() || w == n);
    }
    Ok(())
}

/// A structure-aware change to a valid frame.
#[derive(Clone, Debug)]
enum Mutation {
    /// Cut the frame at a point.
    Truncate(Index),
    /// Overwrite one byte.
    SetByte(Index, u8),
    /// Overwrite a big-endian 16-bit field (lengths, ethertypes, ports, offsets) with an edge
    /// value.
    SetU16(Index, u16),
    /// Insert bytes (a VLAN tag, an option).
    Insert(Index, Vec<u8>),
    /// Remove bytes.
    Remove(Index, usize),
}

fn mutation() -> impl Strategy<Value = Mutation> {
    let edge16 = prop_oneof![
        prop::sample::select(vec![
            0u16, 1, 4, 7, 8, 19, 20, 39, 40, 0x5fff, 0xffff, 0x8100, 0x88a8, 0x0800, 0x86dd
        ]),
        any::<u16>(),
    ];
    prop_oneof![
        any::<Index>().prop_map(Mutation::Truncate),
        (any::<Index>(), any::<u8>()).prop_map(|(i, b)| Mutation::SetByte(i, b)),
        (any::<Index>(), edge16).prop_map(|(i, v)| Mutation::SetU16(i, v)),
        (
            any::<Index>(),
            prop_oneof![
                Just(vec![0x81, 0x00, 0x00, 0x01]),
                Just(vec![0x88, 0xa8, 0x00, 0x02]),
                prop::collection::vec(any::<u8>(), 1..9),
            ]
        )
            .prop_map(|(i, b)| Mutation::Insert(i, b)),
        (any::<Index>(), 1usize..9).prop_map(|(i, n)| Mutation::Remove(i, n)),
    ]
}

fn mutate(bytes: &mut Vec<u8>, m: &Mutation) {
    let at = |i: &Index, len: usize| if len == 0 { 0 } else { i.index(len) };
    match m {
        Mutation::Truncate(i) => bytes.truncate(at(i, bytes.len() + 1)),
        Mutation::SetByte(i, b) => {
            if !bytes.is_empty() {
                let k = at(i, bytes.len());
                bytes[k] = *b;
            }
        }
        Mutation::SetU16(i, v) => {
            if bytes.len() >= 2 {
                let k = at(i, bytes.len() - 1);
                bytes[k..k + 2].copy_from_slice(&v.to_be_bytes());
            }
        }
        Mutation::Insert(i, b) => {
            let k = at(i, bytes.len() + 1);
            bytes.splice(k..k, b.iter().copied());
        }
        Mutation::Remove(i, n) => {
            let k = at(i, bytes.len() + 1);
            bytes.drain(k..(k + n).min(bytes.len()));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn valid_frames_read_back_their_fields(f in frame(), v in vnet()) {
        let bytes = f.bytes();
        let want = f.expected();
        let got = parse(&bytes);
        prop_assert_eq!(got, Ok(want), "{:02x?}", bytes);
        prop_assert_eq!(want.check(bytes.len()), Ok(()));
        // The classifier view carries the same fields.
        let h = want.headers();
        prop_assert_eq!((h.src, h.dst, h.proto), (want.src, want.dst, want.proto));
        prop_assert_eq!((h.dscp, h.vlan), (want.dscp, want.vlan));
        // Ports, except in a fragment: its datagram's fragments go to one class.
        let whole = want.fragment == Fragment::No;
        prop_assert_eq!((h.sport, h.dport), (want.sport.filter(|_| whole), want.dport.filter(|_| whole)));
        // Ethernet padding changes nothing, the flow key included.
        let mut padded = bytes.clone();
        padded.extend_from_slice(&[0; 11]);
        let p = parse(&padded);
        prop_assert_eq!(p, Ok(want));
        prop_assert_eq!(p.map(|p| p.flow_key()), Ok(want.flow_key()));
        assert_sane(&bytes, &v)?;
    }

    #[test]
    fn truncating_a_valid_frame_inside_its_packet_is_malformed(f in frame(), cut in any::<Index>()) {
        let bytes = f.bytes();
        // Where the packet ends: the IP packet for IP, the Ethernet header otherwise.
        let end = bytes.len() - f.padding - match f.l3 { L3::Other { len, .. } => len, _ => 0 };
        let k = cut.index(end.max(1));
        let got = parse(&bytes[..k]);
        prop_assert!(got.is_err(), "cut at {} of {}: {:?}", k, end, got);
        assert_sane(&bytes[..k], &VnetHdr::default())?;
    }

    #[test]
    fn tcp_and_udp_length_fields_are_checked_against_the_packet(
        v6 in any::<bool>(),
        l4 in l4().prop_filter("TCP or UDP", |l4| !matches!(l4, L4::Other { .. })),
        value in any::<u16>(),
        padding in 0usize..8,
    ) {
        let l3 = if v6 {
            L3::Ipv6 { src: [1; 16], dst: [2; 16], tclass: 0, exts: vec![], l4: l4.clone() }
        } else {
            L3::Ipv4 { src: [1; 4], dst: [2; 4], tos: 0, opt_words: 1, offset: 0, more: false, l4: l4.clone() }
        };
        let f = Frame { tags: vec![], l3, padding };
        let mut bytes = f.bytes();
        let mut want = f.expected();
        let at = usize::from(want.l2_len + want.l3_len);
        // The bytes of the IP payload, from the L4 header to the end of the IP packet.
        let seg = l4.bytes().len();
        let want = match l4 {
            L4::Tcp { .. } => {
                let words = value as u8 >> 4;
                bytes[at + 12] = words << 4;
                let len = 4 * usize::from(words);
                if len < 20 {
                    Err(Malformed::TcpDataOffset)
                } else if len > seg {
                    Err(Malformed::TruncatedTcp)
                } else {
                    want.l4_len = len as u16;
                    Ok(want)
                }
            }
            _ => {
                bytes[at + 4..at + 6].copy_from_slice(&value.to_be_bytes());
                if value < 8 || usize::from(value) > seg {
                    Err(Malformed::UdpLength)
                } else {
                    Ok(want)
                }
            }
        };
        prop_assert_eq!(parse(&bytes), want);
    }

    #[test]
    fn ip_length_fields_are_checked_against_the_frame(
        f in frame().prop_filter("IP", |f| !matches!(f.l3, L3::Other { .. })),
        value in any::<u16>(),
    ) {
        let mut bytes = f.bytes();
        let l2 = usize::from(f.expected().l2_len);
        let avail = bytes.len() - l2;
        let (field, min, err) = match f.l3 {
            L3::Ipv4 { opt_words, .. } => (l2 + 2, 20 + 4 * usize::from(opt_words), Malformed::Ipv4TotalLength),
            _ => (l2 + 4, 0, Malformed::Ipv6PayloadLength),
        };
        let avail = if min == 0 { avail - 40 } else { avail };
        bytes[field..field + 2].copy_from_slice(&value.to_be_bytes());
        let got = parse(&bytes);
        if usize::from(value) < min || usize::from(value) > avail {
            prop_assert_eq!(got, Err(err));
        } else if let Ok(p) = got {
            // A shorter packet parses to the same fields or fails on a header it cuts.
            prop_assert_eq!(p, f.expected());
        }
    }

    #[test]
    fn mutated_valid_frames_never_panic(
        f in frame(),
        ms in prop::collection::vec(mutation(), 1..5),
        v in vnet(),
    ) {
        let mut bytes = f.bytes();
        for m in &ms {
            mutate(&mut bytes, m);
        }
        assert_sane(&bytes, &v)?;
    }

    #[test]
    fn arbitrary_bytes_never_panic(
        bytes in prop::collection::vec(any::<u8>(), 0..600),
        v in vnet(),
    ) {
        assert_sane(&bytes, &v)?;
    }

    #[test]
    fn arbitrary_headers_after_an_ip_ethertype_never_panic(
        tags in prop::collection::vec((prop::sample::select(TPIDS.to_vec()), any::<u16>()), 0..=3),
        ethertype in prop::sample::select(vec![ETHERTYPE_IPV4, ETHERTYPE_IPV6]),
        version_ihl in prop::sample::select(vec![0x45u8, 0x46, 0x4f, 0x60, 0x44, 0x65]),
        rest in prop::collection::vec(any::<u8>(), 0..200),
        v in vnet(),
    ) {
        let mut bytes = vec![2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1];
        for (tpid, tci) in &tags {
            bytes.extend_from_slice(&tpid.to_be_bytes());
            bytes.extend_from_slice(&tci.to_be_bytes());
        }
        bytes.extend_from_slice(&ethertype.to_be_bytes());
        bytes.push(version_ihl);
        bytes.extend_from_slice(&rest);
        if tags.len() > 2 {
            prop_assert_eq!(parse(&bytes), Err(Malformed::TooManyVlanTags));
        }
        assert_sane(&bytes, &v)?;
    }
}

#[test]
fn fragments_of_one_datagram_share_a_flow_key() {
    let datagram = |offset, more| Frame {
        tags: vec![],
        l3: L3::Ipv4 {
            src: [192, 0, 2, 1],
            dst: [192, 0, 2, 2],
            tos: 0,
            opt_words: 0,
            offset,
            more,
            l4: L4::Udp {
                sport: 9,
                dport: 9,
                data: 100,
            },
        },
        padding: 0,
    };
    let key = |offset, more| parse(&datagram(offset, more).bytes()).unwrap().flow_key();
    // First, middle and last fragment: one flow, whose key leaves the ports out.
    let first = key(0, true);
    assert_eq!(first, key(185, true));
    assert_eq!(first, key(370, false));
    assert_ne!(first, key(0, false));
}

/// The valid frames the fuzz corpus starts from, one per protocol path, each behind a virtio-net
/// header (GSO for the TCP and UDP ones that are long enough).
fn seed_frames() -> Vec<(&'static str, VnetHdr, Frame)> {
    let no_gso = VnetHdr::default();
    let gso = |gso_type, gso_size| VnetHdr {
        flags: 1,
        gso_type,
        gso_size,
        ..VnetHdr::default()
    };
    let v4 = |l4, offset, more, opt_words| L3::Ipv4 {
        src: [10, 0, 0, 1],
        dst: [10, 0, 0, 2],
        tos: 0xb8,
        opt_words,
        offset,
        more,
        l4,
    };
    let v6 = |exts, l4| L3::Ipv6 {
        src: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1],
        dst: [0xfd, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 2],
        tclass: 0x28,
        exts,
        l4,
    };
    let tcp = |opt_words, data| L4::Tcp {
        sport: 40000,
        dport: 443,
        opt_words,
        data,
    };
    let udp = |data| L4::Udp {
        sport: 4433,
        dport: 53,
        data,
    };
    let frame = |tags: &[(u16, u16)], l3, padding| Frame {
        tags: tags.to_vec(),
        l3,
        padding,
    };
    let q = [(0x8100, 100)];
    let qinq = [(0x88a8, 10), (0x8100, 20)];
    vec![
        (
            "arp",
            no_gso,
            frame(
                &[],
                L3::Other {
                    ethertype: ETHERTYPE_ARP,
                    len: 28,
                },
                18,
            ),
        ),
        (
            "lldp",
            no_gso,
            frame(
                &[],
                L3::Other {
                    ethertype: 0x88cc,
                    len: 40,
                },
                0,
            ),
        ),
        (
            "ipv4_tcp",
            no_gso,
            frame(&[], v4(tcp(3, 64), 0, false, 0), 0),
        ),
        (
            "ipv4_tcp_opts_vlan",
            no_gso,
            frame(&q, v4(tcp(10, 10), 0, false, 10), 0),
        ),
        (
            "ipv4_tcp_tso",
            gso(1, 1448),
            frame(&[], v4(tcp(3, 3000), 0, false, 0), 0),
        ),
        (
            "ipv4_udp_padded",
            no_gso,
            frame(&[], v4(udp(4), 0, false, 0), 14),
        ),
        (
            "ipv4_udp_qinq",
            no_gso,
            frame(&qinq, v4(udp(100), 0, false, 0), 0),
        ),
        (
            "ipv4_udp_gso",
            gso(5, 1200),
            frame(&[], v4(udp(2500), 0, false, 0), 0),
        ),
        (
            "ipv4_udp_ufo",
            gso(3, 1480),
            frame(&[], v4(udp(3000), 0, false, 0), 0),
        ),
        (
            "ipv4_first_fragment",
            no_gso,
            frame(&[], v4(udp(64), 0, true, 0), 0),
        ),
        (
            "ipv4_later_fragment",
            no_gso,
            frame(&[], v4(udp(64), 185, false, 0), 0),
        ),
        (
            "ipv4_icmp",
            no_gso,
            frame(&[], v4(L4::Other { proto: 1, data: 56 }, 0, false, 0), 0),
        ),
        ("ipv6_tcp", no_gso, frame(&[], v6(vec![], tcp(3, 64)), 0)),
        (
            "ipv6_tcp_tso",
            gso(4, 1428),
            frame(&q, v6(vec![], tcp(3, 3000)), 0),
        ),
        ("ipv6_udp", no_gso, frame(&[], v6(vec![], udp(100)), 0)),
        (
            "ipv6_ext_chain",
            no_gso,
            frame(
                &qinq,
                v6(
                    vec![
                        Ext::HopByHop(0),
                        Ext::DestOpts(1),
                        Ext::Routing(2),
                        Ext::Fragment {
                            offset: 0,
                            more: false,
                        },
                        Ext::Ah(4),
                        Ext::DestOpts(0),
                    ],
                    udp(20),
                ),
                0,
            ),
        ),
        (
            "ipv6_first_fragment",
            no_gso,
            frame(
                &[],
                v6(
                    vec![Ext::Fragment {
                        offset: 0,
                        more: true,
                    }],
                    tcp(0, 40),
                ),
                0,
            ),
        ),
        (
            "ipv6_later_fragment",
            no_gso,
            frame(
                &[],
                v6(
                    vec![Ext::Fragment {
                        offset: 100,
                        more: true,
                    }],
                    udp(40),
                ),
                0,
            ),
        ),
        (
            "ipv6_icmp",
            no_gso,
            frame(
                &[],
                v6(
                    vec![],
                    L4::Other {
                        proto: 58,
                        data: 32,
                    },
                ),
                0,
            ),
        ),
        (
            "ipv6_esp",
            no_gso,
            frame(
                &[],
                v6(
                    vec![],
                    L4::Other {
                        proto: 50,
                        data: 64,
                    },
                ),
                0,
            ),
        ),
    ]
}

#[test]
fn seed_frames_parse() {
    for (name, vnet, f) in seed_frames() {
        let bytes = f.bytes();
        assert_eq!(parse(&bytes), Ok(f.expected()), "{name}");
        let w = wire_bytes(&vnet, Some(&f.expected()), bytes.len());
        assert_eq!(vnet.is_gso(), w > bytes.len() as u64, "{name}");
    }
}

/// Write the seed corpus of the `parse` fuzz target (see fuzz/README.md):
/// `cargo test -p sluice-dp --test parse -- --ignored write_fuzz_seed_corpus`.
#[test]
#[ignore = "writes files; run by hand to regenerate the fuzz seeds"]
fn write_fuzz_seed_corpus() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/corpus/parse");
    std::fs::create_dir_all(&dir).unwrap();
    for (name, vnet, f) in seed_frames() {
        let mut input = vec![0; VNET_HDR_LEN];
        vnet.write(&mut input);
        input.extend_from_slice(&f.bytes());
        std::fs::write(dir.join(format!("seed-{name}")), input).unwrap();
    }
}
