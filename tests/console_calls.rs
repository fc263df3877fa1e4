//! The last pieces of issue 35 in the console, in a real headless Chromium
//! against a spawned `sutra serve`: the instance list's failed node by its
//! name, the end events of an HX flow's diagram, a call activity's link to
//! its child instance (and the child's back to its parent), and a fan-out's
//! items with the item of each attempt.
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

async fn start(api: &server::Api, process: &str, input: Value) -> String {
    let (status, v) = api.start(process, input).await;
    assert_eq!(status, StatusCode::CREATED, "{v}");
    v["instance"].as_str().unwrap().to_string()
}

/// A pointer's click on a diagram shape (an SVG element has no `click()`).
async fn click_shape(b: &Browser, element: &str) {
    b.js(
        "const g = document.querySelector(`#diagram .djs-element[data-element-id=\"${arguments[0]}\"]`); \
         const hit = g.querySelector('.djs-hit') || g; const r = hit.getBoundingClientRect(); \
         hit.dispatchEvent(new MouseEvent('click', { bubbles: true, clientX: r.x + r.width / 2, clientY: r.y + r.height / 2 })); return true;",
        json!([element]),
    )
    .await;
}

/// The on-screen box of a drawn element: [left, top, right, bottom].
async fn screen_box(b: &Browser, element: &str) -> [f64; 4] {
    let r = b
        .js(
            "const g = document.querySelector(`#diagram .djs-element[data-element-id=\"${arguments[0]}\"] .djs-visual`); \
             const r = g.getBoundingClientRect(); return [r.left, r.top, r.right, r.bottom];",
            json!([element]),
        )
        .await;
    let v: Vec<f64> = r
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x.as_f64().unwrap())
        .collect();
    [v[0], v[1], v[2], v[3]]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_list_names_the_failed_node_with_its_id_as_the_tooltip() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &one_task("order"), &["chaos"]).await;
    let failed = start(&api, "order", json!({"do": "fail", "code": "STOCK.EMPTY"})).await;
    let (_, v) = api.get(&format!("/v1/instances/{failed}")).await;
    assert_eq!(v["state"], "FAILED", "{v}");
    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances", srv.url)).await;
    let cell = format!("#instances tr[data-instance=\"{failed}\"] a.failed-node");
    b.wait_css(&cell).await;
    assert_eq!(b.text(&cell).await, "Reserve stock", "the node's name");
    let title = b
        .js(
            "return document.querySelector(arguments[0]).title;",
            json!([cell]),
        )
        .await;
    assert!(
        title.as_str().unwrap().starts_with("T "),
        "the id as the tooltip: {title}"
    );
    // A click still filters on the node's id.
    b.click(&cell).await;
    b.wait_for(
        "the failed-node filter",
        "location.hash.includes('node=T') && document.querySelector('#filter-node').value === 'T'",
        json!(null),
    )
    .await;
    b.screenshot(&screenshots().join("instances-failed-node-name.png"))
        .await;
    no_csp_violations(&b).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_hx_flows_diagram_ends_each_path_with_an_end_event() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    let hx = r#"<workflow id="triage" name="Triage">
  <node id="check" type="pass" name="Check"/>
  <node id="fast" type="pass" name="Fast lane"/>
  <node id="slow" type="pass" name="Slow lane"/>
  <edges>
    <edge from="check" to="fast" when="true"/>
    <edge from="check" to="slow" when="false"/>
  </edges>
