//! What `sluice bench dp` reads from the system during a window: the receiving interface's
//! counters every 100 ms, CPU time from `/proc`, and established connections.
//!
//! - **Counters.** A sampler thread joins the receiving namespace (`setns`) and reads
//!   `/proc/thread-self/net/dev`, which shows the thread's own namespace, at fixed instants
//!   `start + k * interval` (sleeping to each; the instant actually read is recorded, so a
//!   late wake-up shortens one interval and lengthens the next without biasing the rates; a
//!   read preempted half-way is repeated, see [`read_timed`]).
//! - **TCP counters.** `/proc/thread-self/net/{snmp,netstat}` read the same way, for the
//!   diagnostics line each run prints (retransmissions by cause, reordering).
//! - **CPU.** `/proc/stat`'s `cpu` line (softirq and all busy time, every CPU) and
//!   `/proc/PID/stat`'s utime + stime (all threads of the process), in clock ticks
//!   (`sysconf(_SC_CLK_TCK)`, 10 ms on Linux): over a 10 s window, a resolution of 0.1% of
//!   a core.

use super::figures::Sample;
use super::procs;
use anyhow::{Context, anyhow, bail};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// One interface's line of `/proc/net/dev`: (rx_bytes, rx_packets).
pub fn parse_net_dev(text: &str, ifname: &str) -> anyhow::Result<(u64, u64)> {
    for line in text.lines().skip(2) {
        let Some((name, rest)) = line.split_once(':') else {
            continue;
        };
        if name.trim() != ifname {
            continue;
        }
        let mut fields = rest.split_whitespace().map(str::parse::<u64>);
        let mut next = |what: &str| -> anyhow::Result<u64> {
            fields
                .next()
                .ok_or_else(|| anyhow!("/proc/net/dev: no {what} for {ifname}"))?
                .with_context(|| format!("/proc/net/dev: bad {what} for {ifname}"))
        };
        let bytes = next("rx_bytes")?;
        let packets = next("rx_packets")?;
        return Ok((bytes, packets));
    }
    bail!("/proc/net/dev has no interface `{ifname}`")
}

/// A sampler of `ifname`'s receive counters in namespace `netns`, running on its own thread.
pub struct Sampler {
    thread: JoinHandle<anyhow::Result<Vec<Sample>>>,
}

impl Sampler {
    /// Sample at `start`, `start + interval`, ... up to `start + duration` (inclusive).
    pub fn start(
        netns: &str,
        ifname: &str,
        start: Instant,
        interval: Duration,
        duration: Duration,
    ) -> Sampler {
        let (netns, ifname) = (netns.to_string(), ifname.to_string());
        let thread = std::thread::spawn(move || {
            sluice_dp::netns::in_netns(&netns, move || {
                sample_loop(&ifname, start, interval, duration)
            })
            .with_context(|| format!("sampling counters in namespace `{netns}`"))?
        });
        Sampler { thread }
    }

    /// The samples (waits for the last one).
    pub fn finish(self) -> anyhow::Result<Vec<Sample>> {
        self.thread
            .join()
            .map_err(|_| anyhow!("the counter sampler panicked"))?
    }
}

fn sample_loop(
    ifname: &str,
    start: Instant,
    interval: Duration,
    duration: Duration,
) -> anyhow::Result<Vec<Sample>> {
    let steps = (duration.as_nanos() / interval.as_nanos().max(1)) as u32;
    let mut out = Vec::with_capacity(steps as usize + 1);
    for k in 0..=steps {
        procs::sleep_until(start + interval * k)?;
        let (t_ns, text) = read_timed(start)?;
        let (rx_bytes, rx_packets) = parse_net_dev(&text, ifname)?;
        out.push(Sample {
            t_ns,
            rx_bytes,
            rx_packets,
        });
    }
    Ok(out)
}

/// A read of the counters slower than this was interrupted (the thread was preempted): its
/// instant is uncertain by that much, so it is read again.
const READ_SLACK: Duration = Duration::from_micros(100);

/// Reads of the counters tried per sample, at most.
const READ_TRIES: u32 = 20;

