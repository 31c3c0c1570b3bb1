//! The daemon (`sluice run`): sets up ports and namespaces from a [`Config`], runs the
//! datapath until SIGTERM or SIGINT, and takes down everything it created.
//!
//! **Start**, in an order where every failure leaves nothing behind: check the policies (build
//! every scheduler), check the ports' interfaces (an `af_packet` interface must exist, a tap's
//! name must be free), bind the control socket and the metrics endpoint, then create the ports
//! and place taps in their namespaces under a [`Setup`] guard. Any error drops what exists so
//! far: the guard undoes its steps, taps vanish when closed, the control socket file is
//! removed (with the directories created for it, if empty).
//!
//! **Run**. With one engine (the default) the main thread runs it ([`engine`]): an `epoll`
//! loop over the ports, a `timerfd` at the next release, the control plane's `eventfd` and the
//! `signalfd`; an idle daemon makes no system call. With `engines = N` every port gets N
//! queues (a multi-queue tap, or N AF_PACKET sockets in a fanout group), each engine thread
//! owns one queue of every port and its own schedulers, and the main thread supervises them
//! and shares every rate limit between them ([`supervisor`]).
//!
//! **Stop**. SIGTERM, SIGINT or SIGHUP end the run; frames still held are counted and released
//! (the log says how many), the control socket file is removed, ports are closed (taps vanish),
//! and the guard deletes the namespaces the daemon created.

pub mod engine;
pub mod supervisor;

