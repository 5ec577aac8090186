//! `nvc`: the command line. Thin: parses arguments, loads the config, calls libnvc,
//! prints, and maps errors to an exit status.

mod attach;
mod cdi;
mod check;
mod commands;
mod configure;
mod health;
mod leases;
mod node;
mod top;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// GPUs for OCI containers.
#[derive(Parser)]
#[command(name = "nvc", version, about, long_about = None)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Show the driver version, the CUDA version and one row per GPU.
    Info {
        /// Print JSON instead of a table.
        #[arg(long)]
        json: bool,
    },
    /// List every host file and device a container request would get.
    List(commands::ListArgs),
    /// Show or explain the configuration.
    Config {
        #[command(subcommand)]
        command: ConfigCommand,
    },
    /// Register nvc with a container engine.
    Runtime {
        #[command(subcommand)]
        command: RuntimeCommand,
    },
    /// Generate and list CDI specs.
    Cdi {
        #[command(subcommand)]
        command: cdi::CdiCommand,
    },
    /// Diagnose this host: can GPU containers start, and if not, why.
    Check(check::CheckArgs),
    /// Show the GPUs' health, or write the health record every GPU start reads (`nvc
    /// health update`, `nvc health watch`).
    Health(health::HealthArgs),
    /// Add GPUs to a running container (found through its runtime's state).
    Attach(attach::AttachArgs),
    /// Take GPUs from a running container (its nodes and device cgroup; files stay).
    Detach(attach::AttachArgs),
    /// Which container uses which GPU: each GPU's processes, their containers and memory.
    Ps(top::PsArgs),
    /// `nvc ps`, refreshed every few seconds, as top does.
    Top(top::TopArgs),
    /// Install nvc on a Kubernetes node from a container, and take it off (the
    /// DaemonSet of packaging/kubernetes/).
    Node {
        #[command(subcommand)]
        command: node::NodeCommand,
    },
}

#[derive(Subcommand)]
enum RuntimeCommand {
    /// Add nvc to an engine's configuration (Docker, containerd, CRI-O, Podman).
    Configure(configure::ConfigureArgs),
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the default configuration file, every key commented.
    Default,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result: Result<(), Box<dyn std::error::Error>> = match cli.command {
        Command::Info { json } => commands::info(json).map_err(Into::into),
        Command::List(args) => commands::list(&args).map_err(Into::into),
        Command::Config {
            command: ConfigCommand::Default,
        } => {
            print!("{}", nvc_config::DEFAULT_TOML);
            Ok(())
        }
        Command::Runtime {
            command: RuntimeCommand::Configure(args),
        } => configure::run(&args).map_err(Into::into),
        Command::Cdi { command } => cdi::run(&command).map_err(Into::into),
        Command::Health(args) => health::run(&args).map_err(Into::into),
        Command::Attach(args) => attach::attach(&args).map_err(Into::into),
        Command::Detach(args) => attach::detach(&args).map_err(Into::into),
        Command::Ps(args) => top::ps(&args).map_err(Into::into),
        Command::Top(args) => top::top(&args).map_err(Into::into),
        Command::Node { command } => node::run(&command).map_err(Into::into),
        Command::Check(args) => match check::run(&args) {
            // `nvc check` prints its own table; its status says whether GPU containers
            // can start.
            Ok(true) => Ok(()),
            Ok(false) => return ExitCode::FAILURE,
            Err(e) => Err(e.into()),
        },
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let chain = libnvc::report::error_chain(e.as_ref());
            eprintln!("nvc: {}", libnvc::report::shorten(&chain));
            ExitCode::FAILURE
        }
    }
}
