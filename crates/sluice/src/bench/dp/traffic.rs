//! The traffic of one `sluice bench dp` run: iperf3 bulk TCP flows and a ping probe.
//!
//! N flows are split over `ceil(N / 128)` iperf3 client/server pairs (iperf3 allows at most
//! 128 parallel streams per client), each on its own port, as evenly as possible. Servers run
//! in the receiving namespace (`-s -1`: one test, then exit), clients in the sending one with
//! cubic (`-C cubic`; bbr is pacing-limited on this kind of machine), `-O warmup` (the first
//! seconds are left out of iperf3's totals), `-i 0` (no interval reports) and `-J`. From each
//! client's JSON: every stream's received bytes (Jain's index) and the sender's
//! retransmissions.
//!
//! The probe is `ping -i 0.01` (100 probes a second, 56-byte ICMP echo) from the sending to
//! the receiving namespace, through the same shaper as the flows, for the measurement window;
//! every reply's `time=` is one round trip (ping runs in the C locale, so that the lines are
//! not translated; a ping that fails, or a reply whose time cannot be read, fails the run).

use super::procs::{self, Proc};
use anyhow::{Context, anyhow, bail};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// Most streams one iperf3 client runs (`-P` at most 128).
pub const MAX_STREAMS: usize = 128;

/// The first iperf3 port.
pub const BASE_PORT: u16 = 5201;

/// Interval between ping probes.
pub const PING_INTERVAL: Duration = Duration::from_millis(10);

/// How the flows are split over iperf3 pairs: streams per pair.
pub fn split_flows(flows: usize) -> Vec<usize> {
    if flows == 0 {
        return Vec::new();
    }
    let pairs = flows.div_ceil(MAX_STREAMS);
    (0..pairs)
        .map(|i| flows / pairs + usize::from(i < flows % pairs))
        .collect()
}

/// The ports of `pairs` iperf3 pairs.
pub fn ports(pairs: usize) -> Vec<u16> {
    (0..pairs).map(|i| BASE_PORT + i as u16).collect()
}

/// Start one iperf3 server per port in `netns` and wait until all listen.
pub fn start_servers(netns: &str, ports: &[u16], dir: &Path) -> anyhow::Result<Vec<Proc>> {
    let mut servers = Vec::new();
    for &port in ports {
        let log = std::fs::File::create(dir.join(format!("iperf3-server-{port}.log")))
            .context("cannot create an iperf3 server log")?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns, "iperf3", "-s", "-1", "-p"])
            .arg(port.to_string())
            .stdout(log.try_clone().context("cannot share a log file")?)
            .stderr(log);
        servers.push(Proc::spawn(
            &mut cmd,
            format!("iperf3 server on port {port}"),
        )?);
    }
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let out = procs::output_in(netns, "ss", &["-Hltn"])?;
        let listening = ports
            .iter()
            .filter(|p| out.contains(&format!(":{p} ")))
            .count();
        if listening == ports.len() {
            return Ok(servers);
        }
        for s in &mut servers {
            if let Some(status) = s.try_wait()? {
                bail!(
                    "{} exited ({status}) before listening; see {}",
                    s.what(),
                    dir.display()
                );
            }
        }
        if Instant::now() >= deadline {
            bail!(
                "iperf3 servers not listening after 10 s; see {}",
                dir.display()
            );
        }
        procs::sleep_until(Instant::now() + procs::POLL)?;
    }
}

/// A running iperf3 client and the file its JSON goes to.
pub struct Client {
    proc: Proc,
    json: PathBuf,
}

