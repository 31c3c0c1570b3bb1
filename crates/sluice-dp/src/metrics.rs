//! Prometheus text exposition (format 0.0.4) of a [`Snapshot`], and a small HTTP endpoint
//! serving it on a loopback address.
//!
//! **Rendering.** [`render`] is a pure function of the snapshot. Families come in a fixed order
//! (ports, classes, links, drops, malformed, buffers, uptime); within a family, samples follow
//! the snapshot's order (ports and links in configuration order, classes root first), and drop
//! and malformed reasons are sorted by name, every known reason present even at zero so a
//! series exists before its first event. Each family's `# HELP` and `# TYPE` lines appear once,
//! before all its samples; a family without samples (say, no class has a rate limit) is left
//! out. Label values are escaped (`\\`, `\"`, `\n`). Cost: linear in the snapshot's size.
//!
//! | family | type | labels |
//! |---|---|---|
//! | `sluice_port_{rx,tx}_{bytes,frames}_total`, `sluice_port_kernel_drops_total` | counter | port, ifname |
//! | `sluice_port_delayed_frames` | gauge | port, ifname |
//! | `sluice_class_sent_{bytes,packets}_total`, `sluice_class_shaped_total` | counter | link, class |
//! | `sluice_class_queued_packets`, `sluice_class_rate_limit_bps` | gauge | link, class |
//! | `sluice_link_{held,scheduled}_packets`, `sluice_link_paused_sources` | gauge | link |
//! | `sluice_link_backpressure_total` | counter | link |
//! | `sluice_drops_total`, `sluice_malformed_total` | counter | reason |
//! | `sluice_read_pauses_total`, `sluice_ecn_marked_total` | counter | |
//! | `sluice_buffers_used`, `sluice_buffers_capacity`, `sluice_uptime_seconds` | gauge | |
//!
//! A link is named by the port it reads from (as in the control protocol).
//!
//! **Serving.** [`MetricsServer`] accepts on one thread and answers each connection on a
//! thread of its own, at most [`MAX_CONNECTIONS`] at once (one more is closed at once), so an
//! idle or slow client blocks nobody; each connection has [`CONNECTION_DEADLINE`] for its
//! request and its answer, a request head at most [`MAX_REQUEST`] bytes (its lines ended by
//! CRLF or, as RFC 9112 §2.2 allows, a bare LF: `printf 'GET /metrics HTTP/1.0\n\n' | nc`
//! works; empty lines before the request line are skipped, as it asks), and one request
//! (`Connection: close`). `GET /metrics` (or `GET http://host/metrics`, in absolute-form) asks
//! the datapath for its counters through the [`ControlHandle`] ([`Request::Counters`]: no
//! busiest flows, which the text does not show; 2 s at most, else 503 with the reason) and
//! answers 200 with the text; an answer serves every scrape for [`SNAPSHOT_REUSE`], so clients
//! scraping in a loop cost the datapath one snapshot per 100 ms at most. Other paths get 404,
//! other methods 405. An answer ends with FIN, then what the client still sends (a body,
//! pipelined requests) is read and dropped until it closes, for 1 s and 64 KiB at most:
//! closed with input unread, a socket sends RST, and a client may lose its answer. Only
//! loopback addresses are accepted: the endpoint has no authentication. Stopping shuts the
//! listening socket down, which wakes its accept(2) without a descriptor of its own, and joins
//! the accepting thread; answers under way end within their deadline. (A small server of its own because `tiny_http`, used before, had no
//! timeouts and no connection bound: a client that never read blocked every scrape and the
//! daemon's stop, and idle connections each held a thread.)

use crate::control::{ControlHandle, Reply, Request};
use crate::deadline::Deadlined;
use crate::parse::Malformed;
use crate::stats::{DropReason, Snapshot};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write as _;
use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::thread::{self, JoinHandle};
use std::time::{Duration, Instant};

/// The exposition format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4";
/// How long a scrape waits for the datapath.
pub const SCRAPE_TIMEOUT: Duration = Duration::from_secs(2);

/// One metric family being written: its header goes out with its first sample.
struct Family<'a> {
    out: &'a mut String,
    name: &'static str,
    help: &'static str,
    kind: &'static str,
    started: bool,
}

impl<'a> Family<'a> {
    fn new(
        out: &'a mut String,
        name: &'static str,
        kind: &'static str,
        help: &'static str,
    ) -> Self {
        Family {
            out,
            name,
            help,
            kind,
            started: false,
        }
    }

    fn sample(&mut self, labels: &[(&str, &str)], value: impl std::fmt::Display) {
        if !self.started {
            self.started = true;
            // Writing to a String cannot fail.
            let _ = writeln!(self.out, "# HELP {} {}", self.name, self.help);
            let _ = writeln!(self.out, "# TYPE {} {}", self.name, self.kind);
        }
        self.out.push_str(self.name);
        if !labels.is_empty() {
            self.out.push('{');
            for (i, (k, v)) in labels.iter().enumerate() {
                if i > 0 {
                    self.out.push(',');
                }
                self.out.push_str(k);
                self.out.push_str("=\"");
                escape_label_value(self.out, v);
                self.out.push('"');
            }
            self.out.push('}');
        }
        let _ = writeln!(self.out, " {value}");
    }
}

/// Append `v` escaped for a label value: backslash, double quote and newline.
fn escape_label_value(out: &mut String, v: &str) {
    for c in v.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '"' => out.push_str("\\\""),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Seconds with nanosecond precision, without going through a float.
struct Seconds(u64);

impl std::fmt::Display for Seconds {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{}.{:09}",
            self.0 / 1_000_000_000,
            self.0 % 1_000_000_000
        )
    }
}

/// Every `known` reason (at zero if absent) and every other key in `counts`, sorted by name.
fn by_reason<'a>(
    known: impl Iterator<Item = &'a str>,
    counts: &'a HashMap<String, u64>,
) -> BTreeMap<&'a str, u64> {
    let mut all: BTreeMap<&str, u64> = known.map(|k| (k, 0)).collect();
    for (k, v) in counts {
        all.insert(k.as_str(), *v);
    }
    all
}

