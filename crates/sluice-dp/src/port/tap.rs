//! The tap port: a tap device the daemon creates, carrying frames with a virtio-net header.
//!
//! Design. `Tap::create` opens `/dev/net/tun` non-blocking and asks for a tap
//! (`IFF_TAP | IFF_NO_PI | IFF_VNET_HDR`) with a 10-byte header (`TUNSETVNETHDRSZ`) and
//! checksum and TCP segmentation offload (`TUNSETOFFLOAD`: `TUN_F_CSUM | TUN_F_TSO4 |
//! TUN_F_TSO6 | TUN_F_TSO_ECN`). With the offloads the kernel hands the daemon whole GSO
//! super-frames (up to 64 KiB) with partial checksums, and accepts them back the same way: the
//! fastest port measured on this kind of machine (10 to 18.5 Gbit/s of TCP through a userspace
//! loop, against under 2 Gbit/s without the header).
//!
//! The device is always a new one: the first queue is asked for with `IFF_TUN_EXCL`, so a name
//! taken by any interface (another daemon's tap, a persistent tap made with `ip tuntap add`, a
//! device of another kind) is refused rather than attached to. It is not persistent: it exists
//! while the `Tap` is open and disappears when it is dropped, wherever it is (it may be moved
//! into another namespace with [`crate::netns::Setup::move_link`]; the descriptor keeps
//! working). A read returns exactly one frame; a write sends exactly one. Writing to a tap whose
//! link is down fails (`EIO`).
//!
//! `unsafe` is confined to the three `ioctl` calls in [`Tap::create`]; reads and writes go
//! through `std::fs::File`.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, RawFd};
use std::os::unix::fs::OpenOptionsExt;

use super::{Port, PortCounters, VNET_HDR_LEN};
use crate::netns;

/// The path of the tun/tap clone device.
pub const TUN_DEVICE: &str = "/dev/net/tun";

/// Offloads asked of every tap (`TUNSETOFFLOAD`): checksum, TSO over IPv4 and IPv6, with ECN.
pub const OFFLOADS: libc::c_uint =
    libc::TUN_F_CSUM | libc::TUN_F_TSO4 | libc::TUN_F_TSO6 | libc::TUN_F_TSO_ECN;

/// `struct ifreq` as TUNSETIFF reads it: a name and, in the union, the flags.
#[repr(C)]
struct IfReqFlags {
    name: [u8; libc::IFNAMSIZ],
    flags: libc::c_short,
    _pad: [u8; 22],
}

/// A tap device with a virtio-net header. See the module documentation.
#[derive(Debug)]
pub struct Tap {
    file: File,
    ifname: String,
    counters: PortCounters,
}

fn create_error(ifname: &str, what: &str, e: &io::Error) -> io::Error {
    io::Error::new(e.kind(), format!("cannot create tap `{ifname}`: {what}"))
}

impl Tap {
    /// Create tap `ifname` in the calling thread's namespace, with virtio-net header and
    /// offloads, non-blocking. Errors say what failed and why, for example "cannot create tap
    /// `x`: permission denied (need CAP_NET_ADMIN)" or "... name already in use".
    pub fn create(ifname: &str) -> io::Result<Tap> {
        Tap::open_queue(ifname, false, true)
    }

    /// Create tap `ifname` with `queues` queues (`IFF_MULTI_QUEUE`), one `Tap` per queue, for
    /// per-core engines: the kernel sends each flow's frames to one queue (by its flow hash),
    /// and any queue may be written. With one queue this is [`Tap::create`]. The first queue
    /// creates the device (refused if the name is taken, as for [`Tap::create`]); the others
    /// attach to it, which the first holds open meanwhile.
    pub fn create_queues(ifname: &str, queues: usize) -> io::Result<Vec<Tap>> {
        if queues <= 1 {
            return Ok(vec![Tap::create(ifname)?]);
        }
        (0..queues)
            .map(|q| Tap::open_queue(ifname, true, q == 0))
            .collect()
    }

