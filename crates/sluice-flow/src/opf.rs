//! Overlay pause frames (Backdraft §4.3): backpressure between virtual-switch instances over an
//! overlay network, so a slow receiver pauses and then paces the upstream instance that feeds
//! it instead of filling the network (PFC) or dropping.
//!
//! ```text
//!  upstream instance                          congested (downstream) instance
//!  OpfReceiver                  UDP datagram  QueueMonitor, one per receive queue (flow)
//!    on_opf(now, opf) <──────── "SOPF" frame ─ poll(now, chan): Th_curr > Th_over and the
//!    -> Pause { flow, until }                  previous pause over -> send an Opf
//!    -> RateLimit { flow, rate }               on_enqueue / on_deliver: Th_curr (bytes),
//!    host: stop reading the flow, then         EWMA of R_recv
//!    apply_rate -> Scheduler::set_flow_rate
//! ```
//!
//! **Sender** ([`QueueMonitor`], one per receive queue, i.e. per flow). The queue length
//! `Th_curr` is counted in **bytes** (what the host enqueued minus what the receiver took), so a
//! queue of jumbo frames and a queue of ACKs are judged by the memory and drain time they cost.
//! Three thresholds, in bytes, with `0 < Th_goal < Th_over < Th_net` ([`Thresholds`]):
//! - `Th_goal`: the length a pause aims to drain the queue down to (Backdraft: the receiver's
//!   read batch, so the receiver never starves);
//! - `Th_over`: above it, send an overlay pause frame upstream;
//! - `Th_net`: above it the overlay pause came too late and the host must fall back to a
//!   network pause (PFC/BFC) or a counted drop ([`QueueMonitor::above_net`]).
//!
//! When `Th_curr > Th_over` and no pause period is running, [`QueueMonitor::poll`] sends
//! `Opf { flow, pause = (Th_curr - Th_goal) / R, rate = R }` with `R = max(R_recv, floor)`; the
//! pause is rounded up to a whole nanosecond and capped at the configured `max_pause_ns`. The
//! next frame is sent only once that pause has passed, and only if the queue is still above
//! `Th_over` then ([`QueueMonitor::next_check`] says when to look).
//!
//! **Receive-rate estimator.** `R_recv` is an EWMA of the rate at which the receiver drains the
//! queue *while it holds data*. On each delivery of `b` bytes at `now`, the sample is
//! `S = 8e9 * b / (now - t_prev)` bit/s, where `t_prev` is the previous delivery or, if the
//! queue was empty in between, the enqueue that made it busy again (idle time is not the
//! receiver's fault). Then `R_recv = S` for the first sample and
//! `R_recv = (1 - w) * R_recv + w * S` after (weight `w`, default 1/8, integer arithmetic).
//! Deliveries at the same instant as the previous one are folded into the next sample with a
//! non-zero interval. Samples are capped at [`MAX_OPF_RATE_BPS`]. Until a sample exists, or
//! when the estimate is below it, the configured floor rate is used, so no division by zero.
//!
//! **Receiver** ([`OpfReceiver`], on the upstream instance). [`OpfReceiver::on_opf`] pauses the
//! flow's input until `now + pause`, then rate-limits it to the frame's rate; it returns both
//! actions for the host to apply ([`OpfReceiver::apply_rate`] applies the rate through
//! [`Scheduler::set_flow_rate`]). A newer frame for a flow replaces the older one's pause and
//! rate. Frames for flows the receiver was not told about are counted and otherwise ignored.
//!
//! **Wire format** (version 1, 36 bytes, integers big-endian, one frame per UDP datagram):
//!
//! | offset | size | field    | value                                                 |
//! |-------:|-----:|----------|-------------------------------------------------------|
//! | 0      | 4    | magic    | `"SOPF"` (`53 4F 50 46`)                              |
//! | 4      | 1    | version  | 1                                                     |
//! | 5      | 1    | type     | 1 = overlay pause frame                               |
//! | 6      | 2    | length   | 36, the whole frame in bytes                          |
//! | 8      | 8    | flow     | flow id (`Packet::flow` key, agreed by both instances)|
//! | 16     | 8    | pause    | pause time, ns, at most [`MAX_OPF_PAUSE_NS`]          |
//! | 24     | 8    | rate     | new rate, bit/s, 1 ..= [`MAX_OPF_RATE_BPS`]           |
//! | 32     | 4    | checksum | CRC-32C (Castagnoli) of bytes 0..32                   |
//!
//! [`decode`] checks, in order: header present, magic, version, type, length field, datagram
//! length (too short, trailing bytes), checksum, then the values (zero rate, absurd rate or
//! pause), and says which failed ([`DecodeError`]); it never panics. A later version may grow
//! the frame: the version byte is checked before the length.
//!
//! Complexity: every sender and receiver operation is O(1) (a hash lookup on the receiver);
//! nothing allocates except [`OpfReceiver::add_flow`] and [`encode_vec`]. Time is passed in as
//! `now` (ns); nothing reads a clock.

use sluice_sched::{NodeId, Rate, Scheduler};
use std::collections::HashMap;
use std::io;
use std::net::{SocketAddr, ToSocketAddrs, UdpSocket};
use std::time::Duration;

/// Largest rate a frame may carry: 10^15 bit/s (1 Pbit/s); more is an absurd rate.
pub const MAX_OPF_RATE_BPS: u64 = 1_000_000_000_000_000;

/// Longest pause a frame may carry: 1 s; longer is an absurd pause.
pub const MAX_OPF_PAUSE_NS: u64 = 1_000_000_000;

/// Bytes in a version-1 frame.
pub const FRAME_LEN: usize = 36;

/// The frame's magic number, `"SOPF"`.
pub const MAGIC: [u8; 4] = *b"SOPF";

/// The wire format version this module writes and reads.
pub const VERSION: u8 = 1;

/// The frame type of an overlay pause frame.
pub const TYPE_OPF: u8 = 1;

/// Bytes before the length field ends (magic, version, type, length).
const HEADER_LEN: usize = 8;

// ---------------------------------------------------------------------------------------------
// The frame
// ---------------------------------------------------------------------------------------------

/// An overlay pause frame: pause `flow` for `pause_ns`, then send it at `rate`.
///
/// Always valid: the rate is at most [`MAX_OPF_RATE_BPS`] and the pause at most
/// [`MAX_OPF_PAUSE_NS`], so every `Opf` encodes to a frame that decodes back to it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Opf {
    flow: u64,
    pause_ns: u64,
    rate: Rate,
}

/// Why an [`Opf`] cannot be made.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum InvalidOpf {
    /// The pause is longer than [`MAX_OPF_PAUSE_NS`].
    #[error("pause of {pause_ns} ns exceeds the {MAX_OPF_PAUSE_NS} ns maximum")]
    PauseTooLong {
        /// The pause given.
        pause_ns: u64,
    },
    /// The rate is above [`MAX_OPF_RATE_BPS`].
    #[error("rate of {bps} bit/s exceeds the {MAX_OPF_RATE_BPS} bit/s maximum")]
    RateTooHigh {
        /// The rate given.
        bps: u64,
    },
}

impl Opf {
    /// A frame for `flow`: pause `pause_ns`, then `rate`.
    pub fn new(flow: u64, pause_ns: u64, rate: Rate) -> Result<Opf, InvalidOpf> {
        if pause_ns > MAX_OPF_PAUSE_NS {
            return Err(InvalidOpf::PauseTooLong { pause_ns });
        }
        if rate.bps() > MAX_OPF_RATE_BPS {
            return Err(InvalidOpf::RateTooHigh { bps: rate.bps() });
        }
        Ok(Opf {
            flow,
            pause_ns,
            rate,
        })
    }

