//! Triage across instances in the console (issue 35, what was left of items
//! 2 and 4), in a real headless Chromium against a spawned `sutra serve`:
//! incidents grouped by process, the instance list filtered on the error
//! code and the failed node (typed, or by a click on a row's code or node,
//! kept in the URL), and the batch actions that resolve the incidents of
//! ticked instances and migrate the instances a filter selects.
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
use reqwest::StatusCode;
use serde_json::{json, Value};
use webdriver::Browser;

/// start → A → B (both chaos) → end.
fn two_tasks(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="A"/>
    <bpmn:serviceTask id="A" name="Reserve" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f2" sourceRef="A" targetRef="B"/>
    <bpmn:serviceTask id="B" name="Charge" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="f3" sourceRef="B" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// Fails every external task of channel `reviews` until none is left.
async fn give_up_every_task(api: &server::Api) {
    let fetch =
        json!({"workerId": "w1", "channels": ["reviews"], "maxTasks": 1, "lockDuration": 60000});
    for _ in 0..200 {
        let (status, body) = api
            .post("/v1/external-tasks/fetch-and-lock", fetch.clone())
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        let Some(task) = body["tasks"][0]["id"].as_str() else {
            return;
        };
        api.post(
            &format!("/v1/external-tasks/{task}/failure"),
            json!({"workerId": "w1", "errorMessage": "scanner offline"}),
        )
        .await;
    }
    panic!("the retries never ran out");
}

async fn start(api: &server::Api, process: &str, input: Value) -> String {
    let (status, v) = api.start(process, input).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    v["instance"].as_str().unwrap().to_string()
}

async fn rows(b: &Browser) -> Value {
    b.js(
        "return [...document.querySelectorAll('#instances tbody tr')].map(r => r.dataset.instance).sort();",
        json!([]),
    )
    .await
}

fn sorted(mut ids: Vec<String>) -> Value {
    ids.sort();
    json!(ids)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incidents_are_grouped_by_process_the_biggest_first() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    api.pull_channel("reviews").await;
    deploy(&api, &channel_call("review"), &[]).await;
    deploy(&api, &channel_call("billing"), &[]).await;
    start(&api, "billing", json!({})).await;
    start(&api, "review", json!({})).await;
    start(&api, "review", json!({})).await;
    give_up_every_task(&api).await;
    let (_, listed) = api.get("/v1/incidents?state=OPEN").await;
    let processes: Vec<&str> = listed["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["process"].as_str().unwrap())
        .collect();
    assert_eq!(processes.len(), 3, "{listed}");
    assert!(
        processes.contains(&"billing"),
        "the API names the process: {listed}"
    );

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.click("#nav a[href=\"#/incidents\"]").await;
    b.wait_css("#incident-groups-table").await;
    let groups = b
        .js(
            "return [...document.querySelectorAll('#incident-groups-table tbody tr')].map(r => [r.dataset.process, r.cells[0].textContent, r.cells[1].textContent]);",
            json!([]),
        )
        .await;
    assert_eq!(
        groups,
        json!([["review", "review", "2"], ["billing", "billing", "1"]]),
        "one group per process, the one with most incidents first"
    );
    assert!(b.text("#incident-groups-table").await.contains("Process"));
    assert!(b
        .text("#incident-groups h2")
        .await
        .contains("of 2 process(es)"));
    let per_row = b
        .js(
            "return [...document.querySelectorAll('#incidents-table tbody tr')].map(r => r.cells[3].textContent).sort();",
            json!([]),
        )
        .await;
    assert_eq!(per_row, json!(["billing", "review", "review"]));
    // The process is a link to its instances.
    b.click("#incident-groups-table tr[data-process=\"billing\"] a")
        .await;
    b.wait_for(
        "the instances of billing",
        "location.hash.includes('process=billing') && document.querySelectorAll('#instances tbody tr').length === 1",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("incidents-by-process.png"))
        .await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_list_filters_on_the_error_code_and_the_failed_node() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &two_tasks("order"), &["chaos"]).await;
    let at_a = start(
        &api,
        "order",
        json!({"by-task": {"A": {"do": "fail", "code": "STOCK.EMPTY"}, "B": {"do": "echo"}}}),
    )
    .await;
    srv.advance("PT0.001S").await;
    let mut at_b = Vec::new();
    for _ in 0..2 {
        at_b.push(start(&api, "order", json!({"by-task": {"A": {"do": "echo"}, "B": {"do": "fail", "code": "CARD.DECLINED"}}})).await);
        srv.advance("PT0.001S").await;
    }
    let ok = start(&api, "order", json!({"do": "echo"})).await;
    let _ = ok;
    // The API first: the filters are exact.
    let (status, by_node) = api.get("/v1/instances?failedNode=B").await;
    assert_eq!(status, StatusCode::OK, "{by_node}");
    let ids: Vec<String> = by_node["instances"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["id"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(sorted(ids), sorted(at_b.clone()));
    let code = by_node["instances"][0]["errorCode"]
        .as_str()
        .unwrap()
        .to_string();
    let (_, by_code) = api
        .get(&format!("/v1/instances?errorCode={code}&failedNode=A"))
        .await;
    assert_eq!(
        by_code["instances"].as_array().unwrap().len(),
        1,
        "{by_code}"
    );
    assert_eq!(by_code["instances"][0]["id"], at_a.as_str());
    let (status, bad) = api.get("/v1/instances?failedNode=").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#instances").await;
    assert_eq!(rows(&b).await.as_array().unwrap().len(), 4);
    // Typed: the failed node.
    b.type_into("#filter-node", "B").await;
    b.click("#filters button[type=submit]").await;
    b.wait_for(
        "only the instances that failed at B",
        "location.hash.includes('node=B') && document.querySelectorAll('#instances tbody tr').length === 2",
        json!(null),
    )
    .await;
    assert_eq!(rows(&b).await, sorted(at_b.clone()));
    // A reload keeps it.
    let url = b.js("return location.href;", json!([])).await;
    b.goto(url.as_str().unwrap()).await;
    b.wait_for(
        "a reload keeps the filter",
        "document.querySelector('#filter-node')?.value === 'B' && document.querySelectorAll('#instances tbody tr').length === 2",
        json!(null),
    )
    .await;
    // A click on a row's failed node filters on it.
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#instances").await;
    b.click(&format!(
        "#instances tr[data-instance=\"{at_a}\"] a.failed-node"
    ))
    .await;
    b.wait_for(
        "only the instance that failed at A",
        &format!("location.hash.includes('node=A') && document.querySelectorAll('#instances tbody tr').length === 1 && document.querySelector('#instances tbody tr').dataset.instance === '{at_a}'"),
        json!(null),
    )
    .await;
    // And on its error code (with the node filter kept).
    b.click(&format!(
        "#instances tr[data-instance=\"{at_a}\"] .error-code"
    ))
    .await;
    b.wait_for(
        "the error code and the node",
        "location.hash.includes('code=') && location.hash.includes('node=A') && document.querySelector('#filter-code').value !== ''",
        json!(null),
    )
    .await;
    assert_eq!(rows(&b).await, json!([at_a]));
    b.screenshot(&screenshots().join("instances-failed-node.png"))
        .await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ticked_instances_incidents_are_resolved_as_one_batch() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    api.pull_channel("reviews").await;
    deploy(&api, &channel_call("review"), &[]).await;
    let mut ids = Vec::new();
    for _ in 0..3 {
        ids.push(start(&api, "review", json!({})).await);
        srv.advance("PT0.001S").await;
    }
    give_up_every_task(&api).await;
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    b.wait_css("#instances").await;
    for id in &ids[..2] {
        b.click(&format!("#instances input.pick[data-instance=\"{id}\"]"))
            .await;
    }
    b.click("#resolve-picked").await;
    b.wait_css("#confirm[open]").await;
    assert_eq!(
        b.text("#confirm-title").await,
        "Resolve the open incidents of 2 ticked instance(s)?"
    );
    b.click("#confirm-ok").await;
    b.wait_for(
        "the batch's page, done",
        "location.hash.startsWith('#/batches/') && document.querySelector('#batch-head .badge')?.textContent === 'COMPLETED'",
        json!(null),
    )
    .await;
    assert!(b.text("#batch-head").await.contains("resolve"));
    assert_eq!(b.text("#batch-head [data-outcome=SUCCEEDED] .n").await, "2");
    let (_, open) = api.get("/v1/incidents?state=OPEN").await;
    let open: Vec<&str> = open["incidents"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["instance"].as_str().unwrap())
        .collect();
    assert_eq!(
        open,
        vec![ids[2].as_str()],
        "only the unticked one's incident is left open"
    );
    b.screenshot(&screenshots().join("batch-resolve.png")).await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instances_a_filter_selects_are_migrated_as_one_batch() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let v1 = deploy(&api, &waits_for_message("order"), &[]).await;
    let mut ids = Vec::new();
    for _ in 0..2 {
        ids.push(start(&api, "order", json!({})).await);
        srv.advance("PT0.001S").await;
    }
    // Version 2: the same nodes, the wait named.
    let v2 = deploy(
        &api,
        &waits_for_message("order").replace(
            "<bpmn:intermediateCatchEvent id=\"wait\">",
            "<bpmn:intermediateCatchEvent id=\"wait\" name=\"Wait for go\">",
        ),
        &[],
    )
    .await;
    assert_ne!(v1, v2);
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!(
        "{}/ui/#/instances?process=order&state=WAITING",
        srv.url
    ))
    .await;
    b.wait_for(
        "the two waiting instances",
        "document.querySelectorAll('#instances tbody tr').length === 2",
        json!(null),
    )
    .await;
    b.click("#migrate-matching").await;
    b.wait_css("#confirm[open] #batch-target").await;
    assert_eq!(
        b.text("#confirm-title").await,
        "Migrate every instance the filters select?"
    );
    let options = b
        .js(
            "return [...document.querySelectorAll('#batch-target option')].map(o => [o.value, o.textContent]);",
            json!([]),
        )
        .await;
    assert_eq!(
        options,
        json!([[v2, "order v2 (active)"], [v1, "order v1 (draining)"]]),
        "the process's deployments, newest first"
    );
    b.click("#confirm-ok").await;
    b.wait_for(
        "the batch's page, done",
        "location.hash.startsWith('#/batches/') && document.querySelector('#batch-head .badge')?.textContent === 'COMPLETED'",
        json!(null),
    )
    .await;
    assert_eq!(b.text("#batch-head [data-outcome=SUCCEEDED] .n").await, "2");
    for id in &ids {
        let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
        assert_eq!(v["deployment"], v2.as_str(), "{v}");
    }
    b.screenshot(&screenshots().join("batch-migrate.png")).await;
    no_csp_violations(&b).await;
}

/// start → "Which way?" (an exclusive gateway whose conditions all fail) → two ends.
fn dead_end(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Gateway_0x7f3a"/>
    <bpmn:exclusiveGateway id="Gateway_0x7f3a" name="Which way?"/>
    <bpmn:sequenceFlow id="big" sourceRef="Gateway_0x7f3a" targetRef="end1">
      <bpmn:conditionExpression>x &gt; 5</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:sequenceFlow id="huge" sourceRef="Gateway_0x7f3a" targetRef="end2">
      <bpmn:conditionExpression>x &gt; 10</bpmn:conditionExpression>
    </bpmn:sequenceFlow>
    <bpmn:endEvent id="end1"/>
    <bpmn:endEvent id="end2"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

/// Item 6: the instance page's messages name nodes by their names (the
/// modeler's id as a tooltip), not by ids.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn messages_on_the_instance_page_name_nodes_by_their_names() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &dead_end("route"), &[]).await;
    let id = start(&api, "route", json!({"x": 1})).await;
    let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(v["state"], "FAILED", "{v}");
    let raw = v["error"]["message"].as_str().unwrap().to_string();
    assert!(
        raw.contains("`Gateway_0x7f3a`"),
        "the API's message quotes the id: {raw}"
    );
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#error-message .node-name").await;
    let shown = b.text("#error-message").await;
    assert!(shown.contains("\u{201c}Which way?\u{201d}"), "{shown}");
    assert!(!shown.contains("Gateway_0x7f3a"), "{shown}");
    let title = b
        .js(
            "return document.querySelector('#error-message .node-name').title;",
            json!([]),
        )
        .await;
    assert_eq!(title, json!("Gateway_0x7f3a"));
    b.screenshot(&screenshots().join("instance-named-message.png"))
        .await;
    no_csp_violations(&b).await;
}

/// Item 4: a Parallel's branches and a Map's iteration read as such on the
/// diagram (never `Lines#iteration`), and a sequential BPMN multi-instance
/// activity carries its marker.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn branches_and_iterations_read_as_such_on_the_diagram() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let asl = r#"{"Comment": "lines", "StartAt": "Both", "States": {
      "Both": {"Type": "Parallel", "Next": "Lines", "Branches": [
        {"StartAt": "A", "States": {"A": {"Type": "Pass", "End": true}}},
        {"StartAt": "B", "States": {"B": {"Type": "Pass", "End": true}}}]},
      "Lines": {"Type": "Map", "End": true, "ItemProcessor": {"StartAt": "Line",
        "States": {"Line": {"Type": "Pass", "End": true}}}}}}"#;
    let id = deploy(&api, asl, &[]).await;
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/deployments/{id}", srv.url)).await;
    b.wait_for(
        "the diagram's labels",
        "[...document.querySelectorAll('#diagram .djs-label, #diagram text')].some(t => t.textContent.includes('each item'))",
        json!(null),
    )
    .await;
    let texts = b
        .js(
            "return [...document.querySelectorAll('#diagram text')].map(t => t.textContent).join(' | ');",
            json!([]),
        )
        .await;
    let texts = texts.as_str().unwrap();
    for want in [
        "Both \u{b7} branch 1",
        "Both \u{b7} branch 2",
        "Lines \u{b7} each item",
    ] {
        assert!(texts.contains(want), "{want} in {texts}");
    }
    assert!(!texts.contains('#'), "no internal id is shown: {texts}");
    b.screenshot(&screenshots().join("diagram-branches.png"))
        .await;
    no_csp_violations(&b).await;
}

