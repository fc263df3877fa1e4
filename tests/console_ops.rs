//! The console as an operator's tool (issue 35; issue 30's calls), in a real
//! headless Chromium against a spawned `sutra serve`: the Incidents page
//! across instances, the sign-in that names the tenant and loads nothing
//! that fails, badges that show their date, their whole text and a tooltip
//! without covering labels or each other, times in UTC or local time, the
//! deployment's version, actions offered only for what an instance waits
//! for, large variables folded, and an attempt's outbound calls.
//!
//! Without chromium and chromedriver these print "skipped" unless
//! `SUTRA_REQUIRE_BROWSER` is set (`.ci/run` installs both and sets it).

mod common;
#[path = "common/console_kit.rs"]
mod kit;
#[path = "common/server.rs"]
mod server;
#[path = "common/webdriver.rs"]
mod webdriver;

use kit::*;
use reqwest::{Method, StatusCode};
use serde_json::{json, Value};
use server::Server;
use webdriver::Browser;

/// start → "Wait a day" (a timer of 25 h) → end.
fn waits_a_day(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait" name="Wait a day"><bpmn:timerEventDefinition><bpmn:timeDuration>PT25H</bpmn:timeDuration></bpmn:timerEventDefinition></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// The page's resources (fetches included) that answered 400 or more.
async fn failed_loads(b: &Browser) -> Value {
    b.js(
        "return performance.getEntriesByType('resource').filter(e => e.responseStatus >= 400).map(e => `${e.responseStatus} ${e.name}`);",
        json!([]),
    )
    .await
}

/// Whether the boxes of two elements (CSS selectors) overlap on screen.
async fn overlap(b: &Browser, a: &str, c: &str) -> bool {
    let v = b
        .js(
            "const [a, c] = [...arguments].map(s => document.querySelector(s).getBoundingClientRect()); \
             return a.left < c.right && c.left < a.right && a.top < c.bottom && c.top < a.bottom;",
            json!([a, c]),
        )
        .await;
    v.as_bool().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_are_triaged_across_instances_and_resolved_from_their_page() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    api.pull_channel("reviews").await;
    deploy(&api, &channel_call("review"), &[]).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        let (status, started) = api.start("review", json!({"doc": 1})).await;
        assert_eq!(status, StatusCode::CREATED, "{started}");
        ids.push(started["instance"].as_str().unwrap().to_string());
    }
    // A worker fails each external task until its retries are spent; two
    // with one message, the third with another.
    let fetch =
        json!({"workerId": "w1", "channels": ["reviews"], "maxTasks": 1, "lockDuration": 60000});
    let mut failed = 0;
    loop {
        let (status, body) = api
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let Some(task) = body["tasks"][0]["id"].as_str() else {
            break;
        };
        let message = if body["tasks"][0]["instance"] == ids[2].as_str() {
            "printer jammed"
        } else {
            "scanner offline"
        };
        let (status, body) = api
            .post(
                &format!("/v1/external-tasks/{task}/failure"),
                json!({"workerId": "w1", "errorMessage": message}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        failed += 1;
        assert!(failed < 100, "the retries never ran out");
    }
    let (_, listed) = api.get("/v1/incidents?state=OPEN").await;
    assert_eq!(listed["incidents"].as_array().unwrap().len(), 3, "{listed}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.click("#nav a[href=\"#/incidents\"]").await;
    b.wait_css("#incident-groups-table").await;
    let groups = b
        .js(
            "return [...document.querySelectorAll('#incident-groups-table tbody tr')].map(r => [r.cells[0].textContent, r.cells[1].textContent, r.cells[5].textContent]);",
            json!([]),
        )
        .await;
    assert_eq!(
        groups,
        json!([
            ["review", "2", "scanner offline"],
            ["review", "1", "printer jammed"]
        ]),
        "grouped by message, the biggest group first"
    );
    let rows = b
        .js(
            "return document.querySelectorAll('#incidents-table tbody tr[data-state=\"OPEN\"]').length;",
            json!([]),
        )
        .await;
    assert_eq!(rows, json!(3));
    b.screenshot(&screenshots().join("incidents.png")).await;

    // Resolve one from the page: it asks, then the list holds two open.
    let first = format!(
        "#incidents-table tr[data-instance=\"{}\"] button.resolve",
        ids[0]
    );
    b.click(&first).await;
    b.wait_css("dialog#confirm[open]").await;
    b.click("#confirm-ok").await;
    b.wait_css("#resolve-outcome").await;
    b.wait_for(
        "the resolved incident to leave the open list",
        "document.querySelectorAll('#incidents-table tbody tr[data-state=\"OPEN\"]').length === 2",
        json!(null),
    )
    .await;
    // The filter is in the URL: a reload keeps it.
    b.goto(&format!("{}/ui/#/incidents?state=any", srv.url))
        .await;
    b.wait_for(
        "every incident, resolved too",
        "document.querySelectorAll('#incidents-table tbody tr').length === 3 \
         && document.querySelector('#incident-state').value === 'any' \
         && document.querySelectorAll('#incidents-table tr[data-state=\"RESOLVED\"]').length === 1",
        json!(null),
    )
    .await;
    assert_eq!(failed_loads(&b).await, json!([]));
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn badges_show_their_date_and_whole_text_without_covering_labels_or_each_other() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &waits_a_day("daily"), &[]).await;
    let (_, waiting) = api.start("daily", json!({})).await;
    assert_eq!(waiting["state"], "WAITING", "{waiting}");
    let wid = waiting["instance"].as_str().unwrap().to_string();
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let code = "PAYMENT.DECLINED_BY_THE_ISSUING_BANK_FOR_INSUFFICIENT_FUNDS";
    let (_, failed) = api
        .start(
            "order",
            json!({"do": "fail", "code": code, "message": "card 4242 declined"}),
        )
        .await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let fid = failed["instance"].as_str().unwrap().to_string();
    let (status, icon) = server::Api {
        token: None,
        ..api.clone()
    }
    .get("/ui/favicon.svg")
    .await;
    assert_eq!(status, StatusCode::OK, "{icon}");

    // The sign-in names the tenant and loads nothing that fails (no 403 probe).
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    assert_eq!(b.text("#who").await, "tenant acme");
    assert_eq!(failed_loads(&b).await, json!([]));

    // A timer due tomorrow says its date; nothing to send it.
    b.goto(&format!("{}/ui/#/instances/{wid}", srv.url)).await;
    b.wait_css(".overlay.wait[data-node=\"wait\"]").await;
    assert_eq!(
        b.text(".overlay.wait").await,
        "timer at 2030-01-02 01:00:00 UTC"
    );
    b.wait_css("#diagram .djs-element[data-element-id=\"wait_label\"]")
        .await;
    assert!(
        !overlap(
            &b,
            ".overlay.wait",
            "#diagram .djs-element[data-element-id=\"wait_label\"]"
        )
        .await,
        "the badge covers the event's label"
    );
    let offered = b
        .js(
            "return [!!document.querySelector('#send-message'), !!document.querySelector('#send-event'), !!document.querySelector('#cancel')];",
            json!([]),
        )
        .await;
    assert_eq!(
        offered,
        json!([false, false, true]),
        "only what it waits for"
    );
    assert_eq!(b.text("#instance-version").await, "v1");
    b.screenshot(&screenshots().join("badge-timer.png")).await;

    // A failed task: the count and the whole code, apart, each with a tooltip.
    b.goto(&format!("{}/ui/#/instances/{fid}", srv.url)).await;
    b.wait_css(".overlay.failed-code[data-node=\"T\"]").await;
    assert_eq!(b.text(".overlay.failed-code").await, code);
    assert!(!overlap(&b, ".overlay.failed-code", ".overlay.attempts").await);
    let shown = b
        .js(
            "const e = document.querySelector('.overlay.failed-code'); \
             return [e.scrollWidth <= e.clientWidth, e.title, getComputedStyle(e).pointerEvents];",
            json!([]),
        )
        .await;
    assert_eq!(
        shown,
        json!([true, format!("{code}: card 4242 declined"), "auto"]),
        "not cut, a tooltip, hoverable"
    );
    // Names, not ids: the attempts table says the task's name (its id as a tooltip).
    let task = b
        .js(
            "const e = document.querySelector('#attempts-table tbody tr td .node-name'); return [e.textContent, e.title];",
            json!([]),
        )
        .await;
    assert_eq!(task, json!(["Reserve stock", "T"]));
    b.screenshot(&screenshots().join("badge-failed.png")).await;

    // Nothing is clipped: every shape and badge lies inside the canvas,
    // also after the box shrinks (it refits itself); the zoom buttons zoom.
    const INSIDE: &str = "const box = document.querySelector('#diagram').getBoundingClientRect(); \
        return [...document.querySelectorAll('#diagram .djs-element.djs-shape, #diagram .overlay')].every(e => { \
          const r = e.getBoundingClientRect(); \
          return r.left >= box.left && r.right <= box.right && r.top >= box.top && r.bottom <= box.bottom; });";
    assert_eq!(b.js(INSIDE, json!([])).await, json!(true), "clipped");
    b.js(
        "document.querySelector('#diagram').style.height = '160px'; return true;",
        json!([]),
    )
    .await;
    b.wait_for(
        "the diagram to refit its smaller box",
        &format!(
            "document.querySelector('#diagram').getBoundingClientRect().height < 200 && (() => {{ {INSIDE} }})()"
        ),
        json!(null),
    )
    .await;
    const SCALE: &str =
        "const t = document.querySelector('#diagram .viewport').transform.baseVal.consolidate(); \
        return t ? t.matrix.a : 1;";
    let before = b.js(SCALE, json!([])).await.as_f64().unwrap();
    b.click("#diagram .zoom-in").await;
    let after = b.js(SCALE, json!([])).await.as_f64().unwrap();
    assert!(after > before * 1.2, "zoom in: {before} -> {after}");
    b.click("#diagram .zoom-fit").await;
    assert_eq!(b.js(INSIDE, json!([])).await, json!(true), "fit again");

    // Times in the browser's zone on request, with the offset said.
    let utc = b.text("#instance-head .meta").await;
    assert!(utc.contains(" UTC"), "{utc}");
    b.click("#time-mode").await;
    b.wait_for(
        "local times",
        "document.querySelector('#time-mode').textContent === 'Times: local' \
         && /UTC[+-]\\d\\d:\\d\\d/.test(document.querySelector('#instance-head .meta').textContent)",
        json!(null),
    )
    .await;
    b.click("#time-mode").await;
    b.wait_for(
        "UTC again",
        "document.querySelector('#time-mode').textContent === 'Times: UTC'",
        json!(null),
    )
    .await;
    assert_eq!(failed_loads(&b).await, json!([]));
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_variable_is_folded_not_drawn_in_full() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &waits_a_day("daily"), &[]).await;
    let big = "x".repeat(400_000);
    let many: Vec<u64> = (0..500).collect();
    let (_, started) = api
        .start("daily", json!({"big": big, "many": many, "small": "ok"}))
        .await;
    let id = started["instance"].as_str().unwrap().to_string();
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#variables .json-long").await;
    let drawn = b
        .js(
            "const long = document.querySelector('#variables .json-long'); \
             const many = [...document.querySelectorAll('#variables details.json-node')].find(d => d.querySelector(':scope > summary .json-key')?.textContent === 'many'); \
             return [long.querySelector('summary').textContent.length < 400, long.querySelector('summary .json-count').textContent, \
                     many.open, many.querySelectorAll(':scope > .json-children > .json-leaf').length, many.querySelector('.json-more').textContent];",
            json!([]),
        )
        .await;
    assert_eq!(
        drawn,
        json!([
            true,
            "400000 characters",
            false,
            100,
            "show 100 more of 400"
        ])
    );
    b.click("#variables .json-more").await;
    let more = b
        .js(
            "return document.querySelectorAll('#variables .json-children .json-children > .json-leaf').length;",
            json!([]),
        )
        .await;
    assert_eq!(more, json!(200));
    no_csp_violations(&b).await;
}
/// An attempt's outbound calls (issue 30): a task with an egress grant
/// whose requests the default policy denies (loopback) lists each call on
/// the instance page, folded behind a count, with the denial's code.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_attempts_outbound_calls_are_listed_with_their_denials() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let (status, body) = api
        .call(
            Method::PUT,
            "/v1/egress/fetch",
            Some(json!({"allow": [{"host": "http://127.0.0.1:9"}]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let def = one_task("fetcher").replace("registered:chaos", "registered:fetch");
    let (status, body) = api
        .deploy(&def, &[("fetch", common::guest_bytes("fetch"))])
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (_, started) = api
        .start(
            "fetcher",
            json!({"requests": [{"url": "http://127.0.0.1:9/rates?day=1"}]}),
        )
        .await;
    let id = started["instance"].as_str().unwrap().to_string();
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    let row = "#attempts-table tr[data-task=\"T\"][data-attempt=\"1\"]";
    b.wait_css(&format!("{row} details.calls summary")).await;
    assert_eq!(
        b.text(&format!("{row} details.calls summary")).await,
        "1 call · 1 denied"
    );
    b.click(&format!("{row} details.calls summary")).await;
    let line = b
        .text(&format!("{row} details.calls[open] li.call.denied"))
        .await;
    assert!(
        line.starts_with("GET http://127.0.0.1:9/rates SUTRA.TASK.EGRESS_DENIED "),
        "no query, the code and the reason: {line}"
    );
    assert!(line.contains("127.0.0.1"), "{line}");
    b.screenshot(&screenshots().join("instance-attempt-calls.png"))
        .await;
    no_csp_violations(&b).await;
}

/// A deployment's timer start event: its schedule with its next fire, and
/// the journal once it fired (issue 35 item 8).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployment_shows_its_schedules_and_their_journal() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let def = format!(
        r#"{HEADER}
  <bpmn:process id="hourly" isExecutable="true">
    <bpmn:startEvent id="tick" name="Every hour"><bpmn:timerEventDefinition><bpmn:timeCycle>R3/PT1H</bpmn:timeCycle></bpmn:timerEventDefinition></bpmn:startEvent>
    <bpmn:sequenceFlow id="f1" sourceRef="tick" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    );
    let id = deploy(&api, &def, &[]).await;
    srv.advance("PT1H").await;
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let (_, s) = api.get(&format!("/v1/deployments/{id}/schedules")).await;
        if s["schedules"][0]["fires"].as_i64() == Some(1) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "never fired: {s}");
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/deployments/{id}", srv.url)).await;
    b.wait_css("#schedules tr[data-start=\"tick\"][data-state=\"ARMED\"]")
        .await;
    let row = b.text("#schedules tbody tr").await;
    assert!(
        row.contains("2030-01-01 02:00:00 UTC"),
        "the next fire: {row}"
    );
    assert_eq!(
        b.text("#schedule-journal summary").await,
        "Journal: 1 event(s)"
    );
    b.click("#schedule-journal summary").await;
    let fired = b.text("#schedule-journal tbody tr").await;
    assert!(fired.contains("fired"), "{fired}");
    b.screenshot(&screenshots().join("deployment-schedules.png"))
        .await;
    no_csp_violations(&b).await;
}

/// The instance list as a triage tool (issue 35 item 2): newest first by
/// default, what failed and where, open incidents, a sort control and a page
/// size, every choice and the page in the URL (Back and reload keep them),
/// and a list that refreshes itself.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_list_triages_newest_first_and_keeps_its_state_in_the_url() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let mut ids = Vec::new();
    for n in 0..11 {
        let input = if n % 3 == 0 {
            json!({"do": "fail", "code": "STOCK.EMPTY"})
        } else {
            json!({"do": "echo"})
        };
        let (_, started) = api.start("order", input).await;
        ids.push(started["instance"].as_str().unwrap().to_string());
        // Ids begin with their start instant: one virtual millisecond apart.
        srv.advance("PT0.001S").await;
    }
    api.pull_channel("reviews").await;
    deploy(&api, &channel_call("review"), &[]).await;
    let (_, waiting) = api.start("review", json!({})).await;
    let review = waiting["instance"].as_str().unwrap().to_string();
    let fetch =
        json!({"workerId": "w1", "channels": ["reviews"], "maxTasks": 1, "lockDuration": 60000});
    loop {
        let (_, body) = api
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        let Some(task) = body["tasks"][0]["id"].as_str() else {
            break;
        };
        api.post(
            &format!("/v1/external-tasks/{task}/failure"),
            json!({"workerId": "w1", "errorMessage": "down"}),
        )
        .await;
    }

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.click("#nav a[href=\"#/instances\"]").await;
    b.wait_css("#instances").await;
    let rows = "[...document.querySelectorAll('#instances tbody tr')].map(r => r.dataset.instance)";
    let shown = b.js(&format!("return {rows};"), json!([])).await;
    let mut newest: Vec<String> = ids.clone();
    newest.push(review.clone());
    newest.reverse();
    assert_eq!(shown, json!(newest), "newest first");
    let cells = b
        .js(
            "return [...document.querySelector(`#instances tr[data-instance=\"${arguments[0]}\"]`).cells].map(c => c.textContent);",
            json!([ids[9]]),
        )
        .await;
    assert_eq!(cells[5], "SUTRA.RUNTIME.TASK_FAILEDcause STOCK.EMPTY");
    // The failed node by its name (its id `T` is the tooltip).
    assert_eq!(cells[6], "Reserve stock");
    assert_eq!(
        b.text(&format!(
            "#instances tr[data-instance=\"{review}\"] .incidents"
        ))
        .await,
        "1 open"
    );
    // Oldest first, 10 a page: in the URL, kept by a reload; the next page and Back.
    b.js(
        "const s = document.querySelector('#sort-order'); s.value = 'oldest'; s.dispatchEvent(new Event('change')); return true;",
        json!([]),
    )
    .await;
    b.wait_for(
        "oldest first",
        &format!("location.hash.includes('order=oldest') && document.querySelector('#instances tbody tr').dataset.instance === '{}'", ids[0]),
        json!(null),
    )
    .await;
    b.js(
        "const s = document.querySelector('#page-size'); s.value = '10'; s.dispatchEvent(new Event('change')); return true;",
        json!([]),
    )
    .await;
    b.wait_for(
        "ten a page",
        "location.hash.includes('limit=10') && document.querySelectorAll('#instances tbody tr').length === 10",
        json!(null),
    )
    .await;
    b.click("#next-page").await;
    b.wait_for(
        "the second page",
        &format!("location.hash.includes('after=') && document.querySelectorAll('#instances tbody tr').length === 2 && document.querySelector('#instances tbody tr').dataset.instance === '{}'", ids[10]),
        json!(null),
    )
    .await;
    b.js("history.back(); return true;", json!([])).await;
    b.wait_for(
        "Back to the first page",
        "!location.hash.includes('after=') && document.querySelectorAll('#instances tbody tr').length === 10",
        json!(null),
    )
    .await;
    let url = b.js("return location.href;", json!([])).await;
    b.goto(url.as_str().unwrap()).await;
    b.wait_for(
        "a reload keeps the choices",
        "document.querySelector('#sort-order')?.value === 'oldest' && document.querySelector('#page-size')?.value === '10'",
        json!(null),
    )
    .await;
    // A new instance shows up by itself (newest first).
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#instances").await;
    srv.advance("PT0.001S").await;
    let (_, late) = api.start("order", json!({"do": "echo"})).await;
    let late = late["instance"].as_str().unwrap().to_string();
    b.wait_for(
        "the list to refresh itself",
        &format!("document.querySelector('#instances tbody tr')?.dataset.instance === '{late}'"),
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("instances-triage.png"))
        .await;
    no_csp_violations(&b).await;
}

