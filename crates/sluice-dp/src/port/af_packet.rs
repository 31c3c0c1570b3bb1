//! The AF_PACKET port: an existing interface, read through a TPACKET_V3 receive ring and
//! written with `send(2)`, with a virtio-net header both ways.
//!
//! Design. The socket is `AF_PACKET`/`SOCK_RAW`, non-blocking, created with protocol 0 (it
//! receives nothing) so that no frame of another interface lands in the ring before `bind`
//! attaches it to the interface with `ETH_P_ALL`. Before the ring exists it asks for
//! `PACKET_VNET_HDR` (GSO super-frames and partial checksums pass whole, both ways), TPACKET_V3
//! and `PACKET_IGNORE_OUTGOING` (the port does not read back its own transmissions; frames
//! marked outgoing are skipped as well, for kernels without the option). It joins the
//! interface in promiscuous mode by default (a switch port sees every frame; the membership
//! ends with the socket).
//!
//! The receive ring: `block_count` blocks of `block_size` bytes, mapped shared. The kernel
//! fills one block at a time with frames and hands it over (`TP_STATUS_USER`) when it is full
//! or when the retire timeout expires; `recv` walks the handed-over block frame by frame,
//! copying one frame per call (header first), and gives the block back (`TP_STATUS_KERNEL`)
//! once its last frame is copied. Defaults ([`RingConfig::default`]): 64 blocks of 256 KiB
//! (16 MiB, about 13 ms of 10 Gbit/s; each block holds several 64 KiB super-frames) and a 1 ms
//! retire timeout, the shortest the kernel offers: under light load a frame waits up to that
//! long for its block to be handed over; under load blocks fill and leave sooner. Frames longer
//! than a block are truncated by the kernel: they cannot be forwarded and are skipped, counted
//! (with the kernel's own drops from `PACKET_STATISTICS`, read when counters are asked for) in
//! `kernel_drops`. The kernel moves a VLAN tag out of the frame into the ring's metadata; `recv`
//! puts it back, so frames leave as they came.
//!
//! Outages. An interface that goes down or away does not end the port. A failed send or the
//! socket's pending error (`ENETDOWN`, `ENXIO`) begins an outage, and so does a look at the
//! interface that finds it down, gone, or at an index the socket is not bound to ([`Port::tend`]
//! looks every [`CHECK_NS`] when the daemon steps anyway). [`Port::tend`] says an outage once
//! when it begins; while it lasts it looks for the interface by name every [`LOOK_AGAIN_NS`] (of
//! the time the daemon passes in; the lookup is an `ioctl` on the port's socket, so it asks the
//! socket's namespace, whichever thread tends it), and once the interface is up the port
//! attaches to it and says so. The same interface up again needs nothing: the kernel takes its
//! socket back. A new interface under the name (another index, or the old one back from
//! another namespace) needs the socket bound to it again, promiscuous again (the kernel ends a
//! deleted interface's memberships); the ring, its options and its unread frames stay. A socket
//! in a fanout group cannot be bound again: it is re-created, with a ring of the same geometry
//! and the same options, in the namespace the port was opened in, once its old ring holds
//! nothing to read, on a new descriptor, in a group of the new interface (`regroups` says
//! which).
//!
//! `unsafe` is confined to: the system calls (socket, setsockopt, getsockopt, getsockname,
//! ioctl, mmap, munmap, bind, send), each in a small helper; and `ring::RingMem`, which owns
//! the mapping and offers bounds-checked reads, a copy, and the atomic block status word. The
//! protocol that makes reading sound (the kernel does not write a block it has handed over
//! until it is given back) lives in `Ring::next`, the only user of that memory. The ring walk
//! is tested over heap memory laid out by hand (including corrupt offsets) and over real
//! kernel rings.

use std::cell::Cell;
use std::fs::File;
use std::io;
use std::mem::{offset_of, size_of};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::sync::atomic::Ordering;

use super::{Port, PortCounters, PortEvent, VNET_HDR_LEN, VnetHdr};
use crate::netns;

/// Geometry and behaviour of an [`AfPacket`] port's receive ring.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RingConfig {
    /// Bytes per block: a power of two, at least a page. Frames longer than a block (minus
    /// about 100 bytes of ring headers) are truncated by the kernel and skipped.
    pub block_size: u32,
    /// Number of blocks.
    pub block_count: u32,
    /// Milliseconds after which the kernel hands over a block that is not full (at least 1).
    pub retire_timeout_ms: u32,
    /// Put the interface in promiscuous mode while the port is open.
    pub promiscuous: bool,
    /// Join fanout group `id` (`PACKET_FANOUT_HASH`): sockets of one group on one interface
    /// share its frames, each flow (by its hash) going to one socket. Per-core engines open
    /// one socket each in a group, which [`AfPacket::open_group`] opens: a group of its own.
    /// (Any socket of the namespace may join a group by its id: a fixed id may be another
    /// process's group, joined on the same interface, refused on another.)
    pub fanout: Option<u16>,
}

impl Default for RingConfig {
    fn default() -> RingConfig {
        RingConfig {
            block_size: 256 << 10,
            block_count: 64,
            retire_timeout_ms: 1,
            promiscuous: true,
            fanout: None,
        }
    }
}

/// Largest ring accepted (1 GiB).
pub const RING_MAX_BYTES: u64 = 1 << 30;

/// `tp_frame_size` given to the kernel. TPACKET_V3 packs frames of any length into blocks; the
/// frame size only has to divide a block and hold a frame's headers.
const FRAME_SIZE: u32 = 2048;

impl RingConfig {
    fn check(&self) -> Result<(), String> {
        let page = page_size();
        if !self.block_size.is_power_of_two()
            || (self.block_size as usize) < page.max(FRAME_SIZE as usize)
        {
            return Err(format!(
                "block size {} is not a power of two of at least {page} bytes",
                self.block_size
            ));
        }
        if self.block_count == 0 {
            return Err("block count is 0".into());
        }
        if self.block_size as u64 * self.block_count as u64 > RING_MAX_BYTES {
            return Err(format!(
                "{} blocks of {} bytes exceed the {RING_MAX_BYTES}-byte limit",
                self.block_count, self.block_size
            ));
        }
        if self.retire_timeout_ms == 0 {
            return Err("retire timeout is 0 ms (at least 1 ms)".into());
        }
        Ok(())
    }
}

fn page_size() -> usize {
    // SAFETY: sysconf reads a system constant; it takes no pointer.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 { n as usize } else { 4096 }
}

/// Offsets in the ring, from the kernel's structures (`linux/if_packet.h`).
mod layout {
    use super::*;

    const BLOCK_HDR: usize = offset_of!(libc::tpacket_block_desc, hdr);
    /// `block_status` of a block descriptor.
    pub const BLOCK_STATUS: usize = BLOCK_HDR + offset_of!(libc::tpacket_hdr_v1, block_status);
    /// `num_pkts` of a block descriptor.
    pub const BLOCK_NUM_PKTS: usize = BLOCK_HDR + offset_of!(libc::tpacket_hdr_v1, num_pkts);
    /// `offset_to_first_pkt` of a block descriptor.
    pub const BLOCK_FIRST: usize =
        BLOCK_HDR + offset_of!(libc::tpacket_hdr_v1, offset_to_first_pkt);
    /// Bytes of block descriptor.
    pub const BLOCK_DESC_LEN: usize = size_of::<libc::tpacket_block_desc>();

    /// `tp_next_offset` of a frame header.
    pub const NEXT: usize = offset_of!(libc::tpacket3_hdr, tp_next_offset);
    /// `tp_snaplen`.
    pub const SNAPLEN: usize = offset_of!(libc::tpacket3_hdr, tp_snaplen);
    /// `tp_len`.
    pub const LEN: usize = offset_of!(libc::tpacket3_hdr, tp_len);
    /// `tp_status`.
    pub const STATUS: usize = offset_of!(libc::tpacket3_hdr, tp_status);
    /// `tp_mac`.
    pub const MAC: usize = offset_of!(libc::tpacket3_hdr, tp_mac);
    const HV1: usize = offset_of!(libc::tpacket3_hdr, hv1);
    /// `hv1.tp_vlan_tci`.
    pub const VLAN_TCI: usize = HV1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tci);
    /// `hv1.tp_vlan_tpid`.
    pub const VLAN_TPID: usize = HV1 + offset_of!(libc::tpacket_hdr_variant1, tp_vlan_tpid);
    /// The `sockaddr_ll` after the frame header (`TPACKET_ALIGN(sizeof(tpacket3_hdr))`).
    pub const SLL: usize = (size_of::<libc::tpacket3_hdr>() + 15) & !15;
    /// `sll_pkttype` of that address.
    pub const PKTTYPE: usize = SLL + offset_of!(libc::sockaddr_ll, sll_pkttype);
    /// Frame headers end here; the virtio-net header and the frame come after.
    pub const FRAME_HDRS_LEN: usize = SLL + size_of::<libc::sockaddr_ll>();
}

