//! The soak's workload: one definition per feature, the input of each
//! instance drawn at random, and the end each input decides.
//!
//! Invariant: an instance's input alone decides its end state, the attempts
//! of each task (numbers 1..n, each once) and the variables checked; nothing
//! depends on timing, so a crash may delay an instance but never change it.

use rand::Rng;
use serde_json::{json, Value};

/// `<bpmn:definitions>` around a process.
fn bpmn(body: &str) -> String {
    format!(
        r#"<?xml version="1.0" encoding="UTF-8"?>
<bpmn:definitions xmlns:bpmn="http://www.omg.org/spec/BPMN/20100524/MODEL"
    xmlns:q="https://sutra.dev/bpmn/q/1.0" id="soak" targetNamespace="https://sutra.dev/soak">
{body}
</bpmn:definitions>"#
    )
}

/// Retries: `work` under a policy of 4 attempts, short backoffs.
const RETRY: &str = r#"<bpmn:process id="soak-retry" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:retry maxAttempts="4" initialDelay="PT0.1S" backoffCoefficient="1.5" maxDelay="PT0.3S"/>
        <q:io resultPath="$.out"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// A short timer, then a task.
const TIMER: &str = r#"<bpmn:process id="soak-timer" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="pause"/>
    <bpmn:intermediateCatchEvent id="pause">
      <bpmn:timerEventDefinition><bpmn:timeDuration>PT0.2S</bpmn:timeDuration></bpmn:timerEventDefinition>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="pause" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// A message wait keyed by `$.key` (the harness sends it), then a task.
const MESSAGE: &str = r#"<bpmn:message id="Go" name="soak-go"/>
  <bpmn:process id="soak-message" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait">
      <bpmn:extensionElements><q:correlation key="key"/></bpmn:extensionElements>
      <bpmn:messageEventDefinition messageRef="Go"/>
    </bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// A task that runs long (a few hundred ms), so a kill lands during its
/// attempt: the attempt is committed as started, and after the restart its
/// park re-runs it once its deadline passed.
const LONG: &str = r#"<bpmn:process id="soak-long" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:timeout duration="PT5S"/>
        <q:io resultPath="$.out"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// A business error `DECLINED` routed by an error boundary to `recover`.
const BUSINESS: &str = r#"<bpmn:error id="Declined" errorCode="DECLINED"/>
  <bpmn:process id="soak-business" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="charge"/>
    <bpmn:serviceTask id="charge" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="declined" attachedToRef="charge">
      <bpmn:errorEventDefinition errorRef="Declined"/>
    </bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="declined" targetRef="recover"/>
    <bpmn:serviceTask id="recover" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.recovery" resultPath="$.recovered"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="recover" targetRef="unpaid"/>
    <bpmn:endEvent id="unpaid"/>
    <bpmn:sequenceFlow id="f4" sourceRef="charge" targetRef="paid"/>
    <bpmn:endEvent id="paid"/>
  </bpmn:process>"#;

/// A channel call to the harness's loopback counterpart (channel `soak`).
const CHANNEL: &str = r#"<bpmn:process id="soak-channel" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="call"/>
    <bpmn:serviceTask id="call" implementation="channel:soak"/>
    <bpmn:sequenceFlow id="f2" sourceRef="call" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// HX: reserve, capture, ship (retried); a spent ship unwinds through the
/// compensators, newest completion first.
const HX: &str = r#"<?xml version="1.0" encoding="UTF-8"?>
<workflow id="soak-hx" name="Soak payment">
  <node id="reserve" type="task" impl="chaos"/>
  <node id="capture" type="task" impl="chaos" idempotent="false"/>
  <node id="ship" type="task" impl="chaos">
    <retry maxAttempts="3" backoff="fixed" initialDelay="PT0.1S" jitter="false"/>
  </node>
  <node id="refund" type="task" impl="chaos" compensates="capture"/>
  <node id="release" type="task" impl="chaos" compensates="reserve"/>
  <edges>
    <edge from="reserve" to="capture"/>
    <edge from="capture" to="ship"/>
    <edge from="capture" to="refund" type="compensation"/>
    <edge from="reserve" to="release" type="compensation"/>
  </edges>