    /// The flow to pause (the upstream instance's flow key).
    pub fn flow(&self) -> u64 {
        self.flow
    }

    /// How long to pause the flow, in nanoseconds.
    pub fn pause_ns(&self) -> u64 {
        self.pause_ns
    }

    /// The rate to send the flow at once the pause ends.
    pub fn rate(&self) -> Rate {
        self.rate
    }
}

// ---------------------------------------------------------------------------------------------
// Wire format
// ---------------------------------------------------------------------------------------------

/// Why bytes are not a valid frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DecodeError {
    /// Fewer bytes than the header or the frame needs.
    #[error("frame too short: {len} bytes, need {need}")]
    TooShort {
        /// Bytes received.
        len: usize,
        /// Bytes needed.
        need: usize,
    },
    /// The first four bytes are not [`MAGIC`].
    #[error("bad magic {found:02x?}")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A version this module does not read.
    #[error("unsupported version {version}")]
    UnsupportedVersion {
        /// The version found.
        version: u8,
    },
    /// A frame type this module does not know.
    #[error("unknown frame type {kind}")]
    UnknownType {
        /// The type found.
        kind: u8,
    },
    /// The length field disagrees with the version's frame length.
    #[error("length field says {field} bytes, version 1 frames have {FRAME_LEN}")]
    BadLength {
        /// The length field.
        field: u16,
    },
    /// More bytes than the frame (a frame is alone in its datagram).
    #[error("{len} bytes, {} after the {FRAME_LEN}-byte frame", .len.saturating_sub(FRAME_LEN))]
    TrailingBytes {
        /// Bytes received.
        len: usize,
    },
    /// The checksum does not match the frame's bytes.
    #[error("bad checksum: frame says {found:#010x}, bytes give {computed:#010x}")]
    BadChecksum {
        /// The checksum field.
        found: u32,
        /// The checksum of the bytes.
        computed: u32,
    },
    /// A rate of zero.
    #[error("zero rate")]
    ZeroRate,
    /// A rate above [`MAX_OPF_RATE_BPS`].
    #[error("absurd rate of {bps} bit/s")]
    AbsurdRate {
        /// The rate found.
        bps: u64,
    },
    /// A pause longer than [`MAX_OPF_PAUSE_NS`].
    #[error("absurd pause of {pause_ns} ns")]
    AbsurdPause {
        /// The pause found.
        pause_ns: u64,
    },
}

/// The reason a frame was rejected, without details (one counter each).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum DecodeReason {
    /// [`DecodeError::TooShort`].
    TooShort,
    /// [`DecodeError::BadMagic`].
    BadMagic,
    /// [`DecodeError::UnsupportedVersion`].
    UnsupportedVersion,
    /// [`DecodeError::UnknownType`].
    UnknownType,
    /// [`DecodeError::BadLength`].
    BadLength,
    /// [`DecodeError::TrailingBytes`].
    TrailingBytes,
    /// [`DecodeError::BadChecksum`].
    BadChecksum,
    /// [`DecodeError::ZeroRate`].
    ZeroRate,
    /// [`DecodeError::AbsurdRate`].
    AbsurdRate,
    /// [`DecodeError::AbsurdPause`].
    AbsurdPause,
}

impl DecodeReason {
    /// Number of reasons.
    pub const COUNT: usize = 10;

    /// Every reason, in counter order.
    pub const ALL: [DecodeReason; DecodeReason::COUNT] = [
        DecodeReason::TooShort,
        DecodeReason::BadMagic,
        DecodeReason::UnsupportedVersion,
        DecodeReason::UnknownType,
        DecodeReason::BadLength,
        DecodeReason::TrailingBytes,
        DecodeReason::BadChecksum,
        DecodeReason::ZeroRate,
        DecodeReason::AbsurdRate,
        DecodeReason::AbsurdPause,
    ];