/// The memory of a receive ring, and the only code that touches it.
mod ring {
    use std::ptr::NonNull;
    use std::sync::atomic::AtomicU32;

    /// Memory of `len` bytes at `ptr`, owned. Every access is bounds-checked.
    pub struct RingMem {
        ptr: NonNull<u8>,
        len: usize,
        /// Mapped from a packet socket (unmapped on drop), or else heap memory of a test.
        mapped: bool,
        /// The heap memory of a test ring.
        #[cfg(test)]
        _heap: Vec<u64>,
    }

    // SAFETY: a RingMem owns its memory exclusively (the mapping, or the heap buffer) and hands
    // out no pointer into it; nothing in it is tied to the thread that created it, so moving it
    // to another thread moves that ownership whole. (It is not Sync: it has no need to be.)
    unsafe impl Send for RingMem {}

    impl RingMem {
        /// Map `len` bytes of the ring of packet socket `fd`.
        pub fn map(fd: libc::c_int, len: usize) -> std::io::Result<RingMem> {
            // SAFETY: a fresh shared mapping chosen by the kernel (null hint, no MAP_FIXED), so
            // it replaces nothing; `fd` is an open packet socket with a receive ring of `len`
            // bytes. The result is checked before use.
            let p = unsafe {
                libc::mmap(
                    std::ptr::null_mut(),
                    len,
                    libc::PROT_READ | libc::PROT_WRITE,
                    libc::MAP_SHARED,
                    fd,
                    0,
                )
            };
            if p == libc::MAP_FAILED {
                return Err(std::io::Error::last_os_error());
            }
            let ptr = NonNull::new(p.cast::<u8>())
                .ok_or_else(|| std::io::Error::other("mmap returned null"))?;
            Ok(RingMem {
                ptr,
                len,
                mapped: true,
                #[cfg(test)]
                _heap: Vec::new(),
            })
        }

        /// Wrap heap memory (tests lay out rings by hand).
        #[cfg(test)]
        pub fn heap(mut words: Vec<u64>) -> RingMem {
            let len = words.len() * 8;
            let ptr = NonNull::new(words.as_mut_ptr().cast::<u8>()).unwrap_or(NonNull::dangling());
            RingMem {
                ptr,
                len,
                mapped: false,
                _heap: words,
            }
        }

        /// Bytes of memory.
        pub fn len(&self) -> usize {
            self.len
        }

        fn in_bounds(&self, off: usize, n: usize) -> bool {
            off.checked_add(n).is_some_and(|end| end <= self.len)
        }

        /// The `N` bytes at `off`, or `None` outside the memory.
        pub fn read<const N: usize>(&self, off: usize) -> Option<[u8; N]> {
            if !self.in_bounds(off, N) {
                return None;
            }
            // SAFETY: `off..off + N` lies inside the memory (checked above), which is valid for
            // reads while `self` lives; read_unaligned needs no alignment, and any bytes are a
            // valid [u8; N]. Callers read only blocks the kernel has handed over (see
            // `Ring::next`), which it does not write until they are given back.
            Some(unsafe {
                self.ptr
                    .as_ptr()
                    .add(off)
                    .cast::<[u8; N]>()
                    .read_unaligned()
            })
        }

        /// Copy `dst.len()` bytes from `off` into `dst`; `None` (nothing copied) outside.
        pub fn copy_to(&self, off: usize, dst: &mut [u8]) -> Option<()> {
            if !self.in_bounds(off, dst.len()) {
                return None;
            }
            // SAFETY: the source range lies inside the memory (checked above); `dst` is a
            // distinct, exclusively borrowed Rust slice of exactly that length, so the ranges
            // cannot overlap. Same ownership protocol as `read`.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    self.ptr.as_ptr().add(off),
                    dst.as_mut_ptr(),
                    dst.len(),
                )
            };
            Some(())
        }

        /// The 32-bit word at `off` as an atomic (the block status word the kernel and this
        /// process hand blocks over with); `None` outside or misaligned.
        pub fn atomic_u32(&self, off: usize) -> Option<&AtomicU32> {
            if !self.in_bounds(off, 4) || (self.ptr.as_ptr() as usize + off) % 4 != 0 {
                return None;
            }
            // SAFETY: in bounds and 4-byte aligned (checked above), valid for the lifetime of
            // the returned reference (tied to `&self`). This process accesses the word only
            // through this atomic; the kernel accesses it with its own barriers
            // (smp_wmb/smp_rmb around plain stores and loads), as the ring ABI prescribes.
            Some(unsafe { AtomicU32::from_ptr(self.ptr.as_ptr().add(off).cast::<u32>()) })
        }

        /// Write `bytes` at `off` (tests play the kernel).
        #[cfg(test)]
        pub fn poke(&self, off: usize, bytes: &[u8]) {
            assert!(self.in_bounds(off, bytes.len()));
            // SAFETY: in bounds (asserted); the memory is owned by `self` and no Rust reference
            // to these bytes exists (all access goes through raw pointers), so the write races
            // with nothing: tests are single-threaded over their ring.
            unsafe {
                std::ptr::copy_nonoverlapping(
                    bytes.as_ptr(),
                    self.ptr.as_ptr().add(off),
                    bytes.len(),
                )
            };
        }
    }

    impl Drop for RingMem {
        fn drop(&mut self) {
            if self.mapped {
                // SAFETY: `ptr`/`len` are exactly the mapping made in `map`, unmapped only here,
                // once; no reference into it outlives `self` (all accessors borrow `self`).
                unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
            }
        }
    }
}

use ring::RingMem;

/// Where the walk is inside a handed-over block.
#[derive(Clone, Copy, Debug)]
struct Cursor {
    /// Frames left in the block.
    remaining: u32,
    /// Offset of the next frame from the block's start.
    offset: usize,
}

/// What one step of the ring walk found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Next {
    /// Nothing handed over.
    Empty,
    /// A frame of this many bytes (header included) is in the buffer.
    Frame(usize),
    /// A frame this port sent itself: skipped.
    Outgoing,
    /// A frame truncated by the kernel (longer than a block): skipped.
    Truncated,
    /// A frame of this many bytes that the buffer cannot hold: skipped.
    TooBig(usize),
}

/// The receive ring and the walk over it.
struct Ring {
    mem: RingMem,
    block_size: usize,
    block_count: usize,
    /// The block the walk is in or waits for.
    block: usize,
    cursor: Option<Cursor>,
}

const ETH_ADDRS: usize = 12;
const VLAN_TAG_LEN: usize = 4;

impl Ring {
    fn new(mem: RingMem, block_size: usize, block_count: usize) -> Ring {
        debug_assert!(mem.len() >= block_size * block_count);
        Ring {
            mem,
            block_size,
            block_count,
            block: 0,
            cursor: None,
        }
    }

    fn base(&self) -> usize {
        self.block * self.block_size
    }

    fn u32_at(&self, off: usize) -> Option<u32> {
        self.mem.read::<4>(off).map(u32::from_ne_bytes)
    }

    fn u16_at(&self, off: usize) -> Option<u16> {
        self.mem.read::<2>(off).map(u16::from_ne_bytes)
    }

    /// Whether a block is handed over and not all given back yet: frames to read. (The kernel
    /// hands blocks over in order, so the current block tells.)
    fn holds_frames(&self) -> bool {
        self.cursor.is_some()
            || self
                .mem
                .atomic_u32(self.base() + layout::BLOCK_STATUS)
                .is_some_and(|s| s.load(Ordering::Acquire) & libc::TP_STATUS_USER != 0)
    }

    /// Give the current block back to the kernel and move to the next.
    fn release(&mut self) {
        if let Some(status) = self.mem.atomic_u32(self.base() + layout::BLOCK_STATUS) {
            // Release: our reads of the block happen before the kernel may refill it.
            status.store(libc::TP_STATUS_KERNEL, Ordering::Release);
        }
        self.block = (self.block + 1) % self.block_count;
        self.cursor = None;
    }

    /// Give the block back and report corruption.
    fn corrupt(&mut self, what: &str) -> Result<Next, String> {
        let msg = format!("corrupt ring: block {}: {what}; block skipped", self.block);
        self.release();
        Err(msg)
    }

