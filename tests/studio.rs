//! Studio in a real browser: headless Chromium, driven through chromedriver, works
//! the page of `cargo run --example studio -- serve` over a SQLite file. It starts
//! an expense run with the input form, sees it wait, sends a decision the workflow
//! refuses and sees why, sends one it takes, and sees the run complete on the
//! diagram; it reads a checkpoint, finds the run in the filtered list, and follows
//! the weather agent live as its model writes; and it follows a run that another
//! process (the command line's `signal`) drives on the same file. Screenshots are saved under
//! `target/tmp/studio/` for review.
//!
//! It needs Debian's `chromium` and `chromium-driver` (`.ci/run` installs them), or
//! `LOOPSTACK_CHROMIUM` and `LOOPSTACK_CHROMEDRIVER` naming others. Without them it
//! is skipped, saying so and how to install them, so `cargo test --workspace` passes
//! on a fresh machine, and `LOOPSTACK_SKIP_BROWSER_TESTS=1` skips it there too; where
//! `CI` is set it never skips: without the browser, or told to skip, it fails, saying
//! why.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use fantoccini::{Client, Locator};
use serde_json::{Value, json};

mod common;

use common::browser::*;

/// A child process killed when the test ends, however it ends.
struct Process(Child);

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `studio serve` on a free port (with `args` after `serve`); returns the
/// process and Studio's address.
fn serve(db: &Path, args: &[&str]) -> (Process, String) {
    let mut child = Command::new(common::example("studio"))
        .arg("--db")
        .arg(db)
        .args(["serve", "--port", "0"])
        .args(args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the studio example starts");
    let stderr = child.stderr.take().unwrap();
    let process = Process(child);
    // What it says goes to this test's output; the address comes back here.
    let (address_tx, address_rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if let Some(rest) = line.strip_prefix("Studio on ") {
                let _ = address_tx.send(rest.split_whitespace().next().unwrap_or_default().to_owned());
            }
            eprintln!("serve: {line}");
        }
    });
    let address = address_rx.recv_timeout(PATIENCE).expect("serve prints its address");
    (process, address)
}

/// A `studio serve` over a new SQLite file in `target/tmp/<name>/`, and a browser
/// session on it; `None` when told to skip browser tests.
struct Studio {
    client: Client,
    base: String,
    dir: PathBuf,
    // Dropped after the client: the browser, then the server.
    _browser: Browser,
    _serve: Process,
}

impl Studio {
    async fn start(name: &str, args: &[&str]) -> Option<Self> {
        let (chromium, driver) = browser()?;
        let dir = PathBuf::from(env!("CARGO_TARGET_TMPDIR")).join(name);
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let (serve, base) = serve(&dir.join("studio.db"), args);
        let (browser, client) = session(&chromium, &driver, &dir.join("profile")).await;
        Some(Self { client, base, dir, _browser: browser, _serve: serve })
    }

    /// Ends the browser session (the browser and server go when it drops).
    async fn close(self) {
        self.client.close().await.unwrap();
    }
}

/// A run as the API reads it, fetched by the page.
async fn api_run(client: &Client, run_id: &str) -> Value {
    let script = format!("return fetch('/api/runs/{run_id}').then((r) => r.json());");
    client.execute(&script, vec![]).await.unwrap()
}

