//! The `antler` command-line tool.
//!
//! Subcommands:
//! - `antler bench write-amp …`: the write-amplification benchmark of
//!   `shared/bench/write-amp.md` (see `antler bench write-amp --help`).
#![expect(
    clippy::print_stdout,
    clippy::print_stderr,
    reason = "a command-line tool reports on its streams"
)]

mod alloc;
mod write_amp;

use std::process::ExitCode;

fn main() -> ExitCode {
    // First, while the process has one thread (see `alloc`).
    let allocator = alloc::configure();
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["bench", "write-amp", rest @ ..] => match write_amp::Options::parse(rest) {
            Ok(None) => {
                println!("{}", write_amp::USAGE);
                ExitCode::SUCCESS
            }
            Ok(Some(options)) => match write_amp::run(&options, allocator) {
                Ok(()) => ExitCode::SUCCESS,
                Err(e) => {
                    eprintln!("antler bench write-amp: {e}");
                    ExitCode::FAILURE
                }
            },
            Err(e) => {
                eprintln!("antler bench write-amp: {e}\n\n{}", write_amp::USAGE);
                ExitCode::from(2)
            }
        },
        // Run by the benchmark itself, in a fresh process: the peak memory of a cold read.
        ["bench", "cold-peak", rest @ ..] => match write_amp::cold_peak(rest) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("antler bench cold-peak: {e}");
                ExitCode::FAILURE
            }
        },
        _ => {
            eprintln!("usage: antler bench write-amp --help");
            ExitCode::from(2)
        }
    }
}
