//! Ports and namespaces against the real kernel: taps moved into namespaces, AF_PACKET on
//! veths (and an engine over them whose interface is deleted and created again), and the setup
//! guard that creates and removes them.
//!
//! These tests need root (network namespaces, taps, raw sockets); as another user they print a
//! note and pass. Every name includes the process id, so parallel runs do not collide; every
//! namespace and interface is created through a `Setup` (or a tap, which dies with its
//! descriptor), so nothing outlives a test. Traffic comes from sockets opened inside the
//! namespaces (`netns::in_netns`), not from `ping` (not installed everywhere). Timeouts are
//! generous: nothing here depends on the machine's speed.

use std::io::{self, Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, mpsc};
use std::thread;
use std::time::{Duration, Instant};

use nix::sys::eventfd::{EfdFlags, EventFd};
use sluice_dp::buffers::BUF_SIZE;
use sluice_dp::config::{AtBound, Config, Malformed, Mode};
use sluice_dp::control::{ControlHandle, Reply, Request};
use sluice_dp::daemon::engine::{Engine, Internal};
use sluice_dp::daemon::{Daemon, now_ns};
use sluice_dp::datapath::{Datapath, DatapathConfig, LinkSpec};
use sluice_dp::netns::{self, NetnsError, Setup, Step, in_netns, interface_exists, netns_exists};
use sluice_dp::port::af_packet::{AfPacket, LOOK_AGAIN_NS, RingConfig};
use sluice_dp::port::tap::Tap;
use sluice_dp::port::{Port, PortEvent, VNET_HDR_LEN, VnetHdr};
use sluice_dp::stats::Snapshot;

const WAIT: Duration = Duration::from_secs(20);

fn is_root() -> bool {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|ids| ids.split_whitespace().nth(1))
        .is_some_and(|euid| euid == "0")
}

macro_rules! require_root {
    () => {
        if !is_root() {
            eprintln!("note: skipped: needs root (network namespaces, taps, raw sockets)");
            return;
        }
    };
}

/// A namespace name unique to this process and test.
fn ns(tag: &str) -> String {
    format!("sltest{}{tag}", std::process::id())
}

/// An interface name unique to this process and test (at most 15 characters).
fn ifn(tag: &str) -> String {
    let n = format!("sl{}{tag}", std::process::id());
    assert!(n.len() <= 15, "{n}");
    n
}

// ---------------------------------------------------------------------------------------------
// Frames

const ETH_ARP: u16 = 0x0806;
const ETH_IPV4: u16 = 0x0800;
const ETH_TEST: u16 = 0x88b5; // IEEE local experimental
const BROADCAST: [u8; 6] = [0xff; 6];
const FAKE_MAC: [u8; 6] = [0x02, 0, 0, 0, 0, 0x11];

/// A frame with an empty virtio-net header.
fn eth(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
    let mut f = vec![0u8; VNET_HDR_LEN];
    f.extend_from_slice(&dst);
    f.extend_from_slice(&src);
    f.extend_from_slice(&ethertype.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

fn ipv4_udp(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
    let total = 20 + 8 + payload.len();
    let mut p = vec![0x45, 0, 0, 0, 0, 1, 0x40, 0, 64, 17, 0, 0];
    p[2..4].copy_from_slice(&(total as u16).to_be_bytes());
    p.extend_from_slice(&src.octets());
    p.extend_from_slice(&dst.octets());
    let sum = p
        .chunks(2)
        .map(|w| u16::from_be_bytes([w[0], w[1]]) as u32)
        .sum::<u32>();
    let sum = (sum & 0xffff) + (sum >> 16);
    let sum = (sum & 0xffff) + (sum >> 16);
    p[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    p.extend_from_slice(&sport.to_be_bytes());
    p.extend_from_slice(&dport.to_be_bytes());
    p.extend_from_slice(&((8 + payload.len()) as u16).to_be_bytes());
    p.extend_from_slice(&[0, 0]); // no UDP checksum (allowed over IPv4)
    p.extend_from_slice(payload);
    p
}

fn arp(oper: u16, sha: [u8; 6], spa: Ipv4Addr, tha: [u8; 6], tpa: Ipv4Addr) -> Vec<u8> {
    let mut p = vec![0, 1, 0x08, 0x00, 6, 4];
    p.extend_from_slice(&oper.to_be_bytes());
    p.extend_from_slice(&sha);
    p.extend_from_slice(&spa.octets());
    p.extend_from_slice(&tha);
    p.extend_from_slice(&tpa.octets());
    p
}

/// The Ethernet frame after the virtio-net header.
fn ether(frame: &[u8]) -> &[u8] {
    &frame[VNET_HDR_LEN.min(frame.len())..]
}

fn ethertype(frame: &[u8]) -> Option<u16> {
    let e = ether(frame);
    Some(u16::from_be_bytes([*e.get(12)?, *e.get(13)?]))
}

fn src_mac(frame: &[u8]) -> Option<[u8; 6]> {
    ether(frame).get(6..12)?.try_into().ok()
}

/// (sender MAC, sender IP, target IP) of an ARP request.
fn arp_request(frame: &[u8]) -> Option<([u8; 6], Ipv4Addr, Ipv4Addr)> {
    if ethertype(frame)? != ETH_ARP {
        return None;
    }
    let a = ether(frame).get(14..42)?;
    if a[6..8] != [0, 1] {
        return None;
    }
    let sha: [u8; 6] = a[8..14].try_into().ok()?;
    let ip = |b: &[u8]| Ipv4Addr::new(b[0], b[1], b[2], b[3]);
    Some((sha, ip(&a[14..18]), ip(&a[24..28])))
}

/// (destination IP, destination port, payload) of a UDP/IPv4 frame.
fn udp(frame: &[u8]) -> Option<(Ipv4Addr, u16, Vec<u8>)> {
    if ethertype(frame)? != ETH_IPV4 {
        return None;
    }
    let ip = ether(frame).get(14..)?;
    let ihl = (ip.first()? & 0x0f) as usize * 4;
    if *ip.get(9)? != 17 {
        return None;
    }
    let dst = Ipv4Addr::new(ip[16], ip[17], ip[18], ip[19]);
    let u = ip.get(ihl..)?;
    let dport = u16::from_be_bytes([*u.get(2)?, *u.get(3)?]);
    Some((dst, dport, u.get(8..)?.to_vec()))
}

/// Read frames from `port` until one satisfies `want` (or time runs out).
fn recv_until(port: &mut dyn Port, want: impl Fn(&[u8]) -> bool) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; BUF_SIZE];
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        match port.recv(&mut buf) {
            Ok(Some(n)) => {
                assert!(VnetHdr::read(&buf[..n]).is_some());
                if want(&buf[..n]) {
                    return Some(buf[..n].to_vec());
                }
            }
            Ok(None) => thread::sleep(Duration::from_millis(1)),
            Err(e) => panic!("recv on {}: {e}", port.ifname()),
        }
    }
    None
}

