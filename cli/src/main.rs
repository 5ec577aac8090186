//! `nvc`: the command line. Thin: parses arguments, loads the config, calls libnvc,
//! prints, and maps errors to an exit status.

mod commands;

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
}

#[derive(Subcommand)]
enum ConfigCommand {
    /// Print the default configuration file, every key commented.
    Default,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Info { json } => commands::info(json),
        Command::List(args) => commands::list(&args),
        Command::Config {
            command: ConfigCommand::Default,
        } => {
            print!("{}", nvc_config::DEFAULT_TOML);
            Ok(())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("nvc: {}", libnvc::edits::error_chain(&e));
            ExitCode::FAILURE
        }
    }
}