/// Fix the data, then retry (issue 35 item 6): a FAILED instance's
/// variables are edited from its page (who edits is kept in its history),
/// and a retry from the failure runs on them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_instances_variables_are_edited_then_retried_from_the_page() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let (_, failed) = api
        .start(
            "order",
            json!({"do": "fail", "code": "BAD.DATA", "stale": true}),
        )
        .await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let id = failed["instance"].as_str().unwrap().to_string();
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.click("#edit-variables").await;
    b.wait_css("dialog#confirm[open] #variables-json").await;
    let shown = b
        .js(
            "return JSON.parse(document.querySelector('#variables-json').value);",
            json!([]),
        )
        .await;
    assert_eq!(
        shown,
        json!({"do": "fail", "code": "BAD.DATA", "stale": true})
    );
    b.js(
        "document.querySelector('#variables-json').value = JSON.stringify({do: 'echo', code: 'BAD.DATA'}); return true;",
        json!([]),
    )
    .await;
    b.type_into("#variables-by", "alice").await;
    b.click("#confirm-ok").await;
    b.wait_for(
        "the edited variables",
        "[...document.querySelectorAll('#variables .json-string')].some(e => e.textContent === '\"echo\"') \
         && ![...document.querySelectorAll('#variables .json-key')].some(e => e.textContent === 'stale') \
         && [...document.querySelectorAll('#history-table td')].some(td => td.textContent === 'variables_edited')",
        json!(null),
    )
    .await;
    let (_, history) = api.get(&format!("/v1/instances/{id}/history")).await;
    assert!(
        history.to_string().contains("\"by\":\"alice\""),
        "{history}"
    );
    b.click("#retry-from-failure").await;
    b.click("#confirm-ok").await;
    b.wait_for(
        "the retry to complete on the fixed data",
        &format!("location.hash !== '#/instances/{id}' && document.querySelector('.page[data-state=\"COMPLETED\"]')"),
        json!(null),
    )
    .await;
    // The failed one links to its retry; the list counts it as retried.
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#retried-by a").await;
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#counts a[data-state=\"FAILED\"] .retried")
        .await;
    assert_eq!(
        b.text("#counts a[data-state=\"FAILED\"] .retried").await,
        " (1 retried)"
    );
    no_csp_violations(&b).await;
}

