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
    // The BPMN orders' summary ends where the HX payment flow begins.
    let summary = stdout.split("Summary").nth(1).expect("a summary");
    let summary = summary
        .split("The HX payment workflow")
        .next()
        .unwrap_or(summary);
    assert_eq!(summary.matches("COMPLETED").count(), 3, "{summary}");
    assert!(
        summary.contains("+2h00m06.000s"),
        "2 s + 4 s of backoff, then the PT2H wait: {summary}"
    );
    // The HX payment: one completes, one unwinds newest first and ends COMPENSATED.
    let hx = stdout
        .split("The HX payment workflow")
        .nth(1)
        .expect("the HX flow");
    let unwind = hx.find("refund: compensating capture").expect("refund");
    let release = hx.find("release: compensating reserve").expect("release");
    assert!(unwind < release, "newest completion first: {hx}");
    assert!(hx.contains("payment COMPENSATED"), "{hx}");
    // The States-language order lines: a Map with a caught item, then a Wait.
    let states = stdout
        .split("The order-lines flow")
        .nth(1)
        .expect("the States-language flow");
    assert!(
        states.contains("ReserveLines: every line has an outcome"),
        "{states}"
    );
    assert!(states.contains("order COMPLETED"), "{states}");
    // Every dialect's part tells its cases the same way: a summary of its own,
    // an instance id per case, no internal node names, Map steps naming their
    // item, and case numbers that do not clash between parts.
    assert_eq!(stdout.matches("\nSummary\n").count(), 3, "{stdout}");
    assert!(hx.contains("Summary"), "{hx}");
    assert!(states.contains("Summary"), "{states}");
    for header in stdout
        .lines()
        .filter(|l| l.starts_with("Order #") || l.starts_with("Payment #"))
    {
        assert!(header.contains("(instance "), "{header}");
    }
    assert!(!stdout.contains("#catch"), "{stdout}");
    assert!(!stdout.contains("#iteration"), "{stdout}");
    assert!(
        states.contains("Reserve [line 1 CUP-02]: retry parked"),
        "{states}"
    );
    assert!(
        states.contains("Reserve [line 2 POT-03]: its Catch took OUT_OF_STOCK"),
        "{states}"
    );
    assert!(
        states.contains("Order #3001") && hx.contains("Payment #2001"),
        "{stdout}"
    );
    assert!(!states.contains("#2001"), "{states}");
}

/// The line of `label` in the demo's summary.
fn summary_row<'a>(stdout: &'a str, label: &str) -> &'a str {
    let summary = stdout.split("Summary").nth(1).expect("a summary");
    summary
        .lines()
        .find(|l| l.trim_start().starts_with(label))
        .unwrap_or_else(|| panic!("no row {label} in {summary}"))
}

/// Three orders that all COMPLETED read differently: each names the way the
/// credit gateway went and the end event it reached; `--keep` leaves the
/// database for `sutra inspect`.
#[test]
fn the_demo_tells_each_orders_path_and_keeps_its_database_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("demo.db");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["demo", "--keep"])
        .arg(&db)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    for line in [
        "Credit approved?: `credit.approved == true` held → Reserve stock",
        "Credit approved?: no condition held, the default flow → Order declined",
        "Order shipped: end event reached",
        "Payment failed: end event reached",
        "Order declined: end event reached",
    ] {
        assert!(stdout.contains(line), "missing {line:?} in:\n{stdout}");
    }
    for (label, end) in [
        ("#1001 Ada", "Order shipped"),
        ("#1002 Grace", "Payment failed"),
        ("#1003 Mallory", "Order declined"),
    ] {
        let row = summary_row(&stdout, label);
        assert!(row.contains("COMPLETED") && row.contains(end), "{row}");
    }

    // The kept database answers `inspect` for the order it names.
    let mallory = stdout
        .lines()
        .find(|l| l.starts_with("Order #1003 Mallory"))
        .and_then(|l| l.split("(instance ").nth(1))
        .map(|rest| rest.trim_end_matches(')').to_string())
        .unwrap_or_else(|| panic!("no instance id for #1003 in:\n{stdout}"));
    assert!(
        stdout.contains(&format!("sutra inspect --db {}", db.display())),
        "{stdout}"
    );
    let inspect = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["inspect", "--format", "json", "--db"])
        .arg(&db)
        .arg(&mallory)
        .output()
        .unwrap();
    assert!(
        inspect.status.success(),
        "{}",
        String::from_utf8_lossy(&inspect.stderr)
    );
    let view: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(view["state"], "COMPLETED");
    assert_eq!(view["variables"]["credit"]["approved"], false, "{view}");

    // `--keep` never overwrites a file.
    let again = std::process::Command::new(env!("CARGO_BIN_EXE_sutra"))
        .args(["demo", "--keep"])
        .arg(&db)
        .output()
        .unwrap();
    assert_eq!(again.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("exists already"));
}
