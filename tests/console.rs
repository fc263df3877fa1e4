//! The web console (`/ui/`) in a real headless Chromium, driven over
//! WebDriver against a spawned `sutra serve`: sign-in, the deployments page
//! and the diagrams of every dialect, a FAILED instance marked on its
//! diagram with its code and attempts, a retry from the page that
//! completes, a `<script>` variable shown as text, the tenants of the
//! admin key. Each page is saved as a PNG under `target/console-screenshots/`.
//!
//! The routes the console reads are also checked without a browser, on
//! SQLite and PostgreSQL.
//!
//! Without chromium and chromedriver the browser tests print "skipped"
//! unless `SUTRA_REQUIRE_BROWSER` is set (`.ci/run` installs both and sets it).

mod common;
#[path = "common/console_kit.rs"]
mod kit;
#[path = "common/server.rs"]
mod server;
#[path = "common/webdriver.rs"]
mod webdriver;

use reqwest::{Method, StatusCode};
use serde_json::json;
use server::{Db, Server, ADMIN_KEY};
use webdriver::Browser;

use kit::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_list_deployments_and_draw_every_dialect() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let bpmn = deploy(&api, &one_task("order"), &["chaos"]).await;
    let hx = deploy(
        &api,
        &file("examples/payment.hx.xml"),
        &[
            "pay.reserve",
            "pay.capture",
            "ship.book",
            "pay.refund",
            "pay.release",
        ],
    )
    .await;
    let asl = deploy(&api, &file("examples/order-lines.asl.json"), &["chaos"]).await;
    let drawn = deploy(
        &api,
        &file("tests/fixtures/bpmn/valid/miwg_A.1.0_executable.bpmn"),
        &["work"],
    )
    .await;

    // The console's answers carry the policy.
    let resp = reqwest::get(format!("{}/ui/", srv.url)).await.unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let csp = resp.headers()["content-security-policy"].to_str().unwrap();
    assert!(
        csp.contains("script-src 'self'") && !csp.contains("unsafe"),
        "{csp}"
    );

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments tr[data-process=\"order\"]").await;
    for p in ["payment", "order-lines", "WFP-6-"] {
        b.wait_css(&format!("#deployments tr[data-process=\"{p}\"]"))
            .await;
    }
    let key_in_url = b
        .js(
            "return location.href.includes(arguments[0]) || document.cookie.length > 0;",
            json!([api.token.as_deref().unwrap()]),
        )
        .await;
    assert_eq!(
        key_in_url,
        json!(false),
        "the key is never in a URL or a cookie"
    );
    b.screenshot(&screenshots().join("deployments.png")).await;

    // BPMN without DI: exported and laid out; the task shape is drawn.
    b.click(&format!("#deployments tr[data-deployment=\"{bpmn}\"] a"))
        .await;
    diagram_has(&b, "T", "generated").await;
    b.wait_css("#modules td code").await;
    let size = b.text("#modules tbody tr td:nth-child(3)").await;
    assert!(size.ends_with("KiB") || size.ends_with("MiB"), "{size}");
    b.screenshot(&screenshots().join("deployment-bpmn.png"))
        .await;

    // HX and the States language: the same renderer.
    b.goto(&format!("{}/ui/#/deployments/{hx}", srv.url)).await;
    for node in ["reserve", "capture", "ship", "refund", "release"] {
        diagram_has(&b, node, "generated").await;
    }
    b.screenshot(&screenshots().join("deployment-hx.png")).await;
    b.goto(&format!("{}/ui/#/deployments/{asl}", srv.url)).await;
    for node in ["ReserveLines", "Reserve", "CourierSlot", "Charge", "Done"] {
        diagram_has(&b, node, "generated").await;
    }
    b.screenshot(&screenshots().join("deployment-states.png"))
        .await;

    // BPMN with complete DI: drawn as its author drew it.
    b.goto(&format!("{}/ui/#/deployments/{drawn}", srv.url))
        .await;
    diagram_has(&b, "_ec59e164-68b4-4f94-98de-ffb1c58a84af", "original").await;
    b.screenshot(&screenshots().join("deployment-original-di.png"))
        .await;
    no_csp_violations(&b).await;

    // A waiting instance: its token is on the catch event, with what it waits for.
    deploy(&api, &waits_for_message("approval"), &[]).await;
    let (status, w) = api.start("approval", json!({})).await;
    assert_eq!(status, StatusCode::CREATED, "{w}");
    let wid = w["instance"].as_str().unwrap();
    b.goto(&format!("{}/ui/#/instances/{wid}", srv.url)).await;
    b.wait_css("#diagram .djs-element[data-element-id=\"wait\"].sutra-token")
        .await;
    let wait = b.text(".overlay.wait").await;
    assert_eq!(wait, "message go");
    b.wait_css("#send-message").await;
    b.screenshot(&screenshots().join("instance-waiting.png"))
        .await;
    // Send it the message from the page (the dialog is filled from the wait).
    b.click("#send-message").await;
    b.wait_css("dialog#confirm[open] #message-name").await;
    let name = b
        .js(
            "return document.querySelector('#message-name').value;",
            json!([]),
        )
        .await;
    assert_eq!(name, "go");
    b.click("#confirm-ok").await;
    b.wait_for(
        "the message to complete the instance",
        "document.querySelector('.page[data-state=\"COMPLETED\"]') \
         && document.querySelector('#diagram .djs-element[data-element-id=\"wait\"].sutra-succeeded')",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("instance-message-sent.png"))
        .await;

    // Live refresh: a waiting instance's page follows a change made elsewhere.
    let (_, w2) = api.start("approval", json!({})).await;
    let w2 = w2["instance"].as_str().unwrap();
    b.goto(&format!("{}/ui/#/instances/{w2}", srv.url)).await;
    b.wait_css(".page[data-state=\"WAITING\"] .live").await;
    let (status, body) = api
        .post(
            "/v1/messages",
            json!({"name": "go", "variables": {"by": "api"}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    b.wait_for(
        "the page to refresh itself to COMPLETED",
        "document.querySelector('.page[data-state=\"COMPLETED\"]') \
         && [...document.querySelectorAll('#variables .json-string')].some(e => e.textContent === '\"api\"')",
        json!(null),
    )
    .await;

    // The admin key shows the tenants.
    b.click("#signout").await;
    sign_in(&b, &srv, ADMIN_KEY).await;
    b.wait_css("#tenants tr[data-tenant=\"acme\"]").await;
    b.wait_for(
        "the tenant's key prefix",
        "document.querySelector('span.keys[data-tenant=\"acme\"] code')",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("tenants.png")).await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_instance_is_marked_and_retried_from_the_page() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    // A memory ceiling the task's allocation does not fit: the attempt fails
    // (no retry policy, so the instance fails); raising it makes a retry pass.
    let api = srv
        .tenant("acme", json!({"memoryBytes": 4 * 1024 * 1024}))
        .await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let hostile = "<img src=x onerror=\"window.__xss=1\"><script>window.__xss=2</script>";
    let (status, failed) = api
        .start(
            "order",
            json!({"do": "alloc", "bytes": 32 * 1024 * 1024, "note": hostile}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{failed}");
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let id = failed["instance"].as_str().unwrap().to_string();
    // The instance fails with the spent task's code; the attempt, with what ended it.
    let code = failed["error"]["code"].as_str().unwrap().to_string();
    let attempt_code = failed["attempts"][0]["code"].as_str().unwrap().to_string();
    assert_eq!(attempt_code, "SUTRA.TASK.MEMORY_LIMIT", "{failed}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;

    // The instances page: counts per state, the FAILED filter.
    b.goto(&format!("{}/ui/#/instances?state=FAILED", srv.url))
        .await;
    b.wait_css(&format!("#instances tr[data-instance=\"{id}\"]"))
        .await;
    assert_eq!(b.text("#counts a[data-state=\"FAILED\"] .n").await, "1");
    b.screenshot(&screenshots().join("instances.png")).await;

    // The failed task is red on the diagram, with its code and attempt count.
    b.click(&format!("#instances tr[data-instance=\"{id}\"] a"))
        .await;
    b.wait_css("#diagram .djs-element[data-element-id=\"T\"].sutra-failed")
        .await;
    assert_eq!(b.text(".overlay.failed-code").await, attempt_code);
    assert_eq!(b.text(".overlay.attempts").await, "×1");
    assert_eq!(b.text("#error-code").await, code);
    b.wait_css("#attempts-table tr[data-task=\"T\"][data-attempt=\"1\"][data-outcome=\"failed\"]")
        .await;
    let row = b.text("#attempts-table tbody tr").await;
    assert!(
        row.contains(&attempt_code) && row.contains("resource_exhausted"),
        "{row}"
    );

    // The hostile variable is text: shown verbatim, never parsed as markup.
    let shown = b
        .wait_for(
            "the note variable",
            "[...document.querySelectorAll('#variables .json-string')].map(e => e.textContent).find(t => t.includes('<script>'))",
            json!(null),
        )
        .await;
    assert_eq!(shown, json!(serde_json::to_string(hostile).unwrap()));
    let injected = b
        .js(
            "return [window.__xss === undefined, document.querySelectorAll('#main img, #main script').length];",
            json!([]),
        )
        .await;
    assert_eq!(
        injected,
        json!([true, 0]),
        "nothing from a variable ran or rendered"
    );
    b.screenshot(&screenshots().join("instance-failed.png"))
        .await;
    // A hostile state name is a label on the diagram, as text.
    let name = "<img src=x onerror=\"window.__xss=3\">";
    let flow = json!({"Name": "hostile", "StartAt": name, "States": {name: {"Type": "Pass", "End": true}}});
    let dep = deploy(&api, &flow.to_string(), &[]).await;
    b.goto(&format!("{}/ui/#/deployments/{dep}", srv.url)).await;
    b.wait_for(
        "the hostile label",
        "[...document.querySelectorAll('#diagram .djs-element text')].some(t => t.textContent.includes('onerror'))",
        json!(null),
    )
    .await;
    let injected = b
        .js(
            "return [window.__xss === undefined, document.querySelectorAll('#main img').length];",
            json!([]),
        )
        .await;
    assert_eq!(
        injected,
        json!([true, 0]),
        "nothing from a name ran or rendered"
    );
    b.screenshot(&screenshots().join("deployment-hostile-names.png"))
        .await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#diagram .djs-element[data-element-id=\"T\"].sutra-failed")
        .await;
    no_csp_violations(&b).await;

    // Raise the ceiling, then retry from the failure on the page.
    let (status, body) = srv
        .admin()
        .call(
            Method::PUT,
            "/v1/admin/tenants/acme/limits",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    b.click("#retry-from-failure").await;
    b.wait_css("dialog#confirm[open]").await;
    b.screenshot(&screenshots().join("instance-retry-confirm.png"))
        .await;
    b.click("#confirm-ok").await;
    let retried = b
        .wait_for(
            "the retried instance to complete",
            "location.hash !== `#/instances/${arg}` && document.querySelector('.page[data-state=\"COMPLETED\"]') \
             && document.querySelector('#diagram .djs-element[data-element-id=\"T\"].sutra-succeeded') \
             && document.querySelector('#instance-id').textContent",
            json!(id),
        )
        .await;
    let retried = retried.as_str().unwrap();
    assert_ne!(retried, id);
    let (_, view) = api.get(&format!("/v1/instances/{retried}")).await;
    assert_eq!(view["state"], "COMPLETED", "{view}");
    assert_eq!(view["retryOf"], id.as_str());
    b.screenshot(&screenshots().join("instance-retried.png"))
        .await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_instance_is_migrated_from_the_page() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv
        .tenant("acme", json!({"memoryBytes": 4 * 1024 * 1024}))
        .await;
    let v1 = deploy(&api, &one_task("order"), &["chaos"]).await;
    let (_, failed) = api
        .start("order", json!({"do": "alloc", "bytes": 32 * 1024 * 1024}))
        .await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let id = failed["instance"].as_str().unwrap();
    let v2 = deploy(
        &api,
        &one_task("order").replace("Reserve stock", "Reserve stock v2"),
        &["chaos"],
    )
    .await;
    let (status, body) = srv
        .admin()
        .call(
            Method::PUT,
            "/v1/admin/tenants/acme/limits",
            Some(json!({})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#diagram .djs-element[data-element-id=\"T\"].sutra-failed")
        .await;
    b.click("#migrate").await;
    b.wait_css("dialog#confirm[open] #migrate-target").await;
    let target = b
        .js(
            "return document.querySelector('#migrate-target').value;",
            json!([]),
        )
        .await;
    assert_eq!(
        target,
        json!(v2),
        "the other deployment of the process is offered"
    );
    b.screenshot(&screenshots().join("instance-migrate-confirm.png"))
        .await;
    b.click("#confirm-ok").await;
    b.wait_for(
        "the migrated instance to complete on v2",
        "document.querySelector('.page[data-state=\"COMPLETED\"]') \
         && document.querySelector('#diagram .djs-element[data-element-id=\"T\"].sutra-succeeded') \
         && [...document.querySelectorAll('#diagram .djs-element text')].some(t => t.textContent.includes('v2'))",
        json!(null),
    )
    .await;
    let (_, view) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(
        (view["state"].as_str(), view["deployment"].as_str()),
        (Some("COMPLETED"), Some(v2.as_str()))
    );
    assert_ne!(v1, v2);
    b.screenshot(&screenshots().join("instance-migrated.png"))
        .await;
    no_csp_violations(&b).await;
}

/// A States-language flow that waits for event `approved`.
const APPROVAL: &str = r#"{
  "Name": "approval",
  "StartAt": "Approve",
  "States": {
    "Approve": {"Type": "Wait", "EventName": "approved", "ResultPath": "$.approval", "Next": "Done"},
    "Done": {"Type": "Succeed"}
  }
}"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_incident_is_resolved_from_the_page() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    api.pull_channel("reviews").await;
    deploy(&api, &channel_call("review"), &[]).await;
    let (status, started) = api.start("review", json!({"doc": 1})).await;
    assert_eq!(status, StatusCode::CREATED, "{started}");
    assert_eq!(started["state"], "WAITING", "{started}");
    let id = started["instance"].as_str().unwrap().to_string();
    // A worker fails the external task until its retries are spent: an incident.
    let fetch =
        json!({"workerId": "w1", "channels": ["reviews"], "maxTasks": 1, "lockDuration": 60000});
    loop {
        let (status, body) = api
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let Some(task) = body["tasks"][0]["id"].as_str() else {
            break;
        };
        let (status, body) = api
            .post(
                &format!("/v1/external-tasks/{task}/failure"),
                json!({"workerId": "w1", "errorMessage": "<i>scanner</i> offline"}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    let (_, listed) = api.get(&format!("/v1/incidents?instance={id}")).await;
    let incident = listed["incidents"][0]["id"].as_str().unwrap().to_string();
    assert_eq!(listed["incidents"][0]["state"], "OPEN", "{listed}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    // What a person sees: the incident on the task, in the table, and its action.
    b.wait_css(&format!(
        "#incidents-table tr[data-incident=\"{incident}\"][data-state=\"OPEN\"]"
    ))
    .await;
    b.wait_css(".overlay.incident[data-node=\"Charge\"]").await;
    let message = b
        .text(&format!(
            "#incidents-table tr[data-incident=\"{incident}\"]"
        ))
        .await;
    assert!(message.contains("<i>scanner</i> offline"), "{message}");
    b.screenshot(&screenshots().join("instance-incident.png"))
        .await;
    b.click(&format!(
        "#actions button.resolve[data-incident=\"{incident}\"]"
    ))
    .await;
    b.wait_css("dialog#confirm[open]").await;
    b.click("#confirm-ok").await;
    b.wait_for(
        "the incident to show resolved, its task free again",
        "document.querySelector(`#incidents-table tr[data-incident=\"${arg}\"][data-state=\"RESOLVED\"]`) \
         && !document.querySelector('button.resolve') && !document.querySelector('.overlay.incident') \
         && document.querySelector('#resolve-outcome[data-outcome=\"rearmed\"]')",
        json!(incident),
    )
    .await;
    b.screenshot(&screenshots().join("instance-incident-resolved.png"))
        .await;
    // The task is fetchable again; a worker completes it and the page follows.
    let (_, body) = api
        .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
        .await;
    let task = body["tasks"][0]["id"].as_str().expect("the task again");
    let (status, body) = api
        .post(
            &format!("/v1/external-tasks/{task}/complete"),
            json!({"workerId": "w1", "variables": {"reviewed": true}}),
        )
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    b.wait_for(
        "the instance to complete on the page",
        "document.querySelector('.page[data-state=\"COMPLETED\"]') \
         && document.querySelector('#diagram .djs-element[data-element-id=\"Charge\"].sutra-succeeded')",
        json!(null),
    )
    .await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_is_sent_from_the_page_and_attempt_output_shown_as_text() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, APPROVAL, &[]).await;
    let (_, started) = api.start("approval", json!({"order": 7})).await;
    assert_eq!(started["state"], "WAITING", "{started}");
    let id = started["instance"].as_str().unwrap().to_string();

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#diagram .djs-element[data-element-id=\"Approve\"].sutra-token")
        .await;
    // An event it does not wait for: refused, shown with its code; it still waits.
    b.click("#send-event").await;
    b.wait_css("dialog#confirm[open] #event-name").await;
    let name = b
        .js(
            "return document.querySelector('#event-name').value;",
            json!([]),
        )
        .await;
    assert_eq!(name, "approved", "the name is filled from the wait");
    b.clear("#event-name").await;
    b.type_into("#event-name", "rejected").await;
    b.click("#confirm-ok").await;
    let code = b.text("#action-feedback .error code").await;
    assert_eq!(code, "SUTRA.RUNTIME.EVENT.NOT_AWAITED");
    assert_eq!(b.text("#instance-state").await, "WAITING");
    // The awaited event, with data: delivered, the instance advances.
    b.click("#send-event").await;
    b.wait_css("dialog#confirm[open] #event-data").await;
    b.clear("#event-data").await;
    b.type_into("#event-data", r#"{"by": "console"}"#).await;
    b.screenshot(&screenshots().join("instance-event-confirm.png"))
        .await;
    b.click("#confirm-ok").await;
    b.wait_for(
        "the event to complete the instance",
        "document.querySelector('.page[data-state=\"COMPLETED\"]') \
         && document.querySelector('#diagram .djs-element[data-element-id=\"Approve\"].sutra-succeeded') \
         && [...document.querySelectorAll('#variables .json-string')].some(e => e.textContent === '\"console\"') \
         && !document.querySelector('#action-feedback .error')",
        json!(null),
    )
    .await;
    let (_, view) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(
        view["variables"],
        json!({"order": 7, "approval": {"by": "console"}})
    );
    b.screenshot(&screenshots().join("instance-event-sent.png"))
        .await;

    // What a task wrote (log lines, stderr) is in its attempt's row, as text.
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let hostile = "<img src=x onerror=\"window.__xss=4\"> reserved 3";
    let (_, logged) = api
        .start(
            "order",
            json!({"do": "log", "level": "warn", "message": hostile}),
        )
        .await;
    assert_eq!(logged["state"], "COMPLETED", "{logged}");
    let lid = logged["instance"].as_str().unwrap();
    b.goto(&format!("{}/ui/#/instances/{lid}", srv.url)).await;
    let row = "#attempts-table tr[data-task=\"T\"][data-attempt=\"1\"]";
    assert_eq!(
        b.text(&format!("{row} details.output summary")).await,
        "1 log line(s) · stderr"
    );
    b.click(&format!("{row} details.output summary")).await;
    let logs = b.text(&format!("{row} details[open] pre.logs")).await;
    assert_eq!(logs, format!("WARN  {hostile}\n"));
    let stderr = b.text(&format!("{row} details[open] pre.stderr")).await;
    assert_eq!(stderr, format!("{hostile}\n"));
    let injected = b
        .js(
            "return [window.__xss === undefined, document.querySelectorAll('#main img').length];",
            json!([]),
        )
        .await;
    assert_eq!(injected, json!([true, 0]), "nothing a task wrote ran");
    b.screenshot(&screenshots().join("instance-attempt-output.png"))
        .await;
    no_csp_violations(&b).await;
}

/// A guest's own failure class, a pull call's wait with its channel, and
/// its worker's failure (who, what, the retries left) on the instance page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn guest_classes_channel_waits_and_worker_failures_are_shown() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    api.pull_channel("reviews").await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    deploy(&api, &channel_call("review"), &[]).await;
    let (_, failed) = api
        .start(
            "order",
            json!({"do": "fail", "code": "PAYMENT.DECLINED", "class": "rate_limit", "message": "card declined"}),
        )
        .await;
    assert_eq!(failed["state"], "FAILED", "{failed}");
    let failed = failed["instance"].as_str().unwrap().to_string();
    let (_, waiting) = api.start("review", json!({"doc": 1})).await;
    assert_eq!(waiting["state"], "WAITING", "{waiting}");
    let waiting = waiting["instance"].as_str().unwrap().to_string();
    let fetch = json!({"workerId": "w1", "channels": ["reviews"], "lockDuration": 60000});
    let (_, body) = api.post("/v1/external-tasks/fetch-and-lock", fetch).await;
    let task = body["tasks"][0]["id"].as_str().unwrap().to_string();
    let (status, body) = api
        .post(
            &format!("/v1/external-tasks/{task}/failure"),
            json!({"workerId": "w1", "errorMessage": "<i>scanner</i> offline"}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{failed}", srv.url))
        .await;
    let row = b
        .text("#attempts-table tr[data-task=\"T\"][data-outcome=\"failed\"]")
        .await;
    assert!(
        row.contains("PAYMENT.DECLINED") && row.contains("rate_limit"),
        "the guest's code with its own class: {row}"
    );

    b.goto(&format!("{}/ui/#/instances/{waiting}", srv.url))
        .await;
    let wait = "#waits-table tr[data-kind=\"channel\"][data-node=\"Charge\"]";
    assert_eq!(b.text(&format!("{wait} code.channel")).await, "reviews");
    assert_eq!(b.text(&format!("{wait} code.request")).await, task);
    let row = b
        .text("#attempts-table tr[data-task=\"Charge\"][data-outcome=\"worker_failed\"][data-worker=\"w1\"]")
        .await;
    for part in [
        "worker_failed",
        "SUTRA.RUNTIME.EXTERNAL_TASK.FAILED",
        "worker w1 · 2 retries left",
        "<i>scanner</i> offline",
    ] {
        assert!(row.contains(part), "{part} in {row}");
    }
    // On the diagram: what the task waits for; a worker's failure is no attempt.
    assert_eq!(
        b.text(".overlay.wait").await,
        "channel reviews",
        "the wait's badge"
    );
    let counted = b
        .js(
            "return [document.querySelectorAll('.overlay.attempts').length, document.querySelectorAll('#main i').length];",
            json!([]),
        )
        .await;
    assert_eq!(counted, json!([0, 0]), "no attempt count, no markup");
    b.js(
        "document.querySelector('#attempts').scrollIntoView(); return true;",
        json!([]),
    )
    .await;
    b.screenshot(&screenshots().join("instance-worker-failure.png"))
        .await;
    no_csp_violations(&b).await;
}

/// The routes the console reads, over HTTP, on both backends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn console_routes_answer_on_both_backends() {
    for db in [Db::Sqlite, Db::Postgres] {
        let Some(srv) = Server::start_on(db, &[]).await else {
            continue;
        };
        let api = srv.tenant("acme", json!({})).await;
        let other = srv.tenant("other", json!({})).await;
        let dep = deploy(&api, &one_task("order"), &["chaos"]).await;
        let (_, ok) = api.start("order", json!({"do": "echo"})).await;
        // A guest's own code with its own class (in its details).
        let (_, bad) = api
            .start(
                "order",
                json!({"do": "fail", "code": "BROKEN", "class": "rate_limit"}),
            )
            .await;
        assert_eq!(
            (ok["state"].as_str(), bad["state"].as_str()),
            (Some("COMPLETED"), Some("FAILED"))
        );

        let (status, c) = api.get("/v1/instances/counts").await;
        assert_eq!(status, StatusCode::OK, "{c}");
        assert_eq!(
            (
                c["counts"]["COMPLETED"].as_i64(),
                c["counts"]["FAILED"].as_i64()
            ),
            (Some(1), Some(1))
        );
        assert_eq!(
            (c["counts"]["WAITING"].as_i64(), c["total"].as_i64()),
            (Some(0), Some(2))
        );
        let (_, c) = api.get("/v1/instances/counts?process=nothing").await;
        assert_eq!(c["total"], 0);
        let (_, c) = other.get("/v1/instances/counts").await;
        assert_eq!(c["total"], 0, "another tenant's instances are not counted");

        let bad_id = bad["instance"].as_str().unwrap();
        let (status, a) = api.get(&format!("/v1/instances/{bad_id}/attempts")).await;
        assert_eq!(status, StatusCode::OK, "{a}");
        let first = &a["attempts"][0];
        assert_eq!(
            (
                first["task"].as_str(),
                first["outcome"].as_str(),
                first["code"].as_str()
            ),
            (Some("T"), Some("failed"), Some("BROKEN"))
        );
        assert_eq!(
            first["class"], "rate_limit",
            "the guest's class is kept: {a}"
        );
        assert!(first["durationMs"].as_i64().unwrap() >= 0);
        let (_, view) = api.get(&format!("/v1/instances/{bad_id}")).await;
        assert_eq!(
            view["attempts"][0]["class"], "rate_limit",
            "the instance view (and `sutra inspect`) shows the class too: {view}"
        );
        let (status, _) = other.get(&format!("/v1/instances/{bad_id}/attempts")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        let (status, m) = api.get(&format!("/v1/deployments/{dep}/modules")).await;
        assert_eq!(status, StatusCode::OK, "{m}");
        assert_eq!(m["modules"][0]["name"], "chaos");
        assert_eq!(
            m["modules"][0]["bytes"].as_u64(),
            Some(chaos().len() as u64)
        );

        let resp = api
            .request(Method::GET, &format!("/v1/deployments/{dep}/diagram"))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["x-sutra-diagram"], "generated");
        let xml = resp.text().await.unwrap();
        assert!(xml.contains("<bpmndi:BPMNShape id=\"T_di\""), "{xml}");
        let (status, _) = other.get(&format!("/v1/deployments/{dep}/diagram")).await;
        assert_eq!(status, StatusCode::NOT_FOUND);

        // `since` bounds the listing by start time.
        let (_, all) = api.get("/v1/instances?since=2029-12-31T23:59:59Z").await;
        assert_eq!(all["instances"].as_array().unwrap().len(), 2);
        let (_, none) = api.get("/v1/instances?since=2030-01-01T00:00:01Z").await;
        assert_eq!(none["instances"].as_array().unwrap().len(), 0, "{none}");
        let (_, all) = api.get("/v1/instances?until=2030-01-01T00:00:00Z").await;
        assert_eq!(all["instances"].as_array().unwrap().len(), 2);
        let (_, none) = api.get("/v1/instances?until=2029-12-31T23:59:59Z").await;
        assert_eq!(none["instances"].as_array().unwrap().len(), 0, "{none}");
        let (_, one) = api
            .get("/v1/instances?until=2030-01-01T00:00:00Z&limit=1")
            .await;
        assert_eq!(one["instances"].as_array().unwrap().len(), 1);
        assert!(
            one["next"].is_string(),
            "a full page within the bound has a next: {one}"
        );
        let (status, body) = api.get("/v1/instances?since=yesterday").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("SUTRA.API.MALFORMED_REQUEST"))
        );

        // The counts honour `since` and `until`, with the listing's bounds.
        let (status, body) = srv
            .admin()
            .post("/v1/admin/clock/advance", json!({"by": "PT1H"}))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let (_, later) = api
            .start(
                "order",
                json!({"do": "log", "level": "info", "message": "hello <b>"}),
            )
            .await;
        assert_eq!(later["state"], "COMPLETED", "{later}");
        for (q, completed, failed) in [
            ("", 2, 1),
            ("?since=2030-01-01T00:30:00Z", 1, 0),
            ("?until=2030-01-01T00:30:00Z", 1, 1),
            (
                "?since=2030-01-01T00:00:00Z&until=2030-01-01T00:00:00Z",
                1,
                1,
            ),
            ("?since=2030-01-01T01:00:00.001Z", 0, 0),
            ("?until=2029-12-31T23:59:59.999Z", 0, 0),
            (
                "?since=2030-01-01T01:00:00Z&until=2030-01-01T01:00:00Z",
                1,
                0,
            ),
            ("?process=order&since=2030-01-01T00:00:00.001Z", 1, 0),
            ("?process=nothing&since=2030-01-01T00:00:00Z", 0, 0),
        ] {
            let (status, c) = api.get(&format!("/v1/instances/counts{q}")).await;
            assert_eq!(status, StatusCode::OK, "{q}: {c}");
            assert_eq!(
                (&c["counts"]["COMPLETED"], &c["counts"]["FAILED"]),
                (&json!(completed), &json!(failed)),
                "{q}: {c}"
            );
            let (_, l) = api.get(&format!("/v1/instances{q}")).await;
            assert_eq!(
                c["total"],
                json!(l["instances"].as_array().unwrap().len()),
                "{q}: the counts agree with the listing {l}"
            );
        }
        let (status, body) = api.get("/v1/instances/counts?until=soon").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::BAD_REQUEST, Some("SUTRA.API.MALFORMED_REQUEST"))
        );

        // What a task wrote is kept with its attempt.
        let lid = later["instance"].as_str().unwrap();
        let (_, a) = api.get(&format!("/v1/instances/{lid}/attempts")).await;
        assert_eq!(
            (&a["attempts"][0]["logs"], &a["attempts"][0]["stderr"]),
            (
                &json!([{"level": "info", "message": "hello <b>"}]),
                &json!("hello <b>\n")
            ),
            "{a}"
        );
        let (_, a) = api.get(&format!("/v1/instances/{bad_id}/attempts")).await;
        assert_eq!(a["attempts"][0]["logs"], json!([]), "{a}");
        assert!(a["attempts"][0].get("stderr").is_none(), "{a}");

        // `/` leads to the console; an unknown console file is a coded 404.
        let (status, body) = api.get("/ui/nothing.js").await;
        assert_eq!(
            (status, body["code"].as_str()),
            (StatusCode::NOT_FOUND, Some("SUTRA.API.NOT_FOUND"))
        );
        let resp = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap()
            .get(format!("{}/", srv.url))
            .send()
            .await
            .unwrap();
        assert!(resp.status().is_redirection());
        assert_eq!(resp.headers()["location"], "/ui/");
    }
}