/// The snapshot in Prometheus text format 0.0.4.
pub fn render(s: &Snapshot) -> String {
    let mut out = String::new();

    type PortField = fn(&crate::stats::PortSnapshot) -> u64;
    let port_families: [(&str, &str, &str, PortField); 6] = [
        (
            "sluice_port_rx_bytes_total",
            "counter",
            "Bytes read from the port.",
            |p| p.rx_bytes,
        ),
        (
            "sluice_port_tx_bytes_total",
            "counter",
            "Bytes written to the port.",
            |p| p.tx_bytes,
        ),
        (
            "sluice_port_rx_frames_total",
            "counter",
            "Frames read from the port.",
            |p| p.rx_frames,
        ),
        (
            "sluice_port_tx_frames_total",
            "counter",
            "Frames written to the port.",
            |p| p.tx_frames,
        ),
        (
            "sluice_port_kernel_drops_total",
            "counter",
            "Frames the kernel dropped before the daemon read them.",
            |p| p.kernel_drops,
        ),
        (
            "sluice_port_delayed_frames",
            "gauge",
            "Frames waiting in the port's delay line.",
            |p| p.delayed,
        ),
    ];
    for (name, kind, help, field) in port_families {
        let mut f = Family::new(&mut out, name, kind, help);
        for p in &s.ports {
            f.sample(&[("port", &p.name), ("ifname", &p.ifname)], field(p));
        }
    }

    type ClassField = fn(&crate::stats::ClassSnapshot) -> Option<u64>;
    let class_families: [(&str, &str, &str, ClassField); 5] = [
        (
            "sluice_class_sent_bytes_total",
            "counter",
            "Bytes on the wire that left through the class.",
            |c| Some(c.sent_bytes),
        ),
        (
            "sluice_class_sent_packets_total",
            "counter",
            "Packets that left through the class.",
            |c| Some(c.sent),
        ),
        (
            "sluice_class_queued_packets",
            "gauge",
            "Packets in the class that have not left.",
            |c| Some(c.queued),
        ),
        (
            "sluice_class_rate_limit_bps",
            "gauge",
            "The class's rate limit, bit/s.",
            |c| c.rate_bps,
        ),
        (
            "sluice_class_shaped_total",
            "counter",
            "Packets the class's rate limit held.",
            |c| Some(c.shaped),
        ),
    ];
    for (name, kind, help, field) in class_families {
        let mut f = Family::new(&mut out, name, kind, help);
        for l in &s.links {
            for c in &l.classes {
                if let Some(v) = field(c) {
                    f.sample(&[("link", &l.from), ("class", &c.name)], v);
                }
            }
        }
    }

    type LinkField = fn(&crate::stats::LinkSnapshot) -> u64;
    let link_families: [(&str, &str, &str, LinkField); 4] = [
        (
            "sluice_link_held_packets",
            "gauge",
            "Frames held in source buffers and the scheduler.",
            |l| l.held,
        ),
        (
            "sluice_link_scheduled_packets",
            "gauge",
            "Frames in the scheduled buffer.",
            |l| l.scheduled,
        ),
        (
            "sluice_link_paused_sources",
            "gauge",
            "Sources paused by admission now.",
            |l| l.paused,
        ),
        (
            "sluice_link_backpressure_total",
            "counter",
            "Frames refused with backpressure at the bound.",
            |l| l.backpressure,
        ),
    ];
    for (name, kind, help, field) in link_families {
        let mut f = Family::new(&mut out, name, kind, help);
        for l in &s.links {
            f.sample(&[("link", &l.from)], field(l));
        }
    }

    let mut f = Family::new(
        &mut out,
        "sluice_drops_total",
        "counter",
        "Frames that did not leave, by reason.",
    );
    for (reason, n) in by_reason(DropReason::ALL.iter().map(|r| r.name()), &s.drops) {
        f.sample(&[("reason", reason)], n);
    }
    let mut f = Family::new(
        &mut out,
        "sluice_malformed_total",
        "counter",
        "Frames that did not parse, by reason.",
    );
    let malformed = Malformed::ALL
        .iter()
        .map(|m| m.name())
        .chain(crate::stats::DATAPATH_MALFORMED);
    for (reason, n) in by_reason(malformed, &s.malformed) {
        f.sample(&[("reason", reason)], n);
    }

    let scalars: [(&str, &str, &str, u64); 4] = [
        (
            "sluice_read_pauses_total",
            "counter",
            "Times reading stopped because no buffer was free.",
            s.read_pauses,
        ),
        (
            "sluice_ecn_marked_total",
            "counter",
            "Frames marked Congestion Experienced.",
            s.ecn_marked,
        ),
        (
            "sluice_buffers_used",
            "gauge",
            "Frame buffers in use.",
            s.buffers_used,
        ),
        (
            "sluice_buffers_capacity",
            "gauge",
            "Frame buffers in all.",
            s.buffers_total,
        ),
    ];
    for (name, kind, help, v) in scalars {
        Family::new(&mut out, name, kind, help).sample(&[], v);
    }
    Family::new(
        &mut out,
        "sluice_uptime_seconds",
        "gauge",
        "Seconds since the daemon started.",
    )
    .sample(&[], Seconds(s.uptime_ns));
    out
}

/// Why the metrics endpoint could not start.
#[derive(Debug, thiserror::Error)]
pub enum MetricsError {
    /// The address is not a loopback address.
    #[error(
        "metrics address {0} is not a loopback address; the endpoint has no authentication, so it serves 127.0.0.1 or ::1 only"
    )]
    NotLoopback(SocketAddr),
    /// Binding failed.
    #[error("cannot serve metrics on {addr}: {message}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// Why.
        message: String,
    },
}

/// Most connections served at once; one beyond them is closed unanswered.
pub const MAX_CONNECTIONS: usize = 8;
/// A connection's whole exchange, its request in and its answer out, must fit in this: a client
/// that sends slowly, or reads slowly, is cut off at it.
pub const CONNECTION_DEADLINE: Duration = Duration::from_secs(5);
/// Longest request head read (request line and headers, with the blank line that ends them);
/// a longer one gets 431.
pub const MAX_REQUEST: usize = 8 * 1024;
/// Bytes of a request head asked of one read(2).
const READ_CHUNK: usize = 1024;

