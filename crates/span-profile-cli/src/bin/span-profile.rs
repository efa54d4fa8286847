//! The `span-profile` binary: [`span_profile_cli::main_with_args`] on the process's arguments.
#![forbid(unsafe_code)]

use std::process::ExitCode;

fn main() -> ExitCode {
    let code = span_profile_cli::main_with_args(std::env::args_os());
    ExitCode::from(u8::try_from(code).unwrap_or(1))
}
