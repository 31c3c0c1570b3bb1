//! Ports: where frames come from and go to. Every port exchanges frames in one format: a
//! 10-byte virtio-net header (GSO and checksum offload information) followed by the Ethernet
//! frame. With the header, a TCP sender's 64 KiB GSO super-frames pass through the daemon whole
//! (10 to 18.5 Gbit/s through a tap on this kind of machine, against under 2 without it), and
//! the scheduler charges them for every segment they carry on the wire.
//!
//! - [`tap`]: a tap device the daemon creates (virtio-net header, checksum and TSO offloads).
//! - [`af_packet`]: an existing interface through a TPACKET_V3 ring and `send(2)`.

pub mod af_packet;
pub mod tap;

use std::io;
use std::os::fd::RawFd;

/// Bytes of virtio-net header in front of every frame (`struct virtio_net_hdr`).
pub const VNET_HDR_LEN: usize = 10;

/// The virtio-net header (little-endian on the wire, as Linux writes it for taps and AF_PACKET
/// with `PACKET_VNET_HDR` on x86).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct VnetHdr {
    /// `VIRTIO_NET_HDR_F_*` flags (1: checksum needed, 2: data valid).
    pub flags: u8,
    /// `VIRTIO_NET_HDR_GSO_*`: 0 none, 1 TCPv4, 3 UDP, 4 TCPv6, 0x80 ECN bit.
    pub gso_type: u8,
    /// Length of the headers the segments repeat (a hint; may be 0).
    pub hdr_len: u16,
    /// Payload bytes per segment.
    pub gso_size: u16,
    /// Where checksumming starts.
    pub csum_start: u16,
    /// Where the checksum goes, from `csum_start`.
    pub csum_offset: u16,
}

impl VnetHdr {
    /// No GSO.
    pub const GSO_NONE: u8 = 0;
    /// The ECN bit of `gso_type`.
    pub const GSO_ECN: u8 = 0x80;

    /// Read a header from the first [`VNET_HDR_LEN`] bytes of `b` (`None` if shorter).
    pub fn read(b: &[u8]) -> Option<VnetHdr> {
        let b: &[u8; VNET_HDR_LEN] = b.get(..VNET_HDR_LEN)?.try_into().ok()?;
        let u16_at = |i: usize| u16::from_le_bytes([b[i], b[i + 1]]);
        Some(VnetHdr {
            flags: b[0],
            gso_type: b[1],
            hdr_len: u16_at(2),
            gso_size: u16_at(4),
            csum_start: u16_at(6),
            csum_offset: u16_at(8),
        })
    }

    /// Write the header into the first [`VNET_HDR_LEN`] bytes of `b` (which must be that long).
    pub fn write(&self, b: &mut [u8]) {
        if b.len() < VNET_HDR_LEN {
            return;
        }
        b[0] = self.flags;
        b[1] = self.gso_type;
        b[2..4].copy_from_slice(&self.hdr_len.to_le_bytes());
        b[4..6].copy_from_slice(&self.gso_size.to_le_bytes());
        b[6..8].copy_from_slice(&self.csum_start.to_le_bytes());
        b[8..10].copy_from_slice(&self.csum_offset.to_le_bytes());
    }

    /// Whether the frame is a GSO super-frame.
    pub fn is_gso(&self) -> bool {
        self.gso_type & !Self::GSO_ECN != Self::GSO_NONE && self.gso_size > 0
    }
}

/// Counters a port keeps about itself.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PortCounters {
    /// Frames read.
    pub rx_frames: u64,
    /// Bytes read (with headers).
    pub rx_bytes: u64,
    /// Frames written.
    pub tx_frames: u64,
    /// Bytes written.
    pub tx_bytes: u64,
    /// Writes that failed (counted; the frame is released).
    pub tx_errors: u64,
    /// Frames the kernel dropped before we read them, where the port can tell (AF_PACKET).
    pub kernel_drops: u64,
}

/// A port. Reads and writes never block: a port is opened non-blocking and waited on with
/// epoll through [`Port::fd`].
pub trait Port: Send {
    /// The port's interface name.
    fn ifname(&self) -> &str;

    /// Read one frame (virtio-net header included) into `buf`; `Ok(None)` when none waits.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>>;

    /// Write one frame (virtio-net header included). `WouldBlock` when the kernel has no room.
    fn send(&mut self, frame: &[u8]) -> io::Result<()>;

    /// The descriptor to wait on for frames to read.
    fn fd(&self) -> RawFd;

    /// Take the error the port's descriptor reports when epoll says `EPOLLERR`, if it keeps
    /// one apart from reads (a socket's `SO_ERROR`). A tap reports its errors on `recv`.
    fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        Ok(None)
    }

    /// Look after the port's interface at `now` (nanoseconds of the clock the datapath's steps
    /// are given): say when an outage begins, attach the port again when its interface is
    /// back, and say so. Called after every step; cheap unless it is time to look. A tap has
    /// nothing to look after: its device lives and dies with its descriptor.
    fn tend(&mut self, _now: u64) -> Option<PortEvent> {
        None
    }

    /// When [`Port::tend`] should run next even if no frame moves (while an outage lasts, so
    /// that an idle event loop wakes to look for the interface), or `None`.
    fn next_tend(&self) -> Option<u64> {
        None
    }

    /// The port's counters.
    fn counters(&self) -> PortCounters;
}

/// What [`Port::tend`] found out about a port's interface. Each outage gives one `Lost` when
/// it begins and one `Back` when it ends; one `Stuck` at most in between.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PortEvent {
    /// The interface went down or away (why): frames sent to the port fail, counted as
    /// `tx_error`, until it is back.
    Lost(String),
    /// The interface is back, up at index `ifindex`.
    Back {
        /// Its index.
        ifindex: u32,
        /// The port was bound to it again: a new interface of the same name (or the old one,
        /// back from another namespace), not the old one up again.
        rebound: bool,
        /// The port has a new descriptor ([`Port::fd`]): wait on that one from now on. (The
        /// old one is closed, which took it out of any epoll set.)
        reopened: bool,
    },
    /// The interface is back but the port cannot attach to it yet (why); tried again.
    Stuck(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn vnet_header_round_trip() {
        let h = VnetHdr {
            flags: 1,
            gso_type: 1,
            hdr_len: 66,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        };
        let mut b = [0u8; 12];
        h.write(&mut b);
        assert_eq!(VnetHdr::read(&b), Some(h));
        assert!(h.is_gso());
        assert_eq!(VnetHdr::read(&b[..9]), None);
        assert!(!VnetHdr::default().is_gso());
        assert!(
            !VnetHdr {
                gso_type: VnetHdr::GSO_ECN,
                gso_size: 1448,
                ..VnetHdr::default()
            }
            .is_gso()
        );
    }
}
