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
//! rate change of an aggregate changes the allocator's total and is shared out at once.

use super::engine::{Internal, parse_burst, parse_rate};
use super::{DaemonError, now_ns, read_signal, sys};
use crate::control::{Command, ControlHandle, Reply, Request};
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
use std::time::Duration;

/// How long the supervisor waits for an engine's answer.
const ENGINE_TIMEOUT: Duration = Duration::from_secs(2);

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
                            let reply = self.answer(cmd.request);
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
        for (engine, rx) in waiting.into_iter().enumerate() {
            let Ok(bytes) = rx.recv_timeout(ENGINE_TIMEOUT) else {
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

    fn answer(&mut self, request: Request) -> Reply {
        match request {
            Request::Stats {} | Request::Counters {} => {
                let mut parts = Vec::with_capacity(self.engines.len());
                for e in &self.engines {
                    match e.control.call(request.clone(), ENGINE_TIMEOUT) {
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
            Request::SetWeight { .. } => self.to_every_engine(request),
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
                    let reply = self.to_every_engine(Request::SetRate {
                        link,
                        node,
                        rate: format!("{}bit", rate.bps()),
                        burst: Some(b),
                    });
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

    fn to_every_engine(&self, request: Request) -> Reply {
        for e in &self.engines {
            let reply = e.control.call(request.clone(), ENGINE_TIMEOUT);
            if reply != Reply::Ok {
                return reply;
            }
        }
        Reply::Ok
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
        let nba = Nba::new(
            n,
            &[Aggregate::new("a/gold", Rate::mbit(100))],
            NbaConfig::default(),
        )
        .unwrap();
        let (_, commands) = mpsc::sync_channel(1);
        let supervisor = Supervisor {
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
        };
        (supervisor, threads)
    }

    /// Stop the engines and hand them back.
    fn stop(mut s: Supervisor, threads: Vec<JoinHandle<Engine>>) -> Vec<Engine> {
        s.stop();
        threads.into_iter().map(|t| t.join().unwrap()).collect()
    }

    /// With several engines `set_rate` without a burst keeps each engine's burst, as with one
    /// engine; each engine gets its share of the new rate.
    #[test]
    fn set_rate_without_a_burst_keeps_it_with_several_engines() {
        let (mut s, threads) = supervisor(2);
        assert_eq!(s.answer(set_rate("200Mbit", None)), Reply::Ok);
        let shares: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        for (e, engine) in stop(s, threads).iter().enumerate() {
            assert_eq!(gold(engine), (Some(shares[e]), GOLD_BURST), "engine {e}");
        }

        let (mut s, threads) = supervisor(2);
        assert_eq!(s.answer(set_rate("300Mbit", Some("30KB"))), Reply::Ok);
        assert_eq!(s.answer(set_rate("50Mbit", None)), Reply::Ok);
        let shares: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        for (e, engine) in stop(s, threads).iter().enumerate() {
            assert_eq!(gold(engine), (Some(shares[e]), 30_000), "engine {e}");
        }
    }
}
