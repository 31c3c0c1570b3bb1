//! One engine: a [`Datapath`] and the loop that drives it, on one thread.
//!
//! In event mode the loop sleeps in `epoll` on the ports' descriptors, a `timerfd` armed
//! (absolute, `CLOCK_MONOTONIC`) at the datapath's next release, the engine's `eventfd` (the
//! control plane and the supervisor write to it) and, on the main thread, the `signalfd`. An
//! idle engine makes no system call until something arrives (while a port's interface is
//! lost, the timer wakes it to look for the interface). While a port must not be read
//! (its link pushes back, or no buffer is free) its descriptor leaves the epoll set, so a full
//! engine waits for releases instead of spinning. In busy mode the loop polls without sleeping
//! and looks at signals, requests and the stop flag every [`BUSY_CHECK_EVERY`] rounds.
//!
//! Requests ([`Command`]) and the supervisor's messages ([`Internal`]) are answered between two
//! steps, so nothing else ever touches the datapath.

use super::{DaemonError, now_ns, read_signal, sys};
use crate::config::Mode;
use crate::control::{Command, Reply, Request};
use crate::datapath::Datapath;
use nix::sys::epoll::{Epoll, EpollCreateFlags, EpollEvent, EpollFlags, EpollTimeout};
use nix::sys::eventfd::EventFd;
use nix::sys::signalfd::SignalFd;
use nix::sys::time::TimeSpec;
use nix::sys::timerfd::{ClockId, Expiration, TimerFd, TimerFlags, TimerSetTimeFlags};
use sluice_sched::NodeId;
use sluice_sched::units::{NOT_WHOLE_BYTES, Rate, UnitError, parse_size};
use std::os::fd::{AsFd, BorrowedFd};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{Receiver, SyncSender};
use std::time::Duration;

/// Busy mode looks at signals, requests and the stop flag once per this many rounds.
pub const BUSY_CHECK_EVERY: u32 = 1024;

/// Rounds of work the event loop does before it looks at the outside world again.
const ROUNDS_PER_WAKE: u32 = 64;

/// What the supervisor of several engines asks of one.
pub enum Internal {
    /// Bytes sent so far by each of these `(link, node)`s, answered in the same order.
    Usage {
        /// The nodes.
        nodes: Arc<Vec<(usize, NodeId)>>,
        /// Where to answer.
        reply: SyncSender<Vec<u64>>,
    },
    /// Install these rates and bursts: `(link, node, rate, burst)`. The burst is the one the
    /// supervisor holds for the node (its policy's, or the last one set), sent with every
    /// allocation so that an engine whose queue was too full for a change's undoing takes the
    /// right burst back with the next one it reads.
    Rates(Vec<(usize, NodeId, Rate, u64)>),
    /// Give node `node` of link `link` this rate and burst, then say so on `done`.
    Limit {
        /// Link index.
        link: usize,
        /// The node.
        node: NodeId,
        /// Its rate (this engine's share).
        rate: Rate,
        /// Its burst, bytes.
        burst: u64,
        /// Written once it is set.
        done: SyncSender<()>,
    },
}

/// One engine's datapath and the channels that reach it.
pub struct Engine {
    /// The datapath this engine owns.
    pub datapath: Datapath,
    commands: Receiver<Command>,
    internal: Receiver<Internal>,
    wake: Arc<EventFd>,
    stop: Arc<AtomicBool>,
    mode: Mode,
    started_ns: u64,
}

impl Engine {
    /// An engine over `datapath`, answering `commands` and `internal` messages; whoever sends
    /// them writes to `wake`; it returns once `stop` is set (and `wake` written).
    pub fn new(
        datapath: Datapath,
        commands: Receiver<Command>,
        internal: Receiver<Internal>,
        wake: Arc<EventFd>,
        stop: Arc<AtomicBool>,
        mode: Mode,
        started_ns: u64,
    ) -> Engine {
        Engine {
            datapath,
            commands,
            internal,
            wake,
            stop,
            mode,
            started_ns,
        }
    }