</workflow>"#;
    let id = deploy(&api, hx, &[]).await;
    // The exported diagram: one end event after each lane, none after Check.
    let (status, _) = api.get(&format!("/v1/deployments/{id}/diagram")).await;
    assert_eq!(status, StatusCode::OK);
    let xml = api
        .request(
            reqwest::Method::GET,
            &format!("/v1/deployments/{id}/diagram"),
        )
        .send()
        .await
        .unwrap()
        .text()
        .await
        .unwrap();
    let end_of = |node: &str| -> String {
        let tag = xml
            .split("<bpmn:endEvent ")
            .skip(1)
            .find(|t| t.contains(&format!("sutra:node=\"{node}#end\"")))
            .unwrap_or_else(|| panic!("an end after {node}: {xml}"));
        tag.split("id=\"")
            .nth(1)
            .unwrap()
            .split('"')
            .next()
            .unwrap()
            .to_string()
    };
    let (fast_end, slow_end) = (end_of("fast"), end_of("slow"));
    assert_eq!(xml.matches("<bpmn:endEvent ").count(), 2, "{xml}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/deployments/{id}", srv.url)).await;
    diagram_has(&b, &fast_end, "generated").await;
    diagram_has(&b, &slow_end, "generated").await;
    for (node, end) in [("fast", &fast_end), ("slow", &slow_end)] {
        let (n, e) = (screen_box(&b, node).await, screen_box(&b, end).await);
        assert!(e[0] >= n[2], "{end} is drawn right of {node}: {e:?} {n:?}");
        // An end event: a circle, no label (an internal node has no name).
        let circle = b
            .js(
                "return !!document.querySelector(`#diagram .djs-element[data-element-id=\"${arguments[0]}\"] .djs-visual circle`);",
                json!([end]),
            )
            .await;
        assert_eq!(circle, json!(true));
    }
    let texts = b
        .js(
            "return [...document.querySelectorAll('#diagram text')].map(t => t.textContent).join(' | ');",
            json!([]),
        )
        .await;
    assert!(!texts.as_str().unwrap().contains('#'), "{texts}");
    b.screenshot(&screenshots().join("diagram-hx-ends.png"))
        .await;
    no_csp_violations(&b).await;
}

fn calls_a_child(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:sequenceFlow id="f1" sourceRef="start" targetRef="Call_1x9"/>
    <bpmn:callActivity id="Call_1x9" name="Check the credit" calledElement="credit"/>
    <bpmn:sequenceFlow id="f2" sourceRef="Call_1x9" targetRef="end"/>
    <bpmn:endEvent id="end"/>
  </bpmn:process>
  <bpmn:process id="credit" isExecutable="true">
    <bpmn:startEvent id="c0"/>
    <bpmn:sequenceFlow id="c1" sourceRef="c0" targetRef="score"/>
    <bpmn:serviceTask id="score" name="Score" implementation="registered:chaos"/>
    <bpmn:sequenceFlow id="c2" sourceRef="score" targetRef="c9"/>
    <bpmn:endEvent id="c9"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_activity_links_to_its_child_and_the_child_back_to_its_parent() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &calls_a_child("order"), &["chaos"]).await;
    let id = start(&api, "order", json!({"do": "echo"})).await;
    let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(v["state"], "COMPLETED", "{v}");
    // The API names the child, with the call that started it, once it ended too.
    let child = v["children"][0]["instance"]
        .as_str()
        .unwrap_or_else(|| panic!("a child: {v}"))
        .to_string();
    assert_eq!(v["children"][0]["node"], "Call_1x9", "{v}");
    assert_eq!(v["children"][0]["process"], "credit", "{v}");
    assert_eq!(v["children"][0]["state"], "COMPLETED", "{v}");
    let (_, c) = api.get(&format!("/v1/instances/{child}")).await;
    assert_eq!(c["parent"], id.as_str(), "{c}");

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#children-table").await;
    let row = format!("#children-table tr[data-child=\"{child}\"]");
    let shown = b.text(&row).await;
    assert!(
        shown.contains("Check the credit")
            && shown.contains("credit")
            && shown.contains("COMPLETED"),
        "the child's row: {shown}"
    );
    // The call's attempt row links to it too.
    let in_attempts = b
        .js(
            "return [...document.querySelectorAll('#attempts-table tr[data-task=\"Call_1x9\"] .child-link a')].map(a => a.textContent);",
            json!([]),
        )
        .await;
    assert_eq!(in_attempts, json!([child]));
    // A click on the call activity's shape opens the child's page.
    diagram_has(&b, "Call_1x9", "generated").await;
    click_shape(&b, "Call_1x9").await;
    b.wait_for(
        "the child's page",
        "document.querySelector('#instance-id')?.textContent === arg[0]",
        json!([child]),
    )
    .await;
    assert_eq!(
        b.js("return location.hash;", json!([])).await,
        json!(format!("#/instances/{child}"))
    );
    // Which links back to its parent.
    let back = b
        .js(
            "return [...document.querySelectorAll('#instance-head a')].filter(a => a.textContent === arguments[0]).map(a => a.getAttribute('href'));",
            json!([id]),
        )
        .await;
    assert_eq!(
        back,
        json!([format!("#/instances/{id}")]),
        "child of its parent"
    );
    assert!(b.text("#instance-head").await.contains("child of"));
    b.screenshot(&screenshots().join("instance-child.png"))
        .await;
    b.click(&format!("#instance-head a[href=\"#/instances/{id}\"]"))
        .await;
    b.wait_for(
        "the parent's page again",
        "document.querySelector('#instance-id')?.textContent === arg[0] && !!document.querySelector('#children-table')",
        json!([id]),
    )
    .await;
    no_csp_violations(&b).await;
}

