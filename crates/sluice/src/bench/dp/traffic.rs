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
//! every reply's `time=` is one round trip.

use super::procs::{self, Proc};
use anyhow::{Context, anyhow, bail};
use nix::sys::signal::Signal;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
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

/// A running ping probe.
pub struct Ping {
    proc: Proc,
    out: PathBuf,
}

/// Start pinging `dst` from `netns` every [`PING_INTERVAL`].
pub fn start_ping(netns: &str, dst: &str, dir: &Path) -> anyhow::Result<Ping> {
    let out = dir.join("ping.txt");
    let file =
        std::fs::File::create(&out).with_context(|| format!("cannot create {}", out.display()))?;
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", netns, "ping", "-n", "-i"])
        .arg(format!("{}", PING_INTERVAL.as_secs_f64()))
        .arg(dst)
        .stdout(file)
        .stderr(Stdio::null());
    let proc = Proc::spawn(&mut cmd, "ping")?;
    Ok(Ping { proc, out })
}

impl Ping {
    /// Stop the probe (SIGINT: ping prints its summary and exits) and return the round trips,
    /// microseconds.
    pub fn finish(mut self) -> anyhow::Result<Vec<f64>> {
        self.proc.signal(Signal::SIGINT)?;
        self.proc.wait_timeout(Duration::from_secs(5))?;
        let text = std::fs::read_to_string(&self.out)
            .with_context(|| format!("cannot read {}", self.out.display()))?;
        Ok(parse_ping(&text))
    }
}

/// The round trips in ping's output (`time=0.123 ms` per reply), microseconds.
pub fn parse_ping(text: &str) -> Vec<f64> {
    text.lines()
        .filter_map(|l| {
            let rest = l.split_once("time=")?.1;
            let (ms, unit) = rest.split_once(' ').unwrap_or((rest, "ms"));
            let ms: f64 = ms.parse().ok()?;
            (unit.trim() == "ms").then_some(ms * 1000.0)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(parse_ping(text), vec![53.0, 12_500.0, 104_000.0]);
        assert_eq!(parse_ping(""), Vec::<f64>::new());
    }
}
