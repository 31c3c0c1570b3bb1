//! Several engines (`[daemon] engines = N`, Carousel §3.4.3): one thread per engine, each with
//! its own datapath over its own queue of every port (a multi-queue tap's queue, or an
//! AF_PACKET socket of a fanout group), so the kernel hashes each flow to one engine; and the
//! main thread supervising them.
//!
//! Every class with a rate limit in a link's policy is an *aggregate* of the NIC-level
//! bandwidth allocator ([`Nba`]): every [`Nba::next_due`] the supervisor asks each engine how
//! many bytes each aggregate's node has sent, and installs each engine's share of the
//! aggregate as that node's rate in the engine's scheduler. Until the first allocation (a tenth
//! of an interval in) the engines split every aggregate equally.
//!
//! The control socket and the metrics endpoint talk to the supervisor: statistics are the
//! engines' snapshots merged ([`Snapshot::merge`]); a weight change goes to every engine; a
//! rate change of an aggregate changes the allocator's total and is shared out at once. A
//! request goes to every engine at once, and the supervisor waits for their replies until one
//! deadline, its caller's or 2 s from now if sooner: it never waits for an answer its caller
//! no longer waits for.

use super::engine::{Internal, parse_burst, parse_rate};
use super::{DaemonError, now_ns, read_signal, sys};
use crate::control::{Command, ControlHandle, Pending, Reply, Request};
use crate::stats::Snapshot;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::EventFd;
use nix::sys::signalfd::SignalFd;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use sluice_flow::nba::{Nba, Usage};
use sluice_sched::NodeId;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, Receiver, SyncSender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long the supervisor waits for its engines' answers, all of them: it asks them all,
/// then waits. (Meanwhile it allocates nothing, so not as long as a control client may wait.)
const ENGINE_TIMEOUT: Duration = Duration::from_secs(2);

/// Until when the supervisor waits for its engines to answer `cmd`: no longer than its caller
/// waits, nor than [`ENGINE_TIMEOUT`].
fn engines_deadline(cmd: &Command) -> Instant {
    cmd.deadline().min(Instant::now() + ENGINE_TIMEOUT)
}

/// One aggregate: which link's node it is, by index and by name.
pub struct AggregateNode {
    /// Link index.
    pub link: usize,
    /// Node id (the same in every engine: they run the same policy).
    pub node: NodeId,
    /// The port the link reads from (how requests name the link).
    pub from: String,
    /// The node's name.
    pub name: String,
}

/// How the supervisor reaches one engine thread.
pub struct EngineLink {
    /// Requests (the public protocol).
    pub control: ControlHandle,
    /// The supervisor's own messages.
    pub internal: SyncSender<Internal>,
    /// The engine's wake-up descriptor.
    pub wake: Arc<EventFd>,
    /// Set to stop the engine.
    pub stop: Arc<AtomicBool>,
    /// The thread; it returns the frames still held when it stopped.
    pub thread: Option<JoinHandle<Result<u64, DaemonError>>>,
}

impl EngineLink {
    fn send(&self, msg: Internal) -> bool {
        let sent = self.internal.try_send(msg).is_ok();
        let _ = self.wake.write(1);
        sent
    }
}

/// The supervisor of several engines.
pub struct Supervisor {
    /// The engines.
    pub engines: Vec<EngineLink>,
    /// The allocator over every aggregate.
    pub nba: Nba,
    /// What each aggregate limits.
    pub aggregates: Vec<AggregateNode>,
    /// Requests from the control socket and metrics endpoint.
    pub commands: Receiver<Command>,
    /// Written when a request is waiting.
    pub wake: Arc<EventFd>,
}