    /// Run until `stop` is set or, with `signals`, a signal arrives (returned).
    pub fn run(&mut self, signals: Option<&SignalFd>) -> Result<Option<String>, DaemonError> {
        match self.mode {
            Mode::Event => self.run_event(signals),
            Mode::Busy => self.run_busy(signals),
        }
    }

    /// Answer every waiting request and message.
    fn serve(&mut self) {
        while let Ok(cmd) = self.commands.try_recv() {
            // A request whose caller gave up waiting was answered as failed: leave it so.
            if !cmd.take() {
                continue;
            }
            let reply = self.answer(cmd.request);
            let _ = cmd.reply.send(reply);
        }
        while let Ok(msg) = self.internal.try_recv() {
            match msg {
                Internal::Usage { nodes, reply } => {
                    let bytes = nodes
                        .iter()
                        .map(|&(l, n)| {
                            self.datapath.links()[l]
                                .pipeline
                                .scheduler()
                                .node_stats(n)
                                .sent_bytes
                        })
                        .collect();
                    let _ = reply.send(bytes);
                }
                Internal::Rates(rates) => {
                    let now = now_ns();
                    for (l, n, rate, burst) in rates {
                        self.datapath
                            .set_node_rate(now, l, n, Some(rate), Some(burst));
                    }
                }
                Internal::Limit {
                    link,
                    node,
                    rate,
                    burst,
                    done,
                } => {
                    let now = now_ns();
                    self.datapath
                        .set_node_rate(now, link, node, Some(rate), Some(burst));
                    let _ = done.send(());
                }
            }
        }
    }

    fn answer(&mut self, request: Request) -> Reply {
        let result = match request {
            Request::Stats {} => return self.stats(crate::stats::TOP_FLOWS),
            Request::Counters {} => return self.stats(0),
            Request::SetRate {
                link,
                node,
                rate,
                burst,
            } => {
                // Without a burst the node keeps its own, as the shares of several engines
                // do: an operator who only changes a rate does not expect to lose the burst.
                match (
                    parse_rate(&rate),
                    burst.as_deref().map(parse_burst).transpose(),
                ) {
                    (Ok(rate), Ok(burst)) => {
                        self.datapath.set_rate(now_ns(), &link, &node, rate, burst)
                    }
                    (Err(e), _) | (_, Err(e)) => Err(e),
                }
            }
            Request::SetWeight { link, node, weight } => {
                self.datapath.set_weight(&link, &node, weight)
            }
        };
        match result {
            Ok(()) => Reply::Ok,
            Err(e) => Reply::Error(e),
        }
    }