/// Start one client per (port, streams) from `netns` to `dst`, each sending for `warmup +
/// seconds` (the first `warmup` omitted from its totals).
pub fn start_clients(
    netns: &str,
    dst: &str,
    split: &[(u16, usize)],
    warmup: Duration,
    seconds: Duration,
    dir: &Path,
) -> anyhow::Result<Vec<Client>> {
    let omit = warmup.as_secs_f64().ceil().max(0.0) as u64;
    let time = seconds.as_secs_f64().ceil().max(1.0) as u64;
    let mut clients = Vec::new();
    for &(port, streams) in split {
        let json = dir.join(format!("iperf3-client-{port}.json"));
        let out = std::fs::File::create(&json)
            .with_context(|| format!("cannot create {}", json.display()))?;
        let err = std::fs::File::create(dir.join(format!("iperf3-client-{port}.err")))
            .context("cannot create an iperf3 client log")?;
        let mut cmd = Command::new("ip");
        cmd.args(["netns", "exec", netns, "iperf3", "-c", dst, "-p"])
            .arg(port.to_string())
            .args(["-C", "cubic", "-J", "-i", "0", "-P"])
            .arg(streams.to_string())
            .arg("-t")
            .arg(time.to_string())
            .arg("-O")
            .arg(omit.to_string())
            .stdout(out)
            .stderr(err);
        let proc = Proc::spawn(&mut cmd, format!("iperf3 client to port {port}"))?;
        clients.push(Client { proc, json });
    }
    Ok(clients)
}

/// What one iperf3 client reports.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct IperfResult {
    /// Bytes each stream's receiver got (after the omitted seconds).
    pub stream_bytes: Vec<u64>,
    /// Retransmitted segments, all streams.
    pub retrans: u64,
}

/// Parse an iperf3 client's `-J` output.
pub fn parse_iperf(text: &str) -> anyhow::Result<IperfResult> {
    let v: serde_json::Value =
        serde_json::from_str(text).context("iperf3 printed no valid JSON")?;
    if let Some(e) = v.get("error").and_then(|e| e.as_str()) {
        bail!("iperf3: {e}");
    }
    let end = v
        .get("end")
        .ok_or_else(|| anyhow!("iperf3 JSON has no `end` section"))?;
    let streams = end
        .get("streams")
        .and_then(|s| s.as_array())
        .ok_or_else(|| anyhow!("iperf3 JSON has no `end.streams`"))?;
    let stream_bytes = streams
        .iter()
        .map(|s| {
            s.pointer("/receiver/bytes")
                .and_then(serde_json::Value::as_u64)
                .ok_or_else(|| anyhow!("iperf3 JSON: a stream without `receiver.bytes`"))
        })
        .collect::<anyhow::Result<Vec<u64>>>()?;
    let retrans = end
        .pointer("/sum_sent/retransmits")
        .and_then(serde_json::Value::as_u64)
        .ok_or_else(|| anyhow!("iperf3 JSON has no `end.sum_sent.retransmits`"))?;
    Ok(IperfResult {
        stream_bytes,
        retrans,
    })
}

/// Wait for every client to finish (at most `timeout`) and merge their results.
pub fn finish_clients(clients: Vec<Client>, timeout: Duration) -> anyhow::Result<IperfResult> {
    let mut all = IperfResult::default();
    for mut c in clients {
        let status = c.proc.wait_timeout(timeout)?;
        let text = std::fs::read_to_string(&c.json)
            .with_context(|| format!("cannot read {}", c.json.display()))?;
        let r = parse_iperf(&text).with_context(|| {
            format!(
                "{} ({status}), output in {}",
                c.proc.what(),
                c.json.display()
            )
        })?;
        all.stream_bytes.extend(r.stream_bytes);
        all.retrans += r.retrans;
    }
    Ok(all)
}

/// Fail if a client has already finished. Called at the window's end: each client sends for
/// the warm-up, the window and a tail from its own start, and the window starts when the last
/// client's connections are up, so one whose connections came up a tail earlier or more would
/// have stopped inside the window, which then was not all under load. (The tail of several
/// clients covers the longest wait for connections: this is a check that it did.)
pub fn still_sending(clients: &mut [Client]) -> anyhow::Result<()> {
    for c in clients {
        if let Some(status) = c.proc.try_wait()? {
            bail!(
                "{} finished ({status}) before the window ended: its connections came up long                  before the last client's, so part of the window was not under its load",
                c.proc.what()
            );
        }
    }
    Ok(())
}

/// A running ping probe.
pub struct Ping {
    proc: Proc,
    out: PathBuf,
    err: PathBuf,
}

/// `ping` from `netns` to `dst` every [`PING_INTERVAL`], in the C locale: iputils built with
/// NLS translates its reply lines (`time=` included), which [`ping_rtts`] reads.
pub fn ping_command(netns: &str, dst: &str) -> Command {
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, "ping", "-n", "-i"])
        .arg(format!("{}", PING_INTERVAL.as_secs_f64()))
        .arg(dst)
        .env("LC_ALL", "C");
    cmd
}