    /// Open `/dev/net/tun` and create `ifname` (`exclusive`: `IFF_TUN_EXCL`, refused if an
    /// interface of that name exists), or, not `exclusive`, with `multi_queue` attach one more
    /// queue to the device this process created under that name.
    fn open_queue(ifname: &str, multi_queue: bool, exclusive: bool) -> io::Result<Tap> {
        netns::check_ifname(ifname).map_err(|e| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("cannot create tap: {e}"),
            )
        })?;
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NONBLOCK | libc::O_CLOEXEC)
            .open(TUN_DEVICE)
            .map_err(|e| {
                let why = match e.kind() {
                    io::ErrorKind::NotFound => {
                        format!("{TUN_DEVICE} does not exist (load the tun module: modprobe tun)")
                    }
                    io::ErrorKind::PermissionDenied => {
                        format!("permission denied opening {TUN_DEVICE} (need CAP_NET_ADMIN)")
                    }
                    _ => format!("cannot open {TUN_DEVICE}: {e}"),
                };
                create_error(ifname, &why, &e)
            })?;
        let fd = file.as_raw_fd();

        let mut req = IfReqFlags {
            name: [0; libc::IFNAMSIZ],
            flags: 0,
            _pad: [0; 22],
        };
        // check_ifname bounds the name to IFNAMSIZ - 1 bytes: the last byte stays NUL.
        req.name[..ifname.len()].copy_from_slice(ifname.as_bytes());
        let multi = if multi_queue {
            libc::IFF_MULTI_QUEUE
        } else {
            0
        };
        // Without IFF_TUN_EXCL the kernel attaches to a tap of that name that has room for a
        // queue (a persistent one, another process's multi-queue one) instead of failing.
        let excl = if exclusive { libc::IFF_TUN_EXCL } else { 0 };
        req.flags =
            (libc::IFF_TAP | libc::IFF_NO_PI | libc::IFF_VNET_HDR | multi | excl) as libc::c_short;
        // SAFETY: TUNSETIFF reads (and writes back the chosen name into) a `struct ifreq`;
        // `req` is a live, initialised, repr(C) value of ifreq's size (40 bytes) and layout for
        // the name and flags, exclusively borrowed for the call; `fd` is open (owned by `file`).
        let rc = unsafe { libc::ioctl(fd, libc::TUNSETIFF, &mut req as *mut IfReqFlags) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            let why = match e.raw_os_error() {
                Some(libc::EPERM) | Some(libc::EACCES) => {
                    "permission denied (need CAP_NET_ADMIN)".to_string()
                }
                // With IFF_TUN_EXCL: an interface of that name exists, of whatever kind.
                Some(libc::EBUSY) if is_tap(ifname) => {
                    "name already in use by another tap".to_string()
                }
                Some(libc::EBUSY) | Some(libc::EINVAL)
                    if netns::interface_index(ifname).is_ok() =>
                {
                    "name already in use by an interface that is not a tap".to_string()
                }
                Some(libc::EBUSY) => "name already in use".to_string(),
                _ => format!("TUNSETIFF failed: {e}"),
            };
            return Err(create_error(ifname, &why, &e));
        }

        let hdr_len: libc::c_int = VNET_HDR_LEN as libc::c_int;
        // SAFETY: TUNSETVNETHDRSZ reads one `int` through the pointer, which points to
        // `hdr_len`, live and initialised for the call; `fd` is open.
        let rc = unsafe { libc::ioctl(fd, libc::TUNSETVNETHDRSZ, &hdr_len as *const libc::c_int) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(create_error(
                ifname,
                &format!("cannot set a {VNET_HDR_LEN}-byte virtio-net header: {e}"),
                &e,
            ));
        }

        // SAFETY: TUNSETOFFLOAD takes its argument by value (an unsigned long of TUN_F_* flags)
        // and dereferences nothing; `fd` is open.
        let rc = unsafe { libc::ioctl(fd, libc::TUNSETOFFLOAD, OFFLOADS as libc::c_ulong) };
        if rc < 0 {
            let e = io::Error::last_os_error();
            return Err(create_error(
                ifname,
                &format!("cannot enable checksum and TSO offloads: {e}"),
                &e,
            ));
        }

        Ok(Tap {
            file,
            ifname: ifname.to_string(),
            counters: PortCounters::default(),
        })
    }
}