/// start → `each` (chaos, a multi-instance over `items`, one at a time,
/// retried after an hour) → end.
fn each_item(process: &str) -> String {
    format!(
        r#"{HEADER}
  <bpmn:process id="{process}" isExecutable="true">
    <bpmn:startEvent id="start"/>
    <bpmn:serviceTask id="each" name="Pack the line" implementation="registered:chaos">
      <bpmn:extensionElements>
        <q:retry maxAttempts="3" initialDelay="PT1H"/>
        <q:io inputPath="$.item"/>
      </bpmn:extensionElements>
      <bpmn:multiInstanceLoopCharacteristics isSequential="true">
        <bpmn:extensionElements>
          <q:multiInstance collection="items" element="item"/>
        </bpmn:extensionElements>
      </bpmn:multiInstanceLoopCharacteristics>
    </bpmn:serviceTask>
    <bpmn:endEvent id="end"/>
    <bpmn:sequenceFlow id="f0" sourceRef="start" targetRef="each"/>
    <bpmn:sequenceFlow id="f1" sourceRef="each" targetRef="end"/>
  </bpmn:process>
</bpmn:definitions>"#
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_instance_shows_each_item_and_names_the_item_of_each_attempt() {
    let Some(b) = Browser::start().await else {
        return;
    };
    let srv = server::Server::start().await;
    let api = srv.tenant("acme", json!({})).await;
    deploy(&api, &each_item("pack"), &["chaos"]).await;
    let id = start(
        &api,
        "pack",
        json!({"items": [{"do": "echo"}, {"do": "fail", "until": 2, "code": "LINE.BUSY"}, {"do": "echo"}]}),
    )
    .await;
    // Item 1 failed its first attempt and waits out its backoff.
    let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(v["state"], "WAITING", "{v}");
    let items = v["items"]
        .as_array()
        .unwrap_or_else(|| panic!("items: {v}"));
    let states: Vec<(u64, &str)> = items
        .iter()
        .map(|i| (i["index"].as_u64().unwrap(), i["state"].as_str().unwrap()))
        .collect();
    assert_eq!(
        states,
        vec![(0, "ended"), (1, "waiting"), (2, "pending")],
        "{v}"
    );
    let (_, attempts) = api.get(&format!("/v1/instances/{id}/attempts")).await;
    let failed = attempts["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .find(|a| a["outcome"] == "failed")
        .unwrap_or_else(|| panic!("{attempts}"))
        .clone();
    assert!(
        items[1]["tokens"]
            .as_array()
            .unwrap()
            .contains(&failed["token"]),
        "the failed attempt ran in item 1: {v} {attempts}"
    );
    assert_eq!(
        failed["item"],
        json!({"node": items[1]["node"], "index": 1}),
        "and names it: {v} {attempts}"
    );

    sign_in(&b, &srv, api.token.as_deref().unwrap()).await;
    b.wait_css("#deployments").await;
    b.goto(&format!("{}/ui/#/instances/{id}", srv.url)).await;
    b.wait_css("#items-table").await;
    let rows = b
        .js(
            "return [...document.querySelectorAll('#items-table tbody tr')].map(r => [r.cells[1].textContent, r.cells[2].textContent]);",
            json!([]),
        )
        .await;
    assert_eq!(
        rows,
        json!([["#0", "ended"], ["#1", "waiting"], ["#2", "pending"]])
    );
    let item1 = b.text("#items-table tr[data-index=\"1\"]").await;
    assert!(item1.contains("#1 failed"), "its attempt: {item1}");
    let colour = b
        .js(
            "return getComputedStyle(document.querySelector('#items-table tr[data-index=\"1\"] .item-state')).color;",
            json!([]),
        )
        .await;
    assert_ne!(colour, json!("rgb(0, 0, 0)"), "a waiting item stands out");
    // The attempts table names the item of the failed attempt.
    b.wait_css("#attempts-table tr[data-outcome=\"failed\"] .item")
        .await;
    let named = b
        .text("#attempts-table tr[data-outcome=\"failed\"] .item")
        .await;
    assert!(named.ends_with("#1"), "{named}");
    assert!(!named.contains("#instance"), "no internal id: {named}");
    // The diagram's multi-instance body: one badge of its items (what
    // ended of how many, the rest in its tooltip), and the activity's shape
    // marked running while its items run.
    b.wait_css(".overlay.items").await;
    let badge = b
        .js(
            "const o = document.querySelector('.overlay.items'); \
             return [o.textContent, o.title, o.dataset.node, document.querySelectorAll('.overlay.items').length];",
            json!([]),
        )
        .await;
    assert_eq!(badge[0], json!("1/3 items"), "{badge}");
    assert_eq!(
        badge[1],
        json!("1 of 3 items ended; 1 waiting, 1 pending"),
        "{badge}"
    );
    assert!(badge[2].as_str().unwrap().starts_with("each"), "{badge}");
    assert_eq!(badge[3], json!(1), "one badge per shape: {badge}");
    let marked = |cls: &str| {
        format!("document.querySelector('[data-element-id=\"each\"]')?.classList.contains('{cls}')")
    };
    b.wait_for("the body's marker", &marked("sutra-running"), json!(null))
        .await;
    b.screenshot(&screenshots().join("instance-items.png"))
        .await;
    // Its retry an hour later: item 1 ends, item 2 runs, the fan-out ends
    // and with it what the snapshot holds per item.
    srv.advance("PT1H").await;
    let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(v["state"], "COMPLETED", "{v}");
    assert!(v.get("items").is_none(), "{v}");
    // The page follows: the body succeeded, no items badge is left.
    b.wait_for(
        "the body succeeded on the diagram",
        &format!(
            "{} && !document.querySelector('.overlay.items')",
            marked("sutra-succeeded")
        ),
        json!(null),
    )
    .await;
    // Each attempt kept the item it ran in (migration 0025): the API names
    // it after the fan-out ended, and told the two items apart.
    let (_, attempts) = api.get(&format!("/v1/instances/{id}/attempts")).await;
    let kept: Vec<(Value, Value, String)> = attempts["attempts"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| {
            let outcome = a["outcome"].as_str().unwrap().to_string();
            (
                a["item"]["node"].clone(),
                a["item"]["index"].clone(),
                outcome,
            )
        })
        .collect();
    let fan = json!("each#body");
    assert_eq!(
        kept,
        vec![
            (fan.clone(), json!(0), "completed".to_string()),
            (fan.clone(), json!(1), "failed".to_string()),
            (fan.clone(), json!(1), "completed".to_string()),
            (fan.clone(), json!(2), "completed".to_string()),
        ],
        "{attempts}"
    );
    let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
    assert_eq!(
        v["attempts"][1]["item"],
        json!({"node": "each#body", "index": 1}),
        "{v}"
    );
    // The page still shows the items, rebuilt from their attempts, each
    // ended, with the attempts it ran; the failed attempt still names #1.
    let rows = b
        .wait_for(
            "the ended items, from their attempts",
            "(() => { const rows = [...document.querySelectorAll('#items-table tbody tr')]\
               .map(r => [r.cells[1].textContent, r.cells[2].textContent]); \
               return JSON.stringify(rows) === JSON.stringify([['#0', 'ended'], ['#1', 'ended'], ['#2', 'ended']]) && rows; })()",
            json!(null),
        )
        .await;
    assert_eq!(
        rows,
        json!([["#0", "ended"], ["#1", "ended"], ["#2", "ended"]])
    );
    let item1 = b.text("#items-table tr[data-index=\"1\"]").await;
    assert!(
        item1.contains("#1 failed") && item1.contains("#2 completed"),
        "its attempts: {item1}"
    );
    let item0 = b.text("#items-table tr[data-index=\"0\"]").await;
    assert!(
        item0.contains("#1 completed") && !item0.contains("failed"),
        "its attempt: {item0}"
    );
    let note = b.text("#items-note").await;
    assert!(
        note.contains("has ended"),
        "the note says what the table shows: {note}"
    );
    let named = b
        .text("#attempts-table tr[data-outcome=\"failed\"] .item")
        .await;
    assert!(named.ends_with("#1"), "{named}");
    assert!(
        !named.contains("#body") && !named.contains("#instance"),
        "no internal id: {named}"
    );
    let by_item = b
        .js(
            "return [...document.querySelectorAll('#attempts-table tbody tr')].map(r => r.querySelector('.item')?.dataset.index ?? null);",
            json!([]),
        )
        .await;
    assert_eq!(
        by_item,
        json!(["0", "1", "1", "2"]),
        "every attempt names its item"
    );
    b.screenshot(&screenshots().join("instance-items-ended.png"))
        .await;
    no_csp_violations(&b).await;
}

/// The instance view's children on both backends (the id range is read
/// under PostgreSQL's collation too): each parent lists its own child, by
/// the call that started it, never another instance's; a child lists its
/// parent and no children.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_instance_view_lists_the_children_its_calls_started_on_both_backends() {
    for db in [server::Db::Sqlite, server::Db::Postgres] {
        let Some(srv) = server::Server::start_on(db, &[]).await else {
            continue;
        };
        let api = srv.tenant("acme", json!({})).await;
        deploy(&api, &calls_a_child("order"), &["chaos"]).await;
        let one = start(&api, "order", json!({"do": "echo"})).await;
        let two = start(&api, "order", json!({"do": "echo"})).await;
        for (id, other) in [(&one, &two), (&two, &one)] {
            let (_, v) = api.get(&format!("/v1/instances/{id}")).await;
            let kids = v["children"]
                .as_array()
                .unwrap_or_else(|| panic!("{db:?}: {v}"));
            assert_eq!(kids.len(), 1, "{db:?}: {v}");
            let child = kids[0]["instance"].as_str().unwrap();
            assert!(child.starts_with(&format!("{id}.")), "{db:?}: {v}");
            assert!(!child.starts_with(other.as_str()), "{db:?}: {v}");
            assert_eq!(kids[0]["node"], "Call_1x9");
            // A child has no children of its own here, and lists its parent.
            let (_, c) = api.get(&format!("/v1/instances/{child}")).await;
            assert_eq!(c["parent"], id.as_str(), "{db:?}: {c}");
            assert!(c.get("children").is_none(), "{db:?}: {c}");
        }
    }
}
