//! `sluice`: the command-line front end.
//!
//! - `sluice bench queues|sched|flow|dp`: Sluice and its baselines side by side in one run
//!   (see `src/bench/`).
//! - `sluice policy check FILE`: validate a policy file and print its scheduler
//!   (see `src/policy.rs`).
//! - `sluice run --config FILE`: the software NIC daemon (see `src/run.rs`, `sluice_dp::daemon`).
//! - `sluice demo`: the daemon shaping three classes of iperf3 traffic between namespaces.
//! - `sluice top`: a live view of a running daemon's classes, rates and flows (see `src/top.rs`).

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

/// End quietly, as `cat` does, when a reader of stdout goes away (`sluice bench sched --json |
/// head -1`): Rust ignores SIGPIPE, so a write to the closed pipe would otherwise panic in
/// `println!`. Only for commands whose output is all on stdout: the daemon, the demo, the
/// dp bench and the live view talk over sockets, where a peer that leaves is an error to
/// handle, not a reason to die.
fn die_on_closed_stdout() {
    use nix::sys::signal::{SigHandler, Signal, signal};
    // SAFETY: SIG_DFL installs no handler of ours, so no code runs in signal context; it is
    // set at start-up, before this process starts any thread. The test
    // `a_closed_stdout_ends_the_output_quietly` (tests/cli.rs) exercises it.
    let _ = unsafe { signal(Signal::SIGPIPE, SigHandler::SigDfl) };
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if matches!(
        cli.command,
        Command::Policy(_)
            | Command::Bench(
                bench::BenchCommand::Queues(_)
                    | bench::BenchCommand::Sched(_)
                    | bench::BenchCommand::Flow(_)
            )
    ) {
        die_on_closed_stdout();
    }
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