    /// One step: the next frame of the handed-over block, copied into `buf` (virtio-net
    /// header, then the frame), or why there is none. An `Err` reports a block whose offsets
    /// make no sense; that block is given back and skipped.
    fn next(&mut self, buf: &mut [u8]) -> Result<Next, String> {
        loop {
            let base = self.base();
            let cursor = match self.cursor {
                Some(c) => c,
                None => {
                    let Some(status) = self.mem.atomic_u32(base + layout::BLOCK_STATUS) else {
                        return self.corrupt("status word out of bounds");
                    };
                    // Acquire: the kernel's writes to the block happen before we read it.
                    if status.load(Ordering::Acquire) & libc::TP_STATUS_USER == 0 {
                        return Ok(Next::Empty);
                    }
                    let (Some(remaining), Some(first)) = (
                        self.u32_at(base + layout::BLOCK_NUM_PKTS),
                        self.u32_at(base + layout::BLOCK_FIRST),
                    ) else {
                        return self.corrupt("descriptor out of bounds");
                    };
                    let c = Cursor {
                        remaining,
                        offset: first as usize,
                    };
                    self.cursor = Some(c);
                    c
                }
            };
            if cursor.remaining == 0 {
                self.release();
                continue;
            }
            if cursor.offset < layout::BLOCK_DESC_LEN
                || cursor.offset + layout::FRAME_HDRS_LEN > self.block_size
            {
                return self.corrupt(&format!(
                    "frame at offset {} outside the block",
                    cursor.offset
                ));
            }
            let frame = base + cursor.offset;
            let fields = (
                self.u32_at(frame + layout::NEXT),
                self.u32_at(frame + layout::SNAPLEN),
                self.u32_at(frame + layout::LEN),
                self.u32_at(frame + layout::STATUS),
                self.u16_at(frame + layout::MAC),
                self.mem.read::<1>(frame + layout::PKTTYPE),
            );
            let (Some(next), Some(snaplen), Some(len), Some(status), Some(mac), Some([pkttype])) =
                fields
            else {
                return self.corrupt("frame header out of bounds");
            };
            let (mac, snaplen) = (mac as usize, snaplen as usize);
            if mac < layout::FRAME_HDRS_LEN + VNET_HDR_LEN
                || cursor.offset + mac + snaplen > self.block_size
            {
                return self.corrupt(&format!(
                    "frame at offset {}: its {snaplen} bytes at {mac} are not inside the block after its headers",
                    cursor.offset
                ));
            }
            let remaining = cursor.remaining - 1;
            if remaining > 0 && (next as usize) < layout::FRAME_HDRS_LEN {
                return self.corrupt(&format!(
                    "frame at offset {} has next offset {next}",
                    cursor.offset
                ));
            }

            let outcome = if pkttype == libc::PACKET_OUTGOING {
                Next::Outgoing
            } else if snaplen < len as usize {
                Next::Truncated
            } else {
                self.copy_frame(frame, mac, snaplen, status, buf)
            };

            // The frame is copied: step past it, and give the block back after its last.
            self.cursor = Some(Cursor {
                remaining,
                offset: cursor.offset + next as usize,
            });
            if remaining == 0 {
                self.release();
            }
            return Ok(outcome);
        }
    }

    /// Copy the frame at `frame` (data at `frame + mac`, `snaplen` bytes, the virtio-net
    /// header just before) into `buf`, putting back a VLAN tag the kernel moved out.
    fn copy_frame(
        &self,
        frame: usize,
        mac: usize,
        snaplen: usize,
        status: u32,
        buf: &mut [u8],
    ) -> Next {
        let data = frame + mac;
        let vlan = status & libc::TP_STATUS_VLAN_VALID != 0 && snaplen >= ETH_ADDRS;
        if !vlan {
            let total = VNET_HDR_LEN + snaplen;
            let Some(dst) = buf.get_mut(..total) else {
                return Next::TooBig(total);
            };
            return match self.mem.copy_to(data - VNET_HDR_LEN, dst) {
                Some(()) => Next::Frame(total),
                None => Next::TooBig(total), // unreachable: bounds checked by the caller
            };
        }
        let total = VNET_HDR_LEN + snaplen + VLAN_TAG_LEN;
        let Some(dst) = buf.get_mut(..total) else {
            return Next::TooBig(total);
        };
        let tci = self.u32_at(frame + layout::VLAN_TCI).unwrap_or(0) as u16;
        let tpid = match self.u16_at(frame + layout::VLAN_TPID) {
            Some(t) if status & libc::TP_STATUS_VLAN_TPID_VALID != 0 && t != 0 => t,
            _ => 0x8100,
        };
        let (head, rest) = dst.split_at_mut(VNET_HDR_LEN + ETH_ADDRS);
        let (tag, tail) = rest.split_at_mut(VLAN_TAG_LEN);
        if self.mem.copy_to(data - VNET_HDR_LEN, head).is_none()
            || self.mem.copy_to(data + ETH_ADDRS, tail).is_none()
        {
            return Next::TooBig(total);
        }
        tag[..2].copy_from_slice(&tpid.to_be_bytes());
        tag[2..].copy_from_slice(&tci.to_be_bytes());
        // Offsets in the header count from the frame's start: the tag moved them by 4.
        if let Some(mut h) = VnetHdr::read(dst) {
            if h.flags & VNET_F_NEEDS_CSUM != 0 {
                h.csum_start = h.csum_start.saturating_add(VLAN_TAG_LEN as u16);
            }
            if h.hdr_len != 0 {
                h.hdr_len = h.hdr_len.saturating_add(VLAN_TAG_LEN as u16);
            }
            h.write(dst);
        }
        Next::Frame(total)
    }
}

/// `VIRTIO_NET_HDR_F_NEEDS_CSUM`.
const VNET_F_NEEDS_CSUM: u8 = 1;

/// How long a port whose interface is down or gone waits between two looks for it (by its
/// name): 100 ms of the time the daemon passes to [`Port::tend`].
pub const LOOK_AGAIN_NS: u64 = 100_000_000;

/// How long a port whose interface is fine waits between two looks at it. These looks happen
/// only when the daemon steps anyway (an idle daemon is not woken for them); they catch an
/// outage that no error reported (a port that is only read, in busy mode).
pub const CHECK_NS: u64 = 1_000_000_000;

/// Whether an error of a send, or the socket's pending error, says that the interface is down
/// (`ENETDOWN`) or gone (`ENXIO`: the socket's interface was deleted; `ENODEV`).
fn is_outage(e: &io::Error) -> bool {
    matches!(
        e.raw_os_error(),
        Some(libc::ENETDOWN | libc::ENXIO | libc::ENODEV)
    )
}

/// An outage of a port's interface: from its first sign until the port is attached again.
#[derive(Debug)]
struct Outage {
    /// What showed it.
    why: String,
    /// Said ([`PortEvent::Lost`]).
    reported: bool,
    /// An attempt to attach again failed, and that was said ([`PortEvent::Stuck`]).
    stuck: bool,
}

/// What a port knows of its interface, and when it looks at it next: bookkeeping only, tested
/// without an interface (the port's [`Port::tend`] does the looking).
#[derive(Debug, Default)]
struct Watch {
    outage: Option<Outage>,
    /// When to look next (in the time given to `tend`).
    next_look: u64,
}

/// What a look at the interface calls for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Verdict {
    /// Nothing: all is well, or the outage goes on.
    Wait,
    /// An outage began: say so.
    Lost,
    /// The outage ended: the socket is bound to the interface, up at this index.
    Back(u32),
    /// The interface is up at this index, and the socket is not bound to it: attach.
    Attach(u32),
}

impl Watch {
    /// An error from a send or the socket: an outage begins if it says the interface is down
    /// or gone, to be said and looked into at the next `tend`.
    fn note(&mut self, e: &io::Error) {
        if self.outage.is_none() && is_outage(e) {
            self.begin(e.to_string());
            self.next_look = 0;
        }
    }

    fn begin(&mut self, why: String) {
        self.outage = Some(Outage {
            why,
            reported: false,
            stuck: false,
        });
    }

    /// Why the outage began, the first time it is asked for.
    fn report(&mut self) -> Option<String> {
        let outage = self.outage.as_mut().filter(|o| !o.reported)?;
        outage.reported = true;
        Some(outage.why.clone())
    }

    /// Why attaching failed, the first time in an outage.
    fn stuck(&mut self, why: String) -> Option<String> {
        let outage = self.outage.as_mut().filter(|o| !o.stuck)?;
        outage.stuck = true;
        Some(why)
    }

    /// Whether it is time to look, at `now`.
    fn due(&self, now: u64) -> bool {
        now >= self.next_look
    }

    /// When to be tended even if nothing else happens: while an outage lasts.
    fn next_tend(&self) -> Option<u64> {
        self.outage.as_ref().map(|_| self.next_look)
    }

    /// A look at `now` found interface `ifname` `seen` (`(index, up)`; `None`: no such
    /// interface) and the socket bound to interface `bound` (`None`: to none, its interface
    /// gone). What to do.
    fn looked(
        &mut self,
        now: u64,
        ifname: &str,
        seen: Option<(u32, bool)>,
        bound: Option<u32>,
    ) -> Verdict {
        self.next_look = now + LOOK_AGAIN_NS;
        let why = match seen {
            Some((index, true)) if bound == Some(index) => {
                self.next_look = now + CHECK_NS;
                return match self.outage.take() {
                    Some(_) => Verdict::Back(index),
                    None => Verdict::Wait,
                };
            }
            Some((index, true)) => {
                if self.outage.is_some() {
                    return Verdict::Attach(index);
                }
                // Said first, attached at the next look, right after.
                self.begin(format!(
                    "interface `{ifname}` is now index {index}, which the port is not bound to"
                ));
                self.next_look = now;
                return Verdict::Lost;
            }
            Some((_, false)) => format!("interface `{ifname}` is down"),
            None => format!("interface `{ifname}` does not exist"),
        };
        if self.outage.is_some() {
            return Verdict::Wait;
        }
        self.begin(why);
        Verdict::Lost
    }