impl Supervisor {
    /// Supervise until a signal arrives (returned) or an engine fails.
    pub fn run(&mut self, signals: &SignalFd) -> Result<Option<String>, DaemonError> {
        const SIGNAL: u64 = 0;
        const TIMER: u64 = 1;
        const WAKE: u64 = 2;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll"))?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(sys("timerfd"))?;
        epoll
            .add(signals, EpollEvent::new(EpollFlags::EPOLLIN, SIGNAL))
            .map_err(sys("epoll add"))?;
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TIMER))
            .map_err(sys("epoll add"))?;
        epoll
            .add(
                self.wake.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, WAKE),
            )
            .map_err(sys("epoll add"))?;
        self.install_allocation();
        self.nba.tick(now_ns());
        let mut events = [EpollEvent::empty(); 4];
        loop {
            if let Some(e) = self.failed_engine() {
                return Err(e);
            }
            if let Some(due) = self.nba.next_due().filter(|_| !self.aggregates.is_empty()) {
                let at = TimeSpec::from_duration(Duration::from_nanos(due.max(1)));
                timer
                    .set(
                        Expiration::OneShot(at),
                        TimerSetTimeFlags::TFD_TIMER_ABSTIME,
                    )
                    .map_err(sys("timerfd set"))?;
            }
            let ready = match epoll.wait(&mut events, EpollTimeout::from(1000u16)) {
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
                        if let Some(sig) = read_signal(signals) {
                            return Ok(Some(sig));
                        }
                    }
                    TIMER => {
                        let _ = nix::unistd::read(&timer, &mut [0u8; 8]);
                        self.allocate();
                    }
                    _ => {
                        let _ = self.wake.read();
                        while let Ok(cmd) = self.commands.try_recv() {
                            // Its caller gave up waiting and was told it failed: leave it so.
                            if !cmd.take() {
                                continue;
                            }
                            let deadline = engines_deadline(&cmd);
                            let reply = self.answer(cmd.request, deadline);
                            let _ = cmd.reply.send(reply);
                        }
                    }
                }
            }
        }
    }

    /// An engine thread that ended by itself (an error or a panic).
    fn failed_engine(&mut self) -> Option<DaemonError> {
        for (i, e) in self.engines.iter_mut().enumerate() {
            if e.thread.as_ref().is_some_and(JoinHandle::is_finished) {
                let result = e.thread.take().map(JoinHandle::join);
                return Some(match result {
                    Some(Ok(Err(err))) => err,
                    _ => DaemonError::Engine(format!("engine {i} stopped unexpectedly")),
                });
            }
        }
        None
    }

    /// Measure every engine's use of every aggregate, then share the aggregates out again.
    fn allocate(&mut self) {
        let nodes: Arc<Vec<(usize, NodeId)>> =
            Arc::new(self.aggregates.iter().map(|a| (a.link, a.node)).collect());
        let waiting: Vec<_> = self
            .engines
            .iter()
            .map(|e| {
                let (tx, rx) = mpsc::sync_channel(1);
                e.send(Internal::Usage {
                    nodes: nodes.clone(),
                    reply: tx,
                });
                rx
            })
            .collect();
        // One deadline for all: an engine that does not answer costs the others nothing.
        let deadline = Instant::now() + ENGINE_TIMEOUT;
        for (engine, rx) in waiting.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            let Ok(bytes) = rx.recv_timeout(left) else {
                continue;
            };
            let at = now_ns();
            for (aggregate, bytes) in bytes.into_iter().enumerate() {
                self.nba.record(
                    engine,
                    Usage {
                        aggregate,
                        bytes,
                        at,
                    },
                );
            }
        }
        self.nba.allocate(now_ns());
        self.install_allocation();
    }

    /// Send every engine its current share of every aggregate.
    fn install_allocation(&self) {
        for (e, link) in self.engines.iter().enumerate() {
            let rates = self
                .aggregates
                .iter()
                .enumerate()
                .map(|(a, agg)| (agg.link, agg.node, self.nba.rate(e, a)))
                .collect();
            link.send(Internal::Rates(rates));
        }
    }

    /// The reply to `request`, the engines waited for until `deadline` at most.
    fn answer(&mut self, request: Request, deadline: Instant) -> Reply {
        match request {
            Request::Stats {} | Request::Counters {} => {
                let mut parts = Vec::with_capacity(self.engines.len());
                for reply in self.ask_every_engine(&request, deadline) {
                    match reply {
                        Reply::Stats(s) => parts.push(*s),
                        other => return other,
                    }
                }
                let mut all = Snapshot::merge(parts);
                // Show each aggregate's whole limit, not the sum of the shares of the moment
                // (idle engines hold only headroom).
                for (a, agg) in self.aggregates.iter().enumerate() {
                    if let Some(class) = all
                        .links
                        .get_mut(agg.link)
                        .and_then(|l| l.classes.get_mut(agg.node as usize))
                    {
                        class.rate_bps = Some(self.nba.total(a).bps());
                    }
                }
                Reply::Stats(Box::new(all))
            }
            Request::SetWeight { .. } => self.to_every_engine(&request, deadline),
            Request::SetRate {
                link,
                node,
                rate,
                burst,
            } => {
                let Some(a) = self
                    .aggregates
                    .iter()
                    .position(|x| x.from == link && x.name == node)
                else {
                    return Reply::Error(format!(
                        "with several engines only a configured limit can change; link `{link}` has no \
                         limited node `{node}`"
                    ));
                };
                let rate = match parse_rate(&rate) {
                    Ok(Some(r)) => r,
                    Ok(None) => {
                        return Reply::Error(
                            "with several engines a limit can change but not be removed".into(),
                        );
                    }
                    Err(e) => return Reply::Error(e),
                };
                if let Some(b) = &burst
                    && let Err(e) = parse_burst(b)
                {
                    return Reply::Error(e);
                }
                // The allocator checks the rate before it takes it: a refused request changes
                // nothing. (Bursts sent to the engines first were kept after a refusal, and a
                // 10 Mbit/s class ran at 169 with the huge burst of a request refused.)
                let before = self.nba.total(a);
                if let Err(e) = self.nba.set_rate(a, rate) {
                    return Reply::Error(e.to_string());
                }
                if let Some(b) = burst {
                    // Bursts are per engine; set them everywhere, then the shares.
                    let request = Request::SetRate {
                        link,
                        node,
                        rate: format!("{}bit", rate.bps()),
                        burst: Some(b),
                    };
                    let reply = self.to_every_engine(&request, deadline);
                    if reply != Reply::Ok {
                        let _ = self.nba.set_rate(a, before);
                        return reply;
                    }
                }
                self.install_allocation();
                Reply::Ok
            }
        }
    }

    /// Send `request` to every engine, then wait for their replies until `deadline`: they work
    /// on it at once, and one slow engine does not make the others wait (asked in turn, each
    /// given 2 s, they made the supervisor wait longer than its caller, and allocate nothing
    /// meanwhile). A request an engine has not taken up by then is dropped
    /// ([`Command::take`]).
    fn ask_every_engine(&self, request: &Request, deadline: Instant) -> Vec<Reply> {
        let sent: Vec<_> = self
            .engines
            .iter()
            .map(|e| e.control.send(request.clone(), deadline))
            .collect();
        sent.into_iter()
            .map(|p| p.map_or_else(|refused| refused, Pending::wait))
            .collect()
    }

    /// [`Reply::Ok`] if every engine carried `request` out, else the first engine's error.
    fn to_every_engine(&self, request: &Request, deadline: Instant) -> Reply {
        self.ask_every_engine(request, deadline)
            .into_iter()
            .find(|r| *r != Reply::Ok)
            .unwrap_or(Reply::Ok)
    }

    /// Stop every engine and wait for it; returns the frames they still held.
    pub fn stop(&mut self) -> u64 {
        for e in &self.engines {
            e.stop.store(true, Ordering::Release);
            let _ = e.wake.write(1);
        }
        let mut held = 0;
        for (i, e) in self.engines.iter_mut().enumerate() {
            match e.thread.take().map(JoinHandle::join) {
                Some(Ok(Ok(h))) => held += h,
                Some(Ok(Err(err))) => tracing::warn!(engine = i, error = %err, "engine failed"),
                Some(Err(_)) => tracing::warn!(engine = i, "engine panicked"),
                None => {}
            }
        }
        held
    }
}