/// Whether interface `ifname` (in the calling thread's namespace, which `ip` inherits) is a
/// tun/tap device (`ip -d` says `tun type tap`). For messages only: `false` when unsure.
fn is_tap(ifname: &str) -> bool {
    netns::ip(&["-o", "-d", "link", "show", "dev", ifname])
        .is_ok_and(|out| out.split_whitespace().any(|w| w == "tun"))
}

impl Port for Tap {
    fn ifname(&self) -> &str {
        &self.ifname
    }

    /// Read one frame (with its virtio-net header). `buf` should hold the largest frame:
    /// [`crate::buffers::BUF_SIZE`] bytes. The kernel cuts a frame longer than `buf` to fit,
    /// so a read that fills `buf` exactly is taken as cut: the frame is dropped, and reported
    /// as an `InvalidData` error.
    fn recv(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        loop {
            match self.file.read(buf) {
                Ok(n) if n == buf.len() => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "tap `{}`: a frame filled the whole {n}-byte buffer and may be cut; dropped \
                             (buffers need {} bytes; is gso_max_size above 64 KiB?)",
                            self.ifname,
                            crate::buffers::BUF_SIZE
                        ),
                    ));
                }
                Ok(n) if n < VNET_HDR_LEN => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!(
                            "tap `{}`: a read of {n} bytes is shorter than the virtio-net header",
                            self.ifname
                        ),
                    ));
                }
                Ok(n) => {
                    self.counters.rx_frames += 1;
                    self.counters.rx_bytes += n as u64;
                    return Ok(Some(n));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                // The interface was deleted under the daemon: passed on as it is, so that the
                // datapath can tell (its error names the port).
                Err(e) if e.raw_os_error() == Some(libc::EBADFD) => return Err(e),
                Err(e) => {
                    return Err(io::Error::new(
                        e.kind(),
                        format!("tap `{}`: read: {e}", self.ifname),
                    ));
                }
            }
        }
    }

    fn send(&mut self, frame: &[u8]) -> io::Result<()> {
        if frame.len() < VNET_HDR_LEN {
            self.counters.tx_errors += 1;
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "tap `{}`: a frame of {} bytes has no virtio-net header",
                    self.ifname,
                    frame.len()
                ),
            ));
        }
        loop {
            match self.file.write(frame) {
                Ok(n) if n == frame.len() => {
                    self.counters.tx_frames += 1;
                    self.counters.tx_bytes += n as u64;
                    return Ok(());
                }
                Ok(n) => {
                    self.counters.tx_errors += 1;
                    return Err(io::Error::new(
                        io::ErrorKind::WriteZero,
                        format!("tap `{}`: wrote {n} of {} bytes", self.ifname, frame.len()),
                    ));
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Err(e),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    self.counters.tx_errors += 1;
                    let hint = if e.raw_os_error() == Some(libc::EIO) {
                        " (is the link down?)"
                    } else {
                        ""
                    };
                    return Err(io::Error::new(
                        e.kind(),
                        format!("tap `{}`: write: {e}{hint}", self.ifname),
                    ));
                }
            }
        }
    }

    fn fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }

    fn counters(&self) -> PortCounters {
        self.counters
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ifreq_has_the_kernel_size() {
        assert_eq!(std::mem::size_of::<IfReqFlags>(), 40);
        assert_eq!(std::mem::offset_of!(IfReqFlags, flags), libc::IFNAMSIZ);
    }

    #[test]
    fn bad_names_are_refused_before_any_system_call() {
        let e = Tap::create("a-name-far-too-long").unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
        assert!(e.to_string().contains("invalid interface name"), "{e}");
    }
}