    /// The port is attached again, at `now`.
    fn attached(&mut self, now: u64) {
        self.outage = None;
        self.next_look = now + CHECK_NS;
    }
}

/// An interface read through a TPACKET_V3 ring and written with `send(2)`, frames carrying a
/// virtio-net header. See the module documentation.
pub struct AfPacket {
    sock: Socket,
    ifname: String,
    config: RingConfig,
    /// The interface index the socket was last bound to.
    ifindex: u32,
    /// The namespace a fanout port was opened in: its socket is re-created there when its
    /// interface comes back (any other port's socket is bound again in place).
    netns: Option<File>,
    watch: Watch,
    counters: PortCounters,
    /// Kernel drops read so far (`PACKET_STATISTICS` resets on each read).
    kernel_drops: Cell<u64>,
    /// Frames skipped: truncated by the kernel, or too big for a buffer.
    truncated: u64,
    warned_too_big: bool,
}

/// A packet socket and its ring: what re-creating a port replaces. Fields drop in order: the
/// ring is unmapped before the socket closes.
struct Socket {
    ring: Ring,
    fd: OwnedFd,
    ignores_outgoing: bool,
}

impl std::fmt::Debug for AfPacket {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AfPacket")
            .field("ifname", &self.ifname)
            .field("ifindex", &self.ifindex)
            .field("fd", &self.sock.fd)
            .field("config", &self.config)
            .field("counters", &self.counters)
            .finish_non_exhaustive()
    }
}