</workflow>"#;

/// States language: a Map whose items retry `BUSY` (a spent item is
/// backordered by its Catch), a one-second wait, then an event wait.
const ASL: &str = r#"{
  "Name": "soak-asl",
  "StartAt": "Lines",
  "States": {
    "Lines": {
      "Type": "Map",
      "ItemsPath": "$.lines",
      "MaxConcurrency": 2,
      "ItemProcessor": {
        "StartAt": "Reserve",
        "States": {
          "Reserve": {
            "Type": "Task",
            "Resource": "chaos",
            "Retry": [{"ErrorEquals": ["BUSY"], "IntervalSeconds": 1, "MaxAttempts": 2, "BackoffRate": 1.0}],
            "Catch": [{"ErrorEquals": ["States.ALL"], "ResultPath": "$.problem", "Next": "Backorder"}],
            "End": true
          },
          "Backorder": {"Type": "Pass", "Result": {"backordered": true}, "End": true}
        }
      },
      "ResultPath": "$.reserved",
      "Next": "Pause"
    },
    "Pause": {"Type": "Wait", "Seconds": 1, "Next": "Approve"},
    "Approve": {"Type": "Wait", "EventName": "go", "ResultPath": "$.approval", "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}"#;

/// A parallel multi-instance task over `$.lines` (two at a time), each
/// item retried on its own; the results collected in input order.
const MULTI: &str = r#"<bpmn:process id="soak-mi" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:retry maxAttempts="3" initialDelay="PT0.1S" backoffCoefficient="1" maxDelay="PT0.1S"/>
        <q:io inputPath="$.item"/>
      </bpmn:extensionElements>
      <bpmn:multiInstanceLoopCharacteristics isSequential="false">
        <bpmn:extensionElements><q:multiInstance collection="lines" element="item" outputCollection="results" outputElement="attempt" maxConcurrency="2"/></bpmn:extensionElements>
      </bpmn:multiInstanceLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// The process a call activity calls: one task, retried.
const CHILD: &str = r#"<bpmn:process id="soak-child" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:retry maxAttempts="3" initialDelay="PT0.1S" backoffCoefficient="1" maxDelay="PT0.1S"/>
        <q:io resultPath="$.out"/>
      </bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f2" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// A call activity running `soak-child` on `$.order`, then a task.
const CALL: &str = r#"<bpmn:process id="soak-call" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="call"/>
    <bpmn:callActivity id="call" calledElement="soak-child">
      <bpmn:extensionElements><q:io inputPath="$.order" resultPath="$.child"/></bpmn:extensionElements>
    </bpmn:callActivity>
    <bpmn:sequenceFlow id="f2" sourceRef="call" targetRef="after"/>
    <bpmn:serviceTask id="after" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f3" sourceRef="after" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// A signal catch (the pump broadcasts `soak-tick` while any instance
/// waits for it), then a task.
const SIGNAL: &str = r#"<bpmn:signal id="Tick" name="soak-tick"/>
  <bpmn:process id="soak-signal" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait"><bpmn:signalEventDefinition signalRef="Tick"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="work"/>
    <bpmn:serviceTask id="work" implementation="registered:chaos">
      <bpmn:extensionElements><q:io resultPath="$.out"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:sequenceFlow id="f3" sourceRef="work" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// BPMN compensation: book and charge, each with a compensation handler
/// that is an HTTP task to the counterpart's ledger (an independent witness
/// of which handlers ran, and in what order); a `NOSHIP` business error of
/// ship ends in a compensate end event.
const BPMN_COMPENSATION: &str = r#"<bpmn:error id="NoShip" errorCode="NOSHIP"/>
  <bpmn:process id="soak-bpmn-comp" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="book"/>
    <bpmn:serviceTask id="book" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="cbook" attachedToRef="book"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
    <bpmn:serviceTask id="unbook" isForCompensation="true" implementation="http">
      <bpmn:extensionElements><q:http method="POST" url="LEDGER/ledger/unbook" body="ledger"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:association id="a1" associationDirection="One" sourceRef="cbook" targetRef="unbook"/>
    <bpmn:sequenceFlow id="f2" sourceRef="book" targetRef="charge"/>
    <bpmn:serviceTask id="charge" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="ccharge" attachedToRef="charge"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
    <bpmn:serviceTask id="refund" isForCompensation="true" implementation="http">
      <bpmn:extensionElements><q:http method="POST" url="LEDGER/ledger/refund" body="ledger"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:association id="a2" associationDirection="One" sourceRef="ccharge" targetRef="refund"/>
    <bpmn:sequenceFlow id="f3" sourceRef="charge" targetRef="ship"/>
    <bpmn:serviceTask id="ship" implementation="registered:chaos">
      <bpmn:extensionElements><q:io inputPath="$.ship"/></bpmn:extensionElements>
    </bpmn:serviceTask>
    <bpmn:boundaryEvent id="noship" attachedToRef="ship"><bpmn:errorEventDefinition errorRef="NoShip"/></bpmn:boundaryEvent>
    <bpmn:sequenceFlow id="f4" sourceRef="noship" targetRef="undo"/>
    <bpmn:endEvent id="undo"><bpmn:compensateEventDefinition/></bpmn:endEvent>
    <bpmn:sequenceFlow id="f5" sourceRef="ship" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>"#;

/// States language: an HTTP task to the counterpart, which answers 503
/// until the attempt the input names; the counterpart records every
/// attempt number it saw (`$$.State.RetryCount`), an independent ledger of
/// the server's attempts.
const LEDGER_ASL: &str = r#"{
  "Name": "soak-ledger",
  "StartAt": "Call",
  "States": {
    "Call": {
      "Type": "Task",
      "Resource": "arn:aws:states:::http:invoke",
      "Parameters": {
        "ApiEndpoint": "LEDGER/attempts",
        "Method": "POST",
        "RequestBody": {"n.$": "$.n", "until.$": "$.until", "retry.$": "$$.State.RetryCount"}
      },
      "Retry": [{"ErrorEquals": ["Api.HttpServerError"], "IntervalSeconds": 1, "MaxAttempts": 2, "BackoffRate": 1.0}],
      "ResultSelector": {"attempt.$": "$.ResponseBody.attempt"},
      "ResultPath": "$.out",
      "End": true
    }
  }
}"#;

/// Every definition the soak deploys.
/// `ledger` is the counterpart's base URL (`http://127.0.0.1:PORT`); a
/// called process comes before its caller.
pub fn definitions(ledger: &str) -> Vec<String> {
    vec![
        bpmn(RETRY),
        bpmn(TIMER),
        bpmn(LONG),
        bpmn(MESSAGE),
        bpmn(BUSINESS),
        bpmn(CHANNEL),
        HX.to_string(),
        ASL.to_string(),
        bpmn(MULTI),
        bpmn(CHILD),
        bpmn(CALL),
        bpmn(SIGNAL),
        bpmn(BPMN_COMPENSATION).replace("LEDGER", ledger),
        LEDGER_ASL.replace("LEDGER", ledger),
    ]
}

/// The process a call activity of [`Kind::Call`] starts (not started by
/// the harness: the check counts them against the calls).
pub const CHILD_PROCESS: &str = "soak-child";

/// The features, one process each.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Retry,
    Timer,
    Long,
    Message,
    Business,
    Channel,
    Compensation,
    States,
    Multi,
    Call,
    Signal,
    BpmnCompensation,
    Ledger,
}

