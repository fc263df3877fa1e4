//! The README's main command: `sutra demo` runs the order flow end to end.

#[test]
fn the_demo_runs_three_orders_to_completion() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .arg("demo")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.contains("Reserve stock: retry 2 parked for 2 s"),
        "{stdout}"
    );
    assert!(
        stdout.contains("Card declined: caught CARD_DECLINED"),
        "{stdout}"
    );
    let summary = stdout.split("Summary").nth(1).expect("a summary");
    assert_eq!(summary.matches("COMPLETED").count(), 3, "{summary}");
    assert!(
        summary.contains("+2h00m06.000s"),
        "2 s + 4 s of backoff, then the PT2H wait: {summary}"
    );
}