/// A deployment's diagram carries its per-node figures (issue 35 item 2):
/// instances completed, failed and active at each node.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deployments_diagram_shows_its_per_node_statistics() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let id = deploy(&api, &one_task("order"), &["chaos"]).await;
    for input in [
        json!({"do": "echo"}),
        json!({"do": "echo"}),
        json!({"do": "fail"}),
    ] {
        api.start("order", input).await;
    }
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/deployments/{id}", srv.url)).await;
    b.wait_css(".overlay.stat-completed[data-node=\"T\"]").await;
    assert_eq!(
        b.text(".overlay.stat-completed[data-node=\"T\"]").await,
        "2 done"
    );
    assert_eq!(
        b.text(".overlay.stat-failed[data-node=\"T\"]").await,
        "1 failed"
    );
    assert_eq!(
        b.text(".overlay.stat-completed[data-node=\"end\"]").await,
        "2 done"
    );
    assert!(
        !overlap(
            &b,
            ".overlay.stat-completed[data-node=\"T\"]",
            ".overlay.stat-failed[data-node=\"T\"]"
        )
        .await
    );
    b.screenshot(&screenshots().join("deployment-statistics.png"))
        .await;
    no_csp_violations(&b).await;
}

/// An instance's timeline (issue 35 item 5): its attempts as bars on one
/// time axis, the backoffs between them, and what it waits for now.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instances_timeline_shows_attempts_backoffs_and_the_next_due() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let def = one_task("order").replace(
        r#"implementation="registered:chaos"/>"#,
        r#"implementation="registered:chaos"><bpmn:extensionElements><q:retry maxAttempts="4" initialDelay="PT10S"/></bpmn:extensionElements></bpmn:serviceTask>"#,
    );
    deploy(&api, &def, &["chaos"]).await;
    let (_, started) = api
        .start("order", json!({"do": "fail", "class": "transient"}))
        .await;
    let id = started["instance"].as_str().unwrap().to_string();
    // The first retry runs (after 10 s); the second waits.
    {
        srv.advance("PT15S").await;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        loop {
            let (_, a) = api.get(&format!("/v1/instances/{id}/attempts")).await;
            let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
            let waiting = v["waits"]
                .as_array()
                .is_some_and(|w| w.iter().any(|w| w["kind"] == "retry"));
            if a["attempts"].as_array().unwrap().len() >= 2 && waiting {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "{a}");
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        }
    }
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#timeline-svg rect.attempt").await;
    let drawn = b
        .js(
            "const svg = document.querySelector('#timeline-svg'); \
             const bars = [...svg.querySelectorAll('rect.attempt')]; \
             const xs = bars.map(r => Number(r.getAttribute('x'))); \
             return [bars.length, svg.querySelectorAll('line.backoff').length, svg.querySelectorAll('circle.due[data-kind=\"retry\"]').length, \
                     xs.every((x, i) => i === 0 || x > xs[i - 1]), bars.every(r => r.classList.contains('outcome-failed')), \
                     svg.querySelector('text.task').textContent];",
            json!([]),
        )
        .await;
    let attempts = api.get(&format!("/v1/instances/{id}/attempts")).await.1["attempts"]
        .as_array()
        .unwrap()
        .len();
    assert_eq!(
        drawn,
        json!([attempts, attempts - 1, 1, true, true, "Reserve stock"]),
        "a bar per attempt in time order, a backoff between each two, the next retry's due"
    );
    b.js(
        "document.querySelector('#timeline').scrollIntoView(); return true;",
        json!([]),
    )
    .await;
    b.screenshot(&screenshots().join("instance-timeline.png"))
        .await;
    no_csp_violations(&b).await;
}