    /// A snapshot with the `top_flows` busiest flows of each link.
    fn stats(&self, top_flows: usize) -> Reply {
        let uptime = now_ns().saturating_sub(self.started_ns);
        Reply::Stats(Box::new(self.datapath.snapshot(uptime, top_flows)))
    }

    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// The event loop; see the module note.
    fn run_event(&mut self, signals: Option<&SignalFd>) -> Result<Option<String>, DaemonError> {
        const SIGNAL: u64 = u64::MAX;
        const TIMER: u64 = u64::MAX - 1;
        const WAKE: u64 = u64::MAX - 2;
        let epoll = Epoll::new(EpollCreateFlags::EPOLL_CLOEXEC).map_err(sys("epoll"))?;
        let timer = TimerFd::new(
            ClockId::CLOCK_MONOTONIC,
            TimerFlags::TFD_NONBLOCK | TimerFlags::TFD_CLOEXEC,
        )
        .map_err(sys("timerfd"))?;
        if let Some(sfd) = signals {
            epoll
                .add(sfd, EpollEvent::new(EpollFlags::EPOLLIN, SIGNAL))
                .map_err(sys("epoll add"))?;
        }
        epoll
            .add(&timer, EpollEvent::new(EpollFlags::EPOLLIN, TIMER))
            .map_err(sys("epoll add"))?;
        epoll
            .add(
                self.wake.as_fd(),
                EpollEvent::new(EpollFlags::EPOLLIN, WAKE),
            )
            .map_err(sys("epoll add"))?;
        self.datapath.track_readiness();
        let mut watching = vec![false; self.datapath.ports().len()];
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
            if self.stopping() {
                return Ok(None);
            }
            self.check_ports()?;
            for (p, watched) in watching.iter_mut().enumerate() {
                if self.datapath.take_reopened(p) {
                    // Its old descriptor is closed, which took it out of the epoll set.
                    *watched = false;
                }
                let want = self.datapath.wants_read(p);
                if want != *watched {
                    // SAFETY: the descriptor is owned by port `p` of the datapath, which
                    // outlives this borrow (used for this one call only).
                    let fd = unsafe { BorrowedFd::borrow_raw(self.datapath.ports()[p].fd()) };
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
                        if let Some(sig) = signals.and_then(read_signal) {
                            return Ok(Some(sig));
                        }
                    }
                    TIMER => {
                        // Expired: the one-shot timer is disarmed; drain its count.
                        let _ = nix::unistd::read(&timer, &mut [0u8; 8]);
                        armed = None;
                    }
                    WAKE => {
                        let _ = self.wake.read();
                    }
                    p if ev
                        .events()
                        .intersects(EpollFlags::EPOLLERR | EpollFlags::EPOLLHUP) =>
                    {
                        self.datapath.port_error(p as usize);
                    }
                    p => self.datapath.readable(p as usize), // a port has frames
                }
            }
        }
    }

    /// Stop with an error if a port's device is gone (its tap deleted under the daemon):
    /// its reads would fail for good and its descriptor wake the loop forever.
    fn check_ports(&self) -> Result<(), DaemonError> {
        match self.datapath.port_gone() {
            Some((port, e)) => Err(DaemonError::PortGone {
                port: port.to_string(),
                error: e.to_string(),
            }),
            None => Ok(()),
        }
    }

    /// The busy-poll loop; see the module note.
    fn run_busy(&mut self, signals: Option<&SignalFd>) -> Result<Option<String>, DaemonError> {
        let mut rounds = 0u32;
        loop {
            self.datapath.step(now_ns());
            rounds += 1;
            if rounds == BUSY_CHECK_EVERY {
                rounds = 0;
                self.check_ports()?;
                if let Some(sig) = signals.and_then(read_signal) {
                    return Ok(Some(sig));
                }
                if self.wake.read().is_ok() {
                    self.serve();
                }
                if self.stopping() {
                    return Ok(None);
                }
            }
        }
    }
}

/// A rate from a request: "200Mbit", or "none" to remove the limit.
pub fn parse_rate(text: &str) -> Result<Option<Rate>, String> {
    match text.trim() {
        // In any case, as a rate's units are.
        r if r.eq_ignore_ascii_case("none") => Ok(None),
        r => Rate::parse(r)
            .map(Some)
            .map_err(|e| format!("rate \"{r}\": {e}")),
    }
}

/// A burst from a request: a size like "15KB", at most what a policy file allows
/// ([`sluice_sched::config::MAX_SIZE`], 4 GiB - 1 B: a larger one lets a gate send gigabytes
/// at once).
pub fn parse_burst(text: &str) -> Result<u64, String> {
    let max = sluice_sched::config::MAX_SIZE;
    let out_of_range = || format!("burst \"{text}\" is out of range; expected 0..={max} bytes");
    match parse_size(text) {
        Ok(bytes) if bytes <= max => Ok(bytes),
        Ok(_) => Err(out_of_range()),
        // A negative size or one past 2^63 bytes is out of this range too; a fraction of a
        // byte (`1.5B`) is not, and is told so.
        Err(UnitError::OutOfRange { why, .. }) if why != NOT_WHOLE_BYTES => Err(out_of_range()),
        Err(e) => Err(format!("burst \"{text}\": {e}")),
    }
}

#[cfg(test)]
mod burst_tests {
    use super::{parse_burst, parse_rate};