/// The Prometheus endpoint. Dropping it (or [`MetricsServer::stop`]) stops it.
pub struct MetricsServer {
    addr: SocketAddr,
    /// Shared with the accepting thread, so that stopping can shut it down under it.
    listener: Arc<TcpListener>,
    stopping: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl MetricsServer {
    /// Serve `GET /metrics` on `addr` (a loopback address; port 0 picks a free port).
    pub fn start(addr: SocketAddr, handle: ControlHandle) -> Result<MetricsServer, MetricsError> {
        if !addr.ip().is_loopback() {
            return Err(MetricsError::NotLoopback(addr));
        }
        let bind = |message: String| MetricsError::Bind { addr, message };
        let listener = Arc::new(TcpListener::bind(addr).map_err(|e| bind(e.to_string()))?);
        let local = listener.local_addr().map_err(|e| bind(e.to_string()))?;
        let stopping = Arc::new(AtomicBool::new(false));
        let (stop, accepting) = (stopping.clone(), listener.clone());
        let thread = thread::Builder::new()
            .name("sluice-metrics".into())
            .spawn(move || accept(&accepting, &stop, &handle))
            .map_err(|e| bind(format!("cannot start the metrics thread: {e}")))?;
        Ok(MetricsServer {
            addr: local,
            listener,
            stopping,
            thread: Some(thread),
        })
    }

    /// The address it listens on (the real port when started on port 0).
    pub fn local_addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stop serving and join the accepting thread. The same as dropping it. Scrapes being
    /// answered finish on their own, within [`CONNECTION_DEADLINE`].
    pub fn stop(mut self) {
        self.shutdown();
    }

    fn shutdown(&mut self) {
        let Some(thread) = self.thread.take() else {
            return;
        };
        self.stopping.store(true, Ordering::SeqCst);
        // Wake the blocked accept: shutdown(2) on a listening socket ends its accept(2) with
        // EINVAL on Linux, and needs no descriptor. (A connection of our own did, and a
        // process out of descriptors, failing to connect, waited forever for the join.)
        let fd = self.listener.as_raw_fd();
        if let Err(e) = nix::sys::socket::shutdown(fd, nix::sys::socket::Shutdown::Both) {
            tracing::debug!(error = %e, "metrics: cannot shut the listener down; connecting");
            let _ = TcpStream::connect_timeout(&self.addr, Duration::from_secs(1));
        }
        if thread.join().is_err() {
            tracing::warn!("the metrics thread panicked");
        }
    }
}

impl Drop for MetricsServer {
    fn drop(&mut self) {
        self.shutdown();
    }
}

/// Accept connections until `stopping`, each answered on a thread of its own, at most
/// [`MAX_CONNECTIONS`] at once.
fn accept(listener: &TcpListener, stopping: &AtomicBool, handle: &ControlHandle) {
    let active = Arc::new(AtomicUsize::new(0));
    let scrapes = Arc::new(Scrapes::default());
    for conn in listener.incoming() {
        if stopping.load(Ordering::SeqCst) {
            return;
        }
        let stream = match conn {
            Ok(s) => s,
            Err(e) => {
                // Out of descriptors, say: do not spin on the error.
                tracing::debug!(error = %e, "metrics: accept failed");
                thread::sleep(Duration::from_millis(10));
                continue;
            }
        };
        let Some(slot) = Slot::take(&active) else {
            // Closed unanswered: answering would mean reading its request first, and a flood
            // of such connections would then slow the accepting thread down.
            tracing::debug!("metrics: {MAX_CONNECTIONS} connections open; one more closed");
            continue;
        };
        let (handle, scrapes) = (handle.clone(), scrapes.clone());
        // The slot goes with the thread and is given back when it ends, by a panic too; or,
        // if the thread cannot start, when the closure holding it is dropped.
        let spawned = thread::Builder::new()
            .name("sluice-scrape".into())
            .spawn(move || {
                let _slot = slot;
                serve(stream, &handle, &scrapes);
            });
        if let Err(e) = spawned {
            tracing::warn!(error = %e, "metrics: cannot start a thread for a scrape");
        }
    }
}

/// A connection's place among the [`MAX_CONNECTIONS`] served at once, given back when dropped:
/// a connection thread that panicked held its place for good, and after eight such every
/// connection was closed unanswered.
struct Slot(Arc<AtomicUsize>);

impl Slot {
    /// A place, if fewer than [`MAX_CONNECTIONS`] are taken.
    fn take(active: &Arc<AtomicUsize>) -> Option<Slot> {
        if active.fetch_add(1, Ordering::SeqCst) >= MAX_CONNECTIONS {
            active.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        Some(Slot(active.clone()))
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Read one request from `stream` and answer it, all within [`CONNECTION_DEADLINE`]; then
/// close (`Connection: close`).
fn serve(mut stream: TcpStream, handle: &ControlHandle, scrapes: &Scrapes) {
    let deadline = Instant::now() + CONNECTION_DEADLINE;
    let mut reader = Deadlined {
        stream: &stream,
        deadline,
    };
    let head = match read_head(&mut reader) {
        Ok(Some(head)) => head,
        Ok(None) => {
            let body = format!("request head over {MAX_REQUEST} bytes\n");
            if respond(&mut stream, deadline, 431, &body, false).is_ok() {
                linger(&stream, deadline);
            }
            return;
        }
        Err(e) => {
            tracing::debug!(error = %e, "metrics: no request");
            return;
        }
    };
    let (status, body, allow_get) = route(&head, handle, scrapes);
    match respond(&mut stream, deadline, status, &body, allow_get) {
        Ok(()) => linger(&stream, deadline),
        Err(e) => tracing::debug!(error = %e, "metrics: cannot answer a scrape"),
    }
}

/// Longest a closing connection waits for its client to close, at most.
const LINGER: Duration = Duration::from_secs(1);
/// Most bytes a closing connection reads and throws away.
const LINGER_BYTES: u64 = 64 * 1024;

/// Close after an answer without losing it: a socket closed with input unread (a request's
/// body, pipelined requests) makes the kernel send RST, not FIN, and a client then gets a
/// reset instead of the answer's end, or loses an answer it has not read yet (RFC 9112 §9.6).
/// So the answer is ended with FIN first, then what the client still sends is read and thrown
/// away until it closes, within [`LINGER`] (and the connection's deadline) and
/// [`LINGER_BYTES`].
fn linger(stream: &TcpStream, deadline: Instant) {
    if stream.shutdown(std::net::Shutdown::Write).is_err() {
        return;
    }
    let mut rest = Deadlined {
        stream,
        deadline: deadline.min(Instant::now() + LINGER),
    }
    .take(LINGER_BYTES);
    let _ = io::copy(&mut rest, &mut io::sink());
}

/// The answer to the request with `head`: its status, its body, and whether it says to use
/// GET.
fn route(head: &str, handle: &ControlHandle, scrapes: &Scrapes) -> (u16, Arc<str>, bool) {
    let line = head.lines().next().unwrap_or("");
    let mut parts = line.split_ascii_whitespace();
    let (method, target) = (parts.next().unwrap_or(""), parts.next().unwrap_or(""));
    let path = target_path(target);
    if method.is_empty() || target.is_empty() {
        (400, "not an HTTP request\n".into(), false)
    } else if path != "/metrics" {
        (404, "not found; metrics are at /metrics\n".into(), false)
    } else if method != "GET" {
        (405, "method not allowed; use GET\n".into(), true)
    } else {
        let (status, body) = scrapes.answer(handle);
        (status, body, false)
    }
}

/// The path a request target names, without its query: the target itself in origin-form
/// (`/metrics?x`), or what follows the authority in absolute-form (`http://host:9464/metrics`,
/// RFC 9112 §3.2.2, which a server must accept; an empty path there is `/`).
fn target_path(target: &str) -> &str {
    let path = match target.split_once("://") {
        Some((scheme, rest))
            if scheme.eq_ignore_ascii_case("http") || scheme.eq_ignore_ascii_case("https") =>
        {
            let authority = rest.find(['/', '?']).unwrap_or(rest.len());
            match &rest[authority..] {
                "" => "/",
                p if p.starts_with('?') => "/",
                p => p,
            }
        }
        _ => target,
    };
    path.split('?').next().unwrap_or("")
}

/// How long the answer to a scrape serves further scrapes: at most one snapshot is asked of
/// the datapath in this time, however many clients scrape. (Any local user may scrape, from
/// [`MAX_CONNECTIONS`] connections in a loop; each snapshot is built on the datapath's thread.)
pub const SNAPSHOT_REUSE: Duration = Duration::from_millis(100);

/// The last answer to `GET /metrics`, shared by every connection.
#[derive(Default)]
struct Scrapes {
    /// When it was had, its status and its body.
    last: Mutex<Option<(Instant, u16, Arc<str>)>>,
}

impl Scrapes {
    /// The answer to a scrape: the last one if younger than [`SNAPSHOT_REUSE`], else a new one
    /// from the datapath. Scrapes that come while one waits for the datapath wait for it (at
    /// most [`SCRAPE_TIMEOUT`]) and share its answer, a failure included: else each would wait
    /// its own timeout in turn, past its connection's deadline.
    fn answer(&self, handle: &ControlHandle) -> (u16, Arc<str>) {
        // A thread that panicked holding it left nothing half-written: the answer is replaced
        // whole.
        let mut last = self.last.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some((at, status, body)) = &*last
            && at.elapsed() < SNAPSHOT_REUSE
        {
            return (*status, body.clone());
        }
        let (status, body) = scrape(handle);
        let body: Arc<str> = body.into();
        *last = Some((Instant::now(), status, body.clone()));
        (status, body)
    }
}

/// Ask the datapath for its counters and render them: a status and a body.
fn scrape(handle: &ControlHandle) -> (u16, String) {
    // Without the busiest flows, which the text does not show.
    match handle.call(Request::Counters {}, SCRAPE_TIMEOUT) {
        Reply::Stats(s) => (200, render(&s)),
        Reply::Error(e) => (503, format!("{e}\n")),
        Reply::Ok => (500, "the datapath answered without statistics\n".into()),
    }
}

/// The request head (up to the blank line that ends it, without its line breaks), `None` if
/// it does not end within [`MAX_REQUEST`] bytes, or an error if the client closed or a read
/// failed (its deadline passed, say) first.
fn read_head(r: &mut impl Read) -> io::Result<Option<String>> {
    let mut head = Vec::new();
    let mut chunk = [0u8; READ_CHUNK];
    loop {
        // Never read past the limit: a head that ends beyond it is refused however its bytes
        // arrive (a read that brought the limit's last byte and more used to let it through).
        let room = MAX_REQUEST - head.len();
        if room == 0 {
            return Ok(None);
        }
        let n = r.read(&mut chunk[..room.min(READ_CHUNK)])?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let searched = head.len();
        head.extend_from_slice(&chunk[..n]);
        // Empty lines before the request line are skipped (RFC 9112 §2.2: a client may send
        // one after a POST's body), counted in the limit all the same. The blank line that
        // ends the head (at most 3 bytes) may straddle two reads: the search starts 2 bytes
        // before the new ones (from the start each time, a client sending a byte per read made
        // each read scan the whole head).
        let start = leading_empty_lines(&head);
        let from = searched.saturating_sub(2).saturating_sub(start);
        if let Some(end) = head_end(&head[start..], from) {
            return Ok(Some(
                String::from_utf8_lossy(&head[start..start + end]).into_owned(),
            ));
        }
    }
}

/// The length of the empty lines (CRLF or bare LF) `buf` begins with.
fn leading_empty_lines(buf: &[u8]) -> usize {
    let mut at = 0;
    loop {
        match &buf[at..] {
            [b'\r', b'\n', ..] => at += 2,
            [b'\n', ..] => at += 1,
            _ => return at,
        }
    }
}

/// Where the head in `buf` ends: at the line break before the first empty line. A line ends in
/// CRLF or, as RFC 9112 §2.2 lets a recipient accept, a bare LF (what `printf ... | nc` sends):
/// so a LF followed by LF or CRLF, less a CR before it. Looked for from `from` on.
fn head_end(buf: &[u8], from: usize) -> Option<usize> {
    (from..buf.len()).find_map(|i| {
        let rest = &buf[i..];
        let ends = rest.starts_with(b"\n\n") || rest.starts_with(b"\n\r\n");
        ends.then(|| if buf[..i].ends_with(b"\r") { i - 1 } else { i })
    })
}

/// Write an answer of `status` with `body`, all before `deadline`.
fn respond(
    stream: &mut TcpStream,
    deadline: Instant,
    status: u16,
    body: &str,
    allow_get: bool,
) -> io::Result<()> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        503 => "Service Unavailable",
        _ => "Internal Server Error",
    };
    let content_type = if status == 200 {
        CONTENT_TYPE
    } else {
        "text/plain; charset=utf-8"
    };
    let allow = if allow_get { "Allow: GET\r\n" } else { "" };
    let mut out = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n{allow}\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(body.as_bytes());
    Deadlined { stream, deadline }.write_all(&out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::stats::{ClassSnapshot, LinkSnapshot, PortSnapshot};
    use std::io::{Read, Write};
    use std::net::{Ipv4Addr, TcpStream};
    use std::sync::mpsc;

    fn small() -> Snapshot {
        Snapshot {
            uptime_ns: 12_500_000_001,
            buffers_used: 3,
            buffers_total: 1024,
            ports: vec![PortSnapshot {
                name: "a".into(),
                ifname: "sl-a".into(),
                rx_frames: 10,
                rx_bytes: 15_000,
                tx_frames: 9,
                tx_bytes: 13_500,
                kernel_drops: 1,
                delayed: 2,
            }],
            links: vec![LinkSnapshot {
                from: "a".into(),
                to: "b".into(),
                policy: None,
                classes: vec![
                    ClassSnapshot {
                        name: "root".into(),
                        rate_bps: None,
                        sent: 9,
                        sent_bytes: 13_500,
                        queued: 1,
                        shaped: 0,
                    },
                    ClassSnapshot {
                        name: "gold".into(),
                        rate_bps: Some(200_000_000),
                        sent: 4,
                        sent_bytes: 6_000,
                        queued: 1,
                        shaped: 5,
                    },
                ],
                held: 1,
                scheduled: 0,
                paused: 0,
                backpressure: 7,
                top_flows: vec![],
            }],
            drops: [
                ("no_class".to_string(), 4),
                ("weird_new_reason".to_string(), 1),
            ]
            .into_iter()
            .collect(),
            malformed: [("truncated_tcp".to_string(), 2)].into_iter().collect(),
            read_pauses: 6,
            ..Snapshot::default()
        }
    }

    #[test]
    fn a_small_snapshot_renders_exactly() {
        let mut expected = String::from(
            "\
# HELP sluice_port_rx_bytes_total Bytes read from the port.
# TYPE sluice_port_rx_bytes_total counter
sluice_port_rx_bytes_total{port=\"a\",ifname=\"sl-a\"} 15000
# HELP sluice_port_tx_bytes_total Bytes written to the port.
# TYPE sluice_port_tx_bytes_total counter
sluice_port_tx_bytes_total{port=\"a\",ifname=\"sl-a\"} 13500
# HELP sluice_port_rx_frames_total Frames read from the port.
# TYPE sluice_port_rx_frames_total counter
sluice_port_rx_frames_total{port=\"a\",ifname=\"sl-a\"} 10
# HELP sluice_port_tx_frames_total Frames written to the port.
# TYPE sluice_port_tx_frames_total counter
sluice_port_tx_frames_total{port=\"a\",ifname=\"sl-a\"} 9
# HELP sluice_port_kernel_drops_total Frames the kernel dropped before the daemon read them.
# TYPE sluice_port_kernel_drops_total counter
sluice_port_kernel_drops_total{port=\"a\",ifname=\"sl-a\"} 1
# HELP sluice_port_delayed_frames Frames waiting in the port's delay line.
# TYPE sluice_port_delayed_frames gauge
sluice_port_delayed_frames{port=\"a\",ifname=\"sl-a\"} 2
# HELP sluice_class_sent_bytes_total Bytes on the wire that left through the class.
# TYPE sluice_class_sent_bytes_total counter
sluice_class_sent_bytes_total{link=\"a\",class=\"root\"} 13500
sluice_class_sent_bytes_total{link=\"a\",class=\"gold\"} 6000
# HELP sluice_class_sent_packets_total Packets that left through the class.
# TYPE sluice_class_sent_packets_total counter
sluice_class_sent_packets_total{link=\"a\",class=\"root\"} 9
sluice_class_sent_packets_total{link=\"a\",class=\"gold\"} 4
# HELP sluice_class_queued_packets Packets in the class that have not left.
# TYPE sluice_class_queued_packets gauge
sluice_class_queued_packets{link=\"a\",class=\"root\"} 1
sluice_class_queued_packets{link=\"a\",class=\"gold\"} 1
# HELP sluice_class_rate_limit_bps The class's rate limit, bit/s.
# TYPE sluice_class_rate_limit_bps gauge
sluice_class_rate_limit_bps{link=\"a\",class=\"gold\"} 200000000
# HELP sluice_class_shaped_total Packets the class's rate limit held.
# TYPE sluice_class_shaped_total counter
sluice_class_shaped_total{link=\"a\",class=\"root\"} 0
sluice_class_shaped_total{link=\"a\",class=\"gold\"} 5
# HELP sluice_link_held_packets Frames held in source buffers and the scheduler.
# TYPE sluice_link_held_packets gauge
sluice_link_held_packets{link=\"a\"} 1
# HELP sluice_link_scheduled_packets Frames in the scheduled buffer.
# TYPE sluice_link_scheduled_packets gauge
sluice_link_scheduled_packets{link=\"a\"} 0
# HELP sluice_link_paused_sources Sources paused by admission now.
# TYPE sluice_link_paused_sources gauge
sluice_link_paused_sources{link=\"a\"} 0
# HELP sluice_link_backpressure_total Frames refused with backpressure at the bound.
# TYPE sluice_link_backpressure_total counter
sluice_link_backpressure_total{link=\"a\"} 7
# HELP sluice_drops_total Frames that did not leave, by reason.
# TYPE sluice_drops_total counter
sluice_drops_total{reason=\"at_bound\"} 0
sluice_drops_total{reason=\"empty\"} 0
sluice_drops_total{reason=\"malformed\"} 0
sluice_drops_total{reason=\"no_class\"} 4
sluice_drops_total{reason=\"rejected\"} 0
sluice_drops_total{reason=\"tx_error\"} 0
sluice_drops_total{reason=\"weird_new_reason\"} 1
# HELP sluice_malformed_total Frames that did not parse, by reason.
# TYPE sluice_malformed_total counter
",
        );
        let mut reasons: Vec<&str> = Malformed::ALL
            .iter()
            .map(|m| m.name())
            .chain(crate::stats::DATAPATH_MALFORMED)
            .collect();
        reasons.sort_unstable();
        for r in reasons {
            let n = if r == "truncated_tcp" { 2 } else { 0 };
            expected.push_str(&format!("sluice_malformed_total{{reason=\"{r}\"}} {n}\n"));
        }
        expected.push_str(
            "\
# HELP sluice_read_pauses_total Times reading stopped because no buffer was free.
# TYPE sluice_read_pauses_total counter
sluice_read_pauses_total 6
# HELP sluice_ecn_marked_total Frames marked Congestion Experienced.
# TYPE sluice_ecn_marked_total counter
sluice_ecn_marked_total 0
# HELP sluice_buffers_used Frame buffers in use.
# TYPE sluice_buffers_used gauge
sluice_buffers_used 3
# HELP sluice_buffers_capacity Frame buffers in all.
# TYPE sluice_buffers_capacity gauge
sluice_buffers_capacity 1024
# HELP sluice_uptime_seconds Seconds since the daemon started.
# TYPE sluice_uptime_seconds gauge
sluice_uptime_seconds 12.500000001
",
        );
        let got = render(&small());
        for (i, (g, e)) in got.lines().zip(expected.lines()).enumerate() {
            assert_eq!(g, e, "line {}", i + 1);
        }
        assert_eq!(got.lines().count(), expected.lines().count());
        assert_eq!(got, expected);
    }

    /// Counters end in `_total` and nothing else does (Prometheus's naming rule, which
    /// `promtool check metrics` enforces: "non-counter metrics should not have \"_total\"
    /// suffix"): the gauge of all frame buffers was `sluice_buffers_total`, read as a
    /// counter of buffers by anyone who knows the rule.
    #[test]
    fn counters_and_only_counters_end_in_total() {
        let text = render(&small());
        let types: Vec<(&str, &str)> = text
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split_once(' '))
            .collect();
        assert!(types.len() > 20, "{types:?}");
        for (name, kind) in types {
            assert_eq!(
                name.ends_with("_total"),
                kind == "counter",
                "{name} is a {kind}"
            );
        }
    }

    /// The metric names docs/daemon.md gives (its "Metrics and logs" section, with
    /// `{a,b}` spelled out) are the families the endpoint serves, no more and no fewer: a
    /// family added or renamed in one place and not the other fails here. The old name the
    /// doc gives as such (`sluice_buffers_total`) is the one exception.
    #[test]
    fn the_families_in_the_daemon_doc_are_the_ones_served() {
        let doc = include_str!("../../../docs/daemon.md");
        let section = doc
            .split("## Metrics and logs")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("a Metrics and logs section in docs/daemon.md");
        // Each `{a,b}` group in a name, spelled out (`sluice_port_{rx,tx}_{bytes,frames}_total`
        // is four names).
        fn expand(name: &str) -> Vec<String> {
            let Some(open) = name.find('{') else {
                return vec![name.to_string()];
            };
            let close = open + name[open..].find('}').expect("a closed `{`");
            let (head, tail) = (&name[..open], &name[close + 1..]);
            name[open + 1..close]
                .split(',')
                .flat_map(|alt| expand(&format!("{head}{alt}{tail}")))
                .collect()
        }
        let documented: std::collections::BTreeSet<String> = section
            .split('`')
            .skip(1)
            .step_by(2)
            .filter(|code| code.starts_with("sluice_"))
            .map(|code| {
                // A family, not its labels: `sluice_drops_total{reason}`.
                code.strip_suffix("{reason}").unwrap_or(code)
            })
            .flat_map(expand)
            .filter(|name| name != "sluice_buffers_total")
            .collect();
        let served: std::collections::BTreeSet<String> = render(&small())
            .lines()
            .filter_map(|l| l.strip_prefix("# TYPE "))
            .filter_map(|l| l.split(' ').next())
            .map(str::to_string)
            .collect();
        assert_eq!(documented, served);
    }

    #[test]
    fn each_family_header_appears_once_with_many_links() {
        let mut s = small();
        let mut second = s.links[0].clone();
        second.from = "b".into();
        s.links.push(second);
        let text = render(&s);
        for family in [
            "sluice_class_sent_bytes_total",
            "sluice_link_held_packets",
            "sluice_drops_total",
        ] {
            assert_eq!(
                text.matches(&format!("# TYPE {family} ")).count(),
                1,
                "{family}"
            );
            assert_eq!(
                text.matches(&format!("# HELP {family} ")).count(),
                1,
                "{family}"
            );
        }
        assert_eq!(text.matches("sluice_class_sent_bytes_total{").count(), 4);
        // Samples of a family are contiguous, after its header.
        let lines: Vec<&str> = text.lines().collect();
        let held: Vec<usize> = (0..lines.len())
            .filter(|&i| lines[i].starts_with("sluice_link_held_packets"))
            .collect();
        assert_eq!(held.len(), 2);
        assert_eq!(held[1], held[0] + 1);
        assert!(lines[held[0] - 1].starts_with("# TYPE sluice_link_held_packets gauge"));
        assert_eq!(render(&s), text, "deterministic");
    }

    #[test]
    fn label_values_are_escaped() {
        let mut s = small();
        s.ports[0].name = "a\\b\"c\nd".into();
        s.links[0].classes[1].name = "gold \"vip\"".into();
        let text = render(&s);
        assert!(
            text.contains(
                "sluice_port_rx_bytes_total{port=\"a\\\\b\\\"c\\nd\",ifname=\"sl-a\"} 15000\n"
            ),
            "{text}"
        );
        assert!(text.contains(
            "sluice_class_sent_bytes_total{link=\"a\",class=\"gold \\\"vip\\\"\"} 6000\n"
        ));
        // No raw newline escaped into a label: every line is a comment or a sample.
        for line in text.lines() {
            assert!(
                line.starts_with("# ") || line.starts_with("sluice_"),
                "{line:?}"
            );
        }
    }

    #[test]
    fn an_empty_snapshot_has_only_its_scalars_and_reasons() {
        let text = render(&Snapshot::default());
        assert!(!text.contains("sluice_port_"));
        assert!(!text.contains("sluice_class_"));
        assert!(!text.contains("sluice_link_"));
        assert!(text.contains("sluice_drops_total{reason=\"tx_error\"} 0\n"));
        assert!(text.ends_with("sluice_uptime_seconds 0.000000000\n"));
    }

    /// Every malformed reason the datapath counts has its series from the start, at zero:
    /// those the parser names and those of the datapath itself (a frame cut at the buffer's
    /// end, one too short for its virtio-net header), which appeared only with their first
    /// frame, so that `increase()` over the window that saw it missed that frame.
    #[test]
    fn every_malformed_reason_is_there_before_its_first_frame() {
        let text = render(&Snapshot::default());
        for reason in Malformed::ALL
            .iter()
            .map(|m| m.name())
            .chain(["unreadable_frame", "truncated_vnet_header"])
        {
            assert!(
                text.contains(&format!(
                    "sluice_malformed_total{{reason=\"{reason}\"}} 0\n"
                )),
                "{reason}: {text}"
            );
        }
    }

    /// A datapath that answers Stats with [`small`] `answers` times, then stops.
    fn fake_datapath(answers: usize) -> (ControlHandle, JoinHandle<()>) {
        let (handle, rx) = ControlHandle::new(Arc::new(|| {}));
        let t = thread::spawn(move || {
            for cmd in rx.iter().take(answers) {
                let _ = cmd.reply.send(Reply::Stats(Box::new(small())));
            }
        });
        (handle, t)
    }

    /// Send a raw HTTP/1.0 request and return (status, headers, body).
    fn http(addr: SocketAddr, method: &str, path: &str) -> (u16, String, String) {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        write!(
            s,
            "{method} {path} HTTP/1.0\r\nHost: localhost\r\nConnection: close\r\n\r\n"
        )
        .unwrap();
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        let (head, body) = resp.split_once("\r\n\r\n").unwrap();
        let status = head.split(' ').nth(1).unwrap().parse().unwrap();
        (status, head.to_string(), body.to_string())
    }

    #[test]
    fn http_round_trip_404_405_and_503() {
        let (handle, dp) = fake_datapath(1);
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let addr = server.local_addr();
        assert_ne!(addr.port(), 0);

        let (status, head, body) = http(addr, "GET", "/metrics");
        assert_eq!(status, 200, "{head}");
        assert!(
            head.to_ascii_lowercase()
                .contains("content-type: text/plain; version=0.0.4"),
            "{head}"
        );
        assert_eq!(body, render(&small()));

        let (status, _, _) = http(addr, "GET", "/");
        assert_eq!(status, 404);
        let (status, _, _) = http(addr, "GET", "/metricsx");
        assert_eq!(status, 404);
        let (status, head, _) = http(addr, "POST", "/metrics");
        assert_eq!(status, 405);
        assert!(head.contains("Allow: GET"), "{head}");

        // The datapath has stopped: 503 with the reason (once the last answer is too old to
        // be reused).
        dp.join().unwrap();
        thread::sleep(SNAPSHOT_REUSE);
        let (status, _, body) = http(addr, "GET", "/metrics");
        assert_eq!(status, 503);
        assert!(body.contains("stopped"), "{body}");
        server.stop();
        assert!(
            TcpStream::connect(addr).is_err(),
            "still listening after stop"
        );
    }

    #[test]
    fn slow_and_idle_clients_block_neither_scrapes_nor_stop() {
        let (handle, dp) = fake_datapath(2);
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let addr = server.local_addr();
        // One pipelines many scrapes and never reads; others connect and say nothing.
        let mut greedy = TcpStream::connect(addr).unwrap();
        let many = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n".repeat(2000);
        greedy.write_all(many.as_bytes()).unwrap();
        let idle: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let t = std::time::Instant::now();
        let (status, _, _) = http(addr, "GET", "/metrics");
        assert_eq!(status, 200);
        // More idle connections than the bound: the next one is closed unanswered.
        let more: Vec<TcpStream> = (0..8).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let mut late = TcpStream::connect(addr).unwrap();
        late.set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let _ = late.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
        let mut answer = Vec::new();
        assert!(late.read_to_end(&mut answer).is_err() || answer.is_empty());
        // A head that never ends is cut off; stopping does not wait for any of them.
        server.stop();
        assert!(t.elapsed() < CONNECTION_DEADLINE, "{:?}", t.elapsed());
        drop((greedy, idle, more, late));
        dp.join().unwrap();
    }

    #[test]
    fn an_endless_request_head_gets_431() {
        let (handle, _dp) = fake_datapath(0);
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let mut s = TcpStream::connect(server.local_addr()).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let _ = s.write_all(&vec![b'a'; 2 * MAX_REQUEST]);
        let mut resp = String::new();
        let _ = s.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 431 "), "{resp}");
    }

    /// A reader that hands out its pieces one per read (the rest of a piece larger than the
    /// buffer at the next), then end of file; it counts what it gave.
    struct Pieces {
        pieces: std::collections::VecDeque<Vec<u8>>,
        given: usize,
    }

    impl Read for Pieces {
        fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
            let Some(mut piece) = self.pieces.pop_front() else {
                return Ok(0);
            };
            let n = piece.len().min(buf.len());
            buf[..n].copy_from_slice(&piece[..n]);
            if n < piece.len() {
                self.pieces.push_front(piece.split_off(n));
            }
            self.given += n;
            Ok(n)
        }
    }

    /// `bytes` in pieces of `size` bytes.
    fn pieces(bytes: &[u8], size: usize) -> Pieces {
        Pieces {
            pieces: bytes.chunks(size).map(<[u8]>::to_vec).collect(),
            given: 0,
        }
    }

    #[test]
    fn a_head_ends_at_a_blank_line_of_crlf_or_bare_lf_however_it_arrives() {
        let cases = [
            ("GET /metrics HTTP/1.0\r\n\r\n", "GET /metrics HTTP/1.0"),
            ("GET /metrics HTTP/1.0\n\n", "GET /metrics HTTP/1.0"),
            (
                "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET /metrics HTTP/1.1\r\nHost: x",
            ),
            (
                "GET /metrics HTTP/1.1\nHost: x\nAccept: */*\n\n",
                "GET /metrics HTTP/1.1\nHost: x\nAccept: */*",
            ),
            // Mixed endings, as RFC 9112 §2.2 allows: a LF with or without its CR.
            (
                "GET /metrics HTTP/1.1\r\nHost: x\n\r\n",
                "GET /metrics HTTP/1.1\r\nHost: x",
            ),
            (
                "GET /metrics HTTP/1.1\nHost: x\r\n\n",
                "GET /metrics HTTP/1.1\nHost: x",
            ),
            // What follows the head (a body, a pipelined request) is not part of it.
            (
                "GET /metrics HTTP/1.0\n\nGET / HTTP/1.0\n\n",
                "GET /metrics HTTP/1.0",
            ),
            // Empty lines before the request line are skipped, as RFC 9112 §2.2 asks.
            ("\r\nGET /metrics HTTP/1.0\r\n\r\n", "GET /metrics HTTP/1.0"),
            ("\n\r\n\nGET /metrics HTTP/1.0\n\n", "GET /metrics HTTP/1.0"),
            (
                "\r\n\r\nGET /metrics HTTP/1.1\r\nHost: x\r\n\r\n",
                "GET /metrics HTTP/1.1\r\nHost: x",
            ),
        ];
        for (sent, head) in cases {
            // Whole, a byte per read, and cut in two at every point (the blank line split
            // across reads, its CR and LF apart).
            let mut ways = vec![
                pieces(sent.as_bytes(), READ_CHUNK),
                pieces(sent.as_bytes(), 1),
            ];
            for cut in 1..sent.len() {
                let (a, b) = sent.as_bytes().split_at(cut);
                ways.push(Pieces {
                    pieces: [a.to_vec(), b.to_vec()].into(),
                    given: 0,
                });
            }
            for mut r in ways {
                let got = read_head(&mut r).unwrap();
                assert_eq!(got.as_deref(), Some(head), "{sent:?} in {:?}", r.pieces);
            }
        }
        // A single line break, a bare CR or a lone CR before LF do not end a head.
        for unfinished in [
            "GET /metrics HTTP/1.0\r\n",
            "GET /metrics HTTP/1.0\n",
            "GET /metrics HTTP/1.0\r\r",
            "GET /metrics HTTP/1.0\n\r",
            "GET /metrics HTTP/1.0\r\n\r",
        ] {
            let err = read_head(&mut pieces(unfinished.as_bytes(), 3)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{unfinished:?}");
        }
        // Nothing but empty lines: no head yet (a lone CR may begin one more).
        for empty in ["\r\n", "\n\r\n", "\r\n\r"] {
            let err = read_head(&mut pieces(empty.as_bytes(), 1)).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::UnexpectedEof, "{empty:?}");
        }
        // Lines that never come to a blank one are refused at the limit, as bytes without a
        // line break are, and so are empty lines that never come to a request line.
        for line in ["X: a\n", "X: a\r\n", "a", "\r\n", "\n"] {
            let endless = line.repeat(2 * MAX_REQUEST);
            let got = read_head(&mut pieces(endless.as_bytes(), READ_CHUNK)).unwrap();
            assert_eq!(got, None, "{line:?}");
        }
    }

    #[test]
    fn a_head_must_end_within_the_limit_however_it_arrives() {
        // A head of `len` bytes, its blank line included, ended by `eol`.
        let head = |len: usize, eol: &str| {
            let mut h = format!("GET /metrics HTTP/1.0{eol}X: ").into_bytes();
            h.resize(len - 2 * eol.len(), b'a');
            h.extend_from_slice(format!("{eol}{eol}").as_bytes());
            assert_eq!(h.len(), len);
            h
        };
        for eol in ["\r\n", "\n"] {
            for size in [1, 7, 1000, READ_CHUNK, 3 * MAX_REQUEST] {
                let at = head(MAX_REQUEST, eol);
                let got = read_head(&mut pieces(&at, size)).unwrap();
                assert!(got.is_some(), "{eol:?} in pieces of {size}");
                // One byte more is refused, even when the read that brings the limit's last
                // byte brings the end of the head too; and nothing past the limit is read.
                let over = head(MAX_REQUEST + 1, eol);
                let mut r = pieces(&over, size);
                let got = read_head(&mut r).unwrap();
                assert!(got.is_none(), "{eol:?} in pieces of {size}: accepted");
                assert_eq!(r.given, MAX_REQUEST);
            }
        }
        let mut endless = pieces(&vec![b'a'; 4 * MAX_REQUEST], READ_CHUNK);
        assert_eq!(read_head(&mut endless).unwrap(), None);
        assert_eq!(endless.given, MAX_REQUEST);
    }

    /// Send `pieces` one write each on a new connection and return the whole answer.
    fn send_raw(addr: SocketAddr, pieces: &[&str]) -> String {
        let mut s = TcpStream::connect(addr).unwrap();
        s.set_nodelay(true).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        for p in pieces {
            s.write_all(p.as_bytes()).unwrap();
        }
        let mut resp = String::new();
        s.read_to_string(&mut resp).unwrap();
        resp
    }

    #[test]
    fn requests_with_bare_lf_line_ends_are_answered() {
        // `printf 'GET /metrics HTTP/1.0\n\n' | nc 127.0.0.1 PORT` used to wait for a CRLF
        // until the connection's deadline and get nothing.
        let (handle, dp) = fake_datapath(6);
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let addr = server.local_addr();
        let ok = format!("Content-Length: {}", render(&small()).len());
        for pieces in [
            &["GET /metrics HTTP/1.0\n\n"][..],
            &["GET /metrics HTTP/1.1\nHost: localhost\nAccept: */*\n\n"],
            &["GET /met", "rics HTTP/1.1\nHost: local", "host\n", "\n"],
            &["GET /metrics HTTP/1.0\r\n", "\r", "\n"],
            // An empty line before the request line (they were answered 400).
            &["\r\nGET /metrics HTTP/1.0\r\n\r\n"],
            &["\n", "GET /metrics HTTP/1.0\n\n"],
        ] {
            let resp = send_raw(addr, pieces);
            assert!(
                resp.starts_with("HTTP/1.1 200 OK\r\n"),
                "{pieces:?}: {resp}"
            );
            assert!(resp.contains(&ok), "{pieces:?}: {resp}");
            assert!(resp.ends_with(&render(&small())), "{pieces:?}");
        }
        let resp = send_raw(addr, &["GET / HTTP/1.0\n\n"]);
        assert!(resp.starts_with("HTTP/1.1 404 "), "{resp}");
        server.stop();
        dp.join().unwrap();
    }

    /// A datapath that answers every request with [`small`] and reports it on the channel,
    /// until every handle is gone.
    fn recording_datapath() -> (ControlHandle, mpsc::Receiver<Request>, JoinHandle<()>) {
        let (handle, rx) = ControlHandle::new(Arc::new(|| {}));
        let (seen_tx, seen) = mpsc::channel();
        let t = thread::spawn(move || {
            for cmd in rx {
                let _ = seen_tx.send(cmd.request);
                let _ = cmd.reply.send(Reply::Stats(Box::new(small())));
            }
        });
        (handle, seen, t)
    }

    /// `GET /metrics` on a new connection until one is answered 200 (for a minute at most),
    /// and its body. A connection's slot is freed a moment after its client has closed, and a
    /// client that connects again at once may find every slot taken: closed unanswered, it
    /// tries again.
    fn scrape_answered(addr: SocketAddr) -> String {
        let patience = Instant::now() + Duration::from_secs(60);
        loop {
            assert!(
                Instant::now() < patience,
                "every connection closed unanswered"
            );
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let mut resp = String::new();
            match s.read_to_string(&mut resp) {
                Ok(_) if resp.is_empty() => continue,
                Err(e) if e.kind() == io::ErrorKind::ConnectionReset => continue,
                Ok(_) => {}
                Err(e) => panic!("{e}"),
            }
            let (head, body) = resp.split_once("\r\n\r\n").unwrap();
            assert!(head.starts_with("HTTP/1.1 200 "), "{head}");
            return body.to_string();
        }
    }

    /// A scrape asked the datapath for a whole snapshot, the busiest flows of every link
    /// included (copied and sorted on its thread), which the text does not show.
    #[test]
    fn a_scrape_asks_for_counters_without_flows() {
        let (handle, seen, dp) = recording_datapath();
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let (status, _, body) = http(server.local_addr(), "GET", "/metrics");
        assert_eq!((status, body), (200, render(&small())));
        server.stop();
        dp.join().unwrap();
        assert_eq!(seen.try_iter().collect::<Vec<_>>(), [Request::Counters {}]);
    }

    /// Every scrape had the datapath build a snapshot: clients scraping in a loop from every
    /// connection kept its thread busy. Now at most one snapshot is asked for per
    /// [`SNAPSHOT_REUSE`], however many scrape at once.
    #[test]
    fn scrapes_in_a_loop_ask_for_one_snapshot_per_reuse_interval() {
        let (handle, seen, dp) = recording_datapath();
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let addr = server.local_addr();
        let t = Instant::now();
        let (clients, scrapes) = (MAX_CONNECTIONS, 20);
        let clients: Vec<_> = (0..clients)
            .map(|_| {
                thread::spawn(move || {
                    for _ in 0..scrapes {
                        assert_eq!(scrape_answered(addr), render(&small()));
                    }
                })
            })
            .collect();
        for c in clients {
            c.join().unwrap();
        }
        // Builds start SNAPSHOT_REUSE apart at least, however fast or slow this machine is.
        let allowed = 1 + (t.elapsed().as_nanos() / SNAPSHOT_REUSE.as_nanos()) as usize;
        server.stop();
        dp.join().unwrap();
        let asked = seen.try_iter().count();
        assert!(
            (1..=allowed).contains(&asked),
            "{asked} snapshots for {} scrapes; at most {allowed} allowed",
            MAX_CONNECTIONS * scrapes
        );
    }

    #[test]
    fn request_targets_name_their_path_in_origin_and_absolute_form() {
        for (target, path) in [
            ("/metrics", "/metrics"),
            ("/metrics?x=1", "/metrics"),
            ("/", "/"),
            ("http://127.0.0.1:9464/metrics", "/metrics"),
            ("HTTP://localhost/metrics?name[]=x", "/metrics"),
            ("https://[::1]:9464/metrics", "/metrics"),
            ("http://localhost", "/"),
            ("http://localhost?x", "/"),
            ("http://localhost/", "/"),
            ("http://localhost/other/metrics", "/other/metrics"),
            // Not absolute-form: taken as it is (and not found).
            ("ftp://localhost/metrics", "ftp://localhost/metrics"),
            ("/x?u=http://h/metrics", "/x"),
        ] {
            assert_eq!(target_path(target), path, "{target}");
        }
    }

    /// A request in absolute-form, as a client sends it through a proxy, got 404.
    #[test]
    fn an_absolute_form_target_is_served() {
        let (handle, dp) = fake_datapath(1);
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let addr = server.local_addr();
        let (status, head, body) = http(addr, "GET", &format!("http://{addr}/metrics"));
        assert_eq!(status, 200, "{head}");
        assert_eq!(body, render(&small()));
        let (status, _, _) = http(addr, "GET", &format!("http://{addr}/"));
        assert_eq!(status, 404);
        server.stop();
        dp.join().unwrap();
    }

    /// A client that sent more than its request (a body, more requests) got a reset
    /// instead of its answer's end: the server closed with that input unread.
    #[test]
    fn input_past_the_request_does_not_reset_the_answer() {
        let (handle, _seen, dp) = recording_datapath();
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let scrape = "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n";
        let post = "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 20000\r\n\r\n";
        for (head, rest, status) in [
            (scrape, scrape.repeat(100), "200 OK"),
            (post, "x".repeat(20_000), "405 Method Not Allowed"),
        ] {
            let mut s = TcpStream::connect(server.local_addr()).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            s.write_all(format!("{head}{rest}").as_bytes()).unwrap();
            let mut answer = String::new();
            s.read_to_string(&mut answer)
                .unwrap_or_else(|e| panic!("{status}: {e} after {} bytes", answer.len()));
            assert!(
                answer.starts_with(&format!("HTTP/1.1 {status}\r\n")),
                "{answer}"
            );
            if status == "200 OK" {
                assert!(answer.ends_with(&render(&small())));
            }
        }
        server.stop();
        dp.join().unwrap();
    }

    /// A connection thread that panicked never gave its slot back: after [`MAX_CONNECTIONS`]
    /// of them, every connection was closed unanswered.
    #[test]
    fn a_connection_thread_that_panics_gives_its_slot_back() {
        let panics = Arc::new(AtomicUsize::new(MAX_CONNECTIONS));
        let left = panics.clone();
        // The first scrapes' threads panic in the call to the datapath, when they wake it.
        let (handle, rx) = ControlHandle::new(Arc::new(move || {
            let panicking = left
                .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
                .is_ok();
            assert!(!panicking, "a scrape's thread fails (as this test wants)");
        }));
        let dp = thread::spawn(move || {
            for cmd in rx {
                let _ = cmd.reply.send(Reply::Stats(Box::new(small())));
            }
        });
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let addr = server.local_addr();
        while panics.load(Ordering::SeqCst) > 0 {
            let mut s = TcpStream::connect(addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
            let _ = s.write_all(b"GET /metrics HTTP/1.0\r\n\r\n");
            let mut answer = Vec::new();
            let _ = s.read_to_end(&mut answer);
            assert!(answer.is_empty(), "{}", String::from_utf8_lossy(&answer));
        }
        assert_eq!(scrape_answered(addr), render(&small()));
        server.stop();
        dp.join().unwrap();
    }

    /// Wait (a minute at most) until the thread of this process named `name` is in system call
    /// `number`.
    fn wait_for_syscall(name: &str, number: libc::c_long) {
        let patience = Instant::now() + Duration::from_secs(60);
        while Instant::now() < patience {
            for task in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
                let read = |file| std::fs::read_to_string(task.path().join(file));
                if read("comm").is_ok_and(|c| c.trim() == name)
                    && let Ok(call) = read("syscall")
                    && call.split(' ').next() == Some(&number.to_string())
                {
                    return;
                }
            }
            thread::sleep(Duration::from_millis(10));
        }
        panic!("thread {name} is not in system call {number}");
    }

    /// Set in the process [`stop_needs_no_descriptor`] runs itself in.
    const OUT_OF_DESCRIPTORS: &str = "SLUICE_TEST_METRICS_OUT_OF_DESCRIPTORS";

    /// Stopping woke the accepting thread by connecting to it; in a process out of
    /// descriptors the connect failed, and stopping waited for the thread forever. The test
    /// runs itself in a process of its own, where no descriptor can be opened (its limit
    /// lowered to 0), and that process must end.
    #[test]
    fn stop_needs_no_descriptor() {
        if std::env::var_os(OUT_OF_DESCRIPTORS).is_some() {
            let (handle, _rx) = ControlHandle::new(Arc::new(|| {}));
            let server =
                MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
            // Waiting in accept(2) already: one called with no descriptor to spare fails at
            // once, and the thread would see the stop when it tries again.
            wait_for_syscall("sluice-metrics", libc::SYS_accept4);
            use nix::sys::resource::{Resource, getrlimit, setrlimit};
            let (_, hard) = getrlimit(Resource::RLIMIT_NOFILE).unwrap();
            setrlimit(Resource::RLIMIT_NOFILE, 0, hard).unwrap();
            assert!(TcpStream::connect(server.local_addr()).is_err());
            server.stop();
            return;
        }
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "metrics::tests::stop_needs_no_descriptor"])
            .args(["--test-threads", "1", "--nocapture"])
            .env(OUT_OF_DESCRIPTORS, "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let patience = Instant::now() + Duration::from_secs(60);
        let status = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break status;
            }
            if Instant::now() > patience {
                let _ = child.kill();
                let _ = child.wait();
                panic!("stopping the server out of descriptors did not end in a minute");
            }
            thread::sleep(Duration::from_millis(20));
        };
        let mut out = String::new();
        let _ = child.stdout.take().unwrap().read_to_string(&mut out);
        assert!(status.success(), "{status}: {out}");
        // The test ran there (a name matching nothing would pass as well).
        assert!(out.contains("test result: ok. 1 passed"), "{out}");
    }

    #[test]
    fn an_idle_connection_does_not_block_a_scrape() {
        let (handle, dp) = fake_datapath(1);
        let server =
            MetricsServer::start(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)), handle).unwrap();
        let _idle = TcpStream::connect(server.local_addr()).unwrap();
        let (status, _, _) = http(server.local_addr(), "GET", "/metrics");
        assert_eq!(status, 200);
        drop(server);
        dp.join().unwrap();
    }

    #[test]
    fn non_loopback_addresses_are_refused() {
        let (handle, _dp) = fake_datapath(0);
        for a in ["0.0.0.0:9464", "10.1.2.3:9464", "[::]:9464"] {
            let addr: SocketAddr = a.parse().unwrap();
            let err = MetricsServer::start(addr, handle.clone()).err().unwrap();
            assert!(matches!(err, MetricsError::NotLoopback(_)));
            assert!(err.to_string().contains("not a loopback address"), "{err}");
        }
    }
}