pub const KINDS: [Kind; 13] = [
    Kind::Retry,
    Kind::Timer,
    Kind::Long,
    Kind::Message,
    Kind::Business,
    Kind::Channel,
    Kind::Compensation,
    Kind::States,
    Kind::Multi,
    Kind::Call,
    Kind::Signal,
    Kind::BpmnCompensation,
    Kind::Ledger,
];

impl Kind {
    pub fn process(self) -> &'static str {
        match self {
            Kind::Retry => "soak-retry",
            Kind::Timer => "soak-timer",
            Kind::Long => "soak-long",
            Kind::Message => "soak-message",
            Kind::Business => "soak-business",
            Kind::Channel => "soak-channel",
            Kind::Compensation => "soak-hx",
            Kind::States => "soak-asl",
            Kind::Multi => "soak-mi",
            Kind::Call => "soak-call",
            Kind::Signal => "soak-signal",
            Kind::BpmnCompensation => "soak-bpmn-comp",
            Kind::Ledger => "soak-ledger",
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Retry => "retry",
            Kind::Timer => "timer",
            Kind::Long => "long task",
            Kind::Message => "message",
            Kind::Business => "business error",
            Kind::Channel => "channel call",
            Kind::Compensation => "compensation",
            Kind::States => "states map+waits",
            Kind::Multi => "multi-instance",
            Kind::Call => "call activity",
            Kind::Signal => "signal",
            Kind::BpmnCompensation => "bpmn compensation",
            Kind::Ledger => "http attempts",
        }
    }
}