/// Search by business data (issue 35 item 3): the list shows each
/// instance's business key, and finds instances by it and by a variable's
/// value; both filters are in the URL, so a reload keeps them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_list_finds_instances_by_business_key_and_variable() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let mut ids = Vec::new();
    for (key, customer) in [("PO-1", "ada"), ("PO-2", "bob"), ("PO-3", "ada")] {
        let (status, started) = api
            .post(
                "/v1/processes/order/instances",
                json!({"variables": {"do": "echo", "customer": customer}, "businessKey": key}),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{started}");
        ids.push(started["instance"].as_str().unwrap().to_string());
        srv.advance("PT0.001S").await;
    }
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    // Signed in (the key is kept) before the page is loaded anew.
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#instances").await;
    let key_of = "return document.querySelector(`#instances tr[data-instance=\"${arguments[0]}\"]`).cells[3].textContent;";
    assert_eq!(b.js(key_of, json!([ids[1]])).await, "PO-2");

    let rows = "[...document.querySelectorAll('#instances tbody tr')].map(r => r.dataset.instance)";
    b.type_into("#filter-key", "PO-2").await;
    b.click("#filters button[type=submit]").await;
    b.wait_for(
        "the business key's instance alone",
        &format!("location.hash.includes('key=PO-2') && JSON.stringify({rows}) === JSON.stringify([arguments[0]])"),
        json!(ids[1]),
    )
    .await;
    b.clear("#filter-key").await;
    b.type_into("#filter-var", "customer=ada").await;
    b.click("#filters button[type=submit]").await;
    b.wait_for(
        "the variable's instances, newest first",
        &format!("location.hash.includes('var=customer') && JSON.stringify({rows}) === JSON.stringify(arguments[0])"),
        json!([ids[2], ids[0]]),
    )
    .await;
    let url = b.js("return location.href;", json!([])).await;
    b.goto(url.as_str().unwrap()).await;
    b.wait_for(
        "a reload keeps the variable filter",
        &format!("document.querySelector('#filter-var')?.value === 'customer=ada' && JSON.stringify({rows}) === JSON.stringify(arguments[0])"),
        json!([ids[2], ids[0]]),
    )
    .await;
    b.screenshot(&screenshots().join("instances-search.png"))
        .await;
    no_csp_violations(&b).await;
}

