//! `sluice bench ...`: reports that run Sluice and its baselines in one process and print
//! ratios (absolute times on shared machines are noise; ratios from one run are not).

mod common;
pub mod dp;
pub mod flow;
mod machine;
pub mod queues;
pub mod sched;

use clap::Subcommand;

/// The benchmark suites.
#[derive(Subcommand)]
pub enum BenchCommand {
    /// Integer priority queues vs baselines: hold, pacing and drain workloads.
    Queues(queues::QueuesArgs),
    /// Whole schedulers vs baselines: hClock, pFabric, FQ/pacing, Eiffel Fig. 4.7.
    Sched(sched::SchedArgs),
    /// Lossless flow control: doorbells vs polling every queue, admission cost, per-flow memory.
    Flow(flow::FlowArgs),
    /// Live TCP between namespaces shaped by the Sluice daemon, kernel HTB and TBF, side by side.
    Dp(dp::DpArgs),
}

/// Run one suite.
pub fn run(cmd: BenchCommand) -> anyhow::Result<()> {
    match cmd {
        BenchCommand::Queues(args) => queues::run(&args),
        BenchCommand::Sched(args) => sched::run(&args),
        BenchCommand::Flow(args) => flow::run(&args),
        BenchCommand::Dp(args) => dp::run(&args),
    }
}