/// What an instance must end as.
#[derive(Debug, Clone)]
pub struct Expected {
    pub state: &'static str,
    /// The instance error's code, when it must fail.
    pub error: Option<&'static str>,
    /// Attempts: (task, n) stands for one run of the task with attempts
    /// 1..=n; a task listed twice ran twice (Map items share a task id).
    pub attempts: Vec<(&'static str, u32)>,
    /// (JSON pointer into the variables, value) pairs that must hold.
    pub variables: Vec<(&'static str, Value)>,
}

/// A random input for `kind` (`n` makes keys unique) and what it decides.
pub fn draw(kind: Kind, n: u64, rng: &mut impl Rng) -> (Value, Expected) {
    let done = |attempts, variables| Expected {
        state: "COMPLETED",
        error: None,
        attempts,
        variables,
    };
    match kind {
        Kind::Retry => {
            let until: u32 = rng.random_range(1..=5);
            let input = json!({"do": "fail", "until": until, "class": "transient"});
            if until <= 4 {
                let out = vec![("/out/attempt", json!(until))];
                (input, done(vec![("work", until)], out))
            } else {
                let failed = Expected {
                    state: "FAILED",
                    error: Some("SUTRA.RUNTIME.RETRY.EXHAUSTED"),
                    attempts: vec![("work", 4)],
                    variables: vec![],
                };
                (input, failed)
            }
        }
        Kind::Timer => (
            json!({"do": "echo", "n": n}),
            done(vec![("work", 1)], vec![("/out/n", json!(n))]),
        ),
        Kind::Long => {
            let ms: u64 = rng.random_range(200..=900);
            (
                json!({"do": "sleep", "ms": ms}),
                done(vec![("work", 1)], vec![("/out/slept", json!(ms))]),
            )
        }
        Kind::Message => (
            json!({"do": "echo", "key": format!("k{n}")}),
            done(vec![("work", 1)], vec![("/got", json!(n))]),
        ),
        Kind::Business => {
            let recovery = json!({"do": "emit", "output": {"released": n}});
            if rng.random_bool(0.5) {
                let input = json!({"do": "business", "code": "DECLINED", "recovery": recovery});
                let vars = vec![("/recovered/released", json!(n))];
                (input, done(vec![("charge", 1), ("recover", 1)], vars))
            } else {
                let input = json!({"do": "echo", "recovery": recovery});
                (input, done(vec![("charge", 1)], vec![]))
            }
        }
        Kind::Channel => (
            json!({"n": n}),
            done(vec![("call", 1)], vec![("/answered", json!(n))]),
        ),
        Kind::Compensation => {
            // ship: first time, after one retry, or never (3 attempts, then the unwind).
            let until: u32 = [1, 2, 9][rng.random_range(0..3)];
            let input = json!({"do": "echo", "by-task": {"ship": {"do": "fail", "until": until}}});
            if until <= 3 {
                let attempts = vec![("reserve", 1), ("capture", 1), ("ship", until)];
                (input, done(attempts, vec![]))
            } else {
                let compensated = Expected {
                    state: "COMPENSATED",
                    error: None,
                    attempts: vec![
                        ("reserve", 1),
                        ("capture", 1),
                        ("ship", 3),
                        ("refund", 1),
                        ("release", 1),
                    ],
                    variables: vec![],
                };
                (input, compensated)
            }
        }
        Kind::States => {
            // Each line: reserved first time, after one or two retries, or backordered.
            let lines: Vec<u32> = (0..rng.random_range(1..=3))
                .map(|_| [1, 2, 3, 9][rng.random_range(0..4)])
                .collect();
            let input = json!({
                "lines": lines.iter().map(|u| json!({"do": "fail", "code": "BUSY", "until": u})).collect::<Vec<_>>()
            });
            let reserved: Vec<Value> = lines
                .iter()
                .map(|&u| {
                    if u <= 3 {
                        json!({"attempt": u})
                    } else {
                        json!({"backordered": true})
                    }
                })
                .collect();
            let vars = vec![
                ("/reserved", Value::Array(reserved)),
                ("/approval/by", json!(n)),
            ];
            let attempts = lines.iter().map(|&u| ("Reserve", u.min(3))).collect();
            (input, done(attempts, vars))
        }
        Kind::Multi => {
            // Each item succeeds at its attempt 1, 2 or 3.
            let lines: Vec<u32> = (0..rng.random_range(1..=4))
                .map(|_| rng.random_range(1..=3))
                .collect();
            let input = json!({
                "lines": lines.iter().map(|u| json!({"do": "fail", "until": u, "class": "transient"})).collect::<Vec<_>>()
            });
            let results = json!(lines);
            let attempts = lines.iter().map(|&u| ("work", u)).collect();
            (input, done(attempts, vec![("/results", results)]))
        }
        Kind::Call => {
            let until: u32 = rng.random_range(1..=3);
            let input = json!({
                "do": "echo",
                "order": {"do": "fail", "until": until, "class": "transient"}
            });
            let vars = vec![("/child/out/attempt", json!(until))];
            (input, done(vec![("call", 1), ("after", 1)], vars))
        }
        Kind::Signal => (
            json!({"do": "echo", "n": n}),
            done(
                vec![("work", 1)],
                vec![("/ticked", json!(true)), ("/out/n", json!(n))],
            ),
        ),
        Kind::BpmnCompensation => {
            let ledger = json!({"n": n});
            if rng.random_bool(0.5) {
                let input = json!({"do": "echo", "ledger": ledger, "ship": {"do": "business", "code": "NOSHIP"}});
                let attempts = vec![
                    ("book", 1),
                    ("charge", 1),
                    ("ship", 1),
                    ("refund", 1),
                    ("unbook", 1),
                ];
                (input, done(attempts, vec![]))
            } else {
                let input = json!({"do": "echo", "ledger": ledger, "ship": {"do": "echo"}});
                (
                    input,
                    done(vec![("book", 1), ("charge", 1), ("ship", 1)], vec![]),
                )
            }
        }
        Kind::Ledger => {
            let until: u32 = rng.random_range(1..=3);
            (
                json!({"n": n, "until": until}),
                done(vec![("Call", until)], vec![("/out/attempt", json!(until))]),
            )
        }
    }
}

/// Whether a [`Kind::BpmnCompensation`] input asks for the unwind.
pub fn compensates(input: &Value) -> bool {
    input["ship"]["do"] == "business"
}
