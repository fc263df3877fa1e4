//! The `sutra` command line: argument parsing and dispatch. Each verb lives in
//! its own file; this one only routes. Exit status, for every verb (see
//! `show`): 0 when the command did what was asked and the instance it shows,
//! if any, is not FAILED; 1 a negative result (a FAILED instance, a failed
//! attempt, an invalid file, not found, a refused request, no server); 2 a
//! usage error.

mod batch;
mod channels;
mod check;
mod client;
mod compile_worker;
// `sutra connection` (issue 31).
mod connection;
mod demo;
// `sutra egress` and `sutra secret` (issue 30).
/// The HX payment flow of `sutra demo` (called by `demo`).
pub mod demo_hx;
/// The States-language flow of the demo (the demo calls `demo_states::run`).
pub mod demo_states;
mod egress;
mod new;
mod resume;
mod run;
mod run_watch;
mod serve;
mod show;
mod signal;
mod task;
mod tenant;
mod variables;

use clap::{Parser, Subcommand};
use std::process::ExitCode;

#[derive(Debug, Parser)]
#[command(
    name = "sutra",
    version,
    about = "A durable workflow engine whose tasks are WebAssembly components"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Start a project: `new task NAME --lang rust|python|js`, `new flow NAME --dialect bpmn|hx|states`.
    #[command(subcommand)]
    New(new::NewCommand),
    /// Work with task components directly.
    #[command(subcommand)]
    Task(task::TaskCommand),
    /// Validate process definitions.
    Check(check::CheckArgs),
    /// Deploy a definition, start one instance and drive it until it ends (or waits for a message).
    Run(run::RunArgs),
    /// Show an instance (a retained terminal one answers too): from `--db`, else from the server.
    Inspect(client::InspectArgs),
    /// Re-arm and drive every parked instance in a store until SIGINT/SIGTERM.
    Serve(serve::ServeArgs),
    /// Run the example flows on embedded SQLite with the virtual clock and tell what happened.
    Demo(demo::DemoArgs),
    /// Manage tenants: `create <name> --db URL` (prints its key once); `keys`, `add-key`, `revoke-key`, `rotate-key` on a server (admin key).
    #[command(subcommand)]
    Tenant(tenant::TenantCommand),
    /// Upload a definition and its task modules to a server.
    Deploy(client::DeployArgs),
    /// List the deployments on a server.
    Deployments(client::ServerOpts),
    /// Undeploy: no new starts; the deployment drains, then retires.
    Undeploy(client::DeploymentIdArgs),
    /// Start an instance on a server.
    Start(client::StartArgs),
    /// List instances on a server.
    Instances(client::InstancesArgs),
    /// Show an instance's history (the audit journal) from a server.
    History(client::InstanceIdArgs),
    /// Cancel an instance on a server.
    Cancel(client::CancelArgs),
    /// Close a FAILED instance on a server (`--reason`): it no longer holds its deployment, and retention applies.
    Close(client::CloseArgs),
    /// Retry a terminal instance on a server (`--mode full|from-failure`).
    Retry(client::RetryArgs),
    /// Send a message to a server (correlates to a wait, or starts a process).
    Send(client::SendArgs),
    /// Broadcast a signal within your tenant on a server (`signal NAME --var k=v`).
    Signal(signal::SignalArgs),
    /// Configure a tenant's channels on a server (`channel set <name> --push URL | --pull`).
    #[command(subcommand)]
    Channel(channels::ChannelCommand),
    /// A task module's outbound HTTP grant on a server (`egress grant <module> --host PATTERN`).
    #[command(subcommand)]
    Egress(egress::EgressCommand),
    /// A tenant's secrets on a server (`secret set <name>` reads the value from stdin; never shown).
    #[command(subcommand)]
    Secret(egress::SecretCommand),
    /// A tenant's connections for HTTP tasks on a server (`connection set <name> --type bearer` reads the credential from stdin; never shown).
    #[command(subcommand)]
    Connection(connection::ConnectionCommand),
    /// List a server's incidents (`incidents resolve <id>` re-arms one).
    Incidents(channels::IncidentsArgs),
    /// Move a WAITING or FAILED instance onto another deployment of its process.
    Migrate(channels::MigrateArgs),
    /// Resume an instance that waits on a named event (a States-language `EventName` wait).
    Resume(resume::ResumeArgs),
    /// Fix the variables of a FAILED (then retry from its failure) or WAITING instance on a server.
    SetVariables(variables::SetVariablesArgs),
    /// Retry, cancel, resolve or migrate many instances as one durable batch on a server
    /// (`batch retry --state FAILED --process p`; `batch list|show|stop`).
    #[command(subcommand)]
    Batch(batch::BatchCommand),
    /// The compile worker a server starts for an uploaded component (internal).
    #[command(name = "__compile", hide = true)]
    Compile(compile_worker::CompileArgs),
}