/// Send, waiting while the port has no room.
fn send(port: &mut dyn Port, frame: &[u8]) {
    let deadline = Instant::now() + WAIT;
    loop {
        match port.send(frame) {
            Ok(()) => return,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_micros(100))
            }
            Err(e) => panic!("send on {}: {e}", port.ifname()),
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Forwarding between two ports, as the daemon will (without scheduling)

#[derive(Debug, Default)]
struct Forwarded {
    frames: u64,
    gso_frames: u64,
    largest: usize,
}

struct Forwarder<P> {
    stop: Arc<AtomicBool>,
    thread: thread::JoinHandle<(P, P, Forwarded)>,
}

impl<P: Port + 'static> Forwarder<P> {
    fn start(mut a: P, mut b: P) -> Forwarder<P> {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = thread::spawn(move || {
            let mut stats = Forwarded::default();
            let mut buf = vec![0u8; BUF_SIZE];
            while !flag.load(Ordering::Relaxed) {
                let mut idle = true;
                for dir in 0..2 {
                    let (src, dst): (&mut P, &mut P) = if dir == 0 {
                        (&mut a, &mut b)
                    } else {
                        (&mut b, &mut a)
                    };
                    for _ in 0..64 {
                        match src.recv(&mut buf) {
                            Ok(Some(n)) => {
                                idle = false;
                                stats.frames += 1;
                                stats.largest = stats.largest.max(n);
                                if VnetHdr::read(&buf[..n]).is_some_and(|h| h.is_gso()) {
                                    stats.gso_frames += 1;
                                }
                                send(dst, &buf[..n]);
                            }
                            Ok(None) => break,
                            Err(e) => panic!("forwarding from {}: {e}", src.ifname()),
                        }
                    }
                }
                if idle {
                    thread::sleep(Duration::from_micros(200));
                }
            }
            (a, b, stats)
        });
        Forwarder { stop, thread }
    }

    fn stop(self) -> (P, P, Forwarded) {
        self.stop.store(true, Ordering::Relaxed);
        match self.thread.join() {
            Ok(r) => r,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
}

/// `UdpSocket::recv_from`, again when a signal interrupts it: the kernel never restarts a
/// receive that has a timeout (signal(7)), and one failed so once in CI.
fn recv_from(sock: &UdpSocket, buf: &mut [u8]) -> io::Result<(usize, SocketAddr)> {
    loop {
        match sock.recv_from(buf) {
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            other => return other,
        }
    }
}

/// Send `bytes` over TCP from namespace `client_ns` to a listener on `server_ip` in
/// `server_ns`, and check they all arrive intact.
fn tcp_transfer(client_ns: &str, server_ns: &str, server_ip: Ipv4Addr, bytes: usize) {
    let listener = in_netns(server_ns, || TcpListener::bind((server_ip, 0)))
        .expect("enter")
        .expect("listen");
    let addr: SocketAddr = listener.local_addr().expect("address");
    listener.set_nonblocking(true).expect("nonblocking");
    let data: Vec<u8> = (0..bytes).map(|i| (i % 251) as u8).collect();
    let expected = data.clone();
    let client_ns = client_ns.to_string();
    let client = thread::spawn(move || {
        let mut s = in_netns(&client_ns, || TcpStream::connect_timeout(&addr, WAIT))
            .expect("enter")
            .expect("connect");
        s.set_write_timeout(Some(WAIT * 3)).expect("timeout");
        s.write_all(&data).expect("write");
        s.shutdown(std::net::Shutdown::Write).expect("shutdown");
    });
    let deadline = Instant::now() + WAIT;
    let mut conn = loop {
        match listener.accept() {
            Ok((c, _)) => break c,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock && Instant::now() < deadline => {
                thread::sleep(Duration::from_millis(5))
            }
            Err(e) => panic!("accept: {e}"),
        }
    };
    conn.set_nonblocking(false).expect("blocking");
    conn.set_read_timeout(Some(WAIT * 3)).expect("timeout");
    let mut got = Vec::new();
    conn.read_to_end(&mut got).expect("read");
    client.join().expect("client");
    assert_eq!(got.len(), expected.len());
    assert!(got == expected, "the bytes arrived changed");
}

// ---------------------------------------------------------------------------------------------
// Taps

/// Whether interface `ifname` (in namespace `netns`) is gone, or goes within [`WAIT`]. A tap
/// vanishes when the last copy of its descriptor is closed, and a process that another test
/// spawns holds a copy of every descriptor from its fork until its exec closes them.
fn vanishes(netns: Option<&str>, ifname: &str) -> bool {
    let deadline = Instant::now() + WAIT;
    while interface_exists(netns, ifname).expect("ip") {
        if Instant::now() >= deadline {
            return false;
        }
        thread::sleep(Duration::from_millis(5));
    }
    true
}

#[test]
fn taps_in_two_namespaces_carry_frames_and_tcp() {
    require_root!();
    let (na, nb) = (ns("ta"), ns("tb"));
    let (ia, ib) = (ifn("ta"), ifn("tb"));
    let (ip_a, ip_b) = (Ipv4Addr::new(10, 77, 1, 1), Ipv4Addr::new(10, 77, 1, 2));
    let mut a = Tap::create(&ia).expect("tap a");
    let mut b = Tap::create(&ib).expect("tap b");
    let mut setup = Setup::new();
    setup
        .place(&ia, &na, Some((ip_a.into(), 24)), Some(0))
        .expect("place a");
    setup
        .place(&ib, &nb, Some((ip_b.into(), 24)), Some(0))
        .expect("place b");
    assert!(
        interface_exists(Some(&na), &ia).expect("ip") && !interface_exists(None, &ia).expect("ip")
    );

    // What the namespace sends appears on its tap's descriptor: first, an ARP request.
    let sock_a = in_netns(&na, || UdpSocket::bind((ip_a, 0)))
        .expect("enter")
        .expect("bind");
    sock_a.send_to(b"hello", (ip_b, 9)).expect("send");
    let req = recv_until(&mut a, |f| {
        arp_request(f).is_some_and(|(_, _, tpa)| tpa == ip_b)
    });
    let (sha, spa, _) = req
        .as_deref()
        .and_then(arp_request)
        .expect("an ARP request for b on tap a");
    assert_eq!(spa, ip_a);
    assert_eq!(sha, netns::mac_address(Some(&na), &ia).expect("mac"));

    // A frame longer than the buffer is cut by the kernel: an error, not a short frame.
    sock_a
        .send_to(b"hello", (Ipv4Addr::new(10, 77, 1, 3), 9))
        .expect("send");
    let mut tiny = [0u8; 30];
    let deadline = Instant::now() + WAIT;
    let cut = loop {
        match a.recv(&mut tiny) {
            Ok(None) if Instant::now() < deadline => thread::sleep(Duration::from_millis(1)),
            other => break other,
        }
    };
    let e = cut.expect_err("a cut frame");
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(e.to_string().contains("may be cut"), "{e}");

    // What is written to a tap arrives in its namespace.
    let sock_b = in_netns(&nb, || UdpSocket::bind((ip_b, 0)))
        .expect("enter")
        .expect("bind");
    sock_b.set_read_timeout(Some(WAIT)).expect("timeout");
    let port_b = sock_b.local_addr().expect("address").port();
    let mac_b = netns::mac_address(Some(&nb), &ib).expect("mac");
    b.send(&eth(
        mac_b,
        FAKE_MAC,
        ETH_IPV4,
        &ipv4_udp(ip_a, ip_b, 4242, port_b, b"from the tap"),
    ))
    .expect("write");
    let mut buf = [0u8; 64];
    let (n, from) = recv_from(&sock_b, &mut buf).expect("the frame written to tap b arrives in b");
    assert_eq!(&buf[..n], b"from the tap");
    assert_eq!(from, SocketAddr::from((ip_a, 4242)));

    // Forwarding between the two descriptors joins the namespaces: UDP both ways, then TCP,
    // whose GSO super-frames pass whole.
    let fwd = Forwarder::start(a, b);
    sock_a.set_read_timeout(Some(WAIT)).expect("timeout");
    sock_a.send_to(b"ping", (ip_b, port_b)).expect("send");
    let (n, from) = recv_from(&sock_b, &mut buf).expect("a to b across the forwarder");
    assert_eq!(&buf[..n], b"ping");
    sock_b.send_to(b"pong", from).expect("send");
    let (n, _) = recv_from(&sock_a, &mut buf).expect("b to a across the forwarder");
    assert_eq!(&buf[..n], b"pong");
    tcp_transfer(&na, &nb, ip_b, 4 << 20);
    let (a, b, stats) = fwd.stop();
    assert!(
        stats.gso_frames > 0,
        "no GSO super-frame crossed: {stats:?}"
    );
    assert!(stats.largest > 1514 + VNET_HDR_LEN, "{stats:?}");
    let (ca, cb) = (a.counters(), b.counters());
    assert!(ca.rx_frames > 0 && cb.tx_frames > 0 && cb.rx_frames > 0 && ca.tx_frames > 0);
    assert_eq!(ca.tx_errors + cb.tx_errors, 0);

    setup.teardown().expect("teardown");
    assert!(!netns_exists(&na) && !netns_exists(&nb));
    // Moved back home, still open.
    assert!(interface_exists(None, &ia).expect("ip"));
    drop((a, b));
    assert!(vanishes(None, &ia) && vanishes(None, &ib));
}

#[test]
fn tap_names_in_use_are_refused_clearly() {
    require_root!();
    let name = ifn("tu");
    let tap = Tap::create(&name).expect("tap");
    assert_eq!(tap.ifname(), name);
    let e = Tap::create(&name).expect_err("second tap of one name");
    assert_eq!(
        e.to_string(),
        format!("cannot create tap `{name}`: name already in use by another tap")
    );
    let e = Tap::create("lo").expect_err("lo is not a tap");
    assert!(
        e.to_string().contains(
            "cannot create tap `lo`: name already in use by an interface that is not a tap"
        ),
        "{e}"
    );
    drop(tap);
    assert!(vanishes(None, &name));
}

/// Per-core engines open one tap queue each: every queue is a working port of one device.
#[test]
fn a_multi_queue_tap_has_one_port_per_queue() {
    require_root!();
    let name = ifn("mq");
    let taps = Tap::create_queues(&name, 3).expect("multi-queue tap");
    assert_eq!(taps.len(), 3);
    assert!(taps.iter().all(|t| t.ifname() == name));
    let queues = std::fs::read_dir(format!("/sys/class/net/{name}/queues"))
        .expect("sysfs")
        .filter_map(|e| e.ok()?.file_name().into_string().ok())
        .filter(|q| q.starts_with("tx-"))
        .count();
    assert_eq!(queues, 3, "the device has a transmit queue per descriptor");
    let single = Tap::create_queues(&ifn("sq"), 1).expect("one queue");
    assert_eq!(single.len(), 1);
    drop(taps);
    assert!(vanishes(None, &name), "gone with its last queue");
}

/// Deletes interface `ifname` of the daemon's namespace when dropped (if it is still there):
/// for devices a test makes without a descriptor that would take them along.
struct DeleteLink(String);

impl Drop for DeleteLink {
    fn drop(&mut self) {
        if interface_exists(None, &self.0).unwrap_or(false) {
            let _ = netns::ip(&["link", "del", "dev", &self.0]);
        }
    }
}

/// The number of transmit queues of interface `ifname` (one per open tap queue).
fn tx_queues(ifname: &str) -> usize {
    std::fs::read_dir(format!("/sys/class/net/{ifname}/queues"))
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .filter(|q| q.starts_with("tx-"))
                .count()
        })
        .unwrap_or(0)
}

