//! W5 (in the next commit).

use std::process::ExitCode;

pub(crate) async fn run(args: &crate::Args) -> ExitCode {
    let _ = (&args.workers, args.concurrency, args.signals);
    eprintln!("W5 is not there yet");
    ExitCode::FAILURE
}

pub(crate) fn child_main() -> Option<ExitCode> {
    None
}