/// `/proc/thread-self/net/dev` and the instant it was read (ns since `start`, the middle of
/// the read). On a busy machine the thread can be preempted between reading the clock and
/// the counters, which skews one 100 ms interval by the delay (5 ms: 5%) and its neighbour the
/// other way; so the read is timed on both sides and repeated while it took longer than
/// [`READ_SLACK`] (keeping the tightest of [`READ_TRIES`]).
fn read_timed(start: Instant) -> anyhow::Result<(u64, String)> {
    let mut best: Option<(Duration, u64, String)> = None;
    for _ in 0..READ_TRIES {
        let before = start.elapsed();
        let text = std::fs::read_to_string("/proc/thread-self/net/dev")
            .context("cannot read /proc/thread-self/net/dev")?;
        let after = start.elapsed();
        let took = after.saturating_sub(before);
        let mid = ((before + after) / 2).as_nanos() as u64;
        if best.as_ref().is_none_or(|(t, _, _)| took < *t) {
            best = Some((took, mid, text));
        }
        if took <= READ_SLACK {
            break;
        }
    }
    let (_, t_ns, text) = best.ok_or_else(|| anyhow!("no read of the counters"))?;
    Ok((t_ns, text))
}

/// Every `Prefix: name ...` / `Prefix: value ...` pair of lines (the format of
/// `/proc/net/snmp` and `/proc/net/netstat`), as `Prefix.name` -> value.
pub fn parse_snmp(text: &str) -> std::collections::BTreeMap<String, u64> {
    let mut out = std::collections::BTreeMap::new();
    let lines: Vec<&str> = text.lines().collect();
    for pair in lines.chunks(2) {
        let [names, values] = pair else { continue };
        let (Some((p1, names)), Some((p2, values))) =
            (names.split_once(':'), values.split_once(':'))
        else {
            continue;
        };
        if p1 != p2 {
            continue;
        }
        for (n, v) in names.split_whitespace().zip(values.split_whitespace()) {
            if let Ok(v) = v.parse::<u64>() {
                out.insert(format!("{p1}.{n}"), v);
            }
        }
    }
    out
}

/// The TCP and TcpExt counters of namespace `netns`.
pub fn tcp_counters(netns: &str) -> anyhow::Result<std::collections::BTreeMap<String, u64>> {
    let texts = sluice_dp::netns::in_netns(netns, || {
        let snmp = std::fs::read_to_string("/proc/thread-self/net/snmp")?;
        let netstat = std::fs::read_to_string("/proc/thread-self/net/netstat")?;
        Ok::<_, std::io::Error>((snmp, netstat))
    })?
    .with_context(|| format!("cannot read TCP counters in namespace `{netns}`"))?;
    let mut all = parse_snmp(&texts.0);
    all.extend(parse_snmp(&texts.1));
    Ok(all)
}

/// Seconds per clock tick of `/proc` times.
pub fn tick_s() -> anyhow::Result<f64> {
    let hz = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .context("sysconf(_SC_CLK_TCK)")?
        .filter(|&hz| hz > 0)
        .ok_or_else(|| anyhow!("sysconf(_SC_CLK_TCK) gave no tick rate"))?;
    Ok(1.0 / hz as f64)
}

/// Totals of `/proc/stat`'s `cpu` line, ticks.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SystemCpu {
    /// Time in softirq.
    pub softirq: u64,
    /// Time not idle and not waiting for I/O.
    pub busy: u64,
}

/// Parse `/proc/stat`.
pub fn parse_proc_stat(text: &str) -> anyhow::Result<SystemCpu> {
    let line = text
        .lines()
        .find(|l| l.starts_with("cpu "))
        .ok_or_else(|| anyhow!("/proc/stat has no `cpu` line"))?;
    let v: Vec<u64> = line
        .split_whitespace()
        .skip(1)
        .map(str::parse)
        .collect::<Result<_, _>>()
        .with_context(|| format!("/proc/stat: bad `cpu` line: {line}"))?;
    // user nice system idle iowait irq softirq steal [guest guest_nice: included in user/nice]
    if v.len() < 8 {
        bail!("/proc/stat: `cpu` line too short: {line}");
    }
    let busy = v[0] + v[1] + v[2] + v[5] + v[6] + v[7];
    Ok(SystemCpu {
        softirq: v[6],
        busy,
    })
}

/// Read `/proc/stat`.
pub fn system_cpu() -> anyhow::Result<SystemCpu> {
    parse_proc_stat(&std::fs::read_to_string("/proc/stat").context("cannot read /proc/stat")?)
}

/// utime + stime from a `/proc/PID/stat` line, ticks.
pub fn parse_pid_stat(text: &str) -> anyhow::Result<u64> {
    // The command name is in parentheses and may hold spaces: fields count from the last ')'.
    let (_, rest) = text
        .rsplit_once(')')
        .ok_or_else(|| anyhow!("bad /proc/PID/stat: {text}"))?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // After the name: state(3) ... utime(14) stime(15), i.e. indexes 11 and 12 here.
    let field = |i: usize| -> anyhow::Result<u64> {
        fields
            .get(i)
            .ok_or_else(|| anyhow!("/proc/PID/stat too short: {text}"))?
            .parse()
            .with_context(|| format!("bad number in /proc/PID/stat: {text}"))
    };
    Ok(field(11)? + field(12)?)
}