/// Bulk actions (issue 35 item 4): instances ticked in the list are retried
/// as one batch on the server; its page shows each one's outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_instances_are_retried_as_one_batch_whose_page_shows_each_outcome() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let mut failed = Vec::new();
    for _ in 0..3 {
        let (_, v) = api
            .start("order", json!({"do": "fail", "code": "STOCK.EMPTY"}))
            .await;
        failed.push(v["instance"].as_str().unwrap().to_string());
        srv.advance("PT0.001S").await;
    }
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    // Signed in (the key is kept) before the page is loaded anew.
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#instances").await;
    for id in &failed[..2] {
        b.click(&format!("#instances input.pick[data-instance=\"{id}\"]"))
            .await;
    }
    assert_eq!(b.text("#picked-count").await, "2 ticked");
    b.click("#retry-picked").await;
    b.wait_css("#confirm[open]").await;
    assert!(b
        .text("#confirm-title")
        .await
        .contains("2 ticked instance(s)"));
    b.click("#confirm-ok").await;
    b.wait_for(
        "the batch's page, done",
        "location.hash.startsWith('#/batches/') && document.querySelector('#batch-head .badge')?.textContent === 'COMPLETED'",
        json!(null),
    )
    .await;
    let outcomes = b
        .js(
            "return [...document.querySelectorAll('#batch-item-list tbody tr')].map(r => [r.cells[1].textContent, r.cells[2].textContent]);",
            json!([]),
        )
        .await;
    assert_eq!(
        outcomes,
        json!([[failed[0], "SUCCEEDED"], [failed[1], "SUCCEEDED"]])
    );
    assert_eq!(b.text("#batch-head [data-outcome=SUCCEEDED] .n").await, "2");
    // The third was not ticked: not retried.
    let (_, third) = api.get(&format!("/v1/instances/{}", failed[2])).await;
    assert!(third.get("retriedBy").is_none(), "{third}");
    b.click("#nav a[href=\"#/batches\"]").await;
    b.wait_css("#batches").await;
    assert!(b.text("#batches tbody tr").await.contains("retry"));
    b.screenshot(&screenshots().join("batch-retry.png")).await;
    no_csp_violations(&b).await;
}