    /// A short stable name (for metrics labels).
    pub fn name(self) -> &'static str {
        match self {
            DecodeReason::TooShort => "too_short",
            DecodeReason::BadMagic => "bad_magic",
            DecodeReason::UnsupportedVersion => "unsupported_version",
            DecodeReason::UnknownType => "unknown_type",
            DecodeReason::BadLength => "bad_length",
            DecodeReason::TrailingBytes => "trailing_bytes",
            DecodeReason::BadChecksum => "bad_checksum",
            DecodeReason::ZeroRate => "zero_rate",
            DecodeReason::AbsurdRate => "absurd_rate",
            DecodeReason::AbsurdPause => "absurd_pause",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

impl DecodeError {
    /// The reason, without details.
    pub fn reason(&self) -> DecodeReason {
        match self {
            DecodeError::TooShort { .. } => DecodeReason::TooShort,
            DecodeError::BadMagic { .. } => DecodeReason::BadMagic,
            DecodeError::UnsupportedVersion { .. } => DecodeReason::UnsupportedVersion,
            DecodeError::UnknownType { .. } => DecodeReason::UnknownType,
            DecodeError::BadLength { .. } => DecodeReason::BadLength,
            DecodeError::TrailingBytes { .. } => DecodeReason::TrailingBytes,
            DecodeError::BadChecksum { .. } => DecodeReason::BadChecksum,
            DecodeError::ZeroRate => DecodeReason::ZeroRate,
            DecodeError::AbsurdRate { .. } => DecodeReason::AbsurdRate,
            DecodeError::AbsurdPause { .. } => DecodeReason::AbsurdPause,
        }
    }
}

/// CRC-32C (Castagnoli, as in iSCSI, SCTP, ext4), from the `crc` crate.
fn crc32c(data: &[u8]) -> u32 {
    const CASTAGNOLI: crc::Crc<u32> = crc::Crc::<u32>::new(&crc::CRC_32_ISCSI);
    CASTAGNOLI.checksum(data)
}

fn u64_at(frame: &[u8; FRAME_LEN], at: usize) -> u64 {
    let mut b = [0u8; 8];
    b.copy_from_slice(&frame[at..at + 8]);
    u64::from_be_bytes(b)
}

/// The frame's bytes (see the module note for the layout).
pub fn encode(opf: &Opf) -> [u8; FRAME_LEN] {
    let mut f = [0u8; FRAME_LEN];
    f[0..4].copy_from_slice(&MAGIC);
    f[4] = VERSION;
    f[5] = TYPE_OPF;
    f[6..8].copy_from_slice(&(FRAME_LEN as u16).to_be_bytes());
    f[8..16].copy_from_slice(&opf.flow.to_be_bytes());
    f[16..24].copy_from_slice(&opf.pause_ns.to_be_bytes());
    f[24..32].copy_from_slice(&opf.rate.bps().to_be_bytes());
    let crc = crc32c(&f[..32]);
    f[32..36].copy_from_slice(&crc.to_be_bytes());
    f
}

/// The frame's bytes in a `Vec` (allocates; [`encode`] does not).
pub fn encode_vec(opf: &Opf) -> Vec<u8> {
    encode(opf).to_vec()
}

/// Read one frame from exactly the bytes of one datagram; never panics. See the module note
/// for the checks and their order.
pub fn decode(bytes: &[u8]) -> Result<Opf, DecodeError> {
    let len = bytes.len();
    let Some(header) = bytes.get(..HEADER_LEN) else {
        return Err(DecodeError::TooShort {
            len,
            need: HEADER_LEN,
        });
    };
    let found = [header[0], header[1], header[2], header[3]];
    if found != MAGIC {
        return Err(DecodeError::BadMagic { found });
    }
    if header[4] != VERSION {
        return Err(DecodeError::UnsupportedVersion { version: header[4] });
    }
    if header[5] != TYPE_OPF {
        return Err(DecodeError::UnknownType { kind: header[5] });
    }
    let field = u16::from_be_bytes([header[6], header[7]]);
    if usize::from(field) != FRAME_LEN {
        return Err(DecodeError::BadLength { field });
    }
    if len > FRAME_LEN {
        return Err(DecodeError::TrailingBytes { len });
    }
    let Ok(frame) = <&[u8; FRAME_LEN]>::try_from(bytes) else {
        return Err(DecodeError::TooShort {
            len,
            need: FRAME_LEN,
        });
    };
    let found = u32::from_be_bytes([frame[32], frame[33], frame[34], frame[35]]);
    let computed = crc32c(&frame[..32]);
    if found != computed {
        return Err(DecodeError::BadChecksum { found, computed });
    }
    let flow = u64_at(frame, 8);
    let pause_ns = u64_at(frame, 16);
    let bps = u64_at(frame, 24);
    let Some(rate) = Rate::new(bps) else {
        return Err(if bps == 0 {
            DecodeError::ZeroRate
        } else {
            DecodeError::AbsurdRate { bps }
        });
    };
    Opf::new(flow, pause_ns, rate).map_err(|e| match e {
        InvalidOpf::PauseTooLong { pause_ns } => DecodeError::AbsurdPause { pause_ns },
        InvalidOpf::RateTooHigh { bps } => DecodeError::AbsurdRate { bps },
    })
}

// ---------------------------------------------------------------------------------------------
// Channels
// ---------------------------------------------------------------------------------------------

/// Why a frame could not be sent.
#[derive(Debug, thiserror::Error)]
pub enum ChannelError {
    /// The transport failed.
    #[error("overlay pause frame not sent: {0}")]
    Io(#[from] io::Error),
    /// The transport cannot take a frame now (try again later).
    #[error("overlay pause frame channel busy")]
    Busy,
    /// The transport sent only part of the frame.
    #[error("overlay pause frame truncated: {sent} of {len} bytes sent")]
    Truncated {
        /// Bytes sent.
        sent: usize,
        /// Bytes in the frame.
        len: usize,
    },
    /// The channel is closed.
    #[error("overlay pause frame channel closed")]
    Closed,
}

/// Where a [`QueueMonitor`] sends its frames: to the upstream instance.
pub trait OpfChannel {
    /// Send one frame (or fail without having sent it).
    fn send(&mut self, frame: &Opf) -> Result<(), ChannelError>;
}

/// Frames kept in memory, in order (for tests, the simulator, and instances in one process).
impl OpfChannel for Vec<Opf> {
    fn send(&mut self, frame: &Opf) -> Result<(), ChannelError> {
        self.push(*frame);
        Ok(())
    }
}

/// Counters of a [`UdpChannel`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UdpStats {
    /// Frames sent.
    pub sent: u64,
    /// Frames that could not be sent.
    pub send_errors: u64,
    /// Valid frames received.
    pub received: u64,
    /// Datagrams rejected, per [`DecodeReason`] (index: its place in [`DecodeReason::ALL`]).
    pub rejected: [u64; DecodeReason::COUNT],
    /// Receive errors reporting the peer unreachable (ICMP port unreachable), skipped.
    pub unreachable: u64,
}

impl UdpStats {
    /// Datagrams rejected for `reason`.
    pub fn rejected(&self, reason: DecodeReason) -> u64 {
        self.rejected[reason.index()]
    }

    /// Datagrams rejected for any reason.
    pub fn rejected_total(&self) -> u64 {
        self.rejected.iter().sum()
    }
}

/// One datagram read by [`UdpChannel`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received {
    /// A valid frame.
    Frame(Opf),
    /// Not a valid frame (already counted in [`UdpStats::rejected`]).
    Rejected(DecodeError),
}

/// Datagrams longer than this are read truncated, and rejected as trailing bytes.
const RECV_BUF: usize = 512;

/// Overlay pause frames over UDP, one frame per datagram, between this instance and one peer.
///
/// The socket is non-blocking: [`UdpChannel::try_recv`] returns at once.
#[derive(Debug)]
pub struct UdpChannel {
    sock: UdpSocket,
    stats: UdpStats,
}

impl UdpChannel {
    /// A channel on a socket bound to `addr` (port 0: any free port).
    pub fn bind<A: ToSocketAddrs>(addr: A) -> io::Result<UdpChannel> {
        let sock = UdpSocket::bind(addr)?;
        sock.set_nonblocking(true)?;
        Ok(UdpChannel {
            sock,
            stats: UdpStats::default(),
        })
    }

    /// Send to, and receive only from, `peer`.
    pub fn connect<A: ToSocketAddrs>(&self, peer: A) -> io::Result<()> {
        self.sock.connect(peer)
    }

    /// The address the socket is bound to.
    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.sock.local_addr()
    }

    /// The peer, once connected.
    pub fn peer_addr(&self) -> io::Result<SocketAddr> {
        self.sock.peer_addr()
    }

    /// The socket (to tune buffers, or to poll it with the host's event loop).
    pub fn socket(&self) -> &UdpSocket {
        &self.sock
    }

    /// Counters.
    pub fn stats(&self) -> &UdpStats {
        &self.stats
    }

