fn main() -> std::process::ExitCode {
    sutra::cli::main()
}