    /// "none" removes a limit, written in any case as a rate's units may be ("10MBIT").
    #[test]
    fn none_is_read_in_any_case() {
        for none in ["none", "None", "NONE", " none "] {
            assert_eq!(parse_rate(none), Ok(None), "{none}");
        }
        assert_eq!(
            parse_rate("10MBIT"),
            Ok(Some(sluice_sched::units::Rate::mbit(10)))
        );
        assert!(parse_rate("nothing").is_err());
    }

    #[test]
    fn a_burst_is_capped_like_a_policy_files() {
        assert_eq!(parse_burst("15KB"), Ok(15_000));
        assert_eq!(parse_burst("4294967295B"), Ok(4_294_967_295));
        for big in ["4294967296B", "5GB", "8e18B", "-5B", "1e30B"] {
            let e = parse_burst(big).unwrap_err();
            assert!(
                e.contains("out of range") && e.contains("0..=4294967295"),
                "{e}"
            );
        }
    }

    /// A burst of a fraction of a byte was refused as "out of range; expected
    /// 0..=4294967295 bytes", which `0.5B` is not: a policy file says what is wrong with it.
    #[test]
    fn a_burst_that_is_not_whole_bytes_is_refused_for_that() {
        assert_eq!(parse_burst("1.5KB"), Ok(1_500));
        for part in ["1.5B", "0.5B", "1.0001KB"] {
            let e = parse_burst(part).unwrap_err();
            assert!(
                e.contains("whole number of bytes") && !e.contains("0..="),
                "{part}: {e}"
            );
        }
    }
}