#[cfg(test)]
mod tests {
    use super::super::engine::Engine;
    use super::super::engine::tests::{GOLD_BURST, engine, gold, set_rate};
    use super::*;
    use nix::sys::eventfd::EfdFlags;
    use sluice_flow::nba::{Aggregate, NbaConfig};
    use sluice_sched::units::Rate;
    use std::thread;

    /// How long a test waits for what must come.
    const PATIENCE: Duration = Duration::from_secs(60);

    /// A supervisor of `n` engines over [`engine`]'s policy, `gold` its one aggregate, and the
    /// engines' threads, which give their engine back when stopped.
    fn supervisor(n: usize) -> (Supervisor, Vec<JoinHandle<Engine>>) {
        let mut engines = Vec::new();
        let mut threads = Vec::new();
        let mut node = 0;
        for _ in 0..n {
            let (e, link) = engine();
            let s = e.datapath.links()[0].pipeline.scheduler();
            node = s.node_by_name("gold").unwrap();
            threads.push(thread::spawn(move || e.serve_until_stopped()));
            engines.push(link);
        }
        (supervisor_of(engines, node), threads)
    }

    /// A supervisor of `engines`, node `node` of link `a` (`gold`, 100 Mbit/s) its one
    /// aggregate.
    fn supervisor_of(engines: Vec<EngineLink>, node: NodeId) -> Supervisor {
        let nba = Nba::new(
            engines.len(),
            &[Aggregate::new("a/gold", Rate::mbit(100))],
            NbaConfig::default(),
        )
        .unwrap();
        let (_, commands) = mpsc::sync_channel(1);
        Supervisor {
            engines,
            nba,
            aggregates: vec![AggregateNode {
                link: 0,
                node,
                from: "a".into(),
                name: "gold".into(),
            }],
            commands,
            wake: Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC).unwrap()),
        }
    }

    /// `n` engines that are only channels: the test plays them through the command receivers.
    fn bare_engines(n: usize) -> (Vec<EngineLink>, Vec<Receiver<Command>>) {
        (0..n)
            .map(|_| {
                let (control, commands) = ControlHandle::new(Arc::new(|| {}));
                let link = EngineLink {
                    control,
                    internal: mpsc::sync_channel(64).0,
                    wake: Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC).unwrap()),
                    stop: Arc::new(AtomicBool::new(false)),
                    thread: None,
                };
                (link, commands)
            })
            .unzip()
    }

    /// `request` answered, the engines given [`PATIENCE`].
    fn ask(s: &mut Supervisor, request: Request) -> Reply {
        s.answer(request, Instant::now() + PATIENCE)
    }

    /// The supervisor asked its engines for statistics one after another, each given 2 s: it
    /// could wait past its caller (a scrape gives up at 2 s), allocating nothing meanwhile. Now
    /// it asks them all, then waits: here each engine answers only once all are asked.
    #[test]
    fn engines_are_asked_all_at_once() {
        let (links, commands) = bare_engines(3);
        let mut s = supervisor_of(links, 1);
        let engines = thread::spawn(move || {
            let asked: Vec<Command> = commands
                .iter()
                .map(|rx| rx.recv_timeout(PATIENCE).unwrap())
                .collect();
            for cmd in asked {
                assert_eq!(cmd.request, Request::Counters {});
                assert!(cmd.take());
                let _ = cmd.reply.send(Reply::Stats(Box::default()));
            }
        });
        let reply = ask(&mut s, Request::Counters {});
        assert!(matches!(reply, Reply::Stats(_)), "{reply:?}");
        engines.join().unwrap();
    }

    /// The supervisor waits for its engines no longer than its caller waits for it (nor than
    /// [`ENGINE_TIMEOUT`]); what an engine has not taken up by then is dropped.
    #[test]
    fn engines_are_waited_for_until_the_callers_deadline() {
        let (handle, rx) = ControlHandle::new(Arc::new(|| {}));
        let before = Instant::now();
        let _ = handle.call(Request::Stats {}, Duration::from_millis(1));
        let cmd = rx.recv().unwrap();
        assert!(cmd.deadline() > before && cmd.deadline() <= Instant::now());
        assert_eq!(engines_deadline(&cmd), cmd.deadline());
        let _ = handle.send(Request::Stats {}, before + 10 * PATIENCE);
        let cmd = rx.recv().unwrap();
        let cap = engines_deadline(&cmd);
        assert!(
            cap <= Instant::now() + ENGINE_TIMEOUT && cap > before,
            "{cap:?}"
        );

        let (links, commands) = bare_engines(2);
        let mut s = supervisor_of(links, 1);
        let reply = s.answer(set_weight(), Instant::now());
        match reply {
            Reply::Error(e) => assert!(e.contains("was not carried out"), "{e}"),
            other => panic!("{other:?}"),
        }
        for rx in commands {
            assert!(!rx.recv().unwrap().take(), "given up on, never carried out");
        }
    }

    /// Stop the engines and hand them back.
    fn stop(mut s: Supervisor, threads: Vec<JoinHandle<Engine>>) -> Vec<Engine> {
        s.stop();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    fn set_weight() -> Request {
        Request::SetWeight {
            link: "a".into(),
            node: "gold".into(),
            weight: 2,
        }
    }

    /// With several engines `set_rate` without a burst keeps each engine's burst, as with one
    /// engine; each engine gets its share of the new rate.
    #[test]
    fn set_rate_without_a_burst_keeps_it_with_several_engines() {
        let (mut s, threads) = supervisor(2);
        assert_eq!(ask(&mut s, set_rate("200Mbit", None)), Reply::Ok);
        let shares: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        for (e, engine) in stop(s, threads).iter().enumerate() {
            assert_eq!(gold(engine), (Some(shares[e]), GOLD_BURST), "engine {e}");
        }

        let (mut s, threads) = supervisor(2);
        assert_eq!(ask(&mut s, set_rate("300Mbit", Some("30KB"))), Reply::Ok);
        assert_eq!(ask(&mut s, set_rate("50Mbit", None)), Reply::Ok);
        let shares: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        for (e, engine) in stop(s, threads).iter().enumerate() {
            assert_eq!(gold(engine), (Some(shares[e]), 30_000), "engine {e}");
        }
    }
}
