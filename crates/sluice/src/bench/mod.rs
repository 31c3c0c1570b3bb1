//! `sluice bench ...`: reports that run Sluice and its baselines in one process and print
//! ratios (absolute times on shared machines are noise; ratios from one run are not).

pub mod queues;

use clap::Subcommand;

/// The benchmark suites.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Integer priority queues vs baselines: hold, pacing and drain workloads.
    Queues(queues::QueuesArgs),
}

/// Run one suite.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Queues(args) => queues::run(&args),
    }
}