pub fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(e) => {
            let code = if e.use_stderr() { 2 } else { 0 };
            let _ = e.print();
            return ExitCode::from(code);
        }
    };
    init_tracing();
    match cli.command {
        Command::New(cmd) => new::exec(cmd),
        Command::Task(cmd) => task::exec(cmd),
        Command::Check(args) => check::exec(args),
        Command::Run(args) => run::exec_run(args),
        Command::Inspect(args) => client::exec_inspect(args),
        Command::Serve(args) => serve::exec(args),
        Command::Demo(args) => demo::exec(args),
        Command::Tenant(cmd) => tenant::exec(cmd),
        Command::Deploy(args) => client::exec_deploy(args),
        Command::Deployments(opts) => client::exec_deployments(opts),
        Command::Undeploy(args) => client::exec_undeploy(args),
        Command::Start(args) => client::exec_start(args),
        Command::Batch(cmd) => batch::exec(cmd),
        Command::Instances(args) => client::exec_instances(args),
        Command::History(args) => client::exec_history(args),
        Command::Cancel(args) => client::exec_cancel(args),
        Command::Close(args) => client::exec_close(args),
        Command::Retry(args) => client::exec_retry(args),
        Command::Send(args) => client::exec_send(args),
        Command::Signal(args) => signal::exec(args),
        Command::Channel(cmd) => channels::exec_channel(cmd),
        Command::Incidents(args) => channels::exec_incidents(args),
        Command::Egress(cmd) => egress::exec_egress(cmd),
        Command::Secret(cmd) => egress::exec_secret(cmd),
        Command::Connection(cmd) => connection::exec_connection(cmd),
        Command::Migrate(args) => channels::exec_migrate(args),
        Command::Resume(args) => resume::exec(args),
        Command::SetVariables(args) => variables::exec(args),
        Command::Compile(args) => compile_worker::exec(args),
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("SUTRA_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .try_init();
}

/// A progress line on stderr that must never end the run: a reader that went
/// away (a script that read the id line and closed the pipe) is not an error.
pub(crate) fn say(line: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "{line}");
}

/// A usage error: print it like clap does and exit 2.
pub(crate) fn usage_error(message: impl std::fmt::Display) -> ExitCode {
    eprintln!("error: {message}");
    ExitCode::from(2)
}

#[cfg(test)]
mod tests {
    use super::Cli;
    use clap::CommandFactory;

    #[test]
    fn the_command_line_is_well_formed() {
        Cli::command().debug_assert();
    }

    #[test]
    fn every_argument_of_every_verb_is_described() {
        fn walk(cmd: &clap::Command, path: &str, missing: &mut Vec<String>) {
            for a in cmd.get_arguments() {
                let id = a.get_id().as_str();
                if a.get_help().is_none() && !matches!(id, "help" | "version") {
                    missing.push(format!("{path} {id}"));
                }
            }
            for sub in cmd.get_subcommands() {
                walk(sub, &format!("{path} {}", sub.get_name()), missing);
            }
        }
        let mut missing = Vec::new();
        walk(&Cli::command(), "sutra", &mut missing);
        assert!(
            missing.is_empty(),
            "arguments without a description: {missing:?}"
        );
    }
}
