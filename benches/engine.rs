fn main() {
    println!("{}", env!("CARGO_BIN_EXE_sutra"));
}