    /// Read one datagram if one is waiting; `Ok(None)` if none is. Invalid datagrams are
    /// counted and returned as [`Received::Rejected`].
    pub fn try_recv(&mut self) -> io::Result<Option<Received>> {
        let mut buf = [0u8; RECV_BUF];
        loop {
            match self.sock.recv(&mut buf) {
                Ok(n) => {
                    let got = buf.get(..n).unwrap_or(&buf);
                    return Ok(Some(match decode(got) {
                        Ok(opf) => {
                            self.stats.received += 1;
                            Received::Frame(opf)
                        }
                        Err(e) => {
                            self.stats.rejected[e.reason().index()] += 1;
                            Received::Rejected(e)
                        }
                    }));
                }
                Err(e)
                    if matches!(
                        e.kind(),
                        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                    ) =>
                {
                    return Ok(None);
                }
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                    self.stats.unreachable += 1;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    }

    /// Like [`UdpChannel::try_recv`], but wait up to `timeout` for a datagram (for control
    /// threads and tests; the socket is non-blocking again afterwards).
    pub fn recv_timeout(&mut self, timeout: Duration) -> io::Result<Option<Received>> {
        if timeout.is_zero() {
            return self.try_recv();
        }
        self.sock.set_read_timeout(Some(timeout))?;
        self.sock.set_nonblocking(false)?;
        let got = self.try_recv();
        let restored = self
            .sock
            .set_nonblocking(true)
            .and_then(|()| self.sock.set_read_timeout(None));
        let got = got?;
        restored?;
        Ok(got)
    }

    /// Read every waiting datagram; push the valid frames to `out` (invalid ones are counted).
    /// Returns the number of frames pushed. It reads until the socket is empty: a host that
    /// must bound its work per call under a flood calls [`UdpChannel::try_recv`] instead.
    pub fn drain(&mut self, out: &mut Vec<Opf>) -> io::Result<usize> {
        let mut n = 0;
        while let Some(r) = self.try_recv()? {
            if let Received::Frame(opf) = r {
                out.push(opf);
                n += 1;
            }
        }
        Ok(n)
    }
}

impl OpfChannel for UdpChannel {
    fn send(&mut self, frame: &Opf) -> Result<(), ChannelError> {
        let bytes = encode(frame);
        let result = match self.sock.send(&bytes) {
            Ok(n) if n == bytes.len() => Ok(()),
            Ok(n) => Err(ChannelError::Truncated {
                sent: n,
                len: bytes.len(),
            }),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(ChannelError::Busy),
            Err(e) => Err(ChannelError::Io(e)),
        };
        match result {
            Ok(()) => self.stats.sent += 1,
            Err(_) => self.stats.send_errors += 1,
        }
        result
    }
}

// ---------------------------------------------------------------------------------------------
// Sender: the congested instance
// ---------------------------------------------------------------------------------------------

/// Why a monitor cannot be configured.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// A threshold or parameter of zero.
    #[error("{0} must be at least 1")]
    Zero(&'static str),
    /// Thresholds not in the order `Th_goal < Th_over < Th_net`.
    #[error("thresholds must satisfy goal < over < net, got goal {goal}, over {over}, net {net}")]
    Order {
        /// `Th_goal`.
        goal: u64,
        /// `Th_over`.
        over: u64,
        /// `Th_net`.
        net: u64,
    },
    /// An EWMA weight `num / den` outside `(0, 1]`.
    #[error("EWMA weight {num}/{den} must be in (0, 1]")]
    Weight {
        /// Numerator.
        num: u32,
        /// Denominator.
        den: u32,
    },
    /// The floor rate is above [`MAX_OPF_RATE_BPS`].
    #[error("floor rate {bps} bit/s is above {MAX_OPF_RATE_BPS} bit/s")]
    FloorTooHigh {
        /// The floor given.
        bps: u64,
    },
    /// The pause cap is above [`MAX_OPF_PAUSE_NS`].
    #[error("max pause {pause_ns} ns is above {MAX_OPF_PAUSE_NS} ns")]
    PauseTooLong {
        /// The cap given.
        pause_ns: u64,
    },
}

/// Queue-length thresholds in bytes, `0 < goal < over < net` (checked on construction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Thresholds {
    goal: u64,
    over: u64,
    net: u64,
}

impl Thresholds {
    /// `Th_goal`, `Th_over`, `Th_net` in bytes.
    pub fn new(goal: u64, over: u64, net: u64) -> Result<Thresholds, ConfigError> {
        for (v, name) in [(goal, "Th_goal"), (over, "Th_over"), (net, "Th_net")] {
            if v == 0 {
                return Err(ConfigError::Zero(name));
            }
        }
        if !(goal < over && over < net) {
            return Err(ConfigError::Order { goal, over, net });
        }
        Ok(Thresholds { goal, over, net })
    }

    /// `Th_goal`: the length a pause drains the queue down to.
    pub fn goal(&self) -> u64 {
        self.goal
    }

    /// `Th_over`: above it, pause upstream.
    pub fn over(&self) -> u64 {
        self.over
    }

    /// `Th_net`: above it, fall back to a network pause or a drop.
    pub fn net(&self) -> u64 {
        self.net
    }
}

/// The EWMA weight `w = num / den` of a new sample, in `(0, 1]` (checked on construction).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EwmaWeight {
    num: u32,
    den: u32,
}

impl EwmaWeight {
    /// `num / den`.
    pub fn new(num: u32, den: u32) -> Result<EwmaWeight, ConfigError> {
        if num == 0 || den == 0 || num > den {
            return Err(ConfigError::Weight { num, den });
        }
        Ok(EwmaWeight { num, den })
    }

    /// Numerator.
    pub fn num(&self) -> u32 {
        self.num
    }

    /// Denominator.
    pub fn den(&self) -> u32 {
        self.den
    }

    fn fold(self, old: u64, sample: u64) -> u64 {
        let (num, den) = (u128::from(self.num), u128::from(self.den));
        ((u128::from(old) * (den - num) + u128::from(sample) * num) / den) as u64
    }
}

impl Default for EwmaWeight {
    /// 1/8.
    fn default() -> Self {
        EwmaWeight { num: 1, den: 8 }
    }
}

/// Configuration of a [`QueueMonitor`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OpfConfig {
    /// Queue-length thresholds (bytes).
    pub thresholds: Thresholds,
    /// Weight of a new sample in the receive-rate EWMA (default 1/8).
    pub ewma: EwmaWeight,
    /// Rate used when the receive rate is unknown or lower (default 100 Mbit/s): the least
    /// rate an OPF asks for, and the divisor of the pause time.
    pub floor: Rate,
    /// Longest pause sent (default 10 ms, at most [`MAX_OPF_PAUSE_NS`]): bounds starvation
    /// when the rate estimate is too low.
    pub max_pause_ns: u64,
}

impl OpfConfig {
    /// Default configuration with these thresholds.
    pub fn new(thresholds: Thresholds) -> OpfConfig {
        OpfConfig {
            thresholds,
            ewma: EwmaWeight::default(),
            floor: Rate::mbit(100),
            max_pause_ns: 10_000_000,
        }
    }

    fn validate(&self) -> Result<(), ConfigError> {
        if self.floor.bps() > MAX_OPF_RATE_BPS {
            return Err(ConfigError::FloorTooHigh {
                bps: self.floor.bps(),
            });
        }
        if self.max_pause_ns == 0 {
            return Err(ConfigError::Zero("max_pause_ns"));
        }
        if self.max_pause_ns > MAX_OPF_PAUSE_NS {
            return Err(ConfigError::PauseTooLong {
                pause_ns: self.max_pause_ns,
            });
        }
        Ok(())
    }
}

/// Counters of a [`QueueMonitor`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MonitorStats {
    /// Frames sent.
    pub opfs: u64,
    /// Frames the channel refused (retried at the next poll).
    pub send_errors: u64,
    /// Frames whose pause was cut to `max_pause_ns`.
    pub clamped: u64,
    /// Rate samples taken.
    pub samples: u64,
}

/// The sender side for one receive queue (one flow): tracks its length and receive rate, and
/// sends overlay pause frames upstream. See the module note.
#[derive(Clone, Debug)]
pub struct QueueMonitor {
    flow: u64,
    cfg: OpfConfig,
    /// `Th_curr`, bytes.
    queued: u64,
    /// EWMA receive rate in bit/s; `None` before the first sample.
    rate: Option<u64>,
    /// Start of the current rate interval (last delivery, or start of a busy period).
    last: Option<u64>,
    /// Bytes delivered at `last` itself, folded into the next sample.
    unsampled: u64,
    /// No new frame before this time (the last frame's pause).
    quiet_until: Option<u64>,
    stats: MonitorStats,
}

impl QueueMonitor {
    /// A monitor for the receive queue of `flow` (the id the upstream instance knows it by).
    pub fn new(flow: u64, cfg: OpfConfig) -> Result<QueueMonitor, ConfigError> {
        cfg.validate()?;
        Ok(QueueMonitor {
            flow,
            cfg,
            queued: 0,
            rate: None,
            last: None,
            unsampled: 0,
            quiet_until: None,
            stats: MonitorStats::default(),
        })
    }

