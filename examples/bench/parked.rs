//! W6 (in a later commit).

use std::process::ExitCode;

pub(crate) async fn run(args: &crate::Args) -> ExitCode {
    let _ = args.signals;
    eprintln!("W6 is not there yet");
    ExitCode::FAILURE
}

pub(crate) fn child_main() -> Option<ExitCode> {
    None
}

pub(crate) fn compare(_: &crate::Args) -> ExitCode {
    ExitCode::FAILURE
}