/// Starts an expense report from the input form its JSON Schema made.
async fn start_expense(client: &Client, base: &str, employee: &str, amount: &str, purpose: &str) {
    client.goto(&format!("{base}#/start/expense")).await.unwrap();
    fill(client, "form[data-form=input] input[name=employee]", employee).await;
    fill(client, "form[data-form=input] input[name=amount]", amount).await;
    fill(client, "form[data-form=input] input[name=purpose]", purpose).await;
    click(client, "form[data-form=input] button[type=submit]").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_starts_a_run_answers_its_wait_through_the_form_and_follows_it_to_the_end() {
    let Some(studio) = Studio::start("studio", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());

    // An expense report, started from the input form.
    start_expense(client, base, "Linus", "42.5", "Taxi to the office").await;

    // Its page: waiting at `submitted` for a decision, on the diagram too.
    until(client, "the run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    until(client, "the live stream", "document.querySelector('.live-activity[data-following=true]')").await;
    until(client, "the run's version", "document.querySelector('.facts dd.version')?.textContent === '1'").await;
    let run_id: Value =
        client.execute("return document.querySelector('code.run-id').textContent;", vec![]).await.unwrap();
    let run_id = run_id.as_str().unwrap().to_owned();
    assert!(client.find(Locator::Css(".diagram .node.current[data-place=submitted]")).await.is_ok());
    assert!(client.find(Locator::Css(".diagram .edge.taken[data-transition=submit]")).await.is_ok());
    assert!(client.find(Locator::Css(".diagram .edge.open[data-transition=decide]")).await.is_ok());
    assert!(client.find(Locator::Css(".signal-card[data-signal=revise]")).await.is_ok());
    screenshot(client, dir, "1-waiting.png").await;

    // A decision the workflow refuses: the form says why and the run still waits.
    let decide = ".signal-card[data-signal=decide]";
    fill(client, &format!("{decide} input[name=manager]"), "   ").await;
    click(client, &format!("{decide} button[type=submit]")).await;
    until(
        client,
        "why the decision was refused",
        &format!("document.querySelector('{decide} .form-error').textContent.includes(\"manager's name\")"),
    )
    .await;
    let run = api_run(client, &run_id).await;
    assert_eq!(run["status"], "waiting", "{run}");
    assert_eq!(run["signals"][0]["status"]["status"], "rejected", "{run}");

    // The page draws itself again whenever the run moves: the field a person is
    // typing in keeps the focus. A refused decision sent around the page moves it.
    click(client, &format!("{decide} input[name=manager]")).await;
    let script = format!(
        "return fetch('/api/runs/{run_id}/signals/decide', {{ method: 'POST', \
         headers: {{ 'Content-Type': 'application/json' }}, \
         body: JSON.stringify({{ manager: '', approve: true }}) }}).then((r) => r.status);"
    );
    let status: Value = client.execute(&script, vec![]).await.unwrap();
    assert_ne!(status, 200, "an empty manager was taken");
    until(
        client,
        "the page drawn again after the second refusal",
        "document.querySelector('button[data-tab=signals]').textContent === 'Signals (2)'",
    )
    .await;
    let kept: Value = client
        .execute(&format!("return document.activeElement.matches('{decide} input[name=manager]');"), vec![])
        .await
        .unwrap();
    assert_eq!(kept, true, "the redraw took the focus from the field being typed in");

    // One it takes: the run moves on to its end while the page follows it.
    fill(client, &format!("{decide} input[name=manager]"), "Grace").await;
    click(client, &format!("{decide} input[name=approve]")).await;
    fill(client, &format!("{decide} input[name=comment]"), "Receipt attached").await;
    click(client, &format!("{decide} button[type=submit]")).await;
    until(client, "the run completed", "document.querySelector('.facts [data-status=completed]')").await;
    until(client, "the end on the diagram", "document.querySelector('.diagram .node.current[data-place=end]')").await;
    until(
        client,
        "the live events of the drive",
        "document.querySelector('.live-activity').textContent.includes('completed')",
    )
    .await;
    for transition in ["submit", "decide", "notify"] {
        let css = format!(".diagram .edge.taken[data-transition={transition}]");
        assert!(client.find(Locator::Css(&css)).await.is_ok(), "{transition} is not marked taken");
    }
    let run = api_run(client, &run_id).await;
    assert_eq!(run["state"]["decision"], "approved by Grace: Receipt attached", "{run}");
    screenshot(client, dir, "2-completed.png").await;

    // Its document and the state at its first checkpoint.
    click(client, "button[data-tab=documents]").await;
    element(client, ".document[data-doc='expense_report:report']").await;
    click(client, "button[data-tab=history]").await;
    click(client, "tr[data-step='1']").await;
    until(client, "the first checkpoint", "document.querySelector('.checkpoint h3[data-step=\"1\"]')").await;
    let first: Value =
        client.execute("return document.querySelector('.checkpoint').textContent;", vec![]).await.unwrap();
    assert!(first.as_str().unwrap().contains("Linus") && !first.as_str().unwrap().contains("approved"), "{first}");
    click(client, "tr[data-step='2']").await;
    until(client, "the decision's checkpoint", "document.querySelector('.checkpoint h3[data-step=\"2\"]')").await;
    until(
        client,
        "the decision in it",
        "document.querySelector('.checkpoint').textContent.includes('approved by Grace')",
    )
    .await;

    // The runs list, filtered, has it.
    client.goto(&format!("{base}#/?workflow=expense&status=completed")).await.unwrap();
    element(client, &format!("tr[data-run='{run_id}']")).await;
    until(
        client,
        "only completed expense runs",
        "[...document.querySelectorAll('tr[data-status]')].every((r) => r.dataset.status === 'completed' && r.children[1].textContent === 'expense')",
    )
    .await;
    screenshot(client, dir, "3-runs.png").await;

    // The weather agent, followed live: the model's words stream in, then the
    // conversation and its cost.
    client.goto(&format!("{base}#/start/agent")).await.unwrap();
    fill(client, "form[data-form=input] textarea[data-path='']", "What is the weather in Oslo?").await;
    click(client, "form[data-form=input] button[type=submit]").await;
    until(client, "the agent's answer", "document.querySelector('.facts [data-status=completed]')").await;
    until(
        client,
        "the answer in a bubble",
        "[...document.querySelectorAll('.bubble.assistant:not(.streaming) .text')].some((t) => t.textContent.includes('Oslo: mostly sunny'))",
    )
    .await;
    until(
        client,
        "streamed text",
        "document.querySelector('.live-activity').textContent.includes('the model is writing')",
    )
    .await;
    until(
        client,
        "streamed reasoning",
        "document.querySelector('.live-activity').textContent.includes('the model is reasoning')",
    )
    .await;
    until(
        client,
        "the turn's reasoning, folded under it",
        "[...document.querySelectorAll('.bubble.assistant:not(.streaming) details.reasoning:not([open])')].some((d) => d.textContent.includes('The user asks about Oslo; get_weather knows its weather.'))",
    )
    .await;
    until(
        client,
        "a tool call forming as the model writes it",
        "document.querySelector('.live-activity').textContent.includes('the model is calling get_weather')",
    )
    .await;
    element(client, ".bubble.tools .tool-result").await;
    until(
        client,
        "the cost",
        "document.querySelector('.cost') && document.querySelector('.cost').textContent.includes('$')",
    )
    .await;
    screenshot(client, dir, "4-agent.png").await;

    // A tool that returns an image (a chart): the conversation shows it, from the
    // run's image document, as a picture the browser decoded.
    client.goto(&format!("{base}#/start/agent")).await.unwrap();
    fill(client, "form[data-form=input] textarea[data-path='']", "Draw a forecast chart of the week in Oslo").await;
    click(client, "form[data-form=input] button[type=submit]").await;
    until(client, "the chart run's answer", "document.querySelector('.facts [data-status=completed]')").await;
    until(
        client,
        "the chart, decoded, in the tool results",
        "[...document.querySelectorAll('.bubble.tools figure.image img')].some((i) => i.complete && i.naturalWidth === 140 && i.naturalHeight === 70 && i.src.startsWith('data:image/png;base64,'))",
    )
    .await;
    let caption: Value = client
        .execute("return document.querySelector('.bubble.tools figure.image figcaption').textContent;", vec![])
        .await
        .unwrap();
    assert!(caption.as_str().unwrap().contains("forecast_chart"), "{caption}");
    screenshot(client, dir, "5-image.png").await;

    // A report the workflow refuses at its first step: the run fails, with why.
    start_expense(client, base, "Ada", "0", "Nothing").await;
    until(client, "the run failed", "document.querySelector('.facts [data-status=failed]')").await;
    until(
        client,
        "why it failed",
        "document.querySelector('.error-box').textContent.includes('the amount must be above 0')",
    )
    .await;

    // Cancelled from its page, then retried: it waits again.
    start_expense(client, base, "Ken", "12", "Lunch").await;
    until(client, "the run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    click(client, "button[data-action=cancel]").await;
    client.accept_alert().await.unwrap();
    until(client, "the run cancelled", "document.querySelector('.facts [data-status=cancelled]')").await;
    click(client, "button[data-action=retry]").await;
    until(client, "the retried run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    until(client, "its form again", "document.querySelector('.signal-card[data-signal=decide]')").await;

    studio.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn studio_follows_a_run_that_another_process_drives() {
    let Some(studio) = Studio::start("studio-other-process", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());
    start_expense(client, base, "Edsger", "17", "Printer paper").await;
    until(client, "the run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    until(client, "the live stream", "document.querySelector('.live-activity[data-following=true]')").await;
    let run_id: Value =
        client.execute("return document.querySelector('code.run-id').textContent;", vec![]).await.unwrap();
    let run_id = run_id.as_str().unwrap().to_owned();

    // The page's stream counts as a listener in the store, so the other process
    // publishes what it drives.
    let db = dir.join("studio.db");
    let store = loopstack_store::SqliteStore::open(&db).await.unwrap();
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !loopstack::Store::has_event_listeners(&store, loopstack::Timestamp::now()).await.unwrap() {
        assert!(tokio::time::Instant::now() < deadline, "the page's stream never listened");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }

    // Another process decides, and drives the run to its end.
    let decision = json!({ "manager": "Grace", "approve": true, "comment": "From the command line" }).to_string();
    let signalled = Command::new(common::example("studio"))
        .arg("--db")
        .arg(&db)
        .args(["signal", &run_id, "decide", &decision])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(signalled.success());

    // The page saw its transitions live, through the store's event log: only events
    // draw these lines (a reread of the run does not).
    for transition in ["decide", "notify"] {
        until(
            client,
            &format!("the other process's {transition} live"),
            &format!("document.querySelector('.live-activity').textContent.includes('\\u25b6 {transition}:')"),
        )
        .await;
    }
    until(client, "the run completed", "document.querySelector('.facts [data-status=completed]')").await;
    screenshot(client, dir, "other-process.png").await;
    studio.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_agents_waiting_calls_show_their_tool_and_arguments_and_are_approved_and_denied_with_buttons() {
    let Some(studio) = Studio::start("studio-approvals", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());

    client.goto(&format!("{base}#/start/helpdesk")).await.unwrap();
    fill(client, "form[data-form=input] textarea[data-path='']", "Reset the passwords of ada and bob").await;
    click(client, "form[data-form=input] button[type=submit]").await;
    until(client, "the run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    until(client, "two calls to decide", "document.querySelectorAll('.signal-card.approval').length === 2").await;
    let run_id: Value =
        client.execute("return document.querySelector('code.run-id').textContent;", vec![]).await.unwrap();
    let run_id = run_id.as_str().unwrap().to_owned();

    // Each card names its tool and shows its arguments; the decisions' raw signal
    // form, which would need a call id typed in, is not offered.
    let cards: Value = client
        .execute(
            "return [...document.querySelectorAll('.signal-card.approval')].map((c) => [c.dataset.callId,              c.querySelector('.tool-name').textContent, JSON.parse(c.querySelector('pre.arguments').textContent)]);",
            vec![],
        )
        .await
        .unwrap();
    let run = api_run(client, &run_id).await;
    let pending = run["pending_calls"].as_array().unwrap();
    let expected: Vec<Value> = pending.iter().map(|c| json!([c["call_id"], c["name"], c["arguments"]])).collect();
    assert_eq!(cards, Value::Array(expected), "{run}");
    assert_eq!(pending[0]["arguments"], json!({"user": "ada"}));
    assert!(client.find(Locator::Css(".signal-card[data-signal=decide_tools]")).await.is_err());
    let ada = pending[0]["call_id"].as_str().unwrap().to_owned();
    let bob = pending[1]["call_id"].as_str().unwrap().to_owned();
    screenshot(client, dir, "approvals-1-waiting.png").await;

    // Deny without a reason: the page asks for one and sends nothing.
    click(client, &format!(".approval[data-call-id='{bob}'] button[data-decide=deny]")).await;
    until(client, "the request for a reason", "document.querySelector('.flash.bad').textContent.includes('Say why')")
        .await;
    assert_eq!(api_run(client, &run_id).await["signals"], json!([]));

    // Approve ada's reset: the run still waits, for bob's only.
    click(client, &format!(".approval[data-call-id='{ada}'] button[data-decide=approve]")).await;
    until(
        client,
        "only bob's call left",
        &format!(
            "document.querySelectorAll('.signal-card.approval').length === 1 &&              document.querySelector(\".approval[data-call-id='{bob}']\")"
        ),
    )
    .await;
    let run = api_run(client, &run_id).await;
    assert_eq!((run["status"].as_str(), run["place"].as_str()), (Some("waiting"), Some("awaiting_approval")));

    // Deny bob's, with a reason: the run answers, and the model read the reason.
    fill(client, &format!(".approval[data-call-id='{bob}'] input[data-reason]"), "bob is on leave").await;
    click(client, &format!(".approval[data-call-id='{bob}'] button[data-decide=deny]")).await;
    until(client, "the run completed", "document.querySelector('.facts [data-status=completed]')").await;
    until(
        client,
        "the answer in a bubble",
        "[...document.querySelectorAll('.bubble.assistant .text')].some((t) => t.textContent.includes('the password of ada is reset; denied by the user: bob is on leave'))",
    )
    .await;
    assert!(client.find(Locator::Css(".signal-card.approval")).await.is_err());
    let run = api_run(client, &run_id).await;
    let sent: Vec<&Value> = run["signals"].as_array().unwrap().iter().map(|s| &s["payload"]["decisions"][0]).collect();
    assert_eq!(
        sent,
        [
            &json!({"call_id": ada, "approved": true}),
            &json!({"call_id": bob, "approved": false, "reason": "bob is on leave"})
        ]
    );
    screenshot(client, dir, "approvals-2-completed.png").await;

    // A run of the front desk, handed to the helpdesk: the page says which agent has
    // the conversation, shows the handoff, and names the agent of each answer.
    client.goto(&format!("{base}#/start/frontdesk")).await.unwrap();
    fill(client, "form[data-form=input] textarea[data-path='']", "Reset the password of grace").await;
    click(client, "form[data-form=input] button[type=submit]").await;
    until(client, "the handed run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    until(client, "the agent fact", "document.querySelector('.facts dd.agent')?.textContent === 'helpdesk'").await;
    until(
        client,
        "the handoff in the conversation",
        "document.querySelector(\".bubble[data-agent=frontdesk] .handoff\")?.textContent.includes('hands the conversation to helpdesk')",
    )
    .await;
    until(
        client,
        "the helpdesk's call, under its name",
        "[...document.querySelectorAll('.bubble[data-agent=helpdesk] .tool-title')].some((t) => t.textContent.includes('reset_password'))",
    )
    .await;
    until(client, "one call to decide", "document.querySelectorAll('.signal-card.approval').length === 1").await;
    screenshot(client, dir, "approvals-3-handoff.png").await;
    studio.close().await;
}

/// Starts a run of the refunds agent in a process of its own, which hangs inside
/// its at-most-once refund and is killed there (SIGKILL); then a `resume` takes the
/// run over, and it waits at `awaiting_outcome`. Returns the run's id.
async fn refund_killed_mid_call(db: &Path, order: &str) -> String {
    let mut child = Command::new(common::example("studio"))
        .arg("--db")
        .arg(db)
        .args(["run", "refunds", "--wait", "--input", &format!("\"Refund {order}\"")])
        .env("STUDIO_REFUND_HANGS", "1")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
    let said = lines.find(|l| l.as_ref().is_ok_and(|l| l.starts_with("refunding")));
    assert!(said.is_some(), "the refund never began");
    child.kill().unwrap();
    child.wait().unwrap();

    let store = loopstack_store::SqliteStore::open(db).await.unwrap();
    let query = loopstack::RunQuery::new().workflow("refunds").status(loopstack::RunStatus::Running);
    let runs = loopstack::Store::list_runs(&store, &query).await.unwrap().runs;
    let [run] = runs.as_slice() else { panic!("one refund the killed process held: {runs:?}") };
    let run_id = run.run_id.to_string();
    // Its lease has not run out: a plain resume leaves it alone, and says how to take it over.
    let refused =
        Command::new(common::example("studio")).arg("--db").arg(db).args(["resume", &run_id]).output().unwrap();
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && said.contains("--take-over"), "{said}");
    let resumed = Command::new(common::example("studio"))
        .arg("--db")
        .arg(db)
        .args(["resume", &run_id, "--take-over"])
        .stdout(Stdio::null())
        .status()
        .unwrap();
    assert!(resumed.success());
    let record = loopstack::Store::load_run(&store, run.run_id).await.unwrap();
    assert_eq!(&*record.place, "awaiting_outcome");
    run_id
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_whose_outcome_a_crash_left_unknown_is_answered_with_its_result_or_run_again() {
    let Some(studio) = Studio::start("studio-outcome", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());
    let db = dir.join("studio.db");

    // A person checked: the refund was made. Give its result; the model reads it.
    let run_id = refund_killed_mid_call(&db, "A-17").await;
    client.goto(&format!("{base}#/run/{run_id}")).await.unwrap();
    let card = ".signal-card.approval[data-call-id]";
    until(
        client,
        "the outcome card",
        &format!("document.querySelector('{card} h3')?.textContent.includes('Outcome unknown')"),
    )
    .await;
    until(
        client,
        "the buttons",
        &format!("[...document.querySelectorAll('{card} button')].map((b) => b.textContent).join() === 'Give result,Run again,Deny'"),
    )
    .await;
    screenshot(client, dir, "outcome-1-unknown.png").await;
    // Without a result the page asks for one and sends nothing.
    click(client, &format!("{card} button[data-decide=result]")).await;
    until(
        client,
        "the request for a result",
        "document.querySelector('.flash.bad')?.textContent.includes('Say what the call did')",
    )
    .await;
    assert_eq!(api_run(client, &run_id).await["signals"], json!([]));
    fill(client, &format!("{card} input[data-result]"), "refunded A-17 (checked by ada)").await;
    click(client, &format!("{card} button[data-decide=result]")).await;
    until(client, "the run completed", "document.querySelector('.facts [data-status=completed]')").await;
    until(
        client,
        "the answer from the given result",
        "[...document.querySelectorAll('.bubble.assistant .text')].some((t) => t.textContent.includes('Done: refunded A-17 (checked by ada).'))",
    )
    .await;
    let run = api_run(client, &run_id).await;
    let sent = &run["signals"][0];
    assert_eq!(sent["name"], "resolve_tools", "{run}");
    assert_eq!(sent["payload"]["decisions"][0]["result"], "refunded A-17 (checked by ada)");
    screenshot(client, dir, "outcome-2-answered.png").await;

    // A person checked: no refund was made. Run it again: the server makes it.
    let run_id = refund_killed_mid_call(&db, "B-9").await;
    client.goto(&format!("{base}#/run/{run_id}")).await.unwrap();
    until(
        client,
        "the second outcome card",
        &format!("document.querySelector('{card} pre.arguments')?.textContent.includes('B-9')"),
    )
    .await;
    click(client, &format!("{card} button[data-decide=approve]")).await;
    until(client, "the second run completed", "document.querySelector('.facts [data-status=completed]')").await;
    until(
        client,
        "the answer from the call run again",
        "[...document.querySelectorAll('.bubble.assistant .text')].some((t) => t.textContent.includes('Done: refunded B-9.'))",
    )
    .await;
    let run = api_run(client, &run_id).await;
    let decision = &run["signals"][0]["payload"]["decisions"][0];
    assert_eq!((&decision["approved"], decision.get("result")), (&json!(true), None), "{run}");
    studio.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_token_studio_asks_for_it_and_then_shows_the_runs() {
    let Some(studio) = Studio::start("studio-token", &["--token", "s3cret-t0ken"]).await else { return };
    let (client, base) = (&studio.client, studio.base.as_str());

    client.goto(base).await.unwrap();
    fill(client, ".flash form.token input", "wrong").await;
    click(client, ".flash form.token button").await;
    // A wrong token: asked again, nothing shown.
    until(
        client,
        "the prompt again",
        "document.querySelector('.flash form.token input') && !document.querySelector('table.runs')",
    )
    .await;
    fill(client, ".flash form.token input", "s3cret-t0ken").await;
    click(client, ".flash form.token button").await;
    // The demo runs the example started, read with the token.
    until(client, "the runs", "document.querySelectorAll('table.runs tr[data-run]').length >= 3").await;
    assert!(client.find(Locator::Css(".flash form.token")).await.is_err(), "the prompt stays after the right token");
    studio.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_runs_list_shows_new_runs_as_they_come_and_pages_through_them() {
    let Some(studio) = Studio::start("studio-list", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());

    client.goto(base).await.unwrap();
    until(client, "the demo runs", "document.querySelectorAll('table.runs tr[data-run]').length >= 3").await;
    // Another client starts 21 runs while the list is open: they appear without a
    // reload, the newest first, 20 to a page.
    let script = r#"
        const ids = [];
        for (let i = 0; i < 21; i++) {
            const input = { employee: "E" + i, amount: 10 + i, purpose: "Batch" };
            const r = await fetch("/api/runs", { method: "POST", headers: { "Content-Type": "application/json" },
                                                 body: JSON.stringify({ workflow: "expense", input }) });
            ids.push((await r.json()).run_id);
        }
        return ids;
    "#;
    let ids: Value = client.execute(script, vec![]).await.unwrap();
    let newest = ids.as_array().unwrap().last().unwrap().as_str().unwrap().to_owned();
    until(
        client,
        "the newest run on top",
        &format!("document.querySelector('table.runs tbody tr').dataset.run === '{newest}'"),
    )
    .await;
    until(client, "a full page", "document.querySelectorAll('table.runs tr[data-run]').length === 20").await;
    let first_page: Value = client
        .execute("return [...document.querySelectorAll('table.runs tr[data-run]')].map((r) => r.dataset.run);", vec![])
        .await
        .unwrap();
    click(client, ".pager button[data-page=older]").await;
    until(client, "page 2", "document.querySelector('.page-count').textContent === 'page 2'").await;
    let second_page: Value = client
        .execute("return [...document.querySelectorAll('table.runs tr[data-run]')].map((r) => r.dataset.run);", vec![])
        .await
        .unwrap();
    let second_page = second_page.as_array().unwrap();
    assert!(!second_page.is_empty(), "page 2 is empty");
    assert!(second_page.iter().all(|id| !first_page.as_array().unwrap().contains(id)), "a run on both pages");
    screenshot(client, dir, "runs-page-2.png").await;
    click(client, ".pager button[data-page=newer]").await;
    until(client, "page 1 again", &format!("document.querySelector('.page-count').textContent === 'page 1' && document.querySelector('table.runs tbody tr').dataset.run === '{newest}'")).await;
    studio.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_schedules_page_shows_next_due_times_and_last_runs_and_pauses_resumes_and_deletes() {
    // `--worker`: the server's worker starts the schedules' due times.
    let Some(studio) = Studio::start("studio-schedules", &["--worker"]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());
    client.goto(&format!("{base}#/schedules")).await.unwrap();
    until(
        client,
        "no schedules yet",
        "document.querySelector('table.schedules').textContent.includes('No schedules.')",
    )
    .await;

    // Two schedules, stored through the API as any client would: a daily cron and one every second.
    let script = r#"
        const post = (body) => fetch('/api/schedules', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) }).then((r) => r.status);
        const input = { employee: 'Linus', amount: 42.5, purpose: 'Taxi to the office' };
        return Promise.all([
            post({ id: 'daily-expense', workflow: 'expense', input, cron: '0 7 * * *', timezone: 'Europe/Berlin', overlap: 'queue' }),
            post({ id: 'every-second', workflow: 'expense', input, every: '1s', missed: 'catch_up_once' }),
        ]);
    "#;
    assert_eq!(client.execute(script, vec![]).await.unwrap(), json!([201, 201]));

    // The page shows both (it reads them again every few seconds): the cron one's
    // next due time, and the run the worker started for the other.
    let daily = "tr[data-schedule='daily-expense']";
    let often = "tr[data-schedule='every-second']";
    until(client, "the daily schedule", &format!("document.querySelector(\"{daily}\")")).await;
    let row: Value =
        client.execute(&format!("return document.querySelector(\"{daily}\").textContent;"), vec![]).await.unwrap();
    assert!(row.as_str().unwrap().contains("cron `0 7 * * *` (Europe/Berlin)"), "{row}");
    let overlap: Value = client
        .execute(&format!("return document.querySelector(\"{daily} td.overlap\").textContent;"), vec![])
        .await
        .unwrap();
    assert_eq!(overlap, "queue one", "the schedule's overlap policy");
    let next_due: Value = client
        .execute(
            &format!("return document.querySelector(\"{daily} td.next-due time\").getAttribute('datetime');"),
            vec![],
        )
        .await
        .unwrap();
    assert!(next_due.as_str().unwrap().ends_with(":00:00.000Z"), "{next_due}");
    until(
        client,
        "the last run of the every-second schedule",
        &format!("document.querySelector(\"{often} td.last-run a\") && document.querySelector(\"{often} td.last-run .badge\")"),
    )
    .await;
    screenshot(client, dir, "schedules.png").await;

    // The last run's link opens the run the schedule started, with the schedule's input.
    let last: Value = client
        .execute(&format!("return document.querySelector(\"{often} td.last-run a\").title;"), vec![])
        .await
        .unwrap();
    let last = last.as_str().unwrap().to_owned();
    click(client, &format!("{often} td.last-run a")).await;
    until(
        client,
        "the scheduled run's page",
        &format!("document.querySelector('code.run-id')?.textContent === '{last}'"),
    )
    .await;
    assert_eq!(api_run(client, &last).await["state"]["employee"], "Linus");
    client.goto(&format!("{base}#/schedules")).await.unwrap();
    until(client, "the schedules again", &format!("document.querySelector(\"{daily}\")")).await;

    // Pause and resume with the buttons; delete after the page's confirmation.
    click(client, &format!("{daily} button[data-action=pause]")).await;
    until(
        client,
        "the daily schedule paused",
        &format!("document.querySelector(\"{daily}\").dataset.paused === 'true'"),
    )
    .await;
    click(client, &format!("{daily} button[data-action=resume]")).await;
    until(
        client,
        "the daily schedule resumed",
        &format!("document.querySelector(\"{daily}\").dataset.paused === 'false'"),
    )
    .await;
    client.execute("window.confirm = () => true; return true;", vec![]).await.unwrap();
    click(client, &format!("{often} button[data-action=delete]")).await;
    until(client, "the every-second schedule gone", &format!("!document.querySelector(\"{often}\")")).await;
    let left: Value = client.execute("return fetch('/api/schedules').then((r) => r.json());", vec![]).await.unwrap();
    let ids: Vec<&str> = left["schedules"].as_array().unwrap().iter().map(|s| s["id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["daily-expense"]);
    studio.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_is_forked_from_a_checkpoint_compared_with_its_original_and_evals_are_listed_and_compared() {
    let Some(studio) = Studio::start("studio-forks", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());

    // A helpdesk run waits for approval; fork it from step 0 (as created) under another prompt.
    client.goto(&format!("{base}#/start/helpdesk")).await.unwrap();
    fill(client, "form[data-form=input] textarea[data-path='']", "Reset the password of ada").await;
    click(client, "form[data-form=input] button[type=submit]").await;
    until(client, "the run waiting", "document.querySelector('.facts [data-status=waiting]')").await;
    let source: Value =
        client.execute("return document.querySelector('code.run-id').textContent;", vec![]).await.unwrap();
    let source = source.as_str().unwrap().to_owned();
    click(client, "button[data-tab=history]").await;
    click(client, "button[data-fork='0']").await;
    fill(client, "form.fork-form textarea[name=system]", "be kind").await;
    // A message number without its new text is refused on the page, and nothing is sent.
    fill(client, "form.fork-form input[name=message_index]", "0").await;
    click(client, "form.fork-form button[type=submit]").await;
    until(
        client,
        "the request for the text",
        "document.querySelector('form.fork-form .form-error')?.textContent.includes('its new text')",
    )
    .await;
    fill(client, "form.fork-form textarea[name=message_text]", "Reset the password of bob").await;
    screenshot(client, dir, "forks-1-form.png").await;
    click(client, "form.fork-form button[type=submit]").await;
    until(
        client,
        "the fork's page",
        &format!(
            "document.querySelector('code.run-id') && document.querySelector('code.run-id').textContent !== '{source}'"
        ),
    )
    .await;
    until(
        client,
        "where the fork came from",
        "document.querySelector('.facts dd.fork')?.textContent.includes('at step 0 with: system prompt changed, message 0 edited')",
    )
    .await;
    let fork: Value =
        client.execute("return document.querySelector('code.run-id').textContent;", vec![]).await.unwrap();
    let fork = fork.as_str().unwrap().to_owned();
    let run = api_run(client, &fork).await;
    assert_eq!(run["state"]["fork_settings"]["system"].as_str(), Some("be kind"), "{run}");
    assert_eq!(run["forked_from"], json!({"run_id": source, "step": 0}));
    screenshot(client, dir, "forks-2-fork.png").await;

    // Side by side with the original: both wait at the approval, each with the call its question asks for.
    click(client, ".facts a.compare-link").await;
    until(client, "two columns", "document.querySelectorAll('.compare-side').length === 2").await;
    let sides: Value = client
        .execute(
            "return [...document.querySelectorAll('.compare-side')].map((s) => [s.dataset.run, s.querySelector('[data-status]').dataset.status, s.querySelector('.tool-calls').textContent]);",
            vec![],
        )
        .await
        .unwrap();
    let call = |user: &str| format!(r#"reset_password {{"user":"{user}"}}"#);
    assert_eq!(sides, json!([[source, "waiting", call("ada")], [fork, "waiting", call("bob")]]));
    screenshot(client, dir, "forks-3-compare.png").await;

    // Two evals of the weather agent from the command line, on the same file; the
    // second expects of the Oslo case what the agent says.
    let eval = |dataset: &str| {
        let path = dir.join(format!("{}.jsonl", loopstack::RunId::new()));
        std::fs::write(&path, dataset).unwrap();
        let out = Command::new(common::example("studio"))
            .arg("--db")
            .arg(dir.join("studio.db"))
            .args(["eval", path.to_str().unwrap(), "--agent", "agent", "--json"])
            .output()
            .unwrap();
        let report: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {out:?}"));
        report["id"].as_str().unwrap().to_owned()
    };
    let lisbon = r#"{"id": "lisbon", "input": "What is the weather in Lisbon?", "expected": "forecast"}"#;
    let before = eval(&format!(
        "{lisbon}\n{}\n",
        r#"{"id": "oslo", "input": "What is the weather in Oslo?", "expected": "sunshine"}"#
    ));
    let after = eval(&format!(
        "{lisbon}\n{}\n",
        r#"{"id": "oslo", "input": "What is the weather in Oslo?", "expected": "umbrella"}"#
    ));

    client.goto(&format!("{base}#/evals")).await.unwrap();
    until(client, "two evals", "document.querySelectorAll('tr[data-eval]').length === 2").await;
    let passed: Value = client
        .execute(
            &format!("return ['{before}', '{after}'].map((id) => document.querySelector(`tr[data-eval='${{id}}'] .passed`).textContent);"),
            vec![],
        )
        .await
        .unwrap();
    assert_eq!(passed, json!(["1 / 2", "2 / 2"]));
    screenshot(client, dir, "evals-1-list.png").await;
    click(client, &format!("input[data-pick='{before}']")).await;
    click(client, &format!("input[data-pick='{after}']")).await;
    click(client, "button[data-compare-evals]").await;
    until(client, "the comparison", "document.querySelectorAll('table.eval-compare tr[data-case]').length === 2").await;
    let changes: Value = client
        .execute(
            "return [...document.querySelectorAll('table.eval-compare tr[data-case]')].map((r) => [r.dataset.case, r.dataset.change]);",
            vec![],
        )
        .await
        .unwrap();
    // In the order picked: from the first eval to the second.
    assert_eq!(changes, json!([["lisbon", "same"], ["oslo", "better"]]));
    screenshot(client, dir, "evals-2-compare.png").await;

    // One eval: each case with its outcome, linked to its run.
    client.goto(&format!("{base}#/eval/{before}")).await.unwrap();
    until(client, "the cases", "document.querySelectorAll('table.eval-cases tr[data-case]').length === 2").await;
    let cases: Value = client
        .execute("return [...document.querySelectorAll('table.eval-cases tr[data-case]')].map((r) => [r.dataset.case, r.dataset.passed]);", vec![])
        .await
        .unwrap();
    assert_eq!(cases, json!([["lisbon", "true"], ["oslo", "false"]]));
    click(client, "table.eval-cases tr[data-case=oslo] a").await;
    until(client, "the case's run", "document.querySelector('.facts [data-status=completed]')").await;
    screenshot(client, dir, "evals-3-case-run.png").await;
    studio.close().await;
}

/// A running run shows who holds it; one whose holder's lease ran out shows as
/// stalled, in the list and on its page.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_holder_is_gone_shows_as_stalled_with_its_holder() {
    use loopstack::{Lease, NewRun, Store as _, Timestamp};
    let Some(studio) = Studio::start("studio-stalled", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());
    let store = loopstack::SqliteStore::open(dir.join("studio.db")).await.unwrap();
    let ended = Timestamp::from_millis(Timestamp::now().as_millis() - 60_000);
    let state = serde_json::value::to_raw_value(&serde_json::json!({})).unwrap();
    // Labelled as a protocol labels the runs it starts: the page shows them.
    let labels = [("a2a.context".to_owned(), "ctx-7".to_owned())].into();
    let run = NewRun::new(loopstack::RunId::new(), "expense", "h", state)
        .lease(Lease { owner: "dead-worker".into(), until: ended })
        .labels(labels);
    let run_id = store.create_run(run).await.unwrap().run_id;

    client.goto(base).await.unwrap();
    let badge = format!("document.querySelector('tr[data-run=\"{run_id}\"] .badge')");
    until(client, "the run as stalled", &format!("{badge} && {badge}.textContent === 'stalled'")).await;
    let title: Value = client.execute(&format!("return {badge}.title;"), vec![]).await.unwrap();
    assert_eq!(title.as_str(), Some("the lease of dead-worker ran out"));
    client.goto(&format!("{base}#/run/{run_id}")).await.unwrap();
    until(client, "who held it", "document.querySelector('.facts .holder')?.textContent.includes('dead-worker')").await;
    until(client, "its status as stalled", "document.querySelector('.facts .badge').textContent === 'stalled'").await;
    until(client, "its labels", "document.querySelector('.facts .labels')?.textContent === 'a2a.context=ctx-7'").await;
    screenshot(client, dir, "run-stalled.png").await;

    // A worker takes it over: the page says from whom, and who holds it now.
    let claim = loopstack::Claim::new([loopstack::RunStatus::Running])
        .lease(Lease { owner: "rescuer".into(), until: Timestamp::now() + Duration::from_secs(3600) })
        .only_expired(Timestamp::now());
    store.claim(run_id, &claim).await.unwrap();
    client.refresh().await.unwrap();
    until(
        client,
        "the takeover",
        "document.querySelector('.facts .takeover')?.textContent.includes('by rescuer from dead-worker')",
    )
    .await;
    until(
        client,
        "the new holder, since when",
        "/^rescuer since .+, lease until .+/.test(document.querySelector('.facts .holder')?.textContent ?? '')",
    )
    .await;
    studio.close().await;
}

/// A tool call that asks a person (`ToolOutput::needs_input`): its question and a
/// form made from the answer's schema; the answer runs the call again and the run
/// ends with what the tool made of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_question_a_tool_asks_is_answered_through_its_form() {
    let Some(studio) = Studio::start("studio-question", &[]).await else { return };
    let (client, base, dir) = (&studio.client, studio.base.as_str(), studio.dir.as_path());
    let started = Command::new(common::example("studio"))
        .arg("--db")
        .arg(dir.join("studio.db"))
        .args(["run", "returns", "--wait", "--json", "--input", "\"Return A-17\""])
        .output()
        .unwrap();
    assert!(started.status.success(), "{started:?}");
    let run: Value = serde_json::from_slice(&started.stdout).unwrap();
    let run_id = run["run_id"].as_str().unwrap().to_owned();
    client.goto(&format!("{base}#/run/{run_id}")).await.unwrap();
    until(
        client,
        "the question",
        "document.querySelector('.question .question-text')?.textContent === 'How many items of A-17 come back?'",
    )
    .await;
    screenshot(client, dir, "run-question.png").await;
    fill(client, ".question form input[name=items]", "3").await;
    click(client, ".question form button[type=submit]").await;
    until(client, "the run's end", "document.querySelector('.facts .badge')?.textContent === 'completed'").await;
    let record = api_run(client, &run_id).await;
    assert_eq!(record["status"], "completed", "{record}");
    let answered = record["documents"].to_string();
    assert!(answered.contains("the return of 3 items of A-17 is booked"), "{answered}");
    studio.close().await;
}