    /// The flow.
    pub fn flow(&self) -> u64 {
        self.flow
    }

    /// The configuration.
    pub fn config(&self) -> &OpfConfig {
        &self.cfg
    }

    /// `bytes` joined the queue at `now`.
    pub fn on_enqueue(&mut self, now: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        if self.queued == 0 {
            self.busy_again(now);
        }
        self.queued = self.queued.saturating_add(bytes);
    }

    /// The receiver took `bytes` from the queue at `now`: shorten the queue and update the
    /// receive-rate estimate.
    pub fn on_deliver(&mut self, now: u64, bytes: u64) {
        if bytes == 0 {
            return;
        }
        self.queued = self.queued.saturating_sub(bytes);
        let Some(start) = self.last else {
            // No interval to measure this delivery over: start one.
            self.last = Some(now);
            return;
        };
        if now <= start {
            self.unsampled = self.unsampled.saturating_add(bytes);
            return;
        }
        let bits = u128::from(self.unsampled.saturating_add(bytes)) * 8_000_000_000;
        let sample = (bits / u128::from(now - start)).min(u128::from(MAX_OPF_RATE_BPS)) as u64;
        self.rate = Some(match self.rate {
            None => sample,
            Some(old) => self.cfg.ewma.fold(old, sample),
        });
        self.stats.samples += 1;
        self.unsampled = 0;
        self.last = Some(now);
    }

    /// Set the queue length to `bytes` at `now` (for hosts that read it from their queue
    /// rather than report each enqueue; deliveries still go through `on_deliver`).
    pub fn set_queued(&mut self, now: u64, bytes: u64) {
        if self.queued == 0 && bytes > 0 {
            self.busy_again(now);
        }
        self.queued = bytes;
    }

    fn busy_again(&mut self, now: u64) {
        // Time the queue spent empty does not count against the receiver.
        if self.last.is_none_or(|t| t < now) {
            self.last = Some(now);
            self.unsampled = 0;
        }
    }

    /// `Th_curr`: bytes in the queue.
    pub fn queued(&self) -> u64 {
        self.queued
    }

    /// The estimated receive rate `R_recv` in bit/s, `None` before the first sample.
    pub fn recv_rate_bps(&self) -> Option<u64> {
        self.rate
    }

    /// The rate an OPF asks for now: `max(R_recv, floor)`.
    pub fn new_rate(&self) -> Rate {
        self.rate
            .and_then(Rate::new)
            .map_or(self.cfg.floor, |r| r.max(self.cfg.floor))
    }

    /// The pause an OPF would carry now: `(Th_curr - Th_goal) / new_rate()`, rounded up to a
    /// nanosecond and capped at `max_pause_ns`; 0 when the queue is at or below `Th_goal`.
    pub fn pause_time(&self) -> u64 {
        self.pause_uncapped().min(self.cfg.max_pause_ns)
    }

    fn pause_uncapped(&self) -> u64 {
        let excess = self.queued.saturating_sub(self.cfg.thresholds.goal);
        let bits = u128::from(excess) * 8_000_000_000;
        let ns = bits.div_ceil(u128::from(self.new_rate().bps()));
        u64::try_from(ns).unwrap_or(u64::MAX)
    }

    /// The queue is above `Th_over`.
    pub fn is_over(&self) -> bool {
        self.queued > self.cfg.thresholds.over
    }

    /// The queue is above `Th_net`: overlay pauses were not enough, and the host must fall back
    /// to a network pause (PFC/BFC) or a counted drop.
    pub fn above_net(&self) -> bool {
        self.queued > self.cfg.thresholds.net
    }

    /// When the running pause period ends, if the queue is above `Th_over` (poll then); `None`
    /// when no frame is due (below `Th_over`) — polling after each enqueue is enough then.
    pub fn next_check(&self) -> Option<u64> {
        if !self.is_over() {
            return None;
        }
        Some(self.quiet_until.unwrap_or(0))
    }

    /// If the queue is above `Th_over` and the previous frame's pause has passed, send a frame
    /// through `chan` and return it. A frame the channel refuses is not counted as sent: the
    /// next poll tries again.
    pub fn poll<C: OpfChannel + ?Sized>(
        &mut self,
        now: u64,
        chan: &mut C,
    ) -> Result<Option<Opf>, ChannelError> {
        if !self.is_over() || self.quiet_until.is_some_and(|t| now < t) {
            return Ok(None);
        }
        let uncapped = self.pause_uncapped();
        let pause_ns = uncapped.min(self.cfg.max_pause_ns);
        // Valid by construction: floor, samples and EWMA are at most MAX_OPF_RATE_BPS, and
        // max_pause_ns at most MAX_OPF_PAUSE_NS (checked in `new`).
        let opf = Opf {
            flow: self.flow,
            pause_ns,
            rate: self.new_rate(),
        };
        if let Err(e) = chan.send(&opf) {
            self.stats.send_errors += 1;
            return Err(e);
        }
        if uncapped > pause_ns {
            self.stats.clamped += 1;
        }
        self.stats.opfs += 1;
        self.quiet_until = Some(now.saturating_add(pause_ns));
        Ok(Some(opf))
    }

    /// Counters.
    pub fn stats(&self) -> MonitorStats {
        self.stats
    }
}

// ---------------------------------------------------------------------------------------------
// Receiver: the upstream instance
// ---------------------------------------------------------------------------------------------

/// What the host must do with a flow's input after an overlay pause frame.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    /// Stop taking the flow's packets until `until` (ns).
    Pause {
        /// The flow.
        flow: u64,
        /// End of the pause.
        until: u64,
    },
    /// From the end of the pause on, send the flow at `rate` (installing it at once is the
    /// same: a paused flow sends nothing).
    RateLimit {
        /// The flow.
        flow: u64,
        /// Its new rate.
        rate: Rate,
    },
}

/// Counters of an [`OpfReceiver`].
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ReceiverStats {
    /// Frames applied to a known flow.
    pub applied: u64,
    /// Frames for flows the receiver does not know (ignored).
    pub unknown_flow: u64,
}

#[derive(Clone, Copy, Debug, Default)]
struct FlowCtl {
    paused_until: u64,
    rate: Option<Rate>,
}

/// The receiver side: the upstream instance's per-flow pauses and rate limits. See the module
/// note.
#[derive(Clone, Debug, Default)]
pub struct OpfReceiver {
    flows: HashMap<u64, FlowCtl>,
    stats: ReceiverStats,
}

impl OpfReceiver {
    /// A receiver that knows no flow yet.
    pub fn new() -> OpfReceiver {
        OpfReceiver::default()
    }

    /// A receiver with room for `flows` flows before it allocates.
    pub fn with_capacity(flows: usize) -> OpfReceiver {
        OpfReceiver {
            flows: HashMap::with_capacity(flows),
            stats: ReceiverStats::default(),
        }
    }

    /// Accept frames for `flow`; false if it was known already.
    pub fn add_flow(&mut self, flow: u64) -> bool {
        match self.flows.entry(flow) {
            std::collections::hash_map::Entry::Occupied(_) => false,
            std::collections::hash_map::Entry::Vacant(v) => {
                v.insert(FlowCtl::default());
                true
            }
        }
    }

    /// Forget `flow` (its pause and rate limit); false if it was unknown.
    pub fn remove_flow(&mut self, flow: u64) -> bool {
        self.flows.remove(&flow).is_some()
    }