#[cfg(test)]
impl Engine {
    /// Answer requests and messages as [`Engine::run`] does, without ports to wait on, until
    /// stopped; then the engine, for its datapath to be looked at. Its `wake` must block.
    pub(super) fn serve_until_stopped(mut self) -> Engine {
        loop {
            let _ = self.wake.read();
            // Looked at before serving: whatever was sent before the stop is answered.
            let stopping = self.stopping();
            self.serve();
            if stopping {
                return self;
            }
        }
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::control::ControlHandle;
    use crate::daemon::supervisor::EngineLink;
    use crate::datapath::tests::scripted;
    use nix::sys::eventfd::EfdFlags;
    use std::sync::mpsc;

    /// A policy whose class `gold` has a limit of 100 Mbit/s with a burst of 15 KB.
    const LIMITED: &str = "[scheduler]\ndefault = \"gold\"\n\n[[node]]\nname = \"root\"\n\
                           policy = \"wfq\"\n\n[[node]]\nname = \"gold\"\nparent = \"root\"\n\
                           policy = \"fifo\"\nrate = \"100Mbit\"\nburst = \"15KB\"\n";

    /// The burst `gold` has in [`LIMITED`].
    pub(in crate::daemon) const GOLD_BURST: u64 = 15_000;

    /// An engine over link `a` with the policy [`LIMITED`], and how a supervisor reaches it
    /// (no thread yet). Its `wake` blocks, for [`Engine::serve_until_stopped`].
    pub(in crate::daemon) fn engine() -> (Engine, EngineLink) {
        let wake = Arc::new(EventFd::from_flags(EfdFlags::EFD_CLOEXEC).unwrap());
        let waker = wake.clone();
        let (control, commands) = ControlHandle::new(Arc::new(move || {
            let _ = waker.write(1);
        }));
        let (internal_tx, internal) = mpsc::sync_channel(64);
        let stop = Arc::new(AtomicBool::new(false));
        let (datapath, _) = scripted(Vec::new(), LIMITED, 4 << 20);
        let engine = Engine::new(
            datapath,
            commands,
            internal,
            wake.clone(),
            stop.clone(),
            Mode::Event,
            0,
        );
        let link = EngineLink {
            control,
            internal: internal_tx,
            wake,
            stop,
            thread: None,
        };
        (engine, link)
    }

    /// `gold`'s rate and burst in `engine`'s scheduler.
    pub(in crate::daemon) fn gold(engine: &Engine) -> (Option<Rate>, u64) {
        let s = engine.datapath.links()[0].pipeline.scheduler();
        let n = s.node_by_name("gold").unwrap();
        (s.rate(n), s.burst(n))
    }

    /// A `set_rate` request for `gold` on link `a`.
    pub(in crate::daemon) fn set_rate(rate: &str, burst: Option<&str>) -> Request {
        Request::SetRate {
            link: "a".into(),
            node: "gold".into(),
            rate: rate.into(),
            burst: burst.map(Into::into),
        }
    }

    /// With one engine, `set_rate` without a burst used to set it to 0: a class whose rate
    /// an operator only raised lost the burst its policy gave it (several engines kept it).
    #[test]
    fn set_rate_without_a_burst_keeps_it_with_one_engine() {
        let (mut engine, _) = engine();
        assert_eq!(engine.answer(set_rate("200Mbit", None)), Reply::Ok);
        assert_eq!(gold(&engine), (Some(Rate::mbit(200)), GOLD_BURST));
        assert_eq!(engine.answer(set_rate("300Mbit", Some("30KB"))), Reply::Ok);
        assert_eq!(gold(&engine), (Some(Rate::mbit(300)), 30_000));
        assert_eq!(engine.answer(set_rate("50Mbit", None)), Reply::Ok);
        assert_eq!(gold(&engine), (Some(Rate::mbit(50)), 30_000));
        // A burst of 0 is a burst given.
        assert_eq!(engine.answer(set_rate("50Mbit", Some("0B"))), Reply::Ok);
        assert_eq!(gold(&engine), (Some(Rate::mbit(50)), 0));
        // A refused request changes nothing.
        assert!(matches!(
            engine.answer(set_rate("fast", None)),
            Reply::Error(_)
        ));
        assert!(matches!(
            engine.answer(set_rate("70Mbit", Some("5GB"))),
            Reply::Error(_)
        ));
        assert_eq!(gold(&engine), (Some(Rate::mbit(50)), 0));
    }

    /// `"rate": "none"` with a burst answered ok, but a class without a limit keeps no burst:
    /// the limit set next without one got 0, not the burst acknowledged. Refused now, and
    /// nothing changes.
    #[test]
    fn a_burst_with_no_rate_is_refused_not_acknowledged_and_dropped() {
        let (mut engine, _) = engine();
        match engine.answer(set_rate("none", Some("30KB"))) {
            Reply::Error(e) => assert!(e.contains("burst") && e.contains("none"), "{e}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(gold(&engine), (Some(Rate::mbit(100)), GOLD_BURST));
        assert_eq!(engine.answer(set_rate("none", None)), Reply::Ok);
        assert_eq!(gold(&engine), (None, 0));
    }

    /// A request whose caller had given up waiting was carried out when the engine came to it:
    /// a client told "the datapath did not answer in time" found its change made all the same.
    #[test]
    fn a_request_its_caller_gave_up_on_is_not_carried_out() {
        let (mut engine, link) = engine();
        // Nothing serves the engine yet: the call times out.
        let late = set_rate("200Mbit", Some("30KB"));
        match link.control.call(late, Duration::from_millis(1)) {
            Reply::Error(e) => assert!(e.contains("did not answer in time"), "{e}"),
            other => panic!("{other:?}"),
        }
        engine.serve();
        assert_eq!(gold(&engine), (Some(Rate::mbit(100)), GOLD_BURST));
        // A request waited for is carried out.
        let serving = std::thread::spawn(move || engine.serve_until_stopped());
        let patience = Duration::from_secs(30);
        let reply = link.control.call(set_rate("300Mbit", None), patience);
        assert_eq!(reply, Reply::Ok);
        link.stop.store(true, Ordering::Release);
        let _ = link.wake.write(1);
        let engine = serving.join().unwrap();
        assert_eq!(gold(&engine), (Some(Rate::mbit(300)), GOLD_BURST));
    }
}
