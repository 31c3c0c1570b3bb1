//! The daemon (`sluice run`): sets up ports and namespaces from a [`Config`], runs the
//! [`Datapath`] until SIGTERM or SIGINT, and takes down everything it created.
//!
//! **Start**, in an order where every failure leaves nothing behind: check the policies (build
//! every scheduler), check the ports' interfaces (an `af_packet` interface must exist, a tap's
//! name must be free), bind the control socket and the metrics endpoint, then create the ports
//! and place taps in their namespaces under a [`Setup`] guard. Any error drops what exists so
//! far: the guard undoes its steps, taps vanish when closed, the control socket file is
//! removed.
//!
//! **Run**. One thread owns the datapath. In event mode it sleeps in `epoll` on the ports'
//! descriptors, a `timerfd` armed (absolute, `CLOCK_MONOTONIC`) at the datapath's next release,
//! a `signalfd` and an `eventfd` the control plane writes to; an idle daemon makes no system
//! call until a frame, a release, a signal or a request arrives. While a port must not be read
//! (its link pushes back, or no buffer is free), its descriptor is taken out of the epoll set,
//! so a full daemon waits for releases instead of spinning. In busy mode the thread polls
//! without sleeping (and checks signals and requests every [`BUSY_CHECK_EVERY`] rounds).
//! Control requests are answered between two steps.
//!
//! **Stop**. SIGTERM, SIGINT or SIGHUP end the loop; frames still held are counted and
//! released (the log says how many), the control socket file is removed, ports are closed (taps
//! vanish), and the guard deletes the namespaces the daemon created.

use crate::config::{Config, Mode, PortKind};
use crate::control::{Command, ControlHandle, Reply, Request};
use crate::control_socket::ControlSocket;
use crate::datapath::{Datapath, DatapathConfig, LinkSpec};
use crate::metrics::MetricsServer;
use crate::netns::{self, NetnsError, Setup};
use crate::port::Port;
use crate::port::af_packet::AfPacket;
use crate::port::tap::Tap;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use sluice_sched::Scheduler;
use sluice_sched::units::{Rate, parse_size};
use std::os::fd::{AsFd, BorrowedFd};
use std::path::Path;
use std::sync::Arc;
use std::sync::mpsc::Receiver;
use std::time::Duration;

/// Busy mode looks at signals and control requests once per this many rounds.
pub const BUSY_CHECK_EVERY: u32 = 1024;

/// Rounds of work the event loop does before it looks at the outside world again.
const ROUNDS_PER_WAKE: u32 = 64;

/// Frames the scheduled buffer (zD) of every link holds.
const SCHEDULED: usize = 4096;

/// The policy of a link without a policy file: one FIFO, no limit.
const FIFO_POLICY: &str =
    "[scheduler]\ndefault = \"fifo\"\n\n[[node]]\nname = \"fifo\"\npolicy = \"fifo\"\n";

