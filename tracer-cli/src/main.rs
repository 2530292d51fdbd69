//! The `tracer` binary: everything lives in the library (`tracer_cli`) so it can
//! be tested without spawning processes; this file only hands over the
//! arguments and turns the outcome into the process exit status.

fn main() {
    std::process::exit(tracer_cli::main_with_args(std::env::args_os()));
}