fn setsockopt<T>(fd: RawFd, level: libc::c_int, name: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a live, initialised T borrowed for the call, and the length passed is
    // exactly size_of::<T>(), so the kernel reads only inside it; it keeps no pointer.
    let rc = unsafe {
        libc::setsockopt(
            fd,
            level,
            name,
            (value as *const T).cast(),
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

fn packet_stats(fd: RawFd) -> io::Result<libc::tpacket_stats_v3> {
    let mut st = libc::tpacket_stats_v3 {
        tp_packets: 0,
        tp_drops: 0,
        tp_freeze_q_cnt: 0,
    };
    let mut len = size_of::<libc::tpacket_stats_v3>() as libc::socklen_t;
    // SAFETY: `st` and `len` are live and exclusively borrowed for the call; `len` tells the
    // kernel how many bytes `st` has, and it writes at most that many (and updates `len`).
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_STATISTICS,
            (&mut st as *mut libc::tpacket_stats_v3).cast(),
            &mut len,
        )
    };
    if rc == 0 {
        Ok(st)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// A link-layer address naming interface `ifindex` (0: none), protocol `protocol`.
fn link_addr(ifindex: libc::c_int, protocol: u16) -> libc::sockaddr_ll {
    libc::sockaddr_ll {
        sll_family: libc::AF_PACKET as libc::c_ushort,
        sll_protocol: protocol.to_be(),
        sll_ifindex: ifindex,
        sll_hatype: 0,
        sll_pkttype: 0,
        sll_halen: 0,
        sll_addr: [0; 8],
    }
}

/// Bind packet socket `fd` to interface `ifindex`, every protocol (`ETH_P_ALL`).
fn bind_to(fd: RawFd, ifindex: u32) -> io::Result<()> {
    let addr = link_addr(ifindex as libc::c_int, libc::ETH_P_ALL as u16);
    // SAFETY: `addr` is a live, initialised sockaddr_ll and the length passed is its size;
    // bind only reads it.
    let rc = unsafe {
        libc::bind(
            fd,
            (&addr as *const libc::sockaddr_ll).cast(),
            size_of::<libc::sockaddr_ll>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The interface packet socket `fd` is bound to; `None` once that interface is gone (the
/// kernel unbinds a packet socket from an interface that is deleted or moved to another
/// namespace: its index reads -1).
fn bound_index(fd: RawFd) -> Option<u32> {
    let mut addr = link_addr(0, 0);
    let mut len = size_of::<libc::sockaddr_ll>() as libc::socklen_t;
    // SAFETY: `addr` and `len` are live and exclusively borrowed for the call; `len` tells the
    // kernel how many bytes `addr` has, and it writes at most that many (and updates `len`).
    let rc =
        unsafe { libc::getsockname(fd, (&mut addr as *mut libc::sockaddr_ll).cast(), &mut len) };
    u32::try_from(addr.sll_ifindex)
        .ok()
        .filter(|&i| rc == 0 && i > 0)
}

/// Take socket `fd`'s pending error (`SO_ERROR`, which reading clears). The kernel sets
/// `ENETDOWN` when the interface goes down or away, and the socket's next send fails with it,
/// whenever that is.
fn pending_error(fd: &OwnedFd) -> io::Result<Option<io::Error>> {
    let code = nix::sys::socket::getsockopt(fd, nix::sys::socket::sockopt::SocketError)
        .map_err(io::Error::from)?;
    Ok((code != 0).then(|| io::Error::from_raw_os_error(code)))
}

/// Join (`PACKET_ADD_MEMBERSHIP`) or leave (`PACKET_DROP_MEMBERSHIP`) promiscuous mode on
/// interface `ifindex`.
fn promiscuous(fd: RawFd, ifindex: u32, op: libc::c_int) -> io::Result<()> {
    let mreq = libc::packet_mreq {
        mr_ifindex: ifindex as libc::c_int,
        mr_type: libc::PACKET_MR_PROMISC as libc::c_ushort,
        mr_alen: 0,
        mr_address: [0; 8],
    };
    setsockopt(fd, libc::SOL_PACKET, op, &mreq)
}

/// `struct ifreq` as `SIOCGIFINDEX` and `SIOCGIFFLAGS` use it: a name, and a union in which
/// the kernel answers (an int index, or short flags, at its start).
#[repr(C)]
struct IfReq {
    name: [u8; libc::IFNAMSIZ],
    data: [u8; 24],
}

/// Ask about interface `ifname` (`SIOCGIFINDEX` or `SIOCGIFFLAGS`) through socket `fd`: the
/// kernel looks the name up in the socket's namespace, whichever thread asks. The first four
/// bytes of the answer.
fn ask_interface(fd: RawFd, ifname: &str, request: libc::c_ulong) -> io::Result<[u8; 4]> {
    let mut req = IfReq {
        name: [0; libc::IFNAMSIZ],
        data: [0; 24],
    };
    let name = ifname.as_bytes();
    // Room for the NUL that ends it (a port's name was checked when it was opened).
    let Some(dst) = req
        .name
        .get_mut(..name.len())
        .filter(|_| name.len() < libc::IFNAMSIZ)
    else {
        return Err(io::Error::from(io::ErrorKind::InvalidInput));
    };
    dst.copy_from_slice(name);
    // SAFETY: `req` is live and exclusively borrowed for the call, and at least as large as
    // the kernel's `struct ifreq` (40 bytes on 64-bit Linux): the kernel reads the
    // NUL-terminated name from it, writes its answer into it and nowhere else, and keeps no
    // pointer.
    let rc = unsafe { libc::ioctl(fd, request, &mut req as *mut IfReq) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    let mut first = [0u8; 4];
    first.copy_from_slice(&req.data[..4]);
    Ok(first)
}

/// Where interface `ifname` is in the namespace of socket `fd`: `(index, up)`, or `None`
/// when there is no interface of that name (or it cannot be looked up: the port keeps
/// looking).
fn look_up(fd: RawFd, ifname: &str) -> Option<(u32, bool)> {
    let index = ask_interface(fd, ifname, libc::SIOCGIFINDEX).ok()?;
    let flags = ask_interface(fd, ifname, libc::SIOCGIFFLAGS).ok()?;
    let index = u32::try_from(i32::from_ne_bytes(index)).ok()?;
    let flags = i16::from_ne_bytes([flags[0], flags[1]]);
    Some((index, flags & libc::IFF_UP as i16 != 0))
}

/// How many fanout groups a re-created socket tries ([`regroups`]).
const REGROUPS: u32 = 8;

/// The fanout groups a port's socket, re-created on interface `ifindex`, tries to join, in
/// order: the first the kernel accepts ([`join_fanout`]). Not group `id`: the old sockets of
/// engines that have not re-created theirs yet still hold it, tied to the interface that is
/// gone, and the kernel refuses to join a group on another interface. Nor, when it is refused,
/// the first candidate: an earlier re-creation on an interface of the same index (made with
/// `ip link add ... index N`) holds it the same way. Every engine tries the same candidates in
/// the same order, and a group stays held until the last engine has left it, so all of them
/// meet in one group. Only the low 12 bits of `id` change, never to `id` itself. A candidate
/// that is a group on another interface (another port's, another process's) is refused the
/// same way, and the next one tried.
fn regroups(id: u16, ifindex: u32) -> Vec<u16> {
    (0..REGROUPS)
        .map(|k| id ^ (1 + ((ifindex % 4095 + k) % 4095) as u16))
        .collect()
}

/// Join the first of fanout groups `groups` that the kernel accepts (none given: join none).
/// A group of that id tied to another interface is refused with `EINVAL`: the next is tried.
fn join_fanout(fd: RawFd, groups: &[u16]) -> io::Result<()> {
    let mut refused = None;
    for &group in groups {
        let arg: libc::c_int =
            libc::c_int::from(group) | (libc::PACKET_FANOUT_HASH << 16) as libc::c_int;
        match setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg) {
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => refused = Some(e),
            joined => return joined,
        }
    }
    refused.map_or(Ok(()), Err)
}

/// `PACKET_FANOUT_FLAG_UNIQUEID` (`linux/if_packet.h`, Linux 4.4): with id 0, the kernel
/// creates the group under an id no group of the socket's namespace has.
const FANOUT_FLAG_UNIQUEID: libc::c_int = 0x2000;

/// Create a new fanout group (`PACKET_FANOUT_HASH`) with socket `fd`, under an id the kernel
/// chooses among those no group of the namespace has ([`FANOUT_FLAG_UNIQUEID`]); the id, for
/// other sockets to join the group by.
fn join_new_fanout(fd: RawFd) -> io::Result<u16> {
    let arg: libc::c_int = (libc::PACKET_FANOUT_HASH as libc::c_int | FANOUT_FLAG_UNIQUEID) << 16;
    setsockopt(fd, libc::SOL_PACKET, libc::PACKET_FANOUT, &arg)?;
    let mut got: libc::c_int = 0;
    let mut len = size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: `got` and `len` are live and exclusively borrowed for the call; `len` tells the
    // kernel how many bytes `got` has (an int, what PACKET_FANOUT answers with), and it writes
    // at most that many (and updates `len`).
    let rc = unsafe {
        libc::getsockopt(
            fd,
            libc::SOL_PACKET,
            libc::PACKET_FANOUT,
            (&mut got as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // The answer is the id, then the group's type and flags in the upper half.
    Ok((got & 0xffff) as u16)
}

impl Socket {
    /// A packet socket on interface `ifindex` (named `ifname`, for messages) with `config`'s
    /// ring, in the first fanout group of `groups` that it can join (none given: in none).
    /// See the module documentation.
    fn open(ifname: &str, ifindex: u32, config: &RingConfig, groups: &[u16]) -> io::Result<Socket> {
        let fail = |what: &str, e: io::Error| {
            let hint = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => " (need CAP_NET_RAW)",
                _ => "",
            };
            io::Error::new(
                e.kind(),
                format!("cannot open AF_PACKET port on `{ifname}`: {what}: {e}{hint}"),
            )
        };

        // Protocol 0: nothing is received until `bind` below.
        // SAFETY: socket takes no pointer; the result is checked.
        let raw = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_NONBLOCK | libc::SOCK_CLOEXEC,
                0,
            )
        };
        if raw < 0 {
            return Err(fail("socket", io::Error::last_os_error()));
        }
        // SAFETY: `raw` is a descriptor just returned by socket, owned by nothing else.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };
        let s = fd.as_raw_fd();

        let one: libc::c_int = 1;
        setsockopt(s, libc::SOL_PACKET, libc::PACKET_VNET_HDR, &one)
            .map_err(|e| fail("PACKET_VNET_HDR", e))?;
        let v3 = libc::tpacket_versions::TPACKET_V3 as libc::c_int;
        setsockopt(s, libc::SOL_PACKET, libc::PACKET_VERSION, &v3)
            .map_err(|e| fail("PACKET_VERSION (TPACKET_V3)", e))?;
        let ignores_outgoing =
            match setsockopt(s, libc::SOL_PACKET, libc::PACKET_IGNORE_OUTGOING, &one) {
                Ok(()) => true,
                Err(e) if e.raw_os_error() == Some(libc::ENOPROTOOPT) => false,
                Err(e) => return Err(fail("PACKET_IGNORE_OUTGOING", e)),
            };
        let req = libc::tpacket_req3 {
            tp_block_size: config.block_size,
            tp_block_nr: config.block_count,
            tp_frame_size: FRAME_SIZE,
            tp_frame_nr: config.block_size / FRAME_SIZE * config.block_count,
            tp_retire_blk_tov: config.retire_timeout_ms,
            tp_sizeof_priv: 0,
            tp_feature_req_word: 0,
        };
        setsockopt(s, libc::SOL_PACKET, libc::PACKET_RX_RING, &req)
            .map_err(|e| fail("PACKET_RX_RING", e))?;
        let len = config.block_size as usize * config.block_count as usize;
        let mem =
            RingMem::map(s, len).map_err(|e| fail(&format!("mapping the {len}-byte ring"), e))?;
        let ring = Ring::new(mem, config.block_size as usize, config.block_count as usize);

        if config.promiscuous {
            promiscuous(s, ifindex, libc::PACKET_ADD_MEMBERSHIP)
                .map_err(|e| fail("promiscuous mode", e))?;
        }
        bind_to(s, ifindex).map_err(|e| fail("bind", e))?;
        join_fanout(s, groups).map_err(|e| fail("PACKET_FANOUT", e))?;
        Ok(Socket {
            ring,
            fd,
            ignores_outgoing,
        })
    }
}

impl AfPacket {
    /// Open interface `ifname` (in the calling thread's namespace) with the default ring.
    pub fn open(ifname: &str) -> io::Result<AfPacket> {
        AfPacket::open_with(ifname, RingConfig::default())
    }

    /// Open interface `ifname` with ring `config`. Errors name the interface, the step that
    /// failed and why; a missing interface is "interface `eth9` does not exist".
    pub fn open_with(ifname: &str, config: RingConfig) -> io::Result<AfPacket> {
        let ifindex = AfPacket::check(ifname, &config)?;
        let sock = Socket::open(ifname, ifindex, &config, config.fanout.as_slice())?;
        Ok(AfPacket::with_socket(sock, ifname, config, ifindex))
    }

    /// Open `sockets` sockets on interface `ifname` with ring `config`, in one fanout group
    /// (`PACKET_FANOUT_HASH`) of their own: per-core engines. The group is new, under an id
    /// the kernel chooses among those no group of the namespace has, so that no other
    /// process's socket is in it (a group's id is a name every process shares: any socket on
    /// the interface may join a group by its id). `config.fanout` is not used: each port's
    /// [`AfPacket::config`] holds the group's id. Errors as [`AfPacket::open_with`]'s.
    pub fn open_group(
        ifname: &str,
        config: RingConfig,
        sockets: usize,
    ) -> io::Result<Vec<AfPacket>> {
        let ifindex = AfPacket::check(ifname, &config)?;
        let mut ports = Vec::with_capacity(sockets);
        let mut config = RingConfig {
            fanout: None,
            ..config
        };
        // The first socket creates the group, the others join it by its id.
        for _ in 0..sockets {
            let sock = Socket::open(ifname, ifindex, &config, config.fanout.as_slice())?;
            if config.fanout.is_none() {
                let id = join_new_fanout(sock.fd.as_raw_fd()).map_err(|e| {
                    io::Error::new(
                        e.kind(),
                        format!(
                            "cannot open AF_PACKET port on `{ifname}`: PACKET_FANOUT (a new \
                             group): {e}"
                        ),
                    )
                })?;
                config.fanout = Some(id);
            }
            ports.push(AfPacket::with_socket(sock, ifname, config, ifindex));
        }
        Ok(ports)
    }

    /// The index of interface `ifname`, once `config` is checked.
    fn check(ifname: &str, config: &RingConfig) -> io::Result<u32> {
        let ifindex = netns::interface_index(ifname).map_err(io::Error::from)?;
        config.check().map_err(|m| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot open AF_PACKET port on `{ifname}`: ring configuration: {m}"),
            )
        })?;
        Ok(ifindex)
    }

    /// A port over `sock`, opened on interface `ifindex` with `config`.
    fn with_socket(sock: Socket, ifname: &str, config: RingConfig, ifindex: u32) -> AfPacket {
        // Without /proc a fanout port is re-created in the namespace of the thread that
        // tends it: the daemon's engines all run in the namespace its ports are opened in.
        let netns = config.fanout.and_then(|_| netns::current_netns().ok());
        AfPacket {
            sock,
            ifname: ifname.to_string(),
            config,
            ifindex,
            netns,
            watch: Watch::default(),
            counters: PortCounters::default(),
            kernel_drops: Cell::new(0),
            truncated: 0,
            warned_too_big: false,
        }
    }

    /// The ring's configuration.
    pub fn config(&self) -> RingConfig {
        self.config
    }

    /// Whether the kernel filters this port's own transmissions (`PACKET_IGNORE_OUTGOING`);
    /// without it they are skipped while reading.
    pub fn ignores_outgoing(&self) -> bool {
        self.sock.ignores_outgoing
    }

    /// The index of the interface the port was last bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// Frames skipped because the kernel truncated them (longer than a block) or they do not
    /// fit a buffer (BIG TCP's super-frames over 64 KiB); included in
    /// [`PortCounters::kernel_drops`].
    pub fn truncated(&self) -> u64 {
        self.truncated
    }

    fn refresh_kernel_drops(&self) {
        if let Ok(st) = packet_stats(self.sock.fd.as_raw_fd()) {
            self.kernel_drops
                .set(self.kernel_drops.get() + st.tp_drops as u64);
        }
    }

    /// Attach the port to interface `ifindex`, its interface's new index. A plain socket is
    /// bound again in place: its ring, options and frames not read yet stay. A fanout socket
    /// cannot be (the kernel refuses to bind a socket in a group), so it is re-created in the
    /// namespace it was opened in and joins a group of the new interface ([`regroups`]); this
    /// waits while the old ring still holds frames to read. `Ok(None)`: not yet; `Ok(Some(
    /// reopened))`: attached, on a new descriptor if `reopened`.
    fn attach(&mut self, ifindex: u32) -> io::Result<Option<bool>> {
        let Some(group) = self.config.fanout else {
            self.rebind(ifindex)?;
            return Ok(Some(false));
        };
        if self.sock.ring.holds_frames() {
            return Ok(None);
        }
        let (ifname, config) = (self.ifname.as_str(), &self.config);
        let groups = regroups(group, ifindex);
        let open = || Socket::open(ifname, ifindex, config, &groups);
        let sock = match &self.netns {
            Some(ns) if !netns::is_current_netns(ns)? => netns::in_netns_of(ns, open)??,
            _ => open()?,
        };
        // What the kernel dropped at the old socket is counted before it goes.
        self.refresh_kernel_drops();
        // The old socket closes here, which takes it out of its group and out of any epoll
        // set (nothing else holds it: its ring is unmapped with it).
        self.sock = sock;
        Ok(Some(true))
    }

    /// Bind the socket to interface `ifindex` again, in promiscuous mode if configured: the
    /// kernel ended the membership of an interface that was deleted, and the membership of one
    /// still there (renamed, its name now another's) ends here.
    fn rebind(&mut self, ifindex: u32) -> io::Result<()> {
        let fd = self.sock.fd.as_raw_fd();
        let fail = |what: &str, e: io::Error| {
            io::Error::new(
                e.kind(),
                format!(
                    "cannot bind AF_PACKET port `{}` to index {ifindex}: {what}: {e}",
                    self.ifname
                ),
            )
        };
        if self.config.promiscuous {
            if let Some(old) = bound_index(fd) {
                let _ = promiscuous(fd, old, libc::PACKET_DROP_MEMBERSHIP);
            }
            promiscuous(fd, ifindex, libc::PACKET_ADD_MEMBERSHIP)
                .map_err(|e| fail("promiscuous mode", e))?;
        }
        bind_to(fd, ifindex).map_err(|e| {
            if self.config.promiscuous {
                // Not left counted twice when the next attempt joins again.
                let _ = promiscuous(fd, ifindex, libc::PACKET_DROP_MEMBERSHIP);
            }
            fail("bind", e)
        })
    }
}

impl Port for AfPacket {
    fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Read the next frame from the ring (virtio-net header included). A frame longer than
    /// `buf` is skipped with an `InvalidInput` error; `buf` should hold
    /// [`crate::buffers::BUF_SIZE`] bytes.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            match self.sock.ring.next(buf) {
                Ok(Next::Empty) => return Ok(None),
                Ok(Next::Frame(n)) => {
                    self.counters.rx_frames += 1;
                    self.counters.rx_bytes += n as u64;
                    return Ok(Some(n));
                }
                Ok(Next::Outgoing) => {}
                Ok(Next::Truncated) => self.truncated += 1,
                Ok(Next::TooBig(n)) => {
                    // Skipped and counted like a truncated frame; said once in the log (BIG TCP
                    // on the interface sends them by the thousand).
                    self.truncated += 1;
                    if !self.warned_too_big {
                        self.warned_too_big = true;
                        tracing::warn!(
                            port = %self.ifname,
                            bytes = n,
                            buffer = buf.len(),
                            "a frame does not fit a buffer: skipped, counted in kernel_drops \
                             (lower the interface's gso_max_size and gro_max_size to 65536)"
                        );
                    }
                }
                Err(msg) => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("AF_PACKET port `{}`: {msg}", self.ifname),
                    ));
                }
            }
        }
    }

    /// Send one frame (virtio-net header first). `WouldBlock` when the socket's send buffer
    /// is full or the interface's queue refused the frame (`ENOBUFS`): send it again later.
    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < VNET_HDR_LEN {
            self.counters.tx_errors += 1;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "AF_PACKET port `{}`: a frame of {} bytes has no virtio-net header",
                    self.ifname,
                    frame.len()
                ),
            ));
        }
        loop {
            // SAFETY: `frame` is a live slice; send reads exactly `frame.len()` bytes from it
            // and keeps no pointer.
            let n = unsafe {
                libc::send(
                    self.sock.fd.as_raw_fd(),
                    frame.as_ptr().cast(),
                    frame.len(),
                    0,
                )
            };
            if n >= 0 {
                self.counters.tx_frames += 1;
                self.counters.tx_bytes += frame.len() as u64;
                return Ok(());
            }
            let e = io::Error::last_os_error();
            match e.raw_os_error() {
                Some(libc::EINTR) => continue,
                Some(libc::EAGAIN) | Some(libc::ENOBUFS) => {
                    return Err(io::Error::new(io::ErrorKind::WouldBlock, e));
                }
                _ => {
                    self.counters.tx_errors += 1;
                    self.watch.note(&e);
                    return Err(io::Error::new(
                        e.kind(),
                        format!(
                            "AF_PACKET port `{}`: send of {} bytes: {e}",
                            self.ifname,
                            frame.len()
                        ),
                    ));
                }
            }
        }
    }

    fn fd(&self) -> RawFd {
        self.sock.fd.as_raw_fd()
    }

    /// The socket's pending error (`SO_ERROR`, which reading clears): `ENETDOWN` once the
    /// interface went down or was deleted, when epoll reports `EPOLLERR`. It begins an outage.
    fn take_error(&mut self) -> io::Result<Option<io::Error>> {
        let e = pending_error(&self.sock.fd)?;
        if let Some(e) = &e {
            self.watch.note(e);
        }
        Ok(e)
    }

    /// Say an outage once it began (an error said so, or a look found the interface down,
    /// gone, or at another index); while it lasts, look for the interface by name every
    /// [`LOOK_AGAIN_NS`] (otherwise every [`CHECK_NS`], when called) and attach to it when it
    /// is up: bound again in place, or re-created for a fanout port.
    fn tend(&mut self, now: u64) -> Option<PortEvent> {
        if let Some(why) = self.watch.report() {
            return Some(PortEvent::Lost(why));
        }
        if !self.watch.due(now) {
            return None;
        }
        let fd = self.sock.fd.as_raw_fd();
        let (seen, bound) = (look_up(fd, &self.ifname), bound_index(fd));
        match self.watch.looked(now, &self.ifname, seen, bound) {
            Verdict::Wait => None,
            Verdict::Lost => self.watch.report().map(PortEvent::Lost),
            Verdict::Back(ifindex) => {
                // The outage's own error, if no one took it: the next send would fail with it.
                let _ = pending_error(&self.sock.fd);
                Some(PortEvent::Back {
                    ifindex,
                    rebound: false,
                    reopened: false,
                })
            }
            Verdict::Attach(ifindex) => match self.attach(ifindex) {
                Ok(Some(reopened)) => {
                    let _ = pending_error(&self.sock.fd);
                    self.ifindex = ifindex;
                    self.watch.attached(now);
                    Some(PortEvent::Back {
                        ifindex,
                        rebound: true,
                        reopened,
                    })
                }
                Ok(None) => None,
                Err(e) => self.watch.stuck(e.to_string()).map(PortEvent::Stuck),
            },
        }
    }

    fn next_tend(&self) -> Option<u64> {
        self.watch.next_tend()
    }

    /// The counters; `kernel_drops` is what `PACKET_STATISTICS` reported so far plus frames
    /// skipped as truncated.
    fn counters(&self) -> PortCounters {
        self.refresh_kernel_drops();
        PortCounters {
            kernel_drops: self.kernel_drops.get() + self.truncated,
            ..self.counters
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BLOCK: usize = 4096;

    /// A frame to lay into a test ring.
    struct TestFrame {
        data: Vec<u8>,
        vnet: [u8; VNET_HDR_LEN],
        len: Option<u32>,
        pkttype: u8,
        vlan: Option<(u16, u16)>,
    }

    fn frame(data: &[u8]) -> TestFrame {
        TestFrame {
            data: data.to_vec(),
            vnet: [0; VNET_HDR_LEN],
            len: None,
            pkttype: 0,
            vlan: None,
        }
    }

    /// Where the kernel puts a frame's data (tpacket_rcv: the network header at the headers
    /// plus 16, 16-byte aligned, plus the virtio-net header; the 14-byte MAC header before it).
    const MAC: usize = ((layout::FRAME_HDRS_LEN + 16 + 15) & !15) + VNET_HDR_LEN - 14;

    /// Lay `frames` into block `b` of `mem` and hand it over.
    fn fill(mem: &RingMem, b: usize, frames: &[TestFrame]) {
        let base = b * BLOCK;
        let first = 48usize;
        let mut off = first;
        for (i, f) in frames.iter().enumerate() {
            let at = base + off;
            let size = (MAC + f.data.len() + 15) & !15;
            let next = if i + 1 < frames.len() { size as u32 } else { 0 };
            mem.poke(at + layout::NEXT, &next.to_ne_bytes());
            mem.poke(at + layout::SNAPLEN, &(f.data.len() as u32).to_ne_bytes());
            mem.poke(
                at + layout::LEN,
                &f.len.unwrap_or(f.data.len() as u32).to_ne_bytes(),
            );
            let mut status = libc::TP_STATUS_USER;
            if let Some((tpid, tci)) = f.vlan {
                status |= libc::TP_STATUS_VLAN_VALID | libc::TP_STATUS_VLAN_TPID_VALID;
                mem.poke(at + layout::VLAN_TCI, &(tci as u32).to_ne_bytes());
                mem.poke(at + layout::VLAN_TPID, &tpid.to_ne_bytes());
            }
            mem.poke(at + layout::STATUS, &status.to_ne_bytes());
            mem.poke(at + layout::MAC, &(MAC as u16).to_ne_bytes());
            mem.poke(at + layout::PKTTYPE, &[f.pkttype]);
            mem.poke(at + MAC - VNET_HDR_LEN, &f.vnet);
            mem.poke(at + MAC, &f.data);
            off += size;
        }
        mem.poke(
            base + layout::BLOCK_NUM_PKTS,
            &(frames.len() as u32).to_ne_bytes(),
        );
        mem.poke(base + layout::BLOCK_FIRST, &(first as u32).to_ne_bytes());
        mem.poke(
            base + layout::BLOCK_STATUS,
            &libc::TP_STATUS_USER.to_ne_bytes(),
        );
    }

    fn ring(blocks: usize) -> Ring {
        Ring::new(RingMem::heap(vec![0u64; blocks * BLOCK / 8]), BLOCK, blocks)
    }

    fn status(r: &Ring, b: usize) -> u32 {
        r.mem
            .atomic_u32(b * BLOCK + layout::BLOCK_STATUS)
            .map(|s| s.load(Ordering::Acquire))
            .unwrap_or(99)
    }

    #[test]
    fn layout_matches_the_kernel() {
        assert_eq!(layout::BLOCK_STATUS, 8);
        assert_eq!(layout::BLOCK_NUM_PKTS, 12);
        assert_eq!(layout::BLOCK_FIRST, 16);
        assert_eq!(layout::MAC, 24);
        assert_eq!(layout::SLL, 48);
        assert_eq!(layout::PKTTYPE, 58);
        assert_eq!(layout::FRAME_HDRS_LEN, libc::TPACKET3_HDRLEN);
    }

    #[test]
    fn walks_blocks_frame_by_frame_and_gives_them_back() {
        let mut r = ring(2);
        let mut buf = vec![0u8; 2048];
        assert_eq!(r.next(&mut buf), Ok(Next::Empty));

        let mut a = frame(&[0xaa; 60]);
        a.vnet[0] = 1;
        fill(&r.mem, 0, &[a, frame(&[0xbb; 100])]);
        fill(&r.mem, 1, &[frame(&[0xcc; 70])]);
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(70)));
        assert_eq!(buf[0], 1);
        assert!(buf[VNET_HDR_LEN..70].iter().all(|&b| b == 0xaa));
        assert_eq!(
            status(&r, 0),
            libc::TP_STATUS_USER,
            "block still being read"
        );
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(110)));
        assert!(buf[VNET_HDR_LEN..110].iter().all(|&b| b == 0xbb));
        assert_eq!(
            status(&r, 0),
            libc::TP_STATUS_KERNEL,
            "given back after its last frame"
        );
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(80)));
        assert_eq!(status(&r, 1), libc::TP_STATUS_KERNEL);
        // Wrapped around to block 0, which the kernel has not handed over again.
        assert_eq!(r.block, 0);
        assert_eq!(r.next(&mut buf), Ok(Next::Empty));
        fill(&r.mem, 0, &[frame(&[0xdd; 64])]);
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(74)));
        assert_eq!(r.next(&mut buf), Ok(Next::Empty));
    }

    #[test]
    fn empty_blocks_are_given_back() {
        let mut r = ring(2);
        fill(&r.mem, 0, &[]);
        fill(&r.mem, 1, &[frame(&[1; 60])]);
        let mut buf = vec![0u8; 2048];
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(70)));
        assert_eq!(status(&r, 0), libc::TP_STATUS_KERNEL);
    }

    #[test]
    fn skips_outgoing_truncated_and_oversized_frames() {
        let mut r = ring(1);
        let mut out = frame(&[1; 60]);
        out.pkttype = libc::PACKET_OUTGOING;
        let mut cut = frame(&[2; 60]);
        cut.len = Some(9000);
        fill(&r.mem, 0, &[out, cut, frame(&[3; 600]), frame(&[4; 60])]);
        let mut small = vec![0u8; 100];
        assert_eq!(r.next(&mut small), Ok(Next::Outgoing));
        assert_eq!(r.next(&mut small), Ok(Next::Truncated));
        assert_eq!(r.next(&mut small), Ok(Next::TooBig(610)));
        assert_eq!(r.next(&mut small), Ok(Next::Frame(70)));
        assert_eq!(small[VNET_HDR_LEN], 4);
        assert_eq!(status(&r, 0), libc::TP_STATUS_KERNEL);
    }

    #[test]
    fn puts_vlan_tags_back() {
        let mut r = ring(1);
        let mut data = vec![0u8; 60];
        data[..6].copy_from_slice(&[0xff; 6]);
        data[6..12].copy_from_slice(&[2, 0, 0, 0, 0, 1]);
        data[12..14].copy_from_slice(&[0x08, 0x00]);
        let mut f = frame(&data);
        f.vlan = Some((0x88a8, 0x0123));
        VnetHdr {
            flags: 1,
            gso_type: 1,
            hdr_len: 54,
            gso_size: 1448,
            csum_start: 34,
            csum_offset: 16,
        }
        .write(&mut f.vnet);
        fill(&r.mem, 0, &[f]);
        let mut buf = vec![0u8; 2048];
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(74)));
        let h = VnetHdr::read(&buf).unwrap_or_default();
        assert_eq!((h.csum_start, h.hdr_len, h.gso_size), (38, 58, 1448));
        let eth = &buf[VNET_HDR_LEN..74];
        assert_eq!(&eth[..12], &data[..12]);
        assert_eq!(&eth[12..16], &[0x88, 0xa8, 0x01, 0x23]);
        assert_eq!(&eth[16..], &data[12..]);
        // Room for the frame but not the tag: too big, not a silent cut.
        fill(
            &r.mem,
            0,
            &[TestFrame {
                vlan: Some((0, 7)),
                ..frame(&data)
            }],
        );
        let mut tight = vec![0u8; 70];
        assert_eq!(r.next(&mut tight), Ok(Next::TooBig(74)));
    }

    #[test]
    fn corrupt_offsets_are_errors_and_the_block_is_skipped() {
        let mut buf = vec![0u8; 2048];
        // First frame outside the block.
        let mut r = ring(2);
        fill(&r.mem, 0, &[frame(&[1; 60])]);
        r.mem
            .poke(layout::BLOCK_FIRST, &(BLOCK as u32 - 8).to_ne_bytes());
        fill(&r.mem, 1, &[frame(&[2; 60])]);
        let e = r.next(&mut buf).unwrap_err();
        assert!(e.contains("outside the block"), "{e}");
        assert_eq!(status(&r, 0), libc::TP_STATUS_KERNEL);
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(70)));
        assert_eq!(buf[VNET_HDR_LEN], 2);

        // Data running past the block.
        let mut r = ring(1);
        fill(&r.mem, 0, &[frame(&[1; 60])]);
        r.mem
            .poke(48 + layout::SNAPLEN, &(BLOCK as u32).to_ne_bytes());
        assert!(
            r.next(&mut buf)
                .unwrap_err()
                .contains("not inside the block")
        );

        // Data offset inside the headers.
        let mut r = ring(1);
        fill(&r.mem, 0, &[frame(&[1; 60])]);
        r.mem.poke(48 + layout::MAC, &4u16.to_ne_bytes());
        assert!(
            r.next(&mut buf)
                .unwrap_err()
                .contains("not inside the block")
        );

        // A next offset that would loop on itself.
        let mut r = ring(1);
        fill(&r.mem, 0, &[frame(&[1; 60]), frame(&[2; 60])]);
        r.mem.poke(48 + layout::NEXT, &0u32.to_ne_bytes());
        assert!(r.next(&mut buf).unwrap_err().contains("next offset 0"));
        assert_eq!(r.next(&mut buf), Ok(Next::Empty));
    }

    #[test]
    fn memory_accessors_check_bounds() {
        let mem = RingMem::heap(vec![0u64; 2]);
        assert_eq!(mem.read::<4>(12), Some([0; 4]));
        assert_eq!(mem.read::<4>(13), None);
        assert_eq!(mem.read::<1>(usize::MAX), None);
        assert!(mem.atomic_u32(12).is_some());
        assert!(mem.atomic_u32(13).is_none());
        assert!(mem.atomic_u32(16).is_none());
        let mut dst = [0u8; 8];
        assert_eq!(mem.copy_to(8, &mut dst), Some(()));
        assert_eq!(mem.copy_to(9, &mut dst), None);
    }

    #[test]
    fn ring_configurations_are_checked() {
        assert!(RingConfig::default().check().is_ok());
        let bad = |c: RingConfig| c.check().unwrap_err();
        let d = RingConfig::default();
        assert!(
            bad(RingConfig {
                block_size: 3 << 12,
                ..d
            })
            .contains("power of two")
        );
        assert!(
            bad(RingConfig {
                block_size: 1024,
                ..d
            })
            .contains("power of two")
        );
        assert!(
            bad(RingConfig {
                block_count: 0,
                ..d
            })
            .contains("count")
        );
        assert!(
            bad(RingConfig {
                block_count: 1 << 20,
                ..d
            })
            .contains("limit")
        );
        assert!(
            bad(RingConfig {
                retire_timeout_ms: 0,
                ..d
            })
            .contains("timeout")
        );
    }

    #[test]
    fn a_ring_with_a_block_handed_over_holds_frames() {
        let mut r = ring(2);
        assert!(!r.holds_frames());
        fill(&r.mem, 0, &[frame(&[1; 60]), frame(&[2; 60])]);
        assert!(r.holds_frames());
        let mut buf = vec![0u8; 2048];
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(70)));
        assert!(r.holds_frames(), "a frame of the block is left");
        assert_eq!(r.next(&mut buf), Ok(Next::Frame(70)));
        assert!(!r.holds_frames(), "the block is given back");
    }

    fn os(code: i32) -> io::Error {
        io::Error::from_raw_os_error(code)
    }

    /// One outage, said when it begins and when it ends; looks at most every
    /// LOOK_AGAIN_NS of the time given meanwhile; the next outage said again.
    #[test]
    fn an_outage_is_said_once_when_it_begins_and_once_when_it_ends() {
        let mut w = Watch::default();
        assert_eq!(w.next_tend(), None, "a port that is fine wakes no one");
        for code in [libc::EAGAIN, libc::EMSGSIZE, libc::ENOBUFS, libc::EINVAL] {
            w.note(&os(code));
        }
        assert_eq!(w.report(), None, "errors that say nothing of the interface");

        // The interface is deleted: sends fail, then the socket's error says so too.
        w.note(&os(libc::ENXIO));
        w.note(&os(libc::ENETDOWN));
        assert_eq!(w.next_tend(), Some(0), "looked into at once");
        let why = w.report().expect("said");
        assert!(why.contains("No such device or address"), "{why}");
        assert_eq!(w.report(), None, "said once");

        let mut t = 5_000_000_000;
        assert!(w.due(t));
        assert_eq!(w.looked(t, "eth1", None, None), Verdict::Wait);
        assert!(
            !w.due(t + LOOK_AGAIN_NS - 1),
            "no look before LOOK_AGAIN_NS"
        );
        assert_eq!(w.next_tend(), Some(t + LOOK_AGAIN_NS));
        t += LOOK_AGAIN_NS;
        assert_eq!(w.looked(t, "eth1", Some((9, false)), None), Verdict::Wait);

        // Created again, up, at a new index the socket is not bound to: attach, as often as
        // it takes; a failure is said once.
        t += LOOK_AGAIN_NS;
        assert_eq!(
            w.looked(t, "eth1", Some((9, true)), None),
            Verdict::Attach(9)
        );
        assert_eq!(w.stuck("no".into()).as_deref(), Some("no"));
        t += LOOK_AGAIN_NS;
        assert_eq!(
            w.looked(t, "eth1", Some((9, true)), None),
            Verdict::Attach(9)
        );
        assert_eq!(
            w.stuck("no again".into()),
            None,
            "stuck is said once an outage"
        );
        w.attached(t);
        assert_eq!(w.next_tend(), None);
        assert_eq!(w.report(), None);
        assert!(!w.due(t + CHECK_NS - 1) && w.due(t + CHECK_NS));
        t += CHECK_NS;
        assert_eq!(w.looked(t, "eth1", Some((9, true)), Some(9)), Verdict::Wait);

        // The next outage, found by a look (the interface set down), is said again, and it
        // ends without attaching: the socket stayed bound.
        t += CHECK_NS;
        assert_eq!(
            w.looked(t, "eth1", Some((9, false)), Some(9)),
            Verdict::Lost
        );
        assert_eq!(w.report().as_deref(), Some("interface `eth1` is down"));
        assert_eq!(w.stuck("x".into()).as_deref(), Some("x"), "a new outage");
        t += LOOK_AGAIN_NS;
        assert_eq!(
            w.looked(t, "eth1", Some((9, true)), Some(9)),
            Verdict::Back(9)
        );
        assert_eq!(w.next_tend(), None);

        // And one more, by an error again.
        w.note(&os(libc::ENETDOWN));
        assert!(
            w.report()
                .is_some_and(|why| why.contains("Network is down"))
        );
    }

    /// An interface replaced while no error said so (a port only read, in busy mode): a look
    /// finds its name at another index, says so, and attaches at the next look, at once.
    #[test]
    fn a_look_finds_an_interface_replaced_without_an_error() {
        let mut w = Watch::default();
        assert_eq!(w.looked(0, "eth1", Some((3, true)), Some(3)), Verdict::Wait);
        assert_eq!(
            w.looked(CHECK_NS, "eth1", Some((4, true)), None),
            Verdict::Lost
        );
        let why = w.report().expect("said");
        assert!(why.contains("now index 4"), "{why}");
        assert!(w.due(CHECK_NS));
        assert_eq!(
            w.looked(CHECK_NS, "eth1", Some((4, true)), None),
            Verdict::Attach(4)
        );
        // Gone, and found at its old index again (renamed back): back, nothing to attach.
        let mut w = Watch::default();
        assert_eq!(w.looked(0, "eth1", None, Some(3)), Verdict::Lost);
        assert!(w.report().is_some_and(|why| why.contains("does not exist")));
        assert_eq!(
            w.looked(LOOK_AGAIN_NS, "eth1", Some((3, true)), Some(3)),
            Verdict::Back(3)
        );
    }

    #[test]
    fn fanout_groups_made_again_meet_no_other_group_of_the_daemon() {
        for id in [0u16, 0x1234, 0xffff, 0x3000] {
            for ifindex in [1u32, 2, 4094, 4095, 4096, 70_000, u32::MAX] {
                let groups = regroups(id, ifindex);
                assert_eq!(groups.len(), REGROUPS as usize);
                assert_eq!(groups, regroups(id, ifindex), "every engine tries the same");
                let mut distinct = groups.clone();
                distinct.sort_unstable();
                distinct.dedup();
                assert_eq!(distinct.len(), groups.len(), "{groups:?}");
                for g in groups {
                    assert_ne!(g, id, "not the group the old sockets still hold");
                    assert_eq!(g & 0xf000, id & 0xf000, "not another port's group");
                }
            }
            assert_ne!(regroups(id, 5)[0], regroups(id, 6)[0]);
        }
    }

    #[test]
    fn a_missing_interface_is_named() {
        let e = AfPacket::open("slnx1nope").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::NotFound);
        assert_eq!(e.to_string(), "interface `slnx1nope` does not exist");
    }
}
