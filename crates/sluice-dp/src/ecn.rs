//! ECN marking: how a lossless switch tells TCP to slow down without dropping.
//!
//! The datapath never drops to signal congestion (it holds frames, up to the memory bound), so a
//! TCP sender that keeps growing its window would only see its round-trip time grow, up to the
//! receive window of every flow (megabytes each). Instead, a frame that waited longer than a
//! target in the daemon is marked Congestion Experienced (RFC 3168) when its sender negotiated
//! ECN (ECT(0) or ECT(1)); TCP then backs off as it would for a loss, without a retransmission.
//! Frames whose sender did not negotiate ECN (Not-ECT) are left alone: they see delay.
//!
//! [`mark_ce`] rewrites the two ECN bits in place: IPv4's TOS byte (and the header checksum,
//! updated incrementally as in RFC 1624, since the checksum is never offloaded for the IP
//! header), or IPv6's traffic class. TCP and UDP checksums do not cover these bits. O(1), no
//! allocation, and it never panics on any input.

use crate::parse::{ETHERTYPE_IPV4, ETHERTYPE_IPV6};

/// The ECN codepoint Congestion Experienced.
const CE: u8 = 0b11;

/// What [`mark_ce`] did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Marked {
    /// The frame was ECT and is now CE.
    Marked,
    /// The frame was already CE.
    AlreadyCe,
    /// Not-ECT, not IP, or too short: left alone.
    NotEct,
}

/// Mark the IP packet at byte `l3` of Ethernet frame `eth` (whose ethertype after VLAN tags is
/// `ethertype`) Congestion Experienced, if its sender asked for ECN.
pub fn mark_ce(eth: &mut [u8], l3: usize, ethertype: u16) -> Marked {
    match ethertype {
        ETHERTYPE_IPV4 => {
            let Some(ip) = eth.get_mut(l3..l3.saturating_add(20)) else {
                return Marked::NotEct;
            };
            let tos = ip[1];
            match tos & CE {
                0 => Marked::NotEct,
                CE => Marked::AlreadyCe,
                _ => {
                    let old = u16::from_be_bytes([ip[0], tos]);
                    ip[1] = tos | CE;
                    let new = u16::from_be_bytes([ip[0], ip[1]]);
                    let check = u16::from_be_bytes([ip[10], ip[11]]);
                    ip[10..12].copy_from_slice(&checksum_update(check, old, new).to_be_bytes());
                    Marked::Marked
                }
            }
        }
        ETHERTYPE_IPV6 => {
            // Traffic class: the low nibble of byte 0 and the high nibble of byte 1; its two
            // ECN bits are bits 5 and 4 of byte 1.
            let Some(b1) = eth.get_mut(l3.saturating_add(1)) else {
                return Marked::NotEct;
            };
            match (*b1 >> 4) & CE {
                0 => Marked::NotEct,
                CE => Marked::AlreadyCe,
                _ => {
                    *b1 |= CE << 4;
                    Marked::Marked
                }
            }
        }
        _ => Marked::NotEct,
    }
}

