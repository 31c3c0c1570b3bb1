//! The control plane's messages, and the handle other threads use to reach the datapath.
//!
//! The datapath is owned by one thread and never locked: the control socket and the metrics
//! endpoint send it a [`Command`] (a [`Request`] and a channel for the [`Reply`]) through a
//! bounded channel and wake it ([`ControlHandle::call`]); the datapath thread answers between
//! two steps ([`crate::daemon`]). So a slow or hostile client can delay nothing but its own
//! answer. A request the datapath has not taken up when its caller stops waiting is dropped
//! ([`Command::take`]), so a client told it failed never sees it carried out later.
//!
//! The wire protocol of the Unix socket (one JSON object per line, both ways) is in
//! [`crate::control_socket`].

use crate::stats::Snapshot;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, SyncSender, TrySendError};
use std::time::{Duration, Instant};

/// What a client may ask.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "cmd", rename_all = "snake_case", deny_unknown_fields)]
pub enum Request {
    /// Every counter, now. (A struct variant, so that unknown fields are refused.)
    Stats {},
    /// Every counter, now, without the busiest flows: what the metrics endpoint asks. Listing
    /// them looks at every flow a link tracks (up to 4096 per link) on the datapath's thread,
    /// and the metrics text shows none. Not part of the wire protocol.
    #[serde(skip)]
    Counters {},
    /// Change (or remove, with `"rate": "none"`) the rate limit of a node of the link that
    /// reads from port `link`.
    SetRate {
        /// The link, by the name of the port it reads from.
        link: String,
        /// The node, by name.
        node: String,
        /// A rate like "200Mbit", or "none" to remove the limit.
        rate: String,
        /// Its burst, a size like "15KB". Without it the node keeps the burst it has (its
        /// policy's or the last one set; 0 if it has no limit now), with one engine or several.
        /// Refused with `"rate": "none"` (a class without a limit keeps no burst).
        #[serde(default)]
        burst: Option<String>,
    },
    /// Change the weight of a node of the link that reads from port `link`.
    SetWeight {
        /// The link, by the name of the port it reads from.
        link: String,
        /// The node, by name.
        node: String,
        /// The new weight (1..=65536).
        weight: u32,
    },
}

/// The answer to a [`Request`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Reply {
    /// The counters.
    Stats(Box<Snapshot>),
    /// Done.
    Ok,
    /// Refused, with why.
    Error(String),
}

/// A request in flight to the datapath thread.
pub struct Command {
    /// The request.
    pub request: Request,
    /// Where the datapath sends the reply.
    pub reply: SyncSender<Reply>,
    /// [`PENDING`], then [`TAKEN`] by the datapath or [`ABANDONED`] by a caller that stopped
    /// waiting, whichever comes first.
    state: Arc<AtomicU8>,
    /// When its caller stops waiting for the reply.
    deadline: Instant,
}

/// Neither the datapath nor the caller has decided the request's fate yet.
const PENDING: u8 = 0;
/// The datapath carries the request out (the caller waits for its reply).
const TAKEN: u8 = 1;
/// The caller gave up and told its client the request failed: it must not be carried out.
const ABANDONED: u8 = 2;