/// Why the daemon cannot start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A link's policy file is bad.
    #[error("link {link}: {source}")]
    Policy {
        /// `from -> to`.
        link: String,
        /// Why.
        source: sluice_sched::config::PolicyError,
    },
    /// A port cannot be opened or created.
    #[error("port `{port}`: {message}")]
    Port {
        /// The port's name.
        port: String,
        /// Why.
        message: String,
    },
    /// Namespaces or interfaces cannot be set up.
    #[error("port `{port}`: {source}")]
    Netns {
        /// The port's name.
        port: String,
        /// Why.
        source: NetnsError,
    },
    /// The datapath cannot be built.
    #[error(transparent)]
    Datapath(#[from] crate::datapath::DatapathError),
    /// The control socket.
    #[error("control socket: {0}")]
    Control(#[from] crate::control_socket::ControlSocketError),
    /// The metrics endpoint.
    #[error("metrics endpoint: {0}")]
    Metrics(#[from] crate::metrics::MetricsError),
    /// A system call of the event loop failed.
    #[error("{what}: {source}")]
    Sys {
        /// What was being done.
        what: &'static str,
        /// The error.
        source: nix::Error,
    },
}

fn sys(what: &'static str) -> impl FnOnce(nix::Error) -> DaemonError {
    move |source| DaemonError::Sys { what, source }
}

/// What a run ends with.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Summary {
    /// Signal that stopped the daemon.
    pub signal: Option<String>,
    /// Frames that were still held at the stop and were released unsent.
    pub dropped_at_stop: u64,
}

/// Now, in nanoseconds of `CLOCK_MONOTONIC` (the clock the timerfd is armed on).
pub fn now_ns() -> u64 {
    match nix::time::clock_gettime(nix::time::ClockId::CLOCK_MONOTONIC) {
        Ok(t) => (t.tv_sec() as u64)
            .saturating_mul(1_000_000_000)
            .saturating_add(t.tv_nsec() as u64),
        // CLOCK_MONOTONIC cannot fail on Linux; never go backwards if it did.
        Err(_) => 0,
    }
}

/// Block the signals the daemon handles, in the calling thread and every thread it starts
/// afterwards; they are read from a signalfd. Call before starting any thread.
pub fn block_signals() -> Result<SigSet, DaemonError> {
    let mut mask = SigSet::empty();
    for s in [Signal::SIGTERM, Signal::SIGINT, Signal::SIGHUP] {
        mask.add(s);
    }
    mask.thread_block().map_err(sys("blocking signals"))?;
    Ok(mask)
}

/// Build every link's scheduler (policies are checked before anything is created).
fn schedulers(cfg: &Config) -> Result<Vec<Scheduler>, DaemonError> {
    cfg.links
        .iter()
        .map(|l| {
            let link = format!("{} -> {}", cfg.ports[l.from].name, cfg.ports[l.to].name);
            match &l.policy {
                Some(path) => sluice_sched::config::build_file(path),
                None => sluice_sched::config::build_str(FIFO_POLICY, "(built-in fifo)"),
            }
            .map_err(|source| DaemonError::Policy { link, source })
        })
        .collect()
}

/// Check `cfg` without creating anything: every policy builds, every `af_packet` interface
/// exists, no tap name or namespace is taken.
pub fn check(cfg: &Config) -> Result<(), DaemonError> {
    schedulers(cfg)?;
    check_interfaces(cfg)
}

/// Refuse interfaces that are missing (`af_packet`) or taken (taps) before creating anything.
fn check_interfaces(cfg: &Config) -> Result<(), DaemonError> {
    for (i, p) in cfg.ports.iter().enumerate() {
        let fail = |source| DaemonError::Netns {
            port: p.name.clone(),
            source,
        };
        if cfg.ports[..i].iter().any(|q| q.ifname == p.ifname) {
            return Err(DaemonError::Port {
                port: p.name.clone(),
                message: format!("interface `{}` is named by another port too", p.ifname),
            });
        }
        match &p.kind {
            PortKind::AfPacket => netns::require_interface(&p.ifname).map_err(fail)?,
            PortKind::Tap { netns, .. } => {
                if netns::interface_exists(None, &p.ifname).map_err(fail)? {
                    return Err(DaemonError::Port {
                        port: p.name.clone(),
                        message: format!(
                            "interface `{}` already exists; choose another ifname",
                            p.ifname
                        ),
                    });
                }
                if let Some(ns) = netns {
                    if netns::netns_exists(ns) && !cfg.ports[..i].iter().any(|q| same_netns(q, ns))
                    {
                        return Err(fail(NetnsError::Busy(ns.clone())));
                    }
                }
            }
        }
    }
    Ok(())
}

fn same_netns(p: &crate::config::PortConfig, ns: &str) -> bool {
    matches!(&p.kind, PortKind::Tap { netns: Some(n), .. } if n == ns)
}

/// Create or open every port; taps are placed in their namespaces under `setup`.
fn open_ports(cfg: &Config, setup: &mut Setup) -> Result<Vec<Box<dyn Port>>, DaemonError> {
    let mut ports: Vec<Box<dyn Port>> = Vec::with_capacity(cfg.ports.len());
    for p in &cfg.ports {
        let port_err = |e: std::io::Error| DaemonError::Port {
            port: p.name.clone(),
            message: e.to_string(),
        };
        let netns_err = |source| DaemonError::Netns {
            port: p.name.clone(),
            source,
        };
        match &p.kind {
            PortKind::AfPacket => {
                ports.push(Box::new(AfPacket::open(&p.ifname).map_err(port_err)?))
            }
            PortKind::Tap { netns, address } => {
                let tap = Tap::create(&p.ifname).map_err(port_err)?;
                // Pushed before it is placed, so that an error drops (and removes) it.
                ports.push(Box::new(tap));
                match netns {
                    Some(ns) => setup
                        .place(&p.ifname, ns, *address, None)
                        .map_err(netns_err)?,
                    None => {
                        if let Some((addr, prefix)) = address {
                            setup
                                .add_address(None, &p.ifname, *addr, *prefix)
                                .map_err(netns_err)?;
                        }
                        setup.link_up(None, &p.ifname).map_err(netns_err)?;
                    }
                }
            }
        }
        tracing::info!(port = %p.name, ifname = %p.ifname, kind = ?p.kind, "port ready");
    }
    Ok(ports)
}

/// A running daemon: everything it created. Fields drop in declaration order, so an error
/// anywhere (or a plain drop) closes the ports before the setup guard removes namespaces.
pub struct Daemon {
    datapath: Datapath,
    commands: Receiver<Command>,
    wake: Arc<EventFd>,
    control: Option<ControlSocket>,
    metrics: Option<MetricsServer>,
    setup: Option<Setup>,
    mode: Mode,
    started_ns: u64,
}

impl Daemon {
    /// Check `cfg`, create its ports and namespaces and bind its control endpoints. Call
    /// [`block_signals`] first when the daemon will be stopped by signals.
    pub fn start(cfg: &Config) -> Result<Daemon, DaemonError> {
        let schedulers = schedulers(cfg)?;
        check_interfaces(cfg)?;
        let wake = Arc::new(
            EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
                .map_err(sys("eventfd"))?,
        );
        let waker = wake.clone();
        let (handle, commands) = ControlHandle::new(Arc::new(move || {
            // A full counter (2^64 - 2 wakes pending) already wakes the loop.
            let _ = waker.write(1);
        }));
        let control = match &cfg.control {
            Some(path) => Some(ControlSocket::bind(path, handle.clone())?),
            None => None,
        };
        let metrics = match cfg.metrics {
            Some(addr) => Some(MetricsServer::start(addr, handle.clone())?),
            None => None,
        };
        let mut setup = Setup::new();
        let ports = open_ports(cfg, &mut setup)?;
        let links = cfg
            .links
            .iter()
            .zip(schedulers)
            .map(|(l, scheduler)| LinkSpec {
                from: l.from,
                to: l.to,
                scheduler,
                policy: l.policy.as_ref().map(|p| p.display().to_string()),
            })
            .collect();
        let datapath = Datapath::new(
            ports,
            cfg.ports.iter().map(|p| p.name.clone()).collect(),
            cfg.ports
                .iter()
                .map(|p| (p.delay_ns, p.jitter_ns))
                .collect(),
            links,
            DatapathConfig {
                buffers: cfg.buffers,
                at_bound: cfg.at_bound,
                malformed: cfg.malformed,
                scheduled: SCHEDULED,
                ecn: cfg.ecn,
            },
        )?;
        Ok(Daemon {
            datapath,
            commands,
            wake,
            control,
            metrics,
            setup: Some(setup),
            mode: cfg.mode,
            started_ns: now_ns(),
        })
    }

    /// The datapath.
    pub fn datapath(&self) -> &Datapath {
        &self.datapath
    }

    /// The metrics endpoint's address, if it has one.
    pub fn metrics_addr(&self) -> Option<std::net::SocketAddr> {
        self.metrics.as_ref().map(MetricsServer::local_addr)
    }

    /// Run until one of `signals` arrives (see [`block_signals`]), then stop and take down
    /// everything.
    pub fn run(mut self, signals: &SigSet) -> Result<Summary, DaemonError> {
        let sfd = SignalFd::with_flags(signals, SfdFlags::SFD_NONBLOCK | SfdFlags::SFD_CLOEXEC)
            .map_err(sys("signalfd"))?;
        // Releases are due to the microsecond; the default 50 us timer slack would add to
        // every one of them.
        let _ = nix::sys::prctl::set_timerslack(1);
        let result = match self.mode {
            Mode::Event => self.run_event(&sfd),
            Mode::Busy => self.run_busy(&sfd),
        };
        let signal = result?;
        Ok(self.stop(signal))
    }

    /// Answer every waiting control request.
    fn serve(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            let reply = self.answer(cmd.request);
            let _ = cmd.reply.send(reply);
        }
    }

    fn answer(&mut self, request: Request) -> Reply {
        let result = match request {
            Request::Stats {} => {
                return Reply::Stats(Box::new(
                    self.datapath
                        .snapshot(now_ns().saturating_sub(self.started_ns)),
                ));
            }
            Request::SetRate {
                link,
                node,
                rate,
                burst,
            } => {
                let rate = match rate.trim() {
                    "none" | "" => Ok(None),
                    r => Rate::parse(r)
                        .map(Some)
                        .map_err(|e| format!("rate \"{r}\": {e}")),
                };
                let burst = match burst.as_deref() {
                    None => Ok(0),
                    Some(b) => parse_size(b).map_err(|e| format!("burst \"{b}\": {e}")),
                };
                match (rate, burst) {
                    (Ok(rate), Ok(burst)) => self.datapath.set_rate(&link, &node, rate, burst),
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            Request::SetWeight { link, node, weight } => {
                self.datapath.set_weight(&link, &node, weight)
            }
        };
        match result {
            Ok(()) => {
                tracing::info!("control request applied");
                Reply::Ok
            }
            Err(e) => Reply::Error(e),
        }
    }

    /// The event loop; returns the signal that stopped it.
    fn run_event(&mut self, sfd: &SignalFd) -> Result<Option<String>, DaemonError> {
        const SIGNAL: u64 = u64::MAX;
        const TIMER: u64 = u64::MAX - 1;
        const CONTROL: u64 = u64::MAX - 2;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll"))?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(sys("timerfd"))?;
        epoll
            .add(sfd, EpollEvent::new(EpollFlags::EPOLLIN, SIGNAL))
            .map_err(sys("epoll add"))?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TIMER))
            .map_err(sys("epoll add"))?;
        epoll
            .add(
                self.wake.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, CONTROL),
            )
            .map_err(sys("epoll add"))?;
        let n = self.datapath.ports().len();
        let mut watching = vec![false; n];
        let mut armed: Option<u64> = None;
        let mut events = [EpollEvent::empty(); 16];
        loop {
            let mut busy = false;
            let mut rounds = 0;
            while self.datapath.step(now_ns()) {
                rounds += 1;
                if rounds == ROUNDS_PER_WAKE {
                    busy = true;
                    break;
                }
            }
            self.serve();
            for (p, watched) in watching.iter_mut().enumerate() {
                let want = self.datapath.wants_read(p);
                if want != *watched {
                    let fd = self.datapath.ports()[p].fd();
                    // SAFETY: the descriptor is owned by port `p` of the datapath, which
                    // outlives this borrow (it is used for this one call only).
                    let fd = unsafe { BorrowedFd::borrow_raw(fd) };
                    let r = if want {
                        epoll.add(fd, EpollEvent::new(EpollFlags::EPOLLIN, p as u64))
                    } else {
                        epoll.delete(fd)
                    };
                    r.map_err(sys("epoll update"))?;
                    *watched = want;
                }
            }
            let next = self.datapath.next_wake(now_ns());
            if next != armed {
                match next {
                    Some(t) => timer
                        .set(
                            Expiration::OneShot(TimeSpec::from_duration(Duration::from_nanos(
                                t.max(1),
                            ))),
                            TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                        )
                        .map_err(sys("timerfd set"))?,
                    None => timer.unset().map_err(sys("timerfd unset"))?,
                }
                armed = next;
            }
            let timeout = if busy {
                EpollTimeout::ZERO
            } else {
                EpollTimeout::NONE
            };
            let ready = match epoll.wait(&mut events, timeout) {
                Ok(k) => k,
                Err(nix::Error::EINTR) => 0,
                Err(e) => {
                    return Err(DaemonError::Sys {
                        what: "epoll wait",
                        source: e,
                    });
                }
            };
            for ev in &events[..ready] {
                match ev.data() {
                    SIGNAL => {
                        if let Some(sig) = read_signal(sfd) {
                            return Ok(Some(sig));
                        }
                    }
                    TIMER => {
                        // Expired: the one-shot timer is disarmed; drain its count.
                        let _ = nix::unistd::read(&timer, &mut [0u8; 8]);
                        armed = None;
                    }
                    CONTROL => {
                        let _ = self.wake.read();
                    }
                    _ => {} // a port has frames: the next step reads every port
                }
            }
        }
    }

    /// The busy-poll loop; returns the signal that stopped it.
    fn run_busy(&mut self, sfd: &SignalFd) -> Result<Option<String>, DaemonError> {
        let mut rounds = 0u32;
        loop {
            self.datapath.step(now_ns());
            rounds += 1;
            if rounds == BUSY_CHECK_EVERY {
                rounds = 0;
                if let Some(sig) = read_signal(sfd) {
                    return Ok(Some(sig));
                }
                if self.wake.read().is_ok() {
                    self.serve();
                }
            }
        }
    }

    /// Take everything down, in order: control endpoints, ports (taps vanish), then what the
    /// setup guard did (addresses, moves, namespaces). Returns what the run ends with.
    fn stop(self, signal: Option<String>) -> Summary {
        let dropped_at_stop = self.datapath.held() as u64;
        tracing::info!(
            signal = signal.as_deref().unwrap_or("none"),
            dropped_at_stop,
            "stopping"
        );
        let Daemon {
            datapath,
            control,
            metrics,
            setup,
            ..
        } = self;
        drop(control);
        drop(metrics);
        drop(datapath);
        if let Some(setup) = setup {
            if let Err(e) = setup.teardown() {
                tracing::warn!(error = %e, "teardown incomplete");
            }
        }
        Summary {
            signal,
            dropped_at_stop,
        }
    }
}

/// Read one pending signal's name, if any.
fn read_signal(sfd: &SignalFd) -> Option<String> {
    match sfd.read_signal() {
        Ok(Some(info)) => Some(Signal::try_from(info.ssi_signo as i32).map_or_else(
            |_| format!("signal {}", info.ssi_signo),
            |s| s.as_str().to_string(),
        )),
        _ => None,
    }
}

/// Start the daemon described by the file at `path`, run it until a signal, and take it down.
pub fn run_file(path: &Path) -> Result<Summary, Box<dyn std::error::Error>> {
    let signals = block_signals()?;
    let cfg = Config::load(path)?;
    let daemon = Daemon::start(&cfg)?;
    tracing::info!(config = %path.display(), ports = cfg.ports.len(), links = cfg.links.len(), mode = ?cfg.mode, "sluice running");
    Ok(daemon.run(&signals)?)
}
