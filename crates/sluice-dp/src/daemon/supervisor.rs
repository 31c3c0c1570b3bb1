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
//! rate change of an aggregate changes the allocator's total and is shared out at once, each
//! engine given its share (with the new burst, if any, in the same message: no engine runs at
//! the whole rate); a change, with a burst or without, that an engine does not take in time
//! is undone in every engine, and the request fails. A request goes to every engine at once,
//! and the supervisor waits for their replies until one deadline, its caller's or 2 s from
//! now if sooner: it never waits for an answer its caller no longer waits for.

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
    /// Its burst, bytes, in every engine (its policy's, or the last one set).
    pub burst: u64,
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

    /// Send every engine its current share of every aggregate, and the aggregate's burst.
    fn install_allocation(&self) {
        for (e, link) in self.engines.iter().enumerate() {
            let rates = self
                .aggregates
                .iter()
                .enumerate()
                .map(|(a, agg)| (agg.link, agg.node, self.nba.rate(e, a), agg.burst))
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
            } => match self.set_rate(&link, &node, &rate, burst.as_deref(), deadline) {
                Ok(()) => Reply::Ok,
                Err(e) => Reply::Error(e),
            },
        }
    }

    /// Change the limit of aggregate `node` of `link` to `rate`, and its burst in every engine
    /// if given; the engines waited for until `deadline` at most.
    fn set_rate(
        &mut self,
        link: &str,
        node: &str,
        rate: &str,
        burst: Option<&str>,
        deadline: Instant,
    ) -> Result<(), String> {
        let Some(a) = self
            .aggregates
            .iter()
            .position(|x| x.from == link && x.name == node)
        else {
            return Err(format!(
                "with several engines only a configured limit can change; link `{link}` has no \
                 limited node `{node}`"
            ));
        };
        let Some(rate) = parse_rate(rate)? else {
            return Err("with several engines a limit can change but not be removed".into());
        };
        let burst = burst.map(parse_burst).transpose()?;
        // The allocator checks the rate before it takes it: a refused request changes
        // nothing. (Bursts sent to the engines first were kept after a refusal, and a
        // 10 Mbit/s class ran at 169 with the huge burst of a request refused.)
        let before = self.nba.total(a);
        self.nba.set_rate(a, rate).map_err(|e| e.to_string())?;
        // Without a burst the class keeps its own, installed with the new shares all the same
        // and waited for: sent without waiting, a rate was acknowledged that an engine with a
        // full queue never got.
        let burst = burst.unwrap_or(self.aggregates[a].burst);
        if let Err(e) = self.install_limit(a, burst, deadline) {
            // The engines that took it are given back what they had (after it, in order, also
            // in one that takes it late).
            let _ = self.nba.set_rate(a, before);
            let _ = self.install_limit(a, self.aggregates[a].burst, Instant::now());
            return Err(e);
        }
        self.aggregates[a].burst = burst;
        Ok(())
    }

    /// Send every engine its share of aggregate `a` with `burst`, in one message, and wait for
    /// each to have set it until `deadline`. (Sending the class's whole rate with the burst
    /// first, then the shares, let each engine run at the whole rate for a moment, or until the
    /// next allocation if another engine then failed.)
    fn install_limit(&self, a: usize, burst: u64, deadline: Instant) -> Result<(), String> {
        let AggregateNode { link, node, .. } = self.aggregates[a];
        let sent: Vec<_> = self
            .engines
            .iter()
            .enumerate()
            .map(|(e, engine)| {
                let (done, set) = mpsc::sync_channel(1);
                let rate = self.nba.rate(e, a);
                let limit = Internal::Limit {
                    link,
                    node,
                    rate,
                    burst,
                    done,
                };
                (engine.send(limit), set)
            })
            .collect();
        for (e, (sent, set)) in sent.into_iter().enumerate() {
            let left = deadline.saturating_duration_since(Instant::now());
            if !sent || set.recv_timeout(left).is_err() {
                return Err(format!(
                    "engine {e} did not take the new limit in time; the limit is unchanged"
                ));
            }
        }
        Ok(())
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
    /// When some engines carried it out and one did not, the error says which did: the
    /// change stays in those, and an engine's own "was not carried out" would deny that.
    fn to_every_engine(&self, request: &Request, deadline: Instant) -> Reply {
        let replies = self.ask_every_engine(request, deadline);
        let took: Vec<usize> = (0..replies.len())
            .filter(|&e| replies[e] == Reply::Ok)
            .collect();
        match replies
            .into_iter()
            .enumerate()
            .find(|(_, r)| *r != Reply::Ok)
        {
            None => Reply::Ok,
            Some((_, failed)) if took.is_empty() => failed,
            Some((e, Reply::Error(why))) => Reply::Error(format!(
                "engine {e}: {why}; the change took effect in engines {took:?} only"
            )),
            Some((_, other)) => other,
        }
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
    use super::super::engine::{parse_burst, parse_rate};
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
    pub(super) fn supervisor_of(engines: Vec<EngineLink>, node: NodeId) -> Supervisor {
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
                burst: GOLD_BURST,
            }],
            commands,
            wake: Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC).unwrap()),
        }
    }

    /// What a test playing an engine receives: requests and the supervisor's messages.
    pub(super) struct BareEngine {
        pub(super) commands: Receiver<Command>,
        pub(super) internal: Receiver<Internal>,
    }

    /// `n` engines that are only channels, for the test to play them.
    pub(super) fn bare_engines(n: usize) -> (Vec<EngineLink>, Vec<BareEngine>) {
        (0..n)
            .map(|_| {
                let (control, commands) = ControlHandle::new(Arc::new(|| {}));
                let (internal_tx, internal) = mpsc::sync_channel(64);
                let link = EngineLink {
                    control,
                    internal: internal_tx,
                    wake: Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC).unwrap()),
                    stop: Arc::new(AtomicBool::new(false)),
                    thread: None,
                };
                (link, BareEngine { commands, internal })
            })
            .unzip()
    }

    impl BareEngine {
        /// Carry out whatever comes until the supervisor is gone, and say which rates and
        /// bursts `gold` was given, in order (None: its burst kept).
        pub(super) fn record(self) -> Vec<(Rate, Option<u64>)> {
            let mut given = Vec::new();
            let (mut commands, mut internal) = (true, true);
            while commands || internal {
                let mut idle = true;
                match self.commands.try_recv() {
                    Ok(cmd) => {
                        idle = false;
                        if let Request::SetRate { rate, burst, .. } = &cmd.request {
                            let rate = parse_rate(rate).unwrap().unwrap();
                            given.push((rate, burst.as_deref().map(|b| parse_burst(b).unwrap())));
                        }
                        if cmd.take() {
                            let _ = cmd.reply.send(Reply::Ok);
                        }
                    }
                    Err(mpsc::TryRecvError::Disconnected) => commands = false,
                    Err(mpsc::TryRecvError::Empty) => {}
                }
                match self.internal.try_recv() {
                    Ok(Internal::Rates(rates)) => {
                        idle = false;
                        given.extend(rates.iter().map(|&(_, _, r, b)| (r, Some(b))));
                    }
                    Ok(Internal::Limit {
                        rate, burst, done, ..
                    }) => {
                        idle = false;
                        given.push((rate, Some(burst)));
                        let _ = done.send(());
                    }
                    Ok(Internal::Usage { .. }) => idle = false,
                    Err(mpsc::TryRecvError::Disconnected) => internal = false,
                    Err(mpsc::TryRecvError::Empty) => {}
                }
                if idle {
                    thread::sleep(Duration::from_millis(1));
                }
            }
            given
        }
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
        let (links, bare) = bare_engines(3);
        let mut s = supervisor_of(links, 1);
        let engines = thread::spawn(move || {
            let asked: Vec<Command> = bare
                .iter()
                .map(|e| e.commands.recv_timeout(PATIENCE).unwrap())
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

        let (links, bare) = bare_engines(2);
        let mut s = supervisor_of(links, 1);
        let reply = s.answer(set_weight(), Instant::now());
        match reply {
            Reply::Error(e) => assert!(e.contains("was not carried out"), "{e}"),
            other => panic!("{other:?}"),
        }
        for e in bare {
            assert!(!e.commands.recv().unwrap().take(), "given up on");
        }
    }

    /// A rate set with a burst went to every engine whole (with the burst), then each engine's
    /// share: each ran at the class's whole rate a moment. Now each gets its share and the
    /// burst in one message.
    #[test]
    fn no_engine_runs_at_the_whole_rate_of_a_new_limit() {
        let (links, bare) = bare_engines(2);
        let node = 1;
        let mut s = supervisor_of(links, node);
        let engines: Vec<_> = bare
            .into_iter()
            .map(|e| thread::spawn(move || e.record()))
            .collect();
        assert_eq!(ask(&mut s, set_rate("300Mbit", Some("30KB"))), Reply::Ok);
        let shares: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        assert!(shares.iter().all(|&r| r < Rate::mbit(300)), "{shares:?}");
        drop(s);
        for (e, engine) in engines.into_iter().enumerate() {
            let given = engine.join().unwrap();
            assert!(
                given.iter().all(|&(rate, _)| rate <= shares[e]),
                "engine {e} was given more than its share {}: {given:?}",
                shares[e]
            );
            assert_eq!(given.last(), Some(&(shares[e], Some(30_000))), "engine {e}");
        }
    }

    /// When one engine did not take a new limit with a burst in time, the others kept the
    /// class's whole rate (until the next allocation) and the new burst (for good). Now every
    /// engine is given back its share and burst: here one engine is served, the other only
    /// after the supervisor gave up on it, and both end as they were.
    #[test]
    fn a_new_limit_one_engine_missed_is_undone_in_all() {
        let (e0, link0) = engine();
        let (e1, link1) = engine();
        let node = e0.datapath.links()[0]
            .pipeline
            .scheduler()
            .node_by_name("gold")
            .unwrap();
        let served = thread::spawn(move || e0.serve_until_stopped());
        let mut s = supervisor_of(vec![link0, link1], node);
        let before: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        // Engine 1 is not served: the supervisor gives up on it at the deadline (and on engine
        // 0 too if that is slow: the outcome is the same).
        let deadline = Instant::now() + Duration::from_millis(100);
        match s.answer(set_rate("300Mbit", Some("30KB")), deadline) {
            Reply::Error(e) => assert!(e.ends_with("in time; the limit is unchanged"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.nba.total(0), Rate::mbit(100));
        let late = thread::spawn(move || e1.serve_until_stopped());
        let engines = stop(s, vec![served, late]);
        for (e, engine) in engines.iter().enumerate() {
            assert_eq!(gold(engine), (Some(before[e]), GOLD_BURST), "engine {e}");
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

#[cfg(test)]
mod partial_tests {
    use super::tests::{BareEngine, bare_engines, supervisor_of};
    use super::*;
    use std::thread;

    /// A weight change engine 0 carries out and engine 1 does not take in time: the reply
    /// said it was "not carried out", though engine 0 carried it out (it stays there, as the
    /// docs say). Now it says which engines took it.
    #[test]
    fn a_weight_change_some_engines_took_says_so() {
        let (links, mut bare) = bare_engines(2);
        let mut s = supervisor_of(links, 1);
        let e1 = bare.pop().unwrap();
        let e0 = bare.pop().unwrap();
        let served = thread::spawn(move || {
            let cmd = e0.commands.recv_timeout(Duration::from_secs(60)).unwrap();
            assert!(cmd.take());
            let _ = cmd.reply.send(Reply::Ok);
        });
        let reply = s.answer(
            Request::SetWeight {
                link: "a".into(),
                node: "gold".into(),
                weight: 2,
            },
            // Engine 1 never answers: the supervisor waits this long for it.
            Instant::now() + Duration::from_secs(2),
        );
        served.join().unwrap();
        assert!(!e1.commands.recv().unwrap().take(), "engine 1 gave up on");
        match reply {
            Reply::Error(e) => assert!(
                e.contains("took effect in engines [0] only"),
                "engine 0 carried it out, yet the client reads: {e}"
            ),
            other => panic!("{other:?}"),
        }
    }

    /// An engine thread that panics ends the supervisor's run with an error naming it (the
    /// daemon then stops the others and exits non-zero); the others are stopped and joined.
    #[test]
    fn an_engine_that_panics_ends_the_run_with_an_error() {
        use nix::sys::signal::SigSet;
        use nix::sys::signalfd::{SfdFlags, SignalFd};
        let (mut links, _bare) = bare_engines(2);
        links[1].thread = Some(thread::spawn(|| -> Result<u64, DaemonError> {
            panic!("an engine's bug")
        }));
        let (stop, wake) = (links[0].stop.clone(), links[0].wake.clone());
        links[0].thread = Some(thread::spawn(move || {
            while !stop.load(Ordering::Acquire) {
                let _ = wake.read();
            }
            Ok(7)
        }));
        let mut s = supervisor_of(links, 1);
        // No signal ever comes.
        let signals = SignalFd::with_flags(&SigSet::empty(), SfdFlags::SFD_CLOEXEC).unwrap();
        match s.run(&signals) {
            Err(DaemonError::Engine(e)) => assert_eq!(e, "engine 1 stopped unexpectedly"),
            other => panic!("{other:?}"),
        }
        assert_eq!(s.stop(), 7, "engine 0 stopped and joined");
        assert!(s.engines.iter().all(|e| e.thread.is_none()));
    }

    /// A rate changed without a burst was sent to the engines without waiting for them and
    /// acknowledged: an engine whose queue was full never got its share of the new rate (it
    /// ran at its share of the old one until an allocation reached it), though the client read
    /// ok. Now it is installed as a change with a burst is (the class's own burst), waited for,
    /// and undone in every engine if one does not take it.
    #[test]
    fn a_new_rate_without_a_burst_an_engine_cannot_take_is_refused_and_undone() {
        use super::super::engine::tests::{GOLD_BURST, set_rate};
        use sluice_sched::units::Rate;
        let (links, mut bare) = bare_engines(2);
        let mut s = supervisor_of(links, 1);
        let e1 = bare.pop().unwrap();
        let e0 = bare.pop().unwrap();
        // Engine 1 is stalled: its queue is full.
        while s.engines[1].send(Internal::Rates(Vec::new())) {}
        let served = thread::spawn(move || e0.record());
        let before: Vec<Rate> = (0..2).map(|e| s.nba.rate(e, 0)).collect();
        let reply = s.answer(
            set_rate("300Mbit", None),
            Instant::now() + Duration::from_secs(60),
        );
        assert!(
            matches!(&reply, Reply::Error(e) if e.starts_with("engine 1 ")
                && e.ends_with("the limit is unchanged")),
            "engine 1 never got the new rate, yet the client reads {reply:?}"
        );
        assert_eq!(s.nba.total(0), Rate::mbit(100));
        drop(s);
        // Engine 0 took the new share, then was given its old one back, with the burst.
        let given = served.join().unwrap();
        assert_eq!(
            given.last(),
            Some(&(before[0], Some(GOLD_BURST))),
            "{given:?}"
        );
        drop(e1);
    }

    /// An engine whose queue had room for a new limit but not for its undoing kept the new
    /// burst for good (the client was told the limit is unchanged, and allocations carried
    /// rates only). Every allocation now carries the burst the supervisor holds, so the engine
    /// takes the right one back with the next it reads.
    #[test]
    fn an_engine_that_missed_an_undoing_gets_the_burst_back_with_the_next_allocation() {
        use super::super::engine::tests::{GOLD_BURST, set_rate};
        let (links, mut bare) = bare_engines(2);
        let mut s = supervisor_of(links, 1);
        let e1 = bare.pop().unwrap();
        let e0 = bare.pop().unwrap();
        // Engine 1 is stalled: its queue holds 63 of 64 messages.
        for _ in 0..63 {
            assert!(s.engines[1].send(Internal::Rates(Vec::new())));
        }
        let served = thread::spawn(move || e0.record());
        let reply = s.answer(
            set_rate("300Mbit", Some("30KB")),
            Instant::now() + Duration::from_millis(200),
        );
        assert!(
            matches!(&reply, Reply::Error(e) if e.ends_with("the limit is unchanged")),
            "{reply:?}"
        );
        // Engine 1 wakes and reads its queue; then the next allocation comes.
        let last_burst = |e: &BareEngine| {
            e.internal
                .try_iter()
                .filter_map(|m| match m {
                    Internal::Limit { burst, .. } => Some(burst),
                    Internal::Rates(rates) => rates.last().map(|&(_, _, _, b)| b),
                    Internal::Usage { .. } => None,
                })
                .last()
        };
        assert_eq!(last_burst(&e1), Some(30_000), "the undoing did not fit");
        s.install_allocation();
        assert_eq!(last_burst(&e1), Some(GOLD_BURST), "the burst it keeps");
        drop(s);
        served.join().unwrap();
    }
}