/// Creating a tap whose name a tap already has, which no descriptor of ours holds: a
/// persistent tap (`ip tuntap add`), or another daemon's multi-queue tap. `TUNSETIFF` without
/// `IFF_TUN_EXCL` attached the port to that device: the daemon then forwarded, moved and
/// addressed a device it did not create, and two daemons' engines shared one multi-queue tap,
/// each reading half of the other's flows. Now a port's first queue is made with
/// `IFF_TUN_EXCL`, which refuses any device of that name, and the device is left alone.
#[test]
fn a_tap_never_attaches_to_a_device_it_did_not_create() {
    require_root!();
    let persistent = ifn("tp");
    netns::ip(&["tuntap", "add", "dev", &persistent, "mode", "tap"]).expect("persistent tap");
    let _persistent = DeleteLink(persistent.clone());
    let e = Tap::create(&persistent).expect_err("a persistent tap of that name exists");
    assert_eq!(
        e.to_string(),
        format!("cannot create tap `{persistent}`: name already in use by another tap")
    );
    let persistent_mq = ifn("tpm");
    netns::ip(&[
        "tuntap",
        "add",
        "dev",
        &persistent_mq,
        "mode",
        "tap",
        "multi_queue",
    ])
    .expect("persistent multi-queue tap");
    let _persistent_mq = DeleteLink(persistent_mq.clone());
    let before = tx_queues(&persistent_mq);
    let e = Tap::create_queues(&persistent_mq, 2).expect_err("a persistent tap of that name");
    assert!(e.to_string().contains("name already in use"), "{e}");
    assert_eq!(
        tx_queues(&persistent_mq),
        before,
        "no queue was attached to it"
    );

    let mq = ifn("tmq");
    let ours = Tap::create_queues(&mq, 2).expect("multi-queue tap");
    let e = Tap::create_queues(&mq, 2).expect_err("another daemon's multi-queue tap");
    assert_eq!(
        e.to_string(),
        format!("cannot create tap `{mq}`: name already in use by another tap")
    );
    assert_eq!(tx_queues(&mq), 2, "no queue was attached to it");
    drop(ours);
    assert!(vanishes(None, &mq));
}

#[test]
fn tap_errors_are_counted() {
    require_root!();
    let name = ifn("te");
    let mut tap = Tap::create(&name).expect("tap");
    let mut buf = vec![0u8; BUF_SIZE];
    assert!(
        tap.recv(&mut buf).expect("recv").is_none(),
        "a new tap has nothing to read"
    );
    let e = tap.send(&[0u8; 4]).expect_err("no header");
    assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    let e = tap
        .send(&eth(BROADCAST, FAKE_MAC, ETH_TEST, &[0; 50]))
        .expect_err("the link is down");
    assert!(e.to_string().contains("link down"), "{e}");
    assert_eq!(tap.counters().tx_errors, 2);
    assert_eq!(tap.counters().tx_frames, 0);
}

// ---------------------------------------------------------------------------------------------
// AF_PACKET