impl Command {
    /// Claim the request for carrying it out. False if its caller has given up waiting, and
    /// then the datapath must drop it: the client was told it failed, and a change made after
    /// all (a rate set seconds later) would contradict that.
    pub fn take(&self) -> bool {
        self.state
            .compare_exchange(PENDING, TAKEN, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    /// When its caller stops waiting: an answer that needs longer is of no use (the supervisor
    /// of several engines waits for them until then at most).
    pub fn deadline(&self) -> Instant {
        self.deadline
    }
}

/// Requests waiting for the datapath at most; more are refused as busy.
pub const QUEUE: usize = 64;

/// How other threads reach the datapath: cloneable, `Send`.
#[derive(Clone)]
pub struct ControlHandle {
    tx: SyncSender<Command>,
    wake: Arc<dyn Fn() + Send + Sync>,
}

impl ControlHandle {
    /// A handle and the receiving end the datapath drains; `wake` makes the datapath thread
    /// look at its commands soon (for instance by writing to an eventfd it polls).
    pub fn new(wake: Arc<dyn Fn() + Send + Sync>) -> (ControlHandle, Receiver<Command>) {
        let (tx, rx) = mpsc::sync_channel(QUEUE);
        (ControlHandle { tx, wake }, rx)
    }

    /// Send `request` and wait up to `timeout` for the reply. A stopped or busy datapath gives
    /// a [`Reply::Error`]; so does one that has not answered within `timeout`, and if it had
    /// not taken the request up by then it never will ([`Command::take`]); the error says which.
    pub fn call(&self, request: Request, timeout: Duration) -> Reply {
        match self.send(request, deadline_in(timeout)) {
            Ok(pending) => pending.wait(),
            Err(refused) => refused,
        }
    }

    /// Send `request`, its reply to be waited for until `deadline` ([`Pending::wait`]), and
    /// return at once: so one thread can ask several datapaths before it waits for any. A
    /// stopped or busy datapath is an error.
    pub fn send(&self, request: Request, deadline: Instant) -> Result<Pending, Reply> {
        let (reply_tx, reply_rx) = mpsc::sync_channel(1);
        let state = Arc::new(AtomicU8::new(PENDING));
        match self.tx.try_send(Command {
            request,
            reply: reply_tx,
            state: state.clone(),
            deadline,
        }) {
            Ok(()) => {}
            Err(TrySendError::Full(_)) => {
                return Err(Reply::Error("the datapath is busy; try again".into()));
            }
            Err(TrySendError::Disconnected(_)) => return Err(stopped()),
        }
        (self.wake)();
        Ok(Pending {
            reply: reply_rx,
            state,
            deadline,
        })
    }
}

/// `timeout` from now (far in the future if that cannot be told).
fn deadline_in(timeout: Duration) -> Instant {
    let now = Instant::now();
    now.checked_add(timeout)
        .unwrap_or_else(|| now + Duration::from_secs(365 * 24 * 3600))
}

/// A request sent ([`ControlHandle::send`]) whose reply has not been had yet.
pub struct Pending {
    reply: Receiver<Reply>,
    state: Arc<AtomicU8>,
    deadline: Instant,
}

impl Pending {
    /// The reply, waited for until the deadline it was sent with (not at all if that has
    /// passed). A datapath that has not answered by then gives a [`Reply::Error`], and if it
    /// had not taken the request up it never will ([`Command::take`]); the error says which.
    pub fn wait(self) -> Reply {
        let left = self.deadline.saturating_duration_since(Instant::now());
        match self.reply.recv_timeout(left) {
            Ok(reply) => reply,
            Err(RecvTimeoutError::Disconnected) => stopped(),
            Err(RecvTimeoutError::Timeout) => {
                let abandoned = self
                    .state
                    .compare_exchange(PENDING, ABANDONED, Ordering::AcqRel, Ordering::Acquire)
                    .is_ok();
                // Taken before we gave up: it is being carried out (the supervisor waiting for
                // its engines, say), and saying it failed would be wrong.
                let fate = if abandoned {
                    "the request was not carried out"
                } else {
                    "the request may still take effect"
                };
                Reply::Error(format!("the datapath did not answer in time; {fate}"))
            }
        }
    }
}

fn stopped() -> Reply {
    Reply::Error("the datapath has stopped".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// Every request docs/daemon.md's control socket section shows is one the socket takes,
    /// and it shows every command of the wire protocol.
    #[test]
    fn the_requests_in_the_daemon_doc_parse() {
        let doc = include_str!("../../../docs/daemon.md");
        let section = doc
            .split("## Control socket")
            .nth(1)
            .and_then(|rest| rest.split("\n## ").next())
            .expect("a Control socket section in docs/daemon.md");
        let mut shown = Vec::new();
        for line in section.lines().filter(|l| l.starts_with("{\"cmd\"")) {
            let json = line.split(" -> ").next().unwrap_or(line).trim();
            let request: Request = serde_json::from_str(json)
                .unwrap_or_else(|e| panic!("docs/daemon.md: `{json}`: {e}"));
            shown.push(std::mem::discriminant(&request));
        }
        assert!(shown.len() >= 6, "{} requests found", shown.len());
        let set_rate = Request::SetRate {
            link: String::new(),
            node: String::new(),
            rate: String::new(),
            burst: None,
        };
        let set_weight = Request::SetWeight {
            link: String::new(),
            node: String::new(),
            weight: 1,
        };
        for wire in [Request::Stats {}, set_rate, set_weight] {
            assert!(shown.contains(&std::mem::discriminant(&wire)), "{wire:?}");
        }
    }

    #[test]
    fn requests_parse_from_json_and_unknown_ones_do_not() {
        let r: Request = serde_json::from_str(r#"{"cmd":"stats"}"#).unwrap();
        assert_eq!(r, Request::Stats {});
        let r: Request =
            serde_json::from_str(r#"{"cmd":"set_rate","link":"a","node":"gold","rate":"100Mbit"}"#)
                .unwrap();
        assert_eq!(
            r,
            Request::SetRate {
                link: "a".into(),
                node: "gold".into(),
                rate: "100Mbit".into(),
                burst: None
            }
        );
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"reboot"}"#).is_err());
        // The metrics endpoint's own request is not on the wire.
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"counters"}"#).is_err());
        assert!(serde_json::to_string(&Request::Counters {}).is_err());
        assert!(serde_json::from_str::<Request>(r#"{"cmd":"stats","x":1}"#).is_err());
        assert!(
            serde_json::from_str::<Request>(
                r#"{"cmd":"set_weight","link":"a","node":"b","weight":-1}"#
            )
            .is_err()
        );
    }

    #[test]
    fn call_wakes_the_datapath_and_returns_its_reply() {
        let woken = Arc::new(AtomicUsize::new(0));
        let w = woken.clone();
        let (handle, rx) = ControlHandle::new(Arc::new(move || {
            w.fetch_add(1, Ordering::SeqCst);
        }));
        let server = std::thread::spawn(move || {
            let cmd = rx.recv().unwrap();
            assert_eq!(cmd.request, Request::Stats {});
            cmd.reply.send(Reply::Ok).unwrap();
        });
        assert_eq!(
            handle.call(Request::Stats {}, Duration::from_secs(10)),
            Reply::Ok
        );
        server.join().unwrap();
        assert_eq!(woken.load(Ordering::SeqCst), 1);
        // The datapath is gone: a clear error, not a hang.
        match handle.call(Request::Stats {}, Duration::from_secs(10)) {
            Reply::Error(e) => assert!(e.contains("stopped"), "{e}"),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_request_not_taken_in_time_is_refused_and_never_taken() {
        let (handle, rx) = ControlHandle::new(Arc::new(|| {}));
        // Nothing drains the queue: the caller gives up.
        match handle.call(Request::Stats {}, Duration::from_millis(1)) {
            Reply::Error(e) => assert!(e.contains("was not carried out"), "{e}"),
            other => panic!("{other:?}"),
        }
        let cmd = rx.recv().unwrap();
        assert!(!cmd.take(), "the caller was told it failed");
        // One taken first stays the datapath's.
        let cmd = Command {
            request: Request::Stats {},
            reply: mpsc::sync_channel(1).0,
            state: Arc::new(AtomicU8::new(PENDING)),
            deadline: Instant::now(),
        };
        assert!(cmd.take());
        assert!(!cmd.take(), "taken once");
    }
}