/// RFC 1624, eqn. 3: the Internet checksum `check` after one 16-bit word of the data it covers
/// changes from `old` to `new`: `HC' = ~(~HC + ~m + m')`, in one's complement arithmetic.
fn checksum_update(check: u16, old: u16, new: u16) -> u16 {
    let mut sum = u32::from(!check) + u32::from(!old) + u32::from(new);
    while sum > 0xFFFF {
        sum = (sum & 0xFFFF) + (sum >> 16);
    }
    !(sum as u16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The Internet checksum of `data` computed from scratch (the oracle).
    fn checksum(data: &[u8]) -> u16 {
        let mut sum = 0u32;
        for pair in data.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
        while sum > 0xFFFF {
            sum = (sum & 0xFFFF) + (sum >> 16);
        }
        !(sum as u16)
    }

    fn ipv4_frame(tos: u8, seed: [u8; 8]) -> Vec<u8> {
        let mut f = vec![0u8; 14];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV4.to_be_bytes());
        let mut ip = [
            0x45, tos, 0, 40, seed[0], seed[1], 0x40, 0, 64, 6, 0, 0, 10, seed[2], seed[3],
            seed[4], 10, seed[5], seed[6], seed[7],
        ];
        let c = checksum(&ip);
        ip[10..12].copy_from_slice(&c.to_be_bytes());
        f.extend_from_slice(&ip);
        f.extend_from_slice(&[0u8; 20]);
        f
    }

    #[test]
    fn ipv4_ect0_and_ect1_become_ce_with_a_valid_checksum() {
        for ect in [0b10u8, 0b01] {
            let mut f = ipv4_frame(0xb8 | ect, [1, 2, 3, 4, 5, 6, 7, 8]);
            assert_eq!(mark_ce(&mut f, 14, ETHERTYPE_IPV4), Marked::Marked);
            assert_eq!(f[15], 0xb8 | CE, "DSCP kept, ECN = CE");
            assert_eq!(
                checksum(&f[14..34]),
                0,
                "the header checksum still verifies"
            );
        }
    }

    #[test]
    fn not_ect_and_ce_are_left_alone() {
        let mut f = ipv4_frame(0xb8, [9; 8]);
        let before = f.clone();
        assert_eq!(mark_ce(&mut f, 14, ETHERTYPE_IPV4), Marked::NotEct);
        assert_eq!(f, before);
        let mut f = ipv4_frame(0xb8 | CE, [9; 8]);
        let before = f.clone();
        assert_eq!(mark_ce(&mut f, 14, ETHERTYPE_IPV4), Marked::AlreadyCe);
        assert_eq!(f, before);
    }

    #[test]
    fn ipv6_traffic_class_ecn_bits() {
        // Version 6, traffic class 0xb9 (DSCP 46, ECT(1)), flow label 0x12345.
        let mut f = vec![0u8; 14 + 40];
        f[12..14].copy_from_slice(&ETHERTYPE_IPV6.to_be_bytes());
        f[14] = 0x6b;
        f[15] = 0x91;
        f[16] = 0x23;
        f[17] = 0x45;
        assert_eq!(mark_ce(&mut f, 14, ETHERTYPE_IPV6), Marked::Marked);
        assert_eq!(
            (f[14], f[15], f[16], f[17]),
            (0x6b, 0xb1, 0x23, 0x45),
            "traffic class 0xbb, label kept"
        );
        assert_eq!(mark_ce(&mut f, 14, ETHERTYPE_IPV6), Marked::AlreadyCe);
        f[15] = 0x81; // traffic class 0xb8: Not-ECT
        assert_eq!(mark_ce(&mut f, 14, ETHERTYPE_IPV6), Marked::NotEct);
    }

    #[test]
    fn short_frames_and_other_ethertypes_are_not_touched() {
        let mut f = ipv4_frame(0x02, [0; 8]);
        assert_eq!(mark_ce(&mut f[..30], 14, ETHERTYPE_IPV4), Marked::NotEct);
        assert_eq!(mark_ce(&mut f, usize::MAX, ETHERTYPE_IPV4), Marked::NotEct);
        assert_eq!(mark_ce(&mut f, usize::MAX, ETHERTYPE_IPV6), Marked::NotEct);
        assert_eq!(mark_ce(&mut f, 14, 0x0806), Marked::NotEct);
    }

    proptest! {
        /// The incremental update agrees with a checksum computed from scratch, for any header.
        #[test]
        fn incremental_checksum_matches_a_full_recompute(seed in any::<[u8; 8]>(), tos in any::<u8>()) {
            let mut f = ipv4_frame(tos, seed);
            let marked = mark_ce(&mut f, 14, ETHERTYPE_IPV4);
            prop_assert_eq!(marked == Marked::Marked, tos & CE == 0b01 || tos & CE == 0b10);
            prop_assert_eq!(checksum(&f[14..34]), 0);
            prop_assert_eq!(f[15] >> 2, tos >> 2);
        }

        /// Any bytes at any offset: no panic.
        #[test]
        fn never_panics(mut bytes in proptest::collection::vec(any::<u8>(), 0..80), l3 in 0usize..100, v6 in any::<bool>()) {
            let _ = mark_ce(&mut bytes, l3, if v6 { ETHERTYPE_IPV6 } else { ETHERTYPE_IPV4 });
        }
    }
}
