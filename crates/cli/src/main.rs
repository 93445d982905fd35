//! The `antler` command-line tool.
//!
//! Subcommands arrive with the crates they drive; see the README for what runs today.
#![expect(
    clippy::print_stderr,
    reason = "a command-line tool reports on its streams"
)]

fn main() -> std::process::ExitCode {
    let args: Vec<String> = std::env::args().skip(1).collect();
    eprintln!("antler: no subcommands are available yet (got {args:?})");
    std::process::ExitCode::from(2)
}