    /// Apply a frame received at `now`: pause its flow until `now + pause`, then limit it to
    /// the frame's rate. Returns the two actions for the host, or `None` (counted) if the flow
    /// is unknown. A newer frame replaces an older one's pause and rate.
    pub fn on_opf(&mut self, now: u64, opf: &Opf) -> Option<[Action; 2]> {
        let Some(ctl) = self.flows.get_mut(&opf.flow) else {
            self.stats.unknown_flow += 1;
            return None;
        };
        let until = now.saturating_add(opf.pause_ns);
        ctl.paused_until = until;
        ctl.rate = Some(opf.rate);
        self.stats.applied += 1;
        Some([
            Action::Pause {
                flow: opf.flow,
                until,
            },
            Action::RateLimit {
                flow: opf.flow,
                rate: opf.rate,
            },
        ])
    }

    /// The flow's input is paused at `now` (false for unknown flows).
    pub fn is_paused(&self, flow: u64, now: u64) -> bool {
        self.flows.get(&flow).is_some_and(|c| now < c.paused_until)
    }

    /// When the flow's latest pause ends (possibly in the past), if it was ever paused.
    pub fn paused_until(&self, flow: u64) -> Option<u64> {
        self.flows
            .get(&flow)
            .map(|c| c.paused_until)
            .filter(|&t| t > 0)
    }

    /// The flow's rate limit, if any.
    pub fn rate(&self, flow: u64) -> Option<Rate> {
        self.flows.get(&flow).and_then(|c| c.rate)
    }

    /// Remove the flow's rate limit (e.g. once the downstream queue has drained); false if it
    /// had none. Apply it with [`OpfReceiver::apply_rate`].
    pub fn lift(&mut self, flow: u64) -> bool {
        self.flows
            .get_mut(&flow)
            .is_some_and(|c| c.rate.take().is_some())
    }

    /// Install the flow's current rate limit (or its absence) in `sched` at `now` as the
    /// pacing rate of flow key `flow` in `leaf`. False if the scheduler does not hold that flow
    /// (it has not seen its packets yet, or reclaimed it): apply again when it does.
    pub fn apply_rate(&self, now: u64, sched: &mut Scheduler, leaf: NodeId, flow: u64) -> bool {
        sched.set_flow_rate(now, leaf, flow, self.rate(flow))
    }

