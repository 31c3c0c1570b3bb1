//! `sluice`: the command-line front end.
//!
//! - `sluice bench queues`: every queue and baseline side by side (see [`bench::queues`]).
//! - `sluice policy check FILE`: validate a policy file and print its scheduler (see [`policy`]).
//! - `sluice run --config FILE`: the software NIC daemon (see [`run`], `sluice_dp::daemon`).
//! - `sluice demo`: the daemon shaping three classes of iperf3 traffic between namespaces.
//! - `sluice top`: a live view of a running daemon's classes, rates and flows (see [`top`]).

mod bench;
mod demo;
mod policy;
mod report;
mod run;
mod top;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Parser)]
#[command(
    name = "sluice",
    version,
    about = "Scalable, programmable, zero-drop packet scheduling"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Benchmarks that put Sluice and its baselines side by side in one run.
    #[command(subcommand)]
    Bench(bench::BenchCommand),
    /// Policy files: check one and print the scheduler it describes.
    #[command(subcommand)]
    Policy(policy::PolicyCommand),
    /// The software NIC: shape live traffic between ports as a configuration file says.
    Run(run::RunArgs),
    /// Two namespaces, the daemon between them, three classes of iperf3 traffic, a live view.
    Demo(demo::DemoArgs),
    /// A live view of a running daemon: per-class rates against their limits, queues, drops
    /// and the busiest flows.
    Top(top::TopArgs),
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Bench(cmd) => bench::run(cmd),
        Command::Policy(cmd) => policy::run(cmd),
        Command::Run(args) => run::run(args),
        Command::Demo(args) => demo::run(args),
        Command::Top(args) => top::run(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("sluice: error: {e:#}");
            ExitCode::FAILURE
        }
    }
}