use crate::config::{Config, PortKind};
use crate::control::{Command, ControlHandle};
use crate::control_socket::ControlSocket;
use crate::datapath::{Datapath, DatapathConfig, LinkSpec};
use crate::metrics::MetricsServer;
use crate::netns::{self, NetnsError, Setup};
use crate::port::Port;
use crate::port::af_packet::{AfPacket, RingConfig};
use crate::port::tap::Tap;
use engine::{Engine, Internal};
use nix::sys::eventfd::{EfdFlags, EventFd};
use nix::sys::signal::{SigSet, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use sluice_flow::nba::{Aggregate, Nba, NbaConfig};
use sluice_sched::Scheduler;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::AtomicBool;
use std::sync::mpsc::{self, Receiver};
use supervisor::{AggregateNode, EngineLink, Supervisor};

/// Frames the scheduled buffer (zD) of every link holds.
const SCHEDULED: usize = 4096;

/// Frames a tap queues toward the daemon (its `txqueuelen`; the kernel's default for a tap
/// is 500). The senders' TCP small queues let each flow keep about two frames there, so
/// with 1000 flows 500 overflowed whenever the daemon fell behind, and the kernel dropped
/// (`sluice bench dp --flows 1000 --targets 1gbit`: 83 000 frames dropped at the tap, 112 000
/// retransmissions, 554 Mbit/s; with 20 000: none, none, 771 Mbit/s). TSQ also bounds
/// the memory this holds, whatever the length.
const TAP_TXQUEUELEN: u32 = 20_000;

/// The policy of a link without a policy file: one FIFO, no limit.
const FIFO_POLICY: &str =
    "[scheduler]\ndefault = \"fifo\"\n\n[[node]]\nname = \"fifo\"\npolicy = \"fifo\"\n";

/// Why the daemon cannot start or stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum DaemonError {
    /// A link's policy file is bad.
    // Not a `source`: the message says it, and a chain printed with its causes (`sluice run
    // --check`) said it twice.
    #[error("link {link}: {error}")]
    Policy {
        /// `from -> to`.
        link: String,
        /// Why.
        error: sluice_sched::config::PolicyError,
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
    #[error("port `{port}`: {error}")]
    Netns {
        /// The port's name.
        port: String,
        /// Why (not a `source`, as for `Policy`).
        error: NetnsError,
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
    /// The allocator of several engines cannot share a rate.
    #[error("engines: {0}")]
    Nba(#[from] sluice_flow::nba::NbaError),
    /// An engine thread failed.
    #[error("{0}")]
    Engine(String),
    /// A port's device went away while the daemon ran.
    #[error("port `{port}`: its device is gone ({error})")]
    PortGone {
        /// The port's name.
        port: String,
        /// What reading it said.
        error: String,
    },
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
            .inspect(|s| {
                for w in rule_warnings(s) {
                    tracing::warn!(link = %link, "{w}");
                }
            })
            .map_err(|error| DaemonError::Policy { link, error })
        })
        .collect()
}

/// The warnings for a policy with rules that match no frame the daemon reads
/// (docs/policy-files.md): rules on class ids, which the daemon gives no packet, and rules on
/// the ports of a protocol other than TCP and UDP, whose ports it does not read.
fn rule_warnings(s: &Scheduler) -> Vec<String> {
    let mut out = Vec::new();
    if let n @ 1.. = s.class_rules() {
        out.push(format!(
            "{n} classify rule(s) test a class id, which the daemon gives no packet: they match \
             none (their packets go to the default, or are rejected as no_class); classify by \
             dscp, vlan, proto, addresses or ports"
        ));
    }
    if let n @ 1.. = s.port_rules_beyond_tcp_udp() {
        out.push(format!(
            "{n} classify rule(s) test the ports of a protocol other than tcp and udp, whose \
             ports the daemon does not read: they match no packet"
        ));
    }
    out
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
        let fail = |error| DaemonError::Netns {
            port: p.name.clone(),
            error,
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

/// Create or open every port, `engines` queues each (`ports[queue][port]`); taps are placed
/// in their namespaces under `setup`.
fn open_ports(
    cfg: &Config,
    engines: usize,
    setup: &mut Setup,
) -> Result<Vec<Vec<Box<dyn Port>>>, DaemonError> {
    let mut queues: Vec<Vec<Box<dyn Port>>> = (0..engines).map(|_| Vec::new()).collect();
    for p in &cfg.ports {
        let port_err = |e: std::io::Error| DaemonError::Port {
            port: p.name.clone(),
            message: e.to_string(),
        };
        let netns_err = |error| DaemonError::Netns {
            port: p.name.clone(),
            error,
        };
        match &p.kind {
            PortKind::AfPacket => {
                // A fanout group of its own per port (only one socket: no group), named by
                // the kernel: a name of the daemon's making may be another process's group.
                let sockets = if engines > 1 {
                    AfPacket::open_group(&p.ifname, RingConfig::default(), engines)
                        .map_err(port_err)?
                } else {
                    vec![AfPacket::open(&p.ifname).map_err(port_err)?]
                };
                for (q, sock) in queues.iter_mut().zip(sockets) {
                    q.push(Box::new(sock));
                }
            }
            PortKind::Tap { netns, address } => {
                // Pushed before the tap is placed, so that an error drops (and removes) it.
                for (q, tap) in queues
                    .iter_mut()
                    .zip(Tap::create_queues(&p.ifname, engines).map_err(port_err)?)
                {
                    q.push(Box::new(tap));
                }
                setup
                    .set_txqueuelen(&p.ifname, TAP_TXQUEUELEN)
                    .map_err(netns_err)?;
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
        tracing::info!(port = %p.name, ifname = %p.ifname, kind = ?p.kind, queues = engines, "port ready");
    }
    Ok(queues)
}

/// One engine's datapath over `ports` (one queue of every port).
fn datapath(
    cfg: &Config,
    ports: Vec<Box<dyn Port>>,
    engines: usize,
) -> Result<Datapath, DaemonError> {
    let links = cfg
        .links
        .iter()
        .zip(schedulers(cfg)?)
        .map(|(l, scheduler)| LinkSpec {
            from: l.from,
            to: l.to,
            scheduler,
            policy: l.policy.as_ref().map(|p| p.display().to_string()),
        })
        .collect();
    Ok(Datapath::new(
        ports,
        cfg.ports.iter().map(|p| p.name.clone()).collect(),
        cfg.ports
            .iter()
            .map(|p| (p.delay_ns, p.jitter_ns))
            .collect(),
        links,
        DatapathConfig {
            memory: (cfg.memory / engines).max(crate::buffers::MIN_MEMORY),
            at_bound: cfg.at_bound,
            malformed: cfg.malformed,
            scheduled: SCHEDULED,
            ecn: cfg.ecn,
        },
    )?)
}

/// A new non-blocking eventfd.
fn eventfd() -> Result<Arc<EventFd>, DaemonError> {
    Ok(Arc::new(
        EventFd::from_flags(EfdFlags::EFD_NONBLOCK | EfdFlags::EFD_CLOEXEC)
            .map_err(sys("eventfd"))?,
    ))
}

/// A control handle that wakes whoever polls `wake`.
fn handle_for(wake: &Arc<EventFd>) -> (ControlHandle, Receiver<Command>) {
    let waker = wake.clone();
    ControlHandle::new(Arc::new(move || {
        // A full counter (2^64 - 2 wakes pending) already wakes the loop.
        let _ = waker.write(1);
    }))
}

/// What runs the datapath: the main thread's own engine, or several supervised ones.
enum Engines {
    One(Box<Engine>),
    Many(Box<Supervisor>),
}

/// A running daemon: everything it created. Fields drop in declaration order, so an error
/// anywhere (or a plain drop) stops the engines and closes the ports before the setup guard
/// removes namespaces.
pub struct Daemon {
    engines: Engines,
    control: Option<ControlSocket>,
    metrics: Option<MetricsServer>,
    setup: Option<Setup>,
}

impl Drop for Supervisor {
    fn drop(&mut self) {
        self.stop();
    }
}

impl Daemon {
    /// Check `cfg`, create its ports and namespaces, bind its control endpoints and start its
    /// engines. Call [`block_signals`] first when the daemon will be stopped by signals (and
    /// before any thread starts).
    pub fn start(cfg: &Config) -> Result<Daemon, DaemonError> {
        check(cfg)?;
        let n = cfg.engines;
        let wake = eventfd()?;
        let (handle, commands) = handle_for(&wake);
        let control = match &cfg.control {
            Some(path) => Some(ControlSocket::bind(path, handle.clone())?),
            None => None,
        };
        let metrics = match cfg.metrics {
            Some(addr) => Some(MetricsServer::start(addr, handle.clone())?),
            None => None,
        };
        let mut setup = Setup::new();
        let queues = open_ports(cfg, n, &mut setup)?;
        let started_ns = now_ns();
        let stop = || Arc::new(AtomicBool::new(false));
        let engines = if n == 1 {
            let ports = queues.into_iter().next().unwrap_or_default();
            let (_, internal) = mpsc::sync_channel::<Internal>(1);
            Engines::One(Box::new(Engine::new(
                datapath(cfg, ports, 1)?,
                commands,
                internal,
                wake,
                stop(),
                cfg.mode,
                started_ns,
            )))
        } else {
            let mut datapaths = Vec::with_capacity(n);
            for ports in queues {
                datapaths.push(datapath(cfg, ports, n)?);
            }
            let aggregates = aggregate_nodes(cfg, &datapaths[0]);
            let nba = Nba::new(
                n,
                &aggregates
                    .iter()
                    .map(|a| {
                        let rate = datapaths[0].links()[a.link]
                            .pipeline
                            .scheduler()
                            .rate(a.node);
                        Aggregate {
                            name: format!("{}/{}", a.from, a.name),
                            rate_bps: rate.map_or(0, |r| r.bps()),
                        }
                    })
                    .collect::<Vec<_>>(),
                NbaConfig::default(),
            )?;
            // Each engine is the supervisor's as soon as it runs, so that an error starting a
            // later one stops and joins it (the supervisor's drop) before the ports close and
            // the setup is undone.
            let mut supervisor = Box::new(Supervisor {
                engines: Vec::with_capacity(n),
                nba,
                aggregates,
                commands,
                wake,
            });
            for (i, dp) in datapaths.into_iter().enumerate() {
                let ewake = eventfd()?;
                let (control, ecommands) = handle_for(&ewake);
                let (internal_tx, internal) = mpsc::sync_channel(64);
                let estop = stop();
                let mut engine = Engine::new(
                    dp,
                    ecommands,
                    internal,
                    ewake.clone(),
                    estop.clone(),
                    cfg.mode,
                    started_ns,
                );
                let cores = std::thread::available_parallelism().map_or(1, usize::from);
                #[cfg(test)]
                if tests::FAIL_ENGINE_START.get() == Some(i) {
                    return Err(DaemonError::Engine(format!(
                        "cannot start engine {i}: failed by the test"
                    )));
                }
                let thread = std::thread::Builder::new()
                    .name(format!("sluice-engine-{i}"))
                    .spawn(move || {
                        pin_to_cpu(i % cores);
                        engine.run(None)?;
                        Ok(engine.datapath.held() as u64)
                    })
                    .map_err(|e| DaemonError::Engine(format!("cannot start engine {i}: {e}")))?;
                supervisor.engines.push(EngineLink {
                    control,
                    internal: internal_tx,
                    wake: ewake,
                    stop: estop,
                    thread: Some(thread),
                });
            }
            Engines::Many(supervisor)
        };
        Ok(Daemon {
            engines,
            control,
            metrics,
            setup: Some(setup),
        })
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
        // Releases are due to the microsecond; the default 50 us of timer slack would add to
        // every one of them.
        let _ = nix::sys::prctl::set_timerslack(1);
        let ran = match &mut self.engines {
            Engines::One(engine) => engine.run(Some(&sfd)),
            Engines::Many(supervisor) => supervisor.run(&sfd),
        };
        match ran {
            Ok(signal) => Ok(self.stop(signal)),
            Err(e) => {
                // Taken down in order all the same (taps, namespaces), then reported.
                tracing::error!(error = %e, "stopping on an error");
                self.stop(None);
                Err(e)
            }
        }
    }

    /// Take everything down, in order: control endpoints, engines and ports (taps vanish),
    /// then what the setup guard did (addresses, moves, namespaces).
    fn stop(self, signal: Option<String>) -> Summary {
        let Daemon {
            engines,
            control,
            metrics,
            setup,
        } = self;
        drop(control);
        drop(metrics);
        let dropped_at_stop = match engines {
            Engines::One(engine) => engine.datapath.held() as u64,
            Engines::Many(mut supervisor) => supervisor.stop(),
        };
        tracing::info!(
            signal = signal.as_deref().unwrap_or("none"),
            dropped_at_stop,
            "stopping"
        );
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

/// Every node with a rate limit in every link's policy: the aggregates several engines share.
fn aggregate_nodes(cfg: &Config, dp: &Datapath) -> Vec<AggregateNode> {
    let mut out = Vec::new();
    for (l, link) in dp.links().iter().enumerate() {
        let s = link.pipeline.scheduler();
        for node in 0..s.node_count() as sluice_sched::NodeId {
            if s.rate(node).is_some() {
                out.push(AggregateNode {
                    link: l,
                    node,
                    from: cfg.ports[cfg.links[l].from].name.clone(),
                    name: s.node_name(node).to_string(),
                    burst: s.burst(node),
                });
            }
        }
    }
    out
}

/// Keep the calling thread on `cpu` (per-core engines); a failure only costs locality.
fn pin_to_cpu(cpu: usize) {
    let mut set = nix::sched::CpuSet::new();
    if set.set(cpu).is_ok() {
        let _ = nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), &set);
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
    tracing::info!(
        config = %path.display(),
        ports = cfg.ports.len(),
        links = cfg.links.len(),
        engines = cfg.engines,
        mode = ?cfg.mode,
        "sluice running"
    );
    Ok(daemon.run(&signals)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    thread_local! {
        /// Test-only: the engine (by index) whose start fails in [`Daemon::start`] on this
        /// thread, as a failed `eventfd` or thread spawn would.
        pub(super) static FAIL_ENGINE_START: std::cell::Cell<Option<usize>> =
            const { std::cell::Cell::new(None) };
    }

    fn is_root() -> bool {
        nix::unistd::geteuid().is_root()
    }

    /// An engine that failed to start left the engines started before it running: they lived
    /// in a local list, not in the supervisor that stops and joins them, and were detached,
    /// holding their queues of every tap (which then outlived the failed start). Now each
    /// engine is the supervisor's as soon as it runs: here the third of three fails, and no
    /// tap is left. Nor is the control socket, or the directory created for it.
    #[test]
    fn engines_started_before_one_that_fails_are_stopped() {
        if !is_root() {
            eprintln!("note: skipped: needs root (taps)");
            return;
        }
        let pid = std::process::id();
        let (a, b) = (format!("sl{pid}fa"), format!("sl{pid}fb"));
        let run = std::env::temp_dir().join(format!("sluice-dm-{pid}-fail"));
        let _ = std::fs::remove_dir_all(&run);
        let control = run.join("sluice").join("ctl.sock");
        let text = format!(
            "[daemon]\nengines = 3\ncontrol = \"{}\"\n\n\
             [[port]]\nname = \"a\"\nkind = \"tap\"\nifname = \"{a}\"\n\n\
             [[port]]\nname = \"b\"\nkind = \"tap\"\nifname = \"{b}\"\n\n\
             [[link]]\nfrom = \"a\"\nto = \"b\"\n",
            control.display()
        );
        let cfg = Config::parse(&text, "d.toml", Path::new(".")).unwrap();
        FAIL_ENGINE_START.set(Some(2));
        let started = Daemon::start(&cfg);
        FAIL_ENGINE_START.set(None);
        let e = started.err().expect("engine 2 fails to start").to_string();
        assert!(e.contains("cannot start engine 2"), "{e}");
        for ifname in [&a, &b] {
            assert!(
                !netns::interface_exists(None, ifname).unwrap(),
                "tap {ifname} outlived the failed start"
            );
        }
        assert!(!run.exists(), "{} outlived the failed start", run.display());
    }

    fn example(name: &str) -> Scheduler {
        let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
            .join("../../examples/policies")
            .join(name);
        sluice_sched::config::build_file(&path).unwrap()
    }

    /// A policy that classifies by class id (which the daemon never sets), or by the ports of
    /// a protocol whose ports it does not read, is warned of, with the number of such rules;
    /// one that classifies by what a frame carries is not.
    #[test]
    fn policies_with_rules_the_daemon_cannot_match_are_warned_of() {
        let w = rule_warnings(&example("eiffel-fig47.toml"));
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("4 classify rule(s) test a class id"),
            "{w:?}"
        );
        assert!(rule_warnings(&example("three-classes.toml")).is_empty());
        let fifo = sluice_sched::config::build_str(FIFO_POLICY, "(built-in fifo)").unwrap();
        assert!(rule_warnings(&fifo).is_empty());
        let rules = |body: &str| {
            let text = format!("{FIFO_POLICY}\n[[classify]]\nto = \"fifo\"\n{body}");
            rule_warnings(&sluice_sched::config::build_str(&text, "p.toml").unwrap())
        };
        let w = rules("proto = 132\ndport = 9\n");
        assert_eq!(w.len(), 1);
        assert!(
            w[0].starts_with("1 classify rule(s) test the ports of a protocol other"),
            "{w:?}"
        );
        for fine in [
            "proto = \"tcp\"\ndport = 9\n",
            "proto = 17\nsport = 9\n",
            "dport = 9\n",
            "proto = 132\n",
        ] {
            assert!(rules(fine).is_empty(), "{fine}");
        }
    }

    /// `--check` refuses an interface two ports name (two sockets on one interface would each
    /// read every frame, forwarded twice), before creating anything, naming port and interface.
    #[test]
    fn check_refuses_an_interface_two_ports_name() {
        let text = "[[port]]\nname = \"a\"\nkind = \"af_packet\"\nifname = \"lo\"\n\n\
                    [[port]]\nname = \"b\"\nkind = \"af_packet\"\nifname = \"lo\"\n\n\
                    [[link]]\nfrom = \"a\"\nto = \"b\"\n";
        let cfg = Config::parse(text, "d.toml", Path::new(".")).unwrap();
        let e = check(&cfg).unwrap_err().to_string();
        assert!(
            e.contains("port `b`") && e.contains("`lo` is named by another port too"),
            "{e}"
        );
    }
}