    /// Counters.
    pub fn stats(&self) -> ReceiverStats {
        self.stats
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1_000_000;

    fn monitor(goal: u64, over: u64, net: u64) -> QueueMonitor {
        let cfg = OpfConfig::new(Thresholds::new(goal, over, net).unwrap());
        QueueMonitor::new(7, cfg).unwrap()
    }

    #[test]
    fn crc32c_check_value() {
        assert_eq!(crc32c(b"123456789"), 0xE306_9283);
        assert_eq!(crc32c(b""), 0);
    }

    #[test]
    fn encode_layout_is_as_documented() {
        let opf = Opf::new(0x0102_0304_0506_0708, 5_000, Rate::gbit(10)).unwrap();
        let f = encode(&opf);
        assert_eq!(&f[0..4], b"SOPF");
        assert_eq!(f[4], 1);
        assert_eq!(f[5], 1);
        assert_eq!(&f[6..8], &[0, 36]);
        assert_eq!(&f[8..16], &[1, 2, 3, 4, 5, 6, 7, 8]);
        assert_eq!(&f[16..24], &5_000u64.to_be_bytes());
        assert_eq!(&f[24..32], &10_000_000_000u64.to_be_bytes());
        assert_eq!(&f[32..36], &crc32c(&f[..32]).to_be_bytes());
        assert_eq!(decode(&f), Ok(opf));
        assert_eq!(encode_vec(&opf), f.to_vec());
    }

    /// A frame with a correct checksum around arbitrary values.
    fn raw(flow: u64, pause: u64, bps: u64) -> [u8; FRAME_LEN] {
        let mut f = [0u8; FRAME_LEN];
        f[0..4].copy_from_slice(&MAGIC);
        f[4] = VERSION;
        f[5] = TYPE_OPF;
        f[6..8].copy_from_slice(&(FRAME_LEN as u16).to_be_bytes());
        f[8..16].copy_from_slice(&flow.to_be_bytes());
        f[16..24].copy_from_slice(&pause.to_be_bytes());
        f[24..32].copy_from_slice(&bps.to_be_bytes());
        let crc = crc32c(&f[..32]);
        f[32..36].copy_from_slice(&crc.to_be_bytes());
        f
    }

    fn resum(f: &mut [u8; FRAME_LEN]) {
        let crc = crc32c(&f[..32]);
        f[32..36].copy_from_slice(&crc.to_be_bytes());
    }

    #[test]
    fn decode_says_why() {
        let good = raw(1, 1000, 1_000_000);
        assert!(decode(&good).is_ok());
        assert_eq!(
            decode(&good[..5]),
            Err(DecodeError::TooShort { len: 5, need: 8 })
        );
        assert_eq!(
            decode(&good[..20]),
            Err(DecodeError::TooShort { len: 20, need: 36 })
        );
        let mut b = good;
        b[0] = b'X';
        assert_eq!(decode(&b), Err(DecodeError::BadMagic { found: *b"XOPF" }));
        let mut b = good;
        b[4] = 2;
        assert_eq!(
            decode(&b),
            Err(DecodeError::UnsupportedVersion { version: 2 })
        );
        let mut b = good;
        b[5] = 9;
        assert_eq!(decode(&b), Err(DecodeError::UnknownType { kind: 9 }));
        let mut b = good;
        b[7] = 40;
        assert_eq!(decode(&b), Err(DecodeError::BadLength { field: 40 }));
        let mut long = good.to_vec();
        long.push(0);
        assert_eq!(decode(&long), Err(DecodeError::TrailingBytes { len: 37 }));
        let mut b = good;
        b[20] ^= 0x10;
        assert!(matches!(decode(&b), Err(DecodeError::BadChecksum { .. })));
        assert_eq!(decode(&raw(1, 1000, 0)), Err(DecodeError::ZeroRate));
        assert_eq!(
            decode(&raw(1, 1000, MAX_OPF_RATE_BPS + 1)),
            Err(DecodeError::AbsurdRate {
                bps: MAX_OPF_RATE_BPS + 1
            })
        );
        assert_eq!(
            decode(&raw(1, 1000, u64::MAX)),
            Err(DecodeError::AbsurdRate { bps: u64::MAX })
        );
        assert_eq!(
            decode(&raw(1, MAX_OPF_PAUSE_NS + 1, 1)),
            Err(DecodeError::AbsurdPause {
                pause_ns: MAX_OPF_PAUSE_NS + 1
            })
        );
        // Edges are valid.
        let edge = decode(&raw(u64::MAX, MAX_OPF_PAUSE_NS, MAX_OPF_RATE_BPS)).unwrap();
        assert_eq!(edge.flow(), u64::MAX);
        assert_eq!(edge.rate().bps(), MAX_OPF_RATE_BPS);
        let zero_pause = decode(&raw(3, 0, 1)).unwrap();
        assert_eq!(zero_pause.pause_ns(), 0);
        // The checksum covers the values: a good checksum is needed to reach them.
        let mut b = raw(1, 1000, 0);
        b[31] = 1;
        assert!(matches!(decode(&b), Err(DecodeError::BadChecksum { .. })));
        resum(&mut b);
        assert!(decode(&b).is_ok());
        // Messages say why.
        let msg = DecodeError::UnsupportedVersion { version: 3 }.to_string();
        assert!(msg.contains("unsupported version 3"), "{msg}");
        let msg = DecodeError::TrailingBytes { len: 40 }.to_string();
        assert!(msg.contains("4 after"), "{msg}");
    }

    proptest::proptest! {
        /// With a correct checksum, any values decode without panicking, and a frame is
        /// accepted exactly when its pause and rate are in range.
        #[test]
        fn values_behind_a_good_checksum(
            flow in proptest::prelude::any::<u64>(),
            pause in proptest::prop_oneof![
                0..=MAX_OPF_PAUSE_NS + 2,
                MAX_OPF_PAUSE_NS - 2..=MAX_OPF_PAUSE_NS + 2,
                proptest::prelude::any::<u64>(),
            ],
            bps in proptest::prop_oneof![
                0..=MAX_OPF_RATE_BPS + 2,
                0u64..=2,
                MAX_OPF_RATE_BPS - 2..=MAX_OPF_RATE_BPS + 2,
                proptest::prelude::any::<u64>(),
            ],
        ) {
            let got = decode(&raw(flow, pause, bps));
            let valid = pause <= MAX_OPF_PAUSE_NS && (1..=MAX_OPF_RATE_BPS).contains(&bps);
            proptest::prop_assert_eq!(got.is_ok(), valid, "{:?}", got);
            if let Ok(opf) = got {
                proptest::prop_assert_eq!(
                    (opf.flow(), opf.pause_ns(), opf.rate().bps()),
                    (flow, pause, bps)
                );
            }
        }
    }

    #[test]
    fn reasons_are_in_counter_order() {
        for (i, r) in DecodeReason::ALL.iter().enumerate() {
            assert_eq!(r.index(), i);
        }
        assert_eq!(DecodeError::ZeroRate.reason().name(), "zero_rate");
    }

    #[test]
    fn opf_new_refuses_what_decode_refuses() {
        assert_eq!(
            Opf::new(1, MAX_OPF_PAUSE_NS + 1, Rate::mbit(1)),
            Err(InvalidOpf::PauseTooLong {
                pause_ns: MAX_OPF_PAUSE_NS + 1
            })
        );
        let big = Rate::new(MAX_OPF_RATE_BPS + 1).unwrap();
        assert_eq!(
            Opf::new(1, 0, big),
            Err(InvalidOpf::RateTooHigh {
                bps: MAX_OPF_RATE_BPS + 1
            })
        );
    }

    #[test]
    fn thresholds_are_validated() {
        assert_eq!(Thresholds::new(0, 2, 3), Err(ConfigError::Zero("Th_goal")));
        assert_eq!(Thresholds::new(1, 0, 3), Err(ConfigError::Zero("Th_over")));
        assert_eq!(Thresholds::new(1, 2, 0), Err(ConfigError::Zero("Th_net")));
        for (g, o, n) in [(2, 2, 3), (3, 2, 4), (1, 3, 3), (1, 4, 3), (5, 4, 3)] {
            assert_eq!(
                Thresholds::new(g, o, n),
                Err(ConfigError::Order {
                    goal: g,
                    over: o,
                    net: n
                }),
                "{g} {o} {n}"
            );
        }
        let t = Thresholds::new(1, 2, 3).unwrap();
        assert_eq!((t.goal(), t.over(), t.net()), (1, 2, 3));
        assert!(EwmaWeight::new(0, 8).is_err());
        assert!(EwmaWeight::new(1, 0).is_err());
        assert!(EwmaWeight::new(9, 8).is_err());
        assert!(EwmaWeight::new(1, 1).is_ok());
        let mut cfg = OpfConfig::new(t);
        cfg.max_pause_ns = 0;
        assert_eq!(
            QueueMonitor::new(1, cfg).err(),
            Some(ConfigError::Zero("max_pause_ns"))
        );
        cfg.max_pause_ns = MAX_OPF_PAUSE_NS + 1;
        assert!(matches!(
            QueueMonitor::new(1, cfg),
            Err(ConfigError::PauseTooLong { .. })
        ));
        cfg.max_pause_ns = MS;
        cfg.floor = Rate::new(MAX_OPF_RATE_BPS + 1).unwrap();
        assert!(matches!(
            QueueMonitor::new(1, cfg),
            Err(ConfigError::FloorTooHigh { .. })
        ));
    }

    #[test]
    fn ewma_follows_the_documented_estimator() {
        let mut m = monitor(1000, 2000, 3000);
        assert_eq!(m.recv_rate_bps(), None);
        m.on_enqueue(0, 100_000);
        // 1250 bytes in 1 us = 10 Gbit/s: first sample taken as is.
        m.on_deliver(1_000, 1_250);
        assert_eq!(m.recv_rate_bps(), Some(10_000_000_000));
        // 1250 bytes in 2 us = 5 Gbit/s: 7/8 * 10 + 1/8 * 5 = 9.375 Gbit/s.
        m.on_deliver(3_000, 1_250);
        assert_eq!(m.recv_rate_bps(), Some(9_375_000_000));
        // Two deliveries at the same instant are one sample over the next interval:
        // (625 + 625) bytes in 1 us = 10 Gbit/s -> 7/8 * 9.375 + 1/8 * 10 = 9.453125 Gbit/s.
        m.on_deliver(3_000, 625);
        assert_eq!(m.recv_rate_bps(), Some(9_375_000_000));
        m.on_deliver(4_000, 625);
        assert_eq!(m.recv_rate_bps(), Some(9_453_125_000));
        assert_eq!(m.stats().samples, 3);
        assert_eq!(m.queued(), 100_000 - 3_750);
    }

    #[test]
    fn ewma_weight_is_configurable_and_idle_time_is_not_counted() {
        let t = Thresholds::new(1000, 2000, 3000).unwrap();
        let mut cfg = OpfConfig::new(t);
        cfg.ewma = EwmaWeight::new(1, 2).unwrap();
        let mut m = QueueMonitor::new(1, cfg).unwrap();
        m.on_enqueue(0, 2_500);
        m.on_deliver(1_000, 1_250); // 10 Gbit/s
        m.on_deliver(2_000, 1_250); // 10 Gbit/s; the queue is empty now
        assert_eq!(m.recv_rate_bps(), Some(10_000_000_000));
        // Idle for a second, then busy again: only the time since the enqueue counts.
        m.on_enqueue(1_000_000_000, 1_250);
        m.on_deliver(1_000_002_000, 1_250); // 5 Gbit/s
        assert_eq!(m.recv_rate_bps(), Some(7_500_000_000));
    }

    #[test]
    fn pause_time_formula() {
        let mut m = monitor(10_000, 20_000, 40_000);
        m.on_enqueue(0, 30_000);
        // Unknown rate: the floor (100 Mbit/s). 20 000 excess bytes = 160 000 bits
        // at 1e8 bit/s = 1.6 ms.
        assert_eq!(m.new_rate(), Rate::mbit(100));
        assert_eq!(m.pause_time(), 1_600_000);
        // 10 Gbit/s measured: 160 000 bits / 1e10 = 16 us.
        m.on_deliver(1_000, 1_250);
        m.on_enqueue(1_000, 1_250);
        assert_eq!(m.new_rate(), Rate::gbit(10));
        assert_eq!(m.pause_time(), 16_000);
        // Rounded up to a whole nanosecond: 1 excess byte at 10 Gbit/s = 0.8 ns -> 1 ns.
        m.set_queued(1_000, 10_001);
        assert_eq!(m.pause_time(), 1);
        // At or below the goal: no pause.
        m.set_queued(1_000, 10_000);
        assert_eq!(m.pause_time(), 0);
        // A rate below the floor is raised to it; a huge excess is capped at max_pause.
        let mut slow = monitor(10_000, 20_000, 40_000);
        slow.on_enqueue(0, 1);
        slow.on_deliver(1_000_000_000, 1); // 8 bit/s
        assert_eq!(slow.recv_rate_bps(), Some(8));
        assert_eq!(slow.new_rate(), Rate::mbit(100));
        slow.set_queued(1_000_000_000, 10_000_000);
        assert_eq!(slow.pause_time(), 10 * MS);
    }

    #[test]
    fn zero_rate_estimate_uses_the_floor() {
        let mut m = monitor(10_000, 20_000, 40_000);
        m.on_enqueue(0, 1);
        // 1 byte over 10 s rounds to 0 bit/s: never divided by.
        m.on_deliver(10_000_000_000, 1);
        assert_eq!(m.recv_rate_bps(), Some(0));
        m.set_queued(10_000_000_000, 30_000);
        assert_eq!(m.new_rate(), Rate::mbit(100));
        let mut out = Vec::new();
        let opf = m.poll(10_000_000_000, &mut out).unwrap().unwrap();
        assert_eq!(opf.rate(), Rate::mbit(100));
        assert_eq!(opf.pause_ns(), 1_600_000);
    }

    #[test]
    fn opf_sent_when_crossing_over_and_once_per_pause() {
        let mut m = monitor(10_000, 20_000, 40_000);
        let mut out: Vec<Opf> = Vec::new();
        m.on_enqueue(0, 20_000);
        assert!(!m.is_over());
        assert_eq!(m.poll(0, &mut out).unwrap(), None);
        assert_eq!(m.next_check(), None);
        m.on_enqueue(0, 1);
        assert!(m.is_over());
        let first = m.poll(0, &mut out).unwrap().unwrap();
        assert_eq!(first.flow(), 7);
        // (20 001 - 10 000) bytes at the 100 Mbit/s floor = 800 080 ns.
        assert_eq!(first.pause_ns(), 800_080);
        assert_eq!(m.next_check(), Some(800_080));
        // Still above Th_over, more arriving: nothing until the pause has passed.
        m.on_enqueue(1_000, 5_000);
        assert_eq!(m.poll(1_000, &mut out).unwrap(), None);
        assert_eq!(m.poll(800_079, &mut out).unwrap(), None);
        assert_eq!(out.len(), 1);
        // Pause over and still above Th_over: a second frame.
        let second = m.poll(800_080, &mut out).unwrap().unwrap();
        assert_eq!(out, vec![first, second]);
        // After the second pause, the queue has drained below Th_over: no frame.
        let end = 800_080 + second.pause_ns();
        m.on_deliver(end - 1, 10_000);
        assert!(!m.is_over());
        assert_eq!(m.poll(end, &mut out).unwrap(), None);
        assert_eq!(m.next_check(), None);
        // Crossing again later sends at once.
        m.on_enqueue(end + 5, 20_000);
        assert!(m.poll(end + 5, &mut out).unwrap().is_some());
        assert_eq!(m.stats().opfs, 3);
    }

    #[test]
    fn above_net_is_reported() {
        let mut m = monitor(10, 20, 40);
        m.on_enqueue(0, 40);
        assert!(m.is_over() && !m.above_net());
        m.on_enqueue(0, 1);
        assert!(m.above_net());
        m.on_deliver(1, 1);
        assert!(!m.above_net());
    }

    struct Refusing;
    impl OpfChannel for Refusing {
        fn send(&mut self, _: &Opf) -> Result<(), ChannelError> {
            Err(ChannelError::Busy)
        }
    }

    #[test]
    fn refused_frames_are_retried() {
        let mut m = monitor(10, 20, 40);
        m.on_enqueue(0, 30);
        assert!(matches!(m.poll(0, &mut Refusing), Err(ChannelError::Busy)));
        assert_eq!(m.stats().send_errors, 1);
        let mut out = Vec::new();
        assert!(m.poll(1, &mut out).unwrap().is_some());
        assert_eq!(m.stats().opfs, 1);
        // Dyn channels work too.
        let dynamic: &mut dyn OpfChannel = &mut out;
        let mut m2 = monitor(10, 20, 40);
        m2.on_enqueue(0, 30);
        assert!(m2.poll(0, dynamic).unwrap().is_some());
    }

    #[test]
    fn receiver_pauses_then_rate_limits() {
        let mut r = OpfReceiver::new();
        assert!(r.add_flow(7));
        assert!(!r.add_flow(7));
        let opf = Opf::new(7, 5 * MS, Rate::gbit(2)).unwrap();
        let acts = r.on_opf(100, &opf).unwrap();
        assert_eq!(
            acts,
            [
                Action::Pause {
                    flow: 7,
                    until: 100 + 5 * MS
                },
                Action::RateLimit {
                    flow: 7,
                    rate: Rate::gbit(2)
                }
            ]
        );
        assert!(r.is_paused(7, 100));
        assert!(r.is_paused(7, 100 + 5 * MS - 1));
        assert!(!r.is_paused(7, 100 + 5 * MS));
        assert_eq!(r.paused_until(7), Some(100 + 5 * MS));
        assert_eq!(r.rate(7), Some(Rate::gbit(2)));
        // A newer frame replaces the older one.
        let newer = Opf::new(7, MS, Rate::gbit(1)).unwrap();
        r.on_opf(200, &newer).unwrap();
        assert!(!r.is_paused(7, 200 + MS));
        assert_eq!(r.rate(7), Some(Rate::gbit(1)));
        assert!(r.lift(7));
        assert!(!r.lift(7));
        assert_eq!(r.rate(7), None);
        // Unknown flows are counted and change nothing.
        let stranger = Opf::new(8, MS, Rate::gbit(1)).unwrap();
        assert_eq!(r.on_opf(300, &stranger), None);
        assert!(!r.is_paused(8, 300));
        assert_eq!(r.rate(8), None);
        assert_eq!(
            r.stats(),
            ReceiverStats {
                applied: 2,
                unknown_flow: 1
            }
        );
        assert!(r.remove_flow(7));
        assert!(!r.is_paused(7, 201));
        assert_eq!(r.on_opf(300, &opf), None);
        assert_eq!(r.stats().unknown_flow, 2);
    }

    #[test]
    fn pause_near_the_end_of_time_saturates() {
        let mut r = OpfReceiver::with_capacity(1);
        r.add_flow(1);
        let opf = Opf::new(1, MAX_OPF_PAUSE_NS, Rate::mbit(1)).unwrap();
        let acts = r.on_opf(u64::MAX - 1, &opf).unwrap();
        assert_eq!(
            acts[0],
            Action::Pause {
                flow: 1,
                until: u64::MAX
            }
        );
        let mut m = monitor(10, 20, 40);
        m.on_enqueue(u64::MAX, 30);
        assert!(m.poll(u64::MAX, &mut Vec::new()).unwrap().is_some());
        assert_eq!(m.next_check(), Some(u64::MAX));
    }
}
