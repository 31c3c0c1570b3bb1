//! Socket I/O with one deadline for a whole exchange, for the control socket and the metrics
//! endpoint. A timeout set once on a socket bounds each read(2) or write(2) alone, so a client
//! that trickles a byte every few seconds, or reads its answer that slowly, never times out;
//! [`Deadlined`] sets what is left of the deadline before every call instead.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::net::UnixStream;
use std::time::{Duration, Instant};

/// A stream whose reads and writes can time out.
pub trait Timeouts {
    /// See [`TcpStream::set_read_timeout`].
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()>;
    /// See [`TcpStream::set_write_timeout`].
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()>;
}

impl Timeouts for TcpStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        TcpStream::set_write_timeout(self, t)
    }
}

impl Timeouts for UnixStream {
    fn set_read_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_read_timeout(self, t)
    }
    fn set_write_timeout(&self, t: Option<Duration>) -> io::Result<()> {
        UnixStream::set_write_timeout(self, t)
    }
}

/// `stream`, read and written until `deadline` at the latest (then `TimedOut`).
pub struct Deadlined<'a, S> {
    /// The socket.
    pub stream: &'a S,
    /// When every read and write fails from.
    pub deadline: Instant,
}

impl<'a, S: Timeouts> Deadlined<'a, S> {
    /// `stream` with `within` from now.
    pub fn new(stream: &'a S, within: Duration) -> Self {
        Deadlined {
            stream,
            deadline: Instant::now() + within,
        }
    }

    /// What is left until the deadline (never zero, which a socket refuses), or `TimedOut`.
    fn left(&self) -> io::Result<Duration> {
        let left = self.deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        Ok(left)
    }
}

impl<S: Timeouts> Read for Deadlined<'_, S>
where
    for<'b> &'b S: Read,
{
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.stream.set_read_timeout(Some(self.left()?))?;
        let mut s = self.stream;
        s.read(buf)
    }
}

impl<S: Timeouts> Write for Deadlined<'_, S>
where
    for<'b> &'b S: Write,
{
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.stream.set_write_timeout(Some(self.left()?))?;
        let mut s = self.stream;
        s.write(buf)
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_trickling_peer_times_out_at_the_deadline_not_per_read() {
        let (a, b) = UnixStream::pair().unwrap();
        let writer = std::thread::spawn(move || {
            // A byte every 40 ms: each read waits less than a 100 ms timeout.
            for _ in 0..20 {
                if (&b).write_all(b"x").is_err() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(40));
            }
        });
        let t = Instant::now();
        let mut r = Deadlined::new(&a, Duration::from_millis(300));
        let mut got = Vec::new();
        let mut byte = [0u8; 1];
        let err = loop {
            match r.read_exact(&mut byte) {
                Ok(()) => got.push(byte[0]),
                Err(e) => break e,
            }
        };
        assert!(
            matches!(
                err.kind(),
                io::ErrorKind::TimedOut | io::ErrorKind::WouldBlock
            ),
            "{err}"
        );
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert!(got.len() < 20, "read all {} bytes: no deadline", got.len());
        drop(a);
        writer.join().unwrap();
    }
}
