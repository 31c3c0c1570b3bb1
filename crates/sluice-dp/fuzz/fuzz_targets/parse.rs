//! Fuzz target `parse`: the input is what a port delivers, a 10-byte virtio-net header and an
//! Ethernet frame (shorter inputs are taken as a bare frame with no GSO). Runs `parse` and
//! `wire_bytes` and checks what must hold for any bytes:
//!
//! - a successful parse passes `Parsed::check` (header lengths within the frame, fields
//!   consistent with the ethertype and protocol) and is deterministic;
//! - its headers are minimal: the frame cut one byte short of `header_len` does not parse;
//! - appending bytes (Ethernet padding) does not change it;
//! - `wire_bytes` lies in `frame_len ..= 2 * frame_len` and is `frame_len` without GSO, with
//!   or without the parse result.

#![no_main]

use libfuzzer_sys::fuzz_target;
use sluice_dp::parse::{Malformed, parse, wire_bytes};
use sluice_dp::port::{VNET_HDR_LEN, VnetHdr};

fuzz_target!(|data: &[u8]| {
    let (vnet, frame) = match VnetHdr::read(data) {
        Some(v) => (v, &data[VNET_HDR_LEN..]),
        None => (VnetHdr::default(), data),
    };
    let len = frame.len();
    let parsed = parse(frame);
    match &parsed {
        Ok(p) => {
            if let Err(why) = p.check(len) {
                panic!("invariant broken: {why}: {p:?}");
            }
            assert_eq!(parse(frame), parsed, "not deterministic");
            let hdr = p.header_len();
            assert!(hdr >= 14 && hdr <= len);
            assert!(
                parse(&frame[..hdr - 1]).is_err(),
                "parsed with a header cut short"
            );
            let mut padded = frame.to_vec();
            padded.extend_from_slice(&[0xa5; 17]);
            assert_eq!(parse(&padded), parsed, "padding changed the parse");
        }
        Err(m) => assert!(Malformed::ALL.contains(m) && !m.name().is_empty()),
    }
    let n = len as u64;
    for w in [
        wire_bytes(&vnet, parsed.as_ref().ok(), len),
        wire_bytes(&vnet, None, len),
    ] {
        assert!(n <= w && w <= 2 * n, "wire bytes {w} for {n}: {vnet:?}");
        assert!(vnet.is_gso() || w == n);
    }
});
