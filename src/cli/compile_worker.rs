//! `sutra __compile` (hidden): the compile worker the server starts for each
//! uploaded component (see `sandbox::compile`). Not for people: it reads a
//! component on stdin and writes its compiled artifact to `--out`.

use crate::sandbox::{run_worker, WorkerArgs};
use clap::Args;
use std::path::PathBuf;
use std::process::ExitCode;

#[derive(Debug, Args)]
pub struct CompileArgs {
    /// `quick` (Winch) or `optimized` (Cranelift).
    #[arg(long)]
    tier: String,
    /// Where the artifact goes (written to a temporary name, then renamed).
    #[arg(long)]
    out: PathBuf,
    /// CPU seconds the worker may use (RLIMIT_CPU).
    #[arg(long)]
    cpu_seconds: u64,
    /// Bytes of address space the worker may map (RLIMIT_AS).
    #[arg(long)]
    memory_bytes: u64,
    /// The most bytes read from stdin.
    #[arg(long)]
    max_bytes: u64,
    /// Run at a lower priority.
    #[arg(long)]
    background: bool,
}

pub fn exec(args: CompileArgs) -> ExitCode {
    run_worker(&WorkerArgs {
        tier: args.tier,
        out: args.out,
        cpu_seconds: args.cpu_seconds,
        memory_bytes: args.memory_bytes,
        max_bytes: args.max_bytes,
        background: args.background,
    })
}