/// Start pinging `dst` from `netns` every [`PING_INTERVAL`].
pub fn start_ping(netns: &str, dst: &str, dir: &Path) -> anyhow::Result<Ping> {
    let out = dir.join("ping.txt");
    let err = dir.join("ping.err");
    let file =
        std::fs::File::create(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let err_file =
        std::fs::File::create(&err).with_context(|| format!("cannot create {}", err.display()))?;
    let mut cmd = ping_command(netns, dst);
    cmd.stdout(file).stderr(err_file);
    let proc = Proc::spawn(&mut cmd, "ping")?;
    Ok(Ping { proc, out, err })
}

impl Ping {
    /// Stop the probe (SIGINT: ping prints its summary and exits) and return the round trips,
    /// microseconds (see [`ping_rtts`]).
    pub fn finish(mut self) -> anyhow::Result<Vec<f64>> {
        self.proc.signal(Signal::SIGINT)?;
        let status = self.proc.wait_timeout(Duration::from_secs(5))?;
        let text = std::fs::read_to_string(&self.out)
            .with_context(|| format!("cannot read {}", self.out.display()))?;
        let err = std::fs::read_to_string(&self.err).unwrap_or_default();
        ping_rtts(status.code(), &text, &err)
            .with_context(|| format!("ping ({status}), output in {}", self.out.display()))
    }
}

/// The round trips of a finished ping, microseconds, from its exit code, its output
/// (`time=0.123 ms` per reply; duplicates, `(DUP!)`, are left out) and its stderr. Exit code
/// 0 (replies) or 1 (no reply: no round trips) are results; anything else (2: an error, or
/// killed by a signal) is an error quoting stderr, and so is a reply line whose round trip
/// cannot be read, rather than a percentile over the replies that could.
pub fn ping_rtts(code: Option<i32>, text: &str, stderr: &str) -> anyhow::Result<Vec<f64>> {
    if !matches!(code, Some(0 | 1)) {
        bail!("ping failed: {}", stderr.trim());
    }
    let mut rtts = Vec::new();
    for line in text.lines() {
        if !line.contains(" bytes from ") || line.contains("(DUP!)") {
            continue;
        }
        let rtt = line
            .split_once(" time=")
            .and_then(|(_, rest)| {
                let mut words = rest.split_whitespace();
                let ms: f64 = words.next()?.parse().ok()?;
                (words.next() == Some("ms") && ms.is_finite()).then_some(ms * 1000.0)
            })
            .ok_or_else(|| anyhow!("a ping reply without a readable round trip: {line}"))?;
        rtts.push(rtt);
    }
    Ok(rtts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_client_that_finished_before_the_window_ended_fails_the_run() {
        let client = |cmd: &str| Client {
            proc: Proc::spawn(
                Command::new("sh").args(["-c", cmd]),
                format!("client `{cmd}`"),
            )
            .unwrap(),
            json: PathBuf::new(),
        };
        let mut clients = vec![client("sleep 30"), client("exit 0")];
        let deadline = Instant::now() + Duration::from_secs(20);
        while clients[1].proc.try_wait().unwrap().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(10));
        }
        let e = still_sending(&mut clients).unwrap_err().to_string();
        assert!(
            e.contains("client `exit 0` finished") && e.contains("before the window ended"),
            "{e}"
        );
        assert!(still_sending(&mut clients[..1]).is_ok());
    }

    #[test]
    fn flows_are_split_evenly_under_the_stream_limit() {
        assert_eq!(split_flows(1), vec![1]);
        assert_eq!(split_flows(100), vec![100]);
        assert_eq!(split_flows(128), vec![128]);
        assert_eq!(split_flows(129), vec![65, 64]);
        assert_eq!(split_flows(1000), vec![125; 8]);
        assert_eq!(split_flows(0), Vec::<usize>::new());
        for n in [1, 7, 300, 1000, 4097] {
            let s = split_flows(n);
            assert_eq!(s.iter().sum::<usize>(), n);
            assert!(s.iter().all(|&k| (1..=MAX_STREAMS).contains(&k)));
        }
        assert_eq!(ports(3), vec![5201, 5202, 5203]);
    }

    #[test]
    fn iperf_json() {
        let text = r#"{"start":{},"intervals":[],"end":{
            "streams":[{"sender":{"bytes":10,"retransmits":1},"receiver":{"bytes":9}},
                       {"sender":{"bytes":20,"retransmits":2},"receiver":{"bytes":19}}],
            "sum_sent":{"bytes":30,"retransmits":3},"sum_received":{"bytes":28}}}"#;
        assert_eq!(
            parse_iperf(text).unwrap(),
            IperfResult {
                stream_bytes: vec![9, 19],
                retrans: 3
            }
        );
        let e = parse_iperf(r#"{"start":{},"error":"unable to connect to server"}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unable to connect"), "{e}");
        assert!(parse_iperf("").is_err());
        assert!(parse_iperf(r#"{"end":{"streams":[{}]}}"#).is_err());
    }

    #[test]
    fn ping_lines() {
        let text = "PING 10.78.0.2 (10.78.0.2) 56(84) bytes of data.
64 bytes from 10.78.0.2: icmp_seq=1 ttl=64 time=0.053 ms
64 bytes from 10.78.0.2: icmp_seq=2 ttl=64 time=12.5 ms
64 bytes from 10.78.0.2: icmp_seq=4 ttl=64 time=104 ms

--- 10.78.0.2 ping statistics ---
4 packets transmitted, 3 received, 25% packet loss, time 30ms
rtt min/avg/max/mdev = 0.053/38.851/104.000/46.000 ms
";
        assert_eq!(
            ping_rtts(Some(0), text, "").unwrap(),
            vec![53.0, 12_500.0, 104_000.0]
        );
        // No reply at all (ping exits 1): no round trips, not an error.
        assert_eq!(ping_rtts(Some(1), "", "").unwrap(), Vec::<f64>::new());
    }

    /// A duplicate reply is not a round trip of its own; it neither counts nor hides the others.
    #[test]
    fn ping_duplicates_are_skipped() {
        let text = "64 bytes from 10.78.0.2: icmp_seq=1 ttl=64 time=0.053 ms
64 bytes from 10.78.0.2: icmp_seq=1 ttl=64 time=0.061 ms (DUP!)
64 bytes from 10.78.0.2: icmp_seq=2 ttl=64 time=0.070 ms
";
        assert_eq!(ping_rtts(Some(0), text, "").unwrap(), vec![53.0, 70.0]);
    }

    /// A ping that failed (exit 2: no route, a bad address) or died fails the run instead of
    /// leaving it without an RTT; so does a reply whose round trip cannot be read (output in
    /// another language or format), instead of being left out of the percentiles.
    #[test]
    fn a_failed_or_unreadable_ping_is_an_error() {
        let e = ping_rtts(Some(2), "", "ping: connect: Network is unreachable\n")
            .unwrap_err()
            .to_string();
        assert!(e.contains("Network is unreachable"), "{e}");
        assert!(ping_rtts(None, "", "").is_err());
        let localized = "64 bytes from 10.78.0.2: icmp_seq=1 ttl=64 Zeit=0,053 ms\n";
        let e = ping_rtts(Some(0), localized, "").unwrap_err().to_string();
        assert!(e.contains("icmp_seq=1"), "{e}");
        let comma = "64 bytes from 10.78.0.2: icmp_seq=1 ttl=64 time=0,053 ms\n";
        assert!(ping_rtts(Some(0), comma, "").is_err());
    }

    /// ping translates its output (iputils with NLS): it runs in the C locale.
    #[test]
    fn ping_runs_in_the_c_locale() {
        let cmd = ping_command("ns", "10.78.0.2");
        let envs: Vec<_> = cmd.get_envs().collect();
        assert!(
            envs.contains(&(
                std::ffi::OsStr::new("LC_ALL"),
                Some(std::ffi::OsStr::new("C"))
            )),
            "{envs:?}"
        );
        let args: Vec<_> = cmd.get_args().collect();
        assert_eq!(
            args,
            [
                "netns",
                "exec",
                "ns",
                "ping",
                "-n",
                "-i",
                "0.01",
                "10.78.0.2"
            ]
        );
    }
}