/// Item 5: each step's input and result are kept (bounded: 64 KiB each,
/// a longer one cut with a marker) and shown; a click on a node's shape
/// shows that node's steps.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_steps_input_and_result_are_shown_for_the_node_clicked() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &two_tasks("order"), &["chaos"]).await;
    let id = start(
        &api,
        "order",
        json!({"by-task": {"A": {"do": "echo"}, "B": {"do": "fail", "code": "CARD.DECLINED"}}, "orderId": "O-17"}),
    )
    .await;
    let (_, attempts) = api.get(&format!("/v1/instances/{id}/attempts")).await;
    let rows = attempts["attempts"].as_array().unwrap();
    assert_eq!(rows.len(), 2, "{attempts}");
    assert_eq!(rows[0]["input"]["orderId"], "O-17", "{attempts}");
    assert!(
        rows[0]["output"].is_object(),
        "a completion's output: {attempts}"
    );
    // A 70 KB input is kept cut, with its marker.
    let big = "x".repeat(70_000);
    let long = start(&api, "order", json!({"do": "echo", "blob": big})).await;
    let (_, la) = api.get(&format!("/v1/instances/{long}/attempts")).await;
    let kept = la["attempts"][0]["input"].as_str().unwrap();
    assert!(kept.len() <= 64 * 1024, "{}", kept.len());
    assert!(
        kept.ends_with("bytes in all]"),
        "{}",
        &kept[kept.len() - 40..]
    );

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#attempts-table").await;
    diagram_has(&b, "B", "generated").await;
    // A pointer's click on the shape (an SVG element has no `click()`).
    b.js(
        "const g = document.querySelector(`#diagram .djs-element[data-element-id=\"${arguments[0]}\"]`); \
         const hit = g.querySelector('.djs-hit') || g; const r = hit.getBoundingClientRect(); \
         hit.dispatchEvent(new MouseEvent('click', { bubbles: true, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2 })); return true;",
        json!(["B"]),
    )
    .await;
    b.wait_for(
        "the steps of B",
        "document.querySelector('#steps-of')?.dataset.node === 'B' && document.querySelectorAll('#attempts-table tbody tr').length === 1",
        json!(null),
    )
    .await;
    assert!(b.text("#steps-of").await.contains("Charge"), "named");
    assert_eq!(
        b.js(
            "return document.querySelector('#attempts-table tbody tr').dataset.task;",
            json!([])
        )
        .await,
        json!("B")
    );
    b.click("#attempts-table details.step-input summary").await;
    let input = b.text("#attempts-table details.step-input").await;
    assert!(
        input.contains("orderId") && input.contains("O-17"),
        "{input}"
    );
    b.click("#steps-all").await;
    b.wait_for(
        "every step again",
        "!document.querySelector('#steps-of') && document.querySelectorAll('#attempts-table tbody tr').length === 2",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("instance-steps.png"))
        .await;
    b.goto(&format!("{}/ui/#/instances/{long}", srv.url)).await;
    b.wait_css("#attempts-table details.step-input").await;
    assert_eq!(
        b.text("#attempts-table details.step-input summary").await,
        "input (cut at 64 KiB)"
    );
    no_csp_violations(&b).await;
}
