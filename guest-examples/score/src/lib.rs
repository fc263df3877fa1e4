//! `score`: a realistic task component — a credit score for a loan applicant.
//!
//! Invariant: a pure function of the input (the context is only logged): the same
//! applicant always gets the same score, and every input it refuses is refused with
//! `SUTRA.TASK.VALIDATION`, a message naming the bad field, and the details
//! `{"class":"invalid_input"}` (so a retry policy never retries it).
//!
//! Input:
//! ```json
//! {"applicant": {
//!     "name": "Ada Lovelace",   // non-empty string
//!     "income": 85000,          // yearly income, a number >= 0
//!     "debts": 12000,           // outstanding debt, a number >= 0
//!     "age": 36,                // an integer, 18..=120
//!     "missedPayments": 1       // missed payments in the last 2 years, an integer >= 0
//! }}
//! ```
//! Output: `{"score": 300..=850, "band": "A".."E", "approved": bool}`.
//!
//! The score starts at 650 and moves with the debt-to-income ratio (low is good),
//! the income, the missed payments (each costs 45 points) and the length of credit
//! history the age allows; it is clamped to 300..=850. Bands: A >= 760, B >= 700,
//! C >= 640, D >= 580, else E. Bands A to C are approved.

/// The bindings of the world `task` (generated code, lint-exempt).
#[allow(clippy::too_many_arguments)]
mod bindings {
    wit_bindgen::generate!({
        world: "task",
        path: "../../wit",
    });
}

use bindings::sutra::task::host::{log, Level};
use bindings::sutra::task::types::{Context, ErrorInfo, TaskError};
use bindings::Guest;
use serde_json::{json, Map, Value};

/// The conventional code for refused input (mirrors the engine's code table).
const VALIDATION: &str = "SUTRA.TASK.VALIDATION";

/// A validated applicant.
struct Applicant {
    income: f64,
    debts: f64,
    age: u64,
    missed_payments: u64,
}

struct Score;

impl Guest for Score {
    fn run(ctx: Context, input: String) -> Result<String, TaskError> {
        let applicant = parse(&input).map_err(validation)?;
        let score = score(&applicant);
        let band = band(score);
        let approved = matches!(band, "A" | "B" | "C");
        log(
            Level::Info,
            &format!(
                "scored applicant for instance {}: {score} ({band})",
                ctx.instance_id
            ),
        );
        Ok(json!({ "score": score, "band": band, "approved": approved }).to_string())
    }
}

bindings::export!(Score with_types_in bindings);

fn validation(message: String) -> TaskError {
    TaskError::Failure(ErrorInfo {
        code: VALIDATION.to_string(),
        message,
        details: Some(json!({ "class": "invalid_input" }).to_string()),
    })
}

/// Parses and validates the input; the error is a message naming the bad field.
fn parse(input: &str) -> Result<Applicant, String> {
    let value: Value =
        serde_json::from_str(input).map_err(|e| format!("input is not JSON: {e}"))?;
    let applicant = value
        .get("applicant")
        .and_then(Value::as_object)
        .ok_or_else(|| "field \"applicant\" must be an object".to_string())?;
    let name = applicant.get("name").and_then(Value::as_str).unwrap_or("");
    if name.trim().is_empty() {
        return Err("field \"applicant.name\" must be a non-empty string".to_string());
    }
    let income = non_negative(applicant, "income")?;
    let debts = non_negative(applicant, "debts")?;
    let age = integer(applicant, "age")?;
    if !(18..=120).contains(&age) {
        return Err(format!(
            "field \"applicant.age\" must be between 18 and 120, got {age}"
        ));
    }
    let missed_payments = integer(applicant, "missedPayments")?;
    Ok(Applicant {
        income,
        debts,
        age,
        missed_payments,
    })
}

fn non_negative(obj: &Map<String, Value>, field: &str) -> Result<f64, String> {
    match obj.get(field).and_then(Value::as_f64) {
        Some(n) if n.is_finite() && n >= 0.0 => Ok(n),
        _ => Err(format!("field \"applicant.{field}\" must be a number >= 0")),
    }
}

fn integer(obj: &Map<String, Value>, field: &str) -> Result<u64, String> {
    obj.get(field)
        .and_then(Value::as_u64)
        .ok_or_else(|| format!("field \"applicant.{field}\" must be an integer >= 0"))
}

/// The score, 300..=850.
fn score(a: &Applicant) -> u32 {
    let mut score = 650.0;
    // Debt-to-income: up to +100 for no debt, down to -150 for debt >= 1.5x income.
    let dti = if a.income > 0.0 {
        a.debts / a.income
    } else if a.debts > 0.0 {
        f64::INFINITY
    } else {
        0.0
    };
    score += 100.0 - 250.0 * (dti / 1.5).min(1.0);
    // Income: up to +60, saturating at 150,000 a year.
    score += 60.0 * (a.income / 150_000.0).min(1.0);
    // Missed payments: -45 each.
    score -= 45.0 * a.missed_payments.min(20) as f64;
    // Credit history the age allows: up to +40 at 25 years of history.
    let history = a.age.saturating_sub(18).min(25) as f64;
    score += 40.0 * history / 25.0;
    score.clamp(300.0, 850.0).round() as u32
}

fn band(score: u32) -> &'static str {
    match score {
        760.. => "A",
        700..=759 => "B",
        640..=699 => "C",
        580..=639 => "D",
        _ => "E",
    }
}