/// Per-core engines open one AF_PACKET socket each in a fanout group: together they read
/// every frame, each flow's frames on one socket, and both sockets get flows.
#[test]
fn af_packet_fanout_spreads_flows_over_the_group() {
    require_root!();
    let n = ns("pf");
    let (v0, v1) = (ifn("f0"), ifn("f1"));
    let (ip0, ip1) = (Ipv4Addr::new(10, 79, 0, 1), Ipv4Addr::new(10, 79, 0, 2));
    let mut setup = Setup::new();
    setup.netns(&n).expect("netns");
    setup.add_veth(Some(&n), &v0, &v1).expect("veth");
    setup
        .add_address(Some(&n), &v1, ip1.into(), 24)
        .expect("address");
    setup.link_up(Some(&n), &v0).expect("up");
    setup.link_up(Some(&n), &v1).expect("up");
    let mac = FAKE_MAC
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":");
    netns::ip(&[
        "-n",
        &n,
        "neigh",
        "add",
        &ip0.to_string(),
        "lladdr",
        &mac,
        "dev",
        &v1,
    ])
    .expect("neigh");
    let cfg = RingConfig {
        fanout: Some(std::process::id() as u16),
        ..RingConfig::default()
    };
    let mut ports: Vec<AfPacket> = (0..2)
        .map(|_| {
            in_netns(&n, || AfPacket::open_with(&v0, cfg))
                .expect("enter")
                .expect("open")
        })
        .collect();
    const FLOWS: u16 = 32;
    let socks: Vec<UdpSocket> = (0..FLOWS)
        .map(|_| {
            in_netns(&n, || UdpSocket::bind((ip1, 0)))
                .expect("enter")
                .expect("bind")
        })
        .collect();
    for (i, s) in socks.iter().enumerate() {
        s.send_to(format!("flow {i}").as_bytes(), (ip0, 7000))
            .expect("send");
    }
    let mut seen = vec![Vec::new(); 2];
    let deadline = Instant::now() + WAIT;
    let mut frame = vec![0u8; BUF_SIZE];
    while seen.iter().map(Vec::len).sum::<usize>() < usize::from(FLOWS) && Instant::now() < deadline
    {
        let mut idle = true;
        for (p, port) in ports.iter_mut().enumerate() {
            if let Some(len) = port.recv(&mut frame).expect("recv") {
                idle = false;
                if let Some((_, 7000, payload)) = udp(&frame[..len]) {
                    seen[p].push(String::from_utf8_lossy(&payload).to_string());
                }
            }
        }
        if idle {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let mut all: Vec<String> = seen.concat();
    all.sort();
    all.dedup();
    assert_eq!(
        all.len(),
        usize::from(FLOWS),
        "every datagram read exactly once by the group: {seen:?}"
    );
    assert_eq!(
        seen[0].len() + seen[1].len(),
        usize::from(FLOWS),
        "no frame read twice"
    );
    assert!(
        seen.iter().all(|s| !s.is_empty()),
        "both sockets got flows: {seen:?}"
    );
}

#[test]
fn af_packet_reads_and_writes_real_frames() {
    require_root!();
    let n = ns("pa");
    let (v0, v1) = (ifn("p0"), ifn("p1"));
    let (ip0, ip1) = (Ipv4Addr::new(10, 78, 0, 1), Ipv4Addr::new(10, 78, 0, 2));
    let mut setup = Setup::new();
    setup.netns(&n).expect("netns");
    setup.add_veth(Some(&n), &v0, &v1).expect("veth");
    setup
        .add_address(Some(&n), &v1, ip1.into(), 24)
        .expect("address");
    setup.link_up(Some(&n), &v0).expect("up");
    setup.link_up(Some(&n), &v1).expect("up");
    let mac1 = netns::mac_address(Some(&n), &v1).expect("mac");

    let mut port = in_netns(&n, || AfPacket::open(&v0))
        .expect("enter")
        .expect("open");
    assert!(port.ignores_outgoing());
    assert_eq!(port.config(), RingConfig::default());

    // The other end asks for 10.78.0.1: the port reads the request ...
    let sock = in_netns(&n, || UdpSocket::bind((ip1, 0)))
        .expect("enter")
        .expect("bind");
    sock.set_read_timeout(Some(WAIT)).expect("timeout");
    sock.send_to(b"to the port", (ip0, 7777)).expect("send");
    let req = recv_until(&mut port, |f| {
        arp_request(f).is_some_and(|(_, _, tpa)| tpa == ip0)
    });
    let (sha, _, _) = req
        .as_deref()
        .and_then(arp_request)
        .expect("an ARP request on the port");
    assert_eq!(sha, mac1);
    // ... answers it by sending a reply, and reads the datagram that was waiting for it.
    port.send(&eth(
        sha,
        FAKE_MAC,
        ETH_ARP,
        &arp(2, FAKE_MAC, ip0, sha, ip1),
    ))
    .expect("send the reply");
    let got = recv_until(&mut port, |f| {
        udp(f).is_some_and(|(dst, dport, _)| dst == ip0 && dport == 7777)
    });
    let got = got.expect("the datagram, sent once the reply arrived");
    assert_eq!(&ether(&got)[..6], &FAKE_MAC);
    assert_eq!(udp(&got).map(|u| u.2), Some(b"to the port".to_vec()));

    // A frame sent through the port reaches a socket behind the other end.
    let dport = sock.local_addr().expect("address").port();
    port.send(&eth(
        mac1,
        FAKE_MAC,
        ETH_IPV4,
        &ipv4_udp(ip0, ip1, 7777, dport, b"from the port"),
    ))
    .expect("send");
    let mut buf = [0u8; 64];
    let (len, from) = recv_from(&sock, &mut buf).expect("the frame sent through the port arrives");
    assert_eq!(&buf[..len], b"from the port");
    assert_eq!(from, SocketAddr::from((ip0, 7777)));

    // The port does not read back its own transmissions. (A bounded look: a pass can only
    // be too lenient, never spurious.)
    let deadline = Instant::now() + Duration::from_millis(200);
    let mut frame = vec![0u8; BUF_SIZE];
    while Instant::now() < deadline {
        match port.recv(&mut frame).expect("recv") {
            Some(len) => assert_ne!(
                src_mac(&frame[..len]),
                Some(FAKE_MAC),
                "read back its own frame"
            ),
            None => thread::sleep(Duration::from_millis(2)),
        }
    }

    // Errors: no header; longer than the link's MTU.
    assert_eq!(
        port.send(&[0u8; 6]).expect_err("no header").kind(),
        io::ErrorKind::InvalidInput
    );
    let e = port
        .send(&eth(mac1, FAKE_MAC, ETH_TEST, &[0; 3000]))
        .expect_err("over the MTU");
    assert!(
        e.to_string()
            .contains(&format!("AF_PACKET port `{v0}`: send of")),
        "{e}"
    );
    let c = port.counters();
    assert!(c.rx_frames >= 2, "{c:?}");
    assert_eq!(
        (c.tx_frames, c.tx_errors, c.kernel_drops),
        (2, 2, 0),
        "{c:?}"
    );

    drop(port);
    setup.teardown().expect("teardown");
    assert!(!netns_exists(&n));
}

#[test]
fn af_packet_counts_kernel_drops_and_truncated_frames() {
    require_root!();
    let n = ns("pd");
    let (d0, d1) = (ifn("d0"), ifn("d1"));
    let mut setup = Setup::new();
    setup.netns(&n).expect("netns");
    setup.add_veth(Some(&n), &d0, &d1).expect("veth");
    for d in [&d0, &d1] {
        netns::ip(&["-n", &n, "link", "set", "dev", d, "mtu", "9000"]).expect("mtu");
        setup.link_up(Some(&n), d).expect("up");
    }
    // Four blocks of a page: a dozen frames fill the ring.
    let tiny = RingConfig {
        block_size: 4096,
        block_count: 4,
        retire_timeout_ms: 1,
        promiscuous: false,
        fanout: None,
    };
    let mut small = in_netns(&n, || AfPacket::open_with(&d0, tiny))
        .expect("enter")
        .expect("open");
    let mut sender = in_netns(&n, || AfPacket::open(&d1))
        .expect("enter")
        .expect("open");
    let marker = eth(BROADCAST, FAKE_MAC, ETH_TEST, &[3; 46]);
    let is_marker = |f: &[u8]| ethertype(f) == Some(ETH_TEST) && ether(f).get(14) == Some(&3);

    // A frame longer than a block is truncated by the kernel: skipped and counted. It closes
    // the block being filled, even an empty one, and needs the next one free: the ring is
    // emptied first (the other end's IPv6 chatter lands in it too).
    let mut buf = vec![0u8; BUF_SIZE];
    while small.recv(&mut buf).expect("recv").is_some() {}
    send(&mut sender, &eth(BROADCAST, FAKE_MAC, ETH_TEST, &[7; 6000]));
    let deadline = Instant::now() + WAIT;
    while small.truncated() == 0 && Instant::now() < deadline {
        if let Some(len) = small.recv(&mut buf).expect("recv") {
            assert_ne!(
                ether(&buf[..len]).get(14),
                Some(&7),
                "the long frame, cut, was returned"
            );
        } else {
            thread::sleep(Duration::from_millis(1));
        }
    }
    assert_eq!(small.truncated(), 1, "{:?}", small.counters());
    assert!(small.counters().kernel_drops >= 1);

    // More than the ring holds, unread: the kernel drops, PACKET_STATISTICS tells.
    for _ in 0..64 {
        send(&mut sender, &eth(BROADCAST, FAKE_MAC, ETH_TEST, &[2; 1000]));
    }
    let deadline = Instant::now() + WAIT;
    while small.counters().kernel_drops <= small.truncated() && Instant::now() < deadline {
        thread::sleep(Duration::from_millis(5));
    }
    let drops = small.counters().kernel_drops - small.truncated();
    assert!(drops > 0, "no kernel drop counted");
    // What the ring held is read, and it takes frames again afterwards.
    let mut held = 0;
    while let Some(len) = small.recv(&mut buf).expect("recv") {
        held += usize::from(ether(&buf[..len]).get(14) == Some(&2));
    }
    assert!(held > 0 && held < 64, "{held} frames held");
    send(&mut sender, &marker);
    assert!(
        recv_until(&mut small, is_marker).is_some(),
        "the ring works after a freeze"
    );
    assert!(small.counters().kernel_drops > drops);
    assert_eq!(sender.counters().tx_errors, 0);

    drop((small, sender));
    setup.teardown().expect("teardown");
    assert!(!netns_exists(&n));
}

#[test]
fn af_packet_ports_forward_tcp_between_namespaces() {
    require_root!();
    let (t, x, y) = (ns("fs"), ns("fx"), ns("fy"));
    let (xa, xb, ya, yb) = (ifn("xa"), ifn("xb"), ifn("ya"), ifn("yb"));
    let (ip_x, ip_y) = (Ipv4Addr::new(10, 79, 0, 1), Ipv4Addr::new(10, 79, 0, 2));
    let mut setup = Setup::new();
    for n in [&t, &x, &y] {
        setup.netns(n).expect("netns");
    }
    // X -- xa|xb -- [T: forwarder] -- yb|ya -- Y
    for (n, a, b, ip) in [(&x, &xa, &xb, ip_x), (&y, &ya, &yb, ip_y)] {
        setup.add_veth(Some(&t), b, a).expect("veth");
        setup.move_link(a, Some(&t), n).expect("move");
        setup
            .add_address(Some(n), a, ip.into(), 24)
            .expect("address");
        setup.lo_up(n).expect("lo");
        setup.link_up(Some(n), a).expect("up");
        setup.link_up(Some(&t), b).expect("up");
        setup.pin_rps(Some(n), a, 0).expect("rps");
        setup.pin_rps(Some(&t), b, 0).expect("rps");
    }
    assert_eq!(
        netns::run_in(
            &x,
            "cat",
            &[&format!("/sys/class/net/{xa}/queues/rx-0/rps_cpus")]
        )
        .expect("cat")
        .trim(),
        "1"
    );

    let px = in_netns(&t, || AfPacket::open(&xb))
        .expect("enter")
        .expect("open");
    let py = in_netns(&t, || AfPacket::open(&yb))
        .expect("enter")
        .expect("open");
    let fwd = Forwarder::start(px, py);
    tcp_transfer(&x, &y, ip_y, 4 << 20);
    let (px, py, stats) = fwd.stop();
    assert!(
        stats.gso_frames > 0,
        "no GSO super-frame crossed: {stats:?}"
    );
    for c in [px.counters(), py.counters()] {
        assert!(c.rx_frames > 0 && c.tx_frames > 0, "{c:?}");
        assert_eq!(c.tx_errors, 0, "{c:?}");
    }

    drop((px, py));
    setup.teardown().expect("teardown");
    for n in [&t, &x, &y] {
        assert!(!netns_exists(n));
    }
    for i in [&xa, &xb, &ya, &yb] {
        assert!(!interface_exists(None, i).expect("ip"));
    }
}

/// A fanout group's id is a name every process of a namespace shares: a socket of any process
/// joins the group of that id on its interface, and is refused (`EINVAL`) a group of that id
/// on another. The daemon named its groups `pid ^ port << 12`, so a daemon whose pid matched
/// another process's group (a daemon of another pid, another port index) joined that group on
/// a shared interface, each reading part of the other's frames, or could not start. Here a
/// group of the id the daemon's port 0 took is held on `lo`: the daemon failed with
/// `PACKET_FANOUT: Invalid argument`. Now the kernel names each group (a new id,
/// `PACKET_FANOUT_FLAG_UNIQUEID`), and the other engines' sockets join it by that name.
#[test]
fn a_daemons_fanout_groups_are_never_another_processs() {
    require_root!();
    let n = ns("fu");
    let (v0, v1) = (ifn("u0"), ifn("u1"));
    let mut setup = Setup::new();
    setup.netns(&n).expect("netns");
    setup.lo_up(&n).expect("lo");
    veth_up(&mut setup, &n, &v0, &v1);
    let small = RingConfig {
        block_size: 1 << 16,
        block_count: 2,
        ..RingConfig::default()
    };
    let taken = RingConfig {
        fanout: Some(std::process::id() as u16),
        ..small
    };
    let foreign = in_netns(&n, || AfPacket::open_with("lo", taken))
        .expect("enter")
        .expect("another process's group on lo");
    let text = format!(
        "[daemon]\nengines = 2\nmemory = \"8MiB\"\n\n\
         [[port]]\nname = \"x\"\nkind = \"af_packet\"\nifname = \"{v0}\"\n\n\
         [[port]]\nname = \"y\"\nkind = \"af_packet\"\nifname = \"{v1}\"\n\n\
         [[link]]\nfrom = \"x\"\nto = \"y\"\n\n[[link]]\nfrom = \"y\"\nto = \"x\"\n"
    );
    let cfg = Config::parse(&text, "fanout.toml", std::path::Path::new(".")).expect("config");
    let daemon = in_netns(&n, || Daemon::start(&cfg)).expect("enter");
    let daemon = daemon.unwrap_or_else(|e| panic!("the daemon did not start: {e}"));
    drop(daemon);
    // The sockets of a group the kernel names share one id, not the one taken.
    let group = in_netns(&n, || AfPacket::open_group(&v0, small, 3))
        .expect("enter")
        .expect("a group of its own");
    let ids: Vec<Option<u16>> = group.iter().map(|p| p.config().fanout).collect();
    assert!(
        ids.len() == 3 && ids.iter().all(|&id| id == ids[0]) && ids[0].is_some(),
        "{ids:?}"
    );
    assert_ne!(ids[0], taken.fanout);
    drop(group);
    drop(foreign);
    drop(setup);
    assert!(!netns_exists(&n));
}

/// A veth pair `a`|`b` in namespace `n`, both ends up; returns `a`'s index there.
fn veth_up(setup: &mut Setup, n: &str, a: &str, b: &str) -> u32 {
    setup.add_veth(Some(n), a, b).expect("veth");
    setup.link_up(Some(n), a).expect("up");
    setup.link_up(Some(n), b).expect("up");
    in_netns(n, || netns::interface_index(a))
        .expect("enter")
        .expect("index")
}

/// `port.tend` at `*t`, then `*t` moved on by [`LOOK_AGAIN_NS`]: one look per call (the time
/// is the test's own, not the clock's).
fn tend(port: &mut AfPacket, t: &mut u64) -> Option<PortEvent> {
    let event = port.tend(*t);
    *t += LOOK_AGAIN_NS;
    event
}

/// Whether interface `ifname` in namespace `n` is in promiscuous mode (`promiscuity` counts
/// the sockets that asked).
fn promiscuity(n: &str, ifname: &str) -> u32 {
    let out = netns::ip(&["-n", n, "-d", "link", "show", "dev", ifname]).expect("ip");
    out.split_whitespace()
        .skip_while(|w| *w != "promiscuity")
        .nth(1)
        .and_then(|v| v.parse().ok())
        .unwrap_or_else(|| panic!("no promiscuity in {out}"))
}

/// Whether descriptor `fd` polls readable now.
fn readable(fd: i32) -> bool {
    let mut p = libc::pollfd {
        fd,
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one live pollfd, and the count passed is 1; a zero timeout does not block.
    unsafe { libc::poll(&mut p, 1, 0) == 1 && p.revents & libc::POLLIN != 0 }
}

/// A frame of the test's ethertype carrying `tag` (broadcast: every port reads it).
fn tagged(tag: u8) -> Vec<u8> {
    eth(BROADCAST, FAKE_MAC, ETH_TEST, &[tag; 46])
}

fn is_tagged(tag: u8) -> impl Fn(&[u8]) -> bool {
    move |f| ethertype(f) == Some(ETH_TEST) && ether(f).get(14) == Some(&tag)
}

/// Send a frame tagged `tag` through `from` until `to` reads it (false after [`WAIT`]). Sent
/// again every 50 ms: just after a veth comes up, its queue is switched on a moment later
/// (by the kernel's link watch), and a frame sent before is dropped without an error.
fn crosses(from: &mut AfPacket, to: &mut AfPacket, tag: u8) -> bool {
    let mut buf = vec![0u8; BUF_SIZE];
    let deadline = Instant::now() + WAIT;
    while Instant::now() < deadline {
        send(from, &tagged(tag));
        let again = Instant::now() + Duration::from_millis(50);
        while Instant::now() < again {
            match to.recv(&mut buf).expect("recv") {
                Some(n) if is_tagged(tag)(&buf[..n]) => return true,
                Some(_) => {}
                None => thread::sleep(Duration::from_millis(1)),
            }
        }
    }
    false
}

/// An AF_PACKET port whose interface is deleted and created again under its name (a new
/// index): it says the outage once, looks for the interface by name (no more than every
/// LOOK_AGAIN_NS of the time it is given), binds its socket to the new one, promiscuous again,
/// and frames pass both ways again. An interface set down and up is a second outage, said
/// again, that ends without binding anew. Before, the socket stayed bound to the deleted
/// interface: every send failed for good, and only the first outage was said.
#[test]
fn af_packet_binds_again_to_its_interface_created_again() {
    require_root!();
    let n = ns("pr");
    let (v0, v1) = (ifn("r0"), ifn("r1"));
    let mut setup = Setup::new();
    setup.netns(&n).expect("netns");
    let first = veth_up(&mut setup, &n, &v0, &v1);
    let mut port = in_netns(&n, || AfPacket::open(&v0))
        .expect("enter")
        .expect("open");
    let quiet = RingConfig {
        promiscuous: false,
        ..RingConfig::default()
    };
    let mut peer = in_netns(&n, || AfPacket::open_with(&v1, quiet))
        .expect("enter")
        .expect("open");
    let mut t = 1_000_000_000;
    assert_eq!(tend(&mut port, &mut t), None, "all is well");
    assert_eq!((port.ifindex(), promiscuity(&n, &v0)), (first, 1));
    assert!(crosses(&mut port, &mut peer, 1));

    netns::ip(&["-n", &n, "link", "del", &v0]).expect("delete");
    let e = port.send(&tagged(1)).expect_err("no interface");
    assert!(e.to_string().contains("No such device or address"), "{e}");
    assert_eq!(port.counters().tx_errors, 1);
    assert!(
        matches!(tend(&mut port, &mut t), Some(PortEvent::Lost(why)) if why.contains("No such device")),
        "the outage is said"
    );
    for _ in 0..3 {
        assert_eq!(tend(&mut port, &mut t), None, "said once; still gone");
    }
    assert!(port.next_tend().is_some(), "an idle daemon wakes to look");

    let second = veth_up(&mut setup, &n, &v0, &v1);
    assert_ne!(second, first);
    // Before any look: the socket is not bound to the new interface.
    assert_eq!(port.tend(t - 1), None);
    assert!(port.send(&tagged(1)).is_err());
    assert_eq!(
        tend(&mut port, &mut t),
        Some(PortEvent::Back {
            ifindex: second,
            rebound: true,
            reopened: false
        })
    );
    assert_eq!(port.ifindex(), second);
    assert_eq!(port.next_tend(), None);
    assert_eq!(promiscuity(&n, &v0), 1, "promiscuous again");
    let mut peer = in_netns(&n, || AfPacket::open_with(&v1, quiet))
        .expect("enter")
        .expect("open");
    assert!(crosses(&mut port, &mut peer, 2), "sent again");
    assert!(crosses(&mut peer, &mut port, 3), "read again");

    // Down: a second outage, said again; up: back on the same socket, nothing bound anew.
    netns::ip(&["-n", &n, "link", "set", "dev", &v0, "down"]).expect("down");
    let e = port.take_error().expect("SO_ERROR").expect("an error");
    assert_eq!(e.raw_os_error(), Some(libc::ENETDOWN), "{e}");
    assert!(matches!(
        tend(&mut port, &mut t),
        Some(PortEvent::Lost(why)) if why.contains("Network is down")
    ));
    assert_eq!(tend(&mut port, &mut t), None);
    setup.link_up(Some(&n), &v0).expect("up");
    assert_eq!(
        tend(&mut port, &mut t),
        Some(PortEvent::Back {
            ifindex: second,
            rebound: false,
            reopened: false
        })
    );
    assert!(crosses(&mut peer, &mut port, 4));
    assert_eq!(
        port.counters().tx_errors,
        2,
        "the two sends while it was gone"
    );

    drop((port, peer));
    setup.teardown().expect("teardown");
    assert!(!netns_exists(&n));
}

/// Per-core engines' AF_PACKET sockets in a fanout group cannot be bound again (the kernel
/// refuses to bind a socket in a group): each is re-created, on a new descriptor, in the
/// namespace it was opened in (here another thread's), and together they read every frame
/// once again.
#[test]
fn af_packet_fanout_sockets_are_made_again_for_their_interface_created_again() {
    require_root!();
    let n = ns("pg");
    let (v0, v1) = (ifn("g0"), ifn("g1"));
    let mut setup = Setup::new();
    setup.netns(&n).expect("netns");
    // No IPv6 chatter: the test's frames are the only ones.
    in_netns(&n, || {
        std::fs::write("/proc/sys/net/ipv6/conf/default/disable_ipv6", "1")
    })
    .expect("enter")
    .expect("disable IPv6");
    let first = veth_up(&mut setup, &n, &v0, &v1);
    let cfg = RingConfig {
        fanout: Some(std::process::id() as u16),
        ..RingConfig::default()
    };
    let mut ports: Vec<AfPacket> = (0..2)
        .map(|_| {
            in_netns(&n, || AfPacket::open_with(&v0, cfg))
                .expect("enter")
                .expect("open")
        })
        .collect();
    let fds: Vec<i32> = ports.iter().map(|p| p.fd()).collect();
    let mut t = 1_000_000_000;
    let mut buf = vec![0u8; BUF_SIZE];

    // A frame in a ring when the interface goes: read before its socket is replaced.
    let mut sender = in_netns(&n, || AfPacket::open(&v1))
        .expect("enter")
        .expect("open");
    for p in &mut ports {
        while p.recv(&mut buf).expect("recv").is_some() {}
    }
    send(&mut sender, &tagged(8));
    let deadline = Instant::now() + WAIT;
    let full = loop {
        if let Some(p) = ports.iter().position(|p| readable(p.fd())) {
            break p;
        }
        assert!(Instant::now() < deadline, "the frame never reached a ring");
        thread::sleep(Duration::from_millis(1));
    };

    netns::ip(&["-n", &n, "link", "del", &v0]).expect("delete");
    let second = veth_up(&mut setup, &n, &v0, &v1);
    assert_ne!(second, first);
    for port in &mut ports {
        let e = port.take_error().expect("SO_ERROR").expect("an error");
        assert_eq!(e.raw_os_error(), Some(libc::ENETDOWN), "{e}");
        assert!(matches!(tend(port, &mut t), Some(PortEvent::Lost(_))));
    }
    assert_eq!(tend(&mut ports[full], &mut t), None, "frames to read first");
    let mut kept = 0;
    while let Some(len) = ports[full].recv(&mut buf).expect("recv") {
        kept += usize::from(is_tagged(8)(&buf[..len]));
    }
    assert_eq!(kept, 1, "the frame is read from the old ring");
    // The test thread is not in `n`: the sockets are made where the first ones were.
    for port in &mut ports {
        assert_eq!(
            tend(port, &mut t),
            Some(PortEvent::Back {
                ifindex: second,
                rebound: true,
                reopened: true
            })
        );
        assert_eq!(port.ifindex(), second);
    }
    assert!(ports.iter().zip(&fds).all(|(p, fd)| p.fd() != *fd));
    assert_eq!(promiscuity(&n, &v0), 2, "each socket asked again");
    each_frame_read_once_by_the_group(&mut ports, &n, &v1);

    // Deleted and created again at the same index: the group the sockets are in is tied to
    // the old interface and refused, and they meet in the next one.
    netns::ip(&["-n", &n, "link", "del", &v0]).expect("delete");
    let index = second.to_string();
    netns::ip(&[
        "-n", &n, "link", "add", &v0, "index", &index, "type", "veth", "peer", "name", &v1,
    ])
    .expect("veth at the same index");
    for v in [&v0, &v1] {
        netns::ip(&["-n", &n, "link", "set", "dev", v, "up"]).expect("up");
    }
    for port in &mut ports {
        assert!(port.take_error().expect("SO_ERROR").is_some());
        assert!(matches!(tend(port, &mut t), Some(PortEvent::Lost(_))));
        while port.recv(&mut buf).expect("recv").is_some() {}
    }
    for port in &mut ports {
        assert_eq!(
            tend(port, &mut t),
            Some(PortEvent::Back {
                ifindex: second,
                rebound: true,
                reopened: true
            })
        );
    }
    each_frame_read_once_by_the_group(&mut ports, &n, &v1);

    drop((ports, sender));
    setup.teardown().expect("teardown");
    assert!(!netns_exists(&n));
}

/// Frames of 64 flows sent into `v1` (in namespace `n`) are each read once by `ports`, the
/// sockets of one fanout group on the other end, and every socket gets some.
fn each_frame_read_once_by_the_group(ports: &mut [AfPacket], n: &str, v1: &str) {
    let mut buf = vec![0u8; BUF_SIZE];
    let mut sender = in_netns(n, || AfPacket::open(v1))
        .expect("enter")
        .expect("open");
    // The path is open once a frame crosses it (see `crosses`).
    let deadline = Instant::now() + WAIT;
    'open: loop {
        assert!(Instant::now() < deadline, "no frame reaches the group");
        send(&mut sender, &tagged(7));
        thread::sleep(Duration::from_millis(50));
        for p in ports.iter_mut() {
            while let Some(len) = p.recv(&mut buf).expect("recv") {
                if is_tagged(7)(&buf[..len]) {
                    break 'open;
                }
            }
        }
    }
    thread::sleep(Duration::from_millis(50));
    for p in ports.iter_mut() {
        while p.recv(&mut buf).expect("recv").is_some() {}
    }
    const FRAMES: u8 = 64;
    let (src, dst) = (Ipv4Addr::new(10, 85, 0, 1), Ipv4Addr::new(10, 85, 0, 2));
    for i in 0..FRAMES {
        // One flow each (the group fans out by flow hash), the payload its number.
        let udp = ipv4_udp(src, dst, 5000 + u16::from(i), 7000, &[i]);
        send(&mut sender, &eth(BROADCAST, FAKE_MAC, ETH_IPV4, &udp));
    }
    let mut seen = vec![Vec::new(); ports.len()];
    let deadline = Instant::now() + WAIT;
    while seen.iter().map(Vec::len).sum::<usize>() < usize::from(FRAMES) {
        assert!(Instant::now() < deadline, "frames missing: {seen:?}");
        let mut idle = true;
        for (p, port) in ports.iter_mut().enumerate() {
            if let Some(len) = port.recv(&mut buf).expect("recv") {
                idle = false;
                if let Some((_, 7000, payload)) = udp(&buf[..len]) {
                    seen[p].extend(payload);
                }
            }
        }
        if idle {
            thread::sleep(Duration::from_millis(2));
        }
    }
    let mut all = seen.concat();
    all.sort_unstable();
    all.dedup();
    assert_eq!(all.len(), usize::from(FRAMES), "each read once: {seen:?}");
    assert!(seen.iter().all(|s| !s.is_empty()), "all in use: {seen:?}");
}

// ---------------------------------------------------------------------------------------------
// An engine over AF_PACKET ports, as `sluice run` drives it

/// What an engine thread logs, kept for the test to read.
#[derive(Clone, Default)]
struct Log(Arc<Mutex<Vec<u8>>>);

impl Write for Log {
    fn write(&mut self, b: &[u8]) -> io::Result<usize> {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).extend(b);
        Ok(b.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Log {
    fn text(&self) -> String {
        String::from_utf8_lossy(&self.0.lock().unwrap_or_else(|e| e.into_inner())).into_owned()
    }
}

/// An engine running a datapath over `ports` (named `a`, `b`: links a -> b and b -> a, FIFO)
/// on a thread of its own, as the daemon's single engine; stopped when dropped.
struct Running {
    control: ControlHandle,
    wake: Arc<EventFd>,
    stop: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
    log: Log,
}

impl Running {
    fn start(ports: Vec<Box<dyn Port>>, mode: Mode) -> Running {
        const FIFO: &str =
            "[scheduler]\ndefault = \"q\"\n\n[[node]]\nname = \"q\"\npolicy = \"fifo\"\n";
        let links = [(0, 1), (1, 0)]
            .into_iter()
            .map(|(from, to)| LinkSpec {
                from,
                to,
                scheduler: sluice_sched::config::build_str(FIFO, "fifo").expect("policy"),
                policy: None,
            })
            .collect();
        let cfg = DatapathConfig {
            memory: 16 << 20,
            at_bound: AtBound::Pause,
            malformed: Malformed::Default,
            scheduled: 4096,
            ecn: None,
        };
        let dp = Datapath::new(ports, vec!["a".into(), "b".into()], vec![], links, cfg)
            .expect("datapath");
        let wake = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC).expect("eventfd"),
        );
        let waker = wake.clone();
        let (control, commands) = ControlHandle::new(Arc::new(move || {
            let _ = waker.write(1);
        }));
        let (_, internal) = mpsc::sync_channel::<Internal>(1);
        let stop = Arc::new(AtomicBool::new(false));
        let log = Log::default();
        let mut engine = Engine::new(
            dp,
            commands,
            internal,
            wake.clone(),
            stop.clone(),
            mode,
            now_ns(),
        );
        let writer = log.clone();
        let thread = thread::spawn(move || {
            let subscriber = tracing_subscriber::fmt()
                .with_writer(move || writer.clone())
                .with_ansi(false)
                .finish();
            let _log = tracing::subscriber::set_default(subscriber);
            engine.run(None).expect("the engine runs until stopped");
        });
        Running {
            control,
            wake,
            stop,
            thread: Some(thread),
            log,
        }
    }

    fn stats(&self) -> Snapshot {
        match self.control.call(Request::Stats {}, WAIT) {
            Reply::Stats(s) => *s,
            other => panic!("stats: {other:?}"),
        }
    }

    /// Frames dropped because a port's send failed.
    fn tx_errors(&self) -> u64 {
        self.stats().drops.get("tx_error").copied().unwrap_or(0)
    }

    /// Times the log says `what`.
    fn said(&self, what: &str) -> usize {
        self.log.text().matches(what).count()
    }

    /// Wait until the log says `what` `times` times.
    fn wait_said(&self, what: &str, times: usize) {
        let deadline = Instant::now() + WAIT;
        while self.said(what) < times {
            assert!(
                Instant::now() < deadline,
                "the log never said `{what}` {times} times:\n{}",
                self.log.text()
            );
            thread::sleep(Duration::from_millis(10));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        let _ = self.wake.write(1);
        if let Some(t) = self.thread.take() {
            if let Err(panic) = t.join() {
                if !thread::panicking() {
                    std::panic::resume_unwind(panic);
                }
            }
        }
    }
}

/// Send `payload` from `from` to `to` (both UDP sockets, `to` with a short read timeout) until
/// it arrives, resending every read timeout; false after [`WAIT`].
fn udp_arrives(from: &UdpSocket, to: &UdpSocket, payload: &[u8]) -> bool {
    let dst = to.local_addr().expect("address");
    let deadline = Instant::now() + WAIT;
    let mut buf = [0u8; 64];
    while Instant::now() < deadline {
        from.send_to(payload, dst).expect("send");
        match recv_from(to, &mut buf) {
            Ok((n, _)) if &buf[..n] == payload => return true,
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(e) => panic!("recv: {e}"),
        }
    }
    false
}

/// X -- xa|xb -- [T: an engine over AF_PACKET ports on xb, yb] -- yb|ya -- Y. The pair yb|ya
/// is deleted while the engine runs, and created again (yb gets a new index): the engine says
/// the outage once, counts what it could not send as `tx_error`, binds port `b` to the new yb
/// ("back, re-bound to index N") and datagrams cross again. yb set down is a second outage,
/// said again, and up it carries traffic again. Before, port `b` stayed bound to the deleted
/// interface (every frame toward Y a tx_error until a restart), and only the first outage was
/// ever logged.
fn an_engine_carries_traffic_again_after_its_interface_is_created_again(mode: Mode, tag: &str) {
    let (t, x, y) = (
        ns(&format!("{tag}t")),
        ns(&format!("{tag}x")),
        ns(&format!("{tag}y")),
    );
    let (xa, xb, ya, yb) = (
        ifn(&format!("{tag}xa")),
        ifn(&format!("{tag}xb")),
        ifn(&format!("{tag}ya")),
        ifn(&format!("{tag}yb")),
    );
    let (ip_x, ip_y) = (Ipv4Addr::new(10, 84, 0, 1), Ipv4Addr::new(10, 84, 0, 2));
    let mut setup = Setup::new();
    for n in [&t, &x, &y] {
        setup.netns(n).expect("netns");
    }
    let pair = |setup: &mut Setup, n: &str, a: &str, b: &str, ip: Ipv4Addr| {
        setup.add_veth(Some(&t), b, a).expect("veth");
        setup.move_link(a, Some(&t), n).expect("move");
        setup
            .add_address(Some(n), a, ip.into(), 24)
            .expect("address");
        setup.link_up(Some(n), a).expect("up");
        setup.link_up(Some(&t), b).expect("up");
    };
    pair(&mut setup, &x, &xa, &xb, ip_x);
    pair(&mut setup, &y, &ya, &yb, ip_y);
    let open = |ifname: &str| -> Box<dyn Port> {
        Box::new(
            in_netns(&t, || AfPacket::open(ifname))
                .expect("enter")
                .expect("open"),
        )
    };
    let engine = Running::start(vec![open(&xb), open(&yb)], mode);
    let sx = in_netns(&x, || UdpSocket::bind((ip_x, 0)))
        .expect("enter")
        .expect("bind");
    let sy = in_netns(&y, || UdpSocket::bind((ip_y, 0)))
        .expect("enter")
        .expect("bind");
    sy.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    assert!(udp_arrives(&sx, &sy, b"before"), "{}", engine.log.text());
    let first = in_netns(&t, || netns::interface_index(&yb))
        .expect("enter")
        .expect("index");

    // Gone: what crosses toward Y cannot be sent, counted, and said once.
    netns::ip(&["-n", &t, "link", "del", &yb]).expect("delete");
    let lost = format!("interface `{yb}` is down or gone");
    let deadline = Instant::now() + WAIT;
    while engine.tx_errors() < 3 {
        assert!(Instant::now() < deadline, "no tx_error counted");
        sx.send_to(b"lost", (ip_y, 9)).expect("send");
        thread::sleep(Duration::from_millis(20));
    }
    engine.wait_said(&lost, 1);

    // Created again: the port binds to the new interface and datagrams cross again.
    pair(&mut setup, &y, &ya, &yb, ip_y);
    let second = in_netns(&t, || netns::interface_index(&yb))
        .expect("enter")
        .expect("index");
    assert_ne!(first, second);
    // X still knows Y's old address; the new ya has another.
    netns::ip(&["-n", &x, "neigh", "flush", "dev", &xa]).expect("flush");
    let sy = in_netns(&y, || UdpSocket::bind((ip_y, 0)))
        .expect("enter")
        .expect("bind");
    sy.set_read_timeout(Some(Duration::from_millis(100)))
        .expect("timeout");
    assert!(
        udp_arrives(&sx, &sy, b"after"),
        "nothing crossed after the interface came back:\n{}",
        engine.log.text()
    );
    let rebound = format!("interface `{yb}` back, re-bound to index {second}");
    engine.wait_said(&rebound, 1);
    let sent = engine.stats().ports[1].tx_frames;
    assert!(udp_arrives(&sx, &sy, b"again"));
    assert!(engine.stats().ports[1].tx_frames > sent, "counted as sent");
    assert!(udp_arrives(&sy, &sx, b"and back"));

    // Down, then up: a second outage, said again; traffic again after it.
    netns::ip(&["-n", &t, "link", "set", "dev", &yb, "down"]).expect("down");
    let errors = engine.tx_errors();
    let deadline = Instant::now() + WAIT;
    while engine.tx_errors() == errors {
        assert!(Instant::now() < deadline, "no tx_error counted");
        sx.send_to(b"down", (ip_y, 9)).expect("send");
        thread::sleep(Duration::from_millis(20));
    }
    engine.wait_said(&lost, 2);
    netns::ip(&["-n", &t, "link", "set", "dev", &yb, "up"]).expect("up");
    engine.wait_said(
        &format!("interface `{yb}` back, up again at index {second}"),
        1,
    );
    assert!(udp_arrives(&sx, &sy, b"up again"));
    assert_eq!(
        engine.said(&lost),
        2,
        "each outage said once:\n{}",
        engine.log.text()
    );
    assert_eq!(engine.said(&rebound), 1, "{}", engine.log.text());

    drop(engine);
    setup.teardown().expect("teardown");
    for n in [&t, &x, &y] {
        assert!(!netns_exists(n));
    }
}

#[test]
fn an_event_driven_engine_carries_traffic_again_after_its_interface_is_created_again() {
    require_root!();
    an_engine_carries_traffic_again_after_its_interface_is_created_again(Mode::Event, "e");
}

#[test]
fn a_busy_polling_engine_carries_traffic_again_after_its_interface_is_created_again() {
    require_root!();
    an_engine_carries_traffic_again_after_its_interface_is_created_again(Mode::Busy, "b");
}

// ---------------------------------------------------------------------------------------------
// The setup guard

#[test]
fn setup_undoes_everything_when_dropped() {
    require_root!();
    let n = ns("sd");
    let (v0, v1) = (ifn("s0"), ifn("s1"));
    {
        let mut s = Setup::new();
        s.netns(&n).expect("netns");
        s.add_veth(Some(&n), &v0, &v1).expect("veth");
        s.add_address(Some(&n), &v0, "10.80.0.1".parse().expect("ip"), 24)
            .expect("address");
        s.add_address(Some(&n), &v0, "fd00:80::1".parse().expect("ip"), 64)
            .expect("address");
        s.link_up(Some(&n), &v0).expect("up");
        s.lo_up(&n).expect("lo");
        s.pin_rps(Some(&n), &v0, 0).expect("rps");
        let steps = s.steps().len();
        assert!(steps >= 7, "{:?}", s.steps());
        // Asking again for a namespace this setup made, or bringing up a link that is up,
        // changes nothing.
        s.netns(&n).expect("netns again");
        s.link_up(Some(&n), &v0).expect("up again");
        assert_eq!(s.steps().len(), steps);
        assert!(s.owns(&n));
        assert!(
            s.steps()
                .iter()
                .any(|st| matches!(st, Step::Rps { previous, .. } if previous == "0"))
        );
        let rps = format!("/sys/class/net/{v0}/queues/rx-0/rps_cpus");
        assert_eq!(netns::run_in(&n, "cat", &[&rps]).expect("cat").trim(), "1");
        let addrs = netns::ip(&["-n", &n, "-o", "addr", "show", "dev", &v0]).expect("ip");
        assert!(
            addrs.contains("10.80.0.1/24") && addrs.contains("fd00:80::1/64"),
            "{addrs}"
        );
    }
    assert!(!netns_exists(&n));
    assert!(!interface_exists(None, &v0).expect("ip"));
}

/// A setup that fails at its last step, returning with `?` as a daemon would.
fn failing_setup(n: &str, v0: &str, v1: &str, missing: &str) -> Result<Setup, NetnsError> {
    let mut s = Setup::new();
    s.netns(n)?;
    s.add_veth(Some(n), v0, v1)?;
    s.link_up(Some(n), v0)?;
    s.add_address(Some(n), missing, "10.81.0.1".parse().expect("ip"), 24)?;
    Ok(s)
}

#[test]
fn setup_undoes_everything_after_a_failing_step() {
    require_root!();
    let n = ns("se");
    let (v0, v1, missing) = (ifn("e0"), ifn("e1"), ifn("nx"));
    let e = failing_setup(&n, &v0, &v1, &missing).expect_err("the last step fails");
    assert_eq!(
        e.to_string(),
        format!("interface `{missing}` does not exist in namespace `{n}`")
    );
    assert!(!netns_exists(&n), "the namespace was left behind");

    // A command that fails records nothing: only what succeeded is undone.
    let mut s = Setup::new();
    s.netns(&n).expect("netns");
    s.add_veth(Some(&n), &v0, &v1).expect("veth");
    s.add_address(Some(&n), &v0, "10.81.0.1".parse().expect("ip"), 24)
        .expect("address");
    let before = s.steps().to_vec();
    let e = s
        .add_address(Some(&n), &v0, "10.81.0.1".parse().expect("ip"), 24)
        .expect_err("twice");
    assert!(matches!(e, NetnsError::Command { .. }), "{e}");
    assert!(
        e.to_string().starts_with(&format!(
            "`ip -n {n} addr add 10.81.0.1/24 dev {v0}` failed: "
        )),
        "{e}"
    );
    let e = s.add_veth(Some(&n), &v0, &v1).expect_err("exists");
    assert!(e.to_string().contains("failed"), "{e}");
    assert_eq!(s.steps(), &before[..]);
    drop(s);
    assert!(!netns_exists(&n));
}

/// Someone else's namespace, made by a test with `ip` and deleted when dropped.
struct Foreign(String);

impl Drop for Foreign {
    fn drop(&mut self) {
        let _ = netns::ip(&["netns", "del", &self.0]);
    }
}

#[test]
fn a_busy_namespace_is_refused_and_left_alone() {
    require_root!();
    let n = ns("sb");
    netns::ip(&["netns", "add", &n]).expect("someone else's namespace");
    let foreign = Foreign(n.clone());
    let mut s = Setup::new();
    let e = s.netns(&n).expect_err("busy");
    assert!(matches!(e, NetnsError::Busy(_)));
    assert!(
        e.to_string()
            .contains(&format!("namespace `{n}` already exists"))
            && e.to_string().contains("busy namespace"),
        "{e}"
    );
    let e = s
        .add_veth(Some(&n), &ifn("b0"), &ifn("b1"))
        .expect_err("not ours");
    assert!(matches!(e, NetnsError::NotOwned(_)), "{e}");
    assert!(s.steps().is_empty());
    drop(s);
    assert!(netns_exists(&n), "the busy namespace was touched");
    assert!(!interface_exists(Some(&n), &ifn("b0")).expect("ip"));
    drop(foreign);
    assert!(!netns_exists(&n));
}

/// A namespace the setup created, deleted by someone else and created again under its name by
/// another, is theirs now: teardown leaves it alone.
#[test]
fn teardown_leaves_alone_a_namespace_another_made_under_the_name_of_ours() {
    require_root!();
    let n = ns("sr");
    let mut s = Setup::new();
    s.netns(&n).expect("ours");
    netns::ip(&["netns", "del", &n]).expect("deleted by someone else");
    netns::ip(&["netns", "add", &n]).expect("made again by someone else");
    let foreign = Foreign(n.clone());
    s.teardown().expect("teardown");
    assert!(netns_exists(&n), "another's namespace was deleted");
    drop(foreign);
    assert!(!netns_exists(&n));
}

#[test]
fn teardown_moves_interfaces_home_and_skips_vanished_ones() {
    require_root!();
    let n = ns("sm");
    let name = ifn("mv");
    let mut tap = Tap::create(&name).expect("tap");
    let mut s = Setup::new();
    s.place(
        &name,
        &n,
        Some(("10.82.0.1".parse().expect("ip"), 24)),
        Some(0),
    )
    .expect("place");
    assert!(
        interface_exists(Some(&n), &name).expect("ip")
            && !interface_exists(None, &name).expect("ip")
    );
    s.teardown().expect("teardown");
    assert!(!netns_exists(&n));
    assert!(interface_exists(None, &name).expect("ip"), "moved home");
    let mut buf = vec![0u8; BUF_SIZE];
    tap.recv(&mut buf).expect("the descriptor still works");

    // The tap closes before teardown: its steps have nothing left to undo.
    let mut s = Setup::new();
    s.place(
        &name,
        &n,
        Some(("10.82.0.1".parse().expect("ip"), 24)),
        Some(0),
    )
    .expect("place again");
    drop(tap);
    assert!(vanishes(Some(&n), &name));
    s.teardown().expect("teardown after the tap vanished");
    assert!(!netns_exists(&n));
}

#[test]
fn steps_in_the_daemons_namespace_are_undone() {
    require_root!();
    // A tap stays in this namespace: it disappears with the test process whatever happens.
    let name = ifn("rt");
    let tap = Tap::create(&name).expect("tap");
    let rps = format!("/sys/class/net/{name}/queues/rx-0/rps_cpus");
    let before = std::fs::read_to_string(&rps).expect("rps");
    let mut s = Setup::new();
    s.add_address(None, &name, "10.83.0.1".parse().expect("ip"), 32)
        .expect("address");
    s.link_up(None, &name).expect("up");
    s.pin_rps(None, &name, 0).expect("rps");
    assert_eq!(std::fs::read_to_string(&rps).expect("rps").trim(), "1");
    let show = || netns::ip(&["-o", "addr", "show", "dev", &name]).expect("ip");
    assert!(show().contains("10.83.0.1/32"));
    s.teardown().expect("teardown");
    assert_eq!(std::fs::read_to_string(&rps).expect("rps"), before);
    assert!(!show().contains("10.83.0.1"));
    let link = netns::ip(&["-o", "link", "show", "dev", &name]).expect("ip");
    assert!(!link.contains(",UP"), "{link}");
    drop(tap);
}

#[test]
fn missing_things_are_clear_errors() {
    require_root!();
    let missing = ifn("zz");
    let e = netns::require_interface(&missing).expect_err("missing");
    assert_eq!(
        e.to_string(),
        format!("interface `{missing}` does not exist")
    );
    let e = AfPacket::open(&missing).expect_err("missing");
    assert_eq!(
        e.to_string(),
        format!("interface `{missing}` does not exist")
    );
    let gone = ns("zz");
    let e = in_netns(&gone, || ()).expect_err("no namespace");
    assert_eq!(e.to_string(), format!("namespace `{gone}` does not exist"));
    let e = netns::run_in(&gone, "true", &[]).expect_err("no namespace");
    assert!(matches!(e, NetnsError::NoNetns(_)));

    let n = ns("sz");
    let mut s = Setup::new();
    s.netns(&n).expect("netns");
    let e = s.move_link(&missing, None, &n).expect_err("missing");
    assert_eq!(
        e.to_string(),
        format!("interface `{missing}` does not exist")
    );
    let e = s.pin_rps(Some(&n), &missing, 0).expect_err("missing");
    assert_eq!(
        e.to_string(),
        format!("interface `{missing}` does not exist in namespace `{n}`")
    );
    assert_eq!(
        netns::run_in(&n, "cat", &["/sys/class/net/lo/mtu"])
            .expect("cat")
            .trim(),
        "65536"
    );
    drop(s);
    assert!(!netns_exists(&n));
}