/// utime + stime of process `pid`, ticks.
pub fn process_cpu(pid: u32) -> anyhow::Result<u64> {
    let path = format!("/proc/{pid}/stat");
    parse_pid_stat(&std::fs::read_to_string(&path).with_context(|| format!("cannot read {path}"))?)
}

/// Count the established TCP connections in `/proc/net/tcp` text whose remote port is in
/// `ports`.
pub fn count_established(text: &str, ports: &[u16]) -> usize {
    text.lines()
        .skip(1)
        .filter(|line| {
            let f: Vec<&str> = line.split_whitespace().collect();
            let remote_port = f
                .get(2)
                .and_then(|r| r.rsplit_once(':'))
                .and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            f.get(3) == Some(&"01") && remote_port.is_some_and(|p| ports.contains(&p))
        })
        .count()
}

/// Established TCP connections to `ports` in namespace `netns`.
pub fn established(netns: &str, ports: &[u16]) -> anyhow::Result<usize> {
    let text = sluice_dp::netns::in_netns(netns, || {
        std::fs::read_to_string("/proc/thread-self/net/tcp")
    })?
    .context("cannot read /proc/thread-self/net/tcp")?;
    Ok(count_established(&text, ports))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn net_dev_lines() {
        let text = "Inter-|   Receive                                                |  Transmit
 face |bytes    packets errs drop fifo frame compressed multicast|bytes    packets errs drop fifo colls carrier compressed
    lo:       0       0    0    0    0     0          0         0        0       0    0    0    0     0       0          0
sl19165-1: 585087708   37607    0    0    0     0          0         0  2305036   34903    0    0    0     0       0          0
";
        assert_eq!(
            parse_net_dev(text, "sl19165-1").unwrap(),
            (585087708, 37607)
        );
        assert_eq!(parse_net_dev(text, "lo").unwrap(), (0, 0));
        let e = parse_net_dev(text, "eth0").unwrap_err().to_string();
        assert!(e.contains("no interface `eth0`"), "{e}");
    }

    #[test]
    fn proc_stat_and_pid_stat() {
        let stat =
            parse_proc_stat("cpu  966134 0 67976 634084 3108 7 910 518 0 0\ncpu0 1 2 3\n").unwrap();
        assert_eq!(stat.softirq, 910);
        assert_eq!(stat.busy, 966134 + 67976 + 7 + 910 + 518);
        assert!(parse_proc_stat("intr 1 2\n").is_err());
        let pid = "4242 (sluice run) S 1 4242 4242 0 -1 4194560 100 0 0 0 1234 567 0 0 20 0 3 0";
        assert_eq!(parse_pid_stat(pid).unwrap(), 1234 + 567);
        assert!(parse_pid_stat("4242 (x) S 1").is_err());
        // Our own process reads.
        assert!(process_cpu(std::process::id()).is_ok());
        assert!(tick_s().unwrap() > 0.0);
    }

    #[test]
    fn snmp_pairs() {
        let text = "Tcp: RtoAlgorithm RtoMin RetransSegs
Tcp: 1 200 33
Udp: InDatagrams
Udp: 7
TcpExt: TCPTimeouts TCPSACKReorder
TcpExt: 2 5
";
        let m = parse_snmp(text);
        assert_eq!(m.get("Tcp.RetransSegs"), Some(&33));
        assert_eq!(m.get("Udp.InDatagrams"), Some(&7));
        assert_eq!(m.get("TcpExt.TCPSACKReorder"), Some(&5));
        assert_eq!(m.len(), 6);
    }

    #[test]
    fn established_connections_by_remote_port() {
        let text = "  sl  local_address rem_address   st tx_queue rx_queue
   0: 01004D0A:BB3E 02004D0A:1451 01 00000000:00000000 00:00000000 00000000
   1: 01004D0A:BB40 02004D0A:1451 06 00000000:00000000 00:00000000 00000000
   2: 01004D0A:BB42 02004D0A:1452 01 00000000:00000000 00:00000000 00000000
   3: 0100007F:1451 00000000:0000 0A 00000000:00000000 00:00000000 00000000
";
        assert_eq!(count_established(text, &[0x1451]), 1);
        assert_eq!(count_established(text, &[0x1451, 0x1452]), 2);
        assert_eq!(count_established(text, &[80]), 0);
    }
}