/// Connections (issue 31 item 2): the console lists the tenant's
/// connections with their endpoint and how they authorize, never the
/// credential, and deletes one after a confirmation.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_connections_page_shows_each_connection_but_never_its_credential() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start_with(&[(
        "SUTRA_SECRET_KEY",
        "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff",
    )])
    .await;
    let api = srv.tenant("acme", json!({})).await;
    for (name, auth, secret) in [
        (
            "crm",
            json!({"type": "api_key", "header": "x-api-key"}),
            "k-SECRET-1",
        ),
        (
            "billing",
            json!({"type": "oauth2_client_credentials", "token_url": "https://id.example.com/token", "client_id": "sutra", "scope": "charge"}),
            "cs-SECRET-2",
        ),
    ] {
        let (status, body) = api
            .call(
                Method::PUT,
                &format!("/v1/connections/{name}"),
                Some(json!({"endpoint": "https://api.example.com/v1", "authorization": auth, "credential": secret})),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.click("#nav a[href=\"#/connections\"]").await;
    b.wait_css("#connections").await;
    let crm = b.text("#connections tr[data-connection=crm]").await;
    assert!(crm.contains("https://api.example.com/v1"), "{crm}");
    assert!(crm.contains("API key in header x-api-key"), "{crm}");
    let billing = b.text("#connections tr[data-connection=billing]").await;
    assert!(
        billing.contains("OAuth 2 client sutra from https://id.example.com/token scope charge"),
        "{billing}"
    );
    let page = b.text("#main").await;
    assert!(
        !page.contains("SECRET"),
        "a credential is never shown: {page}"
    );
    b.click("#connections tr[data-connection=crm] .delete-connection")
        .await;
    b.wait_css("dialog#confirm[open]").await;
    b.click("#confirm-ok").await;
    b.wait_for(
        "the deleted connection to go",
        "!document.querySelector('#connections tr[data-connection=crm]') && !!document.querySelector('#connections tr[data-connection=billing]')",
        json!(null),
    )
    .await;
    let (status, _) = api.get("/v1/connections/crm").await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    b.screenshot(&screenshots().join("connections.png")).await;
    no_csp_violations(&b).await;
}

/// BPMN events in the console (issue 32): a running event sub-process is
/// drawn running with what it waits for, and the compensation handlers
/// that ran are listed in the order they ran (newest completion first), the
/// compensated activities drawn compensated.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_event_sub_process_and_the_compensation_that_ran_are_shown() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let nudged = format!(
        r#"{HEADER}
  <bpmn:message id="Nudge" name="nudge"/>
  <bpmn:message id="Never" name="never"/>
  <bpmn:message id="Reply" name="reply"/>
  <bpmn:process id="nudged" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="wait"/>
    <bpmn:intermediateCatchEvent id="wait" name="Wait for ever"><bpmn:messageEventDefinition messageRef="Never"/></bpmn:intermediateCatchEvent>
    <bpmn:sequenceFlow id="f2" sourceRef="wait" targetRef="end"/>
    <bpmn:endEvent id="end"/>
    <bpmn:subProcess id="OnNudge" name="On a nudge" triggeredByEvent="true">
      <bpmn:startEvent id="OnNudge_start" isInterrupting="false"><bpmn:messageEventDefinition messageRef="Nudge"/></bpmn:startEvent>
      <bpmn:sequenceFlow id="n1" sourceRef="OnNudge_start" targetRef="await"/>
      <bpmn:intermediateCatchEvent id="await" name="Await the reply"><bpmn:messageEventDefinition messageRef="Reply"/></bpmn:intermediateCatchEvent>
      <bpmn:sequenceFlow id="n2" sourceRef="await" targetRef="OnNudge_end"/>
      <bpmn:endEvent id="OnNudge_end"/>
    </bpmn:subProcess>
  </bpmn:process>
</bpmn:definitions>"#
    );
    deploy(&api, &nudged, &[]).await;
    let (_, started) = api.start("nudged", json!({})).await;
    let nudged_id = started["instance"].as_str().unwrap().to_string();
    let (status, answer) = api
        .post("/v1/messages", json!({"name": "nudge", "variables": {}}))
        .await;
    assert_eq!(status, StatusCode::OK, "{answer}");

    let compensating = format!(
        r#"{HEADER}
  <bpmn:process id="undo" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Book"/>
    <bpmn:serviceTask id="Book" name="Book hotel" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="cBook" attachedToRef="Book"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
    <bpmn:serviceTask id="UndoBook" name="Cancel hotel" isForCompensation="true" implementation="registered:chaos"/>
    <bpmn:association id="aBook" associationDirection="One" sourceRef="cBook" targetRef="UndoBook"/>
    <bpmn:sequenceFlow id="f2" sourceRef="Book" targetRef="Fly"/>
    <bpmn:serviceTask id="Fly" name="Book flight" implementation="registered:chaos"/>
    <bpmn:boundaryEvent id="cFly" attachedToRef="Fly"><bpmn:compensateEventDefinition/></bpmn:boundaryEvent>
    <bpmn:serviceTask id="UndoFly" name="Cancel flight" isForCompensation="true" implementation="registered:chaos"/>
    <bpmn:association id="aFly" associationDirection="One" sourceRef="cFly" targetRef="UndoFly"/>
    <bpmn:sequenceFlow id="f3" sourceRef="Fly" targetRef="end"/>
    <bpmn:endEvent id="end"><bpmn:compensateEventDefinition/></bpmn:endEvent>
  </bpmn:process>
</bpmn:definitions>"#
    );
    deploy(&api, &compensating, &["chaos"]).await;
    let (_, done) = api.start("undo", json!({"do": "echo"})).await;
    let undo_id = done["instance"].as_str().unwrap().to_string();

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{nudged_id}", srv.url))
        .await;
    diagram_has(&b, "OnNudge", "generated").await;
    b.wait_for(
        "the event sub-process drawn running, its catch waiting",
        "document.querySelector('#diagram .djs-element[data-element-id=\"OnNudge\"]')?.classList.contains('sutra-running') \
         && [...document.querySelectorAll('.overlay.wait')].some(o => o.dataset.node === 'await' && o.textContent.includes('message reply'))",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("event-sub-process.png"))
        .await;

    b.goto(&format!("{}/ui/#/instances/{undo_id}", srv.url))
        .await;
    b.wait_css("#attempts-table").await;
    let tasks = b
        .js(
            "return [...document.querySelectorAll('#attempts-table tbody tr')].map(r => r.cells[0].textContent);",
            json!([]),
        )
        .await;
    assert_eq!(
        tasks,
        json!(["Book hotel", "Book flight", "Cancel flight", "Cancel hotel"]),
        "the handlers in the order they ran"
    );
    b.wait_for(
        "the compensated activities drawn so",
        "['Book', 'Fly'].every(id => document.querySelector(`#diagram .djs-element[data-element-id=\"${id}\"]`)?.classList.contains('sutra-compensated'))",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("bpmn-compensation.png"))
        .await;
    no_csp_violations(&b).await;
}
