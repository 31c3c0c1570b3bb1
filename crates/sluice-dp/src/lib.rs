//! # sluice-dp: the software NIC
//!
//! A daemon that moves real frames between Linux interfaces or network namespaces and
//! schedules them with Sluice's core: a lossless virtual switch in the Backdraft sense.
//!
//! - [`config`]: the daemon's configuration file.
//! - [`daemon`]: `sluice run`: set up, run the event loop, take everything down.
//! - [`datapath`]: the lossless virtual switch: ports, pipelines, delay lines.
//! - [`stats`]: counters and the snapshot the control plane publishes.
//! - [`control`]: requests to the datapath thread from the control plane.
//! - [`control_socket`]: the Unix control socket (newline-delimited JSON) and its client.
//! - [`metrics`]: Prometheus text exposition and the loopback endpoint serving it.
//! - [`deadline`]: socket I/O with one deadline for a whole exchange (control socket, metrics).
//! - [`buffers`]: the frame buffer arena (the global memory bound).
//! - [`codel`]: CoDel's control law, per flow: which leaving frames to mark.
//! - [`ecn`]: Congestion Experienced marks instead of drops.
//! - [`delay`]: per-port delay lines for RTT emulation.
//! - [`port`]: the port interface and the virtio-net header every frame carries.
//! - [`netns`]: namespaces and interfaces around the ports, set up and torn down by a guard.
//! - [`parse`]: the defensive Ethernet/VLAN/IPv4/IPv6/TCP/UDP parser and GSO wire-byte accounting.

#![warn(missing_docs)]

pub mod buffers;
pub mod codel;
pub mod config;
pub mod control;
pub mod control_socket;
pub mod daemon;
pub mod datapath;
pub mod deadline;
pub mod delay;
pub mod ecn;
pub mod metrics;
pub mod netns;
pub mod parse;
pub mod port;
pub mod stats;
